// EgressScheduler: the third valve. Decides which frame leaves the node next, for all peers.
//
// Per-channel behaviour comes from the channel table (p2p/channel.h, EgressOptions::channels),
// not from switches over channel names:
// - One global token bucket in bytes/s (payload + kFrameOverheadBytes per frame) for the whole
//   node; cap 0 in the options means unlimited.
// - Strict priority between channels, by descriptor priority (CONSENSUS > SYNC > TX_FORWARD >
//   BULK in the node's table).
// - The channel whose descriptor has derived_rate (TX_FORWARD) is also held to a derived rate:
//   cap minus what the channels above it used over the last `usage_window_nanos` (a sliding
//   window of 10 slots), never below the floor. Channels below it may use budget that it leaves
//   idle because of that rate (they are still under the global cap).
// - Within a channel, partitions share by deficit round robin on bytes (quantum = weight x the
//   chunk cost), weights set live (by the arbiter).
// - Optional hard limit per partition (SetPartitionRateLimit), all channels together, in the same
//   bytes as the global bucket: a token bucket of its own that is never exceeded, even when the
//   rest of the link is idle. A partition whose bucket cannot pay for its next chunk is passed over
//   in every channel (like a blocked peer's messages: skipped, its order kept), so other partitions
//   and lower channels go ahead; once it was passed over in one channel it is not looked at in
//   lower ones, so its own CONSENSUS is not overtaken by its own BULK. Its burst is
//   4 x max(rate x chunk_time, one of its chunks) (8 ms of the rate at the default 2 ms chunk
//   time, at least 4 chunks): a few chunks of room so that waiting its turn behind other
//   partitions or the global bucket costs it no rate, small enough that over any interval t it
//   sends at most rate x t + burst. Its chunks are cut for the tighter of the cap and its limit
//   (2 ms of the smaller, clamped as below), so it is paced smoothly rather than in 64 KiB gulps.
// - Messages above the chunk size are cut into chunks (chunk = ~2 ms of the cap, clamped to
//   [1 KiB, 64 KiB]; 64 KiB when unlimited), cut when each chunk is dequeued, so a
//   higher-priority frame goes out between two chunks. A message's chunk size is fixed when its
//   first chunk leaves (so a message started before a partition limit was set may carry chunks
//   larger than that limit's burst: its bucket admits each when full and goes into debt, and the
//   bound above becomes rate x t + that chunk). Messages over max_frame_bytes are refused
//   (InvalidArgument) and counted.
// - Bounded queues, per channel, in bytes (descriptor queue_bytes). A kRefuseNew channel refuses
//   a message that does not fit (ResourceExhausted; counted and logged: never dropped silently).
//   A kDropOldest channel drops its oldest not-yet-started messages to make room (counted).
// - Per-peer backpressure: the transport marks a peer blocked while that peer's writer queue is
//   full (SetPeerBlocked). A blocked peer's messages stay here, skipped by Dequeue, so priorities
//   keep holding per link: a peer behind a slow link gets its SYNC before its TX_FORWARD once it
//   drains. Other peers' messages go ahead (order per peer is kept). While blocked, a peer may
//   hold at most `blocked_peer_bytes` here: beyond that its oldest not-started messages of
//   kDropOldest channels (lowest priority first) are dropped to make room, then the new message
//   itself (counted per channel).
// - fifo_mode: one queue in arrival order, the global bucket and the partition limits (a head held
//   by its partition's limit holds everything behind it: head-of-line, as FIFO is), no per-peer
//   backpressure (for comparison).
//
// The scheduler keeps no thread and reads time from the injected clock, so tests drive it with a
// FakeClock: Enqueue(...) then Dequeue(), which returns the next frame to hand to the transport or
// how long to wait. EgressValve (p2p/egress_valve.h) puts it in front of any Network.
//
// Thread-safety: every method is thread-safe (one internal mutex).
//
//   EgressScheduler sched(EgressOptions{.cap_bytes_per_second = 2e6}, clock);
//   RETURN_IF_ERROR(sched.Enqueue("peer", /*partition=*/1, node::p2p::CONSENSUS, payload));
//   DequeueResult r = sched.Dequeue();
//   if (r.frame) transport.Write(*r.frame); else WaitFor(r.wait_nanos);
#ifndef P2P_EGRESS_SCHEDULER_H_
#define P2P_EGRESS_SCHEDULER_H_

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/clock.h"
#include "flowctl/egress_accounting.h"
#include "flowctl/histogram.h"
#include "flowctl/token_bucket.h"
#include "p2p/channel.h"
#include "p2p/egress_frame.h"
#include "p2p/network.h"

