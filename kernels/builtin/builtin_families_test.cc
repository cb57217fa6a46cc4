// The built-in kernel families: every descriptor in kernels/ loads, its
// default manifest expands, every default problem leaves enough configs to
// tune after the constraints, and the distinct variants (and references)
// compile for sm_90 with the real NVRTC, without errors or warnings, into
// cubins whose launch bounds and register counts admit the blocks the family
// launches them with. A family with more distinct variants than
// kMaxVariantsCompiledInFull (each built-in one) compiles a deterministic
// sample of kSampledVariants of them: its default config, the extremes of
// every param and an even spread of the rest. The GPU suite compiles and
// validates every one.
//
// The counts and times are printed.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
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
#include "kernels/family_check.h"
#include "kernels/family_loader.h"
#include "kernels/gpu/compiler.h"
#include "kernels/manifest.h"
#include "kernels/search_space.h"

namespace autotune::kernels {
namespace {

using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAreArray;

constexpr char kKernelsDir[] = AUTOTUNE_KERNELS_DIR;
// Every built-in manifest compiles for one of these (the GPUs the suite
// runs on are sm_90; gemm_bf16's wgmma path needs sm_90a).
constexpr const char* kManifestArchs[] = {"sm_90", "sm_90a"};
// A family must leave the tuner a real choice for every default problem.
constexpr size_t kMinValidConfigs = 24;
// Up to this many distinct variants a family compiles every one; a larger
// one (each built-in family: about 300, and 1,000 for gemm_bf16) compiles a
// sample of kSampledVariants (SampleVariants). Compiling all of them took
// 370 of the 850 CPU seconds of CI's Release test step on 2 cores. Every
// variant of every default problem is compiled, and validated, by the GPU
// suite (tests/gpu: BuiltinFamilyGpuTest).
constexpr size_t kMaxVariantsCompiledInFull = 64;
constexpr size_t kSampledVariants = 64;

// Every family in kernels/, with the size of its default manifest.
struct BuiltinFamily {
  const char* name;
  size_t default_problems;
};
// Names the parameter in test names and messages.
void PrintTo(const BuiltinFamily& builtin, std::ostream* os) { *os << builtin.name; }

constexpr BuiltinFamily kBuiltinFamilies[] = {
    {"gemm_bf16", 24},   // M 1..4096 x 4 (N, K) pairs, bf16
    {"gla_decode", 30},  // batch 1..64 x dim 64, 128 x 3 dtypes (heads 32)
    {"rmsnorm", 30},     // rows 64, 4096 x 5 hidden sizes x 3 dtypes
    {"softmax", 30},     // rows 64, 4096 x 5 hidden sizes x 3 dtypes
};

std::string KernelsPath(const std::string& file) { return absl::StrCat(kKernelsDir, "/", file); }

// "batch=8,dim=128,heads=32 BFLOAT16": dims sorted by name.
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

// What the search space sees of the target: the manifest's arch.
DeviceLimits TargetOf(const LoadedFamily& loaded) {
  DeviceLimits limits;
  limits.arch = loaded.manifest_arch;
  return limits;
}

absl::StatusOr<LoadedFamily> LoadBuiltin(const std::string& name) {
  LoadedFamily loaded;
  ASSIGN_OR_RETURN(loaded.family, LoadFamilyFile(KernelsPath(name + ".textproto")));
  ASSIGN_OR_RETURN(v1::Manifest manifest, LoadManifestFile(KernelsPath(name + ".manifest")));
  loaded.manifest_arch = manifest.arch();
  absl::flat_hash_map<std::string, v1::KernelFamily> families = {{name, loaded.family}};
  ASSIGN_OR_RETURN(loaded.problems, ExpandManifest(manifest, families));
  return loaded;
}

// What a kernel needs from the SM to launch, read from its cubin: CUDA
// refuses a launch with more threads than the kernel's __launch_bounds__
// (EIATTR_MAX_THREADS in .nv.info.<kernel>) or more registers than the SM's
// 64K (EIATTR_REGCOUNT in .nv.info). These checks stand in for a GPU: every
// config the constraints admit must be launchable on sm_90.
struct KernelResources {
  int64_t registers = 0;    // per thread
  int64_t max_threads = 0;  // 0: no __launch_bounds__
};

constexpr char kElf64Magic[] = "\x7f\x45\x4c\x46\x02";  // 0x7f E L F, then ELFCLASS64
constexpr uint8_t kEiFormatSval = 0x04;                 // attribute with a u16 size and a payload
constexpr uint8_t kEiAttrMaxThreads = 0x05;
constexpr uint8_t kEiAttrRegCount = 0x2f;

// Little-endian reads that fail instead of running past the end.
class Bytes {
 public:
  explicit Bytes(const std::string& data) : data_(data) {}
  template <typename T>
  bool Read(uint64_t offset, T& value) const {
    if (offset > data_.size() || data_.size() - offset < sizeof(T)) return false;
    std::memcpy(&value, data_.data() + offset, sizeof(T));
    return true;
  }
  std::string CString(uint64_t offset) const {
    if (offset >= data_.size()) return "";
    return std::string(data_.c_str() + offset,
                       strnlen(data_.c_str() + offset, data_.size() - offset));
  }

