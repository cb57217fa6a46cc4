// autotune-bench-compile: how fast the compile half of a warmup job turns
// kernel variants into cubins, and how that scales with parallelism.
//
// The work is the distinct compile tasks of a built-in family's manifest,
// built the way a warmup job builds them: the families of --kernels-dir
// (LoadFamilyDirectory), the manifest's problems (ExpandManifest), each
// problem's search space (ExpandSearchSpace) plus its reference kernel, kept
// once per kernels::CompileKey. When there are more than --max-variants of
// them, an evenly spaced subset (same order, same choice on every run) is
// benchmarked so a run stays bounded.
//
// For every N of --workers, side by side (N by N, the methods in turn, so
// drift affects all of them alike):
//   pool     service::CompilePool with N autotune-worker processes, fed by N
//            caller threads (every worker started and warmed before timing);
//   threads  N threads in this process, each calling kernels::Compile;
//   nvcc     `nvcc -cubin -arch=<arch>` per variant, N processes at a time
//            (posix_spawn; the source written to a temp file once; the same
//            options as NVRTC gets).
// Each reports variants/s, the speedup over N = 1 of the same method and
// the efficiency (speedup / N). Every result is checked (status, ELF magic,
// the kernel's symbol in the image), so a broken run cannot look fast.
//
// Then the warm rerun: every cubin goes into a real cache::Store (a temp
// SQLite file) with PutCompile, and FindCompile over every key is timed, the
// cost a warmup rerun pays per variant instead of a compile.
//
// Exit status: 0 when every compile and every cache read succeeded and was
// checked; 1 otherwise (the figures are invalid); 2 on bad flags.
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <latch>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/container/flat_hash_map.h"
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
#include "base/paths.h"
#include "base/posix_error.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "cache/store.h"
#include "kernels/family_loader.h"
#include "kernels/gpu/compiler.h"
#include "kernels/manifest.h"
#include "kernels/search_space.h"
#include "proto/problem.h"
#include "proto/worker.pb.h"
#include "service/pools/compile_pool.h"

extern char** environ;

namespace autotune::bench {
namespace {

namespace fs = std::filesystem;
namespace wv1 = ::autotune::worker::v1;
using Clock = std::chrono::steady_clock;

// Goals of the issue: process scaling to 16 workers, and a warm rerun.
constexpr double kMinEfficiency = 0.8;
constexpr int kEfficiencyGoalWorkers = 16;
constexpr double kMaxWarmMicrosPerVariant = 1000;

struct BenchOptions {
  std::string kernels_dir;
  std::string manifest;  // empty: <kernels_dir>/softmax.manifest
  std::string worker;    // empty: beside this program
  std::string nvcc = "/usr/local/cuda/bin/nvcc";
  std::vector<int> workers = {1, 2, 4, 8, 16};
  std::vector<std::string> methods = {"pool", "threads", "nvcc"};
  int max_variants = 128;
  int repeat = 1;
  int lookup_passes = 5;
  double compile_timeout_s = 300;
  std::string arch;  // empty: the manifest's, else sm_90
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// ---- Machine facts ----------------------------------------------------------

struct MachineFacts {
  long nproc = 0;
  long physical_cores = 0;  // distinct (physical id, core id) in /proc/cpuinfo; 0 unknown
  std::string cpu_model = "unknown";
  std::string kernel;
  std::string date;
  std::string load_average;
  std::string nvrtc_version;
  std::string nvrtc_path;
  std::string nvcc_version;  // the "release" line of `nvcc --version`
};

std::string FirstLineWith(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) return line;
  }
  return "";
}

MachineFacts GetMachineFacts() {
  MachineFacts facts;
  facts.nproc = sysconf(_SC_NPROCESSORS_ONLN);
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;  // (physical id, core id)
  std::string physical_id;
  for (std::string line; std::getline(cpuinfo, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (line.rfind("model name", 0) == 0 && facts.cpu_model == "unknown") facts.cpu_model = value;
    if (line.rfind("physical id", 0) == 0) physical_id = value;
    if (line.rfind("core id", 0) == 0) cores.emplace(physical_id, value);
  }
  facts.physical_cores = static_cast<long>(cores.size());
  utsname uts;
  if (uname(&uts) == 0) facts.kernel = absl::StrCat(uts.sysname, " ", uts.release);
  facts.date = absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", absl::Now(), absl::UTCTimeZone());
  std::ifstream loadavg("/proc/loadavg");
  std::string one, five, fifteen;
  if (loadavg >> one >> five >> fifteen) {
    facts.load_average = absl::StrCat(one, " ", five, " ", fifteen);
  }
  return facts;
}

// ---- Files and processes ----------------------------------------------------

// A private temp directory, removed with everything in it on destruction.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Make() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp", "/autotune-bench-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return PosixError(absl::StrCat("mkdtemp ", pattern), errno);
    }
    return TempDir(pattern);
  }
  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, "")) {}
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

