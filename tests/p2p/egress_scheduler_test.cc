#include "p2p/egress_scheduler.h"

#include <cmath>
#include <cstdio>
#include <limits>
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
        sent_.push_back({now, r.frame->partition, r.frame->channel, r.frame->wire_bytes()});
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

  // Every frame handed to the transport, with the time it was released.
  struct Sent {
    int64_t at;
    PartitionId partition;
    Channel channel;
    size_t wire;
  };

  std::vector<EgressFrame> frames_;
  int keep_frames_ = 0;
  int enqueue_errors_ = 0;
  std::vector<Sent> sent_;

 private:
  EgressScheduler* s_;
  tests::FakeClock* clock_;
  std::vector<Source> sources_;
};

// Wire bytes of `partition` released in [from, to).
uint64_t BytesOf(const std::vector<Driver::Sent>& sent, PartitionId partition, int64_t from,
                 int64_t to) {
  uint64_t bytes = 0;
  for (const Driver::Sent& s : sent) {
    if (s.partition == partition && s.at >= from && s.at < to) bytes += s.wire;
  }
  return bytes;
}

// The most `partition` sent over any interval beyond what `rate` (bytes/s) allows over its
// length: max over frames i <= j of (bytes of frames i..j) - rate x (t_j - t_i). A token bucket of
// that rate keeps it at or below its burst.
double MaxExcessOverRate(const std::vector<Driver::Sent>& sent, PartitionId partition,
                         double rate) {
  double excess = 0;
  double cum_before = 0;  // bytes of the partition's frames before the current one
  double min_start = std::numeric_limits<double>::infinity();  // min over i of cum_{<i} - rate t_i
  for (const Driver::Sent& s : sent) {
    if (s.partition != partition) continue;
    const double t = static_cast<double>(s.at) / 1e9;
    min_start = std::min(min_start, cum_before - rate * t);
    cum_before += static_cast<double>(s.wire);
    excess = std::max(excess, cum_before - rate * t - min_start);
  }
  return excess;
}

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

// --- Per-partition hard limits (SetPartitionRateLimit) ---

constexpr PartitionId kLimited = 7;
constexpr PartitionId kOther = 8;

// The burst of a partition limit per the rule in egress_scheduler.h (default 2 ms chunk time):
// 4 x max(2 ms of the rate, one of the partition's chunks with its header).
double LimitBurst(double rate) {
  const double chunk = static_cast<double>(ChunkBytesForCap(rate) + kFrameOverheadBytes);
  return 4 * std::max(rate * 0.002, chunk);
}

// The cost of one chunk of a partition limited to a rate below ~512 KB/s: the 1 KiB minimum.
constexpr double kSmallChunkCost = kMinChunkBytes + kFrameOverheadBytes;

// Checks that `partition` went at `rate` over [from, to] (clock nanos): never more than
// rate x t + burst over any interval (the hard ceiling), and over the whole span no less than
// rate x t minus one chunk (it really uses its limit).
void ExpectSentAtRate(const Driver& d, PartitionId partition, double rate, int64_t from,
                      int64_t to) {
  std::vector<Driver::Sent> span;
  for (const Driver::Sent& s : d.sent_) {
    if (s.at >= from && s.at <= to) span.push_back(s);
  }
  const double seconds = static_cast<double>(to - from) / 1e9;
  const double sent = static_cast<double>(BytesOf(span, partition, from, to + 1));
  EXPECT_LE(sent, rate * seconds + LimitBurst(rate)) << "partition " << partition;
  EXPECT_GE(sent, rate * seconds - kSmallChunkCost) << "partition " << partition;
  EXPECT_LE(MaxExcessOverRate(span, partition, rate), LimitBurst(rate) + 1)
      << "partition " << partition;
}

// A lone limited partition, offered ten times its limit, on an unlimited scheduler and under a
// cap well above the limit: it goes at its limit and never above, although the link has room.
class LoneLimitedPartitionTest : public ::testing::TestWithParam<double> {};

