// Ed25519PbftCrypto: the PbftCrypto of a real node: Ed25519 signatures over a consensus message's
// SigningBytes, bound to the partition so a vote can never be replayed on another partition.
//
// The node verifies every incoming envelope with Verify() before it reaches PbftReplica::Step;
// the replica itself uses Verify() on the messages nested in certificates, view changes and sync
// responses, and Sign() on its own messages.
//
// Verified-signature cache: the same signed message reaches a replica many times (its sender
// re-broadcasts unfinished votes and its latest checkpoint every retransmit period; view changes,
// new views and sync responses nest messages the replica verified when they first arrived), and
// Ed25519 verification is the expensive part. A digest of (sender, signature, signed payload) of
// every message that verified, and of every message this replica signed, is kept in a bounded
// FIFO set; a message whose digest is there is valid without a second verification (Ed25519
// verification is a deterministic function of exactly those inputs). Only successes are kept, so
// a flood of bad signatures cannot evict good entries faster than fresh messages do.
//
// Thread-safe: the keys are immutable, OpenSSL contexts are per call, the cache has its own lock.
//
//   std::vector<base::PublicKey> replicas = ...;  // index = replica index in the partition
//   Ed25519PbftCrypto crypto(/*partition=*/1, /*self=*/2, my_key, replicas);
//   if (!crypto.Verify(incoming)) { ++dropped_bad_signature; return; }
#ifndef PARTITIONS_PBFT_ED25519_CRYPTO_H_
#define PARTITIONS_PBFT_ED25519_CRYPTO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/ed25519.h"
#include "partitions/pbft_types.h"

namespace partitions {

class Ed25519PbftCrypto final : public PbftCrypto {
 public:
  // InvalidArgument unless `self` < replicas.size() and replicas[self] is `self_key`'s public key.
  // `cache_entries` bounds the verified-signature cache (0 turns it off).
  static absl::StatusOr<std::unique_ptr<Ed25519PbftCrypto>> Create(
      uint32_t partition, uint32_t self, base::PrivateKey self_key,
      std::vector<base::PublicKey> replicas, size_t cache_entries = kDefaultCacheEntries);

  // About 2 retransmit periods of a busy partition's votes, or a view change's certificates over a
  // full watermark window; 32 bytes of digest plus the set's overhead each.
  static constexpr size_t kDefaultCacheEntries = 2048;

  std::string Sign(const ConsensusMessage& msg) override;
  // False for a sender outside the replica set, a signature of the wrong length, a signature by
  // another key, or one made for another partition.
  bool Verify(const ConsensusMessage& msg) const override;

  // What is signed: a domain tag, the partition id, then SigningBytes(msg).
  std::string SignedPayload(const ConsensusMessage& msg) const;

  // Ed25519 verifications actually performed: calls of Verify for a known sender that the cache
  // did not answer.
  uint64_t verifications() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Ed25519PbftCrypto(uint32_t partition, uint32_t self, base::PrivateKey self_key,
                    std::vector<base::PublicKey> replicas, size_t cache_entries);

  // SHA-256 of the sender index, the signature (length-prefixed) and the signed payload.
  static std::string CacheKey(uint32_t sender, absl::string_view signature,
                              absl::string_view payload);
  void Remember(const std::string& key) const ABSL_LOCKS_EXCLUDED(mu_);

  const std::string domain_;  // "noded/pbft/v1" + partition id, 4 bytes big-endian
  const uint32_t self_;
  const base::PrivateKey self_key_;
  const std::vector<base::PublicKey> replicas_;
  const size_t cache_entries_;

  mutable absl::Mutex mu_;
  // The cached keys in insertion order (a ring of cache_entries_ slots) and as a set.
  mutable std::vector<std::string> ring_ ABSL_GUARDED_BY(mu_);
  mutable size_t ring_next_ ABSL_GUARDED_BY(mu_) = 0;
  mutable absl::flat_hash_set<std::string> verified_ ABSL_GUARDED_BY(mu_);
  mutable uint64_t verifications_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_ED25519_CRYPTO_H_
