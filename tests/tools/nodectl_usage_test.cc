// nodectl's local checks: --help on every subcommand, usage errors (exit 2, no RPC), and the
// flag and number parsers. Runs against a fake AdminService only to prove no call was made.
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tools/fake_admin_service.h"
#include "tools/nodectl_commands.h"
#include "tools/nodectl_flags.h"
#include "tools/nodectl_requests.h"
#include "tools/nodectl_table.h"

namespace nodectl {
namespace {

using ::nodectl_test::FakeAdminService;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

const std::vector<std::string> kCommands = {
    "status",    "partitions",  "peers",         "stats",          "watch", "watch-commits",
    "get-value", "update-flow", "update-egress", "update-arbiter", "pause", "resume"};

class NodectlUsageTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(fake_.Start()); }

  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    args.insert(args.begin(), {"--admin", fake_.address()});
    return RunNodectl(args, {.out = &out_, .err = &err_, .canceller = nullptr});
  }

  FakeAdminService fake_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(NodectlUsageTest, HelpOnEveryCommand) {
  for (const std::string& c : kCommands) {
    for (const char* help : {"--help", "-h"}) {
      ASSERT_EQ(Run({c, help}), kExitOk) << c;
      EXPECT_THAT(out_.str(), StartsWith("usage: nodectl [global flags] " + c)) << c;
      EXPECT_THAT(out_.str(), HasSubstr("global flags:\n  --admin HOST:PORT")) << c;
      EXPECT_THAT(err_.str(), IsEmpty());
    }
    ASSERT_EQ(Run({"help", c}), kExitOk) << c;
    EXPECT_THAT(out_.str(), StartsWith("usage: nodectl [global flags] " + c)) << c;
  }
  // --help wins over otherwise bad flags and missing arguments.
  EXPECT_EQ(Run({"update-arbiter", "--weight", "-5", "--help"}), kExitOk);
  EXPECT_EQ(Run({"pause", "--help"}), kExitOk);
  EXPECT_EQ(fake_.calls(), 0);
}

TEST_F(NodectlUsageTest, TopLevelHelpListsEveryCommand) {
  ASSERT_EQ(Run({"--help"}), kExitOk);
  for (const std::string& c : kCommands) EXPECT_THAT(out_.str(), HasSubstr("\n  " + c + " "));
  ASSERT_EQ(RunNodectl({}, {.out = &out_, .err = &err_}), kExitUsage);
  EXPECT_THAT(err_.str(), StartsWith("nodectl: missing command\n"));
}

