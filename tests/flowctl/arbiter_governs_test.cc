// The arbiter governs the worker pool: partitions (dispatchers on one pool, each a
// ResourceConsumer) get the CPU the arbiter's shares say, measured in CPU charged by the pool,
// never read back. Deterministic: one never-started pool run quantum by quantum on a fake clock,
// every message costing a fixed amount of clock time, the arbiter ticked every 100 ms of it.
// Each case is run governed and with the arbiter advisory (measures and reports, applies
// nothing), so a share that is not applied fails the test.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "flowctl/arbiter.h"
#include "flowctl/arbiter_service.h"
#include "flowctl/dispatcher.h"
#include "flowctl/resource_consumer.h"
#include "flowctl/worker_pool.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"

namespace flowctl {
namespace {

using ::tests::FakeClock;

constexpr int64_t kCost = 100'000;          // clock (= CPU) time per message: 100 us
constexpr int64_t kTick = 100'000'000;      // arbiter tick: 100 ms
constexpr int64_t kRun = 4'000'000'000;     // measured run: 4 s
constexpr int64_t kWarmup = 1'000'000'000;  // before measuring: 1 s
constexpr int kLaneCapacity = 64;

// A partition as the arbiter sees it, reduced to its CPU: one dispatcher with one lane, which a
// producer keeps fed at `offered_cores` (or flooded: always kLaneCapacity queued).
class TestPartition final : public ResourceConsumer {
 public:
  TestPartition(uint32_t id, WorkerPool* pool, FakeClock* clock, double offered_cores,
                const node::config::ShareConfig& share)
      : id_(id), name_(absl::StrCat("p", id)), offered_cores_(offered_cores), share_(share) {
    Dispatcher::Options o;
    o.name = name_;
    o.budget = {kLaneCapacity, 1 << 20};
    o.lanes = {
        {.name = "work", .weight = 1, .handler = [clock](Message) { clock->AdvanceNanos(kCost); }}};
    o.clock = clock;
    auto d = Dispatcher::Create(pool, std::move(o));
    EXPECT_TRUE(d.ok()) << d.status();
    dispatcher_ = std::move(*d);
  }

  // Offers what the producer would have by `now`: a flood keeps the lane full; a paced producer
  // offers offered_cores x elapsed worth of messages.
  void Produce(int64_t now) {
    if (offered_cores_ < 0) {
      while (dispatcher_->Offer(0, Message{}) == Dispatcher::OfferResult::kAccepted) {
      }
      return;
    }
    if (last_produce_ >= 0) credit_ += offered_cores_ * static_cast<double>(now - last_produce_);
    last_produce_ = now;
    while (credit_ >= kCost) {
      dispatcher_->Offer(0, Message{});
      credit_ -= kCost;
    }
  }
  int64_t cpu_nanos() const { return dispatcher_->CpuNanos(); }
  void Stop() { dispatcher_->Stop(); }

  uint32_t id() const override { return id_; }
  const std::string& name() const override { return name_; }
  node::config::ShareConfig share_config() const override { return share_; }
  void SetShareConfig(const node::config::ShareConfig& share) override { share_ = share; }
  ConsumerUsage TakeUsage() override {
    const int64_t cpu = dispatcher_->CpuNanos();
    ConsumerUsage u{.cpu_nanos = cpu - last_cpu_,
                    .cpu_backlogged = dispatcher_->GetLaneStats(0).depth_messages > 0,
                    .memory_limit = 1};
    last_cpu_ = cpu;
    return u;
  }
  void ApplyShare(Resource resource, double amount) override {
    if (resource == Resource::kCpu) {
      EXPECT_TRUE(dispatcher_->SetCpuShare(amount).ok());
    }
  }
  void ApplyCpuLimit(double cores) override { EXPECT_TRUE(dispatcher_->SetCpuLimit(cores).ok()); }

