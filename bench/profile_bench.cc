// autotune-bench-profile: how far the profile worker's timings can be
// trusted, and what they cost.
//
// The work: problems of the built-in families (--problem, repeatable; by
// default two of each family's manifest plus gla_decode's batch-1 shapes),
// each expanded as a warmup job expands it (ExpandSearchSpace) and cut to an
// evenly spaced --max-variants of its variants (same choice on every run),
// compiled once in a CompilePool of autotune-worker processes together with
// the reference, and turned into ProfileTasks by MakeProfileTask.
//
// Then --runs runs (default 3) measure every task COLD, each run in a fresh
// ProfilePool, so in a fresh worker process with its own CUDA context.
// Reported:
//   repeatability  for each variant OK in every run, the spread
//                  (max - min) / median of its run medians; the median and
//                  p90 of the spread over the variants, how many are within
//                  1 %, and per problem whether every run found the same
//                  fastest variant;
//   cold vs hot    for the --hot-problem shapes (default: gla_decode at batch
//                  1), the same variants again with cache_state HOT, in the
//                  first run right after their COLD task: the median over the
//                  variants of cold median / hot median;
//   cost           GPU time per validated variant (VariantOutcome.gpu_seconds),
//                  the share of the worker's wall time the GPU was busy
//                  (ProfileDone gpu_seconds / wall_seconds), and the wall time
//                  per variant as a caller of ProfilePool::Profile sees it
//                  (reference check, worker restarts and transfers included).
//
// Fidelity export (--out DIR): for each problem its 3 fastest and its
// slowest variant by the median of the run medians, and the 2 fastest HOT
// variants of each hot shape, at most --export-limit in all: each cubin in
// DIR/cubins/ and DIR/fidelity.json with everything an independent
// measurement needs (kernel symbol, launch, buffers, scalars in argument
// order, pool sets, launches per sample, the worker's statistics); see
// bench/profile_fidelity.py. With --compile-only the program stops after the
// compile and exports the first variants of each problem without timings.
//
// --max-seconds bounds the whole: a run is skipped when the time spent plus
// the last run's would exceed it (reported, not an error; the first run
// always runs).
//
// Exit status: 0 when everything compiled and every task ran to its end
// (variants that fail validation are counted, not errors); 1 otherwise,
// including when no GPU can be used (the reason is printed); 2 on bad flags.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/file.h"
#include "base/gpu_lease.h"
#include "base/paths.h"
#include "base/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/family_loader.h"
#include "kernels/gpu/compiler.h"
#include "kernels/profile_task.h"
#include "kernels/search_space.h"
#include "proto/autotune.pb.h"
#include "proto/problem.h"
#include "proto/worker.pb.h"
#include "service/pools/compile_pool.h"
#include "service/pools/profile_pool.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace autotune::bench {
namespace {

namespace fs = std::filesystem;
namespace wv1 = ::autotune::worker::v1;
using Clock = std::chrono::steady_clock;

// Problems measured when no --problem is given: for each built-in family a
// large (prefill-sized, DRAM-bound) and a small (decode-sized) shape of its
// manifest, and gla_decode's single-sequence decode shapes, where caches
// matter most.
const std::vector<std::string> kDefaultProblems = {
    "rmsnorm:rows=4096,hidden=4096:bf16",        "rmsnorm:rows=64,hidden=8192:fp16",
    "softmax:rows=4096,hidden=8192:fp32",        "softmax:rows=64,hidden=4096:bf16",
    "gla_decode:batch=16,heads=32,dim=128:bf16", "gla_decode:batch=64,heads=32,dim=64:fp16",
    "gla_decode:batch=1,heads=32,dim=64:bf16",   "gla_decode:batch=1,heads=32,dim=128:bf16",
};
const std::vector<std::string> kDefaultHotProblems = {
    "gla_decode:batch=1,heads=32,dim=64:bf16",
    "gla_decode:batch=1,heads=32,dim=128:bf16",
};

// A variant whose run medians lie within this of each other is "repeatable".
constexpr double kRepeatableSpread = 0.01;
// Exported per problem: the fastest few, the slowest one; per hot shape the
// fastest few HOT.
constexpr int kExportFastest = 3;
constexpr int kExportHotFastest = 2;
// With --compile-only: the first variants of each problem.
constexpr int kExportCompileOnly = 4;

struct BenchOptions {
  std::string kernels_dir;
  std::string worker;  // empty: beside this program
  std::vector<std::string> problems = kDefaultProblems;
  std::vector<std::string> hot_problems = kDefaultHotProblems;
  int max_variants = 16;
  int runs = 3;
  double timing_budget_s = 0.1;
  int min_samples = 30;
  int seeds = 3;
  int compile_workers = 0;  // 0: one per core
  double compile_timeout_s = 120;
  std::string arch = "sm_90";
  std::string out;  // fidelity export; empty: none
  int export_limit = 40;
  std::string json;        // summary; empty: none
  double max_seconds = 0;  // 0: no limit
  bool compile_only = false;
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Nearest rank: the smallest value with at least q of the values at or below it.
double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(q * static_cast<double>(values.size()));
  const size_t index = static_cast<size_t>(std::max(1.0, rank)) - 1;
  return values[std::min(index, values.size() - 1)];
}

std::string Fixed(double value, int digits) { return absl::StrFormat("%.*f", digits, value); }
std::string Percent(double fraction) { return absl::StrCat(Fixed(fraction * 100, 2), "%"); }

// The autotune-worker beside this program (a bundle), else the one of the
// build tree (bench/../service/).
std::string DefaultWorkerPath() {
  return autotune::FindBesideThisProgram("autotune-worker", {"../service"});
}

// ---- The work ---------------------------------------------------------------

struct BenchProblem {
  std::string context;  // "rmsnorm hidden=4096,rows=4096 bf16"
  const v1::KernelFamily* family = nullptr;
  v1::Problem problem;
  bool hot = false;  // also measured HOT
  kernels::SearchSpace space;
  std::vector<size_t> picked;  // indices into space.variants
  // Filled by the compile: the reference, and per pick its kernel (an empty
  // cubin when the compile failed).
  kernels::CompiledKernel reference;
  std::vector<kernels::CompiledKernel> kernels;
  std::map<std::string, size_t> pick_of_id;  // variant id -> position in picked
  wv1::ProfileTask cold_task;
  wv1::ProfileTask hot_task;
};

// "gla_decode:batch=1,heads=32,dim=64:bf16" -> family name and problem.
absl::StatusOr<std::pair<std::string, v1::Problem>> ParseProblemSpec(const std::string& spec) {
  std::vector<std::string> parts = absl::StrSplit(spec, ':');
  if (parts.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "problem '", spec, "': expected FAMILY:DIMS:DTYPE, e.g. rmsnorm:rows=64,hidden=4096:bf16"));
  }
  v1::Problem problem;
  absl::StatusOr<std::map<std::string, int64_t>> dims = ParseDims(parts[1]);
  if (!dims.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("problem '", spec, "': ", dims.status().message()));
  }
  for (const auto& [name, value] : *dims) (*problem.mutable_dims())[name] = value;
  absl::StatusOr<v1::DType> dtype = ParseDType(parts[2]);
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("problem '", spec, "': ", dtype.status().message()));
  }
  problem.set_dtype(*dtype);
  return std::make_pair(parts[0], problem);
}

