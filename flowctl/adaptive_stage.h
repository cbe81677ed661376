// The `adaptive` interceptor stage: admits while this node's uncommitted admissions are below an
// AdaptiveLimiter's limit (adaptive_limiter.h), which follows commit latency.
//
// Check() takes a Permit into the request's HoldList (released if anything refuses the request
// later) and rejects as overloaded. The stage follows admitted requests (lifecycle() is its
// AdaptiveTickets, adaptive_tickets.h): when the caller reports a request pooled (through its
// Admission, before the permit goes) the stage takes a Ticket of its own, by request id, and
// releases it on commit (a latency sample), drop, or what its OnTick finds (timeout, waiver, gone
// from the pool). The caller needs no handle on the limiter and no cast. A chain holds at most one
// adaptive stage (the registry refuses more). A live update keeps the stage object, and so its
// limit and tickets.
//
// Thread-safety: Check, AppendGauges, the lifecycle and the factory's UpdateInPlace are
// thread-safe; Check is lock-free (one CAS).
//
//   ASSIGN_OR_RETURN(auto factory, flowctl::MakeAdaptiveFactory("adaptive", config, "stages[1]"));
//   auto chain = flowctl::StageChain::Of(context, {factory->Create(context)});
//   flowctl::Admission a = flowctl::Admit(chain, meta);
//   a.Pooled(tx_hash);  a.Finish();  ...  chain->Committed({tx_hash}, now);
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
#include "flowctl/adaptive_tickets.h"
#include "flowctl/stage.h"
#include "flowctl/stage_chain.h"
#include "proto/flowctl.pb.h"

namespace flowctl {

inline constexpr absl::string_view kAdaptiveKind = "adaptive";
inline constexpr absl::Duration kDefaultAdaptiveRetryAfter = absl::Milliseconds(20);

class AdaptiveStage final : public Stage {
 public:
  AdaptiveStage(std::string name, const AdaptiveLimiterOptions& options, absl::Duration retry_after,
                const Clock* clock);

  absl::string_view name() const override { return name_; }
  absl::string_view kind() const override { return kAdaptiveKind; }
  Decision Check(const RequestMeta& request, HoldList& holds) override;
  // "in_flight", "limit" (first, as for `concurrency`), "baseline_latency_ms",
  // "window_latency_ms", "increases", "decreases", "drops", "timeouts", "waived", "tickets".
  void AppendGauges(std::vector<StageGauge>& gauges) const override;
  // Its tickets: never null.
  RequestLifecycle* lifecycle() override { return &tickets_; }

  // Live change keeping the limit, baseline, in-flight count and tickets. REQUIRES: options
  // valid.
  void Set(const AdaptiveLimiterOptions& options, absl::Duration retry_after);

  const std::shared_ptr<AdaptiveLimiter>& limiter() const { return limiter_; }
  const AdaptiveTickets& tickets() const { return tickets_; }

 private:
  const std::string name_;
  const std::shared_ptr<AdaptiveLimiter> limiter_;  // never null
  std::atomic<int64_t> retry_after_nanos_;
  AdaptiveTickets tickets_;
};

absl::StatusOr<std::unique_ptr<StageFactory>> MakeAdaptiveFactory(
    std::string name, const node::flowctl::AdaptiveStageConfig& config, absl::string_view field);

}  // namespace flowctl

#endif  // FLOWCTL_ADAPTIVE_STAGE_H_
