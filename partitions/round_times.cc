#include "partitions/round_times.h"

namespace partitions {

RoundTimes::Stamps& RoundTimes::RoundOfLocked(uint64_t view, uint64_t seq) {
  auto [it, inserted] = open_.try_emplace(seq);
  if (!inserted && it->second.view != view) it->second = Stamps{};
  it->second.view = view;
  if (inserted && open_.size() > kMaxOpenRounds) open_.erase(open_.begin());
  return it->second;
}

void RoundTimes::PrePrepareSeen(uint64_t view, uint64_t seq, int64_t now) {
  absl::MutexLock lock(&mu_);
  Stamps& s = RoundOfLocked(view, seq);
  if (s.seen == 0) s.seen = now;
}

void RoundTimes::Proposed(uint64_t view, uint64_t seq, int64_t now) {
  absl::MutexLock lock(&mu_);
  Stamps& s = RoundOfLocked(view, seq);
  if (s.proposed != 0) return;  // a retransmission
  s.proposed = now;
  if (s.seen != 0) accept_.Record(now - s.seen);
}

void RoundTimes::Prepared(uint64_t view, uint64_t seq, int64_t now) {
  absl::MutexLock lock(&mu_);
  Stamps& s = RoundOfLocked(view, seq);
  if (s.prepared != 0) return;
  s.prepared = now;
  if (s.proposed != 0) prepare_.Record(now - s.proposed);
}

void RoundTimes::Committed(uint64_t seq, int64_t now) {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(seq);
  if (it != open_.end() && it->second.prepared != 0) commit_.Record(now - it->second.prepared);
  open_.erase(open_.begin(), open_.upper_bound(seq));
}

void RoundTimes::Applied(int64_t nanos, int64_t now) {
  absl::MutexLock lock(&mu_);
  apply_.Record(nanos);
  if (last_applied_ != 0) interval_.Record(now - last_applied_);
  last_applied_ = now;
}

void RoundTimes::ViewChanged() {
  absl::MutexLock lock(&mu_);
  open_.clear();
}

size_t RoundTimes::open_rounds() const {
  absl::MutexLock lock(&mu_);
  return open_.size();
}

RoundTimes::Snapshot RoundTimes::snapshot() const {
  return {.cut_wait = cut_wait_.Snapshot(),
          .accept = accept_.Snapshot(),
          .prepare = prepare_.Snapshot(),
          .commit = commit_.Snapshot(),
          .apply = apply_.Snapshot(),
          .interval = interval_.Snapshot()};
}

}  // namespace partitions
