// CommitStreamHub and CommitWatcher: one partition's committed blocks, fanned out to the client
// streams that watch them (ClientService.WatchCommits, proto/client.proto).
//
// One hub per partition, subscribed to the partition's CommitFeed when the partition is built
// (the feed takes subscribers only before its first block). Each client stream holds a
// CommitWatcher, which starts at a height and hands the stream one encoded block at a time:
//
//   history   heights the hub has already seen are read from the ledger, one per Next(), on the
//             stream's thread;
//   hand-over once the watcher's next height is past the hub's last delivered height, it joins
//             the hub's live list under the hub's lock (the same lock OnCommit takes to advance
//             that height), so each later block reaches it exactly once: no gap, no duplicate;
//   live      OnCommit appends each new block (one shared copy for all watchers) to every live
//             watcher's bounded buffer. A watcher whose buffer would pass its limits (blocks or
//             bytes, WatchConfig) is cut: its buffer is dropped and its stream ends with
//             RESOURCE_EXHAUSTED and the height to resume from. OnCommit never waits for a
//             client and does not read the ledger (the block header comes from
//             NoteCommittedHeader, under the consensus lock, where the ledger's tip is that
//             block; only a watcher that joined between the two makes it read that one block).
//             With nobody watching it costs one lock per block.
//
// A stream drives its watcher with Next() (one caller at a time): kWrite hands it one encoded
// WatchCommitsResponse; kWait means nothing is ready, and the watcher calls the stream's `wake`
// once something is (a block, or the end); kEnd gives the status to finish with. End(status)
// ends a watcher from any thread (the client cancelled, the server shuts down); Close() detaches
// it for good: after Close returns, `wake` is never called again, so the stream may be deleted.
// Close(status) on the hub ends every watcher, refuses new ones and stops ledger reads (the
// partition is stopping); watchers and the hub are shared, so a stream that outlives the
// partition finds a closed hub, never a dangling one.
//
// Memory: live blocks are shared by all watchers, and every watcher buffers a suffix of the same
// block sequence, so all buffers together hold about one watcher's limit (plus up to four
// encodings per block: with or without txs and receipts, each built once).
//
// Locks: a watcher's mutex, then the hub's (a watcher's Next joins the live list under both);
// OnCommit takes the hub's, releases it, then each watcher's. `wake` runs under neither.
//
//   auto hub = std::make_shared<CommitStreamHub>("hot", ledger, limits);
//   feed.Subscribe(hub.get());
//   ASSIGN_OR_RETURN(auto watcher, hub->Watch({.from_height = 0}, [stream] { stream->Pump(); }));
//   CommitWatcher::Step step = watcher->Next();  // kWrite / kWait / kEnd
#ifndef RUNTIME_COMMIT_STREAM_H_
#define RUNTIME_COMMIT_STREAM_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "partitions/commit_feed.h"
#include "partitions/ledger.h"
#include "proto/chain.pb.h"

namespace runtime {

// One committed block as the watchers send it. Immutable once built, except for its encodings,
// which are built on first use (thread-safe).
class WatchedBlock {
 public:
  // `block` holds the header and tx hashes, and the tx bodies when a watcher may want them;
  // `receipts` one per tx (or none when no watcher wants them).
  WatchedBlock(node::chain::Block block, std::string block_hash,
               std::vector<node::chain::Receipt> receipts);

  uint64_t height() const { return block_.header().height(); }
  const node::chain::Block& block() const { return block_; }
  const std::string& block_hash() const { return block_hash_; }
  const std::vector<node::chain::Receipt>& receipts() const { return receipts_; }

  // What a watcher that buffers this block is charged: the block as held (with the bodies and
  // receipts some watcher wanted, whether or not this one does) and one encoding of that size.
  // A slow watcher thus pins at most its byte limit, whatever the others ask for.
  size_t PinnedBytes() const;
  // The encoded node.client.WatchCommitsResponse: built once per variant, then shared.
  std::shared_ptr<const std::string> Encoded(bool include_txs, bool include_receipts) const;

 private:
  const node::chain::Block block_;
  const std::string block_hash_;
  const std::vector<node::chain::Receipt> receipts_;
  size_t base_bytes_ = 0;      // height, hash, header, tx hashes
  size_t txs_bytes_ = 0;       // tx bodies
  size_t receipts_bytes_ = 0;  // receipts

