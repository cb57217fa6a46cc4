#include "service/job_runner.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "kernels/compile_request.h"
#include "kernels/manifest.h"
#include "proto/problem.h"
#include "kernels/profile_task.h"
#include "kernels/search_space.h"
#include "spdlog/spdlog.h"

namespace autotune::service {
namespace {

namespace wv1 = ::autotune::worker::v1;

// A screened winner faster than this fraction of the runner-up is measured
// again before it is believed.
constexpr double kSuspiciousLead = 0.5;

// How often a running job is written to the store at most.
constexpr absl::Duration kPersistEvery = absl::Seconds(1);

bool Finished(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

std::string Now() { return absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()); }

// The first lines of a compiler log, enough to say what went wrong.
std::string LogExcerpt(const std::string& log) {
  constexpr size_t kMax = 2000;
  return log.size() <= kMax ? log : absl::StrCat(log.substr(0, kMax), "\n[... log truncated]");
}

}  // namespace

// One distinct compile.
struct CompileUnit {
  std::string key;
  wv1::CompileTask task;
  std::string family;
  std::string family_hash;
  v1::Problem problem;  // the first problem that needs it, for reports
  v1::Config config;    // empty for a reference kernel
};

// How a compile ended, for the screen phase.
struct CompileEnd {
  v1::VariantStatus status = v1::VARIANT_STATUS_UNSPECIFIED;
  std::string log;
};

// One problem to screen on a GPU.
struct JobRunner::ProblemWork {
  const cache::FamilyRecord* record = nullptr;  // in Work::records
  v1::Problem problem;
  kernels::SearchSpace space;
  std::string reference_key;
  std::vector<std::string> variant_keys;  // parallel to space.variants
};

struct JobRunner::Work {
  int64_t problems = 0;
  int64_t variants = 0;
  int64_t cached_problems = 0;
  std::vector<v1::Entry> cached_entries;  // reported with the job's results
  std::vector<CompileUnit> units;
  absl::Duration compile_timeout;
  // Screening (profile jobs only).
  bool profile = false;
  std::string arch;
  std::string nvrtc_version;
  std::map<std::string, cache::FamilyRecord> records;
  std::vector<ProblemWork> to_screen;
  kernels::ProfileSettings settings;
  absl::Mutex compiled_mu;
  std::map<std::string, CompileEnd> compiled ABSL_GUARDED_BY(compiled_mu);  // by key
};

struct JobRunner::Running {
  absl::Mutex mu;
  v1::Job job ABSL_GUARDED_BY(mu);
  v1::JobProgress latest ABSL_GUARDED_BY(mu);
  int64_t version ABSL_GUARDED_BY(mu) = 0;
  absl::Time persisted_at ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  // Problems the screen phase could not give a best entry.
  int64_t problems_failed ABSL_GUARDED_BY(mu) = 0;
  std::string first_problem_error ABSL_GUARDED_BY(mu);
  std::atomic<bool> cancel{false};
  // Set by Run() as its last step: the thread can be joined at once.
  std::atomic<bool> ended{false};
  std::shared_ptr<Work> work;  // released when the job ends
  std::thread thread;
};

JobRunner::JobRunner(cache::Store* store, CompilePool* pool, std::string pool_error,
                     JobRunnerOptions options)
    : store_(store),
      pool_(pool),
      pool_error_(std::move(pool_error)),
      options_(std::move(options)) {}

JobRunner::~JobRunner() {
  std::vector<std::shared_ptr<Running>> jobs;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, running] : running_) {
      running->cancel = true;
      jobs.push_back(running);
    }
  }
  for (const std::shared_ptr<Running>& running : jobs) {
    if (running->thread.joinable()) running->thread.join();
  }
}

