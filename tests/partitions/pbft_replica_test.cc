// Unit tests for PbftReplica: one test (or more) per message handler, view change with prepared
// certificates carried over, persistence across restart, checkpoints and block sync.
#include "partitions/pbft_replica.h"

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "tests/partitions/pbft_test_util.h"

namespace partitions {
namespace {

using ::node::consensus::CommittedBatch;
using testing::ActionsOf;
using testing::MakeCheckpoint;
using testing::MakeCommit;
using testing::MakePrepare;
using testing::MakePrePrepare;
using testing::ReplicaHarness;
using testing::Sent;
using testing::Tx;
using ::tests::SignedAs;

constexpr auto kPP = ConsensusMessage::kPrePrepare;
constexpr auto kPrep = ConsensusMessage::kPrepare;
constexpr auto kCom = ConsensusMessage::kCommit;
constexpr auto kVC = ConsensusMessage::kViewChange;
constexpr auto kNV = ConsensusMessage::kNewView;
constexpr auto kCkpt = ConsensusMessage::kCheckpoint;

const std::vector<std::string> kBatch = {Tx(1), Tx(2)};

// Drives `h` (a backup in view `view`) through pre-prepare + prepares from two others, so it
// holds a prepared certificate for (view, seq, kBatch).
void Prepare(ReplicaHarness& h, uint64_t view, uint64_t seq,
             const std::vector<std::string>& batch = kBatch) {
  const uint32_t primary = h.config.PrimaryOf(view);
  for (const auto& tx : batch) h.pool.have.insert(tx);
  h.Deliver(MakePrePrepare(view, seq, batch, primary));
  const std::string d = BatchDigest(batch);
  for (uint32_t r = 0; r < h.config.n; ++r) {
    if (r != primary && r != h.config.self) h.Deliver(MakePrepare(view, seq, d, r));
  }
}

// Makes `h` time out on pending work and start a view change.
std::vector<PbftAction> TimeOut(ReplicaHarness& h) {
  h.replica->Step(PbftPendingRequests{1});
  return h.replica->Step(PbftTimerFired{PbftTimer::kRequest});
}

// Commits (view, seq, batch) at `h` with commits from all others.
std::vector<PbftAction> CommitAll(ReplicaHarness& h, uint64_t view, uint64_t seq,
                                  const std::vector<std::string>& batch = kBatch) {
  Prepare(h, view, seq, batch);
  std::vector<PbftAction> all;
  for (uint32_t r = 0; r < h.config.n; ++r) {
    if (r == h.config.self) continue;
    auto a = h.Deliver(MakeCommit(view, seq, BatchDigest(batch), r));
    all.insert(all.end(), a.begin(), a.end());
  }
  return all;
}

// A checkpoint every 2 seqs, a window of 4 (and up to 4 proposals in flight).
PbftConfig SmallWindow() {
  PbftConfig c;
  c.checkpoint_interval = 2;
  c.window = 4;
  c.max_inflight = 4;
  return c;
}

// SmallWindow, with room for 6 seqs and snapshots from 4 behind.
PbftConfig SnapshotWindow() {
  PbftConfig c = SmallWindow();
  c.window = 8;
  c.snapshot_min_gap = 4;
  return c;
}

TEST(PbftConfigTest, Validate) {
  PbftConfig c;
  EXPECT_TRUE(c.Validate().ok());
  c.n = 5;
  EXPECT_FALSE(c.Validate().ok());
  c = PbftConfig{};
  c.window = 24;  // not a multiple of K = 16
  EXPECT_FALSE(c.Validate().ok());
  c = PbftConfig{};
  c.self = 4;
  EXPECT_FALSE(c.Validate().ok());
}

TEST(PbftReplicaTest, PrimaryProposesAndPersistsPrePrepare) {
  ReplicaHarness h(0);
  ASSERT_TRUE(h.replica->IsPrimary());
  ASSERT_TRUE(h.replica->CanPropose());
  auto actions = h.replica->Step(PbftBatchReady{kBatch});
  auto pps = Sent(actions, kPP);
  ASSERT_EQ(pps.size(), 1u);
  EXPECT_EQ(pps[0].pre_prepare().seq(), 1u);
  EXPECT_EQ(pps[0].pre_prepare().view(), 0u);
  EXPECT_EQ(pps[0].pre_prepare().digest(), BatchDigest(kBatch));
  EXPECT_TRUE(h.crypto.Verify(pps[0]));
  EXPECT_EQ(h.store.log_size(), 1u);
  // A backup never proposes.
  ReplicaHarness b(1);
  EXPECT_FALSE(b.replica->CanPropose());
  EXPECT_TRUE(b.replica->Step(PbftBatchReady{kBatch}).empty());
}

TEST(PbftReplicaTest, PrimaryPipelinesWithinInflightLimit) {
  PbftConfig c;
  c.max_inflight = 3;
  ReplicaHarness h(0, c);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(h.replica->CanPropose());
    h.replica->Step(PbftBatchReady{{Tx(10 + i)}});
  }
  EXPECT_FALSE(h.replica->CanPropose());
}

TEST(PbftReplicaTest, BackupPreparesOnValidPrePrepare) {
  ReplicaHarness h(1);
  h.pool.have = {Tx(1), Tx(2)};
  auto actions = h.Deliver(MakePrePrepare(0, 1, kBatch, 0));
  auto prepares = Sent(actions, kPrep);
  ASSERT_EQ(prepares.size(), 1u);
  EXPECT_EQ(prepares[0].prepare().digest(), BatchDigest(kBatch));
  EXPECT_EQ(prepares[0].sender(), 1u);
}

TEST(PbftReplicaTest, FetchesMissingTxsBeforePreparing) {
  ReplicaHarness h(1);
  h.pool.have = {Tx(1)};
  auto actions = h.Deliver(MakePrePrepare(0, 1, kBatch, 0));
  EXPECT_TRUE(Sent(actions, kPrep).empty());
  auto fetches = ActionsOf<PbftFetchTxs>(actions);
  ASSERT_EQ(fetches.size(), 1u);
  EXPECT_EQ(fetches[0].tx_hashes, std::vector<std::string>{Tx(2)});
  EXPECT_EQ(fetches[0].seq, 1u);
  h.pool.have.insert(Tx(2));
  actions = h.replica->Step(PbftTxsAvailable{{Tx(2)}});
  EXPECT_EQ(Sent(actions, kPrep).size(), 1u);
}

// A batch is certified (its fetched bodies need no check) once two backups other than this one
// prepared its digest; a pre-prepare alone, or with one such prepare, is not.
TEST(PbftReplicaTest, ABatchIsCertifiedByTwoOtherBackupsPrepares) {
  ReplicaHarness h(1);
  h.Deliver(MakePrePrepare(0, 1, kBatch, 0));  // its bodies missing: it waits
  std::vector<std::string> got;
  auto collect = [&](const std::string& x) { got.push_back(x); };
  EXPECT_FALSE(h.replica->ForEachCertifiedTx(1, collect));
  h.Deliver(MakePrepare(0, 1, BatchDigest(kBatch), 2));
  EXPECT_FALSE(h.replica->ForEachCertifiedTx(1, collect));
  h.Deliver(MakePrepare(0, 1, BatchDigest(kBatch), 3));
  EXPECT_TRUE(h.replica->ForEachCertifiedTx(1, collect));
  EXPECT_EQ(got, kBatch);
  EXPECT_FALSE(h.replica->ForEachCertifiedTx(2, collect)) << "no batch there";
}

// A batch committed here while an earlier one waits for its bodies is certified too.
TEST(PbftReplicaTest, ACommittedBatchWaitingToExecuteIsCertified) {
  ReplicaHarness h(1);
  const std::vector<std::string> second = {Tx(3)};
  h.pool.have = {Tx(3)};
  h.Deliver(MakePrePrepare(0, 1, kBatch, 0));  // seq 1's bodies are missing: nothing executes
  h.Deliver(MakePrePrepare(0, 2, second, 0));
  for (uint32_t r : {2u, 3u}) h.Deliver(MakePrepare(0, 2, BatchDigest(second), r));
  for (uint32_t r : {0u, 2u, 3u}) h.Deliver(MakeCommit(0, 2, BatchDigest(second), r));
  std::vector<std::string> got;
  EXPECT_TRUE(h.replica->ForEachCertifiedTx(2, [&](const std::string& x) { got.push_back(x); }));
  EXPECT_EQ(got, second);
  EXPECT_EQ(h.replica->last_executed(), 0u);
  EXPECT_FALSE(h.replica->ForEachCertifiedTx(1, [](const std::string&) {}));
}

TEST(PbftReplicaTest, DropsPrePrepareFromNonPrimaryAndBadDigest) {
  ReplicaHarness h(1);
  h.pool.have = {Tx(1), Tx(2)};
  EXPECT_TRUE(Sent(h.Deliver(MakePrePrepare(0, 1, kBatch, 2)), kPrep).empty());
  ConsensusMessage bad = MakePrePrepare(0, 1, kBatch, 0);
  bad.mutable_pre_prepare()->set_digest(std::string(32, 'x'));
  EXPECT_TRUE(Sent(h.Deliver(SignedAs(0, bad)), kPrep).empty());
  EXPECT_EQ(h.replica->counters().dropped_invalid, 2u);
}

TEST(PbftReplicaTest, DropsConflictingDuplicateStaleOutsideAndNonReplica) {
  PbftConfig c;
  c.checkpoint_interval = 4;
  c.window = 8;
  c.max_inflight = 8;
  ReplicaHarness h(1, c);
  h.pool.have = {Tx(1), Tx(2), Tx(3)};
  h.Deliver(MakePrePrepare(0, 1, kBatch, 0));
  h.Deliver(MakePrePrepare(0, 1, kBatch, 0));
  EXPECT_EQ(h.replica->counters().dropped_duplicate, 1u);
  auto a = h.Deliver(MakePrePrepare(0, 1, {Tx(3)}, 0));  // same view+seq, other batch
  EXPECT_TRUE(Sent(a, kPrep).empty());
  EXPECT_EQ(h.replica->counters().dropped_conflicting, 1u);
  h.Deliver(MakePrePrepare(0, 9, {Tx(3)}, 0));  // above h + L = 8
  EXPECT_EQ(h.replica->counters().dropped_outside_watermarks, 1u);
  ConsensusMessage stranger = MakePrepare(0, 1, BatchDigest(kBatch), 7);
  h.Deliver(stranger);
  EXPECT_EQ(h.replica->counters().dropped_not_replica, 1u);
  // Prepare: duplicate, then a conflicting vote from the same sender.
  h.Deliver(MakePrepare(0, 1, BatchDigest(kBatch), 2));
  h.Deliver(MakePrepare(0, 1, BatchDigest(kBatch), 2));
  h.Deliver(MakePrepare(0, 1, std::string(32, 'z'), 2));
  EXPECT_EQ(h.replica->counters().dropped_duplicate, 2u);
  EXPECT_EQ(h.replica->counters().dropped_conflicting, 2u);
  // A prepare from the primary is not a vote.
  h.Deliver(MakePrepare(0, 1, BatchDigest(kBatch), 0));
  EXPECT_EQ(h.replica->counters().dropped_invalid, 1u);
}

TEST(PbftReplicaTest, PreparedSendsCommitAndQuorumCommits) {
  ReplicaHarness h(1);
  h.pool.have = {Tx(1), Tx(2)};
  h.Deliver(MakePrePrepare(0, 1, kBatch, 0));
  EXPECT_TRUE(Sent(h.Deliver(MakePrepare(0, 1, BatchDigest(kBatch), 2)), kCom).size() == 1u);
  auto a = h.Deliver(MakeCommit(0, 1, BatchDigest(kBatch), 2));
  EXPECT_TRUE(ActionsOf<PbftCommit>(a).empty());  // 2 of 3
  a = h.Deliver(MakeCommit(0, 1, BatchDigest(kBatch), 3));
  auto commits = ActionsOf<PbftCommit>(a);
  ASSERT_EQ(commits.size(), 1u);
  EXPECT_EQ(commits[0].seq, 1u);
  EXPECT_EQ(commits[0].tx_hashes, kBatch);
  EXPECT_EQ(commits[0].certificate.size(), 3u);
  EXPECT_EQ(commits[0].chain_digest, ChainDigest(GenesisDigest(), 1, BatchDigest(kBatch)));
  EXPECT_EQ(h.replica->last_executed(), 1u);
}

TEST(PbftReplicaTest, VotesAfterTheirQuorumAreRedundantAndChangeNothing) {
  ReplicaHarness h(1);
  h.pool.have = {Tx(1), Tx(2)};
  const std::string d = BatchDigest(kBatch);
  h.Deliver(MakePrePrepare(0, 1, kBatch, 0));
  EXPECT_FALSE(h.replica->Redundant(MakePrepare(0, 1, d, 2)));
  ASSERT_EQ(Sent(h.Deliver(MakePrepare(0, 1, d, 2)), kCom).size(), 1u);  // prepared
  const ConsensusMessage late_prepare = MakePrepare(0, 1, d, 3);
  EXPECT_TRUE(h.replica->Redundant(late_prepare));
  EXPECT_FALSE(h.replica->Redundant(MakePrepare(0, 1, Tx(9), 3)));  // a conflict is not
  EXPECT_FALSE(h.replica->Redundant(MakeCommit(0, 1, d, 0)));       // not committed yet
  h.Deliver(MakeCommit(0, 1, d, 0));
  ASSERT_EQ(ActionsOf<PbftCommit>(h.Deliver(MakeCommit(0, 1, d, 2))).size(), 1u);
  const ConsensusMessage late_commit = MakeCommit(0, 1, d, 3);
  EXPECT_TRUE(h.replica->Redundant(late_commit));
  EXPECT_FALSE(h.replica->Redundant(MakeCommit(0, 1, d, 1)));  // our own, or no replica
  EXPECT_FALSE(h.replica->Redundant(MakeCommit(0, 1, d, 7)));
  // What the driver drops would have done nothing: stepped, they send and commit nothing.
  for (const ConsensusMessage& late : {late_prepare, late_commit}) {
    auto a = h.Deliver(late);
    EXPECT_TRUE(ActionsOf<PbftSend>(a).empty());
    EXPECT_TRUE(ActionsOf<PbftBroadcast>(a).empty());
    EXPECT_TRUE(ActionsOf<PbftCommit>(a).empty());
  }
  EXPECT_EQ(h.replica->last_executed(), 1u);
}

TEST(PbftReplicaTest, ExecutesStrictlyInSeqOrder) {
  ReplicaHarness h(1);
  auto a2 = CommitAll(h, 0, 2, {Tx(5)});
  EXPECT_TRUE(ActionsOf<PbftCommit>(a2).empty());  // seq 1 not committed yet
  auto a1 = CommitAll(h, 0, 1);
  auto commits = ActionsOf<PbftCommit>(a1);
  ASSERT_EQ(commits.size(), 2u);
  EXPECT_EQ(commits[0].seq, 1u);
  EXPECT_EQ(commits[1].seq, 2u);
}

TEST(PbftReplicaTest, StableCheckpointAdvancesWatermarkAndCollectsLog) {
  const PbftConfig c = SmallWindow();
  ReplicaHarness h(1, c);
  CommitAll(h, 0, 1);
  auto a = CommitAll(h, 0, 2, {Tx(7)});
  auto own = Sent(a, kCkpt);
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(own[0].checkpoint().seq(), 2u);
  EXPECT_EQ(h.replica->low_watermark(), 0u);
  const std::string digest = h.replica->chain_digest();
  const size_t log_before = h.store.log_size();
  h.Deliver(MakeCheckpoint(2, digest, 2));
  h.Deliver(MakeCheckpoint(2, digest, 3));
  EXPECT_EQ(h.replica->low_watermark(), 2u);
  EXPECT_LT(h.store.log_size(), log_before);
  // Now seq 6 = h + L is inside the window, seq 7 is not.
  h.pool.have.insert(Tx(9));
  EXPECT_EQ(Sent(h.Deliver(MakePrePrepare(0, 6, {Tx(9)}, 0)), kPrep).size(), 1u);
  h.Deliver(MakePrePrepare(0, 7, {Tx(9)}, 0));
  EXPECT_EQ(h.replica->counters().dropped_outside_watermarks, 1u);
}

// Builds replica `from`'s ViewChange for `view` with the given certificates (genesis checkpoint).
ConsensusMessage MakeViewChange(uint64_t view, uint32_t from,
                                const std::vector<node::consensus::PreparedCertificate>& certs) {
  ConsensusMessage m;
  auto* vc = m.mutable_view_change();
  vc->set_new_view(view);
  vc->set_stable_digest(GenesisDigest());
  for (const auto& c : certs) *vc->add_prepared() = c;
  return SignedAs(from, m);
}

node::consensus::PreparedCertificate MakeCert(uint64_t view, uint64_t seq,
                                              const std::vector<std::string>& batch,
                                              uint32_t n = 4) {
  node::consensus::PreparedCertificate cert;
  const uint32_t primary = static_cast<uint32_t>(view % n);
  *cert.mutable_pre_prepare() = MakePrePrepare(view, seq, batch, primary);
  int added = 0;
  for (uint32_t r = 0; r < n && added < 2; ++r) {
    if (r == primary) continue;
    *cert.add_prepares() = MakePrepare(view, seq, BatchDigest(batch), r);
    ++added;
  }
  return cert;
}

TEST(PbftReplicaTest, RequestTimerStartsViewChangeWithBackoff) {
  ReplicaHarness h(2);
  auto a = h.replica->Step(PbftPendingRequests{5});
  ASSERT_EQ(ActionsOf<PbftSetTimer>(a).size(), 1u);
  EXPECT_EQ(ActionsOf<PbftSetTimer>(a)[0].timer, PbftTimer::kRequest);
  a = h.replica->Step(PbftTimerFired{PbftTimer::kRequest});
  EXPECT_EQ(h.replica->state(), ConsensusState::kViewChange);
  EXPECT_EQ(h.replica->view(), 1u);
  auto vcs = Sent(a, kVC);
  ASSERT_EQ(vcs.size(), 1u);
  EXPECT_EQ(vcs[0].view_change().new_view(), 1u);
  auto states = ActionsOf<PbftStateChanged>(a);
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].state, ConsensusState::kViewChange);
  auto vc_timer = [](const std::vector<PbftAction>& actions) {
    int64_t delay = 0;
    for (const auto& t : ActionsOf<PbftSetTimer>(actions)) {
      if (t.timer == PbftTimer::kViewChange) delay = t.delay_ms;
    }
    return delay;
  };
  const int64_t first = vc_timer(a);
  // Alone in view 1: the timer re-sends the same ViewChange and does not escalate.
  a = h.replica->Step(PbftTimerFired{PbftTimer::kViewChange});
  EXPECT_EQ(h.replica->view(), 1u);
  ASSERT_EQ(Sent(a, kVC).size(), 1u);
  EXPECT_EQ(Sent(a, kVC)[0].SerializeAsString(), vcs[0].SerializeAsString());
  EXPECT_EQ(vc_timer(a), first);
  // 2f+1 joined view 1 and its NewView did not come: escalate with a doubled timeout.
  h.Deliver(MakeViewChange(1, 0, {}));
  h.Deliver(MakeViewChange(1, 3, {}));
  a = h.replica->Step(PbftTimerFired{PbftTimer::kViewChange});
  EXPECT_EQ(h.replica->view(), 2u);
  EXPECT_EQ(vc_timer(a), 2 * first);
}

