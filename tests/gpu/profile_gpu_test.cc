// The GPU suite: profile workers (`autotune-worker profile`) driven by a
// ProfilePool on a real device, with kernels compiled by a CompilePool.
//
//  - fault injection (tests/faults/): every kind of broken variant ends in
//    its status with its context, and the correct variants of the same task
//    end OK on the worker that replaces a lost one;
//  - validation: elements a variant leaves unwritten are caught (outputs are
//    poisoned), with the error, the seed and the tolerance;
//  - memory: a problem larger than the device is UNSUPPORTED and the worker
//    goes on serving;
//  - timing: sample counts, the order of the statistics, and the input pool
//    of COLD and HOT;
//  - every variant of every default problem of the built-in families
//    validates.
//
// Without a usable GPU (ProfilePool::Start answers FAILED_PRECONDITION: no
// driver, no device) every test is skipped and says why, unless
// AUTOTUNE_REQUIRE_GPU=1 makes that a failure. Paths come from CMake and can
// be overridden with AUTOTUNE_WORKER, AUTOTUNE_KERNELS_DIR and
// AUTOTUNE_FAULTS_DIR (tests/gpu/run.sh runs this binary from a bundle).
// AUTOTUNE_GPU_BUILTIN_BUDGET_S, when set, stops the built-in validation
// after that many seconds in all and says how much it checked. Lines starting with
// "[gpu-summary]" are collected by tests/gpu/run.sh into its table.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/family_loader.h"
#include "kernels/gpu/compiler.h"
#include "kernels/manifest.h"
#include "kernels/profile_task.h"
#include "kernels/search_space.h"
#include "proto/autotune.pb.h"
#include "proto/worker.pb.h"
#include "service/pools/compile_pool.h"
#include "service/pools/profile_pool.h"
#include "tests/faults/fault_cases.h"
#include "tests/gpu/gpu_test_env.h"

namespace autotune::testing {
namespace {

namespace wv1 = ::autotune::worker::v1;

using ::testing::AnyOf;
using ::testing::Eq;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A line for the log only (run.sh leaves these off the console).
void Progress(const std::string& text) {
  std::printf("[gpu-progress] %s\n", text.c_str());
  std::fflush(stdout);
}

std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%.1f s", absl::ToDoubleSeconds(d));
}

std::string MiB(int64_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); }

// "OK=3 TIMEOUT=2", statuses in enum order.
std::string CountStatuses(const std::vector<wv1::VariantOutcome>& outcomes) {
  std::map<v1::VariantStatus, int> counts;
  for (const wv1::VariantOutcome& outcome : outcomes) ++counts[outcome.status()];
  std::vector<std::string> parts;
  for (const auto& [status, count] : counts) {
    parts.push_back(absl::StrCat(v1::VariantStatus_Name(status), "=", count));
  }
  return absl::StrJoin(parts, " ");
}

std::string ProgramName(const v1::KernelFamily& family) {
  return family.source_file().empty() ? family.name() + ".cu" : family.source_file();
}

// The pools every test of the process shares: a profile worker initializes
// the driver when it starts, and compile workers load NVRTC.
class GpuEnvironment final : public ::testing::Environment {
 public:
  void TearDown() override {
    absl::MutexLock lock(&mu_);
    compiler_.reset();
    pool_.reset();
  }

  // The profile pool, started on first use. The first outcome is kept: a
  // pool that cannot start is not tried again by every test.
  absl::StatusOr<service::ProfilePool*> Pool() {
    absl::MutexLock lock(&mu_);
    if (!pool_status_.has_value()) pool_status_ = StartPool();
    if (!pool_status_->ok()) return *pool_status_;
    return pool_.get();
  }

  // "sm_90" for the pool's first device.
  std::string Arch() {
    absl::MutexLock lock(&mu_);
    return arch_;
  }

  // Compiles, on every compile worker at once, each request this process
  // has not compiled yet (by compile key). INTERNAL naming the first failed
  // compile, with NVRTC's log, when any fails.
  absl::Status CompileAll(const std::vector<kernels::CompileRequest>& requests) {
    ASSIGN_OR_RETURN(service::CompilePool * compiler, Compiler());
    std::vector<std::pair<std::string, const kernels::CompileRequest*>> todo;
    {
      absl::MutexLock lock(&mu_);
      std::set<std::string> queued;
      for (const kernels::CompileRequest& request : requests) {
        std::string key = kernels::CompileKey(request, compiler->nvrtc_version());
        if (compiled_.contains(key) || !queued.insert(key).second) continue;
        todo.emplace_back(std::move(key), &request);
      }
    }
    std::atomic<size_t> next{0};
    std::vector<std::string> errors;
    auto work = [&] {
      for (size_t i = next++; i < todo.size(); i = next++) {
        const auto& [key, request] = todo[i];
        wv1::CompileTask task;
        task.set_task_id(key.substr(0, 16));
        task.set_source(request->source);
        task.set_program_name(request->program_name);
        task.set_name_expression(request->name_expression);
        for (const std::string& option : request->options) task.add_options(option);
        task.set_arch(request->arch);
        for (const kernels::SourceHeader& header : request->headers) {
          v1::SourceHeader* sent = task.add_headers();
          sent->set_name(header.name);
          sent->set_text(header.text);
        }
        wv1::CompileOutcome outcome = compiler->Compile(task, absl::Minutes(2));
        absl::MutexLock lock(&mu_);
        if (outcome.status() == wv1::CompileOutcome::OK) {
          compiled_[key] = kernels::CompiledKernel{.cubin = outcome.cubin(),
                                                   .lowered_name = outcome.lowered_name()};
        } else {
          errors.push_back(absl::StrCat(request->program_name, " ", request->name_expression, " ",
                                        absl::StrJoin(request->options, " "), ": ",
                                        wv1::CompileOutcome::Status_Name(outcome.status()), "\n",
                                        outcome.log()));
        }
      }
    };
    const size_t threads = std::min<size_t>(std::max(compiler->size(), 1), todo.size());
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(work);
    for (std::thread& thread : pool) thread.join();
    if (!errors.empty()) {
      return absl::InternalError(absl::StrCat(errors.size(), " of ", todo.size(),
                                              " compiles failed; the first: ", errors.front()));
    }
    return absl::OkStatus();
  }

  // A kernel CompileAll compiled.
  absl::StatusOr<kernels::CompiledKernel> Compiled(const kernels::CompileRequest& request) {
    ASSIGN_OR_RETURN(service::CompilePool * compiler, Compiler());
    absl::MutexLock lock(&mu_);
    auto it = compiled_.find(kernels::CompileKey(request, compiler->nvrtc_version()));
    if (it == compiled_.end()) {
      return absl::NotFoundError(absl::StrCat("not compiled: ", request.name_expression));
    }
    return it->second;
  }

