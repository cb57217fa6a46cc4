// JobRunner: admits warmup jobs, queues them, owns the worker pools and runs
// each job from Submit to its end. A job is planned (job_plan.h) with its
// options resolved onto the daemon's (job_options.h), then run as stages
// over its state (stage_context.h): compiled (compile_stage.h), or, unless
// compile_only, searched and screened on the GPUs one problem per GPU at a
// time (search_stage.h) and its best candidates timed serially, one GPU each
// (serial_stage.h); each problem measured is reported (job_report.h), and
// progress, with an ETA (job_progress.h), is streamed to whoever watches.
//
//   JobRunner runner(store, pool, "", {});
//   ASSIGN_OR_RETURN(v1::Job job, runner.Submit(spec));   // returns at once
//   runner.Watch(job.id(), [](const v1::JobProgress& p) { ...; return true; });
//
// Submit checks the spec before anything starts, reads the families, starts
// the GPU workers (ProfilePool, on the first job that measures; their device
// limits shape the search spaces), plans, and skips problems that already
// have a best entry for the family's current version on this GPU model
// (counts.cached_problems) unless options.retune. Without a usable GPU a
// measuring job is refused with FAILED_PRECONDITION and the reason.
//
// Failures: a variant that fails ends in its status and fails nothing else.
// A problem left without an entry is counted and named in the job's error
// (the job still SUCCEEDS: rejecting bad variants is the point). A store
// error is never read as a miss: at Submit it fails the call; during a job
// it fails the problem and, once the job has run, the job (FAILED, with the
// error).
//
// Jobs are stored as they progress; a job the daemon was stopped in the
// middle of is run again by ResumeUnfinished() (the compile cache makes the
// finished part free, and problems this job already chose are not measured
// again).
//
// Thread-safe. The destructor cancels running jobs and waits for them.
// Ended jobs are kept in memory until the next job starts, then read from
// the store.
#ifndef AUTOTUNE_SERVICE_JOBS_JOB_RUNNER_H_
#define AUTOTUNE_SERVICE_JOBS_JOB_RUNNER_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cache/store.h"
#include "proto/autotune.pb.h"
#include "service/jobs/compile_phase.h"
#include "service/jobs/compile_queue.h"
#include "service/jobs/job_options.h"
#include "service/jobs/job_plan.h"
#include "service/jobs/job_progress.h"
#include "service/pools/compile_pool.h"
#include "service/pools/profile_pool.h"

namespace autotune::service {

struct JobWork;
class RunningJob;

class JobRunner {
 public:
  // `pool` may be null (NVRTC unavailable): then compile jobs are refused
  // with FAILED_PRECONDITION carrying `pool_error`, until
  // options.start_pool gives one.
  JobRunner(cache::Store* store, CompilePool* pool, std::string pool_error,
            JobRunnerOptions options);
  ~JobRunner();
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // Checks the whole spec first (INVALID_ARGUMENT naming
  // "manifest.items[2].dims[0]" and the like, NOT_FOUND for an unknown
  // family), stores the job and starts it. Returns the QUEUED job.
  // RESOURCE_EXHAUSTED, naming the limit, for a job of more variants than
  // max_job_variants, or when `submitted_by` (not empty) has
  // max_unfinished_jobs_per_submitter jobs that have not ended.
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec, const std::string& submitted_by = "");

  // Sends the job's state now and after every change until the job ends,
  // `on_progress` returns false, or `stop()` turns true. Changes that come
  // faster than the watcher are folded into the latest state, but every
  // message published while watching is sent (of the last 256). NOT_FOUND for an
  // unknown id. A finished job is sent once, from the store.
  absl::Status Watch(absl::string_view id,
                     const std::function<bool(const v1::JobProgress&)>& on_progress,
                     const std::function<bool()>& stop = nullptr);

  // Asks a running job to stop; it ends CANCELLED. A finished job is
  // returned as it is.
  absl::StatusOr<v1::Job> Cancel(absl::string_view id);

  // What this runner's jobs have used since it started, for metrics: wall
  // seconds of compile phases and of GPU phases (screen and serial) of the
  // jobs that ended, and worker processes replaced (compile and GPU).
  struct Totals {
    double compile_s = 0;
    double gpu_s = 0;
    int64_t workers_replaced = 0;
  };
  Totals totals();

  // Starts again every stored job left QUEUED, COMPILING or SCREENING by a
  // daemon that stopped. Returns how many. Problems whose best entry this
  // job already stored are not measured again.
  absl::StatusOr<int> ResumeUnfinished();

  // The compile check of a family version before RegisterKernel stores it
  // (kernels/family_check.h): its reference and default config, in each of
  // its dtypes, compiled on the compile pool at once, for the arch jobs
  // default to (the GPU's when the GPU workers run, else default_arch).
  // INVALID_ARGUMENT with every finding; FAILED_PRECONDITION when this
  // daemon cannot compile.
  absl::Status CheckFamilyCompiles(const v1::KernelFamily& family);