struct Workload {
  std::vector<v1::KernelFamily> families;
  std::vector<BenchProblem> problems;
};

absl::StatusOr<std::unique_ptr<Workload>> BuildWorkload(const BenchOptions& options) {
  auto work = std::make_unique<Workload>();
  ASSIGN_OR_RETURN(work->families, kernels::LoadFamilyDirectory(options.kernels_dir));
  auto find_family = [&](const std::string& name) -> const v1::KernelFamily* {
    for (const v1::KernelFamily& family : work->families) {
      if (family.name() == name) return &family;
    }
    return nullptr;
  };
  std::vector<std::string> specs = options.problems;
  std::set<std::string> hot_contexts;
  for (const std::string& spec : options.hot_problems) {
    ASSIGN_OR_RETURN(auto parsed, ParseProblemSpec(spec));
    hot_contexts.insert(ProblemContext(parsed.first, parsed.second));
    specs.push_back(spec);  // measured COLD as well; a duplicate is dropped below
  }
  std::set<std::string> seen;
  for (const std::string& spec : specs) {
    ASSIGN_OR_RETURN(auto parsed, ParseProblemSpec(spec));
    BenchProblem item;
    item.family = find_family(parsed.first);
    if (item.family == nullptr) {
      std::vector<std::string> known;
      for (const v1::KernelFamily& family : work->families) known.push_back(family.name());
      return absl::InvalidArgumentError(
          absl::StrCat("problem '", spec, "': unknown family '", parsed.first,
                       "' (known: ", absl::StrJoin(known, ", "), ")"));
    }
    item.problem = parsed.second;
    item.context = ProblemContext(parsed.first, parsed.second);
    if (!seen.insert(item.context).second) continue;
    item.hot = hot_contexts.contains(item.context);
    absl::StatusOr<kernels::SearchSpace> space =
        kernels::ExpandSearchSpace(*item.family, item.problem);
    if (!space.ok()) {
      return absl::Status(space.status().code(),
                          absl::StrCat("problem '", spec, "': ", space.status().message()));
    }
    item.space = *std::move(space);
    const size_t total = item.space.variants.size();
    if (total == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("problem '", spec, "': the search space has no variant"));
    }
    const size_t keep = std::min(total, static_cast<size_t>(options.max_variants));
    for (size_t i = 0; i < keep; ++i) item.picked.push_back(i * total / keep);
    work->problems.push_back(std::move(item));
  }
  return work;
}

// ---- Compile ----------------------------------------------------------------

struct CompileSummary {
  int64_t requested = 0;  // reference + picked variants over all problems
  int64_t distinct = 0;
  int64_t failed = 0;
  std::string first_error;
  double wall_s = 0;
  int workers = 0;
  std::string nvrtc_version;
};

