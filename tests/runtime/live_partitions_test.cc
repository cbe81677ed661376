// Partitions created, stopped, started and removed live through the admin API
// (proto/admin.proto), on a 4-node cluster in one process over loopback (real GrpcTransport,
// real admin and client servers): the partition commits once every node created it, a node that
// stopped it refuses its clients while the other three go on committing, the change survives a
// restart of that node, a started partition catches up, removal keeps or deletes the data as
// asked and a re-created partition reopens kept data; every refusal has its code and message.
//
// Waits poll a condition with a bound (real threads and sockets); no sleep orders events.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/ed25519.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "proto/client.grpc.pb.h"
#include "runtime/config.h"
#include "runtime/node.h"
#include "runtime/partition_registry.h"
#include "tests/runtime/runtime_test_util.h"

namespace runtime {
namespace {

using ::runtime::testing::AllConnected;
using ::runtime::testing::ConnectPeers;
using ::runtime::testing::kPortNotYetKnown;
using ::runtime::testing::SignedPut;
using ::runtime::testing::TestKey;
using ::runtime::testing::WaitFor;
using ::testing::HasSubstr;

constexpr int kNodes = 4;
constexpr uint32_t kOrders = 7;

class LivePartitionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/live_partitions_test_" + std::to_string(getpid());
    std::filesystem::remove_all(root_);
    for (int i = 0; i < kNodes; ++i) {
      const std::string dir = absl::StrCat(root_, "/node", i);
      std::filesystem::create_directories(dir);
      base::PrivateKey key = TestKey(static_cast<char>('K' + i));
      CHECK(key.WritePemFile(dir + "/node.key").ok());
      pubs_.push_back(absl::BytesToHexString(key.public_key().bytes()));
    }
    for (int i = 0; i < kNodes; ++i) {
      node::config::NodeConfig c;
      const std::string dir = absl::StrCat(root_, "/node", i);
      c.set_data_dir(dir + "/data");
      c.set_key_file(dir + "/node.key");
      c.set_p2p_listen("127.0.0.1:0");
      c.set_client_listen("127.0.0.1:0");
      c.set_admin_listen("127.0.0.1:0");
      c.set_metrics_listen("");
      c.mutable_resources()->set_cpu_workers(1);
      // Less memory than the partitions' pools and lanes would take, so the arbiter divides it
      // by weight (with plenty, each partition gets what it asks for).
      c.mutable_resources()->set_memory_bytes(32ull << 20);
      // No periodic tick within the test: the re-division seen after a create is the one the
      // create itself runs.
      c.mutable_resources()->set_arbiter_tick_ms(10000);
      for (int j = 0; j < kNodes; ++j) {
        if (j == i) continue;
        auto* peer = c.add_peers();
        peer->set_address(kPortNotYetKnown);
        peer->set_public_key_hex(pubs_[j]);
      }
      auto* p = c.add_partitions();
      p->set_id(1);
      p->set_name("alpha");
      p->mutable_consensus()->set_batch_timeout_ms(5);
      ApplyDefaults(&c);
      configs_.push_back(c);
      nodes_.push_back(nullptr);
      StartNode(i);
    }
    ConnectPeers(nodes_, pubs_);
    CHECK(WaitFor([&] { return AllConnected(nodes_); })) << "cluster did not connect";
  }

