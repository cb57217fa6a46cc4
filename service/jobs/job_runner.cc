#include "service/jobs/job_runner.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/timestamp.h"
#include "kernels/family_check.h"
#include "proto/problem.h"
#include "service/jobs/choice.h"
#include "service/jobs/compile_stage.h"
#include "service/jobs/job_options.h"
#include "service/jobs/job_plan.h"
#include "service/jobs/job_progress.h"
#include "service/jobs/job_text.h"
#include "service/jobs/running_job.h"
#include "service/jobs/search.h"
#include "service/jobs/search_stage.h"
#include "service/jobs/serial_stage.h"
#include "service/jobs/stage_context.h"
#include "spdlog/spdlog.h"

namespace autotune::service {

JobRunner::JobRunner(cache::Store* store, CompilePool* pool, std::string pool_error,
                     JobRunnerOptions options)
    : store_(store),
      pool_(pool),
      pool_error_(std::move(pool_error)),
      pool_tried_(absl::Now()),
      options_(std::move(options)) {}

absl::StatusOr<CompilePool*> JobRunner::Pool() {
  absl::MutexLock lock(&pool_mu_);
  if (pool_ != nullptr) return pool_;
  if (options_.start_pool && absl::Now() - pool_tried_ >= options_.pool_retry) {
    pool_tried_ = absl::Now();
    absl::StatusOr<std::unique_ptr<CompilePool>> started = options_.start_pool();
    if (started.ok()) {
      started_pool_ = *std::move(started);
      pool_ = started_pool_.get();
      spdlog::info("compiling is available again: compile pool of {} workers, NVRTC {}",
                   pool_->size(), pool_->nvrtc_version());
      return pool_;
    }
    pool_error_ = std::string(started.status().message());
  }
  return absl::FailedPreconditionError(absl::StrCat("cannot compile here: ", pool_error_));
}

JobRunner::~JobRunner() {
  std::vector<std::shared_ptr<RunningJob>> jobs;
  {
    absl::MutexLock lock(&mu_);
    // Stopped, not cancelled: SIGTERM (a restart) leaves each running job
    // to ResumeUnfinished, as a crash would; only CancelJob cancels.
    for (auto& [id, running] : running_) {
      running->stopping = true;
      running->cancel = true;
      jobs.push_back(running);
    }
  }
  const int unfinished = static_cast<int>(std::count_if(
      jobs.begin(), jobs.end(), [](const std::shared_ptr<RunningJob>& r) { return !r->ended; }));
  if (unfinished > 0) {
    spdlog::info(
        "stopping {} running job(s) once their current task ends; each resumes when "
        "the daemon starts again",
        unfinished);
  }
  for (const std::shared_ptr<RunningJob>& running : jobs) {
    if (running->thread.joinable()) running->thread.join();
  }
}

namespace {

// Winners of the nearest tuned problems a model search measures first.
constexpr size_t kSearchHints = 3;

// How far apart two problems of a family are: the sum over dims of
// |log2(a / b)|, and 8 more for another dtype.
double ProblemDistance(const v1::Problem& a, const v1::Problem& b) {
  double distance = a.dtype() == b.dtype() ? 0 : 8;
  for (const auto& [name, value] : a.dims()) {
    auto it = b.dims().find(name);
    if (it == b.dims().end() || value <= 0 || it->second <= 0) {
      distance += 64;
      continue;
    }
    distance += std::abs(std::log2(static_cast<double>(value) / static_cast<double>(it->second)));
  }
  return distance;
}

// The configs of the `count` entries nearest `problem`, nearest first,
// each config once. Entries of `job_id` itself are left out: a job resumed
// after a restart sees the hints it started with, so its search proposes
// what it had already screened.
std::vector<v1::Config> NearestWinners(const std::vector<v1::Entry>& entries,
                                       const v1::Problem& problem, const std::string& job_id,
                                       size_t count) {
  std::vector<std::pair<double, const v1::Entry*>> by_distance;
  for (const v1::Entry& entry : entries) {
    if (entry.job_id() == job_id) continue;
    by_distance.emplace_back(ProblemDistance(problem, entry.problem()), &entry);
  }
  std::stable_sort(by_distance.begin(), by_distance.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<v1::Config> configs;
  for (const auto& ranked : by_distance) {
    if (configs.size() >= count) break;
    const v1::Entry* entry = ranked.second;
    const bool seen = std::any_of(configs.begin(), configs.end(), [&](const v1::Config& c) {
      return SameConfig(c, entry->config());
    });
    if (!seen) configs.push_back(entry->config());
  }
  return configs;
}

}  // namespace

absl::StatusOr<std::shared_ptr<JobWork>> JobRunner::Prepare(const v1::JobSpec& spec,
                                                            const std::string& job_id) {
  RETURN_IF_ERROR(CheckJobSpec(spec));
  const v1::JobOptions& options = spec.options();
  const auto cannot_measure = [](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot measure on a GPU: ", why,
                     "; add --compile-only (JobOptions.compile_only) to compile without "
                     "measuring"));
  };
  // Known without starting anything, so said first.
  if (!options.compile_only() && options_.profile.worker_path.empty()) {
    return cannot_measure(options_.profile_off_reason);
  }
  ASSIGN_OR_RETURN(CompilePool * pool, Pool());
  // The current version of every family the manifest names.
  std::map<std::string, std::shared_ptr<const cache::FamilyRecord>> families;
  for (int i = 0; i < spec.manifest().items_size(); ++i) {
    const std::string& name = spec.manifest().items(i).family();
    if (families.contains(name)) continue;
    absl::StatusOr<cache::FamilyRecord> record = store_->GetFamily(name);
    if (!record.ok()) {
      return absl::Status(
          record.status().code(),
          absl::StrCat("manifest.items[", i, "].family: ", record.status().message()));
    }
    families[name] = std::make_shared<const cache::FamilyRecord>(*std::move(record));
  }
  auto work = std::make_shared<JobWork>();
  work->profile = !options.compile_only();
  std::optional<worker::v1::DeviceInfo> gpu;
  if (work->profile) {
    absl::StatusOr<ProfilePool*> gpus = Gpus();
    if (!gpus.ok()) return cannot_measure(gpus.status().message());
    gpu = (*gpus)->devices().front();
  }
  const worker::v1::DeviceInfo* device = gpu.has_value() ? &*gpu : nullptr;
  PlanTarget target;
  ASSIGN_OR_RETURN(target.arch, ResolveArch(spec.manifest(), device, options_.default_arch));
  target.nvrtc_version = pool->nvrtc_version();
  target.limits = LimitsOf(device);
  if (job_id.empty()) {  // a resumed job was admitted before
    target.max_job_variants = options_.max_job_variants;
    target.max_job_variants_setting = NameSetting(
        "max_job_variants", absl::StrCat(options_.max_job_variants), options_.setting_hint);
  }
  ASSIGN_OR_RETURN(work->plan, PlanJob(spec, families, target));
  work->problems = static_cast<int64_t>(work->plan.problems.size());
  work->nvrtc_version = target.nvrtc_version;
  work->resumed = !job_id.empty();
  work->options = ResolveJobOptions(options, options_);
  if (!work->profile) return work;

