// loadgen flags: --honour-retry-after (a value-less boolean, off by default), the --help text
// that describes it, and --expect with the held / hint_accuracy metrics.
#include "tools/loadgen_flags.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loadgen {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Base(std::vector<std::string> extra) {
  std::vector<std::string> args = {"--targets", "127.0.0.1:1", "--scenario", "a:rate=1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(LoadgenFlagsTest, HonourRetryAfterIsOffByDefault) {
  bool help = true;
  absl::StatusOr<Options> o = ParseLoadgenFlags(Base({}), &help);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(help);
  EXPECT_FALSE(o->honour_retry_after);
}

TEST(LoadgenFlagsTest, HonourRetryAfterIsAccepted) {
  bool help = false;
  absl::StatusOr<Options> o = ParseLoadgenFlags(Base({"--honour-retry-after", "--quiet"}), &help);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->honour_retry_after);
  EXPECT_TRUE(o->quiet);
  // Anywhere on the line, before other flags too.
  o = ParseLoadgenFlags(
      {"--honour-retry-after", "--targets", "127.0.0.1:1", "--scenario", "a:rate=1"}, &help);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->honour_retry_after);
}

TEST(LoadgenFlagsTest, HonourRetryAfterTakesNoValueAndIsGivenOnce) {
  bool help = false;
  absl::StatusOr<Options> o = ParseLoadgenFlags(Base({"--honour-retry-after=true"}), &help);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("--honour-retry-after: takes no value"));
  o = ParseLoadgenFlags(Base({"--honour-retry-after", "--honour-retry-after"}), &help);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(std::string(o.status().message()),
              HasSubstr("--honour-retry-after: given more than once"));
  // The spelling is British, as the flag's name; no alias.
  o = ParseLoadgenFlags(Base({"--honor-retry-after"}), &help);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("unknown flag --honor-retry-after"));
}

TEST(LoadgenFlagsTest, UsageDescribesHonourRetryAfterAndTheNewMetrics) {
  const std::string usage = LoadgenUsage();
  EXPECT_THAT(usage, HasSubstr("--honour-retry-after"));
  EXPECT_THAT(usage, HasSubstr("retry_after_ms"));
  EXPECT_THAT(usage, HasSubstr("held"));
  EXPECT_THAT(usage, HasSubstr("hint_accuracy"));
  bool help = false;
  absl::StatusOr<Options> o = ParseLoadgenFlags({"--help"}, &help);
  EXPECT_TRUE(help);
}

TEST(LoadgenFlagsTest, ExpectationsOnHeldAndHintAccuracy) {
  bool help = false;
  absl::StatusOr<Options> o =
      ParseLoadgenFlags(Base({"--honour-retry-after", "--expect", "a.hint_accuracy>=80%",
                              "--expect", "hint_accuracy>0.5", "--expect", "a.held<100"}),
                        &help);
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->expectations.size(), 3u);
  EXPECT_EQ(o->expectations[0].lhs.kind, MetricKind::kRatio);
  EXPECT_DOUBLE_EQ(o->expectations[0].value, 0.8);
  EXPECT_DOUBLE_EQ(o->expectations[1].value, 0.5);
  EXPECT_EQ(o->expectations[2].lhs.kind, MetricKind::kCount);
  o = ParseLoadgenFlags(Base({"--expect", "a.hint_accuracy>5ms"}), &help);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("does not fit ratio metric"));
}

}  // namespace
}  // namespace loadgen
