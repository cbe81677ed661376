// A 4-node cluster in one process, on loopback: real GrpcTransport between the nodes, real client
// and admin gRPC servers, two partitions. Checks that transactions submitted to any node commit
// on all of them, that partitions commit independently, that live limit changes through the
// admin API take effect at once (flow) or within one arbiter tick (shares), pausing, the admin
// token, and that every node builds the same blocks.
//
// Waits poll a condition with a bound (the cluster runs on real threads and a real network); no
// sleep orders events.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/ed25519.h"
#include "base/transaction.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "proto/client.grpc.pb.h"
#include "runtime/config.h"
#include "runtime/config_validation.h"
#include "runtime/node.h"
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
constexpr char kToken[] = "cluster-test-admin-token";

// Threads of this process named like the worker pool's ("worker-N"), every node's together.
int CountWorkerThreads() {
  int n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name) && absl::StartsWith(name, "worker-")) ++n;
  }
  return n;
}

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(::testing::TempDir() + "/cluster_test_" + std::to_string(getpid()));
    std::filesystem::remove_all(*root_);
    std::vector<std::string> pubs;
    for (int i = 0; i < kNodes; ++i) {
      std::string dir = absl::StrCat(*root_, "/node", i);
      std::filesystem::create_directories(dir);
      base::PrivateKey key = TestKey(static_cast<char>('A' + i));
      CHECK(key.WritePemFile(dir + "/node.key").ok());
      pubs.push_back(absl::BytesToHexString(key.public_key().bytes()));
    }
    std::ofstream(*root_ + "/admin.token") << kToken << "\n";
    nodes_ = new std::vector<std::unique_ptr<Node>>();
    for (int i = 0; i < kNodes; ++i) {
      node::config::NodeConfig c;
      std::string dir = absl::StrCat(*root_, "/node", i);
      c.set_data_dir(dir + "/data");
      c.set_key_file(dir + "/node.key");
      c.set_p2p_listen("127.0.0.1:0");
      c.set_client_listen("127.0.0.1:0");
      c.set_admin_listen("127.0.0.1:0");
      c.set_metrics_listen("");
      c.set_admin_token_file(*root_ + "/admin.token");
      c.mutable_resources()->set_cpu_workers(1);
      c.mutable_resources()->set_arbiter_tick_ms(100);
      for (int j = 0; j < kNodes; ++j) {
        if (j == i) continue;
        auto* peer = c.add_peers();
        peer->set_address(kPortNotYetKnown);
        peer->set_public_key_hex(pubs[j]);
      }
      for (uint32_t id : {1u, 2u}) {
        auto* p = c.add_partitions();
        p->set_id(id);
        p->set_name(id == 1 ? "alpha" : "beta");
        p->mutable_consensus()->set_batch_timeout_ms(5);
        p->mutable_consensus()->set_view_change_timeout_ms(3000);
      }
      ApplyDefaults(&c);
      absl::StatusOr<std::unique_ptr<Node>> node =
          Node::Create(c, NodeOptions{.serve_metrics = false});
      CHECK(node.ok()) << node.status();
      CHECK((*node)->Start().ok());
      nodes_->push_back(*std::move(node));
    }
    ConnectPeers(*nodes_, pubs);
    CHECK(WaitFor([] {
      if (!AllConnected(*nodes_)) return false;
      for (const auto& n : *nodes_) {
        const node::admin::NodeStatus s = n->Status();
        for (const auto& p : s.partitions()) {
          if (p.consensus_state() != "NORMAL") return false;
        }
      }
      return true;
    })) << "cluster did not connect";
  }

  static void TearDownTestSuite() {
    for (auto it = nodes_->rbegin(); it != nodes_->rend(); ++it) (*it)->Stop(absl::Seconds(1));
    delete nodes_;
    std::filesystem::remove_all(*root_);
    delete root_;
  }

  static std::unique_ptr<node::client::ClientService::Stub> Client(int i) {
    return node::client::ClientService::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*nodes_)[i]->client_port()),
                            grpc::InsecureChannelCredentials()));
  }
  static std::unique_ptr<node::admin::AdminService::Stub> Admin(int i, int port = 0) {
    return node::admin::AdminService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port != 0 ? port : (*nodes_)[i]->admin_port()),
        grpc::InsecureChannelCredentials()));
  }
  static void Authorize(grpc::ClientContext& ctx) {
    ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
  }

  // Submits and waits for the commit; returns the status.
  static grpc::Status Submit(int node, const std::string& partition, const std::string& tx,
                             node::client::SubmitTxResponse* out) {
    node::client::SubmitTxRequest req;
    req.mutable_partition()->set_name(partition);
    req.set_signed_tx(tx);
    req.set_wait_for_commit(true);
    req.set_wait_timeout_ms(20000);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return Client(node)->SubmitTx(&ctx, req, out);
  }

  static Partition* Part(int node, const std::string& name) {
    absl::StatusOr<std::shared_ptr<Partition>> p = (*nodes_)[node]->FindPartition(name);
    CHECK(p.ok());
    return p->get();
  }

  static std::string* root_;
  static std::vector<std::unique_ptr<Node>>* nodes_;
};

