// A 4-replica cluster of whole partitions (interceptor, dispatcher, pool, forwarder, PBFT,
// executor, RocksDB ledger) on the in-memory network, driven from this one thread on a fake
// clock: no thread is started (worker pools run their queues through RunQueuedForTest, the tick
// schedulers through RunDue, the hub delivers when pumped), so a run is a pure function of its
// seed. The seed picks which replica each client tx goes to, when it is sent, and every
// message's network delay.
//
// Shown: transactions commit with identical blocks on every replica; the primary of view 0
// crashes and the other three change view and keep committing; and two runs with one seed give
// the same chain, views and client answers, while no test step waits on a real clock.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/ed25519.h"
#include "flowctl/block_budget.h"
#include "flowctl/tick_scheduler.h"
#include "flowctl/worker_pool.h"
#include "gtest/gtest.h"
#include "p2p/in_memory_network.h"
#include "prometheus/text_serializer.h"
#include "runtime/config.h"
#include "runtime/node_metrics.h"
#include "runtime/partition.h"
#include "tests/mocks/fake_clock.h"
#include "tests/runtime/runtime_test_util.h"

namespace runtime {
namespace {

constexpr uint32_t kPartition = 7;
constexpr int kReplicas = 4;
constexpr int64_t kStepNanos = 1'000'000;  // the driver advances time 1 ms at a time

struct Replica {
  base::PrivateKey key;
  p2p::NodeId id;
  std::unique_ptr<flowctl::WorkerPool> pool;
  std::unique_ptr<flowctl::TickScheduler> scheduler;
  std::unique_ptr<p2p::InMemoryNetwork> network;
  std::unique_ptr<Partition> partition;
  bool crashed = false;
  PartitionEnv env;  // what it was opened with (Restart opens it again)
};

// What one run produced, compared across runs with the same seed.
struct Outcome {
  std::vector<std::string> chains;  // per replica: "height:hash,..." of its blocks
  std::vector<uint64_t> views;
  std::vector<uint64_t> nonces;       // per replica: account 'a''s committed nonce
  std::vector<std::string> answers;   // per submitted tx, in submit order: its final status
  std::vector<std::string> refusals;  // every refusal on the way, in order (then re-sent)
  uint64_t committed_after_crash = 0;
};

// Test failpoints for one replica.
struct ClusterOptions {
  int diverge_replica = -1;          // this replica's executor writes an extra value at ...
  uint64_t diverge_height = 0;       // ... this block (Executor::PlantNondeterminismForTest)
  uint64_t checkpoint_interval = 0;  // 0: the config default
  uint64_t snapshot_min_blocks = 0;  // 0: the config default
  uint64_t retain_blocks = 0;        // state.retain_blocks (0: keep every block)
  uint32_t block_budget = 0;         // > 0: each replica's node has a BlockBudget of this rate
  uint32_t batch_max_txs = 8;
  uint64_t state_cache_bytes = 0;  // state.cache_bytes (0: the config default)
};

class Cluster {
 public:
  Cluster(uint32_t seed, std::string dir, ClusterOptions options = {})
      : rng_(seed), dir_(std::move(dir)), hub_(&clock_) {
    std::filesystem::remove_all(dir_);
    for (int i = 0; i < kReplicas; ++i) {
      base::PrivateKey key = testing::TestKey(static_cast<char>('p' + i));
      const p2p::NodeId id = p2p::NodeIdFromPublicKey(key.public_key().bytes());
      Replica r{.key = std::move(key),
                .id = id,
                .pool = nullptr,
                .scheduler = nullptr,
                .network = nullptr,
                .partition = nullptr,
                .crashed = false,
                .env = {}};
      replicas_.push_back(std::move(r));
    }
    // Replica index = position of the id in sorted order, as on real nodes.
    std::sort(replicas_.begin(), replicas_.end(),
              [](const Replica& a, const Replica& b) { return a.id < b.id; });
    // Every message takes 0.2-3 ms, drawn from the seeded generator at send time.
    hub_.SetFaultHook([this](const p2p::Envelope& e) {
      for (LostForwards& lost : lost_forwards_) {
        if (lost.count > 0 && e.channel == p2p::Channel::TX_FORWARD && e.from == lost.from &&
            e.to == lost.to) {
          --lost.count;
          return p2p::FaultDecision::Drop();
        }
      }
      return p2p::FaultDecision::Delay(std::uniform_int_distribution<int64_t>(200, 3000)(rng_) *
                                       1000);
    });
    std::vector<p2p::NodeId> ids;
    std::vector<base::PublicKey> keys;
    for (const Replica& r : replicas_) {
      ids.push_back(r.id);
      keys.push_back(r.key.public_key());
    }
    node::config::NodeConfig nc;
    nc.set_data_dir(dir_);
    auto* pc = nc.add_partitions();
    pc->set_id(kPartition);
    pc->set_name("det");
    pc->mutable_consensus()->set_batch_max_txs(options.batch_max_txs);
    pc->mutable_consensus()->set_batch_timeout_ms(20);
    pc->mutable_consensus()->set_view_change_timeout_ms(400);
    if (options.checkpoint_interval > 0) {
      pc->mutable_consensus()->set_checkpoint_interval(options.checkpoint_interval);
      pc->mutable_consensus()->set_watermark_window(4 * options.checkpoint_interval);
    }
    if (options.snapshot_min_blocks > 0) {
      pc->mutable_consensus()->set_snapshot_sync_min_blocks(options.snapshot_min_blocks);
    }
    pc->mutable_state()->set_retain_blocks(options.retain_blocks);
    if (options.state_cache_bytes > 0) {
      pc->mutable_state()->set_cache_bytes(options.state_cache_bytes);
    }
    ApplyDefaults(&nc);
    for (int i = 0; i < kReplicas; ++i) {
      Replica& r = replicas_[i];
      flowctl::WorkerPool::Options po;
      po.cpu_clock = flowctl::WorkerPool::CpuClock::kWall;  // fake time: no CPU is "used"
      po.clock = &clock_;
      r.pool = std::make_unique<flowctl::WorkerPool>(po);               // never started
      r.scheduler = std::make_unique<flowctl::TickScheduler>(&clock_);  // never started
      r.network = hub_.AddNode(r.id);
      PartitionEnv env;
      env.config = nc.partitions(0);
      env.dir = absl::StrCat(dir_, "/replica-", i);
      env.pool = r.pool.get();
      env.network = r.network.get();
      env.key = r.key;
      env.replica_ids = ids;
      env.replica_keys = keys;
      env.clock = &clock_;
      env.scheduler = r.scheduler.get();
      if (i == options.diverge_replica) env.test_diverge_height = options.diverge_height;
      if (options.block_budget > 0) {
        budgets_.push_back(std::make_unique<flowctl::BlockBudget>(options.block_budget));
        env.block_budget = budgets_.back().get();
      }
      r.env = env;
      Open(r);
    }
    for (Replica& r : replicas_) CHECK(r.partition->Start().ok());
  }

