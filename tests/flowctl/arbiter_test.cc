#include "flowctl/arbiter.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flowctl {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kInf = kUnboundedDemand;

std::vector<double> Allocate(double capacity, const std::vector<ArbiterConsumer>& consumers) {
  absl::StatusOr<std::vector<double>> shares = AllocateFairShares(capacity, consumers);
  EXPECT_TRUE(shares.ok()) << shares.status();
  return shares.ok() ? *shares : std::vector<double>();
}

// ---- hand-worked examples ----

TEST(ArbiterTest, EqualWeightsSaturatedSplitEvenly) {
  EXPECT_THAT(Allocate(90, {{.demand = kInf}, {.demand = kInf}, {.demand = kInf}}),
              ElementsAre(DoubleNear(30, 1e-9), DoubleNear(30, 1e-9), DoubleNear(30, 1e-9)));
}

TEST(ArbiterTest, SaturatedSharesFollowWeights) {
  EXPECT_THAT(Allocate(60, {{.weight = 1, .demand = 1000},
                            {.weight = 2, .demand = 1000},
                            {.weight = 3, .demand = 1000}}),
              ElementsAre(DoubleNear(10, 1e-9), DoubleNear(20, 1e-9), DoubleNear(30, 1e-9)));
}

// Fair share is 33.3; A wants only 10, so its unused 23.3 goes to B and C: 45 each, and B (demand
// 50) is still short, so nothing is left over.
TEST(ArbiterTest, UnusedShareIsRedistributed) {
  EXPECT_THAT(Allocate(100, {{.demand = 10}, {.demand = 50}, {.demand = kInf}}),
              ElementsAre(DoubleNear(10, 1e-9), DoubleNear(45, 1e-9), DoubleNear(45, 1e-9)));
}

TEST(ArbiterTest, CeilingCapsAndTheRestGoesToOthers) {
  EXPECT_THAT(Allocate(100, {{.ceiling = 20, .demand = kInf}, {.demand = kInf}}),
              ElementsAre(DoubleNear(20, 1e-9), DoubleNear(80, 1e-9)));
}

// A (weight 1) would get 25 by weight but is guaranteed 60; B (weight 3) gets the remaining 40.
TEST(ArbiterTest, BindingGuaranteeComesFirst) {
  EXPECT_THAT(Allocate(100, {{.weight = 1, .guarantee = 60, .demand = kInf},
                             {.weight = 3, .demand = kInf}}),
              ElementsAre(DoubleNear(60, 1e-9), DoubleNear(40, 1e-9)));
}

TEST(ArbiterTest, GuaranteeBelowFairShareDoesNotMatter) {
  EXPECT_THAT(Allocate(100, {{.guarantee = 10, .demand = kInf}, {.demand = kInf}}),
              ElementsAre(DoubleNear(50, 1e-9), DoubleNear(50, 1e-9)));
}

// Guarantees of 60 + 40 do not fit in 50: scaled by 1/2, nothing else handed out.
TEST(ArbiterTest, OvercommittedGuaranteesAreScaledDownProportionally) {
  EXPECT_THAT(Allocate(50, {{.guarantee = 60, .demand = kInf},
                            {.guarantee = 40, .demand = kInf},
                            {.demand = kInf}}),
              ElementsAre(DoubleNear(30, 1e-9), DoubleNear(20, 1e-9), DoubleNear(0, 1e-9)));
}

// An idle guarantee is lent: A is guaranteed 50 but wants 10, so B gets 90.
TEST(ArbiterTest, IdleGuaranteeIsLent) {
  EXPECT_THAT(Allocate(100, {{.guarantee = 50, .demand = 10}, {.demand = kInf}}),
              ElementsAre(DoubleNear(10, 1e-9), DoubleNear(90, 1e-9)));
}

TEST(ArbiterTest, DemandBelowCapacityIsFullyServed) {
  EXPECT_THAT(Allocate(100, {{.weight = 5, .demand = 10}, {.demand = 20}}),
              ElementsAre(DoubleNear(10, 1e-9), DoubleNear(20, 1e-9)));
}

