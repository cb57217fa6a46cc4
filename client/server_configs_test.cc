#include "client/server_configs.h"

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::client {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::KernelSummary Gla() {
  v1::KernelSummary family;
  family.set_name("gla_decode");
  for (auto [name, bucketed] : {std::pair{"batch", true}, {"heads", false}, {"dim", false}}) {
    v1::ProblemDimension* dim = family.add_dims();
    dim->set_name(name);
    dim->set_bucketed(bucketed);
  }
  return family;
}

v1::Entry Entry(int64_t batch, int64_t dim, int64_t block_v, const std::string& tuned_at = "t1",
                const std::string& device = "NVIDIA H200") {
  v1::Entry entry;
  entry.set_family("gla_decode");
  auto& dims = *entry.mutable_problem()->mutable_dims();
  dims["batch"] = batch;
  dims["heads"] = 32;
  dims["dim"] = dim;
  entry.mutable_problem()->set_dtype(v1::BFLOAT16);
  entry.mutable_device()->set_name(device);
  auto& params = *entry.mutable_config()->mutable_params();
  params["BLOCK_V"] = block_v;
  params["VEC"] = 4;
  entry.set_tuned_at(tuned_at);
  return entry;
}

TEST(ServerConfigFilesTest, OneFilePerShapeAndDeviceKeyedByTheBucketedDimension) {
  ASSERT_OK_AND_ASSIGN(std::vector<ConfigFile> files,
                       ServerConfigFiles(Gla(),
                                         {Entry(16, 128, 64), Entry(1, 128, 16), Entry(8, 64, 16),
                                          Entry(1, 128, 8, "t0"),  // older: the newer one wins
                                          Entry(1, 128, 32, "t1", "NVIDIA A100-SXM4/80GB")},
                                         {}));
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].name, "heads=32,dim=128,device_name=NVIDIA_A100-SXM4_80GB,dtype=bf16.json");
  EXPECT_EQ(files[1].name, "heads=32,dim=128,device_name=NVIDIA_H200,dtype=bf16.json");
  EXPECT_EQ(files[1].json,
            "{\n"
            "  \"1\": {\"BLOCK_V\": 16, \"VEC\": 4},\n"
            "  \"16\": {\"BLOCK_V\": 64, \"VEC\": 4}\n"
            "}\n");
  EXPECT_EQ(files[1].entries, 2);
  EXPECT_EQ(files[2].name, "heads=32,dim=64,device_name=NVIDIA_H200,dtype=bf16.json");
}

TEST(ServerConfigFilesTest, TheBucketMustBeKnown) {
  v1::KernelSummary two = Gla();
  two.mutable_dims(1)->set_bucketed(true);
  EXPECT_THAT(ServerConfigFiles(two, {}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("2 bucketed dimensions (batch, heads); name the one")));
  ASSERT_OK_AND_ASSIGN(std::vector<ConfigFile> by_heads,
                       ServerConfigFiles(two, {Entry(1, 128, 16)}, {.bucket = "heads"}));
  ASSERT_EQ(by_heads.size(), 1u);
  EXPECT_EQ(by_heads[0].name, "batch=1,dim=128,device_name=NVIDIA_H200,dtype=bf16.json");
  EXPECT_THAT(ServerConfigFiles(Gla(), {}, {.bucket = "rows"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--bucket rows")));
  v1::Entry other = Entry(1, 128, 16);
  other.set_family("softmax");
  EXPECT_THAT(ServerConfigFiles(Gla(), {other}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("family softmax")));
}

// Found on e01f360: file names were built from dims and parameter names
// as they came, and a dim named "../../x" wrote outside --out.
TEST(ServerConfigFilesTest, NamesFromTheStoreCannotLeaveTheFolderOrBreakTheJson) {
  v1::KernelSummary family = Gla();
  family.mutable_dims(2)->set_name("../../x");
  v1::Entry entry = Entry(1, 64, 16, "t1", "GPU/../../etc \n");
  auto& dims = *entry.mutable_problem()->mutable_dims();
  dims.erase("dim");
  dims["../../x"] = 64;
  (*entry.mutable_config()->mutable_params())["A\"B\\"] = 2;
  ASSERT_OK_AND_ASSIGN(std::vector<ConfigFile> files, ServerConfigFiles(family, {entry}, {}));
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].name.find('/'), std::string::npos) << files[0].name;
  EXPECT_EQ(files[0].name, "heads=32,.._.._x=64,device_name=GPU_.._.._etc__,dtype=bf16.json");
  EXPECT_THAT(files[0].json, HasSubstr("\"A\\\"B\\\\\": 2"));
}

}  // namespace
}  // namespace autotune::client
