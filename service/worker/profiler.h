// Validates and times kernel variants on one GPU, inside the calling process
// (autotune-worker profile). The daemon never runs this: a variant that
// hangs or faults takes the process with it, and only a process can be
// killed.
//
//   ASSIGN_OR_RETURN(auto profiler, Profiler::Open(/*ordinal=*/0));
//   worker::v1::ProfileDone done = profiler->Run(
//       task, [] { ...say the reference ran... },
//       [](const auto& outcome) { WriteDelimited(STDOUT_FILENO, outcome); });
//   if (!profiler->usable()) _exit(3);  // a variant faulted or hung: start afresh
//
// What one task does (worker.proto, ProfileTask, has the fields):
//  1. Lays out the problem's buffers once: the inputs, the reference's
//     outputs for every seed, the variant's outputs. A problem that does not
//     fit (allocation fails, or above max_memory_bytes) ends the task with
//     ProfileDone UNSUPPORTED naming the sizes; nothing is left allocated.
//  2. Reference: for each seed, fills the inputs on the device from the seed
//     (counter-based random numbers, never a host-side fill), poisons the
//     outputs (0xFF bytes: NaN for floating types) and runs the reference.
//     A reference that fails ends the task (ProfileDone with its status).
//  3. Per variant, in task order, one VariantOutcome each:
//     - load + check (phase "load"/"check"): the module loads and the launch
//       fits the function (threads per block after its register use,
//       static + dynamic shared memory against the device's opt-in limit,
//       grid limits, and its parameters, as the driver reports them, match
//       the task's buffers (pointers) and scalars (their dtype's C size) in
//       number and size); otherwise UNSUPPORTED with the numbers, before any
//       launch. A launch the driver refuses for resources is UNSUPPORTED too.
//     - validate (phase "validate seed K"): per seed, refill the inputs,
//       poison the outputs, launch, compare every OUT/INOUT element with the
//       reference's (|v - r| <= atol + rtol * |r| or v == r; NaN never
//       passes, nor does an infinity against anything but the same one).
//       A mismatch is WRONG_RESULT with the max error, the seed, the first
//       bad index and both values, and the tolerance. max_error is NaN when
//       a NaN took part (an unwritten, still poisoned element), infinite
//       when an infinity did. The reference's own outputs must hold no NaN:
//       otherwise the task ends WRONG_RESULT in "reference seed K".
//     - time (phase "time", unless validate_only): see below.
//     An OK outcome's phase is where it ended: "validate" (validate_only),
//     "time", or "remeasure".
//     A launch that does not finish within launch_timeout_s is TIMEOUT; a
//     sticky CUDA error (illegal address, misaligned access, trap...) is
//     FAULT with the driver's error name. After either the context is
//     unusable: the outcome is emitted, Run returns at once and usable()
//     turns false; the caller must exit (the daemon starts a new worker for
//     the variants that remain). That ProfileDone has the variant's status,
//     phase "variant <id>", and says how many variants were not run. Nothing
//     is freed then: freeing could wait on the hung kernel forever.
//  4. Releases every buffer of the task, so a long job does not grow.
//
// Timing: the pool of input sets is sized from the bytes one launch really
// touches (the variant's bytes_per_call, at most what its buffers hold), so
// that the sets together exceed 2x the device's L2 (COLD, the default); HOT
// uses one set. Sets are filled from distinct seeds. The launches of one
// sample visit every set of the pool the same number of times, in a cycle,
// captured in one CUDA graph; after warm-up replays, the graph is replayed
// until both min_samples and the timing budget are reached (at most a few
// thousand samples), each replay timed by a pair of events. Per-launch time
// = replay time / launches per replay. The stats are median, min, p90 and
// coefficient of variation; achieved GB/s and TFLOP/s from the variant's
// bytes/flops per call. A median below the device's DRAM bandwidth bound
// (COLD only) is re-measured once before it is reported, and the outcome
// says so in `detail` if it stays below.
//
// Launches per sample: a whole number of cycles over the sets, at least 20
// launches and about 50 us of kernel time (estimated from the validation
// launches), at most 4096 launches; the pool is capped at 4096 sets too
// (the outcome's detail says so when that leaves it below 2x L2).
// pool_bytes in an outcome is sets * touched bytes per launch.
//
// Thread-compatibility: one Run at a time.
#ifndef AUTOTUNE_SERVICE_WORKER_PROFILER_H_
#define AUTOTUNE_SERVICE_WORKER_PROFILER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/profile_task.h"
#include "kernels/round_compare.h"
#include "proto/autotune.pb.h"
#include "proto/worker.pb.h"

