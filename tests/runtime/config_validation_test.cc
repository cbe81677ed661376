// One table of bad values, each fed through config loading (ParseConfig of a text config) and
// through the matching live update (admin UpdatePartitionFlow, UpdateArbiter or UpdateEgress on a
// real node over gRPC): both must refuse it with the same "path: what is wrong" text, the file
// with "FILE:LINE: " in front and the live update with INVALID_ARGUMENT.
#include "runtime/config_validation.h"

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/config.h"
#include "tests/runtime/grpc_test_node.h"

namespace runtime::grpc_test {
namespace {

using ::grpc::StatusCode;
using ::testing::HasSubstr;

// A text config with partitions hot, steady and cold (as the test node has), `hot` and `steady`
// placed inside the first two partitions and `resources` inside a resources block.
std::string ConfigText(const std::string& hot, const std::string& steady = "",
                       const std::string& resources = "") {
  return absl::StrCat("data_dir: \"/tmp/unused\"\n",                          // line 1
                      "resources {\n", resources, "\n}\n",                    // lines 2-4
                      "partitions {\n  id: 1 name: \"hot\"\n", hot, "\n}\n",  // lines 5-8
                      "partitions {\n  id: 2 name: \"steady\"\n", steady, "\n}\n",
                      "partitions { id: 3 name: \"cold\" }\n");
}

// "t.conf:LINE: rest" -> rest, with LINE > 0; "" (and a test failure) otherwise.
std::string StripFileLine(const std::string& message) {
  const std::string prefix = "t.conf:";
  const size_t colon = message.find(": ", prefix.size());
  int line = 0;
  if (!absl::StartsWith(message, prefix) || colon == std::string::npos ||
      !absl::SimpleAtoi(message.substr(prefix.size(), colon - prefix.size()), &line) || line <= 0) {
    ADD_FAILURE() << "no FILE:LINE in: " << message;
    return "";
  }
  return message.substr(colon + 2);
}

class ConfigValidationTest : public GrpcServicesTest {
 protected:
  grpc::Status Flow(const node::admin::UpdatePartitionFlowRequest& request) {
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::UpdatePartitionFlowResponse response;
    return Admin()->UpdatePartitionFlow(&ctx, request, &response);
  }
  grpc::Status Arbiter(const node::admin::UpdateArbiterRequest& request) {
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::UpdateArbiterResponse response;
    return Admin()->UpdateArbiter(&ctx, request, &response);
  }
  grpc::Status Egress(const node::admin::UpdateEgressRequest& request) {
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::UpdateEgressResponse response;
    return Admin()->UpdateEgress(&ctx, request, &response);
  }
};

node::admin::UpdatePartitionFlowRequest HotFlow() {
  node::admin::UpdatePartitionFlowRequest r;
  r.set_partition("hot");
  return r;
}

node::admin::UpdatePartitionFlowRequest HotStage(const node::flowctl::StageConfig& stage) {
  node::admin::UpdatePartitionFlowRequest r = HotFlow();
  *r.mutable_interceptor()->add_stages() = stage;
  return r;
}

void AddShare(node::admin::UpdateArbiterRequest* r, const std::string& partition, double weight,
              double guarantee, double ceiling) {
  auto* e = r->add_entries();
  e->set_partition(partition);
  e->mutable_share()->set_weight(weight);
  e->mutable_share()->set_guarantee_fraction(guarantee);
  e->mutable_share()->set_ceiling_fraction(ceiling);
}

TEST_F(ConfigValidationTest, FileAndLiveUpdateGiveTheSameMessage) {
  struct Case {
    std::string name;
    std::string file;                    // a whole text config
    std::function<grpc::Status()> live;  // the same bad value as a live update
    std::string expect;                  // "path: message", exactly
  };
  const std::vector<Case> cases = {
      {"pool max_per_sender above max_txs", ConfigText("pool { max_txs: 100 max_per_sender: 200 }"),
       [&] {
         auto r = HotFlow();
         r.mutable_pool()->set_max_txs(100);
         r.mutable_pool()->set_max_per_sender(200);
         return Flow(r);
       },
       "partitions[hot].pool.max_per_sender: must be <= max_txs (100), got 200"},
      {"pool forward reserve too large", ConfigText("pool { forward_reserve_fraction: 0.9 }"),
       [&] {
         auto r = HotFlow();
         r.mutable_pool()->set_forward_reserve_fraction(0.9);
         return Flow(r);
       },
       "partitions[hot].pool.forward_reserve_fraction: must be in [0, 0.5], got 0.9"},
      {"pool high water above 1", ConfigText("pool { high_water_fraction: 2 }"),
       [&] {
         auto r = HotFlow();
         r.mutable_pool()->set_high_water_fraction(2);
         return Flow(r);
       },
       "partitions[hot].pool.high_water_fraction: must be in [0.01, 1], got 2"},
      {"retry reservations above half the mark", ConfigText("pool { retry_reserve_fraction: 0.7 }"),
       [&] {
         auto r = HotFlow();
         r.mutable_pool()->set_retry_reserve_fraction(0.7);
         return Flow(r);
       },
       "partitions[hot].pool.retry_reserve_fraction: must be in [0, 0.5], got 0.7"},
      {"pool bytes below one max-size tx", ConfigText("pool { max_bytes: 100 }"),
       [&] {
         auto r = HotFlow();
         r.mutable_pool()->set_max_bytes(100);
         return Flow(r);
       },
       "partitions[hot].pool.max_bytes: must be >= 65536, got 100"},
      {"negative lane weight", ConfigText("dispatcher { lane_weights { bulk: -1 } }"),
       [&] {
         auto r = HotFlow();
         r.mutable_dispatcher()->mutable_lane_weights()->set_bulk(-1);
         return Flow(r);
       },
       "partitions[hot].dispatcher.lane_weights.bulk: must be > 0, got -1"},
      {"huge lane weight", ConfigText("dispatcher { lane_weights { client: 2000000 } }"),
       [&] {
         auto r = HotFlow();
         r.mutable_dispatcher()->mutable_lane_weights()->set_client(2e6);
         return Flow(r);
       },
       "partitions[hot].dispatcher.lane_weights.client: must be <= 1000000, got 2e+06"},
      {"lane delay target above a minute",
       ConfigText("dispatcher { adaptive_weights { enabled: true consensus { target_p99_ms: "
                  "90000 } } }"),
       [&] {
         auto r = HotFlow();
         auto* a = r.mutable_dispatcher()->mutable_adaptive_weights();
         a->set_enabled(true);
         a->mutable_consensus()->set_target_p99_ms(90000);
         return Flow(r);
       },
       "partitions[hot].dispatcher.adaptive_weights.consensus.target_p99_ms: must be in [0, "
       "60000], got 90000"},
      {"negative lane max weight",
       ConfigText("dispatcher { adaptive_weights { client { target_p99_ms: 20 max_weight: -3 } "
                  "} }"),
       [&] {
         auto r = HotFlow();
         auto* c = r.mutable_dispatcher()->mutable_adaptive_weights()->mutable_client();
         c->set_target_p99_ms(20);
         c->set_max_weight(-3);
         return Flow(r);
       },
       "partitions[hot].dispatcher.adaptive_weights.client.max_weight: must be in [0, 1e+06], "
       "got -3"},
      {"lane ceiling below its weight",
       ConfigText("dispatcher { adaptive_weights { consensus { target_p99_ms: 5 max_weight: 4 } "
                  "} }"),
       [&] {
         auto r = HotFlow();
         auto* c = r.mutable_dispatcher()->mutable_adaptive_weights()->mutable_consensus();
         c->set_target_p99_ms(5);
         c->set_max_weight(4);
         return Flow(r);
       },
       "partitions[hot].dispatcher.adaptive_weights.consensus.max_weight: must be 0 (8x the "
       "weight) or >= lane_weights.consensus (8), got 4"},
      {"negative rate", ConfigText("interceptor { stages { rate { rate_per_second: -5 } } }"),
       [&] {
         node::flowctl::StageConfig stage;
         stage.mutable_rate()->set_rate_per_second(-5);
         return Flow(HotStage(stage));
       },
       "partitions[hot].interceptor.stages[0].rate.rate_per_second: must be finite and >= 0 "
       "requests/s (0 closes the stage; set `unlimited` for no limit), got -5"},
      {"unknown gate predicate",
       ConfigText("interceptor { stages { gate { predicate: \"nope\" } } }"),
       [&] {
         node::flowctl::StageConfig stage;
         stage.mutable_gate()->set_predicate("nope");
         return Flow(HotStage(stage));
       },
       "partitions[hot].interceptor.stages[0].gate.predicate: unknown predicate 'nope' "
       "(registered: consensus_normal, pool_below_high_water)"},
      {"stage without a kind", ConfigText("interceptor { stages { name: \"x\" } }"),
       [&] {
         node::flowctl::StageConfig stage;
         stage.set_name("x");
         return Flow(HotStage(stage));
       },
       "partitions[hot].interceptor.stages[0].kind: no stage kind set (one of concurrency, "
       "rate, gate, adaptive, custom)"},
      {"adaptive decrease factor above 1",
       ConfigText("interceptor { stages { adaptive { decrease_factor: 2 } } }"),
       [&] {
         node::flowctl::StageConfig stage;
         stage.mutable_adaptive()->set_decrease_factor(2);
         return Flow(HotStage(stage));
       },
       "partitions[hot].interceptor.stages[0].adaptive.decrease_factor: must be in (0, 1) (0 "
       "for the default, 0.8), got 2"},
      {"two stages with one name",
       ConfigText("interceptor { stages { name: \"a\" rate { unlimited: true } }\n"
                  "              stages { name: \"a\" rate { unlimited: true } } }"),
       [&] {
         node::flowctl::StageConfig stage;
         stage.set_name("a");
         stage.mutable_rate()->set_unlimited(true);
         auto r = HotStage(stage);
         *r.mutable_interceptor()->add_stages() = stage;
         return Flow(r);
       },
       "partitions[hot].interceptor.stages[1].name: duplicate stage name 'a' (also stages[0]); "
       "give stages of one kind distinct names"},
      {"adaptive stage among the reads",
       ConfigText("read_interceptor { stages { adaptive { initial_limit: 8 } } }"),
       [&] {
         auto r = HotFlow();
         r.mutable_read_interceptor()->add_stages()->mutable_adaptive()->set_initial_limit(8);
         return Flow(r);
       },
       "partitions[hot].read_interceptor.stages[0].adaptive: not for reads: an adaptive stage "
       "follows a transaction to its commit (use concurrency or rate)"},
      {"gate among the reads",
       ConfigText("read_interceptor { stages { gate { predicate: \"pool_below_high_water\" } } }"),
       [&] {
         auto r = HotFlow();
         r.mutable_read_interceptor()->add_stages()->mutable_gate()->set_predicate(
             "pool_below_high_water");
         return Flow(r);
       },
       "partitions[hot].read_interceptor.stages[0].gate: not for reads: the gates test "
       "write-side conditions (consensus, the pool) that a read does not depend on (use "
       "concurrency or rate)"},
      {"negative read rate",
       ConfigText("read_interceptor { stages { rate { rate_per_second: -1 } } }"),
       [&] {
         auto r = HotFlow();
         r.mutable_read_interceptor()->add_stages()->mutable_rate()->set_rate_per_second(-1);
         return Flow(r);
       },
       "partitions[hot].read_interceptor.stages[0].rate.rate_per_second: must be finite and >= 0 "
       "requests/s (0 closes the stage; set `unlimited` for no limit), got -1"},
      {"read hold too long", ConfigText("read_hold { max_wait_ms: 70000 }"),
       [&] {
         auto r = HotFlow();
         r.mutable_read_hold()->set_max_wait_ms(70000);
         return Flow(r);
       },
       "partitions[hot].read_hold.max_wait_ms: must be <= 60000, got 70000"},
      {"negative share weight", ConfigText("share { weight: -2 }"),
       [&] {
         node::admin::UpdateArbiterRequest r;
         AddShare(&r, "hot", -2, 0, 1);
         return Arbiter(r);
       },
       "partitions[hot].share.weight: must be > 0, got -2"},
      {"ceiling below guarantee",
       ConfigText("share { guarantee_fraction: 0.5 ceiling_fraction: 0.3 }"),
       [&] {
         node::admin::UpdateArbiterRequest r;
         AddShare(&r, "hot", 1, 0.5, 0.3);
         return Arbiter(r);
       },
       "partitions[hot].share.ceiling_fraction: must be >= guarantee_fraction (0.5), got 0.3"},
      {"negative guarantee", ConfigText("share { guarantee_fraction: -0.5 }"),
       [&] {
         node::admin::UpdateArbiterRequest r;
         AddShare(&r, "hot", 1, -0.5, 1);
         return Arbiter(r);
       },
       "partitions[hot].share.guarantee_fraction: must be in [0, 1], got -0.5"},
      {"hard ceiling without a ceiling",
       ConfigText("share { ceiling_fraction: 1 hard_ceiling: true }"),
       [&] {
         node::admin::UpdateArbiterRequest r;
         AddShare(&r, "hot", 1, 0, 1);
         r.mutable_entries(0)->mutable_share()->set_hard_ceiling(true);
         return Arbiter(r);
       },
       "partitions[hot].share.hard_ceiling: needs a ceiling_fraction in (0, 1), got 1"},
      {"guarantees sum over 1",
       ConfigText("share { guarantee_fraction: 0.6 }", "share { guarantee_fraction: 0.6 }"),
       [&] {
         node::admin::UpdateArbiterRequest r;
         AddShare(&r, "hot", 1, 0.6, 1);
         AddShare(&r, "steady", 1, 0.6, 1);
         return Arbiter(r);
       },
       "partitions: share.guarantee_fraction sums to 1.2 over all partitions; must be <= 1"},
      {"egress floor above the cap",
       ConfigText("", "", "egress_bytes_per_second: 1000 tx_forward_floor_bytes_per_second: 2000"),
       [&] {
         node::admin::UpdateEgressRequest r;
         r.set_set_cap(true);
         r.set_cap_bytes_per_second(1000);
         r.set_tx_forward_floor_bytes_per_second(2000);
         return Egress(r);
       },
       "resources.tx_forward_floor_bytes_per_second: must be <= egress_bytes_per_second (1000), "
       "got 2000"},
      {"egress cap below the default floor", ConfigText("", "", "egress_bytes_per_second: 1000"),
       [&] {
         node::admin::UpdateEgressRequest r;
         r.set_set_cap(true);
         r.set_cap_bytes_per_second(1000);
         return Egress(r);
       },
       "resources.tx_forward_floor_bytes_per_second: must be <= egress_bytes_per_second (1000), "
       "got 65536"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<node::config::NodeConfig> loaded = ParseConfig(c.file, "t.conf", false);
    ASSERT_FALSE(loaded.ok()) << c.file;
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string from_file = StripFileLine(std::string(loaded.status().message()));
    const grpc::Status live = c.live();
    EXPECT_EQ(live.error_code(), StatusCode::INVALID_ARGUMENT) << live.error_message();
    EXPECT_EQ(live.error_message(), c.expect);
    EXPECT_EQ(from_file, c.expect) << loaded.status().message();
  }

  // Every refused update changed nothing: the node still runs its loaded settings.
  absl::StatusOr<std::shared_ptr<Partition>> hot = node_->FindPartition("hot");
  ASSERT_TRUE(hot.ok());
  EXPECT_EQ((*hot)->config().pool().max_txs(), 100000u);
  EXPECT_EQ((*hot)->config().share().weight(), 1);
  EXPECT_EQ((*hot)->config().interceptor().stages_size(), 4);
  absl::StatusOr<node::admin::FlowStats> stats = node_->FlowStats("");
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->egress().cap_bytes_per_second(), 0);  // unlimited
}

TEST_F(ConfigValidationTest, LiveUpdateListsEveryProblem) {
  auto r = HotFlow();
  r.mutable_pool()->set_high_water_fraction(2);
  r.mutable_dispatcher()->mutable_lane_weights()->set_bulk(-1);
  r.mutable_pool()->set_max_tx_bytes(1000);
  const grpc::Status s = Flow(r);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "partitions[hot].pool.max_tx_bytes: cannot be changed live (restart with it in the "
            "config), got 1000\n"
            "partitions[hot].dispatcher.lane_weights.bulk: must be > 0, got -1\n"
            "partitions[hot].pool.high_water_fraction: must be in [0.01, 1], got 2");
}

TEST_F(ConfigValidationTest, ALosslessUpdateOfAPartitionThatIsNotLosslessIsRefused) {
  auto r = HotFlow();
  r.mutable_lossless()->set_drain_bytes_per_second(1000);
  const grpc::Status s = Flow(r);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "partitions[hot].lossless: the partition is not lossless");
}

