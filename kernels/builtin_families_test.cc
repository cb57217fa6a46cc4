// The built-in kernel families: every descriptor in kernels/ loads, its
// default manifest expands, every default problem leaves enough configs to
// tune after the constraints, and every distinct variant (and reference)
// compiles for sm_90 with the real NVRTC, without errors or warnings.
//
// Compiling takes a few minutes on a 2-core machine (about 900 variants);
// the counts and times are printed.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/compiler.h"
#include "kernels/family_loader.h"
#include "kernels/manifest.h"
#include "kernels/search_space.h"

namespace autotune::kernels {
namespace {

using ::testing::UnorderedElementsAreArray;

constexpr char kKernelsDir[] = AUTOTUNE_KERNELS_DIR;
constexpr char kArch[] = "sm_90";
// A family must leave the tuner a real choice for every default problem.
constexpr size_t kMinValidConfigs = 24;

// Every family in kernels/, with the size of its default manifest.
struct BuiltinFamily {
  const char* name;
  size_t default_problems;
};
constexpr BuiltinFamily kBuiltinFamilies[] = {
    {"gla_decode", 30},  // batch 1..64 x dim 64, 128 x 3 dtypes (heads 32)
    {"rmsnorm", 30},     // rows 64, 4096 x 5 hidden sizes x 3 dtypes
    {"softmax", 30},     // rows 64, 4096 x 5 hidden sizes x 3 dtypes
};

std::string KernelsPath(const std::string& file) { return absl::StrCat(kKernelsDir, "/", file); }

// "batch=8,dim=128,heads=32 bf16": dims sorted by name.
std::string ProblemLabel(const v1::Problem& problem) {
  std::map<std::string, int64_t> dims(problem.dims().begin(), problem.dims().end());
  std::vector<std::string> parts;
  for (const auto& [name, value] : dims) parts.push_back(absl::StrCat(name, "=", value));
  std::string dtype = v1::DType_Name(problem.dtype());
  return absl::StrCat(absl::StrJoin(parts, ","), " ", dtype);
}

struct LoadedFamily {
  v1::KernelFamily family;
  std::vector<ManifestProblem> problems;  // of <name>.manifest
  std::string manifest_arch;
};

absl::StatusOr<LoadedFamily> LoadBuiltin(const std::string& name) {
  LoadedFamily loaded;
  ASSIGN_OR_RETURN(loaded.family, LoadFamilyFile(KernelsPath(name + ".textproto")));
  ASSIGN_OR_RETURN(v1::Manifest manifest, LoadManifestFile(KernelsPath(name + ".manifest")));
  loaded.manifest_arch = manifest.arch();
  absl::flat_hash_map<std::string, v1::KernelFamily> families = {{name, loaded.family}};
  ASSIGN_OR_RETURN(loaded.problems, ExpandManifest(manifest, families));
  return loaded;
}

struct CompileJob {
  std::string what;  // problem and config, for failure messages
  CompileRequest request;
  CompileResult result;
};

// Compiles every job on `threads` threads; returns the wall time in seconds.
double CompileAll(const Nvrtc& nvrtc, std::vector<CompileJob>& jobs, int threads) {
  const auto start = std::chrono::steady_clock::now();
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < jobs.size(); i = next++) {
        jobs[i].result = Compile(nvrtc, jobs[i].request);
      }
    });
  }
  for (std::thread& thread : pool) thread.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int CompileThreads() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores, 2, 4);
}

TEST(BuiltinFamiliesTest, DirectoryHoldsExactlyTheListedFamilies) {
  ASSERT_OK_AND_ASSIGN(std::vector<v1::KernelFamily> families, LoadFamilyDirectory(kKernelsDir));
  std::vector<std::string> loaded;
  for (const v1::KernelFamily& family : families) loaded.push_back(family.name());
  std::vector<std::string> listed;
  for (const BuiltinFamily& builtin : kBuiltinFamilies) listed.push_back(builtin.name);
  EXPECT_THAT(loaded, UnorderedElementsAreArray(listed));
}

class BuiltinFamilyTest : public ::testing::TestWithParam<BuiltinFamily> {};

TEST_P(BuiltinFamilyTest, LoadsAndItsManifestExpands) {
  const BuiltinFamily& builtin = GetParam();
  ASSERT_OK_AND_ASSIGN(LoadedFamily loaded, LoadBuiltin(builtin.name));
  EXPECT_EQ(loaded.family.name(), builtin.name);
  EXPECT_FALSE(loaded.family.source().empty());
  EXPECT_EQ(loaded.manifest_arch, kArch);
  EXPECT_EQ(loaded.problems.size(), builtin.default_problems);
  for (const ManifestProblem& problem : loaded.problems) {
    EXPECT_EQ(problem.family, builtin.name) << ProblemLabel(problem.problem);
  }
  std::printf("%s: %zu default problems, %lld configs before constraints\n", builtin.name,
              loaded.problems.size(), static_cast<long long>(ConfigCount(loaded.family)));
}