TEST_F(NodectlUsageTest, UsageErrorsExitTwoWithoutRpc) {
  struct Case {
    std::vector<std::string> args;
    std::string message;  // first line of stderr
  };
  const std::vector<Case> cases = {
      {{"frobnicate"}, "nodectl: unknown command 'frobnicate'"},
      {{"status", "--bogus"}, "nodectl status: unknown flag --bogus"},
      {{"status", "extra"}, "nodectl status: unexpected argument 'extra'"},
      {{"stats", "-p", "hot"}, "nodectl stats: unknown flag -p (flags are long: --name)"},
      {{"stats", "--partition"}, "nodectl stats: --partition: missing value (P)"},
      {{"stats", "--json=yes"}, "nodectl stats: --json takes no value"},
      {{"status", "--timeout-ms", "0"}, "nodectl status: --timeout-ms: must be >= 1, got 0"},
      {{"watch", "--interval-ms", "50"}, "nodectl watch: --interval-ms: must be >= 100, got 50"},
      {{"watch", "--count", "0"}, "nodectl watch: --count: must be >= 1, got 0"},
      {{"watch", "--count", "x"}, "nodectl watch: --count: not a non-negative integer: 'x'"},
      {{"update-flow", "--pool", "max_txs=1"}, "nodectl update-flow: --partition: required"},
      {{"update-flow", "--partition", "hot"},
       "nodectl update-flow: nothing to update: give --interceptor, --read-interceptor, "
       "--read-hold, --lane-weights, --budget, --adaptive-lanes, --pool, --drain-rate or "
       "--disk-budget"},
      {{"update-flow", "--partition", "hot", "--read-hold", "max_wait=5"},
       "nodectl update-flow: --read-hold: unknown key 'max_wait' (known: max_wait_ms, "
       "max_waiting)"},
      {{"update-flow", "--partition", "ledger", "--disk-budget", "0"},
       "nodectl update-flow: --disk-budget: must be >= 1 bytes, got 0"},
      {{"update-flow", "--partition", "hot", "--lane-weights", "consensus=0"},
       "nodectl update-flow: --lane-weights consensus: must be > 0, got 0"},
      {{"update-flow", "--partition", "hot", "--lane-weights", "fast=1"},
       "nodectl update-flow: --lane-weights: unknown key 'fast' (known: consensus, sync, "
       "tx_forward, bulk, client)"},
      {{"update-flow", "--partition", "hot", "--pool", "high_water_fraction=2"},
       "nodectl update-flow: --pool high_water_fraction: must be <= 1, got 2"},
      {{"update-flow", "--partition", "hot", "--pool", "max_txs=-3"},
       "nodectl update-flow: --pool max_txs: must be >= 1, got -3"},
      {{"update-flow", "--partition", "hot", "--pool", "max_bytes=12XB"},
       "nodectl update-flow: --pool max_bytes: unknown unit 'XB' in '12XB' (use B, KB, MB, GB, "
       "KiB, MiB, GiB)"},
      {{"update-flow", "--partition", "hot", "--interceptor", "stages { bogus: 1 }"},
       "nodectl update-flow: --interceptor: line 1 column 15: Message type "
       "\"node.flowctl.StageConfig\" has no field named \"bogus\"."},
      {{"update-flow", "--partition", "hot", "--interceptor", "stages { name: \"x\" }"},
       "nodectl update-flow: --interceptor: stages[0]: exactly one kind (concurrency, rate, gate) "
       "is required"},
      {{"update-flow", "--partition", "hot", "--interceptor", "/no/such/file"},
       "nodectl update-flow: --interceptor: cannot read file '/no/such/file' (give a file, or the "
       "text-format StageChainConfig itself)"},
      {{"update-egress"}, "nodectl update-egress: nothing to update: give --cap and/or --floor"},
      {{"update-egress", "--cap", "0"},
       "nodectl update-egress: --cap: must be > 0 bytes/s or 'unlimited', got 0"},
      {{"update-egress", "--floor", "-1"},
       "nodectl update-egress: --floor: must be >= 1 bytes, got -1"},
      {{"update-arbiter", "--partition", "hot", "--weight", "-1"},
       "nodectl update-arbiter: --weight: must be > 0, got -1"},
      {{"update-arbiter", "--partition", "hot"},
       "nodectl update-arbiter: --weight: required for partition 'hot'"},
      {{"update-arbiter"},
       "nodectl update-arbiter: --partition: required (or --cpu-workers, --blocks-per-second or "
       "--ledger-write-buffers alone)"},
      {{"update-arbiter", "--ledger-write-buffers", "1MiB"},
       "nodectl update-arbiter: --ledger-write-buffers: must be >= 4194304 bytes, got 1048576"},
      {{"update-arbiter", "--blocks-per-second", "200000"},
       "nodectl update-arbiter: --blocks-per-second: must be <= 100000, got 200000"},
      {{"update-arbiter", "--cpu-workers", "2000"},
       "nodectl update-arbiter: --cpu-workers: must be <= 1024, got 2000"},
      {{"update-arbiter", "--weight", "1", "--partition", "hot"},
       "nodectl update-arbiter: --weight: must follow the --partition it applies to"},
      {{"update-arbiter", "--partition", "hot", "--weight", "1", "--weight", "2"},
       "nodectl update-arbiter: --weight: given twice for partition 'hot'"},
      {{"update-arbiter", "--partition", "hot", "--weight", "1", "--guarantee", "1.5"},
       "nodectl update-arbiter: --guarantee: must be <= 1, got 1.5"},
      {{"update-arbiter", "--partition", "hot", "--weight", "1", "--ceiling", "0"},
       "nodectl update-arbiter: --ceiling: must be > 0, got 0"},
      {{"update-arbiter", "--partition", "hot", "--weight", "1", "--guarantee", "0.6", "--ceiling",
        "0.5"},
       "nodectl update-arbiter: --guarantee: must be <= --ceiling (0.5) for partition 'hot', got "
       "0.6"},
      {{"update-arbiter", "--partition", "a", "--weight", "1", "--partition", "a", "--weight", "2"},
       "nodectl update-arbiter: --partition: 'a' given more than once"},
      {{"update-arbiter", "--partition", "hot", "--weight", "nan"},
       "nodectl update-arbiter: --weight: not a number: 'nan'"},
      {{"watch-commits"}, "nodectl watch-commits: --partition: required"},
      {{"watch-commits", "--partition", "hot", "--from", "-1"},
       "nodectl watch-commits: --from: must be >= 0, got -1"},
      {{"watch-commits", "--partition", "hot", "--count", "0"},
       "nodectl watch-commits: --count: must be >= 1, got 0"},
      {{"get-value", "--partition", "hot"},
       "nodectl get-value: expected --partition P [--height H] KEY"},
      {{"get-value", "--partition", "hot", ""}, "nodectl get-value: KEY: empty"},
      {{"get-value", "k"}, "nodectl get-value: --partition: required"},
      {{"get-value", "--partition", "hot", std::string(257, 'k')},
       "nodectl get-value: KEY: must be at most 256 bytes, got 257"},
      {{"get-value", "--partition", "hot", "--height", "x", "k"},
       "nodectl get-value: --height: not a non-negative integer: 'x'"},
      {{"get-value", "--client", "", "--partition", "hot", "k"},
       "nodectl get-value: --client: must not be empty"},
      {{"pause"}, "nodectl pause: expected PARTITION"},
      {{"resume", "a", "b"}, "nodectl resume: expected PARTITION"},
      {{"stats", "--partition", "a", "--partition", "b"},
       "nodectl stats: --partition: given more than once"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Run(c.args), kExitUsage) << c.args[0];
    std::string err = err_.str();
    EXPECT_EQ(err.substr(0, err.find('\n')), c.message);
    EXPECT_THAT(err, HasSubstr("usage: nodectl")) << c.message;
    EXPECT_THAT(out_.str(), IsEmpty());
  }
  EXPECT_EQ(fake_.calls(), 0);
}