namespace p2p {

inline constexpr size_t kMinChunkBytes = 1024;
inline constexpr size_t kMaxChunkBytes = 64 * 1024;

struct EgressOptions {
  // Global egress cap in bytes/s; 0 = unlimited.
  double cap_bytes_per_second = 0;
  // TX_FORWARD's derived rate never goes below this (bytes/s).
  double tx_forward_floor_bytes_per_second = 64 * 1024;
  // Largest message accepted (payload bytes).
  size_t max_frame_bytes = 16 << 20;
  // Priority, queue bound, overflow policy and derived rate of each channel.
  ChannelTable channels = DefaultChannelTable();
  // Window of the CONSENSUS + SYNC usage average behind TX_FORWARD's derived rate.
  int64_t usage_window_nanos = 1'000'000'000;
  // Time worth of cap one chunk carries.
  int64_t chunk_time_nanos = 2'000'000;
  // Most bytes a blocked peer may have queued here (all channels together).
  size_t blocked_peer_bytes = 1 << 20;
  // Plain FIFO instead of priorities and round robin (comparison only).
  bool fifo_mode = false;
};

// The chunk size for a cap (bytes/s; 0 or kUnlimited = unlimited).
size_t ChunkBytesForCap(double cap_bytes_per_second, int64_t chunk_time_nanos = 2'000'000);

struct DequeueResult {
  std::optional<EgressFrame> frame;
  // When no frame: nanos until one may be ready (kNever: queues empty or cap closed).
  int64_t wait_nanos = 0;
};

struct ChannelEgressStats {
  Channel channel = node::p2p::CHANNEL_UNSPECIFIED;
  uint64_t bytes_sent = 0;  // payload + kFrameOverheadBytes per frame
  uint64_t frames_sent = 0;
  uint64_t messages_enqueued = 0;
  uint64_t messages_dropped = 0;  // kDropOldest overflow, blocked-peer bound
  uint64_t bytes_dropped = 0;
  uint64_t messages_refused = 0;  // kRefuseNew overflow (Enqueue returned ResourceExhausted)
  uint64_t queued_bytes = 0;
  uint64_t queued_messages = 0;
  flowctl::HistogramSnapshot queue_delay_nanos;  // enqueue -> first chunk dequeued
};

struct PartitionEgressStats {
  uint64_t bytes_sent = 0;
  uint64_t frames_sent = 0;
};

// A partition's hard egress limit (SetPartitionRateLimit), all channels together.
struct PartitionLimitStats {
  double limit_bytes_per_second = 0;  // 0: none (removed)
  double burst_bytes = 0;             // of its bucket; 0 when none
  // Chunks of the partition that had to wait for its limit, each counted once however often
  // Dequeue looked at it. Never decreases, also across a removed and re-set limit.
  uint64_t limit_waits = 0;
};

struct EgressStats {
  std::array<ChannelEgressStats, kNumChannels> channels;  // in priority order (highest first)
  std::map<std::pair<PartitionId, Channel>, PartitionEgressStats> partitions;
  // Partitions that have, or once had, a hard limit.
  std::map<PartitionId, PartitionLimitStats> partition_limits;
  uint64_t oversized_refused = 0;
  uint64_t blocked_peers = 0;       // peers blocked now
  uint64_t peer_block_events = 0;   // times a peer became blocked
  uint64_t blocked_peer_drops = 0;  // messages dropped because a blocked peer was over its bound
  double cap_bytes_per_second = 0;  // kUnlimited when unlimited
  double tx_forward_rate = 0;       // current derived rate; kUnlimited when unlimited
  // What the channels above the derived-rate one used (CONSENSUS + SYNC), moving average.
  double priority_usage_bytes_per_second = 0;
  size_t chunk_bytes = 0;

  // The stats of `c`. REQUIRES: c is a wire channel.
  const ChannelEgressStats& channel(Channel c) const;
};

class EgressScheduler {
 public:
  static constexpr int64_t kNever = flowctl::TokenBucket::kNever;

  // REQUIRES: clock outlives the scheduler.
  EgressScheduler(const EgressOptions& options, const flowctl::Clock* clock);
  EgressScheduler(const EgressScheduler&) = delete;
  EgressScheduler& operator=(const EgressScheduler&) = delete;

