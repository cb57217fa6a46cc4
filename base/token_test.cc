#include "base/token.h"

#include <set>
#include <string>

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

TEST(TokenTest, NewTokensAre64HexDigitsAndDiffer) {
  std::set<std::string> seen;
  for (int i = 0; i < 16; ++i) {
    ASSERT_OK_AND_ASSIGN(std::string token, NewToken());
    EXPECT_THAT(token, MatchesRegex("[0-9a-f]{64}"));
    seen.insert(token);
  }
  EXPECT_EQ(seen.size(), 16u);
}

TEST(TokenTest, TheFileStoresTheSha256OfTheText) {
  EXPECT_EQ(TokenHash("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(TokenTest, TokenTextIsOneWord) {
  EXPECT_TRUE(IsTokenText("0123abcd"));
  EXPECT_FALSE(IsTokenText(""));
  EXPECT_FALSE(IsTokenText("two words"));
  EXPECT_FALSE(IsTokenText("line\n"));
  EXPECT_FALSE(IsTokenText("tab\there"));
}

TEST(TokenTest, ExpiryIsAnRfc3339Time) {
  ASSERT_OK_AND_ASSIGN(absl::Time expires, ParseTokenExpiry("2027-01-31T00:00:00Z"));
  EXPECT_EQ(absl::ToUnixSeconds(expires), 1801353600);
  ASSERT_OK_AND_ASSIGN(absl::Time offset, ParseTokenExpiry("2027-01-31T01:00:00+01:00"));
  EXPECT_EQ(offset, expires);
  EXPECT_THAT(ParseTokenExpiry("next tuesday"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'next tuesday' is not an RFC 3339 time")));
  EXPECT_THAT(ParseTokenExpiry("2027-01-31"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2027-01-31")));
}

}  // namespace
}  // namespace autotune
