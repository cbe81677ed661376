// BatchPolicy: when the primary cuts the next proposal from its pool: as soon as a full batch
// (by count or by bytes) is waiting, or when the oldest waiting transaction has waited
// `max_delay`, whichever comes first — except that a partial batch also waits while
// `max_partial_in_flight` of this primary's proposals are still executing (Nagle's rule, or a
// database's group commit): a lightly loaded partition does not run a consensus instance every
// `max_delay` while the last one is still going, and as consensus slows under load its batches
// grow instead of its instance count. Full batches are pipelined as before. A partial batch is
// also not cut before `partial_not_before_nanos`: the node's block budget (flowctl/block_budget.h)
// spaces a partition's partial batches when many partitions share the node. A pure function of
// its inputs, so the partition's consensus lane and the tests drive it with any clock.
//
// The pool's SelectBatch(max_txs, max_bytes) then cuts the batch; the replica proposes it
// (PbftBatchReady) only while PbftReplica::CanPropose() holds.
//
// Thread-compatible (immutable after construction).
//
//   BatchPolicy policy({.max_txs = 500, .max_bytes = 1 << 20, .max_delay_nanos = 50'000'000});
//   BatchPolicy::Decision d = policy.Decide(now, pool.ready_txs(), pool.ready_bytes(),
//                                           pool.oldest_ready_nanos(), replica.CanPropose(),
//                                           replica.own_proposals_in_flight(),
//                                           last_cut + budget_interval);
//   if (d.cut) Propose(pool.SelectBatch(...)); else if (d.wake_at_nanos)
//   ArmTimer(*d.wake_at_nanos);
#ifndef PARTITIONS_BATCH_POLICY_H_
#define PARTITIONS_BATCH_POLICY_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"

namespace partitions {

class BatchPolicy {
 public:
  struct Options {
    uint64_t max_txs = 500;                // a batch this large is cut at once; >= 1
    uint64_t max_bytes = 1 << 20;          // likewise in bytes; >= 1
    int64_t max_delay_nanos = 50'000'000;  // longest a ready tx waits for company; >= 0
    // A partial batch is cut only while fewer of this primary's proposals are executing; 0: no
    // such limit (a partial batch every max_delay, however many are in flight).
    uint64_t max_partial_in_flight = 1;
  };
  struct Decision {
    bool cut = false;
    // When to ask again if nothing changes (set only when !cut and there is something waiting).
    std::optional<int64_t> wake_at_nanos;
  };

  // InvalidArgument naming the field.
  static absl::Status Validate(const Options& options);

  // REQUIRES: Validate(options).ok().
  explicit BatchPolicy(Options options) : options_(options) {}

  // `oldest_ready_nanos`: when the oldest ready transaction entered the pool (ignored when
  // ready_txs == 0). `can_propose`: the replica would take a batch now. `in_flight`: this
  // primary's proposals not yet executed. When a partial batch waits for them there is no
  // wake_at_nanos: the commit that ends one is the next event to ask again.
  // `partial_not_before_nanos`: the earliest time a partial batch may be cut (0: any time).
  Decision Decide(int64_t now_nanos, uint64_t ready_txs, uint64_t ready_bytes,
                  int64_t oldest_ready_nanos, bool can_propose, uint64_t in_flight,
                  int64_t partial_not_before_nanos = 0) const;

  const Options& options() const { return options_; }

 private:
  const Options options_;
};

}  // namespace partitions

#endif  // PARTITIONS_BATCH_POLICY_H_