  // The next Restart of replica `index` opens it without the planted nondeterminism.
  void ClearDivergeFailpoint(int index) { replicas_[index].env.test_diverge_height = 0; }

  // Stops replica `index` and opens its partition again from its directory (a process restart);
  // with `wipe_ledger`, the ledger is deleted first (the consensus store is kept).
  void Restart(int index, bool wipe_ledger = false) {
    Replica& r = replicas_[index];
    r.partition->Stop(absl::ZeroDuration());
    r.partition.reset();
    if (wipe_ledger) std::filesystem::remove_all(r.env.dir + "/ledger");
    Open(r);
    CHECK(r.partition->Start().ok());
  }

  // Brings a crashed replica back from its directory, or (`empty`) as a new node: its whole
  // partition directory (ledger and consensus store) deleted.
  void Revive(int index, bool empty) {
    Replica& r = replicas_[index];
    CHECK(r.crashed);
    r.partition.reset();
    if (empty) std::filesystem::remove_all(r.env.dir);
    hub_.SetNodeUp(r.id, true);
    r.crashed = false;
    Open(r);
    CHECK(r.partition->Start().ok());
  }

  ~Cluster() {
    for (Replica& r : replicas_) {
      if (!r.crashed) r.partition->Stop(absl::ZeroDuration());
      r.partition.reset();
      r.network.reset();
    }
    std::filesystem::remove_all(dir_);
  }

  // Runs everything that can run at the current instant, until nothing is left.
  void Settle() {
    for (int round = 0; round < 10'000; ++round) {
      size_t work = hub_.DeliverAll();
      for (Replica& r : replicas_) {
        if (r.crashed) continue;
        const int timed = r.scheduler->RunDue(clock_.NowNanos());
        timed_ticks_ += static_cast<uint64_t>(timed);
        work += static_cast<size_t>(timed);
        work += static_cast<size_t>(r.pool->RunQueuedForTest(1'000'000));
      }
      if (work == 0) return;
    }
    FAIL() << "the cluster did not settle at t=" << clock_.NowNanos();
  }

  void RunFor(absl::Duration d) {
    const int64_t end = clock_.NowNanos() + absl::ToInt64Nanoseconds(d);
    while (clock_.NowNanos() < end) {
      clock_.AdvanceNanos(kStepNanos);
      Settle();
      // A client re-sends what was refused (e.g. UNAVAILABLE during a view change) after its
      // retry-after, as loadgen and the SDK do, so the sender's nonces leave no gap.
      while (!retries_.empty() && retries_.front().at <= clock_.NowNanos()) {
        Retry r = std::move(retries_.front());
        retries_.pop_front();
        Send(r.slot, std::move(r.tx));
      }
    }
  }

  // Sends `count` signed puts of account 'a', one every 1-5 ms, each to a replica the seed picks
  // among the live ones.
  void SubmitTxs(int count) {
    for (int i = 0; i < count; ++i) {
      answers_.emplace_back("no answer");
      Send(answers_.size() - 1, testing::SignedPut(kPartition, 'a', ++nonce_));
      RunFor(absl::Milliseconds(std::uniform_int_distribution<int>(1, 5)(rng_)));
    }
  }

  // As SubmitTxs, each tx a put of key "big<k>" for k = first, first + 1, ..., with a value of
  // `value_bytes`.
  void SubmitPuts(int first, int count, size_t value_bytes) {
    for (int i = 0; i < count; ++i) {
      node::chain::Transaction tx;
      tx.set_partition(kPartition);
      tx.set_nonce(++nonce_);
      tx.mutable_put()->set_key(absl::StrCat("big", first + i));
      tx.mutable_put()->set_value(std::string(value_bytes, 'v'));
      answers_.emplace_back("no answer");
      Send(answers_.size() - 1, base::SignTx(std::move(tx), testing::TestKey('a')));
      RunFor(absl::Milliseconds(std::uniform_int_distribution<int>(1, 5)(rng_)));
    }
  }

  // On every replica's node, `count` other partitions (ids 1000...) have transactions waiting
  // now, as far as the node's block budget can tell.
  void OtherPartitionsHaveWork(int count) {
    for (auto& budget : budgets_) {
      for (int k = 0; k < count; ++k) {
        budget->PartialBatchIntervalNanos(1000 + static_cast<uint32_t>(k), clock_.NowNanos());
      }
    }
  }

  bool AllAnswered() const { return retries_.empty(); }
  // Ticks the replicas' schedulers offered (asked for by time, not by an event), all replicas.
  uint64_t timed_ticks() const { return timed_ticks_; }

