// Unit tests for PbftLog: admission of normal-case messages, prepared and committed slots, the
// view reset, queries and the rebuild from a persisted log.
#include "partitions/pbft_log.h"

#include "gtest/gtest.h"
#include "tests/partitions/pbft_test_util.h"

namespace partitions {
namespace {

using testing::MakeCommit;
using testing::MakePrepare;
using testing::MakePrePrepare;
using testing::Tx;

const std::vector<std::string> kBatch = {Tx(1), Tx(2)};
const std::string kDigest = BatchDigest(kBatch);

class PbftLogTest : public ::testing::Test {
 protected:
  PbftLogTest() : crypto_(config_.self), validator_(config_, &crypto_), log_(config_) {}

  // Pre-prepare (view 0, primary 0) and prepares from backups 2 and 3 for `seq`.
  void Prepare(uint64_t seq) {
    ASSERT_EQ(log_.AddPrePrepare(MakePrePrepare(0, seq, kBatch, 0), 0, 0, validator_),
              PbftAdmission::kAdded);
    ASSERT_EQ(log_.AddPrepare(MakePrepare(0, seq, kDigest, 2), 0, 0), PbftAdmission::kAdded);
    ASSERT_EQ(log_.AddPrepare(MakePrepare(0, seq, kDigest, 3), 0, 0), PbftAdmission::kAdded);
  }
  void Commit(uint64_t seq) {
    Prepare(seq);
    ASSERT_NE(log_.TryPrepare(seq, 0), nullptr);
    for (uint32_t r : {0u, 2u, 3u}) {
      ASSERT_EQ(log_.AddCommit(MakeCommit(0, seq, kDigest, r), 0), PbftAdmission::kAdded);
    }
    ASSERT_TRUE(log_.TryCommit(seq, 0));
  }

