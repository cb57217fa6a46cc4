// The report of one problem a job measured (v1::ProblemReport): what the
// screen and the serial phase found, the entry chosen, and how it compares
// with the family's default config and with the entry the cache held
// before. Pure: built from the phases' results, nothing is read or stored.
#ifndef AUTOTUNE_SERVICE_JOBS_JOB_REPORT_H_
#define AUTOTUNE_SERVICE_JOBS_JOB_REPORT_H_

#include "proto/autotune.pb.h"
#include "service/jobs/job_plan.h"
#include "service/jobs/screen_phase.h"
#include "service/jobs/serial_phase.h"

namespace autotune::service {

// `serial` is null when the screen failed: the screen's error is the
// report's. The variants' counts by status are the screen's, except that a
// candidate the serial phase rejected counts under its serial status, not
// as OK. With an entry: the speedup over the default config, and against
// `problem.previous` the ratio of medians, what differs ("NVRTC 12.8 ->
// 13.0", "earlier run") and whether it is a regression (slower beyond
// either entry's noise and the tie band).
v1::ProblemReport MakeProblemReport(const PlannedProblem& problem, const ScreenResult& screen,
                                    const SerialResult* serial);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_JOB_REPORT_H_
