#include "partitions/pbft_certs.h"

#include <openssl/evp.h>

#include <algorithm>
#include <map>
#include <set>

namespace partitions {
namespace {

using ::node::consensus::CommittedBatch;
using ::node::consensus::PreparedCertificate;
using ::node::consensus::PrePrepare;

constexpr size_t kSha256Bytes = 32;

// Incremental SHA-256 through EVP (the SHA256_* functions are deprecated in OpenSSL 3).
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t size) { EVP_DigestUpdate(ctx_, data, size); }
  std::string Final() {
    std::string out(kSha256Bytes, '\0');
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_, reinterpret_cast<unsigned char*>(out.data()), &len);
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

template <typename Range>
std::string DigestOf(const Range& hashes) {
  Sha256 sha;
  for (const std::string& h : hashes) sha.Update(h.data(), h.size());
  return sha.Final();
}

}  // namespace

std::string BatchDigest(const std::vector<std::string>& tx_hashes) { return DigestOf(tx_hashes); }

std::string BatchDigest(const google::protobuf::RepeatedPtrField<std::string>& tx_hashes) {
  return DigestOf(tx_hashes);
}

std::string GenesisDigest() { return std::string(kSha256Bytes, '\0'); }

std::string CheckpointDigest(const std::string& chain_digest, const std::string& state_root) {
  static constexpr char kTag[] = "noded/checkpoint/v1";
  Sha256 sha;
  sha.Update(kTag, sizeof(kTag) - 1);
  sha.Update(chain_digest.data(), chain_digest.size());
  sha.Update(state_root.data(), state_root.size());
  return sha.Final();
}

bool WellFormedCheckpoint(const node::consensus::Checkpoint& cp) {
  return cp.state_digest().size() == kSha256Bytes && cp.chain_digest().size() == kSha256Bytes &&
         cp.state_root().size() == kSha256Bytes &&
         cp.state_digest() == CheckpointDigest(cp.chain_digest(), cp.state_root());
}

std::string ChainDigest(const std::string& previous, uint64_t seq,
                        const std::string& batch_digest) {
  unsigned char seq_be[8];
  for (int i = 0; i < 8; ++i) seq_be[i] = static_cast<unsigned char>(seq >> (56 - 8 * i));
  Sha256 sha;
  sha.Update(previous.data(), previous.size());
  sha.Update(seq_be, sizeof(seq_be));
  sha.Update(batch_digest.data(), batch_digest.size());
  return sha.Final();
}

std::string SigningBytes(const ConsensusMessage& msg) {
  // Our messages hold no maps, so plain serialization is deterministic within one build.
  ConsensusMessage copy = msg;
  copy.clear_signature();
  std::string out;
  copy.SerializeToString(&out);
  return out;
}

uint64_t MessageView(const ConsensusMessage& msg) {
  switch (msg.body_case()) {
    case ConsensusMessage::kPrePrepare:
      return msg.pre_prepare().view();
    case ConsensusMessage::kPrepare:
      return msg.prepare().view();
    case ConsensusMessage::kCommit:
      return msg.commit().view();
    default:
      return 0;
  }
}

uint64_t MessageSeq(const ConsensusMessage& msg) {
  switch (msg.body_case()) {
    case ConsensusMessage::kPrePrepare:
      return msg.pre_prepare().seq();
    case ConsensusMessage::kPrepare:
      return msg.prepare().seq();
    case ConsensusMessage::kCommit:
      return msg.commit().seq();
    case ConsensusMessage::kCheckpoint:
      return msg.checkpoint().seq();
    default:
      return 0;
  }
}

PbftValidator::PbftValidator(const PbftConfig& config, const PbftCrypto* crypto)
    : config_(config), crypto_(crypto) {}

bool PbftValidator::ValidBatch(const PrePrepare& pp) const {
  if (static_cast<uint64_t>(pp.tx_hashes_size()) > config_.max_batch_txs) return false;
  for (const std::string& h : pp.tx_hashes()) {
    if (h.size() != kTxHashBytes) return false;
  }
  return pp.digest() == BatchDigest(pp.tx_hashes());
}

