// NodeAdmission: congestion episodes (entered on a late consensus lane or saturated CPU, left
// after calm ticks and a refill), cuts in proportion to CPU over entitlement, and the shedder that
// lets through exactly its fraction.
#include "flowctl/node_admission.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace flowctl {
namespace {

using Load = NodeAdmission::PartitionLoad;

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kTick = 100 * kMs;
constexpr int64_t kCapacity = 2 * kTick;  // 2 workers

// Partition `id` using `over` x its entitlement (half the capacity), consensus delay `delay_ms`.
Load L(uint32_t id, double over, int64_t delay_ms = 1, bool backlogged = false) {
  const double entitlement = kCapacity / 2.0;
  return {.id = id,
          .cpu_nanos = static_cast<int64_t>(over * entitlement),
          .entitlement_nanos = entitlement,
          .consensus_delay_nanos = delay_ms * kMs,
          .backlogged = backlogged};
}

TEST(AdmissionShedderTest, LetsThroughItsFractionEvenly) {
  AdmissionShedder s;
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(s.Admit());
  EXPECT_EQ(s.refused(), 0u);
  s.SetFraction(0.25);
  std::string pattern;
  for (int i = 0; i < 12; ++i) pattern += s.Admit() ? 'A' : '.';
  EXPECT_EQ(pattern, "...A...A...A");
  EXPECT_EQ(s.refused(), 9u);
  s.SetFraction(0);
  EXPECT_FALSE(s.Admit());
  s.SetFraction(7);  // clamped
  EXPECT_EQ(s.fraction(), 1);
  s.SetFraction(std::nan(""));
  EXPECT_EQ(s.fraction(), 1);
}

TEST(NodeAdmissionTest, ACalmNodeAdmitsEverything) {
  NodeAdmission a({});
  for (int tick = 0; tick < 10; ++tick) {
    EXPECT_EQ(a.Update(kCapacity, {L(1, 0.8), L(2, 0.5, 20)}), (std::vector<double>{1, 1}));
  }
  EXPECT_FALSE(a.stats().congested);
  EXPECT_EQ(a.stats().episodes, 0u);
}

// A late consensus lane (partition 2, within its entitlement) starts an episode; the partition
// over its entitlement is cut in proportion to its excess (at most halved per tick); the late one
// within its entitlement is not cut (nor is a third).
TEST(NodeAdmissionTest, ALateConsensusLaneCutsByExcess) {
  NodeAdmission a({.consensus_delay_target = absl::Milliseconds(50)});
  std::vector<double> f = a.Update(kCapacity, {L(1, 1.25), L(2, 0.5, 80), L(3, 0.1)});
  EXPECT_TRUE(a.stats().congested);
  EXPECT_EQ(a.stats().episodes, 1u);
  EXPECT_EQ(a.stats().trigger, "consensus lane of partition 2 late: 80ms > 50ms");
  EXPECT_DOUBLE_EQ(f[0], 0.8);  // 1 / 1.25
  EXPECT_DOUBLE_EQ(f[1], 1);
  EXPECT_DOUBLE_EQ(f[2], 1);
  f = a.Update(kCapacity, {L(1, 4), L(2, 0.5, 80), L(3, 0.1)});
  EXPECT_DOUBLE_EQ(f[0], 0.4);  // halved at most
  EXPECT_DOUBLE_EQ(f[1], 1);
  EXPECT_NEAR(a.stats().partitions[0].cpu_over_entitlement, 4, 1e-9);
  for (int tick = 0; tick < 20; ++tick) f = a.Update(kCapacity, {L(1, 4), L(2, 0.5, 80), L(3, 0)});
  EXPECT_DOUBLE_EQ(f[0], NodeAdmission::Config{}.min_admit_fraction);  // the floor
  EXPECT_DOUBLE_EQ(f[2], 1);
}

TEST(NodeAdmissionTest, SaturatedCpuWithWorkQueuedStartsAnEpisode) {
  NodeAdmission a({});
  // 95% of the CPU but nothing queued: not saturated.
  a.Update(kCapacity, {L(1, 1.5), L(2, 0.4)});
  EXPECT_FALSE(a.stats().congested);
  const std::vector<double> f = a.Update(kCapacity, {L(1, 1.5, 1, true), L(2, 0.4)});
  EXPECT_TRUE(a.stats().congested);
  EXPECT_EQ(a.stats().trigger, "worker CPU 95% used with work queued");
  EXPECT_NEAR(f[0], 1 / 1.5, 1e-9);
  EXPECT_DOUBLE_EQ(f[1], 1);
}

// The way out: exit_ticks calm ticks in a row (a late tick restarts the count), then a refill of
// kRefillStep per tick; the episode ends once every partition admits kExitAdmitFraction again.
TEST(NodeAdmissionTest, EndsAfterCalmTicksAndARefill) {
  NodeAdmission a({.exit_ticks = 3});
  for (int tick = 0; tick < 4; ++tick) a.Update(kCapacity, {L(1, 2, 80)});
  EXPECT_DOUBLE_EQ(a.stats().partitions[0].admit_fraction, 0.0625);  // 0.5^4

  // Calm (on time, CPU not saturated), but not yet for 3 ticks: grows by kGrowStep, even though
  // it is still over its entitlement (cuts happen only on ticks with a signal).
  std::vector<double> f = a.Update(kCapacity, {L(1, 2)});
  EXPECT_DOUBLE_EQ(f[0], 0.1125);
  f = a.Update(kCapacity, {L(1, 0.5, 30)});  // over half the target: not calm, count restarts
  f = a.Update(kCapacity, {L(1, 0.5)});
  f = a.Update(kCapacity, {L(1, 0.5)});
  EXPECT_TRUE(a.stats().congested);
  EXPECT_NEAR(f[0], 0.2625, 1e-9);
  // Third calm tick in a row: refilled by kRefillStep per tick (0.5125, 0.7625, 1), over at the
  // tick that reaches kExitAdmitFraction.
  std::vector<double> seen;
  for (int tick = 0; tick < 3; ++tick) seen.push_back(a.Update(kCapacity, {L(1, 0.5)})[0]);
  EXPECT_NEAR(seen[0], 0.5125, 1e-9);
  EXPECT_NEAR(seen[1], 0.7625, 1e-9);
  EXPECT_DOUBLE_EQ(seen[2], 1);
  EXPECT_FALSE(a.stats().congested);
  EXPECT_EQ(a.stats().episodes, 1u);
  EXPECT_EQ(a.stats().congested_ticks, 11u);
}

TEST(NodeAdmissionTest, PartitionsComeAndGo) {
  NodeAdmission a({});
  a.Update(kCapacity, {L(1, 3, 80), L(2, 0.1)});
  std::vector<double> f = a.Update(kCapacity, {L(2, 0.1), L(9, 0.1)});
  EXPECT_EQ(f, (std::vector<double>{1, 1}));  // 9 is new; 1 is forgotten
  f = a.Update(kCapacity, {L(1, 0.1)});
  EXPECT_DOUBLE_EQ(f[0], 1);  // back as new
}

TEST(NodeAdmissionTest, ConfigIsValidated) {
  EXPECT_FALSE(
      NodeAdmission::ValidateConfig({.consensus_delay_target = absl::ZeroDuration()}).ok());
  EXPECT_FALSE(NodeAdmission::ValidateConfig({.cpu_busy_fraction = 0}).ok());
  EXPECT_FALSE(NodeAdmission::ValidateConfig({.min_admit_fraction = 1.5}).ok());
  EXPECT_FALSE(NodeAdmission::ValidateConfig({.exit_ticks = 0}).ok());
  EXPECT_TRUE(NodeAdmission::ValidateConfig({}).ok());
}

}  // namespace
}  // namespace flowctl