TEST(NodectlFlagsTest, ParsesForms) {
  const std::vector<FlagSpec> specs = {{"a", "X", ""}, {"b", "", ""}, {"r", "X", "", true}};
  std::vector<std::string> args = {"pos", "--a=1", "--b", "--r", "x", "--r=y", "--", "--b"};
  absl::StatusOr<ParsedFlags> f = ParseFlags(args, specs);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*f->Last("a"), "1");
  EXPECT_EQ(*f->Last("b"), "true");
  EXPECT_EQ(*f->Last("r"), "y");
  EXPECT_EQ(f->positional, (std::vector<std::string>{"pos", "--b"}));
  EXPECT_FALSE(f->help);
}

TEST(NodectlFlagsTest, Numbers) {
  EXPECT_EQ(*ParseBytes("x", "64KiB", 0, UINT64_MAX), 65536u);
  EXPECT_EQ(*ParseBytes("x", "10MB", 0, UINT64_MAX), 10000000u);
  EXPECT_EQ(*ParseBytes("x", "2G", 0, UINT64_MAX), 2147483648u);
  EXPECT_EQ(*ParseBytes("x", "17", 0, UINT64_MAX), 17u);
  EXPECT_FALSE(ParseBytes("x", "99999999999999999999GiB", 0, UINT64_MAX).ok());
  EXPECT_FALSE(ParseBytes("x", "1.5MiB", 0, UINT64_MAX).ok());
  EXPECT_FALSE(ParseUint("x", "4294967296", 0, UINT32_MAX).ok());
  EXPECT_FALSE(ParseDouble("x", "inf", 0, 1e9).ok());
  EXPECT_EQ(*ParseDouble("x", "0.5", 0, 1), 0.5);
  EXPECT_EQ(ParseKeyValues("--k", "a=1,a=2", {"a"}).status().message(),
            "--k: key 'a' given more than once");
  EXPECT_EQ(ParseKeyValues("--k", "a", {"a"}).status().message(),
            "--k: expected key=value, got 'a'");
}

TEST(NodectlTableTest, AlignsAndFormatsUnits) {
  Table t({"NAME", "N>"});
  t.AddRow({"a", "1"});
  t.AddRow({"long", "12345"});
  std::ostringstream out;
  t.Print(out);
  EXPECT_EQ(out.str(), "NAME      N\na         1\nlong  12345\n");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatRate(0, "unlimited"), "unlimited");
  EXPECT_EQ(FormatMicros(1500), "1.50ms");
  EXPECT_EQ(FormatDuration(90061), "1d01h01m01s");
  EXPECT_EQ(FormatNumber(0.125), "0.125");
  EXPECT_EQ(FormatNumber(8), "8");
}

}  // namespace
}  // namespace nodectl
