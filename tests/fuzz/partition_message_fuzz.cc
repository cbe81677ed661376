// Fuzz target: node.partition.PartitionMessage, what peers send to a partition (proto/partition.
// proto), through the parts of runtime/partition_consensus.cc that need no running node.
//
// Input: byte 0 = sending peer; the rest a PartitionMessage.
//  - consensus: the pure helpers the envelope check and the replica apply first (SigningBytes,
//    MessageView, MessageSeq, PbftValidator's certificate checks with a crypto that accepts
//    every signature, so the structural checks are what is exercised). SigningBytes must ignore
//    the signature field and be deterministic.
//  - txs: HandleTxBatch's steps: DecodeSignedTx, pool lookup, VerifySignature, TxPool::Add as
//    forwarded (or, when bit 0 of byte 0 is set, as fetched: txs this replica asked for, which
//    are admitted past the capacity limits), into a small pool; the pool never exceeds its limits
//    by more than the fetched txs and holds exactly the bytes it accepted.
//    The pool starts with tests::PrefilledTxs() (fuzz_fixtures.h) before each input.
//  - fetch: HandleFetch's bounds: at most kMaxFetch hashes served, replies cut at
//    kFetchReplyBytes; each reply parses back as a TxBatch of pooled transactions.
//  - admission: what HandlePeerMessage does with a cut (refuse above 1,000,000 ppm, else
//    PeerAdmission::Observe) and the fraction a replica of four then applies: always in
//    [floor, own].
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "base/transaction.h"
#include "flowctl/peer_admission.h"
#include "partitions/pbft_certs.h"
#include "partitions/tx_pool.h"
#include "proto/partition.pb.h"
#include "tests/fuzz/fuzz_fixtures.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/mocks/fake_clock.h"
#include "tests/mocks/fake_pbft_crypto.h"