absl::StatusOr<std::shared_ptr<JobRunner::Work>> JobRunner::Plan(const v1::JobSpec& spec) const {
  const v1::JobOptions& options = spec.options();
  const bool profile = !options.compile_only();
  ProfilePool* gpus = nullptr;
  if (profile) {
    absl::StatusOr<ProfilePool*> started = Gpus();
    if (!started.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot measure on a GPU: ", started.status().message(),
                       "; submit with compile_only (autotune warmup --compile-only) to compile "
                       "without measuring"));
    }
    gpus = *started;
  }
  if (pool_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("cannot compile here: ", pool_error_));
  }
  if (spec.manifest().items_size() == 0) {
    return absl::InvalidArgumentError("manifest.items is empty");
  }
  if (options.shard_count() < 0 || options.shard_index() < 0 ||
      (options.shard_count() > 0 && options.shard_index() >= options.shard_count())) {
    return absl::InvalidArgumentError(absl::StrCat("options.shard_index ", options.shard_index(),
                                                   " is not in 0..shard_count-1 (shard_count ",
                                                   options.shard_count(), ")"));
  }
  if (options.compile_timeout_s() < 0) {
    return absl::InvalidArgumentError("options.compile_timeout_s is negative");
  }
  if (options.variant_timeout_s() < 0) {
    return absl::InvalidArgumentError("options.variant_timeout_s is negative");
  }
  std::optional<worker::v1::DeviceInfo> device;
  if (gpus != nullptr) device = gpus->devices().front();
  std::string arch = spec.manifest().arch();
  if (arch.empty()) {
    arch = device ? absl::StrCat("sm_", device->compute_capability()) : options_.default_arch;
  }
  if (device && arch != absl::StrCat("sm_", device->compute_capability())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest.arch: '", arch, "' cannot run on ", device->name(), " (sm_",
        device->compute_capability(), "); leave it empty to compile for the GPU present"));
  }
  if (!IsGpuArch(arch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest.arch: '", arch, "' is not a GPU architecture like sm_90"));
  }

  auto work = std::make_shared<Work>();
  // The current version of every family the manifest names.
  std::map<std::string, cache::FamilyRecord>& records = work->records;
  absl::flat_hash_map<std::string, v1::KernelFamily> families;
  for (int i = 0; i < spec.manifest().items_size(); ++i) {
    const std::string& name = spec.manifest().items(i).family();
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("manifest.items[", i, "].family is empty"));
    }
    if (records.contains(name)) continue;
    absl::StatusOr<cache::FamilyRecord> record = store_->GetFamily(name);
    if (!record.ok()) {
      return absl::Status(
          record.status().code(),
          absl::StrCat("manifest.items[", i, "].family: ", record.status().message()));
    }
    families[name] = record->family;
    records.emplace(name, *std::move(record));
  }
  ASSIGN_OR_RETURN(std::vector<kernels::ManifestProblem> problems,
                   kernels::ExpandManifest(spec.manifest(), families));
  if (options.shard_count() > 0) {
    ASSIGN_OR_RETURN(
        problems, kernels::ShardProblems(problems, options.shard_index(), options.shard_count()));
  }

  work->problems = static_cast<int64_t>(problems.size());
  work->profile = profile;
  work->arch = arch;
  work->nvrtc_version = pool_->nvrtc_version();
  work->settings.launch_timeout_s = options.variant_timeout_s() > 0 ? options.variant_timeout_s()
                                                                    : options_.variant_timeout_s;
  work->compile_timeout = options.compile_timeout_s() > 0
                              ? absl::Seconds(options.compile_timeout_s())
                              : options_.compile_timeout;
  absl::flat_hash_map<std::string, size_t> seen;
  auto add = [&](const cache::FamilyRecord& record, const v1::Problem& problem,
                 const std::string& name_expression,
                 const std::vector<std::string>& compile_options,
                 const v1::Config* config) -> std::string {
    kernels::CompileRequest request;
    request.source = record.family.source();
    request.program_name = record.family.name() + ".cu";
    request.name_expression = name_expression;
    request.options = compile_options;
    request.arch = arch;
    std::string key = kernels::CompileKey(request, pool_->nvrtc_version());
    if (seen.contains(key)) return key;
    seen.emplace(key, work->units.size());
    CompileUnit unit;
    unit.key = key;
    unit.task.set_task_id(key);
    unit.task.set_source(request.source);
    unit.task.set_program_name(request.program_name);
    unit.task.set_name_expression(request.name_expression);
    for (const std::string& option : request.options) unit.task.add_options(option);
    unit.task.set_arch(arch);
    unit.family = record.family.name();
    unit.family_hash = record.content_hash;
    unit.problem = problem;
    if (config != nullptr) unit.config = *config;
    work->units.push_back(std::move(unit));
    return key;
  };
  for (const kernels::ManifestProblem& item : problems) {
    const cache::FamilyRecord& record = records.at(item.family);
    absl::StatusOr<kernels::SearchSpace> space =
        kernels::ExpandSearchSpace(record.family, item.problem);
    if (!space.ok()) {
      return absl::Status(space.status().code(),
                          absl::StrCat(ProblemContext(item.family, item.problem), ": ",
                                       space.status().message()));
    }
    work->variants += static_cast<int64_t>(space->variants.size());
    if (profile && !options.retune()) {
      cache::EntryKey key{.family = item.family,
                          .family_hash = record.content_hash,
                          .problem = item.problem,
                          .device = device->name()};
      absl::StatusOr<std::optional<v1::Entry>> cached = store_->FindEntry(key);
      if (cached.ok() && cached->has_value()) {
        ++work->cached_problems;
        work->cached_entries.push_back(**cached);
        continue;
      }
    }
    ProblemWork screen;
    screen.record = &record;
    screen.problem = item.problem;
    screen.reference_key = add(record, item.problem, space->reference_name,
                               space->reference_compile_options, nullptr);
    for (const kernels::Variant& variant : space->variants) {
      screen.variant_keys.push_back(add(record, item.problem, variant.name_expression,
                                        variant.compile_options, &variant.config));
    }
    if (profile) {
      screen.space = *std::move(space);
      work->to_screen.push_back(std::move(screen));
    }
  }
  return work;
}

