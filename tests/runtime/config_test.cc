#include "runtime/config.h"
#include "runtime/config_validation.h"

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace runtime {
namespace {

using ::testing::HasSubstr;

TEST(ConfigTest, DefaultIsValidWithTwoPartitionsOnLoopback) {
  const node::config::NodeConfig config = DefaultNodeConfig();
  EXPECT_TRUE(ValidateNodeConfig(config).empty());
  ASSERT_EQ(config.partitions_size(), 2);
  EXPECT_EQ(config.partitions(0).name(), "hot");
  EXPECT_EQ(config.partitions(1).name(), "steady");
  EXPECT_TRUE(absl::StartsWith(config.client_listen(), "127.0.0.1:"));
  EXPECT_TRUE(absl::StartsWith(config.admin_listen(), "127.0.0.1:"));
  EXPECT_EQ(config.data_dir(), "./data");
  EXPECT_EQ(config.partitions(0).interceptor().stages_size(), 4);
  EXPECT_EQ(config.resources().consensus_blocks_per_second(), kDefaultConsensusBlocksPerSecond);
  EXPECT_EQ(config.resources().ledger_write_buffer_bytes(), kDefaultLedgerWriteBufferBytes);
}

// Unset is the default budget; an explicit 0 turns it off and stays 0.
TEST(ConfigTest, AnExplicitZeroBlockBudgetIsKeptAsNoBudget) {
  absl::StatusOr<node::config::NodeConfig> off =
      ParseConfig("resources { consensus_blocks_per_second: 0 }", "off.conf", false);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->resources().consensus_blocks_per_second(), 0u);
  absl::StatusOr<node::config::NodeConfig> unset = ParseConfig("", "unset.conf", false);
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_EQ(unset->resources().consensus_blocks_per_second(), 64u);
}

// The block budget adapts by default (16 blocks/s at least, a 5 ms queueing target);
// explicit values are kept.
TEST(ConfigTest, BlockBudgetAdaptationDefaultsAndExplicitValues) {
  absl::StatusOr<node::config::NodeConfig> unset = ParseConfig("", "unset.conf", false);
  ASSERT_TRUE(unset.ok()) << unset.status();
  const auto& a = unset->resources().block_budget_adaptation();
  EXPECT_TRUE(a.enabled());
  EXPECT_EQ(a.min_blocks_per_second(), 16u);
  EXPECT_EQ(a.queueing_delay_target_ms(), 5);
  absl::StatusOr<node::config::NodeConfig> set = ParseConfig(
      "resources { block_budget_adaptation { enabled: false min_blocks_per_second: 4 "
      "queueing_delay_target_ms: 25 } }",
      "set.conf", false);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_FALSE(set->resources().block_budget_adaptation().enabled());
  EXPECT_EQ(set->resources().block_budget_adaptation().min_blocks_per_second(), 4u);
  EXPECT_EQ(set->resources().block_budget_adaptation().queueing_delay_target_ms(), 25);
}

// Node-wide admission, its measured shares, agreement and calm default on; explicit values are
// kept (0 ms of calm: exit_ticks alone). An advisory arbiter turns admission off by default, and a
// tick slower than 500 ms the agreement, so neither setting alone makes a config invalid.
TEST(ConfigTest, NodeAdmissionDefaultsAndExplicitValues) {
  absl::StatusOr<node::config::NodeConfig> unset = ParseConfig("", "unset.conf", false);
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_TRUE(unset->resources().node_admission().enabled());
  EXPECT_TRUE(unset->resources().node_admission().measured_shares());
  EXPECT_EQ(unset->resources().node_admission().exit_calm_ms(), 3000u);
  EXPECT_TRUE(unset->resources().node_admission().agree_with_peers());
  EXPECT_EQ(unset->resources().node_admission().cpu_pressure_percent(), 10);
  EXPECT_EQ(unset->resources().node_admission().measured_share_slack(), 2);
  absl::StatusOr<node::config::NodeConfig> set = ParseConfig(
      "resources { node_admission { measured_shares: false exit_calm_ms: 0 agree_with_peers: false "
      "} }",
      "set.conf", false);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_FALSE(set->resources().node_admission().measured_shares());
  EXPECT_EQ(set->resources().node_admission().exit_calm_ms(), 0u);
  EXPECT_FALSE(set->resources().node_admission().agree_with_peers());

  absl::StatusOr<node::config::NodeConfig> advisory =
      ParseConfig("resources { arbiter_advisory: true }", "advisory.conf", false);
  ASSERT_TRUE(advisory.ok()) << advisory.status();
  EXPECT_FALSE(advisory->resources().node_admission().enabled());
  absl::StatusOr<node::config::NodeConfig> slow_tick =
      ParseConfig("resources { arbiter_tick_ms: 1000 }", "slow_tick.conf", false);
  ASSERT_TRUE(slow_tick.ok()) << slow_tick.status();
  EXPECT_TRUE(slow_tick->resources().node_admission().enabled());
  EXPECT_FALSE(slow_tick->resources().node_admission().agree_with_peers());
  // Asked for explicitly, either pair is still refused, naming the field.
  absl::StatusOr<node::config::NodeConfig> both = ParseConfig(
      "resources { arbiter_advisory: true node_admission { enabled: true } }", "both.conf", false);
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("arbiter_advisory"), std::string::npos) << both.status();
  absl::StatusOr<node::config::NodeConfig> agree =
      ParseConfig("resources { arbiter_tick_ms: 1000 node_admission { agree_with_peers: true } }",
                  "agree.conf", false);
  ASSERT_FALSE(agree.ok());
  EXPECT_NE(agree.status().message().find("agree_with_peers"), std::string::npos) << agree.status();
}

