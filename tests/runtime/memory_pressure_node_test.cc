// Memory pressure at work in a real node (resources.memory_pressure; flowctl/memory_pressure.h):
// the node reads an injected source at every arbiter tick. Pressure past refuse_clients_at
// refuses client writes before they are parsed (RESOURCE_EXHAUSTED, message, retry-after and
// rejected-by trailers) while reads go on; past shrink_pools_at the pool's byte budget shrinks;
// when the pressure falls the writes commit again. Status, metrics families and the counters
// show it.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "flowctl/memory_pressure.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/node_metrics.h"
#include "tests/runtime/grpc_test_node.h"

namespace runtime::grpc_test {
namespace {

using ::testing::HasSubstr;

// The cgroup usage the test sets, in thousandths of a 1 GiB limit; read by every sample.
std::atomic<int> g_permille{500};

class TestSource final : public flowctl::MemorySource {
 public:
  absl::StatusOr<flowctl::MemorySample> Sample() override {
    flowctl::MemorySample s;
    s.rss_bytes = 100 << 20;
    s.cgroup_version = 2;
    s.cgroup_max_bytes = uint64_t{1} << 30;
    s.cgroup_current_bytes = (uint64_t{1} << 30) / 1000 * static_cast<uint64_t>(g_permille.load());
    return s;
  }
  std::string Describe() const override { return "test source"; }
};

class MemoryPressureNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir("memory_pressure_node_test");
    node::config::NodeConfig config = OneNodeConfig(dir_);
    // Less memory than the pools ask for, so the arbiter's share is what bounds them.
    config.mutable_resources()->set_memory_bytes(64ull << 20);
    // 4 MiB write buffers for each of the three ledgers, so a shrunken budget shows (16 MiB each
    // is the most).
    config.mutable_resources()->set_ledger_write_buffer_bytes(24ull << 20);
    NodeOptions options;
    options.serve_metrics = false;
    options.memory_source = [] { return std::make_unique<TestSource>(); };
    g_permille = 500;
    absl::StatusOr<std::unique_ptr<Node>> node = Node::Create(config, options);
    ASSERT_TRUE(node.ok()) << node.status();
    ASSERT_TRUE((*node)->Start().ok());
    node_ = *std::move(node);
    client_ = node::client::ClientService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", node_->client_port()), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    node_->Stop(absl::Seconds(1));
    node_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Sets the pressure and runs the tick that samples it.
  void Pressure(int permille) {
    g_permille = permille;
    node_->ArbiterTick();
  }

  grpc::Status Submit(uint64_t nonce, grpc::ClientContext* ctx) {
    node::client::SubmitTxRequest request;
    *request.mutable_partition() = Ref("hot");
    request.set_signed_tx(SignedPut(1, 'm', nonce, absl::StrCat("k", nonce)));
    request.set_wait_for_commit(true);
    request.set_wait_timeout_ms(15000);
    WithDeadline(ctx);
    node::client::SubmitTxResponse response;
    return client_->SubmitTx(ctx, request, &response);
  }

  // The names of the node's metric families, each followed by a space.
  std::string MetricFamilyNames() {
    absl::StatusOr<node::admin::FlowStats> stats = node_->FlowStats("");
    EXPECT_TRUE(stats.ok()) << stats.status();
    std::string families;
    if (!stats.ok()) return families;
    for (const auto& f : NodeMetricFamilies(node_->Status(), *stats, node_->Peers())) {
      families += f.name + " ";
    }
    return families;
  }

  uint64_t PoolMaxBytes() {
    absl::StatusOr<node::admin::FlowStats> stats = node_->FlowStats("hot");
    return stats.ok() ? stats->partitions(0).pool().max_bytes() : 0;
  }

