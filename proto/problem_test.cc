#include "proto/problem.h"

#include <cstdint>
#include <limits>
#include <map>
#include <ostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;

TEST(FormatDimsTest, SortedByNameWhateverTheInsertionOrder) {
  google::protobuf::Map<std::string, int64_t> a;
  a["heads"] = 32;
  a["batch"] = 8;
  a["dim"] = 128;
  google::protobuf::Map<std::string, int64_t> b;
  b["dim"] = 128;
  b["batch"] = 8;
  b["heads"] = 32;
  EXPECT_EQ(FormatDims(a), "batch=8,dim=128,heads=32");
  EXPECT_EQ(FormatDims(a), FormatDims(b));
}

TEST(FormatDimsTest, EmptyAndNegative) {
  google::protobuf::Map<std::string, int64_t> dims;
  EXPECT_EQ(FormatDims(dims), "");
  dims["offset"] = -4;
  EXPECT_EQ(FormatDims(dims), "offset=-4");
}

TEST(ParseDimsTest, InverseOfFormatDims) {
  ASSERT_OK_AND_ASSIGN(auto dims, ParseDims("batch=8,dim=128,heads=32"));
  EXPECT_EQ(dims, (std::map<std::string, int64_t>{{"batch", 8}, {"dim", 128}, {"heads", 32}}));
  google::protobuf::Map<std::string, int64_t> map(dims.begin(), dims.end());
  EXPECT_EQ(FormatDims(map), "batch=8,dim=128,heads=32");
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

// Entries are keyed by this hash: if it changes for the same family, every
// user's cache is orphaned. The expected value is the sha256 of the wire
// bytes written out by hand (fields 1, 3, 5 and 7; source_file, field 4,
// left out), computed outside this code:
//   printf '\x0a\x04axpy\x1a\x01x\x2a\x01k\x3a\x03B<8' | sha256sum
TEST(FamilyContentHashTest, GoldenValue) {
  v1::KernelFamily family;
  family.set_name("axpy");
  family.set_source("x");
  family.set_source_file("kernels/axpy.cu");
  family.set_kernel_name("k");
  family.add_constraints("B<8");
  EXPECT_EQ(FamilyContentHash(family),
            "26c3d3eec97473f2e8e8c1a8cbf7310163b94688f436b7681559df9dd4da0e29");
}

TEST(NamesTest, Identifiers) {
  for (const char* good : {"n", "_x", "BLOCK_M", "dim2"}) EXPECT_TRUE(IsIdentifier(good)) << good;
  for (const char* bad : {"", "2x", "a-b", "a b", "a.b"}) EXPECT_FALSE(IsIdentifier(bad)) << bad;
}

TEST(NamesTest, FamilyNames) {
  for (const char* good : {"axpy", "gla_decode", "fp8_gemm2"}) EXPECT_TRUE(IsFamilyName(good));
  for (const char* bad : {"", "Axpy", "_x", "2x", "gla-decode", "a b"}) {
    EXPECT_FALSE(IsFamilyName(bad)) << bad;
  }
}

TEST(NamesTest, GpuArchitectures) {
  for (const char* good : {"sm_90", "sm_90a", "sm_100a", "sm_75"}) EXPECT_TRUE(IsGpuArch(good));
  EXPECT_TRUE(ArchRunsOn("sm_90", 90));
  EXPECT_TRUE(ArchRunsOn("sm_90a", 90));
  EXPECT_FALSE(ArchRunsOn("sm_90a", 100));
  EXPECT_FALSE(ArchRunsOn("sm_90", 89));
  EXPECT_TRUE(ArchRunsOn("sm_100f", 103));
  EXPECT_FALSE(ArchRunsOn("sm_103f", 100));
  EXPECT_FALSE(ArchRunsOn("sm_100f", 120));
  EXPECT_FALSE(ArchRunsOn("compute_90", 90));
  for (const char* bad :
       {"", "sm_", "compute_90", "sm_a", "sm_90ab", "SM_90", "sm_9", "sm_90z", "sm_1000"}) {
    EXPECT_FALSE(IsGpuArch(bad)) << bad;
  }
}

TEST(DTypeTableTest, SizesAndTypes) {
  EXPECT_EQ(DTypeBytes(v1::BFLOAT16), 2);
  EXPECT_EQ(DTypeBytes(v1::FLOAT64), 8);
  EXPECT_EQ(DTypeBytes(v1::FLOAT8_E4M3), 1);
  EXPECT_EQ(DTypeBytes(v1::DTYPE_UNSPECIFIED), 0);
  ASSERT_NE(FindDType(v1::INT8), nullptr);
  EXPECT_EQ(FindDType(v1::INT8)->cuda_type, "signed char");
  EXPECT_TRUE(FindDType(v1::INT8)->is_integer);
  EXPECT_FALSE(FindDType(v1::FLOAT16)->is_integer);
  EXPECT_EQ(FindDType(static_cast<v1::DType>(99)), nullptr);
  EXPECT_EQ(DTypeName(static_cast<v1::DType>(99)), "dtype 99");
  // Manifests and descriptors may spell a dtype as the CLI does: each short
  // name is an alias of its value in the enum, and output keeps printing
  // the constant.
  for (int value = v1::DType_MIN + 1; value <= v1::DType_MAX; ++value) {
    const auto dtype = static_cast<v1::DType>(value);
    const google::protobuf::EnumValueDescriptor* alias =
        v1::DType_descriptor()->FindValueByName(DTypeName(dtype));
    ASSERT_NE(alias, nullptr) << DTypeName(dtype) << " is not a name in enum DType";
    EXPECT_EQ(alias->number(), value) << DTypeName(dtype);
  }
  EXPECT_EQ(v1::DType_Name(v1::BFLOAT16), "BFLOAT16");
  // Every value of the enum has a row.
  for (int value = v1::DType_MIN + 1; value <= v1::DType_MAX; ++value) {
    if (!v1::DType_IsValid(value)) continue;
    EXPECT_NE(FindDType(static_cast<v1::DType>(value)), nullptr) << value;
  }
}

v1::KernelFamily TwoDimFamily() {
  v1::KernelFamily family;
  family.set_name("axpy");
  v1::ProblemDimension* n = family.add_dims();
  n->set_name("n");
  n->set_max(4096);
  v1::ProblemDimension* batch = family.add_dims();
  batch->set_name("batch");
  batch->set_min(2);
  family.add_dtypes(v1::FLOAT32);
  family.add_dtypes(v1::FLOAT16);
  return family;
}

v1::Problem MakeProblem(std::map<std::string, int64_t> dims, v1::DType dtype) {
  v1::Problem problem;
  problem.mutable_dims()->insert(dims.begin(), dims.end());
  problem.set_dtype(dtype);
  return problem;
}

TEST(ValidateProblemTest, AcceptsAProblemThatFits) {
  EXPECT_OK(ValidateProblem(TwoDimFamily(), MakeProblem({{"n", 4096}, {"batch", 2}}, v1::FLOAT16)));
}

TEST(ValidateProblemTest, NamesTheFieldAndTheRule) {
  const v1::KernelFamily family = TwoDimFamily();
  EXPECT_THAT(ValidateProblem(family, MakeProblem({{"batch", 2}}, v1::FLOAT32)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "problem.dims: missing 'n' (family 'axpy' has dims: n, batch)"));
  // A misspelt dim: missing, and the name given is named too.
  EXPECT_THAT(ValidateProblem(family, MakeProblem({{"batch", 2}, {"nn", 8}}, v1::FLOAT32)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "problem.dims: missing 'n' (family 'axpy' has dims: n, batch); 'nn' is "
                       "not one of them"));
  EXPECT_THAT(ValidateProblem(family, MakeProblem({{"n", 0}, {"batch", 2}}, v1::FLOAT32)),
              StatusIs(absl::StatusCode::kInvalidArgument, "problem.dims['n']: 0 is not positive"));
  EXPECT_THAT(ValidateProblem(family, MakeProblem({{"n", 5000}, {"batch", 2}}, v1::FLOAT32)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "problem.dims['n']: 5000 is above the max 4096"));
  EXPECT_THAT(ValidateProblem(family, MakeProblem({{"n", 8}, {"batch", 1}}, v1::FLOAT32),
                              "requests[2].problem"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "requests[2].problem.dims['batch']: 1 is below the min 2"));
  EXPECT_THAT(ValidateProblem(family, MakeProblem({{"n", 8}, {"batch", 2}}, v1::FLOAT64)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "problem.dtype: fp64 is not supported by family 'axpy' (fp32, fp16)"));
  EXPECT_THAT(ValidateProblem(family, MakeProblem({{"n", 8}, {"batch", 2}}, v1::DTYPE_UNSPECIFIED)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("problem.dtype: unspecified is not supported")));
}

// Map order differs between processes and inserts; the answer must not.
TEST(ValidateProblemTest, FirstUnknownDimIsTheFirstByName) {
  const v1::KernelFamily family = TwoDimFamily();
  for (int round = 0; round < 8; ++round) {
    v1::Problem problem = MakeProblem({{"n", 8}, {"batch", 2}}, v1::FLOAT32);
    for (int i = 0; i < 16; ++i)
      (*problem.mutable_dims())[absl::StrCat("z", (i * 7 + round) % 16)] = 1;
    (*problem.mutable_dims())["extra"] = 1;
    EXPECT_THAT(ValidateProblem(family, problem),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         "problem.dims['extra']: not a dim of family 'axpy' (dims: n, batch)"));
  }
}

TEST(ProblemContextTest, FamilyDimsDtype) {
  EXPECT_EQ(ProblemContext("axpy", MakeProblem({{"n", 8}, {"batch", 2}}, v1::BFLOAT16)),
            "axpy batch=2,n=8 bf16");
}

TEST(ConfigCountTest, ProductSaturating) {
  v1::KernelFamily family;
  EXPECT_EQ(ConfigCount(family), 1);
  for (int i = 0; i < 3; ++i) {
    v1::TunableParameter* param = family.add_params();
    for (int v = 0; v < 4; ++v) param->add_values(v);
  }
  EXPECT_EQ(ConfigCount(family), 64);
  family.add_params();
  EXPECT_EQ(ConfigCount(family), 0);
  family.mutable_params()->RemoveLast();
  for (int i = 0; i < 40; ++i) {
    v1::TunableParameter* param = family.add_params();
    for (int v = 0; v < 4; ++v) param->add_values(v);
  }
  EXPECT_EQ(ConfigCount(family), std::numeric_limits<int64_t>::max());
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
}  // namespace autotune
