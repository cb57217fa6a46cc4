#include "service/job_runner.h"

#include <malloc.h>

#include <algorithm>
#include <deque>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "proto/problem.h"
#include "service/compile_phase.h"
#include "service/job_plan.h"
#include "service/job_text.h"
#include "service/screen_phase.h"
#include "service/serial_phase.h"
#include "spdlog/spdlog.h"

namespace autotune::service {
namespace {

// How often a running job is written to the store at most.
constexpr absl::Duration kPersistEvery = absl::Seconds(1);
// Messages kept for watchers that fall behind.
constexpr size_t kKeptMessages = 256;

// The screen's timing: enough replays for a usable median, a few
// milliseconds of GPU time per variant (the serial phase measures at length).
constexpr double kScreenBudgetS = 0.003;
constexpr int kScreenMinSamples = 5;
constexpr double kScreenWarmupS = 0.002;

bool Finished(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

}  // namespace

// What a job works on; fixed once it starts, but for `compiled`, which the
// compile phase fills before the screen phase reads it.
struct JobRunner::Work {
  JobPlan plan;  // the problems still to screen and the compiles they need
  int64_t problems = 0;
  int64_t cached_problems = 0;
  // Problems with an entry before the job starts (each report holds it):
  // reported with the job's results.
  std::vector<v1::ProblemReport> done_reports;
  bool profile = false;
  bool resumed = false;  // a job started again after a restart
  std::string nvrtc_version;
  kernels::ProfileSettings settings;
  absl::Duration compile_timeout;
  CompileResults compiled;
  // The serial phase's settings, from the job's options.
  CandidateRule candidates;
  worker::v1::SerialOptions rounds;
  bool force = false;
  absl::Duration quiet_wait;
};

struct JobRunner::Running {
  absl::Mutex mu;
  v1::Job job ABSL_GUARDED_BY(mu);
  v1::JobProgress latest ABSL_GUARDED_BY(mu);
  int64_t version ABSL_GUARDED_BY(mu) = 0;
  // The last messages published, with their versions: a watcher that woke
  // after several changes still sends each message once ("measuring again",
  // "waiting for a quiet GPU"), not only the latest.
  std::deque<std::pair<int64_t, std::string>> messages ABSL_GUARDED_BY(mu);
  absl::Time persisted_at ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  // Problems the job could not give a best entry, and the first reason.
  int64_t problems_failed ABSL_GUARDED_BY(mu) = 0;
  std::string first_problem_error ABSL_GUARDED_BY(mu);
  // The first store error: the job ends FAILED with it.
  std::string store_error ABSL_GUARDED_BY(mu);
  std::string first_compile_error ABSL_GUARDED_BY(mu);
  // One per problem measured, as each ends (the cached ones are in Work).
  std::vector<v1::ProblemReport> reports ABSL_GUARDED_BY(mu);
  // Progress of the phase running now (JobTiming).
  absl::Time started ABSL_GUARDED_BY(mu) = absl::Now();
  absl::Time phase_started ABSL_GUARDED_BY(mu) = absl::Now();
  std::string phase ABSL_GUARDED_BY(mu) = "compile";
  int64_t phase_done ABSL_GUARDED_BY(mu) = 0;
  int64_t phase_total ABSL_GUARDED_BY(mu) = 0;
  double compile_s ABSL_GUARDED_BY(mu) = 0;
  double screen_s ABSL_GUARDED_BY(mu) = 0;
  double serial_s ABSL_GUARDED_BY(mu) = 0;
  double waited_s ABSL_GUARDED_BY(mu) = 0;
  std::atomic<bool> cancel{false};

