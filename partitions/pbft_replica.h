// PbftReplica: one replica of a partition's PBFT consensus, as a deterministic state machine.
//
// Step(event) -> actions. No threads, clocks, sockets or randomness inside: time arrives as timer
// events, the network as message events, and everything the replica wants done leaves as actions
// (pbft_types.h). The same sequence of events always yields the same actions, which is what lets
// tests/sim drive thousands of seeded runs.
//
// Protocol (Castro & Liskov, with signatures): n = 3f+1, quorums of 2f+1, primary = view mod n.
//  - Normal case: pre-prepare (batch of tx hashes; missing txs are fetched before preparing),
//    prepare, commit; execution (PbftCommit actions) strictly in seq order; pipelining within the
//    watermarks (h, h+L].
//  - Checkpoints every K seqs; 2f+1 matching make one stable: low watermark moves, log is GC'd.
//    A checkpoint vote carries the chain digest and the state root the executor reported for
//    that seq (PbftExecuted), so a stable checkpoint is the agreed state. A replica whose own
//    root (or chain) differs from a stable checkpoint's is DIVERGED: it signs nothing more.
//  - View change on the request timer (work pending, no progress), with doubling timeouts; view
//    changes carry prepared certificates; the new primary re-issues them (null batches for gaps).
//    As in the paper, a replica moves past view w by its timer only once 2f+1 ViewChanges for w
//    arrived: alone, it re-sends its ViewChange instead of escalating. A replica whose view
//    change found no support while f+1 others commit in a lower view observes that view (executes
//    what 2f+1 commit, signs nothing in it) until the others move: it is NORMAL again, and safe.
//  - Block sync: a replica that learns of a stable checkpoint it has not executed (or stalls
//    while peers commit, or while f+1 of them send beyond its window) is RECOVERING: it asks
//    peers for committed batches with commit certificates (2f+1 signed commits), verifies and
//    executes them. Answers carry the peer's stable checkpoint with its proof when it is later
//    than the asker's, so a replica that missed the checkpoint votes moves its low watermark.
//    Far behind (snapshot_min_gap) it asks its owner for the checkpoint's state instead
//    (PbftSnapshotWanted) and goes on from there once it is installed (PbftSnapshotInstalled).
//  - Persistence: before returning a send, everything it depends on is written to the
//    ConsensusStore (view, own signed messages, prepared certificates, stable checkpoint), and
//    Create() rebuilds from it, so a restarted replica never signs a contradiction.
// Incoming messages must already be signature-verified by the caller (envelope signer == sender).
//
// Parts, each with its own header, owned here and never referring back: PbftLog (per-seq
// messages; prepared and committed), CheckpointTracker (checkpoint votes; the stable checkpoint,
// h), ViewState and ViewChangeVotes (views, observer mode, ViewChange support), BlockSync,
// FutureBuffer (messages of views not installed yet), RequestTimer, TxFetcher, and PbftOutbox (a
// Step's actions, with signing and the durable writes before sends). The replica composes them.
//
// Thread-compatibility: not thread-safe; one owner calls Step (e.g. the partition's consensus
// lane).
//
//   ASSIGN_OR_RETURN(auto replica, PbftReplica::Create(config, deps, {ledger_height, digest}));
//   Apply(replica->Step(PbftStart{}));
//   Apply(replica->Step(PbftMessage{std::move(verified_msg)}));
//   if (replica->CanPropose()) Apply(replica->Step(PbftBatchReady{pool.CutBatch()}));
#ifndef PARTITIONS_PBFT_REPLICA_H_
#define PARTITIONS_PBFT_REPLICA_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "partitions/pbft_block_sync.h"
#include "partitions/pbft_certs.h"
#include "partitions/pbft_checkpoints.h"
#include "partitions/pbft_future_buffer.h"
#include "partitions/pbft_log.h"
#include "partitions/pbft_outbox.h"
#include "partitions/pbft_request_timer.h"
#include "partitions/pbft_tx_fetcher.h"
#include "partitions/pbft_types.h"
#include "partitions/pbft_view_change_votes.h"
#include "partitions/pbft_view_state.h"