TEST_P(LoneLimitedPartitionTest, GoesAtItsLimitNeverAbove) {
  tests::FakeClock clock;
  EgressOptions opt;
  opt.cap_bytes_per_second = GetParam();
  opt.channels = WithQueueBytes(1 << 20);
  EgressScheduler s(opt, &clock);
  constexpr double kRate = 300'000;
  ASSERT_TRUE(s.SetPartitionRateLimit(kLimited, kRate).ok());
  Driver d(&s, &clock);
  d.AddSource("b", kLimited, node::p2p::BULK, 3000, kMs);  // 3 MB/s offered
  const int64_t start = clock.NowNanos();
  d.RunUntil(start + 10 * kSec);
  ExpectSentAtRate(d, kLimited, kRate, start, start + 10 * kSec);
  const EgressStats st = s.Stats();
  ASSERT_TRUE(st.partition_limits.contains(kLimited));
  EXPECT_EQ(st.partition_limits.at(kLimited).limit_bytes_per_second, kRate);
  // Roughly one wait per chunk once the burst is spent.
  EXPECT_GT(st.partition_limits.at(kLimited).limit_waits, 2000u);
  EXPECT_GT(st.channel(node::p2p::BULK).queued_bytes, 0u);  // it had more to send
}

INSTANTIATE_TEST_SUITE_P(UnlimitedAndCapped, LoneLimitedPartitionTest, ::testing::Values(0.0, 1e6));

// Once its burst is spent, a held partition's frame waits exactly until its bucket can pay for
// it, and Dequeue says so; the chunk is counted once in limit_waits however often it is looked at.
TEST_P(LoneLimitedPartitionTest, HeldFrameWaitsExactlyUntilItsBucketCanPay) {
  tests::FakeClock clock;
  EgressOptions opt;
  opt.cap_bytes_per_second = GetParam() == 0 ? 0 : 10e6;  // a cap that never binds here
  EgressScheduler s(opt, &clock);
  constexpr double kRate = 100'000;
  ASSERT_TRUE(s.SetPartitionRateLimit(kLimited, kRate).ok());
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(s.Enqueue("b", kLimited, node::p2p::BULK, std::string(kMinChunkBytes, 'x')).ok());
  }
  // The burst is 4 chunks: four leave at once.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(s.Dequeue().frame) << i;
  DequeueResult r = s.Dequeue();
  ASSERT_FALSE(r.frame);
  const int64_t chunk_time = static_cast<int64_t>(kSmallChunkCost / kRate * 1e9);  // 10.56 ms
  EXPECT_NEAR(static_cast<double>(r.wait_nanos), static_cast<double>(chunk_time), 2);
  clock.AdvanceNanos(r.wait_nanos - 1);
  r = s.Dequeue();
  EXPECT_FALSE(r.frame);
  EXPECT_EQ(r.wait_nanos, 1);
  clock.AdvanceNanos(1);
  ASSERT_TRUE(s.Dequeue().frame);
  EXPECT_EQ(s.Stats().partition_limits.at(kLimited).limit_waits, 1u);
  EXPECT_FALSE(s.Dequeue().frame);
  EXPECT_EQ(s.Stats().partition_limits.at(kLimited).limit_waits, 2u);
}

// Two partitions on one channel under a cap, one limited: the other is not held back by the
// limited one's waiting frames and takes the rest of the cap.
TEST(EgressSchedulerLimitTest, OtherPartitionTakesTheRestOfTheCap) {
  tests::FakeClock clock;
  EgressOptions opt;
  opt.cap_bytes_per_second = 2e6;
  opt.channels = WithQueueBytes(1 << 20);
  EgressScheduler s(opt, &clock);
  constexpr double kRate = 300'000;  // well under its round-robin half of the cap
  ASSERT_TRUE(s.SetPartitionRateLimit(kLimited, kRate).ok());
  Driver d(&s, &clock);
  d.AddSource("b", kLimited, node::p2p::BULK, 3000, kMs);  // 3 MB/s offered each
  d.AddSource("c", kOther, node::p2p::BULK, 3000, kMs);
  const int64_t start = clock.NowNanos();
  d.RunUntil(start + kSec);
  d.RunUntil(start + 6 * kSec);
  ExpectSentAtRate(d, kLimited, kRate, start + kSec, start + 6 * kSec);
  const double other =
      static_cast<double>(BytesOf(d.sent_, kOther, start + kSec, start + 6 * kSec));
  EXPECT_NEAR(other, (2e6 - kRate) * 5, 0.02 * 2e6 * 5);
}

