// Unit tests for PbftValidator::CheckNewView: a NewView is accepted only from the new primary,
// with 2f+1 valid ViewChanges for its view from distinct replicas, and exactly the pre-prepares
// their plan re-issues.
#include "partitions/pbft_certs.h"

#include "gtest/gtest.h"
#include "tests/partitions/pbft_test_util.h"

namespace partitions {
namespace {

using ::node::consensus::PreparedCertificate;
using testing::MakePrepare;
using testing::MakePrePrepare;
using testing::Tx;
using ::tests::SignedAs;

const std::vector<std::string> kBatch = {Tx(1), Tx(2)};

// Replica `from`'s ViewChange for `view`, from the genesis checkpoint, with `cert` if given.
ConsensusMessage ViewChange(uint64_t view, uint32_t from, const PreparedCertificate* cert) {
  ConsensusMessage m;
  auto* vc = m.mutable_view_change();
  vc->set_new_view(view);
  vc->set_stable_seq(0);
  vc->set_stable_digest(GenesisDigest());
  if (cert != nullptr) *vc->add_prepared() = *cert;
  return SignedAs(from, m);
}

class CheckNewViewTest : public ::testing::Test {
 protected:
  CheckNewViewTest() : crypto_(3), validator_(config_, &crypto_) {
    // Seq 1 prepared in view 0 (primary 0; prepares from 1 and 2).
    *cert_.mutable_pre_prepare() = MakePrePrepare(0, 1, kBatch, 0);
    *cert_.add_prepares() = MakePrepare(0, 1, BatchDigest(kBatch), 1);
    *cert_.add_prepares() = MakePrepare(0, 1, BatchDigest(kBatch), 2);
  }

  // The NewView for view 1 that primary 1 must send with ViewChanges from `senders` (replica 2
  // reports the prepared certificate): it re-issues seq 1. `from` signs it and its pre-prepare,
  // so a NewView from a replica other than the primary is consistent in everything else.
  ConsensusMessage NewView(const std::vector<uint32_t>& senders, uint64_t vc_view = 1,
                           uint32_t from = 1) {
    ConsensusMessage m;
    auto* nv = m.mutable_new_view();
    nv->set_view(1);
    for (uint32_t s : senders) {
      *nv->add_view_changes() = ViewChange(vc_view, s, s == 2 ? &cert_ : nullptr);
    }
    *nv->add_pre_prepares() = MakePrePrepare(1, 1, kBatch, from);
    return SignedAs(from, m);
  }