  mutable absl::Mutex mu_;
  mutable std::array<std::shared_ptr<const std::string>, 4> encoded_ ABSL_GUARDED_BY(mu_);
};

using WatchedBlockPtr = std::shared_ptr<const WatchedBlock>;

// The bounds of one partition's watchers (node.config.WatchConfig after defaults).
struct CommitStreamLimits {
  uint32_t max_watchers = 64;
  uint32_t max_buffered_blocks = 1024;
  uint64_t max_buffered_bytes = uint64_t{16} << 20;
};

struct CommitStreamStats {
  uint32_t watchers = 0;   // open now
  uint64_t cut_slow = 0;   // ended because their buffer was full, since start
  uint64_t delivered = 0;  // last height the hub has seen
};

class CommitStreamHub;

class CommitWatcher : public std::enable_shared_from_this<CommitWatcher> {
 public:
  struct Options {
    uint64_t from_height = 0;  // 0 = the next block the hub sees
    bool include_txs = false;
    bool include_receipts = false;
  };

  // What the stream does next.
  struct Step {
    enum Kind { kWrite, kWait, kEnd };
    Kind kind = kWait;
    uint64_t height = 0;                         // kWrite: the block's height
    std::shared_ptr<const std::string> message;  // kWrite: an encoded WatchCommitsResponse
    absl::Status end;                            // kEnd

    static Step Wait() { return Step(); }
    static Step End(absl::Status status) {
      Step step;
      step.kind = kEnd;
      step.end = std::move(status);
      return step;
    }
  };

  ~CommitWatcher();
  CommitWatcher(const CommitWatcher&) = delete;
  CommitWatcher& operator=(const CommitWatcher&) = delete;

  // The next block (from the ledger while catching up, then from the buffer), kWait (then `wake`
  // comes when there is more), or kEnd. REQUIRES: one caller at a time (the stream), not after
  // Close.
  Step Next() ABSL_LOCKS_EXCLUDED(mu_);

  // Where a client resumes: the height after the last block Next returned.
  uint64_t resume_height() const ABSL_LOCKS_EXCLUDED(mu_);

