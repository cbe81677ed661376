// Lossless partitions through a real (one-node) Node: a burst far above the drain rate is
// acknowledged at once (spilled, durable under the configured policy), drains into the pool at
// the set rate, and every record commits exactly once, also across a stop and restart in the
// middle of the drain. GetTx answers PENDING for a tx waiting in the FIFO, and stops doing so
// once its record is drained. A flood above the drain rate holds the disk budget: refusals with
// a retry-after, and every acknowledged tx commits.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/ed25519.h"
#include "base/transaction.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "runtime/config.h"
#include "runtime/config_validation.h"
#include "runtime/node.h"
#include "tests/runtime/runtime_test_util.h"

namespace runtime {
namespace {

using ::runtime::testing::WaitFor;

node::config::NodeConfig LosslessConfig(const std::string& dir) {
  node::config::NodeConfig c;
  c.set_data_dir(dir + "/data");
  c.set_p2p_listen("127.0.0.1:0");
  c.set_client_listen("127.0.0.1:0");
  c.set_admin_listen("127.0.0.1:0");
  c.set_metrics_listen("");
  c.mutable_resources()->set_cpu_workers(1);
  auto* p = c.add_partitions();
  p->set_id(7);
  p->set_name("ledger");
  p->mutable_consensus()->set_batch_timeout_ms(5);
  auto* l = p->mutable_lossless();
  l->set_enabled(true);
  l->set_memory_bytes(64 << 10);  // a small memory tier: most of the burst goes to disk
  l->set_segment_bytes(64 << 10);
  l->set_durability(node::config::LosslessConfig::INTERVAL);
  l->set_sync_interval_ms(5);
  l->set_drain_bytes_per_second(200 << 10);
  ApplyDefaults(&c);
  return c;
}

std::vector<std::string> SignedTxs(int n, uint32_t partition = 7, char seed = 'L') {
  absl::StatusOr<base::PrivateKey> key = base::PrivateKey::FromSeed(std::string(32, seed));
  CHECK(key.ok());
  std::vector<std::string> out;
  for (int i = 1; i <= n; ++i) {
    node::chain::Transaction tx;
    tx.set_partition(partition);
    tx.set_nonce(i);
    tx.mutable_put()->set_key(absl::StrCat("record-", i));
    tx.mutable_put()->set_value(std::string(100, 'x'));
    out.push_back(base::SignTx(std::move(tx), *key));
  }
  return out;
}

std::vector<SubmitResult> SubmitAll(Partition* p, std::vector<std::string> txs) {
  absl::Notification done;
  std::vector<SubmitResult> results;
  p->SubmitBatch(std::move(txs), {}, [&](std::vector<SubmitResult> r) {
    results = std::move(r);
    done.Notify();
  });
  CHECK(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  return results;
}

TEST(LosslessTest, BurstIsAcknowledgedSpilledDrainedAndCommittedOnceAcrossARestart) {
  const std::string dir = ::testing::TempDir() + "/lossless_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  const int kTxs = 1500;  // ~260 KB: more than a second of drain at 200 KiB/s
  std::vector<std::string> txs = SignedTxs(kTxs);
  std::vector<std::string> hashes;

  {
    absl::StatusOr<std::unique_ptr<Node>> node =
        Node::Create(LosslessConfig(dir), NodeOptions{.serve_grpc = false, .serve_metrics = false});
    ASSERT_TRUE(node.ok()) << node.status();
    ASSERT_TRUE((*node)->Start().ok());
    Partition* part = (*node)->FindPartition("ledger")->get();
    EXPECT_TRUE(part->lossless());
    std::vector<SubmitResult> results = SubmitAll(part, txs);
    const uint64_t drained_at_ack = part->FlowStats().spill().drained();
    ASSERT_EQ(results.size(), static_cast<size_t>(kTxs));
    for (const SubmitResult& r : results) {
      ASSERT_TRUE(r.status.ok()) << r.status;
      EXPECT_TRUE(r.spilled);
      hashes.push_back(r.tx_hash);
    }
    // Acknowledged on the spill append, not on the drain (which needs > 1.2 s at 200 KiB/s for
    // them all): when the last ack came, the drain had not moved everything yet.
    EXPECT_LT(drained_at_ack, static_cast<uint64_t>(kTxs));
    node::admin::PartitionFlowStats stats = part->FlowStats();
    EXPECT_EQ(stats.spill().appended(), static_cast<uint64_t>(kTxs));
    EXPECT_GT(stats.spill().disk_bytes(), 0u) << "the burst should overflow the 64 KiB memory tier";
    // Stop in the middle of the drain.
    ASSERT_TRUE(
        WaitFor([&] { return part->FlowStats().spill().drained() > 100; }, absl::Seconds(20)));
    EXPECT_LT(part->FlowStats().spill().drained(), static_cast<uint64_t>(kTxs));
    (*node)->Stop(absl::Seconds(2));
  }
  {
    absl::StatusOr<std::unique_ptr<Node>> node =
        Node::Create(LosslessConfig(dir), NodeOptions{.serve_grpc = false, .serve_metrics = false});
    ASSERT_TRUE(node.ok()) << node.status();
    ASSERT_TRUE((*node)->Start().ok());
    Partition* part = (*node)->FindPartition("ledger")->get();
    // Everything acknowledged before the restart commits: nothing lost, nothing twice.
    ASSERT_TRUE(WaitFor(
        [&] {
          for (const std::string& h : hashes) {
            absl::StatusOr<node::client::GetTxResponse> tx = part->GetTx(h);
            if (!tx.ok() || tx->state() != node::client::GetTxResponse::COMMITTED) return false;
          }
          return true;
        },
        absl::Seconds(60)))
        << "not every spilled tx committed";
    uint64_t committed = 0;
    for (uint64_t h = 1; h <= part->height(); ++h) {
      committed += part->GetBlock(h, false)->block().tx_hashes_size();
    }
    EXPECT_EQ(committed, static_cast<uint64_t>(kTxs));
    absl::StatusOr<node::client::GetAccountResponse> account =
        part->GetAccount(base::PrivateKey::FromSeed(std::string(32, 'L'))->public_key().bytes());
    ASSERT_TRUE(account.ok());
    EXPECT_EQ(account->account().nonce(), static_cast<uint64_t>(kTxs));
    (*node)->Stop(absl::Seconds(1));
  }
  std::filesystem::remove_all(dir);
}

// Bytes of the spill segment files of partition `id` under `dir`, as the file system has them.
uint64_t SpillFileBytes(const std::string& dir, uint32_t id) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(
           absl::StrCat(dir, "/data/partition-", id, "/spill"), ec)) {
    if (absl::StartsWith(f.path().filename().string(), "seg-")) bytes += f.file_size(ec);
  }
  return bytes;
}

// Txs from `n` distinct senders (nonce 1 each), so that refusing some never strands another's
// later nonce.
std::vector<std::string> OneTxPerSender(int n, uint32_t partition, char tag = 'F') {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<base::PrivateKey> key = base::PrivateKey::FromSeed(
        absl::StrCat(std::string(24, tag), absl::Dec(i, absl::kZeroPad8)));
    CHECK(key.ok());
    node::chain::Transaction tx;
    tx.set_partition(partition);
    tx.set_nonce(1);
    tx.mutable_put()->set_key(absl::StrCat("flood-", i));
    tx.mutable_put()->set_value(std::string(100, 'f'));
    out.push_back(base::SignTx(std::move(tx), *key));
  }
  return out;
}

