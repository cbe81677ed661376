// CommitFeed: how the rest of a partition hears of committed blocks.
//
// The commit pipeline publishes one CommitEvent per block after the block is durable in the
// ledger and applied to the executor and the pool. Subscribers (commit waiters, the commit latency
// metric, the lossless FIFO's persisted position, the adaptive stage's tickets, later a client
// commit stream) register once, before the first publish, and are called with every block in
// height order, one block at a time, and never with a consensus lock held: the publisher queues
// the event and whichever publisher finds the feed idle delivers everything queued, in order.
//
// Thread-safety: Publish may be called from any thread, concurrently. Subscribe only before the
// first Publish. A subscriber must not block and must not publish.
//
//   CommitFeed feed(/*last_height=*/ledger->last_height());
//   feed.Subscribe(&waiters);
//   ... after a commit, outside the consensus lock ... feed.Publish(std::move(event));
#ifndef PARTITIONS_COMMIT_FEED_H_
#define PARTITIONS_COMMIT_FEED_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "partitions/tx_pool.h"
#include "partitions/tx_tracker.h"
#include "proto/chain.pb.h"

namespace partitions {

struct CommitEvent {
  uint64_t height = 0;
  int64_t commit_nanos = 0;  // clock time of the local commit
  std::string block_hash;
  std::vector<TxPtr> txs;                      // block order
  std::vector<node::chain::Receipt> receipts;  // one per tx, same order
  std::vector<TrackedTx> tracked;              // one per tx: what the TxTracker knew of it
};

class CommitSubscriber {
 public:
  virtual ~CommitSubscriber() = default;
  virtual void OnCommit(const CommitEvent& event) = 0;
  // Blocks up to `height` were installed at once from a snapshot (snapshot_sync.h): there are no
  // events for them; the next OnCommit is height + 1.
  virtual void OnSkip(uint64_t height) {}
};

class CommitFeed {
 public:
  // Events at or below `last_height` (already committed before this process) are ignored.
  explicit CommitFeed(uint64_t last_height) : next_height_(last_height + 1) {}
  CommitFeed(const CommitFeed&) = delete;
  CommitFeed& operator=(const CommitFeed&) = delete;

  // REQUIRES: before the first Publish. `subscriber` outlives the feed.
  void Subscribe(CommitSubscriber* subscriber) { subscribers_.push_back(subscriber); }

  // Queues `event` and, unless another thread is delivering, delivers every queued event whose
  // height is the next one expected (a block published early waits for its predecessors).
  void Publish(CommitEvent event);

  // The ledger jumped to `height` (a snapshot installed): subscribers hear OnSkip(height), and
  // delivery goes on from height + 1 (events at or below it are dropped). No-op unless height is
  // past what was delivered. Same threading as Publish.
  void SkipTo(uint64_t height);

  uint64_t delivered_height() const;

 private:
  // Delivers queued events in order while the next one is there. REQUIRES: delivering_ was set
  // by this thread.
  void Deliver() ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<CommitSubscriber*> subscribers_;  // constant after the first Publish

  mutable absl::Mutex mu_;
  std::map<uint64_t, CommitEvent> queued_ ABSL_GUARDED_BY(mu_);
  uint64_t next_height_ ABSL_GUARDED_BY(mu_);
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace partitions

#endif  // PARTITIONS_COMMIT_FEED_H_