  // The next `count` TX_FORWARD messages from replica `from` to replica `to` are lost.
  void LoseForwards(int from, int to, int count) {
    lost_forwards_.push_back({replicas_[from].id, replicas_[to].id, count});
  }
  // Sends one more signed put of account 'a' to replica `target`.
  void SubmitTo(int target) {
    answers_.emplace_back("no answer");
    Send(answers_.size() - 1, testing::SignedPut(kPartition, 'a', ++nonce_), target);
  }
  // Crash: the partition stops and its node leaves the network (its messages are lost).
  void Crash(int index) {
    Replica& r = replicas_[index];
    hub_.SetNodeUp(r.id, false);
    r.partition->Stop(absl::ZeroDuration());
    r.crashed = true;
  }

  Partition& partition(int index) { return *replicas_[index].partition; }

  // Replica `index`'s block at `height`.
  node::chain::Block BlockAt(int index, uint64_t height) {
    absl::StatusOr<node::client::GetBlockResponse> b = partition(index).GetBlock(height, false);
    CHECK(b.ok()) << b.status();
    return b->block();
  }

  // To replica `target`, or (-1) to a live replica the seed picks.
  void Send(size_t slot, std::string tx, int target = -1) {
    if (target < 0) {
      std::vector<int> live;
      for (int r = 0; r < kReplicas; ++r) {
        if (!replicas_[r].crashed) live.push_back(r);
      }
      target = live[std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng_)];
    }
    replicas_[target].partition->Submit(tx, {}, [this, slot, tx](SubmitResult r) {
      answers_[slot] = r.status.ToString();
      if (r.status.ok() || r.status.code() == absl::StatusCode::kAlreadyExists) return;
      refusals_.push_back(absl::StrCat(slot, ": ", r.status.ToString()));
      const int64_t wait =
          std::max<int64_t>(absl::ToInt64Nanoseconds(r.retry_after), 20 * kStepNanos);
      retries_.push_back({clock_.NowNanos() + wait, slot, tx});
    });
  }

  void Open(Replica& r) {
    absl::StatusOr<std::unique_ptr<Partition>> p = Partition::Open(r.env);
    CHECK(p.ok()) << p.status();
    r.partition = *std::move(p);
    Partition* part = r.partition.get();
    r.network->SetHandlers(
        [part](const p2p::NodeId& from, p2p::PartitionId, p2p::Channel ch, std::string bytes) {
          part->OnPeerMessage(from, ch, std::move(bytes));
        },
        [](const p2p::NodeId&, p2p::PeerEvent) {});
  }

  Outcome Snapshot() {
    Outcome out;
    for (Replica& r : replicas_) {
      std::string chain;
      for (uint64_t h = 1; h <= r.partition->height(); ++h) {
        absl::StatusOr<node::client::GetBlockResponse> b = r.partition->GetBlock(h, false);
        EXPECT_TRUE(b.ok()) << b.status();
        if (!b.ok()) continue;
        absl::StrAppend(&chain, h, ":", absl::BytesToHexString(b->block_hash()).substr(0, 12), ",");
      }
      out.chains.push_back(chain);
      out.views.push_back(r.partition->Status().view());
      absl::StatusOr<node::client::GetAccountResponse> a =
          r.partition->GetAccount(testing::TestKey('a').public_key().bytes());
      out.nonces.push_back(a.ok() ? a->account().nonce() : 0);
    }
    out.answers = answers_;
    out.refusals = refusals_;
    return out;
  }

