// TokenBucket: a lock-free token bucket for request rates and byte rates alike.
//
// The bucket refills at `rate` tokens per second up to `burst` tokens. TryAcquire(n) takes n
// tokens when the bucket holds at least min(n, burst) of them; a request larger than the burst (or
// any request when burst is 0) is admitted only when the bucket is full and leaves it in debt, so
// later requests wait until the debt is paid. Over any interval of length t the bucket therefore
// hands out at most rate * t + max(burst, largest request) tokens, and a zero burst paces requests
// at exactly `rate` with no saving up.
//
// Special rates: 0 closes the bucket (nothing is admitted), kUnlimited admits everything.
//
// All methods are thread-safe. The hot path (TryAcquire) is one clock read plus a CAS loop on a
// single atomic, the "zero time" of folly's TokenBucket: the time at which the bucket was (or will
// be) empty. SetRate serializes against other SetRate calls and keeps the bucket's balance
// (tokens or debt) across the change; an acquisition racing with SetRate is judged by either the
// old or the new parameters.
//
//   flowctl::TokenBucket bucket(/*rate=*/1000, /*burst=*/100);
//   if (!bucket.TryAcquire(1)) {
//     return Reject("rate", absl::Nanoseconds(bucket.NanosUntil(1)));
//   }
#ifndef FLOWCTL_TOKEN_BUCKET_H_
#define FLOWCTL_TOKEN_BUCKET_H_

#include <atomic>
#include <cstdint>
#include <limits>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/clock.h"

namespace flowctl {

class TokenBucket {
 public:
  static constexpr double kUnlimited = std::numeric_limits<double>::infinity();
  // NanosUntil() of a closed bucket.
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

  // Starts full. REQUIRES: ValidateParams(rate, burst).ok(); `clock` outlives the bucket.
  TokenBucket(double rate, double burst, const Clock* clock = Clock::Real());

  TokenBucket(const TokenBucket&) = delete;
  TokenBucket& operator=(const TokenBucket&) = delete;

  // OK when rate is >= 0 (or kUnlimited) and burst is finite and >= 0.
  static absl::Status ValidateParams(double rate, double burst);

  // Takes n tokens if the bucket allows it now. Thread-safe, lock-free.
  bool TryAcquire(double n) { return TryAcquireAt(n, clock_->NowNanos()); }
  bool TryAcquireAt(double n, int64_t now_nanos);

  // Takes n tokens unconditionally, going into debt if needed (for work that has already been
  // done, e.g. bytes a transport wrote). Thread-safe. No effect on a closed or unlimited bucket.
  void Consume(double n) { ConsumeAt(n, clock_->NowNanos()); }
  void ConsumeAt(double n, int64_t now_nanos);

  // Nanoseconds from now until TryAcquire(n) would succeed (if nobody else takes tokens first):
  // 0 when it would succeed now, kNever when the bucket is closed. Thread-safe.
  int64_t NanosUntil(double n) const { return NanosUntilAt(n, clock_->NowNanos()); }
  int64_t NanosUntilAt(double n, int64_t now_nanos) const;

  // Tokens in the bucket now; negative while in debt. +inf when unlimited, 0 when closed.
  double Available() const { return AvailableAt(clock_->NowNanos()); }
  double AvailableAt(int64_t now_nanos) const;

  // Changes rate and burst live, keeping the current balance (clipped to the new burst). Leaving
  // the closed state starts empty; leaving the unlimited state starts full. Thread-safe.
  // Returns InvalidArgument (bucket unchanged) for parameters ValidateParams refuses.
  absl::Status SetRate(double rate, double burst);

  double rate() const { return rate_.load(std::memory_order_relaxed); }
  double burst() const { return burst_.load(std::memory_order_relaxed); }
  const Clock* clock() const { return clock_; }

 private:
  // Times are doubles in nanoseconds relative to origin_, so sub-nanosecond token costs at high
  // byte rates keep their precision however long the process runs.
  double RelNow(int64_t now_nanos) const {
    return static_cast<double>(now_nanos - origin_);
  }

  // Constant after construction.
  const Clock* const clock_;
  const int64_t origin_;

  // Parameters: written only under set_mu_, read lock-free.
  std::atomic<double> rate_;   // tokens per second; 0 closed, +inf unlimited
  std::atomic<double> burst_;  // tokens
  // The relative time at which the bucket holds zero tokens; the balance at time t is
  // min(burst, (t - zero_time_) * rate).
  std::atomic<double> zero_time_;

  absl::Mutex set_mu_;  // serializes SetRate
};

}  // namespace flowctl

#endif  // FLOWCTL_TOKEN_BUCKET_H_
