// Pacer: a leaky bucket used as a shaper. It releases work at a constant rate, turning a burst
// into an evenly spaced stream, where a TokenBucket (a policer) would let the burst through and
// then refuse.
//
// Reserve(cost) books the next release slot and returns the time at which the caller may release
// that unit of work (a timer, a scheduler or a sleep does the waiting; the pacer never blocks).
// Slots follow the virtual scheduling form of the leaky bucket (GCRA): a unit is released at
// max(now, next_free), and pushes next_free on by cost / rate. So an idle pacer releases at once,
// idle time is not saved up, and k units of cost c booked together come out c / rate apart.
// Times are kept in whole nanoseconds plus a fraction, so spacing never drifts: 3 units/s gives
// exactly 3 units per second however long it runs.
//
// The horizon (max_delay) caps queueing: a unit whose release would be more than max_delay after
// now is refused with ResourceExhausted and books nothing, so callers shed work instead of letting
// a queue grow without bound. Rate 0 closes the pacer (Reserve returns Unavailable); kUnlimited
// releases everything at once. SetRate and SetMaxDelay apply live: slots already handed out keep
// their times, and the new rate spaces the next unit from the last booked one.
//
// Thread-safe: every method may be called from any thread (one absl::Mutex held for a few
// arithmetic operations).
//
//   flowctl::Pacer pacer(/*rate=*/50e6, /*max_delay=*/absl::Milliseconds(200));  // bytes/s
//   absl::StatusOr<int64_t> at = pacer.Reserve(chunk.size());
//   if (!at.ok()) return Reject(at.status());  // would wait more than 200 ms
//   timer.RunAt(*at, [chunk] { Send(chunk); });
#ifndef FLOWCTL_PACER_H_
#define FLOWCTL_PACER_H_

#include <cstdint>
#include <limits>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flowctl/clock.h"

namespace flowctl {

class Pacer {
 public:
  static constexpr double kUnlimited = std::numeric_limits<double>::infinity();
  // Positive rates below kMinRate act as kMinRate (one unit per ~32 years), as in TokenBucket,
  // so spacings stay finite; kMaxCost is the largest cost of one unit.
  static constexpr double kMinRate = 1e-9;
  static constexpr double kMaxCost = 1e18;

  // REQUIRES: ValidateParams(rate, max_delay).ok(); `clock` outlives the pacer.
  // absl::InfiniteDuration() as max_delay means no horizon.
  Pacer(double rate, absl::Duration max_delay, const Clock* clock = Clock::Real());

  Pacer(const Pacer&) = delete;
  Pacer& operator=(const Pacer&) = delete;

  // OK when rate is >= 0 (0 = closed) or kUnlimited, and max_delay >= 0.
  static absl::Status ValidateParams(double rate, absl::Duration max_delay);

  // Books a slot for a unit of `cost` (in the rate's units: 1 per request, bytes for byte rates)
  // and returns its release time in Clock nanoseconds (>= now). Errors, booking nothing:
  // ResourceExhausted when the release would be more than max_delay from now (the message says by
  // how much), Unavailable when the pacer is closed, InvalidArgument when cost is negative, NaN or
  // above kMaxCost. Thread-safe.
  absl::StatusOr<int64_t> Reserve(double cost) { return ReserveAt(cost, clock_->NowNanos()); }
  absl::StatusOr<int64_t> ReserveAt(double cost, int64_t now_nanos);

  // Nanoseconds from now until a unit booked now would be released (the queue ahead of it): 0 when
  // idle or unlimited, int64 max when closed. Thread-safe.
  int64_t BacklogNanos() const { return BacklogNanosAt(clock_->NowNanos()); }
  int64_t BacklogNanosAt(int64_t now_nanos) const;

  // Live changes. InvalidArgument (pacer unchanged) for values ValidateParams refuses.
  // Thread-safe.
  absl::Status SetRate(double rate);
  absl::Status SetMaxDelay(absl::Duration max_delay);

  double rate() const;
  absl::Duration max_delay() const;
  const Clock* clock() const { return clock_; }

 private:
  // Nanoseconds from now_nanos until next_free (may be negative), as a double.
  double DelayAt(int64_t now_nanos) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const Clock* const clock_;

  mutable absl::Mutex mu_;
  // State below is protected by mu_.
  double rate_ ABSL_GUARDED_BY(mu_);             // units per second; 0 closed, +inf unlimited
  double nanos_per_unit_ ABSL_GUARDED_BY(mu_);   // 0 when unlimited, +inf when closed
  absl::Duration max_delay_ ABSL_GUARDED_BY(mu_);
  // The last booked unit: its exact start (whole nanoseconds + fraction in [0, 1)) and cost. The
  // next unit may start at last_start + last_cost * nanos_per_unit_; keeping the cost rather than
  // that sum lets SetRate re-space the next unit at the new rate.
  bool booked_ ABSL_GUARDED_BY(mu_) = false;
  int64_t last_start_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  double last_start_frac_ ABSL_GUARDED_BY(mu_) = 0;
  double last_cost_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace flowctl

#endif  // FLOWCTL_PACER_H_