 private:
  std::mt19937 rng_;
  const std::string dir_;
  tests::FakeClock clock_;
  std::vector<std::unique_ptr<flowctl::BlockBudget>> budgets_;  // outlive the partitions
  p2p::InMemoryHub hub_;
  std::vector<Replica> replicas_;
  struct LostForwards {
    p2p::NodeId from;
    p2p::NodeId to;
    int count = 0;
  };
  std::vector<LostForwards> lost_forwards_;
  struct Retry {
    int64_t at = 0;
    size_t slot = 0;
    std::string tx;
  };
  std::vector<std::string> answers_;
  std::vector<std::string> refusals_;
  std::deque<Retry> retries_;
  uint64_t nonce_ = 0;
  uint64_t timed_ticks_ = 0;
};

std::string TestDir(const std::string& run) {
  return absl::StrCat(::testing::TempDir(), "/partition_cluster_", getpid(), "_", run);
}

// One scenario: 40 txs, crash the view-0 primary, 150 more txs (sent over about 450 ms, so the
// view change, which starts 400 ms after the first of them, refuses some), then time to commit.
Outcome RunScenario(uint32_t seed, const std::string& run) {
  Cluster cluster(seed, TestDir(run));
  cluster.RunFor(absl::Milliseconds(50));
  cluster.SubmitTxs(40);
  cluster.RunFor(absl::Milliseconds(500));
  const uint64_t before_crash = cluster.partition(1).height();
  EXPECT_GT(before_crash, 0u);
  for (int i = 0; i < kReplicas; ++i) {
    EXPECT_EQ(cluster.partition(i).ChainStatus().height(), before_crash) << "replica " << i;
  }
  cluster.Crash(0);  // the primary of view 0
  cluster.SubmitTxs(150);
  cluster.RunFor(absl::Seconds(5));
  EXPECT_TRUE(cluster.AllAnswered());
  Outcome out = cluster.Snapshot();
  out.committed_after_crash = cluster.partition(1).height() - before_crash;
  return out;
}

TEST(PartitionClusterTest, CommitsSurvivesACrashedPrimaryAndRepeatsForTheSameSeed) {
  const Outcome first = RunScenario(/*seed=*/42, "a");
  // Every live replica holds the same chain, in a view past 0, and every tx was answered OK.
  for (int i = 2; i < kReplicas; ++i) EXPECT_EQ(first.chains[i], first.chains[1]) << i;
  for (int i = 1; i < kReplicas; ++i) EXPECT_GT(first.views[i], 0u) << i;
  EXPECT_GT(first.committed_after_crash, 0u);
  // The crashed replica's chain is a prefix of the others' (nothing forked).
  EXPECT_EQ(first.chains[1].rfind(first.chains[0], 0), 0u);
  ASSERT_EQ(first.answers.size(), 190u);
  for (const std::string& a : first.answers) EXPECT_EQ(a, "OK");
  // Every tx committed: 190 puts of one sender, so its nonce is 190 on every live replica.
  for (int i = 1; i < kReplicas; ++i) EXPECT_EQ(first.nonces[i], 190u) << i;
  EXPECT_FALSE(first.refusals.empty()) << "the view change should have refused someone";

  const Outcome second = RunScenario(/*seed=*/42, "b");
  EXPECT_EQ(second.chains, first.chains);
  EXPECT_EQ(second.views, first.views);
  EXPECT_EQ(second.answers, first.answers);
  EXPECT_EQ(second.refusals, first.refusals);

  // Another seed takes another path (different timing and routing) to the same kind of result.
  const Outcome other = RunScenario(/*seed=*/7, "c");
  for (int i = 2; i < kReplicas; ++i) EXPECT_EQ(other.chains[i], other.chains[1]) << i;
  EXPECT_GT(other.committed_after_crash, 0u);
}

// An idle partition asks for time only when it needs it: its PBFT retransmit timer (every
// view_change_timeout / 4, here 100 ms: it notices a stalled replica even when no one sends) and
// the pool's expiry sweep once a second; a periodic 5 ms tick would be 200 a second. Nothing
// waits on the 1 s backstop either: a tx sent after a long idle spell commits within the batch
// timeout and a few message delays.
TEST(PartitionClusterTest, AnIdlePartitionTicksOnlyForItsTimersAndStillCommitsAtOnce) {
  Cluster cluster(/*seed=*/3, TestDir("idle"));
  cluster.RunFor(absl::Milliseconds(50));
  cluster.SubmitTxs(20);
  cluster.RunFor(absl::Seconds(1));
  const uint64_t height = cluster.partition(0).height();
  EXPECT_GT(height, 0u);
  const uint64_t before = cluster.timed_ticks();
  cluster.RunFor(absl::Seconds(10));
  // 4 replicas x 10 s x (10 retransmits + 1 sweep) a second, with room for the edges.
  EXPECT_LE(cluster.timed_ticks() - before, 4u * 10u * 11u + 8u);
  EXPECT_GE(cluster.timed_ticks() - before, 4u * 10u * 10u) << "the retransmit timer still runs";
  EXPECT_EQ(cluster.partition(0).height(), height) << "no empty blocks while idle";
  cluster.SubmitTxs(1);  // runs 1-5 ms
  cluster.RunFor(absl::Milliseconds(60));
  for (int i = 0; i < kReplicas; ++i) {
    EXPECT_EQ(cluster.partition(i).height(), height + 1) << "replica " << i;
  }
}

// A partition's caches ask the arbiter for its memory (flowctl::ConsumerUsage::
// memory_cache_demand, runtime/cache_demand.h) by what they do. A state cache of 1 MiB given
// 1.6 MiB of new keys evicts but misses nothing a bigger cache would have held (first reads): it
// asks for no more than the share that covers it; the same keys written again miss what it
// evicted, and it asks for the partition's whole configured memory; left unread for 30 s it
// asks for nothing, so the partition's memory can go to busier partitions. The arbiter's side:
// ArbiterServiceTest.CacheDemandIsMemoryDemandUpToTheLimit.
TEST(PartitionClusterTest, AStateCacheThatMissesWhatItEvictedAsksForThePartitionsWholeMemory) {
  constexpr uint64_t kCache = 1 << 20;
  Cluster cluster(/*seed=*/11, TestDir("cache_demand"), {.state_cache_bytes = kCache});
  Partition& p = cluster.partition(0);
  const flowctl::ConsumerUsage before = p.TakeUsage();  // the baseline: nothing read yet
  const uint64_t limit = before.memory_limit;
  EXPECT_LT(before.memory_cache_demand, limit / 8);
  cluster.SubmitPuts(0, 200, 8 << 10);  // 1.6 MiB of new keys
  cluster.RunFor(absl::Seconds(1));
  ASSERT_TRUE(cluster.AllAnswered());
  ASSERT_GT(p.height(), 0u);
  node::admin::StateCacheStats cache = p.FlowStats().state_cache();
  ASSERT_GE(cache.bytes(), kCache * 9 / 10) << "the cache filled";
  EXPECT_EQ(cache.evicted_misses(), 0u);
  // 1.25x what it holds, up to its configured size: the whole limit only through the cap.
  const flowctl::ConsumerUsage filled = p.TakeUsage();
  EXPECT_NEAR(static_cast<double>(filled.memory_cache_demand),
              std::min(1.0, 1.25 * static_cast<double>(cache.bytes()) / kCache) *
                  static_cast<double>(limit),
              16.0);
  // Eleven seconds on (past the want window, should there have been one): the same keys again.
  cluster.RunFor(absl::Seconds(11));
  EXPECT_EQ(p.TakeUsage().memory_cache_demand, filled.memory_cache_demand) << "nothing read";
  cluster.SubmitPuts(0, 100, 8 << 10);
  cluster.RunFor(absl::Seconds(1));
  ASSERT_TRUE(cluster.AllAnswered());
  cache = p.FlowStats().state_cache();
  EXPECT_GT(cache.evicted_misses(), 0u);
  EXPECT_EQ(p.TakeUsage().memory_cache_demand, limit);
  EXPECT_EQ(p.FlowStats().state_cache().memory_demand_bytes(), limit);
  // Thirty seconds unread: nothing.
  cluster.RunFor(absl::Seconds(31));
  EXPECT_EQ(p.TakeUsage().memory_cache_demand, 0u);
}

// Node-wide admission agreed across the replicas (flowctl/peer_admission.h): each replica's node
// gives its own admit fraction (Node::AdmissionTick does, after each arbiter tick), and a replica
// lets through the smaller of its own and the (f+1)-th lowest of the four. One replica cutting
// moves nobody else; two cut the partition's client writes on all four, the one whose own
// fraction is 1 included (the effect: 30 of 40 calls to it refused before parsing); once they
// stop, every replica admits everything again and every refused tx, re-sent, commits. With
// agree_with_peers off (with_peers false) a node neither heeds nor sends the cuts.
TEST(PartitionClusterTest, TwoReplicasCuttingClientWritesCutThemOnEveryReplica) {
  Cluster cluster(/*seed=*/11, TestDir("admission"));
  cluster.RunFor(absl::Milliseconds(50));
  // One arbiter tick on every node, then another once the signals arrived.
  auto tick = [&cluster](std::vector<double> own, std::vector<bool> with_peers = {}) {
    with_peers.resize(kReplicas, true);
    for (int round = 0; round < 2; ++round) {
      for (int i = 0; i < kReplicas; ++i) {
        cluster.partition(i).SetAdmitFraction(own[i], 0.05, with_peers[i]);
      }
      if (round == 0) cluster.RunFor(absl::Milliseconds(10));
    }
  };
  tick({0.25, 1, 1, 1});
  EXPECT_EQ(cluster.partition(0).admit_fraction(), 0.25);
  EXPECT_EQ(cluster.partition(3).admit_fraction(), 1) << "one replica alone may be faulty";
  EXPECT_EQ(cluster.partition(3).peer_admission().peers_cutting, 1);

  // Replica 1 cuts too, but with agreement off: it sends nothing, and replica 2, also off,
  // heeds nobody.
  tick({0.25, 0.25, 1, 1}, {true, false, false, true});
  EXPECT_EQ(cluster.partition(1).admit_fraction(), 0.25);
  EXPECT_EQ(cluster.partition(2).admit_fraction(), 1);
  EXPECT_EQ(cluster.partition(3).admit_fraction(), 1);
  EXPECT_EQ(cluster.partition(3).peer_admission().peers_cutting, 1);

  tick({0.25, 0.25, 1, 1});
  for (int i = 0; i < kReplicas; ++i) {
    EXPECT_EQ(cluster.partition(i).admit_fraction(), 0.25) << "replica " << i;
  }
  EXPECT_EQ(cluster.partition(3).peer_admission().own, 1);
  EXPECT_EQ(cluster.partition(3).peer_admission().peers_cutting, 2);
  const uint64_t refused_before = cluster.partition(3).admission_refused();
  for (int i = 0; i < 40; ++i) cluster.SubmitTo(3);
  EXPECT_EQ(cluster.partition(3).admission_refused() - refused_before, 30u);

  tick({1, 1, 1, 1});
  for (int i = 0; i < kReplicas; ++i) {
    EXPECT_EQ(cluster.partition(i).admit_fraction(), 1) << "replica " << i;
    EXPECT_EQ(cluster.partition(i).peer_admission().peers_cutting, 0) << "replica " << i;
  }
  cluster.RunFor(absl::Seconds(3));
  EXPECT_TRUE(cluster.AllAnswered());
  const Outcome out = cluster.Snapshot();
  for (int i = 0; i < kReplicas; ++i) EXPECT_EQ(out.nonces[i], 40u) << "replica " << i;
}

// The node's block budget (flowctl/block_budget.h) on every replica: with 15 other partitions
// busy on the node, this one leaves them 15 of the budget's 1/64 s between two of its partial
// batches, 234 ms, bounded by a quarter of the request timeout (400 ms here): its primary cuts
// a partial batch at most every 100 ms, and the same 240 txs go into fewer, fuller blocks than with
// no budget, all committed, one chain, no view change. The same seed with no budget is the
// baseline. Batches of up to 500 txs, so that no batch is full (a full one is never held).
TEST(PartitionClusterTest, TheNodesBlockBudgetSpacesPartialBatchesWhenOtherPartitionsHaveWork) {
  struct Run {
    uint64_t height = 0;
    double interval_ms = 0;
  };
  auto run = [](uint32_t budget, const std::string& name) {
    Cluster cluster(/*seed=*/17, TestDir(name), {.block_budget = budget, .batch_max_txs = 500});
    cluster.RunFor(absl::Milliseconds(50));
    for (int chunk = 0; chunk < 12; ++chunk) {
      cluster.OtherPartitionsHaveWork(15);
      cluster.SubmitTxs(20);  // 20-100 ms
    }
    cluster.OtherPartitionsHaveWork(15);
    cluster.RunFor(absl::Seconds(2));
    EXPECT_TRUE(cluster.AllAnswered());
    const Outcome out = cluster.Snapshot();
    for (int i = 0; i < kReplicas; ++i) {
      EXPECT_EQ(out.nonces[i], 240u) << name << ": every tx committed on replica " << i;
      EXPECT_EQ(out.chains[i], out.chains[0]) << name << ": replica " << i;
      EXPECT_EQ(out.views[i], 0u) << name << ": no view change";
    }
    node::admin::PartitionFlowStats stats = cluster.partition(0).FlowStats();
    return Run{cluster.partition(0).height(), stats.block_interval_ms()};
  };
  const Run none = run(0, "budget_none");
  const Run budget = run(64, "budget_64");
  EXPECT_EQ(none.interval_ms, 0);
  EXPECT_DOUBLE_EQ(budget.interval_ms, 100) << "234 ms by the budget, bounded";
  EXPECT_GT(none.height, 2 * budget.height)
      << "no budget: " << none.height << " blocks; budget: " << budget.height;
  // One batch per 100 ms of the 0.3-1.2 s the txs take to send, and the last.
  EXPECT_LE(budget.height, 13u);
}

// Node-wide admission's cut reaches the block budget: a partition whose replicas let through a
// quarter of its client calls (Partition::SetAdmitFraction, as the node's arbiter tick does) has
// a quarter of its share weight in the budget. With 15 other partitions busy and a budget of 1,000
// blocks/s its primary leaves them 15 ms between two of its partial batches uncut, 60 ms cut.
// Every tx still commits (the refused ones sent again), one chain, no view change.
TEST(PartitionClusterTest, APartitionCutByNodeAdmissionGetsItsCutOfTheBlockBudget) {
  auto run = [](double fraction, const std::string& name) {
    Cluster cluster(/*seed=*/17, TestDir(name), {.block_budget = 1000, .batch_max_txs = 500});
    for (int i = 0; i < kReplicas; ++i) {
      cluster.partition(i).SetAdmitFraction(fraction, /*floor=*/0.05, /*with_peers=*/false);
    }
    cluster.RunFor(absl::Milliseconds(50));
    for (int chunk = 0; chunk < 6; ++chunk) {
      cluster.OtherPartitionsHaveWork(15);
      cluster.SubmitTxs(20);  // 20-100 ms
    }
    // The others stay busy for 2 s more, and until every tx is answered (at most 60 s).
    for (int i = 0; i < 600 && (i < 20 || !cluster.AllAnswered()); ++i) {
      cluster.OtherPartitionsHaveWork(15);
      cluster.RunFor(absl::Milliseconds(100));
    }
    EXPECT_TRUE(cluster.AllAnswered()) << name;
    const Outcome out = cluster.Snapshot();
    for (int i = 0; i < kReplicas; ++i) {
      EXPECT_EQ(out.nonces[i], 120u) << name << ": every tx committed on replica " << i;
      EXPECT_EQ(out.chains[i], out.chains[0]) << name << ": replica " << i;
      EXPECT_EQ(out.views[i], 0u) << name << ": no view change";
    }
    return std::pair{cluster.partition(0).FlowStats().block_interval_ms(), out.refusals.size()};
  };
  const auto [uncut_ms, uncut_refusals] = run(1, "admission_uncut");
  const auto [cut_ms, cut_refusals] = run(0.25, "admission_cut");
  EXPECT_DOUBLE_EQ(uncut_ms, 15);
  EXPECT_DOUBLE_EQ(cut_ms, 60);
  EXPECT_EQ(uncut_refusals, 0u);
  EXPECT_GT(cut_refusals, 0u) << "the cut refused calls";
}

// Forwarding is lossy: here the one forward of a client tx from backup 2 to the primary is lost
// (backups 1 and 3 got theirs). The primary never proposes it, so every backup holds it pending
// and, before this fix, their request timers (400 ms) forced a view change that only moved it to
// another primary. Now the backups send it to the primary again after half the request timeout:
// it commits in view 0, and no view change happens.
TEST(PartitionClusterTest, ABackupReforwardsWhatThePrimaryNeverGotSoNoViewChangeFollows) {
  Cluster cluster(/*seed=*/5, TestDir("reforward"));
  cluster.RunFor(absl::Milliseconds(50));
  cluster.LoseForwards(/*from=*/2, /*to=*/0, /*count=*/1);
  cluster.SubmitTo(2);
  cluster.RunFor(absl::Milliseconds(150));
  EXPECT_EQ(cluster.partition(0).height(), 0u) << "the primary should not have the tx yet";
  cluster.RunFor(absl::Seconds(2));
  for (int i = 0; i < kReplicas; ++i) {
    EXPECT_EQ(cluster.partition(i).height(), 1u) << "replica " << i;
    EXPECT_EQ(cluster.partition(i).Status().view(), 0u) << "replica " << i;
  }
  EXPECT_TRUE(cluster.AllAnswered());
}

// A planted nondeterminism (Executor::PlantNondeterminismForTest) on one of four replicas: its
// block 3 writes one extra value, so its state root differs from block 3 on. Checkpoint votes
// carry the state root, so at the first checkpoint after it (seq 4) the other three make a
// checkpoint stable that this replica's own vote contradicts. It goes DIVERGED (status, halt
// reason with the height and both roots, metrics), signs nothing more, stays readable, and stays
// DIVERGED across a restart; the other three go on committing one chain, and every client tx
// commits there.
TEST(PartitionClusterTest, AReplicaThatExecutesDifferentlyHaltsDivergedAndTheOthersGoOn) {
  constexpr int kDiverging = 2;
  Cluster cluster(/*seed=*/11, TestDir("diverge"),
                  {.diverge_replica = kDiverging, .diverge_height = 3, .checkpoint_interval = 4});
  cluster.RunFor(absl::Milliseconds(50));
  cluster.SubmitTxs(80);
  cluster.RunFor(absl::Seconds(3));
  ASSERT_TRUE(cluster.AllAnswered());

  Partition& bad = cluster.partition(kDiverging);
  const node::admin::PartitionStatus status = bad.Status();
  ASSERT_EQ(status.consensus_state(), "DIVERGED") << status.DebugString();
  const uint64_t good_height = cluster.partition(0).height();
  ASSERT_GT(good_height, 8u) << "the others committed past the next checkpoints";
  // The halt reason names the checkpoint and both roots: the replica's own block 4 and the
  // one the others agree on.
  const std::string own_root = cluster.BlockAt(kDiverging, 4).header().state_root();
  const std::string agreed_root = cluster.BlockAt(0, 4).header().state_root();
  ASSERT_NE(own_root, agreed_root);
  EXPECT_NE(status.halt_reason().find("state diverged at height 4"), std::string::npos)
      << status.halt_reason();
  EXPECT_NE(status.halt_reason().find(absl::BytesToHexString(own_root)), std::string::npos)
      << status.halt_reason();
  EXPECT_NE(status.halt_reason().find(absl::BytesToHexString(agreed_root)), std::string::npos)
      << status.halt_reason();
  EXPECT_EQ(bad.ChainStatus().consensus_state(), "DIVERGED");
  node::admin::NodeStatus node_status;
  *node_status.add_partitions() = status;
  const std::string metrics = prometheus::TextSerializer().Serialize(
      NodeMetricFamilies(node_status, node::admin::FlowStats()));
  EXPECT_NE(metrics.find("noded_consensus_state{partition=\"det\",state=\"DIVERGED\"} 1"),
            std::string::npos)
      << metrics;

  // Nothing forked: the three agree block by block; the diverged one matches them up to block 2
  // and, from block 3 on, differs only in the state it computed (the same txs, in order).
  for (uint64_t h = 1; h <= good_height; ++h) {
    for (int i : {1, 3}) {
      EXPECT_EQ(cluster.BlockAt(i, h).SerializeAsString(),
                cluster.BlockAt(0, h).SerializeAsString())
          << "replica " << i << " height " << h;
    }
  }
  EXPECT_LT(bad.height(), good_height) << "it stopped committing";
  for (uint64_t h = 1; h <= bad.height(); ++h) {
    node::chain::Block mine = cluster.BlockAt(kDiverging, h);
    node::chain::Block theirs = cluster.BlockAt(0, h);
    EXPECT_EQ(mine.header().state_root() == theirs.header().state_root(), h < 3) << h;
    mine.mutable_header()->clear_state_root();
    mine.mutable_header()->clear_parent_hash();
    theirs.mutable_header()->clear_state_root();
    theirs.mutable_header()->clear_parent_hash();
    EXPECT_EQ(mine.SerializeAsString(), theirs.SerializeAsString()) << h;
  }
  // Every client tx committed on the three: 80 puts of one sender.
  for (int i : {0, 1, 3}) {
    absl::StatusOr<node::client::GetAccountResponse> a =
        cluster.partition(i).GetAccount(testing::TestKey('a').public_key().bytes());
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->account().nonce(), 80u) << "replica " << i;
  }
  // Still readable; refuses writes.
  EXPECT_TRUE(bad.GetBlock(1, false).ok());
  EXPECT_TRUE(bad.GetAccount(testing::TestKey('a').public_key().bytes()).ok());
  absl::Status refused;
  bad.Submit(testing::SignedPut(kPartition, 'b', 1), {},
             [&refused](SubmitResult r) { refused = r.status; });
  cluster.RunFor(absl::Milliseconds(5));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find("DIVERGED"), std::string::npos) << refused;

  // A restart does not sign on over the same wrong state.
  const uint64_t bad_height = bad.height();
  cluster.Restart(kDiverging);
  cluster.SubmitTxs(10);
  cluster.RunFor(absl::Seconds(1));
  Partition& restarted = cluster.partition(kDiverging);
  EXPECT_EQ(restarted.Status().consensus_state(), "DIVERGED");
  EXPECT_NE(restarted.Status().halt_reason().find("found before a restart"), std::string::npos)
      << restarted.Status().halt_reason();
  EXPECT_EQ(restarted.height(), bad_height);
  EXPECT_GT(cluster.partition(0).height(), good_height);

  // The operator's remedy: delete that partition's ledger (keeping its consensus store, so it
  // never contradicts what it signed) and restart. It rebuilds the ledger from its peers by
  // block sync, and holds their blocks. (Its executor is fixed too: the failpoint is off.)
  cluster.ClearDivergeFailpoint(kDiverging);
  cluster.Restart(kDiverging, /*wipe_ledger=*/true);
  cluster.SubmitTxs(10);
  cluster.RunFor(absl::Seconds(3));
  Partition& rebuilt = cluster.partition(kDiverging);
  EXPECT_EQ(rebuilt.Status().consensus_state(), "NORMAL") << rebuilt.Status().halt_reason();
  // Its low watermark was its old stable checkpoint; the sync answers carried the others' later
  // one, so the blocks they committed while it was syncing reached it too.
  ASSERT_EQ(rebuilt.height(), cluster.partition(0).height());
  EXPECT_GE(rebuilt.Status().stable_checkpoint(), cluster.partition(0).height() - 4)
      << rebuilt.Status().DebugString();
  for (uint64_t h = 1; h <= rebuilt.height(); ++h) {
    EXPECT_EQ(cluster.BlockAt(kDiverging, h).SerializeAsString(),
              cluster.BlockAt(0, h).SerializeAsString())
        << h;
  }
}

