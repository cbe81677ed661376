// --expect assertions: parse `[partition.]metric[@from-to] op value[unit]` and evaluate them.
//
// Grammar (no spaces needed; spaces are ignored):
//   expectation := [partition "."] metric [window] op rhs
//   window      := "@" time "-" time            run seconds, e.g. @10s-30s (default: the
//                                              partition's active window start..stop)
//   op          := "<" | "<=" | ">" | ">=" | "=="
//   rhs         := number [unit] | [number "*"] [partition "."] metric [window]
//   unit        := "ms" | "s" | "us" (latency metrics) | "/s" (rate metrics) | "%" (ratios)
// Metrics: latency p50, p99, max_latency (milliseconds); counts committed, accepted, offered,
// rejected, client_dropped, held, view_changes; rates committed_rate, accepted_rate,
// offered_rate, rejected_rate (tx/s); ratio hint_accuracy (accepted_after_hint /
// reoffers_after_hint, 0..1 or a percentage; see loadgen_stats.h). Without a partition the
// expectation is checked for every partition (each must pass). A metric on the right compares two
// measurements of the same run, e.g. `steady.p99@30s-60s<=1.2*steady.p99@5s-25s`; its partition
// defaults to the left one's.
//
// Thread-safety: pure functions.
//
//   ASSIGN_OR_RETURN(Expectation e, ParseExpectation("steady.p99<200ms"));
//   std::vector<ExpectResult> r = Evaluate(e, {"hot", "steady"}, metric_fn);
//   // r[0].line == "PASS steady.p99<200ms (measured 12.3ms)"
#ifndef TOOLS_LOADGEN_EXPECT_H_
#define TOOLS_LOADGEN_EXPECT_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loadgen {

enum class MetricKind { kLatencyMs, kCount, kRate, kRatio };
enum class CompareOp { kLess, kLessEqual, kGreater, kGreaterEqual, kEqual };

struct MetricRef {
  std::string partition;  // "" = every partition (left side) / the left one's (right side)
  std::string metric;
  MetricKind kind = MetricKind::kCount;
  bool has_window = false;
  double from_s = 0;
  double to_s = 0;
};

struct Expectation {
  std::string text;  // as given
  MetricRef lhs;
  CompareOp op = CompareOp::kLess;
  // rhs = value, or factor * measured(rhs_ref) when has_ref.
  double value = 0;  // in the metric's unit (ms, count, tx/s, ratio 0..1)
  bool has_ref = false;
  double factor = 1;
  MetricRef rhs_ref;
};

// The kind of a known metric name, or nullopt.
std::optional<MetricKind> KindOfMetric(absl::string_view metric);

// InvalidArgument "--expect 'x': ..." saying what is wrong and what is allowed.
absl::StatusOr<Expectation> ParseExpectation(absl::string_view text);

// Measures `ref` (partition always set). Errors (unknown partition, view changes without
// --admin) make the expectation fail with that message.
using MetricFn = std::function<absl::StatusOr<double>(const MetricRef& ref)>;

struct ExpectResult {
  bool pass = false;
  std::string line;  // "PASS hot.committed_rate>500/s (measured 812.0/s)"
};
std::vector<ExpectResult> Evaluate(const Expectation& e, const std::vector<std::string>& partitions,
                                   const MetricFn& measure);

// Evaluates every expectation; appends the PASS/FAIL lines to `lines`; true iff all pass.
bool EvaluateAll(const std::vector<Expectation>& expectations,
                 const std::vector<std::string>& partitions, const MetricFn& measure,
                 std::vector<std::string>* lines);

}  // namespace loadgen

#endif  // TOOLS_LOADGEN_EXPECT_H_
