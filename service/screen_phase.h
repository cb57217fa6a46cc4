// The screen phase of a job, one problem at a time: its compiled variants
// go to a GPU worker (ProfilePool) as one ProfileTask, are validated against
// the family's reference on three seeds, then timed; the OK variants are
// chosen among by the tie rule (service/choice.h: the fastest median, unless
// it is a declared tie, which keeps the current entry's config or the first
// in parameter order), and the winner becomes the problem's best entry,
// marked phase SCREEN (screened only).
//
//   ScreenResult result = ScreenProblem(planned, job);
//   if (!result.error.ok()) ...the problem has no entry; the message says why...
//
// Every variant ends with one stored Measurement in its status: phase
// COMPILE for those that did not compile, SCREEN for the rest. A screened
// winner faster than half the runner-up is measured again alone before it
// is believed. A store error (reading a cubin, storing a measurement or the
// entry) fails the problem with that error; no entry is chosen from a
// problem whose measurements were not all kept.
#ifndef AUTOTUNE_SERVICE_SCREEN_PHASE_H_
#define AUTOTUNE_SERVICE_SCREEN_PHASE_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "cache/store.h"
#include "kernels/profile_task.h"
#include "proto/autotune.pb.h"
#include "service/compile_phase.h"
#include "service/job_plan.h"
#include "service/profile_pool.h"

namespace autotune::service {

// What screening a problem needs of the job it belongs to.
struct ScreenJob {
  std::string job_id;
  std::string arch;
  std::string nvrtc_version;
  kernels::ProfileSettings settings;
  const CompileResults* compiled = nullptr;
  cache::Store* store = nullptr;
  ProfilePool* gpus = nullptr;
  // Stores a measurement, adds it to the job's counts unless `count` is
  // false (a variant measured a second time) and announces it. Returns the
  // store's status.
  std::function<absl::Status(const v1::Measurement& measurement, bool count)> record;
};

struct ScreenResult {
  std::optional<v1::Entry> entry;  // stored
  // Why there is no entry: the problem's context and the reason, with the
  // store's code when the store failed.
  absl::Status error;
  bool store_failed = false;  // the store failed (the job then fails too)
};

// Thread-safe for distinct problems (one thread per GPU).
ScreenResult ScreenProblem(const PlannedProblem& problem, const ScreenJob& job);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_SCREEN_PHASE_H_