 private:
  absl::Status StartPool() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string path = WorkerPath();
    // A missing binary is a broken build or bundle, never a reason to skip.
    if (access(path.c_str(), X_OK) != 0) {
      return absl::NotFoundError(
          absl::StrCat("no executable autotune-worker at ", path, " (set AUTOTUNE_WORKER)"));
    }
    service::ProfilePoolOptions options;
    options.worker_path = path;
    const absl::Time start = absl::Now();
    ASSIGN_OR_RETURN(pool_, service::ProfilePool::Start(options));
    std::vector<wv1::DeviceInfo> devices = pool_->devices();
    if (devices.empty()) return absl::InternalError("the profile pool reports no device");
    const wv1::DeviceInfo& device = devices.front();
    arch_ = absl::StrCat("sm_", device.compute_capability());
    Summary("device",
            absl::StrFormat("%s, cc %d, %d SMs, L2 %s, %.1f GiB, CUDA driver API %s, peak %.0f "
                            "GB/s; %d device(s); pool started in %s",
                            device.name(), device.compute_capability(), device.sm_count(),
                            MiB(device.l2_bytes()), device.memory_bytes() / 1073741824.0,
                            device.driver_version(), device.peak_bandwidth_gbps(), devices.size(),
                            Seconds(absl::Now() - start)));
    return absl::OkStatus();
  }

  absl::StatusOr<service::CompilePool*> Compiler() {
    absl::MutexLock lock(&mu_);
    if (!compiler_status_.has_value()) {
      service::CompilePoolOptions options;
      options.worker_path = WorkerPath();
      options.workers = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
      absl::StatusOr<std::unique_ptr<service::CompilePool>> started =
          service::CompilePool::Start(options);
      compiler_status_ = started.status();
      if (started.ok()) compiler_ = std::move(*started);
    }
    if (!compiler_status_->ok()) return *compiler_status_;
    return compiler_.get();
  }

  absl::Mutex mu_;
  std::optional<absl::Status> pool_status_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<service::ProfilePool> pool_ ABSL_GUARDED_BY(mu_);
  std::string arch_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> compiler_status_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<service::CompilePool> compiler_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, kernels::CompiledKernel> compiled_ ABSL_GUARDED_BY(mu_);
};

GpuEnvironment* const gpu =
    static_cast<GpuEnvironment*>(::testing::AddGlobalTestEnvironment(new GpuEnvironment));

// The reference first, then every variant in search-space order.
std::vector<kernels::CompileRequest> CompileRequests(const v1::KernelFamily& family,
                                                     const kernels::SearchSpace& space,
                                                     const std::string& arch) {
  std::vector<kernels::SourceHeader> headers;
  for (const v1::SourceHeader& header : family.headers()) {
    headers.push_back({header.name(), header.text()});
  }
  std::vector<kernels::CompileRequest> requests;
  requests.push_back({.source = family.source(),
                      .program_name = ProgramName(family),
                      .name_expression = space.reference_name,
                      .options = space.reference_compile_options,
                      .arch = arch,
                      .headers = headers});
  for (const kernels::Variant& variant : space.variants) {
    requests.push_back({.source = family.source(),
                        .program_name = ProgramName(family),
                        .name_expression = variant.name_expression,
                        .options = variant.compile_options,
                        .arch = arch,
                        .headers = headers});
  }
  return requests;
}

// A problem of a family, expanded and compiled.
struct PreparedProblem {
  v1::KernelFamily family;
  v1::Problem problem;
  kernels::SearchSpace space;
  kernels::CompiledKernel reference;
  std::vector<kernels::CompiledKernel> kernels;  // one per space.variants
};

// `sample` > 0 keeps that many variants of the space, spread evenly over
// it (the first and the last always among them), and compiles only those.
// `arch` (empty: the GPU's, "sm_90") is the one the space is expanded and
// compiled for; `keep`, when set, drops the variants it refuses first;
// `sm_count` is the launch's (0: unknown, a block per tile).
absl::StatusOr<std::unique_ptr<PreparedProblem>> Prepare(
    const v1::KernelFamily& family, const v1::Problem& problem, size_t sample = 0,
    std::string arch = "", const std::function<bool(const kernels::Variant&)>& keep = nullptr,
    int64_t sm_count = 0) {
  auto prepared = std::make_unique<PreparedProblem>();
  prepared->family = family;
  prepared->problem = problem;
  if (arch.empty()) arch = gpu->Arch();
  kernels::DeviceLimits target;
  target.arch = arch;
  target.sm_count = sm_count;
  ASSIGN_OR_RETURN(prepared->space, kernels::ExpandSearchSpace(family, problem, target));
  std::vector<kernels::Variant>& variants = prepared->space.variants;
  if (keep) {
    variants.erase(std::remove_if(variants.begin(), variants.end(),
                                  [&](const kernels::Variant& v) { return !keep(v); }),
                   variants.end());
  }
  if (sample > 1 && variants.size() > sample) {
    std::vector<kernels::Variant> kept;
    for (size_t i = 0; i < sample; ++i) {
      kept.push_back(std::move(variants[i * (variants.size() - 1) / (sample - 1)]));
    }
    variants = std::move(kept);
  }
  const std::vector<kernels::CompileRequest> requests =
      CompileRequests(family, prepared->space, arch);
  RETURN_IF_ERROR(gpu->CompileAll(requests));
  ASSIGN_OR_RETURN(prepared->reference, gpu->Compiled(requests.front()));
  for (size_t i = 1; i < requests.size(); ++i) {
    ASSIGN_OR_RETURN(kernels::CompiledKernel kernel, gpu->Compiled(requests[i]));
    prepared->kernels.push_back(std::move(kernel));
  }
  return prepared;
}