  // The job's JobTiming from the phase running now; `rates` estimate the
  // phases still to come.
  void UpdateTiming(const PhaseRates& rates) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  bool measures = true;  // not compile_only: a screen and a serial phase follow
  // Ends the phase running now (its time is added up) and starts `next`.
  void EnterPhase(const std::string& next, int64_t total) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Set by Run() as its last step: the thread can be joined at once.
  std::atomic<bool> ended{false};
  std::string submitted_by;    // set before the job starts, then read only
  std::shared_ptr<Work> work;  // released when the job ends
  std::thread thread;
};

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

absl::StatusOr<std::shared_ptr<JobRunner::Work>> JobRunner::Prepare(const v1::JobSpec& spec,
                                                                    const std::string& job_id) {
  RETURN_IF_ERROR(CheckJobSpec(spec));
  const v1::JobOptions& options = spec.options();
  const auto cannot_measure = [](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot measure on a GPU: ", why,
                     "; submit with compile_only (autotune warmup --compile-only) to compile "
                     "without measuring"));
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
  auto work = std::make_shared<Work>();
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
  ASSIGN_OR_RETURN(work->plan, PlanJob(spec, families, target));
  work->problems = static_cast<int64_t>(work->plan.problems.size());
  work->nvrtc_version = target.nvrtc_version;
  work->settings.launch_timeout_s =
      options.variant_timeout_s() > 0 ? options.variant_timeout_s() : options_.variant_timeout_s;
  work->compile_timeout = options.compile_timeout_s() > 0
                              ? absl::Seconds(options.compile_timeout_s())
                              : options_.compile_timeout;
  work->resumed = !job_id.empty();
  // The screen only ranks: a few milliseconds of GPU time per variant.
  work->settings.timing_budget_s = kScreenBudgetS;
  work->settings.min_samples = kScreenMinSamples;
  work->settings.warmup_s = kScreenWarmupS;
  if (options.serial_candidates() > 0) work->candidates.max_count = options.serial_candidates();
  if (options.candidate_band() > 0) work->candidates.band = options.candidate_band();
  if (options.serial_max_s() > 0) work->rounds.set_max_seconds(options.serial_max_s());
  if (options.serial_noise() > 0) work->rounds.set_target_noise(options.serial_noise());
  work->force = options.force();
  work->quiet_wait =
      options.quiet_wait_s() > 0 ? absl::Seconds(options.quiet_wait_s()) : options_.quiet_wait;
  if (!work->profile) return work;

