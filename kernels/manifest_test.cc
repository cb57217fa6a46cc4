#include "kernels/manifest.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kernels/family_loader.h"
#include "kernels/testdata.h"
#include "proto/problem.h"

namespace autotune::kernels {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::flat_hash_map<std::string, v1::KernelFamily> GoodFamilies() {
  absl::flat_hash_map<std::string, v1::KernelFamily> families;
  absl::StatusOr<std::vector<v1::KernelFamily>> loaded = LoadFamilyDirectory(Testdata("good"));
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  if (loaded.ok()) {
    for (v1::KernelFamily& family : *loaded) families[family.name()] = family;
  }
  return families;
}

v1::Manifest ParseManifest(const std::string& text) {
  v1::Manifest manifest;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &manifest)) << text;
  return manifest;
}

// "family dims dtype", e.g. "axpy n=1024 fp32".
std::string Describe(const ManifestProblem& p) {
  return absl::StrCat(p.family, " ", FormatDims(p.problem.dims()), " ",
                      std::string(DTypeName(p.problem.dtype())));
}

std::vector<std::string> Describe(const std::vector<ManifestProblem>& problems) {
  std::vector<std::string> described;
  for (const ManifestProblem& p : problems) described.push_back(Describe(p));
  return described;
}

TEST(LoadManifestFileTest, LoadsAndExpandsInOrder) {
  ASSERT_OK_AND_ASSIGN(v1::Manifest manifest,
                       LoadManifestFile(Testdata("manifests/warmup.textproto")));
  EXPECT_EQ(manifest.arch(), "sm_90");
  ASSERT_OK_AND_ASSIGN(std::vector<ManifestProblem> problems,
                       ExpandManifest(manifest, GoodFamilies()));
  EXPECT_THAT(Describe(problems),
              ElementsAre("axpy n=1024 fp32", "axpy n=1024 fp16",  //
                          "axpy n=4096 fp32", "axpy n=4096 fp16",  //
                          "axpy n=65536 fp32", "axpy n=65536 fp16",
                          // No dtypes listed: the family's (fp32 only).
                          "row_scale cols=256,rows=64 fp32", "row_scale cols=1024,rows=64 fp32",
                          "row_scale cols=256,rows=128 fp32", "row_scale cols=1024,rows=128 fp32"));
}

TEST(LoadManifestFileTest, ErrorsNameFileLineAndField) {
  const std::string bad_value = Testdata("manifests/bad_value.textproto");
  EXPECT_THAT(
      LoadManifestFile(bad_value),
      StatusIs(absl::StatusCode::kInvalidArgument,
               absl::StrCat(bad_value, ":7: items[0].dims[0].values[1]: 0 is not positive")));
  const std::string bad_syntax = Testdata("manifests/bad_syntax.textproto");
  EXPECT_THAT(LoadManifestFile(bad_syntax),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat(bad_syntax, ":4:34: Expected \",\", found \"4096\".")));
  EXPECT_THAT(LoadManifestFile(Testdata("manifests/nope.textproto")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("No such file or directory")));
}

TEST(ExpandManifestTest, ItemOrderDimOrderAndDTypesInnermost) {
  const v1::Manifest manifest = ParseManifest(R"pb(
    items {
      family: "row_scale"
      dims {
        name: "cols"
        values: [ 32, 16 ]
      }
      dims {
        name: "rows"
        values: [ 2, 1 ]
      }
      dtypes: [ FLOAT32 ]
    }
  )pb");
  ASSERT_OK_AND_ASSIGN(std::vector<ManifestProblem> problems,
                       ExpandManifest(manifest, GoodFamilies()));
  EXPECT_THAT(Describe(problems),
              ElementsAre("row_scale cols=32,rows=2 fp32", "row_scale cols=32,rows=1 fp32",
                          "row_scale cols=16,rows=2 fp32", "row_scale cols=16,rows=1 fp32"));
}

