// What JobRunner keeps for each job it runs: the work fixed when the job
// starts, and the job's state as it runs (counts, the stage and its
// progress, the problems' reports, the messages for watchers), behind the
// methods the stages (stage_context.h) and the runner call. Internal to
// service/jobs: clients use JobRunner.
//
// RunningJob is thread-safe: every method takes the job's own lock; the
// stages call them from the threads of each GPU and of the compile queue at
// once. JobWork is written before the job's thread starts, but for
// `compiled`, which only the compile stage writes.
#ifndef AUTOTUNE_SERVICE_JOBS_RUNNING_JOB_H_
#define AUTOTUNE_SERVICE_JOBS_RUNNING_JOB_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/autotune.pb.h"
#include "service/jobs/compile_phase.h"
#include "service/jobs/job_options.h"
#include "service/jobs/job_plan.h"
#include "service/jobs/job_progress.h"
#include "service/jobs/job_text.h"

namespace autotune::service {

// SUCCEEDED, FAILED and CANCELLED: the states a job does not leave.
bool JobFinished(v1::JobState state);

// What a job works on; fixed once it starts, but for `compiled`, which the
// compile phase fills before the screen phase reads it.
struct JobWork {
  JobPlan plan;  // the problems still to screen and the compiles they need
  int64_t problems = 0;
  int64_t cached_problems = 0;
  // Problems with an entry before the job starts (each report holds it):
  // reported with the job's results.
  std::vector<v1::ProblemReport> done_reports;
  bool profile = false;
  bool resumed = false;  // a job started again after a restart
  std::string nvrtc_version;
  ResolvedJobOptions options;  // the job's options resolved onto the daemon's
  CompileResults compiled;
};

// A job this runner started: its state and the thread that runs it.
class RunningJob {
 public:
  // `job` as stored (its id and submitter fixed from now on); `measures`:
  // not compile_only, so a screen and a serial phase follow the compiles.
  RunningJob(v1::Job job, bool measures);

  const std::string id;
  const std::string submitted_by;
  const bool measures;

  // ---- What the stages report ----------------------------------------------

  // The job starts: COMPILING, with the results the cached problems had.
  void Begin(const std::vector<v1::ProblemReport>& cached);
  // Ends the stage running now (its time is added up) and starts `stage`,
  // with `total` units to do (compile: units to compile, which the compile
  // counts then track; screen: variants; serial: problems). The job's state
  // follows: COMPILING, SCREENING, VALIDATING.
  void EnterStage(JobStage stage, int64_t total);
  // The compiles the searches have asked for so far (a search job's count
  // grows each round from 0).
  void AddCompiles(int64_t compiles);
  void ClearCompiles();
  // One compile ended: `failure_detail` (the measurement's detail) when it
  // failed to compile; a store error fails the job at its end.
  void CountCompile(const CompileEnd& end, const std::string& failure_detail);
  // One variant measured (or carried), counted by status; a screen's
  // measurement is a unit of the screen stage.
  void CountMeasurement(const v1::Measurement& measurement);
  // A problem ended without a best entry; the first reason is the job's,
  // a store error fails it.
  void FailProblem(absl::string_view why, bool store_error);
  // A problem ended: its report, its entry when it got one, and how long it
  // waited for a quiet GPU; a unit of the serial stage.
  void EndProblem(v1::ProblemReport report, const v1::Entry* entry, double waited_s);
  // A compile-only job's problems, reported as covered.
  void AddReport(v1::ProblemReport report);

  // ---- What the runner reads and decides -----------------------------------

  v1::JobState state() const;
  v1::Job Snapshot() const;
  // The job as it stands, stamped now (to store where a stopped daemon left it).
  v1::Job Stamped();
  // The end: the reports in plan order (`cached` first), CANCELLED when
  // `cancel`, else FAILED naming the store error, the compile errors and the
  // problems without a valid variant, or SUCCEEDED; the timing updated with
  // `rates`. Returns the job as it ended.
  v1::Job Finish(const std::vector<v1::ProblemReport>& cached, const PhaseRates& rates);

  // ---- Progress for watchers -----------------------------------------------

  // A new JobProgress (`last`, `message`, the timing from `rates`) for the
  // watchers. `store` is called with the job, under the job's lock, when it
  // has ended (so no watcher sees the end before it is stored), or when the
  // last store of its progress is older than a second (then `*persist` is
  // set and the job is to be stored after the call, outside the lock).
  void Publish(const v1::Measurement* last, absl::string_view message, const PhaseRates& rates,
               const std::function<void(const v1::Job&)>& store_end, v1::Job* persist);
  // What a watcher that saw `seen` (-1: nothing yet) has not: waits up to
  // `wait` for a newer JobProgress.
  struct Update {
    bool changed = false;
    int64_t version = -1;
    v1::JobProgress progress;
    std::vector<std::string> missed;  // messages of the versions skipped, in order
  };
  Update Await(int64_t seen, absl::Duration wait);

  std::atomic<bool> cancel{false};
  // The runner is going away (the daemon stops): `cancel` is set too, but
  // the job is left in its state to resume at the next start, not CANCELLED.
  std::atomic<bool> stopping{false};
  // Set by Run() as its last step: the thread can be joined at once.
  std::atomic<bool> ended{false};
  std::shared_ptr<JobWork> work;  // released when the job ends
  std::thread thread;

 private:
  // The job's JobTiming from the stage running now; `rates` estimate the
  // stages still to come.
  void UpdateTiming(const PhaseRates& rates) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnterStageLocked(JobStage stage, int64_t total) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  v1::Job job_ ABSL_GUARDED_BY(mu_);
  v1::JobProgress latest_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  // The last messages published, with their versions: a watcher that woke
  // after several changes still sends each message once ("measuring again",
  // "waiting for a quiet GPU"), not only the latest.
  std::deque<std::pair<int64_t, std::string>> messages_ ABSL_GUARDED_BY(mu_);
  absl::Time persisted_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Problems the job could not give a best entry, and the first reason.
  int64_t problems_failed_ ABSL_GUARDED_BY(mu_) = 0;
  std::string first_problem_error_ ABSL_GUARDED_BY(mu_);
  // The first store error: the job ends FAILED with it.
  std::string store_error_ ABSL_GUARDED_BY(mu_);
  // Variants that failed to compile, grouped by the compiler's first error
  // line, in the order first seen (CompileErrorGroups).
  CompileErrorGroups compile_errors_ ABSL_GUARDED_BY(mu_);
  // One per problem measured, as each ends (the cached ones are in Work).
  std::vector<v1::ProblemReport> reports_ ABSL_GUARDED_BY(mu_);
  // The stage running now and its progress (JobTiming), and the time each
  // stage took so far.
  absl::Time started_ ABSL_GUARDED_BY(mu_) = absl::Now();
  absl::Time stage_started_ ABSL_GUARDED_BY(mu_) = absl::Now();
  JobStage stage_ ABSL_GUARDED_BY(mu_) = JobStage::kCompile;
  int64_t stage_done_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t stage_total_ ABSL_GUARDED_BY(mu_) = 0;
  double compile_s_ ABSL_GUARDED_BY(mu_) = 0;
  double screen_s_ ABSL_GUARDED_BY(mu_) = 0;
  double serial_s_ ABSL_GUARDED_BY(mu_) = 0;
  double waited_s_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_RUNNING_JOB_H_