  // Queues a message. Errors: InvalidArgument (bad channel; payload over max_frame_bytes, counted),
  // ResourceExhausted (a kRefuseNew channel's queue is full; counted and logged).
  // With `wake` false the wakeup (see SetWakeup) is not called: the caller releases the message
  // itself (EgressSender::Release).
  absl::Status Enqueue(const NodeId& peer, PartitionId partition, Channel channel,
                       std::shared_ptr<const std::string> payload, bool wake = true);
  absl::Status Enqueue(const NodeId& peer, PartitionId partition, Channel channel,
                       std::string payload, bool wake = true) {
    return Enqueue(peer, partition, channel,
                   std::make_shared<const std::string>(std::move(payload)), wake);
  }

  // The next frame to write now (its bytes are charged to the buckets), or how long to wait.
  DequeueResult Dequeue();

  // Drops every queued message for `peer` (its connection went away) and forgets that it was
  // blocked. Returns messages dropped.
  size_t DropPeer(const NodeId& peer);

  // The transport's backpressure: while `blocked`, Dequeue releases nothing for `peer`.
  // Unblocking wakes the sender. Ignored in fifo_mode.
  void SetPeerBlocked(const NodeId& peer, bool blocked);

  // Live changes. InvalidArgument for negative values / weight 0.
  absl::Status SetCap(double cap_bytes_per_second);  // 0 = unlimited
  absl::Status SetTxForwardFloor(double floor_bytes_per_second);
  absl::Status SetPartitionWeight(PartitionId partition, uint32_t weight);  // default 1
  // A hard limit on one partition's egress, all channels together, in bytes/s (payload +
  // kFrameOverheadBytes per frame, the same cost the global bucket charges); 0 removes it.
  // While over it, the partition's frames wait even if the link is otherwise idle. Live.
  // InvalidArgument for a negative or NaN rate.
  //
  // A new limit starts with a full burst (see the rules above); changing it keeps what its bucket
  // holds (clipped to the new burst; a debt is paid at the new rate), so a change grants no fresh
  // burst. Removing it (0, or +inf) frees the partition's frames at once. Wakes the sender.
  absl::Status SetPartitionRateLimit(PartitionId partition, double bytes_per_second);

  // Called (with no scheduler lock held) after each successful waking Enqueue, each cap change and
  // each partition limit change, so a sender waiting on a previous wait_nanos can look again.
  // nullptr removes it.
  void SetWakeup(std::function<void()> wakeup);

  EgressStats Stats() const;
  bool fifo_mode() const { return options_.fifo_mode; }
  const ChannelTable& channels() const { return options_.channels; }

 private:
  struct Message {
    uint64_t id = 0;
    NodeId peer;
    PartitionId partition = 0;
    Channel channel = node::p2p::CONSENSUS;
    std::shared_ptr<const std::string> data;
    int64_t enqueued_at = 0;
    size_t offset = 0;        // bytes already dequeued
    uint32_t chunk_size = 0;  // fixed at the first chunk
    uint32_t next_chunk = 0;
    bool started() const { return next_chunk > 0; }
  };
  struct PartitionQueue {
    std::deque<Message> messages;
    int64_t deficit = 0;
    bool quantum_given = false;
  };
  // A partition's hard limit. The entry stays when the limit is removed, for its stats.
  struct PartitionLimit {
    double rate = 0;                               // bytes/s; 0 = none
    std::unique_ptr<flowctl::TokenBucket> bucket;  // null when rate is 0
    uint64_t waits = 0;
    // (message id, chunk index) of the chunk last counted in `waits`.
    std::pair<uint64_t, uint32_t> last_held = {0, 0};
  };
  struct ChannelState {
    const ChannelDescriptor* desc = nullptr;           // in options_.channels
    std::map<PartitionId, PartitionQueue> partitions;  // only non-empty ones
    std::deque<PartitionId> active;                    // round-robin order
    uint64_t queued_bytes = 0;
    uint64_t queued_messages = 0;
    ChannelEgressStats stats;
    flowctl::Histogram delay;
  };

  static constexpr size_t kNone = ~size_t{0};