  void TearDown() override {
    for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) {
      if (*it) (*it)->Stop(absl::Seconds(1));
    }
    nodes_.clear();
    std::filesystem::remove_all(root_);
  }

  void StartNode(int i) {
    absl::StatusOr<std::unique_ptr<Node>> node =
        Node::Create(configs_[static_cast<size_t>(i)], NodeOptions{.serve_metrics = false});
    CHECK(node.ok()) << node.status();
    const absl::Status started = (*node)->Start();
    CHECK(started.ok()) << started;
    nodes_[static_cast<size_t>(i)] = *std::move(node);
  }

  // Stops node i and starts it again on the same config and data directory.
  void RestartNode(int i) {
    nodes_[static_cast<size_t>(i)]->Stop(absl::Seconds(1));
    nodes_[static_cast<size_t>(i)].reset();
    StartNode(i);
    ConnectPeers(nodes_, pubs_);
    CHECK(WaitFor([&] { return AllConnected(nodes_); })) << "node " << i << " did not reconnect";
  }

  std::unique_ptr<node::admin::AdminService::Stub> Admin(int i) {
    return node::admin::AdminService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", nodes_[static_cast<size_t>(i)]->admin_port()),
        grpc::InsecureChannelCredentials()));
  }

  static void Deadline(grpc::ClientContext& ctx) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  }

  grpc::Status Create(int i, const node::config::PartitionConfig& config,
                      node::admin::CreatePartitionResponse* out = nullptr) {
    node::admin::CreatePartitionRequest req;
    *req.mutable_config() = config;
    node::admin::CreatePartitionResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx);
    grpc::Status s = Admin(i)->CreatePartition(&ctx, req, &resp);
    if (out != nullptr) *out = resp;
    return s;
  }
  grpc::Status Stop(int i, const std::string& partition) {
    node::admin::StopPartitionRequest req;
    req.set_partition(partition);
    req.set_drain_ms(1000);
    node::admin::StopPartitionResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx);
    return Admin(i)->StopPartition(&ctx, req, &resp);
  }
  grpc::Status StartPartition(int i, const std::string& partition) {
    node::admin::StartPartitionRequest req;
    req.set_partition(partition);
    node::admin::StartPartitionResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx);
    return Admin(i)->StartPartition(&ctx, req, &resp);
  }
  grpc::Status Remove(int i, const std::string& partition, bool delete_data,
                      node::admin::RemovePartitionResponse* out = nullptr) {
    node::admin::RemovePartitionRequest req;
    req.set_partition(partition);
    req.set_delete_data(delete_data);
    node::admin::RemovePartitionResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx);
    grpc::Status s = Admin(i)->RemovePartition(&ctx, req, &resp);
    if (out != nullptr) *out = resp;
    return s;
  }

  grpc::Status Submit(int i, const std::string& partition, const std::string& tx) {
    auto client = node::client::ClientService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", nodes_[static_cast<size_t>(i)]->client_port()),
        grpc::InsecureChannelCredentials()));
    node::client::SubmitTxRequest req;
    req.mutable_partition()->set_name(partition);
    req.set_signed_tx(tx);
    req.set_wait_for_commit(true);
    req.set_wait_timeout_ms(30000);
    node::client::SubmitTxResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx);
    return client->SubmitTx(&ctx, req, &resp);
  }

  // The partition's entry in node i's listing; empty state when it is not listed.
  node::admin::PartitionStatus Listed(int i, const std::string& name) {
    const node::admin::ListPartitionsResponse listed =
        nodes_[static_cast<size_t>(i)]->ListPartitions();
    for (const auto& p : listed.partitions()) {
      if (p.name() == name) return p;
    }
    return {};
  }

  uint64_t Height(int i, const std::string& name) {
    absl::StatusOr<std::shared_ptr<Partition>> p =
        nodes_[static_cast<size_t>(i)]->FindPartition(name);
    return p.ok() ? (*p)->height() : 0;
  }

  static node::config::PartitionConfig Orders() {
    node::config::PartitionConfig c;
    c.set_id(kOrders);
    c.set_name("orders");
    c.mutable_consensus()->set_batch_timeout_ms(5);
    // A replica that missed blocks syncs when it sees the others' stable checkpoint ahead of it.
    c.mutable_consensus()->set_checkpoint_interval(2);
    c.mutable_share()->set_weight(3);
    return c;
  }

  std::string root_;
  std::vector<std::string> pubs_;
  std::vector<node::config::NodeConfig> configs_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

