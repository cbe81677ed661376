// The `adaptive` interceptor stage: admits while this node's uncommitted admissions are below an
// AdaptiveLimiter's limit (adaptive_limiter.h), which follows commit latency.
//
// Check() takes a Permit into the request's HoldList (released if anything refuses the request
// later). The partition, when it hands the tx to its pool, takes a Ticket from the same limiter
// (FindAdaptiveLimiter on its current chain) before the Admission is finished, and reports the
// tx's commit (Ticket::Commit, a latency sample) or its leaving the pool uncommitted
// (Ticket::Drop), and releases tickets held past max_hold (Ticket::Timeout, a censored latency
// sample). A chain holds at most one adaptive stage (StageRegistry refuses more), so the feedback
// has one destination.
//
// Thread-safety: Check, AppendGauges and the factory's UpdateInPlace are thread-safe; Check is
// lock-free (one CAS).
//
//   ASSIGN_OR_RETURN(auto factory, flowctl::MakeAdaptiveFactory("adaptive", config, "stages[1]"));
//   auto chain = flowctl::StageChain::Of(context, {factory->Create(context)});
//   std::shared_ptr<flowctl::AdaptiveLimiter> limiter = flowctl::FindAdaptiveLimiter(*chain);
#ifndef FLOWCTL_ADAPTIVE_STAGE_H_
#define FLOWCTL_ADAPTIVE_STAGE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "flowctl/adaptive_config.h"  // AdaptiveOptionsFromConfig
#include "flowctl/adaptive_limiter.h"
#include "flowctl/stage.h"
#include "flowctl/stage_chain.h"
#include "proto/flowctl.pb.h"

namespace flowctl {

inline constexpr absl::string_view kAdaptiveKind = "adaptive";
inline constexpr absl::Duration kDefaultAdaptiveRetryAfter = absl::Milliseconds(20);

class AdaptiveStage final : public Stage {
 public:
  AdaptiveStage(std::string name, const AdaptiveLimiterOptions& options,
                absl::Duration retry_after, const Clock* clock);

  absl::string_view name() const override { return name_; }
  absl::string_view kind() const override { return kAdaptiveKind; }
  Decision Check(const RequestMeta& request, HoldList& holds) override;
  // "in_flight", "limit" (first, as for `concurrency`), "baseline_latency_ms",
  // "window_latency_ms", "increases", "decreases", "drops", "timeouts".
  void AppendGauges(std::vector<StageGauge>& gauges) const override;

  // Live change keeping the limit, baseline and in-flight count. REQUIRES: options valid.
  void Set(const AdaptiveLimiterOptions& options, absl::Duration retry_after);

  const std::shared_ptr<AdaptiveLimiter>& limiter() const { return limiter_; }

 private:
  const std::string name_;
  const std::shared_ptr<AdaptiveLimiter> limiter_;  // never null
  std::atomic<int64_t> retry_after_nanos_;
};

absl::StatusOr<std::unique_ptr<StageFactory>> MakeAdaptiveFactory(
    std::string name, const node::flowctl::AdaptiveStageConfig& config, absl::string_view field);

// The limiter of the chain's adaptive stage, or null if it has none. Thread-safe.
std::shared_ptr<AdaptiveLimiter> FindAdaptiveLimiter(const StageChain& chain);

}  // namespace flowctl

#endif  // FLOWCTL_ADAPTIVE_STAGE_H_
