#include "flowctl/rate_meter.h"

#include <algorithm>
#include <cmath>

namespace flowctl {

void BacklogRateMeter::Observe(int64_t now_nanos, uint64_t count, bool backlogged) {
  if (!backlogged) {
    window_start_ = 0;  // ran dry: what follows measures the arrivals, not the service
    return;
  }
  if (window_start_ == 0 || count < window_count_ || now_nanos < window_start_) {
    window_start_ = std::max<int64_t>(now_nanos, 1);
    window_count_ = count;
    return;
  }
  const int64_t elapsed = now_nanos - window_start_;
  if (elapsed < absl::ToInt64Nanoseconds(options_.min_window)) return;
  const double r = static_cast<double>(count - window_count_) * 1e9 / static_cast<double>(elapsed);
  const double last = rate_.load(std::memory_order_relaxed);
  // A window without service is a stall, said as it is (not averaged towards 0 over many windows);
  // the first window with service after it, or after none, replaces it.
  const double next = (r > 0 && last > 0) ? options_.weight * r + (1 - options_.weight) * last : r;
  rate_.store(next, std::memory_order_relaxed);
  window_start_ = now_nanos;
  window_count_ = count;
}

void BacklogRateMeter::Reset() {
  window_start_ = 0;
  rate_.store(-1, std::memory_order_relaxed);
}

absl::Duration RetryAfterFor(double units, double rate_per_second, const RetryAfterBounds& bounds) {
  if (std::isnan(rate_per_second) || rate_per_second < 0) return bounds.unknown;
  if (rate_per_second == 0) return bounds.max;
  const double seconds = std::max(units, 0.0) / rate_per_second;
  const double max_s = absl::ToDoubleSeconds(bounds.max);
  if (!(seconds < max_s)) return bounds.max;
  return std::clamp(absl::Seconds(seconds), bounds.min, bounds.max);
}

absl::Duration RetrySlots::Take(int64_t now_nanos, absl::Duration room, double rate_per_second,
                                const RetryAfterBounds& bounds) {
  const absl::Duration first = std::clamp(room, bounds.min, bounds.max);
  if (!(rate_per_second > 0) || !std::isfinite(rate_per_second)) return first;
  const int64_t max_nanos = absl::ToInt64Nanoseconds(bounds.max);
  // One unit of service, in [1 ns, bounds.max] (a tiny rate must not overflow anything).
  const auto step = static_cast<int64_t>(
      std::clamp(1e9 / rate_per_second, 1.0, static_cast<double>(std::max<int64_t>(max_nanos, 1))));
  const int64_t earliest = now_nanos + absl::ToInt64Nanoseconds(first);
  const int64_t latest = now_nanos + max_nanos;
  // The queue was built at another rate (a stall, a recovery): start it afresh, or a stall's
  // 10 s slots would outlive the stall.
  const double was = rate_.exchange(rate_per_second, std::memory_order_relaxed);
  if (was > 0 && (rate_per_second > 2 * was || rate_per_second < was / 2)) {
    next_nanos_.store(0, std::memory_order_relaxed);
  }
  int64_t next = next_nanos_.load(std::memory_order_relaxed);
  int64_t mine = 0;
  do {
    mine = std::min(std::max(next, earliest), latest);
  } while (!next_nanos_.compare_exchange_weak(next, mine + step, std::memory_order_relaxed));
  return absl::Nanoseconds(mine - now_nanos);
}

absl::Duration RetrySlots::Peek(int64_t now_nanos, absl::Duration room, double rate_per_second,
                                const RetryAfterBounds& bounds) const {
  const absl::Duration first = std::clamp(room, bounds.min, bounds.max);
  if (!(rate_per_second > 0) || !std::isfinite(rate_per_second)) return first;
  const double was = rate_.load(std::memory_order_relaxed);
  if (was > 0 && (rate_per_second > 2 * was || rate_per_second < was / 2)) return first;  // as Take
  const int64_t next = next_nanos_.load(std::memory_order_relaxed);
  return std::clamp(std::max(first, absl::Nanoseconds(next - now_nanos)), bounds.min, bounds.max);
}

}  // namespace flowctl
