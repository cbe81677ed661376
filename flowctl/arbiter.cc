#include "flowctl/arbiter.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace flowctl {
namespace {

absl::Status ConsumerError(size_t index, const char* field, const char* rule, double got) {
  return absl::InvalidArgumentError(
      absl::StrCat("consumers[", index, "].", field, ": ", rule, ", got ", got));
}

absl::Status Validate(double capacity, absl::Span<const ArbiterConsumer> consumers) {
  if (!std::isfinite(capacity) || capacity < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity: must be finite and >= 0, got ", capacity));
  }
  for (size_t i = 0; i < consumers.size(); ++i) {
    const ArbiterConsumer& c = consumers[i];
    if (!std::isfinite(c.weight) || !(c.weight > 0)) {
      return ConsumerError(i, "weight", "must be > 0 and finite", c.weight);
    }
    if (!std::isfinite(c.guarantee) || c.guarantee < 0) {
      return ConsumerError(i, "guarantee", "must be finite and >= 0", c.guarantee);
    }
    if (std::isnan(c.ceiling) || c.ceiling < c.guarantee) {
      return ConsumerError(i, "ceiling", "must be >= guarantee (kNoCeiling for none)", c.ceiling);
    }
    if (std::isnan(c.demand) || c.demand < 0) {
      return ConsumerError(i, "demand", "must be >= 0", c.demand);
    }
  }
  return absl::OkStatus();
}

// A point on the water level where a consumer starts rising above its floor (+weight to the
// slope) or stops at its cap (-weight).
struct Event {
  double level;
  double slope_change;
};

}  // namespace

absl::StatusOr<std::vector<double>> AllocateFairShares(
    double capacity, absl::Span<const ArbiterConsumer> consumers) {
  if (absl::Status valid = Validate(capacity, consumers); !valid.ok()) return valid;
  const size_t n = consumers.size();
  std::vector<double> cap(n);
  std::vector<double> floor(n);
  double floors = 0;
  double caps = 0;
  for (size_t i = 0; i < n; ++i) {
    cap[i] = std::min(consumers[i].demand, consumers[i].ceiling);
    floor[i] = std::min(consumers[i].guarantee, cap[i]);
    floors += floor[i];
    caps += cap[i];
  }

  // Guarantees do not fit: scale them down proportionally, nothing is left for anyone else.
  if (floors >= capacity) {
    std::vector<double> share(n, 0.0);
    if (floors > 0) {
      for (size_t i = 0; i < n; ++i) share[i] = floor[i] * (capacity / floors);
    }
    return share;
  }
  // Everybody can be satisfied.
  if (caps <= capacity) return cap;

  // Water-filling: f(level) = sum clamp(level * w_i, floor_i, cap_i) is continuous, piecewise
  // linear and non-decreasing; find the level where it reaches capacity by walking the
  // breakpoints in order. f(0) = floors < capacity < caps = f(inf), so a solution exists.
  std::vector<Event> events;
  events.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    if (floor[i] >= cap[i]) continue;  // pinned: never rises
    const double w = consumers[i].weight;
    events.push_back({floor[i] / w, w});
    if (std::isfinite(cap[i])) events.push_back({cap[i] / w, -w});
  }
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.level < b.level; });
  double level = 0;
  double total = floors;
  double slope = 0;  // sum of the weights of the consumers rising between breakpoints
  bool found = false;
  for (const Event& event : events) {
    if (slope > 0 && total + slope * (event.level - level) >= capacity) {
      level += (capacity - total) / slope;
      found = true;
      break;
    }
    total += slope * (event.level - level);
    level = event.level;
    slope += event.slope_change;
  }
  // Past the last breakpoint only uncapped consumers rise, and there is one since caps > capacity.
  if (!found && slope > 0) level += (capacity - total) / slope;

  // Refine the level from the consumers that are strictly rising at it, so the total is capacity
  // up to one rounding rather than the accumulated error of the walk.
  double fixed = 0;
  double rising_weight = 0;
  for (size_t i = 0; i < n; ++i) {
    const double want = level * consumers[i].weight;
    if (want <= floor[i]) {
      fixed += floor[i];
    } else if (want >= cap[i]) {
      fixed += cap[i];
    } else {
      rising_weight += consumers[i].weight;
    }
  }
  if (rising_weight > 0 && fixed < capacity) level = (capacity - fixed) / rising_weight;

  std::vector<double> share(n);
  for (size_t i = 0; i < n; ++i) {
    share[i] = std::clamp(level * consumers[i].weight, floor[i], cap[i]);
  }
  return share;
}

}  // namespace flowctl
