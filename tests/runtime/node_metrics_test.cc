// Pure pieces of the services: metric families from a stats snapshot, the constant-time token
// comparison and the wait-for-commit timeout rule.
#include "runtime/node_metrics.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "flowctl/histogram.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "runtime/admin_service.h"
#include "runtime/client_service.h"
#include "runtime/latency_summary.h"

namespace runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Render(const node::admin::NodeStatus& status, const node::admin::FlowStats& stats) {
  return prometheus::TextSerializer().Serialize(NodeMetricFamilies(status, stats));
}

TEST(NodeMetricsTest, ExportsEveryFigureWithLabels) {
  node::admin::NodeStatus status;
  status.set_node_id("ab");
  status.set_version("1.2.3");
  status.set_peers_connected(2);
  status.set_consensus_blocks_per_second(48);
  status.set_consensus_blocks_per_second_ceiling(64);
  status.mutable_block_budget()->set_queueing_delay_ms(7.5);
  status.mutable_block_budget()->set_lowered(2);
  status.mutable_block_budget()->set_raised(5);
  status.set_partitions_with_work(3);
  auto* ps = status.add_partitions();
  ps->set_name("hot");
  ps->set_height(42);
  ps->set_earliest_height(17);
  ps->set_view_changes(3);
  ps->set_consensus_state("VIEW_CHANGE");
  auto* admission = status.mutable_admission();
  admission->set_enabled(true);
  admission->set_congested(true);
  admission->set_episodes(2);
  auto* ap = admission->add_partitions();
  ap->set_name("hot");
  ap->set_admit_fraction(0.25);
  ap->set_local_admit_fraction(0.5);
  ap->set_peers_cutting(2);
  ap->set_refused(31);
  ap->set_consensus_delay_ms(80);
  admission->set_cpu_pressure_percent(41.5);
  admission->set_measured_allocation(true);
  ap->set_cpu_cores(0.125);
  ap->set_allocation_cores(0.0625);
  ap->set_contending(true);

  node::admin::FlowStats stats;
  auto* p = stats.add_partitions();
  p->set_name("hot");
  p->set_block_interval_ms(31.25);
  p->set_cpu_nanos(2'500'000'000);
  p->set_overload_refusals(17);
  p->set_fetched_txs_checked(4);
  p->set_fetched_txs_certified(96);
  auto* stage = p->add_stages();
  stage->set_name("rate");
  stage->set_kind("rate");
  stage->set_admitted(10);
  stage->set_rejected(5);
  auto* read_stage = p->add_read_stages();
  read_stage->set_name("read_rate");
  read_stage->set_kind("rate");
  read_stage->set_admitted(30);
  read_stage->set_rejected(12);
  auto* lane = p->add_lanes();
  lane->set_name("consensus");
  lane->set_depth_messages(7);
  lane->set_dropped_full(4);
  lane->set_cpu_nanos(2'000'000'000);
  lane->set_effective_weight(24);
  lane->set_delay_target_ms(5);
  lane->set_window_delay_ms(12.5);
  lane->set_weight_raises(3);
  lane->set_weight_lowers(1);
  p->mutable_pool()->set_txs(99);
  p->mutable_spill()->set_disk_bytes(1234);
  p->mutable_spill()->set_disk_budget_bytes(4096);
  p->mutable_spill()->set_memory_budget_bytes(8192);
  p->mutable_spill()->set_refused_disk_budget(6);
  p->mutable_disk()->set_share(2048);
  p->mutable_cpu()->set_share(1.5);
  p->mutable_commit_latency()->set_count(8);
  p->mutable_commit_latency()->set_p99_us(250'000);
  p->mutable_consensus_rounds()->mutable_commit()->set_count(5);
  p->mutable_consensus_rounds()->mutable_apply()->set_count(6);
  p->mutable_consensus_rounds()->set_slow_rounds(2);
  p->mutable_consensus_rounds()->mutable_interval()->set_count(7);
  p->set_committed_txs(77);
  p->set_commit_watchers(3);
  p->set_commit_watchers_cut_slow(2);
  p->mutable_retry_hints()->set_commit_txs_per_second(812.5);
  p->mutable_retry_hints()->set_pool_retry_after_ms(350);
  p->mutable_retry_hints()->set_client_lane_retry_after_ms(4);
  p->mutable_retry_hints()->set_tickets_issued(40);
  p->mutable_retry_hints()->set_tickets_redeemed(31);
  p->mutable_retry_hints()->set_reserved_txs(6);
  auto* channel = stats.mutable_egress()->add_channels();
  channel->set_channel("CONSENSUS");
  channel->set_bytes_sent(555);

  const std::string text = Render(status, stats);
  EXPECT_THAT(text, HasSubstr("noded_info{node_id=\"ab\",version=\"1.2.3\"} 1"));
  EXPECT_THAT(text, HasSubstr("noded_peers_connected 2"));
  EXPECT_THAT(text, HasSubstr("noded_partition_height{partition=\"hot\"} 42"));
  EXPECT_THAT(text, HasSubstr("noded_partition_earliest_height{partition=\"hot\"} 17"));
  EXPECT_THAT(text, HasSubstr("noded_view_changes_total{partition=\"hot\"} 3"));
  EXPECT_THAT(text, HasSubstr("noded_consensus_state{partition=\"hot\",state=\"VIEW_CHANGE\"} 1"));
  EXPECT_THAT(text, HasSubstr("noded_consensus_state{partition=\"hot\",state=\"NORMAL\"} 0"));
  EXPECT_THAT(
      text,
      HasSubstr("noded_stage_admitted_total{partition=\"hot\",stage=\"rate\",kind=\"rate\"} 10"));
  EXPECT_THAT(
      text,
      HasSubstr("noded_stage_rejected_total{partition=\"hot\",stage=\"rate\",kind=\"rate\"} 5"));
  EXPECT_THAT(text,
              HasSubstr("noded_read_stage_rejected_total{partition=\"hot\",stage=\"read_rate\","
                        "kind=\"rate\"} 12"));
  EXPECT_THAT(text, HasSubstr("noded_lane_depth_messages{partition=\"hot\",lane=\"consensus\"} 7"));
  EXPECT_THAT(
      text,
      HasSubstr(
          "noded_lane_dropped_total{partition=\"hot\",lane=\"consensus\",reason=\"full\"} 4"));
  EXPECT_THAT(text,
              HasSubstr("noded_lane_cpu_seconds_total{partition=\"hot\",lane=\"consensus\"} 2"));
  EXPECT_THAT(text,
              HasSubstr("noded_lane_effective_weight{partition=\"hot\",lane=\"consensus\"} 24"));
  EXPECT_THAT(text,
              HasSubstr("noded_lane_delay_target_seconds{partition=\"hot\",lane=\"consensus\"}"
                        " 0.005"));
  EXPECT_THAT(text,
              HasSubstr("noded_lane_window_delay_seconds{partition=\"hot\",lane=\"consensus\"}"
                        " 0.0125"));
  EXPECT_THAT(text,
              HasSubstr("noded_lane_weight_changes_total{partition=\"hot\",lane=\"consensus\","
                        "direction=\"up\"} 3"));
  EXPECT_THAT(text,
              HasSubstr("noded_lane_weight_changes_total{partition=\"hot\",lane=\"consensus\","
                        "direction=\"down\"} 1"));
  EXPECT_THAT(text, HasSubstr("noded_block_budget_blocks_per_second 48"));
  EXPECT_THAT(text, HasSubstr("noded_block_budget_ceiling_blocks_per_second 64"));
  EXPECT_THAT(text, HasSubstr("noded_block_budget_queueing_delay_seconds 0.0075"));
  EXPECT_THAT(text, HasSubstr("noded_block_budget_lowered_total 2"));
  EXPECT_THAT(text, HasSubstr("noded_block_budget_raised_total 5"));
  EXPECT_THAT(text, HasSubstr("noded_block_budget_partitions_with_work 3"));
  EXPECT_THAT(text, HasSubstr("noded_partition_block_interval_seconds{partition=\"hot\"} 0.03125"));
  EXPECT_THAT(text, HasSubstr("noded_node_admission_congested 1"));
  EXPECT_THAT(text, HasSubstr("noded_node_admission_episodes_total 2"));
  EXPECT_THAT(text, HasSubstr("noded_node_admission_fraction{partition=\"hot\"} 0.25"));
  EXPECT_THAT(text, HasSubstr("noded_node_admission_refused_total{partition=\"hot\"} 31"));
  EXPECT_THAT(text, HasSubstr("noded_node_admission_local_fraction{partition=\"hot\"} 0.5"));
  EXPECT_THAT(text, HasSubstr("noded_node_admission_peers_cutting{partition=\"hot\"} 2"));
  EXPECT_THAT(text, HasSubstr("noded_node_admission_cpu_cores{partition=\"hot\"} 0.125"));
  EXPECT_THAT(text, HasSubstr("noded_node_admission_cpu_pressure_percent 41.5"));
  EXPECT_THAT(text, HasSubstr("noded_node_admission_measured_allocation 1"));
  EXPECT_THAT(text, HasSubstr("noded_node_admission_allocation_cores{partition=\"hot\"} 0.0625"));
  EXPECT_THAT(text, HasSubstr("noded_node_admission_contending{partition=\"hot\"} 1"));
  EXPECT_THAT(text, HasSubstr("noded_partition_cpu_seconds_total{partition=\"hot\"} 2.5"));
  EXPECT_THAT(text, HasSubstr("noded_partition_overload_refusals_total{partition=\"hot\"} 17"));
  EXPECT_THAT(text, HasSubstr("noded_partition_fetched_txs_total{partition=\"hot\",admitted="
                              "\"checked\"} 4"));
  EXPECT_THAT(text, HasSubstr("noded_partition_fetched_txs_total{partition=\"hot\",admitted="
                              "\"certified\"} 96"));
  EXPECT_THAT(text,
              HasSubstr("noded_node_admission_consensus_delay_seconds{partition=\"hot\"} 0.08"));
  EXPECT_THAT(text, HasSubstr("noded_pool_txs{partition=\"hot\"} 99"));
  EXPECT_THAT(text, HasSubstr("noded_spill_disk_bytes{partition=\"hot\"} 1234"));
  EXPECT_THAT(text, HasSubstr("noded_spill_disk_budget_bytes{partition=\"hot\"} 4096"));
  EXPECT_THAT(text, HasSubstr("noded_spill_memory_budget_bytes{partition=\"hot\"} 8192"));
  EXPECT_THAT(text, HasSubstr("noded_spill_refused_total{partition=\"hot\"} 6"));
  EXPECT_THAT(text, HasSubstr("noded_arbiter_share{partition=\"hot\",resource=\"disk\"} 2048"));
  EXPECT_THAT(text, HasSubstr("noded_arbiter_share{partition=\"hot\",resource=\"cpu\"} 1.5"));
  EXPECT_THAT(text, HasSubstr("noded_commit_latency_seconds_count{partition=\"hot\"} 8"));
  EXPECT_THAT(text, HasSubstr("# TYPE noded_commit_latency_seconds histogram"));
  EXPECT_THAT(text, HasSubstr("# TYPE noded_consensus_phase_seconds histogram"));
  EXPECT_THAT(text, HasSubstr("noded_consensus_slow_rounds_total{partition=\"hot\"} 2"));
  EXPECT_THAT(text, HasSubstr("noded_consensus_block_interval_seconds_count{partition=\"hot\"} 7"));
  EXPECT_THAT(text, Not(HasSubstr("phase=\"interval\"")));
  EXPECT_THAT(
      text, HasSubstr("noded_consensus_phase_seconds_count{partition=\"hot\",phase=\"commit\"} 5"));
  EXPECT_THAT(
      text, HasSubstr("noded_consensus_phase_seconds_count{partition=\"hot\",phase=\"apply\"} 6"));
  EXPECT_THAT(text, HasSubstr("noded_committed_txs_total{partition=\"hot\"} 77"));
  EXPECT_THAT(text, HasSubstr("noded_egress_bytes_sent_total{channel=\"CONSENSUS\"} 555"));
  EXPECT_THAT(text, HasSubstr("# TYPE noded_committed_txs_total counter"));
  EXPECT_THAT(text, HasSubstr("# TYPE noded_pool_txs gauge"));
  EXPECT_THAT(text, HasSubstr("noded_commit_watchers{partition=\"hot\"} 3"));
  EXPECT_THAT(text, HasSubstr("noded_commit_watchers_cut_slow_total{partition=\"hot\"} 2"));
  EXPECT_THAT(text, HasSubstr("# TYPE noded_commit_watchers_cut_slow_total counter"));
  EXPECT_THAT(text,
              HasSubstr("noded_commit_rate_measured_txs_per_second{partition=\"hot\"} 812.5"));
  EXPECT_THAT(text,
              HasSubstr("noded_retry_after_seconds{partition=\"hot\",refusal=\"pool\"} 0.35"));
  EXPECT_THAT(
      text,
      HasSubstr("noded_retry_after_seconds{partition=\"hot\",refusal=\"client_lane\"} 0.004"));
  EXPECT_THAT(text,
              HasSubstr("noded_retry_tickets_total{partition=\"hot\",outcome=\"issued\"} 40"));
  EXPECT_THAT(text,
              HasSubstr("noded_retry_tickets_total{partition=\"hot\",outcome=\"redeemed\"} 31"));
  EXPECT_THAT(text, HasSubstr("noded_retry_reserved_txs{partition=\"hot\"} 6"));
}

// Latencies go out as Prometheus histograms built from the node's own histograms: fixed buckets
// from 100 us to 60 s, cumulative, a +Inf bucket equal to the count, and the sum; the quantile
// gauges of earlier versions are gone.
TEST(NodeMetricsTest, LatenciesAreHistogramsWithFixedBuckets) {
  flowctl::Histogram commits;
  commits.Record(50'000);          // 50 us: below the first bound
  commits.Record(200'000);         // 200 us: in (100 us, 250 us]
  commits.Record(3'000'000);       // 3 ms: in (2.5 ms, 5 ms]
  commits.Record(90'000'000'000);  // 90 s: above the last bound, +Inf only
  node::admin::FlowStats stats;
  auto* p = stats.add_partitions();
  p->set_name("hot");
  *p->mutable_commit_latency() = LatencySummaryOf(commits.Snapshot());
  p->add_lanes()->set_name("consensus");
  stats.mutable_egress()->add_channels()->set_channel("SYNC");

  const std::string text = Render(node::admin::NodeStatus(), stats);
  const std::string b = "noded_commit_latency_seconds_bucket{partition=\"hot\",le=";
  EXPECT_THAT(text, HasSubstr(b + "\"0.0001\"} 1"));
  EXPECT_THAT(text, HasSubstr(b + "\"0.00025\"} 2"));
  EXPECT_THAT(text, HasSubstr(b + "\"0.0025\"} 2"));
  EXPECT_THAT(text, HasSubstr(b + "\"0.005\"} 3"));
  EXPECT_THAT(text, HasSubstr(b + "\"60\"} 3"));
  EXPECT_THAT(text, HasSubstr(b + "\"+Inf\"} 4"));
  EXPECT_THAT(text, HasSubstr("noded_commit_latency_seconds_count{partition=\"hot\"} 4"));
  for (const auto& family : NodeMetricFamilies(node::admin::NodeStatus(), stats)) {
    if (family.name != "noded_commit_latency_seconds") continue;
    ASSERT_EQ(family.metric.size(), 1u);
    EXPECT_NEAR(family.metric[0].histogram.sample_sum, 90.00325, 1e-9);
  }
  for (const char* name :
       {"noded_commit_latency_seconds", "noded_stage_decision_seconds",
        "noded_lane_queueing_delay_seconds", "noded_egress_queueing_delay_seconds"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("# TYPE ", name, " histogram"))) << name;
  }
  EXPECT_THAT(text, Not(HasSubstr("quantile=")));
}

TEST(NodeMetricsTest, RefusalsPerPeerAndReason) {
  node::admin::ListPeersResponse peers;
  auto* a = peers.add_peers();
  a->set_node_id("aa");
  a->mutable_refused()->set_bad_signature(7);
  a->mutable_refused()->set_unknown_partition(2);
  a->mutable_refused()->set_bad_frame(3);
  a->set_link_stalls(4);
  a->set_rtt_ms(2.5);
  peers.add_peers()->set_node_id("bb");
  const std::string text = prometheus::TextSerializer().Serialize(
      NodeMetricFamilies(node::admin::NodeStatus(), node::admin::FlowStats(), peers));
  EXPECT_THAT(text, HasSubstr("# TYPE noded_peer_messages_refused_total counter"));
  EXPECT_THAT(text, HasSubstr("noded_peer_link_stalls_total{peer=\"aa\"} 4"));
  EXPECT_THAT(text, HasSubstr("noded_peer_rtt_seconds{peer=\"aa\"} 0.0025"));
  EXPECT_THAT(text, HasSubstr("noded_peer_link_stalls_total{peer=\"bb\"} 0"));
  EXPECT_THAT(text,
              HasSubstr("noded_peer_messages_refused_total{peer=\"aa\",reason=\"bad_frame\"} 3"));
  EXPECT_THAT(
      text, HasSubstr("noded_peer_messages_refused_total{peer=\"aa\",reason=\"bad_signature\"} 7"));
  EXPECT_THAT(
      text,
      HasSubstr("noded_peer_messages_refused_total{peer=\"aa\",reason=\"unknown_partition\"} 2"));
  EXPECT_THAT(
      text, HasSubstr("noded_peer_messages_refused_total{peer=\"bb\",reason=\"bad_signature\"} 0"));
}

TEST(NodeMetricsTest, OneFamilyPerNameAcrossPartitions) {
  node::admin::NodeStatus status;
  node::admin::FlowStats stats;
  stats.add_partitions()->set_name("a");
  stats.add_partitions()->set_name("b");
  int pool_families = 0;
  for (const auto& family : NodeMetricFamilies(status, stats)) {
    if (family.name == "noded_pool_txs") {
      ++pool_families;
      EXPECT_EQ(family.metric.size(), 2u);
    }
  }
  EXPECT_EQ(pool_families, 1);
}

TEST(ConstantTimeEqualsTest, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("Bearer abc", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer abd", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer ab", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer abcd", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals("", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals(std::string("Bearer abc\0", 11), "Bearer abc"));
}

TEST(WaitTimeoutTest, ExplicitDeadlineDefaultAndCap) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  const absl::Time never = absl::FromUnixSeconds(int64_t{1} << 40);
  EXPECT_EQ(ClientServiceImpl::WaitTimeout(2500, now, never), absl::Milliseconds(2500));
  EXPECT_EQ(ClientServiceImpl::WaitTimeout(600000, now, never), kMaxWaitTimeout);
  EXPECT_EQ(ClientServiceImpl::WaitTimeout(0, now, never), kDefaultWaitTimeout);
  EXPECT_EQ(ClientServiceImpl::WaitTimeout(0, now, now + absl::Seconds(3)), absl::Seconds(3));
  EXPECT_EQ(ClientServiceImpl::WaitTimeout(0, now, now + absl::Seconds(300)), kMaxWaitTimeout);
  EXPECT_EQ(ClientServiceImpl::WaitTimeout(0, now, now - absl::Seconds(1)), absl::ZeroDuration());
}

}  // namespace
}  // namespace runtime