TEST(LosslessTest, ASustainedOverRateFloodHoldsTheDiskBudgetAndEveryAcknowledgedTxCommits) {
  const std::string dir = ::testing::TempDir() + "/lossless_budget_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  node::config::NodeConfig config = LosslessConfig(dir);
  auto* l = config.mutable_partitions(0)->mutable_lossless();
  // A drain far below the flood (2 KiB/s against ~250 KiB offered), and the smallest budget:
  // two 64 KiB segments (or two of the largest txs).
  l->set_drain_bytes_per_second(2 << 10);
  const uint64_t budget = LosslessMinDiskBudget(config.partitions(0));
  l->set_disk_budget_bytes(budget);
  absl::StatusOr<std::unique_ptr<Node>> node =
      Node::Create(config, NodeOptions{.serve_grpc = false, .serve_metrics = false});
  ASSERT_TRUE(node.ok()) << node.status();
  ASSERT_TRUE((*node)->Start().ok());
  Partition* part = (*node)->FindPartition("ledger")->get();

  constexpr int kTxs = 1200;
  constexpr int kBatch = 40;
  const std::vector<std::string> txs = OneTxPerSender(kTxs, 7);
  std::vector<std::string> acked;
  std::vector<std::string> refused;
  std::vector<int> refused_at;
  uint64_t most_on_disk = 0;
  for (int at = 0; at < kTxs; at += kBatch) {
    std::vector<std::string> batch(txs.begin() + at, txs.begin() + std::min(at + kBatch, kTxs));
    std::vector<SubmitResult> results = SubmitAll(part, std::move(batch));
    for (size_t i = 0; i < results.size(); ++i) {
      const SubmitResult& r = results[i];
      if (r.status.ok()) {
        EXPECT_TRUE(r.spilled);
        acked.push_back(r.tx_hash);
        continue;
      }
      ASSERT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted) << r.status;
      EXPECT_EQ(r.rejected_by, "spill_disk_budget");
      // A hint from what must drain first and the drain's rate, within the hint's bounds.
      EXPECT_GE(r.retry_after, absl::Milliseconds(10));
      EXPECT_LE(r.retry_after, absl::Seconds(60));
      refused.push_back(r.tx_hash);
      refused_at.push_back(at + static_cast<int>(i));
    }
    most_on_disk = std::max(most_on_disk, SpillFileBytes(dir, 7));
  }
  LOG(INFO) << "flood: " << acked.size() << " acknowledged, " << refused.size()
            << " refused, at most " << most_on_disk << " bytes on disk";
  EXPECT_FALSE(acked.empty());
  ASSERT_FALSE(refused.empty()) << "the flood never reached the budget";
  EXPECT_LE(most_on_disk, budget);
  node::admin::PartitionFlowStats stats = part->FlowStats();
  EXPECT_EQ(stats.spill().disk_budget_bytes(), budget);
  EXPECT_GT(stats.spill().refused_disk_budget(), 0u);

  // The drain speeds up live; every acknowledged tx commits, and no refused one does.
  node::admin::UpdatePartitionFlowRequest faster;
  faster.mutable_lossless()->set_drain_bytes_per_second(4 << 20);
  ASSERT_TRUE(part->UpdateFlow(faster).ok());
  EXPECT_EQ(part->FlowStats().spill().drain_bytes_per_second(), 4 << 20);
  ASSERT_TRUE(WaitFor(
      [&] {
        most_on_disk = std::max(most_on_disk, SpillFileBytes(dir, 7));
        for (const std::string& h : acked) {
          absl::StatusOr<node::client::GetTxResponse> tx = part->GetTx(h);
          if (!tx.ok() || tx->state() != node::client::GetTxResponse::COMMITTED) return false;
        }
        return true;
      },
      absl::Seconds(120)))
      << "not every acknowledged tx committed";
  EXPECT_LE(most_on_disk, budget);
  for (const std::string& h : refused) {
    EXPECT_EQ(part->GetTx(h).status().code(), absl::StatusCode::kNotFound);
  }
  uint64_t committed = 0;
  for (uint64_t h = 1; h <= part->height(); ++h) {
    committed += part->GetBlock(h, false)->block().tx_hashes_size();
  }
  EXPECT_EQ(committed, acked.size());

  // Space came back (once the drain has freed the consumed segments): refused txs offered again
  // are taken now.
  ASSERT_TRUE(WaitFor([&] { return SpillFileBytes(dir, 7) <= (64u << 10); }, absl::Seconds(20)))
      << SpillFileBytes(dir, 7) << " bytes of spill files";
  std::vector<std::string> retry;
  for (int i : refused_at) {
    if (retry.size() < 100) retry.push_back(txs[i]);
  }
  for (const SubmitResult& r : SubmitAll(part, retry)) {
    EXPECT_TRUE(r.status.ok()) << r.status;
  }
  (*node)->Stop(absl::Seconds(1));
  std::filesystem::remove_all(dir);
}

