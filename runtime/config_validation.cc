#include "runtime/config_validation.h"

#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "flowctl/spill_fifo.h"
#include "flowctl/stage_registry.h"

namespace runtime {
namespace {

using node::config::ConsensusConfig;
using node::config::DispatcherConfig;
using node::config::LaneConfig;
using node::config::LosslessConfig;
using node::config::NodeConfig;
using node::config::PartitionConfig;
using node::config::PoolConfig;
using node::config::ResourceConfig;
using node::config::ShareConfig;
using node::config::WatchConfig;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

// Appends problems under one path prefix.
class Checker {
 public:
  explicit Checker(std::string at) : at_(std::move(at)) {}

  void Fail(absl::string_view field, std::string message) {
    problems_.push_back({absl::StrCat(at_, ".", field), std::move(message)});
  }
  template <typename T>
  void AtLeast(absl::string_view field, T value, T min) {
    if (value < min) Fail(field, absl::StrCat("must be >= ", min, ", got ", value));
  }
  template <typename T>
  void AtMost(absl::string_view field, T value, T max) {
    if (value > max) Fail(field, absl::StrCat("must be <= ", max, ", got ", value));
  }
  void InRange(absl::string_view field, double value, double lo, double hi) {
    if (!(value >= lo && value <= hi)) {
      Fail(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
    }
  }
  // > 0 and finite (NaN fails).
  void Positive(absl::string_view field, double value) {
    if (!(value > 0)) {
      Fail(field, absl::StrCat("must be > 0, got ", value));
    } else if (std::isinf(value)) {
      Fail(field, absl::StrCat("must be finite, got ", value));
    }
  }
  void Append(std::vector<ConfigProblem> more) {
    for (ConfigProblem& p : more) problems_.push_back(std::move(p));
  }

  const std::string& at() const { return at_; }
  std::vector<ConfigProblem> Take() { return std::move(problems_); }

 private:
  const std::string at_;
  std::vector<ConfigProblem> problems_;
};

bool IsHexKey(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

std::string PartitionPath(absl::string_view name) { return absl::StrCat("partitions[", name, "]"); }

bool IsValidPartitionName(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

absl::Status ProblemsToStatus(const std::vector<ConfigProblem>& problems) {
  if (problems.empty()) return absl::OkStatus();
  std::vector<std::string> lines;
  lines.reserve(problems.size());
  for (const ConfigProblem& p : problems) lines.push_back(absl::StrCat(p.path, ": ", p.message));
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

std::vector<ConfigProblem> ValidateShareConfig(const ShareConfig& s, const std::string& at) {
  Checker check(at);
  check.Positive("weight", s.weight());
  const bool guarantee_ok = s.guarantee_fraction() >= 0 && s.guarantee_fraction() <= 1;
  check.InRange("guarantee_fraction", s.guarantee_fraction(), 0, 1);
  if (!(s.ceiling_fraction() > 0 && s.ceiling_fraction() <= 1)) {
    check.Fail("ceiling_fraction", absl::StrCat("must be in (0, 1], got ", s.ceiling_fraction()));
  } else if (guarantee_ok && s.ceiling_fraction() < s.guarantee_fraction()) {
    check.Fail("ceiling_fraction",
               absl::StrCat("must be >= guarantee_fraction (", s.guarantee_fraction(), "), got ",
                            s.ceiling_fraction()));
  }
  if (s.hard_ceiling() && !(s.ceiling_fraction() > 0 && s.ceiling_fraction() < 1)) {
    check.Fail("hard_ceiling",
               absl::StrCat("needs a ceiling_fraction in (0, 1), got ", s.ceiling_fraction()));
  }
  return check.Take();
}

std::vector<ConfigProblem> ValidateLaneConfig(const LaneConfig& w, const std::string& at) {
  Checker check(at);
  for (auto [name, value] : {std::pair{"consensus", w.consensus()},
                             {"sync", w.sync()},
                             {"tx_forward", w.tx_forward()},
                             {"bulk", w.bulk()},
                             {"client", w.client()}}) {
    if (!(value > 0)) {
      check.Fail(name, absl::StrCat("must be > 0, got ", value));
    } else if (value > kMaxLaneWeight) {
      check.Fail(
          name, absl::StrCat("must be <= ", static_cast<int64_t>(kMaxLaneWeight), ", got ", value));
    }
  }
  return check.Take();
}

std::vector<ConfigProblem> ValidateAdaptiveLaneWeights(const node::config::AdaptiveLaneWeights& a,
                                                       const LaneConfig& w, const std::string& at) {
  Checker check(at);
  for (auto [name, weight, t] : {std::tuple{"consensus", w.consensus(), &a.consensus()},
                                 {"sync", w.sync(), &a.sync()},
                                 {"tx_forward", w.tx_forward(), &a.tx_forward()},
                                 {"bulk", w.bulk(), &a.bulk()},
                                 {"client", w.client(), &a.client()}}) {
    check.InRange(absl::StrCat(name, ".target_p99_ms"), t->target_p99_ms(), 0,
                  kMaxLaneDelayTargetMs);
    check.InRange(absl::StrCat(name, ".max_weight"), t->max_weight(), 0, kMaxLaneWeight);
    // A ceiling below the lane's weight would leave adaptation silently off for that lane.
    if (t->target_p99_ms() > 0 && t->max_weight() > 0 && t->max_weight() < weight) {
      check.Fail(absl::StrCat(name, ".max_weight"),
                 absl::StrCat("must be 0 (8x the weight) or >= lane_weights.", name, " (", weight,
                              "), got ", t->max_weight()));
    }
  }
  return check.Take();
}

std::vector<ConfigProblem> ValidateDispatcherConfig(const DispatcherConfig& d,
                                                    const std::string& at) {
  Checker check(at);
  check.AtLeast<uint32_t>("budget_messages", d.budget_messages(), 1);
  check.AtLeast<uint64_t>("budget_bytes", d.budget_bytes(), 1);
  check.Append(ValidateLaneConfig(d.lane_weights(), at + ".lane_weights"));
  check.Append(ValidateAdaptiveLaneWeights(d.adaptive_weights(), d.lane_weights(),
                                           at + ".adaptive_weights"));
  return check.Take();
}

void ApplyAdaptiveLaneDefaults(node::config::AdaptiveLaneWeights* adaptive) {
  if (!adaptive->has_enabled()) adaptive->set_enabled(false);
  if (!adaptive->has_consensus()) {
    adaptive->mutable_consensus()->set_target_p99_ms(kDefaultConsensusDelayTargetMs);
  }
}

std::vector<ConfigProblem> ValidatePoolConfig(const PoolConfig& pool, const std::string& at) {
  Checker check(at);
  check.AtLeast<uint32_t>("max_txs", pool.max_txs(), 1);
  check.InRange("forward_reserve_fraction", pool.forward_reserve_fraction(), 0, 0.5);
  check.InRange("high_water_fraction", pool.high_water_fraction(), 0.01, 1);
  check.InRange("retry_reserve_fraction", pool.retry_reserve_fraction(), 0, 0.5);
  check.AtLeast<uint32_t>("max_tx_bytes", pool.max_tx_bytes(), 128);
  check.AtLeast<uint64_t>("max_bytes", pool.max_bytes(), pool.max_tx_bytes());
  if (pool.max_per_sender() < 1) {
    check.AtLeast<uint32_t>("max_per_sender", pool.max_per_sender(), 1);
  } else if (pool.max_per_sender() > pool.max_txs()) {
    check.Fail("max_per_sender", absl::StrCat("must be <= max_txs (", pool.max_txs(), "), got ",
                                              pool.max_per_sender()));
  }
  check.AtLeast<uint32_t>("ttl_seconds", pool.ttl_seconds(), 1);
  return check.Take();
}

std::vector<ConfigProblem> ValidateConsensusConfig(const ConsensusConfig& c,
                                                   const std::string& at) {
  Checker check(at);
  check.AtLeast<uint32_t>("batch_max_txs", c.batch_max_txs(), 1);
  check.AtLeast<uint32_t>("checkpoint_interval", c.checkpoint_interval(), 1);
  if (c.checkpoint_interval() >= 1 && (c.watermark_window() % c.checkpoint_interval() != 0 ||
                                       c.watermark_window() < 2 * c.checkpoint_interval())) {
    check.Fail("watermark_window",
               absl::StrCat("must be a multiple of checkpoint_interval (", c.checkpoint_interval(),
                            ") and at least twice it, got ", c.watermark_window()));
  }
  check.AtLeast<uint32_t>("view_change_timeout_ms", c.view_change_timeout_ms(), 100);
  // A backup's txs must reach the primary well within a request timer.
  if (uint64_t{c.forward_interval_ms()} * 4 > c.view_change_timeout_ms()) {
    check.Fail("forward_interval_ms",
               absl::StrCat("must be at most a quarter of view_change_timeout_ms (",
                            c.view_change_timeout_ms(), "), got ", c.forward_interval_ms()));
  }
  return check.Take();
}

std::vector<ConfigProblem> ValidateLosslessConfig(const LosslessConfig& l, const std::string& at) {
  Checker check(at);
  if (!l.enabled()) return {};
  check.AtLeast<uint64_t>("drain_bytes_per_second", l.drain_bytes_per_second(), 1);
  check.AtLeast<uint64_t>("segment_bytes", l.segment_bytes(), 64 * kKiB);
  check.AtMost<uint32_t>("sync_interval_ms", l.sync_interval_ms(), 10'000);
  return check.Take();
}

std::vector<ConfigProblem> ValidateWatchConfig(const WatchConfig& w, const std::string& at) {
  Checker check(at);
  check.AtLeast<uint32_t>("max_watchers", w.max_watchers(), 1);
  check.AtMost<uint32_t>("max_watchers", w.max_watchers(), 100'000);
  check.AtLeast<uint32_t>("max_buffered_blocks", w.max_buffered_blocks(), 1);
  check.AtMost<uint32_t>("max_buffered_blocks", w.max_buffered_blocks(), 1'000'000);
  check.AtLeast<uint64_t>("max_buffered_bytes", w.max_buffered_bytes(), 64 * kKiB);
  return check.Take();
}

std::vector<ConfigProblem> ValidateStageChainConfig(const node::flowctl::StageChainConfig& chain,
                                                    const std::string& at) {
  Checker check(at);
  if (chain.stages().empty()) {
    check.Fail("stages", "must list at least one stage");
    return check.Take();
  }
  flowctl::StageRegistry registry;
  for (const GatePredicateSpec& gate : kGatePredicates) {
    absl::Status s = registry.RegisterPredicate(std::string(gate.name), gate.rejects_as,
                                                [](const flowctl::RequestMeta&) { return true; });
    if (!s.ok()) check.Fail("stages", absl::StrCat("internal: ", s.message()));
  }
  // The registry's errors are "<field>: <problem>" with fields relative to the chain.
  const absl::Status s = registry.Validate(chain);
  if (!s.ok()) {
    const std::vector<absl::string_view> parts =
        absl::StrSplit(s.message(), absl::MaxSplits(": ", 1));
    check.Fail(parts[0], parts.size() > 1 ? std::string(parts[1]) : "invalid");
  }
  return check.Take();
}

std::vector<ConfigProblem> ValidatePartitionConfig(const PartitionConfig& p,
                                                   const std::string& at) {
  Checker check(at);
  check.AtLeast<uint32_t>("id", p.id(), 1);
  if (p.name().empty()) {
    check.Fail("name", "is required");
  } else if (!IsValidPartitionName(p.name())) {
    check.Fail("name",
               absl::StrCat("may hold only letters, digits, '_' and '-', got \"", p.name(), "\""));
  }
  check.Append(ValidateShareConfig(p.share(), at + ".share"));
  check.Append(ValidateStageChainConfig(p.interceptor(), at + ".interceptor"));
  check.Append(ValidateStageChainConfig(p.read_interceptor(), at + ".read_interceptor"));
  for (int i = 0; i < p.read_interceptor().stages_size(); ++i) {
    if (p.read_interceptor().stages(i).has_adaptive()) {
      check.Fail(absl::StrCat("read_interceptor.stages[", i, "].adaptive"),
                 "not for reads: an adaptive stage follows a transaction to its commit "
                 "(use concurrency or rate)");
    }
    if (p.read_interceptor().stages(i).has_gate()) {
      check.Fail(absl::StrCat("read_interceptor.stages[", i, "].gate"),
                 "not for reads: the gates test write-side conditions (consensus, the pool) "
                 "that a read does not depend on (use concurrency or rate)");
    }
  }
  check.AtMost<uint32_t>("read_hold.max_wait_ms", p.read_hold().max_wait_ms(), 60000);
  check.AtMost<uint32_t>("read_hold.max_waiting", p.read_hold().max_waiting(), 1000000);
  check.Append(ValidateDispatcherConfig(p.dispatcher(), at + ".dispatcher"));
  check.Append(ValidatePoolConfig(p.pool(), at + ".pool"));
  check.Append(ValidateConsensusConfig(p.consensus(), at + ".consensus"));
  // A batch must hold at least one transaction of the largest size the pool accepts.
  check.AtLeast<uint64_t>("consensus.batch_max_bytes", p.consensus().batch_max_bytes(),
                          p.pool().max_tx_bytes());
  check.Append(ValidateLosslessConfig(p.lossless(), at + ".lossless"));
  if (p.lossless().enabled() && p.lossless().disk_budget_bytes() > 0 &&
      p.lossless().disk_budget_bytes() < LosslessMinDiskBudget(p)) {
    check.Fail("lossless.disk_budget_bytes",
               absl::StrCat("must be 0 (none) or at least two segments and two of the largest "
                            "txs (",
                            LosslessMinDiskBudget(p), "), got ", p.lossless().disk_budget_bytes()));
  }
  // A cache smaller than one account entry caches nothing; 1 MiB keeps a block's working set.
  check.AtLeast<uint64_t>("state.cache_bytes", p.state().cache_bytes(), 1 << 20);
  check.AtLeast<uint64_t>("state.block_cache_bytes", p.state().block_cache_bytes(), 1 << 20);
  if (const uint64_t keep = p.state().retain_blocks(); keep > 0) {
    // Peers far behind join by a snapshot at a recent stable checkpoint (>= tip - window), and
    // nodes less than snapshot_sync_min_blocks behind replay blocks: both must still be here.
    const uint64_t gap = p.consensus().snapshot_sync_min_blocks();
    const uint64_t window = p.consensus().watermark_window();
    if (gap > std::numeric_limits<uint64_t>::max() - window || keep < gap + window) {
      check.Fail("state.retain_blocks",
                 absl::StrCat("must be 0 (keep every block) or at least "
                              "consensus.snapshot_sync_min_blocks + consensus.watermark_window (",
                              gap, " + ", window, "), got ", keep));
    }
  }
  check.Append(ValidateWatchConfig(p.watch(), at + ".watch"));

  absl::flat_hash_set<std::string> keys;
  for (int i = 0; i < p.genesis_size(); ++i) {
    const std::string field = absl::StrCat("genesis[", i, "].public_key_hex");
    const std::string key = absl::AsciiStrToLower(p.genesis(i).public_key_hex());
    if (!IsHexKey(key)) {
      check.Fail(field, "must be 64 hex characters (an Ed25519 public key)");
    } else if (!keys.insert(key).second) {
      check.Fail(field, "repeats an earlier genesis account");
    }
  }
  return check.Take();
}

std::vector<ConfigProblem> ValidateEgressConfig(const ResourceConfig& r, const std::string& at) {
  Checker check(at);
  if (r.egress_bytes_per_second() != 0 &&
      r.tx_forward_floor_bytes_per_second() > r.egress_bytes_per_second()) {
    check.Fail("tx_forward_floor_bytes_per_second",
               absl::StrCat("must be <= egress_bytes_per_second (", r.egress_bytes_per_second(),
                            "), got ", r.tx_forward_floor_bytes_per_second()));
  }
  return check.Take();
}

std::vector<ConfigProblem> ValidateResourceConfig(const ResourceConfig& r, const std::string& at) {
  Checker check(at);
  check.AtLeast<uint32_t>("cpu_workers", r.cpu_workers(), 1);
  check.AtMost<uint32_t>("cpu_workers", r.cpu_workers(), kMaxCpuWorkers);
  check.AtLeast<uint64_t>("memory_bytes", r.memory_bytes(), 16 * kMiB);
  check.Append(ValidateEgressConfig(r, at));
  if (r.arbiter_tick_ms() < 10 || r.arbiter_tick_ms() > 10'000) {
    check.Fail("arbiter_tick_ms",
               absl::StrCat("must be in [10, 10000], got ", r.arbiter_tick_ms()));
  }
  check.AtMost<uint32_t>("consensus_blocks_per_second", r.consensus_blocks_per_second(),
                         kMaxConsensusBlocksPerSecond);
  check.AtLeast<uint64_t>("ledger_write_buffer_bytes", r.ledger_write_buffer_bytes(),
                          kMinLedgerWriteBufferBytes);
  const node::config::BlockBudgetAdaptation& bba = r.block_budget_adaptation();
  check.AtMost<uint32_t>("block_budget_adaptation.min_blocks_per_second",
                         bba.min_blocks_per_second(), kMaxConsensusBlocksPerSecond);
  if (!(bba.queueing_delay_target_ms() > 0 && bba.queueing_delay_target_ms() <= 60000)) {
    check.Fail("block_budget_adaptation.queueing_delay_target_ms",
               absl::StrCat("must be in (0, 60000], got ", bba.queueing_delay_target_ms()));
  }
  const node::config::MemoryPressureConfig& m = r.memory_pressure();
  auto in = [&](const char* field, double v, double lo, bool lo_open, double hi, bool hi_open) {
    if (!std::isfinite(v) || (lo_open ? v <= lo : v < lo) || (hi_open ? v >= hi : v > hi)) {
      check.Fail(absl::StrCat("memory_pressure.", field),
                 absl::StrCat("must be in ", lo_open ? "(" : "[", lo, ", ", hi, hi_open ? ")" : "]",
                              ", got ", v));
    }
  };
  in("psi_full_scale_percent", m.psi_full_scale_percent(), 0, true, 100, false);
  in("shrink_pools_at", m.shrink_pools_at(), 0, true, 2, false);
  in("drop_forwarded_at", m.drop_forwarded_at(), 0, true, 2, false);
  in("refuse_clients_at", m.refuse_clients_at(), 0, true, 2, false);
  in("min_pool_scale", m.min_pool_scale(), 0, true, 1, false);
  in("hysteresis", m.hysteresis(), 0, false, 0.5, true);
  // A switch turns off `hysteresis` below its threshold: that must be above 0, or it never does.
  for (const auto& [field, at] : {std::pair{"drop_forwarded_at", m.drop_forwarded_at()},
                                  std::pair{"refuse_clients_at", m.refuse_clients_at()}}) {
    if (std::isfinite(at) && at <= m.hysteresis()) {
      check.Fail(absl::StrCat("memory_pressure.", field),
                 absl::StrCat("must be above memory_pressure.hysteresis (", m.hysteresis(),
                              "), got ", at, ": the action would never turn off"));
    }
  }
  const node::config::NodeAdmissionConfig& na = r.node_admission();
  auto admission_in = [&](const char* field, double v, double hi) {
    if (!(v > 0 && v <= hi)) {
      check.Fail(absl::StrCat("node_admission.", field),
                 absl::StrCat("must be in (0, ", hi, "], got ", v));
    }
  };
  admission_in("consensus_delay_target_ms", na.consensus_delay_target_ms(), 60000);
  admission_in("cpu_busy_fraction", na.cpu_busy_fraction(), 1);
  admission_in("min_admit_fraction", na.min_admit_fraction(), 1);
  if (na.exit_ticks() < 1 || na.exit_ticks() > 1000) {
    check.Fail("node_admission.exit_ticks",
               absl::StrCat("must be in [1, 1000], got ", na.exit_ticks()));
  }
  if (!(na.measured_share_slack() >= 1 && na.measured_share_slack() <= 16)) {
    check.Fail("node_admission.measured_share_slack",
               absl::StrCat("must be in [1, 16], got ", na.measured_share_slack()));
  }
  if (!(na.cpu_pressure_percent() >= 0 && na.cpu_pressure_percent() <= 100)) {
    check.Fail("node_admission.cpu_pressure_percent",
               absl::StrCat("must be in [0, 100], got ", na.cpu_pressure_percent()));
  }
  if (na.exit_calm_ms() > 60000) {
    check.Fail("node_admission.exit_calm_ms",
               absl::StrCat("must be in [0, 60000], got ", na.exit_calm_ms()));
  }
  if (na.enabled() && na.agree_with_peers() && r.arbiter_tick_ms() > 500) {
    check.Fail("node_admission.agree_with_peers",
               absl::StrCat("needs arbiter_tick_ms <= 500 (the cuts are sent to the other "
                            "replicas on the tick and expire 2 s after the last one), got ",
                            r.arbiter_tick_ms(), "; or set agree_with_peers: false"));
  }
  if (r.arbiter_advisory() && na.enabled()) {
    check.Fail("arbiter_advisory",
               "cannot be used with node_admission.enabled (admission weighs each partition's "
               "CPU against the entitlement the arbiter applies, and an advisory arbiter applies "
               "none); set node_admission { enabled: false } or leave enabled out");
  }
  return check.Take();
}

uint64_t LosslessMinDiskBudget(const PartitionConfig& p) {
  flowctl::SpillFifoOptions options;
  options.segment_bytes = p.lossless().segment_bytes();
  options.max_record_bytes = static_cast<uint32_t>(p.pool().max_tx_bytes());
  return flowctl::SpillFifo::MinDiskBudget(options);
}

std::vector<ConfigProblem> ValidateSpillDisk(const NodeConfig& config) {
  const uint64_t total = config.resources().spill_disk_bytes();
  if (total == 0) return {};
  uint64_t least = 0;
  for (const PartitionConfig& p : config.partitions()) {
    if (p.lossless().enabled()) least += LosslessMinDiskBudget(p);
  }
  if (total >= least) return {};
  return {{"resources.spill_disk_bytes",
           absl::StrCat("must be 0 (not divided) or at least the lossless partitions' smallest "
                        "budgets together (",
                        least, "), got ", total)}};
}

std::vector<ConfigProblem> ValidateGuaranteeSum(const std::vector<ShareConfig>& shares) {
  double sum = 0;
  for (const ShareConfig& s : shares) sum += s.guarantee_fraction();
  if (sum <= 1 + 1e-9) return {};
  return {{"partitions", absl::StrCat("share.guarantee_fraction sums to ", sum,
                                      " over all partitions; must be <= 1")}};
}

absl::StatusOr<PartitionConfig> ApplyFlowUpdate(
    const PartitionConfig& current, const node::admin::UpdatePartitionFlowRequest& request) {
  const std::string at = PartitionPath(current.name());
  PartitionConfig next = current;
  std::vector<ConfigProblem> problems;
  if (request.has_interceptor()) *next.mutable_interceptor() = request.interceptor();
  if (request.has_read_interceptor()) {
    *next.mutable_read_interceptor() = request.read_interceptor();
  }
  if (request.has_read_hold()) *next.mutable_read_hold() = request.read_hold();
  if (request.has_dispatcher()) {
    const DispatcherConfig& d = request.dispatcher();
    DispatcherConfig& nd = *next.mutable_dispatcher();
    const LaneConfig& w = d.lane_weights();
    LaneConfig& nw = *nd.mutable_lane_weights();
    // 0 keeps the current weight; anything else (negative and NaN too) is validated below.
    if (w.consensus() != 0) nw.set_consensus(w.consensus());
    if (w.sync() != 0) nw.set_sync(w.sync());
    if (w.tx_forward() != 0) nw.set_tx_forward(w.tx_forward());
    if (w.bulk() != 0) nw.set_bulk(w.bulk());
    if (w.client() != 0) nw.set_client(w.client());
    if (d.budget_messages() > 0) nd.set_budget_messages(d.budget_messages());
    if (d.budget_bytes() > 0) nd.set_budget_bytes(d.budget_bytes());
    if (d.has_adaptive_weights()) {
      *nd.mutable_adaptive_weights() = d.adaptive_weights();
      ApplyAdaptiveLaneDefaults(nd.mutable_adaptive_weights());
    }
  }
  if (request.has_pool()) {
    const PoolConfig& p = request.pool();
    PoolConfig& np = *next.mutable_pool();
    if (p.max_txs() > 0) np.set_max_txs(p.max_txs());
    if (p.max_bytes() > 0) np.set_max_bytes(p.max_bytes());
    if (p.max_per_sender() > 0) np.set_max_per_sender(p.max_per_sender());
    if (p.forward_reserve_fraction() != 0) {
      np.set_forward_reserve_fraction(p.forward_reserve_fraction());
    }
    if (p.high_water_fraction() != 0) np.set_high_water_fraction(p.high_water_fraction());
    if (p.ttl_seconds() > 0) np.set_ttl_seconds(p.ttl_seconds());
    if (p.has_retry_reserve_fraction()) np.set_retry_reserve_fraction(p.retry_reserve_fraction());
    if (p.max_tx_bytes() > 0 && p.max_tx_bytes() != current.pool().max_tx_bytes()) {
      problems.push_back({at + ".pool.max_tx_bytes",
                          absl::StrCat("cannot be changed live (restart with it in the config), "
                                       "got ",
                                       p.max_tx_bytes())});
    }
  }
  if (request.has_lossless()) {
    const node::admin::LosslessUpdate& l = request.lossless();
    if (!current.lossless().enabled()) {
      problems.push_back({at + ".lossless", "the partition is not lossless"});
    }
    LosslessConfig& nl = *next.mutable_lossless();
    if (l.drain_bytes_per_second() > 0) nl.set_drain_bytes_per_second(l.drain_bytes_per_second());
    if (l.set_disk_budget()) nl.set_disk_budget_bytes(l.disk_budget_bytes());
  }
  for (ConfigProblem& p : ValidatePartitionConfig(next, at)) problems.push_back(std::move(p));
  if (absl::Status s = ProblemsToStatus(problems); !s.ok()) return s;
  return next;
}

ShareConfig ShareFromUpdate(const ShareConfig& share) {
  ShareConfig next = share;
  if (next.ceiling_fraction() == 0) next.set_ceiling_fraction(1);
  return next;
}

absl::StatusOr<ResourceConfig> ApplyEgressUpdate(const ResourceConfig& current,
                                                 const node::admin::UpdateEgressRequest& request) {
  ResourceConfig next = current;
  if (request.set_cap()) next.set_egress_bytes_per_second(request.cap_bytes_per_second());
  if (request.tx_forward_floor_bytes_per_second() > 0) {
    next.set_tx_forward_floor_bytes_per_second(request.tx_forward_floor_bytes_per_second());
  }
  if (absl::Status s = ProblemsToStatus(ValidateEgressConfig(next, "resources")); !s.ok()) {
    return s;
  }
  return next;
}

}  // namespace runtime