// A node that joins long after the others started (its directory empty) installs the state at a
// stable checkpoint from its peers and replays only the blocks after it; block sync would have
// replayed every one.
TEST(PartitionClusterTest, ANewReplicaFarBehindJoinsThroughASnapshotOfTheAgreedState) {
  constexpr int kJoiner = 3;
  Cluster cluster(29, ::testing::TempDir() + "/cluster_snapshot",
                  {.checkpoint_interval = 4, .snapshot_min_blocks = 10});
  cluster.Crash(kJoiner);
  cluster.SubmitTxs(150);
  cluster.RunFor(absl::Seconds(1));
  const uint64_t before = cluster.partition(0).height();
  ASSERT_GE(before, 20u) << "too few blocks for the scenario";

  cluster.Revive(kJoiner, /*empty=*/true);
  cluster.SubmitTxs(20);  // the others go on committing meanwhile
  cluster.RunFor(absl::Seconds(3));
  Partition& joiner = cluster.partition(kJoiner);
  EXPECT_EQ(joiner.Status().consensus_state(), "NORMAL") << joiner.Status().halt_reason();
  const node::admin::SnapshotSyncStats snap = joiner.FlowStats().snapshot();
  EXPECT_EQ(snap.installed(), 1u);
  const uint64_t base = snap.fetch_seq();
  EXPECT_GE(base, before - 8) << "the snapshot is at a stable checkpoint near the others' tip";
  EXPECT_EQ(base % 4, 0u);
  EXPECT_EQ(snap.fetch_chunks_done(), snap.fetch_chunks_total());
  EXPECT_EQ(snap.fetch_bad_chunks(), 0u);
  uint64_t served = 0;
  for (int i = 0; i < kReplicas; ++i) {
    if (i != kJoiner) served += cluster.partition(i).FlowStats().snapshot().served_chunks();
  }
  EXPECT_GE(served, snap.fetch_chunks_total());

  // It holds the others' blocks from the snapshot's on, and not the history just before it
  // (what it block-synced before it learned how far behind it was stays).
  ASSERT_EQ(joiner.height(), cluster.partition(0).height());
  EXPECT_GT(joiner.height(), before);
  for (uint64_t h = base; h <= joiner.height(); ++h) {
    EXPECT_EQ(cluster.BlockAt(kJoiner, h).SerializeAsString(),
              cluster.BlockAt(0, h).SerializeAsString())
        << h;
  }
  EXPECT_TRUE(absl::IsNotFound(joiner.GetBlock(base - 1, false).status()))
      << joiner.GetBlock(base - 1, false).status();
  for (int i = 0; i < kReplicas; ++i) {
    absl::StatusOr<node::client::GetAccountResponse> a =
        cluster.partition(i).GetAccount(testing::TestKey('a').public_key().bytes());
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->account().nonce(), 170u) << "replica " << i;
  }

  // It takes part from there: with another replica down, it is needed for every quorum.
  cluster.Crash(1);
  cluster.SubmitTxs(10);
  cluster.RunFor(absl::Seconds(3));
  EXPECT_EQ(joiner.height(), cluster.partition(0).height());
  absl::StatusOr<node::client::GetAccountResponse> a =
      joiner.GetAccount(testing::TestKey('a').public_key().bytes());
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->account().nonce(), 180u);
}

