#include "partitions/pbft_ed25519_crypto.h"

#include "absl/strings/str_cat.h"
#include "partitions/pbft_certs.h"

namespace partitions {
namespace {

std::string Domain(uint32_t partition) {
  std::string d = "noded/pbft/v1";
  for (int shift = 24; shift >= 0; shift -= 8) {
    d.push_back(static_cast<char>((partition >> shift) & 0xff));
  }
  return d;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Ed25519PbftCrypto>> Ed25519PbftCrypto::Create(
    uint32_t partition, uint32_t self, base::PrivateKey self_key,
    std::vector<base::PublicKey> replicas) {
  if (self >= replicas.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pbft crypto: self index ", self, " is outside the ", replicas.size(), " replicas"));
  }
  if (replicas[self].bytes() != self_key.public_key().bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pbft crypto: replica ", self, "'s public key is not this node's key"));
  }
  return std::unique_ptr<Ed25519PbftCrypto>(
      new Ed25519PbftCrypto(partition, std::move(self_key), std::move(replicas)));
}

Ed25519PbftCrypto::Ed25519PbftCrypto(uint32_t partition, base::PrivateKey self_key,
                                     std::vector<base::PublicKey> replicas)
    : domain_(Domain(partition)), self_key_(std::move(self_key)), replicas_(std::move(replicas)) {}

std::string Ed25519PbftCrypto::SignedPayload(const ConsensusMessage& msg) const {
  return absl::StrCat(domain_, SigningBytes(msg));
}

std::string Ed25519PbftCrypto::Sign(const ConsensusMessage& msg) {
  return self_key_.Sign(SignedPayload(msg));
}

bool Ed25519PbftCrypto::Verify(const ConsensusMessage& msg) const {
  if (msg.sender() >= replicas_.size()) return false;
  return replicas_[msg.sender()].Verify(SignedPayload(msg), msg.signature());
}

}  // namespace partitions
