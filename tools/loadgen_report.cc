#include "tools/loadgen_report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace loadgen {
namespace {

struct SecondView {
  uint64_t rejected = 0;
  double p50 = 0;
  double p99 = 0;
};

SecondView View(const SecondStats& s) {
  SecondView v;
  v.rejected = s.rejected_total();
  std::vector<double> lat = s.latencies_ms;
  v.p50 = Percentile(lat, 0.50);
  v.p99 = Percentile(lat, 0.99);
  return v;
}

// "83.2%", or "-" when there is nothing to divide.
std::string Percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return "-";
  return absl::StrFormat("%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += "\"";
  return out;
}

std::string XmlEscape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// The smallest 1/2/5 x 10^k >= v (axis maximum).
double NiceCeil(double v) {
  if (v <= 0) return 1;
  double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= v) return m * p;
  }
  return 10 * p;
}

std::string Num(double v) { return absl::StrFormat("%.1f", v); }

// One panel: axes, grid, and a polyline per series (values per second).
struct Line {
  std::string label;
  std::string color;
  std::vector<double> values;
};
void DrawPanel(std::string* svg, double x0, double y0, double w, double h, int seconds,
               const std::string& title, const std::string& unit, const std::vector<Line>& lines) {
  double max_v = 0;
  for (const Line& l : lines) {
    for (double v : l.values) {
      if (!std::isnan(v)) max_v = std::max(max_v, v);
    }
  }
  const double top = NiceCeil(max_v);
  const int n = std::max(1, seconds);
  absl::StrAppend(svg, "<g class=\"panel\">\n");
  absl::StrAppend(svg, "<rect x=\"", Num(x0), "\" y=\"", Num(y0), "\" width=\"", Num(w),
                  "\" height=\"", Num(h), "\" fill=\"#fafafa\" stroke=\"#888\"/>\n");
  absl::StrAppend(svg, "<text x=\"", Num(x0), "\" y=\"", Num(y0 - 6), "\" font-size=\"12\">",
                  XmlEscape(title), " (", XmlEscape(unit), ")</text>\n");
  for (int i = 0; i <= 4; ++i) {
    const double y = y0 + h - h * i / 4.0;
    absl::StrAppend(svg, "<line x1=\"", Num(x0), "\" y1=\"", Num(y), "\" x2=\"", Num(x0 + w),
                    "\" y2=\"", Num(y), "\" stroke=\"#ddd\"/>\n");
    absl::StrAppend(svg, "<text x=\"", Num(x0 - 4), "\" y=\"", Num(y + 4),
                    "\" font-size=\"10\" text-anchor=\"end\">", absl::StrFormat("%g", top * i / 4),
                    "</text>\n");
  }
  const int xticks = std::min(n, 10);
  for (int i = 0; i <= xticks; ++i) {
    const double sec = static_cast<double>(n) * i / xticks;
    const double x = x0 + w * sec / n;
    absl::StrAppend(svg, "<text x=\"", Num(x), "\" y=\"", Num(y0 + h + 12),
                    "\" font-size=\"10\" text-anchor=\"middle\">", absl::StrFormat("%.0fs", sec),
                    "</text>\n");
  }
  double legend_x = x0 + w - 10;
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    absl::StrAppend(svg, "<text x=\"", Num(legend_x), "\" y=\"", Num(y0 - 6),
                    "\" font-size=\"11\" text-anchor=\"end\" fill=\"", it->color, "\">",
                    XmlEscape(it->label), "</text>\n");
    legend_x -= 9.0 * static_cast<double>(it->label.size()) + 14;
  }
  // NaN values (a second without commits has no latency) leave a gap in the line.
  for (const Line& l : lines) {
    std::vector<std::pair<double, double>> segment;
    auto flush = [&] {
      if (segment.size() == 1) {
        absl::StrAppend(svg, "<circle class=\"series\" data-series=\"", XmlEscape(l.label),
                        "\" cx=\"", Num(segment[0].first), "\" cy=\"", Num(segment[0].second),
                        "\" r=\"2\" fill=\"", l.color, "\"/>\n");
      } else if (segment.size() > 1) {
        std::string points;
        for (const auto& [x, y] : segment) {
          absl::StrAppend(&points, points.empty() ? "" : " ", Num(x), ",", Num(y));
        }
        absl::StrAppend(svg, "<polyline class=\"series\" data-series=\"", XmlEscape(l.label),
                        "\" fill=\"none\" stroke=\"", l.color, "\" stroke-width=\"1.5\" points=\"",
                        points, "\"/>\n");
      }
      segment.clear();
    };
    for (size_t s = 0; s < l.values.size(); ++s) {
      if (std::isnan(l.values[s])) {
        flush();
        continue;
      }
      // A second's value is drawn at its middle.
      segment.emplace_back(x0 + w * (static_cast<double>(s) + 0.5) / n,
                           y0 + h - h * std::min(l.values[s], top) / top);
    }
    flush();
  }
  absl::StrAppend(svg, "</g>\n");
}

}  // namespace

