#include "kernels/gpu/compiler.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/file.h"
#include "base/scoped_env.h"
#include "base/status_matchers.h"
#include "base/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::kernels {
namespace {

using ::autotune::testing::ScopedEnv;

using ::autotune::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kElfMagic[] =
    "\x7f"
    "ELF";

constexpr char kVectorScale[] = R"cu(
extern "C" __global__ void vector_scale(float* x, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}
)cu";

constexpr char kTemplateScale[] = R"cu(
template <typename T, int kItems>
__global__ void scale(T* x, T factor) {
  int base = (blockIdx.x * blockDim.x + threadIdx.x) * kItems;
  for (int i = 0; i < kItems; ++i) x[base + i] *= factor;
}
)cu";

// Line 4 lacks its semicolon; NVRTC reports it at the closing brace, line 5.
constexpr char kBroken[] = R"cu(
extern "C" __global__ void broken(float* x) {
  int i = threadIdx.x;
  x[i] = 1.0f
}
)cu";

constexpr char kNeedsBlock128[] = R"cu(
#if BLOCK != 128
#error BLOCK must be 128
#endif
extern "C" __global__ void fixed_block(float* x) { x[threadIdx.x % BLOCK] = 0.0f; }
)cu";

constexpr char kUnusedVariable[] = R"cu(
extern "C" __global__ void with_warning(float* x) {
  int unused = 3;
  x[0] = 1.0f;
}
)cu";

CompileRequest VectorScaleRequest() {
  return CompileRequest{.source = kVectorScale,
                        .program_name = "vector_scale.cu",
                        .name_expression = "vector_scale",
                        .options = {"-std=c++17"},
                        .arch = "sm_90"};
}

class CompilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<const Nvrtc*> nvrtc = Nvrtc::Load();
    ASSERT_TRUE(nvrtc.ok()) << nvrtc.status();
    nvrtc_ = *nvrtc;
  }

  const Nvrtc* nvrtc_ = nullptr;
};

TEST(NvrtcTest, LoadGivesTheSameLibraryWithItsVersion) {
  ASSERT_OK_AND_ASSIGN(const Nvrtc* first, Nvrtc::Load());
  ASSERT_OK_AND_ASSIGN(const Nvrtc* second, Nvrtc::Load());
  EXPECT_EQ(first, second);
  EXPECT_THAT(first->version(), MatchesRegex("[0-9]+\\.[0-9]+"));
  EXPECT_THAT(first->path(), HasSubstr("libnvrtc.so"));
}

TEST(NvrtcTest, SearchPathsPutTheOverrideFirst) {
  {
    ScopedEnv env("AUTOTUNE_NVRTC", std::nullopt);
    EXPECT_THAT(Nvrtc::SearchPaths(), ElementsAre("libnvrtc.so.13", "libnvrtc.so",
                                                  "/usr/local/cuda/lib64/libnvrtc.so.13"));
  }
  {
    ScopedEnv env("AUTOTUNE_NVRTC", "");
    EXPECT_THAT(Nvrtc::SearchPaths(), ElementsAre("libnvrtc.so.13", "libnvrtc.so",
                                                  "/usr/local/cuda/lib64/libnvrtc.so.13"));
  }
  ScopedEnv env("AUTOTUNE_NVRTC", "/opt/nvrtc/libnvrtc.so.13");
  EXPECT_THAT(Nvrtc::SearchPaths(),
              ElementsAre("/opt/nvrtc/libnvrtc.so.13", "libnvrtc.so.13", "libnvrtc.so",
                          "/usr/local/cuda/lib64/libnvrtc.so.13"));
}

TEST(NvrtcTest, OverrideIsTheLibraryLoaded) {
  ScopedEnv env("AUTOTUNE_NVRTC", "/usr/local/cuda/lib64/libnvrtc.so.13");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvrtc> nvrtc, Nvrtc::LoadFrom(Nvrtc::SearchPaths()));
  EXPECT_EQ(nvrtc->path(), "/usr/local/cuda/lib64/libnvrtc.so.13");
}

TEST(NvrtcTest, MissingLibraryNamesEveryPathTried) {
  ScopedEnv env("AUTOTUNE_NVRTC", "/nonexistent/libnvrtc.so");
  EXPECT_THAT(Nvrtc::LoadFrom({Nvrtc::SearchPaths().front(), "/also/missing/libnvrtc.so.13"}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("cannot load NVRTC"), HasSubstr("AUTOTUNE_NVRTC"),
                             HasSubstr("/nonexistent/libnvrtc.so: "),
                             HasSubstr("/also/missing/libnvrtc.so.13: "),
                             HasSubstr("No such file or directory"))));
}

