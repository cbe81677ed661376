// CacheDemand: what a partition's two caches (the executor's state cache and the ledger's block
// cache) ask of its memory share, for the arbiter's memory demand
// (flowctl::ConsumerUsage::memory_cache_demand).
//
// A partition's memory share is divided among its parts by their configured sizes, so a cache
// holding H bytes of its own part needs a share of H x limit / configured. Observed once per
// arbiter tick:
//   wanting  the state cache missed keys it had evicted recently since the last tick
//            (StateCacheStats::evicted_misses: reads a larger cache would have hit; a first read
//            of a new key does not count): for kWantHoldNanos after, the caches ask for the
//            partition's whole limit (their configured sizes);
//   in use   state lookups or admitted client reads since the last tick, within
//            kIdleAfterNanos: they ask for the share that covers kInUseHeadroom x what each
//            holds of its own part (a cache still filling grows with its share; a full one keeps
//            it);
//   idle     neither for kIdleAfterNanos: they ask for nothing, so the partition's demand is
//            what it holds (ArbiterService's HeldDemand, which shrinks with what the caches give
//            back), and the share they shrink with is lent to busier partitions (the next miss
//            of an evicted key asks for it back).
// Only the state cache has hit and miss counts; the block cache follows it, and client reads
// keep both in use.
//
// Thread-compatible: the partition calls Observe under its config lock.
#ifndef RUNTIME_CACHE_DEMAND_H_
#define RUNTIME_CACHE_DEMAND_H_

#include <cstdint>
#include <optional>

namespace runtime {

class CacheDemand {
 public:
  static constexpr int64_t kWantHoldNanos = 10'000'000'000;
  static constexpr int64_t kIdleAfterNanos = 30'000'000'000;
  static constexpr double kInUseHeadroom = 1.25;

  struct Sample {
    int64_t now_nanos = 0;
    // The state cache's cumulative lookups (hits + misses) and misses of keys it had evicted.
    uint64_t state_lookups = 0;
    uint64_t state_evicted_misses = 0;
    // Of each cache's bytes, those in its own part of the share (not what it borrowed).
    uint64_t state_own_bytes = 0;
    uint64_t block_own_bytes = 0;
    // Cumulative client reads the partition admitted (served from the ledger and its block
    // cache).
    uint64_t reads = 0;
    // The partition's configured memory (its limit) and each cache's configured size.
    uint64_t limit = 0;
    uint64_t state_configured = 0;
    uint64_t block_configured = 0;
  };

  // The share the caches ask for after `s`, at most s.limit. The first sample only takes the
  // counters' baseline and counts as use.
  uint64_t Observe(const Sample& s);

  // Whether the last Observe found the caches wanting more, in use, or idle.
  enum class State { kIdle, kInUse, kWanting };
  State state() const { return state_; }

 private:
  std::optional<Sample> last_;
  std::optional<int64_t> last_want_nanos_;
  std::optional<int64_t> last_use_nanos_;
  State state_ = State::kInUse;
};

}  // namespace runtime

#endif  // RUNTIME_CACHE_DEMAND_H_