 private:
  const uint32_t id_;
  const std::string name_;
  const double offered_cores_;  // < 0: flood
  node::config::ShareConfig share_;
  std::unique_ptr<Dispatcher> dispatcher_;
  double credit_ = 0;
  int64_t last_produce_ = -1;  // none yet
  int64_t last_cpu_ = 0;
};

struct Spec {
  double weight = 1;
  double offered_cores = -1;  // < 0: flood
  double ceiling = 0;
  bool hard = false;
};

// Runs the partitions on a one-thread pool and returns each one's CPU over the measured run, in
// cores, and the cores the arbiter's demand-based shares gave each at the last tick.
struct Outcome {
  std::vector<double> cores;
  std::vector<double> shares;
};

Outcome RunPartitions(const std::vector<Spec>& specs, bool advisory) {
  FakeClock clock;
  WorkerPool pool({.threads = 1,
                   .max_batch = 1,
                   .max_quantum = absl::Microseconds(1),
                   .cpu_clock = WorkerPool::CpuClock::kWall,
                   .clock = &clock});
  std::vector<std::unique_ptr<TestPartition>> parts;
  for (size_t i = 0; i < specs.size(); ++i) {
    node::config::ShareConfig share;
    share.set_weight(specs[i].weight);
    share.set_ceiling_fraction(specs[i].ceiling);
    share.set_hard_ceiling(specs[i].hard);
    parts.push_back(std::make_unique<TestPartition>(static_cast<uint32_t>(i + 1), &pool, &clock,
                                                    specs[i].offered_cores, share));
  }
  auto arbiter = ArbiterService::Create({.cpu_workers = [] { return 1; },
                                         .memory_bytes = 1 << 30,
                                         .clock = &clock,
                                         .advisory = advisory},
                                        nullptr);
  EXPECT_TRUE(arbiter.ok()) << arbiter.status();
  for (auto& p : parts) EXPECT_TRUE((*arbiter)->AddConsumer(p.get()).ok());

  std::vector<int64_t> cpu_at_start(parts.size(), 0);
  int64_t next_tick = clock.NowNanos();
  const int64_t start = clock.NowNanos() + kWarmup;
  const int64_t end = start + kRun;
  bool measuring = false;
  while (clock.NowNanos() < end) {
    const int64_t now = clock.NowNanos();
    if (!measuring && now >= start) {
      for (size_t i = 0; i < parts.size(); ++i) cpu_at_start[i] = parts[i]->cpu_nanos();
      measuring = true;
    }
    if (now >= next_tick) {
      (*arbiter)->Tick();
      next_tick += kTick;
    }
    for (auto& p : parts) p->Produce(now);
    if (pool.RunQueuedForTest(1) == 0) clock.AdvanceNanos(kCost / 10);  // idle
  }
  Outcome out;
  const std::vector<ConsumerShareStats> stats = (*arbiter)->Stats();
  for (size_t i = 0; i < parts.size(); ++i) {
    out.cores.push_back(static_cast<double>(parts[i]->cpu_nanos() - cpu_at_start[i]) /
                        static_cast<double>(clock.NowNanos() - start));
    out.shares.push_back(stats[i].cpu.share);
  }
  (*arbiter)->Stop();
  for (auto& p : parts) p->Stop();
  return out;
}

// Weights 1:3, both flooded: the CPU splits 1:3 governed, and evenly when nothing is applied.
TEST(ArbiterGovernsTest, CpuFollowsWeights) {
  const std::vector<Spec> specs = {{.weight = 1}, {.weight = 3}};
  const Outcome governed = RunPartitions(specs, /*advisory=*/false);
  EXPECT_NEAR(governed.cores[0], 0.25, 0.01);
  EXPECT_NEAR(governed.cores[1], 0.75, 0.01);
  const Outcome advisory = RunPartitions(specs, /*advisory=*/true);
  EXPECT_NEAR(advisory.cores[0], 0.5, 0.01);
  EXPECT_NEAR(advisory.cores[1], 0.5, 0.01);
  // The shares the arbiter reports are the same either way; only the governed run gets them.
  EXPECT_NEAR(advisory.shares[0], 0.25, 0.01);
}

// Demand-based shares: a light partition (0.1 cores offered) gets all it asks for and lends the
// rest, which the two flooded ones split by weight 1:2 -- what AllocateFairShares computes from
// the demands.
TEST(ArbiterGovernsTest, CpuFollowsDemandBasedShares) {
  const std::vector<Spec> specs = {
      {.weight = 4, .offered_cores = 0.1}, {.weight = 1}, {.weight = 2}};
  const Outcome governed = RunPartitions(specs, /*advisory=*/false);
  auto expected = AllocateFairShares(
      1.0, std::vector<ArbiterConsumer>{{.weight = 4, .demand = 0.1},
                                        {.weight = 1, .demand = kUnboundedDemand},
                                        {.weight = 2, .demand = kUnboundedDemand}});
  ASSERT_TRUE(expected.ok());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_NEAR(governed.cores[i], (*expected)[i], 0.015) << "partition " << i;
    EXPECT_NEAR(governed.shares[i], (*expected)[i], 0.05) << "partition " << i;
  }
  const Outcome advisory = RunPartitions(specs, /*advisory=*/true);
  EXPECT_NEAR(advisory.cores[1], advisory.cores[2], 0.015);  // 1:1, not 1:2
}

// A hard ceiling holds a flooded partition to its fraction while the rest of the pool is idle; a
// soft one (the same ceiling without hard) lends it the idle rest.
TEST(ArbiterGovernsTest, HardCeilingHoldsWhileTheRestIsIdle) {
  const Outcome hard = RunPartitions({{.ceiling = 0.3, .hard = true}, {.offered_cores = 0}}, false);
  EXPECT_NEAR(hard.cores[0], 0.3, 0.01);
  const Outcome soft = RunPartitions({{.ceiling = 0.3}, {.offered_cores = 0}}, false);
  EXPECT_GT(soft.cores[0], 0.95);
  const Outcome advisory =
      RunPartitions({{.ceiling = 0.3, .hard = true}, {.offered_cores = 0}}, true);
  EXPECT_GT(advisory.cores[0], 0.95);
}

// Beside a light partition (0.2 cores), the hard-limited flood still gets only its ceiling and
// the light one all it asks; without hard the flood takes the remaining 0.8.
TEST(ArbiterGovernsTest, HardCeilingBesideALightPartition) {
  const std::vector<Spec> specs = {{.ceiling = 0.3, .hard = true}, {.offered_cores = 0.2}};
  const Outcome hard = RunPartitions(specs, false);
  EXPECT_NEAR(hard.cores[0], 0.3, 0.01);
  EXPECT_NEAR(hard.cores[1], 0.2, 0.01);
  const Outcome soft = RunPartitions({{.ceiling = 0.3}, {.offered_cores = 0.2}}, false);
  EXPECT_NEAR(soft.cores[0], 0.8, 0.015);
  EXPECT_NEAR(soft.cores[1], 0.2, 0.01);
}

}  // namespace
}  // namespace flowctl