  // Problems already tuned on this GPU model are not measured again: those
  // of earlier jobs unless retune, those of this (resumed) job always.
  std::set<size_t> to_screen;
  for (size_t i = 0; i < work->plan.problems.size(); ++i) {
    const PlannedProblem& problem = work->plan.problems[i];
    cache::EntryKey key{.family = problem.record->family.name(),
                        .family_hash = problem.record->content_hash,
                        .problem = problem.problem,
                        .device = gpu->name()};
    absl::StatusOr<std::optional<v1::Entry>> stored = store_->FindEntry(key);
    if (!stored.ok()) {
      return absl::Status(stored.status().code(),
                          absl::StrCat(ProblemContext(key.family, key.problem),
                                       ": cannot read its entry: ", stored.status().message()));
    }
    const bool ours = stored->has_value() && !job_id.empty() && (*stored)->job_id() == job_id;
    if (stored->has_value() && (!options.retune() || ours)) {
      if (!options.retune()) ++work->cached_problems;
      v1::ProblemReport report;
      report.set_family(key.family);
      *report.mutable_problem() = key.problem;
      *report.mutable_entry() = **stored;
      report.set_cached(!ours);
      work->done_reports.push_back(std::move(report));
      continue;
    }
    if (stored->has_value()) work->plan.problems[i].current_config = (*stored)->config();
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
    const v1::Entry* previous = stored->has_value() ? &**stored : nullptr;
    for (const v1::Entry& entry : *earlier) {
      if (previous == nullptr || entry.tuned_at() > previous->tuned_at()) previous = &entry;
    }
    if (previous != nullptr) {
      PlannedProblem& planned = work->plan.problems[i];
      planned.previous = *previous;
      // The config served until now goes on to the serial phase when it is
      // still in the space, and a tie keeps it.
      if (!planned.current_config) planned.current_config = previous->config();
      if (previous->family_hash() != key.family_hash) {
        absl::StatusOr<cache::FamilyRecord> older =
            store_->GetFamilyVersion(key.family, previous->family_hash());
        if (!older.ok() && !absl::IsNotFound(older.status())) {
          return absl::Status(older.status().code(),
                              absl::StrCat(ProblemContext(key.family, key.problem),
                                           ": cannot read the family version of its entry: ",
                                           older.status().message()));
        }
        if (older.ok() && SameButSpace(older->family, problem.record->family)) {
          planned.screens_from_hash = older->content_hash;
        }
      }
    }
    to_screen.insert(i);
  }
  KeepProblems(to_screen, &work->plan);
  return work;
}

namespace {

void SetPlannedCounts(int64_t problems, int64_t variants, int64_t compiles, int64_t cached,
                      v1::Job* job) {
  v1::JobCounts counts;
  counts.set_problems(problems);
  counts.set_variants(variants);
  counts.set_compiles(compiles);
  counts.set_cached_problems(cached);
  *job->mutable_counts() = counts;
}

}  // namespace

absl::StatusOr<v1::Job> JobRunner::Submit(const v1::JobSpec& spec,
                                          const std::string& submitted_by) {
  if (options_.max_unfinished_jobs_per_submitter > 0 && !submitted_by.empty()) {
    std::vector<std::shared_ptr<Running>> theirs;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [id, running] : running_) {
        if (!running->ended && running->submitted_by == submitted_by) theirs.push_back(running);
      }
    }
    // By state: a job whose end a watcher has seen has ended, even while
    // its thread is still finishing.
    int unfinished = 0;
    for (const std::shared_ptr<Running>& running : theirs) {
      absl::MutexLock lock(&running->mu);
      const v1::JobState state = running->job.state();
      if (state != v1::SUCCEEDED && state != v1::FAILED && state != v1::CANCELLED) ++unfinished;
    }
    if (unfinished >= options_.max_unfinished_jobs_per_submitter) {
      return absl::ResourceExhaustedError(
          absl::StrCat(submitted_by, " has ", unfinished,
                       " jobs that have not ended, the most one submitter "
                       "may have (--max-jobs-per-submitter); wait for one or cancel one"));
    }
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Work> work, Prepare(spec, ""));
  if (options_.max_variants_per_job > 0 && work->plan.variants > options_.max_variants_per_job) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the job has ", work->plan.variants, " variants, more than the ",
        options_.max_variants_per_job,
        " one job may have (--max-job-variants); split it with --shard or narrow the manifest"));
  }
  ASSIGN_OR_RETURN(v1::Job job, store_->CreateJob(spec, submitted_by));
  SetPlannedCounts(work->problems, work->plan.variants,
                   static_cast<int64_t>(work->plan.units.size()), work->cached_problems, &job);
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
  std::string id;
  {
    absl::MutexLock lock(&raw->mu);
    raw->submitted_by = job.submitted_by();
    raw->job = std::move(job);
    raw->latest.set_message("queued");
    *raw->latest.mutable_job() = raw->job;
    id = raw->job.id();
  }
  raw->measures = work->profile;
  raw->work = std::move(work);
  absl::MutexLock lock(&mu_);
  running_[id] = std::move(running);
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

PhaseRates PhaseRates::Of(const v1::Job& job) {
  const v1::JobTiming& timing = job.timing();
  const v1::JobCounts& counts = job.counts();
  PhaseRates rates;
  if (counts.compiles() > 0) rates.compile_s = timing.compile_s() / counts.compiles();
  if (counts.variants() > 0 && timing.screen_s() > 0) {
    rates.screen_s = timing.screen_s() / counts.variants();
  }
  const int64_t validated = counts.problems() - counts.cached_problems();
  if (validated > 0 && timing.serial_s() > 0) rates.serial_s = timing.serial_s() / validated;
  return rates;
}

PhaseRates PhaseRates::Updated(const PhaseRates& newer) const {
  PhaseRates rates = *this;
  if (newer.compile_s > 0) rates.compile_s = newer.compile_s;
  if (newer.screen_s > 0) rates.screen_s = newer.screen_s;
  if (newer.serial_s > 0) rates.serial_s = newer.serial_s;
  return rates;
}

