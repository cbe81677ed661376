#include "tools/nodectl_format.h"

#include <cmath>
#include <map>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "tools/nodectl_table.h"

namespace nodectl {
namespace {

using node::admin::LatencySummary;
using node::admin::ResourceShare;

std::string Latency(const LatencySummary& l) {
  if (l.count() == 0) return "-";
  return absl::StrCat("p50 ", FormatMicros(l.p50_us()), " p99 ", FormatMicros(l.p99_us()), " max ",
                      FormatMicros(l.max_us()));
}

// "off", or "on: consensus 5ms (max 64), ..." for the lanes with a target.
std::string AdaptiveLanes(const node::config::AdaptiveLaneWeights& a) {
  if (!a.enabled()) return "off";
  std::vector<std::string> targets;
  for (auto [name, t] : {std::pair{"consensus", &a.consensus()},
                         {"sync", &a.sync()},
                         {"tx_forward", &a.tx_forward()},
                         {"bulk", &a.bulk()},
                         {"client", &a.client()}}) {
    if (t->target_p99_ms() <= 0) continue;
    targets.push_back(absl::StrCat(
        name, " ", FormatNumber(t->target_p99_ms()), "ms",
        t->max_weight() > 0 ? absl::StrCat(" (max ", FormatNumber(t->max_weight()), ")") : ""));
  }
  return absl::StrCat("on: ", targets.empty() ? "no lane targets" : absl::StrJoin(targets, ", "));
}

std::string Lanes(const node::config::LaneConfig& l) {
  return absl::StrCat("consensus=", FormatNumber(l.consensus()), ",sync=", FormatNumber(l.sync()),
                      ",tx_forward=", FormatNumber(l.tx_forward()),
                      ",bulk=", FormatNumber(l.bulk()));
}

// An absolute amount of a resource in its unit: bytes for memory, bytes/s for egress, worker
// time for CPU (printed as a plain number). The arbiter reports "no ceiling" as infinity.
std::string Amount(const std::string& resource, double v) {
  if (std::isinf(v)) return "none";
  if (resource == "memory" || resource == "disk") return FormatBytes(v);
  if (resource == "egress") return FormatRate(v);
  return FormatNumber(v);
}

void PrintPartitionStats(const node::admin::PartitionFlowStats& p, std::ostream& out) {
  out << "partition " << p.name() << " (id " << p.id() << ")  committed " << p.committed_txs()
      << " txs  commit latency " << Latency(p.commit_latency()) << "\n";

  Table stages({"STAGE", "KIND", "ADMITTED>", "REJECTED>", "CURRENT>", "LIMIT>"});
  for (const auto& s : p.stages()) {
    stages.AddRow({s.name(), s.kind(), absl::StrCat(s.admitted()), absl::StrCat(s.rejected()),
                   FormatNumber(s.current()), FormatNumber(s.limit())});
  }
  if (stages.rows() > 0) {
    stages.Print(out, 2);
  } else {
    out << "  (no interceptor stages)\n";
  }
  if (p.read_stages_size() > 0) {
    Table reads({"READ_STAGE", "KIND", "ADMITTED>", "REJECTED>", "CURRENT>", "LIMIT>"});
    for (const auto& s : p.read_stages()) {
      reads.AddRow({s.name(), s.kind(), absl::StrCat(s.admitted()), absl::StrCat(s.rejected()),
                    FormatNumber(s.current()), FormatNumber(s.limit())});
    }
    reads.Print(out, 2);
  }
  if (p.read_hold().held() + p.read_hold().full() > 0) {
    const auto& h = p.read_hold();
    out << "  reads held: " << h.held() << " (answered " << h.answered() << ", refused when their "
        << "wait ran out " << h.expired() << ", waiting " << h.waiting() << "); refused with "
        << "the queue full " << h.full() << "\n";
  }

  // This replica's rounds of consensus, phase by phase (the phases it has timed).
  const node::admin::ConsensusRoundStats& r = p.consensus_rounds();
  Table rounds({"ROUND_PHASE", "BLOCKS>", "P50>", "P99>", "MAX>"});
  for (const auto& [phase, l] :
       {std::pair{"cut_wait", &r.cut_wait()}, std::pair{"accept", &r.accept()},
        std::pair{"prepare", &r.prepare()}, std::pair{"commit", &r.commit()},
        std::pair{"apply", &r.apply()}, std::pair{"interval", &r.interval()}}) {
    if (l->count() == 0) continue;
    rounds.AddRow({phase, absl::StrCat(l->count()), FormatMicros(l->p50_us()),
                   FormatMicros(l->p99_us()), FormatMicros(l->max_us())});
  }
  if (rounds.rows() > 0) {
    out << "\n";
    rounds.Print(out, 2);
  }

  Table lanes({"LANE", "WEIGHT>", "SCHED>", "DEPTH>", "DEPTH_BYTES>", "CAPACITY>",
               "CAPACITY_BYTES>", "OFFERED>", "PROCESSED>", "DROPPED>", "DROPPED_BYTES>",
               "DELAY_P50>", "DELAY_P99>", "CPU>"});
  for (const auto& l : p.lanes()) {
    const LatencySummary& d = l.queueing_delay();
    // SCHED: the weight the pool schedules with (adaptive), "target/window" when adapting.
    std::string sched = FormatNumber(l.effective_weight());
    if (l.delay_target_ms() > 0) {
      absl::StrAppend(&sched, " (", FormatNumber(l.window_delay_ms()), "/",
                      FormatNumber(l.delay_target_ms()), "ms)");
    }
    lanes.AddRow({l.name(), FormatNumber(l.weight()), sched, absl::StrCat(l.depth_messages()),
                  FormatBytes(l.depth_bytes()), absl::StrCat(l.capacity_messages()),
                  FormatBytes(l.capacity_bytes()), absl::StrCat(l.offered()),
                  absl::StrCat(l.processed()), absl::StrCat(l.dropped_full()),
                  FormatBytes(l.dropped_bytes_full()), d.count() ? FormatMicros(d.p50_us()) : "-",
                  d.count() ? FormatMicros(d.p99_us()) : "-",
                  FormatMicros(static_cast<double>(l.cpu_nanos()) / 1e3)});
  }
  if (lanes.rows() > 0) {
    out << "\n";
    lanes.Print(out, 2);
  }

  const auto& pool = p.pool();
  const auto& spill = p.spill();
  out << "\n  pool   txs " << pool.txs() << "/" << pool.max_txs() << "  bytes "
      << FormatBytes(pool.bytes()) << "/" << FormatBytes(pool.max_bytes()) << "  high-water "
      << YesNo(pool.above_high_water()) << "  added " << pool.added() << "  rejected_full "
      << pool.rejected_full() << "  expired " << pool.expired() << "\n";
  const auto& hints = p.retry_hints();
  out << "  retry  pool " << hints.pool_retry_after_ms() << "ms  client_lane "
      << hints.client_lane_retry_after_ms() << "ms  " << (hints.fixed() ? "(fixed)" : "from")
      << " commits " << FormatNumber(hints.commit_txs_per_second()) << " tx/s, "
      << FormatNumber(hints.commit_blocks_per_second()) << " blocks/s, client lane "
      << FormatNumber(hints.client_lane_jobs_per_second()) << " jobs/s\n";
  if (hints.max_reserved_txs() > 0 || hints.tickets_issued() > 0) {
    out << "  tickets  issued " << hints.tickets_issued() << "  redeemed "
        << hints.tickets_redeemed() << "  early " << hints.tickets_early() << "  expired "
        << hints.tickets_expired() << "  unknown " << hints.tickets_unknown() << "  outstanding "
        << hints.tickets_outstanding() << "  reserved " << hints.reserved_txs() << "/"
        << hints.max_reserved_txs() << " txs\n";
  }
  out << "  spill  appended " << spill.appended() << "  drained " << spill.drained() << "  memory "
      << FormatBytes(spill.memory_bytes()) << "/" << FormatBytes(spill.memory_budget_bytes())
      << "  disk " << FormatBytes(spill.disk_bytes()) << "  segments " << spill.segments()
      << "  drain " << FormatRate(spill.drain_bytes_per_second()) << " (measured "
      << FormatRate(spill.drain_measured_bytes_per_second()) << ")  disk budget "
      << (spill.disk_budget_bytes() == 0 ? std::string("none")
                                         : FormatBytes(spill.disk_budget_bytes()))
      << "  refused " << spill.refused_disk_budget() << "\n\n";

  Table shares(
      {"RESOURCE", "WEIGHT>", "GUARANTEE>", "CEILING>", "DEMAND>", "SHARE>", "USAGE>", "LIMIT"});
  // LIMIT: a hard ceiling in force, with how often (and for CPU how long) it held the partition.
  auto limit = [&](const std::string& name, const ResourceShare& r) -> std::string {
    if (r.limit() <= 0) return "-";
    std::string out = absl::StrCat(Amount(name, r.limit()), " held ", r.limit_holds(), "x");
    if (r.limited_seconds() > 0) absl::StrAppend(&out, " ", FormatNumber(r.limited_seconds()), "s");
    return out;
  };
  auto add = [&](const std::string& name, const ResourceShare& r) {
    shares.AddRow({name, FormatNumber(r.weight()), Amount(name, r.guarantee()),
                   Amount(name, r.ceiling()), Amount(name, r.demand()), Amount(name, r.share()),
                   Amount(name, r.usage()), limit(name, r)});
  };
  add("cpu", p.cpu());
  add("memory", p.memory());
  add("egress", p.egress());
  if (p.has_spill() && p.disk().weight() > 0) add("disk", p.disk());  // divided
  shares.Print(out, 2);
}

}  // namespace

void PrintNodeStatus(const node::admin::NodeStatus& s, std::ostream& out) {
  out << "node     " << s.node_id() << "\n"
      << "version  " << s.version() << "\n"
      << "uptime   " << FormatDuration(s.uptime_seconds()) << "\n"
      << "peers    " << s.peers_connected() << "/" << s.peers_configured() << " connected\n";
  out << "blocks   "
      << (s.consensus_blocks_per_second() == 0
              ? std::string("no budget")
              : absl::StrCat("budget ", s.consensus_blocks_per_second(), "/s"))
      << (s.consensus_blocks_per_second_ceiling() > s.consensus_blocks_per_second()
              ? absl::StrCat(" (of ", s.consensus_blocks_per_second_ceiling(), ": queueing ",
                             FormatNumber(s.block_budget().queueing_delay_ms()), " ms)")
              : std::string())
      << ", " << s.partitions_with_work() << " partitions with work\n";
  if (s.has_ledger_memory()) {
    const node::admin::LedgerMemoryStatus& lm = s.ledger_memory();
    // (A node before write_buffer_scale sends 0 for it: no pressure.)
    const bool scaled = lm.write_buffer_scale() > 0 && lm.write_buffer_scale() < 1;
    out << "ledgers  memtables " << FormatBytes(static_cast<double>(lm.memtable_bytes())) << " of "
        << FormatBytes(static_cast<double>(scaled ? lm.write_buffer_budget_in_force_bytes()
                                                  : lm.write_buffer_budget_bytes()));
    if (scaled) {
      out << " (" << FormatNumber(lm.write_buffer_scale()) << " of "
          << FormatBytes(static_cast<double>(lm.write_buffer_budget_bytes()))
          << ": memory pressure)";
    }
    out << ", write buffer "
        << FormatBytes(static_cast<double>(lm.write_buffer_per_partition_bytes())) << " each";
    if (lm.block_cache_capacity_bytes() > 0) {  // (0 from a node before them)
      out << "; block caches " << FormatBytes(static_cast<double>(lm.block_cache_bytes())) << " of "
          << FormatBytes(static_cast<double>(lm.block_cache_capacity_bytes()));
    }
    out << "\n";
    if (lm.consensus_store_cache_capacity_bytes() > 0) {  // (0 from a node before it)
      out << "pbft log memtables "
          << FormatBytes(static_cast<double>(lm.consensus_store_memtable_bytes()))
          << ", table readers "
          << FormatBytes(static_cast<double>(lm.consensus_store_table_reader_bytes()))
          << "; shared block cache "
          << FormatBytes(static_cast<double>(lm.consensus_store_cache_bytes())) << " of "
          << FormatBytes(static_cast<double>(lm.consensus_store_cache_capacity_bytes())) << "\n";
    }
  }
  if (s.memory().enabled()) {
    const node::admin::MemoryPressureStatus& m = s.memory();
    out << "memory   pressure " << FormatNumber(m.pressure())
        << (m.driven_by().empty() ? "" : " (" + m.driven_by() + ")") << ", rss "
        << FormatBytes(m.rss_bytes());
    if (m.cgroup_version() > 0) {
      out << ", cgroup v" << m.cgroup_version() << " " << FormatBytes(m.cgroup_current_bytes())
          << (m.cgroup_max_bytes() > 0 ? " of " + FormatBytes(m.cgroup_max_bytes()) : "");
    }
    if (m.psi_available()) out << ", psi " << FormatNumber(m.psi_some_avg10()) << "%";
    out << "; pool scale " << FormatNumber(m.pool_scale())
        << (m.drop_forwarded() ? ", forwarded txs DROPPED" : "")
        << (m.refuse_clients() ? ", client writes REFUSED" : "") << "\n";
  }
  if (s.admission().enabled()) {
    const node::admin::NodeAdmissionStatus& a = s.admission();
    out << "admission " << (a.congested() ? "CONGESTED (" + a.trigger() + ")" : "calm") << ", "
        << a.episodes() << " episodes, CPU pressure "
        << (a.has_cpu_pressure_percent() ? absl::StrCat(FormatNumber(a.cpu_pressure_percent()), "%")
                                         : "unknown")
        << (a.measured_allocation() ? " (measured shares)" : " (entitlements)");
    std::vector<std::string> cut;
    for (const auto& p : a.partitions()) {
      if (p.admit_fraction() < 1 || p.peers_cutting() > 0) {
        cut.push_back(absl::StrFormat("%s %d%% (own %d%%, %d peers cutting%s; %.3g of %.3g cores)",
                                      p.name(), static_cast<int>(100 * p.admit_fraction()),
                                      static_cast<int>(100 * p.local_admit_fraction()),
                                      p.peers_cutting(), p.contending() ? ", contending" : "",
                                      p.cpu_cores(), p.allocation_cores()));
      }
    }
    if (!cut.empty()) out << "; admitting " << absl::StrJoin(cut, ", ");
    out << "\n";
  }
  out << "\n";
  Table t({"PARTITION", "ID>", "HEIGHT>", "VIEW>", "STATE", "PAUSED", "LOSSLESS", "VIEW_CHANGES>"});
  for (const auto& p : s.partitions()) {
    t.AddRow({p.name(), absl::StrCat(p.id()), absl::StrCat(p.height()), absl::StrCat(p.view()),
              p.consensus_state(), YesNo(p.paused()), YesNo(p.lossless()),
              absl::StrCat(p.view_changes())});
  }
  t.Print(out);
  for (const auto& p : s.partitions()) {
    if (!p.halt_reason().empty()) out << "\n" << p.name() << " halted: " << p.halt_reason() << "\n";
  }
}

void PrintPartitions(const node::admin::ListPartitionsResponse& resp, std::ostream& out) {
  std::map<uint32_t, const node::config::PartitionConfig*> config_by_id;
  for (const auto& c : resp.configs()) config_by_id[c.id()] = &c;
  Table t({"PARTITION", "ID>", "HEIGHT>", "VIEW>", "STATE", "PAUSED", "LOSSLESS", "WEIGHT>",
           "GUARANTEE>", "CEILING>", "POOL_TXS>", "POOL_BYTES>"});
  for (const auto& p : resp.partitions()) {
    const node::config::PartitionConfig* c =
        config_by_id.count(p.id()) ? config_by_id[p.id()] : nullptr;
    node::config::PartitionConfig empty;
    if (c == nullptr) c = &empty;
    t.AddRow({p.name(), absl::StrCat(p.id()), absl::StrCat(p.height()), absl::StrCat(p.view()),
              p.consensus_state(), YesNo(p.paused()), YesNo(p.lossless()),
              FormatNumber(c->share().weight()), FormatNumber(c->share().guarantee_fraction()),
              FormatNumber(c->share().ceiling_fraction()), absl::StrCat(c->pool().max_txs()),
              FormatBytes(c->pool().max_bytes())});
  }
  t.Print(out);
  for (const auto& c : resp.configs()) {
    out << "\n";
    PrintPartitionFlowConfig(c, out);
  }
}

void PrintPeers(const node::admin::ListPeersResponse& resp, std::ostream& out) {
  Table t({"ADDRESS", "CONNECTED", "SENT>", "RECEIVED>", "RECONNECTS>", "STALLS>", "RTT>",
           "REFUSED>", "NODE_ID"});
  // What a misbehaving peer sent, by reason (the metric noded_peer_messages_refused_total),
  // printed under the table.
  std::string offenders;
  for (const auto& p : resp.peers()) {
    const node::admin::PeerRefusals& r = p.refused();
    uint64_t refused = 0;
    std::string reasons;
    for (const auto& [name, n] :
         {std::pair{"unknown_partition", r.unknown_partition()},
          std::pair{"malformed", r.malformed()}, std::pair{"wrong_channel", r.wrong_channel()},
          std::pair{"bad_signature", r.bad_signature()}, std::pair{"bad_tx", r.bad_tx()},
          std::pair{"bad_frame", r.bad_frame()},
          std::pair{"stopped_partition", r.stopped_partition()}}) {
      refused += n;
      if (n > 0) absl::StrAppend(&reasons, reasons.empty() ? "" : ", ", name, "=", n);
    }
    if (!reasons.empty())
      absl::StrAppend(&offenders, "\nrefused from ", p.node_id(), ": ", reasons, "\n");
    t.AddRow({p.address(), YesNo(p.connected()), FormatBytes(p.bytes_sent()),
              FormatBytes(p.bytes_received()), absl::StrCat(p.reconnects()),
              absl::StrCat(p.link_stalls()),
              p.rtt_ms() > 0 ? absl::StrFormat("%.1f ms", p.rtt_ms()) : std::string("-"),
              absl::StrCat(refused), p.node_id()});
  }
  t.Print(out);
  out << offenders;
}

void PrintFlowStats(const node::admin::FlowStats& stats, std::ostream& out) {
  out << "at "
      << absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(stats.unix_millis()),
                          absl::UTCTimeZone())
      << "\n\n";
  for (const auto& p : stats.partitions()) {
    PrintPartitionStats(p, out);
    out << "\n";
  }
  if (stats.has_egress()) PrintEgress(stats.egress(), out);
}

