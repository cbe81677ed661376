// Unit tests for the PBFT message builders: fields set, unsigned.
#include "partitions/pbft_messages.h"

#include "gtest/gtest.h"
#include "partitions/pbft_certs.h"
#include "tests/partitions/pbft_test_util.h"

namespace partitions {
namespace {

using testing::MakeCheckpoint;
using testing::Tx;

TEST(PbftMessagesTest, NormalCaseMessages) {
  const ConsensusMessage pp = PrePrepareMessage(2, 5, Tx(9), {Tx(1), Tx(2)}, 2);
  EXPECT_EQ(pp.pre_prepare().view(), 2u);
  EXPECT_EQ(pp.pre_prepare().seq(), 5u);
  EXPECT_EQ(pp.pre_prepare().digest(), Tx(9));
  EXPECT_EQ(pp.pre_prepare().tx_hashes_size(), 2);
  EXPECT_EQ(pp.pre_prepare().proposer(), 2u);
  EXPECT_TRUE(pp.signature().empty());
  const ConsensusMessage p = PrepareMessage(2, 5, Tx(9));
  EXPECT_EQ(p.prepare().seq(), 5u);
  EXPECT_EQ(p.prepare().digest(), Tx(9));
  const ConsensusMessage c = CommitMessage(2, 5, Tx(9));
  EXPECT_EQ(c.commit().view(), 2u);
  const ConsensusMessage cp = CheckpointMessage(16, Tx(3), Tx(4));
  EXPECT_EQ(cp.checkpoint().seq(), 16u);
  EXPECT_EQ(cp.checkpoint().chain_digest(), Tx(3));
  EXPECT_EQ(cp.checkpoint().state_root(), Tx(4));
  // The digest votes match on binds both: change either and it changes.
  EXPECT_EQ(cp.checkpoint().state_digest(), CheckpointDigest(Tx(3), Tx(4)));
  EXPECT_NE(CheckpointDigest(Tx(3), Tx(5)), CheckpointDigest(Tx(3), Tx(4)));
  EXPECT_NE(CheckpointDigest(Tx(5), Tx(4)), CheckpointDigest(Tx(3), Tx(4)));
  EXPECT_TRUE(WellFormedCheckpoint(cp.checkpoint()));
}

TEST(PbftMessagesTest, ViewChangeCarriesStableCheckpointAndCertificates) {
  node::consensus::StableCheckpointRecord stable;
  stable.set_seq(16);
  stable.set_state_digest(Tx(3));
  *stable.add_proof() = MakeCheckpoint(16, Tx(3), 0);
  node::consensus::PreparedCertificate cert;
  *cert.mutable_pre_prepare() = PrePrepareMessage(0, 17, Tx(9), {}, 0);
  const ConsensusMessage vc = ViewChangeMessage(3, stable, {cert, cert});
  EXPECT_EQ(vc.view_change().new_view(), 3u);
  EXPECT_EQ(vc.view_change().stable_seq(), 16u);
  EXPECT_EQ(vc.view_change().stable_digest(), Tx(3));
  EXPECT_EQ(vc.view_change().checkpoint_proof_size(), 1);
  EXPECT_EQ(vc.view_change().prepared_size(), 2);
}

TEST(PbftMessagesTest, NewViewAndRecords) {
  const ConsensusMessage vc = ViewChangeMessage(1, {}, {});
  const ConsensusMessage nv =
      NewViewMessage(1, {&vc, &vc}, {PrePrepareMessage(1, 1, Tx(9), {}, 1)});
  EXPECT_EQ(nv.new_view().view(), 1u);
  EXPECT_EQ(nv.new_view().view_changes_size(), 2);
  EXPECT_EQ(nv.new_view().pre_prepares_size(), 1);
  EXPECT_EQ(NewViewRequestMessage(4).new_view_request().min_view(), 4u);

  const auto changing = ViewChangeRecord(1, vc);
  EXPECT_EQ(changing.view(), 1u);
  EXPECT_FALSE(changing.installed());
  EXPECT_TRUE(changing.has_own_view_change());
  const auto installed = InstalledViewRecord(1, nv);
  EXPECT_TRUE(installed.installed());
  EXPECT_TRUE(installed.has_new_view());
  EXPECT_FALSE(installed.has_own_view_change());
}

}  // namespace
}  // namespace partitions