// Offers `txs` in batches of 40; returns how many were acknowledged and updates `most_on_disk`
// with the partition's spill file bytes (SpillFileBytes) after each batch.
int Flood(Partition* part, const std::string& dir, const std::vector<std::string>& txs,
          uint64_t* most_on_disk) {
  int acked = 0;
  for (size_t at = 0; at < txs.size(); at += 40) {
    std::vector<std::string> batch(txs.begin() + at, txs.begin() + std::min(at + 40, txs.size()));
    for (const SubmitResult& r : SubmitAll(part, std::move(batch))) acked += r.status.ok();
    *most_on_disk = std::max(*most_on_disk, SpillFileBytes(dir, part->id()));
  }
  return acked;
}

TEST(LosslessTest, TheArbiterDividesTheNodesSpillDiskAndTheFifoHoldsItsShare) {
  const std::string dir = ::testing::TempDir() + "/lossless_share_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  node::config::NodeConfig config = LosslessConfig(dir);
  config.mutable_partitions(0)->mutable_lossless()->set_drain_bytes_per_second(2 << 10);
  node::config::PartitionConfig other = config.partitions(0);
  other.set_id(8);
  other.set_name("other");
  *config.add_partitions() = other;
  const uint64_t least = LosslessMinDiskBudget(config.partitions(0));  // two 64 KiB segments
  config.mutable_resources()->set_spill_disk_bytes(3 * least);
  absl::StatusOr<std::unique_ptr<Node>> node =
      Node::Create(config, NodeOptions{.serve_grpc = false, .serve_metrics = false});
  ASSERT_TRUE(node.ok()) << node.status();
  ASSERT_TRUE((*node)->Start().ok());
  Partition* busy = (*node)->FindPartition("ledger")->get();
  Partition* idle = (*node)->FindPartition("other")->get();
  // Neither spills: each holds its floor (no budget of its own, so the arbiter's share is it).
  ASSERT_TRUE(WaitFor([&] { return busy->FlowStats().spill().disk_budget_bytes() == least; },
                      absl::Seconds(20)));

  // "ledger" fills its share: it wants more, and gets what "other" does not use (its floor
  // stays): two of the three parts. Its FIFO holds that, not more. (The share may grow while
  // the first flood runs, so either flood may be the one that fills it.)
  uint64_t most_on_disk = 0;
  int acked = Flood(busy, dir, OneTxPerSender(1200, 7, 'A'), &most_on_disk);
  ASSERT_TRUE(WaitFor([&] { return busy->FlowStats().spill().disk_budget_bytes() == 2 * least; },
                      absl::Seconds(20)))
      << busy->FlowStats().DebugString();
  EXPECT_EQ(idle->FlowStats().spill().disk_budget_bytes(), least);
  acked += Flood(busy, dir, OneTxPerSender(1200, 7, 'B'), &most_on_disk);
  EXPECT_LT(acked, 2400);
  EXPECT_GT(most_on_disk, least) << "the larger share was not used";
  EXPECT_LE(most_on_disk, 2 * least) << "the FIFO went past its share";
  absl::StatusOr<node::admin::FlowStats> stats = (*node)->FlowStats("ledger");
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_GT(stats->partitions(0).spill().refused_disk_budget(), 0u);
  EXPECT_NEAR(stats->partitions(0).disk().share(), 2 * least, 1024);
  (*node)->Stop(absl::Seconds(1));
  std::filesystem::remove_all(dir);
}

