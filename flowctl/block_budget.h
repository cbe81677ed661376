// BlockBudget: the node's consensus instances (blocks) per second, divided among the partitions
// that have transactions waiting, by weight (the node gives a partition its share weight times
// the fraction of its client writes node-wide admission lets through).
//
// Every block costs each replica a fixed amount whatever it holds: its votes' signatures and
// their checks, a dozen peer messages and their thread hand-offs, synced writes. One partition
// under load amortizes that over large blocks; sixteen partitions sharing the same load would
// each cut a block as soon as their last one committed: about seven times the blocks of one
// partition, a seventh the size (docs/BENCHMARKS.md, "The node's block budget"). The budget
// bounds the node's block rate when partitions compete: a partition whose
// pool holds ready transactions is *active* for `kActiveWindowNanos`, and an active partition's
// primary cuts a partial batch no sooner than
//
//   interval = (the other active partitions' weight) / (its weight x blocks_per_second)
//
// after its previous cut: between two of its own partial batches it leaves the time the budget
// gives the others for theirs. A partition alone is never held (its own round paces it: holding
// it only idles the consensus it needs at saturation); two equal ones are 1/budget apart each;
// sixteen equal ones 15/budget, and their blocks grow instead of their number, the node's rate
// tending to the budget. Full batches are never held (BatchPolicy). An idle partition's share
// goes to the active ones; a partition that becomes active counts at once (its first call).
//
// Adaptation (SetAdaptation): each block costs the same CPU whatever it holds, so on a node short
// of CPU fewer, larger blocks leave more of it for the work that waits, and the partitions'
// messages queue less for the worker pool. Fed every arbiter tick (Observe) with each partition's
// queueing delays (of the messages its lanes started) and blocks committed, the budget in force
// moves between `min_blocks_per_second` and the configured budget (its ceiling), one step per
// `step_nanos`. The step's delay is the lower median, over the partitions that started messages in
// the step, of each one's mean queueing delay over the step: a flood, or a partition held by its
// own hard CPU ceiling, queues its own lanes, not the node's, and more than half of those
// partitions must queue to move it. It counts when the step saw at least kMinDelaySamples messages.
// The budget binds when at least two partitions are active and the node committed at least
// kBindingFraction of the budget in the step (a flood makes few blocks, full ones, which are never
// held: lowering the budget under it would only space the others' partial ones).
//   - down (x kLowerFactor) while the delay is above `delay_target_nanos` and the budget binds,
//     unless every active partition's spacing is already at its caller's bound (then held: a
//     lower budget would space none of them further; one at its bound alone, say one given a
//     small weight, leaves the others to space; a step is wasted when those others cut only full
//     batches, which are never held, and the budget comes back up while it does not bind);
//   - back up (by max(1, ceiling / 16)) while the delay is at most half the target, or does not
//     count, or the budget does not bind;
//   - held in between.
// A partition alone is never held whatever the budget, so one busy partition never moves it.
//
// Each node counts the partitions active in its own pools: txs sent to a replica other than the
// partition's primary are forwarded to every replica, but a primary holds its own clients' txs
// for its proposal, so the nodes of a cluster count about, not exactly, the same active set.
// Times are the caller's (an injected clock's) nanos.
//
// Thread-safe.
//
//   flowctl::BlockBudget budget(64);
//   budget.SetWeight(partition_id, share.weight() * admit_fraction);
//   int64_t interval = budget.PartialBatchIntervalNanos(partition_id, clock->NowNanos());
//   // BatchPolicy::Decide(..., /*partial_not_before_nanos=*/last_cut + interval)
#ifndef FLOWCTL_BLOCK_BUDGET_H_
#define FLOWCTL_BLOCK_BUDGET_H_

#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace flowctl {

class BlockBudget {
 public:
  // How long a partition stays active after it was last seen with transactions waiting.
  static constexpr int64_t kActiveWindowNanos = 1'000'000'000;
  // Adaptation (see the file comment).
  static constexpr double kLowerFactor = 0.85;
  static constexpr double kBindingFraction = 0.5;
  // A step with fewer messages than this says nothing about their queueing.
  static constexpr uint64_t kMinDelaySamples = 10;

