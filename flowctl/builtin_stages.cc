#include "flowctl/builtin_stages.h"

#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace flowctl {
namespace {

constexpr absl::string_view kConcurrencyReason = "too many requests in flight";
constexpr absl::string_view kRequestRateReason = "request rate limit";
constexpr absl::string_view kByteRateReason = "byte rate limit";
constexpr absl::string_view kClosedReason = "closed (rate 0)";

absl::Duration OrDefault(uint32_t millis, absl::Duration fallback) {
  return millis == 0 ? fallback : absl::Milliseconds(millis);
}

absl::Status FieldError(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

// ---- concurrency ----

class ConcurrencyFactory final : public StageFactory {
 public:
  ConcurrencyFactory(std::string name, int64_t limit, absl::Duration retry_after)
      : name_(std::move(name)), limit_(limit), retry_after_(retry_after) {}

  absl::string_view name() const override { return name_; }
  absl::string_view kind() const override { return kConcurrencyKind; }
  std::shared_ptr<Stage> Create(const StageContext&) const override {
    return std::make_shared<ConcurrencyStage>(name_, limit_, retry_after_);
  }
  bool UpdateInPlace(Stage& existing) const override {
    auto* stage = dynamic_cast<ConcurrencyStage*>(&existing);
    if (stage == nullptr) return false;
    stage->SetLimit(limit_);
    stage->SetRetryAfter(retry_after_);
    return true;
  }

 private:
  const std::string name_;
  const int64_t limit_;
  const absl::Duration retry_after_;
};

// ---- rate ----

class RateFactory final : public StageFactory {
 public:
  RateFactory(std::string name, double rate, double burst, RateStage::Unit unit)
      : name_(std::move(name)), rate_(rate), burst_(burst), unit_(unit) {}

  absl::string_view name() const override { return name_; }
  absl::string_view kind() const override { return kRateKind; }
  std::shared_ptr<Stage> Create(const StageContext& context) const override {
    return std::make_shared<RateStage>(name_, rate_, burst_, unit_, context.clock);
  }
  bool UpdateInPlace(Stage& existing) const override {
    auto* stage = dynamic_cast<RateStage*>(&existing);
    if (stage == nullptr) return false;
    stage->Set(rate_, burst_, unit_);
    return true;
  }

 private:
  const std::string name_;
  const double rate_;
  const double burst_;
  const RateStage::Unit unit_;
};

// ---- gate ----

class GateFactory final : public StageFactory {
 public:
  GateFactory(std::string name, std::string predicate_name,
              std::shared_ptr<const RegisteredPredicate> predicate, absl::Duration retry_after)
      : name_(std::move(name)),
        predicate_name_(std::move(predicate_name)),
        predicate_(std::move(predicate)),
        retry_after_(retry_after) {}

  absl::string_view name() const override { return name_; }
  absl::string_view kind() const override { return kGateKind; }
  std::shared_ptr<Stage> Create(const StageContext&) const override {
    return std::make_shared<GateStage>(name_, predicate_name_, predicate_, retry_after_);
  }
  // A gate keeps no state (its counters live in the chain link), so a new one is made.
  bool UpdateInPlace(Stage&) const override { return false; }

 private:
  const std::string name_;
  const std::string predicate_name_;
  const std::shared_ptr<const RegisteredPredicate> predicate_;
  const absl::Duration retry_after_;
};

}  // namespace

ConcurrencyStage::ConcurrencyStage(std::string name, int64_t limit, absl::Duration retry_after)
    : name_(std::move(name)),
      limiter_(limit),
      retry_after_nanos_(absl::ToInt64Nanoseconds(retry_after)) {}

void ConcurrencyStage::SetRetryAfter(absl::Duration d) {
  retry_after_nanos_.store(absl::ToInt64Nanoseconds(d), std::memory_order_relaxed);
}

Decision ConcurrencyStage::Check(const RequestMeta&, HoldList& holds) {
  ConcurrencyLimiter::Permit permit = limiter_.TryAcquire();
  if (!permit) {
    return Decision::Reject(name_, RejectKind::kOverloaded, kConcurrencyReason,
                            absl::Nanoseconds(retry_after_nanos_.load(std::memory_order_relaxed)));
  }
  holds.Keep(std::move(permit));
  return Decision::Admit();
}

void ConcurrencyStage::AppendGauges(std::vector<StageGauge>& gauges) const {
  gauges.push_back({"in_flight", static_cast<double>(limiter_.in_flight())});
  gauges.push_back({"limit", static_cast<double>(limiter_.limit())});
}

RateStage::RateStage(std::string name, double rate, double burst, Unit unit, const Clock* clock)
    : name_(std::move(name)), bucket_(rate, burst, clock), unit_(unit) {}

void RateStage::Set(double rate, double burst, Unit unit) {
  const absl::Status set = bucket_.SetRate(rate, burst);
  CHECK(set.ok()) << set;  // the factory validated them
  unit_.store(unit, std::memory_order_relaxed);
}

Decision RateStage::Check(const RequestMeta& request, HoldList&) {
  const Unit unit = unit_.load(std::memory_order_relaxed);
  const double cost = unit == Unit::kBytes ? static_cast<double>(request.size_bytes) : 1.0;
  const int64_t now = bucket_.clock()->NowNanos();
  if (bucket_.TryAcquireAt(cost, now)) return Decision::Admit();
  const int64_t wait = bucket_.NanosUntilAt(cost, now);
  if (wait == TokenBucket::kNever)
    return Decision::Reject(name_, RejectKind::kOverloaded, kClosedReason, kClosedRateRetryAfter);
  return Decision::Reject(name_, RejectKind::kOverloaded,
                          unit == Unit::kBytes ? kByteRateReason : kRequestRateReason,
                          absl::Nanoseconds(wait));
}

void RateStage::AppendGauges(std::vector<StageGauge>& gauges) const {
  gauges.push_back({"rate_per_second", bucket_.rate()});
  gauges.push_back({"burst", bucket_.burst()});
  gauges.push_back({"available", bucket_.Available()});
}

GateStage::GateStage(std::string name, std::string predicate_name,
                     std::shared_ptr<const RegisteredPredicate> predicate,
                     absl::Duration retry_after)
    : name_(std::move(name)),
      reason_(absl::StrCat("predicate '", predicate_name, "' does not hold")),
      predicate_(std::move(predicate)),
      retry_after_(retry_after) {
  CHECK(predicate_ != nullptr && predicate_->predicate);
}

Decision GateStage::Check(const RequestMeta& request, HoldList&) {
  if (predicate_->predicate(request)) return Decision::Admit();
  absl::Duration retry_after = retry_after_;
  if (retry_after <= absl::ZeroDuration() && predicate_->retry_hint) {
    retry_after = predicate_->retry_hint(request);
  }
  if (retry_after <= absl::ZeroDuration()) retry_after = kDefaultGateRetryAfter;
  return Decision::Reject(name_, predicate_->rejects_as, reason_, retry_after);
}

absl::StatusOr<std::unique_ptr<StageFactory>> MakeConcurrencyFactory(
    std::string name, const node::flowctl::ConcurrencyStageConfig& config,
    absl::string_view field) {
  if (config.max_in_flight() < 1) {
    return FieldError(absl::StrCat(field, ".concurrency.max_in_flight"),
                      absl::StrCat("must be >= 1 requests, got ", config.max_in_flight()));
  }
  return std::make_unique<ConcurrencyFactory>(
      std::move(name), config.max_in_flight(),
      OrDefault(config.retry_after_ms(), kDefaultConcurrencyRetryAfter));
}

absl::StatusOr<std::unique_ptr<StageFactory>> MakeRateFactory(
    std::string name, const node::flowctl::RateStageConfig& config, absl::string_view field) {
  RateStage::Unit unit;
  switch (config.unit()) {
    case node::flowctl::RateStageConfig::UNIT_UNSPECIFIED:
    case node::flowctl::RateStageConfig::REQUESTS:
      unit = RateStage::Unit::kRequests;
      break;
    case node::flowctl::RateStageConfig::BYTES:
      unit = RateStage::Unit::kBytes;
      break;
    default:
      return FieldError(absl::StrCat(field, ".rate.unit"),
                        absl::StrCat("unknown unit ", config.unit(), " (REQUESTS or BYTES)"));
  }
  const absl::string_view unit_name = unit == RateStage::Unit::kBytes ? "bytes" : "requests";
  if (config.unlimited()) {
    return std::make_unique<RateFactory>(std::move(name), TokenBucket::kUnlimited, 0, unit);
  }
  const double rate = config.rate_per_second();
  if (!std::isfinite(rate) || rate < 0) {
    return FieldError(
        absl::StrCat(field, ".rate.rate_per_second"),
        absl::StrCat("must be finite and >= 0 ", unit_name,
                     "/s (0 closes the stage; set `unlimited` for no limit), got ", rate));
  }
  const double burst = config.burst();
  if (!std::isfinite(burst) || burst < 0) {
    return FieldError(absl::StrCat(field, ".rate.burst"),
                      absl::StrCat("must be finite and >= 0 ", unit_name, ", got ", burst));
  }
  return std::make_unique<RateFactory>(std::move(name), rate, burst, unit);
}

absl::StatusOr<std::unique_ptr<StageFactory>> MakeGateFactory(
    std::string name, const node::flowctl::GateStageConfig& config,
    std::shared_ptr<const RegisteredPredicate> predicate, absl::string_view known_predicates,
    absl::string_view field) {
  const std::string field_name = absl::StrCat(field, ".gate.predicate");
  if (config.predicate().empty()) {
    return FieldError(field_name, absl::StrCat("required (registered: ", known_predicates, ")"));
  }
  if (predicate == nullptr) {
    return FieldError(field_name, absl::StrCat("unknown predicate '", config.predicate(),
                                               "' (registered: ", known_predicates, ")"));
  }
  // 0: the predicate's measured hint where it has one (GateStage).
  return std::make_unique<GateFactory>(std::move(name), config.predicate(), std::move(predicate),
                                       absl::Milliseconds(config.retry_after_ms()));
}

}  // namespace flowctl
