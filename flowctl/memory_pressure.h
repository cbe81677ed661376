// MemoryPressure: what the process and the machine say about memory, turned into actions, the
// way Envoy's overload manager turns resource monitors into overload actions.
//
// A MemorySource reads, each time it is asked:
//   rss       the process's resident memory (/proc/self/statm);
//   cgroup    the memory cgroup the process is in: v2 memory.current / memory.max (and its
//             memory.pressure), or, on a machine whose memory controller is still on cgroup v1,
//             memory.usage_in_bytes / memory.limit_in_bytes; a group with no limit has no max;
//   psi       "some avg10" of the cgroup's memory.pressure (v2) or of /proc/pressure/memory: the
//             share of the last 10 s in which some task stalled waiting for memory.
// Each source that is present and has a limit gives a ratio (rss / rss_limit_bytes, working set /
// max, avg10 / psi_full_scale_percent); the pressure is the highest of them. The cgroup is looked
// up again whenever /proc/self/cgroup changes (a process moved into a group after it started).
// The cgroup's working set is its usage less its inactive file cache (memory.stat), as kubelet
// counts it.
//
// Actions, by pressure (thresholds from MemoryPressureConfig, proto/config.proto):
//   pool_scale      1 below shrink_pools_at, falling linearly to min_pool_scale at pressure 1:
//                   the arbiter divides memory_bytes x pool_scale, so every partition's pool
//                   budget shrinks with it (a partition over its share sheds its own admission
//                   first). Whatever the pressure, when a limit is known (the cgroup's max, or
//                   rss_limit_bytes) the memory divided is at most kDividedShareOfLimit of it: a
//                   node whose memory_bytes promises more than its cgroup holds (4 GiB in a
//                   400 MiB group) would otherwise grow its pools into the OOM killer;
//   drop_forwarded  from drop_forwarded_at: peers' forwarded txs (TX_FORWARD) and bulk traffic
//                   are dropped on arrival (a proposal's missing bodies are fetched, so nothing
//                   committed is lost);
//   refuse_clients  from refuse_clients_at: client writes are refused with RESOURCE_EXHAUSTED
//                   before they are parsed; consensus, reads and sync go on.
//   no_cache_borrowing
//                   from shrink_pools_at: partitions' caches stop borrowing the room their pools
//                   and lanes leave (runtime/partition_impl.h, kCacheBorrowFraction): a pressure
//                   asks the process to hold less, and room nobody holds is memory it does not use;
//   release_heap    from shrink_pools_at, at most once a second: the allocator's free pages go
//                   back to the system (tcmalloc's ReleaseFreeMemory when noded runs on it,
//                   else glibc's malloc_trim), as Envoy's shrink_heap action does; without it a
//                   process whose pool has drained keeps the freed memory and the pressure it
//                   reads never falls.
// The three switches turn off only once the pressure is `hysteresis` below their threshold, so a
// pressure hovering at a threshold does not flap (borrowed caches raise the pressure they are
// judged by). `transitions` counts drop_forwarded's and refuse_clients'.
//
// Every switch of an action, and a read that starts failing, is logged (WARNING).
//
// Thread-safety: Update() is called by one thread at a time (the arbiter's tick); the action
// getters and Stats() may be called from any thread (atomics; Stats takes a mutex).
//
//   flowctl::MemoryPressure pressure(config, std::make_unique<flowctl::ProcMemorySource>());
//   pressure.Update();                       // every tick
//   if (pressure.refuse_clients()) ...       // on every client write
#ifndef FLOWCTL_MEMORY_PRESSURE_H_
#define FLOWCTL_MEMORY_PRESSURE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/config.pb.h"

namespace flowctl {

struct MemorySample {
  uint64_t rss_bytes = 0;
  // 0 when the process is in no memory cgroup this can read; 1 or 2 otherwise.
  int cgroup_version = 0;
  std::optional<uint64_t> cgroup_current_bytes;
  // Page cache the kernel would reclaim first (memory.stat inactive_file; v1 total_inactive_file).
  // The group's working set is current - this (what kubelet and cAdvisor judge too): a group
  // whose usage is mostly cold file cache is not short of memory.
  uint64_t cgroup_inactive_file_bytes = 0;
  std::optional<uint64_t> cgroup_max_bytes;  // absent: the group has no limit
  std::optional<double> psi_some_avg10;      // percent, 0..100; absent: no PSI on this kernel
};

class MemorySource {
 public:
  virtual ~MemorySource() = default;
  // What the source reads now. An error only when even RSS cannot be read.
  virtual absl::StatusOr<MemorySample> Sample() = 0;
  // Where the figures come from, for logs and stats (e.g. "cgroup v1 /sys/fs/cgroup/memory/x").
  virtual std::string Describe() const = 0;
};

// The real source. `proc` and `cgroup_root` are "/proc" and "/sys/fs/cgroup" except in tests,
// which give a directory tree laid out like them. The cgroup is found from <proc>/self/cgroup (at
// construction, and again at a Sample when that file changed): the v2 entry ("0::/path") when
// <cgroup_root>/<path>/memory.current exists (or <cgroup_root>/unified/<path>/..., a hybrid
// machine's v2 mount), else the v1 "memory" controller's entry under <cgroup_root>/memory.
class ProcMemorySource final : public MemorySource {
 public:
  explicit ProcMemorySource(std::string proc = "/proc", std::string cgroup_root = "/sys/fs/cgroup");
  absl::StatusOr<MemorySample> Sample() override;
  std::string Describe() const override;

  // The directory of the memory cgroup found, and its version (0: none).
  const std::string& cgroup_dir() const { return cgroup_dir_; }
  int cgroup_version() const { return cgroup_version_; }

 private:
  void FindCgroup();

