// Node-wide admission wired into a real node (resources.node_admission; flowctl/node_admission.h):
// the arbiter's tick hands each partition's load and the CPU pressure (an injected source here)
// to NodeAdmission, and NodeStatus.admission shows the pressure, whether the allocations are
// measured shares, and each partition's smoothed CPU and allocation in cores. With the CPU
// contended the busy partition's allocation follows the CPU the partitions used (its weighted share
// among the active ones times measured_share_slack, at most its entitlement); uncontended, or with
// measured_shares off, it is its entitlement of the worker pool (2 workers / 3 partitions).
#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "flowctl/cpu_pressure.h"
#include "gtest/gtest.h"
#include "tests/runtime/grpc_test_node.h"

namespace runtime::grpc_test {
namespace {

class FixedCpuPressure final : public flowctl::CpuPressureSource {
 public:
  explicit FixedCpuPressure(double percent) : percent_(percent) {}
  std::optional<double> SomeAvg10() override { return percent_; }
  std::string Describe() const override { return "fixed"; }

 private:
  const double percent_;
};

const node::admin::NodeAdmissionStatus::Partition* Find(const node::admin::NodeAdmissionStatus& a,
                                                        const std::string& name) {
  for (const auto& p : a.partitions()) {
    if (p.name() == name) return &p;
  }
  return nullptr;
}

// Starts a node on `config` (its data under `dir`), runs `body` on it, then stops it and removes
// `dir`.
void RunNode(const node::config::NodeConfig& config, const std::string& dir,
             const NodeOptions& options, const std::function<void(Node&)>& body) {
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Create(config, options);
  ASSERT_TRUE(node.ok()) << node.status();
  ASSERT_TRUE((*node)->Start().ok());
  body(**node);
  (*node)->Stop(absl::Seconds(1));
  node->reset();
  std::filesystem::remove_all(dir);
}

// Commits `count` Puts on "hot" and returns the admission status after one more arbiter tick.
// The arbiter's own ticks are 10 s apart: its first, at start, is the partitions' baseline, and
// the test's tick is the one that measures the load.
node::admin::NodeAdmissionStatus RunLoad(bool measured_shares, double pressure, int count,
                                         double slack) {
  const std::string dir = TempDir("node_admission_node_test");
  node::config::NodeConfig config = OneNodeConfig(dir);
  config.mutable_resources()->set_arbiter_tick_ms(10'000);
  // `enabled` left unset: node-wide admission is on by default, and every case below shows it
  // weighing real load.
  auto* na = config.mutable_resources()->mutable_node_admission();
  na->set_measured_shares(measured_shares);
  na->set_agree_with_peers(false);  // one node; its ticks are too far apart to agree on
  na->set_measured_share_slack(slack);
  NodeOptions options;
  options.serve_metrics = false;
  options.cpu_pressure_source = [pressure] { return std::make_unique<FixedCpuPressure>(pressure); };
  node::admin::NodeAdmissionStatus out;
  RunNode(config, dir, options, [&](Node& n) {
    auto client = node::client::ClientService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", n.client_port()), grpc::InsecureChannelCredentials()));
    for (int i = 0; i < count; ++i) {
      const grpc::Status s =
          SubmitForCommit(client.get(), "hot",
                          SignedPut(1, 'a', static_cast<uint64_t>(i) + 1, absl::StrCat("k", i)));
      EXPECT_TRUE(s.ok()) << s.error_message();
    }
    n.ArbiterTick();
    out = n.NodeAdmissionStatus();
  });
  return out;
}

TEST(NodeAdmissionNodeTest, StatusShowsThePressureAndEachPartitionsCpuAndAllocation) {
  struct Case {
    const char* name;
    bool measured_shares;
    double pressure;
    bool measured;  // expected
    double slack = 2;
  };
  for (const Case& c :
       {Case{"contended", true, 40, true}, Case{"contended, slack 1", true, 40, true, 1},
        Case{"uncontended", true, 2, false}, Case{"measured shares off", false, 40, false}}) {
    SCOPED_TRACE(c.name);
    const node::admin::NodeAdmissionStatus a = RunLoad(c.measured_shares, c.pressure, 40, c.slack);
    ASSERT_TRUE(a.enabled());
    EXPECT_EQ(a.cpu_pressure_percent(), c.pressure);
    EXPECT_EQ(a.measured_allocation(), c.measured);
    const auto* hot = Find(a, "hot");
    ASSERT_NE(hot, nullptr);
    double total = 0;
    for (const auto& p : a.partitions()) total += p.cpu_cores();
    EXPECT_GT(hot->cpu_cores(), 0);  // 40 signed txs verified, executed and committed
    // No loan of the idle partitions' entitlements: they have not been idle for kIdleHold yet.
    const double entitlement = 2.0 / 3;
    if (c.measured) {
      // min(entitlement, slack x total x hot's share of the active partitions' weight): 1 (hot
      // alone active), 1/2 or 1/3.
      bool matched = false;
      for (const double share : {1.0, 1.0 / 2, 1.0 / 3}) {
        matched |= std::abs(hot->allocation_cores() -
                            std::min(entitlement, c.slack * total * share)) < 1e-9;
      }
      EXPECT_TRUE(matched) << "allocation " << hot->allocation_cores() << " total " << total;
      // With a slack of 1 nobody is allotted more than all the partitions used together.
      if (c.slack == 1) {
        EXPECT_LE(hot->allocation_cores(), total + 1e-9);
      }
    } else {
      EXPECT_NEAR(hot->allocation_cores(), entitlement, 1e-9);
    }
    ASSERT_GT(hot->allocation_cores(), 0);
    EXPECT_NEAR(hot->cpu_over_entitlement(), hot->cpu_cores() / hot->allocation_cores(), 1e-9);
    EXPECT_EQ(hot->local_admit_fraction(), hot->admit_fraction());  // no peers to agree with
    EXPECT_EQ(hot->peers_cutting(), 0u);
  }
}

// An advisory arbiter applies no entitlements for admission to weigh: a node configured with one
// and nothing said of admission runs without it (and starts, rather than refusing the pair).
TEST(NodeAdmissionNodeTest, AnAdvisoryArbiterTurnsTheDefaultOff) {
  const std::string dir = TempDir("node_admission_node_test_advisory");
  node::config::NodeConfig config = OneNodeConfig(dir);
  config.mutable_resources()->clear_node_admission();
  config.mutable_resources()->set_arbiter_advisory(true);
  ApplyDefaults(&config);
  NodeOptions options;
  options.serve_metrics = false;
  RunNode(config, dir, options, [](Node& n) {
    n.ArbiterTick();
    EXPECT_FALSE(n.NodeAdmissionStatus().enabled());
  });
}

}  // namespace
}  // namespace runtime::grpc_test