  struct Adaptation {
    bool enabled = false;
    uint32_t min_blocks_per_second = 16;     // >= 1
    int64_t delay_target_nanos = 5'000'000;  // > 0
    int64_t step_nanos = 1'000'000'000;      // > 0
  };
  // The adaptation as of its last step, for stats.
  struct AdaptationStats {
    int64_t mean_delay_nanos = 0;  // the last step's delay (see the file comment)
    double blocks_per_second = 0;  // the blocks the node committed per second in that step
    uint64_t lowered = 0;          // steps that lowered the budget
    uint64_t raised = 0;           // steps that raised it
  };

  // `blocks_per_second` 0: no budget (every interval is 0).
  explicit BlockBudget(uint32_t blocks_per_second);
  BlockBudget(const BlockBudget&) = delete;
  BlockBudget& operator=(const BlockBudget&) = delete;

  // Live; 0 turns the budget off. Sets the ceiling, and the budget in force to it.
  void SetBlocksPerSecond(uint32_t blocks_per_second);
  // The budget in force (the ceiling, or less while adapting down).
  uint32_t blocks_per_second() const;
  uint32_t ceiling() const;

  // Live. Off: the budget in force is the ceiling.
  void SetAdaptation(const Adaptation& adaptation);
  // One partition's figures over one arbiter tick: the queueing delays of the messages its lanes
  // started (sum and count) and the blocks it committed.
  struct PartitionTick {
    uint32_t partition = 0;
    int64_t delay_sum_nanos = 0;
    uint64_t messages = 0;
    uint64_t blocks = 0;
  };
  // One arbiter tick, every partition's figures. Steps the adaptation once `step_nanos` have
  // passed since the last step (the first call only starts one).
  void Observe(int64_t now_nanos, absl::Span<const PartitionTick> partitions);
  AdaptationStats adaptation_stats() const;

  // Registers `partition` or changes its weight (ShareConfig.weight). REQUIRES: weight > 0.
  void SetWeight(uint32_t partition, double weight);
  // Forgets `partition` (stopped or removed): its weight no longer counts.
  void Remove(uint32_t partition);

  // Marks `partition` active at `now_nanos` and returns the least time between two of its partial
  // batches, in nanoseconds (0 with no budget), at most `max_nanos` (the caller's bound: a
  // replica must not look stalled to its peers' request timers). A partition never registered
  // counts with weight 1.
  int64_t PartialBatchIntervalNanos(uint32_t partition, int64_t now_nanos,
                                    int64_t max_nanos = INT64_MAX);

  // The interval `partition` was last given (bounded; 0 when none yet or no budget), and how many
  // partitions are active at `now_nanos`. For stats.
  int64_t LastIntervalNanos(uint32_t partition) const;
  uint32_t ActivePartitions(int64_t now_nanos) const;

 private:
  struct Entry {
    double weight = 1;
    int64_t active_at = 0;  // last call; 0 = never
    int64_t last_interval = 0;
    bool at_bound = false;  // the last interval was the caller's bound
  };
  static bool Active(const Entry& e, int64_t now) {
    return e.active_at != 0 && now - e.active_at < kActiveWindowNanos;
  }

  // One adaptation step over the figures gathered since the last one.
  void StepLocked(int64_t now_nanos) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  uint32_t ceiling_ ABSL_GUARDED_BY(mu_);
  uint32_t blocks_per_second_ ABSL_GUARDED_BY(mu_);  // in force
  Adaptation adaptation_ ABSL_GUARDED_BY(mu_);
  AdaptationStats adaptation_stats_ ABSL_GUARDED_BY(mu_);
  // The step being gathered: since when (0: none yet), each partition's queueing delays (sum,
  // count), and the blocks.
  int64_t step_start_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint32_t, std::pair<int64_t, uint64_t>> step_delays_ ABSL_GUARDED_BY(mu_);
  uint64_t step_blocks_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint32_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flowctl

#endif  // FLOWCTL_BLOCK_BUDGET_H_
