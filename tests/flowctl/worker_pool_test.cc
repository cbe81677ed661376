#include "flowctl/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"

namespace flowctl {
namespace {

using ::tests::FakeClock;

constexpr absl::Duration kWait = absl::Seconds(20);  // bound on every wait; never reached when OK

// A test Schedulable: a counter of pending items; each item runs `on_item(item_index)`.
// Follows the wake contract: AddWork wakes the task when the count goes from 0 to > 0, and
// RunQuantum reports "no work" under the same mutex.
class CountingTask : public Schedulable {
 public:
  CountingTask(WorkerPool* pool, std::function<void(int64_t)> on_item)
      : pool_(pool), on_item_(std::move(on_item)) {}

  void Attach(WorkerPool::Task* task) { task_ = task; }
  WorkerPool::Task* task() const { return task_; }

  void AddWork(int64_t n) {
    absl::MutexLock lock(&mu_);
    const bool was_idle = pending_ == 0;
    pending_ += n;
    if (was_idle && n > 0) pool_->Wake(task_);
  }

  bool RunQuantum(int max_items, int64_t max_nanos) override {
    int64_t n;
    {
      absl::MutexLock lock(&mu_);
      n = std::min<int64_t>(pending_, max_items);
    }
    const int entered = in_quantum_.fetch_add(1);
    if (entered != 0) concurrent_entries_.fetch_add(1);
    for (int64_t i = 0; i < n; ++i) on_item_(done_.fetch_add(1));
    in_quantum_.fetch_sub(1);
    absl::MutexLock lock(&mu_);
    pending_ -= n;
    return pending_ > 0;
  }

  int64_t done() const { return done_.load(); }
  int concurrent_entries() const { return concurrent_entries_.load(); }

  bool AwaitDone(int64_t n) {
    absl::MutexLock lock(&mu_);
    auto cond = [this, n]() { return done_.load() >= n && pending_ == 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&cond), kWait);
  }

 private:
  WorkerPool* const pool_;
  const std::function<void(int64_t)> on_item_;
  WorkerPool::Task* task_ = nullptr;
  absl::Mutex mu_;
  int64_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> done_{0};
  std::atomic<int> in_quantum_{0};
  std::atomic<int> concurrent_entries_{0};
};

// Records which task ran each item, in order (single-threaded pools only).
class OrderLog {
 public:
  void Add(int id) {
    absl::MutexLock lock(&mu_);
    order_.push_back(id);
  }
  std::vector<int> Get() const {
    absl::MutexLock lock(&mu_);
    return order_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<int> order_ ABSL_GUARDED_BY(mu_);
};

WorkerPool::Options FakeTimeOptions(FakeClock* clock) {
  WorkerPool::Options options;
  options.threads = 1;
  options.max_batch = 1;
  options.max_quantum = absl::Microseconds(1);
  options.cpu_clock = WorkerPool::CpuClock::kWall;
  options.clock = clock;
  return options;
}

TEST(WorkerPoolTest, ValidateOptions) {
  WorkerPool::Options ok;
  EXPECT_TRUE(WorkerPool::ValidateOptions(ok).ok());
  WorkerPool::Options o = ok;
  o.threads = 0;
  EXPECT_FALSE(WorkerPool::ValidateOptions(o).ok());
  o = ok;
  o.max_batch = 0;
  EXPECT_FALSE(WorkerPool::ValidateOptions(o).ok());
  o = ok;
  o.max_quantum = absl::ZeroDuration();
  EXPECT_FALSE(WorkerPool::ValidateOptions(o).ok());
  o = ok;
  o.clock = nullptr;
  EXPECT_FALSE(WorkerPool::ValidateOptions(o).ok());
}

TEST(WorkerPoolTest, StartOnceAndStopIdempotent) {
  WorkerPool pool({.threads = 2});
  EXPECT_TRUE(pool.Start().ok());
  EXPECT_EQ(pool.Start().code(), absl::StatusCode::kFailedPrecondition);
  pool.Stop();
  pool.Stop();
  EXPECT_FALSE(pool.SetThreads(0).ok());
}

// Fixture for deterministic ordering: one worker, one item per quantum, every item costs exactly
// `cost` nanoseconds of fake wall time, so passes and picks are exact.
struct FakeTimeRig {
  static constexpr int64_t kCost = 1000;
  FakeClock clock;
  WorkerPool pool{FakeTimeOptions(&clock)};
  OrderLog log;
  std::vector<std::unique_ptr<CountingTask>> tasks;

