// The arbiter governs egress: two partitions flooding one capped egress scheduler get the bytes
// their share weights say, measured in bytes the scheduler released, never read back. Each case
// runs governed and with the arbiter advisory (it measures and reports, applies nothing), so a
// share that is not applied fails. Deterministic: a fake clock, the transport takes every frame at
// once, time jumps to the next arrival or the scheduler's wait, the arbiter ticks every 100 ms.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flowctl/arbiter_service.h"
#include "flowctl/resource_consumer.h"
#include "gtest/gtest.h"
#include "p2p/egress_scheduler.h"
#include "tests/mocks/fake_clock.h"

namespace p2p {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSec = 1'000'000'000;
constexpr double kCap = 1e6;     // bytes/s
constexpr size_t kFrame = 4096;  // one forwarded 4 KiB tx
constexpr int64_t kTick = 100 * kMs;
constexpr int64_t kMeasured = 20 * kSec;
constexpr int kFloodQueued = 8;  // messages a flooding partition keeps queued per peer

// A partition as the arbiter sees it here: its share config; CPU and memory play no part.
class EgressOnlyConsumer final : public flowctl::ResourceConsumer {
 public:
  EgressOnlyConsumer(uint32_t id, const node::config::ShareConfig& share)
      : id_(id), name_(absl::StrCat("p", id)), share_(share) {}
  uint32_t id() const override { return id_; }
  const std::string& name() const override { return name_; }
  node::config::ShareConfig share_config() const override { return share_; }
  void SetShareConfig(const node::config::ShareConfig& share) override { share_ = share; }
  flowctl::ConsumerUsage TakeUsage() override { return {.memory_limit = 1}; }
  void ApplyShare(flowctl::Resource, double) override {}
  void ApplyCpuLimit(double) override {}