TEST(ExpandManifestTest, RepeatedProblemsAreKeptOnceAtTheirFirstPlace) {
  const v1::Manifest manifest = ParseManifest(R"pb(
    items {
      family: "axpy"
      dims {
        name: "n"
        values: [ 8, 16 ]
      }
      dtypes: [ FLOAT16 ]
    }
    items {
      family: "axpy"
      dims {
        name: "n"
        values: [ 4, 8 ]
      }
    }
  )pb");
  ASSERT_OK_AND_ASSIGN(std::vector<ManifestProblem> problems,
                       ExpandManifest(manifest, GoodFamilies()));
  EXPECT_THAT(Describe(problems), ElementsAre("axpy n=8 fp16", "axpy n=16 fp16", "axpy n=4 fp32",
                                              "axpy n=4 fp16", "axpy n=8 fp32"));
}

struct ManifestErrorCase {
  std::string name;
  std::string manifest;
  std::string message;
};

void PrintTo(const ManifestErrorCase& c, std::ostream* os) { *os << c.name; }

class ExpandManifestErrorTest : public ::testing::TestWithParam<ManifestErrorCase> {};

TEST_P(ExpandManifestErrorTest, NamesTheField) {
  EXPECT_THAT(ExpandManifest(ParseManifest(GetParam().manifest), GoodFamilies()),
              StatusIs(absl::StatusCode::kInvalidArgument, GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Manifests, ExpandManifestErrorTest,
    ::testing::Values(
        ManifestErrorCase{"NoItems", "arch: \"sm_90\"", "items: empty (list what to tune)"},
        ManifestErrorCase{"UnknownFamily",
                          R"pb(items {
                                 family: "axpy"
                                 dims { name: "n" values: 1 }
                               }
                               items {
                                 family: "gemm"
                                 dims { name: "m" values: 1 }
                               })pb",
                          "items[1].family: unknown family 'gemm' (known: axpy, row_scale)"},
        ManifestErrorCase{"UnknownDim",
                          R"pb(items {
                                 family: "axpy"
                                 dims { name: "n" values: 1 }
                                 dims { name: "m" values: 1 }
                               })pb",
                          "items[0].dims[1]: 'm' is not a dim of family 'axpy' (dims: n)"},
        ManifestErrorCase{"MissingDim", R"pb(items {
                                               family: "row_scale"
                                               dims { name: "rows" values: 1 }
                                             })pb",
                          "items[0].dims: missing 'cols' of family 'row_scale'"},
        ManifestErrorCase{"NonPositive", R"pb(items {
                                                family: "axpy"
                                                dims {
                                                  name: "n"
                                                  values: [ 4, -1 ]
                                                }
                                              })pb",
                          "items[0].dims[0].values[1]: -1 is not positive"},
        ManifestErrorCase{"AboveMax",
                          R"pb(items {
                                 family: "row_scale"
                                 dims { name: "rows" values: 1 }
                                 dims {
                                   name: "cols"
                                   values: [ 1, 100000 ]
                                 }
                               })pb",
                          "items[0].dims[1].values[1]: 100000 is above the max 65536 of dim "
                          "'cols'"},
        ManifestErrorCase{"DuplicateDim",
                          R"pb(items {
                                 family: "axpy"
                                 dims { name: "n" values: 1 }
                                 dims { name: "n" values: 2 }
                               })pb",
                          "items[0].dims[1].name: 'n' is also dims[0]"},
        ManifestErrorCase{"NoValues", R"pb(items {
                                             family: "axpy"
                                             dims { name: "n" }
                                           })pb",
                          "items[0].dims[0].values: empty (list at least one value)"},
        ManifestErrorCase{"UnsupportedDType",
                          R"pb(items {
                                 family: "axpy"
                                 dims { name: "n" values: 1 }
                                 dtypes: [ FLOAT32, FLOAT64 ]
                               })pb",
                          "items[0].dtypes[1]: fp64 is not supported by family 'axpy' (fp32, "
                          "fp16)"},
        ManifestErrorCase{"BadArch",
                          R"pb(arch: "90"
                               items {
                                 family: "axpy"
                                 dims { name: "n" values: 1 }
                               })pb",
                          "arch: '90' is not an architecture like sm_90 or sm_90a"}),
    [](const ::testing::TestParamInfo<ManifestErrorCase>& info) { return info.param.name; });

