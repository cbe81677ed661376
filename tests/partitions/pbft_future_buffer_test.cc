// Unit tests for FutureBuffer: bounded holding of messages of views not installed yet, and their
// replay in arrival order.
#include "partitions/pbft_future_buffer.h"

#include "gtest/gtest.h"
#include "tests/partitions/pbft_test_util.h"

namespace partitions {
namespace {

using testing::MakeCommit;
using testing::MakePrepare;
using testing::Tx;

TEST(FutureBufferTest, RefusesSeqsAtOrBelowTheWatermarkAndBeyondTheSendersShare) {
  FutureBuffer future(PbftConfig{.n = 4, .window = 1});  // 1 * 4 per sender, 16 in all
  EXPECT_FALSE(future.Add(MakePrepare(2, 5, Tx(1), 1), /*h=*/5));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(future.Add(MakePrepare(2, 6, Tx(i), 1), 5));
  EXPECT_FALSE(future.Add(MakePrepare(2, 6, Tx(99), 1), 5));
  EXPECT_EQ(future.size(), 4u);
  ConsensusMessage outsider = MakePrepare(2, 6, Tx(1), 1);
  outsider.set_sender(4);
  EXPECT_FALSE(future.Add(outsider, 5));
}

TEST(FutureBufferTest, AFloodingReplicaFillsOnlyItsOwnShare) {
  FutureBuffer future(PbftConfig{.n = 4, .window = 2});  // 8 per sender
  // Replica 3 floods future-view votes for every seq it can name.
  int refused = 0;
  for (uint64_t seq = 1; seq <= 1000; ++seq) {
    if (!future.Add(MakeCommit(7, seq, Tx(static_cast<int>(seq)), 3), 0)) ++refused;
  }
  EXPECT_EQ(future.held_from(3), 8u);
  EXPECT_EQ(refused, 992);
  // The honest replicas' messages of the next view are all still held.
  for (uint32_t from = 0; from < 3; ++from) {
    for (uint64_t seq = 1; seq <= 8; ++seq) {
      EXPECT_TRUE(future.Add(MakePrepare(2, seq, Tx(static_cast<int>(seq)), from), 0));
    }
    EXPECT_EQ(future.held_from(from), 8u);
  }
  const std::vector<ConsensusMessage> replay = future.TakeFor(2);
  EXPECT_EQ(replay.size(), 24u);
  EXPECT_EQ(future.held_from(0), 0u);
  EXPECT_EQ(future.held_from(3), 8u);  // view 7 kept
}

TEST(FutureBufferTest, RetransmissionsTakeNoRoom) {
  FutureBuffer future(PbftConfig{.n = 4, .window = 1});  // 4 per sender
  const ConsensusMessage vote = MakePrepare(2, 6, Tx(1), 1);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(future.Add(vote, 5));  // retransmitted every period
  EXPECT_EQ(future.held_from(1), 1u);
  for (int i = 2; i <= 4; ++i) EXPECT_TRUE(future.Add(MakePrepare(2, 6 + i, Tx(i), 1), 5));
  EXPECT_EQ(future.TakeFor(2).size(), 4u);
  // Once replayed, the same message may be held again (a later view change).
  EXPECT_TRUE(future.Add(vote, 5));
  EXPECT_EQ(future.size(), 1u);
}

TEST(FutureBufferTest, HasAboveAndDropBelow) {
  FutureBuffer future(PbftConfig{});
  future.Add(MakePrepare(1, 1, Tx(1), 1), 0);
  future.Add(MakeCommit(3, 1, Tx(1), 2), 0);
  EXPECT_TRUE(future.HasAbove(2));
  EXPECT_FALSE(future.HasAbove(3));
  future.DropBelow(2);
  EXPECT_EQ(future.size(), 1u);
  future.DropBelow(4);
  EXPECT_EQ(future.size(), 0u);
  EXPECT_FALSE(future.HasAbove(0));
}

TEST(FutureBufferTest, TakeForReplaysOneViewInArrivalOrder) {
  FutureBuffer future(PbftConfig{});
  future.Add(MakeCommit(2, 3, Tx(1), 1), 0);
  future.Add(MakePrepare(1, 1, Tx(1), 1), 0);
  future.Add(MakePrepare(2, 1, Tx(2), 3), 0);
  future.Add(MakePrepare(3, 1, Tx(3), 3), 0);
  const std::vector<ConsensusMessage> replay = future.TakeFor(2);
  ASSERT_EQ(replay.size(), 2u);
  EXPECT_TRUE(replay[0].has_commit());
  EXPECT_EQ(replay[1].prepare().digest(), Tx(2));
  EXPECT_EQ(future.size(), 1u);  // view 3 kept, view 1 dropped
  EXPECT_TRUE(future.HasAbove(2));
  EXPECT_TRUE(future.TakeFor(2).empty());
}

}  // namespace
}  // namespace partitions
