#include "flowctl/token_bucket.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace flowctl {
namespace {

// Tolerance, in nanoseconds, for float rounding when comparing "tokens are there" with now.
constexpr double kSlackNanos = 1e-3;

bool IsClosed(double rate) { return rate <= 0; }
bool IsUnlimited(double rate) { return std::isinf(rate); }
double NanosPerToken(double rate) { return static_cast<double>(kNanosPerSecond) / rate; }

}  // namespace

absl::Status TokenBucket::ValidateParams(double rate, double burst) {
  if (std::isnan(rate) || rate < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token bucket: rate must be >= 0 tokens/s (0 = closed), got ", rate));
  }
  if (std::isnan(burst) || std::isinf(burst) || burst < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token bucket: burst must be finite and >= 0 tokens, got ", burst));
  }
  return absl::OkStatus();
}

TokenBucket::TokenBucket(double rate, double burst, const Clock* clock)
    : clock_(clock), origin_(clock->NowNanos()), rate_(rate), burst_(burst), zero_time_(0) {
  const absl::Status valid = ValidateParams(rate, burst);
  CHECK(valid.ok()) << valid;
  if (!IsClosed(rate) && !IsUnlimited(rate)) {
    zero_time_.store(-burst * NanosPerToken(rate), std::memory_order_relaxed);  // full
  }
}

bool TokenBucket::TryAcquireAt(double n, int64_t now_nanos) {
  const double rate = rate_.load(std::memory_order_relaxed);
  if (IsUnlimited(rate)) return true;
  if (IsClosed(rate)) return false;
  const double burst = burst_.load(std::memory_order_relaxed);
  const double npt = NanosPerToken(rate);
  const double now = RelNow(now_nanos);
  const double full_at = now - burst * npt;  // zero time of a full bucket
  const double need = std::min(n, burst) * npt;
  double zero = zero_time_.load(std::memory_order_acquire);
  while (true) {
    const double base = std::max(zero, full_at);
    if (base + need > now + kSlackNanos) return false;
    if (zero_time_.compare_exchange_weak(zero, base + n * npt, std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
      return true;
    }
  }
}

void TokenBucket::ConsumeAt(double n, int64_t now_nanos) {
  const double rate = rate_.load(std::memory_order_relaxed);
  if (IsUnlimited(rate) || IsClosed(rate)) return;
  const double npt = NanosPerToken(rate);
  const double full_at = RelNow(now_nanos) - burst_.load(std::memory_order_relaxed) * npt;
  double zero = zero_time_.load(std::memory_order_acquire);
  while (!zero_time_.compare_exchange_weak(zero, std::max(zero, full_at) + n * npt,
                                           std::memory_order_acq_rel,
                                           std::memory_order_acquire)) {
  }
}

int64_t TokenBucket::NanosUntilAt(double n, int64_t now_nanos) const {
  const double rate = rate_.load(std::memory_order_relaxed);
  if (IsUnlimited(rate)) return 0;
  if (IsClosed(rate)) return kNever;
  const double burst = burst_.load(std::memory_order_relaxed);
  const double npt = NanosPerToken(rate);
  const double now = RelNow(now_nanos);
  const double base = std::max(zero_time_.load(std::memory_order_acquire), now - burst * npt);
  const double wait = base + std::min(n, burst) * npt - now;
  if (wait <= kSlackNanos) return 0;
  if (wait >= static_cast<double>(kNever)) return kNever;
  return static_cast<int64_t>(std::ceil(wait));
}

double TokenBucket::AvailableAt(int64_t now_nanos) const {
  const double rate = rate_.load(std::memory_order_relaxed);
  if (IsUnlimited(rate)) return kUnlimited;
  if (IsClosed(rate)) return 0;
  const double burst = burst_.load(std::memory_order_relaxed);
  const double tokens =
      (RelNow(now_nanos) - zero_time_.load(std::memory_order_acquire)) / NanosPerToken(rate);
  return std::min(burst, tokens);
}

absl::Status TokenBucket::SetRate(double rate, double burst) {
  if (absl::Status s = ValidateParams(rate, burst); !s.ok()) return s;
  absl::MutexLock lock(&set_mu_);
  const double old_rate = rate_.load(std::memory_order_relaxed);
  const double old_burst = burst_.load(std::memory_order_relaxed);
  const int64_t now_nanos = clock_->NowNanos();
  const double now = RelNow(now_nanos);
  double zero = zero_time_.load(std::memory_order_acquire);
  // Publish the parameters first, then move the zero time; acquisitions in between may be judged
  // by a mix of old and new parameters, which the header allows.
  rate_.store(rate, std::memory_order_relaxed);
  burst_.store(burst, std::memory_order_relaxed);
  if (IsClosed(rate) || IsUnlimited(rate)) return absl::OkStatus();
  const double npt = NanosPerToken(rate);
  while (true) {
    double balance;
    if (IsUnlimited(old_rate)) {
      balance = burst;
    } else if (IsClosed(old_rate)) {
      balance = 0;
    } else {
      balance = std::min(old_burst, (now - zero) / NanosPerToken(old_rate));
    }
    balance = std::min(balance, burst);
    if (zero_time_.compare_exchange_weak(zero, now - balance * npt, std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
      return absl::OkStatus();
    }
  }
}

}  // namespace flowctl