struct ProcessResult {
  int exit_status = -1;  // waitpid status
  std::string output;    // stdout and stderr together
};

// Runs `argv` to completion with stdout and stderr in `log_path`.
absl::StatusOr<ProcessResult> RunProcess(const std::vector<std::string>& argv,
                                         const std::string& log_path) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    return PosixError(absl::StrCat("cannot start ", argv[0]), spawned);
  }
  ProcessResult result;
  while (waitpid(pid, &result.exit_status, 0) < 0) {
    if (errno != EINTR) {
      return PosixError(absl::StrCat("waitpid ", argv[0]), errno);
    }
  }
  absl::StatusOr<std::string> output = ReadFile(log_path);
  if (output.ok()) result.output = *std::move(output);
  return result;
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
  return "ended";
}

// The autotune-worker beside this program (a bundle), else the one of the
// build tree (bench/../service/).
std::string DefaultWorkerPath() {
  return autotune::FindBesideThisProgram("autotune-worker", {"../service"});
}

// ---- The work ---------------------------------------------------------------

struct Task {
  std::string key;  // kernels::CompileKey
  kernels::CompileRequest request;
  std::string family;
  std::string family_hash;
  std::string source_path;  // the family's source as a file, for nvcc
};

struct Workload {
  std::string manifest_path;
  std::string arch;
  std::vector<std::string> families;  // names, in manifest order
  int64_t problems = 0;
  int64_t variants = 0;     // over all problems, before removing duplicates
  int64_t distinct = 0;     // distinct compile keys (references included)
  std::vector<Task> tasks;  // the benchmarked subset
};

// The compile tasks of the manifest as a warmup job builds them.
absl::StatusOr<Workload> BuildWorkload(const BenchOptions& options,
                                       const std::string& nvrtc_version,
                                       const std::string& source_dir) {
  Workload work;
  work.manifest_path = options.manifest.empty()
                           ? (fs::path(options.kernels_dir) / "softmax.manifest").string()
                           : options.manifest;
  ASSIGN_OR_RETURN(std::vector<v1::KernelFamily> loaded,
                   kernels::LoadFamilyDirectory(options.kernels_dir));
  absl::flat_hash_map<std::string, v1::KernelFamily> families;
  for (v1::KernelFamily& family : loaded) families[family.name()] = std::move(family);
  ASSIGN_OR_RETURN(v1::Manifest manifest, kernels::LoadManifestFile(work.manifest_path));
  work.arch = !options.arch.empty()      ? options.arch
              : !manifest.arch().empty() ? manifest.arch()
                                         : "sm_90";
  ASSIGN_OR_RETURN(std::vector<kernels::ManifestProblem> problems,
                   kernels::ExpandManifest(manifest, families));
  work.problems = static_cast<int64_t>(problems.size());

  std::map<std::string, std::string> hashes;        // family -> content hash
  std::map<std::string, std::string> source_files;  // family -> source written for nvcc
  std::vector<Task> all;
  absl::flat_hash_map<std::string, size_t> seen;
  auto add = [&](const v1::KernelFamily& family, const std::string& name_expression,
                 const std::vector<std::string>& compile_options) {
    Task task;
    task.request.source = family.source();
    task.request.program_name = family.name() + ".cu";
    task.request.name_expression = name_expression;
    task.request.options = compile_options;
    task.request.arch = work.arch;
    task.key = kernels::CompileKey(task.request, nvrtc_version);
    if (seen.contains(task.key)) return;
    seen.emplace(task.key, all.size());
    task.family = family.name();
    task.family_hash = hashes.at(family.name());
    task.source_path = source_files.at(family.name());
    all.push_back(std::move(task));
  };
  for (const kernels::ManifestProblem& item : problems) {
    const v1::KernelFamily& family = families.at(item.family);
    if (!hashes.contains(item.family)) {
      hashes[item.family] = FamilyContentHash(family);
      const std::string path = (fs::path(source_dir) / (item.family + ".cu")).string();
      RETURN_IF_ERROR(WriteFileAtomically(path, family.source()));
      source_files[item.family] = path;
      work.families.push_back(item.family);
    }
    ASSIGN_OR_RETURN(kernels::SearchSpace space, kernels::ExpandSearchSpace(family, item.problem));
    work.variants += static_cast<int64_t>(space.variants.size());
    add(family, space.reference_name, space.reference_compile_options);
    for (const kernels::Variant& variant : space.variants) {
      add(family, variant.name_expression, variant.compile_options);
    }
  }
  work.distinct = static_cast<int64_t>(all.size());
  const size_t keep = std::min(all.size(), static_cast<size_t>(options.max_variants));
  for (size_t i = 0; i < keep; ++i) {
    work.tasks.push_back(all[i * all.size() / keep]);
  }
  return work;
}