  CountingTask* Add(WorkerPool::Group* group, int weight, int id,
                    std::function<void(int64_t)> extra = nullptr) {
    tasks.push_back(std::make_unique<CountingTask>(&pool, [this, id, extra](int64_t i) {
      log.Add(id);
      clock.AdvanceNanos(kCost);
      if (extra) extra(i);
    }));
    tasks.back()->Attach(pool.AddTask(group, tasks.back().get(), weight));
    return tasks.back().get();
  }

  void Teardown(const std::vector<WorkerPool::Group*>& groups) {
    pool.Stop();
    for (auto& t : tasks) pool.RemoveTask(t->task());
    for (WorkerPool::Group* g : groups) pool.RemoveGroup(g);
  }
};

int CountIn(const std::vector<int>& v, size_t begin, size_t end, int id) {
  return static_cast<int>(std::count(v.begin() + begin, v.begin() + end, id));
}

TEST(WorkerPoolTest, GroupSharesSplitCpuExactlyInOrder) {
  FakeTimeRig rig;
  WorkerPool::Group* g1 = rig.pool.AddGroup("g1", 3.0);
  WorkerPool::Group* g2 = rig.pool.AddGroup("g2", 1.0);
  CountingTask* a = rig.Add(g1, 1, 1);
  CountingTask* b = rig.Add(g2, 1, 2);
  a->AddWork(300);
  b->AddWork(100);
  ASSERT_TRUE(rig.pool.Start().ok());
  ASSERT_TRUE(a->AwaitDone(300));
  ASSERT_TRUE(b->AwaitDone(100));
  const std::vector<int> order = rig.log.Get();
  ASSERT_EQ(order.size(), 400u);
  // Every window of 8 consecutive items holds 6 +- 1 of g1's (stride keeps the lag under a
  // quantum per task).
  for (size_t i = 0; i + 8 <= order.size(); ++i) {
    const int n = CountIn(order, i, i + 8, 1);
    EXPECT_GE(n, 5) << "window at " << i;
    EXPECT_LE(n, 7) << "window at " << i;
  }
  rig.pool.Stop();  // joins the workers, so the last quantum has been charged
  EXPECT_EQ(WorkerPool::GroupCpuNanos(g1), 300 * FakeTimeRig::kCost);
  EXPECT_EQ(WorkerPool::GroupCpuNanos(g2), 100 * FakeTimeRig::kCost);
  EXPECT_EQ(WorkerPool::TaskCpuNanos(a->task()), 300 * FakeTimeRig::kCost);
  rig.Teardown({g1, g2});
}

TEST(WorkerPoolTest, TaskWeightsSplitInsideAGroup) {
  FakeTimeRig rig;
  WorkerPool::Group* g = rig.pool.AddGroup("g", 1.0);
  CountingTask* a = rig.Add(g, 4, 1);
  CountingTask* b = rig.Add(g, 1, 2);
  a->AddWork(400);
  b->AddWork(100);
  ASSERT_TRUE(rig.pool.Start().ok());
  ASSERT_TRUE(a->AwaitDone(400));
  ASSERT_TRUE(b->AwaitDone(100));
  const std::vector<int> order = rig.log.Get();
  for (size_t i = 0; i + 10 <= order.size(); ++i) {
    const int n = CountIn(order, i, i + 10, 1);
    EXPECT_GE(n, 7) << "window at " << i;
    EXPECT_LE(n, 9) << "window at " << i;
  }
  rig.Teardown({g});
}

// A group's share is split among its *active* tasks: a group with two busy tasks does not get
// twice the CPU of a group with one.
TEST(WorkerPoolTest, GroupShareDoesNotGrowWithItsNumberOfTasks) {
  FakeTimeRig rig;
  WorkerPool::Group* g1 = rig.pool.AddGroup("two-tasks", 1.0);
  WorkerPool::Group* g2 = rig.pool.AddGroup("one-task", 1.0);
  CountingTask* a1 = rig.Add(g1, 1, 1);
  CountingTask* a2 = rig.Add(g1, 1, 1);
  CountingTask* b = rig.Add(g2, 1, 2);
  a1->AddWork(100);
  a2->AddWork(100);
  b->AddWork(200);
  ASSERT_TRUE(rig.pool.Start().ok());
  ASSERT_TRUE(a1->AwaitDone(100) && a2->AwaitDone(100) && b->AwaitDone(200));
  const std::vector<int> order = rig.log.Get();
  for (size_t i = 0; i + 8 <= order.size(); ++i) {
    const int n = CountIn(order, i, i + 8, 1);
    EXPECT_GE(n, 3) << "window at " << i;
    EXPECT_LE(n, 5) << "window at " << i;
  }
  rig.Teardown({g1, g2});
}

// A task that slept while another ran does not get a burst when it wakes: it starts at the
// current virtual time and alternates with the busy one.
TEST(WorkerPoolTest, SleepingEarnsNoCredit) {
  FakeTimeRig rig;
  WorkerPool::Group* g = rig.pool.AddGroup("g", 1.0);
  CountingTask* late = nullptr;
  CountingTask* busy = rig.Add(g, 1, 1, [&late](int64_t i) {
    if (i == 99) late->AddWork(100);  // wakes `late` from inside a quantum, after 100 items
  });
  late = rig.Add(g, 1, 2);
  busy->AddWork(300);
  ASSERT_TRUE(rig.pool.Start().ok());
  ASSERT_TRUE(busy->AwaitDone(300) && late->AwaitDone(100));
  const std::vector<int> order = rig.log.Get();
  ASSERT_EQ(order.size(), 400u);
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(order[i], 1);
  int longest_run = 0;
  int run = 0;
  for (size_t i = 100; i < 300; ++i) {
    run = order[i] == 2 ? run + 1 : 0;
    longest_run = std::max(longest_run, run);
  }
  EXPECT_LE(longest_run, 2);
  EXPECT_EQ(CountIn(order, 100, 300, 2), 100);  // from then on they alternate
  rig.Teardown({g});
}

TEST(WorkerPoolTest, ShareChangeTakesEffectLive) {
  FakeTimeRig rig;
  WorkerPool::Group* g1 = rig.pool.AddGroup("g1", 1.0);
  WorkerPool::Group* g2 = rig.pool.AddGroup("g2", 1.0);
  CountingTask* a = rig.Add(g1, 1, 1, [&rig, g1](int64_t i) {
    if (i == 49) {
      EXPECT_TRUE(rig.pool.SetGroupShare(g1, 4.0).ok());
    }
  });
  CountingTask* b = rig.Add(g2, 1, 2);
  a->AddWork(450);
  b->AddWork(150);
  ASSERT_TRUE(rig.pool.Start().ok());
  ASSERT_TRUE(a->AwaitDone(450) && b->AwaitDone(150));
  const std::vector<int> order = rig.log.Get();
  // Before the change: 1:1 (50 of each in the first 100). After: 4:1.
  EXPECT_NEAR(CountIn(order, 0, 100, 1), 50, 2);
  EXPECT_NEAR(CountIn(order, 110, 510, 1), 320, 4);
  EXPECT_FALSE(rig.pool.SetGroupShare(g1, 0).ok());
  EXPECT_FALSE(rig.pool.SetTaskWeight(a->task(), 0).ok());
  rig.Teardown({g1, g2});
}

// How many items of other tasks ran between `id`'s first and second item; -1 without two.
int ItemsBetween(const std::vector<int>& order, int id) {
  auto first = std::find(order.begin(), order.end(), id);
  if (first == order.end()) return -1;
  auto second = std::find(first + 1, order.end(), id);
  if (second == order.end()) return -1;
  return static_cast<int>(second - first) - 1;
}

// CPU a task used stays owed while other work waits: `a` runs one 50-us item beside `b`'s
// queue of 1-us items, wakes again at once, and waits until `b` has used as much. The pool is
// never started: RunQueuedForTest lets the test wake `a` between two quanta. (Forgiving a waking
// task its debt, wholly or per partition, was measured and not kept: docs/BENCHMARKS.md, "A lane
// that wakes owing nothing" and "Debts forgiven per partition or when the pool drains".)
TEST(WorkerPoolTest, DebtStaysOwedWhileOtherWorkWaits) {
  FakeTimeRig rig;
  WorkerPool::Group* ga = rig.pool.AddGroup("a", 1.0);
  WorkerPool::Group* gb = rig.pool.AddGroup("b", 1.0);
  CountingTask* a = rig.Add(ga, 1, 1, [&rig](int64_t) {
    rig.clock.AdvanceNanos(50 * FakeTimeRig::kCost - FakeTimeRig::kCost);
  });
  CountingTask* b = rig.Add(gb, 1, 2);
  a->AddWork(1);
  b->AddWork(100);
  ASSERT_EQ(rig.pool.RunQueuedForTest(1), 1);  // a's item; b's stay queued
  a->AddWork(1);
  rig.pool.RunQueuedForTest(200);
  EXPECT_EQ(ItemsBetween(rig.log.Get(), 1), 50);
  rig.Teardown({ga, gb});
}

TEST(WorkerPoolTest, TasksNeverRunConcurrentlyAndEveryItemRuns) {
  WorkerPool pool({.threads = 4, .max_batch = 3});
  ASSERT_TRUE(pool.Start().ok());
  WorkerPool::Group* g = pool.AddGroup("g", 1.0);
  std::vector<std::unique_ptr<CountingTask>> tasks;
  for (int i = 0; i < 6; ++i) {
    tasks.push_back(std::make_unique<CountingTask>(&pool, [](int64_t) {}));
    tasks.back()->Attach(pool.AddTask(g, tasks.back().get(), 1 + i % 3));
  }
  constexpr int kProducers = 4;
  constexpr int kPerProducer = 5000;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&tasks, p] {
      for (int i = 0; i < kPerProducer; ++i) tasks[(p + i) % tasks.size()]->AddWork(1);
    });
  }
  for (auto& t : producers) t.join();
  int64_t total = 0;
  for (auto& t : tasks) {
    ASSERT_TRUE(t->AwaitDone(0));  // pending == 0
    total += t->done();
    EXPECT_EQ(t->concurrent_entries(), 0);
  }
  EXPECT_EQ(total, kProducers * kPerProducer);
  pool.Stop();
  for (auto& t : tasks) pool.RemoveTask(t->task());
  pool.RemoveGroup(g);
}

