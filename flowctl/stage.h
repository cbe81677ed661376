// Stage: one pluggable check of a partition's interceptor chain (the Envoy network-filter model).
//
// A stage sees only a request's cheap metadata (RequestMeta: partition, size, peer id, arrival
// time; never the decoded body) and answers admit or reject(stage, kind, reason, retry-after).
// The RejectKind says what the refusal means (load, unavailable, invalid) and so which status the
// client gets (RejectStatusCode); the reason is for people only. A stage that holds something for
// an admitted request (a concurrency slot) puts it in the request's HoldList, which releases it
// when the request finishes, or at once if a later stage rejects it. A stage that follows the
// request past admission (pooled, committed, dropped) returns its RequestLifecycle from
// lifecycle() (request_lifecycle.h); every other stage returns null.
//
// Stages are built by a StageFactory (one per StageConfig, made once by the StageRegistry from the
// validated proto) that creates a cheap instance per partition; StageChain (stage_chain.h) runs
// the instances in order.
//
// Thread-safety: Stage::Check is called concurrently from many threads and must be thread-safe
// and cheap (atomics, no locks, no allocation on the admit path). Factories are immutable.
//
//   class AlwaysReject final : public flowctl::Stage {
//     Decision Check(const RequestMeta&, HoldList&) override {
//       return Decision::Reject(name(), RejectKind::kUnavailable, "closed for maintenance",
//                               absl::Seconds(5));
//     }
//     RequestLifecycle* lifecycle() override { return nullptr; }
//     ...
//   };
#ifndef FLOWCTL_STAGE_H_
#define FLOWCTL_STAGE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "flowctl/clock.h"
#include "flowctl/request_lifecycle.h"

namespace flowctl {

// What a stage may look at: known before the request is parsed or its signature checked.
// A request's retry ticket (flowctl/retry_reservations.h): the one it carries, and what the
// stages did with tickets. Owned by the caller; stages write it during Check only.
struct RetryTicket {
  uint64_t presented = 0;  // the ticket an earlier refusal gave this request; 0 = none
  bool redeemed = false;   // a stage admitted the request on its ticket (room held for it)
  uint64_t issued = 0;     // a refusing stage reserved room for the retry under this ticket
};

struct RequestMeta {
  uint32_t partition = 0;
  uint64_t size_bytes = 0;      // raw request size
  absl::string_view peer = {};  // client or peer id; not owned, valid during Check only
  int64_t arrival_nanos = 0;    // Clock time the request arrived; 0 if unknown
  // The request's retry ticket, in and out (retry_reservations.h); null: the caller neither
  // carries tickets nor passes them on.
  RetryTicket* retry = nullptr;
};

// What a rejection means to the client; the status code follows from it (RejectStatusCode).
enum class RejectKind {
  kOverloaded,   // too much load now; retry after the hint (RESOURCE_EXHAUSTED)
  kUnavailable,  // the partition cannot serve now, e.g. consensus is not normal (UNAVAILABLE)
  kInvalid,      // the request itself is unacceptable; retrying it will not help (INVALID_ARGUMENT)
};

// overloaded -> RESOURCE_EXHAUSTED, unavailable -> UNAVAILABLE, invalid -> INVALID_ARGUMENT.
absl::StatusCode RejectStatusCode(RejectKind kind);
// "overloaded", "unavailable", "invalid".
absl::string_view RejectKindName(RejectKind kind);

// Admit, or reject with the rejecting stage's name, what the rejection means, a human-readable
// reason, and a retry-after hint for the client. The views point into the stage that made the
// decision: they stay valid while that stage lives (an Admission keeps its chain, and so its
// stages, alive).
class Decision {
 public:
  // A default Decision admits.
  Decision() = default;
  static Decision Admit() { return Decision(); }
  static Decision Reject(absl::string_view stage, RejectKind kind, absl::string_view reason,
                         absl::Duration retry_after) {
    return Decision(stage, kind, reason, retry_after);
  }

  bool admitted() const { return admitted_; }
  // Empty when admitted.
  absl::string_view stage() const { return stage_; }
  absl::string_view reason() const { return reason_; }
  absl::Duration retry_after() const { return retry_after_; }
  // Meaningful only when rejected.
  RejectKind reject_kind() const { return kind_; }