  const std::string proc_;
  const std::string cgroup_root_;
  std::string cgroups_text_;  // <proc>/self/cgroup when the group was last looked up
  std::string cgroup_dir_;
  int cgroup_version_ = 0;
  long page_size_ = 4096;
};

// The most of a known memory limit the arbiter divides among pools, lanes and spill tiers. A
// pooled 16 KiB tx costs the process about 4x its bytes while it waits (gRPC buffers, the
// parsed copy, tracking; measured: 422 MiB RSS with 109 MiB of txs pooled), and the pool cap is
// half a partition's share, so a fifth of the limit keeps a flooded node's RSS near half of it.
inline constexpr double kDividedShareOfLimit = 0.2;

// A v1 limit at or above this reads as "no limit" (the kernel reports PAGE_COUNTER_MAX pages).
inline constexpr uint64_t kCgroupV1NoLimit = uint64_t{1} << 60;

struct MemoryPressureStats {
  MemorySample sample;
  bool sampled = false;   // false until the first Update that read anything
  std::string error;      // the last failed read, "" when none
  std::string source;     // MemorySource::Describe()
  double pressure = 0;    // the highest ratio (0 when no source has a limit)
  std::string driven_by;  // "rss", "cgroup", "psi" or "" (none above 0)
  double pool_scale = 1;
  bool drop_forwarded = false;
  bool refuse_clients = false;
  bool no_cache_borrowing = false;
  uint64_t transitions = 0;  // times drop_forwarded or refuse_clients switched on or off
  uint64_t heap_releases = 0;
};

// Returns the allocator's free pages to the system: tcmalloc's MallocExtension_ReleaseFreeMemory
// when the process runs on tcmalloc (looked up at run time), else glibc's malloc_trim(0).
void ReleaseFreeHeap();

class MemoryPressure {
 public:
  // `config` with defaults applied (see ApplyMemoryPressureDefaults); `source` not null.
  // `release_heap` gives free heap back to the system (default ReleaseFreeHeap; tests count).
  MemoryPressure(const node::config::MemoryPressureConfig& config,
                 std::unique_ptr<MemorySource> source,
                 std::function<void()> release_heap = ReleaseFreeHeap);

  // Reads the source and updates the actions. Returns the read's error (the actions keep their
  // last state then).
  absl::Status Update();
  // The bytes the arbiter divides before any scaling (resources.memory_bytes); with it,
  // pool_scale() also holds the division under kDividedShareOfLimit of a known limit. 0: none.
  void SetDividedBytes(uint64_t bytes) { divided_bytes_.store(bytes, std::memory_order_relaxed); }

  // The actions now (any thread).
  double pool_scale() const { return pool_scale_.load(std::memory_order_relaxed); }
  bool drop_forwarded() const { return drop_forwarded_.load(std::memory_order_relaxed); }
  bool refuse_clients() const { return refuse_clients_.load(std::memory_order_relaxed); }
  bool no_cache_borrowing() const { return no_cache_borrowing_.load(std::memory_order_relaxed); }
  double pressure() const { return pressure_.load(std::memory_order_relaxed); }
  // The pool scale of the pressure alone, without the cap on the memory divided that
  // pool_scale() also holds: 1 below shrink_pools_at, down to min_pool_scale at 1 (what shrinks
  // the ledgers' memtable budget, which memory_bytes does not include).
  double pressure_scale() const;

  // Counters of what the actions refused, kept here so every partition adds to one figure.
  void CountRefusedWrites(uint64_t n) { refused_writes_.fetch_add(n, std::memory_order_relaxed); }
  void CountDroppedMessages(uint64_t n) {
    dropped_messages_.fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t refused_writes() const { return refused_writes_.load(std::memory_order_relaxed); }
  uint64_t dropped_messages() const { return dropped_messages_.load(std::memory_order_relaxed); }

  // The message a refused write carries, e.g. "node memory pressure 0.97 (cgroup: 1.9 GiB of
  // 2.0 GiB): client writes are refused until it falls below 0.90".
  std::string RefusalMessage() const;

  MemoryPressureStats Stats() const;
  const node::config::MemoryPressureConfig& config() const { return config_; }

 private:
  absl::Status UpdateWith(const absl::StatusOr<MemorySample>& sample, bool* release)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::string MakeRefusalMessageLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const node::config::MemoryPressureConfig config_;
  const std::unique_ptr<MemorySource> source_;
  const std::function<void()> release_heap_;
  absl::Time last_release_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();

  std::atomic<uint64_t> divided_bytes_{0};
  std::atomic<double> pool_scale_{1};
  std::atomic<bool> drop_forwarded_{false};
  std::atomic<bool> no_cache_borrowing_{false};
  std::atomic<bool> refuse_clients_{false};
  std::atomic<double> pressure_{0};
  std::atomic<uint64_t> refused_writes_{0};
  std::atomic<uint64_t> dropped_messages_{0};

  mutable absl::Mutex mu_;
  MemoryPressureStats stats_ ABSL_GUARDED_BY(mu_);
  std::string refusal_message_ ABSL_GUARDED_BY(mu_);  // built at each Update
};

// Fills unset fields with their documented defaults (proto/config.proto).
void ApplyMemoryPressureDefaults(node::config::MemoryPressureConfig* config);

// cgroup_current_bytes less cgroup_inactive_file_bytes (0 when there is no cgroup).
uint64_t CgroupWorkingSet(const MemorySample& s);

// The pool scale at `pressure`: 1 below shrink_at, min_scale at 1 and above, linear between.
double PoolScaleAt(double pressure, double shrink_at, double min_scale);

}  // namespace flowctl

#endif  // FLOWCTL_MEMORY_PRESSURE_H_