std::string* ClusterTest::root_ = nullptr;
std::vector<std::unique_ptr<Node>>* ClusterTest::nodes_ = nullptr;

TEST_F(ClusterTest, TxsSubmittedToAnyNodeCommitOnAllAndPartitionsAreIndependent) {
  const uint64_t beta_before = Part(0, "beta")->height();
  // Account 'a' submits nonces 1..4 to alpha, each through a different node.
  std::vector<std::string> hashes;
  for (int i = 0; i < kNodes; ++i) {
    node::client::SubmitTxResponse resp;
    grpc::Status s = Submit(i, "alpha", SignedPut(1, 'a', i + 1), &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.receipt().status(), node::chain::Receipt::SUCCESS) << resp.receipt().error();
    hashes.push_back(resp.tx_hash());
  }
  // Every node has every tx committed, at the same height.
  for (const std::string& h : hashes) {
    uint64_t height = 0;
    for (int i = 0; i < kNodes; ++i) {
      ASSERT_TRUE(WaitFor([&] {
        return Part(i, "alpha")->GetTx(h).ok() &&
               Part(i, "alpha")->GetTx(h)->state() == node::client::GetTxResponse::COMMITTED;
      })) << "node "
          << i;
      uint64_t hi = Part(i, "alpha")->GetTx(h)->receipt().block_height();
      if (i == 0) height = hi;
      EXPECT_EQ(hi, height) << "node " << i;
    }
  }
  // beta did not move: nothing was submitted to it.
  for (int i = 0; i < kNodes; ++i) EXPECT_EQ(Part(i, "beta")->height(), beta_before);

  // Same block hash at every height on every node.
  ASSERT_TRUE(WaitFor([&] {
    uint64_t h = Part(0, "alpha")->height();
    for (int i = 1; i < kNodes; ++i) {
      if (Part(i, "alpha")->height() != h) return false;
    }
    return true;
  }));
  const uint64_t top = Part(0, "alpha")->height();
  for (uint64_t h = 0; h <= top; ++h) {
    std::string hash0 = Part(0, "alpha")->GetBlock(h, false)->block_hash();
    for (int i = 1; i < kNodes; ++i) {
      EXPECT_EQ(Part(i, "alpha")->GetBlock(h, false)->block_hash(), hash0)
          << "node " << i << " height " << h;
    }
  }
  EXPECT_EQ(Part(2, "alpha")->ChainStatus().state_root(),
            Part(3, "alpha")->ChainStatus().state_root());

  // beta commits on its own chain.
  node::client::SubmitTxResponse resp;
  ASSERT_TRUE(Submit(3, "beta", SignedPut(2, 'b', 1), &resp).ok());
  ASSERT_TRUE(WaitFor([&] { return Part(0, "beta")->height() > beta_before; }));
}

