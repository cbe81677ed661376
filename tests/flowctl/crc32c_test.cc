#include "flowctl/crc32c.h"

#include <cstdint>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace flowctl {
namespace {

// Bit-at-a-time reference straight from the definition (reflected polynomial 0x82F63B78).
uint32_t ReferenceCrc32c(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char byte : s) {
    c ^= byte;
    for (int i = 0; i < 8; ++i) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  // RFC 3720 (iSCSI) appendix B.4.
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string up(32, 0), down(32, 0);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<char>(i);
    down[i] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(Crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(down), 0x113FDB5Cu);
}

TEST(Crc32cTest, MatchesReferenceAtEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::string buf(300, 0);
  for (char& c : buf) c = static_cast<char>(rng());
  for (size_t start = 0; start < 9; ++start) {
    for (size_t len = 0; start + len <= buf.size(); len += 1 + len / 8) {
      const std::string s = buf.substr(start, len);
      ASSERT_EQ(Crc32c(buf.data() + start, len), ReferenceCrc32c(s))
          << "start " << start << " len " << len;
      ASSERT_EQ(Crc32cExtendPortable(0, buf.data() + start, len), ReferenceCrc32c(s))
          << "start " << start << " len " << len;
    }
  }
}

TEST(Crc32cTest, PortableKnownVectors) {
  EXPECT_EQ(Crc32cExtendPortable(0, "123456789", 9), 0xE3069283u);
  const std::string ff(32, '\xFF');
  EXPECT_EQ(Crc32cExtendPortable(0, ff.data(), ff.size()), 0x62A8AB43u);
  EXPECT_EQ(Crc32cExtendPortable(Crc32cExtendPortable(0, "1234", 4), "56789", 5), 0xE3069283u);
  RecordProperty("accelerated", Crc32cIsAccelerated() ? "yes" : "no");
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  const std::string a = "the quick brown fox ";
  const std::string b = "jumps over the lazy dog";
  EXPECT_EQ(Crc32cExtend(Crc32c(a), b), Crc32c(a + b));
  EXPECT_EQ(Crc32cExtend(Crc32c(""), a), Crc32c(a));
}

TEST(Crc32cTest, DetectsSingleBitFlips) {
  std::string s(64, 'x');
  const uint32_t good = Crc32c(s);
  for (size_t i = 0; i < s.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string t = s;
      t[i] = static_cast<char>(t[i] ^ (1 << bit));
      ASSERT_NE(Crc32c(t), good);
    }
  }
}

}  // namespace
}  // namespace flowctl
