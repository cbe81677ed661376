// AdaptiveLimiter: an in-flight limit that follows what the system commits (AIMD on latency).
//
// It bounds how many units (txs) are between admission and completion, like ConcurrencyLimiter,
// but moves the limit itself from completion-latency samples, on the model of Netflix's
// concurrency-limits (AIMD, "didDrop" and the app-limited check) and TCP's one decrease per
// round trip:
//   - every window (`window_samples` samples, or `window` of Clock time with at least
//     min(10, window_samples) samples or one drop) the window's latency is the `quantile` of its
//     samples;
//   - threshold = tolerance x baseline, clamped to [target_latency, max_latency] where those are
//     set; baseline = the lowest window latency seen, allowed to rise by `baseline_drift` per
//     window (so it follows a cluster that got slower for reasons the limit cannot fix);
//   - a window above the threshold, or with a drop (a unit that left without completing, e.g.
//     expired), multiplies the limit by `decrease_factor`; otherwise, if the limit was in use
//     (it refused someone, or half of it was held), it adds `increase_step` (0: sqrt(limit)).
//     The limit stays in [min, max];
//   - after a decrease, samples of units admitted before it are ignored: they queued under the
//     old limit, and counting them would shrink the limit once per window until they drained.
//
// A Ticket held longer than `max_hold` is Overdue(); its holder releases it with Timeout(), so
// units that cannot complete yet do not keep slots forever. A timeout is a censored latency
// sample (the unit took at least its age): when most of a window times out, the window's latency
// is above the threshold and the limit shrinks, instead of the freed slots admitting more.
//
// Two handles hold a slot, each released exactly once:
//   - Permit (TryAcquire): 8 bytes, for a request's HoldList; admits only below the limit;
//     releasing it gives no feedback (the request was refused further on).
//   - Ticket (Track): owns a reference to the limiter and the admission time; taken when the unit
//     is handed on (e.g. pooled) while the Permit is still held, so the count never dips. Commit()
//     releases with a latency sample, Drop() with a congestion signal, destruction with neither.
//     The adaptive stage keeps its tickets itself, by request id (adaptive_tickets.h).
//
// Thread-safety: the limiter's methods are thread-safe; one Permit or Ticket object is used by
// one thread at a time. TryAcquire and Permit release are lock-free (one CAS / one fetch_sub);
// Commit, Drop, Timeout and the setters take an internal mutex (a leaf lock).
// The limiter must outlive every Permit (a Ticket keeps it alive).
//
//   auto limiter = std::make_shared<flowctl::AdaptiveLimiter>(options, clock);
//   flowctl::AdaptiveLimiter::Permit permit = limiter->TryAcquire();
//   if (!permit) return Reject("adaptive limit");
//   // Before the permit goes:
//   auto ticket = flowctl::AdaptiveLimiter::Track(limiter, arrival_nanos);
//   ... later, when its block commits: ticket.Commit();
#ifndef FLOWCTL_ADAPTIVE_LIMITER_H_
#define FLOWCTL_ADAPTIVE_LIMITER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flowctl/clock.h"
#include "flowctl/slot_permit.h"

namespace flowctl {

struct AdaptiveLimiterOptions {
  int64_t initial_limit = 32;                            // in [min_limit, max_limit] (clamped)
  int64_t min_limit = 4;                                 // >= 1
  int64_t max_limit = 1000;                              // >= min_limit
  double tolerance = 2.0;                                // >= 1
  absl::Duration target_latency = absl::ZeroDuration();  // 0 = none
  absl::Duration max_latency = absl::ZeroDuration();     // 0 = none; >= target_latency
  double increase_step = 0;                              // >= 0; 0 = sqrt(limit)
  double decrease_factor = 0.8;                          // (0, 1)
  int64_t window_samples = 100;                          // >= 1
  absl::Duration window = absl::Milliseconds(500);       // > 0
  double quantile = 0.5;                                 // (0, 1]
  double baseline_drift = 0.01;                          // [0, 1]; 0 = fixed baseline
  // A Ticket older than this is Overdue(): its holder should Timeout() it, giving the slot back
  // with no feedback. It bounds how long a unit that cannot complete yet (a tx waiting behind a
  // nonce gap its client has not filled) keeps a slot: without it such units fill the limit and
  // nothing is admitted to fill the gaps. > 0.
  absl::Duration max_hold = absl::Seconds(1);
};

// InvalidArgument naming the option when one is out of range.
absl::Status ValidateAdaptiveLimiterOptions(const AdaptiveLimiterOptions& options);

// A consistent snapshot of the limiter, for gauges and tests.
struct AdaptiveLimiterState {
  int64_t limit = 0;
  int64_t in_flight = 0;
  int64_t baseline_nanos = 0;        // 0 until the first window closes
  int64_t window_latency_nanos = 0;  // latency of the last closed window with samples
  uint64_t windows = 0;              // closed windows
  uint64_t increases = 0;
  uint64_t decreases = 0;
  uint64_t samples = 0;        // Commit() calls
  uint64_t stale_samples = 0;  // of units admitted before the last decrease (not judged)
  uint64_t drops = 0;
  uint64_t timeouts = 0;  // tickets released by Timeout() (censored samples, not in `samples`)
  uint64_t waived = 0;    // tickets released by Waive()
};

class AdaptiveLimiter {
 public:
  // A slot for a request's HoldList (flowctl/slot_permit.h); releasing it gives no feedback.
  using Permit = SlotPermit<AdaptiveLimiter>;

  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept
        : limiter_(std::move(other.limiter_)), admitted_nanos_(other.admitted_nanos_) {}
    Ticket& operator=(Ticket&& other) noexcept {
      if (this != &other) {
        Cancel();
        limiter_ = std::move(other.limiter_);
        admitted_nanos_ = other.admitted_nanos_;
      }
      return *this;
    }
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { Cancel(); }

