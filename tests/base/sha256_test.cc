#include "base/sha256.h"

#include <string>

#include "gtest/gtest.h"

namespace base {
namespace {

TEST(Sha256Test, KnownVector) {
  EXPECT_EQ(DigestToHex(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Bytes("abc").size(), 32u);
}

TEST(Sha256Test, HexOfBytes) {
  EXPECT_EQ(BytesToHex(std::string("\x00\x7f\xff", 3)), "007fff");
  EXPECT_EQ(BytesToHex(""), "");
  EXPECT_EQ(BytesToHex(Sha256Bytes("abc")), DigestToHex(Sha256("abc")));
}

}  // namespace
}  // namespace base