absl::StatusOr<v1::Job> JobRunner::Submit(const v1::JobSpec& spec) {
  ASSIGN_OR_RETURN(std::shared_ptr<Work> work, Plan(spec));
  ASSIGN_OR_RETURN(v1::Job job, store_->CreateJob(spec));
  job.mutable_counts()->set_problems(work->problems);
  job.mutable_counts()->set_variants(work->variants);
  job.mutable_counts()->set_compiles(static_cast<int64_t>(work->units.size()));
  job.mutable_counts()->set_cached_problems(work->cached_problems);
  Start(job, std::move(work));
  return job;
}

void JobRunner::Start(v1::Job job, std::shared_ptr<Work> work) {
  // Jobs that ended are forgotten here (the store has them), so a daemon
  // that runs many jobs does not keep them all.
  std::vector<std::shared_ptr<Running>> ended;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = running_.begin(); it != running_.end();) {
      if (it->second->ended) {
        ended.push_back(std::move(it->second));
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const std::shared_ptr<Running>& old : ended) {
    if (old->thread.joinable()) old->thread.join();
  }

  auto running = std::make_shared<Running>();
  Running* raw = running.get();
  {
    absl::MutexLock lock(&raw->mu);
    raw->job = std::move(job);
    raw->latest.set_message("queued");
    *raw->latest.mutable_job() = raw->job;
  }
  raw->work = std::move(work);
  absl::MutexLock lock(&mu_);
  const std::string id = raw->job.id();
  running_[id] = std::move(running);
  raw->thread = std::thread([this, raw] { Run(raw); });
}

void JobRunner::Publish(Running* running, const v1::Measurement* last, absl::string_view message) {
  v1::Job snapshot;
  bool persist = false;
  {
    absl::MutexLock lock(&running->mu);
    running->job.set_updated_at(Now());
    running->latest.Clear();
    *running->latest.mutable_job() = running->job;
    if (last != nullptr) *running->latest.mutable_last() = *last;
    running->latest.set_message(std::string(message));
    const absl::Time now = absl::Now();
    if (Finished(running->job.state())) {
      // Stored before any watcher sees the end, so whoever asks for the job
      // once its stream has ended reads the end too. (Every other Publish of
      // the job has returned by now: its threads are joined.)
      absl::Status stored = store_->UpdateJob(running->job);
      if (!stored.ok()) {
        spdlog::warn("job {}: cannot store its end: {}", running->job.id(),
                     std::string(stored.message()));
      }
      running->persisted_at = now;
    } else if (now - running->persisted_at >= kPersistEvery) {
      persist = true;
      running->persisted_at = now;
      snapshot = running->job;
    }
    ++running->version;
  }
  if (persist) {
    absl::Status stored = store_->UpdateJob(snapshot);
    if (!stored.ok())
      spdlog::warn("job {}: cannot store progress: {}", snapshot.id(),
                   std::string(stored.message()));
  }
}