// The example of the header.
TEST(ArbiterTest, HeaderExample) {
  EXPECT_THAT(Allocate(100, {{.weight = 1, .guarantee = 10, .demand = 80},
                             {.weight = 3, .ceiling = 50, .demand = 200}}),
              ElementsAre(DoubleNear(50, 1e-9), DoubleNear(50, 1e-9)));
}

// HTB borrowing over two ticks: while A is idle B borrows A's share; once A is busy again the
// next tick gives it back.
TEST(ArbiterTest, BorrowedShareIsTakenBackNextTick) {
  EXPECT_THAT(Allocate(100, {{.weight = 1, .guarantee = 30, .demand = 0},
                             {.weight = 1, .ceiling = 90, .demand = kInf}}),
              ElementsAre(DoubleNear(0, 1e-9), DoubleNear(90, 1e-9)));
  EXPECT_THAT(Allocate(100, {{.weight = 1, .guarantee = 30, .demand = 70},
                             {.weight = 1, .ceiling = 90, .demand = kInf}}),
              ElementsAre(DoubleNear(50, 1e-9), DoubleNear(50, 1e-9)));
}

TEST(ArbiterTest, ZeroCapacityAndNoConsumers) {
  EXPECT_THAT(Allocate(0, {{.guarantee = 5, .demand = kInf}, {.demand = kInf}}), ElementsAre(0, 0));
  EXPECT_TRUE(Allocate(10, {}).empty());
  EXPECT_THAT(Allocate(10, {{.demand = 0}}), ElementsAre(0));
}

TEST(ArbiterTest, InvalidInputNamesTheField) {
  struct Case {
    double capacity;
    std::vector<ArbiterConsumer> consumers;
    std::string field;
  };
  const std::vector<Case> cases = {
      {-1, {}, "capacity: "},
      {kInf, {}, "capacity: "},
      {10, {{.demand = 1}, {.weight = 0, .demand = 1}}, "consumers[1].weight: "},
      {10, {{.weight = -2}}, "consumers[0].weight: "},
      {10, {{.weight = NAN}}, "consumers[0].weight: "},
      {10, {{}, {}, {.guarantee = -1}}, "consumers[2].guarantee: "},
      {10, {{.guarantee = kInf}}, "consumers[0].guarantee: "},
      {10, {{.guarantee = 5, .ceiling = 4}}, "consumers[0].ceiling: "},
      {10, {{.demand = -3}}, "consumers[0].demand: "},
      {10, {{.demand = NAN}}, "consumers[0].demand: "},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<double>> shares = AllocateFairShares(c.capacity, c.consumers);
    ASSERT_FALSE(shares.ok()) << c.field;
    EXPECT_EQ(shares.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(shares.status().message()), HasSubstr(c.field));
  }
  EXPECT_EQ(AllocateFairShares(10, {{.weight = 0}}).status().message(),
            "consumers[0].weight: must be > 0 and finite, got 0");
}

// ---- randomized properties ----

// Picks one of a few "shapes" per field so edge cases (zero, infinity, ties) come up often.
ArbiterConsumer RandomConsumer(std::mt19937_64& rng, double capacity) {
  std::uniform_real_distribution<double> unit(0, 1);
  std::uniform_int_distribution<int> pick(0, 3);
  ArbiterConsumer c;
  c.weight = pick(rng) == 0 ? 1.0 : 0.1 + 10 * unit(rng);
  switch (pick(rng)) {
    case 0:
      c.guarantee = 0;
      break;
    case 1:
      c.guarantee = capacity * unit(rng) * 0.3;
      break;
    case 2:
      c.guarantee = capacity * unit(rng);
      break;
    default:
      c.guarantee = 0;
      break;
  }
  switch (pick(rng)) {
    case 0:
      c.ceiling = kNoCeiling;
      break;
    case 1:
      c.ceiling = c.guarantee;
      break;
    default:
      c.ceiling = c.guarantee + capacity * unit(rng);
      break;
  }
  switch (pick(rng)) {
    case 0:
      c.demand = 0;
      break;
    case 1:
      c.demand = kUnboundedDemand;
      break;
    default:
      c.demand = capacity * unit(rng);
      break;
  }
  return c;
}