// Empty when `cubin` is a plausible image holding `symbol`, else why not.
std::string CheckCubin(const std::string& cubin, const std::string& symbol) {
  if (cubin.size() < 64) return absl::StrCat("image of ", cubin.size(), " bytes");
  if (cubin.compare(0, 4,
                    "\x7f"
                    "ELF") != 0)
    return "no ELF magic";
  if (symbol.empty()) return "no kernel symbol name";
  if (cubin.find(symbol) == std::string::npos) {
    return absl::StrCat("symbol '", symbol, "' is not in the image");
  }
  return "";
}

// What one task gave in one run.
struct Outcome {
  bool ok = false;
  std::string cubin;
  std::string error;   // when !ok
  double seconds = 0;  // the compile alone, as seen by whoever ran it
};

struct RunResult {
  std::string method;
  int workers = 0;
  double wall_s = 0;
  int64_t ok = 0;
  int64_t errors = 0;
  std::string first_error;
  double mean_compile_s = 0;  // mean over tasks of Outcome::seconds
  double cpu_use = -1;        // CPU seconds / (wall * workers); < 0 unknown
  double setup_s = 0;         // pool: start and warm-up of every worker
  std::vector<Outcome> outcomes;
};

double CpuSeconds(int who) {
  rusage usage;
  if (getrusage(who, &usage) != 0) return 0;
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Runs `one(index)` for every task on `workers` threads, which start together.
template <typename Fn>
double RunOnThreads(size_t tasks, int workers, Fn one) {
  std::atomic<size_t> next{0};
  std::latch ready(workers + 1);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(workers));
  for (int t = 0; t < workers; ++t) {
    threads.emplace_back([&] {
      ready.arrive_and_wait();
      for (size_t i = next.fetch_add(1); i < tasks; i = next.fetch_add(1)) one(i);
    });
  }
  ready.arrive_and_wait();
  const Clock::time_point start = Clock::now();
  for (std::thread& thread : threads) thread.join();
  return Seconds(Clock::now() - start);
}

void Summarize(RunResult& run) {
  double total = 0;
  for (const Outcome& outcome : run.outcomes) {
    total += outcome.seconds;
    if (outcome.ok) {
      ++run.ok;
    } else {
      ++run.errors;
      if (run.first_error.empty()) run.first_error = outcome.error;
    }
  }
  if (!run.outcomes.empty()) run.mean_compile_s = total / static_cast<double>(run.outcomes.size());
}

RunResult RunPool(const Workload& work, int workers, const std::string& worker_path,
                  absl::Duration timeout) {
  RunResult run;
  run.method = "pool";
  run.workers = workers;
  run.outcomes.resize(work.tasks.size());
  const Clock::time_point setup = Clock::now();
  absl::StatusOr<std::unique_ptr<service::CompilePool>> pool =
      service::CompilePool::Start({.worker_path = worker_path, .workers = workers});
  if (!pool.ok()) {
    for (Outcome& outcome : run.outcomes) outcome.error = std::string(pool.status().message());
    Summarize(run);
    return run;
  }
  std::vector<wv1::CompileTask> tasks(work.tasks.size());
  for (size_t i = 0; i < work.tasks.size(); ++i) {
    const kernels::CompileRequest& request = work.tasks[i].request;
    wv1::CompileTask& task = tasks[i];
    task.set_task_id(work.tasks[i].key);
    task.set_source(request.source);
    task.set_program_name(request.program_name);
    task.set_name_expression(request.name_expression);
    for (const std::string& option : request.options) task.add_options(option);
    task.set_arch(request.arch);
  }
  // N compiles at once start all N workers; each loads NVRTC and compiles
  // once before the clock starts.
  std::string warm_error;
  absl::Mutex warm_mu;
  RunOnThreads(static_cast<size_t>(workers), workers, [&](size_t) {
    wv1::CompileOutcome outcome = (*pool)->Compile(tasks[0], timeout);
    if (outcome.status() != wv1::CompileOutcome::OK) {
      absl::MutexLock lock(&warm_mu);
      if (warm_error.empty()) warm_error = absl::StrCat("warm-up compile failed: ", outcome.log());
    }
  });
  run.setup_s = Seconds(Clock::now() - setup);
  if (!warm_error.empty()) {
    for (Outcome& outcome : run.outcomes) outcome.error = warm_error;
    Summarize(run);
    return run;
  }
  run.wall_s = RunOnThreads(tasks.size(), workers, [&](size_t i) {
    const Clock::time_point start = Clock::now();
    wv1::CompileOutcome result = (*pool)->Compile(tasks[i], timeout);
    Outcome& outcome = run.outcomes[i];
    outcome.seconds = Seconds(Clock::now() - start);
    if (result.status() != wv1::CompileOutcome::OK) {
      outcome.error = absl::StrCat(work.tasks[i].request.name_expression, " ",
                                   wv1::CompileOutcome::Status_Name(result.status()), ": ",
                                   result.log().substr(0, 500));
      return;
    }
    outcome.error = CheckCubin(result.cubin(), result.lowered_name());
    outcome.ok = outcome.error.empty();
    outcome.cubin = std::move(*result.mutable_cubin());
  });
  if ((*pool)->replaced() > 0) {
    run.first_error = absl::StrCat((*pool)->replaced(), " worker(s) lost or killed");
  }
  Summarize(run);
  return run;
}

