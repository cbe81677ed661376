#include "partitions/tx_tracker.h"

#include <algorithm>

namespace partitions {

TxTracker::TxTracker(TxTrackerPolicy policy) : policy_(policy) {}

TxTracker::Entry& TxTracker::TouchLocked(absl::string_view hash, int64_t now_nanos) {
  auto [it, inserted] = entries_.try_emplace(hash);
  if (inserted) {
    it->second.created_nanos = now_nanos;
    order_.emplace_back(now_nanos, std::string(hash));
    if (order_.size() > 2 * entries_.size() + 1024) CompactOrderLocked();
  }
  return it->second;
}

void TxTracker::NoteAdmitted(absl::string_view hash, int64_t now_nanos) {
  absl::MutexLock lock(&mu_);
  TrackedTx& t = TouchLocked(hash, now_nanos).tx;
  if (t.admitted_nanos == 0) t.admitted_nanos = now_nanos;
}

void TxTracker::ForgetAdmission(absl::string_view hash, int64_t admitted_nanos) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(hash);
  if (it == entries_.end() || it->second.tx.admitted_nanos != admitted_nanos) return;
  TrackedTx& t = it->second.tx;
  t.admitted_nanos = 0;
  if (t.spill_seq == 0 && !t.fetch_wanted) entries_.erase(it);
}

void TxTracker::NoteSpilled(absl::string_view hash, uint64_t seq, int64_t now_nanos) {
  absl::MutexLock lock(&mu_);
  Entry& e = TouchLocked(hash, now_nanos);
  if (seq > e.drained_seq) e.tx.spill_seq = seq;
}

void TxTracker::NoteDrained(absl::string_view hash, uint64_t seq, int64_t now_nanos) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(hash);
  if (it == entries_.end()) {
    // Drained before NoteSpilled: remember it, so that the mark, when it comes, is ignored.
    TouchLocked(hash, now_nanos).drained_seq = seq;
    return;
  }
  it->second.drained_seq = std::max(it->second.drained_seq, seq);
  TrackedTx& t = it->second.tx;
  if (t.spill_seq != seq) return;
  t.spill_seq = 0;
  if (t.admitted_nanos == 0 && !t.fetch_wanted) entries_.erase(it);
}

bool TxTracker::NoteWanted(absl::string_view hash, int64_t now_nanos, uint64_t seq) {
  absl::MutexLock lock(&mu_);
  Entry& e = TouchLocked(hash, now_nanos);
  const bool first = !e.tx.fetch_wanted;
  e.tx.fetch_wanted = true;
  e.tx.fetch_seq = seq;
  return first;
}

std::vector<uint64_t> TxTracker::WantedSeqs(absl::Span<const absl::string_view> hashes) const {
  std::vector<uint64_t> seqs(hashes.size(), 0);
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < hashes.size(); ++i) {
    auto it = entries_.find(hashes[i]);
    if (it != entries_.end() && it->second.tx.fetch_wanted) seqs[i] = it->second.tx.fetch_seq;
  }
  return seqs;
}

bool TxTracker::TakeWanted(absl::string_view hash) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(hash);
  if (it == entries_.end() || !it->second.tx.fetch_wanted) return false;
  it->second.tx.fetch_wanted = false;
  it->second.tx.fetch_seq = 0;
  const TrackedTx& t = it->second.tx;
  if (t.admitted_nanos == 0 && t.spill_seq == 0) entries_.erase(it);  // nothing left to know
  return true;
}

TrackedTx TxTracker::Get(absl::string_view hash) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(hash);
  return it == entries_.end() ? TrackedTx{} : it->second.tx;
}

std::vector<TrackedTx> TxTracker::TakeCommitted(const std::vector<std::string>& hashes) {
  std::vector<TrackedTx> out(hashes.size());
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < hashes.size(); ++i) {
    auto it = entries_.find(hashes[i]);
    if (it == entries_.end()) continue;
    out[i] = it->second.tx;
    entries_.erase(it);
  }
  return out;
}

size_t TxTracker::Evict(int64_t now_nanos) {
  absl::MutexLock lock(&mu_);
  const int64_t max_age = absl::ToInt64Nanoseconds(policy_.max_age);
  size_t evicted = 0;
  while (!order_.empty()) {
    const auto& [created, hash] = order_.front();
    auto it = entries_.find(hash);
    if (it != entries_.end() && it->second.created_nanos == created) {
      const bool too_many = entries_.size() > policy_.max_entries;
      const bool too_old = now_nanos - created > max_age;
      if (!too_many && !too_old) break;
      entries_.erase(it);
      ++evicted;
      if (too_many) {
        ++evicted_by_count_;
      } else {
        ++evicted_by_age_;
      }
    }
    order_.pop_front();
  }
  return evicted;
}

void TxTracker::CompactOrderLocked() {
  std::deque<std::pair<int64_t, std::string>> live;
  for (auto& record : order_) {
    auto it = entries_.find(record.second);
    if (it != entries_.end() && it->second.created_nanos == record.first) {
      live.push_back(std::move(record));
    }
  }
  order_.swap(live);
}

void TxTracker::SetPolicy(TxTrackerPolicy policy) {
  absl::MutexLock lock(&mu_);
  policy_ = policy;
}

TxTrackerStats TxTracker::stats() const {
  absl::MutexLock lock(&mu_);
  return {.entries = entries_.size(),
          .evicted_by_count = evicted_by_count_,
          .evicted_by_age = evicted_by_age_};
}

}  // namespace partitions