void JobRunner::Run(Running* running) {
  Work& work = *running->work;
  std::string id;
  {
    absl::MutexLock lock(&running->mu);
    running->job.set_state(v1::COMPILING);
    id = running->job.id();
    for (const v1::Entry& entry : work.cached_entries) *running->job.add_results() = entry;
  }
  Publish(running, nullptr, absl::StrCat("compiling ", work.units.size(), " distinct variants"));
  const absl::Time started = absl::Now();

  std::atomic<size_t> next{0};
  std::string first_error;
  absl::Mutex error_mu;
  auto compile_loop = [&] {
    while (!running->cancel) {
      const size_t index = next.fetch_add(1);
      if (index >= work.units.size()) return;
      const CompileUnit& unit = work.units[index];
      v1::VariantStatus status = v1::OK;
      std::string log;
      bool hit = false;
      absl::StatusOr<std::optional<cache::CompileRecord>> cached = store_->FindCompile(unit.key);
      if (cached.ok() && cached->has_value()) {
        hit = true;
        status = (*cached)->status;
        log = (*cached)->log;
      } else {
        wv1::CompileOutcome outcome = pool_->Compile(unit.task, work.compile_timeout);
        log = outcome.log();
        switch (outcome.status()) {
          case wv1::CompileOutcome::OK:
          case wv1::CompileOutcome::COMPILE_ERROR: {
            status = outcome.status() == wv1::CompileOutcome::OK ? v1::OK : v1::COMPILE_ERROR;
            cache::CompileRecord record;
            record.compile_key = unit.key;
            record.status = status;
            record.lowered_name = outcome.lowered_name();
            record.log = outcome.log();
            record.nvrtc_version = pool_->nvrtc_version();
            record.arch = unit.task.arch();
            record.family = unit.family;
            record.family_hash = unit.family_hash;
            absl::Status stored = store_->PutCompile(record, outcome.cubin());
            if (!stored.ok()) {
              status = v1::COMPILE_ERROR;
              log = absl::StrCat("cannot store the compile result: ", stored.message());
            }
            break;
          }
          case wv1::CompileOutcome::TIMEOUT:
            status = v1::COMPILE_TIMEOUT;
            break;
          default:
            status = v1::COMPILE_ERROR;
            break;
        }
      }
      {
        absl::MutexLock lock(&work.compiled_mu);
        work.compiled[unit.key] = CompileEnd{.status = status, .log = log};
      }
      v1::Measurement last;
      const bool failed = status != v1::OK;
      {
        absl::MutexLock lock(&running->mu);
        v1::JobCounts* counts = running->job.mutable_counts();
        if (hit) counts->set_compile_cache_hits(counts->compile_cache_hits() + 1);
        if (!hit && !failed) counts->set_compiled(counts->compiled() + 1);
        if (failed) counts->set_compile_errors(counts->compile_errors() + 1);
        if (status == v1::COMPILE_TIMEOUT) {
          counts->set_compile_timeouts(counts->compile_timeouts() + 1);
        }
      }
      if (failed) {
        last.set_family(unit.family);
        last.set_family_hash(unit.family_hash);
        *last.mutable_problem() = unit.problem;
        *last.mutable_config() = unit.config;
        last.set_status(status);
        last.set_phase(v1::COMPILE);
        last.set_detail(absl::StrCat(unit.config.params().empty() ? "reference kernel " : "",
                                     unit.task.name_expression(), ": ", LogExcerpt(log)));
        last.set_job_id(id);
        last.set_measured_at(Now());
        absl::MutexLock lock(&error_mu);
        if (first_error.empty()) first_error = last.detail();
      }
      Publish(running, failed ? &last : nullptr, "");
    }
  };
  const int parallelism =
      std::max(1, options_.compile_parallelism > 0 ? options_.compile_parallelism : pool_->size());
  std::vector<std::thread> threads;
  for (int i = 0; i < parallelism; ++i) threads.emplace_back(compile_loop);
  for (std::thread& thread : threads) thread.join();
  if (work.profile && !running->cancel) Screen(running);

  std::string message;
  {
    absl::MutexLock lock(&running->mu);
    const v1::JobCounts& counts = running->job.counts();
    if (running->cancel) {
      running->job.set_state(v1::CANCELLED);
      running->job.set_error("cancelled");
    } else {
      running->job.set_state(v1::SUCCEEDED);
      std::vector<std::string> errors;
      if (counts.compile_errors() > 0) {
        errors.push_back(absl::StrCat(counts.compile_errors(),
                                      " variants failed to compile; first: ", first_error));
      }
      if (running->problems_failed > 0) {
        errors.push_back(absl::StrCat(running->problems_failed,
                                      " problems have no valid variant; first: ",
                                      running->first_problem_error));
      }
      running->job.set_error(absl::StrJoin(errors, "\n"));
    }
    message = absl::StrCat("compiled ", counts.compiled(), ", cache hits ",
                           counts.compile_cache_hits(), ", errors ", counts.compile_errors());
    if (work.profile) {
      absl::StrAppend(&message, "; measured ", counts.measured(), ": ok ", counts.ok(),
                      ", wrong result ", counts.wrong_result(), ", timeout ", counts.timeout(),
                      ", fault ", counts.fault(), ", unsupported ", counts.unsupported(),
                      "; problems tuned ",
                      running->job.results_size() - static_cast<int>(work.cached_entries.size()),
                      ", already cached ",
                      counts.cached_problems());
    }
    absl::StrAppend(&message, " in ", absl::FormatDuration(absl::Now() - started));
  }
  spdlog::info("job {}: {}", id, message);
  Publish(running, nullptr, message);
  running->work.reset();
  running->ended = true;
}

