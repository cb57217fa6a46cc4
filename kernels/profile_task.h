// Turns a family, a problem and compiled kernels into the ProfileTask a
// profile worker runs (proto/worker.proto, service/worker/profiler.h).
//
//   ASSIGN_OR_RETURN(SearchSpace space, ExpandSearchSpace(family, problem));
//   std::vector<CompiledVariant> compiled = ...;  // from the compile cache
//   ASSIGN_OR_RETURN(worker::v1::ProfileTask task,
//                    MakeProfileTask(family, problem, space, reference, compiled, {}));
//
// Thread-safe (pure functions).
#ifndef AUTOTUNE_KERNELS_PROFILE_TASK_H_
#define AUTOTUNE_KERNELS_PROFILE_TASK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/search_space.h"
#include "proto/autotune.pb.h"
#include "proto/problem.h"
#include "proto/worker.pb.h"

namespace autotune::kernels {

// A kernel ready to load: its cubin and the symbol NVRTC lowered its name
// expression to.
struct CompiledKernel {
  std::string cubin;
  std::string lowered_name;
};

struct CompiledVariant {
  const Variant* variant = nullptr;  // from the SearchSpace passed along
  CompiledKernel kernel;
  std::string id;  // echoed in the outcome; empty = the variant's index
};

// The profiling defaults, here and nowhere else: the daemon's flags start
// from them and MakeProfileTask writes every value into the task, so a
// worker never sees a 0 (it rejects one).
inline constexpr int kMinSeeds = 3;
inline constexpr int kDefaultSeeds = 3;
inline constexpr double kDefaultLaunchTimeoutS = 10;
inline constexpr double kDefaultTimingBudgetS = 0.25;
inline constexpr int kDefaultMinSamples = 30;

// The serial rounds' stopping rule when a task leaves it at zero: stop once
// every candidate's median is within half a percent (also the choice's tie
// band, service/jobs/choice.h), after a few rounds, or after two GPU
// seconds per problem.
inline constexpr double kDefaultSerialNoise = 0.005;
inline constexpr int kDefaultSerialMinRounds = 5;
inline constexpr double kDefaultSerialMaxS = 2;

// Serial rounds (worker.proto, SerialOptions), with the defaults resolved:
// the worker runs by them, and the daemon's deadlines allow for them.
struct SerialRule {
  double target_noise = kDefaultSerialNoise;
  int min_rounds = kDefaultSerialMinRounds;
  double max_seconds = kDefaultSerialMaxS;
  double round_seconds = 0.001;
  double throttle_fraction = 0.75;
};
// The options' values, 0 (or out of range) replaced by the defaults above.
SerialRule ResolveSerialRule(const worker::v1::SerialOptions& options);

struct ProfileSettings {
  bool validate_only = false;
  int seeds = kDefaultSeeds;
  double launch_timeout_s = kDefaultLaunchTimeoutS;  // per launch
  double timing_budget_s = kDefaultTimingBudgetS;    // GPU seconds of timing per variant
  int min_samples = kDefaultMinSamples;
  double warmup_s = 0;           // GPU time of warm-up replays; 0 = the worker's default
  int64_t max_memory_bytes = 0;  // 0 = the worker decides
  // Unspecified = the family's cache_state (itself unspecified = COLD).
  v1::CacheState cache_state = v1::CACHE_STATE_UNSPECIFIED;
};

// "BLOCK=128 ITEMS=4": how messages name a config (params in `family`
// order; "reference" for an empty config).
std::string ConfigLabel(const v1::KernelFamily& family, const v1::Config& config);

// The task for one problem. The family's tolerance for the problem's dtype
// is used; the base seed is derived from the family name and the problem,
// so a rerun checks the same inputs. INVALID_ARGUMENT when the family has
// no tolerance for the dtype, a kernel has no cubin, `seeds` < kMinSeeds,
// or launch_timeout_s, timing_budget_s or min_samples is not positive.
absl::StatusOr<worker::v1::ProfileTask> MakeProfileTask(
    const v1::KernelFamily& family, const v1::Problem& problem, const SearchSpace& space,
    const CompiledKernel& reference, const std::vector<CompiledVariant>& variants,
    const ProfileSettings& settings);

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_PROFILE_TASK_H_
