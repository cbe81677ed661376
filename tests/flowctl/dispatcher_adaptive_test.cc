// Adaptive lane weights (Dispatcher::AdaptWeights): a lane over its queueing-delay target is given
// a higher scheduling weight, which takes CPU from a busy neighbour; a lane well under its target
// goes back to its configured weight; in between it holds. Deterministic: a never-started
// WorkerPool run quantum by quantum (RunQueuedForTest) on a FakeClock, with handlers that "use"
// CPU by advancing the clock (CpuClock::kWall charges wall time on that clock).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "flowctl/dispatcher.h"
#include "flowctl/worker_pool.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"

namespace flowctl {
namespace {

using ::tests::FakeClock;
using OfferResult = Dispatcher::OfferResult;

constexpr int64_t kMs = 1'000'000;
constexpr absl::Duration kCostPerMessage = absl::Microseconds(100);

class AdaptiveWeightsTest : public ::testing::Test {
 protected:
  AdaptiveWeightsTest()
      : pool_({.threads = 1,
               .max_batch = 64,
               .max_quantum = absl::Microseconds(500),
               .cpu_clock = WorkerPool::CpuClock::kWall,
               .clock = &clock_}) {}
  ~AdaptiveWeightsTest() override {
    if (d_) d_->Stop();
  }

  // Lane 0 "consensus" (weight 1, `target`), lane 1 "flood" (weight 1, no target). Every message
  // costs kCostPerMessage of (fake) CPU.
  void Create(Dispatcher::DelayTarget target) {
    Dispatcher::Options o;
    o.name = std::string("p");
    o.budget = {1'000'000, int64_t{1} << 30};
    o.clock = &clock_;
    auto cost = [this](Message) { clock_.Advance(kCostPerMessage); };
    o.lanes.push_back({.name = "consensus", .weight = 1, .handler = cost, .delay_target = target});
    o.lanes.push_back({.name = "flood", .weight = 1, .handler = cost});
    absl::StatusOr<std::unique_ptr<Dispatcher>> d = Dispatcher::Create(&pool_, std::move(o));
    ASSERT_TRUE(d.ok()) << d.status();
    d_ = *std::move(d);
  }

  void Fill(int lane, int n) {
    for (int i = 0; i < n; ++i) ASSERT_EQ(d_->Offer(lane, Message{}), OfferResult::kAccepted);
  }

  // Messages each lane handled while `quanta` quanta ran.
  std::pair<int64_t, int64_t> Run(int quanta) {
    const int64_t a = d_->GetLaneStats(0).processed, b = d_->GetLaneStats(1).processed;
    EXPECT_EQ(pool_.RunQueuedForTest(quanta), quanta);
    return {d_->GetLaneStats(0).processed - a, d_->GetLaneStats(1).processed - b};
  }

