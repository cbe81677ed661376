// loadgen output: the per-second line, the summary table, series.csv, summary.json, report.svg
// (well-formed, holding the series), Measure, the retry-after figures (summary line, JSON keys,
// held column, hint_accuracy), and writing the --out directory.
#include "tools/loadgen_report.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/temp_dirs.h"

namespace loadgen {
namespace {

using ::testing::HasSubstr;

PartitionReport Sample(const std::string& name, uint64_t rate) {
  PartitionStats stats;
  for (int s = 0; s < 5; ++s) {
    stats.AddOffered(s, rate);
    stats.AddAccepted(s, rate - 2);
    stats.AddRejected(s, kPool, 2);
    for (int i = 0; i < 10; ++i) stats.AddCommit(s, 10.0 + s * 10 + i);
  }
  PartitionReport r;
  r.name = name;
  r.id = 1;
  r.pattern = "constant";
  r.active = {0, 4};
  r.series = stats.Snapshot();
  r.totals = Summarize(r.series, {0, 5});
  r.active_totals = Summarize(r.series, r.active);
  r.view_changes = 0;
  return r;
}

// Every element opened is closed, in order; attributes are quoted. Enough to catch broken output.
bool WellFormedXml(const std::string& xml, std::string* why) {
  std::vector<std::string> stack;
  size_t i = 0;
  while ((i = xml.find('<', i)) != std::string::npos) {
    size_t end = xml.find('>', i);
    if (end == std::string::npos) {
      *why = "unterminated tag";
      return false;
    }
    std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty() || tag[0] == '?' || tag[0] == '!') continue;
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) {
      *why = "odd quotes in <" + tag + ">";
      return false;
    }
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1)) {
        *why = "unexpected </" + tag.substr(1) + ">";
        return false;
      }
      stack.pop_back();
      continue;
    }
    if (tag.back() == '/') continue;
    stack.push_back(tag.substr(0, tag.find(' ')));
  }
  if (!stack.empty()) *why = "unclosed <" + stack.back() + ">";
  return stack.empty();
}

TEST(LoadgenReportTest, SecondLineHasEveryField) {
  PartitionReport r = Sample("hot", 100);
  EXPECT_EQ(FormatSecondLine(2, "hot", r.series[2]),
            "t=2s hot offered=100 accepted=98 rejected{rate=0,pool=2,in_flight=0,unavailable=0,"
            "invalid=0,other=0} dropped=0 committed=10 p50=34.0ms p99=39.0ms");
}

// Sample() with retry-after hints: 10 hinted rejections of 87 ms on average (second 1), re-offers
// after the hint 6 (5 accepted) and before it 4 (1 accepted), and 12 held offers (second 2).
PartitionReport WithHints(const std::string& name) {
  PartitionStats stats;
  for (int s = 0; s < 5; ++s) {
    stats.AddOffered(s, 100);
    stats.AddAccepted(s, 98);
    stats.AddRejected(s, kPool, 2);
    for (int i = 0; i < 10; ++i) stats.AddCommit(s, 10.0 + s * 10 + i);
  }
  stats.AddHints(1, {.hinted_rejections = 10, .hint_ms_sum = 870});
  stats.AddHints(2, {.reoffers_after_hint = 6,
                     .accepted_after_hint = 5,
                     .reoffers_before_hint = 4,
                     .accepted_before_hint = 1});
  stats.AddOffered(2, 12);
  stats.AddHeld(2, 12);
  PartitionReport r;
  r.name = name;
  r.id = 1;
  r.pattern = "constant";
  r.active = {0, 4};
  r.series = stats.Snapshot();
  r.totals = Summarize(r.series, {0, 5});
  r.active_totals = Summarize(r.series, r.active);
  return r;
}

TEST(LoadgenReportTest, SecondLineShowsHeldOnlyWhenThereAreAny) {
  PartitionReport r = WithHints("hot");
  EXPECT_THAT(FormatSecondLine(2, "hot", r.series[2]), HasSubstr(" dropped=0 held=12 committed="));
  EXPECT_THAT(FormatSecondLine(1, "hot", r.series[1]), HasSubstr(" dropped=0 committed="));
}

