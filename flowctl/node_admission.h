// NodeAdmission: node-wide client admission. When the node saturates, client transactions are
// shed across partitions by their CPU shares, so that no partition's consensus waits behind
// another partition's (or its own) client load. Outside a congestion episode it does nothing
// itself; what a partition lets through also depends on its other replicas' cuts
// (flowctl/peer_admission.h, applied by the partition).
//
// One Update() per arbiter tick, with each partition's load over that tick:
//   cpu_nanos          CPU charged to it: the worker pool's and its client calls' and drain's;
//   entitlement_nanos  the CPU it is entitled to with every partition backlogged (the arbiter's
//                      CPU entitlement of the worker pool: weight, guarantee and ceiling);
//   consensus_delay    its consensus lane's queueing delay over the tick (p99, or the age of the
//                      oldest queued message if larger; Dispatcher::AdaptWeights);
//   backlogged         work was queued at the tick.
// Each partition's CPU is smoothed over kUsageWindow (an exponential average of its rate). A
// partition's first tick is only a baseline (its CPU since it started, which may include its
// start), so its average starts at its second.
//
// Episode. It starts when any partition's consensus delay is above `consensus_delay_target`
// ("late"), or when the partitions together used at least `cpu_busy_fraction` of the worker CPU
// in the tick with work still queued ("saturated"). It ends after `exit_ticks` ticks in a row, and
// `exit_calm` of time, with neither signal and no consensus delay above half the target ("calm"),
// and every partition's admit fraction back to at least kExitAdmitFraction (the refill-to-90%
// exit of stake-weighted QoS schemes): the hysteresis keeps it from flapping at the edge.
//
// Allocation. What a partition is held to during an episode is its entitlement (its share with
// every partition busy), or more with its part of the idle partitions' entitlements. A partition
// is idle after kIdleHold (30 s) without a sign of work: work queued, a pooled tx (one behind a
// nonce gap too), a new block, or CPU of at least kActiveShare of its own entitlement (judged
// against its own, so that its timers stay idle however little the others use); a new partition
// is idle only after kIdleHold too. The idle partitions' entitlements and the active ones' (those
// with work queued or at least kActiveShare of an equal share of the CPU the partitions used) are
// pooled, up to the worker pool's cores, and water-filled among the active ones by entitlement,
// those with work queued or contending wanting all of it and the others kLoanHeadroom times what
// they use (at least their entitlement), each up to its hard CPU limit (the limit bounds pool CPU,
// while the CPU admission weighs includes client calls and the drain, so a borrower at its limit
// may still be cut): as the worker pool lends an idle partition's share. An idle partition has its
// entitlement back at its first sign of work (a tx in its pool, before any block). A partition with
// traffic within kIdleHold is not idle, even when beside a flood it uses less than an equal share's
// tenth: it keeps its entitlement in reserve and a flood beside light partitions is held to its
// own, as before. Without the loan a partition flooded beside fifteen idle ones was held to a
// sixteenth of the pool, half of what the node could commit for it (docs/BENCHMARKS.md, "Idle share
// lent"). The entitlement divides the worker pool (threads x time), which is what the node has only
// when it has its cores to itself. A node that shares its machine (other nodes, a CPU quota) gets
// less, and against the pool's capacity no partition ever looks over its share. So with
// `measured_shares` (the default), while the CPU is contended (PSI "some avg10" of the node's
// cgroup or machine at least `cpu_pressure_percent`, or unknown: flowctl/cpu_pressure.h), the
// allocation is the smaller of that and `measured_share_slack` (2 by default) x the partition's
// weighted share of the CPU the partitions used (smoothed), divided among the active partitions:
// idle partitions reserve nothing of what the node measurably gets. The slack leaves room for the
// differences between partitions that are not load (a partition's primary on this node costs it
// more than a backup); with a slack of 2 a partition holding half the active weight or more is
// never held below what it uses (with two equal partitions the measured allocation is their total).
// 1 holds a flooded partition to an equal share of what the node gets. With the CPU uncontended,
// the worker pool is the capacity and the entitlement with its loan the allocation.
//
// Contending partitions. The slack protects partitions that are not flooded; between flooded
// ones it would leave the weights unapplied (with weights 1:2:4 and a slack of 2, the weight-4
// partition is never held, whatever the others take). So, with measured shares, a partition that
// wants more than it is served and is active "contends". Its signs: it refused client writes for
// want of room in the tick (PartitionLoad::refusing); its client lane held work without a break
// for kContendingBacklog or more, which a partition that keeps up with its clients never does, as
// its lane empties between their calls; its pool holds kContendingPoolFill or more of the txs its
// clients may fill it with (PartitionLoad::pool_fill, all pooled txs counted): txs arrive faster
// than its blocks take them, and a client whose own window bounds what it offers (so that the
// pool is seldom quite full) shows there; or it is being cut (its fraction below 1). Each sign
// holds for kContendingHold, as a flood's refusals come in bursts and its pool ebbs between blocks:
// each gap in a flooded partition's contention hands its share to the others. When two or more
// contend, the CPU they used together is divided among them by weighted water-filling
// (AllocateFairShares). One that is not cut and whose consensus lane has not been late for
// kContendingHold wants what it uses; the others want more: a late lane means it is short of CPU,
// not of work, and only the others' cuts free CPU for it. Each contender is held to the water
// level times its weight: the ones that want more get what the filling gives them, and one that
// wants what it uses is not held below that (it is cut only if it uses more); with every
// contender below the level (each has what it uses) none is held. Among flooded partitions the
// CPU so divides by weight, as the worker pool divides it when it is the bottleneck. Without the
// water-filling a contender that cannot turn its share into CPU (its pool half full of txs behind
// a nonce gap, its blocks bounded by their size, a client's own window) would hold the others to
// its own ratio, and their allocations would follow their cut CPU down. A late lane is taken as a
// shortage of CPU, which the others' cuts relieve (and then it is on time and the rule lets go);
// a contender whose lane stays late for another reason (its own long handlers) still holds the
// others to its ratio while it does. A lone contender keeps the
// slack's allocation alone (its share of what it uses itself would be all of it), so one flooded
// partition beside quiet ones is held exactly as without this rule.
//
// Shedding. Each partition has an admit fraction in [min_admit_fraction, 1]: the share of its
// client write calls let through (AdmissionShedder; a batch is one call). During an episode, until
// its refill:
//   - a partition using more than its allocation (over = smoothed cpu / allocation > 1) is cut
//     by the correction its CPU calls for, 1 / over, kCorrectionsPerWindow times per kUsageWindow:
//     by (1 / over)^(kCorrectionsPerWindow x t / kUsageWindow) in t, at most by kMaxCut per
//     kStepPeriod. On every tick of the episode, not only those with a signal, which come and go
//     within an episode. The smoothed CPU lags a cut by about kUsageWindow: a correction applied
//     whole on every 100-ms step (as until 2026-12-06) was applied ten times over before the
//     average showed the first, and a flooded partition swung between the floor and well over
//     its allocation (docs/BENCHMARKS.md, "A damped cut"). Three per window keeps a steady excess
//     cut fast (at 10x its allocation a partition is at a tenth of its fraction in a third of a
//     second) though slower than before while the average ramps up at a flood's start (at 2x:
//     0.81 per 100 ms against 0.5), and the fraction steadier after;
//   - any other partition grows the same way toward its allocation, by (1 / over)^(
//     kCorrectionsPerWindow x t / kUsageWindow), at most kGrowStep per kStepPeriod (kGrowStep
//     when over is 0: it uses nothing, or has no allocation), up to 1. Close to its allocation it
//     so grows slowly (at 0.9 of it, from the floor to 1 in about 10 s), and contends meanwhile
//     (its fraction below 1): at that fraction it uses about all it is allocated. A partition
//     within its allocation is never cut, even when its own consensus lane is late: on a machine
//     short of cores every lane is late, and cutting the quiet partitions only lost their writes
//     (docs/BENCHMARKS.md, "Node-wide admission").
// Outside an episode every fraction grows by kRefillStep per kStepPeriod, up to 1. Steps are per
// time, not per tick, so the tick's length does not set how fast a fraction moves.
//
// Thread-compatibility: not thread-safe (one caller: the arbiter's tick). AdmissionShedder is
// thread-safe.
#ifndef FLOWCTL_NODE_ADMISSION_H_
#define FLOWCTL_NODE_ADMISSION_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace flowctl {

