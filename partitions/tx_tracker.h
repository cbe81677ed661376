// TxTracker: what one partition remembers about a transaction between its admission and its
// commit, keyed by tx hash, in one place and under one explicit bound.
//
// It answers: when did this node's client hand the tx in (commit latency), is it waiting in the
// lossless FIFO (GetTx answers PENDING), and did this replica ask its peers for it (a fetched tx
// is admitted past the pool limits). Nothing whose loss could stall the node lives here: the
// FIFO's persisted position follows its own SpillCursor map. The commit
// pipeline takes the entries of a committed block (TakeCommitted) and hands them to the block's
// CommitEvent, so subscribers see them without a second lookup.
//
// Bound. An entry lives until its tx commits, or is evicted by the policy: at most
// `max_entries` (the oldest go first) and at most `max_age` since it was created. Evict(now) runs
// from the partition's tick. An evicted tx loses only bookkeeping: no latency sample, a fetched tx
// arriving later is treated as forwarded, GetTx answers NOT_FOUND for a record still in the FIFO
// (as it does for records a restart recovered: the tracker is memory only).
//
// Thread-safety: every method is thread-safe (one mutex; leaf lock: no callbacks, no other lock
// taken inside).
//
//   TxTracker tracker({.max_entries = 400'000, .max_age = absl::Minutes(10)});
//   tracker.NoteAdmitted(tx->hash, now);
//   ... block commits ... std::vector<TrackedTx> info = tracker.TakeCommitted(hashes);
#ifndef PARTITIONS_TX_TRACKER_H_
#define PARTITIONS_TX_TRACKER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace partitions {

struct TxTrackerPolicy {
  size_t max_entries = 400'000;                // >= 1
  absl::Duration max_age = absl::Minutes(10);  // > 0
};

// What is known of one tx. Zero values mean "not known".
struct TrackedTx {
  int64_t admitted_nanos = 0;  // this node's client admission (commit latency starts here)
  uint64_t spill_seq = 0;      // lossless FIFO record that carries it (appended, not drained)
  bool fetch_wanted = false;   // this replica asked its peers for it
  uint64_t fetch_seq = 0;      // for the batch at this seq (the latest ask), while fetch_wanted
};

struct TxTrackerStats {
  size_t entries = 0;
  uint64_t evicted_by_count = 0;
  uint64_t evicted_by_age = 0;
};

class TxTracker {
 public:
  explicit TxTracker(TxTrackerPolicy policy);
  TxTracker(const TxTracker&) = delete;
  TxTracker& operator=(const TxTracker&) = delete;

  // Keeps the first admission time (a duplicate submission does not move it).
  void NoteAdmitted(absl::string_view hash, int64_t now_nanos);
  // The pool refused the tx this admission brought: forgets the admission time set at
  // `admitted_nanos` (not another path's), and the entry if nothing else is known.
  void ForgetAdmission(absl::string_view hash, int64_t admitted_nanos);
  void NoteSpilled(absl::string_view hash, uint64_t seq, int64_t now_nanos);
  // FIFO record `seq` left the FIFO (drained into the pool, or dropped as invalid or a duplicate):
  // clears the mark NoteSpilled set for that record (not a later record's of the same tx), and
  // forgets the entry if nothing else is known. From then on GetTx finds the tx in the pool or the
  // ledger, or not at all. The drain may take a record before the submit path has marked it;
  // then the entry is kept (empty, until evicted) so that the late mark is ignored.
  void NoteDrained(absl::string_view hash, uint64_t seq, int64_t now_nanos);
  // True if it was not wanted yet (the first ask). `seq` is the batch that lists it (a later ask
  // replaces it).
  bool NoteWanted(absl::string_view hash, int64_t now_nanos, uint64_t seq);
  // For each of `hashes`, the seq its fetch was asked for, or 0 when it is not wanted; one lock.
  std::vector<uint64_t> WantedSeqs(absl::Span<const absl::string_view> hashes) const;
  // True if it was wanted; clears the mark.
  bool TakeWanted(absl::string_view hash);

  // What is known of a tx (zero values if nothing).
  TrackedTx Get(absl::string_view hash) const;
  // Removes and returns the entries of `hashes` (in that order; zero values where unknown).
  std::vector<TrackedTx> TakeCommitted(const std::vector<std::string>& hashes);

  // Applies the policy at `now`; returns how many entries it evicted.
  size_t Evict(int64_t now_nanos);
  // Changes the bound; the next Evict applies it. REQUIRES: valid values (see the policy).
  void SetPolicy(TxTrackerPolicy policy);

  TxTrackerStats stats() const;

 private:
  struct Entry {
    TrackedTx tx;
    int64_t created_nanos = 0;
    // Highest FIFO record of this tx drained so far: the drain may take a record before the
    // submit path has marked it (NoteSpilled comes after the append), and that late mark must
    // not make GetTx answer PENDING for a record that is gone.
    uint64_t drained_seq = 0;
  };

  Entry& TouchLocked(absl::string_view hash, int64_t now_nanos) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops records of `order_` whose entry is gone or newer (rebuilt when mostly stale).
  void CompactOrderLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  TxTrackerPolicy policy_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Creation order, for eviction: (created, hash). Records of removed entries stay until they
  // reach the front or a compaction drops them.
  std::deque<std::pair<int64_t, std::string>> order_ ABSL_GUARDED_BY(mu_);
  uint64_t evicted_by_count_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t evicted_by_age_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace partitions

#endif  // PARTITIONS_TX_TRACKER_H_
