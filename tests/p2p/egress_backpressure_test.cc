// Per-peer backpressure in the egress scheduler: a peer whose writer queue is full is skipped
// (its messages wait, in priority order), the others go ahead, and a blocked peer's share of the
// queues is bounded.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "p2p/egress_scheduler.h"
#include "tests/mocks/fake_clock.h"

namespace p2p {
namespace {

using node::p2p::BULK;
using node::p2p::CONSENSUS;
using node::p2p::SYNC;
using node::p2p::TX_FORWARD;

// Every frame the scheduler releases now (unlimited cap), in order.
std::vector<EgressFrame> DrainNow(EgressScheduler& s) {
  std::vector<EgressFrame> out;
  for (int i = 0; i < 10'000; ++i) {
    DequeueResult r = s.Dequeue();
    if (!r.frame) break;
    out.push_back(*r.frame);
  }
  return out;
}

std::string Describe(const std::vector<EgressFrame>& frames) {
  std::string s;
  for (const EgressFrame& f : frames) {
    s += f.peer + ":" + std::string(ChannelName(f.channel)) + ":" + std::string(f.payload()) + " ";
  }
  return s;
}

TEST(EgressBackpressureTest, BlockedPeerWaitsOthersGoAhead) {
  tests::FakeClock clock;
  EgressScheduler s(EgressOptions{}, &clock);
  int wakes = 0;
  s.SetWakeup([&] { ++wakes; });
  s.SetPeerBlocked("slow", true);
  ASSERT_TRUE(s.Enqueue("slow", 1, TX_FORWARD, std::string("t1")).ok());
  ASSERT_TRUE(s.Enqueue("fast", 1, TX_FORWARD, std::string("t2")).ok());
  ASSERT_TRUE(s.Enqueue("slow", 1, SYNC, std::string("s1")).ok());
  ASSERT_TRUE(s.Enqueue("fast", 1, SYNC, std::string("s2")).ok());
  EXPECT_EQ(Describe(DrainNow(s)), "fast:SYNC:s2 fast:TX_FORWARD:t2 ");
  EXPECT_EQ(s.Dequeue().wait_nanos, EgressScheduler::kNever);  // the rest waits on "slow"
  EXPECT_EQ(s.Stats().blocked_peers, 1u);

  // Once drained, the slow link gets its SYNC before the TX_FORWARD queued earlier.
  const int before = wakes;
  s.SetPeerBlocked("slow", false);
  EXPECT_EQ(wakes, before + 1);
  EXPECT_EQ(Describe(DrainNow(s)), "slow:SYNC:s1 slow:TX_FORWARD:t1 ");
  EXPECT_EQ(s.Stats().peer_block_events, 1u);
  EXPECT_EQ(s.Stats().blocked_peers, 0u);
}

TEST(EgressBackpressureTest, OrderPerPeerIsKeptAcrossPartitions) {
  tests::FakeClock clock;
  EgressScheduler s(EgressOptions{}, &clock);
  s.SetPeerBlocked("a", true);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(s.Enqueue("a", 1 + i % 2, CONSENSUS, "a" + std::to_string(i)).ok());
    ASSERT_TRUE(s.Enqueue("b", 1 + i % 2, CONSENSUS, "b" + std::to_string(i)).ok());
  }
  std::vector<EgressFrame> first = DrainNow(s);
  ASSERT_EQ(first.size(), 3u);
  for (const EgressFrame& f : first) EXPECT_EQ(f.peer, "b");
  s.SetPeerBlocked("a", false);
  std::vector<EgressFrame> rest = DrainNow(s);
  ASSERT_EQ(rest.size(), 3u);
  // Partitions alternate (round robin), and within a partition a's messages keep their order.
  std::vector<std::string> p1, p2;
  for (const EgressFrame& f : rest) (f.partition == 1 ? p1 : p2).emplace_back(f.payload());
  EXPECT_EQ(p1, (std::vector<std::string>{"a0", "a2"}));
  EXPECT_EQ(p2, (std::vector<std::string>{"a1"}));
}

TEST(EgressBackpressureTest, ChunkedMessagePausesAndResumesForItsPeer) {
  tests::FakeClock clock;
  EgressOptions opt;
  opt.cap_bytes_per_second = 512 * 1000;  // chunk = 1 KiB (the minimum)
  EgressScheduler s(opt, &clock);
  ASSERT_TRUE(s.Enqueue("a", 1, BULK, std::string(3000, 'x')).ok());
  DequeueResult r = s.Dequeue();
  ASSERT_TRUE(r.frame.has_value());
  EXPECT_EQ(r.frame->chunk_index, 0u);
  s.SetPeerBlocked("a", true);
  ASSERT_TRUE(s.Enqueue("b", 1, BULK, std::string(10, 'y')).ok());
  clock.AdvanceNanos(1'000'000'000);
  r = s.Dequeue();
  ASSERT_TRUE(r.frame.has_value());
  EXPECT_EQ(r.frame->peer, "b");
  clock.AdvanceNanos(1'000'000'000);
  EXPECT_FALSE(s.Dequeue().frame.has_value());
  s.SetPeerBlocked("a", false);
  r = s.Dequeue();
  ASSERT_TRUE(r.frame.has_value());
  EXPECT_EQ(r.frame->peer, "a");
  EXPECT_EQ(r.frame->chunk_index, 1u);  // the same message carries on
}

TEST(EgressBackpressureTest, BlockedPeerIsBoundedLowPriorityGoesFirst) {
  tests::FakeClock clock;
  EgressOptions opt;
  opt.blocked_peer_bytes = 1000;
  EgressScheduler s(opt, &clock);
  s.SetPeerBlocked("slow", true);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(s.Enqueue("slow", 1, TX_FORWARD, std::string(200, 't')).ok());
  }
  ASSERT_TRUE(s.Enqueue("slow", 1, BULK, std::string(100, 'b')).ok());  // 900 bytes now
  // 300 bytes of consensus: the BULK message (oldest lowest priority) and one TX_FORWARD go.
  ASSERT_TRUE(s.Enqueue("slow", 1, CONSENSUS, std::string(300, 'c')).ok());
  EgressStats st = s.Stats();
  EXPECT_EQ(st.blocked_peer_drops, 2u);
  EXPECT_EQ(st.channel(BULK).messages_dropped, 1u);
  EXPECT_EQ(st.channel(TX_FORWARD).messages_dropped, 1u);
  EXPECT_EQ(st.channel(TX_FORWARD).queued_messages, 3u);
  // Nothing lower left to drop: a message that does not fit is dropped itself, and counted.
  ASSERT_TRUE(s.Enqueue("slow", 1, CONSENSUS, std::string(800, 'c')).ok());
  st = s.Stats();
  EXPECT_EQ(st.blocked_peer_drops, 6u);  // the three TX_FORWARD, then the new message
  EXPECT_EQ(st.channel(CONSENSUS).messages_dropped, 1u);
  EXPECT_EQ(st.channel(CONSENSUS).queued_messages, 1u);
  // Another peer is not affected by slow's bound.
  ASSERT_TRUE(s.Enqueue("fast", 1, TX_FORWARD, std::string(2000, 'f')).ok());
  EXPECT_EQ(Describe(DrainNow(s)).substr(0, 16), "fast:TX_FORWARD:");
}

TEST(EgressBackpressureTest, DropPeerForgetsTheBlockAndFifoModeIgnoresIt) {
  tests::FakeClock clock;
  EgressScheduler s(EgressOptions{}, &clock);
  s.SetPeerBlocked("a", true);
  ASSERT_TRUE(s.Enqueue("a", 1, SYNC, std::string("old")).ok());
  EXPECT_EQ(s.DropPeer("a"), 1u);
  EXPECT_EQ(s.Stats().blocked_peers, 0u);
  ASSERT_TRUE(s.Enqueue("a", 1, SYNC, std::string("new")).ok());  // a new connection
  EXPECT_EQ(Describe(DrainNow(s)), "a:SYNC:new ");

  EgressOptions fifo;
  fifo.fifo_mode = true;
  EgressScheduler f(fifo, &clock);
  f.SetPeerBlocked("a", true);
  ASSERT_TRUE(f.Enqueue("a", 1, SYNC, std::string("x")).ok());
  EXPECT_EQ(Describe(DrainNow(f)), "a:SYNC:x ");
}

}  // namespace
}  // namespace p2p
