// CPU share tests for Dispatcher + WorkerPool: partitions with CPU-bound handlers split the
// pool's CPU by their shares, and follow a live share change.
//
// The exact figures come from a never-started pool run quantum by quantum on a fake clock (every
// message costs a fixed amount of clock time, charged as CPU with CpuClock::kWall), so they do not
// depend on how busy the machine is. One test runs the same rig on real threads with the thread
// CPU clock, with a margin wide enough to tell 3:1 from 1:1 on a loaded machine.
#include <atomic>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "flowctl/dispatcher.h"
#include "flowctl/worker_pool.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"

namespace flowctl {
namespace {

using OfferResult = Dispatcher::OfferResult;
using ::tests::FakeClock;

constexpr int64_t kCost = 100'000;  // fake-clock time (= CPU charged) per message: 100 us

Message Msg(std::string payload) {
  Message m;
  m.payload = std::move(payload);
  return m;
}

// CPU-bound handlers: each handled message costs CPU (a fixed amount of arithmetic on real
// threads, kCost of fake-clock time otherwise) and offers a new one to its own lane, so every lane
// stays backlogged for as long as the test runs.
class CpuRig {
 public:
  static constexpr int kLanesPerDispatcher = 3;

  // Real threads: a 2-thread pool charging thread CPU time.
  CpuRig() : pool_({.threads = 2}) {}
  // Fake time: a 1-thread pool that is never started; Run() drives it.
  explicit CpuRig(FakeClock* clock)
      : clock_(clock),
        pool_({.threads = 1,
               .max_batch = 1,
               .max_quantum = absl::Microseconds(1),
               .cpu_clock = WorkerPool::CpuClock::kWall,
               .clock = clock}) {}
  ~CpuRig() {
    for (auto& d : dispatchers_) d->Stop();
    dispatchers_.clear();
  }

  Dispatcher* Add(double share) {
    std::vector<Dispatcher::LaneConfig> lanes;
    const size_t index = dispatchers_.size();
    for (int l = 0; l < kLanesPerDispatcher; ++l) {
      lanes.push_back({absl::StrCat("l", l), 1, [this, index, l](Message m) {
                         if (clock_ != nullptr) {
                           clock_->AdvanceNanos(kCost);
                         } else {
                           sink_.fetch_add(Spin(20000), std::memory_order_relaxed);
                         }
                         dispatchers_[index]->Offer(l, std::move(m));
                         const int64_t n = handled_.fetch_add(1) + 1;
                         absl::MutexLock lock(&mu_);
                         for (auto& [at, note] : milestones_) {
                           if (n == at) note->Notify();
                         }
                       }});
    }
    Dispatcher::Options o;
    o.name = std::string("p");  // (assigning a literal trips a GCC 12 -Wrestrict false positive)
    o.cpu_share = share;
    o.budget = {1000, 1 << 20};
    o.lanes = std::move(lanes);
    if (clock_ != nullptr) o.clock = clock_;
    absl::StatusOr<std::unique_ptr<Dispatcher>> d = Dispatcher::Create(&pool_, std::move(o));
    EXPECT_TRUE(d.ok()) << d.status();
    dispatchers_.push_back(d.ok() ? std::move(*d) : nullptr);
    return dispatchers_.back().get();
  }

  // Must be called before the count is reached (milestones are set up before Start).
  absl::Notification* MilestoneAt(int64_t n) {
    absl::MutexLock lock(&mu_);
    milestones_.emplace_back(n, std::make_unique<absl::Notification>());
    return milestones_.back().second.get();
  }

  // Fills every lane; on real threads also starts the pool.
  void Start() {
    for (auto& d : dispatchers_) {
      for (int l = 0; l < kLanesPerDispatcher; ++l) {
        for (int k = 0; k < 4; ++k) ASSERT_EQ(d->Offer(l, Msg("w")), OfferResult::kAccepted);
      }
    }
    if (clock_ == nullptr) {
      ASSERT_TRUE(pool_.Start().ok());
    }
  }

  // Fake time only: runs `messages` quanta (one message each) on the calling thread.
  void Run(int messages) {
    for (int i = 0; i < messages; ++i) ASSERT_EQ(pool_.RunQueuedForTest(1), 1);
  }

 private:
  static uint64_t Spin(int iterations) {
    uint64_t x = 1;
    for (int i = 0; i < iterations; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      asm volatile("" : "+r"(x));
    }
    return x;
  }

