#include "p2p/egress_scheduler.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"

namespace p2p {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSec = 1'000'000'000;

// The default table with every queue bounded at `bytes`.
ChannelTable WithQueueBytes(size_t bytes) {
  std::vector<ChannelDescriptor> d = DefaultChannelDescriptors();
  for (ChannelDescriptor& c : d) c.queue_bytes = bytes;
  absl::StatusOr<ChannelTable> t = ChannelTable::Create(std::move(d));
  CHECK(t.ok()) << t.status();
  return *std::move(t);
}

// Drives a scheduler with a fake clock: periodic sources enqueue at their times, the simulated
// transport takes every frame the scheduler releases instantly, and time jumps to the next event
// (next arrival or the scheduler's wait).
class Driver {
 public:
  struct Source {
    NodeId peer;
    PartitionId partition;
    Channel channel;
    size_t bytes;
    int64_t period;
    int64_t next;
  };

  Driver(EgressScheduler* s, tests::FakeClock* clock) : s_(s), clock_(clock) {}

  void AddSource(const NodeId& peer, PartitionId p, Channel ch, size_t bytes, int64_t period) {
    sources_.push_back({peer, p, ch, bytes, period, clock_->NowNanos()});
  }

  // Runs until `end` (clock nanos); returns wire bytes handed to the transport.
  uint64_t RunUntil(int64_t end) {
    uint64_t wire = 0;
    for (int guard = 0; guard < 50'000'000; ++guard) {
      const int64_t now = clock_->NowNanos();
      int64_t next_arrival = end;
      for (Source& src : sources_) {
        while (src.next <= now) {
          absl::Status st =
              s_->Enqueue(src.peer, src.partition, src.channel, std::string(src.bytes, 'x'));
          if (!st.ok()) ++enqueue_errors_;
          src.next += src.period;
        }
        next_arrival = std::min(next_arrival, src.next);
      }
      DequeueResult r = s_->Dequeue();
      if (r.frame) {
        wire += r.frame->wire_bytes();
        frames_.push_back(*r.frame);
        if (keep_frames_ == 0) frames_.clear();
        continue;
      }
      if (now >= end) return wire;
      const int64_t wake = r.wait_nanos == EgressScheduler::kNever
                               ? next_arrival
                               : std::min(next_arrival, now + r.wait_nanos);
      clock_->SetNanos(std::min(std::max(wake, now + 1), end));
    }
    ADD_FAILURE() << "driver did not finish";
    return wire;
  }

  std::vector<EgressFrame> frames_;
  int keep_frames_ = 0;
  int enqueue_errors_ = 0;