// One partition's gate: lets through `fraction` of the calls, spread evenly (call k is admitted
// when floor((k + 1) f) > floor(k f), so any run of calls admits within one of f x calls).
// Lock-free.
class AdmissionShedder {
 public:
  // Resolution of the fraction.
  static constexpr int64_t kScale = 1 << 20;

  AdmissionShedder() = default;
  AdmissionShedder(const AdmissionShedder&) = delete;
  AdmissionShedder& operator=(const AdmissionShedder&) = delete;

  // True if this call is let through; counts a refusal otherwise.
  bool Admit();
  // Clamped to [0, 1].
  void SetFraction(double fraction);
  double fraction() const;
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> fraction_{kScale};  // fixed point, kScale = 1
  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> refused_{0};
};

class NodeAdmission {
 public:
  // ---- Policy (see the file comment). ----
  static constexpr double kMaxCut = 0.5;     // at most halved per kStepPeriod for excess
  static constexpr double kGrowStep = 0.05;  // at most, per kStepPeriod, during an episode
  // How many times per kUsageWindow a cut or a growth applies the measured correction.
  static constexpr double kCorrectionsPerWindow = 3;
  static constexpr double kRefillStep = 0.25;  // per kStepPeriod, outside an episode
  static constexpr absl::Duration kStepPeriod = absl::Milliseconds(100);
  static constexpr double kExitAdmitFraction = 0.9;  // every partition at least this to exit
  static constexpr absl::Duration kUsageWindow = absl::Seconds(1);  // CPU smoothing
  static constexpr double kActiveShare = 0.1;  // of an equal share of the measured CPU
  static constexpr absl::Duration kContendingBacklog = absl::Seconds(1);
  static constexpr absl::Duration kContendingHold = absl::Seconds(3);
  static constexpr double kContendingPoolFill = 0.5;
  // A partition lends its entitlement after this long without a sign of work (see "Allocation").
  static constexpr absl::Duration kIdleHold = absl::Seconds(30);
  // An active partition with no work queued that does not contend wants this many times what it
  // uses of the loan (at least its entitlement).
  static constexpr double kLoanHeadroom = 1.25;
  // Relative: a partition at its allocation within this is not over it, nor below the water level.
  static constexpr double kLevelTolerance = 1e-9;

