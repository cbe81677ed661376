// The primary's own client txs travel with its proposal, not on TX_FORWARD.
//
// A Partition with 4 replicas runs over a recording Network (nothing is delivered; every Send and
// Broadcast is logged in order). Time is a FakeClock, so batch deadlines and the hold limit move
// only when the test advances them; batch_max_txs = 2 makes a full batch cut at once.
//   - As primary: the bodies go out as one TxBatch on CONSENSUS right before the pre-prepare
//     (same channel and partition, so the egress scheduler keeps that order on every peer's link)
//     and never on TX_FORWARD.
//   - As primary, a tx that is not proposed within the hold limit is forwarded after all.
//   - As a backup: client txs are forwarded on TX_FORWARD as before, those within
//     consensus.forward_interval_ms of the last batch together at its end.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/ed25519.h"
#include "base/transaction.h"
#include "flowctl/tick_scheduler.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "proto/partition.pb.h"
#include "runtime/config.h"
#include "runtime/partition.h"
#include "tests/mocks/fake_clock.h"
#include "tests/mocks/recording_network.h"
#include "tests/runtime/runtime_test_util.h"

namespace runtime {
namespace {

using ::runtime::testing::WaitFor;

constexpr uint32_t kPartition = 3;

struct Sent {
  std::string to;  // empty for a broadcast
  p2p::Channel channel;
  node::partition::PartitionMessage msg;
};

// What the partition sent, parsed.
std::vector<Sent> Log(const tests::RecordingNetwork& net) {
  std::vector<Sent> out;
  for (const tests::RecordingNetwork::Sent& r : net.log()) {
    Sent s{r.to, r.channel, {}};
    CHECK(s.msg.ParseFromString(r.payload));
    out.push_back(std::move(s));
  }
  return out;
}

bool HasPrePrepare(const Sent& s) {
  return s.msg.has_consensus() && s.msg.consensus().has_pre_prepare();
}

// Count of `body` among the TxBatch entries sent on `channel`.
int Carried(const std::vector<Sent>& log, p2p::Channel channel, const std::string& body) {
  int n = 0;
  for (const Sent& s : log) {
    if (s.channel != channel || !s.msg.has_txs()) continue;
    for (const std::string& t : s.msg.txs().signed_txs()) n += t == body ? 1 : 0;
  }
  return n;
}

class ProposalBodiesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/proposal_bodies_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    for (int i = 0; i < 4; ++i) {
      absl::StatusOr<base::PrivateKey> k = base::PrivateKey::FromSeed(std::string(32, 'a' + i));
      CHECK(k.ok());
      keys_.push_back(*std::move(k));
    }
    // Replica index = position of the id in sorted order.
    std::sort(keys_.begin(), keys_.end(), [](const base::PrivateKey& a, const base::PrivateKey& b) {
      return p2p::NodeIdFromPublicKey(a.public_key().bytes()) <
             p2p::NodeIdFromPublicKey(b.public_key().bytes());
    });
    for (const auto& k : keys_) {
      ids_.push_back(p2p::NodeIdFromPublicKey(k.public_key().bytes()));
      pubs_.push_back(k.public_key());
    }
    flowctl::WorkerPool::Options po;
    po.threads = 2;
    pool_ = std::make_unique<flowctl::WorkerPool>(po);
    CHECK(pool_->Start().ok());
    CHECK(scheduler_.Start().ok());
  }

  void TearDown() override {
    if (part_) part_->Stop(absl::ZeroDuration());
    part_.reset();
    pool_->Stop();
    std::filesystem::remove_all(dir_);
  }

