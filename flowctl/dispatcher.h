// Dispatcher: a partition's weighted message dispatcher. Peer messages are offered to lanes (one
// per module kind: consensus, sync, tx forwarding, bulk, ... configured by name, weight, handler);
// each lane is a bounded FIFO whose handler runs serially, and lanes run in parallel on a shared
// WorkerPool (the Dispatcher owns no threads).
//
// Admission. The dispatcher has a budget in messages and in bytes (payload sizes). A lane's
// capacity is its weight's share of that budget: capacity = budget * weight / sum of weights
// (at least 1 message and 1 byte). Offer() never blocks and is O(1): it stamps the message,
// and appends it if the lane has room in both messages and bytes; otherwise it drops the *new*
// message and counts the reason. A message counts against its lane from Offer until its handler
// returns, so queued plus in-progress messages never exceed the capacity. A message larger than
// its lane's byte capacity is always dropped (kLaneBytesFull): size the budget for the largest
// message of each kind, and mark lanes whose largest messages must never be dropped
// exempt_from_byte_cap (a byte cap, SetByteCap, lowers only the other lanes).
//
// Scheduling. The dispatcher is one WorkerPool group with share `cpu_share`; each lane is a task
// with the lane's weight, so when partitions compete, CPU splits by cpu_share, and inside a
// partition by lane weight (see worker_pool.h). A slow lane (bulk) fills up and drops its own
// messages; it holds at most one worker at a time and yields after each quantum, so it never
// delays the consensus lane by more than one quantum (or one message, if a message takes longer).
//
// Live changes (SetLaneWeight, SetCpuShare, SetBudget, SetByteCap) never lose queued messages:
// lowering a capacity below the current depth keeps what is queued and refuses new messages until
// it drains.
//
// Adaptive weights. A lane may have a queueing-delay target (LaneConfig::delay_target). Each call
// of AdaptWeights() (the owner calls it periodically; a partition does at every arbiter tick) is
// one control step per such lane: its signal is the p99 queueing delay of the messages it started
// since the previous step, or the age of its oldest queued message if larger (a starved lane
// starts nothing, so its delays alone would never show it). Above the target, the lane's
// scheduling weight rises by kRaiseFactor (at least +1), up to its max_weight; at most
// kLowerBelowFraction of the target, it falls by kLowerFactor (at least -1) back towards its
// configured weight; in between it holds (hysteresis). Only the pool's task weight follows: lane
// capacities stay split by the configured weights, so a raised lane gets CPU sooner, not memory.
// A configured weight changed live (SetLaneWeight) restarts the lane at that weight.
//
// Lifecycle. Create() registers with the pool. Drain() waits until every admitted message has been
// handled. Stop() stops admission (later Offers drop with kStopped), waits for running handlers,
// discards what is still queued (counted as dropped kStopped, so offered == processed + dropped
// always holds after Stop), and leaves the pool. The destructor calls Stop(). The pool must
// outlive the dispatcher.
//
// Thread-safety: every method is thread-safe. Handlers run on pool workers with no dispatcher lock
// held; they may call Offer (even to their own lane) and the Set* methods, but not Stop() or
// Drain() of their own dispatcher.
//
//   auto dispatcher = flowctl::Dispatcher::Create(&pool, {
//       .name = "partition-1", .cpu_share = 1.0,
//       .budget = {.max_messages = 10000, .max_bytes = 64 << 20},
//       .lanes = {{"consensus", 8, HandleConsensus}, {"bulk", 1, HandleBulk}}});
//   int consensus = (*dispatcher)->FindLane("consensus");
//   (*dispatcher)->Offer(consensus, {.payload = std::move(bytes), .peer = peer_id});
#ifndef FLOWCTL_DISPATCHER_H_
#define FLOWCTL_DISPATCHER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flowctl/clock.h"
#include "flowctl/histogram.h"
#include "flowctl/worker_pool.h"

namespace flowctl {

// One peer message. Offer() moves it in; the handler receives it by value.
struct Message {
  std::string payload;
  uint32_t peer = 0;          // sender's id, opaque to the dispatcher
  int64_t enqueue_nanos = 0;  // set by Offer() from the dispatcher's clock
  uint32_t tag = 0;           // the producer's (e.g. the p2p channel); opaque to the dispatcher
  // Anything the producer hands its lane handler besides the bytes (e.g. a client request's
  // completion); opaque to the dispatcher, released with the message.
  std::shared_ptr<void> context;
};

class Dispatcher {
 public:
  using Handler = std::function<void(Message message)>;