// The index in prepared.space.variants of the config with these params
// (others may take any value); -1 when none has them.
int FindVariant(const PreparedProblem& prepared, const std::map<std::string, int64_t>& params) {
  for (size_t i = 0; i < prepared.space.variants.size(); ++i) {
    const auto& config = prepared.space.variants[i].config.params();
    if (std::all_of(params.begin(), params.end(), [&](const auto& param) {
          auto it = config.find(param.first);
          return it != config.end() && it->second == param.second;
        })) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

// A variant of the task: its index in the search space and its id (empty:
// the variant's index, as MakeProfileTask does).
struct Pick {
  int index;
  std::string id;
};

std::vector<Pick> AllVariants(const PreparedProblem& prepared) {
  std::vector<Pick> picks;
  for (size_t i = 0; i < prepared.space.variants.size(); ++i) {
    picks.push_back({static_cast<int>(i), ""});
  }
  return picks;
}

absl::StatusOr<wv1::ProfileTask> MakeTask(const PreparedProblem& prepared,
                                          const std::vector<Pick>& picks,
                                          const kernels::ProfileSettings& settings,
                                          const std::string& task_id) {
  std::vector<kernels::CompiledVariant> variants;
  for (const Pick& pick : picks) {
    if (pick.index < 0 || pick.index >= static_cast<int>(prepared.kernels.size())) {
      return absl::InvalidArgumentError(absl::StrCat("no variant #", pick.index));
    }
    variants.push_back({.variant = &prepared.space.variants[pick.index],
                        .kernel = prepared.kernels[pick.index],
                        .id = pick.id});
  }
  ASSIGN_OR_RETURN(wv1::ProfileTask task,
                   kernels::MakeProfileTask(prepared.family, prepared.problem, prepared.space,
                                            prepared.reference, variants, settings));
  task.set_task_id(task_id);
  return task;
}

absl::StatusOr<v1::KernelFamily> LoadFault(const std::string& name) {
  return kernels::LoadFamilyFile(absl::StrCat(FaultsDir(), "/", name, ".textproto"));
}

const FaultFamily& FaultByName(const std::string& name) {
  for (const FaultFamily& fault : FaultFamilies()) {
    if (fault.name == name) return fault;
  }
  ADD_FAILURE() << "no fault family " << name;
  return FaultFamilies().front();
}

// What every outcome says, whatever its status: the problem and the config
// for a variant that did not pass, the numbers its status implies.
void ExpectExplained(const wv1::ProfileTask& task, const wv1::KernelImage& image,
                     const wv1::VariantOutcome& outcome) {
  const std::string what = outcome.ShortDebugString();
  EXPECT_EQ(outcome.task_id(), task.task_id()) << what;
  EXPECT_FALSE(outcome.phase().empty()) << what;
  if (outcome.status() == v1::OK) {
    EXPECT_EQ(outcome.seeds_checked(), std::max(3, task.seeds())) << what;
    if (!task.validate_only()) {
      EXPECT_GE(outcome.timing().samples(), task.min_samples()) << what;
      EXPECT_GT(outcome.timing().median_us(), 0) << what;
    }
    return;
  }
  EXPECT_THAT(outcome.detail(), HasSubstr(task.context())) << what;
  EXPECT_THAT(outcome.detail(), HasSubstr(image.label())) << what;
  switch (outcome.status()) {
    case v1::TIMEOUT:
      // The first launch of a variant is its first validation launch.
      EXPECT_THAT(outcome.phase(), StartsWith("validate seed")) << what;
      break;
    case v1::FAULT:
      EXPECT_THAT(outcome.phase(), StartsWith("validate seed")) << what;
      EXPECT_THAT(outcome.detail(), HasSubstr("CUDA_ERROR_")) << what;
      break;
    case v1::WRONG_RESULT:
      EXPECT_THAT(outcome.phase(), StartsWith("validate seed")) << what;
      // A NaN or an infinite error fails `<=` as well.
      EXPECT_FALSE(outcome.max_error() <= outcome.atol()) << what;
      EXPECT_GE(outcome.worst_seed(), task.base_seed()) << what;
      EXPECT_LT(outcome.worst_seed(), task.base_seed() + std::max(3, task.seeds())) << what;
      EXPECT_GE(outcome.seeds_checked(), 1) << what;
      EXPECT_EQ(outcome.rtol(), task.rtol()) << what;
      EXPECT_EQ(outcome.atol(), task.atol()) << what;
      break;
    case v1::UNSUPPORTED:
      // Found from the function's attributes, before any launch.
      EXPECT_THAT(outcome.phase(), AnyOf(Eq("load"), Eq("check"))) << what;
      break;
    default:
      ADD_FAILURE() << "unexpected status: " << what;
  }
}

// Skips the test, saying why, when there is no GPU to run on.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<service::ProfilePool*> pool = gpu->Pool();
    if (!pool.ok()) {
      if (absl::IsFailedPrecondition(pool.status()) && !GpuRequired()) {
        GTEST_SKIP() << "no GPU: " << pool.status().message();
      }
      FAIL() << "cannot start the profile pool"
             << (GpuRequired() ? " (AUTOTUNE_REQUIRE_GPU=1)" : "") << ": " << pool.status();
    }
    pool_ = *pool;
    device_ = pool_->devices().front();
  }

  service::ProfilePool* pool_ = nullptr;
  wv1::DeviceInfo device_;
};

struct FaultCase {
  std::string family;
  v1::DType dtype;
};

void PrintTo(const FaultCase& c, std::ostream* os) {
  *os << c.family << " " << v1::DType_Name(c.dtype);
}

std::vector<FaultCase> FaultCases() {
  std::vector<FaultCase> cases;
  for (const FaultFamily& fault : FaultFamilies()) {
    for (v1::DType dtype : fault.dtypes) cases.push_back({fault.name, dtype});
  }
  return cases;
}

class FaultInjectionTest : public GpuTest, public ::testing::WithParamInterface<FaultCase> {};

