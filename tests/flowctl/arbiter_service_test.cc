// ArbiterService: demand from usage, shares by weight / guarantee / ceiling for CPU, memory and
// egress, the apply step as seen by fake consumers and a fake egress side, stats, live share
// updates, consumer changes and the lifecycle. Deterministic: a FakeClock drives the ticks.
#include "flowctl/arbiter_service.h"

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"
#include "tests/mocks/fake_egress_accounting.h"
#include "tests/mocks/fake_resource_consumer.h"

namespace flowctl {
namespace {

using ::testing::DoubleNear;
using ::testing::HasSubstr;
using ::testing::Optional;
using ::tests::FakeEgressAccounting;
using ::tests::FakeResourceConsumer;

constexpr double kTickNanos = 100'000'000;  // the first tick's assumed elapsed time
constexpr int kWorkers = 4;
constexpr double kCpuCapacity = kWorkers * kTickNanos;  // of the first tick, in ns
constexpr uint64_t kMemory = 1000;

ConsumerUsage Backlogged() { return {.cpu_backlogged = true}; }

class ArbiterServiceTest : public ::testing::Test {
 protected:
  // An arbiter over `consumers` with kWorkers workers, kMemory bytes and `egress` (may be null).
  std::unique_ptr<ArbiterService> Make(std::vector<FakeResourceConsumer*> consumers,
                                       EgressAccounting* egress) {
    absl::StatusOr<std::unique_ptr<ArbiterService>> arbiter =
        ArbiterService::Create({.tick = absl::Hours(1),  // the thread never ticks within a test
                                .cpu_workers = [this] { return workers_; },
                                .memory_bytes = kMemory,
                                .clock = &clock_},
                               egress);
    EXPECT_TRUE(arbiter.ok()) << arbiter.status();
    for (FakeResourceConsumer* c : consumers) EXPECT_TRUE((*arbiter)->AddConsumer(c).ok());
    return *std::move(arbiter);
  }

  static ConsumerShareStats StatsOf(const ArbiterService& arbiter, uint32_t id) {
    std::optional<ConsumerShareStats> s = arbiter.StatsOf(id);
    EXPECT_TRUE(s.has_value()) << "no stats for " << id;
    return s.value_or(ConsumerShareStats{});
  }