// The limit covers every channel: a limited partition's CONSENSUS waits for it, and meanwhile
// another partition's BULK goes out. The limited partition's own BULK stays behind its CONSENSUS.
TEST(EgressSchedulerLimitTest, ConsensusIsHeldTooAndLowerChannelsOfOthersGoAhead) {
  {
    tests::FakeClock clock;
    EgressScheduler s(EgressOptions{}, &clock);  // unlimited link
    ASSERT_TRUE(s.SetPartitionRateLimit(kLimited, 100'000).ok());
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(
          s.Enqueue("b", kLimited, node::p2p::CONSENSUS, std::string(kMinChunkBytes, 'v')).ok());
    }
    ASSERT_TRUE(s.Enqueue("b", kLimited, node::p2p::BULK, std::string(100, 'l')).ok());
    for (int i = 0; i < 4; ++i) {  // the burst
      DequeueResult r = s.Dequeue();
      ASSERT_TRUE(r.frame);
      EXPECT_EQ(r.frame->channel, node::p2p::CONSENSUS);
    }
    // 2 ms later its bucket holds 200 B: not enough for its CONSENSUS chunk (1056 B), enough for
    // its BULK (132 B) but that stays behind its CONSENSUS; another partition's BULK goes.
    clock.Advance(absl::Milliseconds(2));
    ASSERT_TRUE(s.Enqueue("c", kOther, node::p2p::BULK, std::string(100, 'o')).ok());
    DequeueResult r = s.Dequeue();
    ASSERT_TRUE(r.frame);
    EXPECT_EQ(r.frame->partition, kOther);
    EXPECT_EQ(r.frame->channel, node::p2p::BULK);
    r = s.Dequeue();
    EXPECT_FALSE(r.frame);
    EXPECT_NEAR(static_cast<double>(r.wait_nanos), (kSmallChunkCost - 200) / 100'000 * 1e9, 2);
    EXPECT_EQ(s.Stats().channel(node::p2p::CONSENSUS).queued_messages, 1u);
    clock.AdvanceNanos(r.wait_nanos);
    r = s.Dequeue();
    ASSERT_TRUE(r.frame);
    EXPECT_EQ(r.frame->channel, node::p2p::CONSENSUS);
  }
  // Sustained: the limited partition floods CONSENSUS and BULK, another floods BULK, under a cap.
  tests::FakeClock clock;
  EgressOptions opt;
  opt.cap_bytes_per_second = 1e6;
  opt.channels = WithQueueBytes(1 << 20);
  EgressScheduler s(opt, &clock);
  constexpr double kRate = 100'000;
  ASSERT_TRUE(s.SetPartitionRateLimit(kLimited, kRate).ok());
  Driver d(&s, &clock);
  d.AddSource("b", kLimited, node::p2p::CONSENSUS, 1000, 5 * kMs);  // 200 KB/s offered
  d.AddSource("b", kLimited, node::p2p::BULK, 1000, 5 * kMs);
  d.AddSource("c", kOther, node::p2p::BULK, 3000, kMs);  // 3 MB/s offered
  const int64_t start = clock.NowNanos();
  d.RunUntil(start + kSec);
  d.RunUntil(start + 6 * kSec);
  ExpectSentAtRate(d, kLimited, kRate, start + kSec, start + 6 * kSec);
  // Once its CONSENSUS has a backlog (after the first second) its own BULK never goes first.
  uint64_t limited_bulk = 0;
  for (const Driver::Sent& f : d.sent_) {
    if (f.at >= start + kSec && f.partition == kLimited && f.channel == node::p2p::BULK) {
      limited_bulk += f.wire;
    }
  }
  EXPECT_EQ(limited_bulk, 0u);
  EXPECT_GT(s.Stats().channel(node::p2p::CONSENSUS).queued_bytes, 0u);
  const double other =
      static_cast<double>(BytesOf(d.sent_, kOther, start + kSec, start + 6 * kSec));
  EXPECT_NEAR(other, (1e6 - kRate) * 5, 0.02 * 1e6 * 5);
  EXPECT_GT(s.Stats().partition_limits.at(kLimited).limit_waits, 0u);
}

// Removing the limit releases the held frames at once; setting it again, raising and lowering it
// live change the rate measured over the following interval.
TEST(EgressSchedulerLimitTest, RemovalReleasesAtOnceAndLiveChangesTakeEffect) {
  tests::FakeClock clock;
  EgressOptions opt;
  opt.channels = WithQueueBytes(1 << 20);
  EgressScheduler s(opt, &clock);  // unlimited link
  int wakeups = 0;
  s.SetWakeup([&wakeups] { ++wakeups; });
  ASSERT_TRUE(s.SetPartitionRateLimit(kLimited, 200'000).ok());
  Driver d(&s, &clock);
  d.AddSource("b", kLimited, node::p2p::BULK, 3000, kMs);  // 3 MB/s offered
  int64_t t = clock.NowNanos();
  d.RunUntil(t + 2 * kSec);
  ExpectSentAtRate(d, kLimited, 200'000, t, t + 2 * kSec);
  ASSERT_GT(s.Stats().channel(node::p2p::BULK).queued_bytes, 0u);

  // Removed: everything queued leaves at this very instant.
  const int before = wakeups;
  ASSERT_TRUE(s.SetPartitionRateLimit(kLimited, 0).ok());
  EXPECT_GT(wakeups, before);
  DequeueResult r = s.Dequeue();
  for (; r.frame; r = s.Dequeue()) {
  }
  EXPECT_EQ(r.wait_nanos, EgressScheduler::kNever);
  EXPECT_EQ(s.Stats().channel(node::p2p::BULK).queued_bytes, 0u);
  EXPECT_EQ(s.Stats().partition_limits.at(kLimited).limit_bytes_per_second, 0);

  // Set again, then raised, then lowered: each next interval follows the rate in force.
  bool first = true;
  for (double rate : {100'000.0, 400'000.0, 50'000.0}) {
    SCOPED_TRACE(rate);
    ASSERT_TRUE(s.SetPartitionRateLimit(kLimited, rate).ok());
    t = clock.NowNanos();
    d.RunUntil(t + 3 * kSec);
    ExpectSentAtRate(d, kLimited, rate, t, t + 3 * kSec);
    // A live change keeps the bucket's balance (short of a chunk: the partition is backlogged),
    // so it grants no fresh burst: at most one chunk leaves at the change.
    if (!first) {
      EXPECT_LE(BytesOf(d.sent_, kLimited, t, t + 1), kSmallChunkCost);
    }
    first = false;
  }
}

// fifo_mode honours the limits too, head-of-line: a held head holds everything behind it.
TEST(EgressSchedulerLimitTest, FifoModeHoldsTheHeadAndEverythingBehindIt) {
  tests::FakeClock clock;
  EgressOptions opt;
  opt.fifo_mode = true;
  EgressScheduler s(opt, &clock);
  ASSERT_TRUE(s.SetPartitionRateLimit(kLimited, 100'000).ok());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(s.Enqueue("b", kLimited, node::p2p::BULK, std::string(kMinChunkBytes, 'x')).ok());
  }
  ASSERT_TRUE(s.Enqueue("c", kOther, node::p2p::CONSENSUS, std::string(10, 'o')).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(s.Dequeue().frame) << i;
  DequeueResult r = s.Dequeue();
  ASSERT_FALSE(r.frame);
  EXPECT_NEAR(static_cast<double>(r.wait_nanos), kSmallChunkCost / 100'000 * 1e9, 2);
  clock.AdvanceNanos(r.wait_nanos);
  r = s.Dequeue();
  ASSERT_TRUE(r.frame);
  EXPECT_EQ(r.frame->partition, kLimited);
  r = s.Dequeue();
  ASSERT_TRUE(r.frame);
  EXPECT_EQ(r.frame->partition, kOther);
}

TEST(EgressSchedulerLimitTest, BadRatesAreRefusedAndChangeNothing) {
  tests::FakeClock clock;
  EgressScheduler s(EgressOptions{}, &clock);
  EXPECT_TRUE(absl::IsInvalidArgument(s.SetPartitionRateLimit(kLimited, -1)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      s.SetPartitionRateLimit(kLimited, std::numeric_limits<double>::quiet_NaN())));
  EXPECT_TRUE(absl::IsInvalidArgument(
      s.SetPartitionRateLimit(kLimited, -std::numeric_limits<double>::infinity())));
  // No limit was set: a backlog far over any burst leaves at once on the unlimited link.
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(s.Enqueue("b", kLimited, node::p2p::BULK, std::string(10'000, 'x')).ok());
  }
  int frames = 0;
  DequeueResult r = s.Dequeue();
  for (; r.frame; r = s.Dequeue()) ++frames;
  EXPECT_EQ(frames, 10);
  EXPECT_EQ(r.wait_nanos, EgressScheduler::kNever);
  EXPECT_FALSE(s.Stats().partition_limits.contains(kLimited));
  // Removing a limit that was never set, or "infinity", is fine and sets none.
  EXPECT_TRUE(s.SetPartitionRateLimit(kLimited, 0).ok());
  EXPECT_TRUE(s.SetPartitionRateLimit(kLimited, std::numeric_limits<double>::infinity()).ok());
  EXPECT_FALSE(s.Stats().partition_limits.contains(kLimited));
}

}  // namespace
}  // namespace p2p