TEST_F(ClusterTest, LiveRateLimitAppliesAtOnceAndSharesWithinOneTick) {
  // Limit beta on node 1 to 1 tx/s with a burst of 1.
  node::admin::UpdatePartitionFlowRequest update;
  update.set_partition("beta");
  auto* rate = update.mutable_interceptor()->add_stages();
  rate->set_name("rate");
  rate->mutable_rate()->set_rate_per_second(1);
  rate->mutable_rate()->set_burst(1);
  {
    grpc::ClientContext ctx;
    Authorize(ctx);
    node::admin::UpdatePartitionFlowResponse out;
    grpc::Status s = Admin(1)->UpdatePartitionFlow(&ctx, update, &out);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  int exhausted = 0;
  std::string rejected_by;
  for (uint64_t n = 10; n < 14; ++n) {
    node::client::SubmitTxRequest req;
    req.mutable_partition()->set_name("beta");
    req.set_signed_tx(SignedPut(2, 'c', n));
    grpc::ClientContext ctx;
    node::client::SubmitTxResponse out;
    grpc::Status s = Client(1)->SubmitTx(&ctx, req, &out);
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++exhausted;
      auto it = ctx.GetServerTrailingMetadata().find("rejected-by");
      if (it != ctx.GetServerTrailingMetadata().end()) {
        rejected_by = std::string(it->second.data(), it->second.size());
      }
      EXPECT_NE(ctx.GetServerTrailingMetadata().find("retry-after-ms"),
                ctx.GetServerTrailingMetadata().end());
    }
  }
  EXPECT_GE(exhausted, 2);  // 4 requests within far less than a second, burst 1
  EXPECT_EQ(rejected_by, "rate");

  // Arbiter: a new weight shows in the shares right after the update (which runs a tick).
  node::admin::UpdateArbiterRequest arb;
  auto* e = arb.add_entries();
  e->set_partition("alpha");
  e->mutable_share()->set_weight(7);
  e->mutable_share()->set_guarantee_fraction(0.25);
  e->mutable_share()->set_ceiling_fraction(1);
  {
    grpc::ClientContext ctx;
    Authorize(ctx);
    node::admin::UpdateArbiterResponse out;
    ASSERT_TRUE(Admin(1)->UpdateArbiter(&ctx, arb, &out).ok());
  }
  absl::StatusOr<node::admin::FlowStats> stats = (*nodes_)[1]->FlowStats("alpha");
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->partitions_size(), 1);
  const node::admin::PartitionFlowStats& alpha = stats->partitions(0);
  EXPECT_EQ(alpha.cpu().weight(), 7);
  EXPECT_NEAR(alpha.cpu().guarantee(), 0.25 * 1, 1e-6);  // one worker thread = 1 core

  // The worker count, live: a thread more runs, and the arbiter divides two cores from the
  // update's tick on. Then back to one.
  for (const uint32_t workers : {2u, 1u}) {
    const int threads_before = CountWorkerThreads();
    node::admin::UpdateArbiterRequest resize;
    resize.set_cpu_workers(workers);
    grpc::ClientContext ctx;
    Authorize(ctx);
    node::admin::UpdateArbiterResponse out;
    ASSERT_TRUE(Admin(1)->UpdateArbiter(&ctx, resize, &out).ok());
    EXPECT_EQ(out.cpu_workers(), workers);
    // A joined thread's /proc entry can outlive pthread_join by a moment (the kernel releases
    // the task after it wakes the joiner): wait for it, bounded.
    const int want = threads_before + (workers == 2 ? 1 : -1);
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (CountWorkerThreads() != want && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_EQ(CountWorkerThreads(), want);
    EXPECT_EQ((*nodes_)[1]->Status().cpu_workers(), workers);
    stats = (*nodes_)[1]->FlowStats("alpha");
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_NEAR(stats->partitions(0).cpu().guarantee(), 0.25 * workers, 1e-6);
    EXPECT_NEAR(stats->partitions(0).cpu().ceiling(), 1.0 * workers, 1e-6);
  }
}

