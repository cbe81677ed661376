// BacklogRateMeter: how fast a consumer serves while it has work (commits per second while the
// pool holds txs, bytes per second a drain delivers while its FIFO has records), and
// RetryAfterFor: how long until `units` are served at that rate (the retry-after of a refusal).
//
// An idle consumer says nothing about how fast it can go, so a measurement window opens only
// while there is a backlog and closes after `min_window` if there still is one; a window in which
// the backlog was seen dry (at an Observe) is discarded: the caller's `backlogged` should say
// "there was more work than could be served", e.g. a pool above its high-water mark, not merely
// "something is queued". Each closed window's rate goes into an exponentially weighted average
// (`weight` on the newest window); a window with no service at all sets the rate to 0 (a stall),
// and the next window with service replaces it. Until the first window closes, measured() is
// false.
//
// The meter does not count events itself: Observe takes the consumer's own cumulative counter
// (e.g. Ledger committed txs), so the hot path pays nothing.
//
// Thread-safety: Observe must be called by one thread at a time (e.g. the arbiter's tick);
// rate() may be read from any thread.
//
//   flowctl::BacklogRateMeter commits({.min_window = absl::Milliseconds(500)});
//   commits.Observe(clock->NowNanos(), pipeline->committed_txs(), pool->size() > 0);  // per tick
//   absl::Duration hint = flowctl::RetryAfterFor(txs_to_free, commits.estimate(), bounds);
#ifndef FLOWCTL_RATE_METER_H_
#define FLOWCTL_RATE_METER_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace flowctl {

class BacklogRateMeter {
 public:
  struct Options {
    absl::Duration min_window = absl::Seconds(1);  // > 0
    double weight = 0.5;                           // of the newest window, in (0, 1]
  };

  BacklogRateMeter() : BacklogRateMeter(Options{}) {}
  explicit BacklogRateMeter(Options options) : options_(options) {}

  // `now_nanos` from the consumer's clock; `count` its cumulative counter (a decrease, e.g. a
  // reset, restarts the window); `backlogged` whether it had work queued at this instant.
  void Observe(int64_t now_nanos, uint64_t count, bool backlogged);

  // Units per second of the consumer's clock; 0 before the first window closed.
  double rate() const { return std::max(0.0, estimate()); }
  bool measured() const { return estimate() >= 0; }
  // The rate once measured, else -1 (what RetryAfterFor takes as "unknown"). One atomic: a
  // reader never sees "measured" with a stale rate.
  double estimate() const { return rate_.load(std::memory_order_relaxed); }
  // Forgets the measurement. Called by the thread that calls Observe.
  void Reset();

 private:
  const Options options_;
  std::atomic<double> rate_{-1};  // -1 = not measured
  int64_t window_start_ = 0;      // 0 = no window open
  uint64_t window_count_ = 0;
};

// Bounds of a measured retry-after.
struct RetryAfterBounds {
  absl::Duration min = absl::Milliseconds(10);
  absl::Duration max = absl::Seconds(10);
  // The answer when the rate is unknown (negative): e.g. the fixed hint a stage was configured
  // with. A rate of 0 (nothing served) gives `max`.
  absl::Duration unknown = absl::Milliseconds(100);
};

// Spreads the retries of refused requests over the time the consumer needs to make room for
// them: when room for the first is expected after `room`, the k-th refusal of a burst is told to
// come back after room + k / rate, not all at the moment the first room opens (which would refuse
// all but a few of them again and again). A slot in the past is forgotten (the queue of retries
// drained), and no slot is given beyond `bounds.max` from now. Lock-free.
class RetrySlots {
 public:
  // The retry-after of one refusal now. `rate_per_second` > 0 (units the consumer serves; each
  // refusal takes one unit), else `room` within the bounds.
  absl::Duration Take(int64_t now_nanos, absl::Duration room, double rate_per_second,
                      const RetryAfterBounds& bounds);
  // What Take would answer now, without taking a slot (for stats).
  absl::Duration Peek(int64_t now_nanos, absl::Duration room, double rate_per_second,
                      const RetryAfterBounds& bounds) const;

 private:
  std::atomic<int64_t> next_nanos_{0};  // the next free slot; 0 = none
  std::atomic<double> rate_{0};         // the rate the queue's slots were given at
};

// How long serving `units` takes at `rate_per_second`, within [bounds.min, bounds.max]:
// bounds.max when the rate is 0 (nothing is being served), bounds.unknown when it is negative
// (not measured; see BacklogRateMeter::estimate).
absl::Duration RetryAfterFor(double units, double rate_per_second, const RetryAfterBounds& bounds);

}  // namespace flowctl

#endif  // FLOWCTL_RATE_METER_H_
