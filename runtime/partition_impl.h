// Private to runtime/partition*.cc: the state behind Partition (see partition.h for the paths).
//
// Locks, in acquisition order: the consensus driver's (replica, timers, batch cutting, commits;
// partitions/consensus_driver.h) -> the components' leaf locks (pool, executor, ledger, tracker,
// forwarder, the commit-stream hub's) -> config_mu_. Callbacks to clients never run under the
// driver's lock: commit events and deferred work are queued and run once it is released.
#ifndef RUNTIME_PARTITION_IMPL_H_
#define RUNTIME_PARTITION_IMPL_H_

#include <algorithm>
#include <array>
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
#include "flowctl/clock.h"
#include "flowctl/dispatcher.h"
#include "flowctl/histogram.h"
#include "flowctl/peer_admission.h"
#include "flowctl/quota_drain.h"
#include "flowctl/rate_meter.h"
#include "flowctl/request_lifecycle.h"
#include "flowctl/retry_reservations.h"
#include "flowctl/spill_fifo.h"
#include "flowctl/stage_chain.h"
#include "flowctl/stage_registry.h"
#include "flowctl/tick_scheduler.h"
#include "partitions/batch_policy.h"
#include "partitions/client_admission.h"
#include "partitions/commit_feed.h"
#include "partitions/commit_pipeline.h"
#include "partitions/commit_waiters.h"
#include "partitions/consensus_driver.h"
#include "partitions/forwarder.h"
#include "partitions/ledger.h"
#include "partitions/pbft_ed25519_crypto.h"
#include "partitions/pbft_replica.h"
#include "partitions/peer_sender.h"
#include "partitions/rocksdb_consensus_store.h"
#include "partitions/spill_cursor.h"
#include "partitions/tx_pool.h"
#include "partitions/tx_tracker.h"
#include "proto/partition.pb.h"
#include "runtime/cache_demand.h"
#include "runtime/commit_stream.h"
#include "runtime/latency_summary.h"
#include "runtime/partition.h"

namespace runtime {

// Dispatcher lanes of a partition, in Options::lanes order.
enum PartitionLane : int {
  kConsensusLane = 0,
  kSyncLane = 1,
  kTxForwardLane = 2,
  kBulkLane = 3,
  kClientLane = 4,
  kNumPartitionLanes = 5,  // the lanes of LaneConfig
  // A control lane outside the budget: the partition's ticks, offered by the node's
  // TickScheduler (at most one queued), run on the worker pool under the partition's CPU share.
  kTickLane = 5,
};

class Partition::Impl final : public partitions::CommitSubscriber {
 public:
  explicit Impl(PartitionEnv env);
  ~Impl() override;

  absl::Status Open();
  absl::Status Start();
  void Stop(absl::Duration drain);

  // Client path (partition.cc).
  // Answers UNAVAILABLE while paused or stopping, else hands the request to admission_.
  void Submit(std::vector<std::string> txs, const SubmitOptions& options, bool single,
              SubmitDone single_done, BatchDone batch_done);
  // Submit's body, its CPU charged by Submit.
  void SubmitCharged(std::vector<std::string> txs, const SubmitOptions& options, bool single,
                     SubmitDone single_done, BatchDone batch_done);
  // Commit latency of this node's client txs (CommitSubscriber).
  void OnCommit(const partitions::CommitEvent& event) override;
  void OnSkip(uint64_t height) override;

  // What stages that follow requests may ask of the pool (flowctl/request_lifecycle.h).
  class PoolView final : public flowctl::PoolQuery {
   public:
    explicit PoolView(const std::unique_ptr<partitions::TxPool>* pool) : pool_(pool) {}
    std::vector<std::string> Gapped(absl::Span<const std::string> ids) const override {
      return (*pool_)->Gapped(ids);
    }
    std::vector<std::string> Missing(absl::Span<const std::string> ids) const override {
      return (*pool_)->Missing(ids);
    }
    flowctl::PoolLevel Level() const override;

   private:
    const std::unique_ptr<partitions::TxPool>* pool_;  // the partition's pool_, set at Open
  };