void PrintEgress(const node::admin::EgressStats& e, std::ostream& out) {
  out << "egress  cap " << FormatRate(e.cap_bytes_per_second(), "unlimited")
      << "  tx_forward floor " << FormatRate(e.tx_forward_floor_bytes_per_second()) << "  derived "
      << FormatRate(e.tx_forward_derived_bytes_per_second(), "unlimited") << "\n";
  Table t({"CHANNEL", "SENT>", "FRAMES>", "QUEUED>", "DROPPED>", "DELAY_P50>", "DELAY_P99>"});
  for (const auto& c : e.channels()) {
    const LatencySummary& d = c.queueing_delay();
    t.AddRow({c.channel(), FormatBytes(c.bytes_sent()), absl::StrCat(c.frames_sent()),
              FormatBytes(c.queue_bytes()), absl::StrCat(c.dropped()),
              d.count() ? FormatMicros(d.p50_us()) : "-",
              d.count() ? FormatMicros(d.p99_us()) : "-"});
  }
  t.Print(out, 2);
}

void PrintPartitionFlowConfig(const node::config::PartitionConfig& c, std::ostream& out) {
  std::vector<std::string> stages;
  for (const auto& s : c.interceptor().stages()) stages.push_back(StageSummary(s));
  std::vector<std::string> reads;
  for (const auto& s : c.read_interceptor().stages()) reads.push_back(StageSummary(s));
  const auto& d = c.dispatcher();
  const auto& pool = c.pool();
  out << "partition " << c.name() << " (id " << c.id() << ")\n"
      << "  interceptor  " << (stages.empty() ? "(none)" : absl::StrJoin(stages, " -> ")) << "\n"
      << "  reads        " << (reads.empty() ? "(none)" : absl::StrJoin(reads, " -> "))
      << (c.read_hold().max_wait_ms() > 0
              ? absl::StrCat("  (held up to ", c.read_hold().max_wait_ms(), " ms, ",
                             c.read_hold().max_waiting() > 0 ? c.read_hold().max_waiting() : 1024,
                             " waiting)")
              : "")
      << "\n"
      << "  lanes        " << Lanes(d.lane_weights()) << "  budget " << d.budget_messages()
      << " msgs, " << FormatBytes(d.budget_bytes()) << "\n"
      << "  adaptive     " << AdaptiveLanes(d.adaptive_weights()) << "\n"
      << "  pool         max_txs=" << pool.max_txs() << " max_bytes=" << pool.max_bytes()
      << " max_per_sender=" << pool.max_per_sender()
      << " forward_reserve_fraction=" << FormatNumber(pool.forward_reserve_fraction())
      << " high_water_fraction=" << FormatNumber(pool.high_water_fraction())
      << " ttl_seconds=" << pool.ttl_seconds() << " max_tx_bytes=" << pool.max_tx_bytes() << "\n"
      << "  share        weight=" << FormatNumber(c.share().weight())
      << " guarantee=" << FormatNumber(c.share().guarantee_fraction())
      << " ceiling=" << FormatNumber(c.share().ceiling_fraction())
      << (c.share().hard_ceiling() ? " (hard)" : "") << "\n";
}

