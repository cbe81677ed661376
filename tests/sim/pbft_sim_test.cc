// Seeded PBFT cluster simulations (tests/sim/pbft_sim.h): every fault kind, n = 4 and n = 7.
// A failure prints the one-line command that replays it. SIM_SEED=<n> [SIM_FAULT=<kind>]
// [SIM_N=<n>] runs just that case in PbftSim.Replay.
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "tests/sim/pbft_sim.h"

namespace sim {
namespace {

constexpr uint64_t kSeedsPerKind = 25;  // 15 kinds x 25 = 375 simulations

class PbftSimTest : public ::testing::TestWithParam<FaultKind> {};

TEST_P(PbftSimTest, SafeAndLive) {
  const FaultKind kind = GetParam();
  for (uint64_t i = 0; i < kSeedsPerKind; ++i) {
    SimOptions options;
    options.seed = 1000 * (static_cast<uint64_t>(kind) + 1) + i;
    options.fault = kind;
    options.n = i % 5 == 4 ? 7 : 4;
    const SimResult r = RunSimulation(options);
    EXPECT_TRUE(r.ok) << FaultKindName(kind) << " seed " << options.seed << " n=" << options.n
                      << (r.safety_violation ? " SAFETY VIOLATION: " : ": ") << r.failure
                      << "\n  replay: " << ReplayCommand(options);
    EXPECT_GT(r.max_committed_seq, 0u) << ReplayCommand(options);
  }
}

INSTANTIATE_TEST_SUITE_P(AllFaults, PbftSimTest, ::testing::ValuesIn(AllFaultKinds()),
                         [](const ::testing::TestParamInfo<FaultKind>& info) {
                           return std::string(FaultKindName(info.param));
                         });

// A Byzantine primary lists txs whose bodies fail their check (with a Byzantine replica preparing
// them at n = 7): correct replicas must refuse every such body they fetch, and still take valid
// fetched bodies of certified batches unchecked. Both paths must be exercised, or this proves
// nothing.
TEST(PbftSim, FetchedBodiesAreTakenUncheckedOnlyOnACertificate) {
  uint64_t refused = 0;
  uint64_t certified = 0;
  for (FaultKind kind : {FaultKind::kByzPrimary, FaultKind::kMixed}) {
    for (uint64_t i = 0; i < 10; ++i) {
      SimOptions options;
      options.seed = 500 + i;
      options.fault = kind;
      options.n = i % 2 == 0 ? 7 : 4;
      const SimResult r = RunSimulation(options);
      EXPECT_TRUE(r.ok) << r.failure << "\n  replay: " << ReplayCommand(options);
      refused += r.invalid_bodies_refused;
      certified += r.certified_fetches;
    }
  }
  EXPECT_GT(refused, 0u);
  EXPECT_GT(certified, 0u);
}

TEST(PbftSim, SameSeedSameRun) {
  SimOptions options;
  options.seed = 77;
  options.fault = FaultKind::kMixed;
  const SimResult a = RunSimulation(options);
  const SimResult b = RunSimulation(options);
  EXPECT_EQ(a.messages_delivered, b.messages_delivered);
  EXPECT_EQ(a.max_committed_seq, b.max_committed_seq);
  EXPECT_EQ(a.failure, b.failure);
}

TEST(PbftSim, Replay) {
  const char* seed = std::getenv("SIM_SEED");
  if (seed == nullptr) GTEST_SKIP() << "set SIM_SEED (and SIM_FAULT, SIM_N) to replay one run";
  SimOptions options;
  options.seed = std::strtoull(seed, nullptr, 10);
  if (const char* f = std::getenv("SIM_FAULT")) {
    auto kind = ParseFaultKind(f);
    ASSERT_TRUE(kind.has_value()) << "unknown SIM_FAULT " << f;
    options.fault = *kind;
  }
  if (const char* n = std::getenv("SIM_N")) options.n = static_cast<uint32_t>(std::atoi(n));
  const SimResult r = RunSimulation(options);
  EXPECT_TRUE(r.ok) << r.failure;
}

}  // namespace
}  // namespace sim
