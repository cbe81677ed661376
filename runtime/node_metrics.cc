#include "runtime/node_metrics.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_type.h"
#include "runtime/node.h"

namespace runtime {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<std::pair<std::string, std::string>>;

constexpr char kConsensusStates[][12] = {"NORMAL",   "VIEW_CHANGE", "RECOVERING", "HALTED",
                                         "DIVERGED",  // a replica's states
                                         "STOPPED"};  // StopPartition: not running here

// Collects samples into families, one family per name, in first-use order.
class Families {
 public:
  void Gauge(const std::string& name, const std::string& help, const Labels& labels, double value) {
    Add(name, help, MetricType::Gauge, labels).gauge.value = value;
  }
  void Counter(const std::string& name, const std::string& help, const Labels& labels,
               double value) {
    Add(name, help, MetricType::Counter, labels).counter.value = value;
  }
  // LatencySummary (microseconds) as a Prometheus histogram in seconds.
  void Histogram(const std::string& name, const std::string& help, const Labels& labels,
                 const node::admin::LatencySummary& latency) {
    ClientMetric& m = Add(name, help, MetricType::Histogram, {});
    m = LatencyHistogramMetric(latency, labels);
  }

  std::vector<MetricFamily> Take() {
    std::vector<MetricFamily> out;
    out.reserve(order_.size());
    for (const std::string& name : order_) out.push_back(std::move(families_[name]));
    return out;
  }

 private:
  ClientMetric& Add(const std::string& name, const std::string& help, MetricType type,
                    const Labels& labels) {
    auto [it, inserted] = families_.try_emplace(name);
    if (inserted) {
      it->second.name = name;
      it->second.help = help;
      it->second.type = type;
      order_.push_back(name);
    }
    ClientMetric& m = it->second.metric.emplace_back();
    for (const auto& [k, v] : labels) m.label.push_back({k, v});
    return m;
  }

