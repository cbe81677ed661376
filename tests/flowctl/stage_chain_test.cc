#include "flowctl/stage_chain.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/builtin_stages.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"

namespace flowctl {
namespace {

using ::testing::ElementsAre;
using ::tests::FakeClock;

// Appends "<tag>" to a log when destroyed: a resource whose release the tests can observe.
class LoggedResource {
 public:
  LoggedResource(std::string tag, std::vector<std::string>* log)
      : tag_(std::move(tag)), log_(log) {}
  LoggedResource(LoggedResource&& other) noexcept
      : tag_(std::move(other.tag_)), log_(std::exchange(other.log_, nullptr)) {}
  LoggedResource& operator=(LoggedResource&&) = delete;
  ~LoggedResource() {
    if (log_ != nullptr) log_->push_back("release " + tag_);
  }

 private:
  std::string tag_;
  std::vector<std::string>* log_;
};

MATCHER_P2(Gauge, name, value, "") { return arg.name == name && arg.value == value; }

// A stage that logs each consultation, admits or rejects as told, and optionally keeps a
// LoggedResource. Single-threaded use only (the log is not synchronized).
class ScriptedStage final : public Stage {
 public:
  ScriptedStage(std::string name, std::vector<std::string>* log, bool admit = true,
                bool hold = false)
      : name_(std::move(name)), log_(log), admit_(admit), hold_(hold) {}

  absl::string_view name() const override { return name_; }
  absl::string_view kind() const override { return "scripted"; }
  Decision Check(const RequestMeta&, HoldList& holds) override {
    log_->push_back("check " + name_);
    if (!admit_) {
      return Decision::Reject(name_, RejectKind::kOverloaded, "scripted no", absl::Milliseconds(7));
    }
    if (hold_) holds.Keep(LoggedResource(name_, log_));
    return Decision::Admit();
  }
  void AppendGauges(std::vector<StageGauge>& gauges) const override {
    gauges.push_back({"admit", admit_ ? 1.0 : 0.0});
  }
  RequestLifecycle* lifecycle() override { return nullptr; }
  void set_admit(bool admit) { admit_ = admit; }

 private:
  const std::string name_;
  std::vector<std::string>* const log_;
  bool admit_;
  const bool hold_;
};

// A stage that follows requests and logs every lifecycle event it gets.
class FollowingStage final : public Stage, public RequestLifecycle {
 public:
  FollowingStage(std::string name, std::vector<std::string>* log)
      : name_(std::move(name)), log_(log) {}

  absl::string_view name() const override { return name_; }
  absl::string_view kind() const override { return "following"; }
  Decision Check(const RequestMeta&, HoldList&) override { return Decision::Admit(); }
  void AppendGauges(std::vector<StageGauge>&) const override {}
  RequestLifecycle* lifecycle() override { return this; }

  void OnPooled(absl::string_view id, int64_t admitted_nanos) override {
    log_->push_back(absl::StrCat(name_, " pooled ", id, " at ", admitted_nanos));
  }
  void OnCommitted(absl::Span<const std::string> ids, int64_t now_nanos) override {
    log_->push_back(absl::StrCat(name_, " committed ", absl::StrJoin(ids, ","), " at ", now_nanos));
  }
  void OnDropped(absl::string_view id, DropReason reason) override {
    log_->push_back(absl::StrCat(name_, " dropped ", id, " ", DropReasonName(reason)));
  }
  void OnTick(int64_t now_nanos, const PoolQuery& pool) override {
    log_->push_back(absl::StrCat(name_, " tick at ", now_nanos, " txs ", pool.Level().txs));
  }

