#include "flowctl/adaptive_stage.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace flowctl {
namespace {

constexpr absl::string_view kAdaptiveReason = "adaptive in-flight limit (follows commit latency)";

class AdaptiveFactory final : public StageFactory {
 public:
  AdaptiveFactory(std::string name, const AdaptiveLimiterOptions& options,
                  absl::Duration retry_after)
      : name_(std::move(name)), options_(options), retry_after_(retry_after) {}

  absl::string_view name() const override { return name_; }
  absl::string_view kind() const override { return kAdaptiveKind; }
  std::shared_ptr<Stage> Create(const StageContext& context) const override {
    return std::make_shared<AdaptiveStage>(name_, options_, retry_after_, context.clock);
  }
  bool UpdateInPlace(Stage& existing) const override {
    auto* stage = dynamic_cast<AdaptiveStage*>(&existing);
    if (stage == nullptr) return false;
    stage->Set(options_, retry_after_);
    return true;
  }

 private:
  const std::string name_;
  const AdaptiveLimiterOptions options_;
  const absl::Duration retry_after_;
};

}  // namespace

AdaptiveStage::AdaptiveStage(std::string name, const AdaptiveLimiterOptions& options,
                             absl::Duration retry_after, const Clock* clock)
    : name_(std::move(name)),
      limiter_(std::make_shared<AdaptiveLimiter>(options, clock)),
      retry_after_nanos_(absl::ToInt64Nanoseconds(retry_after)),
      tickets_(limiter_) {}

Decision AdaptiveStage::Check(const RequestMeta&, HoldList& holds) {
  AdaptiveLimiter::Permit permit = limiter_->TryAcquire();
  if (!permit) {
    return Decision::Reject(name_, RejectKind::kOverloaded, kAdaptiveReason,
                            absl::Nanoseconds(retry_after_nanos_.load(std::memory_order_relaxed)));
  }
  holds.Keep(std::move(permit));
  return Decision::Admit();
}

void AdaptiveStage::AppendGauges(std::vector<StageGauge>& gauges) const {
  const AdaptiveLimiterState s = limiter_->State();
  gauges.push_back({"in_flight", static_cast<double>(s.in_flight)});
  gauges.push_back({"limit", static_cast<double>(s.limit)});
  gauges.push_back({"baseline_latency_ms", static_cast<double>(s.baseline_nanos) / 1e6});
  gauges.push_back({"window_latency_ms", static_cast<double>(s.window_latency_nanos) / 1e6});
  gauges.push_back({"increases", static_cast<double>(s.increases)});
  gauges.push_back({"decreases", static_cast<double>(s.decreases)});
  gauges.push_back({"drops", static_cast<double>(s.drops)});
  gauges.push_back({"timeouts", static_cast<double>(s.timeouts)});
  gauges.push_back({"waived", static_cast<double>(s.waived)});
  gauges.push_back({"tickets", static_cast<double>(tickets_.size())});
}

void AdaptiveStage::Set(const AdaptiveLimiterOptions& options, absl::Duration retry_after) {
  limiter_->SetOptions(options);
  retry_after_nanos_.store(absl::ToInt64Nanoseconds(retry_after), std::memory_order_relaxed);
}

absl::StatusOr<std::unique_ptr<StageFactory>> MakeAdaptiveFactory(
    std::string name, const node::flowctl::AdaptiveStageConfig& config, absl::string_view field) {
  absl::StatusOr<AdaptiveLimiterOptions> options = AdaptiveOptionsFromConfig(config, field);
  if (!options.ok()) return options.status();
  // Every field was checked by AdaptiveOptionsFromConfig; this guards the two lists drifting
  // apart (the limiter CHECKs its options).
  if (absl::Status s = ValidateAdaptiveLimiterOptions(*options); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".adaptive: ", s.message()));
  }
  const absl::Duration retry_after = config.retry_after_ms() == 0
                                         ? kDefaultAdaptiveRetryAfter
                                         : absl::Milliseconds(config.retry_after_ms());
  return std::make_unique<AdaptiveFactory>(std::move(name), *options, retry_after);
}

}  // namespace flowctl