PhaseRates JobRunner::Rates() {
  absl::MutexLock lock(&rates_mu_);
  if (rates_) return *rates_;
  PhaseRates rates;
  // The last jobs this database saw, oldest first, so the newest win.
  absl::StatusOr<std::vector<v1::Job>> jobs = store_->ListJobs(20);
  if (jobs.ok()) {
    for (auto it = jobs->rbegin(); it != jobs->rend(); ++it) {
      if (it->state() == v1::SUCCEEDED) rates = rates.Updated(PhaseRates::Of(*it));
    }
  } else {
    spdlog::warn("cannot read the last jobs for their phase rates: {}",
                 std::string(jobs.status().message()));
  }
  rates_ = rates;
  return rates;
}

void JobRunner::LearnRates(const v1::Job& finished) {
  const PhaseRates learned = PhaseRates::Of(finished);
  const PhaseRates known = Rates();
  absl::MutexLock lock(&rates_mu_);
  rates_ = known.Updated(learned);
}

void JobRunner::Running::UpdateTiming(const PhaseRates& rates) {
  const absl::Time now = absl::Now();
  v1::JobTiming& timing = *job.mutable_timing();
  const v1::JobCounts& counts = job.counts();
  if (phase == "compile") {
    phase_done = counts.compiled() + counts.compile_cache_hits() + counts.compile_errors();
    phase_total = counts.compiles();
  }
  const double in_phase = absl::ToDoubleSeconds(now - phase_started);
  timing.set_phase(phase);
  timing.set_done(phase_done);
  timing.set_total(phase_total);
  timing.set_elapsed_s(absl::ToDoubleSeconds(now - started));
  // The phase running now at its rate so far (or the learned one before
  // its first unit), then the phases after it at the learned rates.
  double eta = 0;
  bool partial = false;
  const auto add = [&](int64_t units, double rate) {
    if (units <= 0) return;
    if (rate > 0) {
      eta += rate * static_cast<double>(units);
    } else {
      partial = true;
    }
  };
  const int64_t left = phase_total - phase_done;
  if (phase_done > 0 && left > 0) {
    eta += in_phase / static_cast<double>(phase_done) * static_cast<double>(left);
  }
  const int64_t validated = counts.problems() - counts.cached_problems();
  if (phase == "compile") {
    if (phase_done == 0) add(left, rates.compile_s);
    if (measures) {
      add(counts.variants(), rates.screen_s);
      add(validated, rates.serial_s);
    }
  } else if (phase == "screen") {
    if (phase_done == 0) add(left, rates.screen_s);
    add(validated, rates.serial_s);
  } else if (phase == "serial") {
    if (phase_done == 0) add(left, rates.serial_s);
  }
  timing.set_eta_s(eta);
  timing.set_eta_partial(partial);
  timing.set_compile_s(compile_s + (phase == "compile" ? in_phase : 0));
  timing.set_screen_s(screen_s + (phase == "screen" ? in_phase : 0));
  timing.set_serial_s(serial_s + (phase == "serial" ? in_phase : 0));
  timing.set_waited_s(waited_s);
}

void JobRunner::Running::EnterPhase(const std::string& next, int64_t total) {
  const absl::Time now = absl::Now();
  const double in_phase = absl::ToDoubleSeconds(now - phase_started);
  if (phase == "compile") compile_s += in_phase;
  if (phase == "screen") screen_s += in_phase;
  if (phase == "serial") serial_s += in_phase;
  phase = next;
  phase_started = now;
  phase_done = 0;
  phase_total = total;
}