void PrintShares(const google::protobuf::RepeatedPtrField<node::config::PartitionConfig>& configs,
                 std::ostream& out) {
  Table t({"PARTITION", "ID>", "WEIGHT>", "GUARANTEE>", "CEILING>"});
  for (const auto& c : configs) {
    t.AddRow({c.name(), absl::StrCat(c.id()), FormatNumber(c.share().weight()),
              FormatNumber(c.share().guarantee_fraction()),
              absl::StrCat(FormatNumber(c.share().ceiling_fraction()),
                           c.share().hard_ceiling() ? " hard" : "")});
  }
  t.Print(out);
}

std::string StageSummary(const node::flowctl::StageConfig& s) {
  std::string kind, detail;
  switch (s.kind_case()) {
    case node::flowctl::StageConfig::kConcurrency:
      kind = "concurrency";
      detail = absl::StrCat("max_in_flight=", s.concurrency().max_in_flight());
      break;
    case node::flowctl::StageConfig::kRate: {
      kind = "rate";
      const auto& r = s.rate();
      if (r.unlimited()) {
        detail = "unlimited";
      } else {
        detail = absl::StrCat(FormatNumber(r.rate_per_second()),
                              r.unit() == node::flowctl::RateStageConfig::BYTES ? " B/s" : "/s",
                              " burst=", FormatNumber(r.burst()));
      }
      break;
    }
    case node::flowctl::StageConfig::kGate:
      kind = "gate";
      detail = s.gate().predicate();
      break;
    case node::flowctl::StageConfig::kAdaptive:
      kind = "adaptive";
      detail = absl::StrCat("limit=[", s.adaptive().min_limit(), ",", s.adaptive().max_limit(),
                            "] (0 = default)");
      break;
    case node::flowctl::StageConfig::kCustom: {
      // A plug-in kind: nodectl does not know its name, only its config type.
      const std::string& url = s.custom().type_url();
      kind = "custom";
      detail = url.substr(url.rfind('/') + 1);
      break;
    }
    case node::flowctl::StageConfig::KIND_NOT_SET:
      kind = "?";
      break;
  }
  std::string prefix = (s.name().empty() || s.name() == kind) ? "" : absl::StrCat(s.name(), "=");
  return absl::StrCat(prefix, kind, "(", detail, ")");
}

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

