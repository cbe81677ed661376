#include "flowctl/block_budget.h"

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

}  // namespace
}  // namespace flowctl