// (On "cold": the tests above expect "hot" as loaded.)
TEST_F(ConfigValidationTest, ValidUpdatesStillApply) {
  node::admin::UpdatePartitionFlowRequest r;
  r.set_partition("cold");
  r.mutable_pool()->set_max_per_sender(500);
  const grpc::Status flow = Flow(r);
  ASSERT_TRUE(flow.ok()) << flow.error_message();
  absl::StatusOr<std::shared_ptr<Partition>> cold = node_->FindPartition("cold");
  ASSERT_TRUE(cold.ok());
  EXPECT_EQ((*cold)->config().pool().max_per_sender(), 500u);
  // An arbiter entry's ceiling of 0 reads as 1, as in a config file.
  node::admin::UpdateArbiterRequest a;
  AddShare(&a, "cold", 2, 0.1, 0);
  const grpc::Status arbiter = Arbiter(a);
  ASSERT_TRUE(arbiter.ok()) << arbiter.error_message();
  EXPECT_EQ((*cold)->config().share().ceiling_fraction(), 1);
  EXPECT_EQ((*cold)->config().share().weight(), 2);
}

// Adaptive lane weights turned on live reach the partition's dispatcher (each lane's target and
// ceiling in its stats), with the defaults for lanes the update leaves out; off puts every lane's
// scheduling weight back to its configured one.
TEST_F(ConfigValidationTest, AdaptiveLaneWeightsApplyLive) {
  absl::StatusOr<std::shared_ptr<Partition>> cold = node_->FindPartition("cold");
  ASSERT_TRUE(cold.ok());
  auto lane = [&](const std::string& name) {
    const node::admin::PartitionFlowStats stats = (*cold)->FlowStats();
    for (const node::admin::LaneStats& l : stats.lanes()) {
      if (l.name() == name) return l;
    }
    ADD_FAILURE() << "no lane " << name;
    return node::admin::LaneStats();
  };
  EXPECT_EQ(lane("consensus").delay_target_ms(), 0);  // off by default
  EXPECT_FALSE((*cold)->config().dispatcher().adaptive_weights().enabled());

  node::admin::UpdatePartitionFlowRequest r;
  r.set_partition("cold");
  auto* a = r.mutable_dispatcher()->mutable_adaptive_weights();
  a->set_enabled(true);
  a->mutable_client()->set_target_p99_ms(40);
  a->mutable_client()->set_max_weight(10);
  const grpc::Status on = Flow(r);
  ASSERT_TRUE(on.ok()) << on.error_message();
  const double consensus_weight = (*cold)->config().dispatcher().lane_weights().consensus();
  EXPECT_EQ(lane("consensus").delay_target_ms(), kDefaultConsensusDelayTargetMs);
  EXPECT_EQ(lane("consensus").max_weight(), 8 * consensus_weight);
  EXPECT_EQ(lane("tick").delay_target_ms(), kDefaultConsensusDelayTargetMs);
  EXPECT_EQ(lane("client").delay_target_ms(), 40);
  EXPECT_EQ(lane("client").max_weight(), 10);
  EXPECT_EQ(lane("bulk").delay_target_ms(), 0);
  EXPECT_TRUE((*cold)->config().dispatcher().adaptive_weights().enabled());

  a->Clear();
  a->set_enabled(false);
  const grpc::Status off = Flow(r);
  ASSERT_TRUE(off.ok()) << off.error_message();
  EXPECT_EQ(lane("client").delay_target_ms(), 0);
  EXPECT_EQ(lane("client").effective_weight(), lane("client").weight());
}