TEST(LoadgenReportTest, SummaryHasARetryAfterLineForHintedPartitionsOnly) {
  std::string table = FormatSummary({WithHints("hot"), Sample("steady", 10)});
  EXPECT_THAT(table,
              HasSubstr("  hot retry-after: 10 hinted (mean 87 ms); re-offered after the hint 6, "
                        "accepted 83.3%; before the hint 4, accepted 25.0%; held 12 offers\n"));
  EXPECT_THAT(table, ::testing::Not(HasSubstr("steady retry-after")));
  // Hints but no re-offers yet: no percentage to give.
  PartitionReport fresh = Sample("cold", 10);
  fresh.totals.hints.hinted_rejections = 3;
  fresh.totals.hints.hint_ms_sum = 300;
  EXPECT_THAT(FormatSummary({fresh}),
              HasSubstr("  cold retry-after: 3 hinted (mean 100 ms); re-offered after the hint 0, "
                        "accepted -; before the hint 0, accepted -; held 0 offers\n"));
  // Without hints the summary is as before.
  EXPECT_THAT(FormatSummary({Sample("hot", 100)}), ::testing::Not(HasSubstr("retry-after")));
}

TEST(LoadgenReportTest, JsonAndCsvHoldTheRetryAfterFigures) {
  std::vector<PartitionReport> reports = {WithHints("hot"), Sample("steady", 10)};
  std::string json = SummaryJson(reports, RunInfo{}, {});
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok()) << json;
  const auto& parts = parsed.fields().at("partitions").list_value();
  const auto& hot = parts.values(0).struct_value().fields();
  EXPECT_EQ(hot.at("hinted_rejections").number_value(), 10);
  EXPECT_EQ(hot.at("mean_hint_ms").number_value(), 87);
  EXPECT_EQ(hot.at("reoffers_after_hint").number_value(), 6);
  EXPECT_EQ(hot.at("accepted_after_hint").number_value(), 5);
  EXPECT_EQ(hot.at("reoffers_before_hint").number_value(), 4);
  EXPECT_EQ(hot.at("accepted_before_hint").number_value(), 1);
  EXPECT_EQ(hot.at("held").number_value(), 12);
  // The row adds up with held.
  EXPECT_EQ(hot.at("offered").number_value(),
            hot.at("accepted").number_value() + hot.at("rejected").number_value() +
                hot.at("client_dropped").number_value() + hot.at("held").number_value());
  const auto& second2 = hot.at("series").list_value().values(2).struct_value().fields();
  EXPECT_EQ(second2.at("held").number_value(), 12);
  // Every partition has the keys (0 without hints), so runs compare field by field.
  const auto& steady = parts.values(1).struct_value().fields();
  for (const char* key :
       {"hinted_rejections", "mean_hint_ms", "reoffers_after_hint", "accepted_after_hint",
        "reoffers_before_hint", "accepted_before_hint", "held"}) {
    ASSERT_EQ(steady.count(key), 1u) << key;
    EXPECT_EQ(steady.at(key).number_value(), 0) << key;
  }

  std::string csv = SeriesCsv(reports);
  std::vector<std::string> lines = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  EXPECT_THAT(lines[0], HasSubstr(",client_dropped,held,committed,"));
  EXPECT_EQ(lines[3], "2,hot,112,98,2,0,2,0,0,0,0,0,12,10,34.000,39.000");
}

TEST(LoadgenReportTest, ReadsHaveASummaryLineAndJsonKeys) {
  PartitionStats stats;
  stats.AddReadsOffered(0, 5);
  stats.AddReadsDropped(0, 1);
  stats.AddRead(0, PartitionStats::ReadOutcome::kOk, 2.0);
  stats.AddRead(0, PartitionStats::ReadOutcome::kOk, 4.0);
  stats.AddRead(0, PartitionStats::ReadOutcome::kRejected, 0.5);
  stats.AddRead(0, PartitionStats::ReadOutcome::kFailed, 9.0);
  PartitionReport r = Sample("hot", 10);
  r.series = stats.Snapshot();
  r.totals = Summarize(r.series, {0, 1});
  EXPECT_EQ(r.totals.reads_ok, 2u);
  EXPECT_EQ(r.totals.read_p99_ms, 4.0);
  EXPECT_THAT(FormatSummary({r, Sample("steady", 10)}),
              HasSubstr("  hot reads: offered 5, ok 2 (p50 2.0 ms, p99 4.0 ms), refused 1, "
                        "failed 1, not sent 1\n"));
  EXPECT_THAT(FormatSummary({Sample("steady", 10)}), ::testing::Not(HasSubstr("reads:")));
  google::protobuf::Struct parsed;
  const std::string json = SummaryJson({r}, RunInfo{}, {});
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok()) << json;
  const auto& hot = parsed.fields().at("partitions").list_value().values(0).struct_value().fields();
  EXPECT_EQ(hot.at("reads_offered").number_value(), 5);
  EXPECT_EQ(hot.at("reads_rejected").number_value(), 1);
  EXPECT_EQ(hot.at("read_p99_ms").number_value(), 4);
}