  FakeClock clock_;
  WorkerPool pool_;
  std::unique_ptr<Dispatcher> d_;
};

// The effect, not a read-back: with equal weights two backlogged lanes split the quanta evenly;
// once the delayed lane's weight has been raised to its ceiling, it gets about 8 of every 9.
TEST_F(AdaptiveWeightsTest, RaisedWeightTakesCpuFromABusyNeighbour) {
  Create({.target_nanos = 1 * kMs, .max_weight = 8});
  Fill(0, 5000);
  Fill(1, 5000);
  auto [a1, b1] = Run(200);
  EXPECT_NEAR(static_cast<double>(a1) / (a1 + b1), 0.5, 0.05) << a1 << " vs " << b1;

  // The oldest consensus message has waited far past 1 ms: each step raises x1.5 (at least +1),
  // 1 -> 2 -> 3 -> 5 -> 8, then holds at the ceiling.
  std::vector<int> weights;
  for (int step = 0; step < 5; ++step) {
    d_->AdaptWeights();
    weights.push_back(d_->GetLaneStats(0).effective_weight);
  }
  EXPECT_EQ(weights, (std::vector<int>{2, 3, 5, 8, 8}));
  Dispatcher::LaneStats s = d_->GetLaneStats(0);
  EXPECT_EQ(s.weight, 1);  // the configured weight is unchanged
  EXPECT_EQ(s.weight_raises, 4);
  EXPECT_EQ(s.max_weight, 8);
  EXPECT_GT(s.window_delay_nanos, 1 * kMs);
  EXPECT_EQ(d_->GetLaneStats(1).effective_weight, 1);

  auto [a2, b2] = Run(180);
  EXPECT_NEAR(static_cast<double>(a2) / (a2 + b2), 8.0 / 9, 0.05) << a2 << " vs " << b2;
}

// Capacities stay split by the configured weights: adaptation moves CPU, not memory.
TEST_F(AdaptiveWeightsTest, CapacitiesDoNotFollowTheScheduledWeight) {
  Create({.target_nanos = 1 * kMs});
  const int64_t before = d_->GetLaneStats(0).capacity_messages;
  Fill(0, 10);
  clock_.Advance(absl::Milliseconds(5));
  ASSERT_EQ(d_->AdaptWeights(), 1);
  EXPECT_EQ(d_->GetLaneStats(0).effective_weight, 2);
  EXPECT_EQ(d_->GetLaneStats(0).capacity_messages, before);
  EXPECT_EQ(d_->GetLaneStats(1).capacity_messages, before);
}

// Default ceiling: kDefaultMaxWeightFactor x the configured weight. Once the delay is gone the
// weight steps back down (x0.75, at least -1) to the configured weight and no further.
TEST_F(AdaptiveWeightsTest, WeightReturnsToTheConfiguredOneWhenTheDelayIsGone) {
  Create({.target_nanos = 1 * kMs});
  Fill(0, 10);
  clock_.Advance(absl::Milliseconds(5));
  for (int step = 0; step < 10; ++step) d_->AdaptWeights();
  EXPECT_EQ(d_->GetLaneStats(0).effective_weight, Dispatcher::kDefaultMaxWeightFactor);

  Run(2);  // drains the lane: its messages started after 5 ms
  EXPECT_EQ(d_->GetLaneStats(0).depth_messages, 0);
  d_->AdaptWeights();  // this window's p99 is 5 ms: still over, holds at the ceiling
  EXPECT_EQ(d_->GetLaneStats(0).effective_weight, 8);
  EXPECT_GE(d_->GetLaneStats(0).window_delay_nanos, 5 * kMs);

  std::vector<int> weights;
  for (int step = 0; step < 6; ++step) {
    d_->AdaptWeights();  // empty windows, nothing queued: signal 0
    weights.push_back(d_->GetLaneStats(0).effective_weight);
  }
  EXPECT_EQ(weights, (std::vector<int>{6, 4, 3, 2, 1, 1}));
  EXPECT_EQ(d_->GetLaneStats(0).weight_lowers, 5);
  EXPECT_EQ(d_->GetLaneStats(0).window_delay_nanos, 0);
}

// Between half the target and the target the weight holds (hysteresis).
TEST_F(AdaptiveWeightsTest, HoldsBetweenHalfTheTargetAndTheTarget) {
  Create({.target_nanos = 10 * kMs});
  Fill(0, 1);
  clock_.Advance(absl::Milliseconds(20));
  ASSERT_EQ(d_->AdaptWeights(), 1);  // oldest age 20 ms > 10 ms
  Run(1);                            // one message waited 20 ms
  d_->AdaptWeights();                // window p99 20 ms: up again
  ASSERT_EQ(d_->GetLaneStats(0).effective_weight, 3);

  Fill(0, 1);
  clock_.Advance(absl::Milliseconds(7));
  Run(1);  // waited 7 ms: in (5, 10]
  EXPECT_EQ(d_->AdaptWeights(), 0);
  Dispatcher::LaneStats s = d_->GetLaneStats(0);
  EXPECT_EQ(s.effective_weight, 3);
  EXPECT_GE(s.window_delay_nanos, 7 * kMs);  // a histogram bucket's bound, within 6.25%
  EXPECT_LE(s.window_delay_nanos, 7.5 * kMs);
  EXPECT_EQ(s.weight_raises, 2);
  EXPECT_EQ(s.weight_lowers, 0);
}

// A lane with no target never changes, however long its messages wait.
TEST_F(AdaptiveWeightsTest, LaneWithoutATargetKeepsItsWeight) {
  Create({});
  Fill(1, 100);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(d_->AdaptWeights(), 0);
  Dispatcher::LaneStats s = d_->GetLaneStats(1);
  EXPECT_EQ(s.effective_weight, 1);
  EXPECT_EQ(s.delay_target_nanos, 0);
  EXPECT_EQ(s.weight_raises, 0);
}

// Live changes: a configured weight set live restarts the lane there (and is the new floor); a
// target removed puts the configured weight back; a lower ceiling clamps at once; bad values are
// refused and change nothing.
TEST_F(AdaptiveWeightsTest, LiveChanges) {
  Create({.target_nanos = 1 * kMs});
  Fill(0, 10);
  clock_.Advance(absl::Milliseconds(5));
  for (int step = 0; step < 3; ++step) d_->AdaptWeights();
  ASSERT_EQ(d_->GetLaneStats(0).effective_weight, 5);

  ASSERT_TRUE(d_->SetDelayTarget(0, {.target_nanos = 1 * kMs, .max_weight = 4}).ok());
  EXPECT_EQ(d_->GetLaneStats(0).effective_weight, 4);
  EXPECT_EQ(d_->GetLaneStats(0).max_weight, 4);

  ASSERT_TRUE(d_->SetLaneWeight(0, 3).ok());
  EXPECT_EQ(d_->GetLaneStats(0).effective_weight, 3);
  d_->AdaptWeights();
  EXPECT_EQ(d_->GetLaneStats(0).effective_weight, 4);  // ceil(4.5) clamped to the ceiling

  ASSERT_TRUE(d_->SetDelayTarget(0, {}).ok());
  EXPECT_EQ(d_->GetLaneStats(0).effective_weight, 3);
  EXPECT_EQ(d_->AdaptWeights(), 0);

  EXPECT_FALSE(d_->SetDelayTarget(0, {.target_nanos = -1}).ok());
  EXPECT_FALSE(d_->SetDelayTarget(0, {.target_nanos = 1, .max_weight = -2}).ok());
  EXPECT_FALSE(d_->SetDelayTarget(9, {.target_nanos = 1}).ok());
  EXPECT_EQ(d_->GetLaneStats(0).delay_target_nanos, 0);
}

// A flow update re-sends every configured weight: an unchanged one keeps the adapted weight. A
// target set live judges only what happens from then on (not the delays from before).
TEST_F(AdaptiveWeightsTest, UnchangedWeightKeepsAdaptationAndANewTargetStartsAFreshWindow) {
  Create({.target_nanos = 1 * kMs});
  Fill(0, 10);
  clock_.Advance(absl::Milliseconds(5));
  for (int step = 0; step < 2; ++step) d_->AdaptWeights();
  ASSERT_EQ(d_->GetLaneStats(0).effective_weight, 3);
  ASSERT_TRUE(d_->SetLaneWeight(0, 1).ok());
  EXPECT_EQ(d_->GetLaneStats(0).effective_weight, 3);

  // Lane 1 (no target) waited 50 ms before adaptation was on for it.
  Fill(1, 1);
  clock_.Advance(absl::Milliseconds(50));
  Run(3);  // lane 0's ten messages, then lane 1's
  ASSERT_EQ(d_->GetLaneStats(1).depth_messages, 0);
  ASSERT_TRUE(d_->SetDelayTarget(1, {.target_nanos = 10 * kMs}).ok());
  d_->AdaptWeights();
  EXPECT_EQ(d_->GetLaneStats(1).effective_weight, 1);  // the 50 ms was before the target
  EXPECT_EQ(d_->GetLaneStats(1).window_delay_nanos, 0);
}

TEST(DispatcherAdaptiveOptionsTest, NegativeTargetIsRefusedAtCreate) {
  WorkerPool pool({});
  Dispatcher::Options o;
  o.name = std::string("p");
  o.budget = {10, 1000};
  o.lanes.push_back(
      {.name = "a", .weight = 1, .handler = [](Message) {}, .delay_target = {.target_nanos = -5}});
  absl::StatusOr<std::unique_ptr<Dispatcher>> d = Dispatcher::Create(&pool, std::move(o));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), "lanes[a].delay_target.target_nanos must be >= 0, got -5");
}

}  // namespace
}  // namespace flowctl
