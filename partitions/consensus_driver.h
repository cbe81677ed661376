// ConsensusDriver: runs one partition's PBFT replica against the world.
//
// It feeds the replica (a pure state machine, pbft_replica.h) with verified peer messages, fired
// timers, pending-request counts and batches the primary cuts, and carries out its actions:
// sends and broadcasts (through the PeerSender; a new proposal's held bodies go out first, see
// forwarder.h), timers (a small table its Tick fires), missing-tx fetches (first to the primary,
// repeats to everyone), state changes (a view change makes the pool's proposed txs selectable
// again) and commits (the CommitPipeline; the resulting CommitEvents are published on the
// CommitFeed once the driver's lock is released). It also answers peers' tx fetches and pools
// forwarded and fetched txs.
//
// Time comes from outside: Tick(now) fires due timers, expires the pool, runs the caller's
// periodic hook, cuts batches (the primary cuts when BatchPolicy says so, up to 8 pipelined
// proposals per tick) and, on a backup in NORMAL with ready txs, re-forwards to the primary the
// txs it has held unproposed for half the request timeout, while no block committed for that long
// (at most once per view each, up to 1,024 txs / 1 MiB every eighth of the timeout): forwarding is
// lossy, and a primary that never got them would leave them pending here until the request timer
// forced a needless view change.
// It returns when it next wants to run. Nothing in here owns a thread.
//
// Locking: one mutex (mu_) serializes the replica, the timers and batch cutting; the pool,
// tracker, forwarder, ledger and executor have their own leaf locks, taken inside it. Work that
// must not run under mu_ (commit events, wake-ups) is queued and run once it is released.
//
// Thread-safety: every public method is thread-safe (lane handlers of one partition may run on
// different workers at once).
//
//   auto driver = ConsensusDriver::Create(deps, pbft_config, position);
//   driver->Start();
//   driver->OnConsensusMessage(peer_index, msg);    // consensus lane
//   int64_t next = driver->Tick(clock->NowNanos());  // the partition's tick
#ifndef PARTITIONS_CONSENSUS_DRIVER_H_
#define PARTITIONS_CONSENSUS_DRIVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/transaction.h"
#include "flowctl/clock.h"
#include "partitions/batch_policy.h"
#include "partitions/commit_feed.h"
#include "partitions/commit_pipeline.h"
#include "partitions/forwarder.h"
#include "partitions/ledger.h"
#include "partitions/pbft_replica.h"
#include "partitions/pbft_types.h"
#include "partitions/peer_sender.h"
#include "partitions/round_times.h"
#include "partitions/snapshot_sync.h"
#include "partitions/tx_pool.h"
#include "partitions/tx_tracker.h"
#include "proto/partition.pb.h"

namespace partitions {

// ConsensusState values, plus the driver's own: the replica or a commit failed.
inline constexpr int kHaltedState = 99;
// Ledger consensus-metadata key holding a divergence found here (PbftReplica::Divergence's
// text). While it is there the driver starts DIVERGED and signs nothing.
inline constexpr char kDivergedKey[] = "diverged";

class ConsensusDriver {
 public:
  struct Deps {
    std::string name;  // for logs
    const flowctl::Clock* clock = nullptr;
    PbftCrypto* crypto = nullptr;  // verifies envelopes, signs own messages
    ConsensusStore* store = nullptr;
    TxPool* pool = nullptr;
    TxTracker* tracker = nullptr;
    Forwarder* forwarder = nullptr;
    PeerSender* sender = nullptr;
    CommitPipeline* pipeline = nullptr;  // also the replica's tx and block source
    CommitFeed* feed = nullptr;
    Ledger* ledger = nullptr;  // committed txs for fetch answers; snapshots served and installed
    // The ledger's executor: reset when a fetched snapshot is installed. Required when
    // snapshot_min_gap is set in the replica's config.
    Executor* executor = nullptr;
    // Reading state for peers' snapshot requests (SnapshotServer::Options).
    double snapshot_serve_bytes_per_second = 64 << 20;
    BatchPolicy* batch_policy = nullptr;
    // The node's block budget (flowctl/block_budget.h): called with the time whenever the pool
    // holds ready txs (which marks the partition active) and the most it may answer (a quarter
    // of the request timeout), returns the least time between two of this primary's partial
    // batches (BatchPolicy's partial_not_before). May be empty: none.
    std::function<int64_t(int64_t now, int64_t max_nanos)> partial_batch_interval;
    base::TxLimits tx_limits;
    // Called under the driver's lock right after a block committed (before its event is
    // published), and on ticks at least 100 ms apart: for bookkeeping that must see commits and
    // pool changes atomically (the adaptive stage's tickets). on_tick_locked returns whether it
    // wants the next call 100 ms on (false: only on the first tick after that, whatever asked
    // for it). May be empty.
    std::function<void(const CommitEvent&)> on_commit_locked;
    // Given the txs the pool dropped without committing since the last call (TxPool::TakeDropped;
    // set it only with the pool's TrackDropped on), after each expiry pass. May be null.
    std::function<void(std::vector<std::string> hashes)> on_pool_dropped = {};
    std::function<bool(int64_t now)> on_tick_locked;
    // Asks the owner for a tick soon (txs arrived, a block committed, the replica's state or
    // role changed: a batch may be cut now). Required.
    std::function<void()> request_tick;
    // Asks the owner for a tick no later than `when_nanos` (a consensus timer was set). Together
    // with Tick's return value this is every time the driver needs: nothing here assumes a
    // periodic tick. Called with no lock held. Required.
    std::function<void(int64_t when_nanos)> wake_by;
    // Test failpoint (noded --test-equivocate): this replica is a faulty primary. Each of its
    // proposals of two txs or more goes as proposed to one other replica and, to the rest, as a
    // second validly signed pre-prepare for the same (view, seq) without the batch's last tx.
    // Never set outside fault tests.
    bool equivocate = false;
    // Test failpoint (noded --test-withhold): a faulty primary that proposes without sending the
    // bodies of the txs it proposes (its own clients' txs) and answers no fetch, so a backup
    // missing one cannot prepare. Never set outside fault tests.
    bool withhold = false;
    // A round longer than this, from its proposal to its block applied, is logged at WARNING
    // with its phases (at most one line a second) and counted (RoundTimes). 0: none.
    int64_t slow_round_nanos = 0;
  };