TEST(NvrtcTest, NoPathsIsAnError) {
  EXPECT_THAT(Nvrtc::LoadFrom({}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no paths")));
}

TEST(NvrtcTest, LibraryWithoutNvrtcSymbolsNamesTheSymbol) {
  // libc opens everywhere and has none of NVRTC's entry points.
  EXPECT_THAT(Nvrtc::LoadFrom({"libc.so.6", "libnvrtc.so.13"}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("libc.so.6"), HasSubstr("symbol nvrtcVersion not found"))));
}

TEST(NvrtcTest, BuiltinsFoundNowhereNameBothPlacesAndWhatToSet) {
  ::autotune::testing::TempDir dir;
  EXPECT_THAT(Nvrtc::LoadBuiltins(dir.path(), "libnvrtc-builtins.so.99.9"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("libnvrtc-builtins.so.99.9 is neither in " + dir.path()),
                             HasSubstr("nor on the loader's path"),
                             HasSubstr("add the folder that holds it to LD_LIBRARY_PATH"))));
}

// A toolkit in a folder the loader does not search (a copy of NVRTC and its
// builtins in a fresh directory): the builtins beside the NVRTC are the ones
// loaded, and it compiles.
TEST(NvrtcTest, TheBuiltinsBesideTheLoadedNvrtcAreTheOnesItUses) {
  const std::string toolkit = "/usr/local/cuda/lib64";
  const std::string library = toolkit + "/libnvrtc.so.13";
  if (access(library.c_str(), R_OK) != 0) GTEST_SKIP() << library << " is not installed";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvrtc> installed, Nvrtc::LoadFrom({library}));
  const std::string builtins = "libnvrtc-builtins.so." + installed->version();
  ::autotune::testing::TempDir dir;
  std::error_code error;
  std::filesystem::copy_file(library, dir.File("libnvrtc.so.13"), error);
  ASSERT_FALSE(error) << error.message();
  std::filesystem::copy_file(toolkit + "/" + builtins, dir.File(builtins), error);
  ASSERT_FALSE(error) << error.message();

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvrtc> copied,
                       Nvrtc::LoadFrom({dir.File("libnvrtc.so.13")}));
  std::ifstream maps("/proc/self/maps");
  const std::string mapped{std::istreambuf_iterator<char>(maps), std::istreambuf_iterator<char>()};
  EXPECT_THAT(mapped, HasSubstr(dir.File(builtins)));
  CompileResult result = Compile(*copied, VectorScaleRequest());
  EXPECT_EQ(result.status, CompileStatus::kOk) << result.log;
}

TEST(NvrtcTest, LoadFromGivesAnIndependentObject) {
  ASSERT_OK_AND_ASSIGN(const Nvrtc* shared, Nvrtc::Load());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Nvrtc> own,
                       Nvrtc::LoadFrom({"/nonexistent/libnvrtc.so", "libnvrtc.so.13"}));
  EXPECT_NE(own.get(), shared);
  EXPECT_EQ(own->path(), "libnvrtc.so.13");
  EXPECT_EQ(own->version(), shared->version());
  CompileResult result = Compile(*own, VectorScaleRequest());
  EXPECT_EQ(result.status, CompileStatus::kOk) << result.log;
}

TEST_F(CompilerTest, ExternCKernelCompilesToCubin) {
  CompileResult result = Compile(*nvrtc_, VectorScaleRequest());
  ASSERT_EQ(result.status, CompileStatus::kOk) << result.log;
  EXPECT_THAT(result.cubin, StartsWith(kElfMagic));
  EXPECT_GT(result.cubin.size(), 64u);
  EXPECT_EQ(result.lowered_name, "vector_scale");
}

TEST_F(CompilerTest, FeatureSpecificArchCompiles) {
  CompileRequest request = VectorScaleRequest();
  request.arch = "sm_90a";
  CompileResult result = Compile(*nvrtc_, request);
  ASSERT_EQ(result.status, CompileStatus::kOk) << result.log;
  EXPECT_THAT(result.cubin, StartsWith(kElfMagic));
}

