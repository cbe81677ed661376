// EgressValve over the two kinds of inner network, driven by hand on a fake clock: a FrameWriter
// double (chunks handed on one by one, backpressure from the transport), and the in-memory
// network (whole messages handed on when their last chunk is released, paced at the cap).
#include "p2p/egress_valve.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "p2p/in_memory_network.h"
#include "tests/mocks/fake_clock.h"

namespace p2p {
namespace {

using ::testing::ElementsAre;

constexpr int64_t kSec = 1'000'000'000;

// A transport that writes chunked frames: records them and lets the test push back.
class FakeFrameTransport final : public Network, public FrameWriter {
 public:
  const NodeId& self() const override { return self_; }
  std::vector<NodeId> peers() const override { return {"b", "c", "d"}; }
  std::vector<NodeId> connected_peers() const override { return {"b", "c"}; }
  absl::Status Send(const NodeId&, PartitionId, Channel, std::string) override {
    ADD_FAILURE() << "a FrameWriter gets frames, not messages";
    return absl::InternalError("unexpected");
  }
  absl::Status Broadcast(PartitionId, Channel, std::string) override {
    ADD_FAILURE() << "a FrameWriter gets frames, not messages";
    return absl::InternalError("unexpected");
  }
  void SetHandlers(MessageHandler, PeerEventHandler on_peer_event) override {
    on_peer_event_ = std::move(on_peer_event);
  }
  void WriteFrame(EgressFrame frame) override { frames.push_back(std::move(frame)); }
  void SetPressureHandler(PressureHandler handler) override { pressure_ = std::move(handler); }

  void Push(const NodeId& peer, bool blocked) { pressure_(peer, blocked); }
  void PeerDown(const NodeId& peer) { on_peer_event_(peer, PeerEvent::kDown); }

  std::vector<EgressFrame> frames;

 private:
  const NodeId self_ = "a";
  PeerEventHandler on_peer_event_;
  PressureHandler pressure_;
};

std::unique_ptr<EgressValve> MakeValve(Network* inner, FrameWriter* frames, double cap,
                                       const flowctl::Clock* clock) {
  EgressValveOptions o;
  o.egress.cap_bytes_per_second = cap;
  absl::StatusOr<std::unique_ptr<EgressValve>> v = EgressValve::Create(inner, frames, o, clock);
  CHECK(v.ok()) << v.status();
  return *std::move(v);
}

// Releases by hand until `end`, moving the fake clock to each time the valve names.
void RunUntil(EgressValve& valve, tests::FakeClock& clock, int64_t end) {
  for (;;) {
    const int64_t wait = valve.ReleaseDue();
    const int64_t now = clock.NowNanos();
    if (now >= end) return;
    clock.SetNanos(wait == EgressScheduler::kNever ? end : std::min(end, now + wait));
  }
}

TEST(EgressValveTest, HandsChunksToAFrameWriterAndHoldsABlockedPeer) {
  tests::FakeClock clock;
  FakeFrameTransport t;
  std::unique_ptr<EgressValve> valve = MakeValve(&t, &t, 1e5, &clock);  // 1 KiB chunks
  valve->SetHandlers(nullptr, nullptr);
  ASSERT_TRUE(valve->Send("b", 1, node::p2p::BULK, std::string(3000, 'b')).ok());
  ASSERT_TRUE(valve->Send("c", 1, node::p2p::BULK, "to-c").ok());
  t.Push("b", true);  // b's writer queue is full
  RunUntil(*valve, clock, clock.NowNanos() + kSec);
  ASSERT_EQ(t.frames.size(), 1u);
  EXPECT_EQ(t.frames[0].peer, "c");

  t.Push("b", false);
  RunUntil(*valve, clock, clock.NowNanos() + kSec);
  ASSERT_EQ(t.frames.size(), 4u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(t.frames[1 + i].peer, "b");
    EXPECT_EQ(t.frames[1 + i].chunk_index, i);
    EXPECT_EQ(t.frames[1 + i].chunk_count, 3u);
  }
  EXPECT_EQ(valve->Stats().egress.peer_block_events, 1u);
}

TEST(EgressValveTest, PeerChecksAndPeerDownDropTheQueue) {
  tests::FakeClock clock;
  FakeFrameTransport t;
  std::unique_ptr<EgressValve> valve = MakeValve(&t, &t, 1e5, &clock);
  valve->SetHandlers(nullptr, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(valve->Send("x", 1, node::p2p::SYNC, "?")));
  EXPECT_TRUE(absl::IsUnavailable(valve->Send("d", 1, node::p2p::SYNC, "?")));
  EXPECT_TRUE(absl::IsInvalidArgument(valve->Send("b", 1, node::p2p::CHANNEL_UNSPECIFIED, "?")));
  EXPECT_TRUE(absl::IsInvalidArgument(
      valve->Broadcast(1, node::p2p::BULK, std::string((16 << 20) + 1, 'x'))));
  EXPECT_EQ(valve->Stats().egress.oversized_refused, 1u);

  ASSERT_TRUE(valve->Broadcast(1, node::p2p::SYNC, "s").ok());  // to b and c
  EXPECT_EQ(valve->Stats().egress.channel(node::p2p::SYNC).queued_messages, 2u);
  t.PeerDown("b");
  EXPECT_EQ(valve->Stats().egress.channel(node::p2p::SYNC).queued_messages, 1u);
  valve->ReleaseDue();
  ASSERT_EQ(t.frames.size(), 1u);
  EXPECT_EQ(t.frames[0].peer, "c");
}

struct Got {
  Channel channel;
  std::string payload;
};

class InMemoryValveTest : public ::testing::Test {
 protected:
  InMemoryValveTest() : hub_(&clock_), a_(hub_.AddNode("a")), b_(hub_.AddNode("b")) {
    b_->SetHandlers(
        [this](const NodeId&, PartitionId, Channel ch, std::string payload) {
          got_.push_back({ch, std::move(payload)});
        },
        nullptr);
  }