// Two tasks that each wait for the other can only finish if they run at the same time.
TEST(WorkerPoolTest, DifferentTasksRunInParallel) {
  WorkerPool pool({.threads = 2});
  ASSERT_TRUE(pool.Start().ok());
  WorkerPool::Group* g = pool.AddGroup("g", 1.0);
  absl::Notification a_in, b_in;
  std::atomic<bool> a_saw_b{false}, b_saw_a{false};
  CountingTask a(&pool, [&](int64_t) {
    a_in.Notify();
    a_saw_b = b_in.WaitForNotificationWithTimeout(kWait);
  });
  CountingTask b(&pool, [&](int64_t) {
    b_in.Notify();
    b_saw_a = a_in.WaitForNotificationWithTimeout(kWait);
  });
  a.Attach(pool.AddTask(g, &a, 1));
  b.Attach(pool.AddTask(g, &b, 1));
  a.AddWork(1);
  b.AddWork(1);
  ASSERT_TRUE(a.AwaitDone(1) && b.AwaitDone(1));
  EXPECT_TRUE(a_saw_b);
  EXPECT_TRUE(b_saw_a);
  pool.Stop();
  pool.RemoveTask(a.task());
  pool.RemoveTask(b.task());
  pool.RemoveGroup(g);
}

// One worker cannot run two tasks that wait for each other; growing the pool live lets them meet.
// Shrinking afterwards keeps the pool working.
TEST(WorkerPoolTest, SetThreadsLive) {
  WorkerPool pool({.threads = 1});
  ASSERT_TRUE(pool.Start().ok());
  WorkerPool::Group* g = pool.AddGroup("g", 1.0);
  absl::Notification a_in, b_in;
  std::atomic<bool> met{false};
  CountingTask a(&pool, [&](int64_t i) {
    if (i != 0) return;
    a_in.Notify();
    met = b_in.WaitForNotificationWithTimeout(kWait);
  });
  CountingTask b(&pool, [&](int64_t i) {
    if (i == 0) b_in.Notify();
  });
  a.Attach(pool.AddTask(g, &a, 1));
  b.Attach(pool.AddTask(g, &b, 1));
  a.AddWork(1);
  ASSERT_TRUE(a_in.WaitForNotificationWithTimeout(kWait));  // the only worker is now held by a
  b.AddWork(1);
  ASSERT_TRUE(pool.SetThreads(2).ok());
  EXPECT_EQ(pool.threads(), 2);
  ASSERT_TRUE(a.AwaitDone(1) && b.AwaitDone(1));
  EXPECT_TRUE(met);
  ASSERT_TRUE(pool.SetThreads(1).ok());
  a.AddWork(10);
  b.AddWork(10);
  ASSERT_TRUE(a.AwaitDone(11) && b.AwaitDone(11));
  pool.Stop();
  pool.RemoveTask(a.task());
  pool.RemoveTask(b.task());
  pool.RemoveGroup(g);
}