 private:
  const uint32_t id_;
  const std::string name_;
  node::config::ShareConfig share_;
};

struct Spec {
  double weight = 1;
  // Frames of kFrame bytes offered per second to each of 3 peers; 0 = keep the queue full.
  double frames_per_second = 0;
  double ceiling = 0;
  bool hard = false;
};

struct Outcome {
  std::vector<double> bytes_per_second;  // per partition, over seconds 1-21
};

// Runs the partitions for 21 s; measured after the first second (the first ticks). Long: the
// scheduler grants a partition `weight` chunks per visit and the arbiter's weights are scaled to
// the capacity (1000 in all), so a round of the round robin is 2 s of this link.
Outcome RunEgress(const std::vector<Spec>& specs, bool advisory) {
  tests::FakeClock clock;
  EgressScheduler scheduler(EgressOptions{.cap_bytes_per_second = kCap}, &clock);
  SchedulerEgressAccounting accounting(&scheduler);
  std::vector<std::unique_ptr<EgressOnlyConsumer>> parts;
  for (size_t i = 0; i < specs.size(); ++i) {
    node::config::ShareConfig share;
    share.set_weight(specs[i].weight);
    share.set_ceiling_fraction(specs[i].ceiling);
    share.set_hard_ceiling(specs[i].hard);
    parts.push_back(std::make_unique<EgressOnlyConsumer>(static_cast<uint32_t>(i + 1), share));
  }
  auto arbiter = flowctl::ArbiterService::Create({.cpu_workers = [] { return 1; },
                                                  .memory_bytes = 1 << 30,
                                                  .clock = &clock,
                                                  .advisory = advisory},
                                                 &accounting);
  if (!arbiter.ok()) {
    ADD_FAILURE() << arbiter.status();
    return {};
  }
  for (auto& p : parts) EXPECT_TRUE((*arbiter)->AddConsumer(p.get()).ok());

  const std::vector<NodeId> peers = {NodeId(32, 'a'), NodeId(32, 'b'), NodeId(32, 'c')};
  std::vector<double> credit(specs.size(), 0);
  std::map<uint32_t, uint64_t> sent;
  std::map<std::pair<uint32_t, NodeId>, int> outstanding;  // messages queued, per peer
  const int64_t start = clock.NowNanos() + kSec;
  const int64_t end = start + kMeasured;
  int64_t next_tick = clock.NowNanos();
  int64_t last = clock.NowNanos();
  while (clock.NowNanos() < end) {
    const int64_t now = clock.NowNanos();
    if (now >= next_tick) {
      (*arbiter)->Tick();
      next_tick += kTick;
    }
    // Offer: a flood keeps kFloodQueued messages queued per peer (under the channel's bound, so
    // nothing is dropped); a paced source offers its rate.
    for (size_t i = 0; i < specs.size(); ++i) {
      const uint32_t partition = static_cast<uint32_t>(i + 1);
      if (specs[i].frames_per_second <= 0) {
        for (const NodeId& peer : peers) {
          for (int& queued = outstanding[{partition, peer}]; queued < kFloodQueued; ++queued) {
            EXPECT_TRUE(
                scheduler.Enqueue(peer, partition, node::p2p::TX_FORWARD, std::string(kFrame, 'x'))
                    .ok());
          }
        }
        continue;
      }
      credit[i] += specs[i].frames_per_second * static_cast<double>(now - last) / kSec;
      const int frames = static_cast<int>(credit[i]);
      credit[i] -= frames;
      for (int f = 0; f < frames; ++f) {
        for (const NodeId& peer : peers) {
          EXPECT_TRUE(
              scheduler.Enqueue(peer, partition, node::p2p::TX_FORWARD, std::string(kFrame, 'x'))
                  .ok());
          ++outstanding[{partition, peer}];
        }
      }
    }
    last = now;
    DequeueResult r = scheduler.Dequeue();
    if (r.frame) {
      if (now >= start) sent[r.frame->partition] += r.frame->wire_bytes();
      if (r.frame->last()) --outstanding[{r.frame->partition, r.frame->peer}];
      continue;
    }
    const int64_t wait = r.wait_nanos == EgressScheduler::kNever ? kMs : r.wait_nanos;
    clock.SetNanos(std::min({now + std::max<int64_t>(wait, 1), next_tick, end}));
  }
  (*arbiter)->Stop();
  Outcome out;
  for (size_t i = 0; i < specs.size(); ++i) {
    out.bytes_per_second.push_back(static_cast<double>(sent[static_cast<uint32_t>(i + 1)]) /
                                   (static_cast<double>(kMeasured) / kSec));
  }
  return out;
}

// Weights 1:3, both flooding: the cap splits 1:3 governed, evenly when nothing is applied.
TEST(EgressGovernedTest, CapSplitsByShareWeight) {
  const std::vector<double> governed =
      RunEgress({{.weight = 1}, {.weight = 3}}, false).bytes_per_second;
  ASSERT_EQ(governed.size(), 2u);
  const double total = governed[0] + governed[1];
  EXPECT_GT(total, 0.95 * kCap);
  EXPECT_NEAR(governed[0] / total, 0.25, 0.02);
  const std::vector<double> advisory =
      RunEgress({{.weight = 1}, {.weight = 3}}, true).bytes_per_second;
  ASSERT_EQ(advisory.size(), 2u);
  EXPECT_NEAR(advisory[0] / (advisory[0] + advisory[1]), 0.5, 0.02);
}

// A hard ceiling holds a flooding partition to ceiling x cap while the link is otherwise idle.
TEST(EgressGovernedTest, HardCeilingHoldsWhileTheLinkIsIdle) {
  auto first = [](const Outcome& o) {
    return o.bytes_per_second.empty() ? -1 : o.bytes_per_second[0];
  };
  EXPECT_NEAR(
      first(RunEgress({{.ceiling = 0.2, .hard = true}, {.frames_per_second = 0.001}}, false)),
      0.2 * kCap, 0.02 * kCap);
  EXPECT_GT(first(RunEgress({{.ceiling = 0.2}, {.frames_per_second = 0.001}}, false)), 0.9 * kCap);
  EXPECT_GT(first(RunEgress({{.ceiling = 0.2, .hard = true}, {.frames_per_second = 0.001}}, true)),
            0.9 * kCap);
}

}  // namespace
}  // namespace p2p
