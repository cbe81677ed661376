// Unit tests for CheckpointTracker: vote admission and its per-sender bound, quorum proofs, the
// stable checkpoint and its GC, re-announcement and restore.
#include "partitions/pbft_checkpoints.h"

#include "gtest/gtest.h"
#include "partitions/pbft_certs.h"
#include "tests/partitions/pbft_test_util.h"

namespace partitions {
namespace {

using testing::MakeCheckpoint;
using testing::Tx;

using testing::CkptDigest;
using testing::ModelRoot;

// Two chain digests, and the checkpoint digests votes for them (with their model roots) carry.
const std::string kChainA = Tx(1);
const std::string kChainB = Tx(2);
const std::string kA = CkptDigest(kChainA);
const std::string kB = CkptDigest(kChainB);

class CheckpointTrackerTest : public ::testing::Test {
 protected:
  PbftConfig config_{.n = 4, .self = 1};  // K = 16, window 64: 6 votes kept per sender
  CheckpointTracker tracker_{config_};
};

TEST_F(CheckpointTrackerTest, StartsAtGenesis) {
  EXPECT_EQ(tracker_.stable_seq(), 0u);
  EXPECT_EQ(tracker_.stable_digest(), GenesisDigest());
  EXPECT_TRUE(tracker_.stable_proof().empty());
  const auto record = tracker_.StableRecord();
  EXPECT_EQ(record.seq(), 0u);
  EXPECT_EQ(record.state_digest(), GenesisDigest());
  EXPECT_EQ(tracker_.LatestOwnVote(), nullptr);
}

TEST_F(CheckpointTrackerTest, ClassifiesVotes) {
  EXPECT_EQ(tracker_.Add(MakeCheckpoint(0, kChainA, 2)), PbftAdmission::kDuplicate);
  EXPECT_EQ(tracker_.Add(MakeCheckpoint(17, kChainA, 2)),
            PbftAdmission::kInvalid);  // not a multiple of K
  EXPECT_EQ(tracker_.Add(MakeCheckpoint(16, "short", 2)), PbftAdmission::kInvalid);
  EXPECT_EQ(tracker_.Add(MakeCheckpoint(16, kChainA, 2)), PbftAdmission::kAdded);
  EXPECT_EQ(tracker_.Add(MakeCheckpoint(16, kChainA, 2)), PbftAdmission::kDuplicate);
  EXPECT_EQ(tracker_.Add(MakeCheckpoint(16, kChainB, 2)), PbftAdmission::kConflicting);
}

// A vote's digest must be the CheckpointDigest of its chain digest and state root: a replica
// cannot vote for one state while showing another.
TEST_F(CheckpointTrackerTest, RefusesAVoteWhoseDigestDoesNotBindItsChainAndRoot) {
  ConsensusMessage lying = CheckpointMessage(16, kChainA, ModelRoot(kChainA));
  lying.mutable_checkpoint()->set_state_digest(kB);
  EXPECT_EQ(tracker_.Add(::tests::SignedAs(2, lying)), PbftAdmission::kInvalid);
  ConsensusMessage no_root = CheckpointMessage(16, kChainA, "");
  EXPECT_EQ(tracker_.Add(::tests::SignedAs(2, no_root)), PbftAdmission::kInvalid);
  // The same chain with another root is another vote: it conflicts with the first.
  EXPECT_EQ(tracker_.Add(MakeCheckpoint(16, kChainA, 2)), PbftAdmission::kAdded);
  EXPECT_EQ(tracker_.Add(MakeCheckpoint(16, kChainA, 2, std::string(32, 'r'))),
            PbftAdmission::kConflicting);
}

// The agreed chain digest and state root come from the stable checkpoint's proof.
TEST_F(CheckpointTrackerTest, StableChainDigestAndRootComeFromTheProof) {
  EXPECT_EQ(tracker_.stable_chain_digest(), GenesisDigest());
  EXPECT_EQ(tracker_.stable_state_root(), "");
  std::vector<ConsensusMessage> proof = {MakeCheckpoint(16, kChainA, 0),
                                         MakeCheckpoint(16, kChainA, 2),
                                         MakeCheckpoint(16, kChainA, 3)};
  ASSERT_TRUE(tracker_.MakeStable(16, kA, proof).ok());
  EXPECT_EQ(tracker_.stable_chain_digest(), kChainA);
  EXPECT_EQ(tracker_.stable_state_root(), ModelRoot(kChainA));
  // A record written before votes carried roots: its digest was the chain digest.
  node::consensus::StableCheckpointRecord old;
  old.set_seq(32);
  old.set_state_digest(kChainB);
  ConsensusMessage old_vote;
  old_vote.mutable_checkpoint()->set_seq(32);
  old_vote.mutable_checkpoint()->set_state_digest(kChainB);
  *old.add_proof() = ::tests::SignedAs(0, old_vote);
  CheckpointTracker restored(config_);
  restored.RestoreStable(old);
  EXPECT_EQ(restored.stable_chain_digest(), kChainB);
  EXPECT_EQ(restored.stable_state_root(), "");
}

TEST_F(CheckpointTrackerTest, QuorumOfMatchingVotes) {
  tracker_.Add(MakeCheckpoint(16, kChainA, 0));
  tracker_.Add(MakeCheckpoint(16, kChainB, 2));
  tracker_.Add(MakeCheckpoint(16, kChainA, 3));
  EXPECT_FALSE(tracker_.QuorumAt(16).has_value());
  EXPECT_FALSE(tracker_.QuorumAt(32).has_value());
  tracker_.Add(MakeCheckpoint(16, kChainA, 1));
  const auto quorum = tracker_.QuorumAt(16);
  ASSERT_TRUE(quorum.has_value());
  EXPECT_EQ(quorum->seq, 16u);
  EXPECT_EQ(quorum->digest, kA);
  ASSERT_EQ(quorum->proof.size(), 3u);
  EXPECT_EQ(quorum->proof[0].sender(), 0u);
  EXPECT_EQ(quorum->proof[1].sender(), 1u);
  EXPECT_EQ(quorum->proof[2].sender(), 3u);
}

TEST_F(CheckpointTrackerTest, ProofForOwnDigest) {
  tracker_.AddOwn(MakeCheckpoint(16, kChainA, 1));
  tracker_.Add(MakeCheckpoint(16, kChainA, 2));
  EXPECT_FALSE(tracker_.ProofFor(16, kA).has_value());
  tracker_.Add(MakeCheckpoint(16, kChainB, 3));
  EXPECT_FALSE(tracker_.ProofFor(16, kA).has_value());
  tracker_.Add(MakeCheckpoint(16, kChainA, 0));
  const auto proof = tracker_.ProofFor(16, kA);
  ASSERT_TRUE(proof.has_value());
  EXPECT_EQ(proof->size(), 3u);
  EXPECT_FALSE(tracker_.ProofFor(16, kB).has_value());
}

TEST_F(CheckpointTrackerTest, MakeStableMovesTheWatermarkAndCollectsGarbage) {
  tracker_.AddOwn(MakeCheckpoint(16, kChainA, 1));
  tracker_.AddOwn(MakeCheckpoint(32, kChainB, 1));
  tracker_.Add(MakeCheckpoint(16, kChainA, 2));
  tracker_.Add(MakeCheckpoint(48, kChainA, 2));
  std::vector<ConsensusMessage> proof = {MakeCheckpoint(16, kChainA, 0),
                                         MakeCheckpoint(16, kChainA, 1),
                                         MakeCheckpoint(16, kChainA, 2)};
  ASSERT_TRUE(tracker_.MakeStable(16, kA, proof).ok());
  EXPECT_EQ(tracker_.stable_seq(), 16u);
  EXPECT_EQ(tracker_.stable_digest(), kA);
  EXPECT_EQ(tracker_.stable_proof().size(), 3u);
  EXPECT_EQ(tracker_.StableRecord().proof_size(), 3);
  EXPECT_EQ(tracker_.Add(MakeCheckpoint(16, kChainA, 3)), PbftAdmission::kDuplicate);
  EXPECT_EQ(tracker_.Add(MakeCheckpoint(48, kChainA, 2)),
            PbftAdmission::kDuplicate);  // above: kept
  ASSERT_NE(tracker_.LatestOwnVote(), nullptr);
  EXPECT_EQ(tracker_.LatestOwnVote()->checkpoint().seq(), 32u);
}

TEST_F(CheckpointTrackerTest, StableCheckpointMustMatchOwn) {
  tracker_.AddOwn(MakeCheckpoint(16, kChainA, 1));
  const absl::Status s = tracker_.MakeStable(16, kB, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(tracker_.stable_seq(), 0u);
  EXPECT_TRUE(tracker_.MakeStable(32, kB, {}).ok());  // no own checkpoint there
}

TEST_F(CheckpointTrackerTest, KeepsEachSendersMostRecentVotes) {
  for (uint64_t seq = 16; seq <= 7 * 16; seq += 16) {
    ASSERT_EQ(tracker_.Add(MakeCheckpoint(seq, kChainA, 2)), PbftAdmission::kAdded);
  }
  // 7 votes, 6 kept: the one at 16 was dropped (so it is new again, and dropped again).
  EXPECT_EQ(tracker_.Add(MakeCheckpoint(16, kChainA, 2)), PbftAdmission::kAdded);
  EXPECT_EQ(tracker_.Add(MakeCheckpoint(32, kChainA, 2)), PbftAdmission::kDuplicate);
  // Another sender's votes are not affected.
  EXPECT_EQ(tracker_.Add(MakeCheckpoint(16, kChainA, 3)), PbftAdmission::kAdded);
}

TEST_F(CheckpointTrackerTest, VotesAbove) {
  tracker_.Add(MakeCheckpoint(16, kChainA, 0));
  tracker_.Add(MakeCheckpoint(32, kChainA, 0));
  tracker_.Add(MakeCheckpoint(32, kChainB, 2));
  EXPECT_TRUE(tracker_.VotesAbove(0, 2));
  EXPECT_TRUE(tracker_.VotesAbove(16, 2));
  EXPECT_FALSE(tracker_.VotesAbove(16, 3));
  EXPECT_FALSE(tracker_.VotesAbove(32, 1));
}

TEST_F(CheckpointTrackerTest, LatestOwnVoteIsReannounced) {
  tracker_.AddOwn(MakeCheckpoint(16, kChainA, 1));
  tracker_.AddOwn(MakeCheckpoint(32, kChainB, 1));
  ASSERT_NE(tracker_.LatestOwnVote(), nullptr);
  EXPECT_EQ(tracker_.LatestOwnVote()->checkpoint().seq(), 32u);
  EXPECT_EQ(tracker_.LatestOwnVote()->checkpoint().state_digest(), kB);
}

TEST_F(CheckpointTrackerTest, RestoresStableCheckpointAndOwnVotes) {
  node::consensus::StableCheckpointRecord record;
  record.set_seq(16);
  record.set_state_digest(kA);
  *record.add_proof() = MakeCheckpoint(16, kChainA, 0);
  google::protobuf::RepeatedPtrField<ConsensusMessage> log;
  *log.Add() = MakeCheckpoint(16, kChainA, 1);  // at the stable seq: skipped
  *log.Add() = MakeCheckpoint(32, kChainB, 1);  // own, above
  *log.Add() = MakeCheckpoint(48, kChainB, 2);  // another replica's: skipped
  *log.Add() = testing::MakeCommit(0, 33, kA, 1);
  ConsensusMessage before_roots;  // own, in the format before state roots: skipped
  before_roots.mutable_checkpoint()->set_seq(64);
  before_roots.mutable_checkpoint()->set_state_digest(kChainB);
  *log.Add() = ::tests::SignedAs(1, before_roots);

  tracker_.RestoreStable(record);
  tracker_.RestoreOwn(log, /*executed=*/64);
  EXPECT_EQ(tracker_.stable_seq(), 16u);
  EXPECT_EQ(tracker_.stable_digest(), kA);
  EXPECT_EQ(tracker_.stable_proof().size(), 1u);
  ASSERT_NE(tracker_.LatestOwnVote(), nullptr);
  EXPECT_EQ(tracker_.LatestOwnVote()->checkpoint().seq(), 32u);
  ASSERT_NE(tracker_.OwnVote(32), nullptr);
  EXPECT_EQ(tracker_.OwnVote(32)->checkpoint().state_root(), ModelRoot(kChainB));
  EXPECT_EQ(tracker_.OwnVote(64), nullptr);
  EXPECT_EQ(tracker_.OwnVote(48), nullptr);  // not own
  EXPECT_EQ(tracker_.Add(MakeCheckpoint(48, kChainB, 2)), PbftAdmission::kAdded);
  // An own checkpoint restored for 32 with digest kB: a stable kA there is a divergence.
  EXPECT_EQ(tracker_.MakeStable(32, kA, {}).code(), absl::StatusCode::kInternal);

  // A ledger rebuilt below its own votes (here at 16): the vote at 32 is not restored.
  CheckpointTracker rebuilt(config_);
  rebuilt.RestoreStable(record);
  rebuilt.RestoreOwn(log, /*executed=*/16);
  EXPECT_EQ(rebuilt.LatestOwnVote(), nullptr);
  EXPECT_TRUE(rebuilt.MakeStable(32, kA, {}).ok());

  CheckpointTracker fresh(config_);
  fresh.RestoreStable(node::consensus::StableCheckpointRecord{});  // none persisted
  EXPECT_EQ(fresh.stable_seq(), 0u);
  EXPECT_EQ(fresh.stable_digest(), GenesisDigest());
}

}  // namespace
}  // namespace partitions
