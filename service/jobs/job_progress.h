// How long a job's phases take and how long a running job still needs: the
// rates earlier jobs measured (PhaseRates) and the ETA they give
// (EstimateEta). JobRunner fills each job's v1::JobTiming with them as it
// publishes the job's progress; its side of that (Publish, Watch, the rates
// it learns) is in job_progress.cc, the job's own clock in running_job.h.
#ifndef AUTOTUNE_SERVICE_JOBS_JOB_PROGRESS_H_
#define AUTOTUNE_SERVICE_JOBS_JOB_PROGRESS_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "proto/autotune.pb.h"

namespace autotune::service {

// The stages of a job as its timing names them (JobTiming.phase): the
// compiles, the screen, the serial phase, and the end.
enum class JobStage { kCompile, kScreen, kSerial, kDone };
// "compile", "screen", "serial", "done".
const char* JobStageName(JobStage stage);

// Wall seconds per unit of each phase (per distinct compile, per variant
// screened, per problem validated serially) as a finished job measured
// them; 0 = that job did not run the phase. ETAs use them for the phases a
// job has not reached yet.
struct PhaseRates {
  double compile_s = 0;
  double screen_s = 0;
  double serial_s = 0;

  static PhaseRates Of(const v1::Job& job);
  // This one, with the phases `newer` measured replaced.
  PhaseRates Updated(const PhaseRates& newer) const;
};

struct Eta {
  double seconds = 0;
  // A phase still to run has units but no known rate: the job needs more
  // than `seconds`.
  bool partial = false;
};

// The time a job still needs: the phase running now at its own rate so far
// (at `rates` before its first unit), then each phase after it at `rates`.
// `stage` is the stage running now (kDone has nothing left);
// `done` of its `total` units ran in `in_phase_s`. The phases after it take
// their units from `counts` (variants to screen, problems to validate that
// were not cached); `measures` false (compile_only) = none follow compile.
Eta EstimateEta(JobStage stage, int64_t done, int64_t total, double in_phase_s,
                const v1::JobCounts& counts, bool measures, const PhaseRates& rates);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_JOB_PROGRESS_H_