RunResult RunThreads(const Workload& work, int workers, const kernels::Nvrtc& nvrtc) {
  RunResult run;
  run.method = "threads";
  run.workers = workers;
  run.outcomes.resize(work.tasks.size());
  const double cpu_before = CpuSeconds(RUSAGE_SELF);
  run.wall_s = RunOnThreads(work.tasks.size(), workers, [&](size_t i) {
    const Clock::time_point start = Clock::now();
    kernels::CompileResult result = kernels::Compile(nvrtc, work.tasks[i].request);
    Outcome& outcome = run.outcomes[i];
    outcome.seconds = Seconds(Clock::now() - start);
    if (result.status != kernels::CompileStatus::kOk) {
      outcome.error =
          absl::StrCat(work.tasks[i].request.name_expression, ": ", result.log.substr(0, 500));
      return;
    }
    outcome.error = CheckCubin(result.cubin, result.lowered_name);
    outcome.ok = outcome.error.empty();
    outcome.cubin = std::move(result.cubin);
  });
  run.cpu_use = (CpuSeconds(RUSAGE_SELF) - cpu_before) / (run.wall_s * workers);
  Summarize(run);
  return run;
}

RunResult RunNvcc(const Workload& work, int workers, const std::string& nvcc,
                  const std::string& scratch_dir) {
  RunResult run;
  run.method = "nvcc";
  run.workers = workers;
  run.outcomes.resize(work.tasks.size());
  const double cpu_before = CpuSeconds(RUSAGE_CHILDREN);
  run.wall_s = RunOnThreads(work.tasks.size(), workers, [&](size_t i) {
    const Task& task = work.tasks[i];
    const std::string out = absl::StrCat(scratch_dir, "/nvcc-", workers, "-", i, ".cubin");
    const std::string log = absl::StrCat(scratch_dir, "/nvcc-", workers, "-", i, ".log");
    std::vector<std::string> argv = {nvcc, "-cubin", absl::StrCat("-arch=", task.request.arch)};
    argv.insert(argv.end(), task.request.options.begin(), task.request.options.end());
    argv.insert(argv.end(), {"-o", out, task.source_path});
    Outcome& outcome = run.outcomes[i];
    const Clock::time_point start = Clock::now();
    absl::StatusOr<ProcessResult> process = RunProcess(argv, log);
    outcome.seconds = Seconds(Clock::now() - start);
    std::error_code ignored;
    fs::remove(log, ignored);
    if (!process.ok()) {
      outcome.error = std::string(process.status().message());
      return;
    }
    if (!WIFEXITED(process->exit_status) || WEXITSTATUS(process->exit_status) != 0) {
      outcome.error =
          absl::StrCat(task.request.name_expression, ": nvcc ", DescribeExit(process->exit_status),
                       ": ", process->output.substr(0, 500));
      fs::remove(out, ignored);
      return;
    }
    absl::StatusOr<std::string> cubin = ReadFile(out);
    fs::remove(out, ignored);
    if (!cubin.ok()) {
      outcome.error = std::string(cubin.status().message());
      return;
    }
    // Every family here names an extern "C" kernel: the name is the symbol.
    outcome.error = CheckCubin(*cubin, task.request.name_expression);
    outcome.ok = outcome.error.empty();
    outcome.cubin = *std::move(cubin);
  });
  run.cpu_use = (CpuSeconds(RUSAGE_CHILDREN) - cpu_before) / (run.wall_s * workers);
  Summarize(run);
  return run;
}

// ---- Warm rerun ---------------------------------------------------------------

struct WarmResult {
  int64_t keys = 0;
  int64_t errors = 0;
  std::string first_error;
  double put_us = 0;              // PutCompile, mean per variant
  double find_first_us = 0;       // FindCompile, first pass, per variant
  double find_median_us = 0;      // FindCompile, median of the passes, per variant
  double find_get_median_us = 0;  // FindCompile + GetBinary, median, per variant
  int passes = 0;
  int64_t database_bytes = 0;
};

