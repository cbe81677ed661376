// ArbiterService: the node's shared arbiter. On every tick it divides three capacities across its
// ResourceConsumers (partitions) with AllocateFairShares (flowctl/arbiter.h), by each consumer's
// ShareConfig (weight; guarantee and ceiling as fractions of the capacity):
//   CPU     = worker threads x elapsed time (ns)
//   memory  = Options::memory_bytes
//   egress  = the egress cap in bytes/s (kUnlimitedEgressCapacity when there is none)
//   disk    = Options::disk_bytes, among the consumers that spill (disk_floor > 0); not divided
//             when 0
//
// One tick:
//   1. measure: each consumer's TakeUsage(), and per-partition bytes sent from the egress side;
//   2. demand, what each would use if allowed (HTB-style borrowing needs it, see arbiter.h):
//        CPU     unbounded while backlogged, else kCpuDemandHeadroom x usage + kCpuDemandSlackNanos
//        memory  its limit while it holds at least kMemoryBusyFraction of its last share, else
//                min(limit, max(kMemoryIdleHeadroom x held, kMemoryIdleFloorFraction x
//                min(limit, its weighted part of the capacity))), held without what its caches
//                borrowed (ConsumerUsage::memory_borrowed_bytes); at least what its caches ask
//                for (ConsumerUsage::memory_cache_demand), up to the limit
//        egress  kEgressDemandHeadroom x rate + kEgressDemandSlackBytesPerSecond
//        disk    as memory's held bytes (the floor from its own budget), from the spill bytes
//                held and the consumer's own budget (or the capacity), with its disk_floor as a
//                guarantee
//   3. allocate per resource, twice for CPU and egress: demand-based shares (what the stats
//      report as the current division) and entitlements (every consumer backlogged);
//   4. apply: ApplyShare(kCpu, entitlement), ApplyShare(kMemory, share), ApplyShare(kEgress,
//      entitlement), ApplyShare(kDisk, share) when disk is divided, and the egress side's partition
//      weight from the egress entitlement. The worker pool and the egress scheduler get
//      entitlements, not demand-capped shares, because both lend idle share by themselves, and a
//      low weight given to a quiet partition would make its next message wait behind a busy
//      neighbour's backlog: that lending is how the demand-based shares come about (tests check
//      the CPU each partition gets against them). A consumer whose ShareConfig has hard_ceiling
//      also gets hard limits, which nothing lends past: ApplyCpuLimit(ceiling x worker threads)
//      and, when egress is capped, SetPartitionRateLimit(ceiling x cap) on the egress side.
//      Memory and disk shares never exceed a ceiling anyway. With Options::advisory nothing is
//      applied (for comparison benchmarks);
//   5. record the stats (weight, guarantee, ceiling, demand, share, usage per resource).
// If any allocation fails (a consumer's ShareConfig is invalid), the tick applies and records
// nothing and logs why.
//
// Time: elapsed time comes from Options::clock, so tests drive ticks with Tick() and a FakeClock.
// Start() adds a thread that ticks every Options::tick of real time.
//
// Thread-safety: every method is thread-safe. Ticks, UpdateShares and consumer changes are
// serialized by one mutex, held while consumers and the egress side are called (so they must not
// call back). Lifecycle: Start at most once; Stop is idempotent and final.
//
//   flowctl::ArbiterService::Options options{
//       .cpu_workers = [&pool] { return pool.threads(); }, .memory_bytes = 1 << 30};
//   ASSIGN_OR_RETURN(std::unique_ptr<flowctl::ArbiterService> arbiter,
//                    flowctl::ArbiterService::Create(std::move(options), &egress_accounting));
//   RETURN_IF_ERROR(arbiter->AddConsumer(&partition));
//   RETURN_IF_ERROR(arbiter->Start());  // one tick now, then every 100 ms
//   std::vector<flowctl::ConsumerShareStats> stats = arbiter->Stats();
//   arbiter->Stop();
#ifndef FLOWCTL_ARBITER_SERVICE_H_
#define FLOWCTL_ARBITER_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "flowctl/arbiter.h"
#include "flowctl/clock.h"
#include "flowctl/egress_accounting.h"
#include "flowctl/resource_consumer.h"
#include "proto/config.pb.h"