// Every config of the family, in search-space order (the fault param varies
// fastest, so faults and correct configs alternate), then the first correct
// config once more, so that a correct config follows every fault. Each fault
// that takes the worker with it (TIMEOUT, FAULT) must cost exactly one
// replacement, and the correct configs after it must end OK on the new
// worker, timed.
TEST_P(FaultInjectionTest, EveryVariantEndsInItsStatusAndTheOthersStillRun) {
  const FaultFamily& fault = FaultByName(GetParam().family);
  const v1::DType dtype = GetParam().dtype;
  ASSERT_OK_AND_ASSIGN(v1::KernelFamily family, LoadFault(fault.name));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PreparedProblem> prepared,
                       Prepare(family, FaultProblem(dtype)));
  std::vector<Pick> picks = AllVariants(*prepared);
  std::vector<v1::VariantStatus> expected;
  int again = -1;
  for (const Pick& pick : picks) {
    expected.push_back(ExpectedStatus(fault, prepared->space.variants[pick.index].config));
    if (again < 0 && expected.back() == v1::OK) again = pick.index;
  }
  ASSERT_GE(again, 0) << "no correct config in " << fault.name;
  picks.push_back({again, "again"});
  expected.push_back(v1::OK);

  kernels::ProfileSettings settings;
  settings.launch_timeout_s = 2;  // the hanging variant costs this much
  settings.timing_budget_s = 0.02;
  settings.min_samples = 10;
  ASSERT_OK_AND_ASSIGN(
      wv1::ProfileTask task,
      MakeTask(*prepared, picks, settings, absl::StrCat(fault.name, "-", v1::DType_Name(dtype))));
  const int64_t replaced_before = pool_->replaced();
  const absl::Time start = absl::Now();
  service::ProfileResult result = pool_->Profile(task);
  const absl::Duration took = absl::Now() - start;

  EXPECT_EQ(result.done.status(), v1::OK) << result.done.ShortDebugString();
  ASSERT_EQ(result.outcomes.size(), static_cast<size_t>(task.variants_size()))
      << result.done.ShortDebugString();
  int lost = 0;
  for (int i = 0; i < task.variants_size(); ++i) {
    const wv1::KernelImage& image = task.variants(i);
    const wv1::VariantOutcome& outcome = result.outcomes[i];
    SCOPED_TRACE(absl::StrCat(task.context(), " [", image.label(), "] id ", image.id()));
    EXPECT_EQ(outcome.variant_id(), image.id());
    EXPECT_EQ(outcome.status(), expected[i]) << outcome.ShortDebugString();
    ExpectExplained(task, image, outcome);
    if (fault.name == "fault_limits" && outcome.status() == v1::UNSUPPORTED) {
      // The numbers that rule the launch out: 256 threads against launch
      // bounds of 64, or 200 KiB of dynamic shared memory (240 KiB in all
      // with the static 40 KiB).
      if (absl::StrContains(image.label(), "LIMIT=1")) {
        EXPECT_THAT(outcome.detail(), HasSubstr("256"));
        EXPECT_THAT(outcome.detail(), HasSubstr("64"));
      } else {
        EXPECT_THAT(outcome.detail(), AnyOf(HasSubstr("204800"), HasSubstr("245760")));
      }
    }
    if (outcome.status() == v1::TIMEOUT || outcome.status() == v1::FAULT) ++lost;
  }
  EXPECT_EQ(result.workers_replaced, lost);
  EXPECT_EQ(pool_->replaced() - replaced_before, lost);
  Summary(absl::StrCat("faults ", fault.name, " ", v1::DType_Name(dtype)),
          absl::StrCat(CountStatuses(result.outcomes), "; workers replaced ",
                       result.workers_replaced, "; ", Seconds(took)));
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultInjectionTest, ::testing::ValuesIn(FaultCases()),
                         [](const ::testing::TestParamInfo<FaultCase>& info) {
                           return absl::StrCat(info.param.family, "_",
                                               v1::DType_Name(info.param.dtype));
                         });

// Validation compares every element: values a variant never writes keep the
// poison (NaN), and the outcome says where, by how much, for which seed and
// against which tolerance.
TEST_F(GpuTest, ValidationCatchesUnwrittenOutputs) {
  const FaultFamily& fault = FaultByName("fault_unwritten");
  ASSERT_OK_AND_ASSIGN(v1::KernelFamily family, LoadFault(fault.name));
  for (v1::DType dtype : fault.dtypes) {
    SCOPED_TRACE(v1::DType_Name(dtype));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<PreparedProblem> prepared,
                         Prepare(family, FaultProblem(dtype)));
    const int all = FindVariant(*prepared, {{"BLOCK", 128}, {"SKIP", 0}});
    const int last_block = FindVariant(*prepared, {{"BLOCK", 128}, {"SKIP", 1}});
    const int every_1000th = FindVariant(*prepared, {{"BLOCK", 128}, {"SKIP", 2}});
    ASSERT_GE(std::min({all, last_block, every_1000th}), 0);
    kernels::ProfileSettings settings;
    settings.validate_only = true;
    ASSERT_OK_AND_ASSIGN(wv1::ProfileTask task,
                         MakeTask(*prepared, {{last_block, ""}, {every_1000th, ""}, {all, ""}},
                                  settings, absl::StrCat("unwritten-", v1::DType_Name(dtype))));
    service::ProfileResult result = pool_->Profile(task);
    EXPECT_EQ(result.done.status(), v1::OK) << result.done.ShortDebugString();
    ASSERT_EQ(result.outcomes.size(), 3u) << result.done.ShortDebugString();

    // The first element each wrong variant leaves alone.
    const std::string first_bad[2] = {absl::StrCat(kFaultProblemElements - 128), "999"};
    for (int i = 0; i < 2; ++i) {
      const wv1::VariantOutcome& outcome = result.outcomes[i];
      SCOPED_TRACE(task.variants(i).label());
      EXPECT_EQ(outcome.status(), v1::WRONG_RESULT) << outcome.ShortDebugString();
      ExpectExplained(task, task.variants(i), outcome);
      EXPECT_THAT(outcome.detail(), HasSubstr(first_bad[i]));
      // The variant's value there is the poison.
      EXPECT_THAT(absl::AsciiStrToLower(outcome.detail()), HasSubstr("nan"));
      Summary(absl::StrCat("validation fault_unwritten ", v1::DType_Name(dtype), " ",
                           task.variants(i).label()),
              absl::StrCat(v1::VariantStatus_Name(outcome.status()), " in '", outcome.phase(),
                           "', max error ", outcome.max_error(), ", seed ", outcome.worst_seed(),
                           ", rtol ", outcome.rtol(), " atol ", outcome.atol()));
    }
    // The same kernel writing everything matches the reference exactly.
    const wv1::VariantOutcome& correct = result.outcomes[2];
    EXPECT_EQ(correct.status(), v1::OK) << correct.ShortDebugString();
    EXPECT_EQ(correct.max_error(), 0) << correct.ShortDebugString();
    EXPECT_EQ(correct.seeds_checked(), 3);
  }
}

