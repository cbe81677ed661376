// SpillCursor: how far a lossless partition's SpillFifo may record its records as consumed.
//
// The drain moves FIFO records into the tx pool, which is memory: a record is safe to forget only
// once its tx has committed. The cursor remembers the drained records that have not committed yet
// and caps the FIFO's persisted read position just below the lowest of them
// (SpillFifo::SetPersistLimit), so a restart replays every drained-but-uncommitted record (the
// pool drops duplicates). A CommitSubscriber: a block's txs that came from the FIFO move the cap
// on. The cursor keeps its own map from tx hash to the drained record that pooled it (bounded by
// what the pool holds), never forgotten while the tx may still commit: a record whose commit went
// unnoticed would pin the persisted position forever.
//
// Thread-safety: every method is thread-safe (one mutex; SetPersistLimit is called under it and
// takes only the FIFO's own lock).
//
//   SpillCursor cursor(fifo, fifo->stats().persisted_seq);
//   cursor.Drained(seq, hash);     // before the pool sees the tx
//   ... the tx commits: OnCommit ... or the pool refused it: Done(seq, hash) / Undrained(...)
#ifndef PARTITIONS_SPILL_CURSOR_H_
#define PARTITIONS_SPILL_CURSOR_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "flowctl/spill_fifo.h"
#include "partitions/commit_feed.h"

namespace partitions {

class SpillCursor final : public CommitSubscriber {
 public:
  // `fifo` outlives the cursor; `persisted_seq` is the FIFO's position at open.
  SpillCursor(flowctl::SpillFifo* fifo, uint64_t persisted_seq);

  // Record `seq`, carrying tx `hash`, was drained and its tx is about to enter the pool. If an
  // earlier record already pooled the same tx (a client's retry), that one keeps the hash.
  void Drained(uint64_t seq, const std::string& hash);
  // Record `seq` needs no commit to be forgotten (invalid, or its tx was already pooled or
  // committed). `hash` empty when the record did not decode.
  void Done(uint64_t seq, const std::string& hash);
  // Record `seq` stays in the FIFO (the pool was full; the drain offers it again).
  void Undrained(uint64_t seq, const std::string& hash);
  void OnCommit(const CommitEvent& event) override;
  // The pool dropped these txs without committing them (expired, or stale): records that pooled
  // them need no commit any more (TxPool::TakeDropped). Unknown hashes are ignored.
  void Dropped(absl::Span<const std::string> hashes);

  size_t pending() const;

 private:
  void DoneLocked(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets hash -> seq if it maps to this record.
  void UnmapLocked(const std::string& hash, uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  flowctl::SpillFifo* const fifo_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, bool> pending_ ABSL_GUARDED_BY(mu_);  // drained seq -> committed
  absl::flat_hash_map<std::string, uint64_t> seq_of_ ABSL_GUARDED_BY(mu_);  // pooled tx -> seq
  uint64_t drained_max_ ABSL_GUARDED_BY(mu_);
};

}  // namespace partitions

#endif  // PARTITIONS_SPILL_CURSOR_H_