  PbftConfig config_{.n = 4, .self = 1};
  ::tests::FakePbftCrypto crypto_;
  PbftValidator validator_;
  PbftLog log_;
};

TEST_F(PbftLogTest, AdmitsPrePrepareFromPrimaryInsideWindowOnce) {
  EXPECT_EQ(log_.AddPrePrepare(MakePrePrepare(0, 1, kBatch, 2), 0, 0, validator_),
            PbftAdmission::kInvalid);
  EXPECT_EQ(log_.AddPrePrepare(MakePrePrepare(0, 65, kBatch, 0), 0, 0, validator_),
            PbftAdmission::kOutsideWatermarks);
  EXPECT_EQ(log_.AddPrePrepare(MakePrePrepare(0, 3, kBatch, 0), 0, 3, validator_),
            PbftAdmission::kOutsideWatermarks);
  ConsensusMessage bad = MakePrePrepare(0, 1, kBatch, 0);
  bad.mutable_pre_prepare()->set_digest(Tx(9));
  EXPECT_EQ(log_.AddPrePrepare(bad, 0, 0, validator_), PbftAdmission::kInvalid);
  EXPECT_FALSE(log_.HasPrePrepare(1));

  EXPECT_EQ(log_.AddPrePrepare(MakePrePrepare(0, 1, kBatch, 0), 0, 0, validator_),
            PbftAdmission::kAdded);
  EXPECT_TRUE(log_.HasPrePrepare(1));
  EXPECT_EQ(log_.Find(1)->digest, kDigest);
  EXPECT_EQ(log_.AddPrePrepare(MakePrePrepare(0, 1, kBatch, 0), 0, 0, validator_),
            PbftAdmission::kDuplicate);
  EXPECT_EQ(log_.AddPrePrepare(MakePrePrepare(0, 1, {Tx(3)}, 0), 0, 0, validator_),
            PbftAdmission::kConflicting);
}

TEST_F(PbftLogTest, AdmitsPreparesFromBackupsAndCommitsFromAnyone) {
  EXPECT_EQ(log_.AddPrepare(MakePrepare(0, 1, kDigest, 0), 0, 0),
            PbftAdmission::kInvalid);  // primary
  EXPECT_EQ(log_.AddPrepare(MakePrepare(0, 1, "short", 2), 0, 0), PbftAdmission::kInvalid);
  EXPECT_EQ(log_.AddPrepare(MakePrepare(0, 0, kDigest, 2), 0, 0),
            PbftAdmission::kOutsideWatermarks);
  EXPECT_EQ(log_.AddPrepare(MakePrepare(0, 1, kDigest, 2), 0, 0), PbftAdmission::kAdded);
  EXPECT_EQ(log_.AddPrepare(MakePrepare(0, 1, kDigest, 2), 0, 0), PbftAdmission::kDuplicate);
  EXPECT_EQ(log_.AddPrepare(MakePrepare(0, 1, Tx(7), 2), 0, 0), PbftAdmission::kConflicting);

  EXPECT_EQ(log_.AddCommit(MakeCommit(0, 1, "short", 0), 0), PbftAdmission::kInvalid);
  EXPECT_EQ(log_.AddCommit(MakeCommit(0, 70, kDigest, 0), 0), PbftAdmission::kOutsideWatermarks);
  EXPECT_EQ(log_.AddCommit(MakeCommit(0, 1, kDigest, 0), 0), PbftAdmission::kAdded);
  EXPECT_EQ(log_.AddCommit(MakeCommit(0, 1, kDigest, 0), 0), PbftAdmission::kDuplicate);
  EXPECT_EQ(log_.AddCommit(MakeCommit(0, 1, Tx(7), 0), 0), PbftAdmission::kConflicting);
}

TEST_F(PbftLogTest, PreparedNeedsPrePrepareTxsAndTwoFMatchingPrepares) {
  EXPECT_EQ(log_.TryPrepare(1, 0), nullptr);  // nothing yet
  ASSERT_EQ(log_.AddPrePrepare(MakePrePrepare(0, 1, kBatch, 0), 0, 0, validator_),
            PbftAdmission::kAdded);
  ASSERT_EQ(log_.AddPrepare(MakePrepare(0, 1, Tx(7), 2), 0, 0),
            PbftAdmission::kAdded);  // other digest
  ASSERT_EQ(log_.AddPrepare(MakePrepare(0, 1, kDigest, 3), 0, 0), PbftAdmission::kAdded);
  EXPECT_EQ(log_.TryPrepare(1, 0), nullptr);  // one matching prepare of the 2f needed
  log_.At(1).prepares[1] = MakePrepare(0, 1, kDigest, 1);
  log_.At(1).waiting_txs = true;
  EXPECT_EQ(log_.TryPrepare(1, 0), nullptr);
  log_.At(1).waiting_txs = false;

  PbftLog::Slot* slot = log_.TryPrepare(1, 0);
  ASSERT_NE(slot, nullptr);
  EXPECT_TRUE(slot->prepared);
  EXPECT_EQ(slot->cert_view, 0u);
  ASSERT_TRUE(slot->cert.has_value());
  EXPECT_EQ(slot->cert->prepares_size(), 2);
  EXPECT_EQ(slot->cert->prepares(0).sender(), 1u);
  EXPECT_EQ(slot->cert->prepares(1).sender(), 3u);
  EXPECT_EQ(log_.TryPrepare(1, 0), slot);  // stays prepared
}

TEST_F(PbftLogTest, CommittedNeedsPreparedAndQuorumOfMatchingCommits) {
  Prepare(1);
  for (uint32_t r : {0u, 2u, 3u}) {
    ASSERT_EQ(log_.AddCommit(MakeCommit(0, 1, kDigest, r), 0), PbftAdmission::kAdded);
  }
  EXPECT_FALSE(log_.TryCommit(1, 0));  // not prepared yet
  ASSERT_NE(log_.TryPrepare(1, 0), nullptr);
  EXPECT_FALSE(log_.Decided(1).has_value());
  EXPECT_TRUE(log_.TryCommit(1, 0));
  EXPECT_FALSE(log_.TryCommit(1, 0));  // only once

  const std::optional<PbftCommit> c = log_.Decided(1);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->seq, 1u);
  EXPECT_EQ(c->view, 0u);
  EXPECT_EQ(c->tx_hashes, kBatch);
  EXPECT_EQ(c->digest, kDigest);
  EXPECT_EQ(c->certificate.size(), 3u);
  EXPECT_TRUE(c->chain_digest.empty());
}

TEST_F(PbftLogTest, OnlyVotesWhoseQuorumIsCompleteAreRedundant) {
  const std::string other = Tx(9);
  // Nothing yet: no vote is redundant, a pre-prepare never is.
  EXPECT_FALSE(log_.Redundant(MakePrepare(0, 1, kDigest, 2), 0));
  EXPECT_FALSE(log_.Redundant(MakeCommit(0, 1, kDigest, 2), 0));
  Prepare(1);
  EXPECT_FALSE(log_.Redundant(MakePrePrepare(0, 1, kBatch, 0), 0));
  ASSERT_NE(log_.TryPrepare(1, 0), nullptr);
  // Prepared, but our commit not sent (observing a view): a prepare still counts.
  EXPECT_FALSE(log_.Redundant(MakePrepare(0, 1, kDigest, 1), 0));
  log_.At(1).sent_commit = true;
  EXPECT_TRUE(log_.Redundant(MakePrepare(0, 1, kDigest, 1), 0));
  EXPECT_FALSE(log_.Redundant(MakePrepare(0, 1, other, 1), 0));    // conflicting: must be seen
  EXPECT_FALSE(log_.Redundant(MakePrepare(1, 1, kDigest, 1), 0));  // another view
  EXPECT_FALSE(log_.Redundant(MakePrepare(0, 1, kDigest, 1), 1));
  EXPECT_FALSE(log_.Redundant(MakePrepare(0, 2, kDigest, 1), 0));  // another slot
  // Prepared, not committed: commits still count.
  EXPECT_FALSE(log_.Redundant(MakeCommit(0, 1, kDigest, 2), 0));
  for (uint32_t r : {0u, 2u, 3u}) {
    ASSERT_EQ(log_.AddCommit(MakeCommit(0, 1, kDigest, r), 0), PbftAdmission::kAdded);
  }
  ASSERT_TRUE(log_.TryCommit(1, 0));
  EXPECT_TRUE(log_.Redundant(MakeCommit(0, 1, kDigest, 1), 0));
  EXPECT_FALSE(log_.Redundant(MakeCommit(0, 1, other, 1), 0));
  EXPECT_FALSE(log_.Redundant(MakeCommit(1, 1, kDigest, 1), 0));
  // After a view change neither is redundant: the new view's votes count again.
  log_.ResetView();
  EXPECT_FALSE(log_.Redundant(MakeCommit(1, 1, kDigest, 1), 1));
  EXPECT_FALSE(log_.Redundant(MakePrepare(1, 1, kDigest, 1), 1));
  // Checkpoints, view changes and the rest are never redundant here.
  ConsensusMessage checkpoint;
  checkpoint.set_sender(2);
  checkpoint.mutable_checkpoint()->set_seq(1);
  EXPECT_FALSE(log_.Redundant(checkpoint, 1));
}

TEST_F(PbftLogTest, CommitsOfAnotherDigestDoNotCount) {
  Prepare(1);
  ASSERT_NE(log_.TryPrepare(1, 0), nullptr);
  ASSERT_EQ(log_.AddCommit(MakeCommit(0, 1, kDigest, 0), 0), PbftAdmission::kAdded);
  ASSERT_EQ(log_.AddCommit(MakeCommit(0, 1, kDigest, 2), 0), PbftAdmission::kAdded);
  ASSERT_EQ(log_.AddCommit(MakeCommit(0, 1, Tx(7), 3), 0), PbftAdmission::kAdded);
  EXPECT_FALSE(log_.TryCommit(1, 0));
}

TEST_F(PbftLogTest, ResetViewKeepsCertificatesAndDecisionsOnly) {
  Commit(1);   // decided
  Prepare(2);  // prepared: has a certificate
  ASSERT_NE(log_.TryPrepare(2, 0), nullptr);
  ASSERT_EQ(log_.AddPrePrepare(MakePrePrepare(0, 3, kBatch, 0), 0, 0, validator_),
            PbftAdmission::kAdded);
  log_.ResetView();

  EXPECT_EQ(log_.Find(3), nullptr);
  ASSERT_NE(log_.Find(2), nullptr);
  EXPECT_FALSE(log_.Find(2)->pre_prepare.has_value());
  EXPECT_TRUE(log_.Find(2)->prepares.empty());
  EXPECT_FALSE(log_.Find(2)->prepared);
  EXPECT_TRUE(log_.Find(2)->cert.has_value());
  EXPECT_TRUE(log_.Decided(1).has_value());
  EXPECT_FALSE(log_.HasWorkAbove(1));
  EXPECT_TRUE(log_.HasWorkAbove(0));  // the decision at 1
  ASSERT_EQ(log_.CertificatesAbove(0).size(), 2u);
  EXPECT_EQ(log_.CertificatesAbove(1).size(), 1u);
}

TEST_F(PbftLogTest, ReissuedPrePrepareMayNotContradictADecision) {
  Commit(1);
  log_.ResetView();
  EXPECT_EQ(log_.AcceptPrePrepare(MakePrePrepare(1, 1, {Tx(5)}, 1)), PbftAdmission::kConflicting);
  EXPECT_EQ(log_.AcceptPrePrepare(MakePrePrepare(1, 1, kBatch, 1)), PbftAdmission::kAdded);
  EXPECT_TRUE(log_.HasPrePrepare(1));
}

TEST_F(PbftLogTest, QueriesAboveASeq) {
  Prepare(1);
  Prepare(2);
  log_.At(2).waiting_txs = true;
  ASSERT_EQ(log_.AddCommit(MakeCommit(0, 2, kDigest, 0), 0), PbftAdmission::kAdded);
  ASSERT_EQ(log_.AddCommit(MakeCommit(0, 2, kDigest, 2), 0), PbftAdmission::kAdded);
  log_.At(1).prepares[1] = MakePrepare(0, 1, kDigest, 1);  // own
  log_.At(2).commits[1] = MakeCommit(0, 2, kDigest, 1);    // own

  EXPECT_EQ(log_.WithPrePrepare(), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(log_.WaitingForTxs(0), (std::vector<uint64_t>{2}));
  EXPECT_TRUE(log_.WaitingForTxs(2).empty());
  EXPECT_TRUE(log_.CommitsAbove(1, 3));
  EXPECT_FALSE(log_.CommitsAbove(1, 4));
  EXPECT_FALSE(log_.CommitsAbove(2, 1));
  const std::vector<ConsensusMessage> own = log_.OwnMessagesAbove(0);
  ASSERT_EQ(own.size(), 2u);
  EXPECT_TRUE(own[0].has_prepare());
  EXPECT_TRUE(own[1].has_commit());
  EXPECT_EQ(log_.OwnMessagesAbove(1).size(), 1u);

  log_.DropThrough(1);
  EXPECT_EQ(log_.Find(1), nullptr);
  EXPECT_NE(log_.Find(2), nullptr);
}

TEST_F(PbftLogTest, OwnPrePreparesAreResent) {
  PbftLog primary_log(PbftConfig{.n = 4, .self = 0});
  ASSERT_EQ(primary_log.AddPrePrepare(MakePrePrepare(0, 1, kBatch, 0), 0, 0, validator_),
            PbftAdmission::kAdded);
  const std::vector<ConsensusMessage> own = primary_log.OwnMessagesAbove(0);
  ASSERT_EQ(own.size(), 1u);
  EXPECT_TRUE(own[0].has_pre_prepare());
}

TEST_F(PbftLogTest, RestoreRebuildsBestCertificateAndInstalledViewSlots) {
  // View 0: seq 1 prepared (pre-prepare + 2 backup prepares). View 1 (installed, primary 1 is
  // self): own pre-prepare for seq 1 and 2, a prepare and an own commit for seq 2.
  google::protobuf::RepeatedPtrField<ConsensusMessage> persisted;
  *persisted.Add() = MakePrePrepare(0, 1, kBatch, 0);
  *persisted.Add() = MakePrepare(0, 1, kDigest, 2);
  *persisted.Add() = MakePrepare(0, 1, kDigest, 3);
  *persisted.Add() = MakePrePrepare(1, 1, kBatch, 1);
  *persisted.Add() = MakePrePrepare(1, 2, kBatch, 1);
  *persisted.Add() = MakePrepare(1, 2, kDigest, 2);
  *persisted.Add() = MakeCommit(1, 2, kDigest, 1);

  const uint64_t own_max = log_.Restore(persisted, /*stable_seq=*/0, /*view=*/1, true);
  EXPECT_EQ(own_max, 2u);
  const PbftLog::Slot* s1 = log_.Find(1);
  ASSERT_NE(s1, nullptr);
  ASSERT_TRUE(s1->cert.has_value());
  EXPECT_EQ(s1->cert_view, 0u);
  EXPECT_EQ(s1->cert->prepares_size(), 2);
  ASSERT_TRUE(s1->pre_prepare.has_value());
  EXPECT_EQ(s1->pre_prepare->pre_prepare().view(), 1u);
  EXPECT_EQ(s1->digest, kDigest);
  const PbftLog::Slot* s2 = log_.Find(2);
  ASSERT_NE(s2, nullptr);
  EXPECT_FALSE(s2->cert.has_value());  // one prepare of the 2f needed
  EXPECT_EQ(s2->prepares.count(2), 1u);
  EXPECT_TRUE(s2->sent_commit);

  // View 1 not installed, stable checkpoint at 1: seq 1 is skipped, view 1's messages stay out.
  PbftLog not_installed(config_);
  EXPECT_EQ(not_installed.Restore(persisted, /*stable_seq=*/1, /*view=*/1, false), 2u);
  EXPECT_EQ(not_installed.Find(1), nullptr);
  ASSERT_NE(not_installed.Find(2), nullptr);
  EXPECT_FALSE(not_installed.Find(2)->pre_prepare.has_value());
  EXPECT_TRUE(not_installed.Find(2)->prepares.empty());
  EXPECT_TRUE(not_installed.Find(2)->commits.empty());
}

}  // namespace
}  // namespace partitions