// The request timer is per view. A replica whose request timer was running when f+1 others pulled
// it into a view change must not carry that timer into the new view: it once fired right after
// the NewView installed and sent the new primary into a view change against itself.
TEST(PbftViewChangeTest, RequestTimerRestartsWithTheNewView) {
  ReplicaHarness h(1);  // primary of view 1
  auto a = h.replica->Step(PbftPendingRequests{5});
  ASSERT_EQ(ActionsOf<PbftSetTimer>(a).size(), 1u);  // request timer armed in view 0
  h.Deliver(MakeViewChange(1, 2, {}));
  a = h.Deliver(MakeViewChange(1, 3, {}));  // f+1: joins, then 2f+1: sends NewView, installs
  ASSERT_EQ(Sent(a, kNV).size(), 1u);
  ASSERT_EQ(h.replica->state(), ConsensusState::kNormal);
  ASSERT_EQ(h.replica->view(), 1u);
  // The view-0 timer was cancelled, and a fresh one armed after the install.
  int cancel_at = -1, arm_at = -1;
  for (int i = 0; i < static_cast<int>(a.size()); ++i) {
    if (auto* c = std::get_if<PbftCancelTimer>(&a[i]); c && c->timer == PbftTimer::kRequest) {
      cancel_at = i;
    }
    if (auto* t = std::get_if<PbftSetTimer>(&a[i]); t && t->timer == PbftTimer::kRequest) {
      arm_at = i;
      // Twice the base: it left view 0, which made no progress in time at f+1 others.
      EXPECT_EQ(t->delay_ms, 2 * h.config.request_timeout_ms);
    }
  }
  EXPECT_GE(cancel_at, 0);
  EXPECT_GT(arm_at, cancel_at);
}