bool PbftValidator::ValidCheckpointProof(
    uint64_t seq, const std::string& digest,
    const google::protobuf::RepeatedPtrField<ConsensusMessage>& proof,
    bool allow_old_format) const {
  if (seq == 0) return digest == GenesisDigest() && proof.empty();
  if (seq % config_.checkpoint_interval != 0) return false;
  std::set<uint32_t> senders;
  std::optional<bool> proof_format;
  for (const ConsensusMessage& m : proof) {
    if (!m.has_checkpoint() || m.sender() >= config_.n) return false;
    if (m.checkpoint().seq() != seq || m.checkpoint().state_digest() != digest) return false;
    // A stable checkpoint made before votes carried state roots (its digest was the chain
    // digest) still proves itself: a replica upgraded since then carries it in its view changes
    // until a new one is stable. Only signed old votes make such a proof, and correct replicas
    // sign none any more.
    const bool old_format = m.checkpoint().chain_digest().empty() &&
                            m.checkpoint().state_root().empty() && digest.size() == kTxHashBytes;
    if (!old_format && !WellFormedCheckpoint(m.checkpoint())) return false;
    // One format throughout: the stable record takes the chain digest and root from its first
    // vote, so a faulty signer's old-format vote in front must not blank the root out.
    if (old_format && !allow_old_format) return false;
    if (proof_format.has_value() && *proof_format != old_format) return false;
    proof_format = old_format;
    if (!senders.insert(m.sender()).second) return false;
    if (!crypto_->Verify(m)) return false;
  }
  return senders.size() >= config_.quorum();
}

bool PbftValidator::ValidPreparedCertificate(const PreparedCertificate& cert, uint64_t below_view,
                                             uint64_t h) const {
  const ConsensusMessage& ppm = cert.pre_prepare();
  if (!ppm.has_pre_prepare()) return false;
  const PrePrepare& pp = ppm.pre_prepare();
  const uint32_t primary = config_.PrimaryOf(pp.view());
  if (ppm.sender() != primary || pp.proposer() != primary) return false;
  if (pp.view() >= below_view) return false;
  if (pp.seq() <= h || pp.seq() > h + config_.window) return false;
  if (!ValidBatch(pp) || !crypto_->Verify(ppm)) return false;
  std::set<uint32_t> senders;
  for (const ConsensusMessage& m : cert.prepares()) {
    if (!m.has_prepare() || m.sender() >= config_.n || m.sender() == primary) return false;
    const auto& p = m.prepare();
    if (p.view() != pp.view() || p.seq() != pp.seq() || p.digest() != pp.digest()) return false;
    if (!senders.insert(m.sender()).second) return false;
    if (!crypto_->Verify(m)) return false;
  }
  return senders.size() >= 2 * config_.f();
}

bool PbftValidator::ValidViewChange(const ConsensusMessage& msg) const {
  if (!msg.has_view_change() || msg.sender() >= config_.n) return false;
  const auto& vc = msg.view_change();
  if (vc.new_view() == 0) return false;
  if (!ValidCheckpointProof(vc.stable_seq(), vc.stable_digest(), vc.checkpoint_proof())) {
    return false;
  }
  std::set<uint64_t> seqs;
  for (const PreparedCertificate& cert : vc.prepared()) {
    if (!ValidPreparedCertificate(cert, vc.new_view(), vc.stable_seq())) return false;
    if (!seqs.insert(cert.pre_prepare().pre_prepare().seq()).second) return false;
  }
  return crypto_->Verify(msg);
}

