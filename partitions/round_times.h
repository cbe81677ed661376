// RoundTimes: how long each phase of one replica's rounds of consensus took, block by block.
//
// A client's commit latency (admission -> commit) says that a partition is slow, not where. The
// consensus driver stamps each round as it goes and this keeps one histogram per phase:
//
//   cut_wait  primary: how long ready txs waited in the pool before the cut that proposed them
//             (since they became ready, or since the last cut that left them there). The block
//             budget's spacing and the batch policy's delay show here.
//   accept    backup: pre-prepare received (its signature checked) -> prepare sent: the wait for
//             the txs' bodies (forwarded or fetched) and the replica's checks.
//   prepare   proposal accepted here (the primary's pre-prepare, a backup's prepare, sent) ->
//             prepared (this replica's commit sent): the wait for 2f matching prepares.
//   commit    prepared -> its block's execution starts: 2f+1 matching commits, and the blocks
//             before it executed (in seq order).
//   apply     executing the block and writing it to the ledger (one synced write).
//   interval  between two consecutive blocks committed here (not a phase of one round).
//
// A round is timed only within one view: stamps of a newer view start the round over, stamps of
// an older one (retransmissions) are ignored, and a view change forgets the open rounds (its rounds
// would measure the view change, which view_changes and the request timeout already describe).
// Blocks committed from block sync have no stamps and count in apply and interval only; so does
// every block of a replica alone (n = 1 sends no votes). At most kMaxOpenRounds rounds are kept.
//
// Slow rounds: a round that took longer than Options::slow_round_nanos from its first stamp (the
// pre-prepare received, or the proposal sent) to its block applied is counted, and Applied()
// returns a line for the log naming its phases, at most one a second (with how many more were
// slow since the last line), as etcd warns of an apply that took too long.
//
// Thread-safety: thread-safe. One small lock of its own (a leaf), which the stamps and
// snapshot()'s count of open rounds take; the driver already serializes the stamps under its
// lock, so it is never contended. The histograms are lock-free.
//
//   RoundTimes times({.slow_round_nanos = 1'000'000'000});
//   times.Proposed(view, seq, now);   // pre-prepare or prepare sent
//   times.Prepared(view, seq, now);   // commit sent
//   std::optional<std::string> slow = times.Applied(seq, apply_start, apply_end);
//   if (slow) LOG(WARNING) << "partition p: " << *slow;
#ifndef PARTITIONS_ROUND_TIMES_H_
#define PARTITIONS_ROUND_TIMES_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/histogram.h"

namespace partitions {

class RoundTimes {
 public:
  struct Options {
    int64_t slow_round_nanos = 0;  // 0: no round is slow
    int64_t log_every_nanos = 1'000'000'000;
  };
  struct Snapshot {
    flowctl::HistogramSnapshot cut_wait, accept, prepare, commit, apply, interval;  // nanoseconds
    uint64_t slow_rounds = 0;
    size_t open_rounds = 0;  // stamped, not yet applied
  };

  // Rounds stamped but not committed that are kept at most (the oldest are forgotten beyond it:
  // a replica's window of proposals in flight is far smaller).
  static constexpr size_t kMaxOpenRounds = 1024;

  RoundTimes();  // no round is slow
  explicit RoundTimes(Options options) : options_(options) {}
  RoundTimes(const RoundTimes&) = delete;
  RoundTimes& operator=(const RoundTimes&) = delete;

  // Primary: a cut that became a proposal, of txs ready for `waited` nanoseconds.
  void CutWaited(int64_t waited) { cut_wait_.Record(waited); }
  // Backup: a pre-prepare for (view, seq) arrived with a valid signature.
  void PrePrepareSeen(uint64_t view, uint64_t seq, int64_t now) ABSL_LOCKS_EXCLUDED(mu_);
  // This replica accepted the proposal for (view, seq): sent its pre-prepare (primary) or
  // prepare (backup). Records accept when the pre-prepare was seen in that view.
  void Proposed(uint64_t view, uint64_t seq, int64_t now) ABSL_LOCKS_EXCLUDED(mu_);
  // This replica is prepared for (view, seq): it sent its commit. Records prepare.
  void Prepared(uint64_t view, uint64_t seq, int64_t now) ABSL_LOCKS_EXCLUDED(mu_);
  // The block at `seq` committed here: executed and written from `start` (when its commit
  // quorum was complete) to `end`. Records commit (when prepared was stamped), apply and interval
  // (from the block before), and forgets every round at or below seq. Returns a line for the
  // log when the round was slow and none was returned in the last second.
  std::optional<std::string> Applied(uint64_t seq, int64_t start, int64_t end)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The replica's view is `view` now (a view change began, or it joined one straight from
  // NORMAL): forgets the rounds stamped in older views.
  void ForgetViewsBefore(uint64_t view) ABSL_LOCKS_EXCLUDED(mu_);

  Snapshot snapshot() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Stamps {
    uint64_t view = 0;
    // Clock times (positive); 0 = not stamped.
    int64_t seen = 0;      // pre-prepare received (backup)
    int64_t proposed = 0;  // pre-prepare or prepare sent
    int64_t prepared = 0;  // commit sent
  };
  // The round for seq in `view`: created (unless the rounds are full and seq is below every kept
  // one), or started over when `view` is newer than its stamps'. Null when not to be stamped:
  // full, or `view` older than the round's.
  Stamps* RoundOfLocked(uint64_t view, uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<uint64_t, Stamps> open_ ABSL_GUARDED_BY(mu_);  // by seq
  int64_t last_applied_ ABSL_GUARDED_BY(mu_) = 0;         // 0: no block applied yet
  uint64_t last_applied_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_logged_ ABSL_GUARDED_BY(mu_) = 0;     // 0: no slow round logged yet
  uint64_t unlogged_slow_ ABSL_GUARDED_BY(mu_) = 0;  // slow since the last line
  std::atomic<uint64_t> slow_rounds_{0};
  const Options options_;
  flowctl::Histogram cut_wait_, accept_, prepare_, commit_, apply_, interval_;
};

}  // namespace partitions

#endif  // PARTITIONS_ROUND_TIMES_H_
