#include "flowctl/token_bucket.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace flowctl {
namespace {

// Tolerance, in nanoseconds, for float rounding when comparing "tokens are there" with now.
constexpr double kSlackNanos = 1e-3;
// The parked zero time (SetRate in progress). Never a real zero time: those are finite.
constexpr double kParked = std::numeric_limits<double>::quiet_NaN();

// The word after moving the zero time to `zero`: never below `word`, so that words only grow
// (float rounding of `zero + offset` could otherwise dip one ulp below).
double NextWord(double word, double zero, double offset) { return std::max(word, zero + offset); }

bool ValidTokens(double n) { return n >= 0 && n <= TokenBucket::kMaxTokens; }  // false for NaN

// The hot-path encoding of a rate: 0 when unlimited, +inf when closed, else at most 1e18 ns.
double NanosPerToken(double rate) {
  if (rate <= 0) return std::numeric_limits<double>::infinity();
  if (std::isinf(rate)) return 0;
  return static_cast<double>(kNanosPerSecond) / std::max(rate, TokenBucket::kMinRate);
}
double ClampBurst(double burst) { return std::min(burst, TokenBucket::kMaxTokens); }
bool IsUnlimited(double npt) { return npt == 0; }
bool IsClosed(double npt) { return std::isinf(npt); }

}  // namespace

absl::Status TokenBucket::ValidateParams(double rate, double burst) {
  if (!(rate >= 0)) {  // also refuses NaN
    return absl::InvalidArgumentError(
        absl::StrCat("token bucket: rate must be >= 0 tokens/s (0 = closed), got ", rate));
  }
  if (!(burst >= 0) || std::isinf(burst)) {
    return absl::InvalidArgumentError(
        absl::StrCat("token bucket: burst must be finite and >= 0 tokens, got ", burst));
  }
  return absl::OkStatus();
}

TokenBucket::TokenBucket(double rate, double burst, const Clock* clock)
    : clock_(clock),
      origin_(clock->NowNanos()),
      word_(0),
      offset_(0),
      nanos_per_token_(NanosPerToken(rate)),
      burst_(ClampBurst(burst)),
      rate_(rate),
      given_burst_(burst) {
  const absl::Status valid = ValidateParams(rate, burst);
  CHECK(valid.ok()) << valid;
  const double npt = NanosPerToken(rate);
  if (!IsClosed(npt) && !IsUnlimited(npt)) {
    word_.store(-ClampBurst(burst) * npt, std::memory_order_relaxed);  // full (offset 0)
  }
}

double TokenBucket::LoadWord() const {
  double word = word_.load(std::memory_order_acquire);
  // SetRate holds the word parked for a few instructions; yield in case it was preempted.
  while (std::isnan(word)) {
    std::this_thread::yield();
    word = word_.load(std::memory_order_acquire);
  }
  return word;
}

double TokenBucket::SpinOnParked() const {
  // SetRate parks the word for a few dozen nanoseconds; ride that out with a bounded spin,
  // and report "still parked" (NaN) only if SetRate was preempted mid-swap.
  double word = word_.load(std::memory_order_acquire);
  for (int i = 0; i < 100 && std::isnan(word); ++i) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    word = word_.load(std::memory_order_acquire);
  }
  return word;
}

bool TokenBucket::TryAcquireAt(double n, int64_t now_nanos) {
  if (!ValidTokens(n)) return false;
  const double now = RelNow(now_nanos);
  double word = word_.load(std::memory_order_acquire);
  while (true) {
    if (std::isnan(word)) [[unlikely]] {
      word = SpinOnParked();
      if (std::isnan(word)) return false;  // refuse rather than block on a preempted SetRate
    }
    // Loaded after the word, so they are the parameters that word was made under, or newer ones
    // (then SetRate has parked or replaced the word, never to return to it: the CAS fails).
    const double npt = nanos_per_token_.load(std::memory_order_acquire);
    if (IsUnlimited(npt)) return true;
    if (IsClosed(npt)) return false;
    const double burst = burst_.load(std::memory_order_acquire);
    const double offset = offset_.load(std::memory_order_acquire);
    // A zero time before full_at would mean more than a burst saved up; clip it.
    const double base = std::max(word - offset, now - burst * npt);
    if (base + std::min(n, burst) * npt > now + kSlackNanos) return false;  // no write
    if (word_.compare_exchange_weak(word, NextWord(word, base + n * npt, offset),
                                    std::memory_order_acq_rel, std::memory_order_acquire)) {
      return true;
    }
  }
}

