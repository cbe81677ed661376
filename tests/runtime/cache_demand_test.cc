// CacheDemand: the share a partition's caches ask the arbiter for, from the state cache's misses
// of keys it evicted, its lookups and admitted client reads, over injected times (no clock is
// read).
#include "runtime/cache_demand.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace runtime {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr int64_t kSecond = 1'000'000'000;

// A partition configured for 288 MiB, 64 of it state cache and 32 block cache; at t seconds the
// state cache has had `lookups` lookups, `evicted` of them misses of keys it had evicted, and
// holds `bytes` of its own part.
CacheDemand::Sample At(int64_t t, uint64_t lookups, uint64_t evicted, uint64_t bytes,
                       uint64_t reads = 0) {
  return {.now_nanos = t * kSecond,
          .state_lookups = lookups,
          .state_evicted_misses = evicted,
          .state_own_bytes = bytes,
          .block_own_bytes = 2 * kMiB,
          .reads = reads,
          .limit = 288 * kMiB,
          .state_configured = 64 * kMiB,
          .block_configured = 32 * kMiB};
}

// A cache that misses keys it evicted asks for the partition's whole limit, and keeps asking for
// kWantHoldNanos after the last such miss.
TEST(CacheDemandTest, MissesOfEvictedKeysAskForTheWholeLimit) {
  CacheDemand d;
  d.Observe(At(0, 0, 0, 16 * kMiB));
  EXPECT_EQ(d.Observe(At(1, 100, 40, 16 * kMiB)), 288 * kMiB);
  EXPECT_EQ(d.state(), CacheDemand::State::kWanting);
  // Hits only from then on: still wanting within the hold ...
  EXPECT_EQ(d.Observe(At(10, 200, 40, 16 * kMiB)), 288 * kMiB);
  // ... and, once it has passed, the share that covers 1.25x what the cache holds: 20 MiB of its
  // 64 MiB is 90 MiB of the 288.
  EXPECT_EQ(d.Observe(At(11, 300, 40, 16 * kMiB)), 90 * kMiB);
  EXPECT_EQ(d.state(), CacheDemand::State::kInUse);
}

// Lookups without misses of evicted keys (hits, first reads of new keys) ask for 1.25x what the
// caches hold, by whichever cache needs the larger share, never past the configured sizes.
TEST(CacheDemandTest, CachesInUseAskForAQuarterMoreThanTheyHold) {
  CacheDemand d;
  d.Observe(At(0, 0, 0, 0));
  EXPECT_EQ(d.Observe(At(1, 100, 0, 32 * kMiB)), 180 * kMiB);
  // The block cache's own part when it is the larger need: 16 MiB of its 32.
  CacheDemand::Sample s = At(2, 200, 0, 4 * kMiB);
  s.block_own_bytes = 16 * kMiB;
  EXPECT_EQ(d.Observe(s), 180 * kMiB);
  // A cache at its configured size asks for the whole limit, not 1.25x of it.
  EXPECT_EQ(d.Observe(At(3, 300, 0, 64 * kMiB)), 288 * kMiB);
  EXPECT_EQ(d.state(), CacheDemand::State::kInUse);
}

// Caches nobody reads for kIdleAfterNanos ask for nothing (the partition lends their part); an
// admitted client read keeps them in use, and the next miss of an evicted key asks for
// everything again.
TEST(CacheDemandTest, IdleCachesAskForNothingUntilTheyAreReadOrMissAgain) {
  CacheDemand d;
  d.Observe(At(0, 10, 0, 16 * kMiB));
  EXPECT_EQ(d.Observe(At(29, 10, 0, 16 * kMiB)), 90 * kMiB);  // within 30 s of t = 0
  EXPECT_EQ(d.Observe(At(30, 10, 0, 16 * kMiB)), 0u);
  EXPECT_EQ(d.state(), CacheDemand::State::kIdle);
  // Client reads (the ledger's block cache) count as use.
  EXPECT_EQ(d.Observe(At(31, 10, 0, 16 * kMiB, /*reads=*/3)), 90 * kMiB);
  EXPECT_EQ(d.Observe(At(61, 10, 0, 16 * kMiB, 3)), 0u);
  EXPECT_EQ(d.Observe(At(62, 20, 1, 4 * kMiB, 3)), 288 * kMiB);
}

}  // namespace
}  // namespace runtime
