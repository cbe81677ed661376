// Node metrics: every GetFlowStats / GetNodeStatus figure as Prometheus families, built at
// scrape time from the node's own stats (no second set of counters to keep in sync).
//
// Families (all prefixed noded_; labels in braces):
//   node        noded_info{node_id,version}=1, noded_uptime_seconds, noded_peers_connected,
//               noded_peers_configured
//   partition   noded_partition_height, noded_partition_view, noded_view_changes_total,
//               noded_consensus_state{state}=0/1 (NORMAL, VIEW_CHANGE, RECOVERING, HALTED,
//               DIVERGED), noded_partition_paused, noded_partition_lossless,
//               noded_committed_txs_total, noded_commit_latency_seconds and
//               noded_stage_decision_seconds (histograms), all {partition};
//               noded_consensus_phase_seconds (histogram) {partition,phase="cut_wait"|
//               "accept"|"prepare"|"commit"|"apply"}, noded_consensus_block_interval_seconds
//               (histogram), noded_consensus_slow_rounds_total {partition}
//   stages      noded_stage_{admitted,rejected}_total, noded_stage_{current,limit}
//               {partition,stage,kind}; the read chain's: noded_read_stage_{admitted,
//               rejected}_total, noded_read_stage_{current,limit} {partition,stage,kind}
//   lanes       noded_lane_{weight,capacity_messages,capacity_bytes,depth_messages,depth_bytes},
//               noded_lane_{offered,processed}_total, noded_lane_dropped_total{reason="full"},
//               noded_lane_dropped_bytes_total{reason="full"}, noded_lane_cpu_seconds_total,
//               noded_lane_queueing_delay_seconds (histogram) {partition,lane}
//   pool        noded_pool_{txs,bytes,max_txs,max_bytes,above_high_water},
//               noded_pool_{added,rejected_full,expired}_total,
//               noded_commit_rate_measured_txs_per_second, noded_commit_rate_measured {partition},
//               noded_retry_after_seconds {partition,refusal="pool"|"client_lane"}
//   spill       noded_spill_{appended,drained,refused}_total, noded_spill_{memory_bytes,
//               disk_bytes,disk_budget_bytes,memory_budget_bytes,segments,drain_bytes_per_second,
//               drain_measured_bytes_per_second} {partition}
//   arbiter     noded_arbiter_{weight,guarantee,ceiling,demand,share,usage}
//               {partition,resource="cpu"|"memory"|"egress"|"disk"}
//   egress      noded_egress_{cap,tx_forward_floor,tx_forward_derived}_bytes_per_second,
//               noded_egress_{bytes_sent,frames_sent,dropped}_total, noded_egress_queue_bytes,
//               noded_egress_queueing_delay_seconds (histogram) {channel}
//   rpc         noded_rpc_duration_seconds (histogram) {service,method},
//               noded_rpc_handled_total{service,method,code} (runtime/rpc_metrics.h)
// Every latency is a histogram with the fixed buckets of runtime/latency_summary.h (100 us to
// 60 s), so quantiles aggregate across partitions and nodes:
//   histogram_quantile(0.99, sum by (le) (rate(noded_commit_latency_seconds_bucket[1m])))
//
// Thread-safety: the collector calls Node::FlowStats/Status, which are thread-safe. The node must
// outlive the MetricsServer (or at least its last scrape).
//
//   RegisterNodeMetrics(metrics_.get(), this);
#ifndef RUNTIME_NODE_METRICS_H_
#define RUNTIME_NODE_METRICS_H_

#include <string>
#include <utility>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "proto/admin.pb.h"
#include "runtime/metrics.h"

namespace runtime {

class Node;

// Adds a scrape-time collector exporting `node`'s figures (see the file comment).
void RegisterNodeMetrics(MetricsServer* metrics, Node* node);

// One Prometheus histogram sample (seconds) of a LatencySummary's fixed buckets, a +Inf bucket
// equal to its count, and its sum; with `labels` in order. Pure.
prometheus::ClientMetric LatencyHistogramMetric(
    const node::admin::LatencySummary& latency,
    const std::vector<std::pair<std::string, std::string>>& labels);

// The families for one snapshot; pure (exposed for tests).
std::vector<prometheus::MetricFamily> NodeMetricFamilies(
    const node::admin::NodeStatus& status, const node::admin::FlowStats& stats,
    const node::admin::ListPeersResponse& peers = {});

}  // namespace runtime

#endif  // RUNTIME_NODE_METRICS_H_
