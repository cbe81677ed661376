// Forwarder: backups batch client txs onto TX_FORWARD; the primary holds them for its proposals
// and forwards what it did not propose in time.
#include "partitions/forwarder.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"
#include "tests/mocks/recording_network.h"
#include "tests/partitions/chain_test_util.h"

namespace partitions {
namespace {

class ForwarderTest : public ::testing::Test {
 protected:
  ForwarderTest()
      : sender_(&net_, 1, {"a", "b", "c", "d"}, 0),
        fwd_(&sender_, &clock_, {.hold_nanos = 100, .flush_bytes = 1 << 20}) {
    keys_ = chaintest::Keys(1);
    for (int i = 1; i <= 4; ++i) txs_.push_back(chaintest::Put(keys_[0], i, "k", "v"));
  }

  // (channel, txs carried) of each broadcast.
  std::vector<std::pair<p2p::Channel, int>> Sent() const {
    std::vector<std::pair<p2p::Channel, int>> out;
    for (const tests::RecordingNetwork::Sent& s : net_.log()) {
      node::partition::PartitionMessage m;
      EXPECT_TRUE(m.ParseFromString(s.payload));
      out.emplace_back(s.channel, m.txs().signed_txs_size());
    }
    return out;
  }

  tests::RecordingNetwork net_{"a", {"b", "c", "d"}};
  tests::FakeClock clock_{0};
  PeerSender sender_;
  Forwarder fwd_;
  std::vector<base::PrivateKey> keys_;
  std::vector<TxPtr> txs_;
};

TEST_F(ForwarderTest, ABackupBatchesItsClientTxsOntoTxForward) {
  fwd_.Queue(txs_[0]);
  fwd_.Queue(txs_[1]);
  EXPECT_TRUE(Sent().empty());
  EXPECT_EQ(fwd_.Flush(false), std::numeric_limits<int64_t>::max());  // nothing held
  ASSERT_EQ(Sent().size(), 1u);
  EXPECT_EQ(Sent()[0], std::make_pair(p2p::Channel::TX_FORWARD, 2));
  fwd_.Flush(false);  // nothing left
  EXPECT_EQ(Sent().size(), 1u);
}

TEST_F(ForwarderTest, UnderLoadTxsGoInBatchesTheIntervalApart) {
  const size_t tx_bytes = txs_[0]->signed_bytes.size();
  Forwarder fwd(&sender_, &clock_,
                {.hold_nanos = 100, .flush_bytes = 3 * tx_bytes, .min_interval_nanos = 50});
  clock_.SetNanos(1'000);
  // An idle forwarder sends at once.
  fwd.Queue(txs_[0]);
  EXPECT_EQ(fwd.Flush(false), std::numeric_limits<int64_t>::max());
  ASSERT_EQ(Sent().size(), 1u);
  // Within the interval the txs wait, and Flush says until when.
  clock_.AdvanceNanos(10);
  fwd.Queue(txs_[1]);
  EXPECT_EQ(fwd.Flush(false), 1'050);
  clock_.AdvanceNanos(30);
  fwd.Queue(txs_[2]);
  EXPECT_EQ(fwd.Flush(false), 1'050);
  EXPECT_EQ(Sent().size(), 1u);
  clock_.SetNanos(1'050);  // due: one batch of both
  EXPECT_EQ(fwd.Flush(false), std::numeric_limits<int64_t>::max());
  ASSERT_EQ(Sent().size(), 2u);
  EXPECT_EQ(Sent()[1], std::make_pair(p2p::Channel::TX_FORWARD, 2));
  // `flush_bytes` queued go at once, interval or not.
  clock_.AdvanceNanos(1);
  fwd.Queue(txs_[0]);
  fwd.Queue(txs_[1]);
  EXPECT_EQ(Sent().size(), 2u);
  fwd.Queue(txs_[2]);
  ASSERT_EQ(Sent().size(), 3u);
  EXPECT_EQ(Sent()[2], std::make_pair(p2p::Channel::TX_FORWARD, 3));
  // And so does everything at release_all (stop).
  clock_.AdvanceNanos(1);
  fwd.Queue(txs_[3]);
  EXPECT_EQ(fwd.Flush(false), 1'051 + 50);
  fwd.Flush(true);
  ASSERT_EQ(Sent().size(), 4u);
  EXPECT_EQ(Sent()[3], std::make_pair(p2p::Channel::TX_FORWARD, 1));
}

TEST_F(ForwarderTest, QueuedTxsGoWithHeldOnesAndWhileHolding) {
  Forwarder fwd(&sender_, &clock_, {.hold_nanos = 100, .min_interval_nanos = 50});
  fwd.Queue(txs_[0]);
  fwd.Flush(false);  // sent at once: the interval runs from 0
  fwd.SetHolding(true);
  clock_.SetNanos(10);
  fwd.Queue(txs_[1]);  // held until 110
  EXPECT_EQ(fwd.Flush(false), 110);
  fwd.SetHolding(false);
  clock_.SetNanos(20);
  fwd.Queue(txs_[2]);  // due at 50, but it goes with the held one (holding stopped)
  EXPECT_EQ(fwd.Flush(false), std::numeric_limits<int64_t>::max());
  ASSERT_EQ(Sent().size(), 2u);
  EXPECT_EQ(Sent()[1], std::make_pair(p2p::Channel::TX_FORWARD, 2));
  // The batch restarted the interval.
  clock_.SetNanos(30);
  fwd.Queue(txs_[3]);
  EXPECT_EQ(fwd.Flush(false), 70);
  // Primary again: the queued tx goes with the next Flush; the held one says when it is due.
  fwd.SetHolding(true);
  clock_.SetNanos(31);
  fwd.Queue(txs_[0]);  // held until 131
  EXPECT_EQ(fwd.Flush(false), 131);
  ASSERT_EQ(Sent().size(), 3u);
  EXPECT_EQ(Sent()[2], std::make_pair(p2p::Channel::TX_FORWARD, 1));
}

TEST_F(ForwarderTest, WhileHoldingBodiesGivenBackGoWithTheNextFlushWhateverTheInterval) {
  Forwarder fwd(&sender_, &clock_, {.hold_nanos = 100, .min_interval_nanos = 50});
  fwd.Queue(txs_[0]);
  fwd.Flush(false);  // a backup's batch at 0: the interval runs to 50
  ASSERT_EQ(Sent().size(), 1u);
  // Primary now: the queued tx that came within the interval goes with the next Flush.
  fwd.Queue(txs_[1]);
  fwd.SetHolding(true);
  clock_.SetNanos(10);
  EXPECT_EQ(fwd.Flush(false), std::numeric_limits<int64_t>::max());
  ASSERT_EQ(Sent().size(), 2u);
  // A proposal's bodies taken, then given back (no pre-prepare followed): next Flush, at 20.
  fwd.Queue(txs_[2]);
  std::optional<node::partition::PartitionMessage> bodies = fwd.TakeBodies({txs_[2]});
  ASSERT_TRUE(bodies.has_value());
  fwd.ReturnBodies(*std::move(bodies));
  clock_.SetNanos(20);
  EXPECT_EQ(fwd.Flush(false), std::numeric_limits<int64_t>::max());
  ASSERT_EQ(Sent().size(), 3u);
  EXPECT_EQ(Sent()[2], std::make_pair(p2p::Channel::TX_FORWARD, 1));
}

TEST_F(ForwarderTest, ReforwardGoesToThePrimaryOnlyOnTxForward) {
  EXPECT_TRUE(fwd_.Reforward(2, {txs_[0], txs_[1]}));
  ASSERT_EQ(net_.log().size(), 1u);
  EXPECT_EQ(net_.log()[0].to, "c");  // replica 2 of a, b, c, d
  EXPECT_EQ(Sent()[0], std::make_pair(p2p::Channel::TX_FORWARD, 2));
  EXPECT_EQ(fwd_.reforwarded_txs(), 2u);
  EXPECT_TRUE(fwd_.Reforward(2, {}));  // nothing to send: no message
  EXPECT_EQ(net_.log().size(), 1u);
}

TEST_F(ForwarderTest, ThePrimarySendsHeldBodiesWithItsProposalAndForwardsTheRestLate) {
  fwd_.SetHolding(true);
  for (const TxPtr& t : txs_) fwd_.Queue(t);
  fwd_.Flush(false);
  EXPECT_TRUE(Sent().empty());  // held, not forwarded
  std::optional<node::partition::PartitionMessage> bodies = fwd_.TakeBodies({txs_[0], txs_[1]});
  ASSERT_TRUE(bodies.has_value());
  EXPECT_TRUE(fwd_.SendBodies(*std::move(bodies)));
  ASSERT_EQ(Sent().size(), 1u);
  EXPECT_EQ(Sent()[0], std::make_pair(p2p::Channel::CONSENSUS, 2));
  EXPECT_EQ(fwd_.proposal_body_txs(), 2u);
  // Flush says when the oldest tx still held is due: no periodic flush is needed.
  EXPECT_EQ(fwd_.Flush(false), 100);
  clock_.AdvanceNanos(100);  // the hold limit: the two not proposed are forwarded
  EXPECT_EQ(fwd_.Flush(false), std::numeric_limits<int64_t>::max());
  ASSERT_EQ(Sent().size(), 2u);
  EXPECT_EQ(Sent()[1], std::make_pair(p2p::Channel::TX_FORWARD, 2));
  EXPECT_EQ(fwd_.held(), 0u);
}

TEST_F(ForwarderTest, LosingThePrimaryRoleOrARefusedSendForwardsEverythingHeld) {
  fwd_.SetHolding(true);
  fwd_.Queue(txs_[0]);
  fwd_.Queue(txs_[1]);
  net_.refuse.store(true);
  std::optional<node::partition::PartitionMessage> bodies = fwd_.TakeBodies({txs_[0]});
  ASSERT_TRUE(bodies.has_value());
  EXPECT_FALSE(fwd_.SendBodies(*std::move(bodies)));  // refused: back to forwarding
  EXPECT_EQ(sender_.broadcast_failures(), 1u);
  net_.refuse.store(false);
  EXPECT_TRUE(fwd_.SetHolding(false));
  fwd_.Flush(false);
  ASSERT_EQ(Sent().size(), 1u);
  EXPECT_EQ(Sent()[0], std::make_pair(p2p::Channel::TX_FORWARD, 2));
}

}  // namespace
}  // namespace partitions
