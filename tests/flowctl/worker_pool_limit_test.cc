// Hard CPU limits of the worker pool (WorkerPool::SetGroupCpuLimit): measured in CPU charged
// against clock time, never read back.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "flowctl/clock.h"
#include "flowctl/worker_pool.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"

namespace flowctl {
namespace {

using ::tests::FakeClock;

// A backlog of items; each runs `on_item`. Wakes its task when work arrives on an empty backlog.
// With `now`, a quantum starts no new item once max_nanos have passed by it (the contract real
// lanes keep); without, it runs max_items.
class Backlog : public Schedulable {
 public:
  Backlog(WorkerPool* pool, std::function<void()> on_item, std::function<int64_t()> now = nullptr)
      : pool_(pool), on_item_(std::move(on_item)), now_(std::move(now)) {}
  void Attach(WorkerPool::Task* task) { task_ = task; }
  WorkerPool::Task* task() const { return task_; }

  void Add(int64_t n) {
    absl::MutexLock lock(&mu_);
    const bool was_idle = pending_ == 0;
    pending_ += n;
    if (was_idle && n > 0) pool_->Wake(task_);
  }
  int64_t done() const { return done_.load(); }

  bool RunQuantum(int max_items, int64_t max_nanos) override {
    int64_t n;
    {
      absl::MutexLock lock(&mu_);
      n = std::min<int64_t>(pending_, max_items);
    }
    const int64_t start = now_ ? now_() : 0;
    int64_t ran = 0;
    while (ran < n && (ran == 0 || !now_ || now_() - start < max_nanos)) {
      on_item_();
      done_.fetch_add(1);
      ++ran;
    }
    absl::MutexLock lock(&mu_);
    pending_ -= ran;
    return pending_ > 0;
  }

 private:
  WorkerPool* const pool_;
  const std::function<void()> on_item_;
  const std::function<int64_t()> now_;
  WorkerPool::Task* task_ = nullptr;
  absl::Mutex mu_;
  int64_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> done_{0};
};

// One never-started pool driven by RunQueuedForTest on a fake clock: every item costs kCost of
// clock time (and so of CPU, CpuClock::kWall); when nothing may run, the driver lets clock time
// pass idle, as a worker would sleep.
struct Rig {
  static constexpr int64_t kCost = 100'000;  // 100 us per item, one item per quantum
  FakeClock clock;
  WorkerPool pool{WorkerPool::Options{.threads = 1,
                                      .max_batch = 1,
                                      .max_quantum = absl::Microseconds(1),
                                      .cpu_clock = WorkerPool::CpuClock::kWall,
                                      .clock = &clock}};
  std::vector<std::unique_ptr<Backlog>> backlogs;

  Backlog* Add(WorkerPool::Group* group) {
    backlogs.push_back(std::make_unique<Backlog>(&pool, [this] { clock.AdvanceNanos(kCost); }));
    backlogs.back()->Attach(pool.AddTask(group, backlogs.back().get(), 1));
    return backlogs.back().get();
  }

  // Runs for `nanos` of clock time; returns the clock time that passed idle.
  int64_t RunFor(int64_t nanos) {
    const int64_t end = clock.NowNanos() + nanos;
    int64_t idle = 0;
    while (clock.NowNanos() < end) {
      if (pool.RunQueuedForTest(1) == 0) {
        clock.AdvanceNanos(kCost / 10);
        idle += kCost / 10;
      }
    }
    return idle;
  }

