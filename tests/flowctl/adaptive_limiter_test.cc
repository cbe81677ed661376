// AdaptiveLimiter (AIMD on completion latency) and the `adaptive` stage: growth at the baseline,
// shrinking on a latency rise or a drop, one decrease per congestion episode, clamping, recovery,
// live option changes, slots released exactly once on every path, config validation, and a
// bounded multi-threaded smoke test. Time is a FakeClock: windows close on sample counts.
#include "flowctl/adaptive_limiter.h"

#include <cmath>
#include <memory>
#include <thread>
#include <vector>

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

using ::testing::HasSubstr;

// The limiter of the chain's stage called "adaptive" (or `name`).
std::shared_ptr<AdaptiveLimiter> LimiterOf(const StageChain& chain,
                                           absl::string_view name = "adaptive") {
  const StageChain::Link* link = chain.Find(name);
  if (link == nullptr) return nullptr;
  auto* stage = dynamic_cast<const AdaptiveStage*>(link->stage.get());
  return stage == nullptr ? nullptr : stage->limiter();
}

AdaptiveLimiterOptions SmallWindows() {
  AdaptiveLimiterOptions o;
  o.initial_limit = 20;
  o.min_limit = 4;
  o.max_limit = 100;
  o.tolerance = 2;
  o.increase_step = 2;
  o.decrease_factor = 0.5;
  o.window_samples = 10;
  o.window = absl::Hours(1);  // windows close on samples only
  o.baseline_drift = 0;
  return o;
}

class AdaptiveLimiterTest : public ::testing::Test {
 protected:
  std::shared_ptr<AdaptiveLimiter> Make(const AdaptiveLimiterOptions& o) {
    return std::make_shared<AdaptiveLimiter>(o, &clock_);
  }

  // One round trip: fills the limit (or `n` slots) through permits handed over to tickets, lets
  // `latency` pass and commits them all. Returns how many were admitted.
  int Round(const std::shared_ptr<AdaptiveLimiter>& limiter, absl::Duration latency, int n = -1) {
    std::vector<AdaptiveLimiter::Ticket> tickets;
    // Filling the limit tries once more, so the limiter sees it was binding.
    const int want = n < 0 ? static_cast<int>(limiter->limit()) + 1 : n;
    for (int i = 0; i < want; ++i) {
      AdaptiveLimiter::Permit permit = limiter->TryAcquire();
      if (!permit) break;
      tickets.push_back(AdaptiveLimiter::Track(limiter, clock_.NowNanos()));
    }  // each permit is released as the next iteration starts: the ticket carries the slot on
    clock_.Advance(latency);
    for (AdaptiveLimiter::Ticket& t : tickets) t.Commit();
    return static_cast<int>(tickets.size());
  }

  tests::FakeClock clock_;
};

TEST_F(AdaptiveLimiterTest, AdmitsUpToTheLimitAndCountsBothHandles) {
  auto limiter = Make(SmallWindows());
  std::vector<AdaptiveLimiter::Permit> permits;
  for (int i = 0; i < 20; ++i) {
    permits.push_back(limiter->TryAcquire());
    ASSERT_TRUE(permits.back().held()) << i;
  }
  EXPECT_FALSE(limiter->TryAcquire().held());
  EXPECT_EQ(limiter->in_flight(), 20);
  // Handing a slot over: ticket first, then the permit goes; the count never dips.
  AdaptiveLimiter::Ticket ticket = AdaptiveLimiter::Track(limiter, clock_.NowNanos());
  EXPECT_EQ(limiter->in_flight(), 21);
  permits.pop_back();
  EXPECT_EQ(limiter->in_flight(), 20);
  EXPECT_FALSE(limiter->TryAcquire().held());
  ticket.Cancel();
  EXPECT_EQ(limiter->in_flight(), 19);
  EXPECT_TRUE(limiter->TryAcquire().held());
}

