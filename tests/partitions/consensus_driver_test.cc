// ConsensusDriver: one replica of a 4-replica partition with its real pool, tracker, forwarder,
// commit pipeline and RocksDB ledger; the test plays the other three replicas with fake
// signatures (tests/mocks) and reads what the driver sends off a RecordingNetwork. Time is a
// FakeClock moved by the test; nothing runs on another thread.
#include "partitions/consensus_driver.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "partitions/pbft_certs.h"
#include "tests/mocks/fake_clock.h"
#include "tests/mocks/fake_consensus_store.h"
#include "tests/mocks/fake_pbft_crypto.h"
#include "tests/mocks/recording_network.h"
#include "tests/partitions/chain_test_util.h"

namespace partitions {
namespace {

constexpr uint32_t kPartition = 3;
constexpr int64_t kMs = 1'000'000;
const std::vector<p2p::NodeId> kIds = {"n0", "n1", "n2", "n3"};

std::vector<p2p::NodeId> PeersOf(uint32_t self) {
  std::vector<p2p::NodeId> peers;
  for (uint32_t i = 0; i < kIds.size(); ++i) {
    if (i != self) peers.push_back(kIds[i]);
  }
  return peers;
}

// Records the heights it hears of, and may call back into the driver while it hears of one.
class Recorder final : public CommitSubscriber {
 public:
  void OnCommit(const CommitEvent& e) override {
    heights.push_back(e.height);
    txs += e.txs.size();
    if (on_commit) on_commit();
  }
  std::vector<uint64_t> heights;
  size_t txs = 0;
  std::function<void()> on_commit;
};

class ConsensusDriverTest : public ::testing::Test {
 protected:
  void TearDown() override {
    driver_.reset();
    chain_ = Chain();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // A driver for replica `self` (replica 0 is view 0's primary).
  void Build(uint32_t self) {
    self_ = self;
    dir_ = chaintest::FreshDir(absl::StrCat("consensus_driver_", self));
    absl::StatusOr<Chain> chain = OpenChain(dir_, kPartition, node::chain::GenesisConfig());
    ASSERT_TRUE(chain.ok()) << chain.status();
    chain_ = *std::move(chain);
    pool_ = chaintest::PoolOver(chain_, &clock_);
    crypto_ = std::make_unique<tests::FakePbftCrypto>(self);
    net_ = std::make_unique<tests::RecordingNetwork>(kIds[self], PeersOf(self));
    sender_ = std::make_unique<PeerSender>(net_.get(), kPartition, kIds, self);
    forwarder_ = std::make_unique<Forwarder>(sender_.get(), &clock_,
                                             Forwarder::Options{.hold_nanos = 500 * kMs});
    pipeline_ = std::make_unique<CommitPipeline>(CommitPipeline::Deps{.partition = kPartition,
                                                                      .chain = &chain_,
                                                                      .pool = pool_.get(),
                                                                      .tracker = &tracker_,
                                                                      .tx_limits = limits_,
                                                                      .clock = &clock_});
    feed_ = std::make_unique<CommitFeed>(chain_.ledger->last_height());
    feed_->Subscribe(&recorder_);
    config_.n = 4;
    config_.self = self;
    ConsensusDriver::Deps d;
    d.name = "test";
    d.clock = &clock_;
    d.crypto = crypto_.get();
    d.store = &store_;
    d.pool = pool_.get();
    d.tracker = &tracker_;
    d.forwarder = forwarder_.get();
    d.sender = sender_.get();
    d.pipeline = pipeline_.get();
    d.feed = feed_.get();
    d.ledger = chain_.ledger.get();
    d.batch_policy = &batch_policy_;
    d.tx_limits = limits_;
    d.slow_round_nanos = slow_round_nanos_;
    d.on_commit_locked = [this](const CommitEvent& e) { locked_commits_.push_back(e.height); };
    d.request_tick = [this] { ++tick_requests_; };
    d.wake_by = [this](int64_t when) { wakes_.push_back(when); };
    absl::StatusOr<std::unique_ptr<ConsensusDriver>> driver =
        ConsensusDriver::Create(std::move(d), config_, {});
    ASSERT_TRUE(driver.ok()) << driver.status();
    driver_ = *std::move(driver);
    driver_->Start();
  }

  TxPtr NewTx() {
    ++nonce_;
    return chaintest::Put(keys_[0], nonce_, absl::StrCat("k", nonce_), "v", kPartition);
  }
  // What client admission does with a verified tx.
  void AdmitAsClient(const TxPtr& tx) {
    ASSERT_TRUE(pool_->Add(tx, TxOrigin::kClient).ok());
    forwarder_->Queue(tx);
  }
  static std::vector<std::string> Hashes(const std::vector<TxPtr>& txs) {
    std::vector<std::string> out;
    for (const TxPtr& t : txs) out.push_back(t->hash);
    return out;
  }
  static node::partition::TxBatch Bodies(const std::vector<TxPtr>& txs) {
    node::partition::TxBatch batch;
    for (const TxPtr& t : txs) batch.add_signed_txs(t->signed_bytes);
    return batch;
  }

  // The messages sent so far, from index `from` on, parsed.
  struct Out {
    std::string to;  // empty: broadcast
    p2p::Channel channel;
    node::partition::PartitionMessage msg;
  };
  std::vector<Out> SentSince(size_t from) const {
    std::vector<Out> out;
    std::vector<tests::RecordingNetwork::Sent> log = net_->log();
    for (size_t i = from; i < log.size(); ++i) {
      Out o{log[i].to, log[i].channel, {}};
      EXPECT_EQ(log[i].partition, kPartition);
      EXPECT_TRUE(o.msg.ParseFromString(log[i].payload));
      out.push_back(std::move(o));
    }
    return out;
  }
  static std::vector<ConsensusMessage> Consensus(const std::vector<Out>& out,
                                                 ConsensusMessage::BodyCase body) {
    std::vector<ConsensusMessage> msgs;
    for (const Out& o : out) {
      if (o.msg.has_consensus() && o.msg.consensus().body_case() == body) {
        msgs.push_back(o.msg.consensus());
      }
    }
    return msgs;
  }
  size_t Mark() const { return net_->log().size(); }

  // Prepares and commits for (view 0, seq, digest) from replicas `from`.
  void Vote(uint64_t seq, const std::string& digest, std::vector<uint32_t> prepare_from,
            std::vector<uint32_t> commit_from) {
    for (uint32_t r : prepare_from) {
      ConsensusMessage m;
      m.mutable_prepare()->set_seq(seq);
      m.mutable_prepare()->set_digest(digest);
      driver_->OnConsensusMessage(r, tests::SignedAs(r, std::move(m)));
    }
    for (uint32_t r : commit_from) {
      ConsensusMessage m;
      m.mutable_commit()->set_seq(seq);
      m.mutable_commit()->set_digest(digest);
      driver_->OnConsensusMessage(r, tests::SignedAs(r, std::move(m)));
    }
  }
  ConsensusMessage PrePrepareFromPrimary(uint64_t seq, const std::vector<TxPtr>& txs) {
    ConsensusMessage m;
    auto* pp = m.mutable_pre_prepare();
    pp->set_seq(seq);
    for (const TxPtr& t : txs) pp->add_tx_hashes(t->hash);
    pp->set_digest(BatchDigest(Hashes(txs)));
    pp->set_proposer(0);
    return tests::SignedAs(0, std::move(m));
  }

  tests::FakeClock clock_{1'000'000'000};
  std::vector<base::PrivateKey> keys_ = chaintest::Keys(1);
  uint64_t nonce_ = 0;
  base::TxLimits limits_{.partition = kPartition};
  uint32_t self_ = 0;
  std::string dir_;
  Chain chain_;
  std::unique_ptr<TxPool> pool_;
  TxTracker tracker_{TxTrackerPolicy{}};
  tests::FakeConsensusStore store_;
  std::unique_ptr<tests::FakePbftCrypto> crypto_;
  std::unique_ptr<tests::RecordingNetwork> net_;
  std::unique_ptr<PeerSender> sender_;
  std::unique_ptr<Forwarder> forwarder_;
  std::unique_ptr<CommitPipeline> pipeline_;
  std::unique_ptr<CommitFeed> feed_;
  BatchPolicy batch_policy_{{.max_txs = 3, .max_bytes = 1 << 20, .max_delay_nanos = 10 * kMs}};
  Recorder recorder_;
  PbftConfig config_;
  std::vector<uint64_t> locked_commits_;
  int tick_requests_ = 0;
  std::vector<int64_t> wakes_;  // wake_by arguments, in order
  int64_t slow_round_nanos_ = 0;
  std::unique_ptr<ConsensusDriver> driver_;
};

TEST_F(ConsensusDriverTest, ThePrimaryCutsABatchSendsItsBodiesFirstAndCommitsOnAQuorum) {
  Build(0);
  std::vector<TxPtr> txs = {NewTx(), NewTx()};
  for (const TxPtr& t : txs) AdmitAsClient(t);
  forwarder_->Flush(false);
  const size_t mark = Mark();
  // Two ready txs of a batch of three: the policy waits up to 10 ms for company.
  const int64_t wake = driver_->Tick(clock_.NowNanos(), /*paused=*/false);
  EXPECT_TRUE(SentSince(mark).empty()) << "the primary holds its clients' txs";
  EXPECT_LE(wake, clock_.NowNanos() + 10 * kMs);
  clock_.Advance(absl::Milliseconds(10));
  driver_->Tick(clock_.NowNanos(), false);

  std::vector<Out> out = SentSince(mark);
  ASSERT_EQ(out.size(), 2u);
  // The bodies go out once, on CONSENSUS, right before the pre-prepare that names them.
  EXPECT_EQ(out[0].to, "");
  EXPECT_EQ(out[0].channel, p2p::Channel::CONSENSUS);
  ASSERT_TRUE(out[0].msg.has_txs());
  EXPECT_EQ(out[0].msg.txs().signed_txs_size(), 2);
  ASSERT_TRUE(out[1].msg.consensus().has_pre_prepare());
  EXPECT_EQ(out[1].channel, p2p::Channel::CONSENSUS);
  const auto& pp = out[1].msg.consensus().pre_prepare();
  EXPECT_EQ(pp.seq(), 1u);
  EXPECT_EQ(std::vector<std::string>(pp.tx_hashes().begin(), pp.tx_hashes().end()), Hashes(txs));
  EXPECT_TRUE(crypto_->Verify(out[1].msg.consensus()));

  Vote(1, pp.digest(), {1, 2}, {1});
  EXPECT_TRUE(recorder_.heights.empty()) << "two commits of three";
  EXPECT_EQ(Consensus(SentSince(mark), ConsensusMessage::kCommit).size(), 1u);
  const int requests = tick_requests_;
  Vote(1, pp.digest(), {}, {2});
  EXPECT_EQ(recorder_.heights, std::vector<uint64_t>{1});
  EXPECT_GT(tick_requests_, requests) << "a commit frees the window: the next batch may be cut";
  EXPECT_EQ(locked_commits_, std::vector<uint64_t>{1});
  EXPECT_EQ(recorder_.txs, 2u);
  EXPECT_EQ(chain_.ledger->last_height(), 1u);
  EXPECT_EQ(pool_->Get(txs[0]->hash), nullptr);
  EXPECT_EQ(driver_->StateName(), "NORMAL");
}

// Group commit: while the primary's partial batch executes, the next partial one waits for it
// (however long it has waited); the commit asks for a tick and that tick cuts it.
TEST_F(ConsensusDriverTest, APartialBatchWaitsForThePrimarysProposalInFlight) {
  Build(0);
  AdmitAsClient(NewTx());
  size_t mark = Mark();
  driver_->Tick(clock_.NowNanos(), false);  // the tick admission asks for: it is seen ready
  clock_.Advance(absl::Milliseconds(10));
  driver_->Tick(clock_.NowNanos(), false);
  std::vector<ConsensusMessage> pps = Consensus(SentSince(mark), ConsensusMessage::kPrePrepare);
  ASSERT_EQ(pps.size(), 1u);
  const std::string digest = pps[0].pre_prepare().digest();
  AdmitAsClient(NewTx());
  mark = Mark();
  driver_->Tick(clock_.NowNanos(), false);  // the tick admission asks for: it is seen ready
  clock_.Advance(absl::Milliseconds(50));   // five times the delay
  // Past its delay, yet no wake for it: only timers (the retransmit timer, 500 ms from start).
  EXPECT_GE(driver_->Tick(clock_.NowNanos(), false), clock_.NowNanos() + 400 * kMs);
  EXPECT_TRUE(Consensus(SentSince(mark), ConsensusMessage::kPrePrepare).empty());
  const int requests = tick_requests_;
  Vote(1, digest, {1, 2}, {1, 2});
  EXPECT_EQ(chain_.ledger->last_height(), 1u);
  EXPECT_GT(tick_requests_, requests);
  driver_->Tick(clock_.NowNanos(), false);
  pps = Consensus(SentSince(mark), ConsensusMessage::kPrePrepare);
  ASSERT_EQ(pps.size(), 1u);
  EXPECT_EQ(pps[0].pre_prepare().seq(), 2u);
}

TEST_F(ConsensusDriverTest, ABackupFetchesMissingTxsFromThePrimaryThenPrepares) {
  Build(1);
  std::vector<TxPtr> txs = {NewTx(), NewTx()};
  size_t mark = Mark();
  driver_->OnConsensusMessage(0, PrePrepareFromPrimary(1, txs));
  std::vector<Out> out = SentSince(mark);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to, "n0") << "the first ask goes to the primary alone";
  EXPECT_EQ(out[0].channel, p2p::Channel::SYNC);
  ASSERT_TRUE(out[0].msg.has_fetch());
  EXPECT_EQ(out[0].msg.fetch().tx_hashes_size(), 2);
  EXPECT_TRUE(Consensus(out, ConsensusMessage::kPrepare).empty());

  mark = Mark();
  const int requests = tick_requests_;
  driver_->OnTxBatch(Bodies(txs));
  EXPECT_GT(tick_requests_, requests);
  std::vector<ConsensusMessage> prepares = Consensus(SentSince(mark), ConsensusMessage::kPrepare);
  ASSERT_EQ(prepares.size(), 1u);
  EXPECT_EQ(prepares[0].sender(), 1u);
  EXPECT_NE(pool_->Get(txs[1]->hash), nullptr);

  Vote(1, prepares[0].prepare().digest(), {2}, {0, 2});
  EXPECT_EQ(recorder_.heights, std::vector<uint64_t>{1});
  EXPECT_EQ(driver_->stats().dropped_bad_tx, 0u);
}

// A tx whose signature does not verify (one bit of it flipped); it decodes, and its hash is of
// its own bytes. No correct replica would vote for a batch holding it: the tests below use it to
// see whether a body was checked.
TxPtr WithBadSignature(const TxPtr& tx) {
  node::chain::SignedTransaction signed_tx;
  EXPECT_TRUE(signed_tx.ParseFromString(tx->signed_bytes));
  std::string sig = signed_tx.signature();
  sig[0] = static_cast<char>(sig[0] ^ 1);
  signed_tx.set_signature(sig);
  std::string bytes;
  EXPECT_TRUE(signed_tx.SerializeToString(&bytes));
  TxPtr bad = chaintest::Decode(bytes, kPartition);
  EXPECT_NE(bad, nullptr);
  EXPECT_FALSE(base::VerifySignature(*bad).ok());
  return bad;
}

// Bodies fetched for a batch that two other backups prepared (so at least one correct replica
// holds them checked) are taken without their signature check; a body nobody asked for is
// checked however it comes.
TEST_F(ConsensusDriverTest, FetchedBodiesOfABatchTwoOtherBackupsPreparedAreNotCheckedAgain) {
  Build(1);
  const TxPtr bad = WithBadSignature(NewTx());
  const std::vector<TxPtr> txs = {NewTx(), bad};
  const ConsensusMessage pp = PrePrepareFromPrimary(1, txs);
  driver_->OnConsensusMessage(0, pp);  // the bodies are missing: fetched
  Vote(1, pp.pre_prepare().digest(), {2, 3}, {});
  const TxPtr stray = WithBadSignature(NewTx());  // listed by no batch, never asked for
  size_t mark = Mark();
  // `bad` twice in one answer: handled once (a second copy would be checked, and refused).
  driver_->OnTxBatch(Bodies({txs[0], bad, bad, stray}));

  ConsensusDriver::Stats st = driver_->stats();
  EXPECT_EQ(st.fetched_certified, 2u);
  EXPECT_EQ(st.fetched_checked, 0u);
  EXPECT_EQ(st.dropped_bad_tx, 1u) << "the stray body only";
  EXPECT_NE(pool_->Get(bad->hash), nullptr);
  EXPECT_EQ(pool_->Get(stray->hash), nullptr);
  // Prepared with its own prepare, so it commits.
  std::vector<ConsensusMessage> prepares = Consensus(SentSince(mark), ConsensusMessage::kPrepare);
  ASSERT_EQ(prepares.size(), 1u);
  Vote(1, pp.pre_prepare().digest(), {}, {0, 2});
  EXPECT_EQ(recorder_.heights, std::vector<uint64_t>{1});
}

// One other backup's prepare, or two for another digest, certify nothing: every fetched body is
// checked, and the one that fails is refused.
TEST_F(ConsensusDriverTest, FetchedBodiesOfABatchNotCertifiedHereAreChecked) {
  for (const bool other_digest : {false, true}) {
    SCOPED_TRACE(other_digest ? "two prepares of another digest" : "one other backup's prepare");
    TearDown();
    Build(1);
    const TxPtr bad = WithBadSignature(NewTx());
    const std::vector<TxPtr> txs = {NewTx(), bad};
    const ConsensusMessage pp = PrePrepareFromPrimary(1, txs);
    driver_->OnConsensusMessage(0, pp);
    if (other_digest) {
      Vote(1, BatchDigest(Hashes({txs[0]})), {2, 3}, {});
    } else {
      Vote(1, pp.pre_prepare().digest(), {2}, {});
    }
    const size_t mark = Mark();
    driver_->OnTxBatch(Bodies(txs));

    ConsensusDriver::Stats st = driver_->stats();
    EXPECT_EQ(st.fetched_certified, 0u);
    EXPECT_EQ(st.fetched_checked, 1u);
    EXPECT_EQ(st.dropped_bad_tx, 1u);
    EXPECT_NE(pool_->Get(txs[0]->hash), nullptr);
    EXPECT_EQ(pool_->Get(bad->hash), nullptr);
    EXPECT_TRUE(Consensus(SentSince(mark), ConsensusMessage::kPrepare).empty())
        << "it still lacks a body";
  }
}

// The round's phases on the driver's clock: a backup that waits for the bodies, then for votes.
TEST_F(ConsensusDriverTest, ABackupTimesEachPhaseOfItsRounds) {
  slow_round_nanos_ = 20 * kMs;
  Build(1);
  std::vector<TxPtr> txs = {NewTx(), NewTx()};
  driver_->OnConsensusMessage(0, PrePrepareFromPrimary(1, txs));
  clock_.Advance(absl::Milliseconds(5));
  size_t mark = Mark();
  driver_->OnTxBatch(Bodies(txs));  // the fetched bodies: it prepares
  std::vector<ConsensusMessage> prepares = Consensus(SentSince(mark), ConsensusMessage::kPrepare);
  ASSERT_EQ(prepares.size(), 1u);
  clock_.Advance(absl::Milliseconds(7));
  Vote(1, prepares[0].prepare().digest(), {2}, {});  // prepared: it sends its commit
  clock_.Advance(absl::Milliseconds(11));
  Vote(1, prepares[0].prepare().digest(), {}, {0, 2});  // committed
  ASSERT_EQ(recorder_.heights, std::vector<uint64_t>{1});

  RoundTimes::Snapshot r = driver_->stats().rounds;
  EXPECT_EQ(r.accept.count, 1u);
  EXPECT_EQ(r.accept.sum, 5 * kMs) << "pre-prepare received -> prepare sent";
  EXPECT_EQ(r.prepare.sum, 7 * kMs) << "prepare sent -> commit sent";
  EXPECT_EQ(r.commit.sum, 11 * kMs) << "commit sent -> committed";
  EXPECT_EQ(r.apply.count, 1u);
  EXPECT_EQ(r.interval.count, 0u);
  EXPECT_EQ(r.cut_wait.count, 0u) << "a backup cuts nothing";
  EXPECT_EQ(r.slow_rounds, 1u) << "23 ms from the pre-prepare to applied, over 20";

  // A second block, its bodies already here: accepted at once, 30 ms after the first committed.
  std::vector<TxPtr> more = {NewTx()};
  driver_->OnTxBatch(Bodies(more));
  clock_.Advance(absl::Milliseconds(30));
  mark = Mark();
  driver_->OnConsensusMessage(0, PrePrepareFromPrimary(2, more));
  prepares = Consensus(SentSince(mark), ConsensusMessage::kPrepare);
  ASSERT_EQ(prepares.size(), 1u);
  Vote(2, prepares[0].prepare().digest(), {2}, {0, 2});
  ASSERT_EQ(recorder_.heights, (std::vector<uint64_t>{1, 2}));
  r = driver_->stats().rounds;
  EXPECT_EQ(r.accept.count, 2u);
  EXPECT_EQ(r.accept.sum, 5 * kMs);
  EXPECT_EQ(r.interval.count, 1u);
  EXPECT_EQ(r.interval.sum, 30 * kMs);
  EXPECT_EQ(r.slow_rounds, 1u) << "the second round took no time";
}

// Only a pre-prepare the replica could accept then is stamped: a faulty replica cannot fill the
// rounds kept with pre-prepares beyond the window or in another replica's name.
TEST_F(ConsensusDriverTest, OnlyAPrePrepareTheReplicaCouldAcceptIsStamped) {
  Build(1);
  std::vector<TxPtr> txs = {NewTx()};
  // Replica `from`'s pre-prepare for (view, seq), validly signed by it.
  auto pre_prepare = [&](uint32_t from, uint64_t view, uint64_t seq) {
    ConsensusMessage m = PrePrepareFromPrimary(seq, txs);
    m.mutable_pre_prepare()->set_view(view);
    m.mutable_pre_prepare()->set_proposer(from);
    return tests::SignedAs(from, std::move(m));
  };
  driver_->OnConsensusMessage(0, pre_prepare(0, 0, 65));  // beyond the window (h = 0, L = 64)
  driver_->OnConsensusMessage(0, pre_prepare(0, 0, 0));   // at the low watermark
  driver_->OnConsensusMessage(2, pre_prepare(2, 0, 2));   // not view 0's primary
  driver_->OnConsensusMessage(2, pre_prepare(2, 2, 3));   // view 2's primary, in view 0
  EXPECT_EQ(driver_->stats().rounds.open_rounds, 0u);
  driver_->OnConsensusMessage(0, pre_prepare(0, 0, 64));  // the window's last seq
  driver_->OnConsensusMessage(0, pre_prepare(0, 0, 1));
  EXPECT_EQ(driver_->stats().rounds.open_rounds, 2u);
}

// Out of NORMAL, even the next view's primary's pre-prepare is not stamped: it would time the
// view change.
TEST_F(ConsensusDriverTest, APrePrepareDuringAViewChangeIsNotStamped) {
  Build(2);
  driver_->OnTxBatch(Bodies({NewTx()}));  // forwarded, never proposed: the request timer runs
  driver_->Tick(clock_.NowNanos(), false);
  clock_.Advance(absl::Milliseconds(config_.request_timeout_ms));
  driver_->Tick(clock_.NowNanos(), false);
  ASSERT_EQ(driver_->StateName(), "VIEW_CHANGE");
  ASSERT_EQ(driver_->view(), 1u);
  ConsensusMessage m = PrePrepareFromPrimary(1, {NewTx()});
  m.mutable_pre_prepare()->set_view(1);
  m.mutable_pre_prepare()->set_proposer(1);
  driver_->OnConsensusMessage(1, tests::SignedAs(1, std::move(m)));
  EXPECT_EQ(driver_->stats().rounds.open_rounds, 0u);
}

// A replica that joins a new view straight from NORMAL (it never timed out itself) forgets the
// rounds it had open in the older view.
TEST_F(ConsensusDriverTest, JoiningAViewFromNormalForgetsTheOlderViewsRounds) {
  Build(2);
  std::vector<TxPtr> txs = {NewTx()};
  driver_->OnTxBatch(Bodies(txs));
  driver_->OnConsensusMessage(0, PrePrepareFromPrimary(1, txs));  // view 0: it prepares
  ASSERT_EQ(driver_->stats().rounds.open_rounds, 1u);
  // View 1's primary, replica 1, installs it with 2f+1 ViewChanges (genesis checkpoint, nothing
  // prepared anywhere, so nothing re-issued).
  ConsensusMessage nv;
  nv.mutable_new_view()->set_view(1);
  for (uint32_t r : {0u, 1u, 3u}) {
    ConsensusMessage vc;
    vc.mutable_view_change()->set_new_view(1);
    vc.mutable_view_change()->set_stable_digest(GenesisDigest());
    *nv.mutable_new_view()->add_view_changes() = tests::SignedAs(r, std::move(vc));
  }
  driver_->OnConsensusMessage(1, tests::SignedAs(1, std::move(nv)));
  ASSERT_EQ(driver_->view(), 1u);
  ASSERT_EQ(driver_->StateName(), "NORMAL");
  EXPECT_EQ(driver_->view_changes(), 0u) << "joined from NORMAL, no view change of its own";
  EXPECT_EQ(driver_->stats().rounds.open_rounds, 0u);
}

// The primary's cut wait: ready txs held until the batch policy's delay ran out.
TEST_F(ConsensusDriverTest, ThePrimaryTimesHowLongReadyTxsWaitedForTheCut) {
  Build(0);
  for (int i = 0; i < 2; ++i) AdmitAsClient(NewTx());
  size_t mark = Mark();
  driver_->Tick(clock_.NowNanos(), false);  // ready, but two of a batch of three: it waits
  clock_.Advance(absl::Milliseconds(10));
  driver_->Tick(clock_.NowNanos(), false);
  std::vector<ConsensusMessage> pps = Consensus(SentSince(mark), ConsensusMessage::kPrePrepare);
  ASSERT_EQ(pps.size(), 1u);
  clock_.Advance(absl::Milliseconds(4));
  Vote(1, pps[0].pre_prepare().digest(), {1, 2}, {});
  clock_.Advance(absl::Milliseconds(6));
  Vote(1, pps[0].pre_prepare().digest(), {}, {1, 2});
  ASSERT_EQ(recorder_.heights, std::vector<uint64_t>{1});
  const RoundTimes::Snapshot r = driver_->stats().rounds;
  EXPECT_EQ(r.cut_wait.count, 1u);
  EXPECT_EQ(r.cut_wait.sum, 10 * kMs);
  EXPECT_EQ(r.accept.count, 0u) << "the primary receives no pre-prepare";
  EXPECT_EQ(r.prepare.sum, 4 * kMs);
  EXPECT_EQ(r.commit.sum, 6 * kMs);
}

TEST_F(ConsensusDriverTest, EnvelopesNotSignedByTheirConnectionsReplicaAreDropped) {
  Build(1);
  std::vector<TxPtr> txs = {NewTx()};
  ConsensusMessage pp = PrePrepareFromPrimary(1, txs);
  size_t mark = Mark();
  driver_->OnConsensusMessage(2, pp);  // replica 0's message on replica 2's connection
  ConsensusMessage forged = pp;
  forged.mutable_pre_prepare()->set_seq(2);  // the signature no longer matches
  driver_->OnConsensusMessage(0, forged);
  EXPECT_EQ(driver_->stats().dropped_bad_signature, 2u);
  EXPECT_TRUE(SentSince(mark).empty());
  driver_->OnConsensusMessage(0, pp);
  EXPECT_EQ(SentSince(mark).size(), 1u);  // the fetch: the genuine one was taken
}

TEST_F(ConsensusDriverTest, AVoteAfterItsQuorumIsDroppedWithoutASignatureCheck) {
  Build(1);
  std::vector<TxPtr> txs = {NewTx()};
  driver_->OnTxBatch(Bodies(txs));
  const ConsensusMessage pp = PrePrepareFromPrimary(1, txs);
  const std::string digest = pp.pre_prepare().digest();
  driver_->OnConsensusMessage(0, pp);
  // A vote with a bad signature: only a check of it can tell.
  auto bad_vote = [&](bool commit, uint32_t from, const std::string& d) {
    ConsensusMessage m;
    if (commit) {
      m.mutable_commit()->set_seq(1);
      m.mutable_commit()->set_digest(d);
    } else {
      m.mutable_prepare()->set_seq(1);
      m.mutable_prepare()->set_digest(d);
    }
    m = tests::SignedAs(from, std::move(m));
    m.set_signature("not a signature");
    return m;
  };
  // Before the quorum, a vote is checked (and this one refused).
  EXPECT_FALSE(driver_->OnConsensusMessage(2, bad_vote(false, 2, digest)));
  EXPECT_EQ(driver_->stats().dropped_bad_signature, 1u);
  Vote(1, digest, {2}, {0, 2});
  ASSERT_EQ(recorder_.heights, std::vector<uint64_t>{1});
  // After it, replica 3's prepare and commit could change nothing: dropped unchecked.
  size_t mark = Mark();
  EXPECT_TRUE(driver_->OnConsensusMessage(3, bad_vote(false, 3, digest)));
  EXPECT_TRUE(driver_->OnConsensusMessage(3, bad_vote(true, 3, digest)));
  EXPECT_EQ(driver_->stats().redundant_votes, 2u);
  EXPECT_EQ(driver_->stats().dropped_bad_signature, 1u);
  EXPECT_TRUE(SentSince(mark).empty());
  // A vote for another digest is never redundant: checked, refused.
  EXPECT_FALSE(driver_->OnConsensusMessage(3, bad_vote(true, 3, std::string(32, 'x'))));
  EXPECT_EQ(driver_->stats().dropped_bad_signature, 2u);
  EXPECT_EQ(driver_->stats().redundant_votes, 2u);
}

TEST_F(ConsensusDriverTest, ForwardedTxsThatDoNotDecodeOrVerifyAreCountedAndNotPooled) {
  Build(1);
  TxPtr good = NewTx();
  std::string tampered = NewTx()->signed_bytes;
  tampered[tampered.size() / 2] ^= 0x01;
  node::partition::TxBatch batch;
  batch.add_signed_txs("not a transaction");
  batch.add_signed_txs(tampered);
  batch.add_signed_txs(good->signed_bytes);
  driver_->OnTxBatch(batch);
  EXPECT_EQ(driver_->stats().dropped_bad_tx, 2u);
  EXPECT_NE(pool_->Get(good->hash), nullptr);
  EXPECT_EQ(pool_->stats().txs, 1u);
}

TEST_F(ConsensusDriverTest, AFetchIsAnsweredFromThePoolAndTheLedgerOnSync) {
  Build(0);
  std::vector<TxPtr> txs = {NewTx(), NewTx(), NewTx()};  // a full batch: cut at once
  for (const TxPtr& t : txs) AdmitAsClient(t);
  driver_->Tick(clock_.NowNanos(), false);
  std::vector<ConsensusMessage> pps = Consensus(SentSince(0), ConsensusMessage::kPrePrepare);
  ASSERT_EQ(pps.size(), 1u);
  Vote(1, pps[0].pre_prepare().digest(), {1, 2}, {1, 2});
  ASSERT_EQ(chain_.ledger->last_height(), 1u);
  TxPtr pooled = NewTx();
  AdmitAsClient(pooled);

  node::partition::TxFetch fetch;
  fetch.add_tx_hashes(txs[0]->hash);          // committed: from the ledger
  fetch.add_tx_hashes(pooled->hash);          // pooled
  fetch.add_tx_hashes(std::string(32, 'x'));  // unknown: skipped
  fetch.add_tx_hashes(txs[2]->hash);          // committed, the same block: read once
  const size_t mark = Mark();
  driver_->OnFetch(2, fetch);
  std::vector<Out> out = SentSince(mark);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to, "n2");
  EXPECT_EQ(out[0].channel, p2p::Channel::SYNC);
  ASSERT_EQ(out[0].msg.txs().signed_txs_size(), 3);
  EXPECT_EQ(out[0].msg.txs().signed_txs(0), txs[0]->signed_bytes);
  EXPECT_EQ(out[0].msg.txs().signed_txs(1), pooled->signed_bytes);
  EXPECT_EQ(out[0].msg.txs().signed_txs(2), txs[2]->signed_bytes);
}

TEST_F(ConsensusDriverTest, ABackupWithPendingTxsAndNoProgressStartsAViewChangeOnItsTimer) {
  Build(1);
  driver_->OnTxBatch(Bodies({NewTx()}));    // forwarded to a backup, never proposed
  driver_->Tick(clock_.NowNanos(), false);  // reports the pending tx: the request timer starts
  clock_.Advance(absl::Milliseconds(config_.request_timeout_ms - 1));
  driver_->Tick(clock_.NowNanos(), false);
  EXPECT_EQ(driver_->StateName(), "NORMAL");
  const size_t mark = Mark();
  clock_.Advance(absl::Milliseconds(1));
  driver_->Tick(clock_.NowNanos(), false);
  EXPECT_EQ(driver_->StateName(), "VIEW_CHANGE");
  EXPECT_EQ(driver_->view(), 1u);
  EXPECT_EQ(driver_->view_changes(), 1u);
  std::vector<ConsensusMessage> vcs = Consensus(SentSince(mark), ConsensusMessage::kViewChange);
  ASSERT_EQ(vcs.size(), 1u);
  EXPECT_EQ(vcs[0].view_change().new_view(), 1u);
}

// No periodic tick: the driver says when it needs one (Tick's return value, wake_by for a timer
// set by a message or a tick, request_tick for work), and ticking only then keeps every timer on
// time.
TEST_F(ConsensusDriverTest, TheDriverAsksForEveryTickItNeedsAndNoOthers) {
  Build(1);
  const int64_t t0 = clock_.NowNanos();
  const int64_t retransmit = config_.retransmit_ms * 1'000'000;
  // Idle: the retransmit timer (armed at start, it re-arms itself) and the pool's expiry sweep.
  ASSERT_EQ(wakes_, std::vector<int64_t>{t0 + retransmit});
  EXPECT_EQ(driver_->Tick(t0, false), std::min(t0 + retransmit, t0 + 1'000'000'000));
  wakes_.clear();
  const int requests = tick_requests_;
  driver_->OnTxBatch(Bodies({NewTx()}));  // forwarded to this backup, never proposed
  EXPECT_EQ(tick_requests_, requests + 1);
  clock_.Advance(absl::Milliseconds(3));
  // The tick reports the pending tx; the replica's request timer asks for its time.
  int64_t next = driver_->Tick(clock_.NowNanos(), false);
  const int64_t timer_at = clock_.NowNanos() + config_.request_timeout_ms * 1'000'000;
  ASSERT_EQ(wakes_, std::vector<int64_t>{timer_at});
  // Ticked at exactly the times asked for: the view change starts when the timer is due.
  for (int ticks = 0; next < timer_at; ++ticks) {
    ASSERT_LT(ticks, 100);
    clock_.SetNanos(next);
    wakes_.clear();
    next = driver_->Tick(next, false);
    for (int64_t w : wakes_) next = std::min(next, w);
    next = std::min(next, timer_at);
    ASSERT_EQ(driver_->StateName(), "NORMAL");
  }
  clock_.SetNanos(timer_at);
  wakes_.clear();
  driver_->Tick(timer_at, false);
  EXPECT_EQ(driver_->StateName(), "VIEW_CHANGE");
  // The view-change timer asked for its own time.
  ASSERT_FALSE(wakes_.empty());
  EXPECT_GT(*std::min_element(wakes_.begin(), wakes_.end()), timer_at);
}

TEST_F(ConsensusDriverTest, AFailedConsensusStoreWriteHaltsTheDriverForGood) {
  Build(0);
  EXPECT_EQ(driver_->halt_reason(), "");
  store_.FailWrites(true);
  std::vector<TxPtr> txs = {NewTx(), NewTx(), NewTx()};
  for (const TxPtr& t : txs) AdmitAsClient(t);
  driver_->Tick(clock_.NowNanos(), false);
  EXPECT_EQ(driver_->state(), kHaltedState);
  EXPECT_EQ(driver_->StateName(), "HALTED");
  // Status readers are told why (the store's error, as the operator needs it).
  EXPECT_NE(driver_->halt_reason().find("fake consensus store: writes fail"), std::string::npos)
      << driver_->halt_reason();
  EXPECT_TRUE(Consensus(SentSince(0), ConsensusMessage::kPrePrepare).empty())
      << "nothing is sent that the store did not keep";
  // Halted for good: writes work again, but nothing is proposed or voted.
  store_.FailWrites(false);
  const size_t mark = Mark();
  clock_.Advance(absl::Seconds(10));
  // The timers it had set are due by now, but a halted driver fires none: it asks for no tick
  // before the pool's next expiry sweep (it once asked for one at once, forever).
  const int64_t next = driver_->Tick(clock_.NowNanos(), false);
  EXPECT_GT(next, clock_.NowNanos());
  EXPECT_GT(driver_->Tick(clock_.NowNanos(), false), clock_.NowNanos());
  Vote(1, BatchDigest(Hashes(txs)), {1, 2}, {1, 2});
  for (const Out& o : SentSince(mark)) EXPECT_FALSE(o.msg.has_consensus());
  EXPECT_EQ(chain_.ledger->last_height(), 0u);
}

TEST_F(ConsensusDriverTest, CommitEventsArePublishedOutsideTheDriversLock) {
  Build(0);
  // A subscriber that calls back into the driver would deadlock if events were published under
  // its lock.
  int reentered = 0;
  recorder_.on_commit = [&] {
    driver_->Tick(clock_.NowNanos(), /*paused=*/true);
    ++reentered;
  };
  std::vector<TxPtr> txs = {NewTx(), NewTx(), NewTx()};
  for (const TxPtr& t : txs) AdmitAsClient(t);
  driver_->Tick(clock_.NowNanos(), false);
  std::vector<ConsensusMessage> pps = Consensus(SentSince(0), ConsensusMessage::kPrePrepare);
  ASSERT_EQ(pps.size(), 1u);
  Vote(1, pps[0].pre_prepare().digest(), {1, 2}, {1, 2});
  EXPECT_EQ(reentered, 1);
  EXPECT_EQ(recorder_.heights, std::vector<uint64_t>{1});
}

}  // namespace
}  // namespace partitions
