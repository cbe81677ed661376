#include "partitions/batch_policy.h"

#include "gtest/gtest.h"

namespace partitions {
namespace {

constexpr int64_t kMs = 1'000'000;

BatchPolicy Policy() {
  return BatchPolicy({.max_txs = 10, .max_bytes = 1000, .max_delay_nanos = 50 * kMs});
}

TEST(BatchPolicyTest, FullBatchByCountOrBytesIsCutAtOnce) {
  const BatchPolicy p = Policy();
  EXPECT_TRUE(p.Decide(100 * kMs, 10, 100, 99 * kMs, true, 0).cut);
  EXPECT_TRUE(p.Decide(100 * kMs, 2, 1000, 99 * kMs, true, 0).cut);
}

TEST(BatchPolicyTest, PartialBatchWaitsUntilTheOldestHasWaitedMaxDelay) {
  const BatchPolicy p = Policy();
  BatchPolicy::Decision d = p.Decide(100 * kMs, 3, 300, 90 * kMs, true, 0);
  EXPECT_FALSE(d.cut);
  ASSERT_TRUE(d.wake_at_nanos.has_value());
  EXPECT_EQ(*d.wake_at_nanos, 140 * kMs);
  EXPECT_FALSE(p.Decide(140 * kMs - 1, 3, 300, 90 * kMs, true, 0).cut);
  EXPECT_TRUE(p.Decide(140 * kMs, 3, 300, 90 * kMs, true, 0).cut);
}

TEST(BatchPolicyTest, NothingWaitingOrReplicaBusyMeansNoCutAndNoWake) {
  const BatchPolicy p = Policy();
  BatchPolicy::Decision empty = p.Decide(100 * kMs, 0, 0, 0, true, 0);
  EXPECT_FALSE(empty.cut);
  EXPECT_FALSE(empty.wake_at_nanos.has_value());
  BatchPolicy::Decision busy = p.Decide(500 * kMs, 10, 1000, 0, false, 0);
  EXPECT_FALSE(busy.cut);
  EXPECT_FALSE(busy.wake_at_nanos.has_value());
}

// Nagle's rule: a partial batch waits for the primary's proposal in flight (its commit asks
// again, so there is no wake time), a full one is pipelined; 0 turns the rule off.
TEST(BatchPolicyTest, APartialBatchWaitsForTheProposalInFlightAFullOneDoesNot) {
  const BatchPolicy p = Policy();
  BatchPolicy::Decision d = p.Decide(500 * kMs, 3, 300, 90 * kMs, true, /*in_flight=*/1);
  EXPECT_FALSE(d.cut) << "past its delay, but a proposal is still executing";
  EXPECT_FALSE(d.wake_at_nanos.has_value());
  EXPECT_TRUE(p.Decide(500 * kMs, 3, 300, 90 * kMs, true, 0).cut);
  EXPECT_TRUE(p.Decide(100 * kMs, 10, 100, 99 * kMs, true, 3).cut);
  EXPECT_TRUE(p.Decide(100 * kMs, 2, 1000, 99 * kMs, true, 3).cut);
  const BatchPolicy two(
      {.max_txs = 10, .max_bytes = 1000, .max_delay_nanos = 50 * kMs, .max_partial_in_flight = 2});
  EXPECT_TRUE(two.Decide(500 * kMs, 3, 300, 90 * kMs, true, 1).cut);
  EXPECT_FALSE(two.Decide(500 * kMs, 3, 300, 90 * kMs, true, 2).cut);
  const BatchPolicy off(
      {.max_txs = 10, .max_bytes = 1000, .max_delay_nanos = 50 * kMs, .max_partial_in_flight = 0});
  EXPECT_TRUE(off.Decide(500 * kMs, 3, 300, 90 * kMs, true, 100).cut);
}

TEST(BatchPolicyTest, ZeroDelayCutsEveryReadyTx) {
  const BatchPolicy p({.max_txs = 10, .max_bytes = 1000, .max_delay_nanos = 0});
  EXPECT_TRUE(p.Decide(5, 1, 10, 5, true, 0).cut);
}

TEST(BatchPolicyTest, ValidateNamesTheField) {
  EXPECT_EQ(BatchPolicy::Validate({.max_txs = 0}).message(), "batch.max_txs: must be >= 1, got 0");
  EXPECT_EQ(BatchPolicy::Validate({.max_bytes = 0}).message(),
            "batch.max_bytes: must be >= 1, got 0");
  EXPECT_FALSE(BatchPolicy::Validate({.max_delay_nanos = -1}).ok());
  EXPECT_TRUE(BatchPolicy::Validate({}).ok());
}

}  // namespace
}  // namespace partitions
