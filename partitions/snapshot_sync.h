// Snapshot state sync: a replica far behind a stable checkpoint fetches the state at that
// checkpoint from its peers instead of replaying every block since its own tip. Both sides:
//
//  - SnapshotServer answers peers from the ledger: the manifest of the state after block `seq`
//    (the block itself with its receipts, and the state cut into chunks at deterministic
//    boundaries: sorted keys, a new chunk every kSnapshotChunkBytes or kSnapshotChunkEntries;
//    each chunk's LtHash lanes), and any chunk by its first key and entry count. The state at
//    an older height is read through the ledger's undo records, so a peer serves the checkpoint
//    while it keeps committing. What it reads for peers is rate limited (a byte budget per
//    second, the whole state for a manifest); past it, requests are refused ("busy") and the
//    fetcher asks another peer.
//  - SnapshotFetcher runs one fetch: it asks every peer for the manifest and adopts the one that
//    f+1 peers sent identically (so at least one correct replica vouches for the block, its
//    receipts and the chunk layout) and whose chunk lanes sum to the target's agreed state root
//    (2f+1 signed it in the stable checkpoint). It then fetches chunks from the peers in turn, a
//    few in flight, and checks each against its manifest entry (count, key range, lanes): a
//    chunk that does not match is refused, its sender is no longer asked, and the chunk is asked
//    of another peer. Checked chunks are staged in the ledger beside the current state with a
//    progress record, so a fetch interrupted by a restart resumes with the chunks it has.
//    Install() switches the ledger to the staged state in one synced write (Ledger::
//    InstallStagedState); the caller then resets the executor and tells the replica.
//
// Trust: the target (seq, chain digest, state root) comes from a stable checkpoint the replica
// verified (2f+1 signatures). Nothing a single peer sends can make the fetcher install a state
// other than the agreed one; a faulty peer can only slow it down.
//
// Thread-compatibility: SnapshotServer is thread-safe. SnapshotFetcher is not (the consensus
// driver calls it under its lock).
//
//   SnapshotFetcher fetcher(&ledger, {.n = 4, .self = 3});
//   RETURN_IF_ERROR(fetcher.Start(target, now, &sends));       // manifest requests
//   RETURN_IF_ERROR(fetcher.OnManifest(peer, manifest, now, &sends));
//   RETURN_IF_ERROR(fetcher.OnChunk(peer, chunk, now, &sends));  // stages a checked chunk
//   if (fetcher.complete()) ASSIGN_OR_RETURN(StateRoot lanes, fetcher.Install(meta));
#ifndef PARTITIONS_SNAPSHOT_SYNC_H_
#define PARTITIONS_SNAPSHOT_SYNC_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/clock.h"
#include "flowctl/token_bucket.h"
#include "partitions/ledger.h"
#include "partitions/state_root.h"
#include "proto/partition.pb.h"

namespace partitions {

// A chunk is cut once it holds this many bytes (keys and values) or entries.
inline constexpr size_t kSnapshotChunkBytes = 512 << 10;
inline constexpr uint32_t kSnapshotChunkEntries = 16384;
// Consensus metadata keys of a fetch in progress start with this.
inline constexpr char kSnapshotMetaPrefix[] = "snapshot/";

// What a fetched snapshot must reproduce: a stable checkpoint.
struct SnapshotTarget {
  uint64_t seq = 0;
  std::string chain_digest;  // after seq
  std::string state_root;    // after seq, 32 bytes
  bool operator==(const SnapshotTarget&) const = default;
};

// Builds the manifest of the state after block `seq` from `ledger` (O(state): every entry is
// read and hashed). Also what tests and tools use to look at a ledger's chunks.
// `scanned` (if set) gets the bytes of the records read.
absl::StatusOr<node::partition::SnapshotManifest> BuildSnapshotManifest(
    const Ledger& ledger, uint64_t seq, uint64_t* scanned = nullptr);

// Checks `manifest` against `target` for `partition`: the block is the one at target.seq with
// the agreed state root, consistent with its receipts; chunks are in strictly increasing key
// order, non-empty, with 2 KiB of lanes each, and their lanes sum to the agreed root.
// INVALID_ARGUMENT naming what is wrong.
absl::Status ValidateSnapshotManifest(const node::partition::SnapshotManifest& manifest,
                                      const SnapshotTarget& target, uint32_t partition);

// Checks chunk `index` of `manifest`: its entry count, that its keys strictly increase from the
// chunk's first key and stay below the next chunk's, and that its entries hash to its lanes.
// INVALID_ARGUMENT naming what is wrong.
absl::Status ValidateSnapshotChunk(const node::partition::SnapshotChunk& chunk,
                                   const node::partition::SnapshotManifest& manifest);

class SnapshotServer {
 public:
  struct Options {
    // State bytes read for each requesting peer per second (a manifest reads the whole state;
    // keys written after the asked height are read and skipped, and count); also the burst.
    double serve_bytes_per_second = 64 << 20;
  };
  // `ledger` and `clock` must outlive the server.
  SnapshotServer(const Ledger* ledger, const flowctl::Clock* clock, Options options);

  // Answers peer `from`'s request with a manifest or a chunk; a request it cannot serve gets an
  // answer whose `refused` says why (a height beyond the tip or below the kept history, a chunk
  // larger than any the manifest cuts or behind too many newer keys, over that peer's budget).
  node::partition::PartitionMessage Answer(uint32_t from,
                                           const node::partition::SnapshotRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    uint64_t manifests = 0;
    uint64_t chunks = 0;
    uint64_t bytes = 0;  // state bytes served in chunks
    uint64_t refused = 0;
  };
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  node::partition::SnapshotManifest Manifest(flowctl::TokenBucket& budget, uint64_t seq)
      ABSL_LOCKS_EXCLUDED(mu_);
  node::partition::SnapshotChunk Chunk(flowctl::TokenBucket& budget,
                                       const node::partition::SnapshotRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);
  flowctl::TokenBucket& BudgetOf(uint32_t peer) ABSL_LOCKS_EXCLUDED(mu_);