absl::StatusOr<ProfilePool*> JobRunner::Gpus() const {
  absl::MutexLock lock(&gpus_mu_);
  if (gpus_ != nullptr) return gpus_.get();
  if (options_.profile.worker_path.empty()) {
    return absl::FailedPreconditionError(options_.profile_off_reason);
  }
  ASSIGN_OR_RETURN(gpus_, ProfilePool::Start(options_.profile));
  for (const worker::v1::DeviceInfo& device : gpus_->devices()) {
    spdlog::info("GPU {}: {} (sm_{}, {} SMs, {} MB L2, driver {})", device.ordinal(),
                 device.name(), device.compute_capability(), device.sm_count(),
                 device.l2_bytes() >> 20, device.driver_version());
  }
  return gpus_.get();
}

void JobRunner::Record(Running* running, const v1::Measurement& measurement, bool count) {
  absl::Status stored = store_->AddMeasurement(measurement);
  if (!stored.ok()) {
    spdlog::warn("job {}: cannot store a measurement: {}", measurement.job_id(),
                 std::string(stored.message()));
  }
  if (count) {
    absl::MutexLock lock(&running->mu);
    v1::JobCounts* counts = running->job.mutable_counts();
    switch (measurement.status()) {
      case v1::OK:
        counts->set_ok(counts->ok() + 1);
        break;
      case v1::WRONG_RESULT:
        counts->set_wrong_result(counts->wrong_result() + 1);
        break;
      case v1::TIMEOUT:
        counts->set_timeout(counts->timeout() + 1);
        break;
      case v1::FAULT:
        counts->set_fault(counts->fault() + 1);
        break;
      case v1::UNSUPPORTED:
        counts->set_unsupported(counts->unsupported() + 1);
        break;
      default:
        break;
    }
    if (measurement.phase() != v1::COMPILE) counts->set_measured(counts->measured() + 1);
  }
  Publish(running, &measurement, "");
}