std::string FormatSecondLine(int second, const std::string& name, const SecondStats& s) {
  SecondView v = View(s);
  std::string rejected;
  for (int r = 0; r < kNumReasons; ++r) {
    absl::StrAppend(&rejected, r == 0 ? "" : ",", ReasonName(r), "=", s.rejected[r]);
  }
  const std::string held = s.held > 0 ? absl::StrCat(" held=", s.held) : "";
  return absl::StrFormat(
      "t=%ds %s offered=%d accepted=%d rejected{%s} dropped=%d%s committed=%d p50=%.1fms "
      "p99=%.1fms",
      second, name, s.offered, s.accepted, rejected, s.client_dropped, held, s.committed, v.p50,
      v.p99);
}

std::string FormatProgress(double now_s, double duration_s, uint64_t offered, uint64_t committed) {
  constexpr int kWidth = 30;
  const double f = duration_s > 0 ? std::clamp(now_s / duration_s, 0.0, 1.0) : 1.0;
  const int done = static_cast<int>(kWidth * f);
  return absl::StrFormat("[%s%s] %ds/%.0fs offered=%d committed=%d", std::string(done, '#'),
                         std::string(kWidth - done, '.'), static_cast<int>(now_s), duration_s,
                         offered, committed);
}

std::string FormatSummary(const std::vector<PartitionReport>& reports) {
  std::string out =
      absl::StrFormat("%-12s %10s %10s %10s %-44s %9s %10s %12s %9s %9s %9s %8s\n", "partition",
                      "offered", "accepted", "rejected", "rejected by reason", "dropped",
                      "committed", "committed/s", "p50_ms", "p99_ms", "max_ms", "viewchg");
  for (const PartitionReport& p : reports) {
    const Totals& t = p.totals;
    const Totals& a = p.active_totals;
    std::string reasons;
    for (int r = 0; r < kNumReasons; ++r) {
      if (t.rejected[r] == 0) continue;
      absl::StrAppend(&reasons, reasons.empty() ? "" : ",", ReasonName(r), "=", t.rejected[r]);
    }
    if (reasons.empty()) reasons.push_back('-');
    absl::StrAppendFormat(
        &out, "%-12s %10d %10d %10d %-44s %9d %10d %12.1f %9.1f %9.1f %9.1f %8s\n", p.name,
        t.offered, t.accepted, t.rejected_total, reasons, t.client_dropped, t.committed,
        a.committed_rate(), t.p50_ms, t.p99_ms, t.max_ms,
        p.view_changes.has_value() ? absl::StrCat(*p.view_changes) : "-");
  }
  for (const PartitionReport& p : reports) {
    for (int r = 0; r < kNumReasons; ++r) {
      if (p.totals.rejected[r] == 0 || p.examples[r].empty()) continue;
      absl::StrAppend(&out, "  ", p.name, " rejected ", ReasonName(r), ", e.g. \"", p.examples[r],
                      "\"\n");
    }
  }
  for (const PartitionReport& p : reports) {
    const HintCounts& h = p.totals.hints;
    if (h.hinted_rejections == 0) continue;
    absl::StrAppendFormat(
        &out,
        "  %s retry-after: %d hinted (mean %.0f ms); re-offered after the hint %d, accepted %s; "
        "before the hint %d, accepted %s; held %d offers\n",
        p.name, h.hinted_rejections, h.mean_hint_ms(), h.reoffers_after_hint,
        Percent(h.accepted_after_hint, h.reoffers_after_hint), h.reoffers_before_hint,
        Percent(h.accepted_before_hint, h.reoffers_before_hint), p.totals.held);
  }
  for (const PartitionReport& p : reports) {
    const Totals& t = p.totals;
    if (t.reads_offered == 0) continue;
    absl::StrAppendFormat(&out,
                          "  %s reads: offered %d, ok %d (p50 %.1f ms, p99 %.1f ms), refused %d, "
                          "failed %d, not sent %d\n",
                          p.name, t.reads_offered, t.reads_ok, t.read_p50_ms, t.read_p99_ms,
                          t.reads_rejected, t.reads_failed, t.reads_client_dropped);
  }
  return out;
}