 private:
  const std::string& data_;
};

struct Section {
  std::string name;
  uint32_t type = 0;
  uint64_t offset = 0, size = 0;
  uint32_t link = 0;
};

// Calls visit(attribute, payload offset, payload size) for each attribute of
// an .nv.info section that carries a payload.
template <typename Visit>
bool ForEachInfoAttribute(const Bytes& bytes, const Section& section, Visit visit) {
  uint64_t at = section.offset;
  const uint64_t end = section.offset + section.size;
  while (at + 4 <= end) {
    uint8_t format = 0, attribute = 0;
    uint16_t size = 0;
    if (!bytes.Read(at, format) || !bytes.Read(at + 1, attribute) || !bytes.Read(at + 2, size)) {
      return false;
    }
    if (format != kEiFormatSval) {
      at += 4;  // the value, if any, sits in the two bytes after the attribute
      continue;
    }
    if (at + 4 + size > end) return false;
    visit(attribute, at + 4, size);
    at += 4 + size;
  }
  return at == end;
}

absl::StatusOr<KernelResources> ReadKernelResources(const std::string& cubin,
                                                    const std::string& kernel) {
  const Bytes bytes(cubin);
  uint64_t section_table = 0;
  uint16_t entry_size = 0, count = 0, names_index = 0;
  if (cubin.rfind(kElf64Magic, 0) != 0 || !bytes.Read(0x28, section_table) ||
      !bytes.Read(0x3a, entry_size) || !bytes.Read(0x3c, count) || !bytes.Read(0x3e, names_index) ||
      entry_size < 64 || names_index >= count) {
    return absl::InvalidArgumentError("not a 64-bit ELF image");
  }
  std::vector<Section> sections(count);
  std::vector<uint32_t> name_offsets(count);
  for (uint16_t i = 0; i < count; ++i) {
    const uint64_t header = section_table + uint64_t{i} * entry_size;
    Section& section = sections[i];
    if (!bytes.Read(header, name_offsets[i]) || !bytes.Read(header + 4, section.type) ||
        !bytes.Read(header + 24, section.offset) || !bytes.Read(header + 32, section.size) ||
        !bytes.Read(header + 40, section.link)) {
      return absl::InvalidArgumentError("truncated section table");
    }
  }
  for (uint16_t i = 0; i < count; ++i) {
    sections[i].name = bytes.CString(sections[names_index].offset + name_offsets[i]);
  }

  // The kernel's symbol index, which .nv.info attributes refer to.
  constexpr uint32_t kSymbolTable = 2;
  int64_t symbol = -1;
  for (const Section& section : sections) {
    if (section.type != kSymbolTable || section.link >= count) continue;
    for (uint64_t i = 0; (i + 1) * 24 <= section.size; ++i) {
      uint32_t name = 0;
      if (!bytes.Read(section.offset + i * 24, name)) break;
      if (bytes.CString(sections[section.link].offset + name) == kernel) {
        symbol = static_cast<int64_t>(i);
      }
    }
  }
  if (symbol < 0) return absl::NotFoundError(absl::StrCat("no symbol '", kernel, "'"));

  KernelResources resources;
  bool well_formed = true;
  for (const Section& section : sections) {
    if (section.name == ".nv.info") {
      well_formed &=
          ForEachInfoAttribute(bytes, section, [&](uint8_t attribute, uint64_t at, uint16_t size) {
            uint32_t owner = 0, registers = 0;
            if (attribute == kEiAttrRegCount && size == 8 && bytes.Read(at, owner) &&
                owner == symbol && bytes.Read(at + 4, registers)) {
              resources.registers = registers;
            }
          });
    } else if (section.name == ".nv.info." + kernel) {
      well_formed &=
          ForEachInfoAttribute(bytes, section, [&](uint8_t attribute, uint64_t at, uint16_t size) {
            uint32_t x = 0, y = 0, z = 0;
            if (attribute == kEiAttrMaxThreads && size == 12 && bytes.Read(at, x) &&
                bytes.Read(at + 4, y) && bytes.Read(at + 8, z)) {
              resources.max_threads = int64_t{x} * y * z;
            }
          });
    }
  }
  if (!well_formed) return absl::InvalidArgumentError("malformed .nv.info section");
  if (resources.registers == 0) {
    return absl::NotFoundError(absl::StrCat("no register count for '", kernel, "'"));
  }
  return resources;
}

// Whether `threads` threads of a kernel using `registers` registers each fit
// one sm_90 SM: registers are allocated per warp in units of 256, 64K in all.
bool RegistersFit(int64_t registers, int64_t threads) {
  const int64_t per_warp = (registers * 32 + 255) / 256 * 256;
  return (threads + 31) / 32 * per_warp <= 65536;
}

struct CompileJob {
  std::string what;  // problem and config, for failure messages
  CompileRequest request;
  std::vector<int64_t> param_values;  // the config, in params order; empty for a reference
  int64_t max_block_threads = 0;      // the largest block of any problem using it
  CompileResult result;
};

// Which of `variants` (distinct compiles, every one with its param_values)
// to compile: all when there are at most kMaxVariantsCompiledInFull, else
// kSampledVariants of them, the same ones on every run. In config order
// (params in declaration order, each by the position of its value in its
// list, the first param most significant), the sample holds
//   - every variant of the family's default config (one per dtype);
//   - for each param, the first and the last variant with the param at its
//     smallest value and the first and the last with it at its largest: the
//     smallest and the largest configs, and each param's extremes with the
//     others as small and as large as they go with it (for gemm_bf16: the
//     16 x 32 tile of one warp, the 256 x 128 and 128 x 256 tiles of 16
//     warps, SPLIT_K 8 and STAGES 5 on the smallest tile and on large ones);
//   - then variants evenly spread over the rest.
// Returns indices into `variants`, ascending.
std::vector<size_t> SampleVariants(const v1::KernelFamily& family,
                                   const std::vector<CompileJob>& variants) {
  const size_t n = variants.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  if (n <= kMaxVariantsCompiledInFull) return order;

  const int params = family.params_size();
  std::vector<std::vector<int>> ranks(n, std::vector<int>(params, 0));
  for (size_t i = 0; i < n; ++i) {
    for (int p = 0; p < params; ++p) {
      const auto& values = family.params(p).values();
      ranks[i][p] = static_cast<int>(
          std::find(values.begin(), values.end(), variants[i].param_values[p]) - values.begin());
    }
  }
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    if (ranks[x] != ranks[y]) return ranks[x] < ranks[y];
    return variants[x].request.options < variants[y].request.options;  // the dtype
  });

