#include "flowctl/pacer.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"

namespace flowctl {
namespace {

using ::tests::FakeClock;

constexpr int64_t kMs = 1'000'000;

// Books `count` units of `cost` at the clock's current time; returns release times relative to it.
std::vector<int64_t> Burst(Pacer& pacer, const FakeClock& clock, int count, double cost = 1) {
  std::vector<int64_t> out;
  const int64_t now = clock.NowNanos();
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<int64_t> at = pacer.Reserve(cost);
    EXPECT_TRUE(at.ok()) << at.status();
    if (!at.ok()) break;
    out.push_back(*at - now);
  }
  return out;
}

TEST(PacerTest, IdlePacerReleasesAtOnce) {
  FakeClock clock;
  Pacer pacer(100, absl::InfiniteDuration(), &clock);
  EXPECT_EQ(pacer.BacklogNanos(), 0);
  absl::StatusOr<int64_t> at = pacer.Reserve(1);
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(*at, clock.NowNanos());
  EXPECT_EQ(pacer.BacklogNanos(), 10 * kMs);
}

TEST(PacerTest, SmoothsABurstIntoEvenSpacing) {
  FakeClock clock;
  Pacer pacer(100, absl::InfiniteDuration(), &clock);  // 10 ms per unit
  EXPECT_EQ(Burst(pacer, clock, 10),
            (std::vector<int64_t>{0, 10 * kMs, 20 * kMs, 30 * kMs, 40 * kMs, 50 * kMs, 60 * kMs,
                                  70 * kMs, 80 * kMs, 90 * kMs}));
  EXPECT_EQ(pacer.BacklogNanos(), 100 * kMs);
}

TEST(PacerTest, SpacingFollowsEachUnitsCost) {
  FakeClock clock;
  Pacer pacer(1000, absl::InfiniteDuration(), &clock);  // bytes/s: 1 ms per byte
  const int64_t t0 = clock.NowNanos();
  EXPECT_EQ(*pacer.Reserve(20), t0);             // 20 bytes: the next waits 20 ms
  EXPECT_EQ(*pacer.Reserve(5), t0 + 20 * kMs);   // then 5 ms
  EXPECT_EQ(*pacer.Reserve(0), t0 + 25 * kMs);   // a zero-cost unit waits its turn, adds nothing
  EXPECT_EQ(*pacer.Reserve(1), t0 + 25 * kMs);
}

TEST(PacerTest, IdleTimeIsNotSavedUp) {
  FakeClock clock;
  Pacer pacer(100, absl::InfiniteDuration(), &clock);
  ASSERT_TRUE(pacer.Reserve(1).ok());
  clock.Advance(absl::Seconds(10));
  // A long idle gap earns no burst: the second unit is still 10 ms after the first.
  EXPECT_EQ(Burst(pacer, clock, 3), (std::vector<int64_t>{0, 10 * kMs, 20 * kMs}));
}

TEST(PacerTest, LateArrivalsJoinTheQueueWhereItIs) {
  FakeClock clock;
  Pacer pacer(100, absl::InfiniteDuration(), &clock);
  const int64_t t0 = clock.NowNanos();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(pacer.Reserve(1).ok());  // 0..40 ms, next free at 50
  clock.Advance(absl::Milliseconds(25));
  EXPECT_EQ(pacer.BacklogNanos(), 25 * kMs);
  EXPECT_EQ(*pacer.Reserve(1), t0 + 50 * kMs);
  clock.Advance(absl::Milliseconds(100));  // queue drained
  EXPECT_EQ(*pacer.Reserve(1), clock.NowNanos());
}

// 3 units/s is 333,333,333.3 ns apart: whole nanoseconds alone would drift by a third of a
// nanosecond per unit. Unit k must be released at exactly ceil(k * 1e9 / 3).
TEST(PacerTest, FractionalSpacingNeverDrifts) {
  FakeClock clock;
  Pacer pacer(3, absl::InfiniteDuration(), &clock);
  const int64_t t0 = clock.NowNanos();
  for (int64_t k = 0; k < 30'000; ++k) {
    absl::StatusOr<int64_t> at = pacer.Reserve(1);
    ASSERT_TRUE(at.ok());
    const int64_t want = (k * kNanosPerSecond + 2) / 3;  // ceil(k * 1e9 / 3)
    ASSERT_EQ(*at - t0, want) << k;
  }
}

TEST(PacerTest, SetRateRespacesFromTheLastBookedUnit) {
  FakeClock clock;
  Pacer pacer(10, absl::InfiniteDuration(), &clock);  // 100 ms per unit
  EXPECT_EQ(Burst(pacer, clock, 3), (std::vector<int64_t>{0, 100 * kMs, 200 * kMs}));
  ASSERT_TRUE(pacer.SetRate(20).ok());  // faster: 50 ms after the last booked unit
  EXPECT_EQ(pacer.rate(), 20);
  EXPECT_EQ(Burst(pacer, clock, 2), (std::vector<int64_t>{250 * kMs, 300 * kMs}));
  ASSERT_TRUE(pacer.SetRate(5).ok());  // slower: 200 ms
  EXPECT_EQ(Burst(pacer, clock, 2), (std::vector<int64_t>{500 * kMs, 700 * kMs}));
}

TEST(PacerTest, HorizonRefusesWorkThatWouldWaitTooLong) {
  FakeClock clock;
  Pacer pacer(100, absl::Milliseconds(50), &clock);  // 10 ms per unit, wait at most 50 ms
  EXPECT_EQ(Burst(pacer, clock, 6),
            (std::vector<int64_t>{0, 10 * kMs, 20 * kMs, 30 * kMs, 40 * kMs, 50 * kMs}));
  absl::StatusOr<int64_t> refused = pacer.Reserve(1);  // would wait 60 ms
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_EQ(pacer.Reserve(1).status().code(), absl::StatusCode::kResourceExhausted);
  // A refusal books nothing: 10 ms later the next unit fits again, at 60 ms.
  EXPECT_EQ(pacer.BacklogNanos(), 60 * kMs);
  clock.Advance(absl::Milliseconds(10));
  const int64_t t = clock.NowNanos();
  EXPECT_EQ(*pacer.Reserve(1), t + 50 * kMs);
  // The horizon changes live.
  ASSERT_TRUE(pacer.SetMaxDelay(absl::Milliseconds(100)).ok());
  EXPECT_EQ(pacer.max_delay(), absl::Milliseconds(100));
  EXPECT_EQ(*pacer.Reserve(1), t + 60 * kMs);
  ASSERT_TRUE(pacer.SetMaxDelay(absl::ZeroDuration()).ok());
  EXPECT_EQ(pacer.Reserve(1).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(PacerTest, ZeroHorizonIsAPolicerThatOnlyAdmitsOnTime) {
  FakeClock clock;
  Pacer pacer(100, absl::ZeroDuration(), &clock);
  int admitted = 0;
  for (int ms = 0; ms < 1000; ++ms) {  // one offer per ms for 1 s
    if (pacer.Reserve(1).ok()) ++admitted;
    clock.Advance(absl::Milliseconds(1));
  }
  EXPECT_EQ(admitted, 100);
}

TEST(PacerTest, ClosedRefusesAndReopens) {
  FakeClock clock;
  Pacer pacer(0, absl::InfiniteDuration(), &clock);
  EXPECT_EQ(pacer.Reserve(1).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(pacer.BacklogNanos(), std::numeric_limits<int64_t>::max());
  ASSERT_TRUE(pacer.SetRate(100).ok());
  EXPECT_EQ(Burst(pacer, clock, 2), (std::vector<int64_t>{0, 10 * kMs}));
  ASSERT_TRUE(pacer.SetRate(0).ok());
  EXPECT_EQ(pacer.Reserve(1).status().code(), absl::StatusCode::kUnavailable);
}

TEST(PacerTest, UnlimitedReleasesEverythingAtOnce) {
  FakeClock clock;
  Pacer pacer(10, absl::InfiniteDuration(), &clock);
  ASSERT_TRUE(pacer.Reserve(100).ok());  // 10 s of backlog
  ASSERT_TRUE(pacer.SetRate(Pacer::kUnlimited).ok());
  EXPECT_EQ(Burst(pacer, clock, 100, 1e9), std::vector<int64_t>(100, 0));
  EXPECT_EQ(pacer.BacklogNanos(), 0);
  // Back to limited: starts idle.
  ASSERT_TRUE(pacer.SetRate(10).ok());
  EXPECT_EQ(Burst(pacer, clock, 2), (std::vector<int64_t>{0, 100 * kMs}));
}

TEST(PacerTest, InvalidArgumentsAreRefusedAndChangeNothing) {
  FakeClock clock;
  Pacer pacer(10, absl::Seconds(1), &clock);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const double bad : {-1.0, nan, -Pacer::kUnlimited}) {
    EXPECT_EQ(pacer.SetRate(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(Pacer::ValidateParams(bad, absl::Seconds(1)).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(pacer.SetMaxDelay(absl::Milliseconds(-1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Pacer::ValidateParams(10, -absl::InfiniteDuration()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pacer.rate(), 10);
  EXPECT_EQ(pacer.max_delay(), absl::Seconds(1));
  for (const double bad : {-1.0, nan, Pacer::kUnlimited, 2 * Pacer::kMaxCost}) {
    EXPECT_EQ(pacer.Reserve(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(pacer.BacklogNanos(), 0);  // nothing was booked
  EXPECT_TRUE(Pacer::ValidateParams(0, absl::ZeroDuration()).ok());
  EXPECT_TRUE(Pacer::ValidateParams(Pacer::kMinRate, absl::InfiniteDuration()).ok());
}

TEST(PacerTest, HugeDelaysAreRefusedNotOverflowed) {
  FakeClock clock;
  Pacer pacer(1e-300, absl::InfiniteDuration(), &clock);  // acts as kMinRate
  ASSERT_TRUE(pacer.Reserve(Pacer::kMaxCost).ok());  // the next unit is 1e27 s away
  EXPECT_EQ(pacer.Reserve(1).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_GT(pacer.BacklogNanos(), 0);
  ASSERT_TRUE(pacer.SetRate(1e8).ok());  // the same booked unit now spaces 1e10 s: still too far
  EXPECT_EQ(pacer.Reserve(1).status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(pacer.SetRate(1e12).ok());  // 1e6 s: fits the (infinite) horizon
  EXPECT_EQ(*pacer.Reserve(1), clock.NowNanos() + 1'000'000 * kNanosPerSecond);
}

// Threads booking at once under a frozen clock get distinct slots, exactly one spacing apart:
// the same schedule a single thread would get, whatever the interleaving.
TEST(PacerTest, ConcurrentReservationsGetDistinctEvenlySpacedSlots) {
  FakeClock clock;
  Pacer pacer(1000, absl::InfiniteDuration(), &clock);  // 1 ms apart
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  std::mutex mu;
  std::vector<int64_t> all;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      std::vector<int64_t> mine;
      for (int i = 0; i < kPerThread; ++i) mine.push_back(*pacer.Reserve(1));
      std::lock_guard<std::mutex> lock(mu);
      all.insert(all.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), static_cast<size_t>(kThreads * kPerThread));
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(all[i] - clock.NowNanos(), static_cast<int64_t>(i) * kMs) << i;
  }
}

}  // namespace
}  // namespace flowctl
