// FaultInjector: seeded loss, delay on a fake clock, per-peer order, filters; the release thread
// on the real clock (bounded waits); two GrpcTransports on loopback behind egress valves with the
// hook on; and a hand-driven valve over the in-memory network on a fake clock.
#include "p2p/fault_injector.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "p2p/egress_valve.h"
#include "p2p/grpc_transport.h"
#include "p2p/in_memory_network.h"
#include "tests/mocks/fake_clock.h"

namespace p2p {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kMs = 1'000'000;

struct Delivered {
  NodeId peer;
  Channel channel;
  std::string payload;
  int64_t at;  // clock nanos when delivered
};

// Records deliveries; thread-safe.
class Sink {
 public:
  explicit Sink(const flowctl::Clock* clock) : clock_(clock) {}
  FaultInjector::Deliver Fn(absl::Status result = absl::OkStatus()) {
    return [this, result](const NodeId& peer, PartitionId, Channel ch,
                          std::shared_ptr<const std::string> m) {
      absl::MutexLock l(&mu_);
      got_.push_back({peer, ch, *m, clock_->NowNanos()});
      return result;
    };
  }
  std::vector<Delivered> got() {
    absl::MutexLock l(&mu_);
    return got_;
  }

 private:
  const flowctl::Clock* const clock_;
  absl::Mutex mu_;
  std::vector<Delivered> got_ ABSL_GUARDED_BY(mu_);
};

std::shared_ptr<const std::string> Msg(const std::string& s) {
  return std::make_shared<const std::string>(s);
}

TEST(FaultOptionsTest, OffByDefaultAndValidated) {
  FaultOptions o;
  EXPECT_FALSE(o.enabled());
  EXPECT_TRUE(ValidateFaultOptions(o).ok());
  o.loss = 0.1;
  EXPECT_TRUE(o.enabled());
  o.loss = 1.5;
  EXPECT_THAT(ValidateFaultOptions(o).message(), HasSubstr("loss"));
  o.loss = 0;
  o.delay_ms = -1;
  EXPECT_THAT(ValidateFaultOptions(o).message(), HasSubstr("delay_ms"));
  o.delay_ms = 0;
  o.jitter_ms = 60'001;
  EXPECT_THAT(ValidateFaultOptions(o).message(), HasSubstr("jitter_ms"));
  o.jitter_ms = 0;
  o.peers = {""};
  EXPECT_THAT(ValidateFaultOptions(o).message(), HasSubstr("peers"));
}

TEST(FaultOptionsTest, ParsesChannelsAndDescribes) {
  absl::StatusOr<std::vector<Channel>> c = ParseFaultChannels("CONSENSUS, SYNC");
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(*c, ElementsAre(node::p2p::CONSENSUS, node::p2p::SYNC));
  EXPECT_FALSE(ParseFaultChannels("CONSENSUS,NOPE").ok());
  EXPECT_FALSE(ParseFaultChannels("CHANNEL_UNSPECIFIED").ok());
  FaultOptions o;
  o.delay_ms = 20;
  o.jitter_ms = 10;
  o.loss = 0.02;
  o.seed = 7;
  o.channels = *c;
  EXPECT_EQ(DescribeFaultOptions(o),
            "delay 20ms + jitter 0..10ms, loss 2%, seed 7, peers all, channels CONSENSUS,SYNC");
}

// The verdicts (dropped or not) of n messages to `peer`.
std::vector<bool> Verdicts(uint64_t seed, double loss, int n, const std::string& peer) {
  tests::FakeClock clock;
  Sink sink(&clock);
  FaultOptions o;
  o.loss = loss;
  o.seed = seed;
  FaultInjector inj(o, sink.Fn(), &clock);
  std::vector<bool> out;
  for (int i = 0; i < n; ++i) {
    size_t before = sink.got().size();
    EXPECT_TRUE(inj.Submit(peer, 1, node::p2p::CONSENSUS, Msg("m")).ok());
    out.push_back(sink.got().size() == before);
  }
  return out;
}

TEST(FaultInjectorTest, LossIsSeededAndNearItsProbability) {
  const std::vector<bool> a = Verdicts(7, 0.25, 4000, "peer-a");
  EXPECT_EQ(a, Verdicts(7, 0.25, 4000, "peer-a"));  // same seed, same peer: same run
  EXPECT_NE(a, Verdicts(8, 0.25, 4000, "peer-a"));
  EXPECT_NE(a, Verdicts(7, 0.25, 4000, "peer-b"));  // each peer its own stream
  const auto dropped = std::count(a.begin(), a.end(), true);
  EXPECT_GT(dropped, 850);  // 1000 expected; sd ~27
  EXPECT_LT(dropped, 1150);
  const std::vector<bool> all = Verdicts(7, 1.0, 100, "peer-a");
  EXPECT_EQ(std::count(all.begin(), all.end(), true), 100);
}

TEST(FaultInjectorTest, DelayHoldsUntilDueOnTheClock) {
  tests::FakeClock clock;
  Sink sink(&clock);
  FaultOptions o;
  o.delay_ms = 20;
  FaultInjector inj(o, sink.Fn(), &clock);
  const int64_t t0 = clock.NowNanos();
  ASSERT_TRUE(inj.Submit("p", 1, node::p2p::CONSENSUS, Msg("x")).ok());
  EXPECT_EQ(inj.NextDueNanos(), t0 + 20 * kMs);
  EXPECT_TRUE(sink.got().empty());
  clock.Advance(absl::Milliseconds(19));
  EXPECT_EQ(inj.ReleaseDue(), 0u);
  clock.Advance(absl::Milliseconds(1));
  EXPECT_EQ(inj.ReleaseDue(), 1u);
  ASSERT_EQ(sink.got().size(), 1u);
  EXPECT_EQ(sink.got()[0].payload, "x");
  EXPECT_EQ(inj.NextDueNanos(), -1);
  FaultStats s = inj.Stats();
  EXPECT_EQ(s.delayed, 1u);
  EXPECT_EQ(s.released, 1u);
  EXPECT_EQ(s.held, 0u);
}

TEST(FaultInjectorTest, JitterNeverReordersOnePeer) {
  tests::FakeClock clock;
  Sink sink(&clock);
  FaultOptions o;
  o.delay_ms = 5;
  o.jitter_ms = 50;
  o.seed = 3;
  FaultInjector inj(o, sink.Fn(), &clock);
  std::map<std::string, int64_t> sent_at;
  for (int i = 0; i < 300; ++i) {
    const std::string peer = i % 3 == 0 ? "a" : "b";
    const std::string m = absl::StrCat(peer, i);
    sent_at[m] = clock.NowNanos();
    ASSERT_TRUE(inj.Submit(peer, 1, node::p2p::SYNC, Msg(m)).ok());
    clock.Advance(absl::Milliseconds(1));
    inj.ReleaseDue();
  }
  for (int i = 0; i < 60 && inj.NextDueNanos() != -1; ++i) {
    clock.Advance(absl::Milliseconds(1));
    inj.ReleaseDue();
  }
  const std::vector<Delivered> got = sink.got();
  ASSERT_EQ(got.size(), 300u);
  std::map<std::string, int> last;  // peer -> index of its last delivered message
  int64_t max_delay = 0;
  for (const Delivered& d : got) {
    const int index = std::stoi(d.payload.substr(1));
    if (last.contains(d.peer)) {
      EXPECT_GT(index, last[d.peer]) << d.payload;
    }
    last[d.peer] = index;
    const int64_t delay = d.at - sent_at[d.payload];
    EXPECT_GE(delay, 5 * kMs) << d.payload;
    max_delay = std::max(max_delay, delay);
  }
  // Jitter really spreads delays (the fixed part alone would give exactly 5 ms).
  EXPECT_GT(max_delay, 30 * kMs);
}

TEST(FaultInjectorTest, FiltersLeaveOtherTrafficAlone) {
  tests::FakeClock clock;
  Sink sink(&clock);
  FaultOptions o;
  o.loss = 1.0;
  o.peers = {"abc"};
  o.channels = {node::p2p::CONSENSUS};
  FaultInjector inj(o, sink.Fn(absl::ResourceExhaustedError("full")), &clock);
  EXPECT_TRUE(inj.Submit("abcdef", 1, node::p2p::CONSENSUS, Msg("lost")).ok());
  // Not affected: delivered inline, and the delivery's status comes back.
  EXPECT_EQ(inj.Submit("abcdef", 1, node::p2p::SYNC, Msg("other channel")).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(inj.Submit("zzz", 1, node::p2p::CONSENSUS, Msg("other peer")).code(),
            absl::StatusCode::kResourceExhausted);
  std::vector<std::string> payloads;
  for (const Delivered& d : sink.got()) payloads.push_back(d.payload);
  EXPECT_THAT(payloads, ElementsAre("other channel", "other peer"));
  EXPECT_EQ(inj.Stats().dropped, 1u);
  EXPECT_EQ(inj.Stats().passed, 2u);
}

TEST(FaultInjectorTest, ReleaseThreadDeliversOnRealTimeAndStopDropsHeld) {
  const flowctl::Clock* clock = flowctl::Clock::Real();
  absl::Notification done;
  FaultOptions o;
  o.delay_ms = 30;
  FaultInjector inj(
      o,
      [&](const NodeId&, PartitionId, Channel, std::shared_ptr<const std::string> m) {
        if (*m == "soon") done.Notify();
        return absl::OkStatus();
      },
      clock);
  inj.Start();
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(inj.Submit("p", 1, node::p2p::CONSENSUS, Msg("soon")).ok());
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(30));
  // A message due in a minute is dropped by Stop, which returns at once.
  FaultOptions slow;
  slow.delay_ms = 60'000;
  int delivered = 0;
  FaultInjector later(
      slow,
      [&](const NodeId&, PartitionId, Channel, std::shared_ptr<const std::string>) {
        ++delivered;
        return absl::OkStatus();
      },
      clock);
  later.Start();
  ASSERT_TRUE(later.Submit("p", 1, node::p2p::CONSENSUS, Msg("never")).ok());
  EXPECT_EQ(later.Stats().held, 1u);
  const absl::Time t1 = absl::Now();
  later.Stop();
  EXPECT_LT(absl::Now() - t1, absl::Seconds(5));
  EXPECT_EQ(delivered, 0);
  EXPECT_EQ(later.Stats().held, 0u);
}

// Two real transports on loopback, each behind an egress valve (as in the node): with loss 1 on
// CONSENSUS only, a CONSENSUS message never arrives while a SYNC message sent after it does (one
// stream keeps order, so had the first not been dropped it would have come first).
TEST(FaultInjectorTransportTest, DropsWholeMessagesOnTheWire) {
  auto key = [](char b) { return *base::PrivateKey::FromSeed(std::string(32, b)); };
  base::PrivateKey ka = key('a'), kb = key('b');
  absl::Mutex mu;
  std::vector<std::string> got_b;
  GrpcTransportOptions oa, ob;
  oa.initial_backoff_ms = ob.initial_backoff_ms = 20;
  oa.max_backoff_ms = ob.max_backoff_ms = 200;
  oa.peers = {{kb.public_key().bytes(), ""}};
  ob.peers = {{ka.public_key().bytes(), ""}};
  EgressValveOptions va;
  va.fault.loss = 1.0;
  va.fault.channels = {node::p2p::CONSENSUS};
  va.fault.delay_ms = 5;  // the SYNC message goes straight through (not affected)
  GrpcTransport a(ka, oa), b(kb, ob);
  absl::StatusOr<std::unique_ptr<EgressValve>> valve = EgressValve::Create(&a, &a, va);
  ASSERT_TRUE(valve.ok()) << valve.status();
  EgressValve& av = **valve;
  av.SetHandlers([](const NodeId&, PartitionId, Channel, std::string) {},
                 [](const NodeId&, PeerEvent) {});
  b.SetHandlers(
      [&](const NodeId&, PartitionId, Channel ch, std::string payload) {
        absl::MutexLock l(&mu);
        got_b.push_back(absl::StrCat(ChannelName(ch), ":", payload));
      },
      [](const NodeId&, PeerEvent) {});
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(av.Start().ok());
  ASSERT_TRUE(b.Start().ok());
  a.SetPeerAddress(b.self(), absl::StrCat("127.0.0.1:", b.port()));
  b.SetPeerAddress(a.self(), absl::StrCat("127.0.0.1:", a.port()));
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (a.connected_peers().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // waiting for a condition, bounded
  }
  ASSERT_FALSE(a.connected_peers().empty());
  ASSERT_TRUE(av.Send(b.self(), 1, node::p2p::CONSENSUS, "vote").ok());  // "accepted", then lost
  ASSERT_TRUE(av.Broadcast(1, node::p2p::CONSENSUS, "vote2").ok());
  ASSERT_TRUE(av.Send(b.self(), 1, node::p2p::SYNC, "block").ok());
  {
    absl::MutexLock l(&mu);
    auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return !got_b.empty(); };
    mu.AwaitWithTimeout(absl::Condition(&arrived), absl::Seconds(15));
    EXPECT_THAT(got_b, ElementsAre("SYNC:block"));
  }
  EXPECT_EQ(av.Stats().fault.dropped, 2u);
  av.Stop();
  a.Stop();
  b.Stop();
}