absl::StatusOr<CompileSummary> CompileAll(const BenchOptions& options,
                                          const std::string& worker_path, Workload& work) {
  CompileSummary summary;
  service::CompilePoolOptions pool_options;
  pool_options.worker_path = worker_path;
  pool_options.workers = options.compile_workers > 0
                             ? options.compile_workers
                             : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::unique_ptr<service::CompilePool>> pool =
      service::CompilePool::Start(pool_options);
  if (!pool.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot start the compile pool: ", pool.status().message()));
  }
  summary.workers = (*pool)->size();
  summary.nvrtc_version = (*pool)->nvrtc_version();

  // Every kernel to build, once per compile key.
  struct Unit {
    kernels::CompileRequest request;
    kernels::CompiledKernel kernel;
    std::string error;
  };
  std::vector<Unit> units;
  std::map<std::string, size_t> unit_of_key;
  auto add = [&](const v1::KernelFamily& family, const std::string& name_expression,
                 const std::vector<std::string>& compile_options) {
    ++summary.requested;
    kernels::CompileRequest request;
    request.source = family.source();
    request.program_name = family.name() + ".cu";
    request.name_expression = name_expression;
    request.options = compile_options;
    request.arch = options.arch;
    const std::string key = kernels::CompileKey(request, summary.nvrtc_version);
    auto [it, inserted] = unit_of_key.emplace(key, units.size());
    if (inserted) units.push_back({.request = std::move(request), .kernel = {}, .error = {}});
    return it->second;
  };
  std::vector<size_t> reference_unit(work.problems.size());
  std::vector<std::vector<size_t>> variant_units(work.problems.size());
  for (size_t p = 0; p < work.problems.size(); ++p) {
    BenchProblem& item = work.problems[p];
    reference_unit[p] =
        add(*item.family, item.space.reference_name, item.space.reference_compile_options);
    for (size_t index : item.picked) {
      const kernels::Variant& variant = item.space.variants[index];
      variant_units[p].push_back(
          add(*item.family, variant.name_expression, variant.compile_options));
    }
  }
  summary.distinct = static_cast<int64_t>(units.size());

  std::atomic<size_t> next{0};
  const absl::Duration timeout = absl::Seconds(options.compile_timeout_s);
  auto compile = [&] {
    for (size_t i = next.fetch_add(1); i < units.size(); i = next.fetch_add(1)) {
      Unit& unit = units[i];
      wv1::CompileTask task;
      task.set_task_id(absl::StrCat(i));
      task.set_source(unit.request.source);
      task.set_program_name(unit.request.program_name);
      task.set_name_expression(unit.request.name_expression);
      for (const std::string& option : unit.request.options) task.add_options(option);
      task.set_arch(unit.request.arch);
      wv1::CompileOutcome outcome = (*pool)->Compile(task, timeout);
      if (outcome.status() == wv1::CompileOutcome::OK && !outcome.cubin().empty()) {
        unit.kernel.cubin = std::move(*outcome.mutable_cubin());
        unit.kernel.lowered_name = outcome.lowered_name();
      } else {
        unit.error = absl::StrCat(unit.request.program_name, " ", unit.request.name_expression, " ",
                                  absl::StrJoin(unit.request.options, " "), ": ",
                                  wv1::CompileOutcome::Status_Name(outcome.status()), ": ",
                                  outcome.log().substr(0, 1000));
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t thread_count = std::min<size_t>(static_cast<size_t>(summary.workers), units.size());
  for (size_t t = 0; t < thread_count; ++t) threads.emplace_back(compile);
  for (std::thread& thread : threads) thread.join();
  summary.wall_s = Seconds(Clock::now() - start);

  for (const Unit& unit : units) {
    if (unit.error.empty()) continue;
    ++summary.failed;
    if (summary.first_error.empty()) summary.first_error = unit.error;
  }
  for (size_t p = 0; p < work.problems.size(); ++p) {
    BenchProblem& item = work.problems[p];
    item.reference = units[reference_unit[p]].kernel;
    for (size_t unit : variant_units[p]) item.kernels.push_back(units[unit].kernel);
  }
  return summary;
}

// The COLD and HOT tasks of every problem; variants whose compile failed are
// left out. INVALID_ARGUMENT from MakeProfileTask.
absl::Status BuildTasks(const BenchOptions& options, Workload& work) {
  for (size_t p = 0; p < work.problems.size(); ++p) {
    BenchProblem& item = work.problems[p];
    if (item.reference.cubin.empty()) continue;  // no task: reported as a compile error
    std::vector<kernels::CompiledVariant> variants;
    for (size_t k = 0; k < item.picked.size(); ++k) {
      if (item.kernels[k].cubin.empty()) continue;
      const kernels::Variant& variant = item.space.variants[item.picked[k]];
      const std::string id = absl::StrCat(variant.index);
      item.pick_of_id[id] = k;
      variants.push_back({.variant = &variant, .kernel = item.kernels[k], .id = id});
    }
    if (variants.empty()) continue;
    kernels::ProfileSettings settings;
    settings.seeds = options.seeds;
    settings.timing_budget_s = options.timing_budget_s;
    settings.min_samples = options.min_samples;
    settings.cache_state = v1::COLD;
    ASSIGN_OR_RETURN(item.cold_task,
                     kernels::MakeProfileTask(*item.family, item.problem, item.space,
                                              item.reference, variants, settings));
    item.cold_task.set_task_id(absl::StrCat("p", p, "-cold"));
    if (item.hot) {
      settings.cache_state = v1::HOT;
      ASSIGN_OR_RETURN(item.hot_task,
                       kernels::MakeProfileTask(*item.family, item.problem, item.space,
                                                item.reference, variants, settings));
      item.hot_task.set_task_id(absl::StrCat("p", p, "-hot"));
    }
  }
  return absl::OkStatus();
}

// ---- Measure ----------------------------------------------------------------

// One task run once.
struct TaskRecord {
  int run = 0;  // 1-based
  size_t problem = 0;
  v1::CacheState state = v1::COLD;
  service::ProfileResult result;
  double wall_s = 0;  // ProfilePool::Profile as its caller saw it
};

struct Measurements {
  std::vector<TaskRecord> tasks;
  std::vector<double> run_wall_s;    // per completed run
  std::vector<double> pool_start_s;  // per run
  int runs_done = 0;
  std::string stopped;  // why fewer runs than asked
  wv1::DeviceInfo device;
  int64_t workers_replaced = 0;
};

void RunTask(service::ProfilePool& pool, const wv1::ProfileTask& task, int run, size_t problem,
             v1::CacheState state, Measurements& out) {
  TaskRecord record;
  record.run = run;
  record.problem = problem;
  record.state = state;
  const Clock::time_point start = Clock::now();
  record.result = pool.Profile(task);
  record.wall_s = Seconds(Clock::now() - start);
  int ok = 0;
  for (const wv1::VariantOutcome& outcome : record.result.outcomes) {
    ok += outcome.status() == v1::OK;
  }
  std::cerr << absl::StrFormat("run %d %-4s %s: %d of %d OK, done %s, %.1f s\n", run,
                               state == v1::HOT ? "HOT" : "COLD", task.context(), ok,
                               task.variants_size(),
                               v1::VariantStatus_Name(record.result.done.status()), record.wall_s);
  out.workers_replaced += record.result.workers_replaced;
  out.tasks.push_back(std::move(record));
}

absl::StatusOr<Measurements> MeasureAll(const BenchOptions& options, const std::string& worker_path,
                                        const Workload& work, Clock::time_point program_start) {
  Measurements out;
  for (int run = 1; run <= options.runs; ++run) {
    const double elapsed = Seconds(Clock::now() - program_start);
    if (run > 1 && options.max_seconds > 0 &&
        elapsed + out.run_wall_s.back() > options.max_seconds) {
      out.stopped = absl::StrCat("run ", run, " of ", options.runs, " skipped: ", Fixed(elapsed, 0),
                                 " s spent, the last run took ", Fixed(out.run_wall_s.back(), 0),
                                 " s, --max-seconds ", Fixed(options.max_seconds, 0));
      break;
    }
    const Clock::time_point run_start = Clock::now();
    service::ProfilePoolOptions pool_options;
    pool_options.worker_path = worker_path;
    // Honours the daemons' GPU leases: no tuning job measures beside it.
    pool_options.lease_dir = kDefaultLeaseDir;
    absl::StatusOr<std::unique_ptr<service::ProfilePool>> pool =
        service::ProfilePool::Start(pool_options);
    if (!pool.ok()) {
      if (run == 1) return pool.status();
      out.stopped =
          absl::StrCat("run ", run, ": cannot start the profile pool: ", pool.status().message());
      break;
    }
    out.pool_start_s.push_back(Seconds(Clock::now() - run_start));
    if (run == 1) {
      std::vector<wv1::DeviceInfo> devices = (*pool)->devices();
      if (devices.empty()) return absl::InternalError("the profile pool reports no device");
      out.device = devices.front();
      const std::string device_arch = absl::StrCat("sm_", out.device.compute_capability());
      if (device_arch != options.arch) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the kernels were compiled for ", options.arch, " but device ", out.device.ordinal(),
            " (", out.device.name(), ") is ", device_arch, "; pass --arch ", device_arch));
      }
    }
    for (size_t p = 0; p < work.problems.size(); ++p) {
      const BenchProblem& item = work.problems[p];
      if (item.cold_task.variants_size() == 0) continue;
      RunTask(**pool, item.cold_task, run, p, v1::COLD, out);
      // HOT right after COLD in the same process, so the two differ in the
      // cache state alone.
      if (run == 1 && item.hot) RunTask(**pool, item.hot_task, run, p, v1::HOT, out);
    }
    pool->reset();  // the worker exits; the next run starts a new one
    out.run_wall_s.push_back(Seconds(Clock::now() - run_start));
    out.runs_done = run;
  }
  return out;
}

// ---- Analysis ---------------------------------------------------------------

struct VariantStats {
  size_t pick = 0;
  std::string id;
  std::string label;
  std::vector<double> run_median_us;                    // per run; NaN when not OK there
  std::vector<const wv1::VariantOutcome*> run_outcome;  // per run; null when absent
  const wv1::VariantOutcome* hot = nullptr;
  bool ok_everywhere = false;
  double median_us = 0;  // of the run medians
  double spread = 0;     // (max - min) / median_us
};

struct ProblemStats {
  std::vector<VariantStats> variants;  // parallel to the task's variants
  int ok = 0;                          // OK in every run
  double spread_median = 0;
  double spread_p90 = 0;
  int repeatable = 0;  // spread <= kRepeatableSpread
  bool same_fastest = false;
  std::string fastest_label;
  double fastest_us = 0;
  std::string failure;  // a task that did not end OK
  // HOT shapes.
  int hot_pairs = 0;
  double cold_hot_median = 0;
  double cold_hot_min = 0;
  double cold_hot_max = 0;
  int cold_sets = 0;  // pool sets of the COLD measurement (median over variants)
};

struct CostStats {
  int64_t outcomes = 0;
  int64_t ok = 0;
  double ok_gpu_s = 0;
  double all_gpu_s = 0;
  double variant_wall_s = 0;
  double done_gpu_s = 0;
  double done_wall_s = 0;
  double task_wall_s = 0;
  int64_t task_variants = 0;
  std::map<std::string, int64_t> by_status;
};

