#include "flowctl/rate_meter.h"

#include "gtest/gtest.h"

namespace flowctl {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST(BacklogRateMeterTest, UnknownUntilAWindowWithBacklogCloses) {
  BacklogRateMeter m({.min_window = absl::Milliseconds(500)});
  EXPECT_FALSE(m.measured());
  EXPECT_EQ(m.estimate(), -1);
  m.Observe(100 * kMs, 0, true);   // opens
  m.Observe(400 * kMs, 30, true);  // too short
  EXPECT_FALSE(m.measured());
  m.Observe(600 * kMs, 50, true);  // 50 in 500 ms
  ASSERT_TRUE(m.measured());
  EXPECT_DOUBLE_EQ(m.rate(), 100);
  EXPECT_DOUBLE_EQ(m.estimate(), 100);
}

TEST(BacklogRateMeterTest, IdleTimeIsNotCountedAsSlowService) {
  BacklogRateMeter m({.min_window = absl::Milliseconds(500)});
  m.Observe(0 * kMs + 1, 0, true);
  m.Observe(200 * kMs, 40, false);  // ran dry: the window is dropped
  m.Observe(5000 * kMs, 40, false);
  EXPECT_FALSE(m.measured());
  m.Observe(6000 * kMs, 40, true);
  m.Observe(7000 * kMs, 240, true);  // 200/s while backlogged; the idle seconds do not dilute it
  EXPECT_DOUBLE_EQ(m.rate(), 200);
}

TEST(BacklogRateMeterTest, AveragesWindowsAndMeasuresAStall) {
  BacklogRateMeter m({.min_window = absl::Seconds(1), .weight = 0.5});
  m.Observe(1, 0, true);
  m.Observe(1000 * kMs + 1, 100, true);
  EXPECT_DOUBLE_EQ(m.rate(), 100);
  m.Observe(2000 * kMs + 1, 400, true);  // 300/s: halfway
  EXPECT_DOUBLE_EQ(m.rate(), 200);
  m.Observe(3000 * kMs + 1, 400, true);  // stalled with a backlog: a stall at once, not halved
  EXPECT_TRUE(m.measured());
  EXPECT_DOUBLE_EQ(m.rate(), 0);
  EXPECT_DOUBLE_EQ(m.estimate(), 0);
  m.Observe(4000 * kMs + 1, 500, true);  // service again: replaces the stall, not averaged with it
  EXPECT_DOUBLE_EQ(m.rate(), 100);
  m.Observe(5000 * kMs + 1, 10, true);  // counter went back (reset): a new window, no sample
  EXPECT_DOUBLE_EQ(m.rate(), 100);
  m.Reset();
  EXPECT_FALSE(m.measured());
  EXPECT_EQ(m.estimate(), -1);
}

TEST(RetryAfterForTest, TimeToServeWithinBounds) {
  const RetryAfterBounds b{
      .min = absl::Milliseconds(10), .max = absl::Seconds(5), .unknown = absl::Milliseconds(100)};
  EXPECT_EQ(RetryAfterFor(300, 1000, b), absl::Milliseconds(300));
  EXPECT_EQ(RetryAfterFor(1, 1000, b), absl::Milliseconds(10));  // floor
  EXPECT_EQ(RetryAfterFor(1e9, 1000, b), absl::Seconds(5));      // ceiling
  EXPECT_EQ(RetryAfterFor(-5, 1000, b), absl::Milliseconds(10));
  EXPECT_EQ(RetryAfterFor(10, 0, b), absl::Seconds(5));          // nothing served: the most
  EXPECT_EQ(RetryAfterFor(10, -1, b), absl::Milliseconds(100));  // unknown: the fallback
}

TEST(RetrySlotsTest, ABurstOfRefusalsIsSpreadAtTheServiceRate) {
  const RetryAfterBounds b{
      .min = absl::Milliseconds(10), .max = absl::Seconds(1), .unknown = absl::Milliseconds(100)};
  RetrySlots slots;
  const int64_t t = 5'000 * kMs;
  // Room in 50 ms, 100 units/s: 50, 60, 70 ms for three refusals at once.
  EXPECT_EQ(slots.Take(t, absl::Milliseconds(50), 100, b), absl::Milliseconds(50));
  EXPECT_EQ(slots.Take(t, absl::Milliseconds(50), 100, b), absl::Milliseconds(60));
  EXPECT_EQ(slots.Peek(t, absl::Milliseconds(50), 100, b), absl::Milliseconds(70));
  EXPECT_EQ(slots.Peek(t, absl::Milliseconds(50), -1, b), absl::Milliseconds(50));  // no rate
  EXPECT_EQ(slots.Take(t, absl::Milliseconds(50), 100, b), absl::Milliseconds(70));
  // 20 ms later the queue still holds the slots given: the next is after them.
  EXPECT_EQ(slots.Take(t + 20 * kMs, absl::Milliseconds(10), 100, b), absl::Milliseconds(60));
  // Long after, the queue has drained: the room alone.
  EXPECT_EQ(slots.Take(t + 2'000 * kMs, absl::Milliseconds(30), 100, b), absl::Milliseconds(30));
  // Never beyond the bound, however many are queued.
  for (int i = 0; i < 500; ++i) slots.Take(t + 3'000 * kMs, absl::Milliseconds(10), 100, b);
  EXPECT_EQ(slots.Take(t + 3'000 * kMs, absl::Milliseconds(10), 100, b), absl::Seconds(1));
  // The rate changed more than 2x (a stall ended): the old queue is forgotten.
  RetrySlots stalled;
  for (int i = 0; i < 5; ++i) stalled.Take(t, absl::Seconds(1), 1, b);  // all at the bound
  EXPECT_EQ(stalled.Peek(t, absl::Milliseconds(20), 1, b), absl::Seconds(1));
  EXPECT_EQ(stalled.Peek(t, absl::Milliseconds(20), 1000, b), absl::Milliseconds(20));  // as Take
  EXPECT_EQ(stalled.Take(t, absl::Milliseconds(20), 1000, b), absl::Milliseconds(20));
  EXPECT_EQ(stalled.Take(t, absl::Milliseconds(20), 1000, b), absl::Milliseconds(21));
  // A vanishing rate: one slot is at most the bound, nothing overflows.
  RetrySlots tiny;
  EXPECT_EQ(tiny.Take(t, absl::Milliseconds(20), 1e-300, b), absl::Milliseconds(20));
  EXPECT_EQ(tiny.Take(t, absl::Milliseconds(20), 1e-300, b), absl::Seconds(1));
  EXPECT_EQ(tiny.Take(t, absl::Milliseconds(20), 1e-300, b), absl::Seconds(1));
  // No measured rate: the room, no queue.
  RetrySlots fresh;
  EXPECT_EQ(fresh.Take(t, absl::Milliseconds(40), -1, b), absl::Milliseconds(40));
  EXPECT_EQ(fresh.Take(t, absl::Milliseconds(40), 0, b), absl::Milliseconds(40));
  EXPECT_EQ(fresh.Take(t, absl::Milliseconds(1), -1, b), absl::Milliseconds(10));
}

}  // namespace
}  // namespace flowctl