// Every replica prunes (state.retain_blocks): each keeps only the last blocks, and the replicas
// still bring back one that was down long (through a snapshot at a recent stable checkpoint, whose
// state the others kept) and one that was down briefly (by replaying blocks they still hold).
TEST(PartitionClusterTest, PruningReplicasKeepTheLastBlocksAndStillBringLaggardsBack) {
  constexpr uint64_t kRetain = 26;  // snapshot_min_blocks 10 + watermark window 16
  constexpr int kLongDown = 3;
  constexpr int kBrieflyDown = 2;
  Cluster cluster(37, ::testing::TempDir() + "/cluster_prune",
                  {.checkpoint_interval = 4, .snapshot_min_blocks = 10, .retain_blocks = kRetain});
  cluster.SubmitTxs(40);
  cluster.RunFor(absl::Seconds(1));
  const uint64_t long_down_at = cluster.partition(kLongDown).height();
  cluster.Crash(kLongDown);
  cluster.SubmitTxs(300);
  cluster.RunFor(absl::Seconds(1));
  const node::client::GetChainStatusResponse pruned = cluster.partition(0).ChainStatus();
  ASSERT_GT(pruned.earliest_height(), long_down_at + 1)
      << "the others must have pruned past the long-down replica's tip for the scenario";

  cluster.Revive(kLongDown, /*empty=*/false);
  cluster.SubmitTxs(20);
  cluster.RunFor(absl::Seconds(3));
  ASSERT_EQ(cluster.partition(kLongDown).height(), cluster.partition(0).height());

  // Then another one down briefly (a quorum needs the first one back).
  const uint64_t briefly_down_at = cluster.partition(kBrieflyDown).height();
  cluster.Crash(kBrieflyDown);
  cluster.SubmitTxs(24);  // a few blocks: less than snapshot_min_blocks behind
  cluster.RunFor(absl::Seconds(1));
  ASSERT_LT(cluster.partition(0).height(), briefly_down_at + 10);
  ASSERT_GT(cluster.partition(0).height(), briefly_down_at);
  cluster.Revive(kBrieflyDown, /*empty=*/false);
  cluster.SubmitTxs(20);
  cluster.RunFor(absl::Seconds(3));

  const uint64_t tip = cluster.partition(0).height();
  EXPECT_EQ(cluster.partition(kLongDown).FlowStats().snapshot().installed(), 1u);
  EXPECT_EQ(cluster.partition(kBrieflyDown).FlowStats().snapshot().installed(), 0u)
      << "blocks the others kept were enough";
  for (int i = 0; i < kReplicas; ++i) {
    Partition& p = cluster.partition(i);
    EXPECT_EQ(p.Status().consensus_state(), "NORMAL") << i << ": " << p.Status().halt_reason();
    ASSERT_EQ(p.height(), tip) << "replica " << i;
    const uint64_t earliest = p.ChainStatus().earliest_height();
    EXPECT_EQ(p.Status().earliest_height(), earliest);  // admin status and metric
    // Between retain_blocks and retain_blocks + prune_step (1 at this size) - 1 blocks kept.
    EXPECT_GE(tip + 1 - earliest, i == kLongDown ? 1 : kRetain) << "replica " << i;
    EXPECT_LE(tip + 1 - earliest, kRetain) << "replica " << i;
    absl::StatusOr<node::client::GetBlockResponse> gone = p.GetBlock(earliest - 1, false);
    // Pruned; on the replica that joined by snapshot, maybe never fetched.
    EXPECT_TRUE(absl::IsOutOfRange(gone.status()) ||
                (i == kLongDown && absl::IsNotFound(gone.status())))
        << gone.status();
    for (uint64_t h = std::max(earliest, pruned.earliest_height()); h <= tip; ++h) {
      EXPECT_EQ(cluster.BlockAt(i, h).SerializeAsString(),
                cluster.BlockAt(0, h).SerializeAsString())
          << "replica " << i << " height " << h;
    }
    absl::StatusOr<node::client::GetAccountResponse> a =
        p.GetAccount(testing::TestKey('a').public_key().bytes());
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->account().nonce(), 404u) << "replica " << i;
  }
}

}  // namespace
}  // namespace runtime