  FakeClock* const clock_ = nullptr;  // null: real threads
  WorkerPool pool_;
  std::vector<std::unique_ptr<Dispatcher>> dispatchers_;
  std::atomic<uint64_t> sink_{0};
  std::atomic<int64_t> handled_{0};
  absl::Mutex mu_;
  std::vector<std::pair<int64_t, std::unique_ptr<absl::Notification>>> milestones_
      ABSL_GUARDED_BY(mu_);
};

// CPU charged to a and b since (a0, b0), and their ratio.
struct Split {
  int64_t a = 0;
  int64_t b = 0;
  double ratio() const { return static_cast<double>(a) / static_cast<double>(b); }
};
Split SplitSince(Dispatcher* a, Dispatcher* b, int64_t a0, int64_t b0) {
  return {a->CpuNanos() - a0, b->CpuNanos() - b0};
}

// Two partitions with CPU shares 3:1 on the fake-time rig, both always backlogged, after 200
// messages of warm-up.
class DispatcherCpuShareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = rig_.Add(3.0);
    b_ = rig_.Add(1.0);
    rig_.Start();
    rig_.Run(200);
  }
  // The CPU charged to a and b while `messages` more run.
  Split Measure(int messages) {
    const int64_t a0 = a_->CpuNanos();
    const int64_t b0 = b_->CpuNanos();
    rig_.Run(messages);
    return SplitSince(a_, b_, a0, b0);
  }

  FakeClock clock_;
  CpuRig rig_{&clock_};
  Dispatcher* a_ = nullptr;
  Dispatcher* b_ = nullptr;
};

// The CPU the pool charges them splits 3:1: of 4,000 messages, 3,000 and 1,000 within a few (the
// stride scheduler's rounding), every message charged exactly its cost.
TEST_F(DispatcherCpuShareTest, CpuSplitsByPartitionShare) {
  const Split s = Measure(4000);
  EXPECT_EQ(s.a + s.b, 4000 * kCost);
  EXPECT_NEAR(s.a, 3000 * kCost, 5 * kCost);
  EXPECT_NEAR(s.b, 1000 * kCost, 5 * kCost);
}

// Live re-weighting: 3:1, then 1:1 on the running partitions; the split follows within a few
// messages of the change.
TEST_F(DispatcherCpuShareTest, LiveReweightingMovesTheCpuSplit) {
  EXPECT_NEAR(Measure(4000).a, 3000 * kCost, 5 * kCost);
  ASSERT_TRUE(a_->SetCpuShare(1.0).ok());
  rig_.Run(100);  // what was scheduled under the old share
  const Split after = Measure(4000);
  EXPECT_NEAR(after.a, 2000 * kCost, 5 * kCost);
  EXPECT_NEAR(after.b, 2000 * kCost, 5 * kCost);
}

// The same on a started 2-thread pool, charged by each worker thread's CPU clock: 3:1, then 1:1
// after a live change. The machine this runs on is shared, so the margins only tell the two splits
// apart (above 2, then below 1.5); the exact figures are the fake-time tests' job.
TEST(DispatcherTest, RealThreadsSplitByShareAndFollowALiveChange) {
  CpuRig rig;
  Dispatcher* a = rig.Add(3.0);
  Dispatcher* b = rig.Add(1.0);
  absl::Notification* warm = rig.MilestoneAt(1000);
  absl::Notification* phase1 = rig.MilestoneAt(9000);
  absl::Notification* settled = rig.MilestoneAt(10000);
  absl::Notification* phase2 = rig.MilestoneAt(18000);
  rig.Start();
  ASSERT_TRUE(warm->WaitForNotificationWithTimeout(absl::Seconds(60)));
  int64_t a0 = a->CpuNanos();
  int64_t b0 = b->CpuNanos();
  ASSERT_TRUE(phase1->WaitForNotificationWithTimeout(absl::Seconds(60)));
  const double before = SplitSince(a, b, a0, b0).ratio();
  EXPECT_GT(before, 2.0);
  ASSERT_TRUE(a->SetCpuShare(1.0).ok());
  ASSERT_TRUE(settled->WaitForNotificationWithTimeout(absl::Seconds(60)));
  a0 = a->CpuNanos();
  b0 = b->CpuNanos();
  ASSERT_TRUE(phase2->WaitForNotificationWithTimeout(absl::Seconds(60)));
  const double after = SplitSince(a, b, a0, b0).ratio();
  EXPECT_LT(after, 1.5);
  EXPECT_GT(after, 0.67);
  std::cerr << "cpu ratio " << before << " then " << after << " (want 3 then 1)\n";
}

}  // namespace
}  // namespace flowctl