  // Peer path and consensus (partition_consensus.cc).
  void OnPeerMessage(const p2p::NodeId& from, p2p::Channel channel, std::string payload);
  void HandlePeerMessage(flowctl::Message message);
  // Queues one tick on kTickLane unless one is queued already. Any thread.
  void RequestTick();
  // The tick lane's handler: one Tick, then asks the scheduler for the next.
  void HandleTick();
  // A tick no later than `when_nanos` (a consensus timer or a waiter's deadline). Any thread.
  void WakeBy(int64_t when_nanos);
  // One round of time-driven work at `now`; returns when it wants to run next.
  int64_t Tick(int64_t now);

  // Queries and admin (partition.cc).
  node::admin::PartitionFlowStats FlowStats() const;
  // Gives the node's block budget this partition's weight: its share weight times the fraction of
  // its client writes node-wide admission lets through (1 outside a cut): a partition let through
  // a tenth of its calls gets a tenth of its share of the node's partial blocks, each of which
  // costs every replica the same CPU whatever it holds. No-op without a budget, before Start or
  // once stopping.
  void ApplyBlockWeightLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_);
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
  partitions::TxTracker tracker_{partitions::TxTrackerPolicy{}};
  std::unique_ptr<partitions::PeerSender> sender_;
  // Node-wide admission agreed with the other replicas (flowctl/peer_admission.h).
  std::unique_ptr<flowctl::PeerAdmission> peer_admission_;
  std::unique_ptr<partitions::Forwarder> forwarder_;
  std::unique_ptr<partitions::CommitPipeline> pipeline_;
  // Subscribers: this (height, latency), waiters_, commit_streams_, spill_cursor_ (lossless).
  // Stages that follow
  // requests hear of commits through the driver's on_commit_locked hook instead (partition.cc).
  std::unique_ptr<partitions::CommitFeed> feed_;
  partitions::CommitWaiters waiters_{[this](int64_t deadline) { WakeBy(deadline); }};
  std::unique_ptr<partitions::SpillCursor> spill_cursor_;  // lossless only
  // Client commit streams (WatchCommits); shared with the streams, closed by Stop.
  std::shared_ptr<CommitStreamHub> commit_streams_;
  flowctl::StageRegistry registry_;
  std::unique_ptr<flowctl::StageChainHolder> interceptor_;
  // Reads' own stages (PartitionConfig.read_interceptor), from the same registry.
  std::unique_ptr<flowctl::StageChainHolder> read_chain_;
  // PartitionConfig.read_hold, read on every refused read (runtime/read_hold.h).
  std::atomic<int64_t> read_hold_wait_ns_{0};
  std::atomic<uint32_t> read_hold_max_waiting_{0};
  void SetReadHold(const node::config::ReadHoldConfig& c) {
    read_hold_wait_ns_.store(static_cast<int64_t>(c.max_wait_ms()) * 1'000'000);
    read_hold_max_waiting_.store(c.max_waiting() > 0 ? c.max_waiting() : 1024);
  }
  std::unique_ptr<flowctl::Dispatcher> dispatcher_;
  std::unique_ptr<partitions::BatchPolicy> batch_policy_;
  std::unique_ptr<flowctl::SpillFifo> fifo_;    // lossless only
  std::unique_ptr<flowctl::QuotaDrain> drain_;  // lossless only
  std::unique_ptr<partitions::ClientAdmission> admission_;
  const p2p::ChannelTable* channels_ = nullptr;
  // Dispatcher lane fed by each p2p channel (by Channel value; -1 = none), from channels_.
  std::array<int, p2p::kNumChannels + 1> lane_of_channel_{};

