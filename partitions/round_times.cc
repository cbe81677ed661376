#include "partitions/round_times.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace partitions {

RoundTimes::RoundTimes() : RoundTimes(Options()) {}

RoundTimes::Stamps* RoundTimes::RoundOfLocked(uint64_t view, uint64_t seq) {
  auto it = open_.find(seq);
  if (it == open_.end()) {
    // Full: a round below every kept one is not timed (the oldest kept one goes for a newer).
    if (open_.size() >= kMaxOpenRounds) {
      if (seq < open_.begin()->first) return nullptr;
      open_.erase(open_.begin());
    }
    it = open_.try_emplace(seq).first;
    it->second.view = view;
  } else if (view < it->second.view) {
    return nullptr;  // a message of an older view (a retransmission): the round is newer
  } else if (view > it->second.view) {
    it->second = Stamps{.view = view};
  }
  return &it->second;
}

void RoundTimes::PrePrepareSeen(uint64_t view, uint64_t seq, int64_t now) {
  absl::MutexLock lock(&mu_);
  Stamps* s = RoundOfLocked(view, seq);
  // A pre-prepare after this replica proposed or prepared (the primary's retransmission of a
  // NewView's proposals, a restart) is not where the round began.
  if (s != nullptr && s->seen == 0 && s->proposed == 0 && s->prepared == 0) s->seen = now;
}

void RoundTimes::Proposed(uint64_t view, uint64_t seq, int64_t now) {
  absl::MutexLock lock(&mu_);
  Stamps* s = RoundOfLocked(view, seq);
  // Stamped already, or a retransmission after the round prepared (a restart resumes a slot).
  if (s == nullptr || s->proposed != 0 || s->prepared != 0) return;
  s->proposed = now;
  if (s->seen != 0) accept_.Record(now - s->seen);
}

void RoundTimes::Prepared(uint64_t view, uint64_t seq, int64_t now) {
  absl::MutexLock lock(&mu_);
  Stamps* s = RoundOfLocked(view, seq);
  if (s == nullptr || s->prepared != 0) return;
  s->prepared = now;
  if (s->proposed != 0) prepare_.Record(now - s->proposed);
}

std::optional<std::string> RoundTimes::Applied(uint64_t seq, int64_t start, int64_t end) {
  absl::MutexLock lock(&mu_);
  apply_.Record(end - start);
  // Only between consecutive blocks: a snapshot installed in between is not an interval.
  if (last_applied_ != 0 && seq == last_applied_seq_ + 1) interval_.Record(end - last_applied_);
  last_applied_ = end;
  last_applied_seq_ = seq;
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

void RoundTimes::ForgetViewsBefore(uint64_t view) {
  absl::MutexLock lock(&mu_);
  std::erase_if(open_, [view](const auto& round) { return round.second.view < view; });
}

RoundTimes::Snapshot RoundTimes::snapshot() const {
  size_t open;
  {
    absl::MutexLock lock(&mu_);
    open = open_.size();
  }
  return {.cut_wait = cut_wait_.Snapshot(),
          .accept = accept_.Snapshot(),
          .prepare = prepare_.Snapshot(),
          .commit = commit_.Snapshot(),
          .apply = apply_.Snapshot(),
          .interval = interval_.Snapshot(),
          .slow_rounds = slow_rounds_.load(std::memory_order_relaxed),
          .open_rounds = open};
}

}  // namespace partitions