  tests::FakeClock clock_;
  int workers_ = kWorkers;
  FakeEgressAccounting egress_;
  FakeResourceConsumer a_{1, "a"};
  FakeResourceConsumer b_{2, "b"};
};

// ---- CPU ----

TEST_F(ArbiterServiceTest, BackloggedCpuFollowsWeights) {
  a_.SetShare(1);
  b_.SetShare(3);
  a_.SetUsage(Backlogged());
  b_.SetUsage(Backlogged());
  auto arbiter = Make({&a_, &b_}, &egress_);
  arbiter->Tick();
  // Applied: entitlements in ns per tick.
  EXPECT_THAT(a_.applied(Resource::kCpu), Optional(DoubleNear(kCpuCapacity / 4, 1)));
  EXPECT_THAT(b_.applied(Resource::kCpu), Optional(DoubleNear(kCpuCapacity * 3 / 4, 1)));
  // Stats: cores.
  ConsumerShareStats a = StatsOf(*arbiter, 1);
  EXPECT_EQ(a.id, 1u);
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.cpu.weight, 1);
  EXPECT_EQ(a.cpu.demand, kUnboundedDemand);
  EXPECT_NEAR(a.cpu.share, 1, 1e-9);
  EXPECT_NEAR(a.cpu.ceiling, kWorkers, 1e-9);  // ceiling 0 = the whole capacity
  EXPECT_NEAR(StatsOf(*arbiter, 2).cpu.share, 3, 1e-9);
}

TEST_F(ArbiterServiceTest, IdleConsumerLendsCpuShareButKeepsItsWeight) {
  a_.SetUsage({});  // idle: no CPU, nothing queued
  b_.SetUsage(Backlogged());
  auto arbiter = Make({&a_, &b_}, &egress_);
  arbiter->Tick();
  // Demand of an idle consumer: the slack only; the busy one borrows the rest.
  ConsumerShareStats a = StatsOf(*arbiter, 1);
  EXPECT_NEAR(a.cpu.demand, ArbiterService::kCpuDemandSlackNanos / kTickNanos, 1e-12);
  EXPECT_NEAR(a.cpu.share, ArbiterService::kCpuDemandSlackNanos / kTickNanos, 1e-12);
  EXPECT_NEAR(StatsOf(*arbiter, 2).cpu.share,
              kWorkers - ArbiterService::kCpuDemandSlackNanos / kTickNanos, 1e-9);
  // The pool still gets equal entitlements: it lends idle time by itself.
  EXPECT_THAT(a_.applied(Resource::kCpu), Optional(DoubleNear(kCpuCapacity / 2, 1)));
  EXPECT_THAT(b_.applied(Resource::kCpu), Optional(DoubleNear(kCpuCapacity / 2, 1)));

  // The lender gets its share back on the next tick once it is busy.
  a_.SetUsage(Backlogged());
  clock_.Advance(absl::Milliseconds(100));
  arbiter->Tick();
  EXPECT_NEAR(StatsOf(*arbiter, 1).cpu.share, kWorkers / 2.0, 1e-9);
  EXPECT_NEAR(StatsOf(*arbiter, 2).cpu.share, kWorkers / 2.0, 1e-9);
}

TEST_F(ArbiterServiceTest, CpuUsageAndDemandAreMeasuredOverTheElapsedTime) {
  auto arbiter = Make({&a_}, &egress_);
  arbiter->Tick();
  clock_.Advance(absl::Milliseconds(200));
  a_.SetUsage({.cpu_nanos = 50'000'000});  // 50 ms of CPU in 200 ms
  arbiter->Tick();
  ConsumerShareStats a = StatsOf(*arbiter, 1);
  EXPECT_NEAR(a.cpu.usage, 0.25, 1e-12);
  EXPECT_NEAR(
      a.cpu.demand,
      (ArbiterService::kCpuDemandHeadroom * 50e6 + ArbiterService::kCpuDemandSlackNanos) / 200e6,
      1e-12);
  // A tick right after another measures at least kMinElapsedNanos.
  a_.SetUsage({.cpu_nanos = 500'000});
  clock_.Advance(absl::Microseconds(10));
  arbiter->Tick();
  EXPECT_NEAR(StatsOf(*arbiter, 1).cpu.usage, 500'000.0 / ArbiterService::kMinElapsedNanos, 1e-12);
}

TEST_F(ArbiterServiceTest, CpuCapacityFollowsTheWorkerCount) {
  a_.SetUsage(Backlogged());
  auto arbiter = Make({&a_}, &egress_);
  arbiter->Tick();
  EXPECT_NEAR(StatsOf(*arbiter, 1).cpu.share, kWorkers, 1e-9);
  workers_ = 2;
  clock_.Advance(absl::Milliseconds(100));
  arbiter->Tick();
  EXPECT_NEAR(StatsOf(*arbiter, 1).cpu.share, 2, 1e-9);
  EXPECT_THAT(a_.applied(Resource::kCpu), Optional(DoubleNear(2 * kTickNanos, 1)));
}

TEST_F(ArbiterServiceTest, CeilingCapsShareAndEntitlement) {
  a_.SetShare(/*weight=*/10, /*guarantee_fraction=*/0, /*ceiling_fraction=*/0.25);
  b_.SetShare(1);
  a_.SetUsage(Backlogged());
  b_.SetUsage(Backlogged());
  auto arbiter = Make({&a_, &b_}, &egress_);
  arbiter->Tick();
  EXPECT_THAT(a_.applied(Resource::kCpu), Optional(DoubleNear(kCpuCapacity / 4, 1)));
  EXPECT_THAT(b_.applied(Resource::kCpu), Optional(DoubleNear(kCpuCapacity * 3 / 4, 1)));
  ConsumerShareStats a = StatsOf(*arbiter, 1);
  EXPECT_NEAR(a.cpu.ceiling, 1, 1e-9);
  EXPECT_NEAR(a.cpu.share, 1, 1e-9);
  EXPECT_NEAR(a.memory.ceiling, kMemory / 4.0, 1e-9);
}

// hard_ceiling turns the ceiling into limits the consumer and the egress side enforce: CPU in
// cores of the worker threads (followed when the pool is resized), egress as a rate of the cap.
// Applied when it changes only; switched off, both are removed.
TEST_F(ArbiterServiceTest, HardCeilingIsAppliedAsLimits) {
  a_.SetShare(/*weight=*/1, /*guarantee_fraction=*/0, /*ceiling_fraction=*/0.25,
              /*hard_ceiling=*/true);
  b_.SetShare(/*weight=*/1, /*guarantee_fraction=*/0, /*ceiling_fraction=*/0.25);
  egress_.SetCap(1000);
  auto arbiter = Make({&a_, &b_}, &egress_);
  arbiter->Tick();
  EXPECT_THAT(a_.cpu_limit(), Optional(DoubleNear(kWorkers * 0.25, 1e-9)));
  EXPECT_THAT(egress_.rate_limit(1), Optional(DoubleNear(250, 1e-9)));
  EXPECT_EQ(b_.cpu_limit(), std::nullopt);  // a soft ceiling: never limited
  EXPECT_EQ(egress_.rate_limit(2), std::nullopt);
  EXPECT_NEAR(StatsOf(*arbiter, 1).cpu.limit, 1, 1e-9);
  EXPECT_NEAR(StatsOf(*arbiter, 1).egress.limit, 250, 1e-9);
  EXPECT_EQ(StatsOf(*arbiter, 2).cpu.limit, 0);

  clock_.Advance(absl::Milliseconds(100));
  arbiter->Tick();
  EXPECT_EQ(a_.cpu_limit_calls(), 1);  // unchanged: not applied again
  workers_ = 2;
  clock_.Advance(absl::Milliseconds(100));
  arbiter->Tick();
  EXPECT_THAT(a_.cpu_limit(), Optional(DoubleNear(0.5, 1e-9)));

  a_.SetShare(1, 0, 0.25, /*hard_ceiling=*/false);
  clock_.Advance(absl::Milliseconds(100));
  arbiter->Tick();
  EXPECT_THAT(a_.cpu_limit(), Optional(0.0));
  EXPECT_THAT(egress_.rate_limit(1), Optional(0.0));
}

// Without an egress cap there is nothing to take a fraction of: CPU is limited, egress is not.
TEST_F(ArbiterServiceTest, HardCeilingWithoutAnEgressCapLimitsCpuOnly) {
  a_.SetShare(1, 0, 0.5, /*hard_ceiling=*/true);
  auto arbiter = Make({&a_}, &egress_);
  arbiter->Tick();
  EXPECT_THAT(a_.cpu_limit(), Optional(DoubleNear(kWorkers * 0.5, 1e-9)));
  EXPECT_EQ(egress_.rate_limit(1), std::nullopt);
}

// A removed consumer's egress limit goes with it (a partition created later under its id must not
// inherit it).
TEST_F(ArbiterServiceTest, RemovingAConsumerRemovesItsEgressLimit) {
  a_.SetShare(1, 0, 0.5, /*hard_ceiling=*/true);
  egress_.SetCap(1000);
  auto arbiter = Make({&a_, &b_}, &egress_);
  arbiter->Tick();
  EXPECT_THAT(egress_.rate_limit(1), Optional(DoubleNear(500, 1e-9)));
  ASSERT_TRUE(arbiter->RemoveConsumer(1).ok());
  EXPECT_THAT(egress_.rate_limit(1), Optional(0.0));
}

// Advisory: everything is measured and reported, nothing is applied.
TEST_F(ArbiterServiceTest, AdvisoryAppliesNothing) {
  a_.SetShare(1, 0, 0.25, /*hard_ceiling=*/true);
  b_.SetShare(3);
  a_.SetUsage(Backlogged());
  b_.SetUsage(Backlogged());
  egress_.SetCap(1000);
  absl::StatusOr<std::unique_ptr<ArbiterService>> arbiter =
      ArbiterService::Create({.tick = absl::Hours(1),
                              .cpu_workers = [] { return kWorkers; },
                              .memory_bytes = kMemory,
                              .clock = &clock_,
                              .advisory = true},
                             &egress_);
  ASSERT_TRUE(arbiter.ok());
  ASSERT_TRUE((*arbiter)->AddConsumer(&a_).ok());
  ASSERT_TRUE((*arbiter)->AddConsumer(&b_).ok());
  (*arbiter)->Tick();
  for (const FakeResourceConsumer* c : {&a_, &b_}) {
    for (Resource r : {Resource::kCpu, Resource::kMemory, Resource::kEgress}) {
      EXPECT_EQ(c->apply_calls(r), 0) << c->name();
    }
    EXPECT_EQ(c->cpu_limit_calls(), 0) << c->name();
  }
  EXPECT_EQ(egress_.weight(1), std::nullopt);
  EXPECT_EQ(egress_.rate_limit(1), std::nullopt);
  EXPECT_NEAR(StatsOf(**arbiter, 1).cpu.share, 1, 1e-9);  // still computed and reported
  EXPECT_EQ(StatsOf(**arbiter, 1).cpu.limit, 0);          // but no limit is in force
}

TEST_F(ArbiterServiceTest, GuaranteeHoldsAgainstAHeavierNeighbour) {
  a_.SetShare(/*weight=*/1, /*guarantee_fraction=*/0.5);
  b_.SetShare(9);
  a_.SetUsage(Backlogged());
  b_.SetUsage(Backlogged());
  auto arbiter = Make({&a_, &b_}, &egress_);
  arbiter->Tick();
  // By weight alone a would get a tenth; its guarantee gives it half.
  EXPECT_THAT(a_.applied(Resource::kCpu), Optional(DoubleNear(kCpuCapacity / 2, 1)));
  EXPECT_THAT(b_.applied(Resource::kCpu), Optional(DoubleNear(kCpuCapacity / 2, 1)));
  EXPECT_NEAR(StatsOf(*arbiter, 1).cpu.guarantee, kWorkers / 2.0, 1e-9);
}

TEST_F(ArbiterServiceTest, MinimumCpuWeightForAZeroEntitlement) {
  // Guarantees that take the whole capacity leave a nothing: it still gets a positive weight.
  a_.SetShare(1);
  b_.SetShare(/*weight=*/1, /*guarantee_fraction=*/1);
  a_.SetUsage(Backlogged());
  b_.SetUsage(Backlogged());
  auto arbiter = Make({&a_, &b_}, &egress_);
  arbiter->Tick();
  EXPECT_THAT(a_.applied(Resource::kCpu),
              Optional(DoubleNear(kCpuCapacity * ArbiterService::kMinCpuWeightFraction, 1)));
}

// ---- memory ----

TEST_F(ArbiterServiceTest, MemoryIsLentByAQuietConsumerAndReclaimed) {
  a_.SetUsage({.memory_bytes = 600, .memory_limit = 800});
  b_.SetUsage({.memory_bytes = 10, .memory_limit = 800});
  auto arbiter = Make({&a_, &b_}, &egress_);
  arbiter->Tick();
  // a holds more than half of its limit (its last share before any tick): it wants its limit.
  // b holds little: it keeps a quarter of its weighted part, 500, which is less than its limit
  // (more than twice what it holds).
  EXPECT_THAT(a_.applied(Resource::kMemory), Optional(DoubleNear(800, 1e-9)));
  EXPECT_THAT(b_.applied(Resource::kMemory), Optional(DoubleNear(125, 1e-9)));
  ConsumerShareStats b = StatsOf(*arbiter, 2);
  EXPECT_NEAR(b.memory.demand, 125, 1e-9);
  EXPECT_NEAR(b.memory.usage, 10, 1e-9);

  // b now holds more than half of its share: it wants its limit back, and the two split.
  b_.SetUsage({.memory_bytes = 150, .memory_limit = 800});
  clock_.Advance(absl::Milliseconds(100));
  arbiter->Tick();
  EXPECT_THAT(a_.applied(Resource::kMemory), Optional(DoubleNear(500, 1e-9)));
  EXPECT_THAT(b_.applied(Resource::kMemory), Optional(DoubleNear(500, 1e-9)));
}

TEST_F(ArbiterServiceTest, QuietMemoryKeepsTwiceWhatItHolds) {
  a_.SetUsage({.memory_bytes = 150, .memory_limit = 400});  // 150 < 200: quiet
  b_.SetUsage({.memory_bytes = 900, .memory_limit = 900});
  auto arbiter = Make({&a_, &b_}, &egress_);
  arbiter->Tick();
  EXPECT_NEAR(StatsOf(*arbiter, 1).memory.demand, 300, 1e-9);
  EXPECT_THAT(a_.applied(Resource::kMemory), Optional(DoubleNear(300, 1e-9)));
  EXPECT_THAT(b_.applied(Resource::kMemory), Optional(DoubleNear(700, 1e-9)));
}

// What a consumer's caches borrowed from its own idle parts is not demand: a consumer that holds
// 300 of 400, 200 of it borrowed, is as quiet as one holding 100 (it keeps twice that), and the
// rest goes to its neighbour; without the borrowed bytes counted apart it would want its limit.
TEST_F(ArbiterServiceTest, BorrowedCacheBytesAreNotMemoryDemand) {
  a_.SetUsage({.memory_bytes = 300, .memory_limit = 400, .memory_borrowed_bytes = 200});
  b_.SetUsage({.memory_bytes = 900, .memory_limit = 900});
  auto arbiter = Make({&a_, &b_}, &egress_);
  arbiter->Tick();
  EXPECT_NEAR(StatsOf(*arbiter, 1).memory.demand, 200, 1e-9);
  EXPECT_NEAR(StatsOf(*arbiter, 1).memory.usage, 300, 1e-9);  // what it holds, borrowed or not
  EXPECT_THAT(a_.applied(Resource::kMemory), Optional(DoubleNear(200, 1e-9)));
  EXPECT_THAT(b_.applied(Resource::kMemory), Optional(DoubleNear(800, 1e-9)));
  // The same bytes its own: busy, it wants its limit.
  a_.SetUsage({.memory_bytes = 300, .memory_limit = 400});
  clock_.Advance(absl::Milliseconds(100));
  arbiter->Tick();
  EXPECT_NEAR(StatsOf(*arbiter, 1).memory.demand, 400, 1e-9);
}

// Sixteen consumers, each configured for 288 of 1000 (a quarter of the limit is 72; sixteen of
// those are 1,152): fifteen idle ones keep a quarter of their weighted part (1000 / 16) each, not
// of their limit, so they lend, and the one whose caches ask for its whole limit gets all of it.
// With the floor at a quarter of the limit every idle consumer would demand 72, more than its part
// of 62.5, and all sixteen would get 62.5.
TEST_F(ArbiterServiceTest, IdleConsumersLendMemoryHoweverManyThereAre) {
  std::vector<std::unique_ptr<FakeResourceConsumer>> consumers;
  std::vector<FakeResourceConsumer*> raw;
  for (uint32_t id = 1; id <= 16; ++id) {
    consumers.push_back(std::make_unique<FakeResourceConsumer>(id, absl::StrCat("p", id)));
    consumers.back()->SetUsage({.memory_bytes = 1, .memory_limit = 288});
    raw.push_back(consumers.back().get());
  }
  consumers[0]->SetUsage({.memory_bytes = 1, .memory_limit = 288, .memory_cache_demand = 288});
  auto arbiter = Make(raw, &egress_);
  arbiter->Tick();
  const double idle_floor = ArbiterService::kMemoryIdleFloorFraction * kMemory / 16;
  EXPECT_THAT(consumers[0]->applied(Resource::kMemory), Optional(DoubleNear(288, 1e-9)));
  for (size_t i = 1; i < consumers.size(); ++i) {
    EXPECT_THAT(consumers[i]->applied(Resource::kMemory), Optional(DoubleNear(idle_floor, 1e-9)))
        << i;
  }
  EXPECT_NEAR(StatsOf(*arbiter, 1).memory.demand, 288, 1e-9);
  // A heavier consumer's floor is a quarter of its larger part.
  node::config::ShareConfig heavy;
  heavy.set_weight(3);
  consumers[1]->SetShareConfig(heavy);
  clock_.Advance(absl::Milliseconds(100));
  arbiter->Tick();
  EXPECT_NEAR(StatsOf(*arbiter, 2).memory.demand,
              ArbiterService::kMemoryIdleFloorFraction * kMemory * 3 / 18, 1e-9);
}

// What the caches ask for counts as demand up to the limit, whatever is held: a consumer holding
// little whose caches ask for 600 of its 800 gets 600, and one asking past its limit gets its
// limit.
TEST_F(ArbiterServiceTest, CacheDemandIsMemoryDemandUpToTheLimit) {
  a_.SetUsage({.memory_bytes = 10, .memory_limit = 800, .memory_cache_demand = 600});
  b_.SetUsage({.memory_bytes = 10, .memory_limit = 800});
  auto arbiter = Make({&a_, &b_}, &egress_);
  arbiter->Tick();
  EXPECT_NEAR(StatsOf(*arbiter, 1).memory.demand, 600, 1e-9);
  EXPECT_THAT(a_.applied(Resource::kMemory), Optional(DoubleNear(600, 1e-9)));
  EXPECT_THAT(b_.applied(Resource::kMemory), Optional(DoubleNear(125, 1e-9)));  // its floor
  a_.SetUsage({.memory_bytes = 10, .memory_limit = 800, .memory_cache_demand = 5000});
  clock_.Advance(absl::Milliseconds(100));
  arbiter->Tick();
  EXPECT_NEAR(StatsOf(*arbiter, 1).memory.demand, 800, 1e-9);
  EXPECT_THAT(a_.applied(Resource::kMemory), Optional(DoubleNear(800, 1e-9)));
  // Below what it holds, the held demand stands: holding 300 of its last share of 800 (not
  // busy), twice that.
  a_.SetUsage({.memory_bytes = 300, .memory_limit = 800, .memory_cache_demand = 100});
  clock_.Advance(absl::Milliseconds(100));
  arbiter->Tick();
  EXPECT_NEAR(StatsOf(*arbiter, 1).memory.demand, 600, 1e-9);
}

// ---- spill disk ----

TEST_F(ArbiterServiceTest, SpillDiskIsDividedAmongSpillersAboveTheirFloors) {
  FakeResourceConsumer c{3, "c"};                                        // never spills
  a_.SetUsage({.disk_bytes = 900, .disk_limit = 0, .disk_floor = 100});  // busy, no own budget
  b_.SetUsage({.disk_bytes = 0, .disk_limit = 0, .disk_floor = 100});    // idle
  absl::StatusOr<std::unique_ptr<ArbiterService>> arbiter =
      ArbiterService::Create({.tick = absl::Hours(1),
                              .cpu_workers = [] { return 1; },
                              .memory_bytes = kMemory,
                              .disk_bytes = 1000,
                              .clock = &clock_},
                             nullptr);
  ASSERT_TRUE(arbiter.ok()) << arbiter.status();
  for (FakeResourceConsumer* x : {&a_, &b_, &c}) ASSERT_TRUE((*arbiter)->AddConsumer(x).ok());
  (*arbiter)->Tick();
  // b holds nothing: it keeps its floor (a quarter of the capacity, 250, is its idle demand);
  // a, busy, gets the rest.
  EXPECT_THAT(b_.applied(Resource::kDisk), Optional(DoubleNear(250, 1e-9)));
  EXPECT_THAT(a_.applied(Resource::kDisk), Optional(DoubleNear(750, 1e-9)));
  EXPECT_EQ(c.applied(Resource::kDisk), std::nullopt) << "a consumer that never spills";
  EXPECT_NEAR(StatsOf(**arbiter, 1).disk.usage, 900, 1e-9);

  // b starts spilling, and a's own budget caps it at 300: b gets what a cannot take.
  a_.SetUsage({.disk_bytes = 300, .disk_limit = 300, .disk_floor = 100});
  b_.SetUsage({.disk_bytes = 200, .disk_limit = 0, .disk_floor = 100});
  clock_.Advance(absl::Milliseconds(100));
  (*arbiter)->Tick();
  EXPECT_THAT(a_.applied(Resource::kDisk), Optional(DoubleNear(300, 1e-9)));
  EXPECT_THAT(b_.applied(Resource::kDisk), Optional(DoubleNear(700, 1e-9)));

  // Both busy with no budgets of their own: by weight (1 : 3), never below a floor.
  a_.SetUsage({.disk_bytes = 900, .disk_limit = 0, .disk_floor = 300});
  b_.SetUsage({.disk_bytes = 900, .disk_limit = 0, .disk_floor = 100});
  b_.SetShare(3);
  clock_.Advance(absl::Milliseconds(100));
  (*arbiter)->Tick();
  EXPECT_THAT(a_.applied(Resource::kDisk), Optional(DoubleNear(300, 1e-9)));  // floor > 250
  EXPECT_THAT(b_.applied(Resource::kDisk), Optional(DoubleNear(700, 1e-9)));
}

TEST_F(ArbiterServiceTest, SpillDiskIsNotDividedWithoutACapacity) {
  a_.SetUsage({.disk_bytes = 900, .disk_limit = 0, .disk_floor = 100});
  auto arbiter = Make({&a_}, &egress_);  // disk_bytes = 0
  arbiter->Tick();
  EXPECT_EQ(a_.applied(Resource::kDisk), std::nullopt);
  EXPECT_EQ(StatsOf(*arbiter, 1).disk.share, 0);
}

// ---- egress ----

TEST_F(ArbiterServiceTest, EgressWeightsFollowEntitlementsAndRatesAreMeasured) {
  egress_.SetCap(1e6);
  a_.SetShare(1);
  b_.SetShare(3);
  egress_.AddBytesSent(1, 10'000);  // in the first tick (100 ms assumed): 100 KB/s
  auto arbiter = Make({&a_, &b_}, &egress_);
  arbiter->Tick();
  EXPECT_THAT(egress_.weight(1), Optional(250u));
  EXPECT_THAT(egress_.weight(2), Optional(750u));
  EXPECT_THAT(a_.applied(Resource::kEgress), Optional(DoubleNear(2.5e5, 1e-6)));
  EXPECT_THAT(b_.applied(Resource::kEgress), Optional(DoubleNear(7.5e5, 1e-6)));
  ConsumerShareStats a = StatsOf(*arbiter, 1);
  const double demand = ArbiterService::kEgressDemandHeadroom * 1e5 +
                        ArbiterService::kEgressDemandSlackBytesPerSecond;
  EXPECT_NEAR(a.egress.usage, 1e5, 1e-6);
  EXPECT_NEAR(a.egress.demand, demand, 1e-6);
  EXPECT_NEAR(a.egress.share, demand, 1e-6);  // below its fair share: it gets its demand
  EXPECT_NEAR(a.egress.ceiling, 1e6, 1e-6);

  // Rates are per tick: 20 KB more in 200 ms is 100 KB/s; b sent nothing.
  egress_.AddBytesSent(1, 20'000);
  clock_.Advance(absl::Milliseconds(200));
  arbiter->Tick();
  EXPECT_NEAR(StatsOf(*arbiter, 1).egress.usage, 1e5, 1e-6);
  EXPECT_NEAR(StatsOf(*arbiter, 2).egress.usage, 0, 1e-12);
}

TEST_F(ArbiterServiceTest, UnlimitedEgressDividesTheStandInCapacity) {
  auto arbiter = Make({&a_, &b_}, &egress_);  // the fake has no cap
  arbiter->Tick();
  EXPECT_THAT(egress_.weight(1), Optional(500u));
  EXPECT_THAT(egress_.weight(2), Optional(500u));
  EXPECT_NEAR(StatsOf(*arbiter, 1).egress.ceiling, ArbiterService::kUnlimitedEgressCapacity, 1);
}

TEST_F(ArbiterServiceTest, EgressWeightIsClampedToAtLeastOne) {
  egress_.SetCap(1e6);
  a_.SetShare(1);
  b_.SetShare(1e5);
  auto arbiter = Make({&a_, &b_}, &egress_);
  arbiter->Tick();
  EXPECT_THAT(egress_.weight(1), Optional(1u));
  EXPECT_THAT(egress_.weight(2), Optional(999u));
}

TEST_F(ArbiterServiceTest, WithoutAnEgressSideEgressIsStillDivided) {
  auto arbiter = Make({&a_, &b_}, nullptr);
  arbiter->Tick();
  EXPECT_THAT(a_.applied(Resource::kEgress),
              Optional(DoubleNear(ArbiterService::kUnlimitedEgressCapacity / 2, 1)));
  EXPECT_NEAR(StatsOf(*arbiter, 1).egress.usage, 0, 1e-12);
  EXPECT_EQ(egress_.weight(1), std::nullopt);
}

// ---- updates, errors, consumers, lifecycle ----

TEST_F(ArbiterServiceTest, UpdateSharesAppliesAtOnce) {
  a_.SetUsage(Backlogged());
  b_.SetUsage(Backlogged());
  auto arbiter = Make({&a_, &b_}, &egress_);
  arbiter->Tick();
  EXPECT_THAT(a_.applied(Resource::kCpu), Optional(DoubleNear(kCpuCapacity / 2, 1)));

  node::config::ShareConfig heavy;
  heavy.set_weight(3);
  clock_.Advance(absl::Milliseconds(100));
  ASSERT_TRUE(arbiter->UpdateShares({{1, heavy}}).ok());
  EXPECT_EQ(a_.share_config().weight(), 3);
  EXPECT_THAT(a_.applied(Resource::kCpu), Optional(DoubleNear(kCpuCapacity * 3 / 4, 1)));
  EXPECT_THAT(egress_.weight(1), Optional(750u));
  EXPECT_EQ(StatsOf(*arbiter, 1).cpu.weight, 3);
}

TEST_F(ArbiterServiceTest, UpdateSharesWithAnUnknownIdChangesNothing) {
  auto arbiter = Make({&a_, &b_}, &egress_);
  node::config::ShareConfig heavy;
  heavy.set_weight(3);
  absl::Status s = arbiter->UpdateShares({{1, heavy}, {9, heavy}});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("9"));
  EXPECT_EQ(a_.share_config().weight(), 1);
  EXPECT_EQ(a_.apply_calls(Resource::kCpu), 0);
}

TEST_F(ArbiterServiceTest, InvalidShareConfigSkipsTheWholeTick) {
  a_.SetShare(0);  // weight 0: AllocateFairShares refuses
  auto arbiter = Make({&a_, &b_}, &egress_);
  arbiter->Tick();
  EXPECT_EQ(a_.apply_calls(Resource::kCpu), 0);
  EXPECT_EQ(b_.apply_calls(Resource::kMemory), 0);
  EXPECT_EQ(egress_.weight(2), std::nullopt);
  EXPECT_TRUE(arbiter->Stats().empty());
}

TEST_F(ArbiterServiceTest, ConsumersAreAddedAndRemoved) {
  auto arbiter = Make({&a_}, &egress_);
  FakeResourceConsumer twin(1, "twin");
  EXPECT_EQ(arbiter->AddConsumer(&twin).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(arbiter->RemoveConsumer(7).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(arbiter->AddConsumer(&b_).ok());
  b_.SetUsage(Backlogged());
  arbiter->Tick();
  ASSERT_EQ(arbiter->Stats().size(), 2u);
  EXPECT_EQ(arbiter->Stats()[1].name, "b");

  ASSERT_TRUE(arbiter->RemoveConsumer(2).ok());
  const int calls = b_.usage_calls();
  clock_.Advance(absl::Milliseconds(100));
  arbiter->Tick();
  EXPECT_EQ(b_.usage_calls(), calls);  // never called again
  ASSERT_EQ(arbiter->Stats().size(), 1u);
  EXPECT_EQ(arbiter->StatsOf(2), std::nullopt);
  EXPECT_THAT(a_.applied(Resource::kCpu), Optional(DoubleNear(kCpuCapacity, 1)));  // all of it
}

// after_tick_unlocked runs after Tick() once the arbiter's mutex is free: it may call the
// arbiter (here its stats, which take that mutex) and sees the tick it follows applied.
TEST_F(ArbiterServiceTest, AfterTickUnlockedMayCallTheArbiter) {
  ArbiterService* self = nullptr;
  int calls = 0;
  std::optional<ConsumerShareStats> seen;
  absl::StatusOr<std::unique_ptr<ArbiterService>> arbiter =
      ArbiterService::Create({.tick = absl::Hours(1),
                              .cpu_workers = [] { return kWorkers; },
                              .memory_bytes = kMemory,
                              .after_tick_unlocked =
                                  [&] {
                                    ++calls;
                                    seen = self->StatsOf(a_.id());
                                  },
                              .clock = &clock_},
                             nullptr);
  ASSERT_TRUE(arbiter.ok()) << arbiter.status();
  self = arbiter->get();
  ASSERT_TRUE(self->AddConsumer(&a_).ok());
  EXPECT_EQ(calls, 0) << "not after AddConsumer's tick";
  clock_.Advance(absl::Milliseconds(100));
  self->Tick();
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->id, a_.id());
}

TEST_F(ArbiterServiceTest, StartTicksAtOnceAndStopIsFinal) {
  auto arbiter = Make({&a_}, &egress_);
  EXPECT_TRUE(arbiter->Stats().empty());
  ASSERT_TRUE(arbiter->Start().ok());
  EXPECT_EQ(a_.apply_calls(Resource::kCpu), 1);
  EXPECT_EQ(arbiter->Stats().size(), 1u);
  EXPECT_EQ(arbiter->Start().code(), absl::StatusCode::kFailedPrecondition);

  arbiter->Stop();
  arbiter->Stop();  // idempotent
  arbiter->Tick();
  EXPECT_EQ(a_.apply_calls(Resource::kCpu), 1);
  node::config::ShareConfig share;
  share.set_weight(2);
  EXPECT_EQ(arbiter->UpdateShares({{1, share}}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(arbiter->AddConsumer(&b_).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(arbiter->Stats().size(), 1u);  // still readable
}

TEST_F(ArbiterServiceTest, CreateRejectsBadOptions) {
  auto create = [&](ArbiterService::Options o) {
    return ArbiterService::Create(std::move(o), nullptr).status();
  };
  const auto workers = [] { return 1; };
  EXPECT_THAT(
      create({.tick = absl::ZeroDuration(), .cpu_workers = workers, .memory_bytes = 1}).message(),
      HasSubstr("tick"));
  EXPECT_THAT(create({.memory_bytes = 1}).message(), HasSubstr("cpu_workers"));
  EXPECT_THAT(create({.cpu_workers = workers}).message(), HasSubstr("memory_bytes"));
  EXPECT_THAT(create({.cpu_workers = workers, .memory_bytes = 1, .clock = nullptr}).message(),
              HasSubstr("clock"));
  EXPECT_TRUE(create({.cpu_workers = workers, .memory_bytes = 1}).ok());
}

}  // namespace
}  // namespace flowctl
