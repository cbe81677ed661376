// loadgen end to end, in-process: RunLoadgen against a fake ClientService (and a fake
// AdminService for view changes) on loopback, a 2 s run. Checks that the counts add up
// (offered = accepted + rejected + dropped + held, accepted = admitted = committed), that
// rejected transactions are re-offered so nonces have no holes, that retry-after hints are
// counted (baseline) and, with --honour-retry-after, waited for (no re-offer reaches the fake
// sooner than its hint after the rejection), that expectations set the exit code, and the exit
// codes for usage errors and unreachable targets.
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/temp_dirs.h"
#include "tests/tools/fake_admin_service.h"
#include "tests/tools/fake_client_service.h"
#include "tools/loadgen_runner.h"
#include "tools/loadgen_txs.h"

namespace loadgen {
namespace {

using ::loadgen_test::FakeClientService;
using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

Result RunTool(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  Result r;
  r.code = RunLoadgen(args, {.out = &out, .err = &err, .progress_tty = false, .stop = nullptr});
  r.out = out.str();
  r.err = err.str();
  return r;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const google::protobuf::Struct& Part(const google::protobuf::Struct& summary, int i) {
  return summary.fields().at("partitions").list_value().values(i).struct_value();
}
double Num(const google::protobuf::Struct& s, const std::string& key) {
  return s.fields().at(key).number_value();
}

TEST(LoadgenE2eTest, CountsAddUpAndRejectedTxsAreReoffered) {
  FakeClientService fake({{"hot", 1}, {"steady", 2}});
  fake.SetRejectEvery(/*rpc_every=*/11, /*item_every=*/7);
  ASSERT_TRUE(fake.Start());
  nodectl_test::FakeAdminService admin;
  admin.SetStatus([] {
    node::admin::NodeStatus s;
    auto* p = s.add_partitions();
    p->set_name("hot");
    p->set_view_changes(4);
    p = s.add_partitions();
    p->set_name("steady");
    p->set_view_changes(1);
    return s;
  }());
  ASSERT_TRUE(admin.Start());
  const std::string dir = absl::StrCat(::testing::TempDir(), "/loadgen_e2e_", getpid());
  tests::RemoveAtExit(dir);

  Result r = RunTool({"--targets",  absl::StrCat(fake.address(), ",", fake.address()),
                      "--admin",    admin.address(),
                      "--duration", "2s",
                      "--drain",    "5s",
                      "--senders",  "8",
                      "--tx-bytes", "180",
                      "--scenario", "hot:rate=400",
                      "--scenario", "steady:rate=50,start=1s",
                      "--poll-ms",  "50",
                      "--out",      dir,
                      "--expect",   "hot.committed>=accepted",
                      "--expect",   "steady.p99<5s",
                      "--expect",   "view_changes==0",
                      "--expect",   "hot.offered_rate==400/s",
                      "--expect",   "steady.offered==50"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("t=1s hot offered="));
  EXPECT_THAT(r.out, HasSubstr("t=1s steady offered="));
  EXPECT_THAT(r.out, HasSubstr("PASS hot.committed>=accepted"));
  EXPECT_THAT(r.out, HasSubstr("PASS view_changes==0 [steady]"));
  EXPECT_THAT(r.out, Not(HasSubstr("FAIL")));
  EXPECT_THAT(r.err, HasSubstr("pre-signing"));
  EXPECT_THAT(r.out, HasSubstr("hot rejected pool, e.g. \"pool full: 100 of 100 txs (code 8)\""));
  EXPECT_THAT(r.out, HasSubstr("hot rejected rate, e.g. \"rate: request rate limit (code 8)\""));

  google::protobuf::Struct summary;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(ReadFile(dir + "/summary.json"), &summary).ok());
  const google::protobuf::Struct& hot = Part(summary, 0);
  const google::protobuf::Struct& steady = Part(summary, 1);
  EXPECT_EQ(Num(hot, "offered"), 800);
  EXPECT_EQ(Num(steady, "offered"), 50);
  for (const auto* p : {&hot, &steady}) {
    EXPECT_EQ(Num(*p, "held"), 0);  // without --honour-retry-after nothing is held
    EXPECT_EQ(Num(*p, "offered"),
              Num(*p, "accepted") + Num(*p, "rejected") + Num(*p, "client_dropped"));
    EXPECT_EQ(Num(*p, "accepted"), Num(*p, "committed"));
    EXPECT_EQ(Num(*p, "uncommitted"), 0);
    EXPECT_EQ(Num(*p, "view_changes"), 0);
  }
  EXPECT_EQ(Num(hot, "accepted"), fake.admitted("hot"));
  EXPECT_EQ(Num(hot, "committed"), fake.committed("hot"));
  EXPECT_EQ(Num(steady, "committed"), fake.committed("steady"));
  EXPECT_GT(fake.rejected_items("hot"), 0u);
  EXPECT_GT(fake.rejected_rpcs(), 0u);
  const auto& reasons = hot.fields().at("rejected_by_reason").struct_value().fields();
  EXPECT_EQ(reasons.at("pool").number_value(), fake.rejected_items("hot"));
  EXPECT_GT(reasons.at("rate").number_value(), 0);  // whole-RPC rejections, rejected-by=rate
  // The baseline of the retry-after figures: every rejection of the fake carries a hint (20 ms
  // per tx, 50 ms in the failed RPC's trailer), and each re-offer of a hinted tx that reached
  // the fake was scored, as sent after or before its hint.
  EXPECT_EQ(Num(hot, "hinted_rejections"), Num(hot, "rejected"));
  EXPECT_GE(Num(hot, "mean_hint_ms"), 20);
  EXPECT_LE(Num(hot, "mean_hint_ms"), 50);
  EXPECT_EQ(Num(hot, "reoffers_after_hint") + Num(hot, "reoffers_before_hint") +
                Num(steady, "reoffers_after_hint") + Num(steady, "reoffers_before_hint"),
            static_cast<double>(fake.resends().size()));
  EXPECT_LE(Num(hot, "accepted_after_hint"), Num(hot, "reoffers_after_hint"));
  EXPECT_LE(Num(hot, "accepted_before_hint"), Num(hot, "reoffers_before_hint"));
  EXPECT_THAT(r.out, HasSubstr("hot retry-after: "));
  EXPECT_THAT(r.out, Not(HasSubstr(" held=")));
  // Steady was idle in its first second.
  EXPECT_EQ(steady.fields()
                .at("series")
                .list_value()
                .values(0)
                .struct_value()
                .fields()
                .at("offered")
                .number_value(),
            0);

  // Re-offering: a sender's admitted nonces have holes only where a rejected tx still waits.
  uint64_t holes = 0;
  for (const auto& [sender, nonces] : fake.admitted_nonces("hot")) {
    holes += *nonces.rbegin() - nonces.size();
    EXPECT_EQ(*nonces.begin(), 1u);
  }
  EXPECT_LE(holes, static_cast<uint64_t>(Num(hot, "pending_reoffers")));
  EXPECT_EQ(fake.tx_size_range(), std::make_pair(size_t{180}, size_t{180}));

  const std::string csv = ReadFile(dir + "/series.csv");
  EXPECT_THAT(csv, HasSubstr("second,partition,offered"));
  EXPECT_THAT(csv, HasSubstr(",steady,"));
  EXPECT_THAT(ReadFile(dir + "/report.svg"), HasSubstr("partition hot"));
}

// --honour-retry-after with per-tx hints: every 7th new tx is rejected "pool full" with a
// 150 ms hint, and a re-sent tx is always admitted. One sender, so each hint holds everything:
// offers due meanwhile count as held, and every re-offer waits for its hint and passes.
TEST(LoadgenE2eTest, HonourRetryAfterReoffersOnlyAfterTheHint) {
  FakeClientService fake({{"hot", 1}});
  fake.SetRejectEvery(/*rpc_every=*/0, /*item_every=*/7);
  fake.SetRetryAfterMs(/*item_ms=*/150, /*rpc_ms=*/0);
  fake.SetAdmitResends(true);
  ASSERT_TRUE(fake.Start());
  const std::string dir = absl::StrCat(::testing::TempDir(), "/loadgen_e2e_honour_", getpid());
  tests::RemoveAtExit(dir);
  Result r = RunTool({"--targets",
                      fake.address(),
                      "--duration",
                      "2s",
                      "--drain",
                      "5s",
                      "--senders",
                      "1",
                      "--scenario",
                      "hot:rate=200",
                      "--poll-ms",
                      "50",
                      "--honour-retry-after",
                      "--out",
                      dir,
                      "--expect",
                      "hot.hint_accuracy==1",
                      "--expect",
                      "hot.held>0",
                      "--expect",
                      "hot.committed==accepted"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("PASS hot.hint_accuracy==1 (measured 100.0%)"));
  EXPECT_THAT(r.out, HasSubstr(" held="));  // in a per-second line
  EXPECT_THAT(r.out, HasSubstr("hot retry-after: "));
  EXPECT_THAT(r.out, HasSubstr("(mean 150 ms)"));
  EXPECT_THAT(r.out, HasSubstr("accepted 100.0%; before the hint 0, accepted -; held "));

  google::protobuf::Struct summary;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(ReadFile(dir + "/summary.json"), &summary).ok());
  const google::protobuf::Struct& hot = Part(summary, 0);
  EXPECT_EQ(Num(hot, "offered"), 400);
  EXPECT_EQ(Num(hot, "offered"), Num(hot, "accepted") + Num(hot, "rejected") +
                                     Num(hot, "client_dropped") + Num(hot, "held"));
  EXPECT_GT(Num(hot, "held"), 0);
  EXPECT_EQ(Num(hot, "rejected"), fake.rejected_items("hot"));
  EXPECT_EQ(Num(hot, "hinted_rejections"), Num(hot, "rejected"));
  EXPECT_EQ(Num(hot, "mean_hint_ms"), 150);
  EXPECT_EQ(Num(hot, "reoffers_before_hint"), 0);
  EXPECT_GT(Num(hot, "reoffers_after_hint"), 0);
  EXPECT_EQ(Num(hot, "accepted_after_hint"), Num(hot, "reoffers_after_hint"));
  EXPECT_EQ(Num(hot, "accepted"), fake.admitted("hot"));
  EXPECT_THAT(ReadFile(dir + "/series.csv"), HasSubstr(",client_dropped,held,committed,"));

  // Seen from the fake: no re-sent tx arrived sooner than its hint after its rejection.
  const std::vector<FakeClientService::Resend> resends = fake.resends();
  EXPECT_EQ(static_cast<double>(resends.size()), Num(hot, "reoffers_after_hint"));
  for (const FakeClientService::Resend& resend : resends) {
    EXPECT_EQ(resend.hint_ms, 150u);
    EXPECT_GE(resend.gap, absl::Milliseconds(150));
  }
  // Held senders kept their nonces in order: holes only where a rejected tx still waits.
  uint64_t holes = 0;
  for (const auto& [sender, nonces] : fake.admitted_nonces("hot")) {
    holes += *nonces.rbegin() - nonces.size();
    EXPECT_EQ(*nonces.begin(), 1u);
  }
  EXPECT_LE(holes, static_cast<uint64_t>(Num(hot, "pending_reoffers")));
}

// --honour-retry-after with whole-RPC hints (the retry-after-ms trailer): every 4th RPC fails
// with a 120 ms hint; its txs' senders wait that long.
TEST(LoadgenE2eTest, HonourRetryAfterWaitsForTheTrailerHintOfAFailedRpc) {
  FakeClientService fake({{"hot", 1}});
  fake.SetRejectEvery(/*rpc_every=*/4, /*item_every=*/0);
  fake.SetRetryAfterMs(/*item_ms=*/0, /*rpc_ms=*/120);
  ASSERT_TRUE(fake.Start());
  const std::string dir = absl::StrCat(::testing::TempDir(), "/loadgen_e2e_trailer_", getpid());
  tests::RemoveAtExit(dir);
  Result r = RunTool({"--targets", fake.address(), "--duration", "1s", "--drain", "5s", "--senders",
                      "2", "--scenario", "hot:rate=300", "--poll-ms", "50", "--honour-retry-after",
                      "--quiet", "--out", dir});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  google::protobuf::Struct summary;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(ReadFile(dir + "/summary.json"), &summary).ok());
  const google::protobuf::Struct& hot = Part(summary, 0);
  EXPECT_GT(fake.rejected_rpcs(), 0u);
  EXPECT_GT(Num(hot, "rejected"), 0);
  EXPECT_EQ(Num(hot, "hinted_rejections"), Num(hot, "rejected"));
  EXPECT_EQ(Num(hot, "mean_hint_ms"), 120);
  EXPECT_EQ(Num(hot, "reoffers_before_hint"), 0);
  EXPECT_EQ(Num(hot, "offered"), Num(hot, "accepted") + Num(hot, "rejected") +
                                     Num(hot, "client_dropped") + Num(hot, "held"));
  for (const FakeClientService::Resend& resend : fake.resends()) {
    EXPECT_EQ(resend.hint_ms, 120u);
    EXPECT_GE(resend.gap, absl::Milliseconds(120));
  }
  EXPECT_EQ(static_cast<double>(fake.resends().size()), Num(hot, "reoffers_after_hint"));
}

TEST(LoadgenE2eTest, FailedExpectationExitsOneAndContinuesNonces) {
  FakeClientService fake({{"p", 5}});
  ASSERT_TRUE(fake.Start());
  absl::StatusOr<std::vector<base::PrivateKey>> keys = MakeSenderKeys(9, 2);
  ASSERT_TRUE(keys.ok());
  fake.SetNonce((*keys)[0].public_key().bytes(), 41);  // an earlier run used nonces 1..41
  Result r = RunTool({"--targets", fake.address(), "--duration", "1s", "--senders", "2", "--seed",
                      "9", "--scenario", "p:rate=20", "--quiet", "--expect", "p.committed>1000",
                      "--expect", "p.max_latency<10s"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("FAIL p.committed>1000 (measured 20)"));
  EXPECT_THAT(r.out, HasSubstr("PASS p.max_latency<10s"));
  EXPECT_THAT(r.out, Not(HasSubstr("t=0s")));  // --quiet
  auto nonces = fake.admitted_nonces("p");
  ASSERT_EQ(nonces.size(), 2u);
  EXPECT_EQ(*nonces[(*keys)[0].public_key().bytes()].begin(), 42u);
  EXPECT_EQ(*nonces[(*keys)[1].public_key().bytes()].begin(), 1u);
}

// Senders that reached each of two targets (independent fakes, so commits are not awaited).
std::pair<std::set<std::string>, std::set<std::string>> SendersPerTarget(
    const std::string& route, bool a_unavailable = false) {
  FakeClientService a({{"p", 5}}), b({{"p", 5}});
  a.SetUnavailable(a_unavailable);
  EXPECT_TRUE(a.Start());
  EXPECT_TRUE(b.Start());
  Result r = RunTool({"--targets", absl::StrCat(a.address(), ",", b.address()), "--duration", "1s",
                      "--drain", "1s", "--senders", "5", "--scenario", "p:rate=300", "--route",
                      route, "--quiet"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  std::pair<std::set<std::string>, std::set<std::string>> out;
  for (const auto& [sender, nonces] : a.admitted_nonces("p")) out.first.insert(sender);
  for (const auto& [sender, nonces] : b.admitted_nonces("p")) out.second.insert(sender);
  return out;
}

TEST(LoadgenE2eTest, RouteSenderKeepsEachSenderOnOneTarget) {
  auto [a, b] = SendersPerTarget("sender");
  EXPECT_EQ(a.size(), 3u);  // senders 0, 2, 4
  EXPECT_EQ(b.size(), 2u);  // senders 1, 3
  for (const std::string& s : a) EXPECT_EQ(b.count(s), 0u) << "a sender reached both targets";
  // --route spread sends every tick's batch to the next target: senders reach both.
  auto [c, d] = SendersPerTarget("spread");
  EXPECT_EQ(c.size(), 5u);
  EXPECT_EQ(d.size(), 5u);
}

TEST(LoadgenE2eTest, RouteSenderFailsOverFromATargetThatIsUnavailable) {
  // a answers every tx UNAVAILABLE: its senders' txs go to b for 500 ms after each such answer,
  // so every sender is admitted at b and none at a.
  auto [a, b] = SendersPerTarget("sender", /*a_unavailable=*/true);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(b.size(), 5u);
}

// --commits watch: commits come from WatchCommits streams (one per partition and target), not
// from polling; every accepted tx is counted committed once, though two streams report it.
TEST(LoadgenE2eTest, WatchCommitsFindsEveryCommitOnce) {
  FakeClientService fake({{"hot", 1}});
  fake.SetWatchLive(true);
  ASSERT_TRUE(fake.Start());
  Result r =
      RunTool({"--targets", absl::StrCat(fake.address(), ",", fake.address()), "--duration", "1s",
               "--drain", "5s", "--senders", "4", "--scenario", "hot:rate=200", "--commits",
               "watch", "--expect", "committed==accepted", "--expect", "accepted==200"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("PASS committed==accepted"));
  EXPECT_EQ(fake.admitted("hot"), 200u);
  EXPECT_EQ(fake.committed("hot"), 200u);
  EXPECT_THAT(fake.last_watch_request(), HasSubstr("partition { id: 1 } from_height: 1"));
}

TEST(LoadgenE2eTest, UnreachableTargetOrUnknownPartitionExitsOne) {
  FakeClientService fake({{"p", 5}});
  ASSERT_TRUE(fake.Start());
  Result r =
      RunTool({"--targets", fake.address(), "--duration", "1s", "--scenario", "nope:rate=1"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("partition 'nope'"));
  fake.Stop();
  r = RunTool({"--targets", fake.address(), "--duration", "1s", "--scenario", "p:rate=1"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("target ", fake.address())));
}

TEST(LoadgenE2eTest, UsageErrorsExitTwoNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    const char* error;
  } cases[] = {
      {{"--scenario", "a:rate=1"}, "--targets: required"},
      {{"--targets", "127.0.0.1:1"}, "--scenario: required"},
      {{"--targets", "nohost", "--scenario", "a:rate=1"}, "--targets: not host:port"},
      {{"--targets", "127.0.0.1:1", "--scenario", "a:rate=1", "--duration", "x"}, "--duration"},
      {{"--targets", "127.0.0.1:1", "--scenario", "a:rate=1", "--senders", "0"}, "--senders"},
      {{"--targets", "127.0.0.1:1", "--scenario", "a:rate=1", "--bogus", "1"},
       "unknown flag --bogus"},
      {{"--targets", "127.0.0.1:1", "--scenario", "a:rate=1", "--expect", "b.p99<1s"},
       "partition 'b' is not in --scenario"},
      {{"--targets", "127.0.0.1:1", "--scenario", "a:rate=1", "--expect", "view_changes==0"},
       "view_changes needs --admin"},
      {{"--targets", "127.0.0.1:1", "--scenario", "a:rate=1", "--expect", "a.p99<"},
       "--expect 'a.p99<'"},
      {{"--targets", "127.0.0.1:1", "--scenario", "a:rate=1", "--seed", "1", "--seed", "2"},
       "--seed: given more than once"},
      {{"--targets", "127.0.0.1:1", "--scenario", "a:rate=1", "--batch-ms"},
       "--batch-ms: missing value"},
      {{"--targets", "127.0.0.1:1", "--scenario", "a:rate=1", "--commits", "push"},
       "--commits: must be poll or watch, got 'push'"},
      {{"--targets", "127.0.0.1:1", "--scenario", "a:rate=1", "--route", "random"},
       "--route: must be sender or spread, got 'random'"},
      {{"--targets", "127.0.0.1:1", "--scenario", "a:rate=1", "stray"}, "unexpected argument"},
      {{"--targets", "127.0.0.1:1", "--scenario", "a:rate=1", "--honour-retry-after=yes"},
       "--honour-retry-after: takes no value"},
  };
  for (const Case& c : cases) {
    Result r = RunTool(c.args);
    EXPECT_EQ(r.code, 2) << c.error;
    EXPECT_THAT(r.err, HasSubstr(c.error));
    EXPECT_THAT(r.err, HasSubstr("--help"));
  }
  Result help = RunTool({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.out, HasSubstr("--scenario SPEC"));
  EXPECT_THAT(help.out, HasSubstr("--expect EXPR"));
  EXPECT_THAT(help.out, HasSubstr("--honour-retry-after"));
}

}  // namespace
}  // namespace loadgen