// Config files name a partition by position where its name cannot identify it.
TEST(ConfigPathTest, RepeatedOrInvalidNamesUsePositions) {
  const std::string text =
      "partitions { id: 1 name: \"a\" }\n"
      "partitions { id: 2 name: \"a\" share { weight: -1 } }\n"
      "partitions { id: 3 name: \"b c\" share { weight: -1 } }\n"
      "partitions { id: 4 name: \"7\" share { weight: -1 } }\n";
  absl::StatusOr<node::config::NodeConfig> config = ParseConfig(text, "p.conf", false);
  ASSERT_FALSE(config.ok());
  const std::string msg(config.status().message());
  EXPECT_THAT(msg, HasSubstr("p.conf:2: partitions[1].share.weight: must be > 0, got -1"));
  EXPECT_THAT(msg, HasSubstr("p.conf:2: partitions[1].name: repeats partition name \"a\""));
  EXPECT_THAT(msg, HasSubstr("p.conf:3: partitions[2].share.weight: must be > 0, got -1"));
  EXPECT_THAT(msg, HasSubstr("p.conf:4: partitions[3].share.weight: must be > 0, got -1"));
}

TEST(ConfigPathTest, LineOfFieldResolvesNames) {
  const std::string text =
      "partitions { id: 1 name: \"hot\" }\n"
      "partitions {\n"
      "  id: 2\n"
      "  name: \"steady\"\n"
      "  pool { max_txs: 5 }\n"
      "}\n";
  EXPECT_EQ(LineOfField(text, "partitions[steady].pool.max_txs"), 5);
  EXPECT_EQ(LineOfField(text, "partitions[1].pool.max_txs"), 5);
  EXPECT_EQ(LineOfField(text, "partitions[hot].id"), 1);
  EXPECT_EQ(LineOfField(text, "partitions[nope].id"), 0);
}