bool PbftValidator::ValidCommittedBatch(const CommittedBatch& batch) const {
  if (static_cast<uint64_t>(batch.tx_hashes_size()) > config_.max_batch_txs) return false;
  for (const std::string& h : batch.tx_hashes()) {
    if (h.size() != kTxHashBytes) return false;
  }
  const std::string digest = BatchDigest(batch.tx_hashes());
  std::set<uint32_t> senders;
  bool first = true;
  uint64_t view = 0;
  for (const ConsensusMessage& m : batch.commit_certificate()) {
    if (!m.has_commit() || m.sender() >= config_.n) return false;
    const auto& c = m.commit();
    if (first) view = c.view();
    first = false;
    if (c.view() != view || c.seq() != batch.seq() || c.digest() != digest) return false;
    if (!senders.insert(m.sender()).second) return false;
    if (!crypto_->Verify(m)) return false;
  }
  return senders.size() >= config_.quorum();
}

std::optional<NewViewPlan> PbftValidator::CheckNewView(const ConsensusMessage& msg) const {
  const node::consensus::NewView& nv = msg.new_view();
  const uint64_t w = nv.view();
  if (w == 0 || msg.sender() != config_.PrimaryOf(w)) return std::nullopt;
  std::set<uint32_t> senders;
  std::vector<const ConsensusMessage*> vcs;
  for (const ConsensusMessage& m : nv.view_changes()) {
    if (m.view_change().new_view() != w || !senders.insert(m.sender()).second ||
        !ValidViewChange(m)) {
      return std::nullopt;
    }
    vcs.push_back(&m);
  }
  if (vcs.size() < config_.quorum()) return std::nullopt;
  NewViewPlan plan = Plan(vcs);
  if (static_cast<size_t>(nv.pre_prepares_size()) != plan.entries.size()) return std::nullopt;
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const ConsensusMessage& ppm = nv.pre_prepares(static_cast<int>(i));
    const PrePrepare& pp = ppm.pre_prepare();
    const NewViewPlan::Entry& e = plan.entries[i];
    const bool same_batch =
        static_cast<size_t>(pp.tx_hashes_size()) == e.tx_hashes.size() &&
        std::equal(e.tx_hashes.begin(), e.tx_hashes.end(), pp.tx_hashes().begin());
    if (!ppm.has_pre_prepare() || ppm.sender() != msg.sender() || pp.proposer() != msg.sender() ||
        pp.view() != w || pp.seq() != e.seq || pp.digest() != e.digest || !same_batch ||
        !crypto_->Verify(ppm)) {
      return std::nullopt;
    }
  }
  return plan;
}

NewViewPlan PbftValidator::Plan(const std::vector<const ConsensusMessage*>& view_changes) const {
  NewViewPlan plan;
  plan.min_digest = GenesisDigest();
  for (const ConsensusMessage* m : view_changes) {
    const auto& vc = m->view_change();
    if (vc.stable_seq() > plan.min_s) {
      plan.min_s = vc.stable_seq();
      plan.min_digest = vc.stable_digest();
      plan.min_proof.assign(vc.checkpoint_proof().begin(), vc.checkpoint_proof().end());
    }
  }
  // For each seq above min_s, the prepared batch of the highest view wins.
  std::map<uint64_t, const PrePrepare*> best;
  for (const ConsensusMessage* m : view_changes) {
    for (const PreparedCertificate& cert : m->view_change().prepared()) {
      const PrePrepare& pp = cert.pre_prepare().pre_prepare();
      if (pp.seq() <= plan.min_s) continue;
      auto it = best.find(pp.seq());
      if (it == best.end() || it->second->view() < pp.view()) best[pp.seq()] = &pp;
    }
  }
  plan.max_s = best.empty() ? plan.min_s : std::max(plan.min_s, best.rbegin()->first);
  const std::string null_digest = BatchDigest(std::vector<std::string>{});
  for (uint64_t s = plan.min_s + 1; s <= plan.max_s; ++s) {
    NewViewPlan::Entry e;
    e.seq = s;
    auto it = best.find(s);
    if (it == best.end()) {
      e.digest = null_digest;
    } else {
      e.digest = it->second->digest();
      e.tx_hashes.assign(it->second->tx_hashes().begin(), it->second->tx_hashes().end());
    }
    plan.entries.push_back(std::move(e));
  }
  return plan;
}

}  // namespace partitions