  PbftConfig config_{.n = 4, .self = 3};
  ::tests::FakePbftCrypto crypto_;
  PbftValidator validator_;
  PreparedCertificate cert_;
};

TEST_F(CheckNewViewTest, AcceptsTheNewPrimarysNewViewAndReturnsItsPlan) {
  const std::optional<NewViewPlan> plan = validator_.CheckNewView(NewView({0, 2, 3}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->min_s, 0u);
  EXPECT_EQ(plan->max_s, 1u);
  ASSERT_EQ(plan->entries.size(), 1u);
  EXPECT_EQ(plan->entries[0].seq, 1u);
  EXPECT_EQ(plan->entries[0].tx_hashes, kBatch);
}

TEST_F(CheckNewViewTest, RejectsANewViewFromAnyoneButTheNewPrimary) {
  ASSERT_TRUE(validator_.CheckNewView(NewView({0, 2, 3})).has_value());
  // Replica 2 signs the NewView and its pre-prepare itself: only the sender is wrong.
  EXPECT_FALSE(validator_.CheckNewView(NewView({0, 2, 3}, 1, /*from=*/2)).has_value());
}

TEST_F(CheckNewViewTest, NeedsQuorumOfDistinctValidViewChangesForItsView) {
  EXPECT_FALSE(validator_.CheckNewView(NewView({0, 2})).has_value());
  EXPECT_FALSE(validator_.CheckNewView(NewView({0, 2, 2})).has_value());
  EXPECT_FALSE(validator_.CheckNewView(NewView({0, 2, 3}, /*vc_view=*/2)).has_value());
  ConsensusMessage forged = NewView({0, 2, 3});
  forged.mutable_new_view()->mutable_view_changes(0)->set_signature("bad");
  EXPECT_FALSE(validator_.CheckNewView(forged).has_value());
}

TEST_F(CheckNewViewTest, NeedsExactlyThePlannedPrePrepares) {
  ConsensusMessage none = NewView({0, 2, 3});
  none.mutable_new_view()->clear_pre_prepares();
  EXPECT_FALSE(validator_.CheckNewView(none).has_value());

  ConsensusMessage other = NewView({0, 2, 3});
  *other.mutable_new_view()->mutable_pre_prepares(0) = MakePrePrepare(1, 1, {Tx(3)}, 1);
  EXPECT_FALSE(validator_.CheckNewView(other).has_value());

  ConsensusMessage unsigned_pp = NewView({0, 2, 3});
  unsigned_pp.mutable_new_view()->mutable_pre_prepares(0)->set_signature("bad");
  EXPECT_FALSE(validator_.CheckNewView(unsigned_pp).has_value());

  ConsensusMessage extra = NewView({0, 2, 3});
  *extra.mutable_new_view()->add_pre_prepares() = MakePrePrepare(1, 2, kBatch, 1);
  EXPECT_FALSE(validator_.CheckNewView(extra).has_value());
}

// A stable checkpoint made before votes carried state roots (digest = chain digest, no chain or
// root fields) still proves itself inside a ViewChange, so a replica upgraded since can change
// view; a new-format vote whose digest does not bind its fields does not.
TEST(CheckpointProofTest, AProofFromBeforeStateRootsStillValidatesAViewChange) {
  PbftConfig config;  // K = 16
  tests::FakePbftCrypto crypto(3);
  PbftValidator validator(config, &crypto);
  const std::string chain = Tx(16);
  ConsensusMessage m;
  auto* vc = m.mutable_view_change();
  vc->set_new_view(1);
  vc->set_stable_seq(16);
  vc->set_stable_digest(chain);
  for (uint32_t from : {0u, 1u, 2u}) {
    ConsensusMessage old_vote;
    old_vote.mutable_checkpoint()->set_seq(16);
    old_vote.mutable_checkpoint()->set_state_digest(chain);
    *vc->add_checkpoint_proof() = SignedAs(from, old_vote);
  }
  EXPECT_TRUE(validator.ValidViewChange(SignedAs(2, m)));

  // New-format votes: valid when well formed, not when one digest lies about its fields.
  const std::string root = testing::ModelRoot(chain);
  vc->set_stable_digest(CheckpointDigest(chain, root));
  vc->clear_checkpoint_proof();
  for (uint32_t from : {0u, 1u, 2u}) {
    *vc->add_checkpoint_proof() = testing::MakeCheckpoint(16, chain, from);
  }
  EXPECT_TRUE(validator.ValidViewChange(SignedAs(2, m)));
  ConsensusMessage lying = CheckpointMessage(16, chain, std::string(32, 'x'));
  lying.mutable_checkpoint()->set_state_digest(CheckpointDigest(chain, root));
  *vc->mutable_checkpoint_proof(2) = SignedAs(2, lying);
  EXPECT_FALSE(validator.ValidViewChange(SignedAs(2, m)));
}

// One format per proof: a faulty replica's old-format vote (no chain digest, no root) placed
// first among correct new-format votes would make the stable record read an empty root and the
// digest as the chain digest, and the replica then find itself DIVERGED at that checkpoint.
// Where old proofs cannot occur (a peer's answer to block sync), old votes are refused outright.
TEST(CheckpointProofTest, AProofMixingVoteFormatsIsRefused) {
  PbftConfig config;  // K = 16
  tests::FakePbftCrypto crypto(3);
  PbftValidator validator(config, &crypto);
  const std::string chain = Tx(16);
  const std::string digest = CheckpointDigest(chain, testing::ModelRoot(chain));
  google::protobuf::RepeatedPtrField<ConsensusMessage> proof;
  ConsensusMessage old_vote;
  old_vote.mutable_checkpoint()->set_seq(16);
  old_vote.mutable_checkpoint()->set_state_digest(digest);
  *proof.Add() = SignedAs(0, old_vote);
  *proof.Add() = testing::MakeCheckpoint(16, chain, 1);
  *proof.Add() = testing::MakeCheckpoint(16, chain, 2);
  EXPECT_FALSE(validator.ValidCheckpointProof(16, digest, proof));
  *proof.Mutable(0) = testing::MakeCheckpoint(16, chain, 0);
  EXPECT_TRUE(validator.ValidCheckpointProof(16, digest, proof));
  EXPECT_TRUE(validator.ValidCheckpointProof(16, digest, proof, /*allow_old_format=*/false));

  google::protobuf::RepeatedPtrField<ConsensusMessage> old_only;
  for (uint32_t from : {0u, 1u, 2u}) *old_only.Add() = SignedAs(from, old_vote);
  EXPECT_TRUE(validator.ValidCheckpointProof(16, digest, old_only));
  EXPECT_FALSE(validator.ValidCheckpointProof(16, digest, old_only, /*allow_old_format=*/false));
}

}  // namespace
}  // namespace partitions
