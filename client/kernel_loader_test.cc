// The kernel loader where there is no GPU driver (the build machine and
// CI); the GPU suite (tests/gpu/e2e_gpu_test.cc) loads and launches tuned
// kernels on a real one.
#include "client/kernel_loader.h"

#include "base/sha256.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::client {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kScaleSource[] = R"(
#ifndef BLOCK
#error BLOCK is not set
#endif
extern "C" __global__ void scale(AUTOTUNE_DTYPE* y, const AUTOTUNE_DTYPE* x, long n) {
  long i = (long)blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) y[i] = 2 * x[i];
}
template <int TILE>
__global__ void tiled(float* y) { y[threadIdx.x % TILE] = TILE; }
)";

v1::CompileRecipe ScaleRecipe(std::string name_expression, std::vector<std::string> options) {
  v1::CompileRecipe recipe;
  recipe.set_source_sha256(Sha256Hex(kScaleSource));
  recipe.set_program_name("scale.cu");
  recipe.set_name_expression(std::move(name_expression));
  for (std::string& option : options) recipe.add_options(std::move(option));
  return recipe;
}

// The recipes a kernel loader compiles when no binary loads, with the real
// NVRTC (the CUDA toolkit is on the build machine; no GPU is needed).
TEST(CompileRecipeTest, CompilesWithTheRecipesOptionsAndNamesTheFunction) {
  absl::StatusOr<LocalBinary> plain = CompileRecipe(
      ScaleRecipe("scale", {"-DBLOCK=128", "-DAUTOTUNE_DTYPE=float"}), kScaleSource, "sm_90");
  if (absl::IsFailedPrecondition(plain.status())) GTEST_SKIP() << plain.status();
  ASSERT_OK(plain.status());
  EXPECT_EQ(plain->function_name, "scale");
  EXPECT_EQ(plain->cubin.substr(0, 4),
            "\x7f"
            "ELF");
  EXPECT_FALSE(plain->nvrtc_version.empty());

  ASSERT_OK_AND_ASSIGN(
      LocalBinary templated,
      CompileRecipe(ScaleRecipe("tiled<32>", {"-DBLOCK=1", "-DAUTOTUNE_DTYPE=float"}), kScaleSource,
                    "sm_90"));
  EXPECT_THAT(templated.function_name, HasSubstr("tiled"));
  EXPECT_NE(templated.function_name, "tiled<32>");  // the lowered (mangled) name
}

TEST(CompileRecipeTest, ACompileErrorCarriesNvrtcsLog) {
  absl::StatusOr<LocalBinary> missing_define =
      CompileRecipe(ScaleRecipe("scale", {"-DAUTOTUNE_DTYPE=float"}), kScaleSource, "sm_90");
  if (absl::IsFailedPrecondition(missing_define.status())) {
    GTEST_SKIP() << missing_define.status();
  }
  EXPECT_THAT(missing_define.status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("BLOCK is not set")));
  EXPECT_THAT(missing_define.status().message(), HasSubstr("scale.cu (scale)"));
}

TEST(CompileRecipeTest, ASourceThatIsNotTheRecipesIsRefused) {
  EXPECT_THAT(CompileRecipe(ScaleRecipe("scale", {"-DBLOCK=1"}), "// another source", "sm_90"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("does not match the recipe's sha256")));
}

TEST(KernelLoaderTest, WithoutADriverOpenSaysWhatIsMissing) {
  absl::StatusOr<std::unique_ptr<KernelLoader>> loader = KernelLoader::Open(0);
  if (loader.ok()) GTEST_SKIP() << "a CUDA driver and GPU are here: the GPU suite covers loading";
  EXPECT_THAT(loader.status(), StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
  EXPECT_FALSE(loader.status().message().empty());
}

TEST(KernelLoaderTest, ANegativeOrdinalIsNoDevice) {
  absl::StatusOr<std::unique_ptr<KernelLoader>> loader = KernelLoader::Open(-1);
  EXPECT_FALSE(loader.ok());
  EXPECT_THAT(loader.status(), StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
}

}  // namespace
}  // namespace autotune::client
