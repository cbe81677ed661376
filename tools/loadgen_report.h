// loadgen output: the per-second line, the summary table, and the files of --out DIR
// (series.csv, summary.json, report.svg). Pure formatting; no I/O except WriteReportFiles.
//
// report.svg is drawn here (no plotting tools): one block per partition with two panels sharing
// the time axis, tx/s (offered, accepted, committed, rejected) and commit latency (p50, p99, ms).
//
// Retry-after hints (loadgen_stats.h, HintCounts): the summary adds a line per partition that
// had hinted rejections; summary.json has the figures for every partition (hinted_rejections,
// mean_hint_ms, reoffers_after_hint, accepted_after_hint, reoffers_before_hint,
// accepted_before_hint, held); series.csv and the JSON series have a held column.
//
// Thread-safety: pure functions.
//
//   std::cout << FormatSecondLine(12, "hot", stats.Second(12));
//   std::cout << FormatSummary(reports);
//   RETURN_IF_ERROR(WriteReportFiles("/tmp/run1", reports, run_info));
#ifndef TOOLS_LOADGEN_REPORT_H_
#define TOOLS_LOADGEN_REPORT_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/loadgen_expect.h"
#include "tools/loadgen_stats.h"

namespace loadgen {

struct PartitionReport {
  std::string name;
  uint32_t id = 0;
  std::string pattern;                   // e.g. "constant"
  Window active;                         // the partition's offer window (run seconds)
  std::vector<SecondStats> series;       // index = run second (includes the drain)
  Totals totals;                         // the whole run, drain included (counts, latencies)
  Totals active_totals;                  // over `active` only (the rates)
  std::optional<uint64_t> view_changes;  // with --admin
  uint64_t signed_during_run = 0;        // pre-signed buffer ran low: signed on the fly
  uint64_t uncommitted = 0;              // accepted but not seen committed by the end of the drain
  uint64_t pending_reoffers = 0;         // rejected, not re-sent before the end
  std::array<std::string, kNumReasons> examples;  // a rejection message per reason
};

struct RunInfo {
  double duration_s = 0;
  double drain_s = 0;
  std::vector<std::string> targets;
  std::string scenario;
  uint64_t seed = 0;
};

// "t=12s hot offered=200 accepted=150 rejected{rate=50,pool=0,in_flight=0,other=0}
//  dropped=0 committed=148 p50=20.1ms p99=80.3ms" (one line, no newline); " held=N" follows
// dropped when N > 0 (--honour-retry-after).
std::string FormatSecondLine(int second, const std::string& name, const SecondStats& s);

// "[#########.....................] 12s/60s offered=2400 committed=2310"
std::string FormatProgress(double now_s, double duration_s, uint64_t offered, uint64_t committed);

// The end-of-run table, one row per partition, with a header; then an example message of each
// rejection reason seen; then, per partition with hinted rejections,
// "  hot retry-after: 1234 hinted (mean 87 ms); re-offered after the hint 1100, accepted 83.2%;
//  before the hint 20, accepted 10.0%; held 5400 offers" (one line).
std::string FormatSummary(const std::vector<PartitionReport>& reports);

// second,partition,offered,accepted,rejected,rejected_rate,...,client_dropped,held,committed,
// p50_ms,p99_ms
std::string SeriesCsv(const std::vector<PartitionReport>& reports);
std::string SummaryJson(const std::vector<PartitionReport>& reports, const RunInfo& info,
                        const std::vector<std::string>& expectation_lines);
std::string RenderSvg(const std::vector<PartitionReport>& reports, const RunInfo& info);

// The value of `ref` (partition set) in these reports: counts and latencies over the whole run
// (or ref's window), rates over the partition's active window (or ref's window). NotFound for an
// unknown partition, Unavailable for view_changes without a reading and for hint_accuracy
// without re-offers after a hint.
absl::StatusOr<double> Measure(const std::vector<PartitionReport>& reports, const MetricRef& ref);

// Creates `dir` if needed and writes series.csv, summary.json and report.svg.
absl::Status WriteReportFiles(const std::string& dir, const std::vector<PartitionReport>& reports,
                              const RunInfo& info,
                              const std::vector<std::string>& expectation_lines);

}  // namespace loadgen

#endif  // TOOLS_LOADGEN_REPORT_H_
