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

TEST(Sha256Test, PiecesHashAsTheWhole) {
  Sha256 empty;
  EXPECT_EQ(empty.HexDigest(), Sha256Hex(""));
  Sha256 hash;
  hash.Update("a");
  hash.Update("");
  hash.Update("bc");
  EXPECT_EQ(hash.HexDigest(), Sha256Hex("abc"));
  EXPECT_EQ(hash.HexDigest(), Sha256Hex("abc"));  // reading it changes nothing
  hash.Update("d");
  EXPECT_EQ(hash.HexDigest(), Sha256Hex("abcd"));
}

TEST(Sha256Test, CopiesGoOnFromTheSharedPrefix) {
  Sha256 prefix;
  prefix.Update(std::string(100000, 'x'));
  Sha256 one = prefix;
  Sha256 two(prefix);
  one.Update("1");
  two.Update("2");
  EXPECT_EQ(one.HexDigest(), Sha256Hex(std::string(100000, 'x') + "1"));
  EXPECT_EQ(two.HexDigest(), Sha256Hex(std::string(100000, 'x') + "2"));
  EXPECT_EQ(prefix.HexDigest(), Sha256Hex(std::string(100000, 'x')));
  one = prefix;  // assigned: the prefix's state again
  one.Update("2");
  EXPECT_EQ(one.HexDigest(), two.HexDigest());
}

}  // namespace
}  // namespace autotune