  // OK when admitted; otherwise a status of RejectStatusCode(reject_kind()) with the message
  // "rejected by stage '<stage>': <reason>". Callers may add context to the message; the code is
  // the contract.
  absl::Status ToStatus() const;

  // "admit" or "rejected by <stage> (<kind>): <reason> (retry after <d>)", for logs and tests.
  std::string ToString() const;

 private:
  Decision(absl::string_view stage, RejectKind kind, absl::string_view reason,
           absl::Duration retry_after)
      : admitted_(false), kind_(kind), stage_(stage), reason_(reason), retry_after_(retry_after) {}

  bool admitted_ = true;
  RejectKind kind_ = RejectKind::kOverloaded;
  absl::string_view stage_;
  absl::string_view reason_;
  absl::Duration retry_after_ = absl::ZeroDuration();
};

// The resources stages hold for one request. Each is a move-only RAII object (e.g. a
// ConcurrencyLimiter::Permit) kept until ReleaseAll() or destruction, which destroy them in
// reverse order of Keep(). Not thread-safe: one request, one thread at a time.
class HoldList {
 public:
  HoldList() = default;
  HoldList(HoldList&&) noexcept = default;
  HoldList& operator=(HoldList&& other) noexcept {
    if (this != &other) {
      ReleaseAll();
      holds_ = std::move(other.holds_);
    }
    return *this;
  }
  ~HoldList() { ReleaseAll(); }

  // Keeps `resource` until the request finishes; destroying it must release it.
  // Resources up to 16 bytes with a noexcept move (a Permit is 8) are stored without allocating.
  template <typename Resource>
  void Keep(Resource resource) {
    holds_.emplace_back([r = std::move(resource)]() mutable {});
  }

  void ReleaseAll() {
    while (!holds_.empty()) holds_.pop_back();
  }
  size_t size() const { return holds_.size(); }
  bool empty() const { return holds_.empty(); }

 private:
  // AnyInvocable is used only as small-buffer type erasure: destroying one destroys the captured
  // resource. Two inline slots cover the built-in chains without allocating.
  absl::InlinedVector<absl::AnyInvocable<void()>, 2> holds_;
};

// One live figure of a stage for stats and the admin API, e.g. {"in_flight", 12}.
struct StageGauge {
  std::string name;
  double value = 0;
};

// Where a stage instance runs: one per partition chain.
struct StageContext {
  uint32_t partition = 0;
  const Clock* clock = Clock::Real();  // never null; outlives the chain
};

class Stage {
 public:
  virtual ~Stage() = default;

  // Unique within its chain; used in rejections and stats.
  virtual absl::string_view name() const = 0;
  // The registered kind that made it ("concurrency", "rate", "gate", "adaptive", or a plug-in's).
  virtual absl::string_view kind() const = 0;

  // The hot path: admit or reject `request`. On admit the stage may Keep() resources in `holds`;
  // on reject it must not (the chain releases whatever earlier stages kept). Thread-safe.
  virtual Decision Check(const RequestMeta& request, HoldList& holds) = 0;

  // Appends the stage's live figures (limits, in-flight count, tokens); a stage with none appends
  // nothing. Thread-safe; not on the hot path.
  virtual void AppendGauges(std::vector<StageGauge>& gauges) const = 0;

  // The stage's follower of admitted requests (request_lifecycle.h), or null for a stage that
  // forgets a request once Check returns. Constant for the stage's life (the chain reads it once).
  virtual RequestLifecycle* lifecycle() = 0;
};

// Made once from one validated StageConfig; creates per-partition Stage instances. Immutable,
// thread-safe.
class StageFactory {
 public:
  virtual ~StageFactory() = default;

  virtual absl::string_view name() const = 0;
  virtual absl::string_view kind() const = 0;

  // A fresh instance (fresh state) for one partition.
  virtual std::shared_ptr<Stage> Create(const StageContext& context) const = 0;

  // Live update: moves `existing` (a stage of the same name and kind, made by an earlier factory)
  // to this factory's parameters while keeping its state (in-flight count, bucket balance), and
  // returns true; returns false when `existing` cannot be updated in place (a kind with no state
  // worth keeping, or an unexpected type), and the caller then Create()s a new instance.
  virtual bool UpdateInPlace(Stage& existing) const = 0;
};

}  // namespace flowctl

#endif  // FLOWCTL_STAGE_H_
