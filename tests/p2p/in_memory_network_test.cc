#include "p2p/in_memory_network.h"

#include <string>
#include <tuple>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"

namespace p2p {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

using Received = std::tuple<NodeId, NodeId, PartitionId, Channel, std::string>;  // to, from, ...

class InMemoryNetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* id : {"a", "b", "c"}) {
      nodes_.push_back(hub_.AddNode(id));
      const NodeId self = id;
      nodes_.back()->SetHandlers(
          [this, self](const NodeId& from, PartitionId part, Channel ch, std::string payload) {
            received_.emplace_back(self, from, part, ch, std::move(payload));
          },
          [this, self](const NodeId& peer, PeerEvent ev) {
            events_.push_back(self + (ev == PeerEvent::kUp ? " up " : " down ") + peer);
          });
    }
  }
  void TearDown() override { nodes_.clear(); }

  Network& node(int i) { return *nodes_[i]; }

  tests::FakeClock clock_;
  InMemoryHub hub_{&clock_, /*max_frame_bytes=*/1024};
  std::vector<std::unique_ptr<InMemoryNetwork>> nodes_;
  std::vector<Received> received_;
  std::vector<std::string> events_;
};

TEST_F(InMemoryNetworkTest, NothingMovesUntilPumpedThenInSendOrder) {
  EXPECT_THAT(node(0).peers(), ElementsAre("b", "c"));
  ASSERT_TRUE(node(0).Send("b", 1, node::p2p::CONSENSUS, "one").ok());
  ASSERT_TRUE(node(0).Send("b", 2, node::p2p::BULK, "two").ok());
  EXPECT_TRUE(received_.empty());
  EXPECT_EQ(hub_.pending(), 2u);
  EXPECT_EQ(hub_.DeliverAll(), 2u);
  EXPECT_THAT(received_, ElementsAre(Received{"b", "a", 1, node::p2p::CONSENSUS, "one"},
                                     Received{"b", "a", 2, node::p2p::BULK, "two"}));
}

TEST_F(InMemoryNetworkTest, BroadcastReachesEveryOtherNode) {
  ASSERT_TRUE(node(1).Broadcast(7, node::p2p::SYNC, "x").ok());
  hub_.DeliverAll();
  EXPECT_THAT(received_, ElementsAre(Received{"a", "b", 7, node::p2p::SYNC, "x"},
                                     Received{"c", "b", 7, node::p2p::SYNC, "x"}));
}

TEST_F(InMemoryNetworkTest, RefusesUnknownPeerSelfOversizedAndBadChannel) {
  EXPECT_TRUE(absl::IsInvalidArgument(node(0).Send("zz", 1, node::p2p::CONSENSUS, "")));
  EXPECT_TRUE(absl::IsInvalidArgument(node(0).Send("a", 1, node::p2p::CONSENSUS, "")));
  EXPECT_TRUE(
      absl::IsInvalidArgument(node(0).Send("b", 1, node::p2p::CONSENSUS, std::string(1025, 'x'))));
  EXPECT_TRUE(absl::IsInvalidArgument(node(0).Send("b", 1, node::p2p::CHANNEL_UNSPECIFIED, "")));
  EXPECT_EQ(hub_.pending(), 0u);
}

TEST_F(InMemoryNetworkTest, HandlersMaySendWhileBeingDelivered) {
  nodes_[1]->SetHandlers(
      [this](const NodeId& from, PartitionId part, Channel ch, std::string payload) {
        ASSERT_TRUE(node(1).Send(from, part, ch, payload + "-echo").ok());
      },
      nullptr);
  ASSERT_TRUE(node(0).Send("b", 1, node::p2p::CONSENSUS, "ping").ok());
  EXPECT_EQ(hub_.DeliverAll(), 2u);
  EXPECT_THAT(received_, ElementsAre(Received{"a", "b", 1, node::p2p::CONSENSUS, "ping-echo"}));
}

