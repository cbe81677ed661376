// Vocabulary of the PBFT replica (partitions/pbft_replica.h): its configuration, the events it is
// stepped with, the actions it returns, the small interfaces it reads through, and its counters.
//
// The replica is a deterministic state machine; everything outside it (network, timers, pool,
// ledger, keys) is reached only through the types in this header, so the node and the simulator
// (tests/sim) wire the same replica to different worlds.
//
//   PbftConfig config{.n = 4, .self = 1};
//   std::vector<PbftAction> actions = replica.Step(PbftTimerFired{PbftTimer::kRequest});
//   for (const PbftAction& a : actions) std::visit(executor, a);
#ifndef PARTITIONS_PBFT_TYPES_H_
#define PARTITIONS_PBFT_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/consensus.pb.h"

namespace partitions {

using ::node::consensus::ConsensusMessage;

// Consensus health, read by the interceptor's health gate (anything but kNormal rejects).
// kDiverged: this replica's executed state differs from what 2f+1 replicas signed at a stable
// checkpoint (PbftReplica::divergence()); it signs nothing more, for good.
enum class ConsensusState { kNormal, kViewChange, kRecovering, kDiverged };
const char* ConsensusStateName(ConsensusState state);

enum class PbftTimer {
  kRequest,     // work pending without progress for too long: start a view change
  kViewChange,  // the view change did not complete: move to the next view (with backoff)
  kRetransmit,  // resend own unfinished votes, ask for missed new-views and sync when stalled
};

enum class PbftChannel { kConsensus, kSync };

struct PbftConfig {
  uint32_t n = 4;     // replicas; must be 3f+1
  uint32_t self = 0;  // this replica's index in [0, n)
  // Checkpoint every K executed seqs; log window L (watermarks [h, h+L]); L a multiple of K, >= 2K.
  uint64_t checkpoint_interval = 16;
  uint64_t window = 64;
  uint32_t max_batch_txs = 10000;  // larger pre-prepares are rejected
  uint64_t max_inflight = 64;      // primary: proposed but not executed seqs (<= window)
  int64_t request_timeout_ms = 2000;
  int64_t view_change_timeout_ms = 2000;  // doubled per consecutive failed view change
  uint32_t max_backoff_shift = 4;         // cap of the doubling (2^4 = 16x)
  int64_t retransmit_ms = 500;
  uint32_t sync_chunk = 16;  // batches per SyncResponse
  // A replica at least this many seqs behind a stable checkpoint (with an agreed state root)
  // fetches the state there (PbftSnapshotWanted) instead of every batch since its ledger's tip.
  // 0: always block sync.
  uint64_t snapshot_min_gap = 0;

