// Private to runtime/partition*.cc: the state behind Partition (see partition.h for the paths).
//
// Locks, in acquisition order: cons_mu_ (replica, timers, batch cutting, commits) -> the pool's
// and the executor's internal locks -> wait_mu_ / fwd_mu_ / config_mu_. Callbacks to clients are
// never run under cons_mu_: they are queued in `deferred_` and run once it is released.
#ifndef RUNTIME_PARTITION_IMPL_H_
#define RUNTIME_PARTITION_IMPL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "base/transaction.h"
#include "flowctl/adaptive_limiter.h"
#include "flowctl/dispatcher.h"
#include "flowctl/histogram.h"
#include "flowctl/quota_drain.h"
#include "flowctl/spill_fifo.h"
#include "flowctl/stage_chain.h"
#include "flowctl/stage_registry.h"
#include "partitions/batch_policy.h"
#include "partitions/ledger.h"
#include "partitions/pbft_ed25519_crypto.h"
#include "partitions/pbft_replica.h"
#include "partitions/rocksdb_consensus_store.h"
#include "partitions/tx_pool.h"
#include "proto/partition.pb.h"
#include "runtime/partition.h"

namespace runtime {

// Dispatcher lanes of a partition, in Options::lanes order.
enum PartitionLane : int {
  kConsensusLane = 0,
  kSyncLane = 1,
  kTxForwardLane = 2,
  kBulkLane = 3,
  kClientLane = 4,
  kNumPartitionLanes = 5,
};

// One client request (a single tx or a batch) on its way through the client lane. Whatever
// happens to it (verified, dropped by a full lane, discarded by Stop), `done` runs exactly once:
// the destructor answers UNAVAILABLE for a job that was never finished.
struct ClientJob {
  struct Item {
    int slot = 0;  // index in results
    base::DecodedTx tx;
    flowctl::Admission admission;  // holds (in-flight permits) until the item is finished
  };
  std::vector<Item> items;
  std::vector<SubmitResult> results;
  SubmitOptions options;
  int64_t arrival_nanos = 0;
  bool single = false;
  Partition::SubmitDone single_done;
  Partition::BatchDone batch_done;
  bool finished = false;

  ~ClientJob();
  // Runs the callback with `results` (no-op when already finished).
  void Finish();
};

// A client waiting for its tx to commit.
struct CommitWaiter {
  int64_t deadline_nanos = 0;
  SubmitResult result;  // filled up to the receipt
  Partition::SubmitDone done;
};

class Partition::Impl final : public partitions::PbftTxSource, public partitions::PbftBlockSource {
 public:
  explicit Impl(PartitionEnv env);
  ~Impl() override;

  absl::Status Open();
  absl::Status Start();
  void Stop(absl::Duration drain);

  // Client path (partition.cc).
  void Submit(std::vector<std::string> txs, const SubmitOptions& options, bool single,
              SubmitDone single_done, BatchDone batch_done);
  void HandleClientJob(flowctl::Message message);
  absl::Status DrainSink(const flowctl::SpillFifo::Record& record);
  absl::Status AdmitVerified(partitions::TxPtr tx);
  // Answers the commit waiters of `hash` from the ledger's receipt.
  void ResolveWaiters(const std::string& hash);
  // Queues an admitted client tx for TX_FORWARD, or holds it while this replica is the primary
  // (its body then goes out with the proposal that names it; see held_ below).
  void QueueForward(const partitions::TxPtr& tx);
  // Sends what is queued for TX_FORWARD, plus held txs past the hold limit (all of them once
  // this replica is no longer the primary, or when stopping).
  void FlushForward();
  // Takes the held bodies of `batch` (about to be proposed) into proposal_bodies_.
  void TakeProposalBodiesLocked(const std::vector<partitions::TxPtr>& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cons_mu_);
  // Sends proposal_bodies_ on CONSENSUS (right before the pre-prepare), or hands them to
  // forwarding when that fails or no pre-prepare followed.
  void SendProposalBodiesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(cons_mu_);
  void ReturnProposalBodiesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(cons_mu_);
  // Follows the replica's primary role into hold_own_ (after every Step).
  void UpdateHoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(cons_mu_);

