#include "base/sha256.h"

#include <string>

#include "gtest/gtest.h"

namespace autotune {
namespace {

TEST(Sha256HexTest, KnownDigests) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256HexTest, BinaryBytesWithNul) {
  const std::string bytes(
      "\x7f"
      "ELF\0\0\x01",
      7);
  EXPECT_EQ(Sha256Hex(bytes).size(), 64u);
  EXPECT_NE(Sha256Hex(bytes), Sha256Hex(std::string("\x7f"
                                                    "ELF",
                                                    4)));
}

}  // namespace
}  // namespace autotune
