// What the stages of a job share: the job they work on, the store, the
// worker pools and how they announce progress. A job runs as stages, each an
// object with one Run:
//
//   CompileStage (compile_stage.h)  compiles units, counting each end
//   SearchStage (search_stage.h)    search rounds: propose, compile, screen
//   SerialStage (serial_stage.h)    each screened problem's serial phase,
//                                   its entry and its report
//
// JobRunner (job_runner.h) admits jobs, queues them and owns the pools; it
// makes one StageContext per job and runs the stages over it in order:
//
//   StageContext context = ...;            // job, work, store, pools
//   CompileStage(context).Run(units);      // a compile-only job
//   ScreenedProblems screened = SearchStage(context).Run();
//   SerialStage(context).Run(std::move(screened));
//
// Thread-safety: the context is read-only once made; its methods may be
// called from every stage thread (RunningJob and the store lock).
#ifndef AUTOTUNE_SERVICE_JOBS_STAGE_CONTEXT_H_
#define AUTOTUNE_SERVICE_JOBS_STAGE_CONTEXT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cache/store.h"
#include "proto/autotune.pb.h"
#include "service/jobs/compile_phase.h"
#include "service/jobs/running_job.h"
#include "service/jobs/screen_phase.h"
#include "service/jobs/serial_phase.h"
#include "service/pools/compile_pool.h"
#include "service/pools/profile_pool.h"

namespace autotune::service {

struct StageContext {
  RunningJob* job = nullptr;
  JobWork* work = nullptr;
  cache::Store* store = nullptr;
  CompilePool* compile_pool = nullptr;
  // The pool's size (or the daemon's compile_parallelism), the job's
  // compile timeout, cubins kept when the job measures.
  CompilePhaseOptions compile_options;
  // The GPU workers; null for a compile-only job.
  ProfilePool* gpus = nullptr;
  // How many batches ahead a search's compiles are guessed (JobRunnerOptions).
  int64_t compile_ahead = 0;
  // Stores and announces the job's new state: `last` the measurement that
  // changed it (or null), `message` a line for the watchers (or empty).
  std::function<void(const v1::Measurement* last, absl::string_view message)> publish;

  // A line for the watchers.
  void Announce(absl::string_view message) const { publish(nullptr, message); }
  // Stores a measurement and announces it; `count` adds it to the job's
  // counts (false for a variant measured a second time). The store's status.
  absl::Status Record(const v1::Measurement& measurement, bool count) const;
  // A problem ends without an entry for `why` (logged); a store error fails
  // the job at its end.
  void FailProblem(const absl::Status& why, bool store_error) const;
  // The job as the screen and the serial phase see it (gpus set).
  ScreenJob Screening() const;
  SerialJob Serial() const;
  size_t gpu_count() const { return gpus == nullptr ? 0 : gpus->devices().size(); }
};

// Runs `each` over `indices`, one thread per GPU, each taking the next,
// until all are done or `cancel` is set.
void OnGpus(const std::atomic<bool>& cancel, size_t gpus, const std::vector<size_t>& indices,
            const std::function<void(size_t)>& each);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_STAGE_CONTEXT_H_