 private:
  EgressScheduler* s_;
  tests::FakeClock* clock_;
  std::vector<Source> sources_;
};

TEST(ChunkBytesForCapTest, TwoMillisecondsClamped) {
  EXPECT_EQ(ChunkBytesForCap(2e6), 4000u);
  EXPECT_EQ(ChunkBytesForCap(1e5), kMinChunkBytes);
  EXPECT_EQ(ChunkBytesForCap(1e9), kMaxChunkBytes);
  EXPECT_EQ(ChunkBytesForCap(0), kMaxChunkBytes);
}

struct PriorityRun {
  int64_t consensus_p99 = 0;
  uint64_t wire_in_window = 0;
  EgressStats stats;
};

// Cap 2 MB/s, TX_FORWARD offered at 20 MB/s (16 KiB every 0.8192 ms), CONSENSUS 1 KiB every 10 ms.
PriorityRun RunPriorityScenario(bool fifo) {
  tests::FakeClock clock;
  EgressOptions opt;
  opt.cap_bytes_per_second = 2e6;
  opt.fifo_mode = fifo;
  opt.channels = WithQueueBytes(1 << 20);
  EgressScheduler s(opt, &clock);
  Driver d(&s, &clock);
  d.AddSource("b", 1, node::p2p::TX_FORWARD, 16384, 819'200);
  d.AddSource("c", 1, node::p2p::CONSENSUS, 1024, 10 * kMs);
  // One second to reach steady state (usage window filled), then a 5-second window.
  d.RunUntil(clock.NowNanos() + kSec);
  PriorityRun run;
  run.wire_in_window = d.RunUntil(clock.NowNanos() + 5 * kSec);
  run.stats = s.Stats();
  run.consensus_p99 = run.stats.channels[0].queue_delay_nanos.Percentile(0.99);
  return run;
}

TEST(EgressSchedulerTest, ConsensusBeatsForwardingFloodAndFifoIsFarWorse) {
  const PriorityRun prio = RunPriorityScenario(/*fifo=*/false);
  const PriorityRun fifo = RunPriorityScenario(/*fifo=*/true);
  std::printf(
      "consensus p99 queueing delay: priority %.3f ms, fifo %.3f ms; wire bytes in 5 s: "
      "priority %llu, fifo %llu (cap x time = 10000000)\n",
      prio.consensus_p99 / 1e6, fifo.consensus_p99 / 1e6,
      static_cast<unsigned long long>(prio.wire_in_window),
      static_cast<unsigned long long>(fifo.wire_in_window));
  EXPECT_LE(prio.consensus_p99, 5 * kMs);
  EXPECT_GE(fifo.consensus_p99, 20 * prio.consensus_p99)
      << "priority p99 " << prio.consensus_p99 << " fifo p99 " << fifo.consensus_p99;
  // Nothing of consensus was refused in priority mode; forwarding was dropped oldest-first.
  EXPECT_EQ(prio.stats.channels[0].messages_refused, 0u);
  EXPECT_GT(prio.stats.channels[2].messages_dropped, 0u);
  // Bytes handed to the transport within 2% of cap x 5 s.
  const double expected = 2e6 * 5;
  EXPECT_NEAR(static_cast<double>(prio.wire_in_window), expected, 0.02 * expected);
  EXPECT_NEAR(static_cast<double>(fifo.wire_in_window), expected, 0.02 * expected);
  // Derived forwarding rate = cap - consensus usage (1056 B / 10 ms).
  EXPECT_NEAR(prio.stats.tx_forward_rate, 2e6 - 105'600, 0.02 * 2e6);
  EXPECT_NEAR(prio.stats.priority_usage_bytes_per_second, 105'600, 10'000);
}

TEST(EgressSchedulerTest, PartitionSharesFollowWeightsUnderSaturation) {
  tests::FakeClock clock;
  EgressOptions opt;
  opt.cap_bytes_per_second = 2e6;
  EgressScheduler s(opt, &clock);
  ASSERT_TRUE(s.SetPartitionWeight(1, 1).ok());
  ASSERT_TRUE(s.SetPartitionWeight(2, 2).ok());
  ASSERT_TRUE(s.SetPartitionWeight(3, 5).ok());
  Driver d(&s, &clock);
  // Each partition alone could fill the cap; odd sizes exercise the deficit counter.
  d.AddSource("b", 1, node::p2p::BULK, 3000, kMs);
  d.AddSource("b", 2, node::p2p::BULK, 7777, 2 * kMs);
  d.AddSource("c", 3, node::p2p::BULK, 500, 200'000);
  d.RunUntil(clock.NowNanos() + 5 * kSec);
  const EgressStats st = s.Stats();
  double total = 0;
  std::map<PartitionId, double> bytes;
  for (const auto& [key, ps] : st.partitions) {
    bytes[key.first] += ps.bytes_sent;
    total += ps.bytes_sent;
  }
  EXPECT_NEAR(bytes[1] / total, 1.0 / 8, 0.05 / 8);
  EXPECT_NEAR(bytes[2] / total, 2.0 / 8, 0.05 * 2 / 8);
  EXPECT_NEAR(bytes[3] / total, 5.0 / 8, 0.05 * 5 / 8);
}

TEST(EgressSchedulerTest, DerivedRateNeverBelowFloorAndFollowsLiveChanges) {
  tests::FakeClock clock;
  EgressOptions opt;
  opt.cap_bytes_per_second = 1e6;
  opt.tx_forward_floor_bytes_per_second = 200'000;
  EgressScheduler s(opt, &clock);
  EXPECT_DOUBLE_EQ(s.Stats().tx_forward_rate, 1e6);
  Driver d(&s, &clock);
  // Consensus alone wants ~1 MB/s: forwarding is held at the floor.
  d.AddSource("b", 1, node::p2p::CONSENSUS, 968, kMs);
  d.AddSource("b", 1, node::p2p::TX_FORWARD, 4000, kMs);
  d.RunUntil(clock.NowNanos() + 2 * kSec);
  EXPECT_DOUBLE_EQ(s.Stats().tx_forward_rate, 200'000);
  ASSERT_TRUE(s.SetTxForwardFloor(300'000).ok());
  EXPECT_DOUBLE_EQ(s.Stats().tx_forward_rate, 300'000);
  ASSERT_TRUE(s.SetCap(0).ok());
  EXPECT_TRUE(std::isinf(s.Stats().tx_forward_rate));
  EXPECT_EQ(s.Stats().chunk_bytes, kMaxChunkBytes);
  EXPECT_FALSE(s.SetCap(-1).ok());
  EXPECT_FALSE(s.SetPartitionWeight(1, 0).ok());
}

TEST(EgressSchedulerTest, ForwardingHeldToDerivedRate) {
  tests::FakeClock clock;
  EgressOptions opt;
  opt.cap_bytes_per_second = 1e6;
  opt.tx_forward_floor_bytes_per_second = 100'000;
  EgressScheduler s(opt, &clock);
  Driver d(&s, &clock);
  d.AddSource("b", 1, node::p2p::SYNC, 2968, 5 * kMs);    // 600 KB/s
  d.AddSource("b", 1, node::p2p::TX_FORWARD, 1968, kMs);  // 2 MB/s offered
  d.RunUntil(clock.NowNanos() + 2 * kSec);
  const EgressStats before = s.Stats();
  d.RunUntil(clock.NowNanos() + 2 * kSec);
  const EgressStats after = s.Stats();
  const double tx_rate = (after.channels[2].bytes_sent - before.channels[2].bytes_sent) / 2.0;
  const double sync_rate = (after.channels[1].bytes_sent - before.channels[1].bytes_sent) / 2.0;
  EXPECT_NEAR(sync_rate, 600'000, 10'000);
  EXPECT_NEAR(tx_rate, 400'000, 20'000);
  EXPECT_NEAR(after.tx_forward_rate, 400'000, 20'000);
}

TEST(EgressSchedulerTest, ForwardingDropsOldestFirstConsensusRefusesAndCounts) {
  tests::FakeClock clock;
  EgressOptions opt;
  opt.cap_bytes_per_second = 1e6;
  opt.channels = WithQueueBytes(3000);
  EgressScheduler s(opt, &clock);
  for (char c : std::string("abcd")) {
    ASSERT_TRUE(s.Enqueue("b", 1, node::p2p::TX_FORWARD, std::string(1000, c)).ok());
  }
  const EgressStats st = s.Stats();
  EXPECT_EQ(st.channels[2].messages_dropped, 1u);
  EXPECT_EQ(st.channels[2].queued_bytes, 3000u);
  std::string order;
  for (int i = 0; i < 3; ++i) {
    DequeueResult r = s.Dequeue();
    ASSERT_TRUE(r.frame);
    order += r.frame->payload()[0];
    clock.Advance(absl::Milliseconds(10));
  }
  EXPECT_EQ(order, "bcd");  // 'a', the oldest, was dropped

  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(s.Enqueue("b", 1, node::p2p::CONSENSUS, std::string(1000, 'c')).ok());
  }
  EXPECT_TRUE(
      absl::IsResourceExhausted(s.Enqueue("b", 1, node::p2p::CONSENSUS, std::string(1000, 'c'))));
  EXPECT_EQ(s.Stats().channels[0].messages_refused, 1u);
  EXPECT_EQ(s.Stats().channels[0].queued_messages, 3u);
}

TEST(EgressSchedulerTest, OversizedFrameRefusedWithClearErrorAndCounted) {
  tests::FakeClock clock;
  EgressOptions opt;
  opt.max_frame_bytes = 1000;
  EgressScheduler s(opt, &clock);
  absl::Status st = s.Enqueue("b", 1, node::p2p::BULK, std::string(1001, 'x'));
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("exceeds max_frame_bytes 1000"));
  EXPECT_EQ(s.Stats().oversized_refused, 1u);
  EXPECT_TRUE(s.Enqueue("b", 1, node::p2p::BULK, std::string(1000, 'x')).ok());
}

TEST(EgressSchedulerTest, ConsensusGoesOutBetweenTwoChunksOfABulkMessage) {
  tests::FakeClock clock;
  EgressOptions opt;
  opt.cap_bytes_per_second = 1e6;  // 2000-byte chunks
  EgressScheduler s(opt, &clock);
  std::string big(10'000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(s.Enqueue("b", 1, node::p2p::BULK, big).ok());
  std::vector<EgressFrame> out;
  bool vote_sent = false;
  for (int i = 0; i < 100 && out.size() < 6; ++i) {
    if (out.size() == 2 && !vote_sent) {
      vote_sent = true;
      ASSERT_TRUE(s.Enqueue("b", 1, node::p2p::CONSENSUS, std::string("vote")).ok());
    }
    DequeueResult r = s.Dequeue();
    if (r.frame) {
      out.push_back(*r.frame);
    } else {
      ASSERT_NE(r.wait_nanos, EgressScheduler::kNever);
      clock.AdvanceNanos(r.wait_nanos);
    }
  }
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[2].channel, node::p2p::CONSENSUS);
  EXPECT_EQ(out[2].payload(), "vote");
  std::string reassembled;
  uint32_t next = 0;
  for (const EgressFrame& f : out) {
    if (f.channel != node::p2p::BULK) continue;
    EXPECT_EQ(f.chunk_index, next++);
    EXPECT_EQ(f.chunk_count, 5u);
    EXPECT_EQ(f.message_length, 10'000u);
    EXPECT_LE(f.length, 2000u);
    reassembled.append(f.payload().data(), f.payload().size());
  }
  EXPECT_TRUE(reassembled == big) << reassembled.size();
}

TEST(EgressSchedulerTest, UnlimitedCapNeverWaitsAndEmptyWaitsForever) {
  tests::FakeClock clock;
  EgressScheduler s(EgressOptions{}, &clock);
  EXPECT_EQ(s.Dequeue().wait_nanos, EgressScheduler::kNever);
  for (int i = 0; i < 200; ++i) {  // 20 MB, within the BULK queue bound
    ASSERT_TRUE(s.Enqueue("b", 1, node::p2p::BULK, std::string(100'000, 'x')).ok());
  }
  int frames = 0;
  for (DequeueResult r = s.Dequeue(); r.frame; r = s.Dequeue()) ++frames;
  EXPECT_EQ(frames, 200 * 2);  // 64 KiB chunks
}

TEST(EgressSchedulerTest, DropPeerForgetsItsMessages) {
  tests::FakeClock clock;
  EgressScheduler s(EgressOptions{}, &clock);
  ASSERT_TRUE(s.Enqueue("b", 1, node::p2p::BULK, std::string("1")).ok());
  ASSERT_TRUE(s.Enqueue("c", 1, node::p2p::BULK, std::string("2")).ok());
  ASSERT_TRUE(s.Enqueue("b", 2, node::p2p::CONSENSUS, std::string("3")).ok());
  EXPECT_EQ(s.DropPeer("b"), 2u);
  DequeueResult r = s.Dequeue();
  ASSERT_TRUE(r.frame);
  EXPECT_EQ(r.frame->peer, "c");
  EXPECT_FALSE(s.Dequeue().frame);
  EXPECT_EQ(s.Stats().channels[0].queued_messages, 0u);
}

// The scheduler has no idea which channel is which: swap CONSENSUS's and BULK's descriptors and
// BULK goes first, refuses when full, and CONSENSUS drops its oldest instead.
TEST(EgressSchedulerTest, PriorityOverflowAndDerivedRateComeFromTheTable) {
  std::vector<ChannelDescriptor> d = DefaultChannelDescriptors();
  for (ChannelDescriptor& c : d) {
    c.queue_bytes = 2000;
    if (c.channel == node::p2p::CONSENSUS) {
      c.priority = 1;
      c.overflow = OverflowPolicy::kDropOldest;
    } else if (c.channel == node::p2p::BULK) {
      c.priority = 10;
      c.overflow = OverflowPolicy::kRefuseNew;
    }
    c.derived_rate = c.channel == node::p2p::SYNC;
  }
  absl::StatusOr<ChannelTable> table = ChannelTable::Create(std::move(d));
  ASSERT_TRUE(table.ok()) << table.status();
  tests::FakeClock clock;
  EgressOptions opt;
  opt.channels = *table;
  opt.cap_bytes_per_second = 1e6;
  EgressScheduler s(opt, &clock);
  EXPECT_EQ(s.Stats().channels[0].channel, node::p2p::BULK);
  EXPECT_EQ(s.Stats().channels[3].channel, node::p2p::CONSENSUS);

  for (char c : std::string("xyz")) {
    ASSERT_TRUE(s.Enqueue("p", 1, node::p2p::CONSENSUS, std::string(1000, c)).ok());
  }
  EXPECT_EQ(s.Stats().channel(node::p2p::CONSENSUS).messages_dropped, 1u);  // 'x' made room
  ASSERT_TRUE(s.Enqueue("p", 1, node::p2p::BULK, std::string(1000, 'b')).ok());
  ASSERT_TRUE(s.Enqueue("p", 1, node::p2p::BULK, std::string(1000, 'b')).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(s.Enqueue("p", 1, node::p2p::BULK, "b")));
  EXPECT_EQ(s.Stats().channel(node::p2p::BULK).messages_refused, 1u);

  std::string order;
  for (int i = 0; i < 4; ++i) {
    DequeueResult r = s.Dequeue();
    ASSERT_TRUE(r.frame) << i;
    order += r.frame->payload()[0];
    clock.Advance(absl::Milliseconds(10));
  }
  EXPECT_EQ(order, "bbyz");
  // SYNC now carries the derived rate: cap minus what BULK (the only channel above it) used.
  clock.Advance(absl::Milliseconds(200));  // past the usage window's current slot
  EXPECT_FALSE(s.Dequeue().frame);
  EXPECT_EQ(s.Stats().priority_usage_bytes_per_second, 2 * (1000 + kFrameOverheadBytes) / 0.9);
}

}  // namespace
}  // namespace p2p