  std::vector<bool> chosen(n, false);
  size_t count = 0;
  auto choose = [&](size_t i) {
    if (!chosen[i]) ++count;
    chosen[i] = true;
  };
  std::vector<int64_t> default_values;
  for (const v1::TunableParameter& param : family.params()) {
    const auto it = family.default_config().params().find(param.name());
    default_values.push_back(it == family.default_config().params().end() ? -1 : it->second);
  }
  for (size_t i : order) {
    if (variants[i].param_values == default_values) choose(i);
  }
  for (int p = 0; p < params; ++p) {
    int lowest = ranks[order.front()][p], highest = lowest;
    for (size_t i : order) {
      lowest = std::min(lowest, ranks[i][p]);
      highest = std::max(highest, ranks[i][p]);
    }
    for (const int rank : {lowest, highest}) {
      std::vector<size_t> at_rank;
      for (size_t i : order) {
        if (ranks[i][p] == rank) at_rank.push_back(i);
      }
      choose(at_rank.front());
      choose(at_rank.back());
    }
  }
  // Evenly spread: the i-th of the remaining picks starts i/remaining of the
  // way through the configs and takes the first one there not yet chosen.
  const size_t remaining = kSampledVariants > count ? kSampledVariants - count : 0;
  for (size_t i = 0; i < remaining; ++i) {
    size_t at = i * n / remaining;
    while (chosen[order[at]]) at = (at + 1) % n;
    choose(order[at]);
  }