struct Analysis {
  std::vector<ProblemStats> problems;
  std::vector<double> spreads;  // over every variant OK in every run
  int repeatable = 0;
  int same_fastest = 0;
  int problems_measured = 0;
  CostStats cost;
  int task_failures = 0;
};

Analysis Analyze(const Workload& work, const Measurements& m) {
  Analysis a;
  a.problems.resize(work.problems.size());
  const int runs = m.runs_done;
  for (size_t p = 0; p < work.problems.size(); ++p) {
    const BenchProblem& item = work.problems[p];
    ProblemStats& ps = a.problems[p];
    for (const wv1::KernelImage& image : item.cold_task.variants()) {
      VariantStats v;
      v.id = image.id();
      v.pick = item.pick_of_id.at(image.id());
      v.label = image.label();
      v.run_median_us.assign(static_cast<size_t>(runs), std::nan(""));
      v.run_outcome.assign(static_cast<size_t>(runs), nullptr);
      ps.variants.push_back(std::move(v));
    }
  }
  for (const TaskRecord& record : m.tasks) {
    ProblemStats& ps = a.problems[record.problem];
    const BenchProblem& item = work.problems[record.problem];
    if (record.result.done.status() != v1::OK) {
      ++a.task_failures;
      if (ps.failure.empty()) {
        ps.failure = absl::StrCat("run ", record.run, ": ",
                                  v1::VariantStatus_Name(record.result.done.status()), " ",
                                  record.result.done.phase(), ": ", record.result.done.detail());
      }
    }
    std::map<std::string, size_t> position;
    for (int i = 0; i < item.cold_task.variants_size(); ++i) {
      position[item.cold_task.variants(i).id()] = static_cast<size_t>(i);
    }
    CostStats& cost = a.cost;
    cost.done_gpu_s += record.result.done.gpu_seconds();
    cost.done_wall_s += record.result.done.wall_seconds();
    cost.task_wall_s += record.wall_s;
    cost.task_variants += static_cast<int64_t>(record.result.outcomes.size());
    for (const wv1::VariantOutcome& outcome : record.result.outcomes) {
      ++cost.outcomes;
      ++cost.by_status[v1::VariantStatus_Name(outcome.status())];
      cost.all_gpu_s += outcome.gpu_seconds();
      cost.variant_wall_s += outcome.wall_seconds();
      if (outcome.status() == v1::OK) {
        ++cost.ok;
        cost.ok_gpu_s += outcome.gpu_seconds();
      }
      auto it = position.find(outcome.variant_id());
      if (it == position.end()) continue;
      VariantStats& v = ps.variants[it->second];
      if (record.state == v1::HOT) {
        if (outcome.status() == v1::OK) v.hot = &outcome;
        continue;
      }
      const size_t r = static_cast<size_t>(record.run - 1);
      v.run_outcome[r] = &outcome;
      if (outcome.status() == v1::OK && outcome.timing().median_us() > 0) {
        v.run_median_us[r] = outcome.timing().median_us();
      }
    }
  }
  for (size_t p = 0; p < work.problems.size(); ++p) {
    ProblemStats& ps = a.problems[p];
    std::vector<double> spreads;
    std::vector<std::string> fastest_per_run(static_cast<size_t>(runs));
    std::vector<double> fastest_us(static_cast<size_t>(runs), std::numeric_limits<double>::max());
    for (VariantStats& v : ps.variants) {
      v.ok_everywhere = runs > 0 && std::none_of(v.run_median_us.begin(), v.run_median_us.end(),
                                                 [](double x) { return std::isnan(x); });
      if (!v.ok_everywhere) continue;
      ++ps.ok;
      const auto [lo, hi] = std::minmax_element(v.run_median_us.begin(), v.run_median_us.end());
      v.median_us = Median(v.run_median_us);
      v.spread = v.median_us > 0 ? (*hi - *lo) / v.median_us : 0;
      if (runs >= 2) {  // one run has no spread to speak of
        spreads.push_back(v.spread);
        a.spreads.push_back(v.spread);
        if (v.spread <= kRepeatableSpread) {
          ++ps.repeatable;
          ++a.repeatable;
        }
      }
      for (size_t r = 0; r < static_cast<size_t>(runs); ++r) {
        if (v.run_median_us[r] < fastest_us[r]) {
          fastest_us[r] = v.run_median_us[r];
          fastest_per_run[r] = v.id;
        }
      }
    }
    ps.spread_median = Median(spreads);
    ps.spread_p90 = Quantile(spreads, 0.9);
    if (ps.ok > 0) {
      ++a.problems_measured;
      ps.same_fastest =
          std::all_of(fastest_per_run.begin(), fastest_per_run.end(),
                      [&](const std::string& id) { return id == fastest_per_run[0]; });
      a.same_fastest += ps.same_fastest;
      const VariantStats* best = nullptr;
      for (const VariantStats& v : ps.variants) {
        if (v.ok_everywhere && (best == nullptr || v.median_us < best->median_us)) best = &v;
      }
      ps.fastest_label = best->label;
      ps.fastest_us = best->median_us;
    }
    // Cold / hot: the COLD medians of the first run, taken in the same
    // process right before the HOT task.
    std::vector<double> ratios;
    std::vector<double> sets;
    for (const VariantStats& v : ps.variants) {
      if (v.hot == nullptr || v.run_median_us.empty() || std::isnan(v.run_median_us[0])) continue;
      if (v.hot->timing().median_us() <= 0) continue;
      ratios.push_back(v.run_median_us[0] / v.hot->timing().median_us());
      sets.push_back(v.run_outcome[0]->pool_sets());
    }
    ps.hot_pairs = static_cast<int>(ratios.size());
    if (!ratios.empty()) {
      ps.cold_hot_median = Median(ratios);
      ps.cold_hot_min = *std::min_element(ratios.begin(), ratios.end());
      ps.cold_hot_max = *std::max_element(ratios.begin(), ratios.end());
      ps.cold_sets = static_cast<int>(Median(sets));
    }
  }
  return a;
}

// ---- Fidelity export ----------------------------------------------------------

google::protobuf::Value Number(double v) {
  google::protobuf::Value value;
  value.set_number_value(v);
  return value;
}
google::protobuf::Value Text(const std::string& v) {
  google::protobuf::Value value;
  value.set_string_value(v);
  return value;
}
google::protobuf::Value Flag(bool v) {
  google::protobuf::Value value;
  value.set_bool_value(v);
  return value;
}
google::protobuf::Value Null() {
  google::protobuf::Value value;
  value.set_null_value(google::protobuf::NULL_VALUE);
  return value;
}
google::protobuf::Value NumberList(const std::vector<double>& values) {
  google::protobuf::Value value;
  auto* list = value.mutable_list_value();
  for (double v : values) *list->add_values() = std::isnan(v) ? Null() : Number(v);
  return value;
}

std::string ToJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, print);
  return json;
}