  // Opens and starts replica `self` (0 = the primary of view 0).
  void StartReplica(uint32_t self, uint32_t batch_timeout_ms = 50) {
    std::vector<p2p::NodeId> peers;
    for (uint32_t i = 0; i < ids_.size(); ++i) {
      if (i != self) peers.push_back(ids_[i]);
    }
    net_ = std::make_unique<tests::RecordingNetwork>(ids_[self], peers);
    node::config::NodeConfig nc;
    nc.set_data_dir(dir_);
    auto* pc = nc.add_partitions();
    pc->set_id(kPartition);
    pc->set_name("p");
    pc->mutable_consensus()->set_batch_max_txs(2);
    pc->mutable_consensus()->set_batch_timeout_ms(batch_timeout_ms);
    ApplyDefaults(&nc);
    PartitionEnv env;
    env.config = nc.partitions(0);
    env.dir = dir_ + "/part";
    env.pool = pool_.get();
    env.network = net_.get();
    env.key = keys_[self];
    env.replica_ids = ids_;
    env.replica_keys = pubs_;
    env.clock = &clock_;
    env.scheduler = &scheduler_;
    absl::StatusOr<std::unique_ptr<Partition>> p = Partition::Open(std::move(env));
    ASSERT_TRUE(p.ok()) << p.status();
    part_ = *std::move(p);
    ASSERT_TRUE(part_->Start().ok());
  }

  std::string Tx(int nonce) {
    node::chain::Transaction tx;
    tx.set_partition(kPartition);
    tx.set_nonce(nonce);
    tx.mutable_put()->set_key(absl::StrCat("k", nonce));
    tx.mutable_put()->set_value(std::string(200, 'v'));
    return base::SignTx(std::move(tx), keys_[3]);
  }

  void SubmitAll(std::vector<std::string> txs) {
    absl::Notification done;
    part_->SubmitBatch(std::move(txs), {}, [&](std::vector<SubmitResult> r) {
      for (const SubmitResult& x : r) EXPECT_TRUE(x.status.ok()) << x.status;
      done.Notify();
    });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  }

  std::string dir_;
  tests::FakeClock clock_;
  flowctl::TickScheduler scheduler_{&clock_};
  std::vector<base::PrivateKey> keys_;
  std::vector<p2p::NodeId> ids_;
  std::vector<base::PublicKey> pubs_;
  std::unique_ptr<flowctl::WorkerPool> pool_;
  std::unique_ptr<tests::RecordingNetwork> net_;
  std::unique_ptr<Partition> part_;
};

TEST_F(ProposalBodiesTest, PrimarySendsItsClientTxsOnConsensusRightBeforeThePrePrepare) {
  StartReplica(0);
  const std::string a = Tx(1), b = Tx(2);
  SubmitAll({a, b});  // a full batch (batch_max_txs = 2): cut without any time passing
  ASSERT_TRUE(WaitFor([&] {
    for (const Sent& s : Log(*net_)) {
      if (HasPrePrepare(s)) return true;
    }
    return false;
  }));
  part_->Stop(absl::ZeroDuration());  // flushes whatever forwarding still holds
  const std::vector<Sent> log = Log(*net_);
  size_t pp = 0;
  while (!HasPrePrepare(log[pp])) ++pp;
  ASSERT_GT(pp, 0u);
  const Sent& bodies = log[pp - 1];
  EXPECT_EQ(bodies.channel, node::p2p::CONSENSUS);
  EXPECT_TRUE(bodies.to.empty());
  ASSERT_TRUE(bodies.msg.has_txs());
  ASSERT_EQ(bodies.msg.txs().signed_txs_size(), 2);
  EXPECT_EQ(log[pp].channel, node::p2p::CONSENSUS);
  // Each body leaves exactly once: with the proposal, never again on TX_FORWARD.
  for (const std::string& t : {a, b}) {
    EXPECT_EQ(Carried(log, node::p2p::CONSENSUS, t), 1);
    EXPECT_EQ(Carried(log, node::p2p::TX_FORWARD, t), 0);
  }
}

