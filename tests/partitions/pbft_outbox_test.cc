// Unit tests for PbftOutbox: signing, ordered actions, durable writes before sends, and the halt
// after a failed write.
#include "partitions/pbft_outbox.h"

#include "gtest/gtest.h"
#include "partitions/pbft_messages.h"
#include "tests/partitions/pbft_test_util.h"

namespace partitions {
namespace {

using testing::ActionsOf;
using testing::Tx;

class PbftOutboxTest : public ::testing::Test {
 protected:
  PbftConfig config_{.n = 4, .self = 2};
  ::tests::FakePbftCrypto crypto_{2};
  ::tests::FakeConsensusStore store_;
  PbftOutbox out_{config_, &crypto_, &store_};
};

TEST_F(PbftOutboxTest, SignsAsThisReplica) {
  ConsensusMessage m = PrepareMessage(0, 1, Tx(1));
  m.set_sender(3);
  m.set_signature("stale");
  const ConsensusMessage s = out_.Sign(m);
  EXPECT_EQ(s.sender(), 2u);
  EXPECT_TRUE(crypto_.Verify(s));
}

TEST_F(PbftOutboxTest, CollectsActionsInOrderAndTakesThemOnce) {
  out_.Add(PbftSetTimer{PbftTimer::kRetransmit, 5});
  out_.Send(1, PrepareMessage(0, 1, Tx(1)), PbftChannel::kSync);
  out_.Broadcast(CommitMessage(0, 1, Tx(1)));
  std::vector<PbftAction> actions = out_.Take();
  ASSERT_EQ(actions.size(), 3u);
  EXPECT_TRUE(std::holds_alternative<PbftSetTimer>(actions[0]));
  const auto& send = std::get<PbftSend>(actions[1]);
  EXPECT_EQ(send.to, 1u);
  EXPECT_EQ(send.channel, PbftChannel::kSync);
  EXPECT_TRUE(std::get<PbftBroadcast>(actions[2]).msg.has_commit());
  EXPECT_TRUE(out_.Take().empty());
}

TEST_F(PbftOutboxTest, BroadcastNeedsOtherReplicas) {
  ::tests::FakeConsensusStore store;
  PbftOutbox alone(PbftConfig{.n = 1, .self = 0}, &crypto_, &store);
  alone.Broadcast(CommitMessage(0, 1, Tx(1)));
  EXPECT_TRUE(alone.Take().empty());
}

TEST_F(PbftOutboxTest, PublishWritesWithWhatItDependsOnThenBroadcasts) {
  const ConsensusMessage pp = out_.Sign(PrePrepareMessage(0, 1, Tx(9), {}, 2));
  const ConsensusMessage prepare = out_.Publish(PrepareMessage(0, 1, Tx(9)), {pp});
  EXPECT_TRUE(crypto_.Verify(prepare));
  auto persisted = store_.Load();
  ASSERT_TRUE(persisted.ok());
  ASSERT_EQ(persisted->log_size(), 2);
  EXPECT_TRUE(persisted->log(0).has_pre_prepare());
  EXPECT_EQ(persisted->log(1).SerializeAsString(), prepare.SerializeAsString());
  const auto broadcasts = ActionsOf<PbftBroadcast>(out_.Take());
  ASSERT_EQ(broadcasts.size(), 1u);
  EXPECT_TRUE(broadcasts[0].msg.has_prepare());
}

TEST_F(PbftOutboxTest, FailedWriteHaltsForGood) {
  out_.Broadcast(CommitMessage(0, 1, Tx(1)));
  store_.FailWrites(true);
  out_.PutView(ViewChangeRecord(1, out_.Sign(NewViewRequestMessage(1))));
  EXPECT_FALSE(out_.ok());
  const absl::Status first = out_.status();
  out_.AppendLog({});
  EXPECT_EQ(out_.status(), first);  // the first failure is kept
  EXPECT_TRUE(out_.Take().empty());
  out_.Broadcast(CommitMessage(0, 2, Tx(1)));
  EXPECT_TRUE(out_.Take().empty());
}

TEST_F(PbftOutboxTest, NothingIsWrittenAfterAFailedWriteEvenIfTheStoreRecovers) {
  out_.AppendLog({PrepareMessage(0, 1, Tx(1))});
  ASSERT_EQ(store_.writes(), 1u);
  store_.FailWrites(true);
  out_.AppendLog({PrePrepareMessage(1, 2, Tx(2), {}, 1)});  // e.g. a NewView's pre-prepares
  store_.FailWrites(false);
  out_.PutView(ViewChangeRecord(1, out_.Sign(NewViewRequestMessage(1))));  // ... and the NewView
  out_.PutStableCheckpoint({});
  EXPECT_FALSE(out_.ok());
  EXPECT_EQ(store_.writes(), 1u);
  auto persisted = store_.Load();
  ASSERT_TRUE(persisted.ok());
  EXPECT_FALSE(persisted->has_view());
  EXPECT_EQ(persisted->log_size(), 1);
}

TEST_F(PbftOutboxTest, HaltReplacesEarlierErrors) {
  store_.FailWrites(true);
  out_.PutStableCheckpoint({});
  out_.Halt(absl::InternalError("diverged"));
  EXPECT_EQ(out_.status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace partitions