namespace autotune::kernel_worker {

// ---- Pure parts, testable without a GPU ------------------------------------

// How many input sets a variant rotates over.
struct InputPoolPlan {
  int sets = 1;
  int64_t touched_bytes_per_launch = 0;  // min(bytes_per_call, set bytes)
  int64_t set_bytes = 0;                 // bytes allocated per set
  int64_t pool_touched_bytes = 0;        // sets * touched_bytes_per_launch
};

// COLD: the fewest sets (at least 2) whose touched bytes together exceed
// 2 * l2_bytes, capped so that sets * set_bytes <= memory_budget (at least
// 1 set). HOT: 1 set. touched_bytes <= 0 counts as set_bytes.
InputPoolPlan PlanInputPool(double bytes_per_call, int64_t set_bytes, int64_t l2_bytes,
                            v1::CacheState cache_state, int64_t memory_budget);

// median, min, q1, q3 and p90 (nearest rank) and cv (population stddev / mean) of
// per-launch times in microseconds; achieved GB/s and TFLOP/s from the
// median. Empty input gives all zeros.
v1::TimingStats SummarizeTimes(std::vector<double> per_launch_us, double bytes_per_call,
                               double flops_per_call);

// The DRAM-bandwidth floor of one launch in microseconds (bytes_per_call at
// peak_bandwidth_gbps); 0 when either is unknown.
double BandwidthFloorUs(double bytes_per_call, double peak_bandwidth_gbps);

// The order candidates are replayed in round `round` (0-based): 0..n-1
// rotated left by `round`, so each candidate takes each position in turn.
std::vector<int> RoundOrder(int candidates, int round);

// What the serial rounds so far say (kernels/round_compare.h): each
// candidate's median per kept round (0 where it was not timed), compared
// round by round with the fastest. `separated` are those slower than it
// beyond doubt, no longer worth re-timing; `stop` says why the rounds end
// ("every candidate separated from the fastest or within 0.50% of it after
// 7 rounds", "time cap 2 s after 41 rounds, 1 candidates neither ..."), or
// is nullopt to go on. Never before min_rounds unless the time cap is
// reached.
struct RoundsVerdict {
  std::vector<size_t> separated;
  std::optional<std::string> stop;
};
RoundsVerdict JudgeRounds(const std::vector<std::vector<double>>& round_medians, int rounds,
                          double gpu_seconds, const kernels::SerialRule& rule);

// A round ran throttled when the lowest SM clock read around it is below
// `fraction` of the default clock; never when either clock is unknown (0).
bool RoundThrottled(int min_clock_mhz, int default_clock_mhz, double fraction);

// ---- The GPU side -----------------------------------------------------------

class Profiler {
 public:
  // Loads the CUDA driver (dlopen libcuda.so.1), initialises it and takes
  // the primary context of device `ordinal`. FAILED_PRECONDITION with the
  // reason when there is no driver or no such device ("no CUDA driver:
  // libcuda.so.1: cannot open shared object file", "device 3 of 1").
  static absl::StatusOr<std::unique_ptr<Profiler>> Open(int ordinal);
  virtual ~Profiler() = default;

  virtual const worker::v1::DeviceInfo& device() const = 0;
  // Runs `task`: calls `reference_done` once its reference has run on
  // every seed (not when the reference failed), then `emit` once per
  // variant as each finishes, in task order, and returns how the task
  // ended.
  virtual worker::v1::ProfileDone Run(
      const worker::v1::ProfileTask& task, const std::function<void()>& reference_done,
      const std::function<void(const worker::v1::VariantOutcome&)>& emit) = 0;
  // False once a variant faulted or timed out: the process must exit.
  virtual bool usable() const = 0;
  // What NVML sees on the device now, this process left out (nvml_error
  // set when it cannot see).
  virtual worker::v1::DeviceState Probe() const = 0;
};

}  // namespace autotune::kernel_worker

#endif  // AUTOTUNE_SERVICE_WORKER_PROFILER_H_
