// NodeAdmission: node-wide client admission. When the node saturates, client transactions are
// shed across partitions by their CPU entitlements, so that no partition's consensus waits behind
// another partition's (or its own) client load. Outside a congestion episode it does nothing.
//
// One Update() per arbiter tick, with each partition's load over that tick:
//   cpu_nanos          worker CPU it used;
//   entitlement_nanos  the CPU it is entitled to with every partition backlogged (the arbiter's
//                      CPU entitlement: weight, guarantee and ceiling);
//   consensus_delay    its consensus lane's queueing delay over the tick (p99, or the age of the
//                      oldest queued message if larger; Dispatcher::AdaptWeights);
//   backlogged         work was queued at the tick.
//
// Episode. It starts when any partition's consensus delay is above `consensus_delay_target`
// ("late"), or when the partitions together used at least `cpu_busy_fraction` of the CPU with
// work still queued ("saturated"). It ends after `exit_ticks` ticks in a row with neither signal,
// no consensus delay above half the target, and every partition's admit fraction back to at least
// kExitAdmitFraction (the refill-to-90% exit of stake-weighted QoS schemes): the hysteresis keeps
// it from flapping at the edge.
//
// Shedding. Each partition has an admit fraction in [min_admit_fraction, 1]: the share of its
// client write calls let through (AdmissionShedder; a batch is one call). During an episode, on
// every tick with a signal (late or saturated):
//   - a partition that used more than its entitlement (over = cpu / entitlement > 1) is cut to
//     fraction x max(kMaxCut, 1 / over): in proportion to its excess. The entitlement is its
//     share with every partition busy, so during an episode nobody borrows idle share;
//   - any other partition grows by kGrowStep, up to 1. A partition within its entitlement is
//     never cut, even when its own consensus lane is late: on a machine short of cores every
//     lane is late, and cutting the quiet partitions only lost their writes (docs/BENCHMARKS.md,
//     "Node-wide admission").
// Outside an episode every fraction grows by kRefillStep per tick, up to 1.
//
// Thread-compatibility: not thread-safe (one caller: the arbiter's tick). AdmissionShedder is
// thread-safe.
#ifndef FLOWCTL_NODE_ADMISSION_H_
#define FLOWCTL_NODE_ADMISSION_H_

#include <atomic>
#include <cstdint>
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
  static constexpr double kMaxCut = 0.5;             // at most halved per tick for excess
  static constexpr double kGrowStep = 0.05;          // during an episode
  static constexpr double kRefillStep = 0.25;        // outside an episode
  static constexpr double kExitAdmitFraction = 0.9;  // every partition at least this to exit

  struct Config {
    absl::Duration consensus_delay_target = absl::Milliseconds(50);  // > 0
    double cpu_busy_fraction = 0.9;                                  // (0, 1]
    double min_admit_fraction = 0.05;                                // (0, 1]
    int exit_ticks = 5;                                              // >= 1
  };

  struct PartitionLoad {
    uint32_t id = 0;
    int64_t cpu_nanos = 0;
    double entitlement_nanos = 0;
    int64_t consensus_delay_nanos = 0;
    bool backlogged = false;
  };

  struct PartitionState {
    uint32_t id = 0;
    double admit_fraction = 1;
    double cpu_over_entitlement = 0;  // the last tick's cpu / entitlement (0: no entitlement)
    int64_t consensus_delay_nanos = 0;
  };

  struct Stats {
    bool congested = false;
    uint64_t episodes = 0;  // started since creation
    uint64_t congested_ticks = 0;
    std::string trigger;                     // what started the current or last episode
    std::vector<PartitionState> partitions;  // as of the last Update, in its order
  };

  static absl::Status ValidateConfig(const Config& config);
  // REQUIRES: ValidateConfig(config).ok().
  explicit NodeAdmission(Config config);

  // One tick. `cpu_capacity_nanos` = worker threads x the tick's elapsed time. Partitions not in
  // `loads` are forgotten (removed); new ones start at fraction 1. Returns each partition's admit
  // fraction, in `loads` order.
  std::vector<double> Update(int64_t cpu_capacity_nanos, absl::Span<const PartitionLoad> loads);

  const Stats& stats() const { return stats_; }
  const Config& config() const { return config_; }

 private:
  const Config config_;
  int calm_ticks_ = 0;
  absl::flat_hash_map<uint32_t, double> fraction_;
  Stats stats_;
};

}  // namespace flowctl

#endif  // FLOWCTL_NODE_ADMISSION_H_
