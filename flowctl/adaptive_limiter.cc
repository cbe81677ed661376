#include "flowctl/adaptive_limiter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace flowctl {
namespace {

// A window closed by time needs this many samples (or a drop) to judge: fewer are noise.
constexpr int64_t kMinTimedWindowSamples = 10;

absl::Status OptionError(absl::string_view option, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(option, ": ", message));
}

}  // namespace

absl::Status ValidateAdaptiveLimiterOptions(const AdaptiveLimiterOptions& o) {
  if (o.min_limit < 1) {
    return OptionError("min_limit", absl::StrCat("must be >= 1, got ", o.min_limit));
  }
  if (o.max_limit < o.min_limit) {
    return OptionError("max_limit",
                       absl::StrCat("must be >= min_limit (", o.min_limit, "), got ", o.max_limit));
  }
  if (!(o.tolerance >= 1) || !std::isfinite(o.tolerance)) {
    return OptionError("tolerance", absl::StrCat("must be finite and >= 1, got ", o.tolerance));
  }
  if (o.target_latency < absl::ZeroDuration()) {
    return OptionError("target_latency", "must be >= 0");
  }
  if (o.max_latency < absl::ZeroDuration() ||
      (o.max_latency > absl::ZeroDuration() && o.max_latency < o.target_latency)) {
    return OptionError("max_latency", absl::StrCat("must be 0 (none) or >= target_latency (",
                                                   absl::FormatDuration(o.target_latency),
                                                   "), got ", absl::FormatDuration(o.max_latency)));
  }
  if (!(o.increase_step >= 0) || !std::isfinite(o.increase_step)) {
    return OptionError("increase_step",
                       absl::StrCat("must be finite and >= 0, got ", o.increase_step));
  }
  if (!(o.decrease_factor > 0 && o.decrease_factor < 1)) {
    return OptionError("decrease_factor",
                       absl::StrCat("must be in (0, 1), got ", o.decrease_factor));
  }
  if (o.window_samples < 1) {
    return OptionError("window_samples", absl::StrCat("must be >= 1, got ", o.window_samples));
  }
  if (o.window <= absl::ZeroDuration()) return OptionError("window", "must be > 0");
  if (!(o.quantile > 0 && o.quantile <= 1)) {
    return OptionError("quantile", absl::StrCat("must be in (0, 1], got ", o.quantile));
  }
  if (!(o.baseline_drift >= 0 && o.baseline_drift <= 1)) {
    return OptionError("baseline_drift", absl::StrCat("must be in [0, 1], got ", o.baseline_drift));
  }
  if (o.max_hold <= absl::ZeroDuration()) return OptionError("max_hold", "must be > 0");
  return absl::OkStatus();
}

AdaptiveLimiter::AdaptiveLimiter(const AdaptiveLimiterOptions& options, const Clock* clock)
    : clock_(clock),
      limit_(0),
      max_hold_nanos_(absl::ToInt64Nanoseconds(options.max_hold)),
      options_(options),
      exact_limit_(0) {
  const absl::Status valid = ValidateAdaptiveLimiterOptions(options);
  CHECK(valid.ok()) << valid;
  CHECK(clock_ != nullptr);
  absl::MutexLock lock(&mu_);
  window_start_ = clock_->NowNanos();
  SetLimitLocked(static_cast<double>(options.initial_limit));
}