 private:
  const std::string name_;
  std::vector<std::string>* const log_;
};

class FixedPool final : public PoolQuery {
 public:
  std::vector<std::string> Gapped(absl::Span<const std::string>) const override { return {}; }
  std::vector<std::string> Missing(absl::Span<const std::string>) const override { return {}; }
  PoolLevel Level() const override { return {.txs = 3}; }
};

TEST(StageChainTest, LifecycleGoesToFollowersOnlyInOrder) {
  FakeClock clock(5'000);
  std::vector<std::string> log;
  StageChainHolder holder(StageChain::Of(
      {.partition = 1, .clock = &clock},
      {std::make_shared<FollowingStage>("f1", &log), std::make_shared<ScriptedStage>("s", &log),
       std::make_shared<FollowingStage>("f2", &log)}));
  EXPECT_TRUE(holder.Get()->follows_requests());

  Admission given = holder.Admit({.arrival_nanos = 42});
  Admission unstamped = holder.Admit({});
  EXPECT_EQ(given.admitted_nanos(), 42);
  EXPECT_EQ(unstamped.admitted_nanos(), 0);
  log.clear();
  given.Pooled("tx1");
  given.Finish();
  clock.AdvanceNanos(1);
  unstamped.Pooled("tx2");  // no arrival time: the chain's clock when pooled
  unstamped.Dropped("tx2", DropReason::kRefused);
  const std::vector<std::string> ids = {"tx1", "tx3"};
  holder.Committed(ids, 77);
  holder.Dropped("tx4", DropReason::kExpired);
  holder.Tick(88, FixedPool());
  EXPECT_THAT(
      log, ElementsAre("f1 pooled tx1 at 42", "f2 pooled tx1 at 42", "f1 pooled tx2 at 5001",
                       "f2 pooled tx2 at 5001", "f1 dropped tx2 refused", "f2 dropped tx2 refused",
                       "f1 committed tx1,tx3 at 77", "f2 committed tx1,tx3 at 77",
                       "f1 dropped tx4 expired", "f2 dropped tx4 expired", "f1 tick at 88 txs 3",
                       "f2 tick at 88 txs 3"));

  std::vector<std::string> quiet;
  auto plain = StageChain::Of({}, {std::make_shared<ScriptedStage>("s", &quiet)});
  EXPECT_FALSE(plain->follows_requests());
  Admission a = Admit(plain, {});
  a.Pooled("tx");  // nobody follows: nothing happens
  plain->Committed(ids, 1);
  EXPECT_THAT(quiet, ElementsAre("check s"));
}

TEST(StageChainTest, PooledGoesToTheChainThatAdmitted) {
  std::vector<std::string> log;
  StageChainHolder holder(StageChain::Of({}, {std::make_shared<FollowingStage>("old", &log)}));
  Admission admission = holder.Admit({.arrival_nanos = 1});
  holder.Update([&](const StageChain&) {
    return StageChain::Of({}, {std::make_shared<FollowingStage>("new", &log)});
  });
  admission.Pooled("tx");
  holder.Committed(std::vector<std::string>{"tx"}, 2);
  EXPECT_THAT(log, ElementsAre("old pooled tx at 1", "new committed tx at 2"));
}

TEST(StageChainTest, RejectKindDecidesTheStatusCode) {
  EXPECT_EQ(RejectStatusCode(RejectKind::kOverloaded), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RejectStatusCode(RejectKind::kUnavailable), absl::StatusCode::kUnavailable);
  EXPECT_EQ(RejectStatusCode(RejectKind::kInvalid), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Decision::Admit().ToStatus().ok());
  const Decision d =
      Decision::Reject("health", RejectKind::kUnavailable, "view change", absl::Seconds(1));
  EXPECT_EQ(d.reject_kind(), RejectKind::kUnavailable);
  EXPECT_EQ(d.ToStatus(), absl::UnavailableError("rejected by stage 'health': view change"));
  EXPECT_EQ(Decision::Reject("x", RejectKind::kInvalid, "too big", absl::ZeroDuration())
                .ToStatus()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StageChainTest, EmptyChainAdmits) {
  auto chain = StageChain::Of({}, {});
  Admission admission = Admit(chain, {});
  EXPECT_TRUE(admission.admitted());
  EXPECT_EQ(admission.decision().ToString(), "admit");
}

TEST(StageChainTest, RunsStagesInOrder) {
  std::vector<std::string> log;
  auto chain = StageChain::Of(
      {}, {std::make_shared<ScriptedStage>("a", &log), std::make_shared<ScriptedStage>("b", &log),
           std::make_shared<ScriptedStage>("c", &log)});
  EXPECT_TRUE(Admit(chain, {}).admitted());
  EXPECT_THAT(log, ElementsAre("check a", "check b", "check c"));
}

TEST(StageChainTest, StopsAtFirstRejectionAndCounts) {
  std::vector<std::string> log;
  auto b = std::make_shared<ScriptedStage>("b", &log, /*admit=*/false);
  auto chain = StageChain::Of({}, {std::make_shared<ScriptedStage>("a", &log), b,
                                   std::make_shared<ScriptedStage>("c", &log)});
  Admission admission = Admit(chain, {});
  EXPECT_FALSE(admission.admitted());
  EXPECT_EQ(admission.decision().stage(), "b");
  EXPECT_EQ(admission.decision().reason(), "scripted no");
  EXPECT_EQ(admission.decision().retry_after(), absl::Milliseconds(7));
  EXPECT_EQ(admission.decision().ToString(),
            "rejected by b (overloaded): scripted no (retry after 7ms)");
  EXPECT_THAT(log, ElementsAre("check a", "check b"));  // c never consulted

  b->set_admit(true);
  EXPECT_TRUE(Admit(chain, {}).admitted());
  std::vector<StageStats> stats = chain->Stats();
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[0].name, "a");
  EXPECT_EQ(stats[0].kind, "scripted");
  EXPECT_EQ(stats[0].admitted, 2u);
  EXPECT_EQ(stats[0].rejected, 0u);
  EXPECT_EQ(stats[1].admitted, 1u);
  EXPECT_EQ(stats[1].rejected, 1u);
  EXPECT_EQ(stats[2].admitted, 1u);  // not counted when an earlier stage rejected
  EXPECT_EQ(stats[2].rejected, 0u);
  ASSERT_EQ(stats[1].gauges.size(), 1u);
  EXPECT_EQ(stats[1].gauges[0].name, "admit");
  EXPECT_EQ(stats[1].gauges[0].value, 1);
}

TEST(StageChainTest, HoldsAreReleasedInReverseOrderOnFinish) {
  std::vector<std::string> log;
  auto chain = StageChain::Of({}, {std::make_shared<ScriptedStage>("a", &log, true, true),
                                   std::make_shared<ScriptedStage>("b", &log, true, true)});
  Admission admission = Admit(chain, {});
  EXPECT_EQ(admission.holds(), 2u);
  log.clear();
  admission.Finish();
  EXPECT_THAT(log, ElementsAre("release b", "release a"));
  admission.Finish();  // idempotent
  EXPECT_EQ(log.size(), 2u);
}

TEST(StageChainTest, LaterRejectionReleasesEarlierHoldsAtOnce) {
  std::vector<std::string> log;
  auto chain = StageChain::Of({}, {std::make_shared<ScriptedStage>("a", &log, true, true),
                                   std::make_shared<ScriptedStage>("b", &log, false)});
  Admission admission = Admit(chain, {});
  EXPECT_FALSE(admission.admitted());
  EXPECT_EQ(admission.holds(), 0u);
  EXPECT_THAT(log, ElementsAre("check a", "check b", "release a"));
}

TEST(StageChainTest, AdmissionMoveReleasesExactlyOnce) {
  std::vector<std::string> log;
  auto chain = StageChain::Of({}, {std::make_shared<ScriptedStage>("a", &log, true, true)});
  {
    Admission first = Admit(chain, {});
    Admission second = std::move(first);
    EXPECT_EQ(second.holds(), 1u);
    Admission third = Admit(chain, {});
    log.clear();
    third = std::move(second);  // third's own hold is released; second's moves in
    EXPECT_THAT(log, ElementsAre("release a"));
    EXPECT_EQ(third.holds(), 1u);
    log.clear();
  }
  EXPECT_THAT(log, ElementsAre("release a"));
}

// The three paths of a concurrency permit: admitted then finished; admitted by concurrency then
// rejected by rate; rejected by concurrency.
TEST(StageChainTest, ConcurrencyPermitReleasedOnEveryPath) {
  FakeClock clock;
  auto concurrency = std::make_shared<ConcurrencyStage>("concurrency", 1, absl::Milliseconds(3));
  auto rate = std::make_shared<RateStage>("rate", 10, 1, RateStage::Unit::kRequests, &clock);
  auto chain = StageChain::Of({.clock = &clock}, {concurrency, rate});
  const ConcurrencyLimiter& limiter = concurrency->limiter();

  {  // admitted, then finished
    Admission a = Admit(chain, {});
    ASSERT_TRUE(a.admitted());
    EXPECT_EQ(limiter.in_flight(), 1);
    // while it is in flight, the next request is rejected by concurrency and holds nothing
    Admission b = Admit(chain, {});
    EXPECT_FALSE(b.admitted());
    EXPECT_EQ(b.decision().stage(), "concurrency");
    EXPECT_EQ(b.decision().retry_after(), absl::Milliseconds(3));
    EXPECT_EQ(b.holds(), 0u);
    EXPECT_EQ(limiter.in_flight(), 1);
    a.Finish();
    EXPECT_EQ(limiter.in_flight(), 0);
  }
  // admitted by concurrency, rejected by rate (bucket empty): permit released at once
  Admission c = Admit(chain, {});
  EXPECT_FALSE(c.admitted());
  EXPECT_EQ(c.decision().stage(), "rate");
  EXPECT_EQ(c.decision().reason(), "request rate limit");
  EXPECT_EQ(c.decision().retry_after(), absl::Milliseconds(100));
  EXPECT_EQ(limiter.in_flight(), 0);
  clock.Advance(absl::Milliseconds(100));
  {
    Admission d = Admit(chain, {});
    EXPECT_TRUE(d.admitted());
    EXPECT_EQ(limiter.in_flight(), 1);
    const std::vector<StageStats> stats = chain->Stats();
    EXPECT_THAT(stats[0].gauges, ElementsAre(Gauge("in_flight", 1), Gauge("limit", 1)));
    EXPECT_THAT(stats[1].gauges, ElementsAre(Gauge("rate_per_second", 10), Gauge("burst", 1),
                                             Gauge("available", 0)));
  }  // destroyed without Finish()
  EXPECT_EQ(limiter.in_flight(), 0);
}

TEST(StageChainTest, RateStageCountsBytesAndReportsTheWait) {
  FakeClock clock;
  auto rate = std::make_shared<RateStage>("bytes", 1000, 1000, RateStage::Unit::kBytes, &clock);
  auto chain = StageChain::Of({.clock = &clock}, {rate});
  EXPECT_TRUE(Admit(chain, {.size_bytes = 600}).admitted());
  Admission rejected = Admit(chain, {.size_bytes = 600});
  EXPECT_FALSE(rejected.admitted());
  EXPECT_EQ(rejected.decision().reason(), "byte rate limit");
  EXPECT_EQ(rejected.decision().retry_after(), absl::Milliseconds(200));
  EXPECT_TRUE(Admit(chain, {.size_bytes = 400}).admitted());

  rate->Set(0, 0, RateStage::Unit::kBytes);  // closed
  Admission closed = Admit(chain, {.size_bytes = 1});
  EXPECT_FALSE(closed.admitted());
  EXPECT_EQ(closed.decision().retry_after(), kClosedRateRetryAfter);
}

TEST(StageChainTest, GateFollowsItsPredicate) {
  std::atomic<bool> open{true};
  std::atomic<uint32_t> seen_partition{0};
  auto predicate = std::make_shared<const RegisteredPredicate>(
      RegisteredPredicate{.predicate =
                              [&](const RequestMeta& request) {
                                seen_partition.store(request.partition);
                                return open.load();
                              },
                          .rejects_as = RejectKind::kUnavailable});
  auto chain =
      StageChain::Of({}, {std::make_shared<GateStage>("health", "consensus_normal", predicate,
                                                      absl::Milliseconds(100))});
  EXPECT_TRUE(Admit(chain, {.partition = 4}).admitted());
  EXPECT_EQ(seen_partition.load(), 4u);
  open.store(false);
  Admission rejected = Admit(chain, {.partition = 4});
  EXPECT_FALSE(rejected.admitted());
  EXPECT_EQ(rejected.decision().stage(), "health");
  EXPECT_EQ(rejected.decision().reason(), "predicate 'consensus_normal' does not hold");
  EXPECT_EQ(rejected.decision().retry_after(), absl::Milliseconds(100));
  EXPECT_EQ(rejected.decision().reject_kind(), RejectKind::kUnavailable);
}

TEST(StageChainTest, AdmissionKeepsItsChainAliveAcrossASwap) {
  std::vector<std::string> log;
  StageChainHolder holder(
      StageChain::Of({}, {std::make_shared<ScriptedStage>("old", &log, false)}));
  std::weak_ptr<const StageChain> old_chain = holder.Get();
  Admission rejected = holder.Admit({});
  holder.Update([&](const StageChain&) {
    return StageChain::Of({}, {std::make_shared<ScriptedStage>("new", &log)});
  });
  EXPECT_TRUE(holder.Admit({}).admitted());
  EXPECT_FALSE(old_chain.expired());  // `rejected` still refers to it
  EXPECT_EQ(rejected.decision().stage(), "old");
  rejected = Admission();
  EXPECT_TRUE(old_chain.expired());
}

// Many threads through [concurrency 4, unlimited rate]: never more than 4 inside, all released.
TEST(StageChainTest, ThreadsNeverExceedTheConcurrencyLimit) {
  auto concurrency = std::make_shared<ConcurrencyStage>("concurrency", 4, absl::Milliseconds(1));
  auto rate = std::make_shared<RateStage>("rate", TokenBucket::kUnlimited, 0,
                                          RateStage::Unit::kRequests, Clock::Real());
  StageChainHolder holder(StageChain::Of({}, {concurrency, rate}));
  std::atomic<int> inside{0};
  std::atomic<int> max_inside{0};
  std::atomic<uint64_t> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20'000; ++i) {
        Admission a = holder.Admit({.partition = 1});
        if (!a.admitted()) continue;
        admitted.fetch_add(1);
        const int now = inside.fetch_add(1) + 1;
        int seen = max_inside.load();
        while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {
        }
        inside.fetch_sub(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(max_inside.load(), 4);
  EXPECT_EQ(concurrency->limiter().in_flight(), 0);
  const std::vector<StageStats> stats = holder.Get()->Stats();
  EXPECT_EQ(stats[0].admitted + stats[0].rejected, 6u * 20'000u);
  EXPECT_EQ(stats[1].admitted, admitted.load());
}

}  // namespace
}  // namespace flowctl