void JobRunner::Screen(Running* running) {
  Work& work = *running->work;
  absl::StatusOr<ProfilePool*> gpus = Gpus();
  {
    absl::MutexLock lock(&running->mu);
    running->job.set_state(v1::SCREENING);
    if (!gpus.ok()) {
      ++running->problems_failed;
      running->first_problem_error = std::string(gpus.status().message());
    }
  }
  if (!gpus.ok()) return;
  Publish(running, nullptr,
          absl::StrCat("validating and timing the variants of ", work.to_screen.size(),
                       " problems on ", (*gpus)->devices().size(), " GPU(s)"));
  // One thread per GPU, each taking the next problem.
  std::atomic<size_t> next{0};
  auto loop = [&] {
    while (!running->cancel) {
      const size_t index = next.fetch_add(1);
      if (index >= work.to_screen.size()) return;
      ScreenProblem(running, work.to_screen[index], **gpus);
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 0; i < (*gpus)->devices().size(); ++i) threads.emplace_back(loop);
  for (std::thread& thread : threads) thread.join();
}

void JobRunner::ScreenProblem(Running* running, ProblemWork& problem, ProfilePool& gpus) {
  Work& work = *running->work;
  const cache::FamilyRecord& record = *problem.record;
  const v1::KernelFamily& family = record.family;
  const std::string context = ProblemContext(family.name(), problem.problem);
  std::string job_id;
  {
    absl::MutexLock lock(&running->mu);
    job_id = running->job.id();
  }
  const worker::v1::DeviceInfo device_info = gpus.devices().front();
  v1::Device device;
  device.set_name(device_info.name());
  device.set_compute_capability(device_info.compute_capability());
  device.set_sm_count(device_info.sm_count());

  auto fail_problem = [&](const std::string& why) {
    spdlog::warn("job {}: {}", job_id, why);
    absl::MutexLock lock(&running->mu);
    if (running->problems_failed++ == 0) running->first_problem_error = why;
  };
  // A resumed job does not measure again what it already chose.
  {
    cache::EntryKey key{.family = family.name(),
                        .family_hash = record.content_hash,
                        .problem = problem.problem,
                        .device = device.name()};
    absl::StatusOr<std::optional<v1::Entry>> stored = store_->FindEntry(key);
    if (stored.ok() && stored->has_value() && (*stored)->job_id() == job_id) {
      absl::MutexLock lock(&running->mu);
      *running->job.add_results() = **stored;
      return;
    }
  }
  auto base_measurement = [&](const v1::Config& config) {
    v1::Measurement m;
    m.set_family(family.name());
    m.set_family_hash(record.content_hash);
    *m.mutable_problem() = problem.problem;
    *m.mutable_device() = device;
    *m.mutable_config() = config;
    m.set_driver_version(device_info.driver_version());
    m.set_job_id(job_id);
    m.set_measured_at(Now());
    return m;
  };

  // The compiled kernels, from the compile cache.
  auto load = [&](const std::string& key, kernels::CompiledKernel* kernel,
                  std::string* sha256) -> CompileEnd {
    CompileEnd end;
    {
      absl::MutexLock lock(&work.compiled_mu);
      auto it = work.compiled.find(key);
      if (it != work.compiled.end()) end = it->second;
    }
    if (end.status != v1::OK) return end;
    absl::StatusOr<std::optional<cache::CompileRecord>> found = store_->FindCompile(key);
    if (!found.ok() || !found->has_value()) {
      return CompileEnd{.status = v1::COMPILE_ERROR,
                        .log = "the compiled binary is no longer in the store"};
    }
    absl::StatusOr<v1::Binary> binary = store_->GetBinary((*found)->binary_sha256);
    if (!binary.ok()) {
      return CompileEnd{.status = v1::COMPILE_ERROR, .log = std::string(binary.status().message())};
    }
    kernel->cubin = binary->cubin();
    kernel->lowered_name = (*found)->lowered_name;
    *sha256 = binary->sha256();
    return end;
  };
  kernels::CompiledKernel reference;
  std::string reference_sha;
  const CompileEnd reference_end = load(problem.reference_key, &reference, &reference_sha);
  if (reference_end.status != v1::OK) {
    const std::string why = absl::StrCat("the reference kernel '", problem.space.reference_name,
                                         "' did not compile: ", LogExcerpt(reference_end.log));
    // Nothing can be validated: every variant ends here, with the reason.
    for (const kernels::Variant& variant : problem.space.variants) {
      v1::Measurement m = base_measurement(variant.config);
      m.set_status(v1::UNSUPPORTED);
      m.set_phase(v1::SCREEN);
      m.set_detail(absl::StrCat(context, " [", kernels::ConfigLabel(family, variant.config),
                                "]: not run: ", why));
      Record(running, m);
    }
    fail_problem(absl::StrCat(context, ": ", why));
    return;
  }
  std::vector<kernels::CompiledVariant> compiled;
  std::map<std::string, std::string> sha_by_id;
  std::map<std::string, const kernels::Variant*> variant_by_id;
  for (size_t i = 0; i < problem.space.variants.size(); ++i) {
    const kernels::Variant& variant = problem.space.variants[i];
    kernels::CompiledVariant entry;
    entry.variant = &variant;
    entry.id = absl::StrCat(variant.index);
    std::string sha;
    const CompileEnd end = load(problem.variant_keys[i], &entry.kernel, &sha);
    if (end.status != v1::OK) {
      v1::Measurement m = base_measurement(variant.config);
      m.set_status(end.status == v1::VARIANT_STATUS_UNSPECIFIED ? v1::COMPILE_ERROR : end.status);
      m.set_phase(v1::COMPILE);
      m.set_detail(absl::StrCat(context, " [", kernels::ConfigLabel(family, variant.config),
                                "]: ", LogExcerpt(end.log)));
      Record(running, m);
      continue;
    }
    sha_by_id[entry.id] = sha;
    variant_by_id[entry.id] = &variant;
    compiled.push_back(std::move(entry));
  }
  if (compiled.empty()) {
    fail_problem(absl::StrCat(context, ": no variant compiled"));
    return;
  }
  absl::StatusOr<worker::v1::ProfileTask> task = kernels::MakeProfileTask(
      family, problem.problem, problem.space, reference, compiled, work.settings);
  if (!task.ok()) {
    fail_problem(std::string(task.status().message()));
    return;
  }
  task->set_task_id(absl::StrCat(job_id, "/", context));

  std::vector<std::pair<v1::Measurement, const kernels::Variant*>> ok;
  ProfileResult result = gpus.Profile(*task, [&](const worker::v1::VariantOutcome& outcome) {
    const kernels::Variant* variant = variant_by_id[outcome.variant_id()];
    v1::Measurement m = base_measurement(variant != nullptr ? variant->config : v1::Config());
    m.set_status(outcome.status());
    m.set_phase(v1::SCREEN);
    *m.mutable_timing() = outcome.timing();
    m.set_max_error(outcome.max_error());
    m.set_binary_sha256(sha_by_id[outcome.variant_id()]);
    m.set_cache_state(task->cache_state());
    std::string detail = outcome.detail();
    if (outcome.status() == v1::OK) {
      absl::StrAppend(&detail, detail.empty() ? "" : "; ", "validated on ",
                      outcome.seeds_checked(), " seeds (max |v - r| ", outcome.max_error(),
                      " at seed ", outcome.worst_seed(), "; rtol ", outcome.rtol(), ", atol ",
                      outcome.atol(), ")");
      if (outcome.pool_sets() > 0) {
        absl::StrAppend(&detail, "; timed over ", outcome.pool_sets(), " input sets (",
                        outcome.pool_bytes() >> 20, " MiB touched per pass), ",
                        outcome.timing().samples(), " samples of ",
                        outcome.launches_per_sample(), " launches");
      }
    }
    m.set_detail(detail);
    Record(running, m);
    if (outcome.status() == v1::OK && variant != nullptr) ok.emplace_back(m, variant);
  });
  if (result.done.status() != v1::OK) {
    // The variants that never ran share the problem's fate.
    std::set<std::string> reported;
    for (const worker::v1::VariantOutcome& outcome : result.outcomes) {
      reported.insert(outcome.variant_id());
    }
    for (const kernels::CompiledVariant& entry : compiled) {
      if (reported.contains(entry.id)) continue;
      v1::Measurement m = base_measurement(entry.variant->config);
      m.set_status(result.done.status());
      m.set_phase(v1::SCREEN);
      m.set_binary_sha256(sha_by_id[entry.id]);
      m.set_detail(absl::StrCat("not run: ", result.done.phase(), ": ", result.done.detail()));
      Record(running, m);
    }
    fail_problem(absl::StrCat(result.done.phase(), ": ", result.done.detail()));
    return;
  }
  if (ok.empty()) {
    fail_problem(absl::StrCat(context, ": none of ", compiled.size(),
                              " variants validated and timed OK"));
    return;
  }
  auto by_median = [](const auto& a, const auto& b) {
    return a.first.timing().median_us() < b.first.timing().median_us();
  };
  std::sort(ok.begin(), ok.end(), by_median);
  // A winner far ahead of the rest is measured again, alone, before it is
  // believed: a disturbed or mis-sized measurement must not win. The new
  // measurement replaces the first.
  if (ok.size() > 1 && ok[0].first.timing().median_us() <
                           kSuspiciousLead * ok[1].first.timing().median_us()) {
    const std::string id = absl::StrCat(ok[0].second->index);
    worker::v1::ProfileTask again = *task;
    again.clear_variants();
    for (const worker::v1::KernelImage& image : task->variants()) {
      if (image.id() == id) *again.add_variants() = image;
    }
    again.set_task_id(absl::StrCat(task->task_id(), "/again"));
    ProfileResult second = gpus.Profile(again);
    const double first_us = ok[0].first.timing().median_us();
    if (second.done.status() == v1::OK && second.outcomes.size() == 1 &&
        second.outcomes[0].status() == v1::OK) {
      v1::Measurement& m = ok[0].first;
      *m.mutable_timing() = second.outcomes[0].timing();
      m.set_measured_at(Now());
      m.set_detail(absl::StrCat("measured again alone: its first median ", first_us,
                                " us was under half the runner-up's ",
                                ok[1].first.timing().median_us(), " us; ",
                                second.outcomes[0].detail()));
      Record(running, m, /*count=*/false);
    } else {
      // It failed when run again: it cannot be chosen.
      v1::Measurement m = ok[0].first;
      m.set_status(second.outcomes.empty() ? second.done.status() : second.outcomes[0].status());
      m.set_detail(absl::StrCat("measured again alone, it did not pass: ",
                                second.outcomes.empty() ? second.done.detail()
                                                        : second.outcomes[0].detail()));
      Record(running, m, /*count=*/false);
      ok.erase(ok.begin());
    }
    std::sort(ok.begin(), ok.end(), by_median);
  }
  const v1::Measurement& best = ok.front().first;
  v1::Entry entry;
  entry.set_family(family.name());
  entry.set_family_hash(record.content_hash);
  *entry.mutable_problem() = problem.problem;
  *entry.mutable_device() = device;
  *entry.mutable_config() = best.config();
  *entry.mutable_launch() = ok.front().second->launch;
  entry.set_binary_sha256(best.binary_sha256());
  entry.set_nvrtc_version(work.nvrtc_version);
  entry.set_driver_version(device_info.driver_version());
  entry.set_arch(work.arch);
  *entry.mutable_timing() = best.timing();
  if (ok.size() > 1 && best.timing().median_us() > 0) {
    entry.set_margin(ok[1].first.timing().median_us() / best.timing().median_us() - 1);
  }
  entry.set_phase(v1::SCREEN);
  entry.set_tuned_at(Now());
  entry.set_job_id(job_id);
  absl::Status stored = store_->PutEntry(entry);
  if (!stored.ok()) {
    fail_problem(absl::StrCat(context, ": cannot store the best entry: ", stored.message()));
    return;
  }
  {
    absl::MutexLock lock(&running->mu);
    *running->job.add_results() = entry;
  }
  Publish(running, nullptr,
          absl::StrCat(context, ": best ", kernels::ConfigLabel(family, entry.config()), " at ",
                       entry.timing().median_us(), " us (screened)"));
}

absl::Status JobRunner::Watch(absl::string_view id,
                              const std::function<bool(const v1::JobProgress&)>& on_progress,
                              const std::function<bool()>& stop) {
  std::shared_ptr<Running> running;
  {
    absl::MutexLock lock(&mu_);
    auto it = running_.find(std::string(id));
    if (it != running_.end()) running = it->second;
  }
  if (running == nullptr) {
    ASSIGN_OR_RETURN(v1::Job job, store_->GetJob(std::string(id)));
    v1::JobProgress progress;
    *progress.mutable_job() = std::move(job);
    on_progress(progress);
    return absl::OkStatus();
  }
  int64_t seen = -1;
  while (true) {
    v1::JobProgress progress;
    bool finished = false;
    {
      absl::MutexLock lock(&running->mu);
      auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(running->mu) {
        return running->version != seen;
      };
      running->mu.AwaitWithTimeout(absl::Condition(&changed), absl::Milliseconds(250));
      if (running->version == seen) {
        if (stop && stop()) return absl::CancelledError("the watcher went away");
        continue;
      }
      seen = running->version;
      progress = running->latest;
      // From the snapshot sent, not the live job: the job may have ended
      // after this snapshot was taken, and the final one is still to come.
      finished = Finished(progress.job().state());
    }
    if (!on_progress(progress) || finished) return absl::OkStatus();
    if (stop && stop()) return absl::CancelledError("the watcher went away");
  }
}

absl::StatusOr<v1::Job> JobRunner::Cancel(absl::string_view id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = running_.find(std::string(id));
    if (it != running_.end()) {
      Running* running = it->second.get();  // alive: mu_ is held
      running->cancel = true;
      absl::MutexLock job_lock(&running->mu);
      return running->job;
    }
  }
  return store_->GetJob(std::string(id));
}

absl::StatusOr<int> JobRunner::ResumeUnfinished() {
  ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store_->ListJobs(0));
  int resumed = 0;
  for (v1::Job& job : jobs) {
    if (job.state() != v1::QUEUED && job.state() != v1::COMPILING &&
        job.state() != v1::SCREENING) {
      continue;
    }
    absl::StatusOr<std::shared_ptr<Work>> work = Plan(job.spec());
    if (!work.ok()) {
      job.set_state(v1::FAILED);
      job.set_error(absl::StrCat("could not resume after a restart: ", work.status().message()));
      job.set_updated_at(Now());
      RETURN_IF_ERROR(store_->UpdateJob(job));
      continue;
    }
    v1::JobCounts counts;
    counts.set_problems((*work)->problems);
    counts.set_variants((*work)->variants);
    counts.set_compiles(static_cast<int64_t>((*work)->units.size()));
    counts.set_cached_problems((*work)->cached_problems);
    *job.mutable_counts() = counts;
    job.clear_results();
    job.set_state(v1::QUEUED);
    spdlog::info("job {}: resuming after a restart", job.id());
    Start(std::move(job), *std::move(work));
    ++resumed;
  }
  return resumed;
}

}  // namespace autotune::service
