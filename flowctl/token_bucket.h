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
// be) empty (stored with an offset, see word_). A refusal costs no write. SetRate serializes
// against other SetRate calls and keeps the bucket's balance (tokens or debt) across the change.
// While it swaps the parameters (a few instructions) it parks that atomic, so every admission is
// judged entirely by the old or entirely by the new parameters. A TryAcquire that lands inside that
// window spins briefly and is refused only if SetRate stays parked (preempted mid-swap), so the hot
// path never blocks; Consume, NanosUntil and Available wait for the swap to finish.
//
// Precision: times are doubles in nanoseconds since the bucket was built, so rounding grows with
// the bucket's age (and with the span of zero times SetRate has moved between): ~1/64 ns after a
// day, ~4 ns after a year, far below any realistic token cost.
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
  // Positive rates below kMinRate (one token per ~32 years) act as kMinRate, and bursts above
  // kMaxTokens (an exabyte) as kMaxTokens: both are "never" and "infinite" in practice, and the
  // clamps keep every product of time and tokens finite (no inf - inf = NaN in the state).
  static constexpr double kMinRate = 1e-9;
  // Also the largest single request.
  static constexpr double kMaxTokens = 1e18;
  // NanosUntil() of a closed bucket.
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

  // Starts full. REQUIRES: ValidateParams(rate, burst).ok(); `clock` outlives the bucket.
  TokenBucket(double rate, double burst, const Clock* clock = Clock::Real());

  TokenBucket(const TokenBucket&) = delete;
  TokenBucket& operator=(const TokenBucket&) = delete;

  // OK when rate is >= 0 (0 = closed) or kUnlimited, and burst is finite and >= 0.
  static absl::Status ValidateParams(double rate, double burst);

  // Takes n tokens if the bucket allows it now. Thread-safe, lock-free, never blocks.
  // An invalid n (negative, NaN, above kMaxTokens) is refused.
  bool TryAcquire(double n) { return TryAcquireAt(n, clock_->NowNanos()); }
  bool TryAcquireAt(double n, int64_t now_nanos);

  // Takes n tokens unconditionally, going into debt if needed (for work that has already been
  // done, e.g. bytes a transport wrote). Thread-safe. No effect on a closed or unlimited bucket;
  // an invalid n is ignored.
  void Consume(double n) { ConsumeAt(n, clock_->NowNanos()); }
  void ConsumeAt(double n, int64_t now_nanos);

  // Nanoseconds from now until TryAcquire(n) would succeed (if nobody else takes tokens first):
  // 0 when it would succeed now, kNever when the bucket is closed or n is invalid. Thread-safe.
  int64_t NanosUntil(double n) const { return NanosUntilAt(n, clock_->NowNanos()); }
  int64_t NanosUntilAt(double n, int64_t now_nanos) const;

  // Tokens in the bucket now; negative while in debt. +inf when unlimited, 0 when closed.
  double Available() const { return AvailableAt(clock_->NowNanos()); }
  double AvailableAt(int64_t now_nanos) const;

  // Changes rate and burst live, keeping the current balance (clipped to the new burst; a debt
  // is kept in tokens, so it is paid off at the new rate). Leaving the closed state starts empty;
  // leaving the unlimited state starts full. Thread-safe.
  // Returns InvalidArgument (bucket unchanged) for parameters ValidateParams refuses.
  absl::Status SetRate(double rate, double burst);

  // As given to the constructor or SetRate (before the clamps above).
  double rate() const { return rate_.load(std::memory_order_relaxed); }
  double burst() const { return given_burst_.load(std::memory_order_relaxed); }
  const Clock* clock() const { return clock_; }

 private:
  double RelNow(int64_t now_nanos) const { return static_cast<double>(now_nanos - origin_); }
  // The word, waiting out a SetRate that has it parked.
  double LoadWord() const;
  // The word after a short bounded spin; NaN if it is still parked.
  double SpinOnParked() const;

  // Constant after construction.
  const Clock* const clock_;
  const int64_t origin_;

  // The state is the zero time: the relative time (ns since origin_) at which the bucket holds
  // zero tokens; the balance at time t is min(burst, (t - zero) / nanos_per_token_). It is stored
  // as word_ = zero + offset_: acquirers move word_ by CAS, and SetRate changes offset_ so that
  // word_ only ever grows. That rules out ABA: a CAS from a word loaded before a SetRate can never
  // succeed after it, however the zero time moved. word_ is NaN while SetRate swaps the
  // parameters below. Acquirers load it (acquire) before the parameters, and SetRate stores it
  // (release) after them, so whoever sees a new word also sees its parameters. Kept on one cache
  // line with the parameters: the hot path reads all of them.
  alignas(64) std::atomic<double> word_;
  // Parameters: written only by SetRate (under set_mu_, with word_ parked; release), read
  // lock-free (acquire).
  std::atomic<double> offset_;           // ns; zero time = word_ - offset_
  std::atomic<double> nanos_per_token_;  // 0 when unlimited, +inf when closed
  std::atomic<double> burst_;            // tokens, clamped to kMaxTokens
  // For the accessors only.
  std::atomic<double> rate_;         // tokens per second; 0 closed, +inf unlimited
  std::atomic<double> given_burst_;  // tokens

  absl::Mutex set_mu_;  // serializes SetRate
};

}  // namespace flowctl

#endif  // FLOWCTL_TOKEN_BUCKET_H_