// A problem whose buffers cannot fit ends before any variant runs, saying
// how much it needed; the worker is not lost, and serves the next task.
TEST_F(GpuTest, ProblemLargerThanTheDeviceIsUnsupportedAndTheWorkerStaysUsable) {
  ASSERT_OK_AND_ASSIGN(v1::KernelFamily family, LoadFault("fault_unwritten"));
  // One fp32 buffer of at least 4x the device's memory (2^38 elements at
  // most, which BLOCK=256 still covers within the grid limit).
  const int64_t elements = std::min<int64_t>(
      int64_t{1} << 38, static_cast<int64_t>(std::bit_ceil(
                            static_cast<uint64_t>(std::max<int64_t>(device_.memory_bytes(), 1)))));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PreparedProblem> huge,
                       Prepare(family, FaultProblem(v1::FLOAT32, elements)));
  const int huge_variant = FindVariant(*huge, {{"BLOCK", 256}, {"SKIP", 0}});
  ASSERT_GE(huge_variant, 0);
  ASSERT_OK_AND_ASSIGN(wv1::ProfileTask task,
                       MakeTask(*huge, {{huge_variant, ""}}, {}, "too-large"));
  const int64_t replaced_before = pool_->replaced();
  service::ProfileResult result = pool_->Profile(task);
  EXPECT_EQ(result.done.status(), v1::UNSUPPORTED) << result.done.ShortDebugString();
  EXPECT_TRUE(result.outcomes.empty());
  // Sizes, in bytes or a binary or decimal multiple.
  static const std::regex kSize(R"([0-9][0-9.]* ?(bytes|B|KiB|MiB|GiB|TiB|kB|MB|GB|TB)\b)");
  EXPECT_TRUE(std::regex_search(result.done.detail(), kSize)) << result.done.detail();
  Summary("memory", absl::StrCat(v1::VariantStatus_Name(result.done.status()), " in '",
                                 result.done.phase(), "': ", result.done.detail()));

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PreparedProblem> small,
                       Prepare(family, FaultProblem(v1::FLOAT32)));
  const int small_variant = FindVariant(*small, {{"BLOCK", 256}, {"SKIP", 0}});
  ASSERT_GE(small_variant, 0);
  kernels::ProfileSettings settings;
  settings.validate_only = true;
  ASSERT_OK_AND_ASSIGN(wv1::ProfileTask next,
                       MakeTask(*small, {{small_variant, ""}}, settings, "after-too-large"));
  service::ProfileResult after = pool_->Profile(next);
  EXPECT_EQ(after.done.status(), v1::OK) << after.done.ShortDebugString();
  ASSERT_EQ(after.outcomes.size(), 1u);
  EXPECT_EQ(after.outcomes[0].status(), v1::OK) << after.outcomes[0].ShortDebugString();
  EXPECT_EQ(pool_->replaced(), replaced_before);
}

// The built-in rmsnorm at rows x hidden in `dtype`, prepared.
absl::StatusOr<std::unique_ptr<PreparedProblem>> PrepareRmsnorm(int64_t rows, int64_t hidden,
                                                                v1::DType dtype) {
  ASSIGN_OR_RETURN(v1::KernelFamily family,
                   kernels::LoadFamilyFile(absl::StrCat(KernelsDir(), "/rmsnorm.textproto")));
  v1::Problem problem;
  (*problem.mutable_dims())["rows"] = rows;
  (*problem.mutable_dims())["hidden"] = hidden;
  problem.set_dtype(dtype);
  return Prepare(family, problem);
}

// One rmsnorm variant timed COLD and HOT: enough samples, ordered
// statistics, and an input pool of several sets larger than 2x L2 (COLD) or
// one set (HOT).
TEST_F(GpuTest, TimingStatisticsAndInputPoolFollowTheCacheState) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PreparedProblem> prepared,
                       PrepareRmsnorm(64, 4096, v1::FLOAT32));
  const v1::KernelFamily& family = prepared->family;
  const v1::Problem& problem = prepared->problem;
  int variant =
      FindVariant(*prepared, {{"VEC", 4}, {"ITEMS", 4}, {"ROWS_PER_BLOCK", 1}, {"CACHE_ROW", 1}});
  ASSERT_GE(variant, 0);

  std::string report;
  for (v1::CacheState cache_state : {v1::COLD, v1::HOT}) {
    SCOPED_TRACE(v1::CacheState_Name(cache_state));
    kernels::ProfileSettings settings;
    settings.cache_state = cache_state;
    ASSERT_OK_AND_ASSIGN(wv1::ProfileTask task,
                         MakeTask(*prepared, {{variant, ""}}, settings,
                                  absl::StrCat("timing-", v1::CacheState_Name(cache_state))));
    service::ProfileResult result = pool_->Profile(task);
    EXPECT_EQ(result.done.status(), v1::OK) << result.done.ShortDebugString();
    ASSERT_EQ(result.outcomes.size(), 1u);
    const wv1::VariantOutcome& outcome = result.outcomes[0];
    const v1::TimingStats& timing = outcome.timing();
    const std::string what = outcome.ShortDebugString();
    ASSERT_EQ(outcome.status(), v1::OK) << what;
    EXPECT_GE(timing.samples(), task.min_samples()) << what;
    EXPECT_GT(timing.median_us(), 0) << what;
    EXPECT_LE(timing.min_us(), timing.median_us()) << what;
    EXPECT_LE(timing.median_us(), timing.p90_us()) << what;
    EXPECT_GE(outcome.launches_per_sample(), 1) << what;
    if (cache_state == v1::COLD) {
      EXPECT_GE(outcome.pool_sets(), 2) << what;
      EXPECT_GT(outcome.pool_bytes(), 2 * device_.l2_bytes()) << what;
      // Every set is visited the same number of times per sample.
      EXPECT_EQ(outcome.launches_per_sample() % std::max(outcome.pool_sets(), 1), 0) << what;
    } else {
      EXPECT_EQ(outcome.pool_sets(), 1) << what;
    }
    absl::StrAppend(
        &report, report.empty() ? "" : "; ", v1::CacheState_Name(cache_state),
        absl::StrFormat(" median %.2f us (min %.2f, p90 %.2f, cv %.3f, %d samples, "
                        "%.0f GB/s), %d sets, %s per replay, %d launches/sample",
                        timing.median_us(), timing.min_us(), timing.p90_us(), timing.cv(),
                        timing.samples(), timing.achieved_gbps(), outcome.pool_sets(),
                        MiB(outcome.pool_bytes()), outcome.launches_per_sample()));
  }
  Summary(absl::StrCat("timing ", prepared->space.variants[variant].config.ShortDebugString()),
          absl::StrCat(ProblemContext(family.name(), problem), ": ", report));
}

// rmsnorm rows=4096,hidden=4096 bf16, prepared: the problem of which the
// screen and the serial tests time four variants.
absl::StatusOr<std::unique_ptr<PreparedProblem>> PrepareRmsnormSquare() {
  return PrepareRmsnorm(4096, 4096, v1::BFLOAT16);
}