namespace flowctl {

// One consumer's part of one resource as the last tick saw it, in the resource's display unit:
// CPU in cores (ns of worker time per ns of wall time), memory in bytes, egress in bytes/s.
struct ResourceShareStats {
  double weight = 0;
  double guarantee = 0;
  double ceiling = 0;
  double demand = 0;  // kUnboundedDemand when unbounded (a backlogged consumer's CPU)
  double share = 0;   // demand-based share
  double usage = 0;   // measured over the last tick (memory: held at the tick)
  double limit = 0;   // the hard limit applied (CPU, egress); 0 = none
};

struct ConsumerShareStats {
  uint32_t id = 0;
  std::string name;
  ResourceShareStats cpu;
  ResourceShareStats memory;
  ResourceShareStats egress;
  ResourceShareStats disk;  // zeros unless disk is divided and the consumer spills
};

class ArbiterService {
 public:
  // ---- Policy. Every tuning of the arbiter is named here. ----
  // Elapsed time assumed by the first tick (there is no previous tick to measure from).
  static constexpr int64_t kFirstTickNanos = 100'000'000;
  // Elapsed time is at least this, so a tick right after another (UpdateShares) does not turn a
  // few microseconds of CPU into a large rate.
  static constexpr int64_t kMinElapsedNanos = 1'000'000;
  // CPU demand of a consumer that is not backlogged: its usage with room to grow, plus a little
  // so that an idle consumer's demand is not zero.
  static constexpr double kCpuDemandHeadroom = 1.25;
  static constexpr double kCpuDemandSlackNanos = 100'000;
  // A consumer's CPU weight is never below this fraction of the CPU capacity (the pool's stride
  // scheduler needs a positive weight).
  static constexpr double kMinCpuWeightFraction = 1e-3;
  // Memory: a consumer holding at least this fraction of its last share wants its whole limit;
  // one holding less lends the rest and keeps kMemoryIdleHeadroom x what it holds, at least
  // kMemoryIdleFloorFraction of its limit or of its weighted part of the capacity, the smaller
  // (of the limit alone, sixteen idle partitions' floors would exceed the capacity and none would
  // lend).
  static constexpr double kMemoryBusyFraction = 0.5;
  static constexpr double kMemoryIdleHeadroom = 2;
  static constexpr double kMemoryIdleFloorFraction = 0.25;
  // Egress demand: the measured rate with room to grow, plus 64 KiB/s so that a quiet
  // partition's next burst finds a share.
  static constexpr double kEgressDemandHeadroom = 1.5;
  static constexpr double kEgressDemandSlackBytesPerSecond = 64 * 1024;
  // The capacity divided when egress has no cap (AllocateFairShares needs a finite one): 1 TB/s.
  static constexpr double kUnlimitedEgressCapacity = 1e12;
  // Egress-side weight = entitlement / capacity x kEgressWeightScale, clamped to
  // [kMinEgressWeight, kMaxEgressWeight].
  static constexpr double kEgressWeightScale = 1000;
  static constexpr double kMinEgressWeight = 1;
  static constexpr double kMaxEgressWeight = 1e6;

  struct Options {
    // Period of the ticker thread (Start); > 0.
    absl::Duration tick = absl::Milliseconds(100);
    // Worker threads (the CPU budget), read every tick so a live pool resize is followed;
    // required, must return >= 1.
    std::function<int()> cpu_workers = nullptr;
    // Memory for all consumers together, in bytes; > 0.
    uint64_t memory_bytes = 0;
    // Called every tick: the fraction of memory_bytes divided at that tick, clamped to
    // [0.01, 1] (memory pressure shrinks it; flowctl/memory_pressure.h). Null: 1.
    std::function<double()> memory_scale = nullptr;
    // Spill disk for all consumers that spill, in bytes; 0 = not divided.
    uint64_t disk_bytes = 0;
    // Called at the end of every applied tick with the tick's elapsed time, its CPU capacity
    // (worker threads x elapsed ns) and the consumers it ticked, under the arbiter's mutex: it must
    // not call the arbiter. For node-level policies that follow the shares
    // (flowctl/node_admission.h). May be null.
    std::function<void(double elapsed_nanos, double cpu_capacity_nanos,
                       absl::Span<ResourceConsumer* const> consumers)>
        after_tick = nullptr;
    // Called after every tick of the arbiter's own thread and every Tick(), once the arbiter's
    // mutex is released (it may call the arbiter): for node-level work too slow to hold up the
    // arbiter, its stats and consumer changes (e.g. rewriting every ledger's RocksDB options).
    // Not after the ticks of Start, UpdateShares, AddConsumer or RemoveConsumer. May be null.
    std::function<void()> after_tick_unlocked = nullptr;
    const Clock* clock = Clock::Real();  // not null; outlives the arbiter
    // Measure, allocate and report, but apply nothing (no ApplyShare, ApplyCpuLimit, egress
    // weight or limit): the node as if it had no arbiter, for comparison benchmarks.
    bool advisory = false;
  };

