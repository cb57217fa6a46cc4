#include "service/jobs/running_job.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/timestamp.h"

namespace autotune::service {
namespace {

// How often a running job is written to the store at most.
constexpr absl::Duration kPersistEvery = absl::Seconds(1);
// Messages kept for watchers that fall behind.
constexpr size_t kKeptMessages = 256;

v1::JobState StateOf(JobStage stage) {
  switch (stage) {
    case JobStage::kCompile:
      return v1::COMPILING;
    case JobStage::kScreen:
      return v1::SCREENING;
    case JobStage::kSerial:
      return v1::VALIDATING;
    case JobStage::kDone:
      break;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

}  // namespace

bool JobFinished(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

RunningJob::RunningJob(v1::Job job, bool measures)
    : id(job.id()), submitted_by(job.submitted_by()), measures(measures) {
  absl::MutexLock lock(&mu_);
  job_ = std::move(job);
  latest_.set_message("queued");
  *latest_.mutable_job() = job_;
}

void RunningJob::Begin(const std::vector<v1::ProblemReport>& cached) {
  absl::MutexLock lock(&mu_);
  job_.set_state(v1::COMPILING);
  for (const v1::ProblemReport& report : cached) *job_.add_results() = report.entry();
}

void RunningJob::EnterStage(JobStage stage, int64_t total) {
  absl::MutexLock lock(&mu_);
  EnterStageLocked(stage, total);
}

void RunningJob::EnterStageLocked(JobStage stage, int64_t total) {
  const absl::Time now = absl::Now();
  const double in_stage = absl::ToDoubleSeconds(now - stage_started_);
  switch (stage_) {
    case JobStage::kCompile:
      compile_s_ += in_stage;
      break;
    case JobStage::kScreen:
      screen_s_ += in_stage;
      break;
    case JobStage::kSerial:
      serial_s_ += in_stage;
      break;
    case JobStage::kDone:
      break;
  }
  stage_ = stage;
  stage_started_ = now;
  stage_done_ = 0;
  stage_total_ = total;
  if (stage != JobStage::kDone) job_.set_state(StateOf(stage));
}

void RunningJob::AddCompiles(int64_t compiles) {
  absl::MutexLock lock(&mu_);
  v1::JobCounts* counts = job_.mutable_counts();
  counts->set_compiles(counts->compiles() + compiles);
}

void RunningJob::ClearCompiles() {
  absl::MutexLock lock(&mu_);
  job_.mutable_counts()->set_compiles(0);
}

void RunningJob::CountCompile(const CompileEnd& end, const std::string& failure_detail) {
  const bool failed = end.status != v1::OK;
  const bool compile_failed = failed && end.store_error.ok();
  absl::MutexLock lock(&mu_);
  v1::JobCounts* counts = job_.mutable_counts();
  if (!end.store_error.ok()) {
    if (store_error_.empty()) store_error_ = std::string(end.store_error.message());
  } else if (end.cache_hit) {
    counts->set_compile_cache_hits(counts->compile_cache_hits() + 1);
  } else if (!failed) {
    counts->set_compiled(counts->compiled() + 1);
  }
  if (compile_failed) {
    counts->set_compile_errors(counts->compile_errors() + 1);
    compile_errors_.Add(FirstErrorLine(end.log), failure_detail);
  }
  if (end.status == v1::COMPILE_TIMEOUT) {
    counts->set_compile_timeouts(counts->compile_timeouts() + 1);
  }
}

void RunningJob::CountMeasurement(const v1::Measurement& measurement) {
  absl::MutexLock lock(&mu_);
  v1::JobCounts* counts = job_.mutable_counts();
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
  if (stage_ == JobStage::kScreen) ++stage_done_;
}

void RunningJob::FailProblem(absl::string_view why, bool store_error) {
  absl::MutexLock lock(&mu_);
  if (problems_failed_++ == 0) first_problem_error_ = std::string(why);
  if (store_error && store_error_.empty()) store_error_ = std::string(why);
}

void RunningJob::EndProblem(v1::ProblemReport report, const v1::Entry* entry, double waited_s) {
  absl::MutexLock lock(&mu_);
  reports_.push_back(std::move(report));
  waited_s_ += waited_s;
  ++stage_done_;
  if (entry != nullptr) *job_.add_results() = *entry;
}

void RunningJob::AddReport(v1::ProblemReport report) {
  absl::MutexLock lock(&mu_);
  reports_.push_back(std::move(report));
}

v1::JobState RunningJob::state() const {
  absl::MutexLock lock(&mu_);
  return job_.state();
}

v1::Job RunningJob::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return job_;
}

v1::Job RunningJob::Stamped() {
  absl::MutexLock lock(&mu_);
  job_.set_updated_at(Timestamp());
  return job_;
}

v1::Job RunningJob::Finish(const std::vector<v1::ProblemReport>& cached, const PhaseRates& rates) {
  absl::MutexLock lock(&mu_);
  // The end's progress counts the job's problems, all of them done.
  EnterStageLocked(JobStage::kDone, job_.counts().problems());
  stage_done_ = stage_total_;
  // The reports in plan order: the cached problems first, as planned.
  job_.clear_reports();
  for (const v1::ProblemReport& report : cached) *job_.add_reports() = report;
  for (const v1::ProblemReport& report : reports_) *job_.add_reports() = report;
  if (cancel) {
    job_.set_state(v1::CANCELLED);
    job_.set_error("cancelled");
  } else {
    // Whatever did not go as asked fails the job, so every view of it (the
    // CLI's exit status, `autotune jobs`, the API, the admin page) says so.
    const v1::JobCounts& counts = job_.counts();
    std::vector<std::string> errors;
    if (!store_error_.empty()) errors.push_back(absl::StrCat("the store failed: ", store_error_));
    if (counts.compile_errors() > 0) {
      errors.push_back(compile_errors_.Describe(counts.compile_errors()));
    }
    if (problems_failed_ > 0) {
      errors.push_back(absl::StrCat(
          problems_failed_, " problems have no valid variant; first: ", first_problem_error_));
    }
    job_.set_state(errors.empty() ? v1::SUCCEEDED : v1::FAILED);
    job_.set_error(absl::StrJoin(errors, "\n"));
  }
  UpdateTiming(rates);
  return job_;
}

void RunningJob::UpdateTiming(const PhaseRates& rates) {
  const absl::Time now = absl::Now();
  v1::JobTiming& timing = *job_.mutable_timing();
  const v1::JobCounts& counts = job_.counts();
  if (stage_ == JobStage::kCompile) {
    stage_done_ = counts.compiled() + counts.compile_cache_hits() + counts.compile_errors();
    stage_total_ = counts.compiles();
  }
  const double in_stage = absl::ToDoubleSeconds(now - stage_started_);
  timing.set_phase(JobStageName(stage_));
  timing.set_done(stage_done_);
  timing.set_total(stage_total_);
  timing.set_elapsed_s(absl::ToDoubleSeconds(now - started_));
  const Eta eta = EstimateEta(stage_, stage_done_, stage_total_, in_stage, counts, measures, rates);
  timing.set_eta_s(eta.seconds);
  timing.set_eta_partial(eta.partial);
  timing.set_compile_s(compile_s_ + (stage_ == JobStage::kCompile ? in_stage : 0));
  timing.set_screen_s(screen_s_ + (stage_ == JobStage::kScreen ? in_stage : 0));
  timing.set_serial_s(serial_s_ + (stage_ == JobStage::kSerial ? in_stage : 0));
  timing.set_waited_s(waited_s_);
}

void RunningJob::Publish(const v1::Measurement* last, absl::string_view message,
                         const PhaseRates& rates,
                         const std::function<void(const v1::Job&)>& store_end, v1::Job* persist) {
  absl::MutexLock lock(&mu_);
  job_.set_updated_at(Timestamp());
  UpdateTiming(rates);
  latest_.Clear();
  *latest_.mutable_job() = job_;
  if (last != nullptr) *latest_.mutable_last() = *last;
  latest_.set_message(std::string(message));
  *latest_.mutable_timing() = job_.timing();
  const absl::Time now = absl::Now();
  if (JobFinished(job_.state())) {
    // Stored before any watcher sees the end, so whoever asks for the job
    // once its stream has ended reads the end too. (Every other Publish of
    // the job has returned by now: its threads are joined.)
    store_end(job_);
    persisted_at_ = now;
  } else if (now - persisted_at_ >= kPersistEvery) {
    persisted_at_ = now;
    *persist = job_;
  }
  ++version_;
  if (!message.empty()) {
    messages_.emplace_back(version_, std::string(message));
    if (messages_.size() > kKeptMessages) messages_.pop_front();
  }
}

RunningJob::Update RunningJob::Await(int64_t seen, absl::Duration wait) {
  Update update;
  absl::MutexLock lock(&mu_);
  auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return version_ != seen; };
  mu_.AwaitWithTimeout(absl::Condition(&changed), wait);
  if (version_ == seen) return update;
  update.changed = true;
  if (seen >= 0) {
    for (const auto& [version, message] : messages_) {
      if (version > seen && version < version_) update.missed.push_back(message);
    }
  }
  update.version = version_;
  update.progress = latest_;
  return update;
}

}  // namespace autotune::service
