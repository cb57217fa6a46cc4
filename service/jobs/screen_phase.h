// The screen phase of a job, one problem at a time: its compiled variants
// go to a GPU worker (ProfilePool) as one ProfileTask, are validated against
// the family's reference on three seeds, then timed briefly (a few
// milliseconds of GPU time each: enough to rank, not to choose). The OK
// variants, fastest first, go on to the serial phase (serial_phase.h),
// which chooses.
//
//   ScreenResult screen = ScreenProblem(planned, job);
//   if (!screen.error.ok()) ...the problem has no entry; the message says why...
//
// Every variant ends with one stored Measurement in its status: phase
// COMPILE for those that did not compile, SCREEN for the rest. A store error
// (reading a cubin, storing a measurement) fails the problem with that
// error; nothing is chosen from a problem whose measurements were not all
// kept.
//
// Only what has no screen yet is measured: a resumed job
// (ScreenJob.reuse_stored) reuses the SCREEN measurements it stored before
// the daemon stopped, and a problem whose family gained parameter values
// (PlannedProblem.screens_from_hash) takes the screens the older version
// made of the same binaries on this GPU model and driver (stored again,
// `carried`; faults and timeouts are measured again), so only the new
// variants are screened. The serial phase validates its candidates again
// either way.
#ifndef AUTOTUNE_SERVICE_JOBS_SCREEN_PHASE_H_
#define AUTOTUNE_SERVICE_JOBS_SCREEN_PHASE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cache/store.h"
#include "kernels/profile_task.h"
#include "proto/autotune.pb.h"
#include "service/jobs/compile_phase.h"
#include "service/jobs/job_options.h"
#include "service/jobs/job_plan.h"
#include "service/pools/profile_pool.h"

namespace autotune::service {

// What screening a problem needs of the job it belongs to.
struct ScreenJob {
  std::string job_id;
  std::string arch;
  std::string nvrtc_version;
  // The job's options, resolved (the screen reads `screen`); outlives the
  // phase.
  const ResolvedJobOptions* options = nullptr;
  const CompileResults* compiled = nullptr;
  cache::Store* store = nullptr;
  ProfilePool* gpus = nullptr;
  // Stores a measurement, adds it to the job's counts unless `count` is
  // false (a variant measured a second time) and announces it. Returns the
  // store's status.
  std::function<absl::Status(const v1::Measurement& measurement, bool count)> record;
  // Look for this job's finished screen of the problem in the store first.
  bool reuse_stored = false;
  // Says what the screen waits for (the GPU's lease, held by another).
  std::function<void(const std::string& message)> progress;
};

// A variant that validated and was timed.
struct ScreenedVariant {
  v1::Measurement measurement;  // as stored: phase SCREEN, status OK
  const kernels::Variant* variant = nullptr;
};

struct ScreenResult {
  std::vector<ScreenedVariant> ok;  // fastest first
  // The screen's task (buffers, reference, every compiled variant's image,
  // id = the variant's index); the serial phase times candidates from it.
  worker::v1::ProfileTask task;
  worker::v1::DeviceInfo device;                 // where it ran
  std::map<std::string, int64_t> status_counts;  // VariantStatus name -> variants
  bool reused = false;  // all from the store (a resumed job), nothing measured now
  // Screens carried from the older family version, and its hash.
  int carried = 0;
  std::string carried_from;
  // Other compute processes on the GPU when the screen started ("pid 4121
  // (2.0 GiB); utilization 97%"), empty when none or NVML cannot see.
  std::string contention;
  // Why there is nothing to choose from: the problem's context and the
  // reason, with the store's code when the store failed.
  absl::Status error;
  bool store_failed = false;  // the store failed (the job then fails too)
  // The error says only that none of the variants screened compiled or
  // validated: a search may go on with others.
  bool nothing_valid = false;
  // How the variants were searched (DescribeSearch), for the entry; set by
  // the job runner.
  std::string search;
  // Where the screen's wall time went (ProblemReport.screen_time).
  v1::ScreenTime time;
};

// Screens the variants of `problem` whose indices (into space.variants) are
// in `only`, or all of them when `only` is null. Thread-safe for distinct
// problems (one thread per GPU).
ScreenResult ScreenProblem(const PlannedProblem& problem, const ScreenJob& job,
                           const std::vector<int64_t>* only = nullptr);

// Adds the screen of one more batch of a problem's variants (a search's
// round) to `all`, the screens of the batches before it: OK variants,
// images, counts, time. An error that is not nothing_valid ends the problem: it
// becomes all's error. Once the last batch is added, all.ok empty and no
// error means nothing validated: FinishScreens says so.
void AddScreens(ScreenResult batch, ScreenResult* all);
// Adds `more` to `time`, field by field.
void AddScreenTime(const v1::ScreenTime& more, v1::ScreenTime* time);
void FinishScreens(const std::string& context, ScreenResult* all);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_SCREEN_PHASE_H_
