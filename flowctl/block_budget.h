// BlockBudget: the node's consensus instances (blocks) per second, divided among the partitions
// that have transactions waiting, by share weight.
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
// Each node counts the partitions active in its own pools: txs sent to a replica other than the
// partition's primary are forwarded to every replica, but a primary holds its own clients' txs
// for its proposal, so the nodes of a cluster count about, not exactly, the same active set.
// Times are the caller's (an injected clock's) nanos.
//
// Thread-safe.
//
//   flowctl::BlockBudget budget(64);
//   budget.SetWeight(partition_id, share.weight());
//   int64_t interval = budget.PartialBatchIntervalNanos(partition_id, clock->NowNanos());
//   // BatchPolicy::Decide(..., /*partial_not_before_nanos=*/last_cut + interval)
#ifndef FLOWCTL_BLOCK_BUDGET_H_
#define FLOWCTL_BLOCK_BUDGET_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace flowctl {

class BlockBudget {
 public:
  // How long a partition stays active after it was last seen with transactions waiting.
  static constexpr int64_t kActiveWindowNanos = 1'000'000'000;

  // `blocks_per_second` 0: no budget (every interval is 0).
  explicit BlockBudget(uint32_t blocks_per_second);
  BlockBudget(const BlockBudget&) = delete;
  BlockBudget& operator=(const BlockBudget&) = delete;

  // Live; 0 turns the budget off.
  void SetBlocksPerSecond(uint32_t blocks_per_second);
  uint32_t blocks_per_second() const;

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
  };
  static bool Active(const Entry& e, int64_t now) {
    return e.active_at != 0 && now - e.active_at < kActiveWindowNanos;
  }

  mutable absl::Mutex mu_;
  uint32_t blocks_per_second_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flowctl

#endif  // FLOWCTL_BLOCK_BUDGET_H_
