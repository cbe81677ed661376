// PublicKeyCache: parsed Ed25519 public keys by their 32 raw bytes, so a sender's key becomes an
// OpenSSL key object once rather than on every signature check (parsing was about a sixth of a
// transaction's verification; docs/BENCHMARKS.md, "Per-transaction CPU").
//
// Bounded: at most `capacity` keys, in 16 shards by the key's first byte; a shard at its bound
// evicts one entry (an arbitrary one: senders are not ranked) for the new key. Keys that do not
// parse are not cached. A cached PublicKey is immutable and shared by every thread that asks.
//
// Thread-safety: every method is thread-safe (one mutex per shard, a leaf).
//
//   absl::StatusOr<base::PublicKey> key = base::PublicKeyCache::Default().Get(tx.sender());
//   if (key.ok() && key->Verify(message, signature)) ...
#ifndef BASE_PUBLIC_KEY_CACHE_H_
#define BASE_PUBLIC_KEY_CACHE_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "base/ed25519.h"

namespace base {

class PublicKeyCache {
 public:
  // REQUIRES: capacity >= kShards.
  explicit PublicKeyCache(size_t capacity);
  PublicKeyCache(const PublicKeyCache&) = delete;
  PublicKeyCache& operator=(const PublicKeyCache&) = delete;

  // The process-wide cache VerifySignature uses: 16,384 keys (a few MiB).
  static PublicKeyCache& Default();

  // The key for `raw`: cached, or parsed now (and cached). The error of PublicKey::FromBytes
  // otherwise.
  absl::StatusOr<PublicKey> Get(absl::string_view raw);

  size_t size() const;
  // Keys parsed so far (misses that parsed), for tests and stats.
  uint64_t parses() const { return parses_.load(std::memory_order_relaxed); }

  static constexpr size_t kShards = 16;

 private:
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<std::string, PublicKey> keys ABSL_GUARDED_BY(mu);
  };

  const size_t per_shard_;
  std::array<Shard, kShards> shards_;
  std::atomic<uint64_t> parses_{0};
};

}  // namespace base

#endif  // BASE_PUBLIC_KEY_CACHE_H_