TEST_F(CompilerTest, TemplateInstantiationGivesMangledName) {
  CompileRequest request{.source = kTemplateScale,
                         .program_name = "scale.cu",
                         .name_expression = "scale<float, 4>",
                         .options = {},
                         .arch = "sm_90"};
  CompileResult four = Compile(*nvrtc_, request);
  ASSERT_EQ(four.status, CompileStatus::kOk) << four.log;
  EXPECT_THAT(four.cubin, StartsWith(kElfMagic));
  EXPECT_THAT(four.lowered_name, StartsWith("_Z"));
  EXPECT_THAT(four.lowered_name, HasSubstr("scale"));
  // The symbol is in the image, so a module load can find it.
  EXPECT_THAT(four.cubin, HasSubstr(four.lowered_name));

  request.name_expression = "scale<float, 8>";
  CompileResult eight = Compile(*nvrtc_, request);
  ASSERT_EQ(eight.status, CompileStatus::kOk) << eight.log;
  EXPECT_THAT(eight.lowered_name, StartsWith("_Z"));
  EXPECT_NE(eight.lowered_name, four.lowered_name);
}

TEST_F(CompilerTest, SyntaxErrorReportsProgramNameAndLine) {
  CompileResult result = Compile(*nvrtc_, {.source = kBroken,
                                           .program_name = "broken.cu",
                                           .name_expression = "broken",
                                           .options = {},
                                           .arch = "sm_90"});
  EXPECT_EQ(result.status, CompileStatus::kCompileError);
  EXPECT_THAT(result.log, HasSubstr("broken.cu(5): error: expected a \";\""));
  EXPECT_THAT(result.log, HasSubstr("1 error detected in the compilation of \"broken.cu\""));
  EXPECT_TRUE(result.cubin.empty());
  EXPECT_TRUE(result.lowered_name.empty());
}

TEST_F(CompilerTest, UnknownKernelNameIsCompileError) {
  CompileRequest request = VectorScaleRequest();
  request.name_expression = "no_such_kernel";
  CompileResult result = Compile(*nvrtc_, request);
  EXPECT_EQ(result.status, CompileStatus::kCompileError);
  EXPECT_THAT(result.log, HasSubstr("no_such_kernel"));
}

TEST_F(CompilerTest, DefinesReachTheSource) {
  CompileRequest request{.source = kNeedsBlock128,
                         .program_name = "fixed_block.cu",
                         .name_expression = "fixed_block",
                         .options = {},
                         .arch = "sm_90"};
  CompileResult undefined = Compile(*nvrtc_, request);
  EXPECT_EQ(undefined.status, CompileStatus::kCompileError);
  EXPECT_THAT(undefined.log, HasSubstr("fixed_block.cu(3)"));
  EXPECT_THAT(undefined.log, HasSubstr("BLOCK must be 128"));

  request.options = {"-DBLOCK=64"};
  CompileResult wrong = Compile(*nvrtc_, request);
  EXPECT_EQ(wrong.status, CompileStatus::kCompileError);
  EXPECT_THAT(wrong.log, HasSubstr("BLOCK must be 128"));

  request.options = {"-DBLOCK=128"};
  CompileResult right = Compile(*nvrtc_, request);
  EXPECT_EQ(right.status, CompileStatus::kOk) << right.log;
  EXPECT_THAT(right.cubin, StartsWith(kElfMagic));
  EXPECT_EQ(right.lowered_name, "fixed_block");
}

TEST_F(CompilerTest, HeadersAreIncludedFromMemory) {
  CompileRequest request{.source = "#include \"detail/block.cuh\"\n" + std::string(kNeedsBlock128),
                         .program_name = "fixed_block.cu",
                         .name_expression = "fixed_block",
                         .options = {},
                         .arch = "sm_90",
                         .headers = {{"detail/block.cuh", "#define BLOCK 128\n"}}};
  CompileResult result = Compile(*nvrtc_, request);
  EXPECT_EQ(result.status, CompileStatus::kOk) << result.log;
  EXPECT_EQ(result.lowered_name, "fixed_block");

  request.headers.clear();
  CompileResult missing = Compile(*nvrtc_, request);
  EXPECT_EQ(missing.status, CompileStatus::kCompileError);
  EXPECT_THAT(missing.log, HasSubstr("include refused: fixed_block.cu:1: #include "
                                     "\"detail/block.cuh\" is neither a header of the family's"));
}

// Runs `body` with the working directory at `dir`, then goes back.
template <typename Body>
void InWorkingDirectory(const std::string& dir, Body body) {
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  body();
  std::filesystem::current_path(before);
}