  const Ledger* const ledger_;
  const flowctl::Clock* const clock_;
  const Options options_;

  mutable absl::Mutex mu_;
  // The last manifest built (peers joining at one checkpoint all ask for the same one).
  std::optional<node::partition::SnapshotManifest> cached_ ABSL_GUARDED_BY(mu_);
  // One budget per requesting peer (created on its first request; never removed: n is small).
  std::map<uint32_t, std::unique_ptr<flowctl::TokenBucket>> budgets_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

class SnapshotFetcher {
 public:
  struct Options {
    uint32_t n = 4;     // replicas
    uint32_t self = 0;  // this replica's index: never asked
    // An unanswered request is asked again (of the next peer) after this.
    int64_t retry_nanos = 2'000'000'000;
    // Chunk requests outstanding at once.
    int max_in_flight = 4;
  };
  struct Send {
    uint32_t to = 0;
    node::partition::PartitionMessage msg;
  };
  struct Stats {
    uint64_t seq = 0;  // the target; 0 when none
    uint64_t chunks_total = 0;
    uint64_t chunks_done = 0;
    uint64_t chunks_resumed = 0;  // found staged by an earlier run
    uint64_t bytes = 0;           // state bytes staged by this run
    uint64_t bad_manifests = 0;   // did not validate
    uint64_t bad_chunks = 0;      // did not match the manifest
    uint64_t refusals = 0;        // answers saying `refused`
    uint64_t retries = 0;         // requests asked again after retry_nanos
  };

  // `ledger` must outlive the fetcher.
  SnapshotFetcher(Ledger* ledger, Options options);

  // Starts fetching `target` (a no-op if it is the one being fetched): resumes from the chunks
  // an earlier run staged for the same target, else drops whatever is staged; asks every peer
  // for the manifest. A ledger error comes back as is.
  absl::Status Start(const SnapshotTarget& target, int64_t now, std::vector<Send>* out);
  // Answers from peer `from`. Anything not asked for (another seq, a chunk not in flight from
  // that peer) is ignored; what does not validate is counted and asked of another peer. Errors
  // are the ledger's (staging a chunk).
  absl::Status OnManifest(uint32_t from, const node::partition::SnapshotManifest& manifest,
                          int64_t now, std::vector<Send>* out);
  absl::Status OnChunk(uint32_t from, const node::partition::SnapshotChunk& chunk, int64_t now,
                       std::vector<Send>* out);
  // Asks again what went unanswered for retry_nanos. Returns when it next wants to run
  // (flowctl::TokenBucket::kNever when it has nothing outstanding).
  int64_t Tick(int64_t now, std::vector<Send>* out);

  bool active() const { return target_.has_value(); }
  // No manifest adopted and no chunk staged for three retry periods.
  bool Stalled(int64_t now) const { return StalledFor(now) >= 3 * options_.retry_nanos; }
  // How long since the last progress (Start, the manifest adopted, a chunk staged); 0 when idle.
  int64_t StalledFor(int64_t now) const {
    return target_.has_value() ? now - last_progress_nanos_ : 0;
  }
  // Every chunk staged: Install may run.
  bool complete() const;
  const std::optional<SnapshotTarget>& target() const { return target_; }
  Stats stats() const;

  // Makes the staged state the ledger's, with the manifest's block as the tip and `meta`
  // written in the same batch; returns the installed state's hash. The fetcher is idle after.
  // REQUIRES: complete().
  absl::StatusOr<StateRoot> Install(const ConsensusMetaWrites& meta);
  // Forgets the fetch (the staged chunks stay until the next Start drops or resumes them).
  void Abandon();

 private:
  enum class Phase { kManifest, kChunks };
  struct InFlight {
    uint32_t peer = 0;
    int64_t sent_nanos = 0;
  };

  absl::Status Adopt(const node::partition::SnapshotManifest& manifest);
  // Records the target (and the adopted manifest, if given) in the ledger, for a resume.
  absl::Status SaveProgress(const node::partition::SnapshotManifest* manifest);
  void AskManifest(uint32_t peer, int64_t now, std::vector<Send>* out);
  void FillChunkRequests(int64_t now, std::vector<Send>* out);
  // The next peer in turn that has not sent a bad answer (all of them again if every one has).
  uint32_t NextPeer();

  Ledger* const ledger_;
  const Options options_;

  std::optional<SnapshotTarget> target_;
  Phase phase_ = Phase::kManifest;
  // Manifest phase: valid manifests by digest, and which peers sent each.
  std::map<std::string, node::partition::SnapshotManifest> candidates_;
  std::map<std::string, std::set<uint32_t>> votes_;
  std::map<uint32_t, int64_t> manifest_asked_;  // peer -> when last asked
  std::set<uint32_t> manifest_answered_;        // peers whose manifest came (valid or not)
  // Chunk phase.
  node::partition::SnapshotManifest manifest_;
  std::set<uint32_t> done_;
  std::map<uint32_t, InFlight> in_flight_;  // chunk index -> request
  std::set<uint32_t> bad_peers_;
  uint32_t next_peer_ = 0;
  int64_t last_progress_nanos_ = 0;  // Start, the manifest adopted, the last chunk staged
  int64_t backoff_until_ = 0;        // after a refusal ("busy"), no new chunk request before
  Stats stats_;
};

}  // namespace partitions

#endif  // PARTITIONS_SNAPSHOT_SYNC_H_
