// Internal to the profiler: only service/worker/profiler.cc and the files that
// define TaskRun include it. A TaskRun runs one ProfileTask on a Gpu, as
// service/worker/profiler.h describes, and owns every buffer of the task. It is one
// class; its members are defined in one file per concern, named above each
// group of declarations below.
//
// Thread-compatibility: a TaskRun is used by one thread, the one in
// Profiler::Run.
#ifndef AUTOTUNE_SERVICE_WORKER_TASK_RUN_H_
#define AUTOTUNE_SERVICE_WORKER_TASK_RUN_H_

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/gpu/cuda_driver.h"
#include "proto/autotune.pb.h"
#include "proto/worker.pb.h"
#include "service/worker/driver_failure.h"
#include "service/worker/profiler_gpu.h"

namespace autotune::kernel_worker::internal {

using Emit = std::function<void(const wv1::VariantOutcome&)>;

// Samples (graph replays) per measurement at most, whatever the budget.
inline constexpr int kMaxSamples = 2000;
// One sample is long enough against the launch overhead of a replay
// (a few microseconds) when it holds at least this many launches and this
// much estimated kernel time...
inline constexpr int kMinLaunchesPerSample = 20;
inline constexpr double kMinSampleUs = 50;
// ...except that launches this long in total need no more of them: a
// replay's few microseconds are under 1% of this.
inline constexpr double kLongSampleUs = 1000;
// ...and no graph gets more kernel nodes than this (instantiation time and
// memory grow with them). It also caps the pool: a launch that touches a
// few kilobytes would otherwise need tens of thousands of sets to fill 2x L2.
inline constexpr int kMaxLaunchesPerSample = 4096;
inline constexpr int kMinWarmupReplays = 1;
// ...and at least this much GPU time of warm-up replays (unless the task
// asks for another), so the clocks have left any idle state before the
// first sample: a GPU that idled between tasks starts slow, and a serving
// GPU does not. In a screen only its first variant gets it; the others
// follow with the GPU busy and get kMinWarmupReplays.
inline constexpr double kWarmupUs = 20000;
inline constexpr int kMaxWarmupReplays = 1000;
// Replays enqueued before the host waits: about this much GPU time, so the
// GPU does not idle between samples while the host polls.
inline constexpr int kMaxReplaysPerBatch = 32;
inline constexpr double kBatchTargetUs = 20000;
// Our own fills and comparisons stream through memory at hundreds of GB/s;
// one taking this long means the GPU is not making progress.
inline constexpr double kUtilityTimeoutS = 120;
// Buffers within one allocation start at this alignment, as cuMemAlloc's do.
inline constexpr size_t kAlignment = 256;

// Indices into Gpu::events.
enum EventSlot : int {
  kSpanBegin = 0,
  kLaunchBegin,
  kLaunchEnd,
  kCompareBegin,
  kCompareEnd,
  kWarmBegin,
  kWarmEnd,
  kTimingBase,  // kTimingBase + 2 * i and + 1: replay i of a batch
};
inline constexpr int kEventCount = kTimingBase + 2 * kMaxReplaysPerBatch;

inline size_t AlignUp(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// The kernel arguments of one launch: device pointers, tensor maps (built
// over those pointers), then scalars, each in its own slot, and the array of
// their addresses cuLaunchKernel reads.
class KernelArgs {
 public:
  KernelArgs(std::vector<CUdeviceptr> pointers, std::vector<CUtensorMap> tensor_maps,
             std::vector<uint64_t> scalars)
      : pointers_(std::move(pointers)),
        tensor_maps_(std::move(tensor_maps)),
        scalars_(std::move(scalars)) {}

  // Valid until the next call or until the object moves; the driver copies
  // the values when the launch (or its capture) is made.
  void** params() {
    params_.clear();
    for (CUdeviceptr& pointer : pointers_) params_.push_back(&pointer);
    for (CUtensorMap& map : tensor_maps_) params_.push_back(&map);
    for (uint64_t& scalar : scalars_) params_.push_back(&scalar);
    return params_.data();
  }

 private:
  std::vector<CUdeviceptr> pointers_;
  std::vector<CUtensorMap> tensor_maps_;
  std::vector<uint64_t> scalars_;
  std::vector<void*> params_;
};

// Why a variant, the reference or the task stopped.
struct Failure {
  v1::VariantStatus status = v1::UNSUPPORTED;
  std::string phase;
  std::string message;
};

// Short for the many call sites in the TaskRun files.
using Origin = DriverCallOrigin;

// A kernel under test, loaded and checked against the device.
struct LoadedKernel {
  kernels::Module module;
  CUfunction function = nullptr;
  LaunchShape shape;
  int registers = 0;
  int static_shared = 0;
  int local_bytes = 0;
  int max_threads = 0;
  // Its tensor maps (LaunchDims.tensor_maps), checked against the task's
  // buffers; the reference has none.
  std::vector<v1::TensorMapLayout> tensor_maps;
};

// The per-seed verdict of one output buffer.
struct BufferVerdict {
  const BufferSlot* buffer = nullptr;
  DeviceCompareResult result{};
  // Largest |v - r| over the pairs without a NaN (infinite when one side
  // is infinite and the other not).
  double max_abs() const {
    double value = 0;
    std::memcpy(&value, &result.max_abs_bits, sizeof(value));
    return value;
  }
  // The buffer's error as VariantOutcome.max_error reports it: NaN when a
  // NaN took part, so that no tolerance comparison can pass it.
  double error() const {
    return result.nan_values + result.nan_reference > 0 ? std::numeric_limits<double>::quiet_NaN()
                                                        : max_abs();
  }
};

// A variant's graph, captured over the timing pool and warmed up.
struct TimedGraph {
  kernels::GraphExec exec;
  int launches = 0;  // per replay (one sample)
  int sets = 0;
  int64_t pool_bytes = 0;
  double estimate_us = 0;  // one launch, from validation
  std::vector<std::string> notes;
};

// One ProfileTask from start to end; owns every buffer of the task.
class TaskRun {
 public:
  TaskRun(Gpu& gpu, bool* usable, const wv1::ProfileTask& task,
          const std::function<void()>& reference_done, const Emit& emit)
      : gpu_(gpu), usable_(usable), task_(task), reference_done_(reference_done), emit_(emit) {}

  wv1::ProfileDone Execute();

 private:
  // In task_run.cc: the task's flow and one variant's.
  wv1::VariantOutcome RunVariant(const wv1::KernelImage& image);
  // An outcome naming the task and the variant, with the task's tolerance.
  wv1::VariantOutcome NewOutcome(const wv1::KernelImage& image) const;
  // Turns a failed call into a Failure; a lost context (TIMEOUT, FAULT) is
  // recorded at once, before any owner could call the driver again.
  Failure Fail(const absl::Status& status, Origin origin, const std::string& phase);

  // In task_layout.cc: the task's settings, its buffers and where they live.
  //
  // The daemon fills every setting of a task (kernels/profile_task.h holds
  // the defaults and kMinSeeds); a task without them is refused rather than
  // guessed at.
  std::optional<Failure> Prepare();
  std::optional<Failure> AllocateProblem();
  absl::StatusOr<kernels::DeviceBuffer> Allocate(size_t bytes, const std::string& what);
  // Fills the inputs of set `set` from `seed`; poisons its outputs too when
  // asked (validation), not for the timing pool.
  // SCRATCH is left alone: it is zeroed once, by ZeroScratch, when its set
  // is allocated.
  absl::Status FillSet(size_t set, uint64_t seed, bool poison_outputs);
  absl::Status ZeroScratch(size_t set);
  CUdeviceptr SetPointer(size_t set, const BufferSlot& buffer) const {
    return sets_[set].get() + buffer.offset;
  }
  CUdeviceptr ReferencePointer(size_t seed_index, const BufferSlot& buffer) const {
    return references_[seed_index].get() + buffer.output_offset;
  }
  std::vector<CUdeviceptr> OutputsOfSet(size_t set) const;
  std::vector<CUdeviceptr> OutputsOfReference(size_t seed_index) const;
  // The arguments of `kernel` over input set `set`: its tensor maps are
  // encoded over that set's buffers (the driver's error when one fails).
  absl::StatusOr<KernelArgs> ArgsForSet(size_t set, const LoadedKernel& kernel) const;
  KernelArgs ArgsForReference(size_t seed_index) const;

  // In task_validation.cc: loading a kernel, the reference's outputs and a
  // variant's against them.
  std::optional<Failure> LoadKernel(const wv1::KernelImage& image, const std::string& load_phase,
                                    const std::string& check_phase, LoadedKernel* kernel);
  // What is wrong with the kernel's parameters (count and sizes, when the
  // driver can tell) against what the task passes it.
  std::optional<std::string> CheckParameters(CUfunction function, size_t tensor_maps) const;
  // What is wrong with the launch's tensor maps against the task's buffers.
  std::optional<std::string> CheckTensorMaps(
      const google::protobuf::RepeatedPtrField<v1::TensorMapLayout>& maps) const;
  std::optional<Failure> RunReference();
  std::optional<Failure> Validate(const LoadedKernel& kernel, wv1::VariantOutcome* outcome,
                                  double* estimate_us);
  // Compares each output of `checked` with `reference` (one pointer per
  // output buffer, in output order) and waits for the answer.
  absl::StatusOr<std::vector<BufferVerdict>> CompareOutputs(
      const std::vector<CUdeviceptr>& checked, const std::vector<CUdeviceptr>& reference);

  // In task_timing.cc: the timing pool and a variant's graph over it.
  std::optional<Failure> AllocatePool();
  std::optional<Failure> Time(const LoadedKernel& kernel, const wv1::KernelImage& image,
                              double estimate_us, wv1::VariantOutcome* outcome,
                              std::string* summary);
  absl::StatusOr<kernels::Graph> Capture(const LoadedKernel& kernel, int sets, int launches);
  // Replays `exec` until both `min_samples` samples and `budget_s` of GPU
  // time are reached (at most kMaxSamples).
  std::optional<Failure> Measure(CUgraphExec exec, int launches, double estimate_us,
                                 const std::string& phase, int min_samples, double budget_s,
                                 std::vector<double>* per_launch_us);
  // Plans the pool, captures the kernel's graph over it and warms it up
  // with replays of warmup_us GPU time (at least kMinWarmupReplays).
  std::optional<Failure> PrepareGraph(const LoadedKernel& kernel, const wv1::KernelImage& image,
                                      double estimate_us, double warmup_us,
                                      const std::string& phase, TimedGraph* timed);

  // In serial_rounds.cc.
  //
  // Serial tasks: validates every variant, then times the valid ones in
  // interleaved rounds (worker.proto, SerialOptions).
  wv1::ProfileDone RunSerial(const std::function<wv1::ProfileDone(const std::optional<Failure>&,
                                                                  const std::string&)>& finish);
  // Reads NVML around a round; false when it cannot (watching is off).
  bool Watch(wv1::DeviceState* state);

  std::string Prefix() const { return task_.context().empty() ? task_.task_id() : task_.context(); }
  std::string Detail(const std::string& label, const std::string& phase,
                     const std::string& message) const {
    return absl::StrCat(Prefix(), " [", label, "]: ", phase, ": ", message);
  }
  void AddGpuTime(double seconds) {
    variant_gpu_s_ += seconds;
    task_gpu_s_ += seconds;
  }

  Gpu& gpu_;
  bool* usable_;
  const wv1::ProfileTask& task_;
  const std::function<void()>& reference_done_;
  const Emit& emit_;

  // Settings with the task's defaults applied.
  int seeds_ = 0;
  double launch_timeout_s_ = 0;
  double timing_budget_s_ = 0;
  int min_samples_ = 0;
  v1::CacheState cache_state_ = v1::COLD;
  double rtol_ = 0;
  double atol_ = 0;

  std::vector<BufferSlot> buffers_;
  std::vector<size_t> outputs_;  // indices into buffers_ of OUT and INOUT
  std::vector<uint64_t> scalars_;
  std::vector<size_t> scalar_sizes_;
  size_t set_bytes_ = 0;
  size_t output_bytes_ = 0;

  int64_t budget_bytes_ = 0;
  std::string budget_origin_;
  int64_t problem_bytes_ = 0;  // set 0, reference outputs, comparison results
  int64_t allocated_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  std::vector<kernels::DeviceBuffer> sets_;        // [0]: validation; all: timing pool
  std::vector<kernels::DeviceBuffer> references_;  // reference outputs, one per seed
  kernels::DeviceBuffer results_;                  // one DeviceCompareResult per output
  int max_pool_sets_ = 0;
  int64_t max_pool_bytes_ = 0;

  double task_gpu_s_ = 0;
  double variant_gpu_s_ = 0;
  // The stages of the variant running now (RunVariant resets it).
  wv1::VariantTimeline timeline_;
  // A variant of this screen task has had its full warm-up (Time).
  bool screen_warmed_up_ = false;
  double warmup_us_ = kWarmupUs;
  wv1::SerialReport serial_report_;
};

}  // namespace autotune::kernel_worker::internal

#endif  // AUTOTUNE_SERVICE_WORKER_TASK_RUN_H_