  std::string dir_;
  std::unique_ptr<Node> node_;
  std::unique_ptr<node::client::ClientService::Stub> client_;
};

TEST_F(MemoryPressureNodeTest, RefusesWritesShrinksPoolsAndRecovers) {
  Pressure(500);
  {
    grpc::ClientContext ctx;
    grpc::Status s = Submit(1, &ctx);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  const uint64_t pool_before = PoolMaxBytes();
  ASSERT_GT(pool_before, 0u);
  EXPECT_FALSE(node_->Status().memory().refuse_clients());
  EXPECT_EQ(node_->Status().memory().pool_scale(), 1);

  Pressure(970);
  node::admin::MemoryPressureStatus m = node_->Status().memory();
  EXPECT_TRUE(m.enabled());
  EXPECT_EQ(m.source(), "test source");
  EXPECT_NEAR(m.pressure(), 0.97, 0.001);
  EXPECT_EQ(m.driven_by(), "cgroup");
  EXPECT_TRUE(m.refuse_clients());
  EXPECT_TRUE(m.drop_forwarded());
  EXPECT_LT(m.pool_scale(), 0.4);
  // The pool's byte budget followed the shrunken memory.
  EXPECT_LT(PoolMaxBytes(), pool_before);
  {
    grpc::ClientContext ctx;
    grpc::Status s = Submit(2, &ctx);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(s.error_message(), HasSubstr("node memory pressure 0.97 (cgroup:"));
    EXPECT_EQ(Trailer(ctx, "rejected-by"), "memory_pressure");
    EXPECT_EQ(Trailer(ctx, "retry-after-ms"), "1000");
  }
  EXPECT_GE(node_->Status().memory().refused_writes(), 1u);
  // Reads are not writes: they go on.
  {
    node::client::GetChainStatusRequest request;
    *request.mutable_partition() = Ref("hot");
    node::client::GetChainStatusResponse response;
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    EXPECT_TRUE(client_->GetChainStatus(&ctx, request, &response).ok());
    EXPECT_GE(response.height(), 1u);
  }
  // The metrics say so.
  const std::string families = MetricFamilyNames();
  EXPECT_THAT(families, HasSubstr("noded_memory_pressure "));
  EXPECT_THAT(families, HasSubstr("noded_memory_action_active "));

  // Within the hysteresis the refusal holds; below it the writes commit again.
  Pressure(920);
  EXPECT_TRUE(node_->Status().memory().refuse_clients());
  Pressure(600);
  EXPECT_FALSE(node_->Status().memory().refuse_clients());
  EXPECT_EQ(node_->Status().memory().pool_scale(), 1);
  {
    grpc::ClientContext ctx;
    grpc::Status s = Submit(2, &ctx);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(node_->Status().memory().transitions(), 4u);
}

// Past shrink_pools_at the ledgers' memory shrinks too: the memtables' budget by the pool scale
// in steps of 1/8 (each ledger's write buffer as its RocksDB holds it), and each ledger's block
// cache with its partition's memory share (the cache's own capacity, which bounds what it holds:
// LedgerTest.SetBlockCacheCapacityBoundsWhatTheCacheHolds). Both come back when it falls.
TEST_F(MemoryPressureNodeTest, ShrinksTheLedgersWriteBuffersAndBlockCaches) {
  constexpr uint64_t kMiB = 1 << 20;
  auto each = [&](auto figure) {
    std::vector<uint64_t> out;
    for (const std::shared_ptr<Partition>& p : node_->partitions()) {
      out.push_back(figure(p->FlowStats().state_cache()));
    }
    return out;
  };
  auto write_buffer = [](const node::admin::StateCacheStats& c) {
    return c.ledger_write_buffer_bytes();
  };
  auto block_cache = [](const node::admin::StateCacheStats& c) {
    return c.ledger_block_cache_capacity_bytes();
  };
  auto borrowed = [](const node::admin::StateCacheStats& c) { return c.borrowed_capacity_bytes(); };
  Pressure(500);
  ASSERT_EQ(node_->partitions().size(), 3u);
  EXPECT_EQ(each(write_buffer), std::vector<uint64_t>(3, 4 * kMiB));
  EXPECT_EQ(node_->Status().ledger_memory().write_buffer_scale(), 1);
  const std::vector<uint64_t> caches = each(block_cache);
  // Without pressure the caches borrow the room the idle pools and lanes leave.
  for (uint64_t b : each(borrowed)) EXPECT_GT(b, 0u);
  EXPECT_FALSE(node_->Status().memory().no_cache_borrowing());

  Pressure(900);  // pool scale 0.625
  const node::admin::LedgerMemoryStatus lm = node_->Status().ledger_memory();
  EXPECT_EQ(lm.write_buffer_scale(), 0.625);
  EXPECT_EQ(lm.write_buffer_budget_in_force_bytes(), 15 * kMiB);
  EXPECT_EQ(lm.write_buffer_budget_bytes(), 24 * kMiB);
  EXPECT_EQ(each(write_buffer), std::vector<uint64_t>(3, 15 * kMiB / 6));
  const std::vector<uint64_t> shrunk = each(block_cache);
  for (size_t i = 0; i < caches.size(); ++i) {
    EXPECT_LT(shrunk[i], caches[i] * 3 / 4) << i;
    EXPECT_GE(shrunk[i], 1 * kMiB) << i;
  }
  EXPECT_EQ(lm.block_cache_capacity_bytes(), shrunk[0] + shrunk[1] + shrunk[2]);
  // Under pressure they borrow nothing, and not again until it is the hysteresis below
  // shrink_pools_at (0.80).
  EXPECT_TRUE(node_->Status().memory().no_cache_borrowing());
  EXPECT_EQ(each(borrowed), std::vector<uint64_t>(3, 0));
  Pressure(780);
  EXPECT_EQ(node_->Status().memory().pool_scale(), 1);
  EXPECT_TRUE(node_->Status().memory().no_cache_borrowing());
  EXPECT_EQ(each(borrowed), std::vector<uint64_t>(3, 0));

  Pressure(500);
  for (uint64_t b : each(borrowed)) EXPECT_GT(b, 0u);
  EXPECT_EQ(each(write_buffer), std::vector<uint64_t>(3, 4 * kMiB));
  const std::vector<uint64_t> back = each(block_cache);
  for (size_t i = 0; i < caches.size(); ++i) {
    EXPECT_NEAR(static_cast<double>(back[i]), static_cast<double>(caches[i]),
                0.05 * static_cast<double>(caches[i]))
        << i;
  }
  const std::string families = MetricFamilyNames();
  EXPECT_THAT(families, HasSubstr("noded_ledger_block_cache_capacity_bytes "));
  EXPECT_THAT(families, HasSubstr("noded_ledger_write_buffer_budget_in_force_bytes "));
}

}  // namespace
}  // namespace runtime::grpc_test
