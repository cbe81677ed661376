// ResourceConsumer: one consumer of the node's shared resources (a partition), as the arbiter
// (flowctl/arbiter_service.h) sees it: who it is, its share configuration, what it used, and
// where the share it is given goes.
//
// The consumer measures, the arbiter decides. A consumer reports raw usage (CPU time since the
// previous report, whether work is waiting, bytes held and the most it may hold); the arbiter
// turns usage into demand, divides each resource with AllocateFairShares (flowctl/arbiter.h) and
// hands every consumer its share with ApplyShare. Egress is measured and weighted on the egress
// side (flowctl/egress_accounting.h), because the egress scheduler, not the consumer, sends.
//
// Thread-safety: the arbiter calls a consumer's methods one at a time, from its tick (its own
// thread or a caller of ArbiterService::Tick / UpdateShares) with the arbiter's mutex held.
// Implementations must be safe against their own other callers and must not call back into the
// arbiter (it would deadlock).
//
//   class MyPartition final : public flowctl::ResourceConsumer { ... };
//   RETURN_IF_ERROR(arbiter->AddConsumer(&partition));
//   arbiter->Tick();  // partition.TakeUsage(), then partition.ApplyShare(Resource::kCpu, ...), ...
#ifndef FLOWCTL_RESOURCE_CONSUMER_H_
#define FLOWCTL_RESOURCE_CONSUMER_H_

#include <cstdint>
#include <string>

#include "proto/config.pb.h"

namespace flowctl {

enum class Resource : int {
  kCpu = 0,     // worker-pool time
  kMemory = 1,  // bytes held (pools, lanes, spill memory tiers)
  kEgress = 2,  // bytes/s sent to peers
  kDisk = 3,    // bytes of spill segment files (lossless partitions)
};
inline constexpr int kNumResources = 4;

// What a consumer used; read once per tick.
struct ConsumerUsage {
  int64_t cpu_nanos = 0;        // worker CPU time charged since the previous TakeUsage()
  bool cpu_backlogged = false;  // work is queued now: it would use more CPU if it were given it
  uint64_t memory_bytes = 0;    // bytes held now
  uint64_t memory_limit = 0;    // the most it may hold (its configured limits)
  // Of memory_bytes, what caches hold beyond their own part of the last share, in room the
  // consumer's other parts leave of theirs: it gives them back at its next share, so they are
  // not demand (a warm cache would otherwise always look busy and never lend to others).
  uint64_t memory_borrowed_bytes = 0;
  // The share (bytes of memory) at which its caches get what they need: its limit while a cache
  // has been evicting to take in what it missed, the share whose fractions cover what they hold
  // while they are read, 0 once they have not been read for a while (they lend it). The
  // arbiter's memory demand is at least this (up to the limit).
  uint64_t memory_cache_demand = 0;
  uint64_t disk_bytes = 0;  // spill bytes on disk now (0 for a consumer that never spills)
  uint64_t disk_limit = 0;  // its own disk budget; 0 = none (the whole capacity)
  uint64_t disk_floor = 0;  // the least disk it can work with; 0 = it does not spill
};

class ResourceConsumer {
 public:
  virtual ~ResourceConsumer() = default;

  // Unique among one arbiter's consumers; the partition id the egress side accounts bytes by.
  virtual uint32_t id() const = 0;
  virtual const std::string& name() const = 0;

  // Weight, guarantee and ceiling (fractions of each capacity; ceiling 0 = 1). Read every tick.
  virtual node::config::ShareConfig share_config() const = 0;
  // REQUIRES: `share` is valid (weight > 0, fractions in [0, 1], ceiling >= guarantee).
  // Used from the next tick on.
  virtual void SetShareConfig(const node::config::ShareConfig& share) = 0;

  // CPU since the previous call, memory now. Called once per tick.
  virtual ConsumerUsage TakeUsage() = 0;

  // This tick's share of `resource`, called for every resource after each successful tick:
  //   kCpu     worker nanoseconds per tick the consumer is entitled to with every consumer
  //            backlogged: a weight for the pool's work-conserving scheduler, not a limit;
  //   kMemory  bytes it may hold;
  //   kEgress  bytes/s it is entitled to with every consumer backlogged. The arbiter weights the
  //            egress side with it already; a consumer with no egress valve of its own ignores it;
  //   kDisk    spill bytes it may hold; called only when the arbiter divides a disk capacity
  //            (ArbiterService::Options::disk_bytes), and only for consumers that spill.
  virtual void ApplyShare(Resource resource, double amount) = 0;

  // The hard limit on the consumer's worker CPU, in cores (ShareConfig.hard_ceiling: its ceiling
  // fraction of the worker threads), or 0 for none. Called after a successful tick whenever it
  // differs from the last one applied (first: when it is not 0). Egress limits go to the egress
  // side (EgressAccounting::SetPartitionRateLimit).
  virtual void ApplyCpuLimit(double cores) = 0;
};

}  // namespace flowctl

#endif  // FLOWCTL_RESOURCE_CONSUMER_H_
