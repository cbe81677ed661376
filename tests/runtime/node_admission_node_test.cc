// Node-wide admission wired into a real node (resources.node_admission; flowctl/node_admission.h):
// the arbiter's tick hands each partition's load to NodeAdmission, and NodeStatus.admission shows
// each partition's smoothed CPU and its allocation in cores. With measured_shares (the default)
// a busy partition's allocation follows the CPU the partitions measurably used (at most twice
// it), far below the worker pool's entitlement; without, it is the entitlement (2 workers / 3
// equal partitions).
#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/runtime/grpc_test_node.h"

namespace runtime::grpc_test {
namespace {

const node::admin::NodeAdmissionStatus::Partition* Find(const node::admin::NodeAdmissionStatus& a,
                                                        const std::string& name) {
  for (const auto& p : a.partitions()) {
    if (p.name() == name) return &p;
  }
  return nullptr;
}

// Commits `count` Puts on "hot" and returns the admission status after one more arbiter tick.
node::admin::NodeAdmissionStatus RunLoad(bool measured_shares, int count) {
  const std::string dir = TempDir("node_admission_node_test");
  node::config::NodeConfig config = OneNodeConfig(dir);
  auto* na = config.mutable_resources()->mutable_node_admission();
  na->set_enabled(true);
  na->set_measured_shares(measured_shares);
  NodeOptions options;
  options.serve_metrics = false;
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Create(config, options);
  EXPECT_TRUE(node.ok()) << node.status();
  if (!node.ok()) return {};
  EXPECT_TRUE((*node)->Start().ok());
  auto client = node::client::ClientService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*node)->client_port()), grpc::InsecureChannelCredentials()));
  for (int i = 0; i < count; ++i) {
    node::client::SubmitTxRequest request;
    *request.mutable_partition() = Ref("hot");
    request.set_signed_tx(SignedPut(1, 'a', static_cast<uint64_t>(i) + 1, absl::StrCat("k", i)));
    request.set_wait_for_commit(true);
    request.set_wait_timeout_ms(15000);
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::SubmitTxResponse response;
    const grpc::Status s = client->SubmitTx(&ctx, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  (*node)->ArbiterTick();
  node::admin::NodeAdmissionStatus out = (*node)->NodeAdmissionStatus();
  (*node)->Stop(absl::Seconds(1));
  node->reset();
  std::filesystem::remove_all(dir);
  return out;
}

TEST(NodeAdmissionNodeTest, StatusShowsEachPartitionsCpuAndAllocation) {
  for (const bool measured : {true, false}) {
    SCOPED_TRACE(measured ? "measured shares" : "entitlements only");
    const node::admin::NodeAdmissionStatus a = RunLoad(measured, 40);
    ASSERT_TRUE(a.enabled());
    const auto* hot = Find(a, "hot");
    ASSERT_NE(hot, nullptr);
    double total = 0;
    for (const auto& p : a.partitions()) total += p.cpu_cores();
    // 40 signed txs verified, executed and committed: some CPU, far below the 2 workers.
    EXPECT_GT(hot->cpu_cores(), 0);
    EXPECT_LT(total, 2);
    if (measured) {
      // Twice its weighted share of what the partitions used: between 2 x total / 3 (all three
      // active) and 2 x total (hot alone active).
      EXPECT_GE(hot->allocation_cores(), 2 * total / 3 - 1e-9);
      EXPECT_LE(hot->allocation_cores(), 2 * total + 1e-9);
      EXPECT_LT(hot->allocation_cores(), 0.5);
    } else {
      EXPECT_NEAR(hot->allocation_cores(), 2.0 / 3, 0.01);  // its entitlement of 2 workers
    }
    if (hot->allocation_cores() > 0) {
      EXPECT_NEAR(hot->cpu_over_entitlement(), hot->cpu_cores() / hot->allocation_cores(), 1e-9);
    }
  }
}

}  // namespace
}  // namespace runtime::grpc_test
