#include "partitions/pbft_ed25519_crypto.h"

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
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
    std::vector<base::PublicKey> replicas, size_t cache_entries) {
  if (self >= replicas.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pbft crypto: self index ", self, " is outside the ", replicas.size(), " replicas"));
  }
  if (replicas[self].bytes() != self_key.public_key().bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pbft crypto: replica ", self, "'s public key is not this node's key"));
  }
  return std::unique_ptr<Ed25519PbftCrypto>(new Ed25519PbftCrypto(
      partition, self, std::move(self_key), std::move(replicas), cache_entries));
}

Ed25519PbftCrypto::Ed25519PbftCrypto(uint32_t partition, uint32_t self, base::PrivateKey self_key,
                                     std::vector<base::PublicKey> replicas, size_t cache_entries)
    : domain_(Domain(partition)),
      self_(self),
      self_key_(std::move(self_key)),
      replicas_(std::move(replicas)),
      cache_entries_(cache_entries) {}

std::string Ed25519PbftCrypto::SignedPayload(const ConsensusMessage& msg) const {
  return absl::StrCat(domain_, SigningBytes(msg));
}

std::string Ed25519PbftCrypto::CacheKey(uint32_t sender, absl::string_view signature,
                                        absl::string_view payload) {
  std::string input;
  input.reserve(8 + signature.size() + payload.size());
  for (uint32_t v : {sender, static_cast<uint32_t>(signature.size())}) {
    for (int shift = 24; shift >= 0; shift -= 8) input.push_back(static_cast<char>(v >> shift));
  }
  absl::StrAppend(&input, signature, payload);
  return base::Sha256Bytes(input);
}

void Ed25519PbftCrypto::Remember(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  if (verified_.contains(key)) return;
  if (ring_.size() < cache_entries_) {
    ring_.push_back(key);
  } else {
    verified_.erase(ring_[ring_next_]);
    ring_[ring_next_] = key;
    ring_next_ = (ring_next_ + 1) % cache_entries_;
  }
  verified_.insert(key);
}

std::string Ed25519PbftCrypto::Sign(const ConsensusMessage& msg) {
  std::string payload = SignedPayload(msg);
  std::string signature = self_key_.Sign(payload);
  // A failed signing (no signature) must never make an unsigned message look verified.
  if (cache_entries_ > 0 && signature.size() == base::kEd25519SignatureBytes) {
    Remember(CacheKey(self_, signature, payload));
  }
  return signature;
}

bool Ed25519PbftCrypto::Verify(const ConsensusMessage& msg) const {
  if (msg.sender() >= replicas_.size()) return false;
  const std::string payload = SignedPayload(msg);
  const std::string key =
      cache_entries_ > 0 ? CacheKey(msg.sender(), msg.signature(), payload) : std::string();
  {
    absl::MutexLock lock(&mu_);
    if (!key.empty() && verified_.contains(key)) return true;
    ++verifications_;
  }
  if (!replicas_[msg.sender()].Verify(payload, msg.signature())) return false;
  if (!key.empty()) Remember(key);
  return true;
}

uint64_t Ed25519PbftCrypto::verifications() const {
  absl::MutexLock lock(&mu_);
  return verifications_;
}

}  // namespace partitions