// Castro & Liskov's "wait 2T": a view that the request timer ended without a commit gives the next
// view twice the request timeout, until a batch executes. Without it, replicas whose first commit
// in a new view takes longer than the timeout change views for ever (the simulator's
// slow_quorum fault).
TEST(PbftViewChangeTest, AViewEndedByTheRequestTimerGivesTheNextTwiceTheTimeoutUntilACommit) {
  auto request_timer = [](const std::vector<PbftAction>& actions) {
    int64_t delay = 0;
    for (const auto& t : ActionsOf<PbftSetTimer>(actions)) {
      if (t.timer == PbftTimer::kRequest) delay = t.delay_ms;
    }
    return delay;
  };
  ReplicaHarness p(1);  // primary of view 1
  const int64_t base = p.config.request_timeout_ms;
  TimeOut(p);
  p.Deliver(MakeViewChange(1, 2, {}));
  auto a = p.Deliver(MakeViewChange(1, 3, {}));
  auto nvs = Sent(a, kNV);
  ASSERT_EQ(nvs.size(), 1u);
  EXPECT_EQ(request_timer(a), 2 * base);

  ReplicaHarness b(3);
  TimeOut(b);
  a = b.Deliver(nvs[0]);
  ASSERT_EQ(b.replica->state(), ConsensusState::kNormal);
  EXPECT_EQ(request_timer(a), 2 * base);
  // A batch executes in view 1: progress, the timer starts over from the base timeout.
  a = CommitAll(b, 1, 1);
  ASSERT_EQ(b.replica->last_executed(), 1u);
  EXPECT_EQ(request_timer(a), base);
}

TEST(PbftViewChangeTest, ViewChangeCarriesPreparedCertificate) {
  ReplicaHarness h(2);
  Prepare(h, 0, 1);  // prepared, not committed
  auto a = h.replica->Step(PbftTimerFired{PbftTimer::kRequest});
  auto vcs = Sent(a, kVC);
  ASSERT_EQ(vcs.size(), 1u);
  const auto& vc = vcs[0].view_change();
  ASSERT_EQ(vc.prepared_size(), 1u);
  EXPECT_EQ(vc.prepared(0).pre_prepare().pre_prepare().seq(), 1u);
  EXPECT_EQ(vc.prepared(0).prepares_size(), 2);
  PbftValidator validator(h.config, &h.crypto);
  EXPECT_TRUE(validator.ValidViewChange(vcs[0]));
}

TEST(PbftViewChangeTest, NewPrimaryReissuesPreparedBatchAndFillsGapsWithNull) {
  ReplicaHarness h(1);  // primary of view 1
  h.pool.have = {Tx(1), Tx(2)};
  TimeOut(h);  // own VC for view 1 (nothing prepared)
  h.Deliver(MakeViewChange(1, 2, {MakeCert(0, 2, kBatch)}));
  auto a = h.Deliver(MakeViewChange(1, 3, {}));
  auto nvs = Sent(a, kNV);
  ASSERT_EQ(nvs.size(), 1u);
  const auto& nv = nvs[0].new_view();
  ASSERT_EQ(nv.pre_prepares_size(), 2);
  EXPECT_EQ(nv.pre_prepares(0).pre_prepare().seq(), 1u);  // gap: null batch
  EXPECT_EQ(nv.pre_prepares(0).pre_prepare().tx_hashes_size(), 0);
  EXPECT_EQ(nv.pre_prepares(1).pre_prepare().seq(), 2u);
  EXPECT_EQ(nv.pre_prepares(1).pre_prepare().digest(), BatchDigest(kBatch));
  EXPECT_EQ(nv.pre_prepares(1).pre_prepare().view(), 1u);
  EXPECT_EQ(h.replica->state(), ConsensusState::kNormal);
  EXPECT_EQ(h.replica->view(), 1u);
  EXPECT_TRUE(h.replica->IsPrimary());

  // A backup in view change accepts that NewView and prepares the re-issued batch in view 1.
  ReplicaHarness b(3);
  b.pool.have = {Tx(1), Tx(2)};
  TimeOut(b);
  auto ba = b.Deliver(nvs[0]);
  EXPECT_EQ(b.replica->state(), ConsensusState::kNormal);
  EXPECT_EQ(b.replica->view(), 1u);
  auto prepares = Sent(ba, kPrep);
  ASSERT_EQ(prepares.size(), 2u);
  EXPECT_EQ(prepares[1].prepare().view(), 1u);
  EXPECT_EQ(prepares[1].prepare().seq(), 2u);
  EXPECT_EQ(prepares[1].prepare().digest(), BatchDigest(kBatch));
}

