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
#include "flowctl/tick_scheduler.h"
#include "flowctl/worker_pool.h"
#include "gtest/gtest.h"
#include "p2p/in_memory_network.h"
#include "runtime/config.h"
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

class Cluster {
 public:
  Cluster(uint32_t seed, std::string dir) : rng_(seed), dir_(std::move(dir)), hub_(&clock_) {
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
                .crashed = false};
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
    pc->mutable_consensus()->set_batch_max_txs(8);
    pc->mutable_consensus()->set_batch_timeout_ms(20);
    pc->mutable_consensus()->set_view_change_timeout_ms(400);
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
      absl::StatusOr<std::unique_ptr<Partition>> p = Partition::Open(std::move(env));
      CHECK(p.ok()) << p.status();
      r.partition = *std::move(p);
      Partition* part = r.partition.get();
      r.network->SetHandlers(
          [part](const p2p::NodeId& from, p2p::PartitionId, p2p::Channel ch, std::string bytes) {
            part->OnPeerMessage(from, ch, std::move(bytes));
          },
          [](const p2p::NodeId&, p2p::PeerEvent) {});
    }
    for (Replica& r : replicas_) CHECK(r.partition->Start().ok());
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

}  // namespace
}  // namespace runtime