std::string SeriesCsv(const std::vector<PartitionReport>& reports) {
  std::string out = "second,partition,offered,accepted,rejected";
  for (int r = 0; r < kNumReasons; ++r) absl::StrAppend(&out, ",rejected_", ReasonName(r));
  absl::StrAppend(&out, ",client_dropped,held,committed,p50_ms,p99_ms\n");
  for (const PartitionReport& p : reports) {
    for (size_t s = 0; s < p.series.size(); ++s) {
      const SecondStats& x = p.series[s];
      SecondView v = View(x);
      absl::StrAppend(&out, s, ",", p.name, ",", x.offered, ",", x.accepted, ",", v.rejected);
      for (int r = 0; r < kNumReasons; ++r) absl::StrAppend(&out, ",", x.rejected[r]);
      absl::StrAppendFormat(&out, ",%d,%d,%d,%.3f,%.3f\n", x.client_dropped, x.held, x.committed,
                            v.p50, v.p99);
    }
  }
  return out;
}

std::string SummaryJson(const std::vector<PartitionReport>& reports, const RunInfo& info,
                        const std::vector<std::string>& expectation_lines) {
  std::vector<std::string> targets;
  for (const std::string& t : info.targets) targets.push_back(JsonString(t));
  std::string out =
      absl::StrCat("{\n  \"duration_s\": ", info.duration_s, ",\n  \"drain_s\": ", info.drain_s,
                   ",\n  \"seed\": ", info.seed, ",\n  \"scenario\": ", JsonString(info.scenario),
                   ",\n  \"targets\": [", absl::StrJoin(targets, ", "), "],\n");
  absl::StrAppend(&out, "  \"partitions\": [\n");
  for (size_t i = 0; i < reports.size(); ++i) {
    const PartitionReport& p = reports[i];
    const Totals& t = p.totals;
    const Totals& a = p.active_totals;
    absl::StrAppend(&out, "    {\"name\": ", JsonString(p.name), ", \"id\": ", p.id,
                    ", \"pattern\": ", JsonString(p.pattern),
                    ", \"active_from_s\": ", p.active.from_s, ", \"active_to_s\": ", p.active.to_s,
                    ",\n");
    absl::StrAppendFormat(&out,
                          "     \"offered\": %d, \"accepted\": %d, \"rejected\": %d, "
                          "\"client_dropped\": %d, \"committed\": %d,\n",
                          t.offered, t.accepted, t.rejected_total, t.client_dropped, t.committed);
    absl::StrAppend(&out, "     \"rejected_by_reason\": {");
    for (int r = 0; r < kNumReasons; ++r) {
      absl::StrAppend(&out, r == 0 ? "" : ", ", "\"", ReasonName(r), "\": ", t.rejected[r]);
    }
    absl::StrAppend(&out, "},\n     \"rejection_examples\": {");
    for (int r = 0; r < kNumReasons; ++r) {
      absl::StrAppend(&out, r == 0 ? "" : ", ", "\"", ReasonName(r),
                      "\": ", JsonString(p.examples[r]));
    }
    absl::StrAppendFormat(&out,
                          "},\n     \"offered_rate\": %.3f, \"accepted_rate\": %.3f, "
                          "\"committed_rate\": %.3f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
                          "\"max_ms\": %.3f,\n",
                          a.offered_rate(), a.accepted_rate(), a.committed_rate(), t.p50_ms,
                          t.p99_ms, t.max_ms);
    absl::StrAppend(&out, "     \"view_changes\": ",
                    p.view_changes.has_value() ? absl::StrCat(*p.view_changes) : "null",
                    ", \"signed_during_run\": ", p.signed_during_run,
                    ", \"uncommitted\": ", p.uncommitted,
                    ", \"pending_reoffers\": ", p.pending_reoffers, ",\n");
    const HintCounts& h = t.hints;
    absl::StrAppendFormat(&out,
                          "     \"hinted_rejections\": %d, \"mean_hint_ms\": %.3f, "
                          "\"reoffers_after_hint\": %d, \"accepted_after_hint\": %d, "
                          "\"reoffers_before_hint\": %d, \"accepted_before_hint\": %d, "
                          "\"held\": %d,\n",
                          h.hinted_rejections, h.mean_hint_ms(), h.reoffers_after_hint,
                          h.accepted_after_hint, h.reoffers_before_hint, h.accepted_before_hint,
                          t.held);
    absl::StrAppendFormat(&out,
                          "     \"reads_offered\": %d, \"reads_ok\": %d, \"reads_rejected\": %d, "
                          "\"reads_failed\": %d, \"reads_client_dropped\": %d, "
                          "\"read_p50_ms\": %.3f, \"read_p99_ms\": %.3f,\n     \"series\": [",
                          t.reads_offered, t.reads_ok, t.reads_rejected, t.reads_failed,
                          t.reads_client_dropped, t.read_p50_ms, t.read_p99_ms);
    for (size_t s = 0; s < p.series.size(); ++s) {
      const SecondStats& x = p.series[s];
      SecondView v = View(x);
      absl::StrAppendFormat(&out,
                            "%s\n       {\"t\": %d, \"offered\": %d, \"accepted\": %d, "
                            "\"rejected\": %d, \"client_dropped\": %d, \"held\": %d, "
                            "\"committed\": %d, \"p50_ms\": %.3f, \"p99_ms\": %.3f}",
                            s == 0 ? "" : ",", s, x.offered, x.accepted, v.rejected,
                            x.client_dropped, x.held, x.committed, v.p50, v.p99);
    }
    absl::StrAppend(&out, "]}", i + 1 < reports.size() ? "," : "", "\n");
  }
  std::vector<std::string> exps;
  for (const std::string& e : expectation_lines) exps.push_back(JsonString(e));
  absl::StrAppend(&out, "  ],\n  \"expectations\": [", absl::StrJoin(exps, ", "), "]\n}\n");
  return out;
}