void JobRunner::Publish(Running* running, const v1::Measurement* last, absl::string_view message) {
  v1::Job snapshot;
  bool persist = false;
  const PhaseRates rates = Rates();
  {
    absl::MutexLock lock(&running->mu);
    running->job.set_updated_at(NowText());
    running->UpdateTiming(rates);
    running->latest.Clear();
    *running->latest.mutable_job() = running->job;
    if (last != nullptr) *running->latest.mutable_last() = *last;
    running->latest.set_message(std::string(message));
    *running->latest.mutable_timing() = running->job.timing();
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
    if (!message.empty()) {
      running->messages.emplace_back(running->version, std::string(message));
      if (running->messages.size() > kKeptMessages) running->messages.pop_front();
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
    for (const v1::ProblemReport& report : work.done_reports) {
      *running->job.add_results() = report.entry();
    }
  }
  Publish(running, nullptr,
          absl::StrCat("compiling ", work.plan.units.size(), " distinct variants"));
  const absl::Time started = absl::Now();
  Compile(running);
  if (work.profile && !running->cancel) Measure(running);
  if (!work.profile) {
    // A compile-only job still says which problems it covered (a shard's
    // share of the manifest, say).
    absl::MutexLock lock(&running->mu);
    for (const PlannedProblem& problem : work.plan.problems) {
      v1::ProblemReport report;
      report.set_family(problem.record->family.name());
      *report.mutable_problem() = problem.problem;
      running->reports.push_back(std::move(report));
    }
  }

  std::string message;
  {
    absl::MutexLock lock(&running->mu);
    running->EnterPhase("done", 0);
    // The reports in plan order: the cached problems first, as planned.
    running->job.clear_reports();
    for (const v1::ProblemReport& report : work.done_reports) *running->job.add_reports() = report;
    for (const v1::ProblemReport& report : running->reports) *running->job.add_reports() = report;
    const v1::JobCounts& counts = running->job.counts();
    if (running->cancel) {
      running->job.set_state(v1::CANCELLED);
      running->job.set_error("cancelled");
    } else {
      running->job.set_state(running->store_error.empty() ? v1::SUCCEEDED : v1::FAILED);
      std::vector<std::string> errors;
      if (!running->store_error.empty()) {
        errors.push_back(absl::StrCat("the store failed: ", running->store_error));
      }
      if (counts.compile_errors() > 0) {
        errors.push_back(
            absl::StrCat(counts.compile_errors(),
                         " variants failed to compile; first: ", running->first_compile_error));
      }
      if (running->problems_failed > 0) {
        errors.push_back(
            absl::StrCat(running->problems_failed,
                         " problems have no valid variant; first: ", running->first_problem_error));
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
                      running->job.results_size() - static_cast<int>(work.done_reports.size()),
                      ", already cached ", counts.cached_problems());
    }
    absl::StrAppend(&message, " in ", absl::FormatDuration(absl::Now() - started));
  }
  spdlog::info("job {}: {}", id, message);
  // Learned before the end is published: a job submitted by whoever saw
  // this one end estimates with its rates.
  v1::Job finished;
  {
    const PhaseRates rates = Rates();
    absl::MutexLock lock(&running->mu);
    running->UpdateTiming(rates);
    finished = running->job;
  }
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

void JobRunner::Compile(Running* running) {
  Work& work = *running->work;
  // Prepare() found one, and a pool, once there, stays.
  CompilePool* pool = *Pool();
  CompilePhaseOptions options;
  options.parallelism =
      options_.compile_parallelism > 0 ? options_.compile_parallelism : pool->size();
  options.timeout = work.compile_timeout;
  options.keep_cubins = work.profile;
  std::string id;
  {
    absl::MutexLock lock(&running->mu);
    id = running->job.id();
  }
  work.compiled = RunCompilePhase(
      work.plan.units, *store_, *pool, options, running->cancel,
      [&](const CompileUnit& unit, const CompileEnd& end) {
        const bool failed = end.status != v1::OK;
        const bool compile_failed = failed && end.store_error.ok();
        v1::Measurement last;
        if (compile_failed) {
          last.set_family(unit.family);
          last.set_family_hash(unit.family_hash);
          *last.mutable_problem() = unit.problem;
          *last.mutable_config() = unit.config;
          last.set_status(end.status);
          last.set_phase(v1::COMPILE);
          last.set_detail(absl::StrCat(unit.config.params().empty() ? "reference kernel " : "",
                                       unit.task.name_expression(), ": ", LogExcerpt(end.log)));
          last.set_job_id(id);
          last.set_measured_at(NowText());
        }
        {
          absl::MutexLock lock(&running->mu);
          v1::JobCounts* counts = running->job.mutable_counts();
          if (!end.store_error.ok()) {
            if (running->store_error.empty()) {
              running->store_error = std::string(end.store_error.message());
            }
          } else if (end.cache_hit) {
            counts->set_compile_cache_hits(counts->compile_cache_hits() + 1);
          } else if (!failed) {
            counts->set_compiled(counts->compiled() + 1);
          }
          if (compile_failed) {
            counts->set_compile_errors(counts->compile_errors() + 1);
            if (running->first_compile_error.empty()) running->first_compile_error = last.detail();
          }
          if (end.status == v1::COMPILE_TIMEOUT) {
            counts->set_compile_timeouts(counts->compile_timeouts() + 1);
          }
        }
        Publish(running, compile_failed ? &last : nullptr,
                end.store_error.ok() ? "" : end.store_error.message());
      });
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
    gpus_error_ = std::string(started.status().message());
    return started.status();
  }
  gpus_ = *std::move(started);
  for (const worker::v1::DeviceInfo& device : gpus_->devices()) {
    spdlog::info("GPU {}: {} (sm_{}, {} SMs, {} MB L2, driver {})", device.ordinal(), device.name(),
                 device.compute_capability(), device.sm_count(), device.l2_bytes() >> 20,
                 device.driver_version());
  }
  return gpus_.get();
}

absl::Status JobRunner::Record(Running* running, const v1::Measurement& measurement, bool count) {
  absl::Status stored = store_->AddMeasurement(measurement);
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
    if (measurement.carried()) {
      counts->set_carried(counts->carried() + 1);
    } else if (measurement.phase() != v1::COMPILE) {
      counts->set_measured(counts->measured() + 1);
    }
    if (running->phase == "screen") ++running->phase_done;
  }
  Publish(running, &measurement, "");
  return stored;
}

