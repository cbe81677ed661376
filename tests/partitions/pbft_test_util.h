// Test harness for PbftReplica unit tests (the signer and the store are tests/mocks' fakes): a
// set-backed pool, a map-backed block source, message builders and action filters.
#ifndef TESTS_PARTITIONS_PBFT_TEST_UTIL_H_
#define TESTS_PARTITIONS_PBFT_TEST_UTIL_H_

#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "partitions/pbft_certs.h"
#include "partitions/pbft_messages.h"
#include "partitions/pbft_replica.h"
#include "tests/mocks/fake_consensus_store.h"
#include "tests/mocks/fake_pbft_crypto.h"

namespace partitions::testing {

class TestPool final : public PbftTxSource {
 public:
  bool HasTx(absl::string_view h, uint64_t) const override {
    ++lookups;
    return have.count(std::string(h)) > 0;
  }
  std::set<std::string> have;
  mutable int lookups = 0;  // HasTx calls
};

class TestBlocks final : public PbftBlockSource {
 public:
  std::optional<node::consensus::CommittedBatch> GetCommitted(uint64_t seq) const override {
    auto it = batches.find(seq);
    if (it == batches.end()) return std::nullopt;
    return it->second;
  }
  std::map<uint64_t, node::consensus::CommittedBatch> batches;
};

inline std::string Tx(int i) {
  return ChainDigest(GenesisDigest(), static_cast<uint64_t>(i), "test-tx");
}

using ::tests::SignedAs;

inline ConsensusMessage MakePrePrepare(uint64_t view, uint64_t seq,
                                       const std::vector<std::string>& txs, uint32_t proposer) {
  ConsensusMessage m;
  auto* pp = m.mutable_pre_prepare();
  pp->set_view(view);
  pp->set_seq(seq);
  for (const auto& h : txs) pp->add_tx_hashes(h);
  pp->set_digest(BatchDigest(txs));
  pp->set_proposer(proposer);
  return SignedAs(proposer, m);
}

inline ConsensusMessage MakePrepare(uint64_t view, uint64_t seq, const std::string& digest,
                                    uint32_t from) {
  ConsensusMessage m;
  m.mutable_prepare()->set_view(view);
  m.mutable_prepare()->set_seq(seq);
  m.mutable_prepare()->set_digest(digest);
  return SignedAs(from, m);
}

inline ConsensusMessage MakeCommit(uint64_t view, uint64_t seq, const std::string& digest,
                                   uint32_t from) {
  ConsensusMessage m;
  m.mutable_commit()->set_view(view);
  m.mutable_commit()->set_seq(seq);
  m.mutable_commit()->set_digest(digest);
  return SignedAs(from, m);
}

// The state root the harness's "executor" reports after a batch: a function of the chain digest,
// so replicas that executed the same batches report the same root.
inline std::string ModelRoot(const std::string& chain_digest) {
  return BatchDigest(std::vector<std::string>{chain_digest});
}

// What checkpoint votes for `chain` (and its model root, unless given) match on.
inline std::string CkptDigest(const std::string& chain, const std::string& root = "") {
  return CheckpointDigest(chain, root.empty() ? ModelRoot(chain) : root);
}

// Replica `from`'s checkpoint vote after `seq` with chain digest `chain` and the model root of
// it, or `root` when given.
inline ConsensusMessage MakeCheckpoint(uint64_t seq, const std::string& chain, uint32_t from,
                                       const std::string& root = "") {
  return SignedAs(from, CheckpointMessage(seq, chain, root.empty() ? ModelRoot(chain) : root));
}

// Messages of one body kind among the broadcasts and sends in `actions`.
inline std::vector<ConsensusMessage> Sent(const std::vector<PbftAction>& actions,
                                          ConsensusMessage::BodyCase body) {
  std::vector<ConsensusMessage> out;
  for (const PbftAction& a : actions) {
    if (const auto* b = std::get_if<PbftBroadcast>(&a); b && b->msg.body_case() == body) {
      out.push_back(b->msg);
    }
    if (const auto* s = std::get_if<PbftSend>(&a); s && s->msg.body_case() == body) {
      out.push_back(s->msg);
    }
  }
  return out;
}

template <typename T>
std::vector<T> ActionsOf(const std::vector<PbftAction>& actions) {
  std::vector<T> out;
  for (const PbftAction& a : actions) {
    if (const auto* t = std::get_if<T>(&a)) out.push_back(*t);
  }
  return out;
}

// Steps `replica` and, as the node's driver does, reports the state root of every commit that
// asks for it (ModelRoot, or `wrong_root` from seq `wrong_from` on, if wrong_from > 0); returns
// all the actions.
inline std::vector<PbftAction> StepAndReport(PbftReplica& replica, const PbftEvent& event,
                                             uint64_t wrong_from = 0,
                                             const std::string& wrong_root = "") {
  std::vector<PbftAction> all = replica.Step(event);
  for (size_t i = 0; i < all.size(); ++i) {
    const auto* c = std::get_if<PbftCommit>(&all[i]);
    if (c == nullptr || !c->report_state_root) continue;
    const std::string root =
        wrong_from != 0 && c->seq >= wrong_from ? wrong_root : ModelRoot(c->chain_digest);
    std::vector<PbftAction> more = replica.Step(PbftExecuted{c->seq, root});
    all.insert(all.end(), std::make_move_iterator(more.begin()),
               std::make_move_iterator(more.end()));
  }
  return all;
}

// One replica with its own world (pool, store, blocks), restartable from the same store.
struct ReplicaHarness {
  explicit ReplicaHarness(uint32_t self, PbftConfig base = {}) : crypto(self) {
    config = base;
    config.self = self;
    Start();
  }
  void Start(PbftReplica::LedgerPosition pos = {}) {
    auto r = PbftReplica::Create(config, {&crypto, &pool, &store, &blocks}, pos);
    replica = std::move(*r);
    replica->Step(PbftStart{});
  }
  std::vector<PbftAction> Deliver(const ConsensusMessage& m) { return Step(PbftMessage{m}); }
  std::vector<PbftAction> Step(const PbftEvent& event) {
    return StepAndReport(*replica, event, wrong_from, wrong_root);
  }
  PbftConfig config;
  tests::FakePbftCrypto crypto;
  TestPool pool;
  tests::FakeConsensusStore store;
  TestBlocks blocks;
  std::unique_ptr<PbftReplica> replica;
  uint64_t wrong_from = 0;  // 0: every reported root is ModelRoot
  std::string wrong_root = std::string(32, 'w');
};

}  // namespace partitions::testing

#endif  // TESTS_PARTITIONS_PBFT_TEST_UTIL_H_