  // Ends the watcher with `status` (unless it has ended already): drops its buffer and wakes a
  // waiting stream, whose Next then returns kEnd. Any thread.
  void End(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  // Leaves the hub (frees the watcher's slot) and waits until no `wake` call is running; none
  // starts afterwards. Idempotent. Must not be called from inside `wake`.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class CommitStreamHub;

  CommitWatcher(std::shared_ptr<CommitStreamHub> hub, Options options,
                absl::AnyInvocable<void()> wake);

  // From the hub's OnCommit (no hub lock held): buffers `block`, or cuts the watcher.
  void Push(const WatchedBlockPtr& block) ABSL_LOCKS_EXCLUDED(mu_);
  // Sets the end and drops the buffer; true if `wake` must be called (the stream waits).
  bool EndLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls `wake` outside mu_; REQUIRES: wake_calls_ was incremented under mu_.
  void CallWake() ABSL_LOCKS_EXCLUDED(mu_);
  Step WriteStep(const WatchedBlockPtr& block) const;

  // ---- constant after construction ----
  const std::shared_ptr<CommitStreamHub> hub_;
  const Options options_;
  absl::AnyInvocable<void()> wake_;  // called only while wake_calls_ > 0, never after Close

  mutable absl::Mutex mu_;
  uint64_t next_height_ ABSL_GUARDED_BY(mu_);                // the next height Next returns
  bool live_ ABSL_GUARDED_BY(mu_) = false;                   // in the hub's live list
  std::deque<WatchedBlockPtr> buffer_ ABSL_GUARDED_BY(mu_);  // heights next_height_, +1, ...
  uint64_t buffered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<absl::Status> end_ ABSL_GUARDED_BY(mu_);
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;  // Next said kWait; no wake sent yet
  int wake_calls_ ABSL_GUARDED_BY(mu_) = 0;    // `wake` calls running now
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

class CommitStreamHub final : public partitions::CommitSubscriber,
                              public std::enable_shared_from_this<CommitStreamHub> {
 public:
  // `ledger` holds every block up to its tip; it is read until Close(). Create with
  // std::make_shared (watchers share the hub).
  CommitStreamHub(std::string partition_name, const partitions::Ledger* ledger,
                  CommitStreamLimits limits);
  ~CommitStreamHub() override;

  // The header of the block just committed, called under the consensus lock right after the
  // ledger write (ConsensusDriver::Deps::on_commit_locked), for the OnCommit of that height.
  void NoteCommittedHeader(const node::chain::BlockHeader& header) ABSL_LOCKS_EXCLUDED(mu_);
  // True when some watcher is past the catch-up (lock-free; the consensus lock's hook checks it
  // before NoteCommittedHeader, so nobody watching costs one atomic load per block).
  bool has_live_watchers() const { return live_size_.load(std::memory_order_relaxed) > 0; }
  // CommitSubscriber: hands the block to every live watcher.
  void OnCommit(const partitions::CommitEvent& event) override ABSL_LOCKS_EXCLUDED(mu_);
  // CommitSubscriber: a snapshot was installed; the blocks up to `height` are not here. Live
  // watchers end with UNAVAILABLE (they resume from another node or from height + 1).
  void OnSkip(uint64_t height) override ABSL_LOCKS_EXCLUDED(mu_);

  // A new watcher. NOT_FOUND-free: the caller found the partition. OUT_OF_RANGE when
  // from_height is beyond the tip + 1 or below the ledger's earliest block (pruned, or before the
  // snapshot it was installed from), RESOURCE_EXHAUSTED at max_watchers, UNAVAILABLE after
  // Close. `wake` must not block; it may call Next().
  absl::StatusOr<std::shared_ptr<CommitWatcher>> Watch(const CommitWatcher::Options& options,
                                                       absl::AnyInvocable<void()> wake)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Ends every watcher with `status`, refuses new ones and stops reading the ledger (waits for a
  // read in progress). For the partition's Stop. Idempotent.
  void Close(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_, ledger_mu_);

  CommitStreamStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class CommitWatcher;

  // One stored block as the watcher wants it (ledger read, on the watcher's thread).
  absl::StatusOr<WatchedBlockPtr> ReadBlock(uint64_t height,
                                            const CommitWatcher::Options& options) const
      ABSL_LOCKS_EXCLUDED(ledger_mu_);
  // Under the watcher's lock: joins the live list if `next_height` is past the last delivered
  // height (true), else false (the watcher reads it from the ledger). Sets *closed instead when
  // the hub is closed.
  bool JoinIfCaughtUp(const std::shared_ptr<CommitWatcher>& watcher, uint64_t next_height,
                      absl::Status* closed) ABSL_LOCKS_EXCLUDED(mu_);
  void Leave(const CommitWatcher* watcher, bool was_live) ABSL_LOCKS_EXCLUDED(mu_);
  // The block of `event` for the live watchers; the header from NoteCommittedHeader, else read.
  absl::StatusOr<WatchedBlockPtr> LiveBlock(const partitions::CommitEvent& event,
                                            std::optional<node::chain::BlockHeader> header,
                                            bool with_txs, bool with_receipts) const;

  // ---- constant after construction ----
  const std::string name_;
  const CommitStreamLimits limits_;

  mutable absl::Mutex ledger_mu_;  // readers: history reads; writer: Close
  const partitions::Ledger* ledger_ ABSL_GUARDED_BY(ledger_mu_);

  mutable absl::Mutex mu_;
  uint64_t delivered_ ABSL_GUARDED_BY(mu_);  // last height OnCommit handed to the live list
  std::map<uint64_t, node::chain::BlockHeader> headers_ ABSL_GUARDED_BY(mu_);  // not delivered
  std::vector<std::shared_ptr<CommitWatcher>> live_ ABSL_GUARDED_BY(mu_);
  // Every open watcher (for Close); weak: a watcher's stream owns it.
  std::map<const CommitWatcher*, std::weak_ptr<CommitWatcher>> open_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> closed_ ABSL_GUARDED_BY(mu_);
  std::atomic<size_t> live_size_{0};  // live_.size(), for has_live_watchers
  std::atomic<uint64_t> cut_slow_{0};
};

}  // namespace runtime

#endif  // RUNTIME_COMMIT_STREAM_H_
