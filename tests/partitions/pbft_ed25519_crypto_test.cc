#include "partitions/pbft_ed25519_crypto.h"

#include <memory>
#include <string>
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

// Replica 2 of 4 signs a prepare on partition 7; replica 0 is to verify it.
struct OnePrepare {
  OnePrepare() { msg.set_signature(signer->Sign(msg)); }
  const Cluster c = MakeCluster(4);
  std::unique_ptr<Ed25519PbftCrypto> signer = CryptoFor(c, 7, 2);
  std::unique_ptr<Ed25519PbftCrypto> verifier = CryptoFor(c, 7, 0);
  ConsensusMessage msg = Prepare(2, 1, 5);
};

TEST(Ed25519PbftCryptoTest, SignedByOneVerifiedByAll) {
  const Cluster c = MakeCluster(4);
  auto signer = CryptoFor(c, 7, 2);
  ConsensusMessage msg = Prepare(2, 1, 5);
  msg.set_signature(signer->Sign(msg));
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(CryptoFor(c, 7, i)->Verify(msg)) << i;
}

TEST(Ed25519PbftCryptoTest, RefusesTamperingImpersonationAndOtherPartitions) {
  OnePrepare p;
  const Cluster& c = p.c;
  auto& verifier = p.verifier;
  const ConsensusMessage& msg = p.msg;

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

TEST(Ed25519PbftCryptoTest, AMessageThatVerifiedOnceIsNotVerifiedAgain) {
  OnePrepare p;
  auto& verifier = p.verifier;
  const ConsensusMessage& msg = p.msg;

  EXPECT_TRUE(verifier->Verify(msg));
  EXPECT_EQ(verifier->verifications(), 1u);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(verifier->Verify(msg));  // retransmissions
  EXPECT_EQ(verifier->verifications(), 1u);

  // Anything that differs from the cached message in sender, signature or signed content is
  // verified afresh, and refused.
  ConsensusMessage other_seq = msg;
  other_seq.mutable_prepare()->set_seq(6);
  EXPECT_FALSE(verifier->Verify(other_seq));
  ConsensusMessage other_sender = msg;
  other_sender.set_sender(3);
  EXPECT_FALSE(verifier->Verify(other_sender));
  ConsensusMessage flipped = msg;
  std::string sig = msg.signature();
  sig[10] = static_cast<char>(sig[10] ^ 1);
  flipped.set_signature(sig);
  EXPECT_FALSE(verifier->Verify(flipped));
  ConsensusMessage unsigned_msg = msg;
  unsigned_msg.clear_signature();
  EXPECT_FALSE(verifier->Verify(unsigned_msg));
  EXPECT_EQ(verifier->verifications(), 5u);
  // Failures are not cached: the same bad message costs a verification each time.
  EXPECT_FALSE(verifier->Verify(flipped));
  EXPECT_EQ(verifier->verifications(), 6u);
  // The good one is still cached.
  EXPECT_TRUE(verifier->Verify(msg));
  EXPECT_EQ(verifier->verifications(), 6u);
}

TEST(Ed25519PbftCryptoTest, OwnSignaturesNeedNoVerification) {
  const Cluster c = MakeCluster(4);
  auto self = CryptoFor(c, 7, 1);
  ConsensusMessage msg = Prepare(1, 1, 5);
  msg.set_signature(self->Sign(msg));
  EXPECT_TRUE(self->Verify(msg));  // e.g. its own prepare nested in its own view change
  EXPECT_EQ(self->verifications(), 0u);
}

TEST(Ed25519PbftCryptoTest, TheCacheIsBoundedAndEvictsTheOldest) {
  const Cluster c = MakeCluster(4);
  auto signer = CryptoFor(c, 7, 2);
  auto verifier = *Ed25519PbftCrypto::Create(7, 0, c.keys[0], c.publics, /*cache_entries=*/3);
  std::vector<ConsensusMessage> msgs;
  for (uint64_t seq = 1; seq <= 4; ++seq) {
    msgs.push_back(Prepare(2, 1, seq));
    msgs.back().set_signature(signer->Sign(msgs.back()));
    EXPECT_TRUE(verifier->Verify(msgs.back()));
  }
  EXPECT_EQ(verifier->verifications(), 4u);
  EXPECT_TRUE(verifier->Verify(msgs[3]));  // seqs 2-4 are held
  EXPECT_TRUE(verifier->Verify(msgs[1]));
  EXPECT_EQ(verifier->verifications(), 4u);
  EXPECT_TRUE(verifier->Verify(msgs[0]));  // seq 1 was evicted: verified again
  EXPECT_EQ(verifier->verifications(), 5u);

  auto uncached = *Ed25519PbftCrypto::Create(7, 0, c.keys[0], c.publics, /*cache_entries=*/0);
  EXPECT_TRUE(uncached->Verify(msgs[0]));
  EXPECT_TRUE(uncached->Verify(msgs[0]));
  EXPECT_EQ(uncached->verifications(), 2u);
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