TEST_F(AdaptiveLimiterTest, GrowsWhileLatencyStaysAtBaseline) {
  auto limiter = Make(SmallWindows());
  EXPECT_EQ(limiter->limit(), 20);
  for (int i = 0; i < 10; ++i) Round(limiter, absl::Milliseconds(100));
  AdaptiveLimiterState s = limiter->State();
  // One increase per round at least: each round's first window saw a refusal.
  EXPECT_GE(s.limit, 20 + 2 * 10);
  EXPECT_GE(s.increases, 10u);
  EXPECT_EQ(s.decreases, 0u);
  EXPECT_EQ(s.baseline_nanos, 100'000'000);
  EXPECT_EQ(s.window_latency_nanos, 100'000'000);
  EXPECT_EQ(s.in_flight, 0);
}

TEST_F(AdaptiveLimiterTest, ShrinksOnALatencyRiseOncePerEpisodeAndRecovers) {
  auto limiter = Make(SmallWindows());
  Round(limiter, absl::Milliseconds(100));  // baseline 100 ms; 20 samples = 2 windows
  const int64_t before = limiter->limit();
  // Latency triples: the first window of it halves the limit; the rest of that round's samples
  // were admitted before the decrease and are not judged again.
  Round(limiter, absl::Milliseconds(300));
  AdaptiveLimiterState s = limiter->State();
  EXPECT_EQ(s.decreases, 1u);
  EXPECT_EQ(s.limit, before / 2);
  EXPECT_GT(s.stale_samples, 0u);
  EXPECT_EQ(s.baseline_nanos, 100'000'000);
  // Back at the baseline: it grows again.
  for (int i = 0; i < 5; ++i) Round(limiter, absl::Milliseconds(100));
  EXPECT_GT(limiter->limit(), before / 2 + 4);
  EXPECT_EQ(limiter->State().decreases, 1u);
}

TEST_F(AdaptiveLimiterTest, ClampsToMinAndMax) {
  AdaptiveLimiterOptions o = SmallWindows();
  o.max_limit = 30;
  auto limiter = Make(o);
  for (int i = 0; i < 20; ++i) Round(limiter, absl::Milliseconds(100));
  EXPECT_EQ(limiter->limit(), 30);
  // Latency keeps rising: each fresh window halves it, never below min_limit.
  absl::Duration latency = absl::Milliseconds(400);
  for (int i = 0; i < 20; ++i) {
    Round(limiter, latency, 10);
    latency *= 2;
  }
  EXPECT_EQ(limiter->limit(), 4);
  EXPECT_GT(limiter->State().decreases, 2u);
}

TEST_F(AdaptiveLimiterTest, TargetLatencyIsAFloorAndMaxLatencyACeilingOfTheThreshold) {
  AdaptiveLimiterOptions o = SmallWindows();
  o.target_latency = absl::Milliseconds(500);
  auto limiter = Make(o);
  Round(limiter, absl::Milliseconds(100));
  Round(limiter, absl::Milliseconds(400));  // 4x baseline, but under the 500 ms target
  EXPECT_EQ(limiter->State().decreases, 0u);

  o = SmallWindows();
  o.max_latency = absl::Milliseconds(120);
  limiter = Make(o);
  Round(limiter, absl::Milliseconds(100));
  Round(limiter, absl::Milliseconds(150));  // 1.5x baseline (under tolerance), above the max
  EXPECT_EQ(limiter->State().decreases, 1u);
}

TEST_F(AdaptiveLimiterTest, ADropShrinksTheLimit) {
  AdaptiveLimiterOptions o = SmallWindows();
  o.window = absl::Milliseconds(100);
  auto limiter = Make(o);
  AdaptiveLimiter::Ticket t = AdaptiveLimiter::Track(limiter, clock_.NowNanos());
  clock_.Advance(absl::Milliseconds(200));
  t.Drop();
  EXPECT_EQ(limiter->limit(), 10);
  EXPECT_EQ(limiter->State().drops, 1u);
  EXPECT_EQ(limiter->in_flight(), 0);
}

