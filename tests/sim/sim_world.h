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
#include "partitions/pbft_memory_store.h"
#include "partitions/pbft_replica.h"

namespace sim {

using ::node::consensus::CommittedBatch;
using partitions::ConsensusMessage;
using partitions::PbftReplica;

// Keyed MAC stand-in: only the sim's transport and each node's own crypto object ever call it, so
// a Byzantine node can sign only as itself (authentication by construction).
inline std::string Tag(uint32_t signer, const std::string& bytes) {
  uint64_t h = 1469598103934665603ULL ^ (0x9e3779b97f4a7c15ULL * (signer + 1));
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}

class SimCrypto final : public partitions::PbftCrypto {
 public:
  explicit SimCrypto(uint32_t id) : id_(id) {}
  std::string Sign(const ConsensusMessage& msg) override {
    return Tag(id_, partitions::SigningBytes(msg));
  }
  bool Verify(const ConsensusMessage& msg) const override {
    return msg.signature() == Tag(msg.sender(), partitions::SigningBytes(msg));
  }

 private:
  const uint32_t id_;
};

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
};

class SimPool final : public partitions::PbftTxSource {
 public:
  bool HasTx(absl::string_view h) const override { return have.count(std::string(h)) > 0; }
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
  bool up = true;
  uint64_t incarnation = 0;
  SimCrypto crypto;
  partitions::InMemoryConsensusStore store;
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
  bool honest() const { return !byz_primary && !byz_garbage; }
};

}  // namespace sim

#endif  // TESTS_SIM_SIM_WORLD_H_