google::protobuf::Value DeviceJson(const wv1::DeviceInfo& device) {
  google::protobuf::Value value;
  auto& f = *value.mutable_struct_value()->mutable_fields();
  f["name"] = Text(device.name());
  f["ordinal"] = Number(device.ordinal());
  f["compute_capability"] = Number(device.compute_capability());
  f["sm_count"] = Number(device.sm_count());
  f["l2_bytes"] = Number(static_cast<double>(device.l2_bytes()));
  f["memory_bytes"] = Number(static_cast<double>(device.memory_bytes()));
  f["driver_version"] = Text(device.driver_version());
  f["peak_bandwidth_gbps"] = Number(device.peak_bandwidth_gbps());
  f["uuid"] = Text(device.uuid());
  return value;
}

// One exported measurement.
struct ExportItem {
  size_t problem = 0;
  size_t variant = 0;  // index into ProblemStats::variants (= task order)
  v1::CacheState state = v1::COLD;
};

// The order of export: round by round over the groups (each problem's COLD
// picks, each hot shape's HOT picks), so that a limit keeps every problem.
std::vector<ExportItem> ChooseExports(const Workload& work, const Analysis& a, int limit,
                                      bool measured) {
  std::vector<std::vector<ExportItem>> groups;
  for (size_t p = 0; p < work.problems.size(); ++p) {
    const ProblemStats& ps = a.problems[p];
    std::vector<size_t> order;
    if (measured) {
      for (size_t i = 0; i < ps.variants.size(); ++i) {
        if (ps.variants[i].ok_everywhere) order.push_back(i);
      }
      std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
        return ps.variants[x].median_us < ps.variants[y].median_us;
      });
      std::vector<size_t> pick;
      for (size_t i = 0; i < order.size() && i < static_cast<size_t>(kExportFastest); ++i) {
        pick.push_back(order[i]);
      }
      if (order.size() > static_cast<size_t>(kExportFastest))
        pick.insert(pick.begin() + 1, order.back());
      std::vector<ExportItem> cold;
      for (size_t i : pick) cold.push_back({.problem = p, .variant = i, .state = v1::COLD});
      groups.push_back(std::move(cold));
      std::vector<size_t> hot;
      for (size_t i = 0; i < ps.variants.size(); ++i) {
        if (ps.variants[i].hot != nullptr) hot.push_back(i);
      }
      std::sort(hot.begin(), hot.end(), [&](size_t x, size_t y) {
        return ps.variants[x].hot->timing().median_us() < ps.variants[y].hot->timing().median_us();
      });
      if (hot.size() > static_cast<size_t>(kExportHotFastest)) hot.resize(kExportHotFastest);
      std::vector<ExportItem> hot_items;
      for (size_t i : hot) hot_items.push_back({.problem = p, .variant = i, .state = v1::HOT});
      if (!hot_items.empty()) groups.push_back(std::move(hot_items));
    } else {
      std::vector<ExportItem> first;
      for (size_t i = 0; i < ps.variants.size() && i < static_cast<size_t>(kExportCompileOnly);
           ++i) {
        first.push_back({.problem = p, .variant = i, .state = v1::COLD});
      }
      groups.push_back(std::move(first));
    }
  }
  std::vector<ExportItem> chosen;
  for (size_t round = 0; static_cast<int>(chosen.size()) < limit; ++round) {
    bool any = false;
    for (const std::vector<ExportItem>& group : groups) {
      if (round >= group.size() || static_cast<int>(chosen.size()) >= limit) continue;
      chosen.push_back(group[round]);
      any = true;
    }
    if (!any) break;
  }
  return chosen;
}

google::protobuf::Value TimingJson(const wv1::VariantOutcome& outcome) {
  google::protobuf::Value value;
  auto& f = *value.mutable_struct_value()->mutable_fields();
  const v1::TimingStats& t = outcome.timing();
  f["median_us"] = Number(t.median_us());
  f["min_us"] = Number(t.min_us());
  f["p90_us"] = Number(t.p90_us());
  f["cv"] = Number(t.cv());
  f["samples"] = Number(t.samples());
  f["achieved_gbps"] = Number(t.achieved_gbps());
  f["remeasured"] = Number(outcome.remeasured());
  f["detail"] = Text(outcome.detail());
  return value;
}

