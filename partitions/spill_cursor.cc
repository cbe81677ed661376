#include "partitions/spill_cursor.h"

#include <algorithm>

namespace partitions {

SpillCursor::SpillCursor(flowctl::SpillFifo* fifo, uint64_t persisted_seq)
    : fifo_(fifo), drained_max_(persisted_seq) {
  fifo_->SetPersistLimit(persisted_seq);
}

void SpillCursor::Drained(uint64_t seq, const std::string& hash) {
  absl::MutexLock lock(&mu_);
  pending_[seq] = false;
  drained_max_ = std::max(drained_max_, seq);
  seq_of_.try_emplace(hash, seq);
}

void SpillCursor::Done(uint64_t seq, const std::string& hash) {
  absl::MutexLock lock(&mu_);
  UnmapLocked(hash, seq);
  DoneLocked(seq);
}

void SpillCursor::Undrained(uint64_t seq, const std::string& hash) {
  absl::MutexLock lock(&mu_);
  UnmapLocked(hash, seq);
  pending_.erase(seq);
}

void SpillCursor::OnCommit(const CommitEvent& event) {
  absl::MutexLock lock(&mu_);
  if (seq_of_.empty()) return;
  for (const TxPtr& tx : event.txs) {
    auto it = seq_of_.find(tx->hash);
    if (it == seq_of_.end()) continue;
    const uint64_t seq = it->second;
    seq_of_.erase(it);
    DoneLocked(seq);
  }
}

void SpillCursor::Dropped(absl::Span<const std::string> hashes) {
  absl::MutexLock lock(&mu_);
  for (const std::string& hash : hashes) {
    auto it = seq_of_.find(hash);
    if (it == seq_of_.end()) continue;
    const uint64_t seq = it->second;
    seq_of_.erase(it);
    DoneLocked(seq);
  }
}

void SpillCursor::UnmapLocked(const std::string& hash, uint64_t seq) {
  auto it = seq_of_.find(hash);
  if (it != seq_of_.end() && it->second == seq) seq_of_.erase(it);
}

void SpillCursor::DoneLocked(uint64_t seq) {
  drained_max_ = std::max(drained_max_, seq);
  if (auto it = pending_.find(seq); it != pending_.end()) it->second = true;
  while (!pending_.empty() && pending_.begin()->second) pending_.erase(pending_.begin());
  fifo_->SetPersistLimit(pending_.empty() ? drained_max_ : pending_.begin()->first - 1);
}

size_t SpillCursor::pending() const {
  absl::MutexLock lock(&mu_);
  return pending_.size();
}

}  // namespace partitions
