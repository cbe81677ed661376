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
  EXPECT_TRUE(p.Decide(100 * kMs, 10, 100, 99 * kMs, true).cut);
  EXPECT_TRUE(p.Decide(100 * kMs, 2, 1000, 99 * kMs, true).cut);
}

TEST(BatchPolicyTest, PartialBatchWaitsUntilTheOldestHasWaitedMaxDelay) {
  const BatchPolicy p = Policy();
  BatchPolicy::Decision d = p.Decide(100 * kMs, 3, 300, 90 * kMs, true);
  EXPECT_FALSE(d.cut);
  ASSERT_TRUE(d.wake_at_nanos.has_value());
  EXPECT_EQ(*d.wake_at_nanos, 140 * kMs);
  EXPECT_FALSE(p.Decide(140 * kMs - 1, 3, 300, 90 * kMs, true).cut);
  EXPECT_TRUE(p.Decide(140 * kMs, 3, 300, 90 * kMs, true).cut);
}

TEST(BatchPolicyTest, NothingWaitingOrReplicaBusyMeansNoCutAndNoWake) {
  const BatchPolicy p = Policy();
  BatchPolicy::Decision empty = p.Decide(100 * kMs, 0, 0, 0, true);
  EXPECT_FALSE(empty.cut);
  EXPECT_FALSE(empty.wake_at_nanos.has_value());
  BatchPolicy::Decision busy = p.Decide(500 * kMs, 10, 1000, 0, false);
  EXPECT_FALSE(busy.cut);
  EXPECT_FALSE(busy.wake_at_nanos.has_value());
}

TEST(BatchPolicyTest, ZeroDelayCutsEveryReadyTx) {
  const BatchPolicy p({.max_txs = 10, .max_bytes = 1000, .max_delay_nanos = 0});
  EXPECT_TRUE(p.Decide(5, 1, 10, 5, true).cut);
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
