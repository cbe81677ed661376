// The simulated world around each replica in tests/sim: a test signer, the ledger and pool that
// survive a crash, and the per-node bookkeeping of the scheduler. Single-threaded.
#ifndef TESTS_SIM_SIM_WORLD_H_
#define TESTS_SIM_SIM_WORLD_H_

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "partitions/pbft_certs.h"
#include "partitions/pbft_replica.h"
#include "tests/mocks/fake_consensus_store.h"
#include "tests/mocks/fake_pbft_crypto.h"

namespace sim {

using ::node::consensus::CommittedBatch;
using partitions::ConsensusMessage;
using partitions::PbftReplica;

// The ledger survives crashes (it is on disk in the node).
class SimLedger final : public partitions::PbftBlockSource {
 public:
  std::optional<CommittedBatch> GetCommitted(uint64_t seq) const override {
    auto it = batches.find(seq);
    if (it == batches.end()) return std::nullopt;
    return it->second;
  }
  std::map<uint64_t, CommittedBatch> batches;
  uint64_t last = 0;
  std::string chain;
  // The model executor's state root: a hash chain of what was executed, so two replicas agree on
  // it exactly when they executed the same batches the same way.
  std::string root = partitions::GenesisDigest();
  // The lowest seq whose state it can serve (0: every one); a snapshot install moves it there.
  uint64_t history_from = 0;
};

class SimPool final : public partitions::PbftTxSource {
 public:
  bool HasTx(absl::string_view h, uint64_t) const override {
    return have.count(std::string(h)) > 0;
  }
  void Add(const std::string& h) {
    if (!have.insert(h).second || committed.count(h) > 0) return;
    fifo.emplace(next_no, h);
    no_of[h] = next_no++;
  }
  void Commit(const std::string& h) {
    committed.insert(h);
    auto it = no_of.find(h);
    if (it != no_of.end()) {
      fifo.erase(it->second);
      no_of.erase(it);
    }
  }
  std::set<std::string> have;
  std::set<std::string> committed;
  std::map<uint64_t, std::string> fifo;  // pending, in arrival order
  std::map<std::string, uint64_t> no_of;
  uint64_t next_no = 0;
};

struct Node {
  explicit Node(uint32_t i) : id(i), crypto(i) {}
  uint32_t id;
  bool byz_primary = false;
  bool byz_garbage = false;
  // kDiverge: from this seq on its executor computes another state (a planted nondeterminism);
  // 0: never. It orders honestly, so it is checked for agreement, and must end DIVERGED.
  uint64_t diverge_from = 0;
  bool up = true;
  uint64_t incarnation = 0;
  // Signs only as itself: a Byzantine node cannot forge another replica's messages.
  tests::FakePbftCrypto crypto;
  tests::FakeConsensusStore store;
  SimLedger ledger;
  SimPool pool;
  std::unique_ptr<PbftReplica> replica;
  uint64_t timer_gen[3] = {0, 0, 0};
  std::set<std::string> proposed;
  uint64_t proposed_view = 0;
  uint64_t reported_pending = ~0ULL;
  bool in_followup = false;
  std::tuple<uint64_t, int, bool> traced{~0ULL, -1, false};  // last state printed by SIM_TRACE
  int group = 0;
  bool isolated = false;      // kIsolate: no messages in or out
  int64_t paused_until = -1;  // kPause: events for this node wait until then
  // Snapshot sync (PbftSnapshotWanted): the one being fetched, and a newer one wanted meanwhile.
  std::optional<partitions::PbftSnapshotWanted> snapshot;
  std::optional<partitions::PbftSnapshotWanted> newest_snapshot;
  bool honest() const { return !byz_primary && !byz_garbage && diverge_from == 0; }
};

}  // namespace sim

#endif  // TESTS_SIM_SIM_WORLD_H_