  // ---- configuration and arbiter results ----
  // Serializes config changes (UpdateFlow, SetShareConfig) from read to write-back; taken before
  // config_mu_, which guards each read and write.
  absl::Mutex update_mu_ ABSL_ACQUIRED_BEFORE(config_mu_);
  mutable absl::Mutex config_mu_;
  node::config::PartitionConfig config_ ABSL_GUARDED_BY(config_mu_);
  uint64_t pool_bytes_cap_ ABSL_GUARDED_BY(config_mu_) = 0;    // arbiter's memory share applied
  uint64_t cache_bytes_cap_ ABSL_GUARDED_BY(config_mu_) = 0;   // the same, to the state cache
  uint64_t block_cache_cap_ ABSL_GUARDED_BY(config_mu_) = 0;   // the ledger's block cache
  uint64_t spill_memory_cap_ ABSL_GUARDED_BY(config_mu_) = 0;  // and to the spill memory tier
  uint64_t lane_bytes_cap_ ABSL_GUARDED_BY(config_mu_) = 0;    // and to the lanes' bytes
  // Cache borrowing (docs/ARCHITECTURE.md, "Cache borrowing"): under a share smaller than the
  // configured memory, the state cache and the block cache also get kCacheBorrowFraction of the
  // room the transient parts (pool, lanes, spill memory tier) leave of their fractions of the
  // share, by the most those parts held in the arbiter's ticks (TakeUsage samples them) of the
  // current and the previous half of kCacheBorrowWindowNanos, so over the last 5 to 10 s: they
  // shrink at the next tick after the transient parts grow, and grow back only once that has
  // passed. Not under memory pressure (MemoryPressure::no_cache_borrowing). A share applied with
  // no TakeUsage before it (tests) lends against nothing held.
  static constexpr double kCacheBorrowFraction = 0.5;
  static constexpr int64_t kCacheBorrowWindowNanos = 10'000'000'000;
  // The caches' own fractions of the last share (0 = no cap: the share covered the config), what
  // they hold beyond these being borrowed.
  uint64_t cache_own_cap_ ABSL_GUARDED_BY(config_mu_) = 0;
  uint64_t block_cache_own_cap_ ABSL_GUARDED_BY(config_mu_) = 0;
  // What each cache's cap in force lends it beyond its own fraction, and the two together
  // (stats).
  uint64_t cache_lent_ ABSL_GUARDED_BY(config_mu_) = 0;
  uint64_t block_cache_lent_ ABSL_GUARDED_BY(config_mu_) = 0;
  std::atomic<uint64_t> cache_borrowed_capacity_{0};
  // What the caches ask of the memory share (CacheDemand), sampled in TakeUsage; the client reads
  // the partition admitted (AdmitRead), which keep them in use; the last demand (stats).
  CacheDemand cache_demand_ ABSL_GUARDED_BY(config_mu_);
  mutable std::atomic<uint64_t> reads_admitted_{0};
  std::atomic<uint64_t> cache_memory_demand_{0};
  // The transient parts' resident bytes, as TakeUsage sampled them, by their most in the current
  // and the previous half of kCacheBorrowWindowNanos.
  uint64_t transient_peaks_[2] ABSL_GUARDED_BY(config_mu_) = {0, 0};
  std::optional<int64_t> transient_bucket_start_ ABSL_GUARDED_BY(config_mu_);
  void NoteTransientMemoryLocked(int64_t now_nanos, uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_);
  uint64_t TransientMemoryPeakLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_) {
    return std::max(transient_peaks_[0], transient_peaks_[1]);
  }
  // Lossless: the arbiter's share of the node's spill disk (0 = not divided). The FIFO's budget
  // is the smaller of it and lossless.disk_budget_bytes, never below LosslessMinDiskBudget.
  uint64_t disk_share_ ABSL_GUARDED_BY(config_mu_) = 0;
  void ApplyDiskBudgetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_);
  // The memory the partition's config gives it: pool + lane budget + state cache + (lossless)
  // spill memory tier; what the arbiter's memory share is a part of.
  uint64_t ConfiguredMemoryLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_);
  // Lossless: how long until a record of `record_bytes` fits the disk budget, from what must be
  // drained first and the measured drain rate (the configured one before any measurement).
  absl::Duration SpillRetryAfter(uint64_t record_bytes) const;
  // Hint bounds: a refusal's retry-after is within [kMinSpillRetry, kMaxSpillRetry].
  static constexpr absl::Duration kMinSpillRetry = absl::Milliseconds(10);
  static constexpr absl::Duration kMaxSpillRetry = absl::Seconds(60);

  // ---- retry-after hints from measurement (docs/ARCHITECTURE.md, "Retry-after hints") ----
  // How long until a client tx refused by the pool (gate or full) finds room: the pool's excess
  // over its high-water mark at the measured commit rate, and at least half the measured block
  // interval (room opens only when a block commits); with `take_slot`, behind the refusals
  // already told when to return (pool_retry_slots_), else what the next refusal would get.
  // With `ticket` (a refusal's hint being taken), a reservation for that slot is written there
  // (0 when reservations are off, the hints fixed, or the book full).
  absl::Duration PoolRetryAfter(bool take_slot = true, uint64_t* ticket = nullptr) const;
  mutable flowctl::RetrySlots pool_retry_slots_;
  // The pool gate: below the high-water mark, and into room no due retry ticket holds unless the
  // request carries that ticket (retry_reservations.h). Reads atomics only while no ticket is
  // outstanding.
  bool PoolGateAdmits(const flowctl::RequestMeta& request) const;
  // Room held for clients that come back at their pool retry-after: up to
  // pool.retry_reserve_fraction of the pool's client mark (SetRetryReserve, after the pool's
  // limits are set; live).
  mutable flowctl::RetryReservations retry_reservations_;
  void SetRetryReserve(double fraction);
  // How long until a full client lane (signature checks) has room: one job at its measured
  // service rate, behind the refusals already told (client_lane_slots_; with `take_slot`).
  absl::Duration ClientLaneRetryAfter(bool take_slot = true) const;
  mutable flowctl::RetrySlots client_lane_slots_;
  // Service rates while there was a backlog, sampled by TakeUsage (the arbiter's tick; one
  // caller). Unmeasured (no arbiter, or never backlogged): the fixed hints below.
  flowctl::BacklogRateMeter commit_meter_{{.min_window = absl::Milliseconds(500)}};  // txs/s
  flowctl::BacklogRateMeter block_meter_{{.min_window = absl::Milliseconds(500)}};   // blocks/s
  // The pool's adds by this node's clients and by peers' forwarding, while it refuses (txs/s):
  // this node's share of the room that opens (PoolRetryAfter's slot spacing).
  flowctl::BacklogRateMeter client_added_meter_{{.min_window = absl::Milliseconds(500)}};
  flowctl::BacklogRateMeter forwarded_added_meter_{{.min_window = absl::Milliseconds(500)}};
  // own / (own + forwarded) adds while the pool refuses, at least kMinClientRoomShare; 1 until
  // measured. The pool's refusals queue at this share of the commit rate.
  std::atomic<double> client_room_share_{1.0};
  static constexpr double kMinClientRoomShare = 0.05;
  flowctl::BacklogRateMeter client_lane_meter_{{.min_window = absl::Milliseconds(500)}};  // jobs/s
  flowctl::BacklogRateMeter drain_meter_{{.min_window = absl::Seconds(1)}};               // bytes/s
  // ResourceConfig.fixed_retry_after: the fixed hints, whatever was measured.
  bool fixed_retry_after_ = false;
  static constexpr absl::Duration kFixedPoolRetryAfter = partitions::kFixedPoolRetryAfter;
  static constexpr absl::Duration kFixedClientLaneRetryAfter =
      partitions::kFixedClientLaneRetryAfter;
  static constexpr flowctl::RetryAfterBounds kPoolRetryBounds = {
      .min = absl::Milliseconds(10), .max = absl::Seconds(10), .unknown = kFixedPoolRetryAfter};
  static constexpr flowctl::RetryAfterBounds kClientLaneRetryBounds = {
      .min = absl::Milliseconds(1), .max = absl::Seconds(5), .unknown = kFixedClientLaneRetryAfter};

  // ---- consensus ----
  std::unique_ptr<partitions::ConsensusDriver> driver_;
  // Mirror for lock-free readers.
  std::atomic<uint64_t> height_{0};
  std::atomic<bool> paused_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> started_{false};

  // ---- commit latency ----
  flowctl::Histogram commit_latency_;  // ns, client admission -> local commit
  PoolView pool_view_{&pool_};

  // ---- peer-message drops (before the replica) ----
  // Adds to the node's per-peer refusal counts (env_.refusals) for replica index `replica`.
  void CountRefused(uint32_t replica, PeerRefusals::Reason reason, uint64_t n = 1);

  std::atomic<uint64_t> dropped_unknown_peer_{0};
  std::atomic<uint64_t> dropped_malformed_{0};
  std::atomic<uint64_t> dropped_wrong_channel_{0};  // a kind its channel may not carry

  // ---- arbiter usage ----
  int64_t last_cpu_nanos_ = 0;  // TakeUsage only (one caller: the arbiter)
  // CPU the partition's work used outside the worker pool: client calls on gRPC threads
  // (Submit), the lossless drain thread. Added to the pool's in TakeUsage. Sampled: one call in
  // kOffPoolCpuSampleEvery is measured and counts that many times (the thread CPU clock costs
  // ~0.65 us a read on this machine's kernel, ~2% of a refused client call).
  static constexpr uint64_t kOffPoolCpuSampleEvery = 8;
  std::atomic<int64_t> off_pool_cpu_nanos_{0};
  std::atomic<uint64_t> off_pool_calls_{0};
  // All CPU charged to the partition since start: its lanes' on the pool and off_pool_cpu_nanos_.
  int64_t CpuNanos() const {
    return dispatcher_->CpuNanos() + off_pool_cpu_nanos_.load(std::memory_order_relaxed);
  }
  // Runs `work`, charging its thread CPU (sampled) to off_pool_cpu_nanos_.
  template <typename Work>
  auto ChargeOffPool(Work&& work) {
    if (off_pool_calls_.fetch_add(1, std::memory_order_relaxed) % kOffPoolCpuSampleEvery != 0) {
      return work();
    }
    struct Charge {
      std::atomic<int64_t>* total;
      int64_t start = flowctl::ThreadCpuNanos();
      ~Charge() {
        total->fetch_add(
            static_cast<int64_t>(kOffPoolCpuSampleEvery) * (flowctl::ThreadCpuNanos() - start),
            std::memory_order_relaxed);
      }
    } charge{&off_pool_cpu_nanos_};
    return work();
  }
  // The last tick's figures, for the node-wide admission (written by TakeUsage).
  std::atomic<int64_t> tick_cpu_nanos_{0};
  std::atomic<int64_t> tick_consensus_delay_nanos_{0};
  // The lanes' queueing delays and the blocks committed over the last arbiter tick (the block
  // budget adapts to them), and the dispatcher's totals and the blocks committed at that tick
  // (written by TakeUsage only, which the arbiter calls under its lock).
  std::atomic<int64_t> tick_queueing_sum_{0};
  std::atomic<uint64_t> tick_queueing_messages_{0};
  std::atomic<uint64_t> tick_blocks_{0};
  std::optional<flowctl::Histogram::Totals> last_queueing_;
  std::optional<uint64_t> last_blocks_committed_;
  // Blocks this replica committed since Open (not the blocks a snapshot skipped).
  std::atomic<uint64_t> blocks_committed_{0};
  std::atomic<int64_t> tick_client_backlog_nanos_{0};
  std::atomic<double> tick_pool_fill_{0};  // pooled txs / the client mark (TxPool::ClientMarkTxs)
  std::atomic<bool> tick_backlogged_{false};
  // Client writes refused for want of room: the count at the last tick, and whether it moved in it.
  uint64_t last_overload_refusals_ = 0;  // TakeUsage only (under the arbiter's lock)
  std::atomic<bool> tick_refusing_{false};
  flowctl::AdmissionShedder shedder_;  // node-wide admission's gate on client writes

  // ---- ticks (no thread of its own: the node's TickScheduler and the tick lane) ----
  flowctl::TickScheduler::Id tick_id_ = 0;  // constant after Open
  std::atomic<bool> ticking_{false};        // Start ran the replica's start: ticks may run
  std::atomic<bool> tick_queued_{false};    // a tick message waits on kTickLane
};

// The TxTracker's bound for a pool with these limits.
partitions::TxTrackerPolicy TrackerPolicyFor(const partitions::TxPoolLimits& pool);

// Dispatcher weights (>= 1, rounded) of the configured lane weights, in PartitionLane order.
std::vector<int> LaneWeights(const node::config::LaneConfig& weights);
// Dispatcher delay targets of the adaptive lane weights, in PartitionLane order plus the tick
// lane (which follows consensus); all zero (fixed weights) when adaptation is off.
std::vector<flowctl::Dispatcher::DelayTarget> LaneDelayTargets(
    const node::config::DispatcherConfig& dispatcher);

}  // namespace runtime

#endif  // RUNTIME_PARTITION_IMPL_H_
