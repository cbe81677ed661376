// AdaptiveTickets, the adaptive stage's follower of admitted txs: each ticket is released exactly
// once, by commit (sample), refusal or removal (no feedback), expiry (drop), or what a tick finds
// (timeout past max_hold, waiver behind a nonce gap, gone from the pool). Driven by a FakeClock
// and a fake PoolQuery; also through a built chain, across live updates.
#include "flowctl/adaptive_tickets.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "flowctl/adaptive_limiter.h"
#include "flowctl/adaptive_stage.h"
#include "flowctl/stage_chain.h"
#include "flowctl/stage_registry.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"

namespace flowctl {
namespace {

constexpr int64_t kMs = 1'000'000;

// A pool the test describes: which ids are gapped, which are absent, and its level.
class FakePool final : public PoolQuery {
 public:
  std::vector<std::string> Gapped(absl::Span<const std::string> ids) const override {
    ++gapped_calls;
    std::vector<std::string> out;
    for (const std::string& id : ids) {
      if (gapped.contains(id)) out.push_back(id);
    }
    return out;
  }
  std::vector<std::string> Missing(absl::Span<const std::string> ids) const override {
    ++missing_calls;
    std::vector<std::string> out;
    for (const std::string& id : ids) {
      if (missing.contains(id)) out.push_back(id);
    }
    return out;
  }
  PoolLevel Level() const override { return level; }

  absl::flat_hash_set<std::string> gapped;
  absl::flat_hash_set<std::string> missing;
  PoolLevel level{.txs = 0, .high_water_txs = 1000, .expired_total = 0};
  mutable int gapped_calls = 0;
  mutable int missing_calls = 0;
};

AdaptiveLimiterOptions Options() {
  AdaptiveLimiterOptions o;
  o.initial_limit = 10;
  o.min_limit = 1;
  o.max_limit = 100;
  o.window_samples = 1000;  // no window closes in these tests unless asked
  o.window = absl::Hours(1);
  o.max_hold = absl::Seconds(1);
  return o;
}

class AdaptiveTicketsTest : public ::testing::Test {
 protected:
  AdaptiveTicketsTest()
      : limiter_(std::make_shared<AdaptiveLimiter>(Options(), &clock_)), tickets_(limiter_) {}

  // Admits one request through the limiter and pools it, as the chain does: the permit is held
  // while the ticket is taken, then released.
  void Pool(const std::string& id) {
    AdaptiveLimiter::Permit permit = limiter_->TryAcquire();
    ASSERT_TRUE(permit);
    tickets_.OnPooled(id, clock_.NowNanos());
    EXPECT_EQ(limiter_->in_flight(), static_cast<int64_t>(tickets_.size()) + 1);
  }
  AdaptiveLimiterState State() const { return limiter_->State(); }
  void Tick() { tickets_.OnTick(clock_.NowNanos(), pool_); }