TEST_P(BuiltinFamilyTest, EveryDefaultProblemHasEnoughValidConfigs) {
  const BuiltinFamily& builtin = GetParam();
  ASSERT_OK_AND_ASSIGN(LoadedFamily loaded, LoadBuiltin(builtin.name));
  ASSERT_FALSE(loaded.problems.empty());
  size_t fewest = SIZE_MAX, most = 0;
  for (const ManifestProblem& problem : loaded.problems) {
    const std::string label = ProblemLabel(problem.problem);
    ASSERT_OK_AND_ASSIGN(SearchSpace space, ExpandSearchSpace(loaded.family, problem.problem));
    EXPECT_GE(space.variants.size(), kMinValidConfigs) << label;
    // The constraints are meant to describe everything the kernel needs, so
    // no config that passes them may fail the device's launch limits.
    std::vector<std::string> dropped;
    for (const auto& [reason, count] : space.dropped) {
      dropped.push_back(absl::StrCat(count, " x ", reason));
    }
    EXPECT_TRUE(dropped.empty()) << label << ": " << absl::StrJoin(dropped, "; ");
    for (const Variant& variant : space.variants) {
      // Every built-in kernel reduces with full-warp shuffles.
      int64_t threads = 1;
      for (int64_t extent : variant.launch.block()) threads *= extent;
      EXPECT_EQ(threads % 32, 0) << label << " config #" << variant.index;
      EXPECT_GT(variant.bytes_per_call, 0) << label;
      EXPECT_GT(variant.flops_per_call, 0) << label;
    }
    fewest = std::min(fewest, space.variants.size());
    most = std::max(most, space.variants.size());
    std::printf("  %s %s: %lld configs, %lld after constraints, %zu valid\n", builtin.name,
                label.c_str(), static_cast<long long>(space.total_configs),
                static_cast<long long>(space.after_constraints), space.variants.size());
  }
  std::printf("%s: %zu to %zu valid configs per default problem\n", builtin.name, fewest, most);
}

TEST_P(BuiltinFamilyTest, EveryDistinctVariantCompilesForSm90) {
  const BuiltinFamily& builtin = GetParam();
  ASSERT_OK_AND_ASSIGN(const Nvrtc* nvrtc, Nvrtc::Load());
  ASSERT_OK_AND_ASSIGN(LoadedFamily loaded, LoadBuiltin(builtin.name));
  const std::string program_name = loaded.family.source_file().empty()
                                       ? absl::StrCat(builtin.name, ".cu")
                                       : loaded.family.source_file();

  // One job per compile key: a config shared by several problems (the same
  // dtype, dims that do not reach the source) compiles once, as in the service.
  std::map<std::string, CompileJob> by_key;
  size_t references = 0;
  auto add = [&](std::string what, std::string name_expression, std::vector<std::string> options) {
    CompileJob job{.what = std::move(what),
                   .request = {.source = loaded.family.source(),
                               .program_name = program_name,
                               .name_expression = std::move(name_expression),
                               .options = std::move(options),
                               .arch = kArch},
                   .result = {}};
    const std::string key = CompileKey(job.request, nvrtc->version());
    return by_key.emplace(key, std::move(job)).second;
  };
  for (const ManifestProblem& problem : loaded.problems) {
    const std::string label = ProblemLabel(problem.problem);
    ASSERT_OK_AND_ASSIGN(SearchSpace space, ExpandSearchSpace(loaded.family, problem.problem));
    if (add(absl::StrCat(label, " reference"), space.reference_name,
            space.reference_compile_options)) {
      ++references;
    }
    for (const Variant& variant : space.variants) {
      add(absl::StrCat(label, " ", absl::StrJoin(variant.compile_options, " ")),
          variant.name_expression, variant.compile_options);
    }
  }
  std::vector<CompileJob> jobs;
  jobs.reserve(by_key.size());
  for (auto& [key, job] : by_key) jobs.push_back(std::move(job));

  const int threads = CompileThreads();
  const double seconds = CompileAll(*nvrtc, jobs, threads);
  std::printf("%s: %zu distinct variants + %zu references compiled for %s in %.1f s "
              "(%d threads, NVRTC %s)\n",
              builtin.name, jobs.size() - references, references, kArch, seconds, threads,
              nvrtc->version().c_str());

  int failures = 0;
  for (const CompileJob& job : jobs) {
    const CompileResult& result = job.result;
    const bool ok = result.status == CompileStatus::kOk && result.cubin.rfind("\x7f" "ELF", 0) == 0 &&
                    !result.lowered_name.empty() && !absl::StrContains(result.log, "warning");
    if (ok) continue;
    // A few full reports are enough to act on; count the rest.
    if (++failures <= 5) {
      ADD_FAILURE() << job.what << " (" << job.request.name_expression
                    << "): status " << static_cast<int>(result.status) << ", cubin "
                    << result.cubin.size() << " bytes, lowered name '" << result.lowered_name
                    << "'\n"
                    << result.log;
    }
  }
  EXPECT_EQ(failures, 0) << "of " << jobs.size() << " compiles";
}

INSTANTIATE_TEST_SUITE_P(Builtin, BuiltinFamilyTest, ::testing::ValuesIn(kBuiltinFamilies),
                         [](const ::testing::TestParamInfo<BuiltinFamily>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace autotune::kernels