// Writes DIR/cubins/*.cubin and DIR/fidelity.json; returns how many.
absl::StatusOr<int> WriteExport(const BenchOptions& options, const Workload& work,
                                const Analysis& a, const Measurements* m) {
  const fs::path dir(options.out);
  std::error_code error;
  fs::create_directories(dir / "cubins", error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create ", (dir / "cubins").string(), ": ", error.message()));
  }
  const std::vector<ExportItem> chosen =
      ChooseExports(work, a, options.export_limit, /*measured=*/m != nullptr);
  google::protobuf::Struct root;
  auto& f = *root.mutable_fields();
  f["format"] = Text("autotune-profile-fidelity/1");
  f["date"] = Text(absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", absl::Now(), absl::UTCTimeZone()));
  f["measured"] = Flag(m != nullptr);
  f["device"] = m != nullptr ? DeviceJson(m->device) : Null();
  f["arch"] = Text(options.arch);
  f["runs"] = Number(m != nullptr ? m->runs_done : 0);
  f["timing_budget_s"] = Number(options.timing_budget_s);
  f["min_samples"] = Number(options.min_samples);
  auto* list = f["variants"].mutable_list_value();
  int written = 0;
  for (const ExportItem& item : chosen) {
    const BenchProblem& problem = work.problems[item.problem];
    const ProblemStats& ps = a.problems[item.problem];
    const VariantStats& v = ps.variants[item.variant];
    const wv1::ProfileTask& task = item.state == v1::HOT ? problem.hot_task : problem.cold_task;
    const wv1::KernelImage& image = task.variants(static_cast<int>(item.variant));
    const std::string state = item.state == v1::HOT ? "HOT" : "COLD";
    const std::string file = absl::StrFormat("cubins/%03d_%s_%s_%s.cubin", written,
                                             problem.family->name(), image.id(), state);
    RETURN_IF_ERROR(WriteFileAtomically((dir / file).string(), image.cubin()));

    google::protobuf::Value entry;
    auto& e = *entry.mutable_struct_value()->mutable_fields();
    e["family"] = Text(problem.family->name());
    e["problem"] = Text(problem.context);
    e["variant_id"] = Text(image.id());
    e["label"] = Text(image.label());
    e["cache_state"] = Text(state);
    e["cubin"] = Text(file);
    e["lowered_name"] = Text(image.lowered_name());
    auto dims = [](const google::protobuf::RepeatedField<int64_t>& values) {
      std::vector<double> out(values.begin(), values.end());
      while (out.size() < 3) out.push_back(1);
      return NumberList(out);
    };
    e["grid"] = dims(image.launch().grid());
    e["block"] = dims(image.launch().block());
    e["dynamic_shared_bytes"] = Number(static_cast<double>(image.launch().dynamic_shared_bytes()));
    e["bytes_per_call"] = Number(image.bytes_per_call());
    e["flops_per_call"] = Number(image.flops_per_call());
    auto* buffers = e["buffers"].mutable_list_value();
    for (const wv1::BufferSpec& spec : task.buffers()) {
      google::protobuf::Value buffer;
      auto& b = *buffer.mutable_struct_value()->mutable_fields();
      b["name"] = Text(spec.name());
      b["dtype"] = Text(std::string(DTypeName(spec.dtype())));
      b["elements"] = Number(static_cast<double>(spec.elements()));
      b["role"] = Text(v1::BufferRole_Name(spec.role()));
      auto& fill = *b["fill"].mutable_struct_value()->mutable_fields();
      fill["kind"] = Text(v1::Fill::Kind_Name(spec.fill().kind()));
      fill["low"] = Number(spec.fill().low());
      fill["high"] = Number(spec.fill().high());
      *buffers->add_values() = std::move(buffer);
    }
    auto* scalars = e["scalars"].mutable_list_value();
    for (const wv1::ScalarSpec& spec : task.scalars()) {
      google::protobuf::Value scalar;
      auto& s = *scalar.mutable_struct_value()->mutable_fields();
      s["name"] = Text(spec.name());
      s["dtype"] = Text(std::string(DTypeName(spec.dtype())));
      s["value"] = Number(spec.value());
      *scalars->add_values() = std::move(scalar);
    }
    // The worker's measurement. COLD: the run whose median is the middle
    // one gives the statistics, and every run's median is listed.
    const wv1::VariantOutcome* outcome = nullptr;
    if (m != nullptr && item.state == v1::HOT) {
      outcome = v.hot;
    } else if (m != nullptr) {
      for (const wv1::VariantOutcome* run : v.run_outcome) {
        if (run == nullptr) continue;
        if (outcome == nullptr || std::fabs(run->timing().median_us() - v.median_us) <
                                      std::fabs(outcome->timing().median_us() - v.median_us)) {
          outcome = run;
        }
      }
    }
    if (outcome != nullptr) {
      google::protobuf::Value worker = TimingJson(*outcome);
      auto& w = *worker.mutable_struct_value()->mutable_fields();
      if (item.state == v1::COLD) {
        w["median_us"] = Number(v.median_us);  // of the run medians
        w["run_median_us"] = NumberList(v.run_median_us);
        w["spread"] = Number(v.spread);
      }
      e["worker"] = std::move(worker);
      e["pool_sets"] = Number(outcome->pool_sets());
      e["pool_bytes"] = Number(static_cast<double>(outcome->pool_bytes()));
      e["launches_per_sample"] = Number(outcome->launches_per_sample());
    } else {
      e["worker"] = Null();
      e["pool_sets"] = Number(0);
      e["pool_bytes"] = Number(0);
      e["launches_per_sample"] = Number(0);
    }
    *list->add_values() = std::move(entry);
    ++written;
  }
  RETURN_IF_ERROR(WriteFileAtomically((dir / "fidelity.json").string(), ToJson(root) + "\n"));
  return written;
}

// ---- Report -------------------------------------------------------------------

std::string SummaryJson(const BenchOptions& options, const Workload& work,
                        const CompileSummary& compile, const Measurements* m, const Analysis* a,
                        double wall_s, int exported) {
  google::protobuf::Struct root;
  auto& f = *root.mutable_fields();
  f["program"] = Text("autotune-bench-profile");
  f["date"] = Text(absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", absl::Now(), absl::UTCTimeZone()));
  f["arch"] = Text(options.arch);
  f["runs_asked"] = Number(options.runs);
  f["max_variants"] = Number(options.max_variants);
  f["timing_budget_s"] = Number(options.timing_budget_s);
  f["min_samples"] = Number(options.min_samples);
  f["seeds"] = Number(options.seeds);
  f["wall_s"] = Number(wall_s);
  f["exported"] = Number(exported);
  auto& c = *f["compile"].mutable_struct_value()->mutable_fields();
  c["requested"] = Number(static_cast<double>(compile.requested));
  c["distinct"] = Number(static_cast<double>(compile.distinct));
  c["failed"] = Number(static_cast<double>(compile.failed));
  c["first_error"] = Text(compile.first_error);
  c["wall_s"] = Number(compile.wall_s);
  c["workers"] = Number(compile.workers);
  c["nvrtc_version"] = Text(compile.nvrtc_version);
  if (m != nullptr && a != nullptr) {
    f["device"] = DeviceJson(m->device);
    f["runs_done"] = Number(m->runs_done);
    f["stopped"] = Text(m->stopped);
    f["run_wall_s"] = NumberList(m->run_wall_s);
    f["pool_start_s"] = NumberList(m->pool_start_s);
    f["workers_replaced"] = Number(static_cast<double>(m->workers_replaced));
    auto& r = *f["repeatability"].mutable_struct_value()->mutable_fields();
    r["variants"] = Number(static_cast<double>(a->spreads.size()));
    r["spread_median"] = Number(Median(a->spreads));
    r["spread_p90"] = Number(Quantile(a->spreads, 0.9));
    r["spread_max"] = Number(Quantile(a->spreads, 1.0));
    r["within_1pct"] = Number(a->repeatable);
    r["problems_same_fastest"] = Number(a->same_fastest);
    r["problems_measured"] = Number(a->problems_measured);
    const CostStats& cost = a->cost;
    auto& k = *f["cost"].mutable_struct_value()->mutable_fields();
    k["outcomes"] = Number(static_cast<double>(cost.outcomes));
    k["ok"] = Number(static_cast<double>(cost.ok));
    k["gpu_s_per_ok_variant"] = Number(cost.ok > 0 ? cost.ok_gpu_s / cost.ok : 0);
    k["gpu_s_per_variant"] = Number(cost.outcomes > 0 ? cost.all_gpu_s / cost.outcomes : 0);
    k["worker_wall_s_per_variant"] =
        Number(cost.outcomes > 0 ? cost.variant_wall_s / cost.outcomes : 0);
    k["gpu_busy_fraction"] = Number(cost.done_wall_s > 0 ? cost.done_gpu_s / cost.done_wall_s : 0);
    k["job_wall_s_per_variant"] =
        Number(cost.task_variants > 0 ? cost.task_wall_s / cost.task_variants : 0);
    auto& statuses = *k["by_status"].mutable_struct_value()->mutable_fields();
    for (const auto& [status, count] : cost.by_status)
      statuses[status] = Number(static_cast<double>(count));
  }
  auto* problems = f["problems"].mutable_list_value();
  for (size_t p = 0; p < work.problems.size(); ++p) {
    const BenchProblem& item = work.problems[p];
    google::protobuf::Value value;
    auto& pf = *value.mutable_struct_value()->mutable_fields();
    pf["problem"] = Text(item.context);
    pf["search_space"] = Number(static_cast<double>(item.space.variants.size()));
    pf["picked"] = Number(static_cast<double>(item.picked.size()));
    pf["in_task"] = Number(item.cold_task.variants_size());
    pf["hot"] = Flag(item.hot);
    if (a != nullptr) {
      const ProblemStats& ps = a->problems[p];
      pf["ok_every_run"] = Number(ps.ok);
      pf["spread_median"] = Number(ps.spread_median);
      pf["spread_p90"] = Number(ps.spread_p90);
      pf["within_1pct"] = Number(ps.repeatable);
      pf["same_fastest"] = Flag(ps.same_fastest);
      pf["fastest"] = Text(ps.fastest_label);
      pf["fastest_us"] = Number(ps.fastest_us);
      pf["failure"] = Text(ps.failure);
      if (ps.hot_pairs > 0) {
        pf["cold_hot_median"] = Number(ps.cold_hot_median);
        pf["cold_hot_min"] = Number(ps.cold_hot_min);
        pf["cold_hot_max"] = Number(ps.cold_hot_max);
        pf["cold_hot_variants"] = Number(ps.hot_pairs);
        pf["cold_pool_sets"] = Number(ps.cold_sets);
      }
      auto* variants = pf["variants"].mutable_list_value();
      for (const VariantStats& v : ps.variants) {
        google::protobuf::Value vv;
        auto& vf = *vv.mutable_struct_value()->mutable_fields();
        vf["id"] = Text(v.id);
        vf["label"] = Text(v.label);
        vf["run_median_us"] = NumberList(v.run_median_us);
        std::vector<std::string> statuses;
        for (const wv1::VariantOutcome* outcome : v.run_outcome) {
          statuses.push_back(outcome == nullptr ? "absent"
                                                : v1::VariantStatus_Name(outcome->status()));
        }
        vf["run_status"] = Text(absl::StrJoin(statuses, ","));
        if (v.ok_everywhere) vf["spread"] = Number(v.spread);
        if (v.hot != nullptr) vf["hot_median_us"] = Number(v.hot->timing().median_us());
        const wv1::VariantOutcome* first = v.run_outcome.empty() ? nullptr : v.run_outcome[0];
        if (first != nullptr) {
          vf["pool_sets"] = Number(first->pool_sets());
          vf["launches_per_sample"] = Number(first->launches_per_sample());
          if (first->status() != v1::OK) vf["detail"] = Text(first->detail());
        }
        *variants->add_values() = std::move(vv);
      }
    }
    *problems->add_values() = std::move(value);
  }
  return ToJson(root);
}

void PrintReport(const BenchOptions& options, const Workload& work, const Measurements& m,
                 const Analysis& a) {
  const wv1::DeviceInfo& d = m.device;
  std::cout << "\nProfile bench summary\n"
            << "device: " << d.name() << ", sm_" << d.compute_capability() << ", " << d.sm_count()
            << " SMs, L2 " << Fixed(d.l2_bytes() / 1048576.0, 0) << " MiB, peak "
            << Fixed(d.peak_bandwidth_gbps(), 0) << " GB/s, driver API " << d.driver_version()
            << "\n"
            << m.runs_done << " run(s) of " << options.runs << ", each in a fresh worker; timing "
            << "budget " << options.timing_budget_s << " s, min " << options.min_samples
            << " samples; spread = (max - min) / median of a variant's run medians\n";
  if (!m.stopped.empty()) std::cout << "stopped early: " << m.stopped << "\n";
  std::cout << absl::StrFormat("| %-40s | %7s | %9s | %9s | %7s | %4s | %10s | %8s |\n", "problem",
                               "ok/var", "spread md", "p90", "<=1%", "same", "fastest us",
                               "cold/hot");
  std::cout << "| " << std::string(40, '-') << " | ------: | --------: | --------: | ------: | "
            << "---: | ---------: | -------: |\n";
  for (size_t p = 0; p < work.problems.size(); ++p) {
    const BenchProblem& item = work.problems[p];
    const ProblemStats& ps = a.problems[p];
    std::string context = item.context;
    if (context.size() > 40) context = context.substr(0, 37) + "...";
    const bool spread = ps.ok > 0 && m.runs_done >= 2;
    std::cout << absl::StrFormat(
        "| %-40s | %7s | %9s | %9s | %7s | %4s | %10s | %8s |\n", context,
        absl::StrCat(ps.ok, "/", ps.variants.size()), spread ? Percent(ps.spread_median) : "-",
        spread ? Percent(ps.spread_p90) : "-",
        spread ? absl::StrCat(ps.repeatable, "/", ps.ok) : "-",
        spread ? (ps.same_fastest ? "yes" : "NO") : "-", ps.ok > 0 ? Fixed(ps.fastest_us, 2) : "-",
        ps.hot_pairs > 0 ? absl::StrCat(Fixed(ps.cold_hot_median, 2), "x") : "-");
  }
  const CostStats& cost = a.cost;
  if (m.runs_done < 2) {
    std::cout << "repeatability: not measured (" << m.runs_done << " run; it takes 2 or more)\n";
  } else {
    std::cout << "repeatability: " << a.spreads.size()
              << " variants OK in every run; spread median " << Percent(Median(a.spreads))
              << ", p90 " << Percent(Quantile(a.spreads, 0.9)) << ", max "
              << Percent(Quantile(a.spreads, 1.0)) << "; within 1%: " << a.repeatable << " of "
              << a.spreads.size() << "; same fastest variant in every run: " << a.same_fastest
              << " of " << a.problems_measured << " problems\n";
  }
  for (size_t p = 0; p < work.problems.size(); ++p) {
    const ProblemStats& ps = a.problems[p];
    if (ps.hot_pairs == 0) continue;
    std::cout << "cold/hot " << work.problems[p].context << ": median "
              << Fixed(ps.cold_hot_median, 2) << "x (min " << Fixed(ps.cold_hot_min, 2) << ", max "
              << Fixed(ps.cold_hot_max, 2) << ") over " << ps.hot_pairs
              << " variants; COLD rotates " << ps.cold_sets << " sets\n";
  }
  std::vector<std::string> statuses;
  for (const auto& [status, count] : cost.by_status)
    statuses.push_back(absl::StrCat(status, " ", count));
  std::cout << "cost: " << cost.outcomes << " variant measurements ("
            << absl::StrJoin(statuses, ", ") << "); GPU "
            << Fixed(cost.ok > 0 ? cost.ok_gpu_s / cost.ok : 0, 3)
            << " s per validated variant; GPU busy "
            << Percent(cost.done_wall_s > 0 ? cost.done_gpu_s / cost.done_wall_s : 0)
            << " of worker wall time; job wall "
            << Fixed(cost.task_variants > 0 ? cost.task_wall_s / cost.task_variants : 0, 3)
            << " s per variant; workers replaced " << m.workers_replaced << "\n";
  for (size_t p = 0; p < work.problems.size(); ++p) {
    if (!a.problems[p].failure.empty()) {
      std::cout << "FAILED task " << work.problems[p].context << ": " << a.problems[p].failure
                << "\n";
    }
  }
}

int Run(const BenchOptions& options) {
  const Clock::time_point program_start = Clock::now();
  // Progress on stderr and the report on stdout stay in order in one log.
  std::cout.setf(std::ios::unitbuf);
  // The report owns stdout; the pools' log goes to stderr with the progress.
  spdlog::set_default_logger(spdlog::stderr_color_mt("autotune-bench-profile"));
  const std::string worker_path = options.worker.empty() ? DefaultWorkerPath() : options.worker;

  absl::StatusOr<std::unique_ptr<Workload>> work = BuildWorkload(options);
  if (!work.ok()) {
    std::cerr << "autotune-bench-profile: " << work.status().message() << "\n";
    return 1;
  }
  std::cout << "autotune-bench-profile\n"
            << "date:     "
            << absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", absl::Now(), absl::UTCTimeZone()) << "\n"
            << "worker:   " << worker_path << "\n"
            << "kernels:  " << options.kernels_dir << "\n"
            << "problems: " << (*work)->problems.size() << ", at most " << options.max_variants
            << " variants each (evenly spaced over the search space)\n";
  for (const BenchProblem& item : (*work)->problems) {
    std::cout << "  " << item.context << ": " << item.picked.size() << " of "
              << item.space.variants.size() << " variants" << (item.hot ? ", COLD and HOT" : "")
              << "\n";
  }

  absl::StatusOr<CompileSummary> compile = CompileAll(options, worker_path, **work);
  if (!compile.ok()) {
    std::cerr << "autotune-bench-profile: " << compile.status().message() << "\n";
    return 1;
  }
  std::cout << "compile:  " << compile->distinct << " distinct kernels (references included) for "
            << options.arch << " with NVRTC " << compile->nvrtc_version << " on "
            << compile->workers << " workers in " << Fixed(compile->wall_s, 1) << " s; "
            << compile->failed << " failed\n";
  if (compile->failed > 0) std::cout << "first compile error: " << compile->first_error << "\n";
  if (absl::Status built = BuildTasks(options, **work); !built.ok()) {
    std::cerr << "autotune-bench-profile: " << built.message() << "\n";
    return 1;
  }
  int exit_code = compile->failed > 0 ? 1 : 0;

  auto write_json = [&](const Measurements* m, const Analysis* a, int exported) {
    if (options.json.empty()) return true;
    std::error_code ignored;
    const fs::path parent = fs::path(options.json).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ignored);
    const std::string json = SummaryJson(options, **work, *compile, m, a,
                                         Seconds(Clock::now() - program_start), exported);
    if (absl::Status written = WriteFileAtomically(options.json, json + "\n"); !written.ok()) {
      std::cerr << "autotune-bench-profile: " << written.message() << "\n";
      return false;
    }
    return true;
  };

  if (options.compile_only) {
    Analysis a;
    a.problems.resize((*work)->problems.size());
    for (size_t p = 0; p < (*work)->problems.size(); ++p) {
      const BenchProblem& item = (*work)->problems[p];
      for (const wv1::KernelImage& image : item.cold_task.variants()) {
        VariantStats v;
        v.id = image.id();
        v.label = image.label();
        a.problems[p].variants.push_back(std::move(v));
      }
    }
    int exported = 0;
    if (!options.out.empty()) {
      absl::StatusOr<int> written = WriteExport(options, **work, a, nullptr);
      if (!written.ok()) {
        std::cerr << "autotune-bench-profile: " << written.status().message() << "\n";
        return 1;
      }
      exported = *written;
      std::cout << "export:   " << exported << " variants (not measured) in " << options.out
                << "/fidelity.json\n";
    }
    if (!write_json(nullptr, nullptr, exported)) return 1;
    std::cout << "compile only: nothing measured\n";
    return exit_code;
  }

  absl::StatusOr<Measurements> measured = MeasureAll(options, worker_path, **work, program_start);
  if (!measured.ok()) {
    std::cout << "cannot measure: " << measured.status().message() << "\n";
    std::cerr << "autotune-bench-profile: " << measured.status().message() << "\n";
    (void)write_json(nullptr, nullptr, 0);
    return 1;
  }
  const Analysis analysis = Analyze(**work, *measured);
  int exported = 0;
  if (!options.out.empty()) {
    absl::StatusOr<int> written = WriteExport(options, **work, analysis, &*measured);
    if (!written.ok()) {
      std::cerr << "autotune-bench-profile: " << written.status().message() << "\n";
      exit_code = 1;
    } else {
      exported = *written;
    }
  }
  if (!write_json(&*measured, &analysis, exported)) exit_code = 1;
  PrintReport(options, **work, *measured, analysis);
  if (!options.out.empty()) {
    std::cout << "fidelity export: " << exported << " variants in " << options.out
              << "/fidelity.json\n";
  }
  std::cout << "wall: " << Fixed(Seconds(Clock::now() - program_start), 1) << " s (compile "
            << Fixed(compile->wall_s, 1) << " s, runs "
            << absl::StrJoin(measured->run_wall_s, ", ",
                             [](std::string* out, double s) { absl::StrAppend(out, Fixed(s, 1)); })
            << " s)\n";
  // Runs skipped for time are reported, not an error: what ran is valid.
  if (analysis.task_failures > 0) exit_code = 1;
  return exit_code;
}

}  // namespace
}  // namespace autotune::bench