  std::vector<size_t> sample;
  for (size_t i = 0; i < n; ++i) {
    if (chosen[i]) sample.push_back(i);
  }
  return sample;
}

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
  EXPECT_THAT(kManifestArchs, ::testing::Contains(loaded.manifest_arch));
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
    ASSERT_OK_AND_ASSIGN(SearchSpace space,
                         ExpandSearchSpace(loaded.family, problem.problem, TargetOf(loaded)));
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

// The family's default config is the baseline of every report's speedup:
// it must be a valid config of every default problem.
TEST_P(BuiltinFamilyTest, TheDefaultConfigIsValidForEveryDefaultProblem) {
  const BuiltinFamily& builtin = GetParam();
  ASSERT_OK_AND_ASSIGN(LoadedFamily loaded, LoadBuiltin(builtin.name));
  ASSERT_TRUE(loaded.family.has_default_config()) << builtin.name;
  for (const ManifestProblem& problem : loaded.problems) {
    ASSERT_OK_AND_ASSIGN(SearchSpace space,
                         ExpandSearchSpace(loaded.family, problem.problem, TargetOf(loaded)));
    bool found = false;
    for (const Variant& variant : space.variants) {
      bool same = variant.config.params_size() == loaded.family.default_config().params_size();
      for (const auto& [name, value] : loaded.family.default_config().params()) {
        auto it = variant.config.params().find(name);
        same = same && it != variant.config.params().end() && it->second == value;
      }
      found = found || same;
    }
    EXPECT_TRUE(found) << builtin.name << " " << ProblemLabel(problem.problem);
  }
}

// Every job compiled without warnings into a cubin whose kernel can be
// launched the way its variants are.
void CheckCompiled(const char* family, const std::vector<CompileJob>& jobs) {
  int failures = 0;
  int64_t most_registers = 0;
  for (const CompileJob& job : jobs) {
    const CompileResult& result = job.result;
    std::string problem;
    if (result.status != CompileStatus::kOk || result.lowered_name.empty()) {
      problem = absl::StrCat("did not compile (status ", static_cast<int>(result.status), ")");
    } else if (absl::StrContains(result.log, "warning")) {
      problem = "compiled with warnings";
    } else if (absl::StatusOr<KernelResources> resources =
                   ReadKernelResources(result.cubin, result.lowered_name);
               !resources.ok()) {
      problem = absl::StrCat("unreadable cubin: ", resources.status().ToString());
    } else if (resources->max_threads > 0 && job.max_block_threads > resources->max_threads) {
      problem = absl::StrCat("launched with ", job.max_block_threads,
                             " threads but __launch_bounds__ allows ", resources->max_threads);
    } else if (!RegistersFit(resources->registers, job.max_block_threads)) {
      problem = absl::StrCat(job.max_block_threads, " threads x ", resources->registers,
                             " registers exceed the SM's 64K registers");
    } else {
      most_registers = std::max(most_registers, resources->registers);
      continue;
    }
    // A few full reports are enough to act on; count the rest.
    if (++failures <= 5) {
      ADD_FAILURE() << job.what << " (" << job.request.name_expression << "): " << problem << "\n"
                    << result.log;
    }
  }
  std::printf("%s: at most %lld registers per thread\n", family,
              static_cast<long long>(most_registers));
  EXPECT_EQ(failures, 0) << "of " << jobs.size() << " compiles";
}

// What `autotune check` and RegisterKernel run: the reference and the
// default config of each dtype compile, and their parameters are the
// buffers, tensor maps and scalars the service passes.
TEST_P(BuiltinFamilyTest, PassesTheCompileCheckOfRegister) {
  const BuiltinFamily& builtin = GetParam();
  ASSERT_OK_AND_ASSIGN(const Nvrtc* nvrtc, Nvrtc::Load());
  ASSERT_OK_AND_ASSIGN(LoadedFamily loaded, LoadBuiltin(builtin.name));
  EXPECT_THAT(FamilyWarnings(loaded.family), IsEmpty());
  ASSERT_OK_AND_ASSIGN(std::vector<CheckCompile> compiles,
                       CheckCompiles(loaded.family, loaded.manifest_arch));
  std::vector<CompileJob> jobs;
  for (const CheckCompile& compile : compiles) {
    jobs.push_back(CompileJob{.what = compile.part,
                              .request = compile.request,
                              .param_values = {},
                              .max_block_threads = 0,
                              .result = {}});
  }
  CompileAll(*nvrtc, jobs, CompileThreads());
  std::vector<CheckFinding> findings;
  for (size_t i = 0; i < compiles.size(); ++i) {
    const CompileResult& result = jobs[i].result;
    AddFindings(loaded.family, compiles[i],
                CompileOutput{.compiled = result.status == CompileStatus::kOk,
                              .log = result.log,
                              .cubin = result.cubin,
                              .lowered_name = result.lowered_name},
                findings);
  }
  EXPECT_OK(FindingsStatus(findings, builtin.name));
}

