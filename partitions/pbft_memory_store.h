// InMemoryConsensusStore: a ConsensusStore kept in memory (tests, the simulator, and nodes run
// without durability). "Durable" here means: survives destroying and re-creating the replica
// that uses it, which is how tests/sim models a crash and restart.
//
// Thread-safe (one mutex), although a replica calls it from one thread.
//
//   InMemoryConsensusStore store;
//   auto replica = PbftReplica::Create(config, {&crypto, &txs, &store, &blocks}, {});
//   store.FailWritesForTest(true);  // every later write fails: the replica halts
#ifndef PARTITIONS_PBFT_MEMORY_STORE_H_
#define PARTITIONS_PBFT_MEMORY_STORE_H_

#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "partitions/pbft_types.h"

namespace partitions {

class InMemoryConsensusStore final : public ConsensusStore {
 public:
  absl::Status PutView(const node::consensus::PersistedView& view) override;
  absl::Status PutStableCheckpoint(const node::consensus::StableCheckpointRecord& record) override;
  absl::Status AppendLog(const std::vector<ConsensusMessage>& messages) override;
  absl::StatusOr<node::consensus::PersistedConsensus> Load() const override;

  size_t LogSizeForTest() const;
  void FailWritesForTest(bool fail);

 private:
  mutable absl::Mutex mu_;
  node::consensus::PersistedConsensus state_ ABSL_GUARDED_BY(mu_);
  bool fail_writes_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_MEMORY_STORE_H_
