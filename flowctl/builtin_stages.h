// The built-in stages and their factories: `concurrency` (max in flight), `rate` (token bucket on
// requests or bytes) and `gate` (admits while a named predicate holds). None follows requests
// past admission (lifecycle() is null).
//
// Registered with every StageRegistry as kinds, the same way a plug-in is, and built by it from
// proto/flowctl.proto; the Make*Factory functions validate
// one stage's config and name the offending field with the given prefix, e.g.
// "stages[2].rate.rate_per_second: must be >= 0 tokens/s, got -1".
//
// Thread-safety: Check() and the live setters are thread-safe and lock-free.
//
//   auto factory = flowctl::MakeRateFactory("rate", config.rate(), "stages[0]");
//   if (!factory.ok()) return factory.status();
//   std::shared_ptr<flowctl::Stage> stage = (*factory)->Create({.partition = 1});
#ifndef FLOWCTL_BUILTIN_STAGES_H_
#define FLOWCTL_BUILTIN_STAGES_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "flowctl/concurrency_limiter.h"
#include "flowctl/stage.h"
#include "flowctl/token_bucket.h"
#include "proto/flowctl.pb.h"

namespace flowctl {

// A gate's condition, registered by name with the StageRegistry. Called on the hot path from many
// threads: must be thread-safe and cheap (an atomic load). It may look at request.partition to
// answer for the right partition.
using GatePredicate = std::function<bool(const RequestMeta& request)>;
// How long until a gate's condition is expected to hold again (e.g. from a measured service rate
// and the backlog ahead). Called only on a refusal, from many threads: thread-safe.
using GateRetryHint = std::function<absl::Duration(const RequestMeta& request)>;

// A gate predicate as registered: the condition, what a refusal on it means and, optionally, its
// retry-after hint (used by gates whose config leaves retry_after_ms at 0).
struct RegisteredPredicate {
  GatePredicate predicate;  // never empty
  RejectKind rejects_as = RejectKind::kOverloaded;
  GateRetryHint retry_hint = {};  // may be empty
};

inline constexpr absl::string_view kConcurrencyKind = "concurrency";
inline constexpr absl::string_view kRateKind = "rate";
inline constexpr absl::string_view kGateKind = "gate";

// Defaults for proto fields where 0 means "the default".
inline constexpr absl::Duration kDefaultConcurrencyRetryAfter = absl::Milliseconds(10);
inline constexpr absl::Duration kDefaultGateRetryAfter = absl::Milliseconds(100);
// Retry-after of a closed rate stage (rate 0), whose bucket would never admit.
inline constexpr absl::Duration kClosedRateRetryAfter = absl::Seconds(1);

// Admits while fewer than the limit are in flight; the permit is kept in the request's holds.
// Rejects as overloaded.
class ConcurrencyStage final : public Stage {
 public:
  ConcurrencyStage(std::string name, int64_t limit, absl::Duration retry_after);

  absl::string_view name() const override { return name_; }
  absl::string_view kind() const override { return kConcurrencyKind; }
  Decision Check(const RequestMeta& request, HoldList& holds) override;
  // "in_flight", "limit".
  void AppendGauges(std::vector<StageGauge>& gauges) const override;
  RequestLifecycle* lifecycle() override { return nullptr; }

  // Live changes. Thread-safe.
  void SetLimit(int64_t limit) { limiter_.SetLimit(limit); }
  void SetRetryAfter(absl::Duration d);

  const ConcurrencyLimiter& limiter() const { return limiter_; }

 private:
  const std::string name_;
  ConcurrencyLimiter limiter_;
  std::atomic<int64_t> retry_after_nanos_;
};

// Token bucket on request count (cost 1) or bytes (cost = size_bytes). Retry-after is the exact
// wait until the bucket would admit this request, or kClosedRateRetryAfter when the rate is 0.
// Rejects as overloaded.
class RateStage final : public Stage {
 public:
  enum class Unit { kRequests, kBytes };

  // REQUIRES: TokenBucket::ValidateParams(rate, burst).ok().
  RateStage(std::string name, double rate, double burst, Unit unit, const Clock* clock);

  absl::string_view name() const override { return name_; }
  absl::string_view kind() const override { return kRateKind; }
  Decision Check(const RequestMeta& request, HoldList& holds) override;
  // "rate_per_second", "burst", "available" (tokens now; negative while in debt; +inf unlimited).
  void AppendGauges(std::vector<StageGauge>& gauges) const override;
  RequestLifecycle* lifecycle() override { return nullptr; }

  // Live change keeping the bucket's balance. REQUIRES: parameters valid. Thread-safe.
  void Set(double rate, double burst, Unit unit);

  const TokenBucket& bucket() const { return bucket_; }
  Unit unit() const { return unit_.load(std::memory_order_relaxed); }

 private:
  const std::string name_;
  TokenBucket bucket_;
  std::atomic<Unit> unit_;
};

// Admits while `predicate` holds; rejects as the predicate was registered (e.g. unavailable).
// A refusal's retry-after is `retry_after` when it is > 0, else the predicate's hint, else
// kDefaultGateRetryAfter. Stateless apart from its parameters.
class GateStage final : public Stage {
 public:
  // REQUIRES: predicate is non-null with a non-empty function; retry_after >= 0.
  GateStage(std::string name, std::string predicate_name,
            std::shared_ptr<const RegisteredPredicate> predicate, absl::Duration retry_after);

  absl::string_view name() const override { return name_; }
  absl::string_view kind() const override { return kGateKind; }
  Decision Check(const RequestMeta& request, HoldList& holds) override;
  // None: the predicate's answer depends on the request.
  void AppendGauges(std::vector<StageGauge>&) const override {}
  RequestLifecycle* lifecycle() override { return nullptr; }

 private:
  const std::string name_;
  const std::string reason_;  // "predicate '<name>' does not hold"
  const std::shared_ptr<const RegisteredPredicate> predicate_;
  const absl::Duration retry_after_;
};

// Validate one stage's config (`field` is its path, e.g. "stages[2]") and make its factory.
absl::StatusOr<std::unique_ptr<StageFactory>> MakeConcurrencyFactory(
    std::string name, const node::flowctl::ConcurrencyStageConfig& config, absl::string_view field);
absl::StatusOr<std::unique_ptr<StageFactory>> MakeRateFactory(
    std::string name, const node::flowctl::RateStageConfig& config, absl::string_view field);
// `predicate` is the registered predicate named by config.predicate(), or null if there is none;
// `known_predicates` lists the registered names for the error message.
absl::StatusOr<std::unique_ptr<StageFactory>> MakeGateFactory(
    std::string name, const node::flowctl::GateStageConfig& config,
    std::shared_ptr<const RegisteredPredicate> predicate, absl::string_view known_predicates,
    absl::string_view field);

}  // namespace flowctl

#endif  // FLOWCTL_BUILTIN_STAGES_H_