TEST_F(AdaptiveLimiterTest, AnIdleLimitDoesNotGrow) {
  auto limiter = Make(SmallWindows());
  for (int i = 0; i < 10; ++i) Round(limiter, absl::Milliseconds(100), 5);  // 5 of 20 in use
  EXPECT_EQ(limiter->limit(), 20);
  EXPECT_EQ(limiter->State().increases, 0u);
}

TEST_F(AdaptiveLimiterTest, DefaultStepIsSqrtOfTheLimit) {
  AdaptiveLimiterOptions o = SmallWindows();
  o.increase_step = 0;
  o.initial_limit = 16;
  o.window_samples = 16;
  auto limiter = Make(o);
  Round(limiter, absl::Milliseconds(100));  // one window of 16 samples
  EXPECT_EQ(limiter->limit(), 20);          // 16 + sqrt(16)
}

TEST_F(AdaptiveLimiterTest, BaselineDriftsUpSlowlyAndFollowsDownAtOnce) {
  AdaptiveLimiterOptions o = SmallWindows();
  o.baseline_drift = 0.1;
  o.tolerance = 100;  // judge nothing here; only the baseline
  auto limiter = Make(o);
  Round(limiter, absl::Milliseconds(100), 10);
  EXPECT_EQ(limiter->State().baseline_nanos, 100'000'000);
  Round(limiter, absl::Milliseconds(200), 10);
  EXPECT_EQ(limiter->State().baseline_nanos, 110'000'000);
  Round(limiter, absl::Milliseconds(50), 10);
  EXPECT_EQ(limiter->State().baseline_nanos, 50'000'000);
}

TEST_F(AdaptiveLimiterTest, SetOptionsKeepsTheLimitClampedToNewBounds) {
  auto limiter = Make(SmallWindows());
  AdaptiveLimiterOptions o = SmallWindows();
  o.max_limit = 10;
  limiter->SetOptions(o);
  EXPECT_EQ(limiter->limit(), 10);
  o.max_limit = 100;
  o.initial_limit = 90;  // ignored on a live change
  limiter->SetOptions(o);
  EXPECT_EQ(limiter->limit(), 10);
  EXPECT_EQ(limiter->options().max_limit, 100);
}

TEST_F(AdaptiveLimiterTest, EveryHandleReleasesExactlyOnce) {
  auto limiter = Make(SmallWindows());
  {
    AdaptiveLimiter::Permit p = limiter->TryAcquire();
    AdaptiveLimiter::Permit q = std::move(p);
    EXPECT_FALSE(p.held());  // NOLINT(bugprone-use-after-move): checking the moved-from state
    q.Release();
    q.Release();
    EXPECT_EQ(limiter->in_flight(), 0);
  }
  EXPECT_EQ(limiter->in_flight(), 0);
  {
    AdaptiveLimiter::Ticket a = AdaptiveLimiter::Track(limiter, clock_.NowNanos());
    AdaptiveLimiter::Ticket b = AdaptiveLimiter::Track(limiter, clock_.NowNanos());
    AdaptiveLimiter::Ticket c = AdaptiveLimiter::Track(limiter, clock_.NowNanos());
    EXPECT_EQ(limiter->in_flight(), 3);
    a.Commit();
    a.Commit();
    a.Drop();
    a.Cancel();
    EXPECT_EQ(limiter->in_flight(), 2);
    b.Drop();
    b.Commit();
    EXPECT_EQ(limiter->in_flight(), 1);
    AdaptiveLimiter::Ticket moved = std::move(c);
    c.Cancel();  // NOLINT(bugprone-use-after-move): a moved-from ticket holds nothing
    EXPECT_EQ(limiter->in_flight(), 1);
    moved = AdaptiveLimiter::Track(limiter, clock_.NowNanos());  // assignment cancels the old one
    EXPECT_EQ(limiter->in_flight(), 1);
  }  // destruction cancels
  EXPECT_EQ(limiter->in_flight(), 0);
  const AdaptiveLimiterState s = limiter->State();
  EXPECT_EQ(s.samples, 1u);
  EXPECT_EQ(s.drops, 1u);
}