  uint32_t f() const { return (n - 1) / 3; }
  uint32_t quorum() const { return 2 * f() + 1; }
  uint32_t PrimaryOf(uint64_t view) const { return static_cast<uint32_t>(view % n); }
  absl::Status Validate() const;
};

// ---- Interfaces the replica reads through (all called only from inside Step). ----

// Signs this replica's messages and verifies other replicas' nested messages (certificates).
class PbftCrypto {
 public:
  virtual ~PbftCrypto() = default;
  // Signature by this replica over SigningBytes(msg).
  virtual std::string Sign(const ConsensusMessage& msg) = 0;
  // True iff msg.signature() is replica msg.sender()'s signature over SigningBytes(msg).
  virtual bool Verify(const ConsensusMessage& msg) const = 0;
};

// The local transaction pool, asked whether a batch's transactions have arrived.
class PbftTxSource {
 public:
  virtual ~PbftTxSource() = default;
  // True if the tx is here to execute batch `seq` with: pooled, or committed before in a block
  // the ledger still holds when `seq` executes (a replay, which the executor rejects again).
  virtual bool HasTx(absl::string_view tx_hash, uint64_t seq) const = 0;
};

// The ledger's committed batches with their commit certificates (serves block sync).
class PbftBlockSource {
 public:
  virtual ~PbftBlockSource() = default;
  // The batch committed at `seq`, or nullopt if this replica has not executed it.
  virtual std::optional<node::consensus::CommittedBatch> GetCommitted(uint64_t seq) const = 0;
};

// Durable consensus state. Each call must be durable when it returns: the replica calls it before
// returning the sends that depend on it. A failed call halts the replica (status() turns non-OK).
class ConsensusStore {
 public:
  virtual ~ConsensusStore() = default;
  virtual absl::Status PutView(const node::consensus::PersistedView& view) = 0;
  // Records a new stable checkpoint and drops logged messages with seq <= record.seq().
  virtual absl::Status PutStableCheckpoint(
      const node::consensus::StableCheckpointRecord& record) = 0;
  virtual absl::Status AppendLog(const std::vector<ConsensusMessage>& messages) = 0;
  virtual absl::StatusOr<node::consensus::PersistedConsensus> Load() const = 0;
};

// ---- Events ----

struct PbftStart {};  // first event after construction (or restart)
struct PbftMessage {  // a message from a peer whose envelope signature was verified
  ConsensusMessage msg;
};
struct PbftTimerFired {
  PbftTimer timer;
};
struct PbftBatchReady {  // primary only: a batch cut from the pool (see CanPropose())
  std::vector<std::string> tx_hashes;
};
struct PbftPendingRequests {  // the pool's count of uncommitted txs changed
  uint64_t count = 0;
};
struct PbftTxsAvailable {  // fetched (or forwarded) transactions arrived in the pool
  std::vector<std::string> tx_hashes;
};
struct PbftExecuted {  // a PbftCommit with report_state_root was executed: the state after it
  uint64_t seq = 0;
  std::string state_root;  // 32 bytes
};
struct PbftSnapshotInstalled {  // a PbftSnapshotWanted state is the ledger's now
  uint64_t seq = 0;
  std::string chain_digest;  // the wanted one's
};
// The owner gave up fetching the wanted snapshots (no progress for long, e.g. no f+1 peers can
// serve one): the replica block-syncs from its own tip instead, for the rest of its life.
struct PbftSnapshotAbandoned {};
using PbftEvent =
    std::variant<PbftStart, PbftMessage, PbftTimerFired, PbftBatchReady, PbftPendingRequests,
                 PbftTxsAvailable, PbftExecuted, PbftSnapshotInstalled, PbftSnapshotAbandoned>;

// ---- Actions (apply in order) ----

struct PbftSend {
  uint32_t to = 0;
  PbftChannel channel = PbftChannel::kConsensus;
  ConsensusMessage msg;  // signed
};
struct PbftBroadcast {  // to every replica but self
  PbftChannel channel = PbftChannel::kConsensus;
  ConsensusMessage msg;
};
struct PbftCommit {  // execute and persist; emitted strictly in seq order, each seq once
  uint64_t seq = 0;
  uint64_t view = 0;
  std::vector<std::string> tx_hashes;  // empty for a null batch
  std::string digest;
  std::string chain_digest;                   // after this batch (see Checkpoint)
  std::vector<ConsensusMessage> certificate;  // 2f+1 signed commits
  // The replica needs the state root after this batch (a checkpoint, or the stable checkpoint a
  // lagging replica reached): once executed, step it with PbftExecuted{seq, root}.
  bool report_state_root = false;
};
struct PbftSetTimer {  // (re)arm; replaces a pending timer with the same id
  PbftTimer timer;
  int64_t delay_ms = 0;
};
struct PbftCancelTimer {
  PbftTimer timer;
};
struct PbftFetchTxs {  // ask peers for these transactions, then report PbftTxsAvailable
  std::vector<std::string> tx_hashes;
  uint64_t seq = 0;  // the batch that lists them (see PbftReplica::ForEachCertifiedTx)
};
struct PbftStateChanged {
  ConsensusState state;
};
// Far behind a stable checkpoint (PbftConfig::snapshot_min_gap): fetch the state after `seq`
// from peers (snapshot_sync.h), install it as the ledger's, then step PbftSnapshotInstalled.
// Until then the replica executes nothing and asks for no batches. 2f+1 signed chain_digest and
// state_root in the stable checkpoint. Emitted again for each newer stable checkpoint while
// none is installed: the owner may go on with the one it fetches, or switch to the newer one
// when peers cannot serve the older (they keep no state below a snapshot they installed).
struct PbftSnapshotWanted {
  uint64_t seq = 0;
  std::string chain_digest;
  std::string state_root;
};
using PbftAction = std::variant<PbftSend, PbftBroadcast, PbftCommit, PbftSetTimer, PbftCancelTimer,
                                PbftFetchTxs, PbftStateChanged, PbftSnapshotWanted>;

// What became of a message offered to a part of the replica (its log, checkpoints, view
// changes): added, or refused and counted under the PbftCounters field of the same name.
enum class PbftAdmission { kAdded, kInvalid, kOutsideWatermarks, kDuplicate, kConflicting };

// What the replica dropped, and why (each dropped message counts once).
struct PbftCounters {
  uint64_t dropped_not_replica = 0;
  uint64_t dropped_stale_view = 0;
  uint64_t dropped_outside_watermarks = 0;
  uint64_t dropped_conflicting = 0;
  uint64_t dropped_duplicate = 0;
  uint64_t dropped_invalid = 0;  // malformed, wrong sender role, bad nested signature/certificate
  uint64_t buffered_future = 0;
  uint64_t view_changes_started = 0;
  uint64_t new_views_installed = 0;
  uint64_t views_observed = 0;  // lower views followed without voting after a lone view change
  uint64_t synced_batches = 0;
  uint64_t snapshots_installed = 0;
  uint64_t committed_batches = 0;

  // True for kAdded; otherwise counts the refusal under its field and returns false.
  bool Admitted(PbftAdmission admission);
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_TYPES_H_
