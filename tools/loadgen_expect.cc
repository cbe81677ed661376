#include "tools/loadgen_expect.h"

#include <cmath>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "flowctl/status_macros.h"
#include "tools/loadgen_schedule.h"

namespace loadgen {
namespace {

constexpr absl::string_view kMetricList =
    "p50, p99, max_latency, committed, accepted, offered, rejected, client_dropped, held, "
    "view_changes, committed_rate, accepted_rate, offered_rate, rejected_rate, hint_accuracy";

absl::Status Bad(absl::string_view text, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("--expect '", text, "': ", message));
}

// "[partition.]metric[@from-to]"
absl::StatusOr<MetricRef> ParseRef(absl::string_view all, absl::string_view t) {
  MetricRef ref;
  absl::string_view body = t;
  if (size_t at = t.find('@'); at != absl::string_view::npos) {
    body = t.substr(0, at);
    absl::string_view w = t.substr(at + 1);
    size_t dash = w.find('-');
    if (dash == absl::string_view::npos) {
      return Bad(all, absl::StrCat("window '@", w, "' must be @FROM-TO, e.g. @10s-30s"));
    }
    ASSIGN_OR_RETURN(ref.from_s, ParseSeconds(absl::StrCat("--expect '", all, "': window start"),
                                              w.substr(0, dash)));
    ASSIGN_OR_RETURN(ref.to_s, ParseSeconds(absl::StrCat("--expect '", all, "': window end"),
                                            w.substr(dash + 1)));
    if (ref.to_s <= ref.from_s) return Bad(all, "window end must be after its start");
    ref.has_window = true;
  }
  if (size_t dot = body.rfind('.'); dot != absl::string_view::npos) {
    ref.partition = std::string(body.substr(0, dot));
    ref.metric = std::string(body.substr(dot + 1));
    if (ref.partition.empty()) return Bad(all, "empty partition name before '.'");
  } else {
    ref.metric = std::string(body);
  }
  std::optional<MetricKind> kind = KindOfMetric(ref.metric);
  if (!kind.has_value()) {
    return Bad(all, absl::StrCat("unknown metric '", ref.metric, "' (", kMetricList, ")"));
  }
  ref.kind = *kind;
  return ref;
}

bool Compare(double a, CompareOp op, double b) {
  switch (op) {
    case CompareOp::kLess:
      return a < b;
    case CompareOp::kLessEqual:
      return a <= b;
    case CompareOp::kGreater:
      return a > b;
    case CompareOp::kGreaterEqual:
      return a >= b;
    case CompareOp::kEqual:
      return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b));
  }
  return false;
}

std::string FormatValue(double v, MetricKind kind) {
  switch (kind) {
    case MetricKind::kLatencyMs:
      return absl::StrFormat("%.1fms", v);
    case MetricKind::kRate:
      return absl::StrFormat("%.1f/s", v);
    case MetricKind::kCount:
      return absl::StrFormat("%.0f", v);
    case MetricKind::kRatio:
      return absl::StrFormat("%.1f%%", v * 100);
  }
  return "";
}

}  // namespace