TEST_F(AdaptiveLimiterTest, AWindowOfTimeoutsShrinksTheLimit) {
  // Units held past max_hold are censored samples of at least their age: a window of them is a
  // latency rise, so the limit shrinks rather than refilling the freed slots at once.
  AdaptiveLimiterOptions o = SmallWindows();
  o.max_hold = absl::Milliseconds(500);
  auto limiter = Make(o);
  Round(limiter, absl::Milliseconds(10));  // baseline 10 ms
  const int64_t before = limiter->limit();
  std::vector<AdaptiveLimiter::Ticket> tickets;
  for (int i = 0; i < 10; ++i) {
    tickets.push_back(AdaptiveLimiter::Track(limiter, clock_.NowNanos()));
  }
  clock_.Advance(absl::Milliseconds(501));
  for (AdaptiveLimiter::Ticket& t : tickets) {
    ASSERT_TRUE(t.Overdue(clock_.NowNanos()));
    t.Timeout();
  }
  const AdaptiveLimiterState s = limiter->State();
  EXPECT_EQ(s.timeouts, 10u);
  EXPECT_EQ(s.decreases, 1u);
  EXPECT_EQ(limiter->limit(), before / 2);
  EXPECT_EQ(limiter->in_flight(), 0);
  EXPECT_EQ(s.window_latency_nanos, 501'000'000);
}

TEST_F(AdaptiveLimiterTest, AWaivedTicketReleasesOnceWithoutFeedback) {
  auto limiter = Make(SmallWindows());
  AdaptiveLimiter::Ticket t = AdaptiveLimiter::Track(limiter, clock_.NowNanos());
  clock_.Advance(absl::Seconds(10));
  t.Waive();
  t.Waive();
  t.Commit();
  EXPECT_FALSE(t.held());
  EXPECT_EQ(limiter->in_flight(), 0);
  const AdaptiveLimiterState s = limiter->State();
  EXPECT_EQ(s.waived, 1u);
  EXPECT_EQ(s.samples + s.timeouts + s.drops, 0u);
  EXPECT_EQ(s.windows, 0u);
}