AdaptiveLimiter::Permit AdaptiveLimiter::TryAcquire() {
  int64_t n = in_flight_.load(std::memory_order_relaxed);
  while (true) {
    if (n >= limit_.load(std::memory_order_relaxed)) {
      // Read before writing so a flood of refusals does not keep bouncing the cache line.
      if (!refused_.load(std::memory_order_relaxed)) {
        refused_.store(true, std::memory_order_relaxed);
      }
      return Permit();
    }
    if (in_flight_.compare_exchange_weak(n, n + 1, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
      return Permit(this);
    }
  }
}

AdaptiveLimiter::Ticket AdaptiveLimiter::Track(std::shared_ptr<AdaptiveLimiter> limiter,
                                               int64_t admitted_nanos) {
  CHECK(limiter != nullptr);
  limiter->in_flight_.fetch_add(1, std::memory_order_acquire);
  return Ticket(std::move(limiter), admitted_nanos);
}

void AdaptiveLimiter::Ticket::Commit(int64_t now_nanos) {
  if (limiter_ == nullptr) return;
  std::shared_ptr<AdaptiveLimiter> limiter = std::move(limiter_);
  limiter_ = nullptr;
  limiter->OnSample(admitted_nanos_, /*timed_out=*/false, now_nanos);
}

void AdaptiveLimiter::Ticket::Commit() {
  if (limiter_ != nullptr) Commit(limiter_->clock()->NowNanos());
}

void AdaptiveLimiter::Ticket::Drop() {
  if (limiter_ == nullptr) return;
  std::shared_ptr<AdaptiveLimiter> limiter = std::move(limiter_);
  limiter_ = nullptr;
  limiter->OnDrop();
}

bool AdaptiveLimiter::Ticket::Overdue(int64_t now) const {
  return limiter_ != nullptr &&
         now - admitted_nanos_ > limiter_->max_hold_nanos_.load(std::memory_order_relaxed);
}

void AdaptiveLimiter::Ticket::Timeout(int64_t now_nanos) {
  if (limiter_ == nullptr) return;
  std::shared_ptr<AdaptiveLimiter> limiter = std::move(limiter_);
  limiter_ = nullptr;
  limiter->OnTimeout(admitted_nanos_, now_nanos);
}

void AdaptiveLimiter::Ticket::Timeout() {
  if (limiter_ != nullptr) Timeout(limiter_->clock()->NowNanos());
}

void AdaptiveLimiter::Ticket::Waive() {
  if (limiter_ == nullptr) return;
  std::exchange(limiter_, nullptr)->OnWaive();
}

void AdaptiveLimiter::SetOptions(const AdaptiveLimiterOptions& options) {
  const absl::Status valid = ValidateAdaptiveLimiterOptions(options);
  CHECK(valid.ok()) << valid;
  max_hold_nanos_.store(absl::ToInt64Nanoseconds(options.max_hold), std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  options_ = options;
  SetLimitLocked(exact_limit_);
}

AdaptiveLimiterOptions AdaptiveLimiter::options() const {
  absl::MutexLock lock(&mu_);
  return options_;
}

AdaptiveLimiterState AdaptiveLimiter::State() const {
  absl::MutexLock lock(&mu_);
  AdaptiveLimiterState s = state_;
  s.limit = limit();
  s.in_flight = in_flight();
  return s;
}

void AdaptiveLimiter::SetLimitLocked(double limit) {
  exact_limit_ = std::clamp(limit, static_cast<double>(options_.min_limit),
                            static_cast<double>(options_.max_limit));
  limit_.store(static_cast<int64_t>(exact_limit_), std::memory_order_relaxed);
}

void AdaptiveLimiter::OnSample(int64_t admitted_nanos, bool timed_out, int64_t now) {
  // Counted before the release: the peak says whether the limit was in use.
  const int64_t in_flight_before = in_flight_.load(std::memory_order_relaxed);
  ReleaseOne();
  absl::MutexLock lock(&mu_);
  ++(timed_out ? state_.timeouts : state_.samples);
  window_peak_in_flight_ = std::max(window_peak_in_flight_, in_flight_before);
  if (admitted_nanos < ignore_before_) {
    ++state_.stale_samples;
  } else {
    window_.push_back(std::max<int64_t>(0, now - admitted_nanos));
  }
  MaybeCloseWindowLocked(now);
}

void AdaptiveLimiter::OnDrop() {
  const int64_t in_flight_before = in_flight_.load(std::memory_order_relaxed);
  ReleaseOne();
  const int64_t now = clock_->NowNanos();
  absl::MutexLock lock(&mu_);
  ++state_.drops;
  ++window_drops_;
  window_peak_in_flight_ = std::max(window_peak_in_flight_, in_flight_before);
  MaybeCloseWindowLocked(now);
}

void AdaptiveLimiter::OnTimeout(int64_t admitted_nanos, int64_t now) {
  // A censored sample: the unit took at least this long. Without it, units held past max_hold
  // would give their slots back silently, admission would run at the commit rate plus the
  // timeout rate, and the limit would never see the latency that made them time out.
  OnSample(admitted_nanos, /*timed_out=*/true, now);
}

void AdaptiveLimiter::OnWaive() {
  ReleaseOne();
  absl::MutexLock lock(&mu_);
  ++state_.waived;
}

void AdaptiveLimiter::MaybeCloseWindowLocked(int64_t now) {
  const int64_t samples = static_cast<int64_t>(window_.size());
  const bool full = samples >= options_.window_samples;
  const bool timed =
      now - window_start_ >= absl::ToInt64Nanoseconds(options_.window) &&
      (samples >= std::min(options_.window_samples, kMinTimedWindowSamples) || window_drops_ > 0);
  if (!full && !timed) return;

  ++state_.windows;
  bool decrease = window_drops_ > 0;
  if (samples > 0) {
    // The window's latency: its quantile sample (nearest rank).
    const size_t rank =
        static_cast<size_t>(std::ceil(options_.quantile * static_cast<double>(samples))) - 1;
    std::nth_element(window_.begin(), window_.begin() + static_cast<ptrdiff_t>(rank),
                     window_.end());
    const int64_t latency = window_[rank];
    state_.window_latency_nanos = latency;
    double threshold = state_.baseline_nanos > 0
                           ? options_.tolerance * static_cast<double>(state_.baseline_nanos)
                           : std::numeric_limits<double>::infinity();
    if (options_.target_latency > absl::ZeroDuration()) {
      threshold = std::max(threshold, absl::ToDoubleNanoseconds(options_.target_latency));
    }
    if (options_.max_latency > absl::ZeroDuration()) {
      threshold = std::min(threshold, absl::ToDoubleNanoseconds(options_.max_latency));
    }
    if (static_cast<double>(latency) > threshold) decrease = true;
    // The baseline follows the lowest latency down at once and up only slowly.
    if (state_.baseline_nanos == 0 || latency < state_.baseline_nanos) {
      state_.baseline_nanos = std::max<int64_t>(1, latency);
    } else {
      int64_t drifted =
          std::llround(static_cast<double>(state_.baseline_nanos) * (1 + options_.baseline_drift));
      if (options_.baseline_drift > 0) drifted = std::max(drifted, state_.baseline_nanos + 1);
      state_.baseline_nanos = std::min(latency, drifted);
    }
  }
  if (decrease) {
    SetLimitLocked(exact_limit_ * options_.decrease_factor);
    ignore_before_ = now;
    ++state_.decreases;
  } else if (samples > 0 &&
             (refused_.load(std::memory_order_relaxed) || 2 * window_peak_in_flight_ >= limit())) {
    // Grow only a limit that was in use (it refused someone, or half of it was held: Netflix's
    // app-limited check): an idle node would otherwise raise it without bound and admit a burst
    // far above what commits.
    const double step =
        options_.increase_step > 0 ? options_.increase_step : std::sqrt(exact_limit_);
    SetLimitLocked(exact_limit_ + step);
    ++state_.increases;
  }
  window_.clear();
  window_drops_ = 0;
  refused_.store(false, std::memory_order_relaxed);
  window_peak_in_flight_ = in_flight();
  window_start_ = now;
}

}  // namespace flowctl