void JobRunner::FailProblem(Running* running, const absl::Status& why, bool store_error) {
  std::string job_id;
  {
    absl::MutexLock lock(&running->mu);
    job_id = running->job.id();
    if (running->problems_failed++ == 0) running->first_problem_error = std::string(why.message());
    if (store_error && running->store_error.empty()) {
      running->store_error = std::string(why.message());
    }
  }
  spdlog::warn("job {}: {}", job_id, std::string(why.message()));
}

namespace {

// "NVRTC 12.8 -> 13.0", "family version 1a2b3c4d -> 5e6f7a8b", "earlier run".
std::string WhatDiffers(const v1::Entry& before, const v1::Entry& now) {
  std::vector<std::string> parts;
  if (before.family_hash() != now.family_hash()) {
    parts.push_back(absl::StrCat("family version ", before.family_hash().substr(0, 8), " -> ",
                                 now.family_hash().substr(0, 8)));
  }
  if (before.nvrtc_version() != now.nvrtc_version()) {
    parts.push_back(absl::StrCat("NVRTC ", before.nvrtc_version(), " -> ", now.nvrtc_version()));
  }
  if (before.driver_version() != now.driver_version()) {
    parts.push_back(absl::StrCat("driver ", before.driver_version(), " -> ", now.driver_version()));
  }
  if (parts.empty()) parts.push_back("earlier run");
  return absl::StrJoin(parts, ", ");
}

}  // namespace

