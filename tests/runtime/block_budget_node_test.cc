// The block budget's adaptation wired into a real node (resources.block_budget_adaptation;
// flowctl/block_budget.h): the arbiter's tick hands the budget the queueing delays of the messages
// the partitions' lanes started and the blocks the node committed, and the budget in force goes
// down while they queue above the target and the budget binds. Here two partitions take Puts one
// after another's commit, the target is 1 us (any message that waited for a worker is late) and
// the ceiling 8 blocks/s. On one node a proposal commits within the step that makes it, so the
// budget spaces nothing: the node commits far more than half the ceiling, the budget binds and
// must come down; with the adaptation off, or with one partition busy (never held, so the budget
// never binds), it stays at its ceiling. Each run lasts several of the budget's 1-s steps.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/runtime/grpc_test_node.h"

namespace runtime::grpc_test {
namespace {

constexpr uint32_t kCeiling = 8;

struct Outcome {
  node::admin::NodeStatus status;
  int committed = 0;
};

// Runs up to `max_txs` Puts on each partition of `partitions` (one after another's commit), or
// until the budget in force is below the ceiling when `until_lowered`, and returns the node's
// status then.
Outcome RunPuts(bool adaptation, const std::vector<std::string>& partitions, int max_txs,
                bool until_lowered) {
  const std::string dir = TempDir("block_budget_node_test");
  node::config::NodeConfig config = OneNodeConfig(dir);
  auto* r = config.mutable_resources();
  r->set_consensus_blocks_per_second(kCeiling);
  r->mutable_block_budget_adaptation()->set_enabled(adaptation);
  r->mutable_block_budget_adaptation()->set_min_blocks_per_second(2);
  r->mutable_block_budget_adaptation()->set_queueing_delay_target_ms(0.001);
  NodeOptions options;
  options.serve_metrics = false;
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Create(config, options);
  EXPECT_TRUE(node.ok()) << node.status();
  if (!node.ok()) return {};
  EXPECT_TRUE((*node)->Start().ok());
  std::atomic<bool> stop{false};
  std::atomic<int> committed{0};
  std::vector<std::thread> senders;
  for (size_t i = 0; i < partitions.size(); ++i) {
    senders.emplace_back([&, i] {
      auto client = node::client::ClientService::NewStub(grpc::CreateChannel(
          absl::StrCat("127.0.0.1:", (*node)->client_port()), grpc::InsecureChannelCredentials()));
      const char seed = static_cast<char>('a' + i);
      for (int n = 0; n < max_txs && !stop.load(); ++n) {
        const uint32_t id = partitions[i] == "hot" ? 1 : 2;
        const grpc::Status s = SubmitForCommit(
            client.get(), partitions[i],
            SignedPut(id, seed, static_cast<uint64_t>(n) + 1, absl::StrCat("k", n)));
        EXPECT_TRUE(s.ok()) << s.error_message();
        if (!s.ok()) return;
        committed.fetch_add(1);
        if (until_lowered && (*node)->Status().consensus_blocks_per_second() < kCeiling) {
          stop.store(true);
        }
      }
    });
  }
  for (std::thread& t : senders) t.join();
  Outcome out{(*node)->Status(), committed.load()};
  (*node)->Stop(absl::Seconds(1));
  node->reset();
  std::filesystem::remove_all(dir);
  return out;
}

TEST(BlockBudgetNodeTest, TwoBusyPartitionsWhoseMessagesQueueBringTheBudgetDown) {
  const Outcome on = RunPuts(/*adaptation=*/true, {"hot", "steady"}, 2000, /*until_lowered=*/true);
  EXPECT_LT(on.status.consensus_blocks_per_second(), kCeiling) << on.committed << " committed";
  EXPECT_GE(on.status.consensus_blocks_per_second(), 2u);
  EXPECT_EQ(on.status.consensus_blocks_per_second_ceiling(), kCeiling);
  EXPECT_GT(on.status.block_budget().lowered(), 0u);
  EXPECT_GT(on.status.block_budget().queueing_delay_ms(), 0.001);
  EXPECT_GT(on.status.block_budget().blocks_per_second(), 0);
}

TEST(BlockBudgetNodeTest, OffOrOnePartitionBusyTheBudgetStaysAtItsCeiling) {
  const Outcome off =
      RunPuts(/*adaptation=*/false, {"hot", "steady"}, 400, /*until_lowered=*/false);
  EXPECT_EQ(off.committed, 800);
  EXPECT_GT(off.status.block_budget().blocks_per_second(), 0) << "a step ran during the load";
  EXPECT_EQ(off.status.consensus_blocks_per_second(), kCeiling);
  EXPECT_EQ(off.status.block_budget().lowered(), 0u);
  // One partition: never held, the budget never binds.
  const Outcome alone = RunPuts(/*adaptation=*/true, {"hot"}, 300, /*until_lowered=*/false);
  EXPECT_EQ(alone.committed, 300);
  EXPECT_GT(alone.status.block_budget().blocks_per_second(), 0) << "a step ran during the load";
  EXPECT_EQ(alone.status.consensus_blocks_per_second(), kCeiling);
  EXPECT_EQ(alone.status.block_budget().lowered(), 0u);
}

}  // namespace
}  // namespace runtime::grpc_test
