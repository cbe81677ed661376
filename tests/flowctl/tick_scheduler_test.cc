// TickScheduler: due order, replacement, unregistration, and the thread on a real clock.
#include "flowctl/tick_scheduler.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"

namespace flowctl {
namespace {

TEST(TickSchedulerTest, RunsDueCallbacksInTimeOrderOnlyOnceTheirTimeCame) {
  tests::FakeClock clock(0);
  TickScheduler s(&clock);
  std::vector<int> ran;
  TickScheduler::Id a = s.Register([&](int64_t) { ran.push_back(1); });
  TickScheduler::Id b = s.Register([&](int64_t) { ran.push_back(2); });
  TickScheduler::Id c = s.Register([&](int64_t) { ran.push_back(3); });
  s.ScheduleAt(a, 30);
  s.ScheduleAt(b, 10);
  s.ScheduleAt(c, 10);  // a tie: the lower id first
  EXPECT_EQ(s.RunDue(5), 0);
  EXPECT_EQ(s.NextDue(), 10);
  EXPECT_EQ(s.RunDue(10), 2);
  EXPECT_EQ(ran, (std::vector<int>{2, 3}));
  EXPECT_EQ(s.RunDue(100), 1);
  EXPECT_EQ(ran, (std::vector<int>{2, 3, 1}));
  EXPECT_EQ(s.RunDue(1000), 0);  // once per request
  EXPECT_FALSE(s.NextDue().has_value());
}

TEST(TickSchedulerTest, ALaterRequestReplacesThePendingTime) {
  tests::FakeClock clock(0);
  TickScheduler s(&clock);
  int ran = 0;
  TickScheduler::Id a = s.Register([&](int64_t) { ++ran; });
  s.ScheduleAt(a, 10);
  s.ScheduleAt(a, 50);
  EXPECT_EQ(s.RunDue(20), 0);
  EXPECT_EQ(s.RunDue(50), 1);
  EXPECT_EQ(ran, 1);
}

TEST(TickSchedulerTest, ScheduleByKeepsTheEarlierOfTheTwoTimes) {
  tests::FakeClock clock(0);
  TickScheduler s(&clock);
  int ran = 0;
  TickScheduler::Id a = s.Register([&](int64_t) { ++ran; });
  s.ScheduleBy(a, 50);  // nothing pending: scheduled
  s.ScheduleBy(a, 80);  // later: ignored
  EXPECT_EQ(s.NextDue(), 50);
  s.ScheduleBy(a, 20);  // earlier: replaces
  EXPECT_EQ(s.RunDue(19), 0);
  EXPECT_EQ(s.RunDue(20), 1);
  EXPECT_EQ(s.RunDue(1000), 0) << "one call, not one per request";
  EXPECT_EQ(ran, 1);
  s.ScheduleBy(a, 2000);  // after it ran, a new time is taken whatever it is
  EXPECT_EQ(s.NextDue(), 2000);
}

TEST(TickSchedulerTest, ACallbackMayRescheduleItselfAndRunsAgainWhenDueAtTheSameInstant) {
  tests::FakeClock clock(0);
  TickScheduler s(&clock);
  TickScheduler::Id id = 0;
  int ran = 0;
  id = s.Register([&](int64_t now) {
    if (++ran < 3) s.ScheduleAt(id, now);  // due again at once
  });
  s.ScheduleAt(id, 0);
  EXPECT_EQ(s.RunDue(0), 3);
}

TEST(TickSchedulerTest, UnregisteredCallbacksNeverRun) {
  tests::FakeClock clock(0);
  TickScheduler s(&clock);
  int ran = 0;
  TickScheduler::Id a = s.Register([&](int64_t) { ++ran; });
  s.ScheduleAt(a, 10);
  s.Unregister(a);
  s.ScheduleAt(a, 10);  // unknown id: ignored
  EXPECT_EQ(s.RunDue(100), 0);
  EXPECT_EQ(ran, 0);
}

TEST(TickSchedulerTest, TheThreadCallsWhatIsDueOnTheRealClock) {
  TickScheduler s(Clock::Real());
  absl::Notification done;
  std::atomic<int> calls{0};
  TickScheduler::Id a = s.Register([&](int64_t) {
    if (++calls == 2) done.Notify();
  });
  ASSERT_TRUE(s.Start().ok());
  EXPECT_FALSE(s.Start().ok());
  s.ScheduleAt(a, Clock::Real()->NowNanos());
  // A request made while the thread waits for a later one wakes it (the earliest wins the wait).
  TickScheduler::Id b = s.Register([&](int64_t) {
    if (++calls == 2) done.Notify();
  });
  s.ScheduleAt(b, Clock::Real()->NowNanos() + 1'000'000);
  done.WaitForNotification();
  s.Unregister(a);
  s.Unregister(b);
  s.Stop();
  EXPECT_EQ(calls.load(), 2);
}

}  // namespace
}  // namespace flowctl
