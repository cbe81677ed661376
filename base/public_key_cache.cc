#include "base/public_key_cache.h"

#include <utility>

namespace base {

PublicKeyCache::PublicKeyCache(size_t capacity) : per_shard_(capacity / kShards) {}

PublicKeyCache& PublicKeyCache::Default() {
  static PublicKeyCache* const cache = new PublicKeyCache(16384);
  return *cache;
}

absl::StatusOr<PublicKey> PublicKeyCache::Get(absl::string_view raw) {
  Shard& shard = shards_[raw.empty() ? 0 : static_cast<unsigned char>(raw[0]) % kShards];
  {
    absl::MutexLock lock(&shard.mu);
    auto it = shard.keys.find(raw);
    if (it != shard.keys.end()) return it->second;
  }
  // Parsed outside the lock: two threads may both parse a new key; one copy is kept.
  absl::StatusOr<PublicKey> key = PublicKey::FromBytes(raw);
  if (!key.ok()) return key.status();
  parses_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&shard.mu);
  if (shard.keys.size() >= per_shard_ && !shard.keys.contains(raw)) {
    shard.keys.erase(shard.keys.begin());
  }
  shard.keys.try_emplace(std::string(raw), *key);
  return key;
}

size_t PublicKeyCache::size() const {
  size_t n = 0;
  for (const Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    n += shard.keys.size();
  }
  return n;
}

}  // namespace base