namespace {

// Must match runtime/partition_consensus.cc.
constexpr size_t kMaxFetch = 10'000;
constexpr size_t kFetchReplyBytes = 1 << 20;
constexpr uint32_t kPartition = 1;

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "partition_message_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

void FuzzConsensus(const partitions::ConsensusMessage& cm) {
  const std::string bytes = partitions::SigningBytes(cm);
  Require(bytes == partitions::SigningBytes(cm), "SigningBytes deterministic");
  partitions::ConsensusMessage other = cm;
  other.set_signature(cm.signature() + "x");
  Require(partitions::SigningBytes(other) == bytes, "SigningBytes ignores the signature");
  (void)partitions::MessageView(cm);
  (void)partitions::MessageSeq(cm);

  partitions::PbftConfig config;
  tests::FakePbftCrypto crypto(0, tests::FakePbftCrypto::Trust::kAll, 4);
  partitions::PbftValidator validator(config, &crypto);
  if (cm.has_pre_prepare()) (void)validator.ValidBatch(cm.pre_prepare());
  if (cm.has_view_change()) {
    const bool valid = validator.ValidViewChange(cm);
    const auto& vc = cm.view_change();
    (void)validator.ValidCheckpointProof(vc.stable_seq(), vc.stable_digest(),
                                         vc.checkpoint_proof());
    for (const auto& cert : vc.prepared()) {
      (void)validator.ValidPreparedCertificate(cert, vc.new_view(), vc.stable_seq());
    }
    if (valid) (void)validator.Plan({&cm});
  }
  if (cm.has_new_view()) {
    std::vector<const partitions::ConsensusMessage*> vcs;
    uint64_t view = 0;
    for (const auto& v : cm.new_view().view_changes()) {
      if (!validator.ValidViewChange(v)) continue;
      if (vcs.empty()) view = v.view_change().new_view();
      if (v.view_change().new_view() == view) vcs.push_back(&v);
    }
    if (!vcs.empty()) (void)validator.Plan(vcs);  // REQUIRES valid, same view: met
  }
  if (cm.has_sync_response()) {
    for (const auto& b : cm.sync_response().batches()) (void)validator.ValidCommittedBatch(b);
  }
}

void FuzzTxsAndFetch(const node::partition::PartitionMessage& msg, bool fetched) {
  tests::FakeClock clock;
  partitions::TxPoolLimits limits;
  limits.max_txs = 6;
  limits.max_bytes = 1500;
  limits.max_per_sender = 3;
  limits.max_nonce_gap = 4;
  partitions::TxPool pool(limits, &clock, [](absl::string_view) { return uint64_t{1}; });
  base::TxLimits tx_limits;
  tx_limits.partition = kPartition;

  size_t accepted = 0, fetched_txs = 0, fetched_bytes = 0;
  std::vector<std::string> hashes;
  for (const std::string& bytes : tests::PrefilledTxs()) {
    absl::StatusOr<base::DecodedTx> tx = base::DecodeSignedTx(bytes, tx_limits);
    Require(tx.ok(), "prefilled tx decodes");
    hashes.push_back(tx->hash);
    Require(pool.Add(*std::move(tx), partitions::TxOrigin::kForwarded).ok(), "prefill");
    ++accepted;
  }
  for (const std::string& bytes : msg.txs().signed_txs()) {
    absl::StatusOr<base::DecodedTx> tx = base::DecodeSignedTx(bytes, tx_limits);
    if (!tx.ok()) continue;
    if (pool.Get(tx->hash) != nullptr) continue;
    if (!base::VerifySignature(*tx).ok()) continue;
    const std::string hash = tx->hash;
    const auto origin = fetched ? partitions::TxOrigin::kFetched : partitions::TxOrigin::kForwarded;
    if (pool.Add(*std::move(tx), origin).ok()) {
      ++accepted;
      if (fetched) {
        ++fetched_txs;
        fetched_bytes += bytes.size();
      }
      hashes.push_back(hash);
      partitions::TxPtr got = pool.Get(hash);
      Require(got != nullptr && got->signed_bytes == bytes, "added tx is in the pool as sent");
    }
    const partitions::TxPoolStats s = pool.stats();
    Require(s.txs <= limits.max_txs + fetched_txs && s.bytes <= limits.max_bytes + fetched_bytes,
            "pool within its limits (fetched txs aside)");
  }
  Require(pool.stats().added == accepted, "pool counted what it accepted");

  // HandleFetch against this pool: the fetch names the pooled hashes too when it has none.
  google::protobuf::RepeatedPtrField<std::string> wanted = msg.fetch().tx_hashes();
  if (wanted.empty()) {
    for (const auto& h : hashes) *wanted.Add() = h;
  }
  node::partition::PartitionMessage reply;
  std::vector<std::string> replies;
  size_t bytes = 0, n = 0, served = 0;
  for (const std::string& hash : wanted) {
    if (++n > kMaxFetch) break;
    partitions::TxPtr tx = pool.Get(hash);
    if (tx == nullptr) continue;
    bytes += tx->signed_bytes.size();
    reply.mutable_txs()->add_signed_txs(tx->signed_bytes);
    ++served;
    if (bytes >= kFetchReplyBytes) {
      replies.push_back(reply.SerializeAsString());
      reply.Clear();
      bytes = 0;
    }
  }
  if (reply.has_txs()) replies.push_back(reply.SerializeAsString());
  Require(served <= kMaxFetch, "fetch bounded");
  size_t back = 0;
  for (const std::string& r : replies) {
    node::partition::PartitionMessage parsed;
    Require(parsed.ParseFromString(r) && parsed.has_txs(), "reply parses");
    Require(r.size() <= kFetchReplyBytes + 64 * 1024 + 64, "reply size bounded");
    for (const std::string& t : parsed.txs().signed_txs()) {
      Require(base::DecodeSignedTx(t, tx_limits).ok(), "served tx decodes");
      ++back;
    }
  }
  Require(back == served, "every served tx is in a reply");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tests::QuietProtobufLogs();
  if (size == 0) return 0;
  node::partition::PartitionMessage msg;
  if (!msg.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  switch (msg.body_case()) {
    case node::partition::PartitionMessage::kConsensus:
      FuzzConsensus(msg.consensus());
      break;
    case node::partition::PartitionMessage::kTxs:
    case node::partition::PartitionMessage::kFetch:
      FuzzTxsAndFetch(msg, (data[0] & 1) != 0);
      break;
    case node::partition::PartitionMessage::kAdmission: {
      const std::optional<double> f = flowctl::PeerAdmission::FromPpm(msg.admission().admit_ppm());
      if (!f) break;  // refused as malformed
      flowctl::PeerAdmission peers(4, 0);
      peers.Observe(data[0] % 4, *f, 0);
      peers.Observe((data[0] >> 2) % 4, *f, 0);
      const double own = (data[0] >> 4) / 15.0;
      const double applied = peers.Update(own, 0.05, 1).applied;
      if (applied < 0.05 || applied > std::max(own, 0.05)) {
        fprintf(stderr, "applied %f outside [0.05, %f]\n", applied, own);
        abort();
      }
      break;
    }
    default:
      break;
  }
  return 0;
}