  uint64_t DeliveredBytes() {
    hub_.DeliverAll();
    uint64_t n = 0;
    for (const Got& g : got_) n += g.payload.size();
    return n;
  }

  tests::FakeClock clock_;
  InMemoryHub hub_;
  std::unique_ptr<InMemoryNetwork> a_, b_;
  std::vector<Got> got_;
};

// The in-memory network gets the same third valve: what reaches it over time follows the cap,
// and a live cap change changes it.
TEST_F(InMemoryValveTest, PacesWholeMessagesAtTheCapAndFollowsALiveChange) {
  std::unique_ptr<EgressValve> valve = MakeValve(a_.get(), nullptr, 100'000, &clock_);
  valve->SetHandlers(nullptr, nullptr);
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(valve->Send("b", 1, node::p2p::BULK, std::string(5000, 'x')).ok());
  }
  RunUntil(*valve, clock_, clock_.NowNanos() + kSec);
  const uint64_t first = DeliveredBytes();
  // 5,000-byte messages cost 5,160 wire bytes (5 chunks); 100 kB/s plus one chunk of burst.
  EXPECT_GE(first, 90'000u);
  EXPECT_LE(first, 100'000u);
  EXPECT_EQ(first % 5000, 0u) << "whole messages only";

  ASSERT_TRUE(valve->scheduler().SetCap(400'000).ok());
  RunUntil(*valve, clock_, clock_.NowNanos() + kSec);
  const uint64_t second = DeliveredBytes() - first;
  EXPECT_GE(second, 370'000u);
  EXPECT_LE(second, 400'000u);
}

TEST_F(InMemoryValveTest, ConsensusOvertakesABulkBacklog) {
  std::unique_ptr<EgressValve> valve = MakeValve(a_.get(), nullptr, 100'000, &clock_);
  valve->SetHandlers(nullptr, nullptr);
  ASSERT_TRUE(valve->Send("b", 1, node::p2p::BULK, std::string(20'000, 'x')).ok());
  RunUntil(*valve, clock_, clock_.NowNanos() + kSec / 20);  // a few chunks are out
  ASSERT_TRUE(valve->Send("b", 1, node::p2p::CONSENSUS, "vote").ok());
  RunUntil(*valve, clock_, clock_.NowNanos() + kSec);
  hub_.DeliverAll();
  ASSERT_EQ(got_.size(), 2u);
  EXPECT_EQ(got_[0].payload, "vote");
  EXPECT_EQ(got_[1].payload.size(), 20'000u);
}

TEST_F(InMemoryValveTest, PeerDownDropsItsQueueAndRefusalsByTheNetworkAreCounted) {
  std::unique_ptr<EgressValve> valve = MakeValve(a_.get(), nullptr, 100'000, &clock_);
  valve->SetHandlers(nullptr, nullptr);
  ASSERT_TRUE(valve->Send("b", 1, node::p2p::SYNC, "one").ok());
  hub_.SetLinkUp("a", "b", false);  // kDown at a: the valve forgets b's queue
  EXPECT_EQ(valve->Stats().egress.channel(node::p2p::SYNC).queued_messages, 0u);
  EXPECT_TRUE(absl::IsUnavailable(valve->Send("b", 1, node::p2p::SYNC, "two")));
  hub_.SetLinkUp("a", "b", true);

  ASSERT_TRUE(valve->Send("b", 1, node::p2p::SYNC, "three").ok());
  b_.reset();  // gone without an event: the network refuses the message when it is released
  valve->ReleaseDue();
  EXPECT_EQ(valve->Stats().inner_send_failures, 1u);
}

}  // namespace
}  // namespace p2p