TEST(PbftViewChangeTest, HigherViewCertificateWins) {
  ReplicaHarness h(1);
  h.pool.have = {Tx(1), Tx(2), Tx(3)};
  TimeOut(h);
  // Certificates for seq 1 from view 0 (kBatch) and from a later view... only views < 1 exist
  // for new view 1, so use new view 5 (primary 1) with certs from views 0 and 4: f+1 others
  // asking for view 5 pull this replica there, and with its own it has 2f+1.
  h.Deliver(MakeViewChange(5, 2, {MakeCert(0, 1, kBatch)}));
  auto a = h.Deliver(MakeViewChange(5, 3, {MakeCert(4, 1, {Tx(3)})}));
  ASSERT_EQ(h.replica->view(), 5u);
  auto nvs = Sent(a, kNV);
  ASSERT_EQ(nvs.size(), 1u);
  ASSERT_EQ(nvs[0].new_view().pre_prepares_size(), 1);
  EXPECT_EQ(nvs[0].new_view().pre_prepares(0).pre_prepare().digest(), BatchDigest({Tx(3)}));
}

TEST(PbftViewChangeTest, RejectsNewViewThatDropsAPreparedBatch) {
  ReplicaHarness b(3);
  TimeOut(b);
  ConsensusMessage nv;
  nv.mutable_new_view()->set_view(1);
  *nv.mutable_new_view()->add_view_changes() = MakeViewChange(1, 0, {});
  *nv.mutable_new_view()->add_view_changes() = MakeViewChange(1, 1, {});
  *nv.mutable_new_view()->add_view_changes() = MakeViewChange(1, 2, {MakeCert(0, 1, kBatch)});
  // The primary "forgets" the prepared batch at seq 1 and proposes another one.
  *nv.mutable_new_view()->add_pre_prepares() = MakePrePrepare(1, 1, {Tx(9)}, 1);
  b.Deliver(SignedAs(1, nv));
  EXPECT_EQ(b.replica->state(), ConsensusState::kViewChange);
  EXPECT_EQ(b.replica->counters().dropped_invalid, 1u);
}

TEST(PbftViewChangeTest, RejectsViewChangeWithForgedCertificate) {
  ReplicaHarness h(1);
  auto cert = MakeCert(0, 1, kBatch);
  cert.mutable_prepares(0)->set_signature("forged");
  h.Deliver(MakeViewChange(1, 2, {cert}));
  EXPECT_EQ(h.replica->counters().dropped_invalid, 1u);
}

TEST(PbftViewChangeTest, FPlusOneViewChangesPullALaggardAlong) {
  ReplicaHarness h(3);
  h.Deliver(MakeViewChange(1, 1, {}));
  EXPECT_EQ(h.replica->state(), ConsensusState::kNormal);
  auto a = h.Deliver(MakeViewChange(1, 2, {}));
  EXPECT_EQ(h.replica->state(), ConsensusState::kViewChange);
  EXPECT_EQ(Sent(a, kVC).size(), 1u);
}

// A replica whose view change nobody joined (it was cut off or paused) while f+1 others commit
// in view 0: it follows view 0 without signing anything in it, and executes what they commit.
TEST(PbftObserverTest, LoneViewChangeFollowsTheLowerViewWithoutSigning) {
  ReplicaHarness h(1);
  auto vcs = Sent(TimeOut(h), kVC);
  ASSERT_EQ(vcs.size(), 1u);
  ASSERT_EQ(h.replica->state(), ConsensusState::kViewChange);
  h.pool.have = {Tx(1), Tx(2)};
  const std::string d = BatchDigest(kBatch);
  h.Deliver(MakeCommit(0, 1, d, 2));
  EXPECT_EQ(h.replica->state(), ConsensusState::kViewChange);  // f senders prove nothing
  auto a = h.Deliver(MakeCommit(0, 1, d, 3));
  EXPECT_EQ(h.replica->state(), ConsensusState::kNormal);
  EXPECT_EQ(h.replica->view(), 0u);
  EXPECT_TRUE(h.replica->observing());
  EXPECT_EQ(h.replica->counters().views_observed, 1u);
  EXPECT_TRUE(h.replica->CanPropose() == false);
  // The batch goes through view 0 again; the observer prepares and commits nothing.
  a = CommitAll(h, 0, 1);
  EXPECT_TRUE(Sent(a, kPrep).empty());
  EXPECT_TRUE(Sent(a, kCom).empty());
  ASSERT_EQ(ActionsOf<PbftCommit>(a).size(), 1u);
  EXPECT_EQ(h.replica->last_executed(), 1u);
  // Its ViewChange keeps being re-sent, so the others hold it when they move.
  a = h.replica->Step(PbftTimerFired{PbftTimer::kRetransmit});
  ASSERT_EQ(Sent(a, kVC).size(), 1u);
  EXPECT_EQ(Sent(a, kVC)[0].SerializeAsString(), vcs[0].SerializeAsString());
}

TEST(PbftObserverTest, StalledLowerViewSendsTheObserverBackToItsViewChange) {
  ReplicaHarness h(1);
  auto vcs = Sent(TimeOut(h), kVC);
  const std::string d = BatchDigest(kBatch);
  h.Deliver(MakeCommit(0, 1, d, 2));
  h.Deliver(MakeCommit(0, 1, d, 3));
  ASSERT_TRUE(h.replica->observing());
  // No progress in view 0: the request timer resumes the same view change (no new, lower one).
  auto a = TimeOut(h);
  EXPECT_EQ(h.replica->state(), ConsensusState::kViewChange);
  EXPECT_EQ(h.replica->view(), 1u);
  ASSERT_EQ(Sent(a, kVC).size(), 1u);
  EXPECT_EQ(Sent(a, kVC)[0].SerializeAsString(), vcs[0].SerializeAsString());
  EXPECT_EQ(h.replica->counters().view_changes_started, 1u);
}

TEST(PbftObserverTest, ObserverJoinsWhenTheOthersMoveAndInstallsTheNewView) {
  ReplicaHarness h(1);  // primary of view 1
  TimeOut(h);
  const std::string d = BatchDigest(kBatch);
  h.Deliver(MakeCommit(0, 1, d, 2));
  h.Deliver(MakeCommit(0, 1, d, 3));
  ASSERT_TRUE(h.replica->observing());
  h.Deliver(MakeViewChange(1, 2, {}));
  auto a = h.Deliver(MakeViewChange(1, 3, {}));
  EXPECT_EQ(Sent(a, kNV).size(), 1u);
  EXPECT_EQ(h.replica->state(), ConsensusState::kNormal);
  EXPECT_EQ(h.replica->view(), 1u);
  EXPECT_FALSE(h.replica->observing());
  EXPECT_TRUE(h.replica->CanPropose());
}

// Short of 2f+1 for its view, but another replica asks for a higher one (it went back to its own
// earlier ViewChange): the timer joins that view instead of waiting for ever.
TEST(PbftViewChangeTest, StuckViewChangeJoinsAViewAnotherReplicaAnnounced) {
  ReplicaHarness h(2);
  TimeOut(h);
  h.Deliver(MakeViewChange(1, 3, {}));  // 2 of 3 for view 1
  h.Deliver(MakeViewChange(3, 0, {}));  // one replica (fewer than f+1) asks for view 3
  ASSERT_EQ(h.replica->view(), 1u);
  auto a = h.replica->Step(PbftTimerFired{PbftTimer::kViewChange});
  EXPECT_EQ(h.replica->view(), 3u);
  ASSERT_EQ(Sent(a, kVC).size(), 1u);
  EXPECT_EQ(Sent(a, kVC)[0].view_change().new_view(), 3u);
}

TEST(PbftObserverTest, RestartWhileObservingResumesTheViewChange) {
  ReplicaHarness h(1);
  TimeOut(h);
  const std::string d = BatchDigest(kBatch);
  h.Deliver(MakeCommit(0, 1, d, 2));
  h.Deliver(MakeCommit(0, 1, d, 3));
  ASSERT_TRUE(h.replica->observing());
  h.Start();
  EXPECT_EQ(h.replica->state(), ConsensusState::kViewChange);
  EXPECT_EQ(h.replica->view(), 1u);
}

TEST(PbftPersistenceTest, RestartNeverSignsAConflictingPrepare) {
  ReplicaHarness h(1);
  h.pool.have = {Tx(1), Tx(2), Tx(3)};
  h.Deliver(MakePrePrepare(0, 1, kBatch, 0));
  h.Start();  // crash and restart from the store
  auto a = h.Deliver(MakePrePrepare(0, 1, {Tx(3)}, 0));
  EXPECT_TRUE(Sent(a, kPrep).empty());
  EXPECT_EQ(h.replica->counters().dropped_conflicting, 1u);
}