TEST(ConfigTest, ParsesTextFormatAndAppliesDefaults) {
  absl::StatusOr<node::config::NodeConfig> config = ParseConfig(R"pb(
                                                                  data_dir: "/tmp/n1"
                                                                  partitions {
                                                                    id: 7
                                                                    name: "payments"
                                                                    pool { max_txs: 5000 }
                                                                  }
                                                                )pb",
                                                                "n1.conf", false);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->partitions_size(), 1);
  EXPECT_EQ(config->partitions(0).pool().max_txs(), 5000u);
  EXPECT_EQ(config->partitions(0).pool().max_per_sender(), 1000u);        // default
  EXPECT_EQ(config->partitions(0).watch().max_watchers(), 64u);           // default
  EXPECT_EQ(config->partitions(0).watch().max_buffered_blocks(), 1024u);  // default
  // Reads get a chain of their own by default: 256 in flight, no rate limit.
  const auto& reads = config->partitions(0).read_interceptor();
  ASSERT_EQ(reads.stages_size(), 2);
  EXPECT_EQ(reads.stages(0).name(), "read_in_flight");
  EXPECT_EQ(reads.stages(0).concurrency().max_in_flight(), 256u);
  EXPECT_EQ(reads.stages(1).name(), "read_rate");
  EXPECT_TRUE(reads.stages(1).rate().unlimited());
  EXPECT_FALSE(config->resources().fixed_retry_after());
  EXPECT_EQ(config->key_file(), "/tmp/n1/node.key");
}

TEST(ConfigTest, ErrorsNameFieldAndLine) {
  const std::string text =
      "data_dir: \"/tmp/x\"\n"                   // line 1
      "partitions {\n"                           // line 2
      "  id: 1\n"                                // line 3
      "  name: \"a\"\n"                          // line 4
      "  consensus { checkpoint_interval: 10\n"  // line 5
      "              watermark_window: 15 }\n"   // line 6
      "}\n"                                      // line 7
      "partitions {\n"                           // line 8
      "  id: 1\n"                                // line 9
      "  name: \"b\"\n"                          // line 10
      "  share { weight: -2 }\n"                 // line 11
      "}\n";
  absl::StatusOr<node::config::NodeConfig> config = ParseConfig(text, "bad.conf", false);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(config.status().message());
  EXPECT_THAT(msg, HasSubstr("bad.conf:6: partitions[a].consensus.watermark_window: must be a "
                             "multiple of checkpoint_interval (10)"));
  EXPECT_THAT(msg, HasSubstr("bad.conf:9: partitions[b].id: repeats partition id 1"));
  EXPECT_THAT(msg, HasSubstr("bad.conf:11: partitions[b].share.weight: must be > 0, got -2"));
}

TEST(ConfigTest, SyntaxErrorsGiveLineAndColumn) {
  absl::StatusOr<node::config::NodeConfig> config =
      ParseConfig("data_dir: \"x\"\nno_such_field: 3\n", "typo.conf", false);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("typo.conf:2:"));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("no_such_field"));
}

TEST(ConfigTest, JsonIsAccepted) {
  absl::StatusOr<node::config::NodeConfig> config = ParseConfig(
      R"({"dataDir": "/tmp/j", "partitions": [{"id": 3, "name": "j"}]})", "c.json", true);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->partitions(0).id(), 3u);
  absl::StatusOr<node::config::NodeConfig> bad =
      ParseConfig(R"({"partitions": [{"id": 0, "name": "j"}]})", "c.json", true);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("c.json: partitions[j].id: must be >= 1"));
  EXPECT_FALSE(ParseConfig("{not json", "c.json", true).ok());
}