TEST_P(BuiltinFamilyTest, EveryDistinctVariantCompilesForItsManifestsArch) {
  const BuiltinFamily& builtin = GetParam();
  ASSERT_OK_AND_ASSIGN(const Nvrtc* nvrtc, Nvrtc::Load());
  ASSERT_OK_AND_ASSIGN(LoadedFamily loaded, LoadBuiltin(builtin.name));
  const std::string program_name = loaded.family.source_file().empty()
                                       ? absl::StrCat(builtin.name, ".cu")
                                       : loaded.family.source_file();

  // One job per compile key: a config shared by several problems (the same
  // dtype, dims that do not reach the source) compiles once, as in the service.
  std::map<std::string, CompileJob> variants_by_key, references_by_key;
  auto add = [&](std::map<std::string, CompileJob>& by_key, std::string what,
                 std::string name_expression, std::vector<std::string> options,
                 std::vector<int64_t> param_values, const v1::LaunchDims& launch) {
    CompileJob job{.what = std::move(what),
                   .request = {.source = loaded.family.source(),
                               .program_name = program_name,
                               .name_expression = std::move(name_expression),
                               .options = std::move(options),
                               .arch = loaded.manifest_arch},
                   .param_values = std::move(param_values),
                   .result = {}};
    const std::string key = CompileKey(job.request, nvrtc->version());
    CompileJob& kept = by_key.emplace(key, std::move(job)).first->second;
    int64_t threads = 1;
    for (int64_t extent : launch.block()) threads *= extent;
    kept.max_block_threads = std::max(kept.max_block_threads, threads);
  };
  for (const ManifestProblem& problem : loaded.problems) {
    const std::string label = ProblemLabel(problem.problem);
    ASSERT_OK_AND_ASSIGN(SearchSpace space,
                         ExpandSearchSpace(loaded.family, problem.problem, TargetOf(loaded)));
    add(references_by_key, absl::StrCat(label, " reference"), space.reference_name,
        space.reference_compile_options, {}, space.reference_launch);
    for (const Variant& variant : space.variants) {
      add(variants_by_key, absl::StrCat(label, " ", absl::StrJoin(variant.compile_options, " ")),
          variant.name_expression, variant.compile_options, variant.param_values, variant.launch);
    }
  }
  std::vector<CompileJob> variants;
  variants.reserve(variants_by_key.size());
  for (auto& [key, job] : variants_by_key) variants.push_back(std::move(job));
  const std::vector<size_t> sample = SampleVariants(loaded.family, variants);
  std::vector<CompileJob> jobs;
  jobs.reserve(references_by_key.size() + sample.size());
  for (auto& [key, job] : references_by_key) jobs.push_back(std::move(job));
  for (size_t i : sample) jobs.push_back(std::move(variants[i]));
  const size_t references = references_by_key.size();

  const int threads = CompileThreads();
  const double seconds = CompileAll(*nvrtc, jobs, threads);
  std::printf(
      "%s: %zu of %zu distinct variants%s + %zu references compiled for %s in %.1f s "
      "(%d threads, NVRTC %s)\n",
      builtin.name, sample.size(), variants.size(),
      sample.size() < variants.size() ? " (a sample)" : "", references,
      loaded.manifest_arch.c_str(), seconds, threads, nvrtc->version().c_str());

  CheckCompiled(builtin.name, jobs);
}

