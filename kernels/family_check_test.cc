// The compile check of `autotune check` and RegisterKernel, and the cubin
// reader under it, over kernels NVRTC compiles here (no GPU needed).
#include "kernels/family_check.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cubin.h"
#include "kernels/family_loader.h"
#include "kernels/gpu/compiler.h"

namespace autotune::kernels {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

constexpr char kSignatures[] = R"cu(
struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };  // as cuda.h declares it
struct Twenty { int x[5]; };
extern "C" __global__ void mixed(float* a, const float* b, int n, char c, double d, short s) {
  if (n) a[0] = b[0] + c + d + s;
}
extern "C" __global__ void with_map(float* a, const __grid_constant__ CUtensorMap map, long long n) {
  a[0] = n;
}
extern "C" __global__ void none() {}
extern "C" __global__ void by_value(Twenty t, float* p) { p[0] = t.x[4]; }
template <int kN> __global__ void templated(int* out, int v) { out[0] = v * kN; }
)cu";

class FamilyCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<const Nvrtc*> nvrtc = Nvrtc::Load();
    ASSERT_TRUE(nvrtc.ok()) << nvrtc.status();
    nvrtc_ = *nvrtc;
  }

  CompileResult CompileSignatures(const std::string& name) const {
    return Compile(*nvrtc_, CompileRequest{.source = kSignatures,
                                           .program_name = "signatures.cu",
                                           .name_expression = name,
                                           .options = {},
                                           .arch = "sm_90a"});
  }

  // Runs the whole check of `family` as `autotune check` does.
  absl::Status Check(const v1::KernelFamily& family, const std::string& arch = "sm_90") const {
    absl::StatusOr<std::vector<CheckCompile>> compiles = CheckCompiles(family, arch);
    if (!compiles.ok()) return compiles.status();
    std::vector<CheckFinding> findings;
    for (const CheckCompile& compile : *compiles) {
      const CompileResult result = Compile(*nvrtc_, compile.request);
      AddFindings(family, compile,
                  CompileOutput{.compiled = result.status == CompileStatus::kOk,
                                .log = result.log,
                                .cubin = result.cubin,
                                .lowered_name = result.lowered_name},
                  findings);
    }
    return FindingsStatus(findings, "axpy.textproto");
  }

  static v1::KernelFamily Axpy() {
    absl::StatusOr<v1::KernelFamily> family =
        LoadFamilyFile(absl::StrCat(AUTOTUNE_KERNELS_DIR, "/testdata/good/axpy.textproto"));
    EXPECT_TRUE(family.ok()) << family.status();
    return family.ok() ? *family : v1::KernelFamily();
  }

  const Nvrtc* nvrtc_ = nullptr;
};

TEST_F(FamilyCheckTest, ReadsEachParameterSizeFromTheCubin) {
  const auto sizes = [&](const std::string& name) -> std::vector<int64_t> {
    const CompileResult result = CompileSignatures(name);
    EXPECT_EQ(result.status, CompileStatus::kOk) << result.log;
    absl::StatusOr<std::vector<int64_t>> read =
        KernelParameterSizes(result.cubin, result.lowered_name);
    EXPECT_TRUE(read.ok()) << name << ": " << read.status();
    return read.ok() ? *read : std::vector<int64_t>{-1};
  };
  EXPECT_THAT(sizes("mixed"), ElementsAre(8, 8, 4, 1, 8, 2));
  EXPECT_THAT(sizes("with_map"), ElementsAre(8, 128, 8));
  EXPECT_THAT(sizes("none"), IsEmpty());
  EXPECT_THAT(sizes("by_value"), ElementsAre(20, 8));
  EXPECT_THAT(sizes("templated<4>"), ElementsAre(8, 4));
}

