#include "partitions/spill_cursor.h"

#include <algorithm>

namespace partitions {

SpillCursor::SpillCursor(flowctl::SpillFifo* fifo, uint64_t persisted_seq)
    : fifo_(fifo), drained_max_(persisted_seq) {
  fifo_->SetPersistLimit(persisted_seq);
}

void SpillCursor::Drained(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  pending_[seq] = false;
  drained_max_ = std::max(drained_max_, seq);
}

void SpillCursor::Done(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  DoneLocked(seq);
}

void SpillCursor::Undrained(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  pending_.erase(seq);
}

void SpillCursor::OnCommit(const CommitEvent& event) {
  absl::MutexLock lock(&mu_);
  for (const TrackedTx& t : event.tracked) {
    if (t.spill_seq > 0) DoneLocked(t.spill_seq);
  }
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
