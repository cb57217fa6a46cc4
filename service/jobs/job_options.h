// What a warmup job runs with: the daemon's options for jobs
// (JobRunnerOptions) and, resolved onto them once, the options the job was
// submitted with (v1::JobOptions). The result, ResolvedJobOptions, is what
// the phases read, whole: nothing below it falls back to a default again.
//
//   ResolvedJobOptions resolved = ResolveJobOptions(spec.options(), runner_options);
//
// Every default is a named constant of service/defaults.h (or, for those
// the worker resolves, kernels/profile_task.h). compile_only, retune and the
// shard are not settings: they shape the plan and are read where the plan
// is made (job_plan.h, JobRunner::Prepare).
#ifndef AUTOTUNE_SERVICE_JOBS_JOB_OPTIONS_H_
#define AUTOTUNE_SERVICE_JOBS_JOB_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kernels/profile_task.h"
#include "proto/autotune.pb.h"
#include "proto/worker.pb.h"
#include "service/defaults.h"
#include "service/jobs/choice.h"
#include "service/jobs/search.h"
#include "service/pools/compile_pool.h"
#include "service/pools/profile_pool.h"

namespace autotune::service {

// How an error names one of the daemon's settings. The core names it in its
// own terms, by the setting's name and value ("max_job_variants (20000)");
// a daemon that reads it from a flag may add how an operator changes it:
// given "max_job_variants", it returns "autotuned --max-job-variants".
// Empty, or returning "": nothing is added.
using SettingHint = std::function<std::string(absl::string_view setting)>;

// "max_job_variants (20000)", or with `hint`'s word
// "max_job_variants (20000; autotuned --max-job-variants)".
std::string NameSetting(absl::string_view setting, absl::string_view value,
                        const SettingHint& hint);

struct JobRunnerOptions {
  int compile_parallelism = 0;  // 0 = the pool's size
  // While a searched job's round is measured, compile up to this many times
  // its batches of what the searches expect next (Search::Ahead); 0 = off.
  int compile_ahead = kDefaultCompileAhead;
  // When the job gives none.
  absl::Duration compile_timeout = absl::Seconds(kDefaultCompileTimeoutS);
  std::string default_arch = kDefaultArch;  // when there is no GPU
  // GPU workers: worker_path empty = profiling is off (`profile_off_reason`
  // says why).
  ProfilePoolOptions profile;
  std::string profile_off_reason = "profiling is turned off";
  // When the runner was given no pool (NVRTC did not load): how to start
  // one, tried again when a job needs compiling, at most every
  // `pool_retry`, so compiling comes back once NVRTC does. Empty = never.
  std::function<absl::StatusOr<std::unique_ptr<CompilePool>>()> start_pool;
  absl::Duration pool_retry = absl::Seconds(5);
  // Per launch, when the job gives none.
  double variant_timeout_s = kernels::kDefaultLaunchTimeoutS;
  // How long a serial phase waits for a quiet GPU, when the job gives none.
  absl::Duration quiet_wait = absl::Seconds(kDefaultQuietWaitS);
  // Limits on what one job, and one submitter, may ask for; 0 = none.
  // Errors name them as the daemon's max_job_variants and
  // max_jobs_per_submitter, with `setting_hint`'s word.
  int64_t max_job_variants = kDefaultMaxJobVariants;
  int max_unfinished_jobs_per_submitter = kDefaultMaxJobsPerSubmitter;
  SettingHint setting_hint = nullptr;
};

// One job's options, resolved: every value the phases run by.
struct ResolvedJobOptions {
  // The screen's: the launch timeout as resolved, and a fixed short timing
  // (the screen only ranks; the serial phase measures at length).
  kernels::ProfileSettings screen;
  absl::Duration compile_timeout = absl::Seconds(kDefaultCompileTimeoutS);
  // The serial phase's.
  CandidateRule candidates;
  worker::v1::SerialOptions rounds;  // zeros are the worker's defaults
  bool force = false;
  absl::Duration quiet_wait = absl::Seconds(kDefaultQuietWaitS);
};

// The checks of every number a job's options carry, each against a bound
// of service/defaults.h: INVALID_ARGUMENT naming the field, its value and
// the range, and what 0 stands for where it stands for a default:
//   "options.variant_timeout_s is 3600, not in 0..60 (0 = the daemon's
//   variant timeout)", "options.shard_index 3 is not in 0..shard_count-1
//   (shard_count 2)". NaN and infinities are outside every range. Checks
//   options.search as CheckSearchOptions; not the compile_only rules, which
//   need the manifest too (CheckJobSpec, job_plan.h).
absl::Status CheckJobOptions(const v1::JobOptions& options);

// The same for one SearchOptions (the job's or a manifest item's), `field`
// naming it: "options.search.max_seconds is 1e+09, not in 0..86400"
// (SearchBudget::Check against kernels::kMaxConfigsPerFamily variants and
// kMaxSearchSeconds).
absl::Status CheckSearchOptions(const v1::SearchOptions& search, absl::string_view field);

// The budget the wire's SearchOptions states (max_variants, max_fraction,
// max_seconds), unchecked.
SearchBudget SearchBudgetOf(const v1::SearchOptions& search);

// `job` resolved onto `defaults`: a value the job gives wins, one it leaves
// at zero (the proto's "not given") falls back. The launch timeout, compile
// timeout and quiet wait fall back to `defaults`; the serial candidates and
// band to CandidateRule's; the serial rounds' limits stay zero, which the
// worker reads as its own defaults (kernels::SerialRule). Pure: nothing is
// checked (CheckJobOptions, before) or started.
ResolvedJobOptions ResolveJobOptions(const v1::JobOptions& job, const JobRunnerOptions& defaults);

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_JOB_OPTIONS_H_