TEST_F(ProposalBodiesTest, PrimaryForwardsAHeldTxThatIsNotProposedWithinTheHoldLimit) {
  // One tx of a 2-tx batch and a batch timeout far beyond the hold limit: it is not proposed.
  StartReplica(0, /*batch_timeout_ms=*/60'000);
  const std::string a = Tx(1);
  SubmitAll({a});
  // Past the hold limit (the retransmit period: 500 ms with the default 2 s view-change
  // timeout) the next tick forwards it; the fake clock moves only here.
  clock_.Advance(absl::Milliseconds(600));
  ASSERT_TRUE(WaitFor([&] { return Carried(Log(*net_), node::p2p::TX_FORWARD, a) == 1; }));
  part_->Stop(absl::ZeroDuration());
  const std::vector<Sent> log = Log(*net_);
  EXPECT_EQ(Carried(log, node::p2p::TX_FORWARD, a), 1);
  EXPECT_EQ(Carried(log, node::p2p::CONSENSUS, a), 0);
  for (const Sent& s : log) EXPECT_FALSE(HasPrePrepare(s));
}

TEST_F(ProposalBodiesTest, BackupForwardsClientTxsOnTxForward) {
  StartReplica(1);
  const std::string a = Tx(1);
  SubmitAll({a});
  part_->Stop(absl::ZeroDuration());  // flushes the forward buffer
  const std::vector<Sent> log = Log(*net_);
  EXPECT_EQ(Carried(log, node::p2p::TX_FORWARD, a), 1);
  EXPECT_EQ(Carried(log, node::p2p::CONSENSUS, a), 0);
}

// consensus.forward_interval_ms (default 20): an idle backup forwards at once; txs that come
// within the interval wait for its end and go together, on the partition's own wake-up (the fake
// clock moves only here, and nothing else happens to tick the partition).
TEST_F(ProposalBodiesTest, BackupForwardsTxsWithinTheIntervalTogetherAtItsEnd) {
  StartReplica(1);
  const std::string a = Tx(1), b = Tx(2), c = Tx(3);
  SubmitAll({a});
  ASSERT_TRUE(WaitFor([&] { return Carried(Log(*net_), node::p2p::TX_FORWARD, a) == 1; }));
  SubmitAll({b});
  SubmitAll({c});
  // The clock has not moved: whenever the ticks after b and c ran, nothing went.
  EXPECT_EQ(Carried(Log(*net_), node::p2p::TX_FORWARD, b), 0);
  clock_.Advance(absl::Milliseconds(20));
  ASSERT_TRUE(WaitFor([&] { return Carried(Log(*net_), node::p2p::TX_FORWARD, c) == 1; }));
  const std::vector<Sent> log = Log(*net_);
  std::vector<int> batch_sizes;
  for (const Sent& s : log) {
    if (s.channel == node::p2p::TX_FORWARD && s.msg.has_txs()) {
      batch_sizes.push_back(s.msg.txs().signed_txs_size());
    }
  }
  EXPECT_EQ(batch_sizes, (std::vector<int>{1, 2}));
}

// Channels as data: a message of a kind its channel may not carry is refused (and counted) before
// it is looked at; the same message on its own channel is served.
TEST_F(ProposalBodiesTest, AFetchOnTxForwardIsRefusedAndOnSyncAnswered) {
  StartReplica(1);
  const std::string a = Tx(1);
  SubmitAll({a});
  node::partition::PartitionMessage fetch;
  fetch.mutable_fetch()->add_tx_hashes(base::TxHash(a));
  part_->OnPeerMessage(ids_[0], node::p2p::TX_FORWARD, fetch.SerializeAsString());
  ASSERT_TRUE(WaitFor([&] { return part_->FlowStats().peer_refused_wrong_channel() == 1; }));
  EXPECT_EQ(Carried(Log(*net_), node::p2p::SYNC, a), 0);
  part_->OnPeerMessage(ids_[0], node::p2p::SYNC, fetch.SerializeAsString());
  ASSERT_TRUE(WaitFor([&] { return Carried(Log(*net_), node::p2p::SYNC, a) == 1; }));
  EXPECT_EQ(part_->FlowStats().peer_refused_wrong_channel(), 1u);
  for (const Sent& s : Log(*net_)) {
    if (s.channel == node::p2p::SYNC && s.msg.has_txs()) {
      EXPECT_EQ(s.to, ids_[0]);  // the answer goes to the asker
    }
  }
}

}  // namespace
}  // namespace runtime
