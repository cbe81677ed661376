#include "flowctl/token_bucket.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"

namespace flowctl {
namespace {

using ::tests::FakeClock;

// Polls the bucket for single tokens every `step` of fake time for `seconds`; returns the count.
double DeliveredOver(TokenBucket& bucket, FakeClock& clock, double seconds, int64_t step_nanos,
                     double request) {
  double delivered = 0;
  const int64_t end = clock.NowNanos() + static_cast<int64_t>(seconds * kNanosPerSecond);
  while (clock.NowNanos() <= end) {
    while (bucket.TryAcquire(request)) delivered += request;
    clock.AdvanceNanos(step_nanos);
  }
  return delivered;
}

class TokenBucketAccuracyTest : public ::testing::TestWithParam<double> {};

TEST_P(TokenBucketAccuracyTest, DeliversRateTimesTimePlusBurst) {
  const double rate = GetParam();
  const double burst = std::max(1.0, rate / 100);
  FakeClock clock;
  TokenBucket bucket(rate, burst, &clock);
  constexpr double kSeconds = 10;
  // Poll often enough that tokens never sit at the burst cap (which would waste them).
  const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(burst / rate / 4 * kNanosPerSecond));
  const double delivered = DeliveredOver(bucket, clock, kSeconds, step, 1);
  EXPECT_LE(delivered, rate * kSeconds + burst);
  EXPECT_GE(delivered, 0.99 * rate * kSeconds + burst);
}

INSTANTIATE_TEST_SUITE_P(Rates, TokenBucketAccuracyTest,
                         ::testing::Values(10, 100, 1000, 10'000, 100'000, 1'000'000));

TEST(TokenBucketTest, StartsFullAndRefuses) {
  FakeClock clock;
  TokenBucket bucket(10, 5, &clock);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(bucket.TryAcquire(1)) << i;
  EXPECT_FALSE(bucket.TryAcquire(1));
  EXPECT_EQ(bucket.NanosUntil(1), kNanosPerSecond / 10);
  clock.Advance(absl::Milliseconds(100));
  EXPECT_TRUE(bucket.TryAcquire(1));
  EXPECT_FALSE(bucket.TryAcquire(1));
}

}  // namespace
}  // namespace flowctl