TEST_F(LivePartitionsTest, CreateStopStartRemoveAcrossTheClusterAndRestarts) {
  // Before: node 0's arbiter divides its memory among alpha alone.
  nodes_[0]->ArbiterTick();
  absl::StatusOr<node::admin::FlowStats> before = nodes_[0]->FlowStats("");
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->partitions_size(), 1);
  const double alpha_memory_before = before->partitions(0).memory().share();
  ASSERT_GT(alpha_memory_before, 0);

  // Created on every node (as nodectl --admins does), it runs and commits.
  for (int i = 0; i < kNodes; ++i) {
    node::admin::CreatePartitionResponse resp;
    grpc::Status s = Create(i, Orders(), &resp);
    ASSERT_TRUE(s.ok()) << "node " << i << ": " << s.error_message();
    EXPECT_TRUE(resp.status().created_live());
    EXPECT_EQ(resp.config().share().weight(), 3);
    EXPECT_GT(resp.config().pool().max_txs(), 0u) << "defaults applied";
  }
  ASSERT_TRUE(Submit(1, "orders", SignedPut(kOrders, 'o', 1)).ok());
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_TRUE(WaitFor([&] { return Height(i, "orders") >= 1; })) << "node " << i;
  }
  // The create re-divided node 0's memory at once, with orders in it (weight 3 against alpha's 1).
  absl::StatusOr<node::admin::FlowStats> after = nodes_[0]->FlowStats("");
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->partitions_size(), 2);
  EXPECT_LT(after->partitions(0).memory().share(), alpha_memory_before);
  EXPECT_GT(after->partitions(1).memory().share(), after->partitions(0).memory().share());

  // Refusals, each with its code and a message naming the problem.
  grpc::Status s = Create(0, Orders());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(s.error_message(), HasSubstr("id 7"));
  node::config::PartitionConfig same_name = Orders();
  same_name.set_id(8);
  s = Create(0, same_name);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(s.error_message(), HasSubstr("\"orders\""));
  node::config::PartitionConfig bad = Orders();
  bad.set_id(9);
  bad.set_name("bad");
  bad.mutable_pool()->set_max_txs(10);
  bad.mutable_pool()->set_max_per_sender(20);
  s = Create(0, bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("partitions[bad].pool.max_per_sender"));
  EXPECT_EQ(Listed(0, "bad").name(), "") << "a refused create leaves nothing behind";
  s = Create(0, node::config::PartitionConfig());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  s = Remove(0, "orders", false);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("stop it first"));
  EXPECT_EQ(Stop(0, "nosuch").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(StartPartition(0, "orders").error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  // Node 3 stops it: its clients are refused, the other three go on (f = 1).
  ASSERT_TRUE(Stop(3, "orders").ok());
  EXPECT_EQ(Listed(3, "orders").consensus_state(), "STOPPED");
  EXPECT_EQ(Stop(3, "orders").error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  s = Submit(3, "orders", SignedPut(kOrders, 'o', 2));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("stopped on this node"));
  ASSERT_TRUE(Submit(0, "orders", SignedPut(kOrders, 'o', 2)).ok());
  ASSERT_TRUE(Submit(2, "orders", SignedPut(kOrders, 'o', 3)).ok());
  // Node 3 counts what its peers still send for it.
  ASSERT_TRUE(WaitFor([&] {
    uint64_t n = 0;
    const node::admin::ListPeersResponse peers = nodes_[3]->Peers();
    for (const auto& peer : peers.peers()) n += peer.refused().stopped_partition();
    return n > 0;
  }));
  // alpha is untouched on node 3.
  ASSERT_TRUE(Submit(3, "alpha", SignedPut(1, 'a', 1)).ok());

  // The stop survives a restart; so does the creation.
  RestartNode(3);
  EXPECT_EQ(Listed(3, "orders").consensus_state(), "STOPPED");
  EXPECT_TRUE(Listed(3, "orders").created_live());
  // Started again, it catches up with the others once they commit again: what it missed comes
  // by block sync when it sees their next stable checkpoint ahead of it. Its peers may still be
  // reconnecting to it after its restart and miss it one checkpoint, so the others keep
  // committing (a bounded number of txs) until it has caught up.
  ASSERT_TRUE(StartPartition(3, "orders").ok());
  const uint64_t missed = Height(0, "orders");
  ASSERT_GE(missed, 3u);
  uint64_t nonce = 4;
  uint64_t target = 0;
  bool caught_up = false;
  for (int round = 0; round < 20 && !caught_up; ++round) {
    ASSERT_TRUE(Submit(round % 3, "orders", SignedPut(kOrders, 'o', nonce++)).ok());
    target = Height(0, "orders");
    caught_up = WaitFor([&] { return Height(3, "orders") >= target; }, absl::Seconds(5));
  }
  ASSERT_GT(target, missed);
  ASSERT_TRUE(caught_up) << "node 3 at " << Height(3, "orders") << ", node 0 at " << target;
  ASSERT_TRUE(Submit(3, "orders", SignedPut(kOrders, 'o', nonce++)).ok());
  ASSERT_TRUE(WaitFor([&] { return Height(0, "orders") > target; }));

  // Removed everywhere: node 0 deletes the data, the others keep it.
  ASSERT_TRUE(WaitFor([&] { return Height(1, "orders") > target; }));
  const uint64_t kept_height = Height(1, "orders");
  for (int i = 0; i < kNodes; ++i) ASSERT_TRUE(Stop(i, "orders").ok()) << "node " << i;
  node::admin::RemovePartitionResponse removed;
  ASSERT_TRUE(Remove(0, "orders", /*delete_data=*/true, &removed).ok());
  EXPECT_TRUE(removed.data_deleted());
  EXPECT_FALSE(std::filesystem::exists(removed.data_dir()));
  for (int i = 1; i < kNodes; ++i) {
    ASSERT_TRUE(Remove(i, "orders", /*delete_data=*/false, &removed).ok());
    EXPECT_FALSE(removed.data_deleted());
    EXPECT_TRUE(std::filesystem::exists(removed.data_dir()));
  }
  EXPECT_EQ(Listed(1, "orders").name(), "");
  EXPECT_EQ(Remove(1, "orders", false).error_code(), grpc::StatusCode::NOT_FOUND);
  RestartNode(1);
  EXPECT_EQ(Listed(1, "orders").name(), "") << "the removal survives a restart";
  ASSERT_EQ(Listed(1, "alpha").consensus_state(), "NORMAL");

  // Created again on node 1, it reopens the data it kept.
  ASSERT_TRUE(Create(1, Orders()).ok());
  EXPECT_GE(Height(1, "orders"), kept_height);
}

TEST_F(LivePartitionsTest, ConfigFilePartitionRemovedLiveStaysRemovedAfterRestart) {
  ASSERT_TRUE(Stop(2, "alpha").ok());
  ASSERT_TRUE(Remove(2, "alpha", false).ok());
  RestartNode(2);
  EXPECT_EQ(Listed(2, "alpha").name(), "");
  absl::StatusOr<node::config::LivePartitions> live =
      ReadLivePartitions(LivePartitionsPath(configs_[2].data_dir()));
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_THAT(live->removed(), ::testing::ElementsAre(1u));
  // The other three go on with it.
  ASSERT_TRUE(Submit(0, "alpha", SignedPut(1, 'a', 1)).ok());
}

// Reads waiting for a partition's read chain (read_hold) are answered UNAVAILABLE when the
// partition stops, and do not keep it from stopping.
TEST_F(LivePartitionsTest, StoppingAPartitionAnswersItsHeldReads) {
  absl::StatusOr<std::shared_ptr<Partition>> alpha = nodes_[0]->FindPartition("alpha");
  ASSERT_TRUE(alpha.ok()) << alpha.status();
  node::admin::UpdatePartitionFlowRequest update;
  update.set_partition("alpha");
  auto* rate = update.mutable_read_interceptor()->add_stages()->mutable_rate();
  rate->set_rate_per_second(0.05);  // after the burst, one read every 20 s
  rate->set_burst(1);
  update.mutable_read_hold()->set_max_wait_ms(60'000);
  ASSERT_TRUE((*alpha)->UpdateFlow(update).ok());
  alpha->reset();

  auto client = node::client::ClientService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", nodes_[0]->client_port()), grpc::InsecureChannelCredentials()));
  auto read = [&] {
    node::client::GetChainStatusRequest req;
    req.mutable_partition()->set_name("alpha");
    node::client::GetChainStatusResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx);
    return client->GetChainStatus(&ctx, req, &resp);
  };
  ASSERT_TRUE(read().ok());  // the burst
  std::vector<grpc::Status> held(2);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < held.size(); ++i) threads.emplace_back([&, i] { held[i] = read(); });
  ASSERT_TRUE(WaitFor([&] {
    absl::StatusOr<node::admin::FlowStats> stats = nodes_[0]->FlowStats("alpha");
    return stats.ok() && stats->partitions_size() == 1 &&
           stats->partitions(0).read_hold().waiting() == 2;
  }));
  ASSERT_TRUE(Stop(0, "alpha").ok());
  for (std::thread& t : threads) t.join();
  for (const grpc::Status& s : held) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("stopped while the read waited"));
  }
  EXPECT_EQ(Listed(0, "alpha").consensus_state(), "STOPPED");
}

}  // namespace
}  // namespace runtime