  std::map<std::string, MetricFamily> families_;
  std::vector<std::string> order_;
};

void AddPartitionStatus(const node::admin::PartitionStatus& p, Families* f) {
  const Labels l = {{"partition", p.name()}};
  f->Gauge("noded_partition_height", "Height of the last committed block.", l,
           static_cast<double>(p.height()));
  f->Gauge("noded_partition_earliest_height",
           "Lowest height whose block this node holds (a snapshot install or pruning moves it).", l,
           static_cast<double>(p.earliest_height()));
  f->Gauge("noded_partition_stable_checkpoint",
           "Height of the latest checkpoint this replica holds 2f+1 votes for (low end of its "
           "consensus window).",
           l, static_cast<double>(p.stable_checkpoint()));
  f->Gauge("noded_partition_view", "Current PBFT view.", l, static_cast<double>(p.view()));
  f->Counter("noded_view_changes_total", "View changes since start.", l,
             static_cast<double>(p.view_changes()));
  for (const char* state : kConsensusStates) {
    f->Gauge("noded_consensus_state", "1 for the partition's current consensus state.",
             {{"partition", p.name()}, {"state", state}}, p.consensus_state() == state ? 1 : 0);
  }
  f->Gauge("noded_partition_paused", "1 while paused by the admin API.", l, p.paused() ? 1 : 0);
  f->Gauge("noded_partition_observing",
           "1 while the replica follows the view without voting (observer mode).", l,
           p.observing() ? 1 : 0);
  f->Gauge("noded_partition_lossless", "1 when the partition runs in lossless mode.", l,
           p.lossless() ? 1 : 0);
}

void AddMemoryPressure(const node::admin::MemoryPressureStatus& m, Families* f) {
  f->Gauge("noded_memory_rss_bytes", "Resident memory of the process.", {},
           static_cast<double>(m.rss_bytes()));
  if (m.cgroup_version() > 0) {
    f->Gauge("noded_memory_cgroup_current_bytes",
             "Working set of the node's cgroup: its usage less inactive file cache.", {},
             static_cast<double>(m.cgroup_current_bytes()));
    if (m.cgroup_max_bytes() > 0) {
      f->Gauge("noded_memory_cgroup_max_bytes", "The node's cgroup memory limit.", {},
               static_cast<double>(m.cgroup_max_bytes()));
    }
  }
  if (m.psi_available()) {
    f->Gauge("noded_memory_psi_some_avg10",
             "Percent of the last 10 s in which some task stalled on memory (PSI).", {},
             m.psi_some_avg10());
  }
  f->Gauge("noded_memory_pressure",
           "Memory pressure: the highest of RSS / limit, cgroup current / max, PSI / full scale.",
           {}, m.pressure());
  f->Gauge("noded_memory_pool_scale",
           "Fraction of resources.memory_bytes the arbiter divides under memory pressure.", {},
           m.pool_scale());
  for (const auto& [action, on] : {std::pair{"drop_forwarded", m.drop_forwarded()},
                                   std::pair{"refuse_clients", m.refuse_clients()},
                                   std::pair{"no_cache_borrowing", m.no_cache_borrowing()}}) {
    f->Gauge("noded_memory_action_active", "1 while the memory-pressure action is in force.",
             {{"action", action}}, on ? 1 : 0);
  }
  f->Counter("noded_memory_pressure_refused_total",
             "Client writes refused and peer messages dropped under memory pressure.",
             {{"what", "client_writes"}}, static_cast<double>(m.refused_writes()));
  f->Counter("noded_memory_pressure_refused_total",
             "Client writes refused and peer messages dropped under memory pressure.",
             {{"what", "peer_messages"}}, static_cast<double>(m.dropped_messages()));
}

void AddNodeAdmission(const node::admin::NodeAdmissionStatus& a, Families* f) {
  f->Gauge("noded_node_admission_congested",
           "1 during a congestion episode of the node-wide admission.", {}, a.congested() ? 1 : 0);
  f->Counter("noded_node_admission_episodes_total", "Congestion episodes started.", {},
             static_cast<double>(a.episodes()));
  if (a.has_cpu_pressure_percent()) {
    f->Gauge("noded_node_admission_cpu_pressure_percent",
             "PSI some avg10 of the CPU (the node's cgroup or the machine), as admission read it.",
             {}, a.cpu_pressure_percent());
  }
  f->Gauge("noded_node_admission_measured_allocation",
           "1 when the allocations are measured shares (the CPU contended), 0 when entitlements.",
           {}, a.measured_allocation() ? 1 : 0);
  for (const auto& p : a.partitions()) {
    const Labels l = {{"partition", p.name()}};
    f->Gauge("noded_node_admission_fraction",
             "Share of the partition's client writes the node-wide admission lets through.", l,
             p.admit_fraction());
    f->Gauge("noded_node_admission_local_fraction",
             "The node's own admit fraction for the partition, from its own CPU (sent to the "
             "other replicas).",
             l, p.local_admit_fraction());
    f->Gauge("noded_node_admission_peers_cutting",
             "Other replicas of the partition that cut its client writes now.", l,
             static_cast<double>(p.peers_cutting()));
    f->Counter("noded_node_admission_refused_total",
               "Client write calls refused by the node-wide admission.", l,
               static_cast<double>(p.refused()));
    f->Gauge("noded_node_admission_consensus_delay_seconds",
             "The partition's consensus-lane queueing delay over the last arbiter tick.", l,
             p.consensus_delay_ms() * 1e-3);
    f->Gauge("noded_node_admission_cpu_cores",
             "The partition's CPU (worker pool, client calls, drain), smoothed over 1 s.", l,
             p.cpu_cores());
    f->Gauge("noded_node_admission_contending",
             "1 when the partition wanted more than it was served at the last tick (within 3 s: "
             "refusals for want of room, a client backlog of 1 s, a pool half full, or being "
             "cut), else 0.",
             l, p.contending() ? 1 : 0);
    f->Gauge("noded_node_admission_allocation_cores",
             "The CPU the node-wide admission holds the partition to during an episode.", l,
             p.allocation_cores());
  }
}

void AddShare(const std::string& partition, const std::string& resource,
              const node::admin::ResourceShare& s, Families* f) {
  const Labels l = {{"partition", partition}, {"resource", resource}};
  f->Gauge("noded_arbiter_weight", "Arbiter weight of the partition for the resource.", l,
           s.weight());
  f->Gauge("noded_arbiter_guarantee", "Guaranteed share (cores, bytes or bytes/s).", l,
           s.guarantee());
  f->Gauge("noded_arbiter_ceiling", "Share ceiling (cores, bytes or bytes/s).", l, s.ceiling());
  f->Gauge("noded_arbiter_demand", "Measured demand (cores, bytes or bytes/s).", l, s.demand());
  f->Gauge("noded_arbiter_share", "Share given by the last arbiter tick.", l, s.share());
  f->Gauge("noded_arbiter_usage", "Measured usage (cores, bytes or bytes/s).", l, s.usage());
  f->Gauge("noded_arbiter_limit",
           "Hard limit in force (share.hard_ceiling; cores or bytes/s); 0 = none.", l, s.limit());
  f->Counter("noded_arbiter_limit_holds_total",
             "Times the partition's work was held at its hard limit (CPU: lanes parked until "
             "their budget refilled; egress: a frame waited for the partition's bucket).",
             l, static_cast<double>(s.limit_holds()));
  if (resource == "cpu") {
    f->Counter("noded_arbiter_limited_seconds_total",
               "Time the partition's lanes were held at their hard CPU limit.", l,
               s.limited_seconds());
  }
}

// RocksDB's write backpressure on one of a partition's databases (`db`: "ledger" or
// "consensus_store", named `what` in the help): noded_<db>_writes_stopped,
// noded_<db>_delayed_write_rate_bytes_per_second, noded_<db>_level0_files.
void AddWriteStall(absl::string_view db, absl::string_view what,
                   const node::admin::LedgerWriteStats& writes, const Labels& l, Families* f) {
  f->Gauge(
      absl::StrCat("noded_", db, "_writes_stopped"),
      absl::StrCat("1 while RocksDB stops ", what, "'s writes (flushes or compactions behind)."), l,
      writes.stopped() ? 1 : 0);
  f->Gauge(absl::StrCat("noded_", db, "_delayed_write_rate_bytes_per_second"),
           absl::StrCat("The rate RocksDB delays ", what, "'s writes to (0 while not delayed)."), l,
           static_cast<double>(writes.delayed_write_rate()));
  f->Gauge(absl::StrCat("noded_", db, "_level0_files"),
           absl::StrCat("Table files at level 0 of ", what, "'s RocksDB."), l,
           static_cast<double>(writes.level0_files()));
}

void AddPartitionFlow(const node::admin::PartitionFlowStats& p, Families* f) {
  const std::string& name = p.name();
  const Labels l = {{"partition", name}};
  for (const node::admin::StageStats& s : p.stages()) {
    const Labels sl = {{"partition", name}, {"stage", s.name()}, {"kind", s.kind()}};
    f->Counter("noded_stage_admitted_total", "Requests admitted by the interceptor stage.", sl,
               static_cast<double>(s.admitted()));
    f->Counter("noded_stage_rejected_total", "Requests rejected by the interceptor stage.", sl,
               static_cast<double>(s.rejected()));
    f->Gauge("noded_stage_current", "Stage value now (in-flight, tokens, gate open).", sl,
             s.current());
    f->Gauge("noded_stage_limit", "Stage limit (max in-flight, rate).", sl, s.limit());
    for (const auto& [gauge, value] : s.gauges()) {
      Labels gl = sl;
      gl.push_back({"figure", gauge});
      f->Gauge("noded_stage_figure",
               "Every live figure of the stage by name (e.g. an adaptive "
               "stage's limit, in_flight, baseline_latency_ms, window_latency_ms).",
               gl, value);
    }
  }
  for (const node::admin::StageStats& s : p.read_stages()) {
    const Labels sl = {{"partition", name}, {"stage", s.name()}, {"kind", s.kind()}};
    f->Counter("noded_read_stage_admitted_total", "Reads admitted by the read-chain stage.", sl,
               static_cast<double>(s.admitted()));
    f->Counter("noded_read_stage_rejected_total", "Reads rejected by the read-chain stage.", sl,
               static_cast<double>(s.rejected()));
    f->Gauge("noded_read_stage_current", "Read stage value now (in-flight, tokens).", sl,
             s.current());
    f->Gauge("noded_read_stage_limit", "Read stage limit (max in-flight, rate).", sl, s.limit());
  }
  {
    const node::admin::ReadHoldStats& h = p.read_hold();
    const Labels pl = {{"partition", name}};
    for (const auto& [outcome, value] :
         {std::pair<const char*, uint64_t>{"answered", h.answered()}, {"expired", h.expired()}}) {
      Labels ol = pl;
      ol.emplace_back("outcome", outcome);
      f->Counter("noded_read_hold_total",
                 "Reads that waited for the read chain (read_hold), by outcome: answered once "
                 "admitted, or refused when their wait ran out.",
                 ol, static_cast<double>(value));
    }
    f->Counter("noded_read_hold_full_total",
               "Reads refused at once because read_hold.max_waiting reads were waiting.", pl,
               static_cast<double>(h.full()));
    f->Gauge("noded_read_hold_waiting", "Reads waiting for the read chain now.", pl,
             static_cast<double>(h.waiting()));
  }
  for (const node::admin::LaneStats& s : p.lanes()) {
    const Labels ll = {{"partition", name}, {"lane", s.name()}};
    Labels full = ll;
    full.emplace_back("reason", "full");
    f->Gauge("noded_lane_weight", "Dispatcher lane weight.", ll, s.weight());
    f->Gauge("noded_lane_capacity_messages", "Lane capacity in messages.", ll,
             static_cast<double>(s.capacity_messages()));
    f->Gauge("noded_lane_capacity_bytes", "Lane capacity in bytes.", ll,
             static_cast<double>(s.capacity_bytes()));
    f->Gauge("noded_lane_depth_messages", "Messages queued in the lane.", ll,
             static_cast<double>(s.depth_messages()));
    f->Gauge("noded_lane_depth_bytes", "Bytes queued in the lane.", ll,
             static_cast<double>(s.depth_bytes()));
    f->Counter("noded_lane_offered_total", "Messages offered to the lane.", ll,
               static_cast<double>(s.offered()));
    f->Counter("noded_lane_processed_total", "Messages processed by the lane.", ll,
               static_cast<double>(s.processed()));
    f->Counter("noded_lane_dropped_total", "Messages dropped by the lane.", full,
               static_cast<double>(s.dropped_full()));
    f->Counter("noded_lane_dropped_bytes_total", "Bytes dropped by the lane.", full,
               static_cast<double>(s.dropped_bytes_full()));
    f->Counter("noded_lane_cpu_seconds_total", "Worker CPU time spent in the lane.", ll,
               static_cast<double>(s.cpu_nanos()) * 1e-9);
    f->Histogram("noded_lane_queueing_delay_seconds",
                 "Time a message waited in the dispatcher lane before its handler ran.", ll,
                 s.queueing_delay());
    f->Gauge("noded_lane_effective_weight",
             "Weight the worker pool schedules the lane with now (adaptive lane weights).", ll,
             s.effective_weight());
    f->Gauge("noded_lane_delay_target_seconds",
             "The lane's queueing-delay p99 target (0: its weight is fixed).", ll,
             s.delay_target_ms() * 1e-3);
    f->Gauge("noded_lane_window_delay_seconds",
             "Queueing-delay p99 (or oldest queued age) the last adaptation step measured.", ll,
             s.window_delay_ms() * 1e-3);
    for (auto [direction, n] : {std::pair{"up", s.weight_raises()}, {"down", s.weight_lowers()}}) {
      Labels dl = ll;
      dl.emplace_back("direction", direction);
      f->Counter("noded_lane_weight_changes_total", "Adaptive lane weight changes, by direction.",
                 dl, static_cast<double>(n));
    }
  }
  const node::admin::StateCacheStats& cache = p.state_cache();
  f->Counter("noded_state_cache_hits_total", "State reads the executor's cache answered.", l,
             static_cast<double>(cache.hits()));
  f->Counter("noded_state_cache_misses_total", "State reads that went to the ledger.", l,
             static_cast<double>(cache.misses()));
  f->Gauge("noded_state_cache_bytes", "Bytes held by the executor's state cache.", l,
           static_cast<double>(cache.bytes()));
  f->Gauge("noded_state_cache_capacity_bytes", "Bound of the executor's state cache.", l,
           static_cast<double>(cache.capacity_bytes()));
  f->Gauge("noded_ledger_memtable_bytes", "Bytes held by the ledger's RocksDB memtables.", l,
           static_cast<double>(cache.ledger_memtable_bytes()));
  f->Gauge("noded_consensus_store_memtable_bytes",
           "Bytes held by the consensus store's (the PBFT log's) RocksDB memtables.", l,
           static_cast<double>(cache.consensus_store_memtable_bytes()));
  f->Gauge("noded_ledger_write_buffer_bytes",
           "The ledger's write buffer: its part of resources.ledger_write_buffer_bytes.", l,
           static_cast<double>(cache.ledger_write_buffer_bytes()));
  f->Gauge("noded_ledger_block_cache_bytes",
           "Bytes held by the ledger's RocksDB block cache, pinned blocks included.", l,
           static_cast<double>(cache.ledger_block_cache_bytes()));
  f->Gauge("noded_ledger_block_cache_pinned_bytes",
           "Bytes of the ledger's block cache pinned (evicted only when their table goes).", l,
           static_cast<double>(cache.ledger_block_cache_pinned_bytes()));
  f->Gauge("noded_ledger_block_cache_capacity_bytes",
           "Capacity of the ledger's block cache: state.block_cache_bytes, or less under the "
           "partition's memory share.",
           l, static_cast<double>(cache.ledger_block_cache_capacity_bytes()));
  f->Gauge("noded_cache_borrowed_capacity_bytes",
           "Capacity the state cache and the ledger's block cache borrow from room the pool, "
           "lanes and spill memory tier leave of their parts of the partition's memory share.",
           l, static_cast<double>(cache.borrowed_capacity_bytes()));
  f->Gauge("noded_cache_memory_demand_bytes",
           "Share of the partition's memory its state and block caches ask the arbiter for: its "
           "configured memory while the state cache evicts to take in misses, what covers their "
           "contents while they are read, 0 once idle for 30 s.",
           l, static_cast<double>(cache.memory_demand_bytes()));
  AddWriteStall("ledger", "the ledger", p.ledger_writes(), l, f);
  f->Gauge("noded_ledger_pending_compaction_bytes",
           "RocksDB's estimate of the bytes the ledger's compactions have to rewrite.", l,
           static_cast<double>(p.ledger_writes().pending_compaction_bytes()));
  AddWriteStall("consensus_store", "the consensus store", p.consensus_store_writes(), l, f);
  const node::admin::PoolStats& pool = p.pool();
  f->Gauge("noded_pool_txs", "Transactions in the pool.", l, static_cast<double>(pool.txs()));
  f->Gauge("noded_pool_bytes", "Bytes of transactions in the pool.", l,
           static_cast<double>(pool.bytes()));
  f->Gauge("noded_pool_max_txs", "Pool limit in transactions.", l,
           static_cast<double>(pool.max_txs()));
  f->Gauge("noded_pool_max_bytes", "Pool limit in bytes.", l,
           static_cast<double>(pool.max_bytes()));
  f->Gauge("noded_pool_above_high_water", "1 while the pool is above its high-water mark.", l,
           pool.above_high_water() ? 1 : 0);
  const node::admin::RetryHintStats& hints = p.retry_hints();
  f->Gauge("noded_commit_rate_measured_txs_per_second",
           "Transactions committed per second while the pool was above its high-water mark "
           "(what pool retry-after hints use; 0 = not measured yet or a stall, see "
           "noded_commit_rate_measured).",
           l, hints.commit_txs_per_second());
  f->Gauge("noded_commit_rate_measured", "1 once a commit-rate window has closed.", l,
           hints.commit_rate_measured() ? 1 : 0);
  f->Gauge("noded_retry_after_seconds", "The retry-after a refusal would carry now.",
           {{"partition", p.name()}, {"refusal", "pool"}}, hints.pool_retry_after_ms() / 1e3);
  f->Gauge("noded_retry_after_seconds", "The retry-after a refusal would carry now.",
           {{"partition", p.name()}, {"refusal", "client_lane"}},
           hints.client_lane_retry_after_ms() / 1e3);
  for (const auto& [outcome, n] :
       {std::pair<const char*, uint64_t>{"issued", hints.tickets_issued()},
        {"redeemed", hints.tickets_redeemed()},
        {"early", hints.tickets_early()},
        {"expired", hints.tickets_expired()},
        {"unknown", hints.tickets_unknown()}}) {
    f->Counter("noded_retry_tickets_total",
               "Retry tickets given with pool refusals, and how they ended (redeemed: sent back "
               "in their window; early: before it; expired: never; unknown: sent back but not "
               "outstanding).",
               {{"partition", p.name()}, {"outcome", outcome}}, static_cast<double>(n));
  }
  f->Gauge("noded_retry_reserved_txs",
           "Pool room (txs) held now for due retry tickets (at most pool.retry_reserve_fraction "
           "of the high-water mark).",
           l, static_cast<double>(hints.reserved_txs()));
  f->Counter("noded_pool_added_total", "Transactions added to the pool.", l,
             static_cast<double>(pool.added()));
  f->Counter("noded_pool_rejected_full_total", "Transactions refused because the pool was full.", l,
             static_cast<double>(pool.rejected_full()));
  f->Counter("noded_pool_expired_total", "Transactions expired from the pool.", l,
             static_cast<double>(pool.expired()));

  const node::admin::SpillStats& spill = p.spill();
  f->Counter("noded_spill_appended_total", "Records appended to the lossless FIFO.", l,
             static_cast<double>(spill.appended()));
  f->Counter("noded_spill_drained_total", "Records drained from the lossless FIFO.", l,
             static_cast<double>(spill.drained()));
  f->Gauge("noded_spill_memory_bytes", "Bytes in the FIFO's memory tier.", l,
           static_cast<double>(spill.memory_bytes()));
  f->Gauge("noded_spill_disk_bytes", "Bytes in the FIFO's segment files.", l,
           static_cast<double>(spill.disk_bytes()));
  f->Gauge("noded_spill_segments", "Segment files of the FIFO.", l,
           static_cast<double>(spill.segments()));
  f->Gauge("noded_spill_drain_bytes_per_second", "Configured drain rate.", l,
           spill.drain_bytes_per_second());
  f->Gauge("noded_spill_drain_measured_bytes_per_second",
           "Drain rate measured while the FIFO had a backlog (what retry-after hints use).", l,
           spill.drain_measured_bytes_per_second());
  f->Gauge("noded_spill_disk_budget_bytes",
           "Disk budget of the FIFO's segment files in force (0 = none).", l,
           static_cast<double>(spill.disk_budget_bytes()));
  f->Gauge("noded_spill_memory_budget_bytes",
           "Memory tier budget of the FIFO in force (lossless.memory_bytes, or less under the "
           "partition's memory share).",
           l, static_cast<double>(spill.memory_budget_bytes()));
  f->Counter("noded_spill_refused_total",
             "Spill appends the FIFO's disk budget refused (the rest of a refused batch is "
             "refused with it, uncounted).",
             l, static_cast<double>(spill.refused_disk_budget()));

  AddShare(name, "cpu", p.cpu(), f);
  AddShare(name, "memory", p.memory(), f);
  AddShare(name, "egress", p.egress(), f);
  if (p.has_spill()) AddShare(name, "disk", p.disk(), f);  // lossless partitions

  f->Histogram("noded_commit_latency_seconds",
               "Time from a client tx's admission to its commit on this node.", l,
               p.commit_latency());
  f->Histogram("noded_stage_decision_seconds",
               "Time the interceptor's stages took to admit or reject one client tx.", l,
               p.stage_decision());
  const node::admin::ConsensusRoundStats& rounds = p.consensus_rounds();
  const std::pair<const char*, const node::admin::LatencySummary*> phases[] = {
      {"cut_wait", &rounds.cut_wait()},
      {"accept", &rounds.accept()},
      {"prepare", &rounds.prepare()},
      {"commit", &rounds.commit()},
      {"apply", &rounds.apply()}};
  for (const auto& [phase, summary] : phases) {
    f->Histogram("noded_consensus_phase_seconds",
                 "Time one phase of this replica's rounds of consensus took, block by block: "
                 "cut_wait (primary: ready txs held before the cut), accept (backup: pre-prepare "
                 "to prepare), prepare (to prepared), commit (prepared to execution: 2f+1 "
                 "commits, blocks before it executed), apply (execution and ledger write).",
                 {{"partition", p.name()}, {"phase", phase}}, *summary);
  }
  f->Histogram("noded_consensus_block_interval_seconds",
               "Time between two consecutive blocks committed on this replica.", l,
               rounds.interval());
  f->Counter("noded_consensus_slow_rounds_total",
             "Rounds of consensus longer than consensus.slow_round_log_ms from their pre-prepare "
             "(or proposal) to their block applied on this replica.",
             l, static_cast<double>(rounds.slow_rounds()));
  f->Counter("noded_committed_txs_total", "Transactions committed.", l,
             static_cast<double>(p.committed_txs()));
  f->Gauge("noded_commit_watchers", "Client commit streams (WatchCommits) open now.", l,
           static_cast<double>(p.commit_watchers()));
  f->Counter("noded_commit_watchers_cut_slow_total",
             "Client commit streams ended because their client read too slowly.", l,
             static_cast<double>(p.commit_watchers_cut_slow()));
  f->Counter("noded_snapshots_installed_total",
             "Snapshots of the state this replica fetched from peers and installed.", l,
             static_cast<double>(p.snapshot().installed()));
  f->Gauge("noded_snapshot_fetch_chunks",
           "Chunks of the snapshot being fetched (or the last one) staged so far.", l,
           static_cast<double>(p.snapshot().fetch_chunks_done()));
  f->Gauge("noded_snapshot_fetch_manifest_chunks",
           "Chunks in the manifest of the snapshot being fetched (or the last one).", l,
           static_cast<double>(p.snapshot().fetch_chunks_total()));
  f->Counter("noded_snapshot_bad_chunks_total",
             "Snapshot chunks from a peer that did not match the agreed manifest (refused).", l,
             static_cast<double>(p.snapshot().fetch_bad_chunks()));
  f->Counter("noded_snapshot_served_bytes_total", "State bytes served to peers in snapshot chunks.",
             l, static_cast<double>(p.snapshot().served_bytes()));
  f->Counter("noded_snapshot_served_refused_total",
             "Peers' snapshot requests refused (not kept, over the serving budget).", l,
             static_cast<double>(p.snapshot().served_refused()));
  for (const auto& [kind, n] :
       {std::pair{"send", p.send_failures()}, std::pair{"broadcast", p.broadcast_failures()}}) {
    Labels lk = l;
    lk.emplace_back("kind", kind);
    f->Counter("noded_partition_send_failures_total",
               "Messages to peers the network refused (full egress queue, unknown peer).", lk,
               static_cast<double>(n));
  }
  for (const auto& [reason, n] : {std::pair{"unknown_peer", p.peer_refused_unknown_peer()},
                                  std::pair{"malformed", p.peer_refused_malformed()},
                                  std::pair{"wrong_channel", p.peer_refused_wrong_channel()},
                                  std::pair{"bad_signature", p.peer_refused_bad_signature()},
                                  std::pair{"bad_tx", p.peer_refused_bad_tx()}}) {
    Labels lr = l;
    lr.emplace_back("reason", reason);
    f->Counter("noded_partition_peer_messages_refused_total",
               "Peer messages refused before the replica or the pool, by reason.", lr,
               static_cast<double>(n));
  }
  f->Counter("noded_partition_consensus_verifications_total",
             "Ed25519 verifications of consensus messages run (cached messages are not counted).",
             l, static_cast<double>(p.consensus_verifications()));
  f->Counter("noded_partition_cpu_seconds_total",
             "CPU charged to the partition: its lanes on the worker pool, its client calls and "
             "drain.",
             l, static_cast<double>(p.cpu_nanos()) * 1e-9);
  f->Counter("noded_partition_overload_refusals_total",
             "Client writes refused for want of room (a full client lane or spill budget, a full "
             "pool).",
             l, static_cast<double>(p.overload_refusals()));
  f->Counter("noded_partition_consensus_redundant_votes_total",
             "Prepares and commits dropped unverified: their quorum was already complete.", l,
             static_cast<double>(p.consensus_redundant_votes()));
  {
    constexpr char kFetched[] = "noded_partition_fetched_txs_total";
    constexpr char kFetchedHelp[] =
        "Tx bodies fetched from peers and admitted, by how: signature checked, or taken on a "
        "certified batch (no check).";
    f->Counter(kFetched, kFetchedHelp, {{"partition", p.name()}, {"admitted", "checked"}},
               static_cast<double>(p.fetched_txs_checked()));
    f->Counter(kFetched, kFetchedHelp, {{"partition", p.name()}, {"admitted", "certified"}},
               static_cast<double>(p.fetched_txs_certified()));
  }
  f->Gauge("noded_partition_block_interval_seconds",
           "Least time between two of this node's partial batches, from the node's block budget "
           "(0 = none).",
           l, p.block_interval_ms() / 1e3);
  f->Gauge("noded_partition_tracked_txs", "Txs tracked between admission and commit.", l,
           static_cast<double>(p.tracked_txs()));
  f->Counter("noded_partition_tracker_evicted_total",
             "Tracked txs forgotten by the tracker's bound (count or age) before they committed.",
             l, static_cast<double>(p.tracker_evicted()));
}

void AddEgress(const node::admin::EgressStats& e, Families* f) {
  f->Gauge("noded_egress_cap_bytes_per_second", "Global egress cap (0 = unlimited).", {},
           e.cap_bytes_per_second());
  f->Gauge("noded_egress_tx_forward_floor_bytes_per_second", "Floor of the tx-forwarding rate.", {},
           e.tx_forward_floor_bytes_per_second());
  f->Gauge("noded_egress_tx_forward_derived_bytes_per_second", "Derived tx-forwarding rate.", {},
           e.tx_forward_derived_bytes_per_second());
  f->Gauge("noded_egress_blocked_peers", "Peers whose writer queue is full (frames held back).", {},
           static_cast<double>(e.blocked_peers()));
  f->Counter("noded_egress_peer_block_events_total", "Times a peer's writer queue filled up.", {},
             static_cast<double>(e.peer_block_events()));
  f->Counter("noded_egress_blocked_peer_drops_total",
             "Messages dropped because a blocked peer was over its bound.", {},
             static_cast<double>(e.blocked_peer_drops()));
  for (const node::admin::ChannelStats& c : e.channels()) {
    const Labels l = {{"channel", c.channel()}};
    f->Counter("noded_egress_bytes_sent_total", "Bytes sent to peers on the channel.", l,
               static_cast<double>(c.bytes_sent()));
    f->Counter("noded_egress_frames_sent_total", "Frames sent to peers on the channel.", l,
               static_cast<double>(c.frames_sent()));
    f->Gauge("noded_egress_queue_bytes", "Bytes queued on the channel.", l,
             static_cast<double>(c.queue_bytes()));
    f->Counter("noded_egress_dropped_total", "Frames dropped on the channel.", l,
               static_cast<double>(c.dropped()));
    f->Histogram("noded_egress_queueing_delay_seconds",
                 "Time a frame waited in the egress scheduler before it was sent.", l,
                 c.queueing_delay());
  }
}

void AddPeers(const node::admin::ListPeersResponse& peers, Families* f) {
  for (const node::admin::PeerInfo& p : peers.peers()) {
    f->Counter("noded_peer_link_stalls_total",
               "Links to the peer closed as stalled (an unanswered ping or a blocked write).",
               {{"peer", p.node_id()}}, static_cast<double>(p.link_stalls()));
    f->Gauge("noded_peer_rtt_seconds",
             "The last link ping's round trip to the peer, behind what the link held (0: none "
             "answered yet).",
             {{"peer", p.node_id()}}, p.rtt_ms() / 1e3);
    const node::admin::PeerRefusals& r = p.refused();
    for (const auto& [reason, n] :
         {std::pair{"unknown_partition", r.unknown_partition()},
          std::pair{"malformed", r.malformed()}, std::pair{"wrong_channel", r.wrong_channel()},
          std::pair{"bad_signature", r.bad_signature()}, std::pair{"bad_tx", r.bad_tx()},
          std::pair{"bad_frame", r.bad_frame()},
          std::pair{"stopped_partition", r.stopped_partition()}}) {
      f->Counter("noded_peer_messages_refused_total",
                 "Messages from the peer this node refused, by reason, over all partitions.",
                 {{"peer", p.node_id()}, {"reason", reason}}, static_cast<double>(n));
    }
  }
}

}  // namespace