TEST(PbftPersistenceTest, RestartKeepsPreparedCertificateForViewChange) {
  ReplicaHarness h(2);
  Prepare(h, 0, 1);
  h.Start();
  auto vcs = Sent(h.replica->Step(PbftTimerFired{PbftTimer::kRequest}), kVC);
  ASSERT_EQ(vcs.size(), 1u);
  ASSERT_EQ(vcs[0].view_change().prepared_size(), 1);
  EXPECT_EQ(vcs[0].view_change().prepared(0).pre_prepare().pre_prepare().digest(),
            BatchDigest(kBatch));
  // And it restarts into the view change it had started, not back into view 0.
  h.Start();
  EXPECT_EQ(h.replica->view(), 1u);
  EXPECT_EQ(h.replica->state(), ConsensusState::kViewChange);
}

// A backup persists a pre-prepare with its own prepare. One that restarts while it waits for the
// bodies of a batch the installed view's NewView re-issued takes that pre-prepare back from the
// persisted NewView, and prepares once the bodies come, without the primary's retransmission.
TEST(PbftPersistenceTest, RestartKeepsTheNewViewsReissuedBatchWaitingForItsBodies) {
  ReplicaHarness p(1);  // primary of view 1
  p.pool.have = {Tx(1), Tx(2)};
  TimeOut(p);
  p.Deliver(MakeViewChange(1, 2, {MakeCert(0, 2, kBatch)}));
  auto nvs = Sent(p.Deliver(MakeViewChange(1, 3, {})), kNV);
  ASSERT_EQ(nvs.size(), 1u);

  ReplicaHarness b(3);
  b.pool.have = {Tx(1)};  // Tx(2) still to come
  TimeOut(b);
  auto a = b.Deliver(nvs[0]);
  ASSERT_EQ(b.replica->view(), 1u);
  for (const ConsensusMessage& m : Sent(a, kPrep)) ASSERT_NE(m.prepare().seq(), 2u);
  b.Start();  // crash and restart from the store
  ASSERT_EQ(b.replica->view(), 1u);
  ASSERT_EQ(b.replica->state(), ConsensusState::kNormal);
  b.pool.have.insert(Tx(2));
  auto after = b.replica->Step(PbftTxsAvailable{{Tx(2)}});
  std::vector<ConsensusMessage> prepares;
  for (const ConsensusMessage& m : Sent(after, kPrep)) {
    if (m.prepare().seq() == 2) prepares.push_back(m);
  }
  ASSERT_EQ(prepares.size(), 1u);
  EXPECT_EQ(prepares[0].prepare().view(), 1u);
  EXPECT_EQ(prepares[0].prepare().digest(), BatchDigest(kBatch));
}

TEST(PbftPersistenceTest, StoreFailureHaltsTheReplica) {
  ReplicaHarness h(0);
  h.store.FailWrites(true);
  EXPECT_TRUE(h.replica->Step(PbftBatchReady{kBatch}).empty());
  EXPECT_FALSE(h.replica->status().ok());
  EXPECT_TRUE(h.replica->Step(PbftTimerFired{PbftTimer::kRetransmit}).empty());
}

// Commits seqs 1..k at `src` and returns the committed batches as a block source would.
// Has `src` commit seqs first..k (one tx each) and returns them as block sync serves them.
std::map<uint64_t, CommittedBatch> CommittedAt(ReplicaHarness& src, int k, int first = 1) {
  std::map<uint64_t, CommittedBatch> out;
  for (int s = first; s <= k; ++s) {
    for (const auto& c : ActionsOf<PbftCommit>(CommitAll(src, 0, s, {Tx(100 + s)}))) {
      CommittedBatch b;
      b.set_seq(c.seq);
      for (const auto& h : c.tx_hashes) b.add_tx_hashes(h);
      for (const auto& m : c.certificate) *b.add_commit_certificate() = m;
      out[c.seq] = b;
    }
  }
  return out;
}

TEST(PbftSyncTest, BehindStableCheckpointRecoversThroughSync) {
  const PbftConfig c = SmallWindow();
  ReplicaHarness src(2, c);
  auto batches = CommittedAt(src, 2);
  ASSERT_EQ(batches.size(), 2u);
  const std::string digest = src.replica->chain_digest();

  ReplicaHarness h(3, c);
  for (int s = 1; s <= 2; ++s) h.pool.have.insert(Tx(100 + s));
  h.Deliver(MakeCheckpoint(2, digest, 0));
  h.Deliver(MakeCheckpoint(2, digest, 1));
  auto a = h.Deliver(MakeCheckpoint(2, digest, 2));
  EXPECT_EQ(h.replica->state(), ConsensusState::kRecovering);
  auto reqs = Sent(a, ConsensusMessage::kSyncRequest);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].sync_request().from_seq(), 1u);

  // The peer answers from its block source.
  src.blocks.batches = batches;
  auto resp = Sent(src.Deliver(reqs[0]), ConsensusMessage::kSyncResponse);
  ASSERT_EQ(resp.size(), 1u);
  ASSERT_EQ(resp[0].sync_response().batches_size(), 2);
  a = h.Deliver(resp[0]);
  auto commits = ActionsOf<PbftCommit>(a);
  ASSERT_EQ(commits.size(), 2u);
  EXPECT_EQ(h.replica->last_executed(), 2u);
  EXPECT_EQ(h.replica->chain_digest(), digest);
  EXPECT_EQ(h.replica->state(), ConsensusState::kNormal);
}

// Far behind a stable checkpoint (PbftConfig::snapshot_min_gap), a replica asks its owner for
// the state there (the agreed chain digest and root) instead of the batches, executes and asks
// for nothing meanwhile, and once it is installed goes on from there by block sync to a newer
// checkpoint. Installs it did not ask for change nothing.
TEST(PbftSyncTest, FarBehindAReplicaWantsTheCheckpointsStateAndGoesOnFromIt) {
  const PbftConfig c = SnapshotWindow();
  ReplicaHarness src(2, c);
  std::map<uint64_t, std::string> chain;
  std::map<uint64_t, CommittedBatch> batches = CommittedAt(src, 4);
  chain[4] = src.replica->chain_digest();
  batches.merge(CommittedAt(src, 6, /*first=*/5));
  chain[6] = src.replica->chain_digest();
  src.blocks.batches = batches;

  ReplicaHarness h(3, c);
  for (int s = 1; s <= 6; ++s) h.pool.have.insert(Tx(100 + s));
  // One vote short of a quorum: an unasked install is ignored.
  h.Deliver(MakeCheckpoint(4, chain[4], 0));
  h.Deliver(MakeCheckpoint(4, chain[4], 1));
  EXPECT_TRUE(h.replica->Step(PbftSnapshotInstalled{4, chain[4]}).empty());
  EXPECT_EQ(h.replica->last_executed(), 0u);
  auto a = h.Deliver(MakeCheckpoint(4, chain[4], 2));
  auto wanted = ActionsOf<PbftSnapshotWanted>(a);
  ASSERT_EQ(wanted.size(), 1u);
  EXPECT_EQ(wanted[0].seq, 4u);
  EXPECT_EQ(wanted[0].chain_digest, chain[4]);
  EXPECT_EQ(wanted[0].state_root, testing::ModelRoot(chain[4]));
  EXPECT_TRUE(Sent(a, ConsensusMessage::kSyncRequest).empty()) << "no batches: the state";
  EXPECT_EQ(h.replica->state(), ConsensusState::kRecovering);
  EXPECT_TRUE(
      Sent(h.replica->Step(PbftTimerFired{PbftTimer::kRetransmit}), ConsensusMessage::kSyncRequest)
          .empty());

  // A newer checkpoint meanwhile is wanted too (the owner may switch to it).
  h.Deliver(MakeCheckpoint(6, chain[6], 0));
  h.Deliver(MakeCheckpoint(6, chain[6], 1));
  wanted = ActionsOf<PbftSnapshotWanted>(h.Deliver(MakeCheckpoint(6, chain[6], 2)));
  ASSERT_EQ(wanted.size(), 1u);
  EXPECT_EQ(wanted[0].seq, 6u);
  EXPECT_TRUE(h.replica->Step(PbftSnapshotInstalled{8, "x"}).empty()) << "never wanted";

  // The owner installed the one at 4: block sync takes it to 6.
  a = h.replica->Step(PbftSnapshotInstalled{4, chain[4]});
  EXPECT_EQ(h.replica->last_executed(), 4u);
  EXPECT_EQ(h.replica->chain_digest(), chain[4]);
  EXPECT_EQ(h.replica->counters().snapshots_installed, 1u);
  auto reqs = Sent(a, ConsensusMessage::kSyncRequest);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].sync_request().from_seq(), 5u);
  auto resp = Sent(src.Deliver(reqs[0]), ConsensusMessage::kSyncResponse);
  ASSERT_EQ(resp.size(), 1u);
  a = h.Deliver(resp[0]);
  EXPECT_EQ(ActionsOf<PbftCommit>(a).size(), 2u);
  EXPECT_EQ(h.replica->last_executed(), 6u);
  EXPECT_EQ(h.replica->chain_digest(), chain[6]);
  EXPECT_EQ(h.replica->state(), ConsensusState::kNormal);
}