  // Chunk size for the partition's messages not yet started: the cap's, or its limit's if smaller.
  size_t ChunkBytesFor(PartitionId partition) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t ChunkCost(const Message& m) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Position of the first message in `pq` whose peer is not blocked, or kNone.
  size_t Eligible(const PartitionQueue& pq) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `m`, the next chunk of its partition, must wait for the partition's limit: true if
  // the partition is already in `held` (passed over in this Dequeue), or if its bucket cannot pay
  // for the chunk now; then it is added to `held`, `*wait` is lowered to when it can, and the
  // chunk is counted in the limit's waits (once per chunk).
  bool HeldByLimit(const Message& m, int64_t now, std::vector<PartitionId>* held, int64_t* wait)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Charges the partition's limit (if any) for a chunk that leaves.
  void ChargeLimit(PartitionId partition, size_t cost, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The partition whose turn it is (deficit round robin) among those with an eligible message not
  // held by their limit (see HeldByLimit for `held` and `wait`), and that message's position;
  // {nullptr, kNone} when every message waits on a blocked peer or a partition limit.
  std::pair<PartitionQueue*, size_t> SelectPartition(ChannelState& cs, int64_t now,
                                                     std::vector<PartitionId>* held, int64_t* wait)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes room for `size` more bytes for the blocked `peer`; false if it cannot.
  bool MakeRoomForBlockedPeer(const NodeId& peer, size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Forget(ChannelState& cs, const Message& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  EgressFrame CutChunk(Message& m, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Account(const EgressFrame& f, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool DropOldest(ChannelState& cs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemovePartitionIfEmpty(ChannelState& cs, PartitionId p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AdvanceUsageWindow(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateDerivedRate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double PriorityUsage() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  DequeueResult DequeuePriority(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  DequeueResult DequeueFifo(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  static constexpr int kUsageSlots = 10;

  // Constant after construction.
  const EgressOptions options_;
  const flowctl::Clock* const clock_;
  // Position (in priority order) of the derived-rate channel, or -1.
  const int derived_;

  mutable absl::Mutex mu_;
  double cap_ ABSL_GUARDED_BY(mu_);  // kUnlimited when unlimited
  double floor_ ABSL_GUARDED_BY(mu_);
  size_t chunk_bytes_ ABSL_GUARDED_BY(mu_);
  double tx_rate_ ABSL_GUARDED_BY(mu_);
  flowctl::TokenBucket global_bucket_;  // its own synchronization; reconfigured under mu_
  flowctl::TokenBucket tx_bucket_;
  std::array<ChannelState, kNumChannels> channels_ ABSL_GUARDED_BY(mu_);  // priority order
  std::deque<Message> fifo_ ABSL_GUARDED_BY(mu_);                         // fifo_mode only
  std::map<PartitionId, uint32_t> weights_ ABSL_GUARDED_BY(mu_);
  // The buckets have their own synchronization; the map and the rest are protected by mu_.
  std::map<PartitionId, PartitionLimit> limits_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<PartitionId, Channel>, PartitionEgressStats> partition_stats_
      ABSL_GUARDED_BY(mu_);
  uint64_t oversized_refused_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<NodeId, uint64_t> peer_bytes_ ABSL_GUARDED_BY(mu_);  // queued bytes per peer
  std::set<NodeId> blocked_ ABSL_GUARDED_BY(mu_);
  uint64_t peer_block_events_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t blocked_peer_drops_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Bytes of the channels above the derived-rate one, per slot of the usage window; slot_start_
  // is the current slot's start.
  std::array<uint64_t, kUsageSlots> usage_slots_ ABSL_GUARDED_BY(mu_) = {};
  int usage_slot_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t slot_start_ ABSL_GUARDED_BY(mu_) = 0;
  void Wake() ABSL_LOCKS_EXCLUDED(mu_, wakeup_mu_);
  absl::Mutex wakeup_mu_;
  std::function<void()> wakeup_ ABSL_GUARDED_BY(wakeup_mu_);
};

// The arbiter's view of a scheduler (flowctl/egress_accounting.h): the cap, the bytes sent per
// partition over all peers and channels, and the partition weights and rate limits it applies.
class SchedulerEgressAccounting final : public flowctl::EgressAccounting {
 public:
  explicit SchedulerEgressAccounting(EgressScheduler* scheduler) : scheduler_(scheduler) {}

  flowctl::EgressUsage Usage() const override;
  absl::Status SetPartitionWeight(uint32_t partition, uint32_t weight) override {
    return scheduler_->SetPartitionWeight(partition, weight);
  }
  absl::Status SetPartitionRateLimit(uint32_t partition, double bytes_per_second) override {
    return scheduler_->SetPartitionRateLimit(partition, bytes_per_second);
  }

 private:
  EgressScheduler* const scheduler_;
};

}  // namespace p2p

#endif  // P2P_EGRESS_SCHEDULER_H_
