#include "flowctl/concurrency_limiter.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace flowctl {
namespace {

using Permit = ConcurrencyLimiter::Permit;

TEST(ConcurrencyLimiterTest, AdmitsUpToLimitThenRefuses) {
  ConcurrencyLimiter limiter(3);
  std::vector<Permit> held;
  for (int i = 0; i < 3; ++i) {
    Permit p = limiter.TryAcquire();
    ASSERT_TRUE(p) << i;
    held.push_back(std::move(p));
  }
  EXPECT_EQ(limiter.in_flight(), 3);
  Permit refused = limiter.TryAcquire();
  EXPECT_FALSE(refused);
  EXPECT_FALSE(refused.held());
  EXPECT_EQ(limiter.in_flight(), 3);
  held.pop_back();
  EXPECT_EQ(limiter.in_flight(), 2);
  EXPECT_TRUE(limiter.TryAcquire());  // acquired and released at once (temporary)
  EXPECT_EQ(limiter.in_flight(), 2);
}

TEST(ConcurrencyLimiterTest, ZeroLimitAdmitsNothing) {
  ConcurrencyLimiter limiter(0);
  EXPECT_FALSE(limiter.TryAcquire());
  ConcurrencyLimiter negative(-5);
  EXPECT_EQ(negative.limit(), 0);
  EXPECT_FALSE(negative.TryAcquire());
}

TEST(ConcurrencyLimiterTest, PermitReleasesExactlyOnce) {
  ConcurrencyLimiter limiter(2);
  Permit a = limiter.TryAcquire();
  ASSERT_TRUE(a);
  Permit b = std::move(a);  // move: only `b` holds the slot now
  EXPECT_FALSE(a);          // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_TRUE(b);
  EXPECT_EQ(limiter.in_flight(), 1);
  b.Release();
  EXPECT_FALSE(b);
  EXPECT_EQ(limiter.in_flight(), 0);
  b.Release();  // idempotent
  EXPECT_EQ(limiter.in_flight(), 0);
}

TEST(ConcurrencyLimiterTest, MoveAssignReleasesTheOverwrittenPermit) {
  ConcurrencyLimiter limiter(2);
  Permit a = limiter.TryAcquire();
  Permit b = limiter.TryAcquire();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(limiter.in_flight(), 2);
  a = std::move(b);  // a's old slot is released, b's slot moves into a
  EXPECT_EQ(limiter.in_flight(), 1);
  EXPECT_TRUE(a);
  a = Permit();
  EXPECT_EQ(limiter.in_flight(), 0);
}

TEST(ConcurrencyLimiterTest, LoweringTheLimitStopsAdmissionsUntilEnoughRelease) {
  ConcurrencyLimiter limiter(4);
  std::vector<Permit> held;
  for (int i = 0; i < 4; ++i) held.push_back(limiter.TryAcquire());
  limiter.SetLimit(2);
  EXPECT_EQ(limiter.limit(), 2);
  EXPECT_EQ(limiter.in_flight(), 4);  // nothing revoked
  EXPECT_TRUE(std::all_of(held.begin(), held.end(), [](const Permit& p) { return p.held(); }));
  held.pop_back();  // 3 in flight
  EXPECT_FALSE(limiter.TryAcquire());
  held.pop_back();  // 2 in flight
  EXPECT_FALSE(limiter.TryAcquire());
  held.pop_back();  // 1 in flight
  Permit p = limiter.TryAcquire();
  EXPECT_TRUE(p);
  EXPECT_EQ(limiter.in_flight(), 2);
  limiter.SetLimit(3);  // raising admits again at once
  EXPECT_TRUE(limiter.TryAcquire());
}

// Threads hammer the limiter; a separate counter of "inside the critical section" must never
// exceed the limit, and every slot must come back at the end.
TEST(ConcurrencyLimiterTest, ThreadsNeverExceedLimit) {
  constexpr int kLimit = 3;
  constexpr int kThreads = 6;
  constexpr int kIterations = 20'000;
  ConcurrencyLimiter limiter(kLimit);
  std::atomic<int> inside{0};
  std::atomic<int> max_inside{0};
  std::atomic<int64_t> max_counter{0};
  std::atomic<int64_t> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIterations; ++i) {
        Permit p = limiter.TryAcquire();
        if (!p) continue;
        admitted.fetch_add(1, std::memory_order_relaxed);
        const int now = inside.fetch_add(1) + 1;
        int seen = max_inside.load();
        while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {
        }
        const int64_t counter = limiter.in_flight();
        int64_t seen_counter = max_counter.load();
        while (counter > seen_counter &&
               !max_counter.compare_exchange_weak(seen_counter, counter)) {
        }
        inside.fetch_sub(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(max_inside.load(), kLimit);
  EXPECT_LE(max_counter.load(), kLimit);
  EXPECT_GT(admitted.load(), 0);
  EXPECT_EQ(limiter.in_flight(), 0);
}

// The limit is lowered and raised while threads run; once it has settled low and the threads have
// drained, in-flight never exceeds it again.
TEST(ConcurrencyLimiterTest, LiveLimitChangesUnderLoadKeepTheCount) {
  ConcurrencyLimiter limiter(8);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200'000 && !stop.load(std::memory_order_relaxed); ++i) {
        Permit p = limiter.TryAcquire();
      }
    });
  }
  for (int i = 0; i < 1000; ++i) limiter.SetLimit(i % 2 == 0 ? 1 : 8);
  stop.store(true);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(limiter.in_flight(), 0);
  EXPECT_EQ(limiter.limit(), 8);
}

}  // namespace
}  // namespace flowctl
