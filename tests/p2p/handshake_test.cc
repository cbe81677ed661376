#include "p2p/handshake.h"

#include <string>

#include "base/sha256.h"
#include "gtest/gtest.h"

namespace p2p {
namespace {

base::PrivateKey Key(char c) { return *base::PrivateKey::FromSeed(std::string(32, c)); }

TEST(NodeIdTest, IsHexOfFirst16BytesOfSha256) {
  const base::PrivateKey k = Key('a');
  const NodeId id = NodeIdFromPublicKey(k.public_key().bytes());
  EXPECT_EQ(id.size(), 32u);
  EXPECT_EQ(id, base::BytesToHex(base::Sha256Bytes(k.public_key().bytes()).substr(0, 16)));
  EXPECT_NE(id, NodeIdFromPublicKey(Key('b').public_key().bytes()));
}

class HandshakeTest : public ::testing::Test {
 protected:
  base::PrivateKey client_ = Key('c');
  base::PrivateKey server_ = Key('s');
  NodeId cid_ = NodeIdFromPublicKey(client_.public_key().bytes());
  NodeId sid_ = NodeIdFromPublicKey(server_.public_key().bytes());
  std::string nc_ = NewHandshakeNonce();
  std::string ns_ = NewHandshakeNonce();
};

TEST_F(HandshakeTest, ValidSignatureAccepted) {
  const std::string sig =
      client_.Sign(HandshakeTranscript(HandshakeRole::kClient, cid_, sid_, nc_, ns_));
  EXPECT_TRUE(VerifyHandshake(HandshakeRole::kClient, client_.public_key().bytes(), cid_, cid_,
                              sid_, nc_, ns_, sig)
                  .ok());
}

TEST_F(HandshakeTest, SignatureBindsRoleIdsAndNonces) {
  const std::string sig =
      server_.Sign(HandshakeTranscript(HandshakeRole::kServer, cid_, sid_, nc_, ns_));
  const std::string& pk = server_.public_key().bytes();
  // Reflected as a client signature.
  EXPECT_TRUE(absl::IsPermissionDenied(
      VerifyHandshake(HandshakeRole::kClient, pk, sid_, cid_, sid_, nc_, ns_, sig)));
  // Replayed on another stream (fresh nonce).
  EXPECT_TRUE(absl::IsPermissionDenied(VerifyHandshake(HandshakeRole::kServer, pk, sid_, cid_, sid_,
                                                       NewHandshakeNonce(), ns_, sig)));
  // Replayed towards another client.
  EXPECT_TRUE(absl::IsPermissionDenied(
      VerifyHandshake(HandshakeRole::kServer, pk, sid_, sid_, sid_, nc_, ns_, sig)));
  // Claimed id not matching the key.
  EXPECT_TRUE(absl::IsPermissionDenied(
      VerifyHandshake(HandshakeRole::kServer, pk, cid_, cid_, sid_, nc_, ns_, sig)));
  // Short nonce, malformed key.
  EXPECT_TRUE(absl::IsPermissionDenied(
      VerifyHandshake(HandshakeRole::kServer, pk, sid_, cid_, sid_, "n", ns_, sig)));
  EXPECT_TRUE(absl::IsPermissionDenied(
      VerifyHandshake(HandshakeRole::kServer, "short", sid_, cid_, sid_, nc_, ns_, sig)));
  EXPECT_TRUE(VerifyHandshake(HandshakeRole::kServer, pk, sid_, cid_, sid_, nc_, ns_, sig).ok());
}

}  // namespace
}  // namespace p2p