TEST(WorkerPoolTest, RemoveTaskWaitsForTheRunningQuantum) {
  WorkerPool pool({.threads = 1});
  ASSERT_TRUE(pool.Start().ok());
  WorkerPool::Group* g = pool.AddGroup("g", 1.0);
  absl::Notification entered, release;
  std::atomic<bool> finished{false};
  CountingTask a(&pool, [&](int64_t i) {
    if (i != 0) return;
    entered.Notify();
    EXPECT_TRUE(release.WaitForNotificationWithTimeout(kWait));
    finished = true;
  });
  a.Attach(pool.AddTask(g, &a, 1));
  a.AddWork(5);
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(kWait));
  std::thread remover([&] {
    pool.RemoveTask(a.task());
    EXPECT_TRUE(finished);  // returned only after the quantum ended
  });
  release.Notify();
  remover.join();
  EXPECT_LT(a.done(), 5 + 1);
  pool.RemoveGroup(g);
  pool.Stop();
}

// Stop does not drain: queued work stays queued, and Stop returns (joins) even with work pending.
TEST(WorkerPoolTest, StopDoesNotDrainAndDoesNotDeadlock) {
  WorkerPool pool({.threads = 2});
  WorkerPool::Group* g = pool.AddGroup("g", 1.0);
  CountingTask a(&pool, [](int64_t) {});
  a.Attach(pool.AddTask(g, &a, 1));
  a.AddWork(100);  // queued before Start
  pool.Stop();     // never started: nothing runs
  EXPECT_EQ(a.done(), 0);
  EXPECT_EQ(pool.Start().code(), absl::StatusCode::kFailedPrecondition);
  std::vector<WorkerPool::GroupStats> stats = pool.GetGroupStats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].active_tasks, 1);
  pool.RemoveTask(a.task());
  pool.RemoveGroup(g);
}

}  // namespace
}  // namespace flowctl