  tests::FakeClock clock_;
  FakePool pool_;
  std::shared_ptr<AdaptiveLimiter> limiter_;
  AdaptiveTickets tickets_;
};

TEST_F(AdaptiveTicketsTest, CommitIsALatencySampleAndReleasesTheSlot) {
  Pool("a");
  Pool("b");
  EXPECT_EQ(limiter_->in_flight(), 2);  // the permits are gone; the tickets hold the slots
  clock_.Advance(absl::Milliseconds(30));
  const std::vector<std::string> ids = {"a", "unknown"};
  tickets_.OnCommitted(ids, clock_.NowNanos());
  EXPECT_EQ(limiter_->in_flight(), 1);
  EXPECT_EQ(tickets_.size(), 1u);
  EXPECT_EQ(State().samples, 1u);
  tickets_.OnCommitted(ids, clock_.NowNanos());  // again: nothing left to release
  EXPECT_EQ(State().samples, 1u);
}

TEST_F(AdaptiveTicketsTest, DropReasonsDecideTheFeedback) {
  Pool("refused");
  Pool("expired");
  Pool("removed");
  tickets_.OnDropped("refused", DropReason::kRefused);
  tickets_.OnDropped("removed", DropReason::kRemoved);
  EXPECT_EQ(State().drops, 0u);  // no feedback
  tickets_.OnDropped("expired", DropReason::kExpired);
  EXPECT_EQ(State().drops, 1u);  // congestion
  tickets_.OnDropped("never pooled", DropReason::kExpired);
  EXPECT_EQ(State().drops, 1u);
  EXPECT_EQ(limiter_->in_flight(), 0);
  EXPECT_EQ(tickets_.size(), 0u);
}

TEST_F(AdaptiveTicketsTest, ADuplicateRefusedByThePoolReleasesOnlyItsOwnSlot) {
  Pool("tx");
  Pool("tx");  // the same tx submitted twice; the pool will refuse the second
  EXPECT_EQ(limiter_->in_flight(), 2);
  tickets_.OnDropped("tx", DropReason::kRefused);
  EXPECT_EQ(limiter_->in_flight(), 1);
  EXPECT_EQ(tickets_.size(), 1u);
  tickets_.OnCommitted(std::vector<std::string>{"tx"}, clock_.NowNanos());
  EXPECT_EQ(limiter_->in_flight(), 0);
  EXPECT_EQ(State().samples, 1u);
}

TEST_F(AdaptiveTicketsTest, OverdueTicketsTimeOutOnTick) {
  Pool("stuck");
  clock_.Advance(absl::Milliseconds(500));
  Pool("young");
  clock_.Advance(absl::Milliseconds(501));  // "stuck" is 1001 ms old, past max_hold
  Tick();
  EXPECT_EQ(State().timeouts, 1u);
  EXPECT_EQ(State().samples, 0u);  // a censored sample, counted apart
  EXPECT_EQ(limiter_->in_flight(), 1);
  EXPECT_EQ(tickets_.size(), 1u);
}

TEST_F(AdaptiveTicketsTest, GappedTxsAreWaivedAfterTheGapHoldWhileThePoolIsLow) {
  Pool("gapped");
  Pool("ready");
  pool_.gapped = {"gapped"};
  clock_.Advance(absl::Milliseconds(199));
  Tick();  // too young to judge
  EXPECT_EQ(State().waived, 0u);
  EXPECT_EQ(pool_.gapped_calls, 0);

  clock_.Advance(absl::Milliseconds(101));  // 300 ms: held past gap_hold, next sweep due
  pool_.level.txs = 500;                    // at half the high water: no waiving
  Tick();
  EXPECT_EQ(State().waived, 0u);
  EXPECT_EQ(pool_.gapped_calls, 0);

  clock_.Advance(absl::Milliseconds(100));
  pool_.level.txs = 499;
  Tick();
  EXPECT_EQ(State().waived, 1u);
  EXPECT_EQ(limiter_->in_flight(), 1);
  EXPECT_EQ(tickets_.size(), 1u);  // "ready" keeps its slot
}

TEST_F(AdaptiveTicketsTest, TxsGoneFromThePoolAreCancelledOrDroppedAfterTheGrace) {
  Pool("gone");
  Pool("expired");
  pool_.missing = {"gone", "expired"};
  clock_.Advance(absl::Milliseconds(900));
  Tick();  // missing, but within the grace: maybe between OnPooled and the pool's Add
  EXPECT_EQ(tickets_.size(), 2u);

  clock_.Advance(absl::Milliseconds(100));  // 1000 ms: past the grace (not yet max_hold)
  pool_.missing = {"gone"};
  Tick();  // the pool expired nothing since the last sweep: no feedback
  EXPECT_EQ(tickets_.size(), 1u);
  EXPECT_EQ(State().drops, 0u);
  EXPECT_EQ(State().timeouts, 0u);

  // Back to a fresh ticket that the pool expires: the next sweep sees the pool's expired count
  // move and counts the missing tx as a drop.
  tickets_.OnDropped("expired", DropReason::kRemoved);
  Pool("late");
  clock_.Advance(absl::Milliseconds(1000));
  pool_.missing = {"late"};
  pool_.level.expired_total = 7;
  Tick();
  EXPECT_EQ(State().drops, 1u);
  EXPECT_EQ(tickets_.size(), 0u);
  EXPECT_EQ(limiter_->in_flight(), 0);
}

TEST_F(AdaptiveTicketsTest, TicksDoWorkAtMostEverySweepPeriod) {
  Pool("a");
  clock_.Advance(absl::Milliseconds(300));
  Tick();
  EXPECT_EQ(pool_.missing_calls, 1);
  clock_.Advance(absl::Milliseconds(50));
  Tick();
  EXPECT_EQ(pool_.missing_calls, 1);
  clock_.Advance(absl::Milliseconds(50));
  Tick();
  EXPECT_EQ(pool_.missing_calls, 2);
}

TEST_F(AdaptiveTicketsTest, DestructionCancelsWhatIsHeld) {
  auto limiter = std::make_shared<AdaptiveLimiter>(Options(), &clock_);
  {
    AdaptiveTickets tickets(limiter);
    tickets.OnPooled("a", clock_.NowNanos());
    tickets.OnPooled("b", clock_.NowNanos());
    EXPECT_EQ(limiter->in_flight(), 2);
  }
  EXPECT_EQ(limiter->in_flight(), 0);
  EXPECT_EQ(limiter->State().drops, 0u);
}

// Request threads pool, refuse and commit while a ticker sweeps: every slot comes back once.
TEST_F(AdaptiveTicketsTest, ConcurrentEventsReleaseEverySlotOnce) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2'000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::string id = absl::StrCat(t, "-", i);
        tickets_.OnPooled(id, clock_.NowNanos());
        if (i % 3 == 0) {
          tickets_.OnDropped(id, DropReason::kRefused);
        } else {
          tickets_.OnCommitted(std::vector<std::string>{id}, clock_.NowNanos());
        }
      }
    });
  }
  std::thread ticker([this] {
    for (int i = 0; i < 200; ++i) {
      clock_.Advance(absl::Milliseconds(1));
      tickets_.OnTick(clock_.NowNanos(), pool_);
    }
  });
  for (std::thread& t : threads) t.join();
  ticker.join();
  EXPECT_EQ(tickets_.size(), 0u);
  EXPECT_EQ(limiter_->in_flight(), 0);
  const AdaptiveLimiterState s = State();
  // Each committed id is one sample, unless a sweep released it first (no such path here: no id
  // is missing, gapped or older than max_hold).
  EXPECT_EQ(s.samples + s.timeouts + s.waived,
            static_cast<uint64_t>(kThreads) * (kPerThread - (kPerThread + 2) / 3));
}

