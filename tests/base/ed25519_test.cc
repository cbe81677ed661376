#include "base/ed25519.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "base/sha256.h"
#include "gtest/gtest.h"

namespace base {
namespace {

TEST(Ed25519Test, SignVerifyRoundTrip) {
  absl::StatusOr<PrivateKey> key = PrivateKey::Generate();
  ASSERT_TRUE(key.ok()) << key.status();
  const std::string sig = key->Sign("hello");
  EXPECT_EQ(sig.size(), kEd25519SignatureBytes);
  EXPECT_TRUE(key->public_key().Verify("hello", sig));
  EXPECT_FALSE(key->public_key().Verify("hellO", sig));
  std::string bad = sig;
  bad[3] ^= 1;
  EXPECT_FALSE(key->public_key().Verify("hello", bad));
  EXPECT_FALSE(key->public_key().Verify("hello", sig.substr(1)));
}

TEST(Ed25519Test, Rfc8032TestVector1) {
  // RFC 8032 section 7.1, TEST 1 (empty message).
  const std::string seed_hex = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
  std::string seed;
  for (size_t i = 0; i < seed_hex.size(); i += 2) {
    seed.push_back(static_cast<char>(std::stoi(seed_hex.substr(i, 2), nullptr, 16)));
  }
  absl::StatusOr<PrivateKey> key = PrivateKey::FromSeed(seed);
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(BytesToHex(key->public_key().bytes()),
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
  EXPECT_EQ(BytesToHex(key->Sign("")),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
            "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b");
}

TEST(Ed25519Test, PemFileRoundTripAndErrors) {
  absl::StatusOr<PrivateKey> key = PrivateKey::Generate();
  ASSERT_TRUE(key.ok());
  char dir_template[] = "/tmp/ed25519_test.XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string path = std::string(dir_template) + "/node.key";
  ASSERT_TRUE(key->WritePemFile(path).ok());
  absl::StatusOr<PrivateKey> back = PrivateKey::ReadPemFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->public_key().bytes(), key->public_key().bytes());
  EXPECT_EQ(PrivateKey::ReadPemFile(path + ".missing").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(PrivateKey::FromPem("garbage").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PublicKey::FromBytes("short").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrivateKey::FromSeed("short").status().code(), absl::StatusCode::kInvalidArgument);
  unlink(path.c_str());
  rmdir(dir_template);
}

}  // namespace
}  // namespace base