// The same valve over the in-memory network, driven by hand on a fake clock: a delayed message
// reaches the hub only once the clock passes its due time and the valve is pumped.
TEST(FaultInjectorValveTest, DelaysBeforeTheSchedulerOnAFakeClock) {
  tests::FakeClock clock;
  InMemoryHub hub(&clock);
  std::unique_ptr<InMemoryNetwork> a = hub.AddNode("a");
  std::unique_ptr<InMemoryNetwork> b = hub.AddNode("b");
  std::vector<std::string> got;
  b->SetHandlers([&](const NodeId&, PartitionId, Channel, std::string p) { got.push_back(p); },
                 nullptr);
  EgressValveOptions vo;
  vo.fault.delay_ms = 20;
  vo.fault.channels = {node::p2p::SYNC};
  absl::StatusOr<std::unique_ptr<EgressValve>> valve =
      EgressValve::Create(a.get(), /*frames=*/nullptr, vo, &clock);
  ASSERT_TRUE(valve.ok()) << valve.status();
  ASSERT_TRUE((*valve)->Send("b", 1, node::p2p::SYNC, "late").ok());
  ASSERT_TRUE((*valve)->Send("b", 1, node::p2p::CONSENSUS, "now").ok());
  EXPECT_EQ((*valve)->ReleaseDue(), 20 * kMs);  // the held one is due in 20 ms
  hub.DeliverAll();
  EXPECT_THAT(got, ElementsAre("now"));
  clock.Advance(absl::Milliseconds(20));
  EXPECT_EQ((*valve)->ReleaseDue(), EgressScheduler::kNever);
  hub.DeliverAll();
  EXPECT_THAT(got, ElementsAre("now", "late"));
  EXPECT_EQ((*valve)->Stats().fault.released, 1u);
}

}  // namespace
}  // namespace p2p