// A screen as jobs run it (3 ms of timing, 5 samples at least, 2 ms of
// warm-up): each variant's timed replays stay within what the budget or
// the minimum of samples needs, plus one replay; only the first variant
// gets the full warm-up; and each outcome says where its time went.
TEST_F(GpuTest, AScreenTimesEachVariantWithinItsBudgetAndSaysWhereItsTimeWent) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PreparedProblem> prepared, PrepareRmsnormSquare());
  const v1::KernelFamily& family = prepared->family;
  const v1::Problem& problem = prepared->problem;
  std::vector<Pick> variants;
  for (size_t i = 0; i < prepared->space.variants.size() && variants.size() < 4; i += 7) {
    variants.push_back({static_cast<int>(i), absl::StrCat(i)});
  }
  ASSERT_EQ(variants.size(), 4u);
  kernels::ProfileSettings settings;
  settings.timing_budget_s = 0.003;
  settings.min_samples = 5;
  settings.warmup_s = 0.002;
  ASSERT_OK_AND_ASSIGN(wv1::ProfileTask task, MakeTask(*prepared, variants, settings, "screen"));
  service::ProfileResult result = pool_->Profile(task);
  EXPECT_EQ(result.done.status(), v1::OK) << result.done.ShortDebugString();
  ASSERT_EQ(result.outcomes.size(), variants.size());
  std::string report;
  for (size_t i = 0; i < result.outcomes.size(); ++i) {
    const wv1::VariantOutcome& outcome = result.outcomes[i];
    const std::string what = outcome.ShortDebugString();
    ASSERT_EQ(outcome.status(), v1::OK) << what;
    const v1::TimingStats& timing = outcome.timing();
    const double replay_s = timing.median_us() * 1e-6 * outcome.launches_per_sample();
    const double timed_s = replay_s * timing.samples();
    EXPECT_GE(timing.samples(), 5) << what;
    // The budget or five samples, whichever is more, and one replay over.
    EXPECT_LE(timed_s, 1.3 * std::max(0.003, 5 * replay_s) + replay_s) << what;
    const wv1::VariantTimeline& stages = outcome.timeline();
    EXPECT_GT(stages.load_s(), 0) << what;
    EXPECT_GT(stages.validate_s(), 0) << what;
    EXPECT_GT(stages.graph_s(), 0) << what;
    EXPECT_GT(stages.warmup_s(), 0) << what;
    EXPECT_GE(stages.samples_s(), 0.8 * timed_s) << what;
    EXPECT_LE(stages.load_s() + stages.validate_s() + stages.graph_s() + stages.warmup_s() +
                  stages.samples_s(),
              outcome.wall_seconds())
        << what;
    if (i > 0) {
      // One warm-up replay, not 2 ms of them (a generous bound: the host
      // waits for it).
      EXPECT_LE(stages.warmup_s(), replay_s + 0.001) << what;
    }
    absl::StrAppend(&report, i == 0 ? "" : "; ",
                    absl::StrFormat("%.2f ms wall (GPU %.2f): %d samples of %d launches, "
                                    "warm-up %.2f ms, samples %.2f ms",
                                    outcome.wall_seconds() * 1e3, outcome.gpu_seconds() * 1e3,
                                    timing.samples(), outcome.launches_per_sample(),
                                    stages.warmup_s() * 1e3, stages.samples_s() * 1e3));
  }
  Summary("screen", absl::StrCat(ProblemContext(family.name(), problem), ": ", report));
}

// A serial task: four rmsnorm candidates validated, then timed together in
// interleaved rounds until steady; the worker measured the copy bandwidth
// at start, and NVML sees no process but its own (or says why it cannot).
TEST_F(GpuTest, SerialRoundsTimeTheCandidatesTogetherUntilSteady) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PreparedProblem> prepared, PrepareRmsnormSquare());
  std::vector<Pick> chosen;
  for (int i = 0; i < static_cast<int>(prepared->space.variants.size()) && chosen.size() < 4;
       i += 7) {
    chosen.push_back({i, ""});
  }
  ASSERT_OK_AND_ASSIGN(wv1::ProfileTask task,
                       MakeTask(*prepared, chosen, kernels::ProfileSettings(), "serial"));
  task.mutable_serial()->set_max_seconds(3);
  std::unique_ptr<service::ProfilePool::Reservation> gpu = pool_->Reserve();
  ASSERT_OK_AND_ASSIGN(wv1::DeviceState state, gpu->Probe());
  const wv1::DeviceInfo device = gpu->device();
  EXPECT_GT(device.copy_gbps(), 500) << device.ShortDebugString();
  if (state.nvml_error().empty()) {
    EXPECT_THAT(state.foreign(), ::testing::IsEmpty()) << state.ShortDebugString();
    EXPECT_GT(state.sm_clock_mhz(), 0) << state.ShortDebugString();
  }
  service::ProfileResult result = gpu->Profile(task);
  ASSERT_EQ(result.done.status(), v1::OK) << result.done.ShortDebugString();
  ASSERT_EQ(result.outcomes.size(), chosen.size());
  for (const wv1::VariantOutcome& outcome : result.outcomes) {
    EXPECT_EQ(outcome.status(), v1::OK) << outcome.ShortDebugString();
  }
  const wv1::SerialReport& report = result.done.serial();
  ASSERT_EQ(report.timings_size(), static_cast<int>(chosen.size())) << report.ShortDebugString();
  EXPECT_GE(report.rounds(), 5) << report.ShortDebugString();
  EXPECT_FALSE(report.stop().empty());
  EXPECT_EQ(report.contended_rounds(), 0) << report.ShortDebugString();
  std::string line;
  for (const wv1::SerialTiming& t : report.timings()) {
    EXPECT_GT(t.timing().median_us(), 0);
    // A median per round; every candidate timed in the first 5, those
    // slower than the fastest beyond doubt not after.
    ASSERT_EQ(t.round_median_us_size(), report.rounds()) << t.ShortDebugString();
    int timed = 0;
    for (int r = 0; r < report.rounds(); ++r) {
      if (r < 5) {
        EXPECT_GT(t.round_median_us(r), 0) << r;
      }
      timed += t.round_median_us(r) > 0 ? 1 : 0;
    }
    EXPECT_GE(t.timing().samples(), timed);
    EXPECT_LT(t.noise(), 0.05) << t.ShortDebugString();
    absl::StrAppend(
        &line, line.empty() ? "" : ", ",
        absl::StrFormat("%.2f us (noise %.2f%%)", t.timing().median_us(), t.noise() * 100));
  }
  Summary("serial rounds",
          absl::StrFormat(
              "%d rounds (%s), %d throttled; SM clock %d-%d MHz of %d; power up to "
              "%.0f W of %.0f W, %d C, clocks events '%s'; copy %.0f GB/s; NVML: %s; %s",
              report.rounds(), report.stop(), report.throttled_rounds(), report.min_sm_clock_mhz(),
              report.max_sm_clock_mhz(), report.default_sm_clock_mhz(),
              report.max_power_mw() / 1000.0, report.power_limit_mw() / 1000.0,
              report.max_temperature_c(), report.clocks_events(), device.copy_gbps(),
              device.nvml_error().empty() ? "watching" : device.nvml_error(), line));
}