// When its owner gives up on the snapshots (no progress for long), the replica block-syncs from
// its own tip, and wants no snapshot again.
TEST(PbftSyncTest, AnAbandonedSnapshotFallsBackToBlockSync) {
  const PbftConfig c = SnapshotWindow();
  ReplicaHarness src(2, c);
  src.blocks.batches = CommittedAt(src, 6);
  const std::string chain6 = src.replica->chain_digest();
  ReplicaHarness h(3, c);
  for (int s = 1; s <= 6; ++s) h.pool.have.insert(Tx(100 + s));
  h.Deliver(MakeCheckpoint(6, chain6, 0));
  h.Deliver(MakeCheckpoint(6, chain6, 1));
  ASSERT_EQ(ActionsOf<PbftSnapshotWanted>(h.Deliver(MakeCheckpoint(6, chain6, 2))).size(), 1u);
  auto a = h.replica->Step(PbftSnapshotAbandoned{});
  auto reqs = Sent(a, ConsensusMessage::kSyncRequest);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].sync_request().from_seq(), 1u);
  // Batches 1..6 come in two responses of sync_chunk each at most; then it is NORMAL at 6.
  for (int round = 0; round < 4 && h.replica->last_executed() < 6; ++round) {
    auto resp = Sent(src.Deliver(reqs[0]), ConsensusMessage::kSyncResponse);
    ASSERT_EQ(resp.size(), 1u);
    a = h.Deliver(resp[0]);
    EXPECT_TRUE(ActionsOf<PbftSnapshotWanted>(a).empty());
    reqs = Sent(a, ConsensusMessage::kSyncRequest);
    if (h.replica->last_executed() < 6) {
      ASSERT_EQ(reqs.size(), 1u);
    }
  }
  EXPECT_EQ(h.replica->last_executed(), 6u);
  EXPECT_EQ(h.replica->chain_digest(), chain6);
  EXPECT_EQ(h.replica->state(), ConsensusState::kNormal);
}

// A replica that missed the checkpoint votes asks for batches its peers no longer keep (pruned):
// the answer carries the peer's stable checkpoint, whose 2f+1 signed votes make it stable here
// too, and the replica wants the state there instead. A forged proof is refused.
TEST(PbftSyncTest, APeerThatPrunedTheBatchesPointsAtItsStableCheckpoint) {
  const PbftConfig c = SnapshotWindow();
  ReplicaHarness src(2, c);
  std::map<uint64_t, CommittedBatch> batches = CommittedAt(src, 6);
  const std::string chain6 = src.replica->chain_digest();
  src.Deliver(MakeCheckpoint(6, chain6, 0));
  src.Deliver(MakeCheckpoint(6, chain6, 1));
  ASSERT_EQ(src.replica->low_watermark(), 6u);
  src.blocks.batches = {{6, batches[6]}};  // pruned below 6

  ReplicaHarness h(3, c);
  for (int s = 1; s <= 6; ++s) h.pool.have.insert(Tx(100 + s));
  // f+1 votes above it (not a quorum): it is behind, and asks for the batches after its tip.
  h.Deliver(MakeCheckpoint(6, chain6, 0));
  h.Deliver(MakeCheckpoint(6, chain6, 1));
  auto reqs =
      Sent(h.replica->Step(PbftTimerFired{PbftTimer::kRetransmit}), ConsensusMessage::kSyncRequest);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].sync_request().from_seq(), 1u);
  auto resp = Sent(src.Deliver(reqs[0]), ConsensusMessage::kSyncResponse);
  ASSERT_EQ(resp.size(), 1u);
  EXPECT_EQ(resp[0].sync_response().batches_size(), 0);
  ASSERT_EQ(resp[0].sync_response().stable().seq(), 6u);

  // A proof one vote short (re-signed by the peer) changes nothing.
  ConsensusMessage forged = resp[0];
  forged.mutable_sync_response()->mutable_stable()->mutable_proof()->RemoveLast();
  forged.clear_signature();
  auto a = h.Deliver(SignedAs(2, forged));
  EXPECT_TRUE(ActionsOf<PbftSnapshotWanted>(a).empty());
  EXPECT_EQ(h.replica->low_watermark(), 0u);
  EXPECT_EQ(h.replica->counters().dropped_invalid, 1u);

  a = h.Deliver(resp[0]);
  EXPECT_EQ(h.replica->low_watermark(), 6u);
  auto wanted = ActionsOf<PbftSnapshotWanted>(a);
  ASSERT_EQ(wanted.size(), 1u);
  EXPECT_EQ(wanted[0].seq, 6u);
  EXPECT_EQ(wanted[0].chain_digest, chain6);
  EXPECT_EQ(h.replica->state(), ConsensusState::kRecovering);
}

// A replica that missed the checkpoint votes (it was cut off while the others went on) keeps its
// old low watermark and refuses what is beyond that window. f+1 replicas sending beyond it are
// evidence that it is behind (f would not be: they could be lying): on a stalled retransmit
// period it asks for batches, naming its stable checkpoint, and the answer carries the peer's
// later one, which moves its window. (Before, it waited for the next checkpoint's votes, and in
// a quiet partition a quorum that needed it could commit nothing: the quiet_rejoin simulation.)
TEST(PbftSyncTest, F1PeersBeyondTheWindowMakeAReplicaAskAndTheAnswerMovesItsWindow) {
  PbftConfig c = SmallWindow();
  c.window = 8;  // room for 6 seqs above a checkpoint
  ReplicaHarness src(2, c);
  src.blocks.batches = CommittedAt(src, 6);
  const std::string chain6 = src.replica->chain_digest();
  src.Deliver(MakeCheckpoint(6, chain6, 0));
  src.Deliver(MakeCheckpoint(6, chain6, 1));
  ASSERT_EQ(src.replica->low_watermark(), 6u);

  ReplicaHarness h(3, c);
  for (int s = 1; s <= 9; ++s) h.pool.have.insert(Tx(100 + s));
  const std::vector<std::string> batch9 = {Tx(109)};
  const ConsensusMessage pre_prepare9 = MakePrePrepare(0, 9, batch9, 0);
  auto retransmit = [&h] {
    return Sent(h.replica->Step(PbftTimerFired{PbftTimer::kRetransmit}),
                ConsensusMessage::kSyncRequest);
  };
  // Seq 9 is beyond (0, 8]. One replica there is not enough.
  h.Deliver(MakePrepare(0, 9, BatchDigest(batch9), 1));
  EXPECT_EQ(h.replica->counters().dropped_outside_watermarks, 1u);
  EXPECT_TRUE(retransmit().empty());
  h.Deliver(pre_prepare9);
  EXPECT_EQ(h.replica->counters().dropped_outside_watermarks, 2u);
  auto reqs = retransmit();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].sync_request().from_seq(), 1u);
  EXPECT_EQ(reqs[0].sync_request().known_stable_seq(), 0u);

  auto resp = Sent(src.Deliver(reqs[0]), ConsensusMessage::kSyncResponse);
  ASSERT_EQ(resp.size(), 1u);
  EXPECT_EQ(resp[0].sync_response().batches_size(), 6);
  ASSERT_EQ(resp[0].sync_response().stable().seq(), 6u);
  const std::vector<PbftAction> synced = h.Deliver(resp[0]);
  EXPECT_EQ(ActionsOf<PbftCommit>(synced).size(), 6u);
  EXPECT_TRUE(Sent(synced, ConsensusMessage::kSyncRequest).empty())
      << "the batches in hand reach the checkpoint: nothing to ask for, not them again";
  EXPECT_EQ(h.replica->last_executed(), 6u);
  EXPECT_EQ(h.replica->low_watermark(), 6u);
  EXPECT_EQ(h.replica->state(), ConsensusState::kNormal);

  // The primary's pre-prepare for 9, re-sent, is in the window now: the replica prepares it.
  auto prepares = Sent(h.Deliver(pre_prepare9), ConsensusMessage::kPrepare);
  ASSERT_EQ(prepares.size(), 1u);
  EXPECT_EQ(prepares[0].prepare().seq(), 9u);
  EXPECT_EQ(h.replica->counters().dropped_outside_watermarks, 2u);
  // A peer that knows the checkpoint gets batches without it.
  reqs[0].mutable_sync_request()->set_known_stable_seq(6);
  reqs[0].clear_signature();
  resp = Sent(src.Deliver(SignedAs(3, reqs[0])), ConsensusMessage::kSyncResponse);
  ASSERT_EQ(resp.size(), 1u);
  EXPECT_FALSE(resp[0].sync_response().has_stable());
}

