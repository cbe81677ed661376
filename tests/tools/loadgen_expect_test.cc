// loadgen --expect: parsing (good and bad inputs, clear errors) and evaluation (PASS/FAIL lines,
// every-partition expectations, windows, comparisons with another measurement, ratio metrics).
#include "tools/loadgen_expect.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loadgen {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

Expectation P(const std::string& text) {
  absl::StatusOr<Expectation> e = ParseExpectation(text);
  EXPECT_TRUE(e.ok()) << text << ": " << e.status();
  return e.ok() ? *e : Expectation{};
}

TEST(LoadgenExpectTest, ParsesMetricsOpsAndUnits) {
  Expectation e = P("steady.p99<200ms");
  EXPECT_EQ(e.lhs.partition, "steady");
  EXPECT_EQ(e.lhs.metric, "p99");
  EXPECT_EQ(e.lhs.kind, MetricKind::kLatencyMs);
  EXPECT_EQ(e.op, CompareOp::kLess);
  EXPECT_EQ(e.value, 200);

  EXPECT_EQ(P("a.p50 <= 1.5s").value, 1500);
  EXPECT_EQ(P("a.p50<=1.5s").op, CompareOp::kLessEqual);
  EXPECT_EQ(P("a.max_latency<500us").value, 0.5);
  EXPECT_EQ(P("hot.committed_rate>500/s").op, CompareOp::kGreater);
  EXPECT_EQ(P("hot.committed_rate>=500").op, CompareOp::kGreaterEqual);
  Expectation vc = P("view_changes==0");
  EXPECT_EQ(vc.lhs.partition, "");
  EXPECT_EQ(vc.op, CompareOp::kEqual);
  EXPECT_EQ(P("a.rejected>-1").value, -1);
  EXPECT_EQ(P("a.held==0").lhs.kind, MetricKind::kCount);
  Expectation ratio = P("a.hint_accuracy>=0.8");
  EXPECT_EQ(ratio.lhs.kind, MetricKind::kRatio);
  EXPECT_DOUBLE_EQ(ratio.value, 0.8);
  EXPECT_DOUBLE_EQ(P("a.hint_accuracy >= 80%").value, 0.8);
  EXPECT_EQ(P("a.hint_accuracy@10s-20s>=0.9*a.hint_accuracy@0-10s").rhs_ref.kind,
            MetricKind::kRatio);
}

TEST(LoadgenExpectTest, ParsesWindowsAndReferences) {
  Expectation e = P("steady.p99@30s-60s<=1.2*steady.p99@5-25s");
  EXPECT_TRUE(e.lhs.has_window);
  EXPECT_EQ(e.lhs.from_s, 30);
  EXPECT_EQ(e.lhs.to_s, 60);
  ASSERT_TRUE(e.has_ref);
  EXPECT_DOUBLE_EQ(e.factor, 1.2);
  EXPECT_EQ(e.rhs_ref.partition, "steady");
  EXPECT_EQ(e.rhs_ref.from_s, 5);
  EXPECT_EQ(e.rhs_ref.to_s, 25);
  Expectation r = P("hot.committed>=accepted");  // partition defaults to the left one's
  EXPECT_TRUE(r.has_ref);
  EXPECT_EQ(r.factor, 1);
  EXPECT_EQ(r.rhs_ref.partition, "hot");
  EXPECT_EQ(r.rhs_ref.metric, "accepted");
}