TEST(ValidateManifestTest, PrefixesTheOrigin) {
  EXPECT_THAT(ValidateManifest(ParseManifest(R"pb(items { family: "Axpy" })pb"), "SubmitJob"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "SubmitJob: items[0].family: 'Axpy' is not a family name "
                       "([a-z][a-z0-9_]*)"));
  EXPECT_OK(ValidateManifest(ParseManifest(R"pb(arch: "sm_90a"
                                                items {
                                                  family: "axpy"
                                                  dims { name: "n" values: 1 }
                                                })pb"),
                             "SubmitJob"));
}

TEST(CountManifestTest, CountsByArithmeticAndSaturates) {
  ASSERT_OK_AND_ASSIGN(ManifestCount count, CountManifest(ParseManifest(R"pb(
                                                            items {
                                                              family: "axpy"
                                                              dims {
                                                                name: "n"
                                                                values: [ 1, 2, 3 ]
                                                              }
                                                            }
                                                            items {
                                                              family: "axpy"
                                                              dims { name: "n" values: 1 }
                                                              dtypes: FLOAT16
                                                            })pb"),
                                                          GoodFamilies()));
  EXPECT_EQ(count.problems, 3 * 2 + 1);  // axpy has two dtypes; the repeat counts
  // Seven items of 2048 values: counted, not listed.
  v1::Manifest huge;
  v1::ManifestItem* item = huge.add_items();
  item->set_family("axpy");
  v1::ManifestItem::DimValues* n = item->add_dims();
  n->set_name("n");
  for (int64_t v = 1; v <= 2048; ++v) n->add_values(v);
  for (int i = 0; i < 6; ++i) *huge.add_items() = *item;
  ASSERT_OK_AND_ASSIGN(count, CountManifest(huge, GoodFamilies()));
  EXPECT_EQ(count.problems, 7 * 2048 * 2);
  EXPECT_EQ(SaturatingMultiply(int64_t{1} << 40, int64_t{1} << 40),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(CountText(std::numeric_limits<int64_t>::max()), "more than 2^63");
  EXPECT_THAT(ExpandManifest(ParseManifest(R"pb(items {
                                                  family: "axpy"
                                                  dims { name: "n" values: 0 }
                                                })pb"),
                             GoodFamilies()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 is not positive")));
}

std::vector<ManifestProblem> ManyProblems() {
  v1::Manifest manifest;
  v1::ManifestItem* axpy = manifest.add_items();
  axpy->set_family("axpy");
  v1::ManifestItem::DimValues* n = axpy->add_dims();
  n->set_name("n");
  for (int v = 1; v <= 200; ++v) n->add_values(v * 64);
  v1::ManifestItem* row_scale = manifest.add_items();
  row_scale->set_family("row_scale");
  v1::ManifestItem::DimValues* rows = row_scale->add_dims();
  rows->set_name("rows");
  for (int v = 1; v <= 10; ++v) rows->add_values(v);
  v1::ManifestItem::DimValues* cols = row_scale->add_dims();
  cols->set_name("cols");
  for (int v = 1; v <= 10; ++v) cols->add_values(v * 32);
  absl::StatusOr<std::vector<ManifestProblem>> problems = ExpandManifest(manifest, GoodFamilies());
  EXPECT_TRUE(problems.ok()) << problems.status();
  return problems.ok() ? *problems : std::vector<ManifestProblem>();
}

TEST(ShardProblemsTest, ShardsAreDisjointCompleteAndKeepOrder) {
  const std::vector<ManifestProblem> problems = ManyProblems();
  ASSERT_EQ(problems.size(), 500);  // 200 x 2 dtypes + 10 x 10
  const std::vector<std::string> all = Describe(problems);
  constexpr int kCount = 7;
  std::map<std::string, int> shard_of;
  for (int index = 0; index < kCount; ++index) {
    ASSERT_OK_AND_ASSIGN(std::vector<ManifestProblem> shard,
                         ShardProblems(problems, index, kCount));
    EXPECT_GT(shard.size(), 30) << "shard " << index << " of " << kCount;
    const std::vector<std::string> described = Describe(shard);
    // A subsequence of the original order.
    std::vector<int64_t> positions;
    for (const std::string& problem : described) {
      positions.push_back(std::find(all.begin(), all.end(), problem) - all.begin());
    }
    EXPECT_TRUE(std::is_sorted(positions.begin(), positions.end()));
    for (const std::string& problem : described) {
      EXPECT_TRUE(shard_of.emplace(problem, index).second) << problem << " is in two shards";
    }
  }
  EXPECT_EQ(shard_of.size(), problems.size());
}

TEST(ShardProblemsTest, AProblemsShardDependsOnItAlone) {
  const std::vector<ManifestProblem> problems = ManyProblems();
  std::vector<ManifestProblem> reversed(problems.rbegin(), problems.rend());
  std::vector<ManifestProblem> every_third;
  for (size_t i = 0; i < problems.size(); i += 3) every_third.push_back(problems[i]);
  for (int index = 0; index < 5; ++index) {
    ASSERT_OK_AND_ASSIGN(std::vector<ManifestProblem> shard, ShardProblems(problems, index, 5));
    ASSERT_OK_AND_ASSIGN(std::vector<ManifestProblem> shard_of_reversed,
                         ShardProblems(reversed, index, 5));
    ASSERT_OK_AND_ASSIGN(std::vector<ManifestProblem> shard_of_subset,
                         ShardProblems(every_third, index, 5));
    std::set<std::string> expected;
    for (const std::string& p : Describe(shard)) expected.insert(p);
    const std::vector<std::string> from_reversed = Describe(shard_of_reversed);
    EXPECT_EQ(std::set<std::string>(from_reversed.begin(), from_reversed.end()), expected);
    for (const std::string& p : Describe(shard_of_subset)) EXPECT_TRUE(expected.count(p)) << p;
  }
  // Fixed across processes and machines: sha256 of "axpy\nn=1024\nfp32".
  ManifestProblem problem;
  problem.family = "axpy";
  (*problem.problem.mutable_dims())["n"] = 1024;
  problem.problem.set_dtype(v1::FLOAT32);
  EXPECT_EQ(ShardOf(problem, 1000), 120);
  EXPECT_EQ(ShardOf(problem, 1), 0);
}

TEST(ShardProblemsTest, CountZeroIsEverythingAndBadIndicesAreErrors) {
  const std::vector<ManifestProblem> problems = ManyProblems();
  ASSERT_OK_AND_ASSIGN(std::vector<ManifestProblem> all, ShardProblems(problems, 0, 0));
  EXPECT_EQ(all.size(), problems.size());
  EXPECT_THAT(
      ShardProblems(problems, 3, 3),
      StatusIs(absl::StatusCode::kInvalidArgument, "shard index 3 is not below the shard count 3"));
  EXPECT_THAT(ShardProblems(problems, 0, -1),
              StatusIs(absl::StatusCode::kInvalidArgument, "shard count -1 is negative"));
  EXPECT_THAT(ShardProblems(problems, -1, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, "shard index -1 is negative"));
  EXPECT_THAT(ShardProblems(problems, 1, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "shard index 1 without a shard count"));
}

}  // namespace
}  // namespace autotune::kernels