// ---- through a chain ----

node::flowctl::StageChainConfig ParseChain(const std::string& text) {
  node::flowctl::StageChainConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

const AdaptiveStage& AdaptiveOf(const StageChain& chain) {
  const StageChain::Link* link = chain.Find("adaptive");
  CHECK(link != nullptr);
  return dynamic_cast<const AdaptiveStage&>(*link->stage);
}

TEST(AdaptiveStageLifecycleTest, TicketsSurviveALiveUpdateThatKeepsTheStage) {
  tests::FakeClock clock;
  StageRegistry registry;
  auto v1 = registry.Build(ParseChain("stages { adaptive { initial_limit: 2 min_limit: 1 } }"));
  ASSERT_TRUE(v1.ok()) << v1.status();
  StageChainHolder holder((*v1)->Create({.partition = 1, .clock = &clock}));
  const std::shared_ptr<AdaptiveLimiter> limiter = AdaptiveOf(*holder.Get()).limiter();

  Admission a = holder.Admit({.partition = 1, .arrival_nanos = clock.NowNanos()});
  ASSERT_TRUE(a.admitted());
  a.Pooled("tx");
  EXPECT_EQ(limiter->in_flight(), 2);  // permit + ticket: the count never dips
  a.Finish();
  EXPECT_EQ(limiter->in_flight(), 1);

  auto v2 = registry.Build(
      ParseChain("stages { concurrency { max_in_flight: 5 } } "
                 "stages { adaptive { initial_limit: 2 min_limit: 1 max_limit: 50 } }"));
  ASSERT_TRUE(v2.ok()) << v2.status();
  (*v2)->ApplyTo(holder);
  ASSERT_EQ(AdaptiveOf(*holder.Get()).limiter(), limiter);  // the same stage object
  EXPECT_EQ(AdaptiveOf(*holder.Get()).tickets().size(), 1u);

  clock.Advance(absl::Milliseconds(40));
  holder.Committed(std::vector<std::string>{"tx"}, clock.NowNanos());
  EXPECT_EQ(limiter->in_flight(), 0);
  EXPECT_EQ(limiter->State().samples, 1u);

  std::vector<StageStats> stats = holder.Get()->Stats();
  ASSERT_EQ(stats[1].kind, "adaptive");
  EXPECT_EQ(stats[1].gauges.back().name, "tickets");
  EXPECT_EQ(stats[1].gauges.back().value, 0);
}

TEST(AdaptiveStageLifecycleTest, ARemovedStageReleasesItsTicketsWhenItsChainIsGone) {
  tests::FakeClock clock;
  StageRegistry registry;
  auto v1 = registry.Build(ParseChain("stages { adaptive { } }"));
  ASSERT_TRUE(v1.ok());
  StageChainHolder holder((*v1)->Create({.partition = 1, .clock = &clock}));
  const std::shared_ptr<AdaptiveLimiter> limiter = AdaptiveOf(*holder.Get()).limiter();
  Admission a = holder.Admit({.partition = 1});
  a.Pooled("tx");
  a.Finish();
  EXPECT_EQ(limiter->in_flight(), 1);

  auto v2 = registry.Build(ParseChain("stages { concurrency { max_in_flight: 5 } }"));
  ASSERT_TRUE(v2.ok());
  (*v2)->ApplyTo(holder);
  EXPECT_EQ(limiter->in_flight(), 1);  // `a` still holds the old chain
  a = Admission();
  EXPECT_EQ(limiter->in_flight(), 0);  // the old stage and its tickets are gone: no feedback
  EXPECT_EQ(limiter->State().drops, 0u);
  holder.Committed(std::vector<std::string>{"tx"}, clock.NowNanos());  // nobody follows: fine
}

TEST(AdaptiveStageLifecycleTest, ARefusedAddGivesTheTicketBack) {
  tests::FakeClock clock;
  StageRegistry registry;
  auto v1 = registry.Build(ParseChain("stages { adaptive { initial_limit: 1 min_limit: 1 } }"));
  ASSERT_TRUE(v1.ok());
  StageChainHolder holder((*v1)->Create({.partition = 1, .clock = &clock}));
  const std::shared_ptr<AdaptiveLimiter> limiter = AdaptiveOf(*holder.Get()).limiter();
  {
    Admission a = holder.Admit({.partition = 1});
    ASSERT_TRUE(a.admitted());
    a.Pooled("dup");
    a.Dropped("dup", DropReason::kRefused);  // the pool's Add failed
  }
  EXPECT_EQ(limiter->in_flight(), 0);
  EXPECT_TRUE(holder.Admit({.partition = 1}).admitted());  // the slot is free again
}

}  // namespace
}  // namespace flowctl
