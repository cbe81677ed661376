#include "flowctl/pacer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace flowctl {
namespace {

// Release times further out than this (~146 years) are refused whatever the horizon, so every
// time handed out stays far from int64 overflow.
constexpr double kMaxDelayNanos = 4.6e18;

double NanosPerUnit(double rate) {
  if (rate <= 0) return std::numeric_limits<double>::infinity();
  if (std::isinf(rate)) return 0;
  return static_cast<double>(kNanosPerSecond) / std::max(rate, Pacer::kMinRate);
}

bool ValidRate(double rate) { return rate >= 0; }  // false for NaN

absl::Status ValidateMaxDelay(absl::Duration max_delay) {
  if (max_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pacer: max_delay must be >= 0, got ", absl::FormatDuration(max_delay)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Pacer::ValidateParams(double rate, absl::Duration max_delay) {
  if (!ValidRate(rate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pacer: rate must be >= 0 units/s (0 = closed), got ", rate));
  }
  return ValidateMaxDelay(max_delay);
}

Pacer::Pacer(double rate, absl::Duration max_delay, const Clock* clock)
    : clock_(clock), rate_(rate), nanos_per_unit_(NanosPerUnit(rate)), max_delay_(max_delay) {
  const absl::Status valid = ValidateParams(rate, max_delay);
  CHECK(valid.ok()) << valid;
}

double Pacer::DelayAt(int64_t now_nanos) const {
  if (!booked_) return -std::numeric_limits<double>::infinity();
  return static_cast<double>(last_start_nanos_ - now_nanos) + last_start_frac_ +
         last_cost_ * nanos_per_unit_;
}

absl::StatusOr<int64_t> Pacer::ReserveAt(double cost, int64_t now_nanos) {
  if (!(cost >= 0 && cost <= kMaxCost)) {
    return absl::InvalidArgumentError(
        absl::StrCat("pacer: cost must be in [0, ", kMaxCost, "], got ", cost));
  }
  absl::MutexLock lock(&mu_);
  if (std::isinf(nanos_per_unit_)) return absl::UnavailableError("pacer: closed (rate 0)");
  if (nanos_per_unit_ == 0) return now_nanos;  // unlimited: nothing to space
  const double delay = DelayAt(now_nanos);
  int64_t start_nanos = now_nanos;
  double start_frac = 0;
  if (delay > 0) {
    const double horizon = max_delay_ == absl::InfiniteDuration()
                               ? kMaxDelayNanos
                               : std::min(kMaxDelayNanos, absl::ToDoubleNanoseconds(max_delay_));
    if (delay > horizon) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "pacer: release would wait ", absl::FormatDuration(absl::Nanoseconds(delay)),
          ", over the horizon of ", absl::FormatDuration(max_delay_)));
    }
    // Exact start = last start + last cost's spacing, carried in whole + fractional nanoseconds
    // so rounding never accumulates into drift.
    const double sum = last_start_frac_ + last_cost_ * nanos_per_unit_;
    const double whole = std::floor(sum);
    start_nanos = last_start_nanos_ + static_cast<int64_t>(whole);
    start_frac = sum - whole;
  }
  booked_ = true;
  last_start_nanos_ = start_nanos;
  last_start_frac_ = start_frac;
  last_cost_ = cost;
  return start_frac > 0 ? start_nanos + 1 : start_nanos;
}

int64_t Pacer::BacklogNanosAt(int64_t now_nanos) const {
  absl::MutexLock lock(&mu_);
  if (std::isinf(nanos_per_unit_)) return std::numeric_limits<int64_t>::max();
  if (nanos_per_unit_ == 0) return 0;
  const double delay = DelayAt(now_nanos);
  if (delay <= 0) return 0;
  if (delay >= kMaxDelayNanos) return static_cast<int64_t>(kMaxDelayNanos);
  return static_cast<int64_t>(std::ceil(delay));
}

absl::Status Pacer::SetRate(double rate) {
  if (!ValidRate(rate)) return ValidateParams(rate, absl::ZeroDuration());
  absl::MutexLock lock(&mu_);
  rate_ = rate;
  nanos_per_unit_ = NanosPerUnit(rate);
  // Unlimited releases at once and books nothing, so the queue it leaves behind is empty.
  if (nanos_per_unit_ == 0) booked_ = false;
  return absl::OkStatus();
}

absl::Status Pacer::SetMaxDelay(absl::Duration max_delay) {
  if (absl::Status s = ValidateMaxDelay(max_delay); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  max_delay_ = max_delay;
  return absl::OkStatus();
}

double Pacer::rate() const {
  absl::MutexLock lock(&mu_);
  return rate_;
}

absl::Duration Pacer::max_delay() const {
  absl::MutexLock lock(&mu_);
  return max_delay_;
}

}  // namespace flowctl