TEST(ConfigTest, EachRuleRefuses) {
  struct Case {
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {"client_listen: \"nohost\"", "client_listen: must be host:port"},
      {"client_max_streams: 2000000", "client_max_streams: must be <= 1000000, got 2000000"},
      {"client_listen: \"127.0.0.1:7\" admin_listen: \"127.0.0.1:7\"", "admin_listen: must differ"},
      {"peers { address: \"127.0.0.1:1\" public_key_hex: \"zz\" }", "peers[0].public_key_hex"},
      {"resources { cpu_workers: 5000 }", "resources.cpu_workers: must be <= 1024"},
      {"resources { consensus_blocks_per_second: 200000 }",
       "resources.consensus_blocks_per_second: must be <= 100000"},
      {"resources { ledger_write_buffer_bytes: 1000 }",
       "resources.ledger_write_buffer_bytes: must be >= 4194304, got 1000"},
      {"resources { block_budget_adaptation { min_blocks_per_second: 200000 } }",
       "resources.block_budget_adaptation.min_blocks_per_second: must be <= 100000"},
      {"resources { block_budget_adaptation { queueing_delay_target_ms: -1 } }",
       "resources.block_budget_adaptation.queueing_delay_target_ms: must be in (0, 60000], got "
       "-1"},
      {"resources { node_admission { cpu_busy_fraction: 1.5 } }",
       "resources.node_admission.cpu_busy_fraction: must be in (0, 1], got 1.5"},
      {"resources { node_admission { consensus_delay_target_ms: -2 } }",
       "resources.node_admission.consensus_delay_target_ms: must be in (0, 60000], got -2"},
      {"resources { node_admission { exit_ticks: 5000 } }",
       "resources.node_admission.exit_ticks: must be in [1, 1000], got 5000"},
      {"resources { node_admission { exit_calm_ms: 70000 } }",
       "resources.node_admission.exit_calm_ms: must be in [0, 60000], got 70000"},
      {"resources { node_admission { cpu_pressure_percent: 150 } }",
       "resources.node_admission.cpu_pressure_percent: must be in [0, 100], got 150"},
      {"resources { node_admission { measured_share_slack: 0.5 } }",
       "resources.node_admission.measured_share_slack: must be in [1, 16], got 0.5"},
      {"resources { arbiter_tick_ms: 1000 node_admission { agree_with_peers: true } }",
       "resources.node_admission.agree_with_peers: needs arbiter_tick_ms <= 500 (the cuts are "
       "sent to the other replicas on the tick and expire 2 s after the last one), got 1000; "
       "or set agree_with_peers: false"},
      {"resources { arbiter_advisory: true node_admission { enabled: true } }",
       "resources.arbiter_advisory: cannot be used with node_admission.enabled"},
      {"partitions { id: 1 name: \"a\" share { hard_ceiling: true } }",
       "partitions[a].share.hard_ceiling: needs a ceiling_fraction in (0, 1), got 1"},
      {"resources { egress_bytes_per_second: 10 tx_forward_floor_bytes_per_second: 20 }",
       "tx_forward_floor_bytes_per_second: must be <= egress_bytes_per_second"},
      {"partitions { id: 1 name: \"a b\" }", "partitions[0].name: may hold only"},
      {"partitions { id: 1 name: \"a\" share { guarantee_fraction: 0.5 ceiling_fraction: 0.2 } }",
       "ceiling_fraction: must be >= guarantee_fraction"},
      {"partitions { id: 1 name: \"a\" share { guarantee_fraction: 0.7 } } "
       "partitions { id: 2 name: \"b\" share { guarantee_fraction: 0.7 } }",
       "guarantee_fraction sums to 1.4"},
      {"partitions { id: 1 name: \"a\" pool { forward_reserve_fraction: 0.9 } }",
       "forward_reserve_fraction: must be in [0, 0.5]"},
      {"partitions { id: 1 name: \"a\" lossless { enabled: true } }",
       "lossless.drain_bytes_per_second: must be >= 1"},
      {"partitions { id: 1 name: \"a\" interceptor { stages { name: \"x\" } } }",
       "interceptor.stages[0].kind: no stage kind set"},
      {"partitions { id: 1 name: \"a\" dispatcher { lane_weights { bulk: -1 } } }",
       "lane_weights.bulk: must be > 0"},
      {"partitions { id: 1 name: \"a\" consensus { forward_interval_ms: 600 } }",
       "partitions[a].consensus.forward_interval_ms: must be at most a quarter of "
       "view_change_timeout_ms (2000), got 600"},
      {"partitions { id: 1 name: \"a\" watch { max_watchers: 200000 } }",
       "partitions[a].watch.max_watchers: must be <= 100000, got 200000"},
      {"partitions { id: 1 name: \"a\" watch { max_buffered_blocks: 2000000 } }",
       "partitions[a].watch.max_buffered_blocks: must be <= 1000000, got 2000000"},
      {"partitions { id: 1 name: \"a\" watch { max_buffered_bytes: 1000 } }",
       "partitions[a].watch.max_buffered_bytes: must be >= 65536, got 1000"},
      {"partitions { id: 1 name: \"a\" state { retain_blocks: 1063 } }",
       "partitions[a].state.retain_blocks: must be 0 (keep every block) or at least "
       "consensus.snapshot_sync_min_blocks + consensus.watermark_window (1000 + 64), got 1063"},
      {"partitions { id: 1 name: \"a\" state { retain_blocks: 100 } "
       "consensus { snapshot_sync_min_blocks: 18446744073709551615 } }",
       "state.retain_blocks: must be 0 (keep every block) or at least"},
      {"partitions { id: 1 name: \"a\" lossless { enabled: true drain_bytes_per_second: 1000 "
       "segment_bytes: 65536 disk_budget_bytes: 100000 } }",
       "partitions[a].lossless.disk_budget_bytes: must be 0 (none) or at least two segments and "
       "two of the largest txs (131104), got 100000"},
      {"resources { spill_disk_bytes: 200000 } "
       "partitions { id: 1 name: \"a\" lossless { enabled: true drain_bytes_per_second: 1000 "
       "segment_bytes: 65536 } } "
       "partitions { id: 2 name: \"b\" lossless { enabled: true drain_bytes_per_second: 1000 "
       "segment_bytes: 65536 } }",
       "resources.spill_disk_bytes: must be 0 (not divided) or at least the lossless partitions' "
       "smallest budgets together (262208), got 200000"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<node::config::NodeConfig> config = ParseConfig(c.text, "t.conf", false);
    ASSERT_FALSE(config.ok()) << c.text;
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.expect)) << c.text;
  }
}

