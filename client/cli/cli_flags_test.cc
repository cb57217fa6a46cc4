#include "client/cli/cli_flags.h"

#include <string>

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::client {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ProblemFromFlagsTest, BuildsTheProblem) {
  ASSERT_OK_AND_ASSIGN(v1::Problem problem, ProblemFromFlags({"batch=8,heads=32,dim=128", "bf16"}));
  EXPECT_EQ(problem.dims().at("batch"), 8);
  EXPECT_EQ(problem.dims().at("heads"), 32);
  EXPECT_EQ(problem.dims().at("dim"), 128);
  EXPECT_EQ(problem.dtype(), v1::BFLOAT16);
}

TEST(ProblemFromFlagsTest, ErrorsNameTheFlagAndTheValue) {
  EXPECT_THAT(ProblemFromFlags({"batch=x", "bf16"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "invalid --dims 'batch=x': dims: 'batch=x' is not an integer"));
  EXPECT_THAT(ProblemFromFlags({"batch=8", "bf17"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("invalid --dtype 'bf17': expected one of fp32, fp16, bf16")));
  EXPECT_THAT(ProblemFromFlags({"", "bf16"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--dims is required")));
}

TEST(FilterFromFlagsTest, EmptyFlagsSelectEverything) {
  ASSERT_OK_AND_ASSIGN(v1::EntryFilter filter, FilterFromFlags({}));
  EXPECT_TRUE(FilterIsEmpty(filter));
}

TEST(FilterFromFlagsTest, EachSelectorNarrows) {
  FilterFlags flags;
  flags.family = "flash_attn";
  ASSERT_OK_AND_ASSIGN(v1::EntryFilter filter, FilterFromFlags(flags));
  EXPECT_FALSE(FilterIsEmpty(filter));
  EXPECT_EQ(filter.family(), "flash_attn");

  FilterFlags by_version;
  by_version.nvrtc_older_than = "12.8";
  ASSERT_OK_AND_ASSIGN(filter, FilterFromFlags(by_version));
  EXPECT_FALSE(FilterIsEmpty(filter));
  EXPECT_EQ(filter.nvrtc_older_than(), "12.8");

  FilterFlags by_problem;
  by_problem.problem = {"batch=8", "fp16"};
  ASSERT_OK_AND_ASSIGN(filter, FilterFromFlags(by_problem));
  EXPECT_FALSE(FilterIsEmpty(filter));
  EXPECT_EQ(filter.problem().dtype(), v1::FLOAT16);
}

TEST(FilterFromFlagsTest, DimsAndDtypeSelectApartOrTogether) {
  FilterFlags flags;
  flags.family = "gla_decode";
  flags.problem.dims = "batch=8";
  ASSERT_OK_AND_ASSIGN(v1::EntryFilter filter, FilterFromFlags(flags));
  EXPECT_EQ(filter.problem().dims().at("batch"), 8);
  EXPECT_EQ(filter.problem().dtype(), v1::DTYPE_UNSPECIFIED);
  flags.problem.dims.clear();
  flags.problem.dtype = "bf16";
  ASSERT_OK_AND_ASSIGN(filter, FilterFromFlags(flags));
  EXPECT_TRUE(filter.problem().dims().empty());
  EXPECT_EQ(filter.problem().dtype(), v1::BFLOAT16);
  flags.problem.dtype = "bf17";
  EXPECT_THAT(FilterFromFlags(flags),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid --dtype 'bf17'")));
}

TEST(FilterFromFlagsTest, NvrtcVersionMustBeMajorDotMinor) {
  for (const char* bad : {"12", "12.", ".8", "twelve", "12.8.1"}) {
    FilterFlags flags;
    flags.nvrtc_older_than = bad;
    EXPECT_THAT(FilterFromFlags(flags),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(std::string("invalid --nvrtc-older-than '") + bad + "'")))
        << bad;
  }
}

TEST(ParseSearchFlagsTest, TakesAStrategyACountOrAShareAndASeed) {
  v1::SearchOptions search;
  ASSERT_OK(ParseSearchFlags("model", "5%", 7, search));
  EXPECT_EQ(search.strategy(), v1::MODEL);
  EXPECT_DOUBLE_EQ(search.max_fraction(), 0.05);
  EXPECT_EQ(search.max_variants(), 0);
  EXPECT_EQ(search.seed(), 7u);
  ASSERT_OK(ParseSearchFlags("Random", "500", 0, search));
  EXPECT_EQ(search.strategy(), v1::RANDOM);
  EXPECT_EQ(search.max_variants(), 500);
  EXPECT_DOUBLE_EQ(search.max_fraction(), 0);
  ASSERT_OK(ParseSearchFlags("model", "90s", 0, search));
  EXPECT_DOUBLE_EQ(search.max_seconds(), 90);
  EXPECT_EQ(search.max_variants(), 0);
  ASSERT_OK(ParseSearchFlags("", "1h30m", 0, search));
  EXPECT_DOUBLE_EQ(search.max_seconds(), 5400);
  ASSERT_OK(ParseSearchFlags("", "", 0, search));
  EXPECT_EQ(search.ByteSizeLong(), 0u) << "nothing given, nothing set";
  const struct {
    const char* strategy;
    const char* budget;
    const char* why;
  } cases[] = {
      {"genetic", "", "invalid --search 'genetic': expected exhaustive, random or model"},
      {"search_strategy_unspecified", "", "invalid --search"},
      {"", "0", "invalid --budget '0': expected a count of variants (at least 1)"},
      {"", "1.5", "invalid --budget '1.5'"},
      {"", "0%", "invalid --budget '0%': a share of the space must be in (0%, 100%]"},
      {"", "101%", "invalid --budget '101%'"},
      {"", "0s", "invalid --budget '0s': a time must be positive, like 90s, 5m or 1h30m"},
      {"", "5 minutes", "invalid --budget '5 minutes': a time must be positive"},
      {"", "-5m", "invalid --budget '-5m'"},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(ParseSearchFlags(c.strategy, c.budget, 0, search),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.why)))
        << c.strategy << " " << c.budget;
  }
}

TEST(ParseShardFlagTest, AcceptsIndexBelowCount) {
  v1::JobOptions options;
  ASSERT_OK(ParseShardFlag("3/4", options));
  EXPECT_EQ(options.shard_index(), 3);
  EXPECT_EQ(options.shard_count(), 4);
  ASSERT_OK(ParseShardFlag("0/1", options));
  EXPECT_EQ(options.shard_count(), 1);
}

TEST(ParseShardFlagTest, RejectsBadShards) {
  const struct {
    const char* text;
    const char* why;
  } cases[] = {
      {"4/4", "the shard index must be in 0..3"},
      {"-1/4", "the shard index must be in 0..3"},
      {"0/0", "the shard count must be at least 1"},
      {"1", "expected I/N"},
      {"a/b", "expected I/N"},
      {"1/2/3", "expected I/N"},
  };
  for (const auto& c : cases) {
    v1::JobOptions options;
    EXPECT_THAT(ParseShardFlag(c.text, options),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(std::string("invalid --shard '") + c.text + "': " + c.why)))
        << c.text;
  }
}

TEST(ParseManifestTextTest, ParsesItems) {
  ASSERT_OK_AND_ASSIGN(v1::Manifest manifest, ParseManifestText(R"pb(
                                                                  items {
                                                                    family: "flash_attn"
                                                                    dims {
                                                                      name: "batch"
                                                                      values: [ 1, 8 ]
                                                                    }
                                                                    dtypes: [ BFLOAT16, FLOAT16 ]
                                                                  }
                                                                  arch: "sm_90"
                                                                )pb",
                                                                "m.textproto"));
  ASSERT_EQ(manifest.items_size(), 1);
  EXPECT_EQ(manifest.items(0).dims(0).values_size(), 2);
  EXPECT_EQ(manifest.items(0).dtypes_size(), 2);
  EXPECT_EQ(manifest.arch(), "sm_90");
}

TEST(ParseManifestTextTest, ErrorNamesFileLineAndColumn) {
  EXPECT_THAT(ParseManifestText("items {\n  family: \"a\"\n  dtype: BFLOAT16\n}\n", "m.textproto"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("manifest m.textproto:3:"), HasSubstr("dtype"))));
}

TEST(ParseManifestTextTest, EmptyManifestIsAnError) {
  EXPECT_THAT(ParseManifestText("# nothing\n", "m.textproto"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lists no items")));
}

}  // namespace
}  // namespace autotune::client
