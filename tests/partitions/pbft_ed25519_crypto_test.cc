#include "partitions/pbft_ed25519_crypto.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "partitions/pbft_certs.h"

namespace partitions {
namespace {

struct Cluster {
  std::vector<base::PrivateKey> keys;
  std::vector<base::PublicKey> publics;
};

Cluster MakeCluster(int n) {
  Cluster c;
  for (int i = 0; i < n; ++i) {
    // Fixed seeds keep the test deterministic.
    absl::StatusOr<base::PrivateKey> key = base::PrivateKey::FromSeed(std::string(32, 'a' + i));
    EXPECT_TRUE(key.ok());
    c.publics.push_back(key->public_key());
    c.keys.push_back(*std::move(key));
  }
  return c;
}

std::unique_ptr<Ed25519PbftCrypto> CryptoFor(const Cluster& c, uint32_t partition, uint32_t self) {
  auto crypto = Ed25519PbftCrypto::Create(partition, self, c.keys[self], c.publics);
  EXPECT_TRUE(crypto.ok()) << crypto.status();
  return *std::move(crypto);
}

ConsensusMessage Prepare(uint32_t sender, uint64_t view, uint64_t seq) {
  ConsensusMessage msg;
  msg.set_sender(sender);
  msg.mutable_prepare()->set_view(view);
  msg.mutable_prepare()->set_seq(seq);
  msg.mutable_prepare()->set_digest(BatchDigest(std::vector<std::string>{}));
  return msg;
}

TEST(Ed25519PbftCryptoTest, SignedByOneVerifiedByAll) {
  const Cluster c = MakeCluster(4);
  auto signer = CryptoFor(c, 7, 2);
  ConsensusMessage msg = Prepare(2, 1, 5);
  msg.set_signature(signer->Sign(msg));
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(CryptoFor(c, 7, i)->Verify(msg)) << i;
}

TEST(Ed25519PbftCryptoTest, RefusesTamperingImpersonationAndOtherPartitions) {
  const Cluster c = MakeCluster(4);
  auto signer = CryptoFor(c, 7, 2);
  auto verifier = CryptoFor(c, 7, 0);
  ConsensusMessage msg = Prepare(2, 1, 5);
  msg.set_signature(signer->Sign(msg));

  ConsensusMessage tampered = msg;
  tampered.mutable_prepare()->set_seq(6);
  EXPECT_FALSE(verifier->Verify(tampered));

  ConsensusMessage impersonated = msg;  // replica 2's signature claimed by replica 3
  impersonated.set_sender(3);
  EXPECT_FALSE(verifier->Verify(impersonated));

  ConsensusMessage outsider = msg;
  outsider.set_sender(4);
  EXPECT_FALSE(verifier->Verify(outsider));

  ConsensusMessage truncated = msg;
  truncated.set_signature(msg.signature().substr(1));
  EXPECT_FALSE(verifier->Verify(truncated));

  // The same vote signed for partition 7 is worthless on partition 8.
  EXPECT_FALSE(CryptoFor(c, 8, 0)->Verify(msg));
}

TEST(Ed25519PbftCryptoTest, CreateChecksSelf) {
  const Cluster c = MakeCluster(4);
  EXPECT_EQ(Ed25519PbftCrypto::Create(1, 4, c.keys[0], c.publics).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Ed25519PbftCrypto::Create(1, 1, c.keys[0], c.publics).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace partitions
