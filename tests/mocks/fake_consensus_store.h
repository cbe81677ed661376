// FakeConsensusStore: a partitions::ConsensusStore kept in memory, with fault injection, for
// tests, the simulator, fuzzers and benchmarks. "Durable" here means: it survives destroying and
// re-creating the replica that uses it, which is how tests and tests/sim model a crash and
// restart. Its semantics are the RocksDbConsensusStore's (tests/partitions/
// rocksdb_consensus_store_test.cc checks the two against each other): a stable checkpoint drops
// the logged messages at or below its seq, and messages at or below it are not logged.
//
// FailWrites(true) makes every later write fail with UNAVAILABLE, as a failed disk would; reads
// keep working. writes() counts the write calls that succeeded.
//
// Thread-safety: thread-safe (one mutex), although a replica calls it from one thread.
//
//   tests::FakeConsensusStore store;
//   auto replica = partitions::PbftReplica::Create(config, {&crypto, &txs, &store, &blocks}, {});
//   store.FailWrites(true);  // the replica's next persisted send halts it
#ifndef TESTS_MOCKS_FAKE_CONSENSUS_STORE_H_
#define TESTS_MOCKS_FAKE_CONSENSUS_STORE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/status_macros.h"
#include "partitions/pbft_certs.h"
#include "partitions/pbft_types.h"

namespace tests {

class FakeConsensusStore final : public partitions::ConsensusStore {
 public:
  absl::Status PutView(const node::consensus::PersistedView& view) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(StartWriteLocked());
    *state_.mutable_view() = view;
    return absl::OkStatus();
  }

  absl::Status PutStableCheckpoint(const node::consensus::StableCheckpointRecord& record) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(StartWriteLocked());
    *state_.mutable_stable_checkpoint() = record;
    google::protobuf::RepeatedPtrField<partitions::ConsensusMessage> kept;
    for (partitions::ConsensusMessage& m : *state_.mutable_log()) {
      if (partitions::MessageSeq(m) > record.seq()) *kept.Add() = std::move(m);
    }
    state_.mutable_log()->Swap(&kept);
    return absl::OkStatus();
  }

  absl::Status AppendLog(const std::vector<partitions::ConsensusMessage>& messages) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(StartWriteLocked());
    for (const partitions::ConsensusMessage& m : messages) {
      if (partitions::MessageSeq(m) > state_.stable_checkpoint().seq()) *state_.add_log() = m;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<node::consensus::PersistedConsensus> Load() const override {
    absl::MutexLock lock(&mu_);
    return state_;
  }

  void FailWrites(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_writes_ = fail;
  }
  size_t log_size() const {
    absl::MutexLock lock(&mu_);
    return static_cast<size_t>(state_.log_size());
  }
  uint64_t writes() const {
    absl::MutexLock lock(&mu_);
    return writes_;
  }

 private:
  // Refuses the write while writes fail; else counts it (the write that follows cannot fail).
  absl::Status StartWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (fail_writes_) return absl::UnavailableError("fake consensus store: writes fail");
    ++writes_;
    return absl::OkStatus();
  }

  mutable absl::Mutex mu_;
  node::consensus::PersistedConsensus state_ ABSL_GUARDED_BY(mu_);
  bool fail_writes_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tests

#endif  // TESTS_MOCKS_FAKE_CONSENSUS_STORE_H_
