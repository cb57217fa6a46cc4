#include "base/closest_name.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune {
namespace {

const std::vector<std::string> kFields = {"name",   "kernel_name", "source",  "source_file",
                                          "params", "dims",        "buffers", "scalars"};

TEST(ClosestNameTest, FindsTheNameASlipAway) {
  EXPECT_EQ(ClosestName("kernal_name", kFields), "kernel_name");
  EXPECT_EQ(ClosestName("param", kFields), "params");
  EXPECT_EQ(ClosestName("bufers", kFields), "buffers");
  EXPECT_EQ(ClosestName("sclaars", kFields), "scalars");  // two letters swapped
  EXPECT_EQ(ClosestName("DIMS", kFields), "dims");        // case ignored
}

TEST(ClosestNameTest, GuessesNothingForANameFarFromEvery) {
  EXPECT_EQ(ClosestName("launch_bounds", kFields), std::nullopt);
  EXPECT_EQ(ClosestName("x", kFields), std::nullopt);
  EXPECT_EQ(ClosestName("name", kFields), std::nullopt);  // known: nothing to suggest
  EXPECT_EQ(ClosestName("anything", {}), std::nullopt);
}

TEST(ClosestNameTest, DidYouMeanIsReadyToAppend) {
  EXPECT_EQ(DidYouMean("dimz", kFields), " (did you mean 'dims'?)");
  EXPECT_EQ(DidYouMean("zzzz", kFields), "");
}

}  // namespace
}  // namespace autotune