WarmResult RunWarm(const Workload& work, const std::vector<Outcome>& compiled,
                   const std::string& nvrtc_version, const std::string& dir, int passes) {
  WarmResult warm;
  warm.passes = passes;
  auto fail = [&](std::string why) {
    ++warm.errors;
    if (warm.first_error.empty()) warm.first_error = std::move(why);
  };
  absl::StatusOr<std::unique_ptr<cache::Store>> store =
      cache::Store::Open({.path = absl::StrCat(dir, "/cache.db")});
  if (!store.ok()) {
    fail(std::string(store.status().message()));
    return warm;
  }
  std::vector<std::string> sha(work.tasks.size());
  std::vector<size_t> stored;
  const Clock::time_point put_start = Clock::now();
  for (size_t i = 0; i < work.tasks.size(); ++i) {
    if (!compiled[i].ok) continue;
    const Task& task = work.tasks[i];
    cache::CompileRecord record;
    record.compile_key = task.key;
    record.status = v1::OK;
    record.lowered_name = task.request.name_expression;
    record.nvrtc_version = nvrtc_version;
    record.arch = task.request.arch;
    record.family = task.family;
    record.family_hash = task.family_hash;
    absl::Status put = (*store)->PutCompile(record, compiled[i].cubin).status();
    if (!put.ok()) {
      fail(absl::StrCat("PutCompile: ", put.message()));
      continue;
    }
    stored.push_back(i);
  }
  const double put_s = Seconds(Clock::now() - put_start);
  warm.keys = static_cast<int64_t>(stored.size());
  if (stored.empty()) {
    if (warm.errors == 0) fail("no compiled variant to store");
    return warm;
  }
  warm.put_us = put_s * 1e6 / static_cast<double>(stored.size());
  for (size_t i : stored) sha[i] = Sha256Hex(compiled[i].cubin);

  auto pass = [&](bool with_binary) {
    const Clock::time_point start = Clock::now();
    for (size_t i : stored) {
      absl::StatusOr<std::optional<cache::CompileRecord>> found =
          (*store)->FindCompile(work.tasks[i].key);
      if (!found.ok() || !found->has_value()) {
        fail(absl::StrCat("FindCompile ", work.tasks[i].key, ": ",
                          found.ok() ? "absent" : std::string(found.status().message())));
        continue;
      }
      const cache::CompileRecord& record = **found;
      if (record.status != v1::OK || record.binary_sha256 != sha[i] ||
          record.lowered_name != work.tasks[i].request.name_expression) {
        fail(absl::StrCat("FindCompile ", work.tasks[i].key, ": a different record"));
        continue;
      }
      if (!with_binary) continue;
      absl::StatusOr<v1::Binary> binary = (*store)->GetBinary(record.binary_sha256);
      if (!binary.ok() || binary->cubin() != compiled[i].cubin) {
        fail(
            absl::StrCat("GetBinary ", record.binary_sha256, ": ",
                         binary.ok() ? "different bytes" : std::string(binary.status().message())));
      }
    }
    return Seconds(Clock::now() - start) * 1e6 / static_cast<double>(stored.size());
  };
  std::vector<double> find, find_get;
  for (int p = 0; p < passes; ++p) find.push_back(pass(false));
  for (int p = 0; p < passes; ++p) find_get.push_back(pass(true));
  warm.find_first_us = find.front();
  warm.find_median_us = Median(find);
  warm.find_get_median_us = Median(find_get);
  absl::StatusOr<cache::StoreStats> stats = (*store)->Stats();
  if (stats.ok()) warm.database_bytes = stats->database_bytes;
  return warm;
}

// ---- Report -------------------------------------------------------------------

std::string Fixed(double value, int digits) { return absl::StrFormat("%.*f", digits, value); }