TEST(LosslessTest, GetTxIsPendingWhileTheTxWaitsInTheFifo) {
  const std::string dir = ::testing::TempDir() + "/lossless_pending_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  node::config::NodeConfig config = LosslessConfig(dir);
  // A second lossless partition that drains one byte a second: after its first record (the
  // bucket lets one through at once), a record waits in the FIFO for minutes.
  node::config::PartitionConfig slow = config.partitions(0);
  slow.set_id(8);
  slow.set_name("slow");
  slow.mutable_lossless()->set_drain_bytes_per_second(1);
  *config.add_partitions() = slow;
  absl::StatusOr<std::unique_ptr<Node>> node =
      Node::Create(config, NodeOptions{.serve_grpc = false, .serve_metrics = false});
  ASSERT_TRUE(node.ok()) << node.status();
  ASSERT_TRUE((*node)->Start().ok());

  Partition* waiting = (*node)->FindPartition("slow")->get();
  std::vector<SubmitResult> results = SubmitAll(waiting, SignedTxs(3, 8, 'P'));
  ASSERT_EQ(results.size(), 3u);
  for (const SubmitResult& r : results) ASSERT_TRUE(r.spilled) << r.status;
  absl::StatusOr<node::client::GetTxResponse> last = waiting->GetTx(results[2].tx_hash);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->state(), node::client::GetTxResponse::PENDING);
  EXPECT_LE(waiting->FlowStats().spill().drained(), 1u);  // it is still in the FIFO

  // A record that is acknowledged but fails verification when drained: GetTx answers PENDING
  // only until the drain drops it, then NOT_FOUND (it will never commit).
  Partition* fast = (*node)->FindPartition("ledger")->get();
  std::string bad = SignedTxs(1, 7, 'Q')[0];
  bad.back() ^= 1;  // the signature's last byte
  std::vector<SubmitResult> bad_result = SubmitAll(fast, {bad});
  ASSERT_EQ(bad_result.size(), 1u);
  ASSERT_TRUE(bad_result[0].spilled) << bad_result[0].status;
  ASSERT_TRUE(WaitFor([&] { return fast->FlowStats().spill().drained() >= 1; }, absl::Seconds(20)));
  absl::StatusOr<node::client::GetTxResponse> dropped = fast->GetTx(bad_result[0].tx_hash);
  EXPECT_EQ(dropped.status().code(), absl::StatusCode::kNotFound)
      << (dropped.ok() ? dropped->DebugString() : "");
  (*node)->Stop(absl::Seconds(1));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace runtime
