#include "cache/keys.h"

#include <cstdint>
#include <map>
#include <ostream>
#include <string>

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::cache {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;

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

TEST(CanonicalDimsTest, SortedByNameWhateverTheInsertionOrder) {
  google::protobuf::Map<std::string, int64_t> a;
  a["heads"] = 32;
  a["batch"] = 8;
  a["dim"] = 128;
  google::protobuf::Map<std::string, int64_t> b;
  b["dim"] = 128;
  b["batch"] = 8;
  b["heads"] = 32;
  EXPECT_EQ(CanonicalDims(a), "batch=8,dim=128,heads=32");
  EXPECT_EQ(CanonicalDims(a), CanonicalDims(b));
}

TEST(CanonicalDimsTest, EmptyAndNegative) {
  google::protobuf::Map<std::string, int64_t> dims;
  EXPECT_EQ(CanonicalDims(dims), "");
  dims["offset"] = -4;
  EXPECT_EQ(CanonicalDims(dims), "offset=-4");
}

TEST(ParseDimsTest, InverseOfCanonicalDims) {
  ASSERT_OK_AND_ASSIGN(auto dims, ParseDims("batch=8,dim=128,heads=32"));
  EXPECT_EQ(dims, (std::map<std::string, int64_t>{{"batch", 8}, {"dim", 128}, {"heads", 32}}));
  google::protobuf::Map<std::string, int64_t> map(dims.begin(), dims.end());
  EXPECT_EQ(CanonicalDims(map), "batch=8,dim=128,heads=32");
}

TEST(ParseDimsTest, AcceptsSpacesAndAnyOrder) {
  ASSERT_OK_AND_ASSIGN(auto dims, ParseDims(" heads = 32 , batch=8 "));
  EXPECT_EQ(dims, (std::map<std::string, int64_t>{{"batch", 8}, {"heads", 32}}));
}

TEST(ParseDimsTest, EmptyTextIsNoDims) {
  ASSERT_OK_AND_ASSIGN(auto dims, ParseDims(""));
  EXPECT_TRUE(dims.empty());
}

struct BadDimsCase {
  std::string text;
  std::string message;
  friend void PrintTo(const BadDimsCase& c, std::ostream* os) { *os << "'" << c.text << "'"; }
};

class ParseDimsErrorTest : public ::testing::TestWithParam<BadDimsCase> {};

TEST_P(ParseDimsErrorTest, NamesTheBadItem) {
  EXPECT_THAT(ParseDims(GetParam().text),
              StatusIs(absl::StatusCode::kInvalidArgument, GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    BadInputs, ParseDimsErrorTest,
    ::testing::Values(BadDimsCase{"batch", "dims: 'batch' has no value"},
                      BadDimsCase{"batch=8,heads", "dims: 'heads' has no value"},
                      BadDimsCase{"batch=", "dims: 'batch' has no value"},
                      BadDimsCase{"x=abc", "dims: 'x=abc' is not an integer"},
                      BadDimsCase{"x=1.5", "dims: 'x=1.5' is not an integer"},
                      BadDimsCase{"x=99999999999999999999",
                                  "dims: 'x=99999999999999999999' is not an integer"},
                      BadDimsCase{"batch=8,batch=16", "dims: 'batch' is given twice"},
                      BadDimsCase{"=8", "dims: '=8' has no name"},
                      BadDimsCase{"1x=8", "dims: '1x' is not a name (letters, digits, '_')"},
                      BadDimsCase{"batch=8,,heads=2", "dims: empty item in 'batch=8,,heads=2'"}));

TEST(FamilyContentHashTest, SourceFileIsNotPartOfTheHash) {
  v1::KernelFamily family;
  family.set_name("gemm");
  family.set_source("__global__ void gemm() {}");
  family.set_source_file("gemm.cu");
  v1::KernelFamily moved = family;
  moved.set_source_file("/elsewhere/gemm.cu");
  EXPECT_EQ(FamilyContentHash(family), FamilyContentHash(moved));
  EXPECT_EQ(FamilyContentHash(family).size(), 64u);
}

TEST(FamilyContentHashTest, SourceTextAndDescriptorAreInTheHash) {
  v1::KernelFamily family;
  family.set_name("gemm");
  family.set_source("__global__ void gemm() {}");
  v1::KernelFamily edited = family;
  edited.set_source("__global__ void gemm() { /* faster */ }");
  EXPECT_NE(FamilyContentHash(family), FamilyContentHash(edited));
  v1::KernelFamily more_values = family;
  more_values.add_params()->set_name("BLOCK");
  EXPECT_NE(FamilyContentHash(family), FamilyContentHash(more_values));
}

TEST(FamilyContentHashTest, StableAcrossCalls) {
  v1::KernelFamily family;
  family.set_name("softmax");
  family.add_constraints("BLOCK <= 1024");
  EXPECT_EQ(FamilyContentHash(family), FamilyContentHash(v1::KernelFamily(family)));
}

struct DTypeCase {
  std::string name;
  v1::DType dtype;
  friend void PrintTo(const DTypeCase& c, std::ostream* os) { *os << c.name; }
};

class ParseDTypeTest : public ::testing::TestWithParam<DTypeCase> {};

TEST_P(ParseDTypeTest, Accepts) {
  ASSERT_OK_AND_ASSIGN(v1::DType dtype, ParseDType(GetParam().name));
  EXPECT_EQ(dtype, GetParam().dtype);
}

INSTANTIATE_TEST_SUITE_P(
    Names, ParseDTypeTest,
    ::testing::Values(DTypeCase{"fp32", v1::FLOAT32}, DTypeCase{"fp16", v1::FLOAT16},
                      DTypeCase{"bf16", v1::BFLOAT16}, DTypeCase{"fp64", v1::FLOAT64},
                      DTypeCase{"int8", v1::INT8}, DTypeCase{"int32", v1::INT32},
                      DTypeCase{"int64", v1::INT64}, DTypeCase{"uint8", v1::UINT8},
                      DTypeCase{"fp8e4m3", v1::FLOAT8_E4M3}, DTypeCase{"fp8e5m2", v1::FLOAT8_E5M2},
                      DTypeCase{"float32", v1::FLOAT32}, DTypeCase{"bfloat16", v1::BFLOAT16},
                      DTypeCase{"float8_e4m3", v1::FLOAT8_E4M3},
                      DTypeCase{"BFLOAT16", v1::BFLOAT16},
                      DTypeCase{"FLOAT8_E5M2", v1::FLOAT8_E5M2}, DTypeCase{"BF16", v1::BFLOAT16},
                      DTypeCase{"Fp16", v1::FLOAT16}));

TEST(ParseDTypeTest, RejectsUnknownNamesListingTheKnownOnes) {
  EXPECT_THAT(ParseDType("fp4"), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("unknown dtype 'fp4' (expected one of fp32")));
  EXPECT_THAT(ParseDType(""), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("''")));
  EXPECT_THAT(ParseDType("DTYPE_UNSPECIFIED"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown dtype")));
}

TEST(DTypeNameTest, RoundTripsThroughParseDType) {
  for (int value = v1::DType_MIN + 1; value <= v1::DType_MAX; ++value) {
    const auto dtype = static_cast<v1::DType>(value);
    ASSERT_OK_AND_ASSIGN(v1::DType parsed, ParseDType(DTypeName(dtype)));
    EXPECT_EQ(parsed, dtype) << DTypeName(dtype);
  }
  EXPECT_EQ(DTypeName(v1::BFLOAT16), "bf16");
  EXPECT_EQ(DTypeName(v1::DTYPE_UNSPECIFIED), "unspecified");
}

TEST(NvrtcVersionNumberTest, OrdersNumericallyNotAsText) {
  ASSERT_OK_AND_ASSIGN(int64_t v13_0, NvrtcVersionNumber("13.0"));
  ASSERT_OK_AND_ASSIGN(int64_t v12_8, NvrtcVersionNumber("12.8"));
  ASSERT_OK_AND_ASSIGN(int64_t v12_10, NvrtcVersionNumber("12.10"));
  EXPECT_EQ(v13_0, 13000);
  EXPECT_EQ(v12_8, 12008);
  EXPECT_EQ(v12_10, 12010);
  EXPECT_LT(v12_8, v12_10);
  EXPECT_LT(v12_10, v13_0);
}

class NvrtcVersionErrorTest : public ::testing::TestWithParam<std::string> {};

TEST_P(NvrtcVersionErrorTest, NotMajorDotMinor) {
  EXPECT_THAT(NvrtcVersionNumber(GetParam()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'" + GetParam() + "' is not MAJOR.MINOR")));
}

INSTANTIATE_TEST_SUITE_P(BadVersions, NvrtcVersionErrorTest,
                         ::testing::Values("", "13", "12.8.1", "v12.8", "12.", ".8", "12.x", "-1.0",
                                           "12.1000", " 12.8"));

}  // namespace
}  // namespace autotune::cache