TEST(ConfigValidatorTest, EachValidatorReportsEveryProblemUnderItsPath) {
  node::config::PoolConfig pool = DefaultNodeConfig().partitions(0).pool();
  pool.set_max_txs(0);
  pool.set_ttl_seconds(0);
  std::vector<ConfigProblem> problems = ValidatePoolConfig(pool, "x.pool");
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_EQ(problems[0].path, "x.pool.max_txs");
  EXPECT_EQ(problems[0].message, "must be >= 1, got 0");
  EXPECT_EQ(problems[1].path, "x.pool.max_per_sender");  // 1000 > max_txs 0
  EXPECT_EQ(problems[2].path, "x.pool.ttl_seconds");

  node::flowctl::StageChainConfig empty;
  problems = ValidateStageChainConfig(empty, "x.interceptor");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].path, "x.interceptor.stages");
  EXPECT_EQ(problems[0].message, "must list at least one stage");

  // Zero would mean "the default" in a file (ApplyDefaults fills it); after that it is an error.
  node::config::WatchConfig watch;
  problems = ValidateWatchConfig(watch, "x.watch");
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_EQ(problems[0].path, "x.watch.max_watchers");
  EXPECT_EQ(problems[0].message, "must be >= 1, got 0");
  EXPECT_EQ(problems[1].path, "x.watch.max_buffered_blocks");
  EXPECT_EQ(problems[2].path, "x.watch.max_buffered_bytes");
  EXPECT_EQ(problems[2].message, "must be >= 65536, got 0");

  EXPECT_TRUE(ValidatePartitionConfig(DefaultNodeConfig().partitions(0), "p").empty());
  EXPECT_EQ(ProblemsToStatus({{"a.b", "bad"}, {"c", "worse"}}).message(), "a.b: bad\nc: worse");
  EXPECT_TRUE(ProblemsToStatus({}).ok());
}

}  // namespace
}  // namespace runtime::grpc_test