TEST(LoadgenReportTest, ProgressBar) {
  EXPECT_EQ(FormatProgress(15, 60, 3000, 2900),
            "[#######.......................] 15s/60s offered=3000 committed=2900");
  EXPECT_EQ(FormatProgress(70, 60, 1, 1),
            "[##############################] 70s/60s offered=1 committed=1");
}

TEST(LoadgenReportTest, SummaryTableRowPerPartition) {
  std::string table = FormatSummary({Sample("hot", 100), Sample("steady", 10)});
  std::vector<std::string> lines = absl::StrSplit(table, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[0], HasSubstr("committed/s"));
  EXPECT_THAT(lines[1], HasSubstr("hot"));
  EXPECT_THAT(lines[1], HasSubstr("pool=10"));
  EXPECT_THAT(lines[1], HasSubstr(" 10.0 "));  // 40 commits in the 4 s active window
  EXPECT_THAT(lines[2], HasSubstr("steady"));
}

TEST(LoadgenReportTest, CsvHasHeaderAndARowPerSecondAndPartition) {
  std::string csv = SeriesCsv({Sample("hot", 100), Sample("steady", 10)});
  std::vector<std::string> lines = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u + 10u);
  const size_t columns = std::count(lines[0].begin(), lines[0].end(), ',');
  for (const std::string& l : lines) EXPECT_EQ(std::count(l.begin(), l.end(), ','), columns) << l;
  EXPECT_THAT(lines[0], HasSubstr("second,partition,offered,accepted,rejected,rejected_rate"));
  EXPECT_EQ(lines[3], "2,hot,100,98,2,0,2,0,0,0,0,0,0,10,34.000,39.000");
  EXPECT_THAT(lines[6], ::testing::StartsWith("0,steady,10,8,2,"));
}

TEST(LoadgenReportTest, JsonParsesAndHoldsTheSeries) {
  RunInfo info;
  info.duration_s = 5;
  info.targets = {"127.0.0.1:1"};
  info.scenario = "hot:rate=100;steady:rate=\"10\"";
  std::string json = SummaryJson({Sample("hot", 100), Sample("steady", 10)}, info,
                                 {"PASS hot.p99<1s (measured 59.0ms)"});
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok()) << json;
  const auto& parts = parsed.fields().at("partitions").list_value();
  ASSERT_EQ(parts.values_size(), 2);
  const auto& hot = parts.values(0).struct_value().fields();
  EXPECT_EQ(hot.at("name").string_value(), "hot");
  EXPECT_EQ(hot.at("offered").number_value(), 500);
  EXPECT_EQ(hot.at("rejected_by_reason").struct_value().fields().at("pool").number_value(), 10);
  EXPECT_EQ(hot.at("series").list_value().values_size(), 5);
  EXPECT_EQ(hot.at("view_changes").number_value(), 0);
  EXPECT_EQ(parsed.fields().at("expectations").list_value().values(0).string_value(),
            "PASS hot.p99<1s (measured 59.0ms)");
  EXPECT_EQ(parsed.fields().at("scenario").string_value(), "hot:rate=100;steady:rate=\"10\"");
}