v1::ProblemReport JobRunner::Report(const PlannedProblem& problem, const ScreenResult& screen,
                                    const SerialResult* serial) {
  v1::ProblemReport report;
  const v1::KernelFamily& family = problem.record->family;
  report.set_family(family.name());
  *report.mutable_problem() = problem.problem;
  if (family.has_default_config()) *report.mutable_default_config() = family.default_config();
  std::map<std::string, int64_t> counts = screen.status_counts;
  report.set_screened(static_cast<int32_t>(screen.ok.size()));
  report.set_screens_carried(screen.carried);
  report.set_screens_carried_from(screen.carried_from);
  report.set_screen_contention(screen.contention);
  if (serial == nullptr) {
    report.set_error(std::string(screen.error.message()));
  } else {
    for (const auto& [status, n] : serial->status_counts) {
      // A candidate that failed the serial phase counts there, not as OK.
      counts[status] += n;
      counts["OK"] -= n;
    }
    report.set_default_median_us(serial->default_median_us);
    if (serial->entry) {
      const v1::Entry& entry = *serial->entry;
      *report.mutable_entry() = entry;
      const double median = entry.timing().median_us();
      if (serial->default_median_us > 0 && median > 0) {
        report.set_speedup(serial->default_median_us / median);
      }
      if (problem.previous) {
        *report.mutable_previous() = *problem.previous;
        report.set_previous_differs(WhatDiffers(*problem.previous, entry));
        const double before = problem.previous->timing().median_us();
        if (before > 0 && median > 0) {
          report.set_previous_ratio(before / median);
          // Slower than before beyond the noise of either and the tie band.
          const double noise =
              std::max({kTieBand, 2 * entry.noise(), 2 * problem.previous->noise()});
          report.set_regression(median > before * (1 + noise));
        }
      }
    } else {
      report.set_error(std::string(serial->error.message()));
    }
  }
  for (const auto& [status, n] : counts) {
    if (n > 0) (*report.mutable_status_counts())[status] = n;
  }
  return report;
}