// gemm_bf16's wgmma path exists for sm_90a only, and the general sample
// above holds only a few of its configs: an even spread of them compiles
// for sm_90a here (the first and the last config of the path among them).
TEST(GemmBf16Test, TheWgmmaPathIsOnlyForSm90aAndCompilesThere) {
  ASSERT_OK_AND_ASSIGN(const Nvrtc* nvrtc, Nvrtc::Load());
  ASSERT_OK_AND_ASSIGN(LoadedFamily loaded, LoadBuiltin("gemm_bf16"));
  v1::Problem problem;
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"M", 4096}, {"N", 4096}, {"K", 4096}}) {
    (*problem.mutable_dims())[name] = value;
  }
  problem.set_dtype(v1::BFLOAT16);
  const auto wgmma_variants = [&](const std::string& arch) -> std::vector<Variant> {
    DeviceLimits limits;
    limits.arch = arch;
    absl::StatusOr<SearchSpace> space = ExpandSearchSpace(loaded.family, problem, limits);
    EXPECT_TRUE(space.ok()) << space.status();
    std::vector<Variant> kept;
    if (!space.ok()) return kept;
    for (Variant& variant : space->variants) {
      if (variant.config.params().at("WGMMA") > 0) kept.push_back(std::move(variant));
    }
    return kept;
  };
  EXPECT_TRUE(wgmma_variants("sm_90").empty());
  EXPECT_TRUE(wgmma_variants("sm_100a").empty());
  const std::vector<Variant> variants = wgmma_variants("sm_90a");
  // The counts the descriptor's comment gives, per path: (WGMMA,
  // PERSISTENT, BN = 192, CLUSTER).
  using Path = std::tuple<int64_t, int64_t, bool, int64_t>;
  std::map<Path, int> paths;
  for (const Variant& variant : variants) {
    const auto& params = variant.config.params();
    ++paths[{params.at("WGMMA"), params.at("PERSISTENT"), params.at("BN") == 192,
             params.at("CLUSTER")}];
  }
  EXPECT_THAT(paths, ::testing::ElementsAre(
                         Pair(Path{1, 0, false, 1}, 288), Pair(Path{2, 0, false, 1}, 392),
                         Pair(Path{3, 0, false, 1}, 392), Pair(Path{3, 0, false, 2}, 98),
                         Pair(Path{3, 0, true, 1}, 16), Pair(Path{3, 0, true, 2}, 16),
                         Pair(Path{3, 1, false, 1}, 84), Pair(Path{3, 1, false, 2}, 84),
                         Pair(Path{3, 1, true, 1}, 14), Pair(Path{3, 1, true, 2}, 14)));

  // An even spread over the paths, and the first and the last config of the
  // persistent schedule, of the 192-column tiles and of the clusters.
  constexpr size_t kSample = 32;
  std::vector<const Variant*> sample;
  for (size_t i = 0; i < kSample; ++i) {
    sample.push_back(&variants[i * (variants.size() - 1) / (kSample - 1)]);
  }
  for (const std::pair<const char*, int64_t>& wanted :
       {std::pair<const char*, int64_t>{"PERSISTENT", 1}, {"BN", 192}, {"CLUSTER", 2}}) {
    const auto has = [&wanted](const Variant& v) {
      return v.config.params().at(wanted.first) == wanted.second;
    };
    sample.push_back(&*std::find_if(variants.begin(), variants.end(), has));
    sample.push_back(&*std::find_if(variants.rbegin(), variants.rend(), has));
  }
  std::vector<CompileJob> jobs;
  for (const Variant* sampled : sample) {
    const Variant& variant = *sampled;
    CompileJob& job = jobs.emplace_back();
    job.what = absl::StrJoin(variant.compile_options, " ");
    job.request = {.source = loaded.family.source(),
                   .program_name = loaded.family.source_file(),
                   .name_expression = variant.name_expression,
                   .options = variant.compile_options,
                   .arch = "sm_90a"};
    job.param_values = variant.param_values;
    job.max_block_threads = variant.launch.block(0);
  }
  const double seconds = CompileAll(*nvrtc, jobs, CompileThreads());
  std::printf("gemm_bf16: %zu of %zu wgmma variants compiled for sm_90a in %.1f s\n", jobs.size(),
              variants.size(), seconds);
  CheckCompiled("gemm_bf16 (wgmma)", jobs);
}

INSTANTIATE_TEST_SUITE_P(Builtin, BuiltinFamilyTest, ::testing::ValuesIn(kBuiltinFamilies),
                         [](const ::testing::TestParamInfo<BuiltinFamily>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace autotune::kernels