  struct Stats {
    uint64_t dropped_bad_signature = 0;  // envelope not signed by the connection's replica
    uint64_t dropped_bad_tx = 0;         // forwarded/fetched tx that does not decode or verify
    // Prepares and commits dropped unverified: their quorum was already complete here
    // (PbftReplica::Redundant).
    uint64_t redundant_votes = 0;
    // Fetched tx bodies admitted: with their signature checked, or without because a batch
    // certified here lists them (PbftReplica::ForEachCertifiedTx).
    uint64_t fetched_checked = 0;
    uint64_t fetched_certified = 0;
    SnapshotFetcher::Stats snapshot_fetch;  // the fetch in progress, or the last one
    uint64_t snapshots_installed = 0;
    SnapshotServer::Stats snapshot_serve;
    RoundTimes::Snapshot rounds;  // this replica's rounds of consensus, phase by phase
  };

  static absl::StatusOr<std::unique_ptr<ConsensusDriver>> Create(
      Deps deps, const PbftConfig& config, const PbftReplica::LedgerPosition& position);
  ConsensusDriver(const ConsensusDriver&) = delete;
  ConsensusDriver& operator=(const ConsensusDriver&) = delete;

  void Start();

  // Peer messages, from replica `from` (already mapped from the authenticated connection).
  // False when refused: not signed by `from`, or a bad signature (counted in stats()). A prepare
  // or commit whose quorum is already complete is dropped without a signature check (true;
  // counted as redundant_votes).
  bool OnConsensusMessage(uint32_t from, const ConsensusMessage& msg);
  // Returns how many of the batch's txs were refused (do not decode or verify). A body this
  // replica fetched for a batch certified here is admitted without its signature check.
  size_t OnTxBatch(const node::partition::TxBatch& batch);
  void OnFetch(uint32_t from, const node::partition::TxFetch& fetch);
  // Snapshot sync (snapshot_sync.h): a request is answered from the ledger (no consensus lock);
  // manifests and chunks feed the fetch in progress, which installs the state once complete.
  void OnSnapshotMessage(uint32_t from, const node::partition::PartitionMessage& msg);

  // One round of time-driven work at `now` (no proposals while `paused`); returns the time it
  // next wants to run (due timers, the pool's expiry sweep every second, the tick hook, the
  // batch policy's cut deadline). Events between ticks ask through request_tick and wake_by.
  int64_t Tick(int64_t now, bool paused);

  // Lock-free mirrors for readers.
  int state() const { return state_.load(std::memory_order_relaxed); }  // or kHaltedState
  std::string StateName() const;
  // Why consensus halted ("" while it runs): the failed commit or the replica's error, e.g.
  // "commit of seq 12 failed: ledger commit: rocksdb: IO error: No space left on device"; or,
  // in state DIVERGED, the height and both state roots (PbftReplica::Divergence::ToString).
  std::string halt_reason() const ABSL_LOCKS_EXCLUDED(halt_mu_);
  uint64_t view() const { return view_.load(std::memory_order_relaxed); }
  bool observing() const { return observing_.load(std::memory_order_relaxed); }
  uint64_t view_changes() const { return view_changes_.load(std::memory_order_relaxed); }
  // The replica's stable checkpoint (its low watermark): the latest height it holds 2f+1 signed
  // checkpoint votes for.
  uint64_t stable_checkpoint() const { return stable_checkpoint_.load(std::memory_order_relaxed); }
  Stats stats() const;

 private:
  explicit ConsensusDriver(Deps deps);