  // Peer path and consensus (partition_consensus.cc).
  void OnPeerMessage(const p2p::NodeId& from, p2p::Channel channel, std::string payload);
  void HandlePeerMessage(flowctl::Message message);
  void HandleTxBatch(const node::partition::TxBatch& batch);
  void HandleFetch(uint32_t from, const node::partition::TxFetch& fetch);
  // Runs fn under cons_mu_, then the deferred callbacks it queued.
  void WithConsensus(absl::FunctionRef<void()> fn) ABSL_LOCKS_EXCLUDED(cons_mu_);
  void StepLocked(const partitions::PbftEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(cons_mu_);
  void ApplyLocked(std::vector<partitions::PbftAction> actions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cons_mu_);
  absl::Status CommitLocked(const partitions::PbftCommit& commit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cons_mu_);
  void SendPeer(uint32_t to, p2p::Channel channel, const node::partition::PartitionMessage& msg);
  void BroadcastPeers(p2p::Channel channel, const node::partition::PartitionMessage& msg);
  void TickerLoop();
  // One ticker round at `now`; returns when it wants to run next.
  int64_t Tick(int64_t now);
  void CutBatchesLocked(int64_t now, int64_t* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(cons_mu_);
  void ExpireWaiters(int64_t now);
  // Adaptive admission (partition_adaptive.cc). Takes a ticket for a verified client tx about to
  // be pooled (before the pool sees it, so its commit always finds it); false if that tx is
  // already tracked (a duplicate, which the pool refuses).
  bool TrackAdaptive(const std::shared_ptr<flowctl::AdaptiveLimiter>& limiter,
                     const std::string& tx_hash, int64_t admitted_nanos) ABSL_LOCKS_EXCLUDED(wait_mu_);
  // The pool refused it: gives the slot back without feedback.
  void UntrackAdaptive(const std::string& tx_hash) ABSL_LOCKS_EXCLUDED(wait_mu_);
  // Releases the adaptive tickets held past their max_hold (Timeout: no feedback), and those of
  // txs that left the pool without committing (expired, or made stale by another tx with their
  // nonce): a drop signal if the pool expired txs since the last sweep, no feedback otherwise. Under cons_mu_ so no commit can be half-way (CommitLocked takes
  // a committed tx's ticket in the same critical section that removes it from the pool).
  void SweepAdaptiveTicketsLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(cons_mu_);
  void WakeTicker();

  // PbftTxSource / PbftBlockSource (called inside Step, under cons_mu_).
  bool HasTx(absl::string_view tx_hash) const override;
  std::optional<node::consensus::CommittedBatch> GetCommitted(uint64_t seq) const override;

  // Queries and admin (partition.cc).
  node::admin::PartitionFlowStats FlowStats() const;
  absl::StatusOr<node::config::PartitionConfig> UpdateFlow(
      const node::admin::UpdatePartitionFlowRequest& request);
  std::string StateName() const;
  partitions::TxPoolLimits PoolLimitsFrom(const node::config::PoolConfig& pool) const;

  // ---- constant after Open ----
  PartitionEnv env_;
  const uint32_t id_;
  const std::string name_;
  const flowctl::Clock* const clock_;
  uint32_t self_index_ = 0;
  absl::flat_hash_map<p2p::NodeId, uint32_t> index_of_;
  base::TxLimits tx_limits_;
  partitions::Chain chain_;
  std::unique_ptr<partitions::RocksDbConsensusStore> store_;
  std::unique_ptr<partitions::Ed25519PbftCrypto> crypto_;
  std::unique_ptr<partitions::TxPool> pool_;
  flowctl::StageRegistry registry_;
  std::unique_ptr<flowctl::StageChainHolder> interceptor_;
  std::unique_ptr<flowctl::Dispatcher> dispatcher_;
  std::unique_ptr<partitions::BatchPolicy> batch_policy_;
  std::unique_ptr<flowctl::SpillFifo> fifo_;    // lossless only
  std::unique_ptr<flowctl::QuotaDrain> drain_;  // lossless only

  // ---- configuration and arbiter results ----
  mutable absl::Mutex config_mu_;
  node::config::PartitionConfig config_ ABSL_GUARDED_BY(config_mu_);
  uint64_t pool_bytes_cap_ ABSL_GUARDED_BY(config_mu_) = 0;  // arbiter's memory share applied
  node::admin::ResourceShare cpu_share_ ABSL_GUARDED_BY(config_mu_);
  node::admin::ResourceShare memory_share_ ABSL_GUARDED_BY(config_mu_);
  node::admin::ResourceShare egress_share_ ABSL_GUARDED_BY(config_mu_);

  // ---- consensus ----
  mutable absl::Mutex cons_mu_;
  std::unique_ptr<partitions::PbftReplica> replica_ ABSL_GUARDED_BY(cons_mu_);
  std::map<partitions::PbftTimer, int64_t> timers_ ABSL_GUARDED_BY(cons_mu_);
  std::vector<absl::AnyInvocable<void()>> deferred_ ABSL_GUARDED_BY(cons_mu_);
  int64_t ready_since_ ABSL_GUARDED_BY(cons_mu_) = 0;    // 0 = nothing ready
  int64_t empty_cut_until_ ABSL_GUARDED_BY(cons_mu_) = 0;
  uint64_t reported_pending_ ABSL_GUARDED_BY(cons_mu_) = 0;
  int64_t next_expire_ ABSL_GUARDED_BY(cons_mu_) = 0;
  bool primary_normal_ ABSL_GUARDED_BY(cons_mu_) = false;  // last value given to hold_own_
  // Bodies of the batch being proposed, between TakeProposalBodiesLocked and its pre-prepare.
  std::optional<node::partition::PartitionMessage> proposal_bodies_ ABSL_GUARDED_BY(cons_mu_);
  bool halted_ ABSL_GUARDED_BY(cons_mu_) = false;
  uint64_t swept_expired_ ABSL_GUARDED_BY(cons_mu_) = 0;  // pool's `expired` at the last sweep
  int64_t next_sweep_ ABSL_GUARDED_BY(cons_mu_) = 0;
  // Mirrors for lock-free readers.
  std::atomic<int> state_{0};  // partitions::ConsensusState, or kHaltedState
  std::atomic<uint64_t> view_{0};
  std::atomic<bool> observing_{false};  // replica_->observing() after the last Step
  std::atomic<uint64_t> height_{0};
  std::atomic<uint64_t> view_changes_{0};
  std::atomic<bool> paused_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> started_{false};

  // ---- txs asked for with TxFetch (admitted past the pool limits when they arrive) ----
  absl::Mutex wanted_mu_;
  absl::flat_hash_set<std::string> wanted_ ABSL_GUARDED_BY(wanted_mu_);

  // ---- lossless: drained records not yet committed hold back the FIFO's persisted position ----
  void SpillRecordDone(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(spill_mu_);
  absl::Mutex spill_mu_;
  std::map<uint64_t, bool> spill_pending_ ABSL_GUARDED_BY(spill_mu_);  // seq -> committed
  absl::flat_hash_map<std::string, uint64_t> spill_seq_of_ ABSL_GUARDED_BY(spill_mu_);
  uint64_t spill_drained_max_ ABSL_GUARDED_BY(spill_mu_) = 0;

  // ---- forwarding ----
  // Why the primary holds its own client txs: a pre-prepare names txs by hash and goes out on
  // CONSENSUS, which the egress scheduler serves before TX_FORWARD. Had the primary forwarded its
  // clients' txs, its proposal would overtake their bodies under load; every backup would then
  // fetch them (SYNC, also ahead of TX_FORWARD) and receive them a second time from the forward.
  // Held, they go out once, as a TxBatch on CONSENSUS just before the pre-prepare (same partition
  // and channel, so every peer's link keeps that order). A tx not proposed within hold_nanos_
  // (or when the replica stops being the primary) is forwarded as usual, so a new primary and the
  // backups' request timers still learn of it.
  struct HeldTx {
    partitions::TxPtr tx;
    int64_t since = 0;
  };
  absl::Mutex fwd_mu_;
  std::vector<std::string> fwd_ ABSL_GUARDED_BY(fwd_mu_);
  size_t fwd_bytes_ ABSL_GUARDED_BY(fwd_mu_) = 0;
  bool hold_own_ ABSL_GUARDED_BY(fwd_mu_) = false;  // primary in NORMAL: hold client txs
  absl::flat_hash_map<std::string, HeldTx> held_ ABSL_GUARDED_BY(fwd_mu_);  // by tx hash
  std::deque<std::pair<int64_t, std::string>> held_order_ ABSL_GUARDED_BY(fwd_mu_);  // (since, hash)
  int64_t hold_nanos_ = 0;  // constant after Open: the replica's retransmit period
  std::atomic<uint64_t> proposal_body_txs_{0};  // sent with a proposal instead of forwarded

  // ---- commit waiters and latency ----
  mutable absl::Mutex wait_mu_;
  absl::flat_hash_map<std::string, std::vector<CommitWaiter>> waiters_ ABSL_GUARDED_BY(wait_mu_);
  absl::flat_hash_map<std::string, int64_t> admitted_at_ ABSL_GUARDED_BY(wait_mu_);
  flowctl::Histogram commit_latency_;  // ns, client admission -> local commit
  // Client txs admitted through an adaptive stage and pooled, until they commit (Commit: a
  // latency sample) or leave the pool otherwise (SweepAdaptiveTicketsLocked). Inserted before
  // the pool sees the tx, so its commit always finds it.
  struct AdaptiveTicket {
    flowctl::AdaptiveLimiter::Ticket ticket;
    int64_t tracked_nanos = 0;  // when inserted: the sweep leaves young tickets alone
  };
  absl::flat_hash_map<std::string, AdaptiveTicket> adaptive_tickets_ ABSL_GUARDED_BY(wait_mu_);
  std::atomic<uint64_t> committed_txs_{0};

  // ---- peer-message drops (before the replica) ----
  std::atomic<uint64_t> dropped_unknown_peer_{0};
  std::atomic<uint64_t> dropped_malformed_{0};
  std::atomic<uint64_t> dropped_bad_signature_{0};
  std::atomic<uint64_t> dropped_bad_tx_{0};
  std::atomic<uint64_t> spill_dropped_invalid_{0};

  // ---- arbiter usage ----
  int64_t last_cpu_nanos_ = 0;  // TakeUsage only (one caller: the arbiter)

  // ---- ticker ----
  absl::Mutex tick_mu_;
  absl::CondVar tick_cv_;
  bool tick_stop_ ABSL_GUARDED_BY(tick_mu_) = false;
  bool tick_wake_ ABSL_GUARDED_BY(tick_mu_) = false;
  std::thread ticker_;
};

inline constexpr int kHaltedState = 99;

// Dispatcher weights (>= 1, rounded) of the configured lane weights, in PartitionLane order.
std::vector<int> LaneWeights(const node::config::LaneConfig& weights);
node::admin::LatencySummary LatencySummaryOf(const flowctl::HistogramSnapshot& nanos);

// Ledger consensus-metadata keys.
std::string CertKey(uint64_t seq);
inline constexpr char kChainDigestKey[] = "chain_digest";

}  // namespace runtime

#endif  // RUNTIME_PARTITION_IMPL_H_