TEST(LoadgenExpectTest, BadExpectationsSayWhy) {
  struct Case {
    const char* text;
    const char* error;
  } cases[] = {
      {"steady.p99", "no comparison"},
      {"steady.p99=5", "use '=='"},
      {"<5", "missing metric"},
      {"a.p99<", "missing value"},
      {"a.p99<5<6", "more than one comparison"},
      {"a.p98<5", "unknown metric 'p98'"},
      {"a.p99<5/s", "does not fit latency metric"},
      {"a.committed_rate>5ms", "does not fit rate metric"},
      {"a.committed>5ms", "takes no unit"},
      {"a.hint_accuracy>5/s", "does not fit ratio metric"},
      {"a.held>5%", "takes no unit"},
      {"a.hint_accuracy>a.held", "different units"},
      {"a.p99<1.2*a.committed", "different units"},
      {"a.p99@10s<5", "must be @FROM-TO"},
      {"a.p99@10s-5s<5", "end must be after"},
      {"a.p99@x-5s<5", "not a duration"},
      {".p99<5", "empty partition name"},
      {"a.p99<1.2.3", "not a number"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Expectation> e = ParseExpectation(c.text);
    ASSERT_FALSE(e.ok()) << c.text;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(e.status().message()), HasSubstr(c.error)) << c.text;
    EXPECT_THAT(std::string(e.status().message()), StartsWith("--expect '")) << c.text;
  }
}

TEST(LoadgenExpectTest, EvaluatesAgainstMeasurements) {
  std::map<std::string, double> values = {{"hot.p99", 250},        {"steady.p99", 80},
                                          {"hot.committed", 900},  {"hot.accepted", 1000},
                                          {"steady.p99@0-10", 70}, {"steady.p99@20-30", 82}};
  MetricFn fn = [&](const MetricRef& r) -> absl::StatusOr<double> {
    std::string key = absl::StrCat(r.partition, ".", r.metric);
    if (r.has_window) absl::StrAppend(&key, "@", r.from_s, "-", r.to_s);
    auto it = values.find(key);
    if (it == values.end()) return absl::NotFoundError(absl::StrCat("no ", key));
    return it->second;
  };
  std::vector<ExpectResult> r = Evaluate(P("steady.p99<200ms"), {"hot", "steady"}, fn);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].pass);
  EXPECT_EQ(r[0].line, "PASS steady.p99<200ms (measured 80.0ms)");

  r = Evaluate(P("p99<200ms"), {"hot", "steady"}, fn);  // every partition
  ASSERT_EQ(r.size(), 2u);
  EXPECT_FALSE(r[0].pass);
  EXPECT_EQ(r[0].line, "FAIL p99<200ms [hot] (measured 250.0ms)");
  EXPECT_TRUE(r[1].pass);

  r = Evaluate(P("hot.committed>=0.95*accepted"), {"hot"}, fn);
  EXPECT_FALSE(r[0].pass);
  EXPECT_THAT(r[0].line, HasSubstr("measured 900, limit 950"));

  r = Evaluate(P("steady.p99@20-30<=1.2*steady.p99@0-10"), {"steady"}, fn);
  EXPECT_TRUE(r[0].pass) << r[0].line;
  r = Evaluate(P("steady.p99@20-30<=1.1*steady.p99@0-10"), {"steady"}, fn);
  EXPECT_FALSE(r[0].pass) << r[0].line;

  r = Evaluate(P("hot.committed==900"), {"hot"}, fn);
  EXPECT_TRUE(r[0].pass);
  r = Evaluate(P("hot.committed>900"), {"hot"}, fn);
  EXPECT_FALSE(r[0].pass);

  values["hot.hint_accuracy"] = 0.832;
  r = Evaluate(P("hot.hint_accuracy>=80%"), {"hot"}, fn);
  EXPECT_TRUE(r[0].pass);
  EXPECT_EQ(r[0].line, "PASS hot.hint_accuracy>=80% (measured 83.2%)");
  r = Evaluate(P("hot.hint_accuracy>0.9"), {"hot"}, fn);
  EXPECT_FALSE(r[0].pass);

  r = Evaluate(P("hot.view_changes==0"), {"hot"}, fn);  // measurement error -> FAIL with why
  EXPECT_FALSE(r[0].pass);
  EXPECT_EQ(r[0].line, "FAIL hot.view_changes==0 (no hot.view_changes)");
}

}  // namespace
}  // namespace loadgen