  // Runs fn under mu_, then publishes the commits and runs the deferred work it queued.
  void WithLock(absl::FunctionRef<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);
  void StepLocked(const PbftEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyLocked(std::vector<PbftAction> actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CommitLocked(const PbftCommit& commit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stamps the round a message of this replica's belongs to (RoundTimes): a pre-prepare or
  // prepare sent is its proposal accepted, a commit sent is it prepared.
  void StampRoundLocked(const ConsensusMessage& msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A backup's pre-prepare received (signature checked): stamped when the replica could accept
  // it now.
  void StampPrePrepareLocked(const ConsensusMessage& msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FetchLocked(PbftFetchTxs& fetch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // For each of `txs`: true if this replica fetched it for a batch certified here. Takes the
  // lock only when one of them was fetched.
  std::vector<bool> CertifiedFetches(const std::vector<base::DecodedTx>& txs)
      ABSL_LOCKS_EXCLUDED(mu_);
  void UpdateHoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CutBatchesLocked(int64_t now, bool paused, int64_t* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A backup in NORMAL with ready txs, where no block committed for half the request timeout,
  // sends the primary those it has held unproposed that long (once per view each), every eighth
  // of it. A primary that commits is getting txs; re-forwarding under load only adds work.
  void ReforwardLocked(int64_t now, int64_t* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops this replica for good (until a restart) and logs `why`, kept for halt_reason();
  // state() becomes `state` (kHaltedState, or ConsensusState::kDiverged).
  void HaltLocked(std::string why, int state = kHaltedState) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The replica found its state differs from a stable checkpoint: records it in the ledger (a
  // restart stays DIVERGED) and halts in state DIVERGED. Reads keep working.
  void DivergedLocked(const PbftReplica::Divergence& divergence) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Snapshot sync: starts (or resumes) the fetch the replica wants; sends the fetcher's requests;
  // installs a complete snapshot and tells the replica.
  void StartSnapshotLocked(const SnapshotTarget& target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendSnapshotLocked(std::vector<SnapshotFetcher::Send> sends)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void InstallSnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Re-asks what went unanswered; switches to the newest wanted snapshot when the one being
  // fetched is stalled.
  void TickSnapshotLocked(int64_t now, int64_t* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deps::equivocate: sends `proposal` (a pre-prepare) to one replica and a conflicting one to
  // the others.
  void EquivocateLocked(const node::partition::PartitionMessage& proposal, p2p::Channel channel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Deps deps_;
  SnapshotServer snapshot_server_;  // thread-safe

  mutable absl::Mutex mu_;
  std::unique_ptr<SnapshotFetcher> snapshot_ ABSL_GUARDED_BY(mu_);
  SnapshotFetcher::Stats last_snapshot_ ABSL_GUARDED_BY(mu_);  // of the fetch before
  // A newer checkpoint the replica wants while an older one is fetched.
  std::optional<SnapshotTarget> newest_snapshot_ ABSL_GUARDED_BY(mu_);
  uint64_t snapshots_installed_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<PbftReplica> replica_ ABSL_GUARDED_BY(mu_);
  std::map<PbftTimer, int64_t> timers_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::AnyInvocable<void()>> deferred_ ABSL_GUARDED_BY(mu_);
  std::vector<CommitEvent> committed_ ABSL_GUARDED_BY(mu_);  // published once mu_ is released
  int64_t ready_since_ ABSL_GUARDED_BY(mu_) = 0;             // 0 = nothing ready
  int64_t last_cut_nanos_ ABSL_GUARDED_BY(mu_) = 0;          // this primary's last batch cut
  int64_t empty_cut_until_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reported_pending_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_expire_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_reforward_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_commit_nanos_ ABSL_GUARDED_BY(mu_) = 0;  // when a block last committed here
  RoundTimes rounds_;  // thread-safe; stamped under mu_, read by stats() without it
  int64_t next_hook_ ABSL_GUARDED_BY(mu_) = 0;
  bool hook_wants_ticks_ ABSL_GUARDED_BY(mu_) = false;  // on_tick_locked's last answer
  bool primary_normal_ ABSL_GUARDED_BY(mu_) = false;    // last value given to the forwarder
  // Bodies of the batch being proposed, between Forwarder::TakeBodies and its pre-prepare.
  std::optional<node::partition::PartitionMessage> proposal_bodies_ ABSL_GUARDED_BY(mu_);
  bool halted_ ABSL_GUARDED_BY(mu_) = false;
  // Its own lock: status readers must not wait behind consensus work on mu_.
  mutable absl::Mutex halt_mu_;
  std::string halt_reason_ ABSL_GUARDED_BY(halt_mu_);

  std::atomic<int> state_{0};
  std::atomic<uint64_t> view_{0};
  std::atomic<bool> observing_{false};
  std::atomic<uint64_t> view_changes_{0};
  std::atomic<uint64_t> stable_checkpoint_{0};
  std::atomic<uint64_t> dropped_bad_signature_{0};
  std::atomic<uint64_t> dropped_bad_tx_{0};
  std::atomic<uint64_t> redundant_votes_{0};
  std::atomic<uint64_t> fetched_checked_{0};
  std::atomic<uint64_t> fetched_certified_{0};
};

}  // namespace partitions

#endif  // PARTITIONS_CONSENSUS_DRIVER_H_
