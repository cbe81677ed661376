// A node on the in-memory network still sends through its egress valve: the cap it is configured
// with and a live UpdateEgress change what actually leaves it, measured at the network (bytes
// handed to the hub) over fake time, with the valve released by hand.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "p2p/in_memory_network.h"
#include "runtime/config.h"
#include "runtime/node.h"
#include "tests/mocks/fake_clock.h"
#include "tests/runtime/in_memory_node.h"
#include "tests/runtime/runtime_test_util.h"

namespace runtime {
namespace {

constexpr int64_t kSec = 1'000'000'000;
constexpr p2p::PartitionId kProbePartition = 77;  // no partition of the node: only the probe

// Releases by hand until `end`, moving the fake clock to each time the valve names.
void RunUntil(p2p::EgressValve& valve, tests::FakeClock& clock, int64_t end) {
  for (;;) {
    const int64_t wait = valve.ReleaseDue();
    const int64_t now = clock.NowNanos();
    if (now >= end) return;
    clock.SetNanos(wait == p2p::EgressScheduler::kNever ? end : std::min(end, now + wait));
  }
}

TEST(NodeEgressTest, UpdateEgressChangesWhatLeavesANodeOnTheInMemoryNetwork) {
  const std::string dir = ::testing::TempDir() + "/node_egress_test_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const base::PrivateKey key = testing::TestKey('e');
  ASSERT_TRUE(key.WritePemFile(dir + "/node.key").ok());
  const p2p::NodeId id = p2p::NodeIdFromPublicKey(key.public_key().bytes());

  tests::FakeClock clock;
  p2p::InMemoryHub hub(&clock);
  std::atomic<uint64_t> probe_bytes{0};
  hub.SetFaultHook([&](const p2p::Envelope& e) {
    if (e.from == id && e.partition == kProbePartition) probe_bytes += e.payload.size();
    return p2p::FaultDecision::Deliver();
  });
  std::unique_ptr<p2p::InMemoryNetwork> net = hub.AddNode(id);
  std::unique_ptr<p2p::InMemoryNetwork> sink = hub.AddNode("sink");

  node::config::NodeConfig config = testing::InMemoryNodeConfig(dir);
  config.mutable_resources()->set_egress_bytes_per_second(100'000);
  absl::StatusOr<std::unique_ptr<Node>> created =
      testing::CreateInMemoryNode(config, net.get(), &clock);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<Node> n = *std::move(created);
  ASSERT_TRUE(n->Start().ok());
  p2p::EgressValve& valve = *n->egress();

  // A backlog far larger than either cap lets through in a second.
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(valve.Send("sink", kProbePartition, node::p2p::BULK, std::string(5000, 'x')).ok());
  }
  RunUntil(valve, clock, clock.NowNanos() + kSec);
  const uint64_t first = probe_bytes.load();
  // 5,000-byte messages cost 5,160 wire bytes (5 chunks); 100 kB/s plus one chunk of burst.
  EXPECT_GE(first, 90'000u);
  EXPECT_LE(first, 100'000u);

  node::admin::UpdateEgressRequest update;
  update.set_set_cap(true);
  update.set_cap_bytes_per_second(400'000);
  absl::StatusOr<node::admin::EgressStats> stats = n->UpdateEgress(update);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->cap_bytes_per_second(), 400'000);
  RunUntil(valve, clock, clock.NowNanos() + kSec);
  const uint64_t second = probe_bytes.load() - first;
  EXPECT_GE(second, 370'000u);
  EXPECT_LE(second, 400'000u);

  // The admin view counts the same traffic.
  absl::StatusOr<node::admin::FlowStats> flow = n->FlowStats("");
  ASSERT_TRUE(flow.ok()) << flow.status();
  ASSERT_EQ(flow->egress().channels_size(), 4);
  EXPECT_EQ(flow->egress().channels(3).channel(), "BULK");
  EXPECT_GE(flow->egress().channels(3).bytes_sent(), first + second);

  n->Stop(absl::ZeroDuration());
  n.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace runtime