  // InvalidArgument naming the option when one is out of range. `egress` may be null (no egress
  // valve: egress is divided from kUnlimitedEgressCapacity with no usage, and no weights set);
  // otherwise it outlives the arbiter.
  static absl::StatusOr<std::unique_ptr<ArbiterService>> Create(Options options,
                                                                EgressAccounting* egress);
  ~ArbiterService();  // Stop()
  ArbiterService(const ArbiterService&) = delete;
  ArbiterService& operator=(const ArbiterService&) = delete;

  // Adds a consumer, divided from the next tick on. AlreadyExists when its id is in use;
  // FailedPrecondition after Stop(). REQUIRES: `consumer` outlives its membership (until
  // RemoveConsumer returns, Stop() returns, or the arbiter is destroyed).
  absl::Status AddConsumer(ResourceConsumer* consumer);
  // After it returns the arbiter never calls the consumer again and its stats are gone.
  // NotFound for an unknown id.
  absl::Status RemoveConsumer(uint32_t id);

  // Runs one tick at once, then one every Options::tick on its own thread.
  // FailedPrecondition when called twice or after Stop().
  absl::Status Start();
  // Joins the ticker thread. From then on no consumer is called again (Tick and UpdateShares do
  // nothing to them), so consumers may be destroyed. Stats stay readable. Idempotent.
  void Stop();

  // One tick now (the ticker thread calls it; tests call it with a FakeClock). Thread-safe.
  void Tick();

  // Applies new share configs (id, share) and runs a tick, so the next Stats() shows them.
  // REQUIRES: every share is valid. NotFound naming the id when one is unknown, and then nothing
  // changes; FailedPrecondition after Stop().
  absl::Status UpdateShares(
      absl::Span<const std::pair<uint32_t, node::config::ShareConfig>> shares);

  // What the last successful tick decided, per consumer in the order they were added. A consumer
  // added since has none yet.
  std::vector<ConsumerShareStats> Stats() const;
  std::optional<ConsumerShareStats> StatsOf(uint32_t id) const;

 private:
  struct Member {
    ResourceConsumer* consumer = nullptr;
    uint64_t egress_bytes_last = 0;                          // bytes sent at the previous tick
    std::optional<double> memory_last_share = std::nullopt;  // none before the first tick
    std::optional<double> disk_last_share = std::nullopt;    // the same, for disk
    std::optional<ConsumerShareStats> stats = std::nullopt;  // none before the first tick
    double cpu_limit = 0;  // the hard limits last applied (cores, bytes/s); 0 = none
    double egress_limit = 0;
  };

  ArbiterService(Options options, EgressAccounting* egress);
  void TickLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop();

  // Constant after construction.
  const Options options_;
  EgressAccounting* const egress_;  // may be null

  // Serializes Start and Stop (which joins the thread outside mu_).
  absl::Mutex lifecycle_mu_;
  std::thread thread_ ABSL_GUARDED_BY(lifecycle_mu_);

  // State below is protected by mu_.
  mutable absl::Mutex mu_;
  std::vector<Member> members_ ABSL_GUARDED_BY(mu_);
  std::optional<int64_t> last_tick_nanos_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace flowctl

#endif  // FLOWCTL_ARBITER_SERVICE_H_
