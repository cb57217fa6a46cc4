// The compile stage of a job: compiles units (compile_phase.h) at once, or
// through a search's CompileQueue, adds each end to the job's compiled
// results and counts it in the job; a variant that fails to compile is
// stored nowhere but announced as a COMPILE measurement with the compiler's
// log excerpt, and a store error is announced and fails the job at its end.
//
//   CompileStage(context).Run(work.plan.units);   // compile-only job
#ifndef AUTOTUNE_SERVICE_JOBS_COMPILE_STAGE_H_
#define AUTOTUNE_SERVICE_JOBS_COMPILE_STAGE_H_

#include <vector>

#include "service/jobs/compile_queue.h"
#include "service/jobs/job_plan.h"
#include "service/jobs/stage_context.h"

namespace autotune::service {

class CompileStage {
 public:
  explicit CompileStage(const StageContext& context) : context_(context) {}

  // Compiles `units` (those not compiled yet), adding to the job's
  // `compiled`; through `queue` when given (a searched job's rounds), else
  // at once on the compile pool. Returns early, leaving units out, when the
  // job is cancelled.
  void Run(const std::vector<CompileUnit>& units, CompileQueue* queue = nullptr);

 private:
  const StageContext& context_;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_COMPILE_STAGE_H_
