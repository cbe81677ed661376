// Ed25519PbftCrypto: the PbftCrypto of a real node: Ed25519 signatures over a consensus message's
// SigningBytes, bound to the partition so a vote can never be replayed on another partition.
//
// The node verifies every incoming envelope with Verify() before it reaches PbftReplica::Step;
// the replica itself uses Verify() on the messages nested in certificates, view changes and sync
// responses, and Sign() on its own messages.
//
// Thread-safe: immutable after construction (keys are immutable; OpenSSL contexts are per call).
//
//   std::vector<base::PublicKey> replicas = ...;  // index = replica index in the partition
//   Ed25519PbftCrypto crypto(/*partition=*/1, /*self=*/2, my_key, replicas);
//   if (!crypto.Verify(incoming)) { ++dropped_bad_signature; return; }
#ifndef PARTITIONS_PBFT_ED25519_CRYPTO_H_
#define PARTITIONS_PBFT_ED25519_CRYPTO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/ed25519.h"
#include "partitions/pbft_types.h"

namespace partitions {

class Ed25519PbftCrypto final : public PbftCrypto {
 public:
  // InvalidArgument unless `self` < replicas.size() and replicas[self] is `self_key`'s public key.
  static absl::StatusOr<std::unique_ptr<Ed25519PbftCrypto>> Create(
      uint32_t partition, uint32_t self, base::PrivateKey self_key,
      std::vector<base::PublicKey> replicas);

  std::string Sign(const ConsensusMessage& msg) override;
  // False for a sender outside the replica set, a signature of the wrong length, a signature by
  // another key, or one made for another partition.
  bool Verify(const ConsensusMessage& msg) const override;

  // What is signed: a domain tag, the partition id, then SigningBytes(msg).
  std::string SignedPayload(const ConsensusMessage& msg) const;

 private:
  Ed25519PbftCrypto(uint32_t partition, base::PrivateKey self_key,
                    std::vector<base::PublicKey> replicas);

  const std::string domain_;  // "noded/pbft/v1" + partition id, 4 bytes big-endian
  const base::PrivateKey self_key_;
  const std::vector<base::PublicKey> replicas_;
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_ED25519_CRYPTO_H_