// Checks capacity, floors, caps, work conservation and max-min fairness for one case.
void CheckProperties(double capacity, const std::vector<ArbiterConsumer>& consumers,
                     const std::vector<double>& share, const std::string& label) {
  const double eps = 1e-9 * std::max(1.0, capacity);
  ASSERT_EQ(share.size(), consumers.size()) << label;
  const size_t n = consumers.size();
  std::vector<double> cap(n), floor(n);
  double floors = 0;
  for (size_t i = 0; i < n; ++i) {
    cap[i] = std::min(consumers[i].demand, consumers[i].ceiling);
    floor[i] = std::min(consumers[i].guarantee, cap[i]);
    floors += floor[i];
  }
  const double total = std::accumulate(share.begin(), share.end(), 0.0);
  EXPECT_LE(total, capacity + eps) << label;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_GE(share[i], -eps) << label << " i=" << i;
    EXPECT_LE(share[i], consumers[i].ceiling + eps) << label << " ceiling i=" << i;
    EXPECT_LE(share[i], consumers[i].demand + eps) << label << " demand i=" << i;
    if (floors <= capacity) {
      EXPECT_GE(share[i], floor[i] - eps) << label << " guarantee i=" << i;
    } else {
      EXPECT_NEAR(share[i], floor[i] * capacity / floors, eps) << label << " scaled i=" << i;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (share[i] >= cap[i] - eps) continue;  // satisfied
    // i wants more: no capacity may be left over...
    EXPECT_GE(total, capacity - eps) << label << " not work-conserving, i=" << i;
    // ...and nobody may hold more than its guarantee at a higher weighted level than i's.
    for (size_t j = 0; j < n; ++j) {
      if (share[j] <= floor[j] + eps) continue;
      EXPECT_LE(share[j] / consumers[j].weight,
                share[i] / consumers[i].weight + eps / consumers[j].weight)
          << label << " unfair: j=" << j << " above i=" << i;
    }
  }
}

TEST(ArbiterPropertyTest, RandomCasesHoldEveryProperty) {
  std::mt19937_64 rng(20261129);
  std::uniform_int_distribution<int> count(1, 8);
  std::uniform_real_distribution<double> unit(0, 1);
  constexpr int kCases = 20'000;
  for (int k = 0; k < kCases; ++k) {
    const double capacity = k % 10 == 0 ? 0 : std::pow(10.0, 6 * unit(rng));  // 1 .. 1e6
    std::vector<ArbiterConsumer> consumers(count(rng));
    for (ArbiterConsumer& c : consumers) c = RandomConsumer(rng, capacity);
    absl::StatusOr<std::vector<double>> share = AllocateFairShares(capacity, consumers);
    ASSERT_TRUE(share.ok()) << "case " << k << ": " << share.status();
    CheckProperties(capacity, consumers, *share, absl::StrCat("case ", k));
    if (HasFailure()) return;  // one detailed failure is enough
  }
}

TEST(ArbiterPropertyTest, SaturatedSharesAreProportionalToWeights) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> count(1, 16);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int k = 0; k < 10'000; ++k) {
    const double capacity = std::pow(10.0, 9 * unit(rng));
    std::vector<ArbiterConsumer> consumers(count(rng));
    double weights = 0;
    for (ArbiterConsumer& c : consumers) {
      c.weight = 0.01 + 100 * unit(rng);
      c.demand = k % 2 == 0 ? kUnboundedDemand : capacity * (10 + unit(rng));  // >> capacity
      weights += c.weight;
    }
    absl::StatusOr<std::vector<double>> share = AllocateFairShares(capacity, consumers);
    ASSERT_TRUE(share.ok()) << share.status();
    for (size_t i = 0; i < consumers.size(); ++i) {
      const double expected = capacity * consumers[i].weight / weights;
      ASSERT_NEAR((*share)[i], expected, 1e-6 * expected) << "case " << k << " i=" << i;
    }
  }
}

}  // namespace
}  // namespace flowctl