  void Teardown(const std::vector<WorkerPool::Group*>& groups) {
    for (auto& b : backlogs) pool.RemoveTask(b->task());
    for (WorkerPool::Group* g : groups) pool.RemoveGroup(g);
  }
};

constexpr int64_t kSecond = 1'000'000'000;
const int64_t kBurstNanos = absl::ToInt64Nanoseconds(WorkerPool::kLimitBurst);

// Alone on the pool, with nothing else to run, a limited group uses its limit and no more: the
// pool lets the worker idle rather than lend it the rest.
TEST(WorkerPoolLimitTest, LoneGroupHeldToItsLimitWhileTheRestIsIdle) {
  Rig rig;
  WorkerPool::Group* capped = rig.pool.AddGroup("capped", 1.0);
  WorkerPool::Group* idle = rig.pool.AddGroup("idle", 1.0);
  ASSERT_TRUE(rig.pool.SetGroupCpuLimit(capped, 0.25).ok());
  rig.Add(capped)->Add(1'000'000);
  const int64_t start = rig.clock.NowNanos();
  const int64_t idle_nanos = rig.RunFor(2 * kSecond);
  const double elapsed = static_cast<double>(rig.clock.NowNanos() - start);
  const double used = static_cast<double>(WorkerPool::GroupCpuNanos(capped));
  EXPECT_LE(used, 0.25 * elapsed + static_cast<double>(0.25 * kBurstNanos + Rig::kCost));
  // It is held to its limit, not below it.
  EXPECT_GE(used, 0.25 * elapsed - static_cast<double>(2 * Rig::kCost));
  EXPECT_GT(idle_nanos, elapsed / 2);
  const WorkerPool::GroupStats stats = rig.pool.GroupStatsOf(capped);
  EXPECT_EQ(stats.cpu_limit_cores, 0.25);
  EXPECT_GT(stats.throttles, 10);
  // Held about three quarters of the time.
  EXPECT_GT(static_cast<double>(stats.throttled_nanos), 0.6 * elapsed);
  rig.Teardown({capped, idle});
}

// The same two busy groups with equal shares, without and then with a limit on one: the limit,
// not the shares, sets the split, and the unlimited group gets everything the limited one may not
// use.
TEST(WorkerPoolLimitTest, UnlimitedNeighbourTakesWhatTheLimitedOneMayNotUse) {
  for (const double limit : {0.0, 0.2}) {
    Rig rig;
    WorkerPool::Group* a = rig.pool.AddGroup("a", 1.0);
    WorkerPool::Group* b = rig.pool.AddGroup("b", 1.0);
    ASSERT_TRUE(rig.pool.SetGroupCpuLimit(a, limit).ok());
    rig.Add(a)->Add(1'000'000);
    rig.Add(b)->Add(1'000'000);
    const int64_t idle_nanos = rig.RunFor(kSecond);
    const double ua = static_cast<double>(WorkerPool::GroupCpuNanos(a));
    const double ub = static_cast<double>(WorkerPool::GroupCpuNanos(b));
    EXPECT_EQ(idle_nanos, 0) << "limit " << limit;  // work-conserving for the unlimited group
    const double fraction = ua / (ua + ub);
    if (limit == 0) {
      EXPECT_NEAR(fraction, 0.5, 0.01);
    } else {
      EXPECT_NEAR(fraction, 0.2, 0.01 + static_cast<double>(kBurstNanos) * 0.2 / kSecond);
    }
    rig.Teardown({a, b});
  }
}

TEST(WorkerPoolLimitTest, RemovingTheLimitReleasesParkedWorkAtOnce) {
  Rig rig;
  WorkerPool::Group* g = rig.pool.AddGroup("g", 1.0);
  ASSERT_TRUE(rig.pool.SetGroupCpuLimit(g, 0.1).ok());
  Backlog* work = rig.Add(g);
  work->Add(1000);
  // Runs its burst (2 ms = 20 items) and a little more, then is parked.
  rig.pool.RunQueuedForTest(1000);
  const int64_t before = work->done();
  EXPECT_LT(before, 30);
  EXPECT_EQ(rig.pool.RunQueuedForTest(1000), 0);  // no time passed: still parked
  ASSERT_TRUE(rig.pool.SetGroupCpuLimit(g, 0).ok());
  EXPECT_EQ(rig.pool.RunQueuedForTest(10'000), 1000 - before);  // without any clock time idle
  EXPECT_EQ(work->done(), 1000);
  const WorkerPool::GroupStats stats = rig.pool.GroupStatsOf(g);
  EXPECT_EQ(stats.cpu_limit_cores, 0);
  EXPECT_EQ(stats.throttles, 1);
  rig.Teardown({g});
}

TEST(WorkerPoolLimitTest, ChangingTheLimitLiveChangesTheRate) {
  Rig rig;
  WorkerPool::Group* g = rig.pool.AddGroup("g", 1.0);
  ASSERT_TRUE(rig.pool.SetGroupCpuLimit(g, 0.1).ok());
  rig.Add(g)->Add(10'000'000);
  rig.RunFor(kSecond);
  for (const double limit : {0.5, 0.05, 0.3}) {
    ASSERT_TRUE(rig.pool.SetGroupCpuLimit(g, limit).ok());
    const int64_t cpu0 = WorkerPool::GroupCpuNanos(g);
    rig.RunFor(kSecond);
    const double rate = static_cast<double>(WorkerPool::GroupCpuNanos(g) - cpu0) / kSecond;
    // Within what the carried-over budget (at most one burst of the old limit) and one item
    // allow.
    EXPECT_NEAR(rate, limit, 0.5 * static_cast<double>(kBurstNanos + Rig::kCost) / kSecond)
        << "limit " << limit;
  }
  rig.Teardown({g});
}

// Removing a task whose group is parked, and then the group, leaves nothing behind.
TEST(WorkerPoolLimitTest, RemoveWhileParked) {
  Rig rig;
  WorkerPool::Group* g = rig.pool.AddGroup("g", 1.0);
  ASSERT_TRUE(rig.pool.SetGroupCpuLimit(g, 0.01).ok());
  Backlog* work = rig.Add(g);
  Backlog* other = rig.Add(g);
  work->Add(100);
  other->Add(100);
  rig.pool.RunQueuedForTest(100);
  EXPECT_EQ(rig.pool.RunQueuedForTest(100), 0);  // both parked
  EXPECT_EQ(rig.pool.GroupStatsOf(g).throttles, 1);
  EXPECT_LT(work->done() + other->done(), 200);
  rig.Teardown({g});
}

TEST(WorkerPoolLimitTest, BadLimitsRefused) {
  FakeClock clock;
  WorkerPool pool({.cpu_clock = WorkerPool::CpuClock::kWall, .clock = &clock});
  WorkerPool::Group* g = pool.AddGroup("g", 1.0);
  for (const double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    const absl::Status s = pool.SetGroupCpuLimit(g, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("cpu limit"), std::string::npos) << s;
  }
  EXPECT_EQ(pool.GroupStatsOf(g).cpu_limit_cores, 0);
  pool.RemoveGroup(g);
}

// Real workers, the thread CPU clock and real time: parked work is released by the workers' own
// timed sleep (nothing else wakes them), and the CPU charged stays under the limit for the time
// it took. Only a lower bound on time is implied; a slow machine only makes it easier.
TEST(WorkerPoolLimitTest, StartedPoolHoldsTheLimitAndFinishes) {
  WorkerPool pool({.threads = 2});
  WorkerPool::Group* g = pool.AddGroup("g", 1.0);
  constexpr double kLimit = 0.05;
  ASSERT_TRUE(pool.SetGroupCpuLimit(g, kLimit).ok());
  // Each item burns 200 us of this thread's CPU: 100 items = 20 ms of CPU, at least ~0.4 s at
  // 0.05 cores.
  Backlog work(
      &pool,
      [] {
        const int64_t until = ThreadCpuNanos() + 200'000;
        while (ThreadCpuNanos() < until) {
        }
      },
      ThreadCpuNanos);
  work.Attach(pool.AddTask(g, &work, 1));
  ASSERT_TRUE(pool.Start().ok());
  const absl::Time start = absl::Now();
  work.Add(100);
  const absl::Time deadline = start + absl::Seconds(60);  // a hang guard, not a timing bound
  while (work.done() < 100 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start) * kSecond;
  ASSERT_EQ(work.done(), 100);
  const double used = static_cast<double>(WorkerPool::GroupCpuNanos(g));
  EXPECT_GE(used, 100 * 200'000);
  // Charged at most limit x time + burst + one quantum (500 us: at most 3 items of 200 us; the
  // group's one task runs on one worker at a time).
  EXPECT_LE(used,
            kLimit * elapsed + kLimit * static_cast<double>(kBurstNanos) + 3 * 200'000 + 100'000);
  EXPECT_GT(pool.GroupStatsOf(g).throttles, 0);
  pool.Stop();
  pool.RemoveTask(work.task());
  pool.RemoveGroup(g);
}

}  // namespace
}  // namespace flowctl
