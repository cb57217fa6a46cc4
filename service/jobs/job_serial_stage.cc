// The serial stage of a measuring job: after the search rounds, each
// problem's serial phase (serial_phase.h) on one GPU, the GPUs in parallel,
// and its report.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/profile_task.h"
#include "proto/problem.h"
#include "service/jobs/job_report.h"
#include "service/jobs/job_runner.h"
#include "service/jobs/running_job.h"
#include "service/jobs/serial_phase.h"

namespace autotune::service {

void JobRunner::SerialStage(Running* running, const ScreenJob& job, size_t gpus,
                            Screened screened) {
  Work& work = *running->work;
  int64_t to_validate = 0;
  for (const ScreenResult& screen : screened.screens) to_validate += screen.error.ok() ? 1 : 0;
  running->EnterStage(JobStage::kSerial, to_validate);
  Publish(running, nullptr,
          absl::StrCat("serial validation of ", to_validate, " problems, one GPU each"));
  SerialJob serial;
  serial.job_id = job.job_id;
  serial.arch = job.arch;
  serial.nvrtc_version = job.nvrtc_version;
  serial.store = store_;
  serial.gpus = job.gpus;
  serial.options = &work.options;
  serial.record = job.record;
  serial.progress = [this, running](const std::string& message) {
    Publish(running, nullptr, message);
  };
  serial.cancel = &running->cancel;
  std::vector<size_t> all(work.plan.problems.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  OnGpus(running->cancel, gpus, all, [&](size_t index) {
    SerialOne(running, serial, work.plan.problems[index], &screened.screens[index],
              screened.searches[index]);
  });
}

void JobRunner::SerialOne(Running* running, const SerialJob& serial, const PlannedProblem& problem,
                          ScreenResult* screen, const v1::SearchReport& search) {
  if (!screen->error.ok()) {
    FailProblem(running, screen->error, screen->store_failed);
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
    FailProblem(running, result.error, result.store_failed);
    return;
  }
  const v1::Entry& entry = *result.entry;
  Publish(running, nullptr,
          absl::StrCat(ProblemContext(problem.record->family.name(), problem.problem), ": best ",
                       kernels::ConfigLabel(problem.record->family, entry.config()), " at ",
                       entry.timing().median_us(), " us (", entry.candidates(), " candidates, ",
                       entry.rounds(), " serial rounds", entry.tie() ? ", a tie" : "",
                       entry.contended() ? ", CONTENDED" : "", ")"));
}

}  // namespace autotune::service