TEST_F(FamilyCheckTest, AnAbsentKernelOrAnImageThatIsNotACubinIsAnError) {
  const CompileResult mixed = CompileSignatures("mixed");
  ASSERT_EQ(mixed.status, CompileStatus::kOk) << mixed.log;
  EXPECT_THAT(KernelParameterSizes(mixed.cubin, "elsewhere"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no kernel 'elsewhere'")));
  EXPECT_THAT(KernelParameterSizes("not an image", "mixed"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an ELF image")));
  // Every cut of a real image is refused or read, never read past its end.
  for (size_t size = 0; size < mixed.cubin.size(); size += 97) {
    const absl::StatusOr<std::vector<int64_t>> cut =
        KernelParameterSizes(mixed.cubin.substr(0, size), mixed.lowered_name);
    EXPECT_FALSE(cut.ok() && cut->size() != 6) << size;
  }
}

TEST_F(FamilyCheckTest, AFamilyWhoseKernelsTakeWhatTheyArePassedPasses) {
  EXPECT_OK(Check(Axpy()));
}

TEST_F(FamilyCheckTest, AScalarOfTheWrongSizeIsNamedWithItsParameter) {
  v1::KernelFamily family = Axpy();
  family.mutable_scalars(1)->set_dtype(v1::INT32);  // the kernel takes long long
  EXPECT_THAT(
      Check(family),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          AllOf(HasSubstr("reference (fp32, fp16)"),
                HasSubstr("first values BLOCK=64, ELEMS=1 (fp32, fp16)"), HasSubstr("scalars[1]: "),
                HasSubstr("the kernel's parameter 4 (of 4, counted from 1) is 8 "
                          "bytes; the service passes scalar 'count' (int32) there, 4 "
                          "bytes: give scalars[1] `dtype: FLOAT64` or `dtype: INT64`"))));
}

TEST_F(FamilyCheckTest, AScalarTheKernelDoesNotTakeIsCounted) {
  v1::KernelFamily family = Axpy();
  v1::ScalarArgument* extra = family.add_scalars();
  extra->set_name("beta");
  extra->set_dtype(v1::FLOAT32);
  extra->set_value("1");
  EXPECT_THAT(Check(family),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the kernel takes 4 parameters (8, 8, 4, 8 bytes); the service "
                                 "passes 5: buffer 'x' 8 B, buffer 'y' 8 B, scalar 'alpha' "
                                 "(fp32) 4 B, scalar 'count' (int64) 8 B, scalar 'beta' (fp32) "
                                 "4 B")));
}

TEST_F(FamilyCheckTest, AKernelNameThatIsOnlyPartOfAKernelsNameNamesTheKernels) {
  v1::KernelFamily family = Axpy();
  family.set_kernel_name("axp");  // in the source, as part of "axpy"
  EXPECT_THAT(Check(family),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("does not compile"),
                             HasSubstr("(kernel_name 'axp' names no kernel of axpy.cu; its "
                                       "__global__ functions: axpy, axpy_reference)"))));
}

TEST_F(FamilyCheckTest, AKernelNameNotInTheSourceIsSaidSoInTheUsersFileName) {
  v1::KernelFamily family = Axpy();
  family.set_kernel_name("saxpy");
  const absl::Status status = Check(family);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                               AllOf(HasSubstr("does not compile"),
                                     HasSubstr("kernel_name 'saxpy' does not appear in axpy.cu"))));
  // The reference still compiles.
  EXPECT_THAT(status.message(), Not(HasSubstr("reference (")));
}

TEST_F(FamilyCheckTest, AHeaderThatIsNotShippedIsExplained) {
  v1::KernelFamily family = Axpy();
  family.set_source_file("my_axpy.cu");
  family.set_source(absl::StrCat("#include \"common.h\"\n", family.source()));
  EXPECT_THAT(Check(family),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("my_axpy.cu:1"),
                             HasSubstr("#include \"common.h\" is neither a header of the "
                                       "family's (it ships none) nor one of the CUDA toolkit's"))));
}

TEST_F(FamilyCheckTest, WithoutADefaultConfigTheFirstValuesAreCompiledAndItIsSaid) {
  const v1::KernelFamily family = Axpy();
  ASSERT_FALSE(family.has_default_config());
  EXPECT_THAT(FamilyWarnings(family), ElementsAre(HasSubstr("default_config: not set")));
  ASSERT_OK_AND_ASSIGN(std::vector<CheckCompile> compiles, CheckCompiles(family, "sm_80"));
  ASSERT_THAT(compiles, SizeIs(4));  // 2 dtypes x (reference, config)
  EXPECT_EQ(compiles[1].part, "first values BLOCK=64, ELEMS=1");
  EXPECT_EQ(compiles[1].request.arch, "sm_80");
  EXPECT_EQ(compiles[0].request.program_name, "axpy.cu");
}

TEST(ProgramNameTest, IsTheFileTheUserWroteElseTheFamilysName) {
  v1::KernelFamily family;
  family.set_name("bias_gelu");
  EXPECT_EQ(ProgramName(family), "bias_gelu.cu");
  family.set_source_file("src/inc.cu");
  EXPECT_EQ(ProgramName(family), "inc.cu");
}

}  // namespace
}  // namespace autotune::kernels