  struct Config {
    absl::Duration consensus_delay_target = absl::Milliseconds(50);  // > 0
    double cpu_busy_fraction = 0.9;                                  // (0, 1]
    double min_admit_fraction = 0.05;                                // (0, 1]
    int exit_ticks = 5;                                              // >= 1
    absl::Duration exit_calm = absl::Seconds(3);                     // >= 0, finite
    bool measured_shares = true;
    double cpu_pressure_percent = 10;  // [0, 100]; 0: measured shares whatever the pressure
    double measured_share_slack = 2;   // [1, 16]
  };

  struct PartitionLoad {
    uint32_t id = 0;
    int64_t cpu_nanos = 0;
    double entitlement_nanos = 0;
    int64_t consensus_delay_nanos = 0;
    bool backlogged = false;
    // It refused client writes for want of room during the tick (a stage, its client lane or its
    // pool said RESOURCE_EXHAUSTED): it is offered more than it is served.
    bool refusing = false;
    // How long its client lane had held work without a break at the tick.
    int64_t client_backlog_nanos = 0;
    // Its pooled txs (all of them: its clients', forwarded, proposed, waiting behind a nonce gap)
    // over the most its clients may fill it with (TxPool::ClientMarkTxs: the lower of its
    // high-water mark and the pool less its forwarding reserve), at the tick. Counted in txs.
    double pool_fill = 0;
    // Its committed height at the tick: a new block is a sign that it is not idle.
    uint64_t height = 0;
    // Its hard CPU limit in force (ShareConfig.hard_ceiling), in cores; 0 = none.
    double cpu_limit_cores = 0;
  };

  struct PartitionState {
    uint32_t id = 0;
    double admit_fraction = 1;
    double cpu_over_entitlement = 0;  // smoothed cpu / allocation (0: no allocation)
    int64_t consensus_delay_nanos = 0;
    double cpu_cores = 0;         // smoothed CPU, in cores
    double allocation_cores = 0;  // what it is held to during an episode, in cores
    bool contending = false;      // see "Contending partitions"
  };

  struct Stats {
    bool congested = false;
    std::optional<double> cpu_pressure;  // PSI some avg10 (percent) at the last Update
    bool measured_allocation = false;    // the last Update's allocations were measured shares
    uint64_t episodes = 0;               // started since creation
    uint64_t congested_ticks = 0;
    std::string trigger;                     // what started the current or last episode
    std::vector<PartitionState> partitions;  // as of the last Update, in its order
  };

  static absl::Status ValidateConfig(const Config& config);
  // REQUIRES: ValidateConfig(config).ok().
  explicit NodeAdmission(Config config);

  // One tick of `elapsed_nanos` (> 0). `cpu_capacity_nanos` = worker threads x elapsed;
  // `cpu_pressure`, PSI some avg10 in percent (nullopt: unknown). Partitions not in `loads` are
  // forgotten (removed); new ones start at fraction 1. Returns each partition's admit fraction,
  // in `loads` order.
  std::vector<double> Update(int64_t elapsed_nanos, int64_t cpu_capacity_nanos,
                             absl::Span<const PartitionLoad> loads,
                             std::optional<double> cpu_pressure = std::nullopt);

  const Stats& stats() const { return stats_; }
  const Config& config() const { return config_; }

 private:
  const Config config_;
  struct Track {
    double fraction = 1;
    double cpu_rate = 0;             // smoothed CPU nanoseconds per nanosecond
    bool sampled = false;            // false until its first tick after the baseline
    int64_t contend_left_nanos = 0;  // of kContendingHold since its last sign of contention
    int64_t short_left_nanos = 0;    // of kContendingHold since its consensus lane was last late
    uint64_t height = 0;             // at the last tick
    int64_t busy_left_nanos = 0;     // of kIdleHold since its last sign of work (or its start)
  };
  int calm_ticks_ = 0;
  int64_t calm_nanos_ = 0;  // of calm ticks in a row
  absl::flat_hash_map<uint32_t, Track> tracks_;
  Stats stats_;
};

}  // namespace flowctl

#endif  // FLOWCTL_NODE_ADMISSION_H_
