#include "partitions/pbft_memory_store.h"

#include "partitions/pbft_certs.h"

namespace partitions {

absl::Status InMemoryConsensusStore::PutView(const node::consensus::PersistedView& view) {
  absl::MutexLock lock(&mu_);
  if (fail_writes_) return absl::UnavailableError("in-memory store: writes disabled");
  *state_.mutable_view() = view;
  return absl::OkStatus();
}

absl::Status InMemoryConsensusStore::PutStableCheckpoint(
    const node::consensus::StableCheckpointRecord& record) {
  absl::MutexLock lock(&mu_);
  if (fail_writes_) return absl::UnavailableError("in-memory store: writes disabled");
  *state_.mutable_stable_checkpoint() = record;
  auto* log = state_.mutable_log();
  google::protobuf::RepeatedPtrField<ConsensusMessage> kept;
  for (ConsensusMessage& m : *log) {
    if (MessageSeq(m) > record.seq()) *kept.Add() = std::move(m);
  }
  log->Swap(&kept);
  return absl::OkStatus();
}

absl::Status InMemoryConsensusStore::AppendLog(const std::vector<ConsensusMessage>& messages) {
  absl::MutexLock lock(&mu_);
  if (fail_writes_) return absl::UnavailableError("in-memory store: writes disabled");
  for (const ConsensusMessage& m : messages) {
    if (MessageSeq(m) > state_.stable_checkpoint().seq()) *state_.add_log() = m;
  }
  return absl::OkStatus();
}

absl::StatusOr<node::consensus::PersistedConsensus> InMemoryConsensusStore::Load() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

size_t InMemoryConsensusStore::LogSizeForTest() const {
  absl::MutexLock lock(&mu_);
  return static_cast<size_t>(state_.log_size());
}

void InMemoryConsensusStore::FailWritesForTest(bool fail) {
  absl::MutexLock lock(&mu_);
  fail_writes_ = fail;
}

}  // namespace partitions