// GPU memory the compute processes on the device hold, in MiB, as
// nvidia-smi reports it (the pool's worker is the only one in this suite);
// nullopt when nvidia-smi cannot say.
std::optional<int64_t> DeviceProcessMemoryMiB() {
  FILE* pipe = popen(
      "nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits 2>/dev/null", "r");
  if (pipe == nullptr) return std::nullopt;
  std::string text;
  char buffer[256];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) text += buffer;
  if (pclose(pipe) != 0) return std::nullopt;
  int64_t total = 0;
  bool any = false;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    int64_t mib = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &mib)) return std::nullopt;
    total += mib;
    any = true;
  }
  if (!any) return std::nullopt;
  return total;
}

TEST_F(GpuTest, AWorkerReleasesEachProblemsMemorySoALongJobDoesNotGrow) {
  ASSERT_OK_AND_ASSIGN(v1::KernelFamily family,
                       kernels::LoadFamilyFile(absl::StrCat(KernelsDir(), "/rmsnorm.textproto")));
  // 256 MiB per input set: growth per task would show at once.
  v1::Problem problem;
  (*problem.mutable_dims())["rows"] = 16384;
  (*problem.mutable_dims())["hidden"] = 4096;
  problem.set_dtype(v1::FLOAT32);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PreparedProblem> prepared, Prepare(family, problem));
  const int variant =
      FindVariant(*prepared, {{"VEC", 4}, {"ITEMS", 4}, {"ROWS_PER_BLOCK", 1}, {"CACHE_ROW", 1}});
  ASSERT_GE(variant, 0);
  kernels::ProfileSettings settings;
  settings.timing_budget_s = 0.02;
  settings.min_samples = 5;
  ASSERT_OK_AND_ASSIGN(
      wv1::ProfileTask task,
      MakeTask(*prepared, {{variant, ""}, {variant, "again"}}, settings, "memory"));
  auto run = [&] {
    service::ProfileResult result = pool_->Profile(task);
    ASSERT_EQ(result.done.status(), v1::OK) << result.done.ShortDebugString();
    ASSERT_EQ(result.outcomes.size(), 2u);
    EXPECT_EQ(result.outcomes[1].status(), v1::OK);
    EXPECT_GT(result.done.peak_memory_bytes(), int64_t{256} << 20);
  };
  for (int i = 0; i < 2; ++i) run();  // modules, graphs and pools have been made once
  const std::optional<int64_t> before = DeviceProcessMemoryMiB();
  if (!before.has_value()) GTEST_SKIP() << "nvidia-smi cannot report process memory here";
  for (int i = 0; i < 10; ++i) run();
  const std::optional<int64_t> after = DeviceProcessMemoryMiB();
  ASSERT_TRUE(after.has_value());
  // Each task held over 1 GiB at its peak; between tasks the worker keeps
  // only its context and its own kernels.
  EXPECT_LE(*after - *before, 16) << "before " << *before << " MiB, after " << *after << " MiB";
  Summary("memory", absl::StrCat("worker holds ", *before, " MiB after 2 tasks and ", *after,
                                 " MiB after 12 (each task peaked above 1 GiB)"));
}

// The built-in families, in the order their tests run.
constexpr const char* kBuiltinFamilies[] = {"rmsnorm", "softmax", "gla_decode"};

// AUTOTUNE_GPU_BUILTIN_BUDGET_S, shared by the built-in families' tests of
// this process: each gets an equal part of what the ones before it left.
struct BuiltinBudget {
  double total_s = 0;  // 0: no limit
  absl::Duration used;
  int families_left = static_cast<int>(std::size(kBuiltinFamilies));
};
BuiltinBudget& builtin_budget() {
  static BuiltinBudget* const budget = new BuiltinBudget;
  return *budget;
}

class BuiltinFamilyGpuTest : public GpuTest, public ::testing::WithParamInterface<const char*> {};

// Every variant of every problem of the family's default manifest passes
// validation on the device. The family's kernels are compiled first, on
// every core.
TEST_P(BuiltinFamilyGpuTest, EveryVariantOfEveryDefaultProblemValidates) {
  const std::string name = GetParam();
  const std::string base = absl::StrCat(KernelsDir(), "/", name);
  ASSERT_OK_AND_ASSIGN(v1::KernelFamily family, kernels::LoadFamilyFile(base + ".textproto"));
  ASSERT_OK_AND_ASSIGN(v1::Manifest manifest, kernels::LoadManifestFile(base + ".manifest"));
  ASSERT_OK_AND_ASSIGN(std::vector<kernels::ManifestProblem> problems,
                       kernels::ExpandManifest(manifest, {{name, family}}));
  ASSERT_FALSE(problems.empty());

  BuiltinBudget& budget = builtin_budget();
  const std::string budget_text = EnvironmentOr("AUTOTUNE_GPU_BUILTIN_BUDGET_S", "");
  if (!budget_text.empty() && !absl::SimpleAtod(budget_text, &budget.total_s)) {
    FAIL() << "AUTOTUNE_GPU_BUILTIN_BUDGET_S is not a number: " << budget_text;
  }
  std::optional<absl::Duration> share;
  if (budget.total_s > 0) {
    share = (absl::Seconds(budget.total_s) - budget.used) / std::max(budget.families_left, 1);
  }
  const absl::Time start = absl::Now();

  std::vector<kernels::CompileRequest> requests;
  for (const kernels::ManifestProblem& problem : problems) {
    ASSERT_OK_AND_ASSIGN(kernels::SearchSpace space,
                         kernels::ExpandSearchSpace(family, problem.problem));
    for (kernels::CompileRequest& request : CompileRequests(family, space, gpu->Arch())) {
      requests.push_back(std::move(request));
    }
  }
  ASSERT_OK(gpu->CompileAll(requests));
  const absl::Duration compile_time = absl::Now() - start;

  int failures = 0, variants = 0;
  size_t done = 0;
  std::vector<wv1::VariantOutcome> outcomes;
  absl::Duration profile_time;
  for (const kernels::ManifestProblem& problem : problems) {
    if (share.has_value() && absl::Now() - start > *share) break;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<PreparedProblem> prepared,
                         Prepare(family, problem.problem));
    kernels::ProfileSettings settings;
    settings.validate_only = true;
    ASSERT_OK_AND_ASSIGN(wv1::ProfileTask task,
                         MakeTask(*prepared, AllVariants(*prepared), settings,
                                  absl::StrCat("builtin-", name, "-", done)));
    const absl::Time task_start = absl::Now();
    service::ProfileResult result = pool_->Profile(task);
    const absl::Duration took = absl::Now() - task_start;
    profile_time += took;
    variants += task.variants_size();
    ++done;
    if (result.done.status() != v1::OK ||
        result.outcomes.size() != static_cast<size_t>(task.variants_size())) {
      ++failures;
      ADD_FAILURE() << task.context() << ": the task ended " << result.done.ShortDebugString()
                    << " after " << result.outcomes.size() << " of " << task.variants_size()
                    << " variants";
    }
    for (const wv1::VariantOutcome& outcome : result.outcomes) {
      if (outcome.status() != v1::OK && ++failures <= 10) {
        ADD_FAILURE() << task.context() << " [" << outcome.variant_id()
                      << "]: " << outcome.ShortDebugString();
      }
    }
    Progress(absl::StrCat("builtin ", task.context(), ": ", task.variants_size(), " variants, ",
                          CountStatuses(result.outcomes), ", ", Seconds(took)));
    outcomes.insert(outcomes.end(), result.outcomes.begin(), result.outcomes.end());
  }
  budget.used += absl::Now() - start;
  --budget.families_left;

  Summary(absl::StrCat("builtin ", name),
          absl::StrCat(done, " of ", problems.size(), " problems, ", variants,
                       " variants validated: ", CountStatuses(outcomes), "; compile ",
                       Seconds(compile_time), " (", requests.size(), " requests), validation ",
                       Seconds(profile_time)));
  if (done < problems.size()) {
    Summary(absl::StrCat("builtin ", name),
            absl::StrCat("INCOMPLETE: its share (", Seconds(*share),
                         ") of AUTOTUNE_GPU_BUILTIN_BUDGET_S=", budget_text, " ran out"));
  }
  EXPECT_EQ(failures, 0) << "variants or problems that did not validate (the first 10 above)";
}