// Block sync delivers hashes and certificates, not bodies. A replica that lacks the bodies of the
// batches it holds asks for all of them at once (one round trip per chunk, not per batch),
// checking each held batch once per retransmit period.
TEST(PbftSyncTest, ASyncedChunkWithoutBodiesIsFetchedInOneGo) {
  PbftConfig c = SmallWindow();
  c.window = 8;
  ReplicaHarness src(2, c);
  src.blocks.batches = CommittedAt(src, 4);
  ReplicaHarness h(3, c);
  ConsensusMessage req;
  req.mutable_sync_request()->set_from_seq(1);
  req.mutable_sync_request()->set_to_seq(4);
  auto resp = Sent(src.Deliver(SignedAs(3, req)), ConsensusMessage::kSyncResponse);
  ASSERT_EQ(resp.size(), 1u);
  ASSERT_EQ(resp[0].sync_response().batches_size(), 4);

  // It holds the bodies of batches 2 and 4, not those of 1 and 3.
  h.pool.have = {Tx(102), Tx(104)};
  auto a = h.Deliver(resp[0]);
  EXPECT_TRUE(ActionsOf<PbftCommit>(a).empty());
  std::set<std::string> asked;
  for (const PbftFetchTxs& f : ActionsOf<PbftFetchTxs>(a)) {
    asked.insert(f.tx_hashes.begin(), f.tx_hashes.end());
  }
  EXPECT_EQ(asked, (std::set<std::string>{Tx(101), Tx(103)}));
  // Held with their commit certificates, the synced batches are certified; each fetch names its
  // batch.
  for (const PbftFetchTxs& f : ActionsOf<PbftFetchTxs>(a)) {
    ASSERT_EQ(f.tx_hashes.size(), 1u);
    EXPECT_EQ(f.tx_hashes[0], Tx(100 + static_cast<int>(f.seq)));
  }
  std::vector<std::string> certified;
  EXPECT_TRUE(
      h.replica->ForEachCertifiedTx(3, [&](const std::string& x) { certified.push_back(x); }));
  EXPECT_EQ(certified, std::vector<std::string>{Tx(103)});
  // An unrelated tx arrives: batch 1's body is looked up again, the other held batches' are not
  // (checked this period, whether their bodies were there or asked for).
  const int lookups = h.pool.lookups;
  a = h.Step(PbftTxsAvailable{{Tx(999)}});
  EXPECT_TRUE(ActionsOf<PbftFetchTxs>(a).empty());
  EXPECT_EQ(h.pool.lookups - lookups, 1);
  // A new retransmit period asks again for what is still missing (a fetch may have been lost).
  asked.clear();
  for (const PbftFetchTxs& f :
       ActionsOf<PbftFetchTxs>(h.Step(PbftTimerFired{PbftTimer::kRetransmit}))) {
    asked.insert(f.tx_hashes.begin(), f.tx_hashes.end());
  }
  EXPECT_EQ(asked, (std::set<std::string>{Tx(101), Tx(103)}));
  // Batch 2's body leaves the pool meanwhile. Batch 1's arrives: 1 executes, and 2's body is
  // asked for when it is needed (found there before does not mean asked for).
  h.pool.have.erase(Tx(102));
  h.pool.have.insert(Tx(101));
  a = h.Step(PbftTxsAvailable{{Tx(101)}});
  EXPECT_EQ(ActionsOf<PbftCommit>(a).size(), 1u);
  auto fetches = ActionsOf<PbftFetchTxs>(a);
  ASSERT_EQ(fetches.size(), 1u);
  EXPECT_EQ(fetches[0].tx_hashes, std::vector<std::string>{Tx(102)});
  for (int s : {2, 3}) h.pool.have.insert(Tx(100 + s));
  a = h.Step(PbftTxsAvailable{{Tx(102), Tx(103)}});
  EXPECT_EQ(ActionsOf<PbftCommit>(a).size(), 3u);
  EXPECT_EQ(h.replica->last_executed(), 4u);
  EXPECT_FALSE(h.replica->ForEachCertifiedTx(3, [](const std::string&) {}))
      << "executed: its txs are in the ledger";
}

// A seq executed by block sync is voted for again only as the batch executed there: a faulty
// primary's other batch for it gets no prepare; the batch executed gets one, bodies or not.
TEST(PbftSyncTest, ASeqExecutedBySyncIsPreparedOnlyAsTheBatchExecuted) {
  ReplicaHarness src(2);
  std::map<uint64_t, CommittedBatch> batches = CommittedAt(src, 1);
  const std::vector<std::string> executed(batches[1].tx_hashes().begin(),
                                          batches[1].tx_hashes().end());
  for (const bool same : {false, true}) {
    SCOPED_TRACE(same ? "the batch executed" : "another batch");
    ReplicaHarness h(1);
    h.pool.have.insert(executed.begin(), executed.end());
    ConsensusMessage resp;
    *resp.mutable_sync_response()->add_batches() = batches[1];
    ASSERT_EQ(ActionsOf<PbftCommit>(h.Deliver(SignedAs(2, resp))).size(), 1u);
    ASSERT_EQ(h.replica->last_executed(), 1u);
    h.blocks.batches = batches;  // its ledger holds what it executed
    h.pool.have.clear();         // and its pool no longer the bodies
    auto a = h.Deliver(MakePrePrepare(0, 1, same ? executed : std::vector<std::string>{Tx(7)}, 0));
    EXPECT_EQ(Sent(a, kPrep).size(), same ? 1u : 0u);
    EXPECT_EQ(h.replica->counters().dropped_conflicting, same ? 0u : 1u);
  }
}

TEST(PbftSyncTest, RejectsForgedCommitCertificate) {
  ReplicaHarness src(2);
  auto batches = CommittedAt(src, 1);
  ReplicaHarness h(3);
  h.pool.have.insert(Tx(101));
  ConsensusMessage resp;
  CommittedBatch forged = batches[1];
  forged.mutable_commit_certificate(1)->set_signature("forged");
  *resp.mutable_sync_response()->add_batches() = forged;
  auto a = h.Deliver(SignedAs(2, resp));
  EXPECT_TRUE(ActionsOf<PbftCommit>(a).empty());
  EXPECT_EQ(h.replica->counters().dropped_invalid, 1u);
  // The genuine one is applied.
  ConsensusMessage good;
  *good.mutable_sync_response()->add_batches() = batches[1];
  EXPECT_EQ(ActionsOf<PbftCommit>(h.Deliver(SignedAs(2, good))).size(), 1u);
}

TEST(PbftNewViewRequestTest, InstalledReplicaHandsOverItsNewView) {
  ReplicaHarness h(1);
  TimeOut(h);
  h.Deliver(MakeViewChange(1, 2, {}));
  h.Deliver(MakeViewChange(1, 3, {}));
  ASSERT_EQ(h.replica->state(), ConsensusState::kNormal);
  ConsensusMessage req;
  req.mutable_new_view_request()->set_min_view(1);
  auto a = h.Deliver(SignedAs(0, req));
  auto nvs = Sent(a, kNV);
  ASSERT_EQ(nvs.size(), 1u);
  EXPECT_EQ(nvs[0].new_view().view(), 1u);
}