// Found on 2bc4d71 (issue 44): NVRTC searched the folder of the program's
// source, the process's working directory, before the toolkit's, for a
// quoted include: a file planted there as "cuda_fp16.h" was compiled.
TEST_F(CompilerTest, TheWorkingDirectoryIsNeverSearched) {
  if (nvrtc_->include_dir().empty()) GTEST_SKIP() << "no CUDA toolkit headers here";
  ::autotune::testing::TempDir dir;
  ASSERT_OK(WriteFileAtomically(dir.File("cuda_fp16.h"), "#error CANARY_WORKING_DIRECTORY\n"));
  CompileRequest request{.source =
                             "#include \"cuda_fp16.h\"\n"
                             "extern \"C\" __global__ void half_one(__half* x) {\n"
                             "  x[0] = __float2half(1.0f);\n}\n",
                         .program_name = "half_one.cu",
                         .name_expression = "half_one",
                         .options = {},
                         .arch = "sm_90"};
  InWorkingDirectory(dir.path(), [&] {
    CompileResult result = Compile(*nvrtc_, request);
    EXPECT_EQ(result.status, CompileStatus::kOk) << result.log;
    EXPECT_THAT(result.log, Not(HasSubstr("CANARY")));

    // A name only the working directory holds is refused before NVRTC runs.
    ASSERT_OK(WriteFileAtomically(dir.File("x.h"), "#error CANARY_WORKING_DIRECTORY\n"));
    request.source = "#include \"x.h\"\n" + request.source;
    CompileResult planted = Compile(*nvrtc_, request);
    EXPECT_EQ(planted.status, CompileStatus::kCompileError);
    EXPECT_THAT(planted.log, HasSubstr("include refused: half_one.cu:1: #include \"x.h\""));
    EXPECT_THAT(planted.log, Not(HasSubstr("CANARY")));
  });
}

TEST_F(CompilerTest, SuccessKeepsWarningsInLog) {
  CompileResult result = Compile(*nvrtc_, {.source = kUnusedVariable,
                                           .program_name = "with_warning.cu",
                                           .name_expression = "with_warning",
                                           .options = {},
                                           .arch = "sm_90"});
  ASSERT_EQ(result.status, CompileStatus::kOk) << result.log;
  EXPECT_THAT(result.log, HasSubstr("with_warning.cu(3): warning"));
  EXPECT_THAT(result.log, HasSubstr("\"unused\""));
}

TEST_F(CompilerTest, CleanCompileHasEmptyLog) {
  CompileResult result = Compile(*nvrtc_, VectorScaleRequest());
  ASSERT_EQ(result.status, CompileStatus::kOk) << result.log;
  EXPECT_EQ(result.log, "");
}

TEST_F(CompilerTest, InvalidArchIsRejected) {
  for (const char* arch : {"", "90", "sm90", "sm_", "sm_9", "sm_1000", "sm_90x", "SM_90", "sm_9a0",
                           "-arch=sm_90", "sm_90 -G", "gfx90a"}) {
    SCOPED_TRACE(arch);
    CompileRequest request = VectorScaleRequest();
    request.arch = arch;
    CompileResult result = Compile(*nvrtc_, request);
    EXPECT_EQ(result.status, CompileStatus::kInvalidRequest);
    EXPECT_THAT(result.log, HasSubstr("is not a GPU architecture"));
    EXPECT_TRUE(result.cubin.empty());
  }
}

TEST_F(CompilerTest, VirtualArchIsRejectedBecauseACubinIsNeeded) {
  CompileRequest request = VectorScaleRequest();
  request.arch = "compute_90";
  CompileResult result = Compile(*nvrtc_, request);
  EXPECT_EQ(result.status, CompileStatus::kInvalidRequest);
  EXPECT_THAT(result.log,
              AllOf(HasSubstr("compute_90"), HasSubstr("PTX only"), HasSubstr("sm_90")));
}

TEST_F(CompilerTest, ArchNvrtcDoesNotKnowIsRejected) {
  CompileRequest request = VectorScaleRequest();
  request.arch = "sm_20";
  CompileResult result = Compile(*nvrtc_, request);
  EXPECT_EQ(result.status, CompileStatus::kInvalidRequest);
  EXPECT_THAT(result.log, HasSubstr("-arch=sm_20"));
}

