#include "flowctl/stage_registry.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "flowctl/builtin_stages.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"

namespace flowctl {
namespace {

using ::node::flowctl::StageChainConfig;
using ::testing::HasSubstr;
using ::tests::FakeClock;

StageChainConfig Parse(const std::string& text) {
  StageChainConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

std::shared_ptr<const ChainFactory> BuildOk(const StageRegistry& registry,
                                            const std::string& text) {
  absl::StatusOr<std::shared_ptr<const ChainFactory>> factory = registry.Build(Parse(text));
  EXPECT_TRUE(factory.ok()) << factory.status();
  return factory.ok() ? *factory : nullptr;
}

std::vector<std::string> Names(const StageChain& chain) {
  std::vector<std::string> names;
  for (const StageChain::Link& link : chain.links()) names.emplace_back(link.stage->name());
  return names;
}

template <typename T>
T& StageOf(const StageChain& chain, const std::string& name) {
  const StageChain::Link* link = chain.Find(name);
  EXPECT_NE(link, nullptr) << name;
  T* stage = dynamic_cast<T*>(link->stage.get());
  EXPECT_NE(stage, nullptr) << name;
  return *stage;
}

class StageRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(registry_
                    .RegisterPredicate("consensus_normal", RejectKind::kUnavailable,
                                       [this](const RequestMeta&) { return normal_.load(); })
                    .ok());
    ASSERT_TRUE(registry_
                    .RegisterPredicate("pool_below_high_water", RejectKind::kOverloaded,
                                       [](const RequestMeta& r) { return r.partition != 9; })
                    .ok());
  }

