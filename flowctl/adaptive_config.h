// AdaptiveOptionsFromConfig: validates an AdaptiveStageConfig (proto/flowctl.proto) and
// converts it to AdaptiveLimiterOptions, filling the documented defaults; errors name
// "<field>.adaptive.<option>", e.g. "stages[1].adaptive.decrease_factor: must be in (0, 1) ...".
//
// Run by MakeAdaptiveFactory, so by every StageRegistry build (the node's config validation,
// runtime/config_validation.h, included). Pure function, thread-safe.
//
//   ASSIGN_OR_RETURN(flowctl::AdaptiveLimiterOptions options,
//                    flowctl::AdaptiveOptionsFromConfig(stage.adaptive(), "stages[1]"));
#ifndef FLOWCTL_ADAPTIVE_CONFIG_H_
#define FLOWCTL_ADAPTIVE_CONFIG_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "flowctl/adaptive_limiter.h"  // the options struct only (no library symbols)
#include "proto/flowctl.pb.h"

namespace flowctl {
namespace adaptive_config_internal {

inline absl::Status FieldError(absl::string_view field, absl::string_view option,
                               absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ".adaptive.", option, ": ", message));
}

}  // namespace adaptive_config_internal

inline absl::StatusOr<AdaptiveLimiterOptions> AdaptiveOptionsFromConfig(
    const node::flowctl::AdaptiveStageConfig& c, absl::string_view field) {
  using adaptive_config_internal::FieldError;
  AdaptiveLimiterOptions o;
  if (c.min_limit() > 0) o.min_limit = c.min_limit();
  if (c.max_limit() > 0) o.max_limit = c.max_limit();
  if (o.max_limit < o.min_limit) {
    return FieldError(
        field, "max_limit",
        absl::StrCat("must be >= min_limit (", o.min_limit, " txs), got ", o.max_limit));
  }
  if (c.initial_limit() == 0) {
    o.initial_limit = std::clamp<int64_t>(32, o.min_limit, o.max_limit);
  } else if (c.initial_limit() < o.min_limit || c.initial_limit() > o.max_limit) {
    return FieldError(
        field, "initial_limit",
        absl::StrCat("must be in [min_limit, max_limit] = [", o.min_limit, ", ", o.max_limit,
                     "] txs (0 for the default), got ", c.initial_limit()));
  } else {
    o.initial_limit = c.initial_limit();
  }
  if (c.tolerance() != 0) {
    if (!std::isfinite(c.tolerance()) || c.tolerance() < 1) {
      return FieldError(
          field, "tolerance",
          absl::StrCat("must be finite and >= 1 (0 for the default, 2), got ", c.tolerance()));
    }
    o.tolerance = c.tolerance();
  }
  o.target_latency = absl::Milliseconds(c.target_latency_ms());
  o.max_latency = absl::Milliseconds(c.max_latency_ms());
  if (c.max_latency_ms() > 0 && c.max_latency_ms() < c.target_latency_ms()) {
    return FieldError(field, "max_latency_ms",
                      absl::StrCat("must be 0 (none) or >= target_latency_ms (",
                                   c.target_latency_ms(), " ms), got ", c.max_latency_ms()));
  }
  if (!std::isfinite(c.increase_step()) || c.increase_step() < 0) {
    return FieldError(
        field, "increase_step",
        absl::StrCat("must be finite and >= 0 txs (0 means sqrt(limit)), got ", c.increase_step()));
  }
  o.increase_step = c.increase_step();
  if (c.decrease_factor() != 0) {
    if (!(c.decrease_factor() > 0 && c.decrease_factor() < 1)) {
      return FieldError(
          field, "decrease_factor",
          absl::StrCat("must be in (0, 1) (0 for the default, 0.8), got ", c.decrease_factor()));
    }
    o.decrease_factor = c.decrease_factor();
  }
  if (c.window_samples() > 0) o.window_samples = c.window_samples();
  if (c.window_ms() > 0) o.window = absl::Milliseconds(c.window_ms());
  if (c.quantile() != 0) {
    if (!(c.quantile() > 0 && c.quantile() <= 1)) {
      return FieldError(
          field, "quantile",
          absl::StrCat("must be in (0, 1] (0 for the default, 0.5), got ", c.quantile()));
    }
    o.quantile = c.quantile();
  }
  if (c.baseline_drift() != 0) {
    if (!(c.baseline_drift() > 0 && c.baseline_drift() <= 1)) {
      return FieldError(field, "baseline_drift",
                        absl::StrCat("must be in (0, 1] (0 for the default, 0.01; "
                                     "baseline_fixed for none), got ",
                                     c.baseline_drift()));
    }
    o.baseline_drift = c.baseline_drift();
  }
  if (c.baseline_fixed()) o.baseline_drift = 0;
  if (c.max_hold_ms() > 0) o.max_hold = absl::Milliseconds(c.max_hold_ms());
  return o;
}

}  // namespace flowctl

#endif  // FLOWCTL_ADAPTIVE_CONFIG_H_