    bool held() const { return limiter_ != nullptr; }
    int64_t admitted_nanos() const { return admitted_nanos_; }
    // Each releases the slot once; after any of them the ticket is empty and they do nothing.
    // The unit completed: a latency sample of (now_nanos - admitted_nanos); the no-argument form
    // reads the limiter's clock.
    void Commit(int64_t now_nanos);
    void Commit();
    // The unit left without completing (expired): a congestion signal.
    void Drop();
    // Older than the limiter's max_hold at `now` (false when empty). Lock-free.
    bool Overdue(int64_t now) const;
    // Held past max_hold: releases with a censored sample (its age so far), counted as a
    // timeout.
    void Timeout(int64_t now_nanos);
    void Timeout();
    // The unit waits on something outside what the limit protects (a tx behind its client's
    // nonce gap): releases with no feedback, counted as waived.
    void Waive();
    // No feedback (refused further on, shutdown).
    void Cancel() {
      if (limiter_ != nullptr) std::exchange(limiter_, nullptr)->ReleaseOne();
    }

   private:
    friend class AdaptiveLimiter;
    Ticket(std::shared_ptr<AdaptiveLimiter> limiter, int64_t admitted_nanos)
        : limiter_(std::move(limiter)), admitted_nanos_(admitted_nanos) {}
    std::shared_ptr<AdaptiveLimiter> limiter_;
    int64_t admitted_nanos_ = 0;
  };

  // REQUIRES: ValidateAdaptiveLimiterOptions(options).ok(); clock is non-null and outlives this.
  AdaptiveLimiter(const AdaptiveLimiterOptions& options, const Clock* clock);
  AdaptiveLimiter(const AdaptiveLimiter&) = delete;
  AdaptiveLimiter& operator=(const AdaptiveLimiter&) = delete;

  // A held Permit while in_flight() < limit(), else an empty one. Lock-free.
  Permit TryAcquire();

  // Takes one more slot, unconditionally (the caller hands over from a Permit it still holds, so
  // the unit is counted throughout). `admitted_nanos` (Clock time) starts its latency.
  // REQUIRES: limiter is non-null.
  static Ticket Track(std::shared_ptr<AdaptiveLimiter> limiter, int64_t admitted_nanos);

  // Live change. Keeps the current limit (clamped to the new bounds), the baseline and the open
  // window; initial_limit is ignored. REQUIRES: options valid.
  void SetOptions(const AdaptiveLimiterOptions& options) ABSL_LOCKS_EXCLUDED(mu_);
  AdaptiveLimiterOptions options() const ABSL_LOCKS_EXCLUDED(mu_);

  int64_t limit() const { return limit_.load(std::memory_order_relaxed); }
  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  AdaptiveLimiterState State() const ABSL_LOCKS_EXCLUDED(mu_);
  const Clock* clock() const { return clock_; }

 private:
  friend Permit;
  void ReleaseOne() { in_flight_.fetch_sub(1, std::memory_order_release); }
  // Feedback from a Ticket; each releases its slot first.
  void OnSample(int64_t admitted_nanos, bool timed_out, int64_t now) ABSL_LOCKS_EXCLUDED(mu_);
  void OnDrop() ABSL_LOCKS_EXCLUDED(mu_);
  void OnTimeout(int64_t admitted_nanos, int64_t now) ABSL_LOCKS_EXCLUDED(mu_);
  void OnWaive() ABSL_LOCKS_EXCLUDED(mu_);
  // Closes the window if it is due at `now`, adjusting the limit.
  void MaybeCloseWindowLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetLimitLocked(double limit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  // The hot path reads only these two.
  std::atomic<int64_t> limit_;
  std::atomic<int64_t> in_flight_{0};
  std::atomic<bool> refused_{false};     // TryAcquire refused someone in the current window
  std::atomic<int64_t> max_hold_nanos_;  // options_.max_hold, for Ticket::Overdue

  mutable absl::Mutex mu_;
  AdaptiveLimiterOptions options_ ABSL_GUARDED_BY(mu_);
  double exact_limit_ ABSL_GUARDED_BY(mu_);  // limit_ is its floor
  int64_t window_start_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> window_ ABSL_GUARDED_BY(mu_);  // latency samples, nanos
  uint64_t window_drops_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t window_peak_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ignore_before_ ABSL_GUARDED_BY(mu_) = 0;   // admissions before the last decrease
  AdaptiveLimiterState state_ ABSL_GUARDED_BY(mu_);  // figures other than limit / in_flight
};

}  // namespace flowctl

#endif  // FLOWCTL_ADAPTIVE_LIMITER_H_
