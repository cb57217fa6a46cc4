#include "service/job_runner.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "cache/keys.h"
#include "kernels/compiler.h"
#include "kernels/manifest.h"
#include "kernels/names.h"
#include "kernels/search_space.h"
#include "spdlog/spdlog.h"

namespace autotune::service {
namespace {

namespace wv1 = ::autotune::worker::v1;

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

struct JobRunner::Work {
  int64_t problems = 0;
  int64_t variants = 0;
  std::vector<CompileUnit> units;
  absl::Duration compile_timeout;
};

struct JobRunner::Running {
  absl::Mutex mu;
  v1::Job job ABSL_GUARDED_BY(mu);
  v1::JobProgress latest ABSL_GUARDED_BY(mu);
  int64_t version ABSL_GUARDED_BY(mu) = 0;
  absl::Time persisted_at ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  std::atomic<bool> cancel{false};
  std::shared_ptr<Work> work;
  std::thread thread;
};

JobRunner::JobRunner(cache::Store* store, CompilePool* pool, std::string pool_error,
                     JobRunnerOptions options)
    : store_(store),
      pool_(pool),
      pool_error_(std::move(pool_error)),
      options_(std::move(options)) {}

JobRunner::~JobRunner() {
  std::vector<Running*> jobs;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, running] : running_) {
      running->cancel = true;
      jobs.push_back(running.get());
    }
  }
  for (Running* running : jobs) {
    if (running->thread.joinable()) running->thread.join();
  }
}

absl::StatusOr<std::shared_ptr<JobRunner::Work>> JobRunner::Plan(const v1::JobSpec& spec) const {
  const v1::JobOptions& options = spec.options();
  if (!options.compile_only()) {
    return absl::UnimplementedError(
        "profiling on a GPU is not available in this build; submit with compile_only "
        "(autotune warmup --compile-only)");
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
  const std::string arch =
      spec.manifest().arch().empty() ? options_.default_arch : spec.manifest().arch();
  if (!kernels::IsGpuArch(arch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest.arch: '", arch, "' is not a GPU architecture like sm_90"));
  }

  // The current version of every family the manifest names.
  std::map<std::string, cache::FamilyRecord> records;
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

  auto work = std::make_shared<Work>();
  work->problems = static_cast<int64_t>(problems.size());
  work->compile_timeout = options.compile_timeout_s() > 0
                              ? absl::Seconds(options.compile_timeout_s())
                              : options_.compile_timeout;
  absl::flat_hash_map<std::string, size_t> seen;
  auto add = [&](const cache::FamilyRecord& record, const v1::Problem& problem,
                 const std::string& name_expression,
                 const std::vector<std::string>& compile_options, const v1::Config* config) {
    kernels::CompileRequest request;
    request.source = record.family.source();
    request.program_name = record.family.name() + ".cu";
    request.name_expression = name_expression;
    request.options = compile_options;
    request.arch = arch;
    std::string key = kernels::CompileKey(request, pool_->nvrtc_version());
    if (seen.contains(key)) return;
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
  };
  for (const kernels::ManifestProblem& item : problems) {
    const cache::FamilyRecord& record = records.at(item.family);
    absl::StatusOr<kernels::SearchSpace> space =
        kernels::ExpandSearchSpace(record.family, item.problem);
    if (!space.ok()) {
      return absl::Status(space.status().code(),
                          absl::StrCat(item.family, " ", cache::CanonicalDims(item.problem.dims()),
                                       " ", std::string(cache::DTypeName(item.problem.dtype())),
                                       ": ", space.status().message()));
    }
    work->variants += static_cast<int64_t>(space->variants.size());
    add(record, item.problem, space->reference_name, space->reference_compile_options, nullptr);
    for (const kernels::Variant& variant : space->variants) {
      add(record, item.problem, variant.name_expression, variant.compile_options, &variant.config);
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
  Start(job, std::move(work));
  return job;
}

void JobRunner::Start(v1::Job job, std::shared_ptr<Work> work) {
  auto running = std::make_unique<Running>();
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
    ++running->version;
    const absl::Time now = absl::Now();
    persist = Finished(running->job.state()) || now - running->persisted_at >= kPersistEvery;
    if (persist) {
      running->persisted_at = now;
      snapshot = running->job;
    }
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

  std::string message;
  {
    absl::MutexLock lock(&running->mu);
    const v1::JobCounts& counts = running->job.counts();
    if (running->cancel) {
      running->job.set_state(v1::CANCELLED);
      running->job.set_error("cancelled");
    } else {
      running->job.set_state(v1::SUCCEEDED);
      if (counts.compile_errors() > 0) {
        running->job.set_error(absl::StrCat(counts.compile_errors(),
                                            " variants failed to compile; first: ", first_error));
      }
    }
    message = absl::StrCat("compiled ", counts.compiled(), ", cache hits ",
                           counts.compile_cache_hits(), ", errors ", counts.compile_errors(),
                           " in ", absl::FormatDuration(absl::Now() - started));
  }
  spdlog::info("job {}: {}", id, message);
  Publish(running, nullptr, message);
}

absl::Status JobRunner::Watch(absl::string_view id,
                              const std::function<bool(const v1::JobProgress&)>& on_progress,
                              const std::function<bool()>& stop) {
  Running* running = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = running_.find(std::string(id));
    if (it != running_.end()) running = it->second.get();
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
      Running* running = it->second.get();
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
    if (job.state() != v1::QUEUED && job.state() != v1::COMPILING) continue;
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
    *job.mutable_counts() = counts;
    job.set_state(v1::QUEUED);
    spdlog::info("job {}: resuming after a restart", job.id());
    Start(std::move(job), *std::move(work));
    ++resumed;
  }
  return resumed;
}

}  // namespace autotune::service
