// Unit tests for ViewChangeVotes: one ViewChange per sender, support counts for the view-change
// rules, the 2f+1 for a NewView, and the observer-mode trigger.
#include "partitions/pbft_view_change_votes.h"

#include "gtest/gtest.h"
#include "tests/partitions/pbft_test_util.h"

namespace partitions {
namespace {

using ::tests::SignedAs;

ConsensusMessage Vc(uint64_t view, uint32_t from) {
  ConsensusMessage m;
  m.mutable_view_change()->set_new_view(view);
  return SignedAs(from, m);
}

class ViewChangeVotesTest : public ::testing::Test {
 protected:
  PbftConfig config_{.n = 4, .self = 0};  // f = 1, quorum 3
  ViewChangeVotes votes_{config_};
};

TEST_F(ViewChangeVotesTest, KeepsEachSendersLatestViewChange) {
  EXPECT_EQ(votes_.CountFor(1), 0u);
  EXPECT_FALSE(votes_.HasAtLeast(1, 1));
  votes_.Add(Vc(1, 1));
  votes_.Add(Vc(1, 2));
  EXPECT_EQ(votes_.CountFor(1), 2u);
  EXPECT_TRUE(votes_.HasAtLeast(1, 1));
  EXPECT_FALSE(votes_.HasAtLeast(1, 2));
  votes_.Add(Vc(3, 1));  // sender 1 moves on: its ViewChange for 1 is replaced
  EXPECT_EQ(votes_.CountFor(1), 1u);
  EXPECT_EQ(votes_.CountFor(3), 1u);
  EXPECT_TRUE(votes_.HasAtLeast(1, 2));
}

TEST_F(ViewChangeVotesTest, OwnViewChangeAndDropping) {
  votes_.Add(Vc(1, 1));
  votes_.Add(Vc(2, 2));
  votes_.Add(Vc(4, 3));
  votes_.DropBelow(2);
  votes_.AddOwn(2, Vc(2, 0));
  EXPECT_EQ(votes_.CountFor(1), 0u);
  EXPECT_EQ(votes_.CountFor(2), 2u);
  EXPECT_TRUE(votes_.HasAtLeast(0, 2));
  EXPECT_TRUE(votes_.HasAtLeast(1, 1));  // DropBelow keeps the senders' latest views

  votes_.DropThrough(2);  // a NewView for 2 installed
  EXPECT_EQ(votes_.CountFor(2), 0u);
  EXPECT_FALSE(votes_.HasAtLeast(0, 1));
  EXPECT_FALSE(votes_.HasAtLeast(2, 1));
  EXPECT_EQ(votes_.CountFor(4), 1u);
  EXPECT_TRUE(votes_.HasAtLeast(3, 4));
}

TEST_F(ViewChangeVotesTest, LowestHigherViewOfOthers) {
  EXPECT_EQ(votes_.LowestViewAbove(1), 0u);
  votes_.AddOwn(2, Vc(2, 0));  // own: not counted
  EXPECT_EQ(votes_.LowestViewAbove(1), 0u);
  votes_.Add(Vc(5, 1));
  votes_.Add(Vc(3, 2));
  votes_.Add(Vc(1, 3));
  EXPECT_EQ(votes_.LowestViewAbove(1), 3u);
  EXPECT_EQ(votes_.LowestViewAbove(3), 5u);
  EXPECT_EQ(votes_.LowestViewAbove(5), 0u);
}

TEST_F(ViewChangeVotesTest, ViewWithSupportOfFPlusOneOthers) {
  votes_.AddOwn(9, Vc(9, 0));
  votes_.Add(Vc(5, 1));
  EXPECT_EQ(votes_.ViewWithSupport(1, 2), 0u);
  votes_.Add(Vc(3, 2));
  EXPECT_EQ(votes_.ViewWithSupport(1, 2), 3u);  // two others ask for 3 or more
  votes_.Add(Vc(7, 3));
  EXPECT_EQ(votes_.ViewWithSupport(1, 2), 5u);
  EXPECT_EQ(votes_.ViewWithSupport(5, 2), 0u);
  EXPECT_EQ(votes_.ViewWithSupport(1, 1), 7u);
}

TEST_F(ViewChangeVotesTest, QuorumForANewView) {
  votes_.Add(Vc(1, 3));
  votes_.Add(Vc(1, 2));
  EXPECT_TRUE(votes_.QuorumFor(1).empty());
  votes_.Add(Vc(1, 1));
  votes_.AddOwn(1, Vc(1, 0));
  const std::vector<const ConsensusMessage*> vcs = votes_.QuorumFor(1);
  ASSERT_EQ(vcs.size(), 3u);
  EXPECT_EQ(vcs[0]->sender(), 0u);
  EXPECT_EQ(vcs[1]->sender(), 1u);
  EXPECT_EQ(vcs[2]->sender(), 2u);
  EXPECT_TRUE(votes_.QuorumFor(2).empty());
}

TEST_F(ViewChangeVotesTest, LowerViewCommitsFromFPlusOneSenders) {
  EXPECT_FALSE(votes_.NoteLowerViewCommit(1, 2));
  EXPECT_FALSE(votes_.NoteLowerViewCommit(1, 2));  // same sender again
  EXPECT_FALSE(votes_.NoteLowerViewCommit(0, 3));  // another view
  EXPECT_TRUE(votes_.NoteLowerViewCommit(1, 3));
  votes_.ForgetLowerViewCommits();
  EXPECT_FALSE(votes_.NoteLowerViewCommit(1, 1));
}

TEST_F(ViewChangeVotesTest, OfferChecksDuplicatesThenValidity) {
  ::tests::FakePbftCrypto crypto(0);
  PbftValidator validator(config_, &crypto);
  auto valid = [](uint64_t view, uint32_t from) {
    ConsensusMessage m;
    m.mutable_view_change()->set_new_view(view);
    m.mutable_view_change()->set_stable_digest(GenesisDigest());
    return SignedAs(from, m);
  };
  EXPECT_EQ(votes_.Offer(Vc(2, 1), validator), PbftAdmission::kInvalid);  // no genesis digest
  EXPECT_EQ(votes_.CountFor(2), 0u);
  EXPECT_EQ(votes_.Offer(valid(2, 1), validator), PbftAdmission::kAdded);
  EXPECT_EQ(votes_.Offer(valid(2, 1), validator), PbftAdmission::kDuplicate);
  EXPECT_EQ(votes_.Offer(valid(1, 1), validator), PbftAdmission::kDuplicate);  // left behind
  ConsensusMessage forged = valid(3, 1);
  forged.set_signature("bad");
  EXPECT_EQ(votes_.Offer(forged, validator), PbftAdmission::kInvalid);
  EXPECT_EQ(votes_.CountFor(2), 1u);
}

}  // namespace
}  // namespace partitions