  // See "Adaptive weights" in the file comment.
  struct DelayTarget {
    int64_t target_nanos = 0;  // >= 0; 0 = the lane's weight is fixed
    int max_weight = 0;        // >= 0; 0 = kDefaultMaxWeightFactor x the lane's weight
  };

  struct LaneConfig {
    std::string name;  // unique within the dispatcher, non-empty
    int weight = 1;    // >= 1: share of the budget and of the dispatcher's CPU
    Handler handler;   // non-null; runs serially, FIFO
    // > 0: a control lane with this fixed capacity in messages (no byte bound) outside the
    // budget; its weight then counts for CPU only. For coalesced control work, such as a
    // partition's timer ticks, which must not take capacity from the message lanes.
    int64_t reserved_messages = 0;
    DelayTarget delay_target = {};
    // Measure the lane's step signal (LaneStats::window_delay_nanos) at every AdaptWeights even
    // without a target (e.g. for node-wide admission, which watches consensus lanes).
    bool watch_delay = false;
    // The byte cap (SetByteCap) never shrinks this lane: it keeps its share of the budget. For
    // lanes whose messages have no small bound and whose loss costs liveness (consensus view
    // changes, sync manifests).
    bool exempt_from_byte_cap = false;
  };

  // ---- Adaptive weight policy (see the file comment). ----
  static constexpr double kRaiseFactor = 1.5;
  static constexpr double kLowerFactor = 0.75;
  static constexpr double kLowerBelowFraction = 0.5;
  static constexpr int kDefaultMaxWeightFactor = 8;

  struct Budget {
    int64_t max_messages = 0;  // >= 1, across all lanes
    int64_t max_bytes = 0;     // >= 1, payload bytes across all lanes
  };

  struct Options {
    std::string name;        // for stats and logs (e.g. the partition id)
    double cpu_share = 1.0;  // > 0, the group share in the WorkerPool
    Budget budget;
    std::vector<LaneConfig> lanes;       // at least one
    const Clock* clock = Clock::Real();  // enqueue stamps, delays, quantum time; outlives us
  };

  enum class OfferResult {
    kAccepted,
    kLaneFull,       // dropped: the lane holds its capacity in messages
    kLaneBytesFull,  // dropped: the message would exceed the lane's capacity in bytes
    kStopped,        // dropped: the dispatcher is stopped
  };

  struct LaneStats {
    std::string name;
    int weight = 0;
    int64_t capacity_messages = 0;
    int64_t capacity_bytes = 0;
    int64_t depth_messages = 0;  // admitted and not yet handled (queued or in progress)
    int64_t depth_bytes = 0;
    int64_t offered = 0;
    int64_t processed = 0;             // handlers that returned
    int64_t dropped_full = 0;          // kLaneFull
    int64_t dropped_bytes = 0;         // kLaneBytesFull
    int64_t dropped_stopped = 0;       // kStopped: offered after Stop, or discarded by Stop
    int64_t cpu_nanos = 0;             // CPU the pool charged to this lane
    HistogramSnapshot queueing_delay;  // ns from Offer to handler start
    // Adaptive weights: the pool's weight for the lane now (= weight without a target), the
    // target (0 = none) and the ceiling in force, the last step's signal, and its changes.
    int effective_weight = 0;
    int64_t delay_target_nanos = 0;
    int max_weight = 0;
    int64_t window_delay_nanos = 0;
    int64_t weight_raises = 0;
    int64_t weight_lowers = 0;

    int64_t dropped() const { return dropped_full + dropped_bytes + dropped_stopped; }
  };

  // Validates `options` (InvalidArgument naming the field) and registers with `pool`.
  static absl::StatusOr<std::unique_ptr<Dispatcher>> Create(WorkerPool* pool, Options options);
  static absl::Status ValidateOptions(const Options& options);

  ~Dispatcher();  // Stop()
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Admits `message` into lane `lane` or drops it (see the file comment). Never blocks on
  // handlers; O(1). REQUIRES: 0 <= lane < num_lanes(). Thread-safe.
  OfferResult Offer(int lane, Message message);

  // The index of the lane called `name`, or -1. Lane indices follow Options::lanes.
  int FindLane(absl::string_view name) const;
  int num_lanes() const { return static_cast<int>(lanes_.size()); }
  const std::string& name() const { return name_; }