TEST_F(InMemoryNetworkTest, FaultHookDropsAndDelaysByPredicate) {
  hub_.SetFaultHook([](const Envelope& e) {
    if (e.payload == "drop") return FaultDecision::Drop();
    if (e.payload == "late") return FaultDecision::Delay(5'000'000);
    return FaultDecision::Deliver();
  });
  ASSERT_TRUE(node(0).Send("b", 1, node::p2p::CONSENSUS, "late").ok());
  ASSERT_TRUE(node(0).Send("b", 1, node::p2p::CONSENSUS, "drop").ok());
  ASSERT_TRUE(node(0).Send("b", 1, node::p2p::CONSENSUS, "now").ok());
  EXPECT_EQ(hub_.DeliverAll(), 1u);
  EXPECT_EQ(std::get<4>(received_.back()), "now");
  EXPECT_EQ(hub_.NextDeliveryTime(), clock_.NowNanos() + 5'000'000);
  clock_.Advance(absl::Milliseconds(5));
  EXPECT_EQ(hub_.DeliverAll(), 1u);
  EXPECT_EQ(std::get<4>(received_.back()), "late");
  EXPECT_EQ(hub_.dropped(), 1u);
  EXPECT_EQ(hub_.delivered(), 2u);
}

TEST_F(InMemoryNetworkTest, DeliverBySeqReorders) {
  ASSERT_TRUE(node(0).Send("b", 1, node::p2p::CONSENSUS, "first").ok());
  ASSERT_TRUE(node(0).Send("b", 1, node::p2p::CONSENSUS, "second").ok());
  const std::vector<Envelope> pending = hub_.PendingForTest();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_TRUE(hub_.DeliverBySeq(pending[1].seq));
  EXPECT_FALSE(hub_.DeliverBySeq(pending[1].seq));
  hub_.DeliverAll();
  ASSERT_EQ(received_.size(), 2u);
  EXPECT_EQ(std::get<4>(received_[0]), "second");
  EXPECT_EQ(std::get<4>(received_[1]), "first");
}

TEST_F(InMemoryNetworkTest, CutLinkFiresEventsRefusesSendsAndDropsQueued) {
  ASSERT_TRUE(node(0).Send("b", 1, node::p2p::CONSENSUS, "queued").ok());
  hub_.SetLinkUp("a", "b", false);
  EXPECT_THAT(events_, ElementsAre("a down b", "b down a"));
  EXPECT_TRUE(absl::IsUnavailable(node(0).Send("b", 1, node::p2p::CONSENSUS, "x")));
  EXPECT_THAT(node(0).connected_peers(), ElementsAre("c"));
  ASSERT_TRUE(node(0).Broadcast(1, node::p2p::CONSENSUS, "bc").ok());
  hub_.DeliverAll();
  EXPECT_THAT(received_, ElementsAre(Received{"c", "a", 1, node::p2p::CONSENSUS, "bc"}));
  EXPECT_EQ(hub_.dropped(), 1u);
  hub_.SetNodeUp("a", true);
  EXPECT_THAT(events_, ElementsAre("a down b", "b down a", "a up b", "b up a"));
}

TEST_F(InMemoryNetworkTest, DeliveryThreadDeliversWithRealClock) {
  TearDown();
  InMemoryHub hub;
  auto a = hub.AddNode("a");
  auto b = hub.AddNode("b");
  absl::Notification got;
  b->SetHandlers([&](const NodeId&, PartitionId, Channel, std::string) { got.Notify(); }, nullptr);
  hub.StartDeliveryThread();
  ASSERT_TRUE(a->Send("b", 1, node::p2p::CONSENSUS, "x").ok());
  EXPECT_TRUE(got.WaitForNotificationWithTimeout(absl::Seconds(10)));
  hub.StopDeliveryThread();
  a.reset();
  b.reset();
}

}  // namespace
}  // namespace p2p
