#include "partitions/round_times.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace partitions {

RoundTimes::RoundTimes() : RoundTimes(Options()) {}

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

std::optional<std::string> RoundTimes::Applied(uint64_t seq, int64_t start, int64_t end) {
  absl::MutexLock lock(&mu_);
  apply_.Record(end - start);
  if (last_applied_ != 0) interval_.Record(end - last_applied_);
  last_applied_ = end;
  std::optional<Stamps> round;
  if (auto it = open_.find(seq); it != open_.end()) round = it->second;
  open_.erase(open_.begin(), open_.upper_bound(seq));
  if (!round) return std::nullopt;  // block sync, or forgotten
  if (round->prepared != 0) commit_.Record(start - round->prepared);
  const int64_t first = round->seen != 0 ? round->seen : round->proposed;
  if (options_.slow_round_nanos <= 0 || first == 0 || end - first <= options_.slow_round_nanos) {
    return std::nullopt;
  }
  slow_rounds_.fetch_add(1, std::memory_order_relaxed);
  if (last_logged_ != 0 && end - last_logged_ < options_.log_every_nanos) {
    ++unlogged_slow_;
    return std::nullopt;
  }
  last_logged_ = end;
  auto ms = [](int64_t nanos) { return absl::StrCat(nanos / 1'000'000, " ms"); };
  // Each phase from its stamp to the next one present (a missing stamp joins two phases).
  std::vector<std::string> phases;
  if (round->seen != 0 && round->proposed != 0) {
    phases.push_back("accept " + ms(round->proposed - round->seen));
  }
  if (round->proposed != 0 && round->prepared != 0) {
    phases.push_back("prepare " + ms(round->prepared - round->proposed));
  }
  const int64_t last = round->prepared != 0   ? round->prepared
                       : round->proposed != 0 ? round->proposed
                                              : round->seen;
  phases.push_back((round->prepared != 0 ? "commit " : "to committed ") + ms(start - last));
  phases.push_back("apply " + ms(end - start));
  std::string line =
      absl::StrCat("slow round: seq ", seq, " of view ", round->view, " took ", ms(end - first),
                   " from ", round->seen != 0 ? "its pre-prepare" : "its proposal", " to applied (",
                   absl::StrJoin(phases, ", "), ")");
  if (unlogged_slow_ > 0) {
    absl::StrAppend(&line, "; ", unlogged_slow_, " more slow round", unlogged_slow_ == 1 ? "" : "s",
                    " since the last such line");
  }
  unlogged_slow_ = 0;
  return line;
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
          .interval = interval_.Snapshot(),
          .slow_rounds = slow_rounds_.load(std::memory_order_relaxed)};
}

}  // namespace partitions