ClientMetric LatencyHistogramMetric(
    const node::admin::LatencySummary& latency,
    const std::vector<std::pair<std::string, std::string>>& labels) {
  ClientMetric m;
  for (const auto& [k, v] : labels) m.label.push_back({k, v});
  // Divided, not multiplied by 1e-6: a quotient of two exact integers is correctly rounded, so
  // the bounds print as written (0.0001, not 9.999999999999999e-05).
  m.histogram.sample_count = latency.count();
  m.histogram.sample_sum = latency.sum_us() / 1e6;
  const int n = std::min(latency.bucket_bounds_us_size(), latency.bucket_counts_size());
  m.histogram.bucket.reserve(n + 1);
  for (int i = 0; i < n; ++i) {
    m.histogram.bucket.push_back({latency.bucket_counts(i), latency.bucket_bounds_us(i) / 1e6});
  }
  // The text format requires a +Inf bucket equal to the count.
  m.histogram.bucket.push_back({latency.count(), std::numeric_limits<double>::infinity()});
  return m;
}

std::vector<MetricFamily> NodeMetricFamilies(const node::admin::NodeStatus& status,
                                             const node::admin::FlowStats& stats,
                                             const node::admin::ListPeersResponse& peers) {
  Families f;
  f.Gauge("noded_info", "Constant 1, labelled with the node id and version.",
          {{"node_id", status.node_id()}, {"version", status.version()}}, 1);
  f.Gauge("noded_uptime_seconds", "Seconds since the node started.", {},
          static_cast<double>(status.uptime_seconds()));
  f.Gauge("noded_peers_connected", "Peers with an open connection.", {},
          static_cast<double>(status.peers_connected()));
  f.Gauge("noded_peers_configured", "Peers in the config.", {},
          static_cast<double>(status.peers_configured()));
  f.Gauge("noded_ledger_write_buffer_budget_bytes",
          "Memtable bytes for all partitions' ledgers (resources.ledger_write_buffer_bytes).", {},
          static_cast<double>(status.ledger_memory().write_buffer_budget_bytes()));
  f.Gauge("noded_node_ledger_memtable_bytes", "Bytes held by every running ledger's memtables.", {},
          static_cast<double>(status.ledger_memory().memtable_bytes()));
  f.Gauge("noded_ledger_write_buffer_budget_in_force_bytes",
          "The part of the memtable budget divided now: the budget x the memory pressure's "
          "scale.",
          {}, static_cast<double>(status.ledger_memory().write_buffer_budget_in_force_bytes()));
  f.Gauge("noded_node_ledger_block_cache_bytes",
          "Bytes held by every running ledger's block cache, pinned blocks included.", {},
          static_cast<double>(status.ledger_memory().block_cache_bytes()));
  f.Gauge("noded_node_ledger_block_cache_capacity_bytes",
          "Every running ledger's block cache capacity together.", {},
          static_cast<double>(status.ledger_memory().block_cache_capacity_bytes()));
  f.Gauge("noded_node_consensus_store_memtable_bytes",
          "Bytes held by every running partition's consensus store memtables.", {},
          static_cast<double>(status.ledger_memory().consensus_store_memtable_bytes()));
  f.Gauge("noded_consensus_store_cache_bytes",
          "Bytes held by the block cache the consensus stores share.", {},
          static_cast<double>(status.ledger_memory().consensus_store_cache_bytes()));
  f.Gauge("noded_block_budget_blocks_per_second",
          "The node's budget of consensus instances per second in force, all partitions (0 = "
          "none).",
          {}, static_cast<double>(status.consensus_blocks_per_second()));
  f.Gauge("noded_block_budget_ceiling_blocks_per_second",
          "The block budget's ceiling (resources.consensus_blocks_per_second).", {},
          static_cast<double>(status.consensus_blocks_per_second_ceiling()));
  f.Gauge("noded_block_budget_queueing_delay_seconds",
          "The block budget's last step: the lower median of the partitions' mean queueing "
          "delays of the messages their lanes started.",
          {}, status.block_budget().queueing_delay_ms() / 1e3);
  f.Counter("noded_block_budget_lowered_total", "Block budget steps that lowered it.", {},
            static_cast<double>(status.block_budget().lowered()));
  f.Counter("noded_block_budget_raised_total", "Block budget steps that raised it.", {},
            static_cast<double>(status.block_budget().raised()));
  f.Gauge("noded_block_budget_partitions_with_work",
          "Partitions the block budget is divided among now (transactions waiting within 1 s).", {},
          static_cast<double>(status.partitions_with_work()));
  for (const node::admin::PartitionStatus& p : status.partitions()) AddPartitionStatus(p, &f);
  if (status.memory().enabled()) AddMemoryPressure(status.memory(), &f);
  if (status.admission().enabled()) AddNodeAdmission(status.admission(), &f);
  for (const node::admin::PartitionFlowStats& p : stats.partitions()) AddPartitionFlow(p, &f);
  AddEgress(stats.egress(), &f);
  AddPeers(peers, &f);
  return f.Take();
}

void RegisterNodeMetrics(MetricsServer* metrics, Node* node) {
  metrics->AddCollector([node] {
    absl::StatusOr<node::admin::FlowStats> stats = node->FlowStats("");
    return NodeMetricFamilies(node->Status(), stats.ok() ? *stats : node::admin::FlowStats(),
                              node->Peers());
  });
}

}  // namespace runtime