namespace partitions {

class PbftReplica {
 public:
  // All must outlive the replica.
  struct Deps {
    PbftCrypto* crypto = nullptr;
    const PbftTxSource* txs = nullptr;
    ConsensusStore* store = nullptr;
    const PbftBlockSource* blocks = nullptr;
  };
  // Where the ledger stands (after a restart: its height, chain digest and state root).
  struct LedgerPosition {
    uint64_t last_executed = 0;
    std::string chain_digest;  // empty: genesis
    std::string state_root;    // at last_executed; empty: not known (not checked)
  };
  // What this replica executed at `seq` against what 2f+1 replicas signed there.
  struct Divergence {
    uint64_t seq = 0;
    std::string own_chain_digest;
    std::string own_state_root;  // empty when only the chain was compared
    std::string agreed_chain_digest;
    std::string agreed_state_root;
    // "state diverged at height 32: own state root 3f2a..., agreed 9c01... (own chain digest
    // ..., agreed ...)", in hex.
    std::string ToString() const;
  };

  // Validates the config and rebuilds the persisted state from deps.store.
  static absl::StatusOr<std::unique_ptr<PbftReplica>> Create(const PbftConfig& config, Deps deps,
                                                             LedgerPosition position);

  // Processes one event. After a store failure the replica halts: status() is the error and
  // every later Step returns no actions.
  std::vector<PbftAction> Step(const PbftEvent& event);

  // True if the peer message `msg` could change nothing in this replica's state (PbftLog::
  // Redundant, in the installed view): its quorum is already complete. Stepping it would only
  // count it as admitted; a caller may drop it before checking its signature.
  bool Redundant(const ConsensusMessage& msg) const;
  // Calls `fn` with every tx hash of the batch at `seq` and returns true if that batch is
  // certified here: committed (2f+1 matching commits), synced (a valid commit certificate), or
  // its pre-prepare matched by the prepares of 2f backups other than this replica. Then at least
  // one correct replica voted for it, and a correct replica votes only for a batch whose txs it
  // holds checked (or for one already certified): a body whose hash (SHA-256 of the signed
  // bytes, signature included) is one of these needs no signature check of its own. Returns
  // false without calling `fn` otherwise.
  bool ForEachCertifiedTx(uint64_t seq, const std::function<void(const std::string&)>& fn) const;
  // True when a PbftBatchReady now would be proposed (primary, view installed, within the
  // watermarks and the in-flight limit).
  bool CanPropose() const;
  ConsensusState state() const;
  uint64_t view() const { return views_.view(); }
  // True while following a lower view without voting (observer mode, see below).
  bool observing() const { return views_.observing(); }
  // ViewChanges held for the current view (own included); 0 when there are none.
  size_t view_change_votes() const { return view_changes_.CountFor(views_.view()); }
  bool IsPrimary() const { return views_.is_primary(); }
  uint64_t last_executed() const { return last_executed_; }
  // Primary: the seqs it assigned in this view that are not executed yet (0 for a backup).
  uint64_t own_proposals_in_flight() const;
  uint64_t low_watermark() const { return checkpoints_.stable_seq(); }
  const std::string& chain_digest() const { return chain_digest_; }
  const PbftCounters& counters() const { return counters_; }
  absl::Status status() const { return out_.status(); }
  // Set once this replica found its executed state differs from a stable checkpoint (state()
  // is then kDiverged and status() a DataLoss error saying so).
  const std::optional<Divergence>& divergence() const { return divergence_; }
  const PbftConfig& config() const { return config_; }

 private:
  using Slot = PbftLog::Slot;

  PbftReplica(const PbftConfig& config, Deps deps, LedgerPosition position);
  absl::Status Restore();

  // Restore, start and dispatch (pbft_replica.cc).
  void OnStart();
  void OnMessage(const ConsensusMessage& msg);
  void OnTimer(PbftTimer timer);
  void OnBatchReady(const std::vector<std::string>& tx_hashes);
  void OnPendingRequests(uint64_t count);
  void OnTxsAvailable();
  void OnRetransmit();
  void OnExecuted(uint64_t seq, const std::string& state_root);
  void OnSnapshotInstalled(uint64_t seq, const std::string& chain_digest);
  void OnSnapshotAbandoned();

