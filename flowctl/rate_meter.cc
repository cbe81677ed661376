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
  rate_.store(measured() ? options_.weight * r + (1 - options_.weight) * last : r,
              std::memory_order_relaxed);
  measured_.store(true, std::memory_order_relaxed);
  window_start_ = now_nanos;
  window_count_ = count;
}

void BacklogRateMeter::Reset() {
  window_start_ = 0;
  rate_.store(0, std::memory_order_relaxed);
  measured_.store(false, std::memory_order_relaxed);
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
  const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(1e9 / rate_per_second));
  const int64_t earliest = now_nanos + absl::ToInt64Nanoseconds(first);
  const int64_t latest = now_nanos + absl::ToInt64Nanoseconds(bounds.max);
  int64_t next = next_nanos_.load(std::memory_order_relaxed);
  int64_t mine = 0;
  do {
    mine = std::min(std::max(next, earliest), latest);
  } while (!next_nanos_.compare_exchange_weak(next, mine + step, std::memory_order_relaxed));
  return absl::Nanoseconds(mine - now_nanos);
}

absl::Duration RetrySlots::Peek(int64_t now_nanos, absl::Duration room,
                                const RetryAfterBounds& bounds) const {
  const int64_t next = next_nanos_.load(std::memory_order_relaxed);
  const absl::Duration first = std::clamp(room, bounds.min, bounds.max);
  return std::clamp(std::max(first, absl::Nanoseconds(next - now_nanos)), bounds.min, bounds.max);
}

}  // namespace flowctl