TEST(ConfigTest, ForwardIntervalUpToAQuarterOfTheViewChangeTimeoutIsAccepted) {
  for (const char* text :
       {"partitions { id: 1 name: \"a\" consensus { forward_interval_ms: 500 } }",
        "partitions { id: 1 name: \"a\" consensus { forward_interval_ms: 0 } }",
        "partitions { id: 1 name: \"a\" consensus { view_change_timeout_ms: 100 } }"}) {
    absl::StatusOr<node::config::NodeConfig> config = ParseConfig(text, "t.conf", false);
    ASSERT_TRUE(config.ok()) << text << ": " << config.status();
  }
  absl::StatusOr<node::config::NodeConfig> config =
      ParseConfig("partitions { id: 1 name: \"a\" }", "t.conf", false);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->partitions(0).consensus().forward_interval_ms(), 20u);
  EXPECT_EQ(config->partitions(0).consensus().slow_round_log_ms(), 1000u);
  config = ParseConfig("partitions { id: 1 name: \"a\" consensus { forward_interval_ms: 0 } }",
                       "t.conf", false);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->partitions(0).consensus().forward_interval_ms(), 0u);  // 0 stays off
  config = ParseConfig("partitions { id: 1 name: \"a\" consensus { slow_round_log_ms: 0 } }",
                       "t.conf", false);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->partitions(0).consensus().slow_round_log_ms(), 0u);  // 0 stays off
}

TEST(ConfigTest, RetainBlocksDownToTheSnapshotBoundIsAccepted) {
  // 1000 + 64 with the default snapshot gap and window; 40 + 8 with smaller ones.
  for (const char* text : {"partitions { id: 1 name: \"a\" state { retain_blocks: 1064 } }",
                           "partitions { id: 1 name: \"a\" state { retain_blocks: 48 } "
                           "consensus { snapshot_sync_min_blocks: 40 checkpoint_interval: 4 "
                           "watermark_window: 8 } }"}) {
    absl::StatusOr<node::config::NodeConfig> config = ParseConfig(text, "t.conf", false);
    ASSERT_TRUE(config.ok()) << text << ": " << config.status();
    EXPECT_GT(config->partitions(0).state().retain_blocks(), 0u);
  }
}

TEST(ConfigTest, SpillDiskBudgetsDownToTwoSegmentsAreAccepted) {
  absl::StatusOr<node::config::NodeConfig> config = ParseConfig(
      "resources { spill_disk_bytes: 262208 } "
      "partitions { id: 1 name: \"a\" lossless { enabled: true drain_bytes_per_second: 1000 "
      "segment_bytes: 65536 disk_budget_bytes: 131104 } } "
      "partitions { id: 2 name: \"b\" lossless { enabled: true drain_bytes_per_second: 1000 "
      "segment_bytes: 65536 } }",
      "t.conf", false);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->partitions(0).lossless().disk_budget_bytes(), 131104u);
  EXPECT_EQ(config->resources().spill_disk_bytes(), 262208u);
}

TEST(ConfigTest, MissingFileIsNotFound) {
  EXPECT_EQ(LoadConfigFile("/nonexistent/noded.conf").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace runtime