  // Normal case and execution (pbft_replica.cc).
  void OnPrePrepare(const ConsensusMessage& msg);
  void OnPrepare(const ConsensusMessage& msg);
  void OnCommit(const ConsensusMessage& msg);
  // After a pre-prepare was accepted, or txs arrived: fetches missing txs, or prepares.
  void ContinueAfterTxs(uint64_t seq);
  void CheckPrepared(uint64_t seq);
  void CheckCommitted(uint64_t seq);
  void TryExecute();
  // A synced batch at `waiting` lacks txs: fetches what the held batches after it lack too.
  void PrefetchSynced(uint64_t waiting);
  // Normal-case message of a view not (yet) installed here: buffer if ahead, else count stale.
  // Returns true when the message was consumed (buffered or dropped).
  bool DivertByView(const ConsensusMessage& msg, uint64_t view);
  // False if the block source holds the batch executed at `seq` and its digest is not `digest`.
  bool MatchesExecuted(uint64_t seq, const std::string& digest) const;

  // Checkpoints and block sync (pbft_sync.cc).
  void OnCheckpoint(const ConsensusMessage& msg);
  void SendOwnCheckpoint(uint64_t seq, const std::string& chain_digest,
                         const std::string& state_root);
  // Compares what this replica executed at the stable checkpoint with what 2f+1 signed there
  // (an empty root: the chain digest only); diverges and returns false when they differ.
  bool MatchesStable(const std::string& chain_digest, const std::string& state_root);
  void Diverge(Divergence divergence);
  void AdvanceStable(uint64_t seq, const std::string& digest,
                     const std::vector<ConsensusMessage>& proof);
  // Behind the stable checkpoint: fetch its state (far behind, PbftConfig::snapshot_min_gap) or
  // the batches up to it.
  void Recover();
  // Asks a peer for batches, unless a snapshot is being fetched.
  void AskSync();
  void OnSyncRequest(const ConsensusMessage& msg);
  void OnSyncResponse(const ConsensusMessage& msg);
  bool EvidenceAhead() const;
  // A normal-case message of `sender` for `seq` was refused as above the high watermark (h + L):
  // remembers the sender.
  void NoteBeyondWindow(uint32_t sender, uint64_t seq, PbftAdmission admission);

  // View change (pbft_view_change.cc).
  void StartViewChange(uint64_t new_view);
  void OnViewChange(const ConsensusMessage& msg);
  void OnNewView(const ConsensusMessage& msg);
  void OnNewViewRequest(const ConsensusMessage& msg);
  void MaybeSendNewView();
  void InstallNewView(const ConsensusMessage& nv_msg, const NewViewPlan& plan);
  // Moves to `view` (installed or not) with no NewView and no phase state of the view left.
  void MoveToView(uint64_t view, bool installed);
  // Observer mode: a replica whose own view change (view w) found no support, while f+1 others
  // commit in a lower view v, follows v without signing anything in it (so its ViewChange for w,
  // which peers hold, stays a true account of what it prepared) and goes back to w when the
  // others move or v stalls. See pbft_view_change.cc.
  void NoteLowerViewCommit(const ConsensusMessage& msg, uint64_t view);
  void EnterObserver(uint64_t view);
  void ResumeOwnViewChange();

  const PbftConfig config_;
  const Deps deps_;
  const PbftValidator validator_;

  PbftOutbox out_;  // output of the current Step; halted after a failed store write
  PbftCounters counters_;

  ViewState views_;
  ViewChangeVotes view_changes_;

  // Log and execution.
  PbftLog log_;
  uint64_t next_seq_ = 1;  // primary: next seq to assign
  uint64_t last_executed_ = 0;
  std::string chain_digest_;
  const std::string position_root_;  // LedgerPosition::state_root, checked at start
  // Executed seqs whose state root was asked for (PbftCommit::report_state_root) and has not
  // come back yet: seq -> chain digest after it.
  std::map<uint64_t, std::string> awaiting_root_;
  std::optional<Divergence> divergence_;
  uint64_t snapshot_seq_ = 0;         // the PbftSnapshotWanted not installed yet; 0: none
  bool snapshots_abandoned_ = false;  // PbftSnapshotAbandoned: block sync only from then on
  TxFetcher fetcher_;

  FutureBuffer future_;            // messages of views not installed yet
  CheckpointTracker checkpoints_;  // and the stable checkpoint: the low watermark h
  BlockSync sync_;
  // Replicas whose normal-case messages were above this one's window since its low watermark
  // last moved (at most n): f+1 of them are evidence that it is behind (EvidenceAhead), and
  // block sync asks them first (they are up, and one of them is correct).
  std::set<uint32_t> beyond_window_;
  RequestTimer request_timer_;
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_REPLICA_H_
