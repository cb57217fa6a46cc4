#include "client/problem_text.h"

#include <string>

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::client {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST(ParseDimsTextTest, ParsesNamesAndValues) {
  ASSERT_OK_AND_ASSIGN(auto dims, ParseDimsText("batch=8,heads=32, dim = 128"));
  EXPECT_THAT(dims, ElementsAre(Pair("batch", 8), Pair("dim", 128), Pair("heads", 32)));
}

TEST(ParseDimsTextTest, AcceptsLargeAndNegativeIntegers) {
  ASSERT_OK_AND_ASSIGN(auto dims, ParseDimsText("tokens=8589934592,offset=-1"));
  EXPECT_THAT(dims, ElementsAre(Pair("offset", -1), Pair("tokens", 8589934592)));
}

TEST(ParseDimsTextTest, RejectsBadTextSayingWhy) {
  const struct {
    std::string text;
    std::string why;
  } cases[] = {
      {"batch=x", "dimension 'batch' has value 'x', not an integer"},
      {"batch=8.5", "dimension 'batch' has value '8.5', not an integer"},
      {"batch=", "dimension 'batch' has value '', not an integer"},
      {"batch", "'batch' is not name=value"},
      {"=8", "'' is not a dimension name"},
      {"8x=1", "'8x' is not a dimension name"},
      {"batch=8,,heads=2", "empty item"},
      {"batch=8,batch=16", "dimension 'batch' is given twice"},
      {"", "no dimensions"},
      {"batch=99999999999999999999", "not an integer"},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(ParseDimsText(c.text),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.why)))
        << c.text;
  }
}

TEST(ParseDTypeTextTest, AcceptsShortAndEnumNamesInAnyCase) {
  const struct {
    std::string text;
    v1::DType dtype;
  } cases[] = {
      {"bf16", v1::BFLOAT16},       {"BFLOAT16", v1::BFLOAT16},
      {"bfloat16", v1::BFLOAT16},   {"FP32", v1::FLOAT32},
      {"fp16", v1::FLOAT16},        {"int8", v1::INT8},
      {"fp8e4m3", v1::FLOAT8_E4M3}, {"float8_e5m2", v1::FLOAT8_E5M2},
      {"uint8", v1::UINT8},
  };
  for (const auto& c : cases) {
    ASSERT_OK_AND_ASSIGN(v1::DType dtype, ParseDTypeText(c.text));
    EXPECT_EQ(dtype, c.dtype) << c.text;
  }
}

TEST(ParseDTypeTextTest, UnknownNameListsTheAcceptedOnes) {
  EXPECT_THAT(ParseDTypeText("bf17"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown dtype 'bf17'; expected one of fp32, fp16, bf16")));
  EXPECT_THAT(ParseDTypeText("dtype_unspecified"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown dtype")));
}

TEST(DTypeShortNameTest, RoundTripsEveryDType) {
  for (int value = v1::DType_MIN + 1; value <= v1::DType_MAX; ++value) {
    const auto dtype = static_cast<v1::DType>(value);
    ASSERT_OK_AND_ASSIGN(v1::DType parsed, ParseDTypeText(DTypeShortName(dtype)));
    EXPECT_EQ(parsed, dtype) << v1::DType_Name(dtype);
  }
  EXPECT_EQ(DTypeShortName(v1::DTYPE_UNSPECIFIED), "unspecified");
}

TEST(FormatParamsTest, SortsByName) {
  google::protobuf::Map<std::string, int64_t> params;
  params["num_warps"] = 4;
  params["BLOCK_M"] = 128;
  params["block_n"] = 64;
  EXPECT_EQ(FormatParams(params), "BLOCK_M=128,block_n=64,num_warps=4");
  EXPECT_EQ(FormatParams({}), "");
}

TEST(FormatDeviceTest, LeavesOutUnsetParts) {
  v1::Device device;
  device.set_name("NVIDIA H200");
  EXPECT_EQ(FormatDevice(device), "NVIDIA H200");
  device.set_compute_capability(90);
  device.set_sm_count(132);
  EXPECT_EQ(FormatDevice(device), "NVIDIA H200 (sm_90, 132 SMs)");
}

}  // namespace
}  // namespace autotune::client