std::string RenderSvg(const std::vector<PartitionReport>& reports, const RunInfo& info) {
  constexpr double kWidth = 960, kLeft = 70, kPlotW = 860, kRateH = 200, kLatH = 140;
  constexpr double kBlockH = 40 + kRateH + 40 + kLatH + 40;
  const double height = 40 + kBlockH * static_cast<double>(std::max<size_t>(1, reports.size()));
  std::string svg = absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
      "width=\"",
      Num(kWidth), "\" height=\"", Num(height), "\" font-family=\"sans-serif\">\n",
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      "<text x=\"10\" y=\"22\" font-size=\"15\">loadgen: ", XmlEscape(info.scenario), " (",
      absl::StrFormat("%.0f", info.duration_s), "s)</text>\n");
  size_t seconds = 1;
  for (const PartitionReport& p : reports) seconds = std::max(seconds, p.series.size());
  for (size_t i = 0; i < reports.size(); ++i) {
    const PartitionReport& p = reports[i];
    std::vector<double> offered, accepted, committed, rejected, p50, p99;
    for (const SecondStats& x : p.series) {
      SecondView v = View(x);
      offered.push_back(x.offered);
      accepted.push_back(x.accepted);
      committed.push_back(x.committed);
      rejected.push_back(v.rejected);
      p50.push_back(x.committed > 0 ? v.p50 : std::nan(""));
      p99.push_back(x.committed > 0 ? v.p99 : std::nan(""));
    }
    const double y = 40 + kBlockH * static_cast<double>(i);
    absl::StrAppend(&svg, "<text x=\"10\" y=\"", Num(y + 14),
                    "\" font-size=\"14\" font-weight=\"bold\">partition ", XmlEscape(p.name),
                    "</text>\n");
    DrawPanel(&svg, kLeft, y + 40, kPlotW, kRateH, static_cast<int>(seconds),
              absl::StrCat(p.name, " rates"), "tx/s",
              {{"offered", "#888888", offered},
               {"accepted", "#1f77b4", accepted},
               {"committed", "#2ca02c", committed},
               {"rejected", "#d62728", rejected}});
    DrawPanel(&svg, kLeft, y + 40 + kRateH + 40, kPlotW, kLatH, static_cast<int>(seconds),
              absl::StrCat(p.name, " commit latency"), "ms",
              {{"p50", "#1f77b4", p50}, {"p99", "#ff7f0e", p99}});
  }
  absl::StrAppend(&svg, "</svg>\n");
  return svg;
}