  RETURN_IF_ERROR(SkipTunedProblems(gpu->name(), job_id, options.retune(), work.get()));
  RETURN_IF_ERROR(AddSearchHints(gpu->name(), job_id, work.get()));
  return work;
}

absl::Status JobRunner::SkipTunedProblems(const std::string& gpu_name, const std::string& job_id,
                                          bool retune, JobWork* work) {
  // Problems already tuned on this GPU model are not measured again: those
  // of earlier jobs unless retune, those of this (resumed) job always.
  std::set<size_t> to_screen;
  for (size_t i = 0; i < work->plan.problems.size(); ++i) {
    const PlannedProblem& problem = work->plan.problems[i];
    cache::EntryKey key{.family = problem.record->family.name(),
                        .family_hash = problem.record->content_hash,
                        .problem = problem.problem,
                        .device = gpu_name};
    absl::StatusOr<std::optional<v1::Entry>> stored = store_->FindEntry(key);
    if (!stored.ok()) {
      return absl::Status(stored.status().code(),
                          absl::StrCat(ProblemContext(key.family, key.problem),
                                       ": cannot read its entry: ", stored.status().message()));
    }
    const bool ours = stored->has_value() && !job_id.empty() && (*stored)->job_id() == job_id;
    if (stored->has_value() && (!retune || ours)) {
      if (!retune) ++work->cached_problems;
      v1::ProblemReport report;
      report.set_family(key.family);
      *report.mutable_problem() = key.problem;
      *report.mutable_entry() = **stored;
      report.set_cached(!ours);
      work->done_reports.push_back(std::move(report));
      continue;
    }
    if (stored->has_value()) work->plan.problems[i].current_config = (*stored)->config();
    RETURN_IF_ERROR(
        ReadPrevious(key, stored->has_value() ? &**stored : nullptr, &work->plan.problems[i]));
    to_screen.insert(i);
  }
  KeepProblems(to_screen, &work->plan);
  return absl::OkStatus();
}

