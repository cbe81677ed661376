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

// The node's block budget spaces partial batches: one is not cut before partial_not_before
// (and asks again then), whichever of that and the oldest tx's delay is later; a full batch is
// never held.
TEST(BatchPolicyTest, APartialBatchWaitsForItsNotBeforeAFullOneDoesNot) {
  const BatchPolicy p = Policy();
  BatchPolicy::Decision d = p.Decide(200 * kMs, 3, 300, 90 * kMs, true, 0, 250 * kMs);
  EXPECT_FALSE(d.cut) << "past its delay (140 ms), but the budget says not before 250 ms";
  ASSERT_TRUE(d.wake_at_nanos.has_value());
  EXPECT_EQ(*d.wake_at_nanos, 250 * kMs);
  EXPECT_TRUE(p.Decide(250 * kMs, 3, 300, 90 * kMs, true, 0, 250 * kMs).cut);
  // The oldest tx's delay is the later of the two: it decides.
  BatchPolicy::Decision later = p.Decide(100 * kMs, 3, 300, 90 * kMs, true, 0, 120 * kMs);
  ASSERT_TRUE(later.wake_at_nanos.has_value());
  EXPECT_EQ(*later.wake_at_nanos, 140 * kMs);
  EXPECT_TRUE(p.Decide(200 * kMs, 10, 100, 199 * kMs, true, 0, 900 * kMs).cut);
  EXPECT_TRUE(p.Decide(200 * kMs, 2, 1000, 199 * kMs, true, 0, 900 * kMs).cut);
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
