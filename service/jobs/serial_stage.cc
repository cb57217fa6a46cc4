#include "service/jobs/serial_stage.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/profile_task.h"
#include "proto/problem.h"
#include "service/jobs/job_report.h"
#include "service/jobs/job_text.h"
#include "service/jobs/serial_phase.h"

namespace autotune::service {

void SerialStage::Run(ScreenedProblems screened) {
  RunningJob* running = context_.job;
  const JobWork& work = *context_.work;
  int64_t to_validate = 0;
  for (const ScreenResult& screen : screened.screens) to_validate += screen.error.ok() ? 1 : 0;
  running->EnterStage(JobStage::kSerial, to_validate);
  context_.Announce(absl::StrCat("serial validation of ", to_validate, " problems, one GPU each"));
  const SerialJob serial = context_.Serial();
  std::vector<size_t> all(work.plan.problems.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  OnGpus(running->cancel, context_.gpu_count(), all, [&](size_t index) {
    RunOne(serial, work.plan.problems[index], &screened.screens[index], screened.searches[index]);
  });
}

void SerialStage::RunOne(const SerialJob& serial, const PlannedProblem& problem,
                         ScreenResult* screen, const v1::SearchReport& search) {
  RunningJob* running = context_.job;
  if (!screen->error.ok()) {
    context_.FailProblem(screen->error, screen->store_failed);
    v1::ProblemReport report = MakeProblemReport(problem, *screen, nullptr);
    *report.mutable_search() = search;
    running->AddReport(std::move(report));
    return;
  }
  SerialResult result = RunSerialPhase(problem, *screen, serial);
  v1::ProblemReport report = MakeProblemReport(problem, *screen, &result);
  *report.mutable_search() = search;
  *screen = ScreenResult();  // its images are no longer needed
  running->EndProblem(report, result.entry ? &*result.entry : nullptr, result.waited_s);
  if (!result.error.ok()) {
    context_.FailProblem(result.error, result.store_failed);
    return;
  }
  const v1::Entry& entry = *result.entry;
  context_.Announce(absl::StrCat(
      ProblemContext(problem.record->family.name(), problem.problem), ": best ",
      kernels::ConfigLabel(problem.record->family, entry.config()), " at ",
      entry.timing().median_us(), " us (", entry.candidates(), " candidates, ", entry.rounds(),
      " serial rounds", entry.tie() ? ", a tie" : "", entry.contended() ? ", CONTENDED" : "", ")"));
}

}  // namespace autotune::service
