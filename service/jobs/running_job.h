// What JobRunner keeps for each job it runs: the work fixed when the job
// starts, and the state that changes as it runs (counts, progress, reports).
// Private to the files that define JobRunner (job_runner.cc, job_phases.cc,
// job_progress.cc).
#ifndef AUTOTUNE_SERVICE_RUNNING_JOB_H_
#define AUTOTUNE_SERVICE_RUNNING_JOB_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/autotune.pb.h"
#include "service/jobs/compile_phase.h"
#include "service/jobs/job_options.h"
#include "service/jobs/job_plan.h"
#include "service/jobs/job_progress.h"
#include "service/jobs/job_runner.h"
#include "service/jobs/job_text.h"

namespace autotune::service {

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
  ResolvedJobOptions options;  // the job's options resolved onto the daemon's
  CompileResults compiled;
};

// A job this runner started: its state, guarded by `mu`, and the thread
// that runs it.
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
  // Variants that failed to compile, grouped by the compiler's first error
  // line, in the order first seen (CompileErrorGroups).
  CompileErrorGroups compile_errors ABSL_GUARDED_BY(mu);
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
  // The runner is going away (the daemon stops): `cancel` is set too, but
  // the job is left in its state to resume at the next start, not CANCELLED.
  std::atomic<bool> stopping{false};
  bool measures = true;  // not compile_only: a screen and a serial phase follow

  // The job's JobTiming from the phase running now; `rates` estimate the
  // phases still to come.
  void UpdateTiming(const PhaseRates& rates) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Ends the phase running now (its time is added up) and starts `next`.
  void EnterPhase(const std::string& next, int64_t total) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Set by Run() as its last step: the thread can be joined at once.
  std::atomic<bool> ended{false};
  std::string submitted_by;    // set before the job starts, then read only
  std::shared_ptr<Work> work;  // released when the job ends
  std::thread thread;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_RUNNING_JOB_H_
