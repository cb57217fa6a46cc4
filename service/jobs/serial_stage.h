// The serial stage of a measuring job: after the search stage, each
// screened problem's serial phase (serial_phase.h) on one GPU, the GPUs in
// parallel; its entry stored, its report added to the job, the winner
// announced. A problem whose screen failed gets its report and fails with
// the screen's error.
//
//   SerialStage(context).Run(SearchStage(context).Run());
#ifndef AUTOTUNE_SERVICE_JOBS_SERIAL_STAGE_H_
#define AUTOTUNE_SERVICE_JOBS_SERIAL_STAGE_H_

#include "proto/autotune.pb.h"
#include "service/jobs/job_plan.h"
#include "service/jobs/search_stage.h"
#include "service/jobs/serial_phase.h"
#include "service/jobs/stage_context.h"

namespace autotune::service {

class SerialStage {
 public:
  // `context.gpus` is set.
  explicit SerialStage(const StageContext& context) : context_(context) {}

  // Every problem of the plan, in parallel over the GPUs, until done or the
  // job is cancelled.
  void Run(ScreenedProblems screened);

 private:
  void RunOne(const SerialJob& serial, const PlannedProblem& problem, ScreenResult* screen,
              const v1::SearchReport& search);

  const StageContext& context_;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_SERIAL_STAGE_H_
