#include "base/timestamp.h"

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace autotune {
namespace {

TEST(TimestampTest, IsRfc3339InUtcWithAZ) {
  const absl::Time time =
      absl::FromCivil(absl::CivilSecond(2026, 12, 2, 15, 14, 35), absl::UTCTimeZone()) +
      absl::Milliseconds(42);
  EXPECT_EQ(Timestamp(time), "2026-12-02T15:14:35Z");
  EXPECT_EQ(TimestampMillis(time), "2026-12-02T15:14:35.042Z");
  // Parses back as RFC 3339 (what token expiry and every reader accept).
  absl::Time parsed;
  std::string error;
  ASSERT_TRUE(absl::ParseTime(absl::RFC3339_full, TimestampMillis(time), &parsed, &error)) << error;
  EXPECT_EQ(parsed, time);
}

TEST(TimestampTest, SortsAsTextInTimeOrder) {
  const absl::Time earlier = absl::FromUnixMillis(1'700'000'000'999);
  const absl::Time later = earlier + absl::Milliseconds(1);
  EXPECT_LT(TimestampMillis(earlier), TimestampMillis(later));
  EXPECT_LT(Timestamp(earlier), Timestamp(later + absl::Seconds(1)));
}

}  // namespace
}  // namespace autotune
