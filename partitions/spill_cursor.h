// SpillCursor: how far a lossless partition's SpillFifo may record its records as consumed.
//
// The drain moves FIFO records into the tx pool, which is memory: a record is safe to forget only
// once its tx has committed. The cursor remembers the drained records that have not committed yet
// and caps the FIFO's persisted read position just below the lowest of them
// (SpillFifo::SetPersistLimit), so a restart replays every drained-but-uncommitted record (the
// pool drops duplicates). A CommitSubscriber: a block's txs that came from the FIFO (their
// TrackedTx::spill_seq) move the cap on.
//
// Thread-safety: every method is thread-safe (one mutex; SetPersistLimit is called under it and
// takes only the FIFO's own lock).
//
//   SpillCursor cursor(fifo, fifo->stats().persisted_seq);
//   cursor.Drained(seq);           // before the pool sees the tx
//   ... the tx commits: OnCommit ... or the pool refused it: cursor.Done(seq) / Undrained(seq)
#ifndef PARTITIONS_SPILL_CURSOR_H_
#define PARTITIONS_SPILL_CURSOR_H_

#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/spill_fifo.h"
#include "partitions/commit_feed.h"

namespace partitions {

class SpillCursor final : public CommitSubscriber {
 public:
  // `fifo` outlives the cursor; `persisted_seq` is the FIFO's position at open.
  SpillCursor(flowctl::SpillFifo* fifo, uint64_t persisted_seq);

  // Record `seq` was drained and its tx is about to enter the pool.
  void Drained(uint64_t seq);
  // Record `seq` needs no commit to be forgotten (invalid, or its tx was already pooled or
  // committed).
  void Done(uint64_t seq);
  // Record `seq` stays in the FIFO (the pool was full; the drain offers it again).
  void Undrained(uint64_t seq);
  void OnCommit(const CommitEvent& event) override;

  size_t pending() const;

 private:
  void DoneLocked(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  flowctl::SpillFifo* const fifo_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, bool> pending_ ABSL_GUARDED_BY(mu_);  // drained seq -> committed
  uint64_t drained_max_ ABSL_GUARDED_BY(mu_);
};

}  // namespace partitions

#endif  // PARTITIONS_SPILL_CURSOR_H_