  FakeClock clock_;
  std::atomic<bool> normal_{true};
  StageRegistry registry_;
};

TEST_F(StageRegistryTest, GateUsesThePredicatesHintUnlessConfiguredWithOne) {
  std::atomic<int64_t> hint_ms{250};
  ASSERT_TRUE(registry_
                  .RegisterPredicate(
                      "hinted", RejectKind::kOverloaded, [](const RequestMeta&) { return false; },
                      [&hint_ms](const RequestMeta& r) {
                        return absl::Milliseconds(hint_ms.load() + r.partition);
                      })
                  .ok());
  auto chain = BuildOk(registry_, R"pb(
                 stages { gate { predicate: "hinted" } }
               )pb")
                   ->Create({.partition = 3, .clock = &clock_});
  EXPECT_EQ(Admit(chain, {.partition = 3}).decision().retry_after(), absl::Milliseconds(253));
  hint_ms.store(40);  // asked on every refusal, not frozen at build time
  EXPECT_EQ(Admit(chain, {.partition = 3}).decision().retry_after(), absl::Milliseconds(43));
  // A gate configured with its own retry_after_ms keeps it.
  auto fixed = BuildOk(registry_, R"pb(
                 stages { gate { predicate: "hinted" retry_after_ms: 70 } }
               )pb")
                   ->Create({.partition = 3, .clock = &clock_});
  EXPECT_EQ(Admit(fixed, {.partition = 3}).decision().retry_after(), absl::Milliseconds(70));
}

TEST_F(StageRegistryTest, BuildsTheConfiguredOrderWithDefaultNames) {
  auto factory = BuildOk(registry_, R"pb(
    stages { gate { predicate: "consensus_normal" } }
    stages {
      name: "pool"
      gate { predicate: "pool_below_high_water" }
    }
    stages { concurrency { max_in_flight: 2 } }
    stages { rate { rate_per_second: 100 burst: 10 } }
  )pb");
  ASSERT_NE(factory, nullptr);
  EXPECT_EQ(factory->size(), 4u);
  auto chain = factory->Create({.partition = 1, .clock = &clock_});
  EXPECT_THAT(Names(*chain), ::testing::ElementsAre("gate", "pool", "concurrency", "rate"));
  EXPECT_EQ(chain->context().partition, 1u);
  EXPECT_TRUE(Admit(chain, {.partition = 1}).admitted());

  normal_.store(false);
  Admission rejected = Admit(chain, {.partition = 1});
  EXPECT_EQ(rejected.decision().stage(), "gate");
  EXPECT_EQ(rejected.decision().retry_after(), kDefaultGateRetryAfter);
  // The predicate was registered as unavailable: that, not the reason text, picks the code.
  EXPECT_EQ(rejected.decision().reject_kind(), RejectKind::kUnavailable);
  EXPECT_EQ(rejected.decision().ToStatus().code(), absl::StatusCode::kUnavailable);
  normal_.store(true);
  Admission full = Admit(chain, {.partition = 9});
  EXPECT_EQ(full.decision().stage(), "pool");
  EXPECT_EQ(full.decision().ToStatus().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(StageOf<ConcurrencyStage>(*chain, "concurrency").limiter().in_flight(), 0);
}

TEST_F(StageRegistryTest, ConfiguredValuesReachTheStages) {
  auto factory = BuildOk(registry_, R"pb(
    stages { concurrency { max_in_flight: 1 retry_after_ms: 250 } }
    stages { rate { rate_per_second: 1000 burst: 1500 unit: BYTES } }
    stages {
      name: "open"
      rate { unlimited: true rate_per_second: -5 }
    }
  )pb");
  ASSERT_NE(factory, nullptr);
  auto chain = factory->Create({.clock = &clock_});
  EXPECT_EQ(StageOf<ConcurrencyStage>(*chain, "concurrency").limiter().limit(), 1);
  const RateStage& rate = StageOf<RateStage>(*chain, "rate");
  EXPECT_EQ(rate.bucket().rate(), 1000);
  EXPECT_EQ(rate.bucket().burst(), 1500);
  EXPECT_EQ(rate.unit(), RateStage::Unit::kBytes);
  EXPECT_EQ(StageOf<RateStage>(*chain, "open").bucket().rate(), TokenBucket::kUnlimited);

  Admission first = Admit(chain, {.size_bytes = 1000});
  EXPECT_TRUE(first.admitted());
  Admission second = Admit(chain, {.size_bytes = 1000});
  EXPECT_EQ(second.decision().stage(), "concurrency");
  EXPECT_EQ(second.decision().retry_after(), absl::Milliseconds(250));
  first.Finish();
  Admission third = Admit(chain, {.size_bytes = 1000});  // 500 bytes left: wait 0.5 s
  EXPECT_EQ(third.decision().stage(), "rate");
  EXPECT_EQ(third.decision().retry_after(), absl::Milliseconds(500));
  EXPECT_EQ(StageOf<ConcurrencyStage>(*chain, "concurrency").limiter().in_flight(), 0);
}

TEST_F(StageRegistryTest, EachPartitionGetsItsOwnState) {
  auto factory = BuildOk(registry_, "stages { concurrency { max_in_flight: 1 } }");
  ASSERT_NE(factory, nullptr);
  auto p0 = factory->Create({.partition = 0});
  auto p1 = factory->Create({.partition = 1});
  Admission a = Admit(p0, {.partition = 0});
  Admission b = Admit(p1, {.partition = 1});
  EXPECT_TRUE(a.admitted());
  EXPECT_TRUE(b.admitted());
  EXPECT_FALSE(Admit(p0, {.partition = 0}).admitted());
}

TEST_F(StageRegistryTest, ConfigErrorsNameTheField) {
  struct Case {
    std::string config;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"stages { concurrency { max_in_flight: 1 } } stages { name: \"x\" }",
       "stages[1].kind: no stage kind set (one of concurrency, rate, gate, adaptive, custom)"},
      {"stages { concurrency { } }",
       "stages[0].concurrency.max_in_flight: must be >= 1 requests, got 0"},
      {"stages { rate { rate_per_second: 1 } } stages { name: \"r2\" rate { rate_per_second: -1 } "
       "}",
       "stages[1].rate.rate_per_second: must be finite and >= 0 requests/s (0 closes the stage; "
       "set `unlimited` for no limit), got -1"},
      {"stages { rate { rate_per_second: inf } }", "stages[0].rate.rate_per_second: "},
      {"stages { rate { rate_per_second: nan } }", "stages[0].rate.rate_per_second: "},
      {"stages { rate { rate_per_second: 5 burst: -2 unit: BYTES } }",
       "stages[0].rate.burst: must be finite and >= 0 bytes, got -2"},
      {"stages { rate { rate_per_second: 5 burst: inf } }", "stages[0].rate.burst: "},
      {"stages { rate { rate_per_second: 5 unit: 7 } }",
       "stages[0].rate.unit: unknown unit 7 (REQUESTS or BYTES)"},
      {"stages { gate { } }",
       "stages[0].gate.predicate: required (registered: consensus_normal, pool_below_high_water)"},
      {"stages { gate { predicate: \"nope\" } }",
       "stages[0].gate.predicate: unknown predicate 'nope' (registered: consensus_normal, "
       "pool_below_high_water)"},
      {"stages { rate { rate_per_second: 1 } } stages { rate { rate_per_second: 2 } }",
       "stages[1].name: duplicate stage name 'rate' (also stages[0]); give stages of one kind "
       "distinct names"},
      {"stages { name: \"a\" gate { predicate: \"consensus_normal\" } } "
       "stages { name: \"a\" concurrency { max_in_flight: 3 } }",
       "stages[1].name: duplicate stage name 'a' (also stages[0])"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::shared_ptr<const ChainFactory>> factory = registry_.Build(Parse(c.config));
    ASSERT_FALSE(factory.ok()) << c.config;
    EXPECT_EQ(factory.status().code(), absl::StatusCode::kInvalidArgument) << c.config;
    EXPECT_THAT(std::string(factory.status().message()), HasSubstr(c.message)) << c.config;
    EXPECT_EQ(registry_.Validate(Parse(c.config)).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(registry_.Validate(StageChainConfig()).ok());  // empty chain: admit all
}

TEST_F(StageRegistryTest, PredicateRegistrationErrors) {
  auto yes = [](const RequestMeta&) { return true; };
  EXPECT_EQ(registry_.RegisterPredicate("consensus_normal", RejectKind::kUnavailable, yes).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry_.RegisterPredicate("", RejectKind::kOverloaded, yes).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.RegisterPredicate("null", RejectKind::kOverloaded, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_NE(registry_.FindPredicate("consensus_normal"), nullptr);
  EXPECT_EQ(registry_.FindPredicate("consensus_normal")->rejects_as, RejectKind::kUnavailable);
  EXPECT_EQ(registry_.FindPredicate("nope"), nullptr);
  StageRegistry empty;
  EXPECT_THAT(std::string(empty.Validate(Parse("stages { gate { predicate: \"x\" } }")).message()),
              HasSubstr("(registered: none)"));
}

// ---- live update ----

TEST_F(StageRegistryTest, LiveUpdateKeepsStateWhereNameAndKindMatch) {
  auto v1 = BuildOk(registry_, R"pb(
    stages { concurrency { max_in_flight: 2 } }
    stages { rate { rate_per_second: 1 burst: 3 } }
    stages {
      name: "health"
      gate { predicate: "consensus_normal" }
    }
  )pb");
  ASSERT_NE(v1, nullptr);
  StageChainHolder holder(v1->Create({.partition = 2, .clock = &clock_}));
  std::shared_ptr<const StageChain> old_chain = holder.Get();
  Admission a = holder.Admit({.partition = 2});
  Admission b = holder.Admit({.partition = 2});
  ASSERT_TRUE(a.admitted() && b.admitted());
  EXPECT_EQ(holder.Admit({.partition = 2}).decision().stage(), "concurrency");

  // Raise the concurrency limit, lower the rate, repoint the gate (a new instance).
  auto v2 = BuildOk(registry_, R"pb(
    stages { concurrency { max_in_flight: 3 } }
    stages { rate { rate_per_second: 1 burst: 2 } }
    stages {
      name: "health"
      gate { predicate: "pool_below_high_water" }
    }
  )pb");
  ASSERT_NE(v2, nullptr);
  v2->ApplyTo(holder);
  std::shared_ptr<const StageChain> new_chain = holder.Get();
  ASSERT_NE(new_chain, old_chain);
  EXPECT_EQ(new_chain->context().partition, 2u);

  // Same limiter: the two old requests still count against the new limit of 3.
  auto& concurrency = StageOf<ConcurrencyStage>(*new_chain, "concurrency");
  EXPECT_EQ(&concurrency, &StageOf<ConcurrencyStage>(*old_chain, "concurrency"));
  EXPECT_EQ(concurrency.limiter().limit(), 3);
  EXPECT_EQ(concurrency.limiter().in_flight(), 2);
  // Same bucket: one token left of 3 (burst now 2), not a fresh full bucket.
  auto& rate = StageOf<RateStage>(*new_chain, "rate");
  EXPECT_EQ(&rate, &StageOf<RateStage>(*old_chain, "rate"));
  EXPECT_NEAR(rate.bucket().Available(), 1, 1e-9);
  EXPECT_EQ(rate.bucket().burst(), 2);
  // Counters carried over, including for the re-made gate.
  const std::vector<StageStats> stats = new_chain->Stats();
  EXPECT_EQ(stats[0].admitted, 2u);
  EXPECT_EQ(stats[0].rejected, 1u);
  EXPECT_EQ(stats[2].admitted, 2u);

  Admission c = holder.Admit({.partition = 2});
  EXPECT_TRUE(c.admitted()) << c.decision().ToString();
  Admission d = holder.Admit({.partition = 2});
  EXPECT_EQ(d.decision().stage(), "concurrency");
  EXPECT_EQ(holder.Admit({.partition = 9}).decision().stage(), "concurrency");

  // Requests admitted under the old chain release into the shared limiter.
  a.Finish();
  b.Finish();
  c.Finish();
  EXPECT_EQ(concurrency.limiter().in_flight(), 0);
  Admission e = holder.Admit({.partition = 9});  // rate is out of tokens; a moment passes
  EXPECT_EQ(e.decision().stage(), "rate");
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(holder.Admit({.partition = 9}).decision().stage(), "health");
}

TEST_F(StageRegistryTest, LiveUpdateWithAChangedKindStartsFresh) {
  auto v1 = BuildOk(registry_, "stages { name: \"limit\" concurrency { max_in_flight: 1 } }");
  StageChainHolder holder(v1->Create({.clock = &clock_}));
  Admission held = holder.Admit({});
  ASSERT_TRUE(held.admitted());
  auto v2 = BuildOk(registry_, "stages { name: \"limit\" rate { rate_per_second: 10 burst: 1 } }");
  v2->ApplyTo(holder);
  EXPECT_EQ(holder.Get()->links()[0].stage->kind(), kRateKind);
  EXPECT_EQ(holder.Get()->Stats()[0].admitted, 0u);
  EXPECT_TRUE(holder.Admit({}).admitted());
  held.Finish();  // releases into the dropped stage, kept alive by `held`
}

TEST_F(StageRegistryTest, InvalidUpdateIsRefusedWholeAndChangesNothing) {
  auto v1 = BuildOk(registry_, R"pb(
    stages { concurrency { max_in_flight: 1 } }
    stages { rate { rate_per_second: 5 } }
  )pb");
  StageChainHolder holder(v1->Create({.clock = &clock_}));
  std::shared_ptr<const StageChain> before = holder.Get();
  // The first stage is a valid change; the second is not: nothing may be applied.
  absl::StatusOr<std::shared_ptr<const ChainFactory>> v2 = registry_.Build(Parse(R"pb(
    stages { concurrency { max_in_flight: 100 } }
    stages { rate { rate_per_second: -5 } }
  )pb"));
  ASSERT_FALSE(v2.ok());
  EXPECT_THAT(std::string(v2.status().message()), HasSubstr("stages[1].rate.rate_per_second"));
  EXPECT_EQ(holder.Get(), before);
  EXPECT_EQ(StageOf<ConcurrencyStage>(*before, "concurrency").limiter().limit(), 1);
}

TEST_F(StageRegistryTest, LiveUpdateCanRemoveAndReorderStages) {
  auto v1 = BuildOk(registry_, R"pb(
    stages { concurrency { max_in_flight: 5 } }
    stages { rate { rate_per_second: 100 burst: 100 } }
  )pb");
  StageChainHolder holder(v1->Create({.clock = &clock_}));
  Admission held = holder.Admit({});
  auto v2 = BuildOk(registry_, R"pb(
    stages { rate { rate_per_second: 100 burst: 100 } }
    stages { gate { predicate: "consensus_normal" } }
  )pb");
  v2->ApplyTo(holder);
  EXPECT_THAT(Names(*holder.Get()), ::testing::ElementsAre("rate", "gate"));
  EXPECT_EQ(holder.Get()->Stats()[0].admitted, 1u);
  normal_.store(false);
  EXPECT_EQ(holder.Admit({}).decision().stage(), "gate");
}

// Requests flow while the limit flips between 2 and 4 through live updates: the shared limiter
// never has more than 4 in flight and ends at 0.
TEST_F(StageRegistryTest, UpdatesUnderLoadNeverLeakPermits) {
  auto low = BuildOk(registry_, "stages { concurrency { max_in_flight: 2 } }");
  auto high = BuildOk(registry_, "stages { concurrency { max_in_flight: 4 } }");
  StageChainHolder holder(low->Create({}));
  const ConcurrencyLimiter& limiter =
      StageOf<ConcurrencyStage>(*holder.Get(), "concurrency").limiter();
  std::atomic<int64_t> max_seen{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20'000; ++i) {
        Admission a = holder.Admit({});
        const int64_t now = limiter.in_flight();
        int64_t seen = max_seen.load();
        while (now > seen && !max_seen.compare_exchange_weak(seen, now)) {
        }
      }
    });
  }
  for (int i = 0; i < 500; ++i) (i % 2 == 0 ? high : low)->ApplyTo(holder);
  for (std::thread& t : threads) t.join();
  EXPECT_LE(max_seen.load(), 4);
  EXPECT_EQ(limiter.in_flight(), 0);
  EXPECT_EQ(&StageOf<ConcurrencyStage>(*holder.Get(), "concurrency").limiter(), &limiter);
  EXPECT_EQ(limiter.limit(), 2);
}

}  // namespace
}  // namespace flowctl