TEST_F(AdaptiveLimiterTest, AnOverdueTicketTimesOutOnce) {
  AdaptiveLimiterOptions o = SmallWindows();
  o.max_hold = absl::Milliseconds(500);
  auto limiter = Make(o);
  AdaptiveLimiter::Ticket t = AdaptiveLimiter::Track(limiter, clock_.NowNanos());
  EXPECT_FALSE(t.Overdue(clock_.NowNanos() + 500'000'000));
  EXPECT_TRUE(t.Overdue(clock_.NowNanos() + 500'000'001));
  t.Timeout();
  t.Timeout();
  t.Commit();
  EXPECT_FALSE(t.Overdue(clock_.NowNanos() + 1'000'000'000));  // empty
  EXPECT_EQ(limiter->in_flight(), 0);
  const AdaptiveLimiterState s = limiter->State();
  EXPECT_EQ(s.timeouts, 1u);
  EXPECT_EQ(s.samples, 0u);
  EXPECT_EQ(s.drops, 0u);
  // A live change of max_hold applies to tickets already held.
  AdaptiveLimiter::Ticket u = AdaptiveLimiter::Track(limiter, clock_.NowNanos());
  o.max_hold = absl::Seconds(5);
  limiter->SetOptions(o);
  EXPECT_FALSE(u.Overdue(clock_.NowNanos() + 1'000'000'000));
}

TEST_F(AdaptiveLimiterTest, ATicketKeepsTheLimiterAlive) {
  auto limiter = Make(SmallWindows());
  AdaptiveLimiter::Ticket t = AdaptiveLimiter::Track(limiter, clock_.NowNanos());
  std::weak_ptr<AdaptiveLimiter> weak = limiter;
  limiter.reset();
  EXPECT_FALSE(weak.expired());
  t.Commit();
  EXPECT_TRUE(weak.expired());
}

TEST_F(AdaptiveLimiterTest, ConcurrentUseKeepsTheCountExactAndTheLimitInBounds) {
  AdaptiveLimiterOptions o = SmallWindows();
  o.window_samples = 50;
  auto limiter = Make(o);
  constexpr int kThreads = 4;
  constexpr int kIterations = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        AdaptiveLimiter::Permit permit = limiter->TryAcquire();
        if (!permit) continue;
        AdaptiveLimiter::Ticket ticket = AdaptiveLimiter::Track(limiter, clock_.NowNanos());
        permit.Release();
        clock_.Advance(absl::Microseconds(1 + (i + t) % 7));
        switch (i % 3) {
          case 0:
            ticket.Commit();
            break;
          case 1:
            ticket.Drop();
            break;
          default:
            break;  // destruction cancels
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(limiter->in_flight(), 0);
  EXPECT_GE(limiter->limit(), o.min_limit);
  EXPECT_LE(limiter->limit(), o.max_limit);
}

// ---- the stage and its config ----

node::flowctl::StageChainConfig ParseChain(const std::string& text) {
  node::flowctl::StageChainConfig config;
  CHECK(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

TEST(AdaptiveStageTest, RejectsAtTheLimitAndReleasesWhenALaterStageRejects) {
  tests::FakeClock clock;
  StageRegistry registry;
  ASSERT_TRUE(registry
                  .RegisterPredicate("never", RejectKind::kOverloaded,
                                     [](const RequestMeta&) { return false; })
                  .ok());
  absl::StatusOr<std::shared_ptr<const ChainFactory>> factory = registry.Build(
      ParseChain("stages { adaptive { initial_limit: 2 min_limit: 1 retry_after_ms: 7 } }"));
  ASSERT_TRUE(factory.ok()) << factory.status();
  StageChainHolder holder((*factory)->Create({.partition = 1, .clock = &clock}));
  std::shared_ptr<AdaptiveLimiter> limiter = LimiterOf(*holder.Get());
  ASSERT_NE(limiter, nullptr);

  Admission a = holder.Admit({.partition = 1});
  Admission b = holder.Admit({.partition = 1});
  Admission c = holder.Admit({.partition = 1});
  EXPECT_TRUE(a.admitted());
  EXPECT_TRUE(b.admitted());
  ASSERT_FALSE(c.admitted());
  EXPECT_EQ(c.decision().stage(), "adaptive");
  EXPECT_THAT(std::string(c.decision().reason()), HasSubstr("adaptive in-flight limit"));
  EXPECT_EQ(c.decision().retry_after(), absl::Milliseconds(7));
  EXPECT_EQ(limiter->in_flight(), 2);
  a.Finish();
  b = Admission();
  EXPECT_EQ(limiter->in_flight(), 0);

  // A later stage refuses: the adaptive slot goes back at once.
  absl::StatusOr<std::shared_ptr<const ChainFactory>> gated =
      registry.Build(ParseChain("stages { adaptive { initial_limit: 2 min_limit: 1 } } "
                                "stages { gate { predicate: \"never\" } }"));
  ASSERT_TRUE(gated.ok()) << gated.status();
  (*gated)->ApplyTo(holder);
  EXPECT_EQ(LimiterOf(*holder.Get()), limiter);  // same stage, state kept
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(holder.Admit({.partition = 1}).admitted());
  EXPECT_EQ(limiter->in_flight(), 0);

  std::vector<StageStats> stats = holder.Get()->Stats();
  ASSERT_EQ(stats[0].kind, "adaptive");
  ASSERT_GE(stats[0].gauges.size(), 4u);
  EXPECT_EQ(stats[0].gauges[0].name, "in_flight");
  EXPECT_EQ(stats[0].gauges[1].name, "limit");
  EXPECT_EQ(stats[0].gauges[1].value, 2);
  EXPECT_EQ(stats[0].gauges[2].name, "baseline_latency_ms");
  EXPECT_EQ(stats[0].gauges[3].name, "window_latency_ms");
}

TEST(AdaptiveStageTest, LiveUpdateChangesParametersAndKeepsTheLimit) {
  tests::FakeClock clock;
  StageRegistry registry;
  auto first = registry.Build(ParseChain("stages { name: \"a\" adaptive { initial_limit: 50 } }"));
  ASSERT_TRUE(first.ok());
  StageChainHolder holder((*first)->Create({.partition = 1, .clock = &clock}));
  auto limiter = LimiterOf(*holder.Get(), "a");
  auto second = registry.Build(ParseChain(
      "stages { name: \"a\" adaptive { max_limit: 40 decrease_factor: 0.5 tolerance: 3 } }"));
  ASSERT_TRUE(second.ok());
  (*second)->ApplyTo(holder);
  ASSERT_EQ(LimiterOf(*holder.Get(), "a"), limiter);
  EXPECT_EQ(limiter->limit(), 40);
  EXPECT_EQ(limiter->options().decrease_factor, 0.5);
  EXPECT_EQ(limiter->options().tolerance, 3);
}

TEST(AdaptiveStageTest, ConfigErrorsNameTheField) {
  StageRegistry registry;
  struct Case {
    std::string text;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"stages { adaptive { min_limit: 10 max_limit: 5 } }", "stages[0].adaptive.max_limit"},
      {"stages { adaptive { initial_limit: 2000 } }", "stages[0].adaptive.initial_limit"},
      {"stages { adaptive { tolerance: 0.5 } }", "stages[0].adaptive.tolerance"},
      {"stages { adaptive { decrease_factor: 1 } }", "stages[0].adaptive.decrease_factor"},
      {"stages { adaptive { decrease_factor: -0.5 } }", "stages[0].adaptive.decrease_factor"},
      {"stages { adaptive { increase_step: -1 } }", "stages[0].adaptive.increase_step"},
      {"stages { adaptive { quantile: 1.5 } }", "stages[0].adaptive.quantile"},
      {"stages { adaptive { quantile: -1 } }", "stages[0].adaptive.quantile"},
      {"stages { adaptive { baseline_drift: 2 } }", "stages[0].adaptive.baseline_drift"},
      {"stages { adaptive { target_latency_ms: 500 max_latency_ms: 100 } }",
       "stages[0].adaptive.max_latency_ms"},
      {"stages { rate { unlimited: true } } stages { name: \"x\" adaptive {} } "
       "stages { name: \"y\" adaptive {} }",
       "stages[2].adaptive: at most one adaptive stage per chain (also stages[1])"},
  };
  for (const Case& c : cases) {
    absl::Status s = registry.Validate(ParseChain(c.text));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.error)) << c.text;
  }
  absl::StatusOr<AdaptiveLimiterOptions> defaults =
      AdaptiveOptionsFromConfig(node::flowctl::AdaptiveStageConfig(), "stages[0]");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->initial_limit, 32);
  EXPECT_EQ(defaults->min_limit, 4);
  EXPECT_EQ(defaults->max_limit, 1000);
  EXPECT_EQ(defaults->window_samples, 100);
  EXPECT_EQ(defaults->window, absl::Milliseconds(500));
  EXPECT_EQ(defaults->max_hold, absl::Seconds(1));
  EXPECT_TRUE(ValidateAdaptiveLimiterOptions(*defaults).ok());
}

}  // namespace
}  // namespace flowctl