void JobRunner::Measure(Running* running) {
  Work& work = *running->work;
  absl::StatusOr<ProfilePool*> gpus = Gpus();
  ScreenJob job;
  {
    absl::MutexLock lock(&running->mu);
    running->job.set_state(v1::SCREENING);
    job.job_id = running->job.id();
    running->EnterPhase("screen", work.plan.variants);
  }
  if (!gpus.ok()) {
    FailProblem(running, gpus.status(), /*store_error=*/false);
    return;
  }
  const size_t gpu_count = (*gpus)->devices().size();
  Publish(running, nullptr,
          absl::StrCat("validating and timing the variants of ", work.plan.problems.size(),
                       " problems on ", gpu_count, " GPU(s)"));
  job.arch = work.plan.arch;
  job.nvrtc_version = work.nvrtc_version;
  job.settings = work.settings;
  job.compiled = &work.compiled;
  job.store = store_;
  job.gpus = *gpus;
  job.reuse_stored = work.resumed;
  job.progress = [this, running](const std::string& message) {
    Publish(running, nullptr, message);
  };
  job.record = [this, running](const v1::Measurement& m, bool count) {
    return Record(running, m, count);
  };
  // One thread per GPU, each taking the next problem: first every screen
  // (GPUs in parallel), then the serial phase of each problem.
  auto on_gpus = [&](const std::function<void(size_t)>& each) {
    std::atomic<size_t> next{0};
    auto loop = [&] {
      while (!running->cancel) {
        const size_t index = next.fetch_add(1);
        if (index >= work.plan.problems.size()) return;
        each(index);
      }
    };
    std::vector<std::thread> threads;
    for (size_t i = 0; i < gpu_count; ++i) threads.emplace_back(loop);
    for (std::thread& thread : threads) thread.join();
  };
  std::vector<ScreenResult> screens(work.plan.problems.size());
  on_gpus([&](size_t index) {
    screens[index] = ScreenProblem(work.plan.problems[index], job);
    const std::string context = ProblemContext(work.plan.problems[index].record->family.name(),
                                               work.plan.problems[index].problem);
    if (screens[index].reused) {
      Publish(running, nullptr,
              absl::StrCat(context, ": screened before the restart; not measured again"));
    }
    if (screens[index].carried > 0) {
      Publish(running, nullptr,
              absl::StrCat(context, ": ", screens[index].carried,
                           " screens carried from family version ",
                           screens[index].carried_from.substr(0, 12),
                           " (the same binaries); only the new variants were screened"));
    }
  });
  if (running->cancel) return;

  int64_t to_validate = 0;
  for (const ScreenResult& screen : screens) to_validate += screen.error.ok() ? 1 : 0;
  {
    absl::MutexLock lock(&running->mu);
    running->job.set_state(v1::VALIDATING);
    running->EnterPhase("serial", to_validate);
  }
  Publish(running, nullptr,
          absl::StrCat("serial validation of ", to_validate, " problems, one GPU each"));
  SerialJob serial;
  serial.job_id = job.job_id;
  serial.arch = job.arch;
  serial.nvrtc_version = job.nvrtc_version;
  serial.store = store_;
  serial.gpus = *gpus;
  serial.candidates = work.candidates;
  serial.rounds = work.rounds;
  serial.force = work.force;
  serial.quiet_wait = work.quiet_wait;
  serial.record = job.record;
  serial.progress = [this, running](const std::string& message) {
    Publish(running, nullptr, message);
  };
  serial.cancel = &running->cancel;
  on_gpus([&](size_t index) {
    const PlannedProblem& problem = work.plan.problems[index];
    ScreenResult& screen = screens[index];
    if (!screen.error.ok()) {
      FailProblem(running, screen.error, screen.store_failed);
      absl::MutexLock lock(&running->mu);
      running->reports.push_back(Report(problem, screen, nullptr));
      return;
    }
    SerialResult result = RunSerialPhase(problem, screen, serial);
    const v1::ProblemReport report = Report(problem, screen, &result);
    screen = ScreenResult();  // its images are no longer needed
    {
      absl::MutexLock lock(&running->mu);
      running->reports.push_back(report);
      running->waited_s += result.waited_s;
      ++running->phase_done;
      if (result.entry) *running->job.add_results() = *result.entry;
    }
    if (!result.error.ok()) {
      FailProblem(running, result.error, result.store_failed);
      return;
    }
    Publish(running, nullptr,
            absl::StrCat(ProblemContext(problem.record->family.name(), problem.problem), ": best ",
                         kernels::ConfigLabel(problem.record->family, result.entry->config()),
                         " at ", result.entry->timing().median_us(), " us (",
                         result.entry->candidates(), " candidates, ", result.entry->rounds(),
                         " serial rounds", result.entry->tie() ? ", a tie" : "",
                         result.entry->contended() ? ", CONTENDED" : "", ")"));
  });
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
    std::vector<std::string> missed;  // messages of versions this watcher skipped
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
      if (seen >= 0) {
        for (const auto& [version, message] : running->messages) {
          if (version > seen && version < running->version) missed.push_back(message);
        }
      }
      seen = running->version;
      progress = running->latest;
      // From the snapshot sent, not the live job: the job may have ended
      // after this snapshot was taken, and the final one is still to come.
      finished = Finished(progress.job().state());
    }
    for (const std::string& message : missed) {
      v1::JobProgress earlier;
      *earlier.mutable_job() = progress.job();
      *earlier.mutable_timing() = progress.timing();
      earlier.set_message(message);
      if (!on_progress(earlier)) return absl::OkStatus();
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
    if (job.state() != v1::QUEUED && job.state() != v1::COMPILING && job.state() != v1::SCREENING &&
        job.state() != v1::VALIDATING) {
      continue;
    }
    absl::StatusOr<std::shared_ptr<Work>> work = Prepare(job.spec(), job.id());
    if (!work.ok()) {
      job.set_state(v1::FAILED);
      job.set_error(absl::StrCat("could not resume after a restart: ", work.status().message()));
      job.set_updated_at(NowText());
      RETURN_IF_ERROR(store_->UpdateJob(job));
      continue;
    }
    SetPlannedCounts((*work)->problems, (*work)->plan.variants,
                     static_cast<int64_t>((*work)->plan.units.size()), (*work)->cached_problems,
                     &job);
    job.clear_results();
    job.set_state(v1::QUEUED);
    spdlog::info("job {}: resuming after a restart", job.id());
    Start(std::move(job), *std::move(work));
    ++resumed;
  }
  return resumed;
}

}  // namespace autotune::service