absl::StatusOr<double> Measure(const std::vector<PartitionReport>& reports, const MetricRef& ref) {
  const PartitionReport* p = nullptr;
  for (const PartitionReport& r : reports) {
    if (r.name == ref.partition) p = &r;
  }
  if (p == nullptr) return absl::NotFoundError(absl::StrCat("no partition '", ref.partition, "'"));
  if (ref.metric == "view_changes") {
    if (!p->view_changes.has_value()) return absl::UnavailableError("no view-change reading");
    return static_cast<double>(*p->view_changes);
  }
  Totals t = p->totals;
  Totals rates = p->active_totals;
  if (ref.has_window) {
    t = Summarize(p->series, {static_cast<int>(std::floor(ref.from_s)),
                              static_cast<int>(std::ceil(ref.to_s))});
    rates = t;
  }
  const std::string& m = ref.metric;
  if (m == "p50") return t.p50_ms;
  if (m == "p99") return t.p99_ms;
  if (m == "max_latency") return t.max_ms;
  if (m == "committed") return static_cast<double>(t.committed);
  if (m == "accepted") return static_cast<double>(t.accepted);
  if (m == "offered") return static_cast<double>(t.offered);
  if (m == "rejected") return static_cast<double>(t.rejected_total);
  if (m == "client_dropped") return static_cast<double>(t.client_dropped);
  if (m == "held") return static_cast<double>(t.held);
  if (m == "hint_accuracy") {
    std::optional<double> accuracy = t.hints.accuracy();
    if (!accuracy.has_value())
      return absl::UnavailableError("no re-offer after a retry-after hint");
    return *accuracy;
  }
  if (m == "committed_rate") return rates.committed_rate();
  if (m == "accepted_rate") return rates.accepted_rate();
  if (m == "offered_rate") return rates.offered_rate();
  if (m == "rejected_rate") {
    return rates.seconds > 0 ? static_cast<double>(rates.rejected_total) / rates.seconds : 0;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown metric '", m, "'"));
}

absl::Status WriteReportFiles(const std::string& dir, const std::vector<PartitionReport>& reports,
                              const RunInfo& info,
                              const std::vector<std::string>& expectation_lines) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrCat("--out ", dir, ": cannot create directory: ", std::strerror(errno)));
  }
  const std::pair<std::string, std::string> files[] = {
      {"series.csv", SeriesCsv(reports)},
      {"summary.json", SummaryJson(reports, info, expectation_lines)},
      {"report.svg", RenderSvg(reports, info)}};
  for (const auto& [name, content] : files) {
    const std::string path = absl::StrCat(dir, "/", name);
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << content;
    f.close();
    if (!f) return absl::UnavailableError(absl::StrCat("--out: cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace loadgen