absl::Status JobRunner::ReadPrevious(const cache::EntryKey& key, const v1::Entry* stored,
                                     PlannedProblem* planned) {
  // What the cache held before, of any family version: the report's
  // comparison.
  v1::EntryFilter filter;
  filter.set_family(key.family);
  filter.set_device(key.device);
  *filter.mutable_problem() = key.problem;
  absl::StatusOr<std::vector<v1::Entry>> earlier = store_->ListEntries(filter, -1, 0);
  if (!earlier.ok()) {
    return absl::Status(
        earlier.status().code(),
        absl::StrCat(ProblemContext(key.family, key.problem),
                     ": cannot read its earlier entries: ", earlier.status().message()));
  }
  const v1::Entry* previous = stored;
  for (const v1::Entry& entry : *earlier) {
    if (previous == nullptr || entry.tuned_at() > previous->tuned_at()) previous = &entry;
  }
  if (previous != nullptr) {
    planned->previous = *previous;
    // The config served until now goes on to the serial phase when it is
    // still in the space, and a tie keeps it.
    if (!planned->current_config) planned->current_config = previous->config();
    if (previous->family_hash() != key.family_hash) {
      absl::StatusOr<cache::FamilyRecord> older =
          store_->GetFamilyVersion(key.family, previous->family_hash());
      if (!older.ok() && !absl::IsNotFound(older.status())) {
        return absl::Status(older.status().code(),
                            absl::StrCat(ProblemContext(key.family, key.problem),
                                         ": cannot read the family version of its entry: ",
                                         older.status().message()));
      }
      if (older.ok() && SameButSpace(older->family, planned->record->family)) {
        planned->screens_from_hash = older->content_hash;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status JobRunner::AddSearchHints(const std::string& gpu_name, const std::string& job_id,
                                       JobWork* work) {
  // A model search starts from the winners of the nearest problems of the
  // same family tuned on this GPU model (of any family version).
  std::map<std::string, std::vector<v1::Entry>> tuned;  // by family
  for (PlannedProblem& problem : work->plan.problems) {
    if (problem.search.kind != SearchKind::kModel) continue;
    const std::string& family = problem.record->family.name();
    if (!tuned.contains(family)) {
      v1::EntryFilter filter;
      filter.set_family(family);
      filter.set_device(gpu_name);
      absl::StatusOr<std::vector<v1::Entry>> entries = store_->ListEntries(filter, -1, 0);
      if (!entries.ok()) {
        return absl::Status(entries.status().code(),
                            absl::StrCat(family, ": cannot read its entries for the search: ",
                                         entries.status().message()));
      }
      tuned[family] = *std::move(entries);
    }
    problem.hints = NearestWinners(tuned[family], problem.problem, job_id, kSearchHints);
  }
  return absl::OkStatus();
}

namespace {

void SetPlannedCounts(int64_t problems, int64_t variants, int64_t compiles, int64_t cached,
                      int64_t search_budget, v1::Job* job) {
  v1::JobCounts counts;
  counts.set_problems(problems);
  counts.set_variants(variants);
  counts.set_search_budget(search_budget);
  counts.set_compiles(compiles);
  counts.set_cached_problems(cached);
  *job->mutable_counts() = counts;
}

}  // namespace

absl::StatusOr<v1::Job> JobRunner::Submit(const v1::JobSpec& spec,
                                          const std::string& submitted_by) {
  const bool limited = options_.max_unfinished_jobs_per_submitter > 0 && !submitted_by.empty();
  if (limited) {
    // Counted and reserved under one lock: concurrent submits see each
    // other's reservations.
    absl::MutexLock lock(&mu_);
    int unfinished = submitting_[submitted_by];
    for (const auto& [id, running] : running_) {
      if (running->ended || running->submitted_by != submitted_by) continue;
      // By state: a job whose end a watcher has seen has ended, even while
      // its thread is still finishing.
      if (!JobFinished(running->state())) ++unfinished;
    }
    if (unfinished >= options_.max_unfinished_jobs_per_submitter) {
      return absl::ResourceExhaustedError(absl::StrCat(
          submitted_by, " has ", unfinished,
          " jobs that have not ended, the most one submitter may have (the daemon's limit ",
          NameSetting("max_jobs_per_submitter",
                      absl::StrCat(options_.max_unfinished_jobs_per_submitter),
                      options_.setting_hint),
          "); wait for one or cancel one"));
    }
    ++submitting_[submitted_by];
  }
  // The reservation ends once the job is in running_ (or was refused).
  absl::Cleanup release = [&] {
    if (!limited) return;
    absl::MutexLock lock(&mu_);
    if (--submitting_[submitted_by] <= 0) submitting_.erase(submitted_by);
  };
  // The variant limit is kept by the plan itself (PlanTarget.max_variants).
  ASSIGN_OR_RETURN(std::shared_ptr<JobWork> work, Prepare(spec, ""));
  ASSIGN_OR_RETURN(v1::Job job, store_->CreateJob(spec, submitted_by));
  SetPlannedCounts(work->problems, work->plan.variants,
                   static_cast<int64_t>(work->plan.units.size()), work->cached_problems,
                   work->plan.to_measure, &job);
  Start(job, std::move(work));
  return job;
}

void JobRunner::Start(v1::Job job, std::shared_ptr<JobWork> work) {
  // Jobs that ended are forgotten here (the store has them), so a daemon
  // that runs many jobs does not keep them all.
  std::vector<std::shared_ptr<RunningJob>> ended;
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
  for (const std::shared_ptr<RunningJob>& old : ended) {
    if (old->thread.joinable()) old->thread.join();
  }

  job.set_arch(work->plan.arch);
  auto running = std::make_shared<RunningJob>(std::move(job), work->profile);
  RunningJob* raw = running.get();
  raw->work = std::move(work);
  absl::MutexLock lock(&mu_);
  running_[raw->id] = std::move(running);
  raw->thread = std::thread([this, raw] { Run(raw); });
}

JobRunner::Totals JobRunner::totals() {
  Totals totals;
  {
    absl::MutexLock lock(&rates_mu_);
    totals = totals_;
  }
  {
    absl::MutexLock lock(&pool_mu_);
    totals.workers_replaced = pool_ != nullptr ? pool_->replaced() : 0;
  }
  absl::MutexLock lock(&gpus_mu_);
  if (gpus_ != nullptr) totals.workers_replaced += gpus_->replaced();
  return totals;
}

void JobRunner::Run(RunningJob* running) {
  JobWork& work = *running->work;
  const std::string& id = running->id;
  running->Begin(work.done_reports);
  const absl::Time started = absl::Now();
  RunStages(running);

  if (running->stopping) {
    StopWhereItIs(running, id);
    return;
  }
  const v1::Job finished = running->Finish(work.done_reports, Rates());
  const std::string message = Conclude(finished, work, started);
  spdlog::info("job {}: {}", id, message);
  // Learned before the end is published: a job submitted by whoever saw
  // this one end estimates with its rates.
  if (finished.state() == v1::SUCCEEDED) LearnRates(finished);
  {
    absl::MutexLock lock(&rates_mu_);
    totals_.compile_s += finished.timing().compile_s();
    totals_.gpu_s += finished.timing().screen_s() + finished.timing().serial_s();
  }
  Publish(running, nullptr, message);
  running->work.reset();
  // The job's plan, cubins and outcomes (hundreds of MB for a large family)
  // were freed into the malloc arenas of many threads, which keep the pages:
  // hand them back, so the daemon does not keep every job's high-water
  // mark (bench/run_memory_bench.sh measures it).
  malloc_trim(0);
  running->ended = true;
}

CompilePhaseOptions JobRunner::CompileOptions(const JobWork& work) {
  // Prepare() found one, and a pool, once there, stays.
  CompilePool* pool = *Pool();
  CompilePhaseOptions options;
  options.parallelism =
      options_.compile_parallelism > 0 ? options_.compile_parallelism : pool->size();
  options.timeout = work.options.compile_timeout;
  options.keep_cubins = work.profile;
  return options;
}

void JobRunner::RunStages(RunningJob* running) {
  JobWork& work = *running->work;
  StageContext context;
  context.job = running;
  context.work = &work;
  context.store = store_;
  context.compile_pool = *Pool();  // Prepare() found one
  context.compile_options = CompileOptions(work);
  context.compile_ahead = options_.compile_ahead;
  context.publish = [this, running](const v1::Measurement* last, absl::string_view message) {
    Publish(running, last, message);
  };
  if (!work.profile) {
    context.Announce(absl::StrCat("compiling ", work.plan.units.size(), " distinct variants"));
    CompileStage(context).Run(work.plan.units);
    // A compile-only job still says which problems it covered (a shard's
    // share of the manifest, say).
    for (const PlannedProblem& problem : work.plan.problems) {
      v1::ProblemReport report;
      report.set_family(problem.record->family.name());
      *report.mutable_problem() = problem.problem;
      running->AddReport(std::move(report));
    }
    return;
  }
  absl::StatusOr<ProfilePool*> gpus = Gpus();
  if (!gpus.ok()) {
    context.FailProblem(gpus.status(), /*store_error=*/false);
    return;
  }
  context.gpus = *gpus;
  ScreenedProblems screened = SearchStage(context).Run();  // compiles each round's variants
  if (running->cancel) return;
  SerialStage(context).Run(std::move(screened));
}

void JobRunner::StopWhereItIs(RunningJob* running, const std::string& id) {
  // Stored in the state it reached; ResumeUnfinished takes it up.
  const v1::Job left = running->Stamped();
  absl::Status stored = store_->UpdateJob(left);
  if (!stored.ok()) {
    spdlog::warn("job {}: cannot store where it stopped: {}", id, std::string(stored.message()));
  }
  spdlog::info("job {}: stopped in {} with the daemon; it resumes when the daemon starts again", id,
               v1::JobState_Name(left.state()));
  running->work.reset();
  running->ended = true;
}

std::string JobRunner::Conclude(const v1::Job& finished, const JobWork& work, absl::Time started) {
  const v1::JobCounts& counts = finished.counts();
  std::string message =
      absl::StrCat("compiled ", counts.compiled(), ", cache hits ", counts.compile_cache_hits(),
                   ", errors ", counts.compile_errors());
  if (work.profile) {
    absl::StrAppend(&message, "; measured ", counts.measured(), ": ok ", counts.ok(),
                    ", wrong result ", counts.wrong_result(), ", timeout ", counts.timeout(),
                    ", fault ", counts.fault(), ", unsupported ", counts.unsupported(),
                    "; problems tuned ",
                    finished.results_size() - static_cast<int>(work.done_reports.size()),
                    ", already cached ", counts.cached_problems());
  }
  absl::StrAppend(&message, " in ", absl::FormatDuration(absl::Now() - started));
  return message;
}

absl::Status JobRunner::CheckFamilyCompiles(const v1::KernelFamily& family) {
  ASSIGN_OR_RETURN(CompilePool * pool, Pool());
  std::string arch = options_.default_arch;
  if (gpus_mu_.TryLock()) {  // never wait for GPU workers that are starting
    if (gpus_ != nullptr && !gpus_->devices().empty()) {
      arch = absl::StrCat("sm_", gpus_->devices().front().compute_capability());
    }
    gpus_mu_.Unlock();
  }
  ASSIGN_OR_RETURN(const std::vector<kernels::CheckCompile> compiles,
                   kernels::CheckCompiles(family, arch));
  std::vector<worker::v1::CompileOutcome> outcomes(compiles.size());
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < compiles.size(); ++i) {
      threads.emplace_back([&, i] {
        outcomes[i] = pool->Compile(CompileTaskOf(compiles[i].request, absl::StrCat("check-", i)),
                                    options_.compile_timeout);
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  std::vector<kernels::CheckFinding> findings;
  for (size_t i = 0; i < compiles.size(); ++i) {
    const worker::v1::CompileOutcome& outcome = outcomes[i];
    kernels::CompileOutput output;
    output.compiled = outcome.status() == worker::v1::CompileOutcome::OK;
    output.log = outcome.log();
    if (outcome.status() == worker::v1::CompileOutcome::TIMEOUT) {
      output.log = absl::StrCat("the compile took longer than ",
                                absl::FormatDuration(options_.compile_timeout));
    } else if (outcome.status() == worker::v1::CompileOutcome::WORKER_LOST) {
      output.log = absl::StrCat("the compile worker died: ", outcome.log());
    }
    output.cubin = outcome.cubin();
    output.lowered_name = outcome.lowered_name();
    kernels::AddFindings(family, compiles[i], output, findings);
  }
  return kernels::FindingsStatus(findings, absl::StrCat("family (compiled for ", arch, ")"));
}

absl::StatusOr<CompiledConfigs> JobRunner::CompileConfigs(
    const std::vector<ConfigCompile>& configs) {
  ASSIGN_OR_RETURN(CompilePool * pool, Pool());
  CompiledConfigs compiled;
  compiled.nvrtc_version = pool->nvrtc_version();
  compiled.ends.resize(configs.size());
  std::vector<CompileUnit> units;
  std::vector<std::string> keys(configs.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < configs.size(); ++i) {
    const ConfigCompile& config = configs[i];
    absl::StatusOr<CompileUnit> unit = ConfigCompileUnit(
        config.record, config.problem, config.config, config.arch, compiled.nvrtc_version);
    if (!unit.ok()) {
      compiled.ends[i].status = v1::COMPILE_ERROR;
      compiled.ends[i].log = std::string(unit.status().message());
      continue;
    }
    keys[i] = unit->key;
    if (seen.insert(unit->key).second) units.push_back(*std::move(unit));
  }
  CompilePhaseOptions options;
  options.parallelism = std::max(1, pool->size());
  options.timeout = options_.compile_timeout;
  const std::atomic<bool> cancel{false};
  CompileResults results = RunCompilePhase(units, *store_, *pool, options, cancel,
                                           [](const CompileUnit&, const CompileEnd&) {});
  for (size_t i = 0; i < configs.size(); ++i) {
    if (keys[i].empty()) continue;
    compiled.ends[i] = results.at(keys[i]);
  }
  return compiled;
}

absl::StatusOr<std::vector<worker::v1::DeviceInfo>> JobRunner::Devices() {
  ASSIGN_OR_RETURN(ProfilePool * gpus, Gpus());
  return gpus->devices();
}

JobRunner::GpuSnapshot JobRunner::Snapshot() {
  GpuSnapshot snapshot;
  if (options_.profile.worker_path.empty()) {
    snapshot.reason = options_.profile_off_reason;
    return snapshot;
  }
  // Starting the workers holds the lock for up to a minute: say so rather
  // than wait.
  if (!gpus_mu_.TryLock()) {
    snapshot.reason = "the GPU workers are starting";
    return snapshot;
  }
  if (gpus_ != nullptr) {
    snapshot.started = true;
    snapshot.devices = gpus_->Status();
  } else if (!gpus_error_.empty()) {
    snapshot.reason = absl::StrCat("the GPU workers could not start: ", gpus_error_);
  } else {
    snapshot.reason = "the GPU workers start with the first job that measures";
  }
  gpus_mu_.Unlock();
  return snapshot;
}

absl::StatusOr<ProfilePool*> JobRunner::Gpus() {
  absl::MutexLock lock(&gpus_mu_);
  if (gpus_ != nullptr) return gpus_.get();
  if (options_.profile.worker_path.empty()) {
    return absl::FailedPreconditionError(options_.profile_off_reason);
  }
  absl::StatusOr<std::unique_ptr<ProfilePool>> started = ProfilePool::Start(options_.profile);
  if (!started.ok()) {
    // The pool cannot name the daemon's setting; this says where it is.
    const std::string setting = options_.setting_hint ? options_.setting_hint("gpus") : "gpus";
    gpus_error_ = absl::StrCat(started.status().message(), " (GPUs are chosen by ", setting, ")");
    return absl::Status(started.status().code(), gpus_error_);
  }
  gpus_ = *std::move(started);
  for (const worker::v1::DeviceInfo& device : gpus_->devices()) {
    spdlog::info("GPU {}: {} (sm_{}, {} SMs, {} MB L2, driver {})", device.ordinal(), device.name(),
                 device.compute_capability(), device.sm_count(), device.l2_bytes() >> 20,
                 device.driver_version());
  }
  return gpus_.get();
}

absl::StatusOr<v1::Job> JobRunner::Cancel(absl::string_view id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = running_.find(std::string(id));
    if (it != running_.end()) {
      RunningJob* running = it->second.get();  // alive: mu_ is held
      running->cancel = true;
      return running->Snapshot();
    }
  }
  return store_->GetJob(std::string(id));
}

absl::StatusOr<int> JobRunner::ResumeUnfinished() {
  ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store_->ListJobs(0));
  int resumed = 0;
  for (v1::Job& job : jobs) {
    if (job.state() != v1::QUEUED && job.state() != v1::COMPILING && job.state() != v1::SCREENING &&
        job.state() != v1::VALIDATING) {
      continue;
    }
    absl::StatusOr<std::shared_ptr<JobWork>> work = Prepare(job.spec(), job.id());
    if (!work.ok()) {
      job.set_state(v1::FAILED);
      job.set_error(absl::StrCat("could not resume after a restart: ", work.status().message()));
      job.set_updated_at(Timestamp());
      RETURN_IF_ERROR(store_->UpdateJob(job));
      continue;
    }
    SetPlannedCounts((*work)->problems, (*work)->plan.variants,
                     static_cast<int64_t>((*work)->plan.units.size()), (*work)->cached_problems,
                     (*work)->plan.to_measure, &job);
    job.clear_results();
    job.set_state(v1::QUEUED);
    spdlog::info("job {}: resuming after a restart", job.id());
    Start(std::move(job), *std::move(work));
    ++resumed;
  }
  return resumed;
}

}  // namespace autotune::service
