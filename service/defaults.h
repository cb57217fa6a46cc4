// The defaults of autotuned's settings and of a job's options, each written
// once, here. The daemon's flags and ServerOptions (daemon_flags.cc,
// server.h), JobRunnerOptions and the resolution of a job's options
// (job_options.h), the serial phase's CandidateRule (choice.h), the list
// calls (cache_admin.cc) and the CLI's help read them from here;
// `autotuned --print-config` prints the daemon's as they are in effect.
//
// Defaults that the lower layers resolve themselves stay with them and are
// only referenced:
//   kernels::kDefaultLaunchTimeoutS   a launch's timeout (kernels/profile_task.h)
//   kernels::kDefaultSerialNoise,     the serial rounds' stopping rule, which
//   kernels::kDefaultSerialMaxS, ...  the worker applies to a task's zeros
//   cache::kDefaultReaders            pooled read connections (cache/store.h)
//   kDefaultLeaseDir                  host-wide GPU leases (base/gpu_lease.h)
//
// Header only, with no dependencies, so that the CLI can include it.
#ifndef AUTOTUNE_SERVICE_DEFAULTS_H_
#define AUTOTUNE_SERVICE_DEFAULTS_H_

#include <cstdint>

#include "absl/time/time.h"

namespace autotune::service {

// --- The daemon's settings (autotuned's flags and config file) -------------

// How long the serial phase waits for a GPU without other compute
// processes: long enough for another tuning run or a short job to finish,
// short enough that a GPU in use fails the problem within the hour.
inline constexpr double kDefaultQuietWaitS = 600;
// Variants one job may plan: far above any manifest worth one job (a large
// family over a large manifest is tens of thousands), low enough that a
// mistyped range is refused before it is stored.
inline constexpr int64_t kDefaultMaxJobVariants = 500000;
// Unfinished jobs one submitter may have: a CI matrix's worth, so that one
// caller cannot queue work that starves the others.
inline constexpr int kDefaultMaxJobsPerSubmitter = 16;
// Problems tune-on-miss may queue per hour, over all clients: a fleet
// starting up asks for the same few problems; more than this is a misuse.
inline constexpr int kDefaultTuneOnMissPerHour = 60;
// Unix sockets are owner-only unless the operator lets a group in.
inline constexpr unsigned kDefaultSocketMode = 0600;
// How often the database is checked for health: a removed or locked
// database is reported within seconds, at the cost of one query.
inline constexpr double kDefaultHealthIntervalS = 5;

// A compile worker's data memory (--compile-memory-mb): NVRTC needs a few
// hundred MiB for the largest built-in variants; a template bomb that grows
// past this fails its compile instead of taking the host's memory.
inline constexpr int64_t kDefaultCompileMemoryMb = 4096;

// How long the link of `autotune admin-url` may wait to be opened (once).
inline constexpr absl::Duration kLoginLinkLifetime = absl::Hours(1);
// How long the admin page's session, which a link is swapped for once,
// lasts: a working session's length, then a new link.
inline constexpr absl::Duration kLoginSessionLifetime = absl::Minutes(30);

// --- A job's options (v1::JobOptions: 0 = these) ---------------------------

// The architecture a job compiles for on a daemon without a GPU, and the
// one `autotune check` compiles for: Hopper, without its arch-specific
// (sm_90a) instructions.
inline constexpr char kDefaultArch[] = "sm_90";

// One compile: NVRTC takes seconds for most variants; two minutes is a
// compiler that hangs, not a slow kernel.
inline constexpr double kDefaultCompileTimeoutS = 120;
// The most a job may ask for one compile (JobOptions.compile_timeout_s): a
// caller may not hold a compile worker, and its memory, for longer.
inline constexpr double kMaxCompileTimeoutS = 600;
// The screen's timing of each variant: enough replays for a usable median,
// a few milliseconds of GPU time (the screen only ranks; the serial phase
// times its candidates at length, by the rules of kernels::SerialRule).
// Not options of a job.
inline constexpr double kScreenTimingBudgetS = 0.003;
inline constexpr int kScreenMinSamples = 5;
inline constexpr double kScreenWarmupS = 0.002;
// Candidates timed in the serial phase at most: enough to hold the screen's
// near ties when its short timings misrank them, few enough to time at
// length (only the first pass times them all; later passes the leaders,
// serial_phase.cc). Replayed over the gemm_bf16 screens with each run's
// screen seeing its own noise (autotune-search-replay --noise, 64 runs of
// five shapes): at 3% noise a cap of 8 left 287 of 320 runs choosing the
// same config or a tie within 0.5%, 16 left 308 (at 2%: 315 and 319);
// the search had measured the best in every run, the cap dropped it.
inline constexpr int kDefaultSerialCandidates = 16;
// The most a job may ask for one variant's launch (JobOptions.
// variant_timeout_s; 0 = the daemon's --variant-timeout): a kernel that runs
// a minute is hung, and the GPU it holds is every other job's too.
inline constexpr double kMaxVariantTimeoutS = 60;
// The most a job may wait for a quiet GPU (JobOptions.quiet_wait_s), and
// may give its serial phase (serial_max_s) or a problem's search
// (SearchOptions.max_seconds): a week of waiting, an hour of timing one
// problem's candidates, a day of searching one problem's space.
inline constexpr double kMaxQuietWaitS = 7 * 24 * 3600.0;
inline constexpr double kMaxSerialMaxS = 3600;
inline constexpr double kMaxSearchSeconds = 24 * 3600.0;
// The widest candidate band and the loosest noise target a job may ask
// for: a band of 10x is every variant; noise of 50% is no measurement.
inline constexpr double kMaxCandidateBand = 10;
inline constexpr double kMaxSerialNoise = 0.5;
// Problems one job's manifest may hold, counted by arithmetic from its
// items before any is built (job_plan.h): far above a manifest worth one
// job (the built-in ones hold tens), low enough that refusing a larger one,
// or sharding one this size, costs the daemon a fraction of a second.
inline constexpr int64_t kDefaultMaxJobProblems = 100000;
// ...and at least (when the screen found that many): a screen's ranking of
// close variants is noise.
inline constexpr int kDefaultMinSerialCandidates = 3;
// Most serial-phase candidates a job may ask for (a limit, not a default;
// the CLI checks it before asking).
inline constexpr int kMaxSerialCandidates = 256;
// Candidates are the variants within 1.10x of the best screened median
// (widened by the screen's noise): the screen's short timings are a few
// percent off, rarely ten.
inline constexpr double kDefaultCandidateBand = 0.10;

// How a problem's variants are searched when the job does not say
// (SearchOptions.strategy unspecified): every variant of a space up to this
// size (the built-in memory-bound families have at most a few hundred, and
// a screen of that many takes seconds), the model-guided search above it.
// Replayed over the exhaustive screens of gemm_bf16 (7,296 configs per
// shape, five shapes, bench/testdata/search), the model with no budget
// stops after 5.5-6.4% of the space with the exhaustive best in each of 64
// runs a shape.
inline constexpr int64_t kExhaustiveSearchUpTo = 1000;
// While a searched job measures a round, it compiles up to this many times
// the round's batches of what the searches expect next (Search::Ahead). At
// twice, 41-54% of the model's later proposals over the gemm_bf16 screens
// were compiled ahead (autotune-search-replay, "ahead hit"); the compiles
// it guesses wrong use cores that sit idle while the GPU measures.
inline constexpr int kDefaultCompileAhead = 2;

// --- The list calls (ListJobs, ListEntries: limit 0 = these) ----------------

// One page of jobs: the recent ones an operator looks at.
inline constexpr int kDefaultListJobsLimit = 50;
// One page of entries: a screenful for a person, small enough for one reply.
inline constexpr int kDefaultListEntriesLimit = 1000;

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_DEFAULTS_H_
