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

TEST(FutureBufferTest, RefusesSeqsAtOrBelowTheWatermarkAndBeyondCapacity) {
  FutureBuffer future(PbftConfig{.n = 4, .window = 1});  // capacity 1 * 4 * 4 = 16
  EXPECT_FALSE(future.Add(MakePrepare(2, 5, Tx(1), 1), /*h=*/5));
  for (int i = 0; i < 16; ++i) EXPECT_TRUE(future.Add(MakePrepare(2, 6, Tx(i), 1), 5));
  EXPECT_FALSE(future.Add(MakePrepare(2, 6, Tx(99), 1), 5));
  EXPECT_EQ(future.size(), 16u);
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
