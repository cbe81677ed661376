// CPU share tests for Dispatcher + WorkerPool: partitions with CPU-bound handlers split the
// pool's CPU by their shares, and follow a live share change. Split from dispatcher_test.cc
// because they run for a second or two each (CPU-bound by design).
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

namespace flowctl {
namespace {

using OfferResult = Dispatcher::OfferResult;

std::unique_ptr<Dispatcher> MustCreate(WorkerPool* pool, std::vector<Dispatcher::LaneConfig> lanes,
                                       double share) {
  Dispatcher::Options o;
  o.name = std::string("p");  // (assigning a literal trips a GCC 12 -Wrestrict false positive)
  o.cpu_share = share;
  o.budget = {1000, 1 << 20};
  o.lanes = std::move(lanes);
  absl::StatusOr<std::unique_ptr<Dispatcher>> d = Dispatcher::Create(pool, std::move(o));
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(*d) : nullptr;
}

Message Msg(std::string payload) {
  Message m;
  m.payload = std::move(payload);
  return m;
}

// CPU-bound handlers for the share tests: a fixed amount of arithmetic per message, and each
// handled message offers a new one to its own lane, so every lane stays backlogged for as long as
// the test runs. Milestones (counts of handled messages across all lanes) wake the test thread.
class CpuRig {
 public:
  static constexpr int kLanesPerDispatcher = 3;

  CpuRig() : pool_({.threads = 2}) {}
  ~CpuRig() {
    for (auto& d : dispatchers_) d->Stop();
    dispatchers_.clear();
  }

  Dispatcher* Add(double share) {
    std::vector<Dispatcher::LaneConfig> lanes;
    for (int l = 0; l < kLanesPerDispatcher; ++l) {
      lanes.push_back({absl::StrCat("l", l), 1, nullptr});
    }
    const size_t index = dispatchers_.size();
    for (int l = 0; l < kLanesPerDispatcher; ++l) {
      lanes[l].handler = [this, index, l](Message m) {
        sink_.fetch_add(Spin(20000), std::memory_order_relaxed);
        dispatchers_[index]->Offer(l, std::move(m));
        const int64_t n = handled_.fetch_add(1) + 1;
        absl::MutexLock lock(&mu_);
        for (auto& [at, note] : milestones_) {
          if (n == at) note->Notify();
        }
      };
    }
    dispatchers_.push_back(MustCreate(&pool_, std::move(lanes), share));
    return dispatchers_.back().get();
  }

  // Must be called before the count is reached (milestones are set up before Start).
  absl::Notification* MilestoneAt(int64_t n) {
    absl::MutexLock lock(&mu_);
    milestones_.emplace_back(n, std::make_unique<absl::Notification>());
    return milestones_.back().second.get();
  }

  void Start() {
    for (auto& d : dispatchers_) {
      for (int l = 0; l < kLanesPerDispatcher; ++l) {
        for (int k = 0; k < 4; ++k) ASSERT_EQ(d->Offer(l, Msg("w")), OfferResult::kAccepted);
      }
    }
    ASSERT_TRUE(pool_.Start().ok());
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

  WorkerPool pool_;
  std::vector<std::unique_ptr<Dispatcher>> dispatchers_;
  std::atomic<uint64_t> sink_{0};
  std::atomic<int64_t> handled_{0};
  absl::Mutex mu_;
  std::vector<std::pair<int64_t, std::unique_ptr<absl::Notification>>> milestones_
      ABSL_GUARDED_BY(mu_);
};

double CpuRatio(Dispatcher* a, Dispatcher* b, int64_t a0, int64_t b0) {
  return static_cast<double>(a->CpuNanos() - a0) / static_cast<double>(b->CpuNanos() - b0);
}

// Two partitions with CPU shares 3:1, both always backlogged, on a 2-thread pool: the CPU the pool
// charges them splits 3:1 within 10%. Measured on accounted thread CPU time, so a loaded machine
// slows the test down but does not skew the ratio.
TEST(DispatcherTest, CpuSplitsByPartitionShare) {
  CpuRig rig;
  Dispatcher* a = rig.Add(3.0);
  Dispatcher* b = rig.Add(1.0);
  absl::Notification* warm = rig.MilestoneAt(2000);
  absl::Notification* done = rig.MilestoneAt(22000);
  rig.Start();
  ASSERT_TRUE(warm->WaitForNotificationWithTimeout(absl::Seconds(60)));
  const int64_t a0 = a->CpuNanos();
  const int64_t b0 = b->CpuNanos();
  ASSERT_TRUE(done->WaitForNotificationWithTimeout(absl::Seconds(60)));
  const double ratio = CpuRatio(a, b, a0, b0);
  EXPECT_NEAR(ratio, 3.0, 0.3) << "cpu a " << a->CpuNanos() - a0 << " b " << b->CpuNanos() - b0;
  std::cerr << "cpu ratio " << ratio << " (want 3 +- 10%)\n";
}

// Live re-weighting: 3:1, then 1:1 on the running partitions; the split follows.
TEST(DispatcherTest, LiveReweightingMovesTheCpuSplit) {
  CpuRig rig;
  Dispatcher* a = rig.Add(3.0);
  Dispatcher* b = rig.Add(1.0);
  absl::Notification* warm = rig.MilestoneAt(1000);
  absl::Notification* phase1 = rig.MilestoneAt(13000);
  absl::Notification* settled = rig.MilestoneAt(14000);
  absl::Notification* phase2 = rig.MilestoneAt(26000);
  rig.Start();
  ASSERT_TRUE(warm->WaitForNotificationWithTimeout(absl::Seconds(60)));
  int64_t a0 = a->CpuNanos();
  int64_t b0 = b->CpuNanos();
  ASSERT_TRUE(phase1->WaitForNotificationWithTimeout(absl::Seconds(60)));
  const double before = CpuRatio(a, b, a0, b0);
  EXPECT_NEAR(before, 3.0, 0.3);
  ASSERT_TRUE(a->SetCpuShare(1.0).ok());
  ASSERT_TRUE(settled->WaitForNotificationWithTimeout(absl::Seconds(60)));
  a0 = a->CpuNanos();
  b0 = b->CpuNanos();
  ASSERT_TRUE(phase2->WaitForNotificationWithTimeout(absl::Seconds(60)));
  const double after = CpuRatio(a, b, a0, b0);
  EXPECT_NEAR(after, 1.0, 0.1);
  std::cerr << "cpu ratio " << before << " then " << after << " (want 3 then 1, +- 10%)\n";
}

}  // namespace
}  // namespace flowctl