TEST_F(CompilerTest, ArchOptionIsRejected) {
  for (std::vector<std::string> options :
       std::vector<std::vector<std::string>>{{"-arch=sm_80"},
                                             {"-DX=1", "-arch", "sm_80"},
                                             {"--gpu-architecture=sm_80"},
                                             {"-gpu-architecture=compute_80"},
                                             {"--arch=sm_80"}}) {
    SCOPED_TRACE(options[0]);
    CompileRequest request = VectorScaleRequest();
    request.options = options;
    CompileResult result = Compile(*nvrtc_, request);
    EXPECT_EQ(result.status, CompileStatus::kInvalidRequest);
    EXPECT_THAT(result.log, HasSubstr("sets the architecture"));
  }
}

// Found on e01f360: NVRTC was given any option a family carried, and
// --create-pch=PATH truncated the file, --time=PATH appended to it. The
// worker and the client's loader both compile through Compile.
TEST_F(CompilerTest, OptionsThatTouchHostFilesAreRefusedBeforeNvrtcSeesThem) {
  ::autotune::testing::TempDir dir;
  const std::string victim = dir.File("victim.txt");
  ASSERT_OK(WriteFileAtomically(victim, "keep me\n"));
  for (const std::string& option :
       {"--create-pch=" + victim, "--use-pch=" + victim, "--pch-dir=" + dir.path(),
        "--time=" + victim, "--fdevice-time-trace=" + victim, "-I" + dir.path(),
        "-include=" + victim}) {
    SCOPED_TRACE(option);
    CompileRequest request = VectorScaleRequest();
    request.options = {"-std=c++17", option};
    CompileResult result = Compile(*nvrtc_, request);
    EXPECT_EQ(result.status, CompileStatus::kInvalidRequest);
    EXPECT_THAT(result.log, HasSubstr("option refused: '" + option));
    EXPECT_TRUE(result.cubin.empty());
  }
  ASSERT_OK_AND_ASSIGN(const std::string kept, ReadFile(victim));
  EXPECT_EQ(kept, "keep me\n");
}

TEST_F(CompilerTest, OptionNvrtcRejectsIsInvalidRequest) {
  CompileRequest request = VectorScaleRequest();
  request.options = {"-O3"};
  CompileResult result = Compile(*nvrtc_, request);
  EXPECT_EQ(result.status, CompileStatus::kInvalidRequest);
  EXPECT_THAT(result.log, HasSubstr("-O3"));
}

TEST_F(CompilerTest, EmptyNameExpressionIsRejected) {
  CompileRequest request = VectorScaleRequest();
  request.name_expression = "";
  CompileResult result = Compile(*nvrtc_, request);
  EXPECT_EQ(result.status, CompileStatus::kInvalidRequest);
  EXPECT_THAT(result.log, HasSubstr("name expression"));
}

TEST_F(CompilerTest, CompilesOnFourThreadsAtOnce) {
  const CompileRequest request{.source = kTemplateScale,
                               .program_name = "scale.cu",
                               .name_expression = "scale<float, 4>",
                               .options = {},
                               .arch = "sm_90"};
  CompileResult serial = Compile(*nvrtc_, request);
  ASSERT_EQ(serial.status, CompileStatus::kOk) << serial.log;

  std::vector<CompileResult> results(4);
  std::vector<std::thread> threads;
  for (CompileResult& result : results) {
    threads.emplace_back([&] { result = Compile(*nvrtc_, request); });
  }
  for (std::thread& thread : threads) thread.join();
  for (const CompileResult& result : results) {
    ASSERT_EQ(result.status, CompileStatus::kOk) << result.log;
    EXPECT_EQ(result.lowered_name, serial.lowered_name);
    EXPECT_EQ(result.cubin, serial.cubin);
  }
}

TEST(CompileKeyTest, IsStableAndMatchesTheDocumentedFormat) {
  const CompileRequest request{.source = "S",
                               .program_name = "s.cu",
                               .name_expression = "k",
                               .options = {"-DA=1", "-DB"},
                               .arch = "sm_90"};
  // sha256("autotune.compile.v1" "1:S," "1:k," "1:2," "5:-DA=1," "3:-DB,"
  //        "5:sm_90," "4:13.0,"); keys are persisted, so this must not drift.
  EXPECT_EQ(CompileKey(request, "13.0"),
            "e54b17cc7a7de8c7b087cabba878aeefedf29c02e093e4e2f248161e62838057");
  EXPECT_EQ(CompileKey(request, "13.0"), CompileKey(request, "13.0"));
}