// The block budget, live on every node: at 2 blocks a second, with alpha and beta both busy,
// each leaves the other 500 ms between two of its partial batches, so three beta txs sent one
// after another's commit (each needs its own block) take at least a second from the first
// submit; at the default 64 the same takes a few batch timeouts. Then back to the default.
TEST_F(ClusterTest, ALiveBlockBudgetSpacesBusyPartitionsBlocks) {
  auto set_budget = [](uint32_t blocks_per_second) {
    for (int i = 0; i < kNodes; ++i) {
      node::admin::UpdateArbiterRequest req;
      req.set_consensus_blocks_per_second(blocks_per_second);
      grpc::ClientContext ctx;
      Authorize(ctx);
      node::admin::UpdateArbiterResponse out;
      grpc::Status s = Admin(i)->UpdateArbiter(&ctx, req, &out);
      ASSERT_TRUE(s.ok()) << s.error_message();
      EXPECT_EQ(out.consensus_blocks_per_second(), blocks_per_second);
    }
  };
  struct Restore {
    std::function<void()> fn;
    ~Restore() { fn(); }
  } restore{[&] { set_budget(kDefaultConsensusBlocksPerSecond); }};
  set_budget(2);
  EXPECT_EQ((*nodes_)[2]->Status().consensus_blocks_per_second(), 2u);
  // Alpha stays busy on every node meanwhile: one sender per node, a tx every 20 ms without
  // waiting for its commit, so the txs that reach a node other than alpha's primary are forwarded
  // and ready in every pool (a primary holds its own clients' txs for its proposal).
  std::atomic<bool> beta_done{false};
  std::vector<std::thread> alpha;
  for (int node = 0; node < kNodes; ++node) {
    alpha.emplace_back([node, &beta_done] {
      for (uint64_t nonce = 1; nonce <= 200 && !beta_done.load(); ++nonce) {
        node::client::SubmitTxRequest req;
        req.mutable_partition()->set_name("alpha");
        req.set_signed_tx(SignedPut(1, static_cast<char>('f' + node), nonce));
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        node::client::SubmitTxResponse resp;
        grpc::Status s = Client(node)->SubmitTx(&ctx, req, &resp);
        EXPECT_TRUE(s.ok()) << s.error_message();
        absl::SleepFor(absl::Milliseconds(20));  // pacing a load, not ordering events
      }
    });
  }
  // Not through node 1: LiveRateLimitAppliesAtOnceAndSharesWithinOneTick leaves beta limited
  // there.
  const uint64_t before = Part(0, "beta")->height();
  const int via[] = {0, 2, 3};
  const absl::Time start = absl::Now();
  for (uint64_t nonce = 1; nonce <= 3; ++nonce) {
    node::client::SubmitTxResponse resp;
    grpc::Status s = Submit(via[nonce - 1], "beta", SignedPut(2, 'e', nonce), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  const absl::Duration took = absl::Now() - start;
  absl::StatusOr<node::admin::FlowStats> stats = (*nodes_)[0]->FlowStats("beta");
  const node::admin::NodeStatus status = (*nodes_)[0]->Status();
  beta_done.store(true);
  for (std::thread& t : alpha) t.join();
  EXPECT_GE(took, absl::Seconds(1)) << "three blocks at most 500 ms apart: the budget not applied";
  EXPECT_GE(Part(0, "beta")->height(), before + 3);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_DOUBLE_EQ(stats->partitions(0).block_interval_ms(), 500);
  EXPECT_GE(status.partitions_with_work(), 1u) << "alpha, sent to every node every 20 ms";
}

TEST_F(ClusterTest, PausedPartitionRejectsClearly) {
  node::admin::PausePartitionRequest req;
  req.set_partition("beta");
  {
    grpc::ClientContext ctx;
    Authorize(ctx);
    node::admin::PausePartitionResponse out;
    ASSERT_TRUE(Admin(2)->PausePartition(&ctx, req, &out).ok());
  }
  node::client::SubmitTxResponse out;
  grpc::Status s = Submit(2, "beta", SignedPut(2, 'd', 1), &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("paused"));
  EXPECT_TRUE(Part(2, "beta")->Status().paused());
  node::admin::ResumePartitionRequest resume;
  resume.set_partition("beta");
  grpc::ClientContext ctx;
  Authorize(ctx);
  node::admin::ResumePartitionResponse rout;
  ASSERT_TRUE(Admin(2)->ResumePartition(&ctx, resume, &rout).ok());
  EXPECT_TRUE(Submit(2, "beta", SignedPut(2, 'd', 1), &out).ok());
}

TEST_F(ClusterTest, SetPeerAddressRefusesUnknownKeysAndBadAddresses) {
  Node& node = *(*nodes_)[0];
  const std::string peer = (*nodes_)[0]->config().peers(0).public_key_hex();
  EXPECT_EQ(node.SetPeerAddress(std::string(64, 'a'), "127.0.0.1:1").code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(node.SetPeerAddress(peer, "127.0.0.1").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(node.SetPeerAddress(peer, "127.0.0.1:0").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(node.SetPeerAddress(peer, "127.0.0.1:70000").code(),
            absl::StatusCode::kInvalidArgument);
  // Upper-case hex names the same peer; pointing it where it already is keeps the link up.
  const p2p::NodeId id = p2p::NodeIdFromPublicKey(absl::HexStringToBytes(peer));
  int port = 0;
  for (const auto& n : *nodes_) {
    if (n->id() == id) port = n->p2p_port();
  }
  ASSERT_GT(port, 0);
  EXPECT_TRUE(
      node.SetPeerAddress(absl::AsciiStrToUpper(peer), absl::StrCat("127.0.0.1:", port)).ok());
  EXPECT_EQ(node.Status().peers_connected(), kNodes - 1);
}

TEST_F(ClusterTest, AdminTokenAndPortsAreEnforced) {
  node::admin::GetNodeStatusRequest req;
  node::admin::NodeStatus out;
  {
    grpc::ClientContext ctx;  // no token
    EXPECT_EQ(Admin(0)->GetNodeStatus(&ctx, req, &out).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer wrong-token-wrong-token");
    EXPECT_EQ(Admin(0)->GetNodeStatus(&ctx, req, &out).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;  // admin method on the client port
    Authorize(ctx);
    EXPECT_EQ(Admin(0, (*nodes_)[0]->client_port())->GetNodeStatus(&ctx, req, &out).error_code(),
              grpc::StatusCode::UNIMPLEMENTED);
  }
  grpc::ClientContext ctx;
  Authorize(ctx);
  ASSERT_TRUE(Admin(0)->GetNodeStatus(&ctx, req, &out).ok());
  EXPECT_EQ(out.peers_connected(), static_cast<uint32_t>(kNodes - 1));
  EXPECT_EQ(out.partitions_size(), 2);
}

TEST(NodeConfigErrors, CreateRefusesABadConfigNamingTheField) {
  node::config::NodeConfig c = DefaultNodeConfig();
  c.mutable_partitions(0)->mutable_consensus()->set_checkpoint_interval(16);
  c.mutable_partitions(0)->mutable_consensus()->set_watermark_window(20);
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Create(c);
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(node.status().message(), HasSubstr("partitions[hot].consensus.watermark_window"));
}

}  // namespace
}  // namespace runtime
