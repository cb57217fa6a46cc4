// The kernel loader where there is no GPU driver (the build machine and
// CI); the GPU suite (tests/gpu/e2e_gpu_test.cc) loads and launches tuned
// kernels on a real one.
#include "client/kernel_loader.h"

#include <filesystem>
#include <string>

#include "base/file.h"
#include "base/sha256.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::client {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

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

// Found on 2bc4d71 (issue 44): a recipe compiled in the inference
// server's own process could include any file it can read, and NVRTC
// searched the server's working directory.
TEST(CompileRecipeTest, ARecipeIncludesOnlyItsHeadersAndTheToolkits) {
  ::autotune::testing::TempDir dir;
  ASSERT_OK(WriteFileAtomically(dir.File("x.h"), "#error CANARY_WORKING_DIRECTORY\n"));
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  for (const std::string& include :
       {std::string("#include \"x.h\"\n"), std::string("#include \"/etc/passwd\"\n"),
        std::string("// \\\r\n/*\n#include \"x.h\"\n// */\n")}) {
    SCOPED_TRACE(include);
    const std::string source = include + kScaleSource;
    v1::CompileRecipe recipe = ScaleRecipe("scale", {"-DBLOCK=1", "-DAUTOTUNE_DTYPE=float"});
    recipe.set_source_sha256(Sha256Hex(source));
    absl::StatusOr<LocalBinary> compiled = CompileRecipe(recipe, source, "sm_90");
    if (absl::IsFailedPrecondition(compiled.status())) GTEST_SKIP() << compiled.status();
    EXPECT_THAT(compiled.status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("include refused")));
    EXPECT_THAT(compiled.status().message(), Not(HasSubstr("CANARY")));
    EXPECT_THAT(compiled.status().message(), Not(HasSubstr("root:")));
  }
  std::filesystem::current_path(before);

  // Its own headers, by their names, and the toolkit's are fine.
  const std::string source =
      std::string("#include \"tile.h\"\n#include <cuda_fp16.h>\n") + kScaleSource;
  v1::CompileRecipe recipe = ScaleRecipe("scale", {"-DAUTOTUNE_DTYPE=float"});
  recipe.set_source_sha256(Sha256Hex(source));
  v1::SourceHeader* header = recipe.add_headers();
  header->set_name("tile.h");
  header->set_text("#define BLOCK 64\n");
  ASSERT_OK_AND_ASSIGN(LocalBinary binary, CompileRecipe(recipe, source, "sm_90"));
  EXPECT_EQ(binary.function_name, "scale");
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
