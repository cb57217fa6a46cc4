// The serial phase of a job, one problem at a time, after its screen
// (screen_phase.h): the screened variants worth it (SelectCandidates in
// choice.h: a band around the best screened median, the current entry and
// the family's default config) are validated again and timed together on
// one GPU held for the whole phase, in interleaved rounds of CUDA-graph
// replays over rotating input sets until their medians are steady
// (worker.proto, SerialOptions). The tie rule (ChooseConfig) picks among
// the serial timings and the winner becomes the problem's best entry, phase
// SERIAL_VALIDATION, with its evidence: candidates, rounds, noise, margin,
// tie, the device's measured limits and any contention.
//
//   SerialResult result = RunSerialPhase(planned, screen, job);
//   if (!result.error.ok()) ...the problem has no new entry; the message says why...
//
// Quiet GPU: before the rounds the GPU's worker is asked what else runs on
// the GPU (NVML). While another compute process is there the phase waits,
// saying so through `progress` every few seconds, up to the job's
// `quiet_wait` (ResolvedJobOptions); then the problem fails (UNAVAILABLE,
// naming the processes) unless the job's `force`, in
// which case it proceeds and the entry and its measurements are marked
// contended with what was seen. A process that appears during the rounds
// makes them contended too: without `force` they are measured again once
// the GPU is quiet (at most kContendedRetries times). When NVML cannot see
// (no library), the phase proceeds and the entry says contention was not
// watched.
//
// Failures: a candidate that fails its new validation or faults in the
// rounds ends in that status (a SERIAL_VALIDATION measurement, not counted
// again in the job's counts) and the rounds are run again without it. A
// store error fails the problem and flags it (the job then fails).
//
// Thread-safe for distinct problems.
#ifndef AUTOTUNE_SERVICE_JOBS_SERIAL_PHASE_H_
#define AUTOTUNE_SERVICE_JOBS_SERIAL_PHASE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "cache/store.h"
#include "proto/autotune.pb.h"
#include "proto/worker.pb.h"
#include "service/jobs/choice.h"
#include "service/jobs/job_options.h"
#include "service/jobs/job_plan.h"
#include "service/jobs/screen_phase.h"
#include "service/pools/profile_pool.h"

namespace autotune::service {

// Rounds measured again at most, per problem, because another process came.
inline constexpr int kContendedRetries = 3;

struct SerialJob {
  std::string job_id;
  std::string arch;
  std::string nvrtc_version;
  cache::Store* store = nullptr;
  ProfilePool* gpus = nullptr;
  // The job's options, resolved: the candidate rule, the rounds' stopping
  // rule (zeros are the worker's defaults), force and the quiet wait.
  // Outlives the phase.
  const ResolvedJobOptions* options = nullptr;
  // Stores a measurement (`count` false: already counted in the screen).
  std::function<absl::Status(const v1::Measurement& measurement, bool count)> record;
  // Says what the phase waits for ("waiting for a quiet GPU 0: pid 4121
  // (2.0 GiB) ...").
  std::function<void(const std::string& message)> progress;
  const std::atomic<bool>* cancel = nullptr;
};

struct SerialResult {
  std::optional<v1::Entry> entry;  // stored
  absl::Status error;              // why there is none, with the problem's context
  bool store_failed = false;
  double waited_s = 0;  // for a quiet GPU or its lease
  // The family's default config, timed here (serially when it was a
  // candidate, else its screened median); 0 when it was not screened OK.
  double default_median_us = 0;
  // ProblemReport.kept_clean: the best was CONTENDED and a clean entry of
  // the same key was kept (`entry` is that one).
  std::string kept_clean;
  std::map<std::string, int64_t> status_counts;  // candidates that failed here
};

SerialResult RunSerialPhase(const PlannedProblem& problem, const ScreenResult& screen,
                            const SerialJob& job);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_SERIAL_PHASE_H_