// gemm_bf16 has thousands of configs a problem, too many to compile here:
// an even spread of each problem's space validates, over problems with an
// M that tiles no block exactly, a single row (split-K's case), N and K
// that several tile sizes and splits divide, and an N (640) that the TMA
// path's 128, 192 and 256 tiles leave ragged: 96 mma.sync configs for sm_90
// and, on a GPU that runs sm_90a, 48 of each wgmma path's (the third with
// tensor maps the worker builds over each input set), and 48 of its
// persistent schedule launched as if the GPU had 7 SMs, so that each block
// walks several tiles and the blocks unequal numbers of them; the same two
// schedules in clusters of two (whose second block of a pair lies wholly
// past M where the tile rows are odd: M = 1, 300 with 64-row tiles). Every config
// of a tuned problem is validated again by the job that tunes it.
TEST_F(GpuTest, AnEvenSpreadOfGemmConfigsValidates) {
  ASSERT_OK_AND_ASSIGN(v1::KernelFamily family,
                       kernels::LoadFamilyFile(absl::StrCat(KernelsDir(), "/gemm_bf16.textproto")));
  std::vector<wv1::VariantOutcome> outcomes;
  int failures = 0;
  int wgmma = 0;
  const absl::Time start = absl::Now();
  struct Pass {
    std::string arch;
    size_t sample;
    int64_t wgmma;        // the WGMMA param of the configs kept
    int64_t persistent;   // and their PERSISTENT
    int64_t sm_count;     // the launch's (0: a block per tile)
    int64_t cluster = 1;  // and their CLUSTER
  };
  std::vector<Pass> passes = {{gpu->Arch(), 96, 0, 0, 0}};
  if (gpu->Arch() == "sm_90") {
    passes.push_back({"sm_90a", 48, 1, 0, 0});
    passes.push_back({"sm_90a", 48, 2, 0, 0});
    passes.push_back({"sm_90a", 48, 3, 0, 0});  // the TMA, through the tensor maps
    passes.push_back({"sm_90a", 48, 3, 1, 7});  // its persistent schedule, 7 blocks
    // Clusters of two sharing B: a pair of blocks per pair of tiles, and
    // persistent on "7 SMs" (3 pairs, each walking several pairs of tiles).
    passes.push_back({"sm_90a", 48, 3, 0, 0, 2});
    passes.push_back({"sm_90a", 48, 3, 1, 7, 2});
  }
  for (const auto& [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 512, 2048}, {77, 256, 1024}, {300, 768, 4096}, {300, 640, 1024}}) {
    for (const Pass& pass : passes) {
      v1::Problem problem;
      (*problem.mutable_dims())["M"] = m;
      (*problem.mutable_dims())["N"] = n;
      (*problem.mutable_dims())["K"] = k;
      problem.set_dtype(v1::BFLOAT16);
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<PreparedProblem> prepared,
                           Prepare(
                               family, problem, pass.sample, pass.arch,
                               [&](const kernels::Variant& v) {
                                 return v.config.params().at("WGMMA") == pass.wgmma &&
                                        v.config.params().at("PERSISTENT") == pass.persistent &&
                                        v.config.params().at("CLUSTER") == pass.cluster;
                               },
                               pass.sm_count));
      ASSERT_FALSE(prepared->space.variants.empty()) << pass.arch;
      if (pass.wgmma > 0) wgmma += static_cast<int>(prepared->space.variants.size());
      kernels::ProfileSettings settings;
      settings.validate_only = true;
      std::vector<Pick> picks;  // ids are positions in the sample
      for (size_t i = 0; i < prepared->space.variants.size(); ++i) {
        picks.push_back({static_cast<int>(i), absl::StrCat(i)});
      }
      ASSERT_OK_AND_ASSIGN(wv1::ProfileTask task,
                           MakeTask(*prepared, picks, settings,
                                    absl::StrCat("gemm-", m, "-", n, "-", k, "-", pass.arch,
                                                 pass.persistent ? "-persistent" : "",
                                                 pass.cluster > 1 ? "-cluster" : "")));
      service::ProfileResult result = pool_->Profile(task);
      ASSERT_EQ(result.outcomes.size(), static_cast<size_t>(task.variants_size()))
          << result.done.ShortDebugString();
      for (const wv1::VariantOutcome& outcome : result.outcomes) {
        if (outcome.status() != v1::OK && ++failures <= 10) {
          const v1::Config& config =
              prepared->space.variants[static_cast<size_t>(std::stoi(outcome.variant_id()))].config;
          ADD_FAILURE() << task.context() << " " << config.ShortDebugString() << ": "
                        << outcome.ShortDebugString();
        }
      }
      outcomes.insert(outcomes.end(), result.outcomes.begin(), result.outcomes.end());
    }
  }
  Summary("builtin gemm_bf16",
          absl::StrCat(outcomes.size(), " configs over 4 problems validated (", wgmma,
                       " of them wgmma on sm_90a): ", CountStatuses(outcomes), " in ",
                       Seconds(absl::Now() - start)));
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(Builtin, BuiltinFamilyGpuTest, ::testing::ValuesIn(kBuiltinFamilies),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace autotune::testing
