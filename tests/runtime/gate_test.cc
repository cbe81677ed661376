// The interceptor's gates on a real node, through the client gRPC API: a node's pool driven to its
// high water, and a node's consensus driven into VIEW_CHANGE, each refusing the next client tx
// with the exact status, message and trailers a client acts on. (The stages themselves are tested
// on fake predicates in tests/flowctl/.)
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/node.h"
#include "tests/runtime/grpc_test_node.h"
#include "tests/runtime/runtime_test_util.h"

namespace runtime::grpc_test {
namespace {

class GateTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = TempDir("gate_test"); }
  void TearDown() override {
    if (node_ != nullptr) node_->Stop(absl::Seconds(1));
    node_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Start(const node::config::NodeConfig& config) {
    absl::StatusOr<std::unique_ptr<Node>> node =
        Node::Create(config, NodeOptions{.serve_metrics = false});
    ASSERT_TRUE(node.ok()) << node.status();
    ASSERT_TRUE((*node)->Start().ok());
    node_ = *std::move(node);
    client_ = node::client::ClientService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", node_->client_port()), grpc::InsecureChannelCredentials()));
  }

  grpc::Status Submit(const std::string& partition, std::string tx, grpc::ClientContext* ctx) {
    node::client::SubmitTxRequest request;
    *request.mutable_partition() = Ref(partition);
    request.set_signed_tx(std::move(tx));
    node::client::SubmitTxResponse response;
    WithDeadline(ctx);
    return client_->SubmitTx(ctx, request, &response);
  }

  std::string dir_;
  std::unique_ptr<Node> node_;
  std::unique_ptr<node::client::ClientService::Stub> client_;
};

TEST_F(GateTest, APoolAtItsHighWaterRefusesClientsWithResourceExhaustedFromThePoolStage) {
  node::config::NodeConfig config = OneNodeConfig(dir_);
  // "cold" never cuts a block on its own (a batch is 1000 txs or 10 minutes), so what is admitted
  // stays pooled: 4 txs reach the high water of 8 x 0.5.
  node::config::PartitionConfig& cold = *config.mutable_partitions(2);
  cold.mutable_pool()->set_max_txs(8);
  cold.mutable_pool()->set_high_water_fraction(0.5);
  cold.mutable_pool()->set_max_per_sender(8);
  cold.mutable_consensus()->set_batch_max_txs(1000);
  cold.mutable_consensus()->set_batch_timeout_ms(600'000);
  Start(config);

  for (uint64_t nonce = 1; nonce <= 4; ++nonce) {
    grpc::ClientContext ctx;
    grpc::Status st = Submit("cold", SignedPut(3, 'g', nonce, "k"), &ctx);
    ASSERT_TRUE(st.ok()) << nonce << ": " << st.error_message();
  }
  grpc::ClientContext ctx;
  grpc::Status st = Submit("cold", SignedPut(3, 'g', 5, "k"), &ctx);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_EQ(st.error_message(),
            "rejected by stage 'pool': predicate 'pool_below_high_water' does not hold");
  EXPECT_EQ(Trailer(ctx, "rejected-by"), "pool");
  const std::string retry = Trailer(ctx, "retry-after-ms");
  ASSERT_FALSE(retry.empty());
  EXPECT_GT(std::stoll(retry), 0);
  // The other partitions are not affected.
  grpc::ClientContext other;
  EXPECT_TRUE(Submit("hot", SignedPut(1, 'g', 1, "k"), &other).ok());
}

TEST_F(GateTest, AReplicaInViewChangeRefusesClientsWithUnavailableFromTheHealthStage) {
  // One partition of four replicas, of which only this node runs: its first tx can never commit,
  // so the request timer (200 ms) starts a view change that nobody joins.
  node::config::NodeConfig config = OneNodeConfig(dir_);
  base::PrivateKey key = testing::TestKey('Q');
  ASSERT_TRUE(key.WritePemFile(config.key_file()).ok());
  for (char seed : {'R', 'S', 'T'}) {
    auto* peer = config.add_peers();
    peer->set_address(testing::kPortNotYetKnown);
    peer->set_public_key_hex(absl::BytesToHexString(testing::TestKey(seed).public_key().bytes()));
  }
  for (auto& p : *config.mutable_partitions()) {
    p.mutable_consensus()->set_view_change_timeout_ms(200);
  }
  Start(config);

  grpc::ClientContext first;
  grpc::Status admitted = Submit("hot", SignedPut(1, 'h', 1, "k"), &first);
  ASSERT_TRUE(admitted.ok()) << admitted.error_message();
  ASSERT_TRUE(testing::WaitFor([&] {
    absl::StatusOr<std::shared_ptr<Partition>> p = node_->FindPartition("hot");
    return p.ok() && (*p)->Status().consensus_state() == "VIEW_CHANGE";
  })) << "the request timer should have started a view change";

  grpc::ClientContext ctx;
  grpc::Status st = Submit("hot", SignedPut(1, 'h', 2, "k"), &ctx);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_EQ(st.error_message(),
            "rejected by stage 'health': predicate 'consensus_normal' does not hold (consensus "
            "is VIEW_CHANGE)");
  EXPECT_EQ(Trailer(ctx, "rejected-by"), "health");
  const std::string retry = Trailer(ctx, "retry-after-ms");
  ASSERT_FALSE(retry.empty());
  EXPECT_GT(std::stoll(retry), 0);
}

}  // namespace
}  // namespace runtime::grpc_test