// A checkpoint vote needs the state root, which exists only once the commit is executed: the
// commit asks for it, and the vote (chain digest and root, bound by its digest) goes out when
// the executor reports it. A report nobody asked for changes nothing.
TEST(PbftStateRootTest, TheCheckpointVoteWaitsForTheExecutedStateRoot) {
  const PbftConfig c = SmallWindow();
  ReplicaHarness h(1, c);
  CommitAll(h, 0, 1);
  Prepare(h, 0, 2, {Tx(7)});
  std::vector<PbftAction> a;
  for (uint32_t r : {0u, 2u, 3u}) {
    auto more = h.replica->Step(PbftMessage{MakeCommit(0, 2, BatchDigest({Tx(7)}), r)});
    a.insert(a.end(), more.begin(), more.end());
  }
  auto commits = ActionsOf<PbftCommit>(a);
  ASSERT_EQ(commits.size(), 1u);
  EXPECT_TRUE(commits[0].report_state_root);
  EXPECT_TRUE(Sent(a, kCkpt).empty()) << "no vote before the root is known";
  // A root nobody asked for (a checkpoint seq not executed yet) signs nothing.
  EXPECT_TRUE(Sent(h.replica->Step(PbftExecuted{4, std::string(32, 'x')}), kCkpt).empty());

  const std::string root = std::string(32, 'r');
  auto votes = Sent(h.replica->Step(PbftExecuted{2, root}), kCkpt);
  ASSERT_EQ(votes.size(), 1u);
  EXPECT_EQ(votes[0].checkpoint().seq(), 2u);
  EXPECT_EQ(votes[0].checkpoint().chain_digest(), h.replica->chain_digest());
  EXPECT_EQ(votes[0].checkpoint().state_root(), root);
  EXPECT_TRUE(WellFormedCheckpoint(votes[0].checkpoint()));
  EXPECT_TRUE(h.crypto.Verify(votes[0]));
  // Reported twice: the second is not asked for any more.
  EXPECT_TRUE(Sent(h.replica->Step(PbftExecuted{2, root}), kCkpt).empty());
}

// 2f+1 others sign a state root at seq 2 that differs from this replica's own vote: it is
// DIVERGED, with the height and both roots, and signs nothing from then on (not even when its
// timers fire or a new proposal arrives).
TEST(PbftStateRootTest, AStableCheckpointWithAnotherRootMakesTheReplicaDiverged) {
  const PbftConfig c = SmallWindow();
  ReplicaHarness h(1, c);
  h.wrong_from = 2;
  CommitAll(h, 0, 1);
  auto own = Sent(CommitAll(h, 0, 2, {Tx(7)}), kCkpt);
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(own[0].checkpoint().state_root(), h.wrong_root);
  const std::string chain = h.replica->chain_digest();
  h.Deliver(MakeCheckpoint(2, chain, 0));
  h.Deliver(MakeCheckpoint(2, chain, 2));
  EXPECT_EQ(h.replica->state(), ConsensusState::kNormal) << "2 matching votes are no quorum";
  EXPECT_TRUE(h.Deliver(MakeCheckpoint(2, chain, 3)).empty());

  EXPECT_EQ(h.replica->state(), ConsensusState::kDiverged);
  EXPECT_EQ(h.replica->status().code(), absl::StatusCode::kDataLoss);
  ASSERT_TRUE(h.replica->divergence().has_value());
  const PbftReplica::Divergence& d = *h.replica->divergence();
  EXPECT_EQ(d.seq, 2u);
  EXPECT_EQ(d.own_state_root, h.wrong_root);
  EXPECT_EQ(d.agreed_state_root, testing::ModelRoot(chain));
  EXPECT_EQ(d.own_chain_digest, chain);
  EXPECT_EQ(d.agreed_chain_digest, chain);
  EXPECT_NE(d.ToString().find("state diverged at height 2"), std::string::npos) << d.ToString();
  EXPECT_NE(d.ToString().find(absl::BytesToHexString(h.wrong_root)), std::string::npos);
  EXPECT_EQ(h.replica->low_watermark(), 0u) << "a state it does not have is not made stable";
  h.pool.have.insert(Tx(9));
  EXPECT_TRUE(h.Deliver(MakePrePrepare(0, 3, {Tx(9)}, 0)).empty());
  EXPECT_TRUE(h.replica->Step(PbftTimerFired{PbftTimer::kRetransmit}).empty());
}

// The same checkpoint with matching roots is simply stable (the control for the test above).
TEST(PbftStateRootTest, MatchingRootsMakeTheCheckpointStable) {
  const PbftConfig c = SmallWindow();
  ReplicaHarness h(1, c);
  CommitAll(h, 0, 1);
  CommitAll(h, 0, 2, {Tx(7)});
  const std::string chain = h.replica->chain_digest();
  for (uint32_t r : {0u, 2u}) h.Deliver(MakeCheckpoint(2, chain, r));
  EXPECT_EQ(h.replica->low_watermark(), 2u);
  EXPECT_EQ(h.replica->state(), ConsensusState::kNormal);
  EXPECT_FALSE(h.replica->divergence().has_value());
}

// A replica that reaches a stable checkpoint by block sync, with no vote of its own there,
// checks its executed root against the agreed one when the executor reports it.
TEST(PbftStateRootTest, AReplicaSyncedToAStableCheckpointChecksItsRootThere) {
  const PbftConfig c = SmallWindow();
  ReplicaHarness src(2, c);
  src.blocks.batches = CommittedAt(src, 2);
  const std::string chain = src.replica->chain_digest();
  for (const bool planted : {false, true}) {
    ReplicaHarness h(3, c);
    if (planted) h.wrong_from = 1;
    for (int s = 1; s <= 2; ++s) h.pool.have.insert(Tx(100 + s));
    for (uint32_t r : {0u, 1u}) h.Deliver(MakeCheckpoint(2, chain, r));
    auto reqs = Sent(h.Deliver(MakeCheckpoint(2, chain, 2)), ConsensusMessage::kSyncRequest);
    ASSERT_EQ(reqs.size(), 1u);
    auto resp = Sent(src.Deliver(reqs[0]), ConsensusMessage::kSyncResponse);
    ASSERT_EQ(resp.size(), 1u);
    h.Deliver(resp[0]);
    EXPECT_EQ(h.replica->last_executed(), 2u);
    EXPECT_EQ(h.replica->divergence().has_value(), planted);
    EXPECT_EQ(h.replica->state(), planted ? ConsensusState::kDiverged : ConsensusState::kNormal);
  }
}

// A crash after the commit of checkpoint seq 2 and before its root came back: the vote was never
// signed. Restarted at 2, the replica signs it from the ledger's root.
TEST(PbftStateRootTest, ARestartAtACheckpointWhoseVoteWasLostSignsIt) {
  const PbftConfig c = SmallWindow();
  ReplicaHarness h(1, c);
  CommitAll(h, 0, 1);
  Prepare(h, 0, 2, {Tx(7)});
  for (uint32_t r : {0u, 2u, 3u}) {
    h.replica->Step(PbftMessage{MakeCommit(0, 2, BatchDigest({Tx(7)}), r)});  // no report
  }
  ASSERT_EQ(h.replica->last_executed(), 2u);
  const std::string chain = h.replica->chain_digest();
  const std::string root = testing::ModelRoot(chain);

  auto r = PbftReplica::Create(h.config, {&h.crypto, &h.pool, &h.store, &h.blocks},
                               {.last_executed = 2, .chain_digest = chain, .state_root = root});
  ASSERT_TRUE(r.ok());
  h.replica = *std::move(r);
  auto votes = Sent(h.replica->Step(PbftStart{}), kCkpt);
  ASSERT_EQ(votes.size(), 1u);
  EXPECT_EQ(votes[0].checkpoint().seq(), 2u);
  EXPECT_EQ(votes[0].checkpoint().state_root(), root);
  // Restarted again: the vote is in the store now, and is not signed twice.
  r = PbftReplica::Create(h.config, {&h.crypto, &h.pool, &h.store, &h.blocks},
                          {.last_executed = 2, .chain_digest = chain, .state_root = root});
  ASSERT_TRUE(r.ok());
  h.replica = *std::move(r);
  EXPECT_TRUE(Sent(h.replica->Step(PbftStart{}), kCkpt).empty());
  for (uint32_t rr : {0u, 2u}) h.Deliver(MakeCheckpoint(2, chain, rr));
  EXPECT_EQ(h.replica->low_watermark(), 2u) << "its restored vote completes the quorum";
}

// Restarted exactly at its stable checkpoint, a replica compares its ledger's root with the
// agreed one before anything else.
TEST(PbftStateRootTest, ARestartAtTheStableCheckpointChecksTheLedgersRoot) {
  const PbftConfig c = SmallWindow();
  ReplicaHarness h(1, c);
  CommitAll(h, 0, 1);
  CommitAll(h, 0, 2, {Tx(7)});
  const std::string chain = h.replica->chain_digest();
  for (uint32_t r : {0u, 2u}) h.Deliver(MakeCheckpoint(2, chain, r));
  ASSERT_EQ(h.replica->low_watermark(), 2u);

  h.Start({.last_executed = 2, .chain_digest = chain, .state_root = testing::ModelRoot(chain)});
  EXPECT_EQ(h.replica->state(), ConsensusState::kNormal);
  h.Start({.last_executed = 2, .chain_digest = chain, .state_root = std::string(32, 'q')});
  EXPECT_EQ(h.replica->state(), ConsensusState::kDiverged);
  EXPECT_EQ(h.replica->divergence()->own_state_root, std::string(32, 'q'));
}

}  // namespace
}  // namespace partitions