  // Live changes; InvalidArgument on bad values (then nothing changes).
  absl::Status SetLaneWeight(int lane, int weight);
  absl::Status SetCpuShare(double share);
  // Holds all lanes together to `cores` of worker CPU even while the pool is otherwise idle
  // (WorkerPool::SetGroupCpuLimit: the arbiter's hard ceiling); 0 removes the limit.
  absl::Status SetCpuLimit(double cores);
  absl::Status SetBudget(Budget budget);
  // A cap on the budget's bytes below its configured value (e.g. a memory share); 0 removes it.
  // Each lane not exempt_from_byte_cap gets min(its share of the budget, its share of the cap),
  // by the same weights; exempt lanes keep their share of the budget. Kept across SetBudget.
  // InvalidArgument for a negative cap.
  absl::Status SetByteCap(int64_t max_bytes);
  // Sets lane `lane`'s delay target; its weight is clamped into the new bounds (back to the
  // configured weight when the target is 0).
  absl::Status SetDelayTarget(int lane, DelayTarget target);

  // One adaptive-weight control step for every lane with a target (see the file comment); also
  // measures the signal of watched lanes (LaneConfig::watch_delay). Returns the number of lanes
  // whose scheduling weight changed. Cheap when no lane has a target or is watched.
  int AdaptWeights();

  // Waits until every admitted message has been handled (all lanes empty and idle), or `timeout`
  // passes (DeadlineExceeded). Messages offered meanwhile are waited for too. Needs a started
  // pool. REQUIRES: not called from one of this dispatcher's handlers.
  absl::Status Drain(absl::Duration timeout);

  // See the file comment. Idempotent; a concurrent second call returns when the first is done.
  // REQUIRES: not called from one of this dispatcher's handlers.
  void Stop();

  LaneStats GetLaneStats(int lane) const;
  std::vector<LaneStats> GetStats() const;
  // How long `lane` has held work (queued or running) without a break, now; 0 when it is idle
  // (or no such lane). A lane offered more than it is served never empties; one that keeps up
  // empties between arrivals. Thread-safe.
  int64_t LaneBusyNanos(int lane) const;
  // The queueing delays (Offer to handler start) of every message the message lanes have run
  // so far, control lanes (reserved_messages) left out: their count and sum. Thread-safe.
  Histogram::Totals QueueingTotals() const;
  // CPU the pool charged to all lanes (kept after Stop). Thread-safe.
  int64_t CpuNanos() const;
  double cpu_share() const;
  // The hard CPU limit in force (0 = none), the times the lanes were held at it and the total
  // time held. Zeros after Stop().
  struct CpuLimitStats {
    double limit_cores = 0;
    int64_t throttles = 0;
    int64_t throttled_nanos = 0;
  };
  CpuLimitStats GetCpuLimitStats() const;

 private:
  class Lane;

  Dispatcher(WorkerPool* pool, Options options);
  // Per lane, for AdaptWeights.
  struct Adaptive {
    DelayTarget target;
    bool watch = false;                 // LaneConfig::watch_delay
    int effective = 0;                  // the pool's task weight
    HistogramSnapshot last_delay = {};  // the lane's delays at the previous step
    int64_t window_delay_nanos = 0;     // the previous step's signal
    int64_t raises = 0;
    int64_t lowers = 0;
  };

  // Recomputes every lane's capacity from budget_ and the weights.
  void ApplyCapacitiesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_);
  // The highest weight lane `lane` may be given now (>= its configured weight).
  int MaxWeightLocked(int lane) const ABSL_SHARED_LOCKS_REQUIRED(config_mu_);
  // Sets lane `lane`'s scheduling weight (and the pool's task weight, until Stop).
  void SetEffectiveLocked(int lane, int weight) ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_);

  // Constant after construction.
  WorkerPool* const pool_;
  const std::string name_;
  const Clock* const clock_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::vector<int64_t> reserved_;  // per lane: LaneConfig::reserved_messages
  std::vector<bool> exempt_;       // per lane: LaneConfig::exempt_from_byte_cap

  // Serializes configuration changes and Stop. Lock order: config_mu_, then a lane's mutex, then
  // the pool's.
  mutable absl::Mutex config_mu_;
  Budget budget_ ABSL_GUARDED_BY(config_mu_);
  int64_t byte_cap_ ABSL_GUARDED_BY(config_mu_) = 0;  // SetByteCap; 0 = none
  double cpu_share_ ABSL_GUARDED_BY(config_mu_);
  std::vector<int> weights_ ABSL_GUARDED_BY(config_mu_);  // configured
  std::vector<Adaptive> adaptive_ ABSL_GUARDED_BY(config_mu_);
  bool stopped_ ABSL_GUARDED_BY(config_mu_) = false;
  WorkerPool::Group* group_ ABSL_GUARDED_BY(config_mu_);  // null once Stop() has finished
};

}  // namespace flowctl

#endif  // FLOWCTL_DISPATCHER_H_