TEST(LoadgenReportTest, SvgIsWellFormedWithAPanelPairPerPartition) {
  RunInfo info;
  info.duration_s = 5;
  info.scenario = "hot:<rate>&co";
  std::string svg = RenderSvg({Sample("hot", 100), Sample("steady", 10)}, info);
  std::string why;
  EXPECT_TRUE(WellFormedXml(svg, &why)) << why;
  EXPECT_THAT(svg, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_THAT(svg, HasSubstr("hot:&lt;rate&gt;&amp;co"));
  EXPECT_THAT(svg, HasSubstr("partition steady"));
  for (const char* series : {"offered", "accepted", "committed", "rejected", "p50", "p99"}) {
    EXPECT_THAT(svg, HasSubstr(absl::StrCat("data-series=\"", series, "\""))) << series;
  }
  size_t polylines = 0;
  for (size_t i = 0; (i = svg.find("<polyline", i)) != std::string::npos; ++i) ++polylines;
  EXPECT_EQ(polylines, 2u * 6u);
  // Five seconds of data give five points per line.
  size_t at = svg.find("data-series=\"offered\"");
  std::string points = svg.substr(svg.find("points=\"", at) + 8);
  points = points.substr(0, points.find('"'));
  EXPECT_EQ(std::count(points.begin(), points.end(), ','), 5);
}

TEST(LoadgenReportTest, SecondsWithoutCommitsLeaveGapsInTheLatencyLines) {
  PartitionStats stats;
  for (int s = 0; s < 6; ++s) {
    stats.AddOffered(s, 10);
    if (s != 2) stats.AddCommit(s, 5.0 + s);  // no commit in second 2: p50/p99 unknown there
  }
  stats.AddOffered(7, 1);
  stats.AddCommit(8, 1.0);  // an isolated second with commits draws a dot
  PartitionReport r;
  r.name = "p";
  r.series = stats.Snapshot();
  std::string svg = RenderSvg({r}, RunInfo{});
  std::string why;
  EXPECT_TRUE(WellFormedXml(svg, &why)) << why;
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t i = 0; (i = svg.find(needle, i)) != std::string::npos; ++i) ++n;
    return n;
  };
  EXPECT_EQ(count("<polyline class=\"series\" data-series=\"p99\""), 2u);  // 0-1 and 3-5
  EXPECT_EQ(count("<circle class=\"series\" data-series=\"p99\""), 1u);    // 8
  EXPECT_EQ(count("<polyline class=\"series\" data-series=\"offered\""), 1u);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

TEST(LoadgenReportTest, MeasureUsesWindowsAndActiveRates) {
  std::vector<PartitionReport> reports = {Sample("hot", 100)};
  reports[0].view_changes = std::nullopt;
  auto m = [&](const std::string& metric, bool window = false, double from = 0, double to = 0) {
    MetricRef ref;
    ref.partition = "hot";
    ref.metric = metric;
    ref.kind = *KindOfMetric(metric);
    ref.has_window = window;
    ref.from_s = from;
    ref.to_s = to;
    return Measure(reports, ref);
  };
  EXPECT_EQ(*m("offered"), 500);
  EXPECT_EQ(*m("committed"), 50);
  EXPECT_EQ(*m("committed_rate"), 10);  // 40 commits in the 4 s active window
  EXPECT_EQ(*m("offered_rate"), 100);
  EXPECT_EQ(*m("rejected"), 10);
  EXPECT_EQ(*m("max_latency"), 59);
  EXPECT_EQ(*m("p99", true, 0, 1), 19);
  EXPECT_EQ(*m("committed_rate", true, 1, 3), 10);
  EXPECT_EQ(m("view_changes").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(*m("held"), 0);
  EXPECT_EQ(m("hint_accuracy").status().code(), absl::StatusCode::kUnavailable);
  reports = {WithHints("hot")};
  EXPECT_EQ(*m("held"), 12);
  EXPECT_DOUBLE_EQ(*m("hint_accuracy"), 5.0 / 6.0);
  EXPECT_EQ(*m("held", true, 0, 2), 0);
  EXPECT_EQ(m("hint_accuracy", true, 0, 2).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_DOUBLE_EQ(*m("hint_accuracy", true, 2, 3), 5.0 / 6.0);
  MetricRef other;
  other.partition = "cold";
  other.metric = "p50";
  EXPECT_EQ(Measure(reports, other).status().code(), absl::StatusCode::kNotFound);
}

TEST(LoadgenReportTest, WritesTheOutDirectory) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/loadgen_report_", getpid());
  tests::RemoveAtExit(dir);
  ASSERT_TRUE(WriteReportFiles(dir, {Sample("hot", 100)}, RunInfo{}, {}).ok());
  for (const char* f : {"series.csv", "summary.json", "report.svg"}) {
    std::ifstream in(absl::StrCat(dir, "/", f));
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_GT(ss.str().size(), 100u) << f;
  }
  EXPECT_FALSE(WriteReportFiles("/proc/no/such/dir", {}, RunInfo{}, {}).ok());
}

}  // namespace
}  // namespace loadgen