  // The daemon's own compile of each config, as a job compiles it: the
  // compile cache first, else the compile pool (each key once, as many at
  // once as the pool has workers), the result kept in the cache. What Import
  // checks an imported binary against (cache_admin.h). One end per config,
  // in order; a config that is not one of its family's ends in
  // COMPILE_ERROR with the reason. FAILED_PRECONDITION when this daemon
  // cannot compile.
  absl::StatusOr<CompiledConfigs> CompileConfigs(const std::vector<ConfigCompile>& configs);

  // The GPUs jobs measure on (their workers are started on first use).
  // FAILED_PRECONDITION with the reason when there is no usable GPU.
  absl::StatusOr<std::vector<worker::v1::DeviceInfo>> Devices();

  // The GPUs' state now, without starting or waiting for anything:
  // `started` false, with why in `reason`, before the first job that
  // measures, while the workers start, after they failed to, or when
  // profiling is off.
  struct GpuSnapshot {
    bool started = false;
    std::string reason;
    std::vector<GpuStatus> devices;
  };
  GpuSnapshot Snapshot();

 private:
  // The run (job_runner.cc).
  // Everything Submit and ResumeUnfinished check and read before a job
  // starts; `job_id` is the resumed job's (empty for a new one).
  absl::StatusOr<std::shared_ptr<JobWork>> Prepare(const v1::JobSpec& spec,
                                                   const std::string& job_id);
  // Of a measuring job's plan, the problems already tuned on `gpu_name`
  // become reports (cached; of this resumed job always, of earlier jobs
  // unless `retune`); the others keep their previous entry (ReadPrevious:
  // the newest of any family version, its config a serial candidate, its
  // screens carried when only the space changed).
  absl::Status SkipTunedProblems(const std::string& gpu_name, const std::string& job_id,
                                 bool retune, JobWork* work);
  absl::Status ReadPrevious(const cache::EntryKey& key, const v1::Entry* stored,
                            PlannedProblem* planned);
  // A model search starts from the winners of the nearest problems of the
  // same family tuned on `gpu_name` (of any family version).
  absl::Status AddSearchHints(const std::string& gpu_name, const std::string& job_id,
                              JobWork* work);
  void Start(v1::Job job, std::shared_ptr<JobWork> work);
  void Run(RunningJob* running);
  // A job the daemon stopped: stored in the state it reached, for
  // ResumeUnfinished to take up.
  void StopWhereItIs(RunningJob* running, const std::string& id);
  // The line that sums up a job that ended (RunningJob::Finish).
  static std::string Conclude(const v1::Job& finished, const JobWork& work, absl::Time started);

  // The worker pools, started when first needed (job_runner.cc).
  // The compile pool: the one given, else one options_.start_pool gave.
  // FAILED_PRECONDITION with why there is none.
  absl::StatusOr<CompilePool*> Pool();
  // The GPU workers, started on first use. FAILED_PRECONDITION with the
  // reason when there is no usable GPU.
  absl::StatusOr<ProfilePool*> Gpus();

  // The stages (stage_context.h), in order, over the context `running`
  // gets: a compile-only job's compile stage, else the search stage and the
  // serial stage, on the GPUs. Returns early when the job is cancelled.
  void RunStages(RunningJob* running);
  // How the job's compiles run: the pool's size (or the runner's
  // compile_parallelism), the job's timeout, cubins kept when it measures.
  CompilePhaseOptions CompileOptions(const JobWork& work);

  // Progress (job_progress.cc).
  // Stores and announces the job's new state.
  void Publish(RunningJob* running, const v1::Measurement* last, absl::string_view message);
  // The rates of the last finished job (read from the store on first use).
  PhaseRates Rates();
  void LearnRates(const v1::Job& finished);

  cache::Store* store_;
  absl::Mutex pool_mu_;
  CompilePool* pool_ ABSL_GUARDED_BY(pool_mu_);
  std::unique_ptr<CompilePool> started_pool_ ABSL_GUARDED_BY(pool_mu_);
  std::string pool_error_ ABSL_GUARDED_BY(pool_mu_);
  absl::Time pool_tried_ ABSL_GUARDED_BY(pool_mu_);
  const JobRunnerOptions options_;
  absl::Mutex gpus_mu_;
  std::unique_ptr<ProfilePool> gpus_ ABSL_GUARDED_BY(gpus_mu_);
  std::string gpus_error_ ABSL_GUARDED_BY(gpus_mu_);  // the last failed start
  absl::Mutex rates_mu_;
  std::optional<PhaseRates> rates_ ABSL_GUARDED_BY(rates_mu_);
  Totals totals_ ABSL_GUARDED_BY(rates_mu_);  // workers_replaced unused here
  absl::Mutex mu_;
  // Jobs started by this runner and not yet forgotten (ended jobs are
  // dropped when the next one starts; the store keeps them).
  std::map<std::string, std::shared_ptr<RunningJob>> running_ ABSL_GUARDED_BY(mu_);
  // Submissions let past the per-submitter limit and not yet in running_,
  // by submitter: counted with the running ones, so concurrent submits
  // cannot all pass the same check.
  std::map<std::string, int> submitting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_JOBS_JOB_RUNNER_H_