int main(int argc, char** argv) {
  autotune::bench::BenchOptions options;
  options.kernels_dir = AUTOTUNE_BENCH_KERNELS_DIR;
  CLI::App app{
      "Repeatability, cache-state effect and cost of the profile worker's timings, measured on "
      "built-in kernel families; exports a subset for an independent check "
      "(bench/profile_fidelity.py)."};
  // A value given twice takes the last, so a wrapper's defaults can be
  // overridden by flags appended after them.
  app.add_option("--kernels-dir,--kernels", options.kernels_dir, "Directory of the kernel families")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--worker", options.worker,
                 "autotune-worker executable (default: beside this program, else "
                 "../service/autotune-worker)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--problem", options.problems,
                 "FAMILY:DIMS:DTYPE, repeatable (default: 8 problems of the built-in manifests)")
      ->capture_default_str();
  app.add_option("--hot-problem", options.hot_problems,
                 "FAMILY:DIMS:DTYPE also measured HOT, against its COLD timing (added to the "
                 "problems when not among them); repeatable. Default: the gla_decode batch-1 "
                 "shapes when no --problem is given, else none")
      ->capture_default_str();
  app.add_flag_callback(
      "--no-hot", [&options] { options.hot_problems.clear(); }, "Measure nothing HOT");
  app.add_option("--max-variants", options.max_variants,
                 "Variants per problem, evenly spaced over its search space")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--runs", options.runs, "Runs, each in a fresh profile worker")
      ->check(CLI::Range(1, 100))
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--timing-budget", options.timing_budget_s,
                 "GPU seconds of timing per variant (ProfileSettings.timing_budget_s)")
      ->check(CLI::Range(0.001, 60.0))
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--min-samples", options.min_samples, "Graph replays per variant at least")
      ->check(CLI::Range(1, 2000))
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--seeds", options.seeds, "Validation seeds")
      ->check(CLI::Range(3, 100))
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--compile-workers", options.compile_workers,
                 "Compile worker processes (0: one per core)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--compile-timeout", options.compile_timeout_s, "Seconds per compile")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--arch", options.arch, "GPU architecture to compile for (must be the device's)")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--out", options.out,
                 "Fidelity export directory (cubins/ and fidelity.json); empty: none")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--export-limit", options.export_limit, "Variants exported at most")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--json", options.json, "Write the summary as JSON to this file")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--max-seconds", options.max_seconds,
                 "Skip a further run when the last run's time would not fit (0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_flag("--compile-only", options.compile_only,
               "Stop after the compile (and the export of unmeasured variants)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (options.problems.empty()) {
    std::cerr << "autotune-bench-profile: no --problem\n";
    return 2;
  }
  // The default HOT shapes belong to the default problems.
  if (app.count("--problem") > 0 && app.count("--hot-problem") == 0) options.hot_problems.clear();
  return autotune::bench::Run(options);
}
