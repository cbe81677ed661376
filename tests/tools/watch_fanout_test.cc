// watch_fanout's flags, delay histogram and run (tools/watch_fanout_lib.h), the run against an
// in-process fake ClientService (tests/tools/fake_client_service.h).
#include "tools/watch_fanout_lib.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tools/fake_client_service.h"

namespace watch_fanout {
namespace {

using ::loadgen_test::FakeClientService;
using ::testing::HasSubstr;

absl::StatusOr<Options> Parse(std::vector<std::string> args) { return ParseFlags(args); }

TEST(WatchFanoutFlagsTest, ParsesEveryFlagInBothForms) {
  absl::StatusOr<Options> o =
      Parse({"--target", "127.0.0.1:5", "--partition=p1", "--duration-s", "2.5", "--streams=300",
             "--streams-per-channel", "50", "--include-txs", "--include-receipts=false", "--json"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->target, "127.0.0.1:5");
  EXPECT_EQ(o->partition, "p1");
  EXPECT_DOUBLE_EQ(o->duration_s, 2.5);
  EXPECT_EQ(o->streams, 300);
  EXPECT_EQ(o->streams_per_channel, 50);
  EXPECT_TRUE(o->include_txs);
  EXPECT_FALSE(o->include_receipts);
  EXPECT_TRUE(o->json);
}

TEST(WatchFanoutFlagsTest, BadInputNamesTheFlag) {
  const std::vector<std::string> base = {"--target", "h:1",          "--partition",
                                         "p",        "--duration-s", "1"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return Parse(args).status();
  };
  EXPECT_THAT(with({"--streams", "0"}).message(), HasSubstr("--streams"));
  EXPECT_THAT(with({"--streams", "100001"}).message(), HasSubstr("--streams"));
  EXPECT_THAT(with({"--streams-per-channel", "x"}).message(), HasSubstr("--streams-per-channel"));
  EXPECT_THAT(with({"--json=maybe"}).message(), HasSubstr("--json"));
  EXPECT_THAT(with({"--bogus", "1"}).message(), HasSubstr("--bogus"));
  EXPECT_THAT(with({"--streams"}).message(), HasSubstr("--streams: missing value"));
  EXPECT_THAT(Parse({"--partition", "p", "--duration-s", "1"}).status().message(),
              HasSubstr("--target"));
  EXPECT_THAT(Parse({"--target", "h:1", "--duration-s", "1"}).status().message(),
              HasSubstr("--partition"));
  EXPECT_THAT(Parse({"--target", "h:1", "--partition", "p"}).status().message(),
              HasSubstr("--duration-s"));
  EXPECT_THAT(
      Parse({"--target", "h:1", "--partition", "p", "--duration-s", "-1"}).status().message(),
      HasSubstr("--duration-s"));
  EXPECT_TRUE(absl::IsInvalidArgument(with({"--streams", "0"})));
}

TEST(WatchFanoutHistogramTest, PercentilesAreBucketLowerBoundsAndTheMaximumIsExact) {
  DelayHistogram h;
  for (int i = 1; i <= 100; ++i) h.Record(i * 1000);  // 1 .. 100 ms
  h.Record(-5);                                       // clock skew: counted as 0
  const DelayHistogram::Summary s = h.Summarize();
  EXPECT_EQ(s.samples, 101u);
  EXPECT_EQ(s.negative, 1u);
  EXPECT_DOUBLE_EQ(s.p50_ms, 50.0);  // rank 51 of 101: the 50 ms sample (0 ms is first)
  EXPECT_DOUBLE_EQ(s.p99_ms, 99.0);  // rank 100: 99 ms
  EXPECT_DOUBLE_EQ(s.max_ms, 100.0);
  DelayHistogram over;
  over.Record(int64_t{90} * 1'000'000);  // past the 60 s of buckets
  EXPECT_DOUBLE_EQ(over.Summarize().p99_ms, 90'000.0);
}

Options FakeRun(const FakeClientService& fake, int streams) {
  Options o;
  o.target = fake.address();
  o.partition = "p1";
  o.streams = streams;
  o.streams_per_channel = 2;  // two connections for three streams
  o.duration_s = 60;          // the run ends sooner: once every stream has ended
  return o;
}

// Every stream gets the blocks committed while it is open and is then cut by the node as too
// slow (RESOURCE_EXHAUSTED with resume-height): the report counts each response and each cut.
TEST(WatchFanoutRunTest, CountsBlocksPerStreamAndTheCutsWithTheirResumeHeight) {
  FakeClientService fake({{"p1", 1}});
  ASSERT_TRUE(fake.Start());
  fake.SetWatchLive(true);
  fake.SetWatchEnd(2, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too slow"));
  absl::StatusOr<Report> report;
  absl::Notification ran;
  std::thread run([&] {
    report = watch_fanout::Run(FakeRun(fake, 3));
    ran.Notify();
  });
  // Blocks keep committing until every stream has had its two (at most 3,000 blocks).
  for (int i = 0; i < 3000 && !ran.HasBeenNotified(); ++i) {
    fake.AddBlock("p1", {node::chain::Receipt::SUCCESS});
    ran.WaitForNotificationWithTimeout(absl::Milliseconds(10));
  }
  run.join();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->streams, 3);
  EXPECT_EQ(report->channels, 2);
  EXPECT_EQ(report->opened_ok, 3);
  EXPECT_EQ(report->alive_at_end, 0);
  EXPECT_EQ(report->responses_total, 6u);
  EXPECT_EQ(report->responses_min, 2u);
  EXPECT_EQ(report->responses_max, 2u);
  EXPECT_GT(report->bytes_total, 0u);
  EXPECT_EQ(report->spread.samples, 6u);
  EXPECT_EQ(report->blocks_without_timestamp, 6u);  // the fake, like the node, stamps none
  ASSERT_EQ(report->ended_early.count("RESOURCE_EXHAUSTED"), 1u);
  const EarlyEnd& cut = report->ended_early.at("RESOURCE_EXHAUSTED");
  EXPECT_EQ(cut.count, 3);
  EXPECT_EQ(cut.after_responses, 3);
  EXPECT_EQ(cut.with_resume_height, 3);
  EXPECT_EQ(cut.first_message, "too slow");
  const std::string json = FormatJson(FakeRun(fake, 3), *report);
  EXPECT_THAT(json, HasSubstr("\"responses_total\": 6"));
  EXPECT_THAT(json, HasSubstr("\"ended_early\": {\"RESOURCE_EXHAUSTED\": 3}"));
  EXPECT_THAT(FormatText(*report), HasSubstr("RESOURCE_EXHAUSTED 3 (3 after blocks"));
}

// Streams still open when the run's time is up are cancelled by the run itself: they count as
// open at the end, not as early ends.
TEST(WatchFanoutRunTest, StreamsOpenAtTheEndAreNotEarlyEnds) {
  FakeClientService fake({{"p1", 1}});
  ASSERT_TRUE(fake.Start());
  fake.SetWatchLive(true);
  Options o = FakeRun(fake, 3);
  o.duration_s = 0.3;
  absl::StatusOr<Report> report = watch_fanout::Run(o);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->alive_at_end, 3);
  EXPECT_TRUE(report->ended_early.empty());
  EXPECT_EQ(report->responses_total, 0u);
  EXPECT_THAT(FormatText(*report), HasSubstr("ended early          none"));
}

// Streams the node ends at once, before any block (here: an unknown partition), are early ends
// with no response, and the report says no stream got a block.
TEST(WatchFanoutRunTest, StreamsRefusedAtTheStartAreCountedAsEarlyEndsWithNoBlock) {
  FakeClientService fake({{"p1", 1}});
  ASSERT_TRUE(fake.Start());
  Options o = FakeRun(fake, 3);
  o.partition = "nope";
  absl::StatusOr<Report> report = watch_fanout::Run(o);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->opened_ok, 0);
  EXPECT_EQ(report->alive_at_end, 0);
  EXPECT_EQ(report->responses_total, 0u);
  ASSERT_EQ(report->ended_early.count("NOT_FOUND"), 1u);
  EXPECT_EQ(report->ended_early.at("NOT_FOUND").count, 3);
  EXPECT_EQ(report->ended_early.at("NOT_FOUND").after_responses, 0);
}

}  // namespace
}  // namespace watch_fanout