void TokenBucket::ConsumeAt(double n, int64_t now_nanos) {
  if (!ValidTokens(n)) return;
  const double now = RelNow(now_nanos);
  double word = LoadWord();
  while (true) {
    const double npt = nanos_per_token_.load(std::memory_order_acquire);
    if (IsUnlimited(npt) || IsClosed(npt)) return;
    const double burst = burst_.load(std::memory_order_acquire);
    const double offset = offset_.load(std::memory_order_acquire);
    const double base = std::max(word - offset, now - burst * npt);
    if (word_.compare_exchange_weak(word, NextWord(word, base + n * npt, offset),
                                    std::memory_order_acq_rel, std::memory_order_acquire)) {
      return;
    }
    if (std::isnan(word)) word = LoadWord();
  }
}

int64_t TokenBucket::NanosUntilAt(double n, int64_t now_nanos) const {
  if (!ValidTokens(n)) return kNever;
  const double word = LoadWord();
  const double npt = nanos_per_token_.load(std::memory_order_acquire);
  if (IsUnlimited(npt)) return 0;
  if (IsClosed(npt)) return kNever;
  const double zero = word - offset_.load(std::memory_order_acquire);
  const double burst = burst_.load(std::memory_order_acquire);
  const double now = RelNow(now_nanos);
  const double base = std::max(zero, now - burst * npt);
  // TryAcquireAt admits when wait <= kSlackNanos, so the answer is the first whole nanosecond at
  // which that holds: TryAcquireAt(now + answer) succeeds and TryAcquireAt(now + answer - 1) fails.
  const double wait = base + std::min(n, burst) * npt - now;
  if (wait <= kSlackNanos) return 0;
  const double nanos = std::ceil(wait - kSlackNanos);
  if (nanos >= static_cast<double>(kNever)) return kNever;
  return static_cast<int64_t>(nanos);
}

double TokenBucket::AvailableAt(int64_t now_nanos) const {
  const double word = LoadWord();
  const double npt = nanos_per_token_.load(std::memory_order_acquire);
  if (IsUnlimited(npt)) return kUnlimited;
  if (IsClosed(npt)) return 0;
  const double zero = word - offset_.load(std::memory_order_acquire);
  const double burst = burst_.load(std::memory_order_acquire);
  return std::min(burst, (RelNow(now_nanos) - zero) / npt);
}

absl::Status TokenBucket::SetRate(double rate, double burst) {
  if (absl::Status s = ValidateParams(rate, burst); !s.ok()) return s;
  const double given_burst = burst;
  burst = ClampBurst(burst);
  absl::MutexLock lock(&set_mu_);
  // Read before parking to keep the parked window short; a slightly early `now` only
  // undercounts the balance.
  const double now = RelNow(clock_->NowNanos());
  // Park the word: from here until the store below, acquirers wait or refuse, and their
  // in-flight CASes fail, so none is judged by a mix of old and new parameters. Only SetRate
  // parks it, and SetRate is serialized, so what we take out is a real word.
  const double word = word_.exchange(kParked, std::memory_order_acq_rel);
  const double old_npt = nanos_per_token_.load(std::memory_order_relaxed);  // we are the writer
  const double old_burst = burst_.load(std::memory_order_relaxed);
  const double zero = word - offset_.load(std::memory_order_relaxed);
  const double npt = NanosPerToken(rate);
  double new_zero = zero;  // meaningless while closed or unlimited; kept finite
  if (!IsClosed(npt) && !IsUnlimited(npt)) {
    double balance;
    if (IsUnlimited(old_npt)) {
      balance = burst;  // leaving unlimited: start full
    } else if (IsClosed(old_npt)) {
      balance = 0;  // leaving closed: start empty
    } else {
      balance = std::min(old_burst, (now - zero) / old_npt);  // negative while in debt
    }
    new_zero = now - std::min(balance, burst) * npt;
  }
  // The word moves up by one ulp and the offset absorbs the change of zero time. The word thus
  // never returns to a value an acquirer may still hold from before this call (no ABA: such an
  // acquirer may have read the parameters of this or a later generation, and its CAS must fail).
  const double new_word = std::nextafter(word, kUnlimited);
  offset_.store(new_word - new_zero, std::memory_order_release);
  nanos_per_token_.store(npt, std::memory_order_release);
  burst_.store(burst, std::memory_order_release);
  rate_.store(rate, std::memory_order_relaxed);
  given_burst_.store(given_burst, std::memory_order_relaxed);
  word_.store(new_word, std::memory_order_release);  // publishes the parameters above
  return absl::OkStatus();
}

}  // namespace flowctl
