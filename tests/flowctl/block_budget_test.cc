#include "flowctl/block_budget.h"

#include <vector>

#include "gtest/gtest.h"

namespace flowctl {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSecond = 1000 * kMs;

TEST(BlockBudgetTest, APartitionAloneIsNeverHeld) {
  BlockBudget budget(64);
  budget.SetWeight(1, 1);
  budget.SetWeight(2, 1);  // registered but idle: not counted
  EXPECT_EQ(budget.PartialBatchIntervalNanos(1, 10 * kSecond), 0);
  EXPECT_EQ(budget.ActivePartitions(10 * kSecond), 1u);
  budget.PartialBatchIntervalNanos(2, 10 * kSecond);
  EXPECT_EQ(budget.PartialBatchIntervalNanos(1, 10 * kSecond), kSecond / 64) << "two: 1/budget";
  EXPECT_EQ(budget.LastIntervalNanos(1), kSecond / 64);
}

TEST(BlockBudgetTest, EachLeavesTheOthersTheirShareByWeight) {
  BlockBudget budget(64);
  for (uint32_t id = 1; id <= 16; ++id) budget.SetWeight(id, 1);
  int64_t now = 10 * kSecond;
  for (uint32_t id = 1; id <= 16; ++id) budget.PartialBatchIntervalNanos(id, now);
  // 16 equal partitions: each waits 15 of the budget's 1/64 s slots between its partial batches.
  EXPECT_EQ(budget.PartialBatchIntervalNanos(7, now), 234'375'000);
  EXPECT_EQ(budget.ActivePartitions(now), 16u);

  BlockBudget weighted(40);
  weighted.SetWeight(1, 1);
  weighted.SetWeight(2, 3);
  weighted.PartialBatchIntervalNanos(1, now);
  // Weights 1 and 3: the heavier waits 1/(3 x 40) s, the lighter 3/40 s.
  EXPECT_EQ(weighted.PartialBatchIntervalNanos(2, now), kSecond / 120);
  EXPECT_EQ(weighted.PartialBatchIntervalNanos(1, now), 3 * kSecond / 40);
}

TEST(BlockBudgetTest, APartitionIsActiveForOneWindowAfterItLastHadWork) {
  BlockBudget budget(64);
  budget.SetWeight(1, 1);
  budget.SetWeight(2, 1);
  const int64_t t0 = 5 * kSecond;
  budget.PartialBatchIntervalNanos(2, t0);
  EXPECT_EQ(budget.PartialBatchIntervalNanos(1, t0 + 999 * kMs), kSecond / 64);
  EXPECT_EQ(budget.PartialBatchIntervalNanos(1, t0 + kSecond), 0)
      << "partition 2 had no work for a whole window: partition 1 is alone again";
  EXPECT_EQ(budget.ActivePartitions(t0 + kSecond), 1u);
  // A partition never registered counts with weight 1 from its first call.
  EXPECT_EQ(budget.PartialBatchIntervalNanos(9, t0 + kSecond), kSecond / 64);
  EXPECT_EQ(budget.PartialBatchIntervalNanos(1, t0 + kSecond), kSecond / 64);
}

TEST(BlockBudgetTest, ZeroTurnsItOffLiveAndRemovedPartitionsNoLongerCount) {
  BlockBudget budget(0);
  budget.SetWeight(1, 1);
  budget.SetWeight(2, 1);
  budget.SetWeight(3, 1);
  const int64_t now = kSecond;
  budget.PartialBatchIntervalNanos(3, now);
  EXPECT_EQ(budget.PartialBatchIntervalNanos(1, now), 0);
  EXPECT_EQ(budget.LastIntervalNanos(1), 0);
  budget.SetBlocksPerSecond(10);
  EXPECT_EQ(budget.blocks_per_second(), 10u);
  budget.PartialBatchIntervalNanos(2, now);
  EXPECT_EQ(budget.PartialBatchIntervalNanos(1, now), 200 * kMs);
  budget.Remove(2);
  EXPECT_EQ(budget.PartialBatchIntervalNanos(1, now), 100 * kMs);
  budget.SetWeight(1, 4);  // a new weight counts at once
  EXPECT_EQ(budget.PartialBatchIntervalNanos(1, now), 25 * kMs);
  budget.SetBlocksPerSecond(0);
  EXPECT_EQ(budget.PartialBatchIntervalNanos(1, now), 0);
  EXPECT_EQ(budget.LastIntervalNanos(1), 0);
}

TEST(BlockBudgetTest, TheIntervalIsBoundedByTheCallersMaximum) {
  BlockBudget budget(4);
  budget.PartialBatchIntervalNanos(2, kSecond);
  budget.PartialBatchIntervalNanos(3, kSecond);
  EXPECT_EQ(budget.PartialBatchIntervalNanos(1, kSecond), 500 * kMs);
  EXPECT_EQ(budget.PartialBatchIntervalNanos(1, kSecond, 100 * kMs), 100 * kMs);
  EXPECT_EQ(budget.LastIntervalNanos(1), 100 * kMs) << "the interval in force, bounded";
  EXPECT_EQ(budget.PartialBatchIntervalNanos(1, kSecond, 900 * kMs), 500 * kMs);
}

TEST(BlockBudgetTest, AClockAtZeroStillMarksThePartitionActive) {
  BlockBudget budget(10);
  budget.PartialBatchIntervalNanos(1, 0);
  EXPECT_EQ(budget.ActivePartitions(1), 1u);
  EXPECT_EQ(budget.PartialBatchIntervalNanos(2, 1), 100 * kMs);
}

// One arbiter tick at `now`: partitions 1..ticks.size() have work (their spacing bounded by
// `max_nanos`), then the budget gets their figures.
void TickEach(BlockBudget* budget, int64_t now,
              const std::vector<BlockBudget::PartitionTick>& ticks, int64_t max_nanos = INT64_MAX) {
  for (uint32_t id = 1; id <= ticks.size(); ++id) {
    budget->PartialBatchIntervalNanos(id, now, max_nanos);
  }
  budget->Observe(now, ticks);
}

// `partitions` partitions alike: each started `messages` messages that queued `delay` each, and
// the node committed `blocks` in all.
void Tick(BlockBudget* budget, int64_t now, int64_t delay, uint64_t messages, uint64_t blocks,
          uint32_t partitions = 16) {
  std::vector<BlockBudget::PartitionTick> ticks(partitions);
  for (uint32_t i = 0; i < partitions; ++i) {
    ticks[i] = {.partition = i + 1,
                .delay_sum_nanos = delay * static_cast<int64_t>(messages),
                .messages = messages,
                .blocks = i < blocks % partitions ? blocks / partitions + 1 : blocks / partitions};
  }
  TickEach(budget, now, ticks);
}

// `count` arbiter ticks 100 ms apart after `*now`, each as Tick.
void Ticks(BlockBudget* budget, int64_t* now, int count, int64_t delay, uint64_t messages,
           uint64_t blocks, uint32_t partitions = 16) {
  for (int i = 0; i < count; ++i) {
    *now += 100 * kMs;
    Tick(budget, *now, delay, messages, blocks, partitions);
  }
}

// The adaptation most tests run: a 10-ms target, 1-s steps, a floor of 16.
constexpr BlockBudget::Adaptation kAdaptation{.enabled = true,
                                              .min_blocks_per_second = 16,
                                              .delay_target_nanos = 10 * kMs,
                                              .step_nanos = kSecond};

// One arbiter tick's figures for sixteen partitions, each late: 20 messages that queued 50 ms, and
// one block.
std::vector<BlockBudget::PartitionTick> SixteenLate() {
  std::vector<BlockBudget::PartitionTick> late(16);
  for (uint32_t i = 0; i < 16; ++i) {
    late[i] = {.partition = i + 1, .delay_sum_nanos = 20 * 50 * kMs, .messages = 20, .blocks = 1};
  }
  return late;
}

TEST(BlockBudgetTest, AdaptsDownWhileMessagesQueueAndTheBudgetBindsThenBackUp) {
  BlockBudget budget(64);
  budget.SetAdaptation(kAdaptation);
  int64_t now = kSecond;
  Tick(&budget, now, 0, 0, 0);  // starts the first step
  // A second of messages queueing 30 ms, the node committing 60 blocks a second (the
  // budget binds): one step down, 64 x 0.85 = 54.
  Ticks(&budget, &now, 10, 30 * kMs, 20, 6);
  EXPECT_EQ(budget.blocks_per_second(), 54u);
  EXPECT_EQ(budget.ceiling(), 64u);
  EXPECT_EQ(budget.adaptation_stats().mean_delay_nanos, 30 * kMs);
  EXPECT_DOUBLE_EQ(budget.adaptation_stats().blocks_per_second, 60);
  // The spacing follows the budget in force: 15 others / 54.
  EXPECT_EQ(budget.PartialBatchIntervalNanos(3, now), 277'777'778);
  // Ten more such seconds: down to the floor, never below it.
  Ticks(&budget, &now, 100, 30 * kMs, 20, 6);
  EXPECT_EQ(budget.blocks_per_second(), 16u);
  const uint64_t lowered = budget.adaptation_stats().lowered;
  EXPECT_EQ(lowered, 8u);  // 64 54 45 38 32 27 22 18 16
  // Calm (2 ms, at most half the target): back up a sixteenth of the ceiling per second.
  Ticks(&budget, &now, 10, 2 * kMs, 20, 2);
  EXPECT_EQ(budget.blocks_per_second(), 20u);
  Ticks(&budget, &now, 200, 2 * kMs, 20, 2);
  EXPECT_EQ(budget.blocks_per_second(), 64u) << "never above the ceiling";
  EXPECT_EQ(budget.adaptation_stats().lowered, lowered);
  EXPECT_EQ(budget.adaptation_stats().raised, 12u);  // 16 to 64, 4 at a time
}

TEST(BlockBudgetTest, BetweenHalfTheTargetAndTheTargetTheBudgetHolds) {
  BlockBudget budget(64);
  budget.SetAdaptation({.enabled = true, .delay_target_nanos = 10 * kMs, .step_nanos = kSecond});
  int64_t now = kSecond;
  Tick(&budget, now, 0, 0, 0);
  for (int i = 0; i < 20; ++i) {  // two steps at 30 ms: 64 -> 54 -> 45
    now += 100 * kMs;
    Tick(&budget, now, 30 * kMs, 20, 6);
  }
  ASSERT_EQ(budget.blocks_per_second(), 45u);
  for (int i = 0; i < 50; ++i) {  // 8 ms: neither over the target nor at half of it
    now += 100 * kMs;
    Tick(&budget, now, 8 * kMs, 20, 4);
  }
  EXPECT_EQ(budget.blocks_per_second(), 45u);
}

TEST(BlockBudgetTest, OnlyABindingBudgetWithEnoughSamplesGoesDown) {
  const BlockBudget::Adaptation adaptation{
      .enabled = true, .delay_target_nanos = 10 * kMs, .step_nanos = kSecond};
  {
    // Late, but the node commits 20 blocks a second (< half the budget: a flood's few, full
    // batches and a few partial ones): lowering the budget would only space the others.
    BlockBudget budget(64);
    budget.SetAdaptation(adaptation);
    int64_t now = kSecond;
    Tick(&budget, now, 0, 0, 0);
    Ticks(&budget, &now, 30, 50 * kMs, 20, 2);
    EXPECT_EQ(budget.blocks_per_second(), 64u);
  }
  {
    // One partition with work: alone, it is never held, so the budget does not bind.
    BlockBudget budget(64);
    budget.SetAdaptation(adaptation);
    int64_t now = kSecond;
    Tick(&budget, now, 0, 0, 0, /*partitions=*/1);
    Ticks(&budget, &now, 30, 50 * kMs, 20, 6, /*partitions=*/1);
    EXPECT_EQ(budget.blocks_per_second(), 64u);
    EXPECT_EQ(budget.adaptation_stats().lowered, 0u);
  }
  {
    // Binding and late, but 5 messages a second in all: too few to say so.
    BlockBudget budget(64);
    budget.SetAdaptation(adaptation);
    int64_t now = kSecond;
    Tick(&budget, now, 0, 0, 0);
    for (int i = 0; i < 30; ++i) {
      now += 100 * kMs;
      std::vector<BlockBudget::PartitionTick> ticks(16);
      for (uint32_t id = 1; id <= 16; ++id) ticks[id - 1].partition = id;
      ticks[0] = {.partition = 1,
                  .delay_sum_nanos = (i % 2) * 50 * kMs,
                  .messages = static_cast<uint64_t>(i % 2),
                  .blocks = 6};
      TickEach(&budget, now, ticks);
    }
    EXPECT_EQ(budget.blocks_per_second(), 64u);
    EXPECT_EQ(budget.adaptation_stats().lowered, 0u);
  }
  {
    // Sixteen partitions spaced at their caller's bound already (100 ms < 15/64 s) once the budget
    // is down to 54: late, it holds there (a lower budget would space them no further), and goes
    // on down once the bound is gone.
    BlockBudget budget(64);
    budget.SetAdaptation(adaptation);
    const std::vector<BlockBudget::PartitionTick> late = SixteenLate();
    int64_t now = kSecond;
    TickEach(&budget, now, late);
    for (int i = 0; i < 10; ++i) {
      now += 100 * kMs;
      TickEach(&budget, now, late);
    }
    ASSERT_EQ(budget.blocks_per_second(), 54u);
    for (int i = 0; i < 30; ++i) {
      now += 100 * kMs;
      TickEach(&budget, now, late, 100 * kMs);
    }
    EXPECT_EQ(budget.blocks_per_second(), 54u) << "held, neither down nor back up";
    EXPECT_EQ(budget.LastIntervalNanos(1), 100 * kMs);
    for (int i = 0; i < 10; ++i) {
      now += 100 * kMs;
      TickEach(&budget, now, late);
    }
    EXPECT_EQ(budget.blocks_per_second(), 45u);
  }
  {
    // One partition at its bound alone: weighted 0.1 beside fifteen of weight 1 (one node-wide
    // admission lets through a tenth of its calls), it is given 150/64 s between its partial
    // batches, over its 100-ms bound; the others' spacings are not at theirs, and the budget goes
    // on down: 64, 54, 45, 38.
    BlockBudget budget(64);
    budget.SetAdaptation(adaptation);
    budget.SetWeight(1, 0.1);
    const std::vector<BlockBudget::PartitionTick> late = SixteenLate();
    int64_t now = kSecond;
    for (int i = 0; i < 31; ++i) {
      for (uint32_t id = 1; id <= 16; ++id) {
        budget.PartialBatchIntervalNanos(id, now, id == 1 ? 100 * kMs : INT64_MAX);
      }
      budget.Observe(now, late);
      now += 100 * kMs;
    }
    EXPECT_EQ(budget.LastIntervalNanos(1), 100 * kMs);
    EXPECT_EQ(budget.blocks_per_second(), 38u);
    EXPECT_EQ(budget.adaptation_stats().lowered, 3u);
  }
}

// The step's delay is the lower median of the partitions' own means over the step: a flooded
// partition's lanes queue for it alone and move nothing, even beside partitions that start
// messages in only some ticks; once more than half the partitions queue, the node does.
TEST(BlockBudgetTest, OneFloodedPartitionsQueueingDoesNotMoveTheBudget) {
  BlockBudget budget(64);
  budget.SetAdaptation({.enabled = true, .delay_target_nanos = 10 * kMs, .step_nanos = kSecond});
  auto ticks = [](int late, bool quiet_tick) {
    std::vector<BlockBudget::PartitionTick> t(16);
    for (uint32_t i = 0; i < 16; ++i) {
      // The late ones: 500 messages of 400 ms a tick (a flood's client lane); the others 20 of
      // 1 ms, in every other tick only.
      t[i] = i < static_cast<uint32_t>(late)
                 ? BlockBudget::PartitionTick{.partition = i + 1,
                                              .delay_sum_nanos = 500 * 400 * kMs,
                                              .messages = 500,
                                              .blocks = 1}
                 : BlockBudget::PartitionTick{.partition = i + 1,
                                              .delay_sum_nanos = quiet_tick ? 20 * kMs : 0,
                                              .messages = quiet_tick ? 20u : 0u,
                                              .blocks = 1};
    }
    return t;
  };
  int64_t now = kSecond;
  TickEach(&budget, now, ticks(1, true));
  for (int late : {1, 8}) {
    for (int i = 0; i < 30; ++i) {
      now += 100 * kMs;
      TickEach(&budget, now, ticks(late, i % 2 == 0));
    }
    EXPECT_EQ(budget.blocks_per_second(), 64u) << late << " late";
    EXPECT_EQ(budget.adaptation_stats().mean_delay_nanos, kMs) << late << " late";
  }
  for (int i = 0; i < 10; ++i) {
    now += 100 * kMs;
    TickEach(&budget, now, ticks(9, i % 2 == 0));
  }
  EXPECT_EQ(budget.blocks_per_second(), 54u) << "9 of 16 late";
  EXPECT_EQ(budget.adaptation_stats().mean_delay_nanos, 400 * kMs);
}

TEST(BlockBudgetTest, AdaptationOffOrANewCeilingPutsTheCeilingInForce) {
  BlockBudget budget(64);
  budget.SetAdaptation({.enabled = true, .delay_target_nanos = 10 * kMs, .step_nanos = kSecond});
  int64_t now = kSecond;
  Tick(&budget, now, 0, 0, 0);
  Ticks(&budget, &now, 30, 30 * kMs, 20, 6);
  ASSERT_LT(budget.blocks_per_second(), 64u);
  budget.SetBlocksPerSecond(100);  // UpdateArbiter: the new ceiling, in force at once
  EXPECT_EQ(budget.blocks_per_second(), 100u);
  EXPECT_EQ(budget.ceiling(), 100u);
  Ticks(&budget, &now, 10, 30 * kMs, 20, 6);
  EXPECT_EQ(budget.blocks_per_second(), 85u);
  budget.SetAdaptation({.enabled = false});
  EXPECT_EQ(budget.blocks_per_second(), 100u);
  Ticks(&budget, &now, 30, 30 * kMs, 20, 6);
  EXPECT_EQ(budget.blocks_per_second(), 100u) << "off: no step moves it";
  budget.SetBlocksPerSecond(0);
  budget.SetAdaptation({.enabled = true});
  Ticks(&budget, &now, 30, 30 * kMs, 20, 0);
  EXPECT_EQ(budget.blocks_per_second(), 0u) << "no budget stays no budget";
  EXPECT_EQ(budget.PartialBatchIntervalNanos(1, now), 0);
}

TEST(BlockBudgetTest, AFloorAboveTheCeilingIsTheCeiling) {
  BlockBudget budget(8);
  budget.SetAdaptation(kAdaptation);
  int64_t now = kSecond;
  Tick(&budget, now, 0, 0, 0);
  Ticks(&budget, &now, 30, 30 * kMs, 20, 1);
  EXPECT_EQ(budget.blocks_per_second(), 8u);
}

}  // namespace
}  // namespace flowctl