TEST(CompileKeyTest, ChangesWithEveryInput) {
  const CompileRequest base = VectorScaleRequest();
  const std::string key = CompileKey(base, "13.0");
  EXPECT_THAT(key, MatchesRegex("[0-9a-f]{64}"));

  std::vector<std::string> keys = {key};
  CompileRequest changed = base;
  changed.source += " ";
  keys.push_back(CompileKey(changed, "13.0"));
  changed = base;
  changed.name_expression = "vector_scale2";
  keys.push_back(CompileKey(changed, "13.0"));
  changed = base;
  changed.options = {"-DBLOCK=128", "-DITEMS=2"};
  keys.push_back(CompileKey(changed, "13.0"));
  changed.options = {"-DITEMS=2", "-DBLOCK=128"};
  keys.push_back(CompileKey(changed, "13.0"));
  changed = base;
  changed.options.push_back("-lineinfo");
  keys.push_back(CompileKey(changed, "13.0"));
  changed = base;
  changed.options.clear();
  keys.push_back(CompileKey(changed, "13.0"));
  changed = base;
  changed.arch = "sm_100";
  keys.push_back(CompileKey(changed, "13.0"));
  keys.push_back(CompileKey(base, "12.8"));
  changed = base;
  changed.headers = {{"a.h", "#define A 1\n"}};
  keys.push_back(CompileKey(changed, "13.0"));
  changed.headers = {{"a.h", "#define A 2\n"}};
  keys.push_back(CompileKey(changed, "13.0"));
  changed.headers = {{"b.h", "#define A 2\n"}};
  keys.push_back(CompileKey(changed, "13.0"));

  for (size_t i = 0; i < keys.size(); ++i) {
    for (size_t j = i + 1; j < keys.size(); ++j) {
      EXPECT_NE(keys[i], keys[j]) << "inputs " << i << " and " << j;
    }
  }
}

TEST(CompileKeyTest, FieldBoundariesCannotCollide) {
  auto key = [](std::string source, std::string name, std::vector<std::string> options,
                std::string arch, std::string version) {
    return CompileKey({.source = std::move(source),
                       .program_name = "",
                       .name_expression = std::move(name),
                       .options = std::move(options),
                       .arch = std::move(arch)},
                      version);
  };
  // The same characters split differently between fields.
  EXPECT_NE(key("ab", "c", {}, "sm_90", "13.0"), key("a", "bc", {}, "sm_90", "13.0"));
  EXPECT_NE(key("s", "k", {"-DA", "B"}, "sm_90", "13.0"), key("s", "k", {"-DAB"}, "sm_90", "13.0"));
  EXPECT_NE(key("s", "k", {"-DA", ""}, "sm_90", "13.0"), key("s", "k", {"-DA"}, "sm_90", "13.0"));
  EXPECT_NE(key("s", "k", {"sm_90"}, "", "13.0"), key("s", "k", {}, "sm_90", "13.0"));
  EXPECT_NE(key("s", "k", {}, "sm_9", "013.0"), key("s", "k", {}, "sm_90", "13.0"));
  // A field that looks like the encoding of others.
  EXPECT_NE(key("s", "k", {"1:x,"}, "sm_90", "13.0"), key("s", "k", {"1:x"}, "sm_90", "13.0"));
  EXPECT_NE(key("s,1:k", "", {}, "sm_90", "13.0"), key("s", "k", {}, "sm_90", "13.0"));
}

TEST(CompileKeyTest, TheKeyerGivesEachVariantTheKeyOfItsWholeRequest) {
  for (const std::vector<SourceHeader>& headers :
       {std::vector<SourceHeader>{}, std::vector<SourceHeader>{{"a.h", "#define A 1\n"}}}) {
    CompileRequest request = VectorScaleRequest();
    request.headers = headers;
    const CompileKeyer keyer(request.source, request.arch, "13.0", headers);
    for (const std::vector<std::string>& options :
         {std::vector<std::string>{}, std::vector<std::string>{"-DBLOCK=64"},
          std::vector<std::string>{"-DBLOCK=128", "-DITEMS=2"}}) {
      request.options = options;
      EXPECT_EQ(keyer.Key(request.name_expression, options), CompileKey(request, "13.0"));
    }
    request.name_expression = "other";
    EXPECT_EQ(keyer.Key("other", request.options), CompileKey(request, "13.0"));
  }
}

TEST(CompileKeyTest, ProgramNameIsNotPartOfTheKey) {
  CompileRequest request = VectorScaleRequest();
  const std::string key = CompileKey(request, "13.0");
  request.program_name = "renamed.cu";
  EXPECT_EQ(CompileKey(request, "13.0"), key);
}

}  // namespace
}  // namespace autotune::kernels