std::optional<MetricKind> KindOfMetric(absl::string_view metric) {
  static const std::map<std::string, MetricKind, std::less<>> kMetrics = {
      {"p50", MetricKind::kLatencyMs},         {"p99", MetricKind::kLatencyMs},
      {"max_latency", MetricKind::kLatencyMs}, {"committed", MetricKind::kCount},
      {"accepted", MetricKind::kCount},        {"offered", MetricKind::kCount},
      {"rejected", MetricKind::kCount},        {"client_dropped", MetricKind::kCount},
      {"view_changes", MetricKind::kCount},    {"committed_rate", MetricKind::kRate},
      {"accepted_rate", MetricKind::kRate},    {"offered_rate", MetricKind::kRate},
      {"rejected_rate", MetricKind::kRate},    {"held", MetricKind::kCount},
      {"hint_accuracy", MetricKind::kRatio}};
  auto it = kMetrics.find(metric);
  if (it == kMetrics.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<Expectation> ParseExpectation(absl::string_view text) {
  Expectation e;
  e.text = std::string(text);
  const std::string t = absl::StrReplaceAll(text, {{" ", ""}, {"\t", ""}});
  size_t pos = t.find_first_of("<>=");
  if (pos == std::string::npos) {
    return Bad(text, "no comparison (use <, <=, >, >=, ==), e.g. steady.p99<200ms");
  }
  size_t op_len = 1;
  const bool eq_next = pos + 1 < t.size() && t[pos + 1] == '=';
  switch (t[pos]) {
    case '<':
      e.op = eq_next ? CompareOp::kLessEqual : CompareOp::kLess;
      op_len = eq_next ? 2 : 1;
      break;
    case '>':
      e.op = eq_next ? CompareOp::kGreaterEqual : CompareOp::kGreater;
      op_len = eq_next ? 2 : 1;
      break;
    default:
      if (!eq_next) return Bad(text, "'=' is not a comparison; use '=='");
      e.op = CompareOp::kEqual;
      op_len = 2;
  }
  absl::string_view lhs = absl::string_view(t).substr(0, pos);
  absl::string_view rhs = absl::string_view(t).substr(pos + op_len);
  if (lhs.empty()) return Bad(text, "missing metric before the comparison");
  if (rhs.empty()) return Bad(text, "missing value after the comparison");
  if (rhs.find_first_of("<>=") != absl::string_view::npos)
    return Bad(text, "more than one comparison");
  ASSIGN_OR_RETURN(e.lhs, ParseRef(text, lhs));

  // A number, optionally followed by a unit or by "*metric".
  size_t n = 0;
  while (n < rhs.size() && (absl::ascii_isdigit(static_cast<unsigned char>(rhs[n])) ||
                            rhs[n] == '.' || (n == 0 && (rhs[n] == '-' || rhs[n] == '+')))) {
    ++n;
  }
  double number = 1;
  if (n > 0 && !absl::SimpleAtod(rhs.substr(0, n), &number)) {
    return Bad(text, absl::StrCat("not a number: '", rhs.substr(0, n), "'"));
  }
  absl::string_view rest = rhs.substr(n);
  if (n == 0 || (!rest.empty() && rest[0] == '*')) {
    if (!rest.empty() && rest[0] == '*') rest.remove_prefix(1);
    e.has_ref = true;
    e.factor = number;
    ASSIGN_OR_RETURN(e.rhs_ref, ParseRef(text, rest));
    if (e.rhs_ref.kind != e.lhs.kind) {
      return Bad(text, "the two metrics have different units (latency, count, rate or ratio)");
    }
    if (e.rhs_ref.partition.empty()) e.rhs_ref.partition = e.lhs.partition;
    return e;
  }
  e.value = number;
  switch (e.lhs.kind) {
    case MetricKind::kLatencyMs:
      if (rest == "s") {
        e.value *= 1000;
      } else if (rest == "us") {
        e.value /= 1000;
      } else if (!rest.empty() && rest != "ms") {
        return Bad(text, absl::StrCat("unit '", rest, "' does not fit latency metric '",
                                      e.lhs.metric, "' (use ms, s or us)"));
      }
      break;
    case MetricKind::kRate:
      if (!rest.empty() && rest != "/s" && rest != "tx/s") {
        return Bad(text, absl::StrCat("unit '", rest, "' does not fit rate metric '", e.lhs.metric,
                                      "' (use /s or none)"));
      }
      break;
    case MetricKind::kCount:
      if (!rest.empty()) {
        return Bad(text, absl::StrCat("count metric '", e.lhs.metric, "' takes no unit, got '",
                                      rest, "'"));
      }
      break;
    case MetricKind::kRatio:
      if (rest == "%") {
        e.value /= 100;
      } else if (!rest.empty()) {
        return Bad(text, absl::StrCat("unit '", rest, "' does not fit ratio metric '", e.lhs.metric,
                                      "' (use % or none for 0..1)"));
      }
      break;
  }
  return e;
}

std::vector<ExpectResult> Evaluate(const Expectation& e, const std::vector<std::string>& partitions,
                                   const MetricFn& measure) {
  std::vector<ExpectResult> out;
  std::vector<std::string> names;
  if (e.lhs.partition.empty()) {
    names = partitions;
  } else {
    names.push_back(e.lhs.partition);
  }
  for (const std::string& name : names) {
    ExpectResult r;
    MetricRef lhs = e.lhs;
    lhs.partition = name;
    const std::string label =
        e.lhs.partition.empty() ? absl::StrCat(e.text, " [", name, "]") : e.text;
    absl::StatusOr<double> got = measure(lhs);
    double limit = e.value;
    std::string limit_text;
    if (got.ok() && e.has_ref) {
      MetricRef rhs = e.rhs_ref;
      if (rhs.partition.empty()) rhs.partition = name;
      absl::StatusOr<double> ref = measure(rhs);
      if (!ref.ok()) {
        got = ref.status();
      } else {
        limit = e.factor * *ref;
        limit_text = absl::StrCat(", limit ", FormatValue(limit, e.lhs.kind));
      }
    }
    if (!got.ok()) {
      r.pass = false;
      r.line = absl::StrCat("FAIL ", label, " (", got.status().message(), ")");
    } else {
      r.pass = Compare(*got, e.op, limit);
      r.line = absl::StrCat(r.pass ? "PASS " : "FAIL ", label, " (measured ",
                            FormatValue(*got, e.lhs.kind), limit_text, ")");
    }
    out.push_back(std::move(r));
  }
  return out;
}

bool EvaluateAll(const std::vector<Expectation>& expectations,
                 const std::vector<std::string>& partitions, const MetricFn& measure,
                 std::vector<std::string>* lines) {
  bool all_pass = true;
  for (const Expectation& e : expectations) {
    for (const ExpectResult& r : Evaluate(e, partitions, measure)) {
      all_pass = all_pass && r.pass;
      lines->push_back(r.line);
    }
  }
  return all_pass;
}

}  // namespace loadgen