int Run(const BenchOptions& options) {
  MachineFacts facts = GetMachineFacts();
  absl::StatusOr<const kernels::Nvrtc*> nvrtc = kernels::Nvrtc::Load();
  if (!nvrtc.ok()) {
    std::cerr << "autotune-bench-compile: " << nvrtc.status().message() << "\n";
    return 1;
  }
  facts.nvrtc_version = (*nvrtc)->version();
  facts.nvrtc_path = (*nvrtc)->path();
  std::vector<std::string> methods = options.methods;
  auto wants = [&](const std::string& method) {
    return std::find(methods.begin(), methods.end(), method) != methods.end();
  };
  if (wants("nvcc")) {
    absl::StatusOr<TempDir> dir = TempDir::Make();
    if (dir.ok()) {
      absl::StatusOr<ProcessResult> version =
          RunProcess({options.nvcc, "--version"}, dir->path() + "/version.log");
      facts.nvcc_version = version.ok() ? FirstLineWith(version->output, "release")
                                        : std::string(version.status().message());
    }
  }
  const std::string worker_path = options.worker.empty() ? DefaultWorkerPath() : options.worker;

  absl::StatusOr<TempDir> scratch = TempDir::Make();
  if (!scratch.ok()) {
    std::cerr << "autotune-bench-compile: " << scratch.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<Workload> work = BuildWorkload(options, facts.nvrtc_version, scratch->path());
  if (!work.ok()) {
    std::cerr << "autotune-bench-compile: " << work.status().message() << "\n";
    return 1;
  }
  if (work->tasks.empty()) {
    std::cerr << "autotune-bench-compile: the manifest gives no compile task\n";
    return 1;
  }

  std::cout << "autotune-bench-compile\n"
            << "date:        " << facts.date << "\n"
            << "machine:     nproc " << facts.nproc << " ("
            << (facts.physical_cores > 0 ? absl::StrCat(facts.physical_cores) : "unknown")
            << " physical cores), CPU " << facts.cpu_model << ", " << facts.kernel
            << ", load average " << facts.load_average << "\n"
            << "NVRTC:       " << facts.nvrtc_version << " (" << facts.nvrtc_path << ")\n";
  if (wants("nvcc"))
    std::cout << "nvcc:        " << options.nvcc << ": " << facts.nvcc_version << "\n";
  if (wants("pool")) std::cout << "worker:      " << worker_path << "\n";
  std::cout << "manifest:    " << work->manifest_path << " (families "
            << absl::StrJoin(work->families, ", ") << ", arch " << work->arch
            << "): " << work->problems << " problems, " << work->variants << " variants, "
            << work->distinct << " distinct compiles (references included)\n"
            << "benchmarked: " << work->tasks.size() << " distinct compiles"
            << (static_cast<int64_t>(work->tasks.size()) < work->distinct ? ", evenly spaced" : "")
            << "; workers " << absl::StrJoin(options.workers, ",") << "; methods "
            << absl::StrJoin(methods, ",") << "; repeat " << options.repeat << "\n"
            << std::flush;

  std::string nvcc_skipped;
  // One compile of each kind before any clock starts: NVRTC's first compile
  // in this process and nvcc's first start from a cold file cache are not
  // what a run measures (the pool warms its own workers).
  {
    const Clock::time_point start = Clock::now();
    kernels::CompileResult first = kernels::Compile(**nvrtc, work->tasks[0].request);
    const std::string bad = first.status == kernels::CompileStatus::kOk
                                ? CheckCubin(first.cubin, first.lowered_name)
                                : first.log.substr(0, 500);
    if (!bad.empty()) {
      std::cerr << "autotune-bench-compile: the first compile failed: " << bad << "\n";
      return 1;
    }
    std::cout << "warm-up:     first NVRTC compile in this process "
              << Fixed(Seconds(Clock::now() - start), 2) << " s";
    if (wants("nvcc")) {
      const Clock::time_point nvcc_start = Clock::now();
      Workload first_only;
      first_only.tasks = {work->tasks[0]};
      RunResult nvcc_first = RunNvcc(first_only, 1, options.nvcc, scratch->path());
      if (nvcc_first.errors > 0) {
        // No usable nvcc here (no host compiler, say): the other methods
        // still run, and the report says why this one did not.
        nvcc_skipped = nvcc_first.first_error;
        methods.erase(std::find(methods.begin(), methods.end(), "nvcc"));
        std::cout << "; nvcc NOT RUN, its first compile failed: " << nvcc_skipped;
      } else {
        std::cout << ", first nvcc compile " << Fixed(Seconds(Clock::now() - nvcc_start), 2)
                  << " s";
      }
    }
    std::cout << "\n" << std::flush;
  }

  const absl::Duration timeout = absl::Seconds(options.compile_timeout_s);
  // Per method and N, every repetition.
  std::map<std::pair<std::string, int>, std::vector<RunResult>> runs;
  std::vector<std::string> reference_sha(work->tasks.size());  // first NVRTC cubin of each task
  std::vector<Outcome> for_cache(work->tasks.size());
  int64_t nvrtc_differ = 0;
  int64_t errors = 0;
  std::string first_error;
  for (int rep = 0; rep < options.repeat; ++rep) {
    for (int n : options.workers) {
      for (const std::string& method : methods) {
        RunResult run;
        if (method == "pool") {
          run = RunPool(*work, n, worker_path, timeout);
        } else if (method == "threads") {
          run = RunThreads(*work, n, **nvrtc);
        } else {
          run = RunNvcc(*work, n, options.nvcc, scratch->path());
        }
        std::cout
            << absl::StrFormat(
                   "  run %d: %-7s N=%-2d %7.2f s  %7.2f variants/s  %lld ok  %lld errors%s\n",
                   rep + 1, method, n, run.wall_s,
                   run.wall_s > 0 ? static_cast<double>(run.ok) / run.wall_s : 0.0,
                   static_cast<long long>(run.ok), static_cast<long long>(run.errors),
                   run.first_error.empty() ? "" : absl::StrCat("  first: ", run.first_error))
            << std::flush;
        errors += run.errors;
        if (first_error.empty() && !run.first_error.empty()) first_error = run.first_error;
        if (method != "nvcc") {
          for (size_t i = 0; i < run.outcomes.size(); ++i) {
            Outcome& outcome = run.outcomes[i];
            if (!outcome.ok) continue;
            const std::string sha = Sha256Hex(outcome.cubin);
            if (reference_sha[i].empty()) {
              reference_sha[i] = sha;
              for_cache[i] = std::move(outcome);
            } else if (sha != reference_sha[i]) {
              ++nvrtc_differ;
            }
          }
        }
        for (Outcome& outcome : run.outcomes) outcome.cubin.clear();
        runs[{method, n}].push_back(std::move(run));
      }
    }
  }

  // Medians over repetitions; speedup against the smallest N given (N = 1 by
  // default) of the same method; efficiency = speedup / (N / that N).
  struct Row {
    std::string method;
    int workers = 0;
    double wall_s = 0;
    double rate = 0;
    double speedup = 0;
    double efficiency = 0;
    double mean_compile_s = 0;
    double cpu_use = -1;
    double setup_s = 0;
    int64_t errors = 0;
  };
  std::vector<Row> rows;
  const int base_n = *std::min_element(options.workers.begin(), options.workers.end());
  std::map<std::string, double> base_rate;
  for (const std::string& method : methods) {
    for (int n : options.workers) {
      const std::vector<RunResult>& reps = runs[{method, n}];
      Row row;
      row.method = method;
      row.workers = n;
      std::vector<double> walls, means, cpus, setups;
      for (const RunResult& r : reps) {
        walls.push_back(r.wall_s);
        means.push_back(r.mean_compile_s);
        if (r.cpu_use >= 0) cpus.push_back(r.cpu_use);
        setups.push_back(r.setup_s);
        row.errors += r.errors;
      }
      row.wall_s = Median(walls);
      row.rate = row.wall_s > 0 ? static_cast<double>(work->tasks.size()) / row.wall_s : 0;
      row.mean_compile_s = Median(means);
      row.cpu_use = cpus.empty() ? -1 : Median(cpus);
      row.setup_s = Median(setups);
      if (n == base_n) base_rate[method] = row.rate;
      rows.push_back(row);
    }
  }
  for (Row& row : rows) {
    const double base = base_rate[row.method];
    row.speedup = base > 0 ? row.rate / base : 0;
    row.efficiency = row.speedup * base_n / row.workers;
  }

  std::cout << "\nCompile throughput, " << work->tasks.size() << " distinct variants per run"
            << (options.repeat > 1 ? absl::StrCat(", median of ", options.repeat, " runs") : "")
            << "\n"
            << "(speedup: against N=" << base_n << " of the same method; efficiency = speedup / "
            << (base_n == 1 ? std::string("N") : absl::StrCat("(N/", base_n, ")"))
            << "; s/compile: mean time of one compile as its caller saw it; CPU use: CPU "
               "seconds / (wall x N))\n\n";
  std::cout << absl::StrFormat("| %-7s | %3s | %8s | %10s | %7s | %10s | %9s | %7s | %6s |\n",
                               "method", "N", "wall s", "variants/s", "speedup", "efficiency",
                               "s/compile", "CPU use", "errors");
  std::cout
      << "| ------- | --: | -------: | ---------: | ------: | ---------: | --------: | ------: "
         "| -----: |\n";
  for (const Row& row : rows) {
    std::cout << absl::StrFormat(
        "| %-7s | %3d | %8.2f | %10.2f | %7.2f | %10.2f | %9.3f | %7s | %6lld |\n", row.method,
        row.workers, row.wall_s, row.rate, row.speedup, row.efficiency, row.mean_compile_s,
        row.cpu_use < 0 ? std::string("-") : absl::StrCat(Fixed(row.cpu_use * 100, 0), "%"),
        static_cast<long long>(row.errors));
  }
  if (!nvcc_skipped.empty()) std::cout << "\nnvcc: not run (" << nvcc_skipped << ")\n";
  if (wants("pool")) {
    std::cout << "\npool start + warm-up of all N workers (not in the wall time):";
    for (const Row& row : rows) {
      if (row.method == "pool")
        std::cout << "  N=" << row.workers << " " << Fixed(row.setup_s, 2) << " s";
    }
    std::cout << "\n";
  }
  if (wants("pool") || wants("threads")) {
    std::cout << "NVRTC cubins differing from the first NVRTC cubin of the same variant: "
              << nvrtc_differ << "\n";
  }

  // The warm rerun stores what NVRTC built, under NVRTC's compile keys.
  const bool nvrtc_ran = wants("pool") || wants("threads");
  WarmResult warm;
  if (nvrtc_ran) {
    warm = RunWarm(*work, for_cache, facts.nvrtc_version, scratch->path(), options.lookup_passes);
    errors += warm.errors;
    if (first_error.empty() && !warm.first_error.empty()) first_error = warm.first_error;
    std::cout << "\nWarm rerun (cache::Store in a temp SQLite file, " << warm.keys << " keys, "
              << warm.database_bytes << " bytes on disk):\n"
              << "  PutCompile                        " << Fixed(warm.put_us, 1) << " us/variant\n"
              << "  FindCompile, first pass           " << Fixed(warm.find_first_us, 1)
              << " us/variant\n"
              << "  FindCompile, median of " << warm.passes << " passes    "
              << Fixed(warm.find_median_us, 1) << " us/variant\n"
              << "  FindCompile + GetBinary, median   " << Fixed(warm.find_get_median_us, 1)
              << " us/variant\n";
  } else {
    std::cout << "\nWarm rerun: not run (it stores NVRTC's cubins; run pool or threads)\n";
  }

  std::cout << "\nGoals\n";
  bool have_goal_n = false;
  for (const Row& row : rows) {
    if (row.method != "pool" || row.workers != kEfficiencyGoalWorkers) continue;
    have_goal_n = true;
    std::cout << "  pool efficiency at N=" << kEfficiencyGoalWorkers << " >= " << kMinEfficiency
              << ": " << (row.efficiency >= kMinEfficiency ? "met" : "MISSED") << " ("
              << Fixed(row.efficiency, 2) << ")\n";
  }
  if (!have_goal_n) {
    std::cout << "  pool efficiency at N=" << kEfficiencyGoalWorkers << " >= " << kMinEfficiency
              << ": not measured (no pool run with N=" << kEfficiencyGoalWorkers << ")\n";
  }
  if (warm.keys > 0) {
    std::cout << "  warm rerun < " << kMaxWarmMicrosPerVariant / 1000 << " ms/variant: "
              << (warm.find_median_us < kMaxWarmMicrosPerVariant ? "met" : "MISSED") << " ("
              << Fixed(warm.find_median_us, 1) << " us)\n";
  }
  if (errors > 0) {
    std::cout << "\nERRORS: " << errors << " (first: " << first_error
              << "); the figures above are invalid\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace autotune::bench

int main(int argc, char** argv) {
  autotune::bench::BenchOptions options;
  options.kernels_dir = AUTOTUNE_BENCH_KERNELS_DIR;
  CLI::App app{
      "Compile throughput of a warmup job's distinct kernel variants: the compile pool "
      "(processes), NVRTC on threads in one process, and nvcc per variant, for each worker "
      "count; then the cost of a warm rerun's cache reads."};
  app.add_option("--kernels-dir", options.kernels_dir, "Directory of the kernel families")
      ->capture_default_str();
  app.add_option("--manifest", options.manifest,
                 "Warmup manifest (default: <kernels-dir>/softmax.manifest)");
  app.add_option("--max-variants", options.max_variants,
                 "Distinct compiles benchmarked, evenly spaced over the manifest's")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--workers", options.workers, "Worker counts N, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--methods", options.methods, "Methods, comma-separated: pool, threads, nvcc")
      ->delimiter(',')
      ->check(CLI::IsMember({"pool", "threads", "nvcc"}))
      ->capture_default_str();
  app.add_option("--worker", options.worker,
                 "autotune-worker executable (default: beside this program, else "
                 "../service/autotune-worker)");
  app.add_option("--nvcc", options.nvcc, "nvcc executable")->capture_default_str();
  app.add_option("--arch", options.arch, "Architecture (default: the manifest's, else sm_90)");
  app.add_option("--repeat", options.repeat, "Runs of every method and N; medians are reported")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--lookup-passes", options.lookup_passes, "Timed passes over the cache keys")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--compile-timeout", options.compile_timeout_s, "Seconds per pool compile")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (options.workers.empty() || options.methods.empty()) {
    std::cerr << "autotune-bench-compile: --workers and --methods need at least one value\n";
    return 2;
  }
  return autotune::bench::Run(options);
}
