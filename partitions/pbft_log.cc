#include "partitions/pbft_log.h"

#include <algorithm>
#include <utility>

#include "partitions/pbft_certs.h"

namespace partitions {

using ::node::consensus::PreparedCertificate;

PbftLog::PbftLog(const PbftConfig& config) : config_(config) {}

PbftLog::Slot* PbftLog::Find(uint64_t seq) {
  auto it = slots_.find(seq);
  return it == slots_.end() ? nullptr : &it->second;
}

const PbftLog::Slot* PbftLog::Find(uint64_t seq) const {
  auto it = slots_.find(seq);
  return it == slots_.end() ? nullptr : &it->second;
}

bool PbftLog::HasPrePrepare(uint64_t seq) const {
  const Slot* slot = Find(seq);
  return slot != nullptr && slot->pre_prepare.has_value();
}

PbftAdmission PbftLog::AddPrePrepare(const ConsensusMessage& msg, uint64_t view, uint64_t h,
                                     const PbftValidator& validator) {
  const auto& pp = msg.pre_prepare();
  if (msg.sender() != config_.PrimaryOf(view) || pp.proposer() != msg.sender()) {
    return PbftAdmission::kInvalid;
  }
  if (!InWindow(pp.seq(), h)) return PbftAdmission::kOutsideWatermarks;
  if (!validator.ValidBatch(pp)) return PbftAdmission::kInvalid;
  if (const Slot& slot = slots_[pp.seq()]; slot.pre_prepare) {
    return slot.digest == pp.digest() ? PbftAdmission::kDuplicate : PbftAdmission::kConflicting;
  }
  return AcceptPrePrepare(msg);
}

PbftAdmission PbftLog::AcceptPrePrepare(const ConsensusMessage& msg) {
  const auto& pp = msg.pre_prepare();
  Slot& slot = slots_[pp.seq()];
  if (slot.committed && slot.committed_digest != pp.digest()) return PbftAdmission::kConflicting;
  slot.pre_prepare = msg;
  slot.digest = pp.digest();
  return PbftAdmission::kAdded;
}

PbftAdmission PbftLog::AddPrepare(const ConsensusMessage& msg, uint64_t view, uint64_t h) {
  const auto& p = msg.prepare();
  if (msg.sender() == config_.PrimaryOf(view) || p.digest().size() != kTxHashBytes) {
    return PbftAdmission::kInvalid;
  }
  if (!InWindow(p.seq(), h)) return PbftAdmission::kOutsideWatermarks;
  Slot& slot = slots_[p.seq()];
  auto it = slot.prepares.find(msg.sender());
  if (it != slot.prepares.end()) {
    return it->second.prepare().digest() == p.digest() ? PbftAdmission::kDuplicate
                                                       : PbftAdmission::kConflicting;
  }
  slot.prepares.emplace(msg.sender(), msg);
  return PbftAdmission::kAdded;
}

PbftAdmission PbftLog::AddCommit(const ConsensusMessage& msg, uint64_t h) {
  const auto& c = msg.commit();
  if (c.digest().size() != kTxHashBytes) return PbftAdmission::kInvalid;
  if (!InWindow(c.seq(), h)) return PbftAdmission::kOutsideWatermarks;
  Slot& slot = slots_[c.seq()];
  auto it = slot.commits.find(msg.sender());
  if (it != slot.commits.end()) {
    return it->second.commit().digest() == c.digest() ? PbftAdmission::kDuplicate
                                                      : PbftAdmission::kConflicting;
  }
  slot.commits.emplace(msg.sender(), msg);
  return PbftAdmission::kAdded;
}

PreparedCertificate PbftLog::Certificate(const ConsensusMessage& pp,
                                         const std::map<uint32_t, ConsensusMessage>& prepares,
                                         uint32_t primary) const {
  PreparedCertificate cert;
  *cert.mutable_pre_prepare() = pp;
  for (const auto& [sender, p] : prepares) {
    if (sender != primary && p.prepare().digest() == pp.pre_prepare().digest() &&
        static_cast<uint32_t>(cert.prepares_size()) < 2 * config_.f()) {
      *cert.add_prepares() = p;
    }
  }
  return cert;
}

bool PbftLog::Redundant(const ConsensusMessage& msg, uint64_t view) const {
  if (msg.has_prepare()) {
    const auto& p = msg.prepare();
    const Slot* slot = p.view() == view ? Find(p.seq()) : nullptr;
    // `prepared` holds only for the current view (ResetView clears it).
    return slot != nullptr && slot->prepared && slot->sent_commit && slot->digest == p.digest();
  }
  if (msg.has_commit()) {
    const auto& c = msg.commit();
    const Slot* slot = c.view() == view ? Find(c.seq()) : nullptr;
    // Only in the view it committed in: after a view change the slot's commits start empty, and
    // CommitsAbove (evidence that others are ahead) counts the new view's.
    return slot != nullptr && slot->committed && slot->committed_view == view &&
           slot->committed_digest == c.digest();
  }
  return false;
}

PbftLog::Slot* PbftLog::TryPrepare(uint64_t seq, uint64_t view) {
  Slot& slot = slots_[seq];
  if (!slot.pre_prepare || slot.waiting_txs) return nullptr;
  if (!slot.prepared) {
    PreparedCertificate cert =
        Certificate(*slot.pre_prepare, slot.prepares, config_.PrimaryOf(view));
    if (static_cast<uint32_t>(cert.prepares_size()) < 2 * config_.f()) return nullptr;
    slot.prepared = true;
    slot.cert = std::move(cert);
    slot.cert_view = view;
  }
  return &slot;
}

bool PbftLog::TryCommit(uint64_t seq, uint64_t view) {
  Slot& slot = slots_[seq];
  if (!slot.prepared || slot.committed) return false;
  std::vector<ConsensusMessage> cert;
  for (const auto& [sender, c] : slot.commits) {
    if (c.commit().digest() == slot.digest && cert.size() < config_.quorum()) cert.push_back(c);
  }
  if (cert.size() < config_.quorum()) return false;
  slot.committed = true;
  slot.committed_digest = slot.digest;
  const auto& hashes = slot.pre_prepare->pre_prepare().tx_hashes();
  slot.committed_txs.assign(hashes.begin(), hashes.end());
  slot.committed_view = view;
  slot.commit_cert = std::move(cert);
  return true;
}

std::optional<PbftCommit> PbftLog::Decided(uint64_t seq) const {
  const Slot* slot = Find(seq);
  if (slot == nullptr || !slot->committed) return std::nullopt;
  PbftCommit commit;
  commit.seq = seq;
  commit.view = slot->committed_view;
  commit.tx_hashes = slot->committed_txs;
  commit.digest = slot->committed_digest;
  commit.certificate = slot->commit_cert;
  return commit;
}

void PbftLog::ResetView() {
  for (auto it = slots_.begin(); it != slots_.end();) {
    Slot& slot = it->second;
    slot.pre_prepare.reset();
    slot.digest.clear();
    slot.prepares.clear();
    slot.commits.clear();
    slot.waiting_txs = false;
    slot.prepared = false;
    slot.sent_commit = false;
    it = !slot.cert && !slot.committed ? slots_.erase(it) : std::next(it);
  }
}

void PbftLog::DropThrough(uint64_t seq) { slots_.erase(slots_.begin(), slots_.upper_bound(seq)); }

bool PbftLog::HasWorkAbove(uint64_t seq) const {
  for (auto it = slots_.upper_bound(seq); it != slots_.end(); ++it) {
    if (it->second.pre_prepare || it->second.committed) return true;
  }
  return false;
}

bool PbftLog::CommitsAbove(uint64_t seq, size_t senders) const {
  for (auto it = slots_.upper_bound(seq); it != slots_.end(); ++it) {
    if (it->second.commits.size() >= senders) return true;
  }
  return false;
}

std::vector<uint64_t> PbftLog::WaitingForTxs(uint64_t seq) const {
  std::vector<uint64_t> seqs;
  for (auto it = slots_.upper_bound(seq); it != slots_.end(); ++it) {
    if (it->second.waiting_txs) seqs.push_back(it->first);
  }
  return seqs;
}

std::vector<uint64_t> PbftLog::WithPrePrepare() const {
  std::vector<uint64_t> seqs;
  for (const auto& [seq, slot] : slots_) {
    if (slot.pre_prepare) seqs.push_back(seq);
  }
  return seqs;
}

std::vector<ConsensusMessage> PbftLog::OwnMessagesAbove(uint64_t seq) const {
  std::vector<ConsensusMessage> out;
  for (auto it = slots_.upper_bound(seq); it != slots_.end(); ++it) {
    const Slot& slot = it->second;
    if (slot.pre_prepare && slot.pre_prepare->sender() == config_.self) {
      out.push_back(*slot.pre_prepare);
    }
    if (auto p = slot.prepares.find(config_.self); p != slot.prepares.end()) {
      out.push_back(p->second);
    }
    if (auto c = slot.commits.find(config_.self); c != slot.commits.end()) out.push_back(c->second);
  }
  return out;
}

std::vector<PreparedCertificate> PbftLog::CertificatesAbove(uint64_t seq) const {
  std::vector<PreparedCertificate> certs;
  for (auto it = slots_.upper_bound(seq); it != slots_.end(); ++it) {
    if (it->second.cert) certs.push_back(*it->second.cert);
  }
  return certs;
}

uint64_t PbftLog::Restore(const google::protobuf::RepeatedPtrField<ConsensusMessage>& log,
                          uint64_t stable_seq, uint64_t view, bool installed) {
  // Pre-prepares and prepares by (view, seq) give prepared certificates; messages of the
  // installed current view go back into the slots, so nothing signed before is contradicted.
  uint64_t own_max = 0;
  std::map<std::pair<uint64_t, uint64_t>, ConsensusMessage> pps;
  std::map<std::pair<uint64_t, uint64_t>, std::map<uint32_t, ConsensusMessage>> prepares;
  for (const ConsensusMessage& m : log) {
    const uint64_t seq = MessageSeq(m);
    if (seq <= stable_seq) continue;
    const uint64_t v = MessageView(m);
    switch (m.body_case()) {
      case ConsensusMessage::kPrePrepare:
        pps[{v, seq}] = m;
        if (m.sender() == config_.self && v == view) own_max = std::max(own_max, seq);
        break;
      case ConsensusMessage::kPrepare:
        prepares[{v, seq}][m.sender()] = m;
        break;
      case ConsensusMessage::kCommit:
        if (installed && v == view) {
          Slot& slot = slots_[seq];
          slot.commits[m.sender()] = m;
          if (m.sender() == config_.self) slot.sent_commit = true;
        }
        break;
      default:
        break;
    }
  }
  for (auto& [key, pp] : pps) {
    const auto [v, seq] = key;
    Slot& slot = slots_[seq];
    PreparedCertificate cert = Certificate(pp, prepares[key], config_.PrimaryOf(v));
    const bool is_prepared = static_cast<uint32_t>(cert.prepares_size()) >= 2 * config_.f();
    if (is_prepared && (!slot.cert || slot.cert_view <= v)) {
      slot.cert = std::move(cert);
      slot.cert_view = v;
    }
    if (installed && v == view) {
      slot.pre_prepare = pp;
      slot.digest = pp.pre_prepare().digest();
      for (const auto& [sender, p] : prepares[key]) slot.prepares[sender] = p;
    }
  }
  return own_max;
}

}  // namespace partitions
