// The family the README walks through (kernels/examples/): its descriptor
// loads, every problem of its manifest leaves configs to tune, its default
// config and reference compile in every dtype it lists and each variant the
// manifest plans compiles, with the real NVRTC, for the manifest's arch;
// and the README quotes each of its files whole, so what a reader copies is
// what these tests check.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/family_loader.h"
#include "kernels/gpu/compiler.h"
#include "kernels/manifest.h"
#include "kernels/search_space.h"
#include "proto/problem.h"

namespace autotune::kernels {
namespace {

using ::testing::IsEmpty;

constexpr char kSourceDir[] = AUTOTUNE_SOURCE_DIR;
constexpr char kExamplesDir[] = AUTOTUNE_SOURCE_DIR "/kernels/examples";
constexpr char kFamily[] = "bias_relu";

std::string ExamplePath(absl::string_view file) { return absl::StrCat(kExamplesDir, "/", file); }

struct Example {
  v1::KernelFamily family;
  std::string arch;  // the manifest's
  std::vector<ManifestProblem> problems;
};

absl::StatusOr<Example> LoadExample() {
  Example example;
  ASSIGN_OR_RETURN(example.family, LoadFamilyFile(ExamplePath("bias_relu.textproto")));
  ASSIGN_OR_RETURN(v1::Manifest manifest, LoadManifestFile(ExamplePath("bias_relu.manifest")));
  example.arch = manifest.arch();
  const absl::flat_hash_map<std::string, v1::KernelFamily> families = {{kFamily, example.family}};
  ASSIGN_OR_RETURN(example.problems, ExpandManifest(manifest, families));
  return example;
}

DeviceLimits Target(const Example& example) {
  DeviceLimits limits;
  limits.arch = example.arch;
  return limits;
}

std::string Label(const v1::Problem& problem) { return ProblemContext(kFamily, problem); }

TEST(ExampleFamilyTest, EveryManifestProblemLeavesConfigsToTune) {
  ASSERT_OK_AND_ASSIGN(const Example example, LoadExample());
  EXPECT_EQ(example.family.name(), kFamily);
  ASSERT_FALSE(example.problems.empty());
  for (const ManifestProblem& problem : example.problems) {
    ASSERT_OK_AND_ASSIGN(const SearchSpace space,
                         ExpandSearchSpace(example.family, problem.problem, Target(example)));
    // More than one, or there is nothing to tune.
    EXPECT_GT(space.variants.size(), 1u) << Label(problem.problem);
    // The constraints describe what the kernel needs: no config that passes
    // them is dropped for its launch.
    EXPECT_THAT(space.dropped, IsEmpty()) << Label(problem.problem);
    std::printf("  %s: %lld configs, %lld after constraints, %zu valid\n",
                Label(problem.problem).c_str(), static_cast<long long>(space.total_configs),
                static_cast<long long>(space.after_constraints), space.variants.size());
  }
}

// The baseline of the report's speedup and what a MISS falls back on.
TEST(ExampleFamilyTest, TheDefaultConfigIsValidForEveryManifestProblem) {
  ASSERT_OK_AND_ASSIGN(const Example example, LoadExample());
  ASSERT_TRUE(example.family.has_default_config());
  for (const ManifestProblem& problem : example.problems) {
    EXPECT_OK(ResolveConfig(example.family, problem.problem, example.family.default_config(),
                            Target(example))
                  .status())
        << Label(problem.problem);
  }
}

struct Compiled {
  std::string what;
  CompileRequest request;
  CompileResult result;
};

// Each compile succeeded with no warning and yields the kernel it names.
void ExpectCompiled(const std::vector<Compiled>& compiles) {
  for (const Compiled& compile : compiles) {
    EXPECT_EQ(compile.result.status, CompileStatus::kOk)
        << compile.what << " (" << compile.request.name_expression << ", "
        << absl::StrJoin(compile.request.options, " ") << "):\n"
        << compile.result.log;
    EXPECT_FALSE(absl::StrContains(compile.result.log, "warning")) << compile.what << ":\n"
                                                                   << compile.result.log;
    EXPECT_FALSE(compile.result.lowered_name.empty()) << compile.what;
  }
}

CompileRequest RequestFor(const Example& example, std::string name_expression,
                          std::vector<std::string> options) {
  return {.source = example.family.source(),
          .program_name = example.family.source_file(),
          .name_expression = std::move(name_expression),
          .options = std::move(options),
          .arch = example.arch};
}

// What `autotune check` compiles: the reference and the default config, in
// each of the family's dtypes.
TEST(ExampleFamilyTest, TheReferenceAndTheDefaultConfigCompileInEveryDtype) {
  ASSERT_OK_AND_ASSIGN(const Nvrtc* nvrtc, Nvrtc::Load());
  ASSERT_OK_AND_ASSIGN(const Example example, LoadExample());
  ASSERT_FALSE(example.problems.empty());
  std::vector<Compiled> compiles;
  for (int d = 0; d < example.family.dtypes_size(); ++d) {
    const v1::DType dtype = example.family.dtypes(d);
    v1::Problem problem = example.problems.front().problem;
    problem.set_dtype(dtype);
    ASSERT_OK_AND_ASSIGN(const SearchSpace space,
                         ExpandSearchSpace(example.family, problem, Target(example)));
    compiles.push_back(
        {.what = absl::StrCat(Label(problem), " reference"),
         .request = RequestFor(example, space.reference_name, space.reference_compile_options),
         .result = {}});
    ASSERT_OK_AND_ASSIGN(
        const Variant variant,
        ResolveConfig(example.family, problem, example.family.default_config(), Target(example)));
    compiles.push_back(
        {.what = absl::StrCat(Label(problem), " default config"),
         .request = RequestFor(example, variant.name_expression, variant.compile_options),
         .result = {}});
  }
  for (Compiled& compile : compiles) compile.result = Compile(*nvrtc, compile.request);
  ExpectCompiled(compiles);
}

// What `autotune warmup --compile-only` of the manifest compiles: each
// distinct variant once.
TEST(ExampleFamilyTest, EveryVariantTheManifestPlansCompiles) {
  ASSERT_OK_AND_ASSIGN(const Nvrtc* nvrtc, Nvrtc::Load());
  ASSERT_OK_AND_ASSIGN(const Example example, LoadExample());
  std::map<std::string, Compiled> by_key;
  for (const ManifestProblem& problem : example.problems) {
    ASSERT_OK_AND_ASSIGN(const SearchSpace space,
                         ExpandSearchSpace(example.family, problem.problem, Target(example)));
    for (const Variant& variant : space.variants) {
      CompileRequest request =
          RequestFor(example, variant.name_expression, variant.compile_options);
      const std::string key = CompileKey(request, nvrtc->version());
      by_key.emplace(
          key,
          Compiled{.what = Label(problem.problem), .request = std::move(request), .result = {}});
    }
  }
  std::vector<Compiled> compiles;
  for (auto& [key, compile] : by_key) {
    compile.result = Compile(*nvrtc, compile.request);
    compiles.push_back(std::move(compile));
  }
  std::printf("%zu distinct variants compiled for %s\n", compiles.size(), example.arch.c_str());
  ExpectCompiled(compiles);
}

// The bodies of the fenced code blocks of a Markdown text.
std::vector<std::string> CodeBlocks(absl::string_view markdown) {
  std::vector<std::string> blocks;
  bool inside = false;
  std::string block;
  for (absl::string_view line : absl::StrSplit(markdown, '\n')) {
    if (absl::StartsWith(line, "```")) {
      if (inside) blocks.push_back(block);
      inside = !inside;
      block.clear();
      continue;
    }
    if (inside) absl::StrAppend(&block, line, "\n");
  }
  return blocks;
}

TEST(ExampleFamilyTest, TheReadmeQuotesEveryExampleFileWhole) {
  ASSERT_OK_AND_ASSIGN(const std::string readme, ReadFile(absl::StrCat(kSourceDir, "/README.md")));
  const std::vector<std::string> blocks = CodeBlocks(readme);
  std::set<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(kExamplesDir)) {
    files.insert(entry.path().filename().string());
  }
  ASSERT_FALSE(files.empty());
  for (const std::string& file : files) {
    ASSERT_OK_AND_ASSIGN(const std::string text, ReadFile(ExamplePath(file)));
    EXPECT_TRUE(std::find(blocks.begin(), blocks.end(), text) != blocks.end())
        << "README.md has no code block that is exactly kernels/examples/" << file
        << "; copy the file into its block whole";
  }
}

// A path into kernels/examples/ that a page names exists.
TEST(ExampleFamilyTest, EveryExamplePathTheDocsNameExists) {
  std::vector<std::string> pages = {absl::StrCat(kSourceDir, "/README.md")};
  for (const auto& entry : std::filesystem::directory_iterator(absl::StrCat(kSourceDir, "/docs"))) {
    if (entry.path().extension() == ".md") pages.push_back(entry.path().string());
  }
  const std::regex path_pattern("kernels/examples/[A-Za-z0-9_.-]+");
  int named = 0;
  for (const std::string& page : pages) {
    ASSERT_OK_AND_ASSIGN(const std::string text, ReadFile(page));
    for (auto it = std::sregex_iterator(text.begin(), text.end(), path_pattern);
         it != std::sregex_iterator(); ++it) {
      std::string path = it->str();
      while (!path.empty() && path.back() == '.') path.pop_back();  // a sentence's full stop
      ++named;
      EXPECT_TRUE(std::filesystem::exists(absl::StrCat(kSourceDir, "/", path)))
          << page << " names " << path << ", which does not exist";
    }
  }
  EXPECT_GT(named, 0) << "the README names no file of kernels/examples/";
}

}  // namespace
}  // namespace autotune::kernels
