// resources.ledger_write_buffer_bytes on a real node: the budget is divided among the running
// partitions' ledgers (two write buffers each) when the node starts, again when UpdateArbiter
// changes it, and again as partitions are stopped, started and created. What a ledger does with
// its write buffer (its memtables bounded by about two of them) is
// tests/partitions/ledger_test.cc's TheWriteBufferBoundsTheMemtables; here each partition's own
// figure is the write buffer its ledger's RocksDB holds
// (PartitionFlowStats.state_cache.ledger_write_buffer_bytes reads RocksDB's options back).
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/runtime/grpc_test_node.h"

namespace runtime::grpc_test {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// Every running partition's ledger write buffer, checked against `want`.
void ExpectEachLedger(Node& node, uint64_t want, const std::string& when) {
  const node::admin::NodeStatus status = node.Status();
  EXPECT_EQ(status.ledger_memory().write_buffer_per_partition_bytes(), want) << when;
  int running = 0;
  for (const std::shared_ptr<Partition>& p : node.partitions()) {
    ++running;
    EXPECT_EQ(p->FlowStats().state_cache().ledger_write_buffer_bytes(), want)
        << when << ": partition " << p->name();
  }
  EXPECT_GT(running, 0) << when;
}

TEST(LedgerMemoryNodeTest, TheBudgetIsDividedAmongTheRunningPartitionsLive) {
  const std::string dir = TempDir("ledger_memory_node_test");
  node::config::NodeConfig config = OneNodeConfig(dir);  // hot, steady, cold
  config.mutable_resources()->set_ledger_write_buffer_bytes(24 * kMiB);
  NodeOptions options;
  options.serve_metrics = false;
  absl::StatusOr<std::unique_ptr<Node>> created = Node::Create(config, options);
  ASSERT_TRUE(created.ok()) << created.status();
  Node& node = **created;
  ASSERT_TRUE(node.Start().ok());

  ExpectEachLedger(node, 4 * kMiB, "3 partitions, 24 MiB");
  EXPECT_EQ(node.Status().ledger_memory().write_buffer_budget_bytes(), 24 * kMiB);
  // The consensus stores: one shared block cache, their memtables summed over the partitions
  // (read between two node-wide figures, which a write or a flush between the reads may move).
  const node::admin::LedgerMemoryStatus lm = node.Status().ledger_memory();
  EXPECT_EQ(lm.consensus_store_cache_capacity_bytes(), Node::kConsensusStoreCacheBytes);
  EXPECT_LE(lm.consensus_store_cache_bytes(), Node::kConsensusStoreCacheBytes);
  uint64_t store_memtables = 0;
  for (const std::shared_ptr<Partition>& p : node.partitions()) {
    const uint64_t held = p->ledger_memory().consensus_store_memtable_bytes;
    EXPECT_GT(held, 0u) << p->name();  // a memtable's arena, at least
    store_memtables += held;
  }
  const uint64_t after = node.Status().ledger_memory().consensus_store_memtable_bytes();
  EXPECT_GE(store_memtables, std::min(lm.consensus_store_memtable_bytes(), after));
  EXPECT_LE(store_memtables, std::max(lm.consensus_store_memtable_bytes(), after));

  node::admin::UpdateArbiterRequest update;
  update.set_ledger_write_buffer_bytes(12 * kMiB);
  ASSERT_TRUE(node.UpdateArbiter(update).ok());
  ExpectEachLedger(node, 2 * kMiB, "3 partitions, 12 MiB");

  update.set_ledger_write_buffer_bytes(1000);  // below 4 MiB: refused, nothing changes
  absl::StatusOr<std::vector<node::config::PartitionConfig>> refused = node.UpdateArbiter(update);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("ledger_write_buffer_bytes"), std::string::npos)
      << refused.status();
  ExpectEachLedger(node, 2 * kMiB, "after the refused update");

  ASSERT_TRUE(node.StopPartition("cold", absl::Milliseconds(100)).ok());
  ExpectEachLedger(node, 3 * kMiB, "2 partitions, 12 MiB");

  node::config::PartitionConfig fresh;
  fresh.set_id(7);
  fresh.set_name("fresh");
  absl::StatusOr<node::admin::CreatePartitionResponse> made = node.CreatePartition(fresh);
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_TRUE(node.StartPartition("cold").ok());
  ExpectEachLedger(node, 12 * kMiB / 8, "4 partitions, 12 MiB");

  // A restart keeps "fresh" stopped (the live record); the budget is the config's again (an
  // UpdateArbiter change lasts until the restart), divided among the three that run.
  ASSERT_TRUE(node.StopPartition("fresh", absl::Milliseconds(100)).ok());
  node.Stop(absl::Seconds(1));
  created->reset();
  absl::StatusOr<std::unique_ptr<Node>> again = Node::Create(config, options);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE((*again)->Start().ok());
  ExpectEachLedger(**again, 4 * kMiB, "after a restart, 3 of 4 partitions running, 24 MiB");
  EXPECT_EQ((*again)->partitions().size(), 3u);

  (*again)->Stop(absl::Seconds(1));
  again->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace runtime::grpc_test