namespace {
constexpr int kHeightWidth = 10;
constexpr int kHashHexDigits = 12;
constexpr int kTxsWidth = 6;

std::string Pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}
}  // namespace

void PrintCommitHeader(bool receipts, std::ostream& out) {
  std::string line = Pad("HEIGHT", kHeightWidth) + "  " + Pad("HASH", kHashHexDigits) + "  " +
                     (receipts ? Pad("TXS", kTxsWidth) + "  RECEIPTS" : "TXS");
  out << line << "\n";
}

void PrintCommitLine(const node::client::WatchCommitsResponse& block, bool receipts,
                     std::ostream& out) {
  std::string hash = absl::BytesToHexString(block.block_hash()).substr(0, kHashHexDigits);
  std::string line =
      Pad(absl::StrCat(block.height()), kHeightWidth) + "  " + Pad(hash, kHashHexDigits) + "  ";
  const std::string txs = absl::StrCat(block.block().tx_hashes_size());
  if (!receipts) {
    out << line << txs << "\n";
    return;
  }
  std::map<int, int> by_status;
  for (const node::chain::Receipt& r : block.receipts()) ++by_status[r.status()];
  std::vector<std::string> parts;
  for (const auto& [status, n] : by_status) {
    parts.push_back(absl::StrCat(
        n, " ",
        node::chain::Receipt::Status_Name(static_cast<node::chain::Receipt::Status>(status))));
  }
  out << line << Pad(txs, kTxsWidth) << "  " << (parts.empty() ? "-" : absl::StrJoin(parts, ", "))
      << "\n";
}

void PrintValue(const node::client::GetValueRequest& request,
                const node::client::GetValueResponse& response, std::ostream& out) {
  Table t({"KEY", "FOUND", "VALUE", "HEIGHT>"});
  t.AddRow({absl::CHexEscape(request.key()), YesNo(response.found()),
            response.found() ? absl::CHexEscape(response.value()) : "-",
            absl::StrCat(response.height())});
  t.Print(out);
}

std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  // Only fails for malformed Any fields, which the admin API does not use.
  if (!google::protobuf::util::MessageToJsonString(message, &json, options).ok()) {
    return "{}\n";
  }
  if (json.empty() || json.back() != '\n') json += "\n";
  return json;
}

}  // namespace nodectl
