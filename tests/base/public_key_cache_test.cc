// PublicKeyCache: a key is parsed once, the bound holds, bad keys are refused and not kept, and
// the cached key verifies what the parsed one does.
#include "base/public_key_cache.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/ed25519.h"
#include "gtest/gtest.h"

namespace base {
namespace {

PrivateKey KeyFromSeed(int i) {
  std::string seed(kEd25519KeyBytes, '\0');
  seed[0] = static_cast<char>(i & 0xff);
  seed[1] = static_cast<char>((i >> 8) & 0xff);
  seed[2] = 1;
  absl::StatusOr<PrivateKey> key = PrivateKey::FromSeed(seed);
  EXPECT_TRUE(key.ok()) << key.status();
  return *std::move(key);
}

TEST(PublicKeyCacheTest, AKeyIsParsedOnceAndVerifiesLikeTheParsedOne) {
  PublicKeyCache cache(64);
  const PrivateKey key = KeyFromSeed(1);
  const std::string sig = key.Sign("msg");
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<PublicKey> got = cache.Get(key.public_key().bytes());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->bytes(), key.public_key().bytes());
    EXPECT_TRUE(got->Verify("msg", sig));
    EXPECT_FALSE(got->Verify("msG", sig));
  }
  EXPECT_EQ(cache.parses(), 1u);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(PublicKeyCacheTest, ABadKeyIsRefusedAndNotKept) {
  PublicKeyCache cache(64);
  absl::StatusOr<PublicKey> got = cache.Get("short");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.parses(), 0u);
}

TEST(PublicKeyCacheTest, TheBoundHoldsAndEvictedKeysAreParsedAgain) {
  PublicKeyCache cache(/*capacity=*/32);  // 2 per shard
  std::vector<std::string> keys;
  for (int i = 0; i < 500; ++i) keys.push_back(KeyFromSeed(i).public_key().bytes());
  for (const std::string& k : keys) {
    ASSERT_TRUE(cache.Get(k).ok());
    ASSERT_LE(cache.size(), 32u);
  }
  EXPECT_EQ(cache.parses(), 500u);
  // Asked again, at most the 32 still cached skip the parse.
  for (const std::string& k : keys) ASSERT_TRUE(cache.Get(k).ok());
  EXPECT_GE(cache.parses(), 1000u - 32u);
  EXPECT_LE(cache.size(), 32u);
}

}  // namespace
}  // namespace base
