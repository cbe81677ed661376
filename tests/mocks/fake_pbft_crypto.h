// FakePbftCrypto: a PbftCrypto stand-in for Ed25519 that costs a hash, for tests, the simulator,
// fuzzers and benchmarks of the consensus state machine.
//
// A "signature" is an 8-byte keyed tag over the signing bytes (FakeSignature). Only the object
// made for replica `self` produces tags as `self`, so a test world where every replica holds its
// own FakePbftCrypto has authentication by construction: a Byzantine replica can sign only as
// itself. Verification follows the Trust policy:
//  - kTags: a message verifies when it carries its sender's tag (what Ed25519 would check);
//  - kOthers: the own replica's messages must carry its tag, every other sender below n is
//    trusted unchecked (a fuzzer that forges peers' messages freely);
//  - kAll: every sender below n is trusted and Sign returns an empty signature (a benchmark of
//    the state machine alone, without even the tag's hashing).
//
// Thread-safety: immutable after construction; thread-safe.
//
//   tests::FakePbftCrypto crypto(/*self=*/2);
//   auto replica = partitions::PbftReplica::Create(config, {&crypto, &txs, &store, &blocks}, {});
//   ConsensusMessage m = tests::SignedAs(1, std::move(m));  // a peer's message, as a test builds
#ifndef TESTS_MOCKS_FAKE_PBFT_CRYPTO_H_
#define TESTS_MOCKS_FAKE_PBFT_CRYPTO_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/string_view.h"
#include "partitions/pbft_certs.h"
#include "partitions/pbft_types.h"

namespace tests {

// FNV-1a over `bytes`, seeded by the signer: 8 bytes that differ per signer and per message.
inline std::string FakeSignature(uint32_t signer, absl::string_view bytes) {
  uint64_t h = 1469598103934665603ULL ^ (0x9e3779b97f4a7c15ULL * (signer + 1));
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}

// `m` with sender `signer` and that signer's fake signature.
inline partitions::ConsensusMessage SignedAs(uint32_t signer, partitions::ConsensusMessage m) {
  m.set_sender(signer);
  m.clear_signature();
  m.set_signature(FakeSignature(signer, partitions::SigningBytes(m)));
  return m;
}

class FakePbftCrypto final : public partitions::PbftCrypto {
 public:
  enum class Trust { kTags, kOthers, kAll };

  // `n` bounds the senders that kOthers and kAll trust (every sender below n).
  explicit FakePbftCrypto(uint32_t self, Trust trust = Trust::kTags,
                          uint32_t n = std::numeric_limits<uint32_t>::max())
      : self_(self), trust_(trust), n_(n) {}

  std::string Sign(const partitions::ConsensusMessage& msg) override {
    if (trust_ == Trust::kAll) return std::string();
    return FakeSignature(self_, partitions::SigningBytes(msg));
  }

  bool Verify(const partitions::ConsensusMessage& msg) const override {
    switch (trust_) {
      case Trust::kAll:
        return msg.sender() < n_;
      case Trust::kOthers:
        if (msg.sender() >= n_) return false;
        if (msg.sender() != self_) return true;
        break;
      case Trust::kTags:
        break;
    }
    return msg.signature() == FakeSignature(msg.sender(), partitions::SigningBytes(msg));
  }

 private:
  const uint32_t self_;
  const Trust trust_;
  const uint32_t n_;
};

}  // namespace tests

#endif  // TESTS_MOCKS_FAKE_PBFT_CRYPTO_H_
