#include "kernels/profiler.h"

#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "kernels/cuda_driver.h"
#include "kernels/driver_failure.h"
#include "kernels/nvml.h"
#include "kernels/profile_task.h"
#include "kernels/scalar_encoding.h"
#include "proto/problem.h"

namespace autotune::kernels {

// kernels/device_kernels.cu compiled to PTX at build time (a generated
// source, see kernels/CMakeLists.txt).
extern const char kDeviceKernelsPtx[];

// ---- Pure parts -------------------------------------------------------------

InputPoolPlan PlanInputPool(double bytes_per_call, int64_t set_bytes, int64_t l2_bytes,
                            v1::CacheState cache_state, int64_t memory_budget) {
  InputPoolPlan plan;
  plan.set_bytes = std::max<int64_t>(set_bytes, 0);
  // What one launch touches is at most what a set holds; an unknown (<= 0,
  // NaN) bytes_per_call counts as the whole set.
  int64_t touched = plan.set_bytes;
  if (bytes_per_call > 0 && bytes_per_call < static_cast<double>(plan.set_bytes)) {
    touched = static_cast<int64_t>(std::ceil(bytes_per_call));
  }
  plan.touched_bytes_per_launch = touched;
  // A set that touches nothing cannot be rotated into DRAM: one set.
  if (cache_state != v1::HOT && touched > 0) {
    const int64_t target = 2 * std::max<int64_t>(l2_bytes, 0);
    int64_t sets = std::max<int64_t>(2, target / touched + 1);  // sets * touched > target
    const int64_t affordable = memory_budget / plan.set_bytes;  // set_bytes >= touched > 0
    sets = std::max<int64_t>(1, std::min(sets, affordable));
    plan.sets = static_cast<int>(std::min<int64_t>(sets, std::numeric_limits<int>::max()));
  }
  plan.pool_touched_bytes = plan.sets * touched;
  return plan;
}

v1::TimingStats SummarizeTimes(std::vector<double> per_launch_us, double bytes_per_call,
                               double flops_per_call) {
  v1::TimingStats stats;
  if (per_launch_us.empty()) return stats;
  std::sort(per_launch_us.begin(), per_launch_us.end());
  const size_t n = per_launch_us.size();
  const double median =
      n % 2 == 1 ? per_launch_us[n / 2] : (per_launch_us[n / 2 - 1] + per_launch_us[n / 2]) / 2;
  // Nearest rank: the ceil(0.9 n)-th smallest, in integers (0.9 * n in
  // floating point can land just above a whole number).
  const size_t rank = std::max<size_t>(1, (9 * n + 9) / 10);
  const size_t q3_rank = std::max<size_t>(1, (3 * n + 3) / 4);
  const size_t q1_rank = std::max<size_t>(1, (n + 3) / 4);
  double sum = 0;
  for (double t : per_launch_us) sum += t;
  const double mean = sum / static_cast<double>(n);
  double squares = 0;
  for (double t : per_launch_us) squares += (t - mean) * (t - mean);
  const double stddev = std::sqrt(squares / static_cast<double>(n));

  stats.set_median_us(median);
  stats.set_min_us(per_launch_us.front());
  stats.set_p90_us(per_launch_us[rank - 1]);
  stats.set_q3_us(per_launch_us[q3_rank - 1]);
  stats.set_q1_us(per_launch_us[q1_rank - 1]);
  stats.set_cv(mean > 0 ? stddev / mean : 0);
  stats.set_samples(static_cast<int32_t>(std::min<size_t>(n, std::numeric_limits<int32_t>::max())));
  if (median > 0) {
    // bytes / (median_us * 1e-6 s) / 1e9 and flops / (median_us * 1e-6 s) / 1e12.
    if (bytes_per_call > 0) stats.set_achieved_gbps(bytes_per_call / (median * 1e3));
    if (flops_per_call > 0) stats.set_achieved_tflops(flops_per_call / (median * 1e6));
  }
  return stats;
}

double BandwidthFloorUs(double bytes_per_call, double peak_bandwidth_gbps) {
  if (!(bytes_per_call > 0) || !(peak_bandwidth_gbps > 0)) return 0;
  return bytes_per_call / (peak_bandwidth_gbps * 1e3);
}

std::vector<int> RoundOrder(int candidates, int round) {
  std::vector<int> order;
  if (candidates <= 0) return order;
  const int shift = ((round % candidates) + candidates) % candidates;
  for (int i = 0; i < candidates; ++i) order.push_back((i + shift) % candidates);
  return order;
}

double MedianNoise(const std::vector<double>& samples) {
  const size_t n = samples.size();
  if (n < 2) return std::numeric_limits<double>::infinity();
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  const double median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  if (!(median > 0)) return std::numeric_limits<double>::infinity();
  double sum = 0;
  for (double t : sorted) sum += t;
  const double mean = sum / static_cast<double>(n);
  double squares = 0;
  for (double t : sorted) squares += (t - mean) * (t - mean);
  const double stddev = std::sqrt(squares / static_cast<double>(n - 1));
  return 1.2533 * stddev / std::sqrt(static_cast<double>(n)) / median;
}

namespace {
std::string Percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f%%", fraction * 100);
  return text;
}
}  // namespace

std::optional<std::string> SerialStopReason(const std::vector<std::vector<double>>& samples,
                                            int rounds, double gpu_seconds,
                                            const SerialRule& rule) {
  double worst = 0;
  size_t worst_index = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const double noise = MedianNoise(samples[i]);
    if (!(noise <= worst)) {
      worst = noise;
      worst_index = i;
    }
  }
  const std::string after = absl::StrCat(" after ", rounds, rounds == 1 ? " round" : " rounds");
  if (gpu_seconds >= rule.max_seconds) {
    return absl::StrCat("time cap ", rule.max_seconds, " s", after, ", noise ", Percent(worst),
                        worst <= rule.target_noise ? " <= " : " > ", Percent(rule.target_noise),
                        " (candidate ", worst_index, ")");
  }
  if (rounds < rule.min_rounds || !(worst <= rule.target_noise)) return std::nullopt;
  return absl::StrCat("noise ", Percent(worst), " <= ", Percent(rule.target_noise), after);
}

bool RoundThrottled(int min_clock_mhz, int default_clock_mhz, double fraction) {
  if (min_clock_mhz <= 0 || default_clock_mhz <= 0) return false;
  return min_clock_mhz < fraction * default_clock_mhz;
}

// ---- The GPU side -----------------------------------------------------------

namespace {

namespace wv1 = ::autotune::worker::v1;
using Emit = std::function<void(const wv1::VariantOutcome&)>;
using Clock = std::chrono::steady_clock;

// The daemon fills every setting of a task (kernels/profile_task.h holds the
// defaults and kMinSeeds); a task without them is refused rather than
// guessed at.
// Samples (graph replays) per measurement at most, whatever the budget.
constexpr int kMaxSamples = 2000;
// One sample is long enough against the launch overhead of a replay
// (a few microseconds) when it holds at least this many launches and this
// much estimated kernel time...
constexpr int kMinLaunchesPerSample = 20;
constexpr double kMinSampleUs = 50;
// ...and no graph gets more kernel nodes than this (instantiation time and
// memory grow with them). It also caps the pool: a launch that touches a
// few kilobytes would otherwise need tens of thousands of sets to fill 2x L2.
constexpr int kMaxLaunchesPerSample = 4096;
constexpr int kMinWarmupReplays = 1;
// ...and at least this much GPU time of warm-up replays (unless the task
// asks for another), so the clocks have left any idle state before the
// first sample: a GPU that idled between tasks starts slow, and a serving
// GPU does not.
constexpr double kWarmupUs = 20000;
constexpr int kMaxWarmupReplays = 1000;
// Replays enqueued before the host waits: about this much GPU time, so the
// GPU does not idle between samples while the host polls.
constexpr int kMaxReplaysPerBatch = 32;
constexpr double kBatchTargetUs = 20000;
// Our own fills and comparisons stream through memory at hundreds of GB/s;
// one taking this long means the GPU is not making progress.
constexpr double kUtilityTimeoutS = 120;
// Buffers within one allocation start at this alignment, as cuMemAlloc's do.
constexpr size_t kAlignment = 256;
constexpr unsigned kUtilityBlock = 256;

// Fill kinds of autotune_fill (device_kernels.cu).
constexpr int kFillUniform = 0;
constexpr int kFillNormal = 1;
constexpr int kFillConstant = 2;

// device_kernels.cu's CompareResult, byte for byte.
struct DeviceCompareResult {
  unsigned long long mismatches;
  unsigned long long nan_values;
  unsigned long long nan_reference;
  unsigned long long max_abs_bits;
  unsigned long long first_bad_inv;
  double value;
  double reference;
};
static_assert(sizeof(DeviceCompareResult) == 56);

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
constexpr int kEventCount = kTimingBase + 2 * kMaxReplaysPerBatch;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Numbers in messages: enough digits to tell neighbouring fp32 values apart.
std::string Num(double v) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.9g", v);
  return text;
}

std::string Short(double v) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.4g", v);
  return text;
}

std::string Bytes(int64_t bytes) {
  if (bytes < (int64_t{1} << 20)) return absl::StrCat(bytes, " bytes");
  return absl::StrCat(bytes, " bytes (", Short(static_cast<double>(bytes) / (1 << 30)), " GiB)");
}

size_t AlignUp(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// How autotune_fill fills a buffer.
struct DeviceFill {
  int kind = kFillUniform;
  double a = -1;
  double b = 1;
};

DeviceFill ResolveFill(const v1::Fill& fill) {
  switch (fill.kind()) {
    case v1::Fill::UNIFORM:
      return {kFillUniform, fill.low(), fill.high()};
    case v1::Fill::NORMAL:
      return {kFillNormal, fill.low(), fill.high()};
    case v1::Fill::ZERO:
      return {kFillConstant, 0, 0};
    case v1::Fill::ONE:
      return {kFillConstant, 1, 0};
    default:
      // KIND_UNSPECIFIED: uniform in [low, high), [-1, 1) when both are 0.
      if (fill.low() == 0 && fill.high() == 0) return {kFillUniform, -1, 1};
      return {kFillUniform, fill.low(), fill.high()};
  }
}

// One buffer of the problem and where it lives.
struct BufferSlot {
  std::string name;
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  int64_t elements = 0;
  int64_t bytes = 0;
  v1::BufferRole role = v1::BUFFER_ROLE_UNSPECIFIED;
  DeviceFill fill;
  size_t offset = 0;         // in a set's allocation
  size_t output_offset = 0;  // in a reference slot (OUT and INOUT only)

  bool is_input() const { return role == v1::IN || role == v1::INOUT; }
  bool is_output() const { return role == v1::OUT || role == v1::INOUT; }
};

struct LaunchShape {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned dynamic_shared = 0;

  int64_t threads() const { return int64_t{block[0]} * block[1] * block[2]; }
  std::string GridText() const { return absl::StrCat(grid[0], "x", grid[1], "x", grid[2]); }
  std::string BlockText() const { return absl::StrCat(block[0], "x", block[1], "x", block[2]); }
};

// What the device allows one launch.
struct LaunchLimits {
  int64_t max_grid[3] = {0, 0, 0};
  int64_t max_block[3] = {0, 0, 0};
  int64_t max_threads_per_block = 0;
  int64_t max_shared_optin = 0;
  int sm_count = 1;
};

// The kernel arguments of one launch: device pointers then scalars, each in
// its own slot, and the array of their addresses cuLaunchKernel reads.
class KernelArgs {
 public:
  KernelArgs(std::vector<CUdeviceptr> pointers, std::vector<uint64_t> scalars)
      : pointers_(std::move(pointers)), scalars_(std::move(scalars)) {}

  // Valid until the next call or until the object moves; the driver copies
  // the values when the launch (or its capture) is made.
  void** params() {
    params_.clear();
    for (CUdeviceptr& pointer : pointers_) params_.push_back(&pointer);
    for (uint64_t& scalar : scalars_) params_.push_back(&scalar);
    return params_.data();
  }

 private:
  std::vector<CUdeviceptr> pointers_;
  std::vector<uint64_t> scalars_;
  std::vector<void*> params_;
};

// Why a variant, the reference or the task stopped.
struct Failure {
  v1::VariantStatus status = v1::UNSUPPORTED;
  std::string phase;
  std::string message;
};

// Short for the many call sites below.
using Origin = DriverCallOrigin;

// The device and what the profiler keeps on it between tasks. Members are
// destroyed in reverse order: the context goes last.
struct Gpu {
  const CudaDriver* driver = nullptr;
  CUdevice device = 0;
  PrimaryContext context;
  Stream stream;
  Module utility;
  CUfunction fill = nullptr;
  CUfunction compare = nullptr;
  CUfunction compare_finish = nullptr;
  std::vector<Event> events;
  LaunchLimits limits;
  wv1::DeviceInfo info;
  // Null when NVML cannot be used (info.nvml_error says why).
  std::unique_ptr<Nvml> nvml;

  const CudaDriver::Api& cu() const { return driver->api(); }
  CUevent event(int slot) const { return events[slot].get(); }

  absl::Status Launch(CUfunction function, const LaunchShape& shape, void** params,
                      const char* what) const {
    return driver->Check(cu().launch_kernel(function, shape.grid[0], shape.grid[1], shape.grid[2],
                                            shape.block[0], shape.block[1], shape.block[2],
                                            shape.dynamic_shared, stream.get(), params, nullptr),
                         absl::StrCat("cuLaunchKernel (", what, ")"));
  }

  absl::Status Record(int slot) const {
    return driver->Check(cu().event_record(event(slot), stream.get()), "cuEventRecord");
  }

  // Polls the event until it completes: never a blocking synchronise, so a
  // kernel that does not finish costs `timeout_s` and no more.
  // DEADLINE_EXCEEDED (no CUresult) when time runs out; the driver's error
  // when the work before the event failed.
  absl::Status Wait(int slot, double timeout_s, const std::string& what) const {
    const Clock::time_point start = Clock::now();
    while (true) {
      const CUresult rc = cu().event_query(event(slot));
      if (rc == CUDA_SUCCESS) return absl::OkStatus();
      if (rc != CUDA_ERROR_NOT_READY) {
        return CudaStatus(*driver, rc, absl::StrCat("cuEventQuery, waiting for ", what));
      }
      const double waited = SecondsSince(start);
      if (waited > timeout_s) {
        return absl::DeadlineExceededError(
            absl::StrCat(what, " did not finish within ", Short(timeout_s), " s (waited ",
                         Short(waited), " s); a kernel cannot be stopped, the worker must exit"));
      }
      // Short sleeps first: most waits end within a millisecond.
      std::this_thread::sleep_for(std::chrono::microseconds(waited < 0.02 ? 50 : 200));
    }
  }

  absl::StatusOr<double> ElapsedSeconds(int begin, int end) const {
    float ms = 0;
    RETURN_IF_ERROR(driver->Check(cu().event_elapsed_time(&ms, event(begin), event(end)),
                                  "cuEventElapsedTime"));
    return ms * 1e-3;
  }

  LaunchShape UtilityShape(int64_t elements) const {
    LaunchShape shape;
    const int64_t blocks = (elements + kUtilityBlock - 1) / kUtilityBlock;
    shape.grid[0] = static_cast<unsigned>(
        std::clamp<int64_t>(blocks, 1, int64_t{8} * std::max(limits.sm_count, 1)));
    shape.block[0] = kUtilityBlock;
    return shape;
  }

  absl::Status Fill(CUdeviceptr data, const BufferSlot& buffer, uint64_t seed,
                    uint64_t buffer_index) const {
    unsigned long long n = static_cast<unsigned long long>(buffer.elements);
    int dtype = static_cast<int>(buffer.dtype);
    int kind = buffer.fill.kind;
    double a = buffer.fill.a;
    double b = buffer.fill.b;
    unsigned long long seed_arg = seed;
    unsigned long long buffer_arg = buffer_index;
    void* params[] = {&data, &n, &dtype, &kind, &a, &b, &seed_arg, &buffer_arg};
    return Launch(fill, UtilityShape(buffer.elements), params, "autotune_fill");
  }

  // All bytes 0xFF: NaN in every floating type, so an element the kernel
  // does not write cannot pass for a result.
  absl::Status Poison(CUdeviceptr data, size_t bytes) const {
    return driver->Check(cu().memset_d8_async(data, 0xFF, bytes, stream.get()),
                         "cuMemsetD8Async (poison)");
  }

  absl::Status Compare(CUdeviceptr checked, CUdeviceptr reference, const BufferSlot& buffer,
                       double rtol, double atol, CUdeviceptr result) const {
    unsigned long long n = static_cast<unsigned long long>(buffer.elements);
    int dtype = static_cast<int>(buffer.dtype);
    void* params[] = {&checked, &reference, &n, &dtype, &rtol, &atol, &result};
    RETURN_IF_ERROR(Launch(compare, UtilityShape(buffer.elements), params, "autotune_compare"));
    void* finish_params[] = {&checked, &reference, &dtype, &result};
    LaunchShape one;
    return Launch(compare_finish, one, finish_params, "autotune_compare_finish");
  }
};

// A kernel under test, loaded and checked against the device.
struct LoadedKernel {
  Module module;
  CUfunction function = nullptr;
  LaunchShape shape;
  int registers = 0;
  int static_shared = 0;
  int local_bytes = 0;
  int max_threads = 0;
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

// The executable of process `pid`, "" when it cannot be read (another
// user's, another pid namespace's, gone).
std::string ExecutableOf(const std::string& proc_entry) {
  char path[4096];
  const ssize_t n = readlink(proc_entry.c_str(), path, sizeof(path) - 1);
  if (n <= 0) return "";
  return std::string(path, static_cast<size_t>(n));
}

// What NVML sees, this process left out: only others contend with us. So
// are the other profile workers of this executable (other daemons' idle
// workers keep a context open): they touch the GPU only while they hold its
// lease (base/gpu_lease.h), which excludes this worker's own task.
wv1::DeviceState DeviceStateOf(const NvmlSnapshot& snapshot, int default_clock_mhz) {
  wv1::DeviceState state;
  const uint32_t self = static_cast<uint32_t>(getpid());
  static const std::string* const own_executable = new std::string(ExecutableOf("/proc/self/exe"));
  for (const NvmlProcess& process : snapshot.processes) {
    if (process.pid == self) continue;
    if (!own_executable->empty() &&
        ExecutableOf(absl::StrCat("/proc/", process.pid, "/exe")) == *own_executable) {
      continue;
    }
    wv1::ForeignProcess* foreign = state.add_foreign();
    foreign->set_pid(static_cast<int32_t>(process.pid));
    foreign->set_used_memory_bytes(static_cast<int64_t>(process.used_memory_bytes));
  }
  state.set_utilization_percent(snapshot.utilization_percent);
  state.set_memory_used_bytes(snapshot.memory_used_bytes);
  state.set_sm_clock_mhz(snapshot.sm_clock_mhz);
  state.set_default_sm_clock_mhz(default_clock_mhz);
  return state;
}

// A variant's graph, captured over the timing pool and warmed up.
struct TimedGraph {
  GraphExec exec;
  int launches = 0;  // per replay (one sample)
  int sets = 0;
  int64_t pool_bytes = 0;
  double estimate_us = 0;  // one launch, from validation
  std::vector<std::string> notes;
};

// One ProfileTask from start to end; owns every buffer of the task.
class TaskRun {
 public:
  TaskRun(Gpu& gpu, bool* usable, const wv1::ProfileTask& task, const Emit& emit)
      : gpu_(gpu), usable_(usable), task_(task), emit_(emit) {}

  wv1::ProfileDone Execute();

 private:
  std::optional<Failure> Prepare();
  std::optional<Failure> AllocateProblem();
  std::optional<Failure> RunReference();
  std::optional<Failure> AllocatePool();
  wv1::VariantOutcome RunVariant(const wv1::KernelImage& image);
  // An outcome naming the task and the variant, with the task's tolerance.
  wv1::VariantOutcome NewOutcome(const wv1::KernelImage& image) const;
  std::optional<Failure> LoadKernel(const wv1::KernelImage& image, const std::string& load_phase,
                                    const std::string& check_phase, LoadedKernel* kernel);
  std::optional<std::string> CheckParameters(CUfunction function) const;
  std::optional<Failure> Validate(const LoadedKernel& kernel, wv1::VariantOutcome* outcome,
                                  double* estimate_us);
  std::optional<Failure> Time(const LoadedKernel& kernel, const wv1::KernelImage& image,
                              double estimate_us, wv1::VariantOutcome* outcome,
                              std::string* summary);
  absl::StatusOr<Graph> Capture(const LoadedKernel& kernel, int sets, int launches);
  // Replays `exec` until both `min_samples` samples and `budget_s` of GPU
  // time are reached (at most kMaxSamples).
  std::optional<Failure> Measure(CUgraphExec exec, int launches, double estimate_us,
                                 const std::string& phase, int min_samples, double budget_s,
                                 std::vector<double>* per_launch_us);
  // Plans the pool, captures the kernel's graph over it and warms it up.
  std::optional<Failure> PrepareGraph(const LoadedKernel& kernel, const wv1::KernelImage& image,
                                      double estimate_us, const std::string& phase,
                                      TimedGraph* timed);
  // Serial tasks: validates every variant, then times the valid ones in
  // interleaved rounds (worker.proto, SerialOptions).
  wv1::ProfileDone RunSerial(const std::function<wv1::ProfileDone(const std::optional<Failure>&,
                                                                  const std::string&)>& finish);
  // Reads NVML around a round; false when it cannot (watching is off).
  bool Watch(wv1::DeviceState* state);

  // Fills the inputs of set `set` from `seed`; poisons its outputs too when
  // asked (validation), not for the timing pool.
  absl::Status FillSet(size_t set, uint64_t seed, bool poison_outputs);
  // Compares each output of `checked` with `reference` (one pointer per
  // output buffer, in output order) and waits for the answer.
  absl::StatusOr<std::vector<BufferVerdict>> CompareOutputs(
      const std::vector<CUdeviceptr>& checked, const std::vector<CUdeviceptr>& reference);
  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes, const std::string& what);

  CUdeviceptr SetPointer(size_t set, const BufferSlot& buffer) const {
    return sets_[set].get() + buffer.offset;
  }
  CUdeviceptr ReferencePointer(size_t seed_index, const BufferSlot& buffer) const {
    return references_[seed_index].get() + buffer.output_offset;
  }
  std::vector<CUdeviceptr> OutputsOfSet(size_t set) const;
  std::vector<CUdeviceptr> OutputsOfReference(size_t seed_index) const;
  KernelArgs ArgsForSet(size_t set) const;
  KernelArgs ArgsForReference(size_t seed_index) const;

  // Turns a failed call into a Failure; a lost context (TIMEOUT, FAULT) is
  // recorded at once, before any owner could call the driver again.
  Failure Fail(const absl::Status& status, Origin origin, const std::string& phase);
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
  std::vector<DeviceBuffer> sets_;        // [0]: validation; all: timing pool
  std::vector<DeviceBuffer> references_;  // reference outputs, one per seed
  DeviceBuffer results_;                  // one DeviceCompareResult per output
  int max_pool_sets_ = 0;
  int64_t max_pool_bytes_ = 0;

  double task_gpu_s_ = 0;
  double variant_gpu_s_ = 0;
  double warmup_us_ = kWarmupUs;
  wv1::SerialReport serial_report_;
};

Failure TaskRun::Fail(const absl::Status& status, Origin origin, const std::string& phase) {
  const DriverFailure classified = ClassifyDriverFailure(status, origin);
  Failure failure{classified.status, phase, std::string(status.message())};
  if (classified.context_lost && *usable_) {
    *usable_ = false;
    // From here on freeing memory or unloading a module could wait for a
    // hung kernel: leak everything, the process exits.
    gpu_.driver->Abandon();
  }
  return failure;
}

absl::StatusOr<DeviceBuffer> TaskRun::Allocate(size_t bytes, const std::string& what) {
  absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(*gpu_.driver, bytes);
  if (!buffer.ok()) {
    absl::Status status(
        buffer.status().code(),
        absl::StrCat("allocating ", Bytes(static_cast<int64_t>(bytes)), " for ", what, " (",
                     Bytes(allocated_bytes_), " already allocated by this task, budget ",
                     Bytes(budget_bytes_), "): ", buffer.status().message()));
    // Keeps the CUresult, which decides what the failure means.
    buffer.status().ForEachPayload([&status](absl::string_view url, const absl::Cord& payload) {
      status.SetPayload(url, payload);
    });
    return status;
  }
  allocated_bytes_ += static_cast<int64_t>(bytes);
  peak_bytes_ = std::max(peak_bytes_, allocated_bytes_);
  return buffer;
}

std::vector<CUdeviceptr> TaskRun::OutputsOfSet(size_t set) const {
  std::vector<CUdeviceptr> pointers;
  for (size_t index : outputs_) pointers.push_back(SetPointer(set, buffers_[index]));
  return pointers;
}

std::vector<CUdeviceptr> TaskRun::OutputsOfReference(size_t seed_index) const {
  std::vector<CUdeviceptr> pointers;
  for (size_t index : outputs_) pointers.push_back(ReferencePointer(seed_index, buffers_[index]));
  return pointers;
}

KernelArgs TaskRun::ArgsForSet(size_t set) const {
  std::vector<CUdeviceptr> pointers;
  for (const BufferSlot& buffer : buffers_) pointers.push_back(SetPointer(set, buffer));
  return KernelArgs(std::move(pointers), scalars_);
}

KernelArgs TaskRun::ArgsForReference(size_t seed_index) const {
  std::vector<CUdeviceptr> pointers;
  for (const BufferSlot& buffer : buffers_) {
    pointers.push_back(buffer.is_output() ? ReferencePointer(seed_index, buffer)
                                          : SetPointer(0, buffer));
  }
  return KernelArgs(std::move(pointers), scalars_);
}

std::optional<Failure> TaskRun::Prepare() {
  auto invalid = [](std::string message) {
    return Failure{v1::UNSUPPORTED, "task", absl::StrCat("invalid task: ", message)};
  };
  if (task_.seeds() < kMinSeeds || !(task_.launch_timeout_s() > 0) ||
      !(task_.timing_budget_s() > 0) || task_.min_samples() <= 0) {
    return invalid(absl::StrCat("seeds (", task_.seeds(), ", at least ", kMinSeeds,
                                "), launch_timeout_s (", Num(task_.launch_timeout_s()),
                                "), timing_budget_s (", Num(task_.timing_budget_s()),
                                ") and min_samples (", task_.min_samples(), ") must be set"));
  }
  seeds_ = task_.seeds();
  launch_timeout_s_ = task_.launch_timeout_s();
  timing_budget_s_ = task_.timing_budget_s();
  min_samples_ = std::min(task_.min_samples(), kMaxSamples);
  if (task_.warmup_s() > 0 && std::isfinite(task_.warmup_s())) {
    warmup_us_ = std::min(task_.warmup_s(), 1.0) * 1e6;
  }
  cache_state_ = task_.cache_state() == v1::HOT ? v1::HOT : v1::COLD;
  rtol_ = task_.rtol();
  atol_ = task_.atol();
  if (!(rtol_ >= 0) || !(atol_ >= 0)) {
    return invalid(absl::StrCat("rtol ", Num(rtol_), " and atol ", Num(atol_),
                                " must be non-negative numbers"));
  }
  if (!std::isfinite(task_.launch_timeout_s()) || !std::isfinite(task_.timing_budget_s())) {
    return invalid("launch_timeout_s and timing_budget_s must be finite");
  }

  size_t offset = 0;
  for (int i = 0; i < task_.buffers_size(); ++i) {
    const wv1::BufferSpec& spec = task_.buffers(i);
    BufferSlot slot;
    slot.name = spec.name().empty() ? absl::StrCat("#", i) : spec.name();
    slot.dtype = spec.dtype();
    slot.role = spec.role();
    slot.elements = spec.elements();
    slot.fill = ResolveFill(spec.fill());
    const int64_t element_bytes = DTypeBytes(slot.dtype);
    if (element_bytes == 0) {
      return invalid(absl::StrCat("buffer '", slot.name, "' has no supported dtype (",
                                  DTypeName(slot.dtype), ")"));
    }
    if (!slot.is_input() && !slot.is_output()) {
      return invalid(absl::StrCat("buffer '", slot.name, "' has no role (IN, OUT or INOUT)"));
    }
    if (slot.elements <= 0 || slot.elements > (int64_t{1} << 50)) {
      return invalid(absl::StrCat("buffer '", slot.name, "' has ", slot.elements, " elements"));
    }
    slot.bytes = slot.elements * element_bytes;
    slot.offset = offset;
    offset += AlignUp(static_cast<size_t>(slot.bytes));
    if (slot.is_output()) {
      slot.output_offset = output_bytes_;
      output_bytes_ += AlignUp(static_cast<size_t>(slot.bytes));
      outputs_.push_back(buffers_.size());
    }
    buffers_.push_back(std::move(slot));
  }
  set_bytes_ = offset;
  if (outputs_.empty()) return invalid("no OUT or INOUT buffer to validate");

  for (int i = 0; i < task_.scalars_size(); ++i) {
    const wv1::ScalarSpec& spec = task_.scalars(i);
    absl::StatusOr<EncodedScalar> encoded = EncodeScalar(spec.dtype(), spec.value());
    if (!encoded.ok()) {
      return invalid(absl::StrCat("scalar '", spec.name(), "' (", DTypeName(spec.dtype()),
                                  "): ", encoded.status().message()));
    }
    scalars_.push_back(encoded->slot);
    scalar_sizes_.push_back(encoded->size);
  }
  if (task_.reference().cubin().empty() || task_.reference().lowered_name().empty()) {
    return invalid("the reference kernel has no cubin or no name");
  }
  return std::nullopt;
}

std::optional<Failure> TaskRun::AllocateProblem() {
  const std::string phase = "memory";
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  if (absl::Status status =
          gpu_.driver->Check(gpu_.cu().mem_get_info(&free_bytes, &total_bytes), "cuMemGetInfo");
      !status.ok()) {
    return Fail(status, Origin::kSetup, phase);
  }
  if (task_.max_memory_bytes() > 0) {
    budget_bytes_ = task_.max_memory_bytes();
    budget_origin_ = "the task's max_memory_bytes";
  } else {
    budget_bytes_ = static_cast<int64_t>(free_bytes / 4 * 3);
    budget_origin_ =
        absl::StrCat("3/4 of the ", Bytes(static_cast<int64_t>(free_bytes)), " free on the device");
  }
  const size_t results_bytes = AlignUp(outputs_.size() * sizeof(DeviceCompareResult));
  problem_bytes_ = static_cast<int64_t>(set_bytes_ + seeds_ * output_bytes_ + results_bytes);
  if (problem_bytes_ > budget_bytes_) {
    return Failure{
        v1::UNSUPPORTED, phase,
        absl::StrCat("the problem needs ", Bytes(problem_bytes_), ": one set of buffers of ",
                     Bytes(static_cast<int64_t>(set_bytes_)), " and the reference outputs of ",
                     seeds_, " seeds of ", Bytes(static_cast<int64_t>(output_bytes_)),
                     " each; the budget is ", Bytes(budget_bytes_), " (", budget_origin_, ")")};
  }
  absl::StatusOr<DeviceBuffer> set = Allocate(set_bytes_, "the problem's buffers");
  if (!set.ok()) return Fail(set.status(), Origin::kSetup, phase);
  sets_.push_back(*std::move(set));
  for (int i = 0; i < seeds_; ++i) {
    absl::StatusOr<DeviceBuffer> reference =
        Allocate(output_bytes_, absl::StrCat("the reference outputs of seed ",
                                             task_.base_seed() + static_cast<uint64_t>(i)));
    if (!reference.ok()) return Fail(reference.status(), Origin::kSetup, phase);
    references_.push_back(*std::move(reference));
  }
  absl::StatusOr<DeviceBuffer> results = Allocate(results_bytes, "comparison results");
  if (!results.ok()) return Fail(results.status(), Origin::kSetup, phase);
  results_ = *std::move(results);
  return std::nullopt;
}

absl::Status TaskRun::FillSet(size_t set, uint64_t seed, bool poison_outputs) {
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const BufferSlot& buffer = buffers_[i];
    if (buffer.is_input()) {
      RETURN_IF_ERROR(gpu_.Fill(SetPointer(set, buffer), buffer, seed, i));
    } else if (poison_outputs) {
      RETURN_IF_ERROR(gpu_.Poison(SetPointer(set, buffer), static_cast<size_t>(buffer.bytes)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<BufferVerdict>> TaskRun::CompareOutputs(
    const std::vector<CUdeviceptr>& checked, const std::vector<CUdeviceptr>& reference) {
  RETURN_IF_ERROR(gpu_.Record(kCompareBegin));
  RETURN_IF_ERROR(gpu_.driver->Check(
      gpu_.cu().memset_d8_async(results_.get(), 0, outputs_.size() * sizeof(DeviceCompareResult),
                                gpu_.stream.get()),
      "cuMemsetD8Async (comparison results)"));
  for (size_t j = 0; j < outputs_.size(); ++j) {
    RETURN_IF_ERROR(gpu_.Compare(checked[j], reference[j], buffers_[outputs_[j]], rtol_, atol_,
                                 results_.get() + j * sizeof(DeviceCompareResult)));
  }
  std::vector<DeviceCompareResult> host(outputs_.size());
  // Pageable memory: the copy is ordered in the stream all the same, and
  // the event after it says when the bytes have landed.
  RETURN_IF_ERROR(gpu_.driver->Check(
      gpu_.cu().memcpy_dtoh_async(host.data(), results_.get(),
                                  host.size() * sizeof(DeviceCompareResult), gpu_.stream.get()),
      "cuMemcpyDtoHAsync (comparison results)"));
  RETURN_IF_ERROR(gpu_.Record(kCompareEnd));
  RETURN_IF_ERROR(gpu_.Wait(kCompareEnd, kUtilityTimeoutS, "the comparison of the outputs"));
  ASSIGN_OR_RETURN(double seconds, gpu_.ElapsedSeconds(kCompareBegin, kCompareEnd));
  AddGpuTime(seconds);
  std::vector<BufferVerdict> verdicts(outputs_.size());
  for (size_t j = 0; j < outputs_.size(); ++j) {
    verdicts[j].buffer = &buffers_[outputs_[j]];
    verdicts[j].result = host[j];
  }
  return verdicts;
}

std::optional<std::string> TaskRun::CheckParameters(CUfunction function) const {
  const auto get_info = gpu_.cu().func_get_param_info;
  if (get_info == nullptr) return std::nullopt;  // the driver cannot tell
  std::vector<size_t> expected;
  std::vector<std::string> what;
  for (const BufferSlot& buffer : buffers_) {
    expected.push_back(sizeof(CUdeviceptr));
    what.push_back(absl::StrCat("buffer '", buffer.name, "' (a pointer)"));
  }
  for (int i = 0; i < task_.scalars_size(); ++i) {
    expected.push_back(scalar_sizes_[i]);
    what.push_back(absl::StrCat("scalar '", task_.scalars(i).name(), "' (",
                                DTypeName(task_.scalars(i).dtype()), ")"));
  }
  const std::string passes =
      absl::StrCat("the task passes ", expected.size(), " (", buffers_.size(), " buffers, ",
                   scalars_.size(), " scalars)");
  for (size_t i = 0; i <= expected.size(); ++i) {
    size_t offset = 0;
    size_t size = 0;
    const CUresult rc = get_info(function, i, &offset, &size);
    if (rc == CUDA_ERROR_INVALID_VALUE) {
      if (i == expected.size()) return std::nullopt;  // exactly as many
      return absl::StrCat("the kernel takes ", i, " parameters; ", passes);
    }
    if (rc != CUDA_SUCCESS) return std::nullopt;  // cannot tell; the launch will
    if (i == expected.size()) {
      return absl::StrCat("the kernel takes more than ", expected.size(), " parameters; ", passes);
    }
    if (size != expected[i]) {
      return absl::StrCat("parameter ", i, " of the kernel is ", size, " bytes; the task passes ",
                          what[i], " of ", expected[i], " bytes there");
    }
  }
  return std::nullopt;
}

std::optional<Failure> TaskRun::LoadKernel(const wv1::KernelImage& image,
                                           const std::string& load_phase,
                                           const std::string& check_phase, LoadedKernel* kernel) {
  if (image.cubin().empty()) return Failure{v1::UNSUPPORTED, load_phase, "the image is empty"};
  if (image.lowered_name().empty()) {
    return Failure{v1::UNSUPPORTED, load_phase, "the image names no kernel (lowered_name)"};
  }
  // The proto's bytes are a std::string: NUL-terminated, as the driver
  // wants a PTX image to be.
  absl::StatusOr<Module> module = Module::Load(*gpu_.driver, image.cubin().data());
  if (!module.ok()) return Fail(module.status(), Origin::kLoad, load_phase);
  kernel->module = *std::move(module);
  absl::StatusOr<CUfunction> function = kernel->module.Function(image.lowered_name());
  if (!function.ok()) return Fail(function.status(), Origin::kLoad, load_phase);
  kernel->function = *function;

  const CudaDriver::Api& cu = gpu_.cu();
  struct {
    CUfunction_attribute attribute;
    int* value;
    const char* name;
  } attributes[] = {
      {CU_FUNC_ATTRIBUTE_NUM_REGS, &kernel->registers, "NUM_REGS"},
      {CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &kernel->static_shared, "SHARED_SIZE_BYTES"},
      {CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &kernel->local_bytes, "LOCAL_SIZE_BYTES"},
      {CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &kernel->max_threads, "MAX_THREADS_PER_BLOCK"},
  };
  // With lazy loading (the default) this is where the function is really
  // loaded, so image errors can show here rather than at cuModuleLoadDataEx.
  for (const auto& entry : attributes) {
    absl::Status status =
        gpu_.driver->Check(cu.func_get_attribute(entry.value, entry.attribute, kernel->function),
                           absl::StrCat("cuFuncGetAttribute(", entry.name, ")"));
    if (!status.ok()) return Fail(status, Origin::kLoad, load_phase);
  }

  // Launch shape against the device and the function.
  const v1::LaunchDims& dims = image.launch();
  LaunchShape& shape = kernel->shape;
  auto unsupported = [&](std::string message) {
    return Failure{v1::UNSUPPORTED, check_phase, std::move(message)};
  };
  if (dims.grid_size() < 1 || dims.grid_size() > 3 || dims.block_size() < 1 ||
      dims.block_size() > 3) {
    return unsupported(absl::StrCat("the launch has ", dims.grid_size(), " grid and ",
                                    dims.block_size(), " block dimensions (1 to 3 each)"));
  }
  static constexpr const char* kAxis[] = {"x", "y", "z"};
  for (int d = 0; d < dims.grid_size(); ++d) {
    if (dims.grid(d) < 1 || dims.grid(d) > gpu_.limits.max_grid[d]) {
      return unsupported(absl::StrCat("grid ", kAxis[d], " = ", dims.grid(d),
                                      " is outside the device's range 1..",
                                      gpu_.limits.max_grid[d]));
    }
    shape.grid[d] = static_cast<unsigned>(dims.grid(d));
  }
  for (int d = 0; d < dims.block_size(); ++d) {
    if (dims.block(d) < 1 || dims.block(d) > gpu_.limits.max_block[d]) {
      return unsupported(absl::StrCat("block ", kAxis[d], " = ", dims.block(d),
                                      " is outside the device's range 1..",
                                      gpu_.limits.max_block[d]));
    }
    shape.block[d] = static_cast<unsigned>(dims.block(d));
  }
  if (shape.threads() > kernel->max_threads) {
    return unsupported(absl::StrCat(
        "block ", shape.BlockText(), " = ", shape.threads(), " threads; the kernel allows at most ",
        kernel->max_threads, " per block (it uses ", kernel->registers, " registers per thread)"));
  }
  const int64_t dynamic_shared = dims.dynamic_shared_bytes();
  if (dynamic_shared < 0 || kernel->static_shared + dynamic_shared > gpu_.limits.max_shared_optin) {
    return unsupported(absl::StrCat("shared memory: ", kernel->static_shared, " bytes static + ",
                                    dynamic_shared, " bytes dynamic exceeds the device's ",
                                    gpu_.limits.max_shared_optin, " bytes per block"));
  }
  shape.dynamic_shared = static_cast<unsigned>(dynamic_shared);
  if (std::optional<std::string> problem = CheckParameters(kernel->function)) {
    return unsupported(*std::move(problem));
  }
  if (dynamic_shared > 0) {
    // Above 48 KiB a kernel must opt in; asking only when the current limit
    // is too low leaves kernels that need nothing untouched.
    int allowed = 0;
    absl::Status status = gpu_.driver->Check(
        cu.func_get_attribute(&allowed, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                              kernel->function),
        "cuFuncGetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    if (status.ok() && dynamic_shared > allowed) {
      status = gpu_.driver->Check(
          cu.func_set_attribute(kernel->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                static_cast<int>(dynamic_shared)),
          absl::StrCat("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, ", dynamic_shared, ")"));
    }
    if (!status.ok()) return Fail(status, Origin::kLoad, check_phase);
  }
  return std::nullopt;
}

std::optional<Failure> TaskRun::RunReference() {
  const wv1::KernelImage& image = task_.reference();
  LoadedKernel kernel;
  if (std::optional<Failure> failure =
          LoadKernel(image, "reference load", "reference check", &kernel)) {
    return failure;
  }
  for (int i = 0; i < seeds_; ++i) {
    const uint64_t seed = task_.base_seed() + static_cast<uint64_t>(i);
    const std::string phase = absl::StrCat("reference seed ", seed);
    absl::Status status = gpu_.Record(kSpanBegin);
    // The reference writes straight into this seed's slot: INOUT buffers
    // are filled there, OUT buffers poisoned there; IN buffers are set 0's.
    for (size_t b = 0; b < buffers_.size() && status.ok(); ++b) {
      const BufferSlot& buffer = buffers_[b];
      if (buffer.role == v1::IN) {
        status = gpu_.Fill(SetPointer(0, buffer), buffer, seed, b);
      } else if (buffer.role == v1::INOUT) {
        status = gpu_.Fill(ReferencePointer(i, buffer), buffer, seed, b);
      } else {
        status = gpu_.Poison(ReferencePointer(i, buffer), static_cast<size_t>(buffer.bytes));
      }
    }
    if (!status.ok()) return Fail(status, Origin::kSetup, phase);
    KernelArgs args = ArgsForReference(i);
    status = gpu_.Launch(kernel.function, kernel.shape, args.params(), "reference");
    if (!status.ok()) return Fail(status, Origin::kLaunch, phase);
    if (status = gpu_.Record(kLaunchEnd); !status.ok()) return Fail(status, Origin::kSetup, phase);
    status = gpu_.Wait(kLaunchEnd, launch_timeout_s_, "the reference's launch");
    if (!status.ok()) return Fail(status, Origin::kWait, phase);
    absl::StatusOr<double> seconds = gpu_.ElapsedSeconds(kSpanBegin, kLaunchEnd);
    if (!seconds.ok()) return Fail(seconds.status(), Origin::kSetup, phase);
    AddGpuTime(*seconds);

    // A reference that leaves NaN would fail every variant ("NaN never
    // passes"): say so once, here.
    absl::StatusOr<std::vector<BufferVerdict>> verdicts =
        CompareOutputs(OutputsOfReference(i), OutputsOfReference(i));
    if (!verdicts.ok()) return Fail(verdicts.status(), Origin::kSetup, phase);
    for (const BufferVerdict& verdict : *verdicts) {
      if (verdict.result.nan_reference > 0) {
        return Failure{
            v1::WRONG_RESULT, phase,
            absl::StrCat("the reference left ", verdict.result.nan_reference, " of ",
                         verdict.buffer->elements, " elements of '", verdict.buffer->name,
                         "' NaN (unwritten or not a number), first at index ",
                         ~verdict.result.first_bad_inv)};
      }
    }
  }
  return std::nullopt;
}

std::optional<Failure> TaskRun::AllocatePool() {
  const std::string phase = "pool";
  const int64_t set_bytes = static_cast<int64_t>(set_bytes_);
  const int64_t pool_budget = budget_bytes_ - problem_bytes_ + set_bytes;  // set 0 is paid
  int sets = 1;
  for (const wv1::KernelImage& image : task_.variants()) {
    const InputPoolPlan plan = PlanInputPool(image.bytes_per_call(), set_bytes,
                                             gpu_.info.l2_bytes(), cache_state_, pool_budget);
    sets = std::max(sets, std::min(plan.sets, kMaxLaunchesPerSample));
  }
  if (sets <= 1) return std::nullopt;
  absl::Status status = gpu_.Record(kSpanBegin);
  if (!status.ok()) return Fail(status, Origin::kSetup, phase);
  for (int s = 1; s < sets; ++s) {
    absl::StatusOr<DeviceBuffer> set =
        Allocate(set_bytes_, absl::StrCat("input set ", s, " of ", sets, " of the timing pool"));
    if (!set.ok()) return Fail(set.status(), Origin::kSetup, phase);
    sets_.push_back(*std::move(set));
    // Seeds distinct from each other and from set 0's, which holds the
    // last validation seed when timing starts.
    const uint64_t seed = task_.base_seed() + static_cast<uint64_t>(seeds_ - 1 + s);
    if (status = FillSet(sets_.size() - 1, seed, false); !status.ok()) {
      return Fail(status, Origin::kSetup, phase);
    }
  }
  if (status = gpu_.Record(kCompareEnd); !status.ok()) return Fail(status, Origin::kSetup, phase);
  if (status = gpu_.Wait(kCompareEnd, kUtilityTimeoutS, "filling the timing pool"); !status.ok()) {
    return Fail(status, Origin::kSetup, phase);
  }
  absl::StatusOr<double> seconds = gpu_.ElapsedSeconds(kSpanBegin, kCompareEnd);
  if (!seconds.ok()) return Fail(seconds.status(), Origin::kSetup, phase);
  AddGpuTime(*seconds);
  return std::nullopt;
}

std::optional<Failure> TaskRun::Validate(const LoadedKernel& kernel, wv1::VariantOutcome* outcome,
                                         double* estimate_us) {
  KernelArgs args = ArgsForSet(0);
  double max_error = 0;
  uint64_t worst_seed = task_.base_seed();
  double fastest_s = std::numeric_limits<double>::infinity();
  for (int i = 0; i < seeds_; ++i) {
    const uint64_t seed = task_.base_seed() + static_cast<uint64_t>(i);
    const std::string phase = absl::StrCat("validate seed ", seed);
    absl::Status status = gpu_.Record(kSpanBegin);
    if (status.ok()) status = FillSet(0, seed, /*poison_outputs=*/true);
    if (status.ok()) status = gpu_.Record(kLaunchBegin);
    if (!status.ok()) return Fail(status, Origin::kSetup, phase);
    status = gpu_.Launch(kernel.function, kernel.shape, args.params(), "variant");
    if (!status.ok()) return Fail(status, Origin::kLaunch, phase);
    if (status = gpu_.Record(kLaunchEnd); !status.ok()) return Fail(status, Origin::kWait, phase);
    status = gpu_.Wait(kLaunchEnd, launch_timeout_s_, "the variant's launch");
    if (!status.ok()) return Fail(status, Origin::kWait, phase);
    absl::StatusOr<double> span = gpu_.ElapsedSeconds(kSpanBegin, kLaunchEnd);
    absl::StatusOr<double> launch = gpu_.ElapsedSeconds(kLaunchBegin, kLaunchEnd);
    if (!span.ok()) return Fail(span.status(), Origin::kSetup, phase);
    if (!launch.ok()) return Fail(launch.status(), Origin::kSetup, phase);
    AddGpuTime(*span);
    fastest_s = std::min(fastest_s, *launch);

    absl::StatusOr<std::vector<BufferVerdict>> verdicts =
        CompareOutputs(OutputsOfSet(0), OutputsOfReference(i));
    if (!verdicts.ok()) return Fail(verdicts.status(), Origin::kSetup, phase);
    outcome->set_seeds_checked(i + 1);
    const BufferVerdict* bad = nullptr;
    for (const BufferVerdict& verdict : *verdicts) {
      // NaN wins and stays: the worst error there can be.
      const double error = verdict.error();
      if (!std::isnan(max_error) && (std::isnan(error) || error > max_error)) {
        max_error = error;
        worst_seed = seed;
      }
      if (bad == nullptr && verdict.result.mismatches > 0) bad = &verdict;
    }
    outcome->set_max_error(max_error);
    outcome->set_worst_seed(worst_seed);
    if (bad == nullptr) continue;

    outcome->set_worst_seed(seed);
    const DeviceCompareResult& r = bad->result;
    const BufferSlot& buffer = *bad->buffer;
    const unsigned long long first = ~r.first_bad_inv;
    std::string message;
    if (r.nan_values == r.mismatches && r.nan_reference == 0) {
      message = absl::StrCat(r.nan_values, " of ", buffer.elements, " elements of '", buffer.name,
                             "' are NaN (unwritten or not a number), first at index ", first);
    } else {
      message = absl::StrCat(r.mismatches, " of ", buffer.elements, " elements of '", buffer.name,
                             "' differ beyond rtol ", Num(rtol_), " atol ", Num(atol_),
                             "; max |v - r| ", Num(bad->max_abs()), "; first at index ", first,
                             " (v=", Num(r.value), ", r=", Num(r.reference), ")");
      if (r.nan_values > 0) {
        absl::StrAppend(&message, "; ", r.nan_values, " of them NaN (unwritten or not a number)");
      }
      if (r.nan_reference > 0) {
        absl::StrAppend(&message, "; ", r.nan_reference, " NaN in the reference");
      }
    }
    return Failure{v1::WRONG_RESULT, phase, std::move(message)};
  }
  *estimate_us = fastest_s * 1e6;
  return std::nullopt;
}

absl::StatusOr<Graph> TaskRun::Capture(const LoadedKernel& kernel, int sets, int launches) {
  std::vector<KernelArgs> args;
  args.reserve(static_cast<size_t>(sets));
  for (int s = 0; s < sets; ++s) args.push_back(ArgsForSet(static_cast<size_t>(s)));
  // Thread-local mode: only this thread's unsafe calls could break the
  // capture, and this thread makes none while capturing.
  RETURN_IF_ERROR(gpu_.driver->Check(
      gpu_.cu().stream_begin_capture(gpu_.stream.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
      "cuStreamBeginCapture"));
  absl::Status launched;
  for (int i = 0; i < launches && launched.ok(); ++i) {
    launched =
        gpu_.Launch(kernel.function, kernel.shape, args[i % sets].params(), "variant, captured");
  }
  // Always end the capture, even after a failed launch: a stream left
  // capturing refuses all later work.
  CUgraph raw = nullptr;
  const CUresult ended = gpu_.cu().stream_end_capture(gpu_.stream.get(), &raw);
  Graph graph(*gpu_.driver, raw);
  RETURN_IF_ERROR(launched);
  RETURN_IF_ERROR(gpu_.driver->Check(ended, "cuStreamEndCapture"));
  if (!graph) return absl::InternalError("cuStreamEndCapture returned no graph");
  return graph;
}

std::optional<Failure> TaskRun::Measure(CUgraphExec exec, int launches, double estimate_us,
                                        const std::string& phase, int min_samples, double budget_s,
                                        std::vector<double>* per_launch_us) {
  per_launch_us->clear();
  const double replay_us = std::max(estimate_us, 1.0) * launches;
  const int per_batch =
      std::clamp(static_cast<int>(kBatchTargetUs / replay_us), 1, kMaxReplaysPerBatch);
  double timed_s = 0;
  while (static_cast<int>(per_launch_us->size()) < kMaxSamples &&
         (static_cast<int>(per_launch_us->size()) < min_samples || timed_s < budget_s)) {
    const int batch = std::min(per_batch, kMaxSamples - static_cast<int>(per_launch_us->size()));
    for (int j = 0; j < batch; ++j) {
      absl::Status status = gpu_.Record(kTimingBase + 2 * j);
      if (!status.ok()) return Fail(status, Origin::kWait, phase);
      status = gpu_.driver->Check(gpu_.cu().graph_launch(exec, gpu_.stream.get()), "cuGraphLaunch");
      if (!status.ok()) return Fail(status, Origin::kLaunch, phase);
      status = gpu_.Record(kTimingBase + 2 * j + 1);
      if (!status.ok()) return Fail(status, Origin::kWait, phase);
    }
    absl::Status status =
        gpu_.Wait(kTimingBase + 2 * batch - 1, launch_timeout_s_ * launches * batch,
                  absl::StrCat(batch, " graph replays of ", launches, " launches"));
    if (!status.ok()) return Fail(status, Origin::kWait, phase);
    for (int j = 0; j < batch; ++j) {
      absl::StatusOr<double> seconds =
          gpu_.ElapsedSeconds(kTimingBase + 2 * j, kTimingBase + 2 * j + 1);
      if (!seconds.ok()) return Fail(seconds.status(), Origin::kWait, phase);
      per_launch_us->push_back(*seconds * 1e6 / launches);
      timed_s += *seconds;
    }
  }
  AddGpuTime(timed_s);
  return std::nullopt;
}

std::optional<Failure> TaskRun::PrepareGraph(const LoadedKernel& kernel,
                                             const wv1::KernelImage& image, double estimate_us,
                                             const std::string& phase, TimedGraph* timed) {
  const int64_t set_bytes = static_cast<int64_t>(set_bytes_);
  const InputPoolPlan plan =
      PlanInputPool(image.bytes_per_call(), set_bytes, gpu_.info.l2_bytes(), cache_state_,
                    budget_bytes_ - problem_bytes_ + set_bytes);
  const int sets = std::max(1, std::min(plan.sets, static_cast<int>(sets_.size())));
  if (sets < plan.sets) {
    timed->notes.push_back(absl::StrCat("rotating over ", sets, " input sets, fewer than the ",
                                        plan.sets, " whose touched bytes exceed 2x L2 (at most ",
                                        kMaxLaunchesPerSample,
                                        " launches per sample): the timing is partly warm"));
  }
  timed->sets = sets;
  timed->pool_bytes = sets * plan.touched_bytes_per_launch;
  max_pool_sets_ = std::max(max_pool_sets_, sets);
  max_pool_bytes_ = std::max(max_pool_bytes_, timed->pool_bytes);

  // A sample is a whole number of cycles over the sets, so every set is
  // visited equally; enough launches and kernel time that the replay's own
  // overhead is small beside them.
  const double launch_us = std::max(estimate_us, 0.5);
  int64_t cycles =
      std::max<int64_t>({1, (kMinLaunchesPerSample + sets - 1) / sets,
                         static_cast<int64_t>(std::ceil(kMinSampleUs / (launch_us * sets)))});
  cycles = std::min<int64_t>(cycles, std::max(1, kMaxLaunchesPerSample / sets));
  timed->launches = static_cast<int>(cycles * sets);
  timed->estimate_us = estimate_us;
  const int launches = timed->launches;

  // INOUT buffers are updated in place by every launch of the pool, so
  // later launches see data earlier ones wrote: accepted, since the timing
  // only needs realistic memory traffic, not valid results.
  absl::StatusOr<Graph> graph = Capture(kernel, sets, launches);
  if (!graph.ok()) return Fail(graph.status(), Origin::kLaunch, phase);
  absl::StatusOr<GraphExec> exec = GraphExec::Instantiate(*gpu_.driver, *graph);
  if (!exec.ok()) return Fail(exec.status(), Origin::kLaunch, phase);

  // Warm-up replays upload the graph and settle clocks and caches.
  absl::Status status = gpu_.Record(kWarmBegin);
  if (!status.ok()) return Fail(status, Origin::kSetup, phase);
  const int warmup_replays =
      std::clamp(static_cast<int>(std::ceil(warmup_us_ / (std::max(estimate_us, 0.5) * launches))),
                 kMinWarmupReplays, kMaxWarmupReplays);
  for (int w = 0; w < warmup_replays; ++w) {
    status = gpu_.driver->Check(gpu_.cu().graph_launch(exec->get(), gpu_.stream.get()),
                                "cuGraphLaunch (warm-up)");
    if (!status.ok()) return Fail(status, Origin::kLaunch, phase);
  }
  if (status = gpu_.Record(kWarmEnd); !status.ok()) return Fail(status, Origin::kWait, phase);
  status = gpu_.Wait(kWarmEnd, launch_timeout_s_ * launches * warmup_replays,
                     absl::StrCat(warmup_replays, " warm-up replays of ", launches, " launches"));
  if (!status.ok()) return Fail(status, Origin::kWait, phase);
  absl::StatusOr<double> warm = gpu_.ElapsedSeconds(kWarmBegin, kWarmEnd);
  if (!warm.ok()) return Fail(warm.status(), Origin::kWait, phase);
  AddGpuTime(*warm);
  timed->exec = *std::move(exec);
  return std::nullopt;
}

std::optional<Failure> TaskRun::Time(const LoadedKernel& kernel, const wv1::KernelImage& image,
                                     double estimate_us, wv1::VariantOutcome* outcome,
                                     std::string* summary) {
  std::string phase = "time";
  TimedGraph timed;
  if (std::optional<Failure> failure = PrepareGraph(kernel, image, estimate_us, phase, &timed)) {
    return failure;
  }
  const int sets = timed.sets;
  const int launches = timed.launches;
  const int64_t pool_bytes = timed.pool_bytes;
  std::vector<std::string>& notes = timed.notes;
  outcome->set_pool_sets(sets);
  outcome->set_pool_bytes(pool_bytes);
  outcome->set_launches_per_sample(launches);

  std::vector<double> per_launch_us;
  if (std::optional<Failure> failure = Measure(timed.exec.get(), launches, estimate_us, phase,
                                               min_samples_, timing_budget_s_, &per_launch_us)) {
    return failure;
  }
  v1::TimingStats stats =
      SummarizeTimes(per_launch_us, image.bytes_per_call(), image.flops_per_call());
  const double floor_us = BandwidthFloorUs(image.bytes_per_call(), gpu_.info.peak_bandwidth_gbps());
  if (cache_state_ == v1::COLD && floor_us > 0 && stats.median_us() < floor_us) {
    // Faster than DRAM allows for the bytes it claims: measured once more
    // before it is believed (clocks, a disturbance); the second stands.
    phase = "remeasure";
    outcome->set_remeasured(1);
    if (std::optional<Failure> failure = Measure(timed.exec.get(), launches, estimate_us, phase,
                                                 min_samples_, timing_budget_s_, &per_launch_us)) {
      return failure;
    }
    stats = SummarizeTimes(per_launch_us, image.bytes_per_call(), image.flops_per_call());
    if (stats.median_us() < floor_us) {
      notes.push_back(absl::StrCat(
          "the median stays below the DRAM bound of ", Short(floor_us), " us (",
          Num(image.bytes_per_call()), " bytes at ", Short(gpu_.info.peak_bandwidth_gbps()),
          " GB/s): one launch moves fewer bytes than bytes_per_call says, or they stay in L2"));
    }
  }
  *outcome->mutable_timing() = stats;
  *summary =
      absl::StrCat("median ", Short(stats.median_us()), " us (min ", Short(stats.min_us()),
                   ", p90 ", Short(stats.p90_us()), ", cv ", Short(stats.cv() * 100), "%) over ",
                   stats.samples(), " replays of ", launches, " launches, ", sets,
                   sets == 1 ? " input set" : " input sets", " touching ", Bytes(pool_bytes));
  if (stats.achieved_gbps() > 0)
    absl::StrAppend(summary, "; ", Short(stats.achieved_gbps()), " GB/s");
  if (stats.achieved_tflops() > 0) {
    absl::StrAppend(summary, "; ", Short(stats.achieved_tflops()), " TFLOP/s");
  }
  for (const std::string& note : notes) absl::StrAppend(summary, "; note: ", note);
  outcome->set_phase(phase);
  return std::nullopt;
}

wv1::VariantOutcome TaskRun::NewOutcome(const wv1::KernelImage& image) const {
  wv1::VariantOutcome outcome;
  outcome.set_task_id(task_.task_id());
  outcome.set_variant_id(image.id());
  outcome.set_rtol(rtol_);
  outcome.set_atol(atol_);
  return outcome;
}

wv1::VariantOutcome TaskRun::RunVariant(const wv1::KernelImage& image) {
  const Clock::time_point start = Clock::now();
  variant_gpu_s_ = 0;
  wv1::VariantOutcome outcome = NewOutcome(image);
  const std::string label = image.label().empty() ? image.id() : image.label();
  std::string summary;
  std::optional<Failure> failure;
  {
    // The module is unloaded at the end of this scope, after all its work
    // finished (or, when the context is lost, never: see Fail()).
    LoadedKernel kernel;
    failure = LoadKernel(image, "load", "check", &kernel);
    outcome.set_registers(kernel.registers);
    outcome.set_static_shared_bytes(kernel.static_shared);
    double estimate_us = 0;
    if (!failure) failure = Validate(kernel, &outcome, &estimate_us);
    if (!failure) {
      summary = absl::StrCat("valid over ", seeds_, " seeds (max |v - r| ",
                             Num(outcome.max_error()), ")");
      outcome.set_phase("validate");
    }
    if (!failure && !task_.validate_only()) {
      std::string timing;
      failure = Time(kernel, image, estimate_us, &outcome, &timing);
      absl::StrAppend(&summary, "; ", timing);
    }
  }
  if (failure) {
    outcome.set_status(failure->status);
    outcome.set_phase(failure->phase);
    outcome.set_detail(Detail(label, failure->phase, failure->message));
    outcome.clear_timing();
  } else {
    outcome.set_status(v1::OK);
    outcome.set_detail(Detail(label, outcome.phase(), summary));
  }
  outcome.set_gpu_seconds(variant_gpu_s_);
  outcome.set_wall_seconds(SecondsSince(start));
  return outcome;
}

wv1::ProfileDone TaskRun::Execute() {
  const Clock::time_point start = Clock::now();
  wv1::ProfileDone done;
  done.set_task_id(task_.task_id());
  auto finish = [&](const std::optional<Failure>& failure, const std::string& summary) {
    if (failure) {
      done.set_status(failure->status);
      done.set_phase(failure->phase);
      done.set_detail(absl::StrCat(Prefix(), ": ", failure->phase, ": ", failure->message));
    } else {
      done.set_status(v1::OK);
      done.set_detail(absl::StrCat(Prefix(), ": ", summary));
    }
    done.set_gpu_seconds(task_gpu_s_);
    done.set_wall_seconds(SecondsSince(start));
    done.set_peak_memory_bytes(peak_bytes_);
    done.set_pool_sets(max_pool_sets_);
    done.set_pool_bytes(max_pool_bytes_);
    if (!failure && task_.has_serial()) *done.mutable_serial() = serial_report_;
    return done;
  };

  if (!*usable_) {
    return finish(
        Failure{v1::FAULT, "task", "the GPU context is unusable after an earlier fault or timeout"},
        "");
  }
  if (std::optional<Failure> failure = Prepare()) return finish(failure, "");
  if (absl::Status status = gpu_.context.MakeCurrent(); !status.ok()) {
    return finish(Fail(status, Origin::kSetup, "task"), "");
  }
  if (std::optional<Failure> failure = AllocateProblem()) return finish(failure, "");
  if (std::optional<Failure> failure = RunReference()) return finish(failure, "");
  if (!task_.validate_only()) {
    if (std::optional<Failure> failure = AllocatePool()) return finish(failure, "");
  }

  if (task_.has_serial() && !task_.validate_only()) return RunSerial(finish);

  std::map<std::string, int> counts;
  const int variants = task_.variants_size();
  for (int i = 0; i < variants; ++i) {
    const wv1::VariantOutcome outcome = RunVariant(task_.variants(i));
    emit_(outcome);
    ++counts[v1::VariantStatus_Name(outcome.status())];
    if (!*usable_) {
      return finish(
          Failure{outcome.status(), absl::StrCat("variant ", outcome.variant_id()),
                  absl::StrCat("variant '", outcome.variant_id(), "' ended in ",
                               v1::VariantStatus_Name(outcome.status()), " at ", outcome.phase(),
                               " and left the GPU context unusable; ", variants - i - 1,
                               " variants not run (a new worker must run them)")},
          "");
    }
  }
  // A launch the driver refused may leave fills of ours in the stream;
  // nothing may be freed under them.
  absl::Status status = gpu_.Record(kSpanBegin);
  if (status.ok()) status = gpu_.Wait(kSpanBegin, kUtilityTimeoutS, "the end of the task");
  if (!status.ok()) return finish(Fail(status, Origin::kSetup, "task end"), "");

  std::vector<std::string> tally;
  for (const auto& [name, count] : counts) tally.push_back(absl::StrCat(count, " ", name));
  return finish(std::nullopt, absl::StrCat(variants, " variants", tally.empty() ? "" : ": ",
                                           absl::StrJoin(tally, ", ")));
}

bool TaskRun::Watch(wv1::DeviceState* state) {
  if (gpu_.nvml == nullptr) return false;
  absl::StatusOr<NvmlSnapshot> snapshot = gpu_.nvml->Snapshot();
  if (!snapshot.ok()) {
    state->set_nvml_error(std::string(snapshot.status().message()));
    return false;
  }
  *state = DeviceStateOf(*snapshot, gpu_.nvml->default_sm_clock_mhz());
  return true;
}

wv1::ProfileDone TaskRun::RunSerial(
    const std::function<wv1::ProfileDone(const std::optional<Failure>&, const std::string&)>&
        finish) {
  const SerialRule rule = ResolveSerialRule(task_.serial());
  struct Candidate {
    const wv1::KernelImage* image = nullptr;
    LoadedKernel kernel;
    TimedGraph graph;
    int samples_per_round = 1;
    std::vector<double> samples;
  };
  std::vector<std::unique_ptr<Candidate>> candidates;
  const int variants = task_.variants_size();
  for (int i = 0; i < variants; ++i) {
    const wv1::KernelImage& image = task_.variants(i);
    const Clock::time_point start = Clock::now();
    variant_gpu_s_ = 0;
    wv1::VariantOutcome outcome = NewOutcome(image);
    const std::string label = image.label().empty() ? image.id() : image.label();
    auto candidate = std::make_unique<Candidate>();
    candidate->image = &image;
    std::optional<Failure> failure = LoadKernel(image, "load", "check", &candidate->kernel);
    outcome.set_registers(candidate->kernel.registers);
    outcome.set_static_shared_bytes(candidate->kernel.static_shared);
    double estimate_us = 0;
    if (!failure) failure = Validate(candidate->kernel, &outcome, &estimate_us);
    if (!failure) {
      failure =
          PrepareGraph(candidate->kernel, image, estimate_us, "serial warm-up", &candidate->graph);
    }
    if (failure) {
      outcome.set_status(failure->status);
      outcome.set_phase(failure->phase);
      outcome.set_detail(Detail(label, failure->phase, failure->message));
    } else {
      outcome.set_status(v1::OK);
      outcome.set_phase("validate");
      outcome.set_pool_sets(candidate->graph.sets);
      outcome.set_pool_bytes(candidate->graph.pool_bytes);
      outcome.set_launches_per_sample(candidate->graph.launches);
      outcome.set_detail(
          Detail(label, "validate",
                 absl::StrCat("valid over ", seeds_, " seeds (max |v - r| ",
                              Num(outcome.max_error()), "); timed in the serial rounds")));
    }
    outcome.set_gpu_seconds(variant_gpu_s_);
    outcome.set_wall_seconds(SecondsSince(start));
    emit_(outcome);
    if (!*usable_) {
      return finish(Failure{outcome.status(), absl::StrCat("variant ", image.id()),
                            absl::StrCat("variant '", image.id(), "' ended in ",
                                         v1::VariantStatus_Name(outcome.status()), " at ",
                                         outcome.phase(), " and left the GPU context unusable; ",
                                         variants - i - 1, " variants not run")},
                    "");
    }
    if (failure) continue;
    const double replay_us = std::max(estimate_us, 0.5) * candidate->graph.launches;
    candidate->samples_per_round = std::clamp(
        static_cast<int>(std::ceil(rule.round_seconds * 1e6 / replay_us)), 1, kMaxReplaysPerBatch);
    candidates.push_back(std::move(candidate));
  }

  wv1::SerialReport& report = serial_report_;
  const int n = static_cast<int>(candidates.size());
  std::map<uint32_t, int64_t> foreign;  // pid -> most memory seen
  int min_clock = 0;
  int max_clock = 0;
  int default_clock = 0;
  bool watching = gpu_.nvml != nullptr;
  if (!watching) report.set_nvml_error(gpu_.info.nvml_error());
  double rounds_gpu_s = 0;
  int rounds = 0;
  int attempts = 0;
  std::optional<std::string> stop;
  while (n > 0 && !stop) {
    const std::vector<int> order = RoundOrder(n, attempts++);
    wv1::DeviceState before;
    wv1::DeviceState after;
    if (watching && !Watch(&before)) {
      watching = false;
      report.set_nvml_error(before.nvml_error());
    }
    std::vector<std::vector<double>> round(static_cast<size_t>(n));
    const double gpu_before = task_gpu_s_;
    for (int index : order) {
      Candidate& c = *candidates[static_cast<size_t>(index)];
      const std::string phase = absl::StrCat("serial round ", attempts);
      if (std::optional<Failure> failure =
              Measure(c.graph.exec.get(), c.graph.launches, c.graph.estimate_us, phase,
                      c.samples_per_round, 0, &round[static_cast<size_t>(index)])) {
        failure->phase = absl::StrCat("serial variant ", c.image->id());
        failure->message =
            absl::StrCat("variant '", c.image->id(), "' [", c.image->label(), "] failed in ", phase,
                         ": ", failure->message, *usable_ ? "" : "; the GPU context is unusable");
        return finish(failure, "");
      }
    }
    rounds_gpu_s += task_gpu_s_ - gpu_before;
    if (watching && !Watch(&after)) {
      watching = false;
      report.set_nvml_error(after.nvml_error());
    }
    bool contended = false;
    int round_min_clock = 0;
    int round_max_clock = 0;
    if (watching) {
      for (const wv1::DeviceState* state : {&before, &after}) {
        for (const wv1::ForeignProcess& process : state->foreign()) {
          contended = true;
          int64_t& memory = foreign[static_cast<uint32_t>(process.pid())];
          memory = std::max(memory, process.used_memory_bytes());
        }
        if (state->sm_clock_mhz() > 0) {
          round_min_clock = round_min_clock == 0 ? state->sm_clock_mhz()
                                                 : std::min(round_min_clock, state->sm_clock_mhz());
          round_max_clock = std::max(round_max_clock, state->sm_clock_mhz());
        }
        default_clock = std::max(default_clock, state->default_sm_clock_mhz());
      }
    }
    const bool throttled = RoundThrottled(round_min_clock, default_clock, rule.throttle_fraction);
    if (throttled && report.throttled_rounds() < rule.min_rounds &&
        rounds_gpu_s < rule.max_seconds) {
      // Dropped and run again: a slow clock would slow whichever
      // candidates this round held.
      report.set_throttled_rounds(report.throttled_rounds() + 1);
      continue;
    }
    if (contended) report.set_contended_rounds(report.contended_rounds() + 1);
    if (round_min_clock > 0) {
      min_clock = min_clock == 0 ? round_min_clock : std::min(min_clock, round_min_clock);
      max_clock = std::max(max_clock, round_max_clock);
    }
    for (int i = 0; i < n; ++i) {
      std::vector<double>& kept = candidates[static_cast<size_t>(i)]->samples;
      kept.insert(kept.end(), round[static_cast<size_t>(i)].begin(),
                  round[static_cast<size_t>(i)].end());
    }
    ++rounds;
    std::vector<std::vector<double>> all;
    for (const auto& c : candidates) all.push_back(c->samples);
    stop = SerialStopReason(all, rounds, rounds_gpu_s, rule);
  }

  for (const auto& c : candidates) {
    wv1::SerialTiming* timing = report.add_timings();
    timing->set_variant_id(c->image->id());
    *timing->mutable_timing() =
        SummarizeTimes(c->samples, c->image->bytes_per_call(), c->image->flops_per_call());
    timing->set_noise(MedianNoise(c->samples));
    timing->set_launches_per_sample(c->graph.launches);
    timing->set_pool_sets(c->graph.sets);
    timing->set_pool_bytes(c->graph.pool_bytes);
  }
  for (const auto& [pid, memory] : foreign) {
    wv1::ForeignProcess* process = report.add_foreign();
    process->set_pid(static_cast<int32_t>(pid));
    process->set_used_memory_bytes(memory);
  }
  report.set_rounds(rounds);
  report.set_min_sm_clock_mhz(min_clock);
  report.set_max_sm_clock_mhz(max_clock);
  report.set_default_sm_clock_mhz(default_clock);
  report.set_stop(n == 0 ? "no candidate validated" : stop.value_or(""));
  report.set_gpu_seconds(rounds_gpu_s);

  absl::Status status = gpu_.Record(kSpanBegin);
  if (status.ok()) status = gpu_.Wait(kSpanBegin, kUtilityTimeoutS, "the end of the task");
  if (!status.ok()) return finish(Fail(status, Origin::kSetup, "task end"), "");
  return finish(std::nullopt,
                absl::StrCat(n, " of ", variants, " candidates timed in ", rounds,
                             " interleaved rounds (", report.stop(), ")",
                             report.throttled_rounds() > 0
                                 ? absl::StrCat("; ", report.throttled_rounds(),
                                                " rounds dropped for a throttled SM clock")
                                 : "",
                             report.contended_rounds() > 0
                                 ? absl::StrCat("; ", report.contended_rounds(),
                                                " rounds with another compute process")
                                 : ""));
}

class ProfilerImpl final : public Profiler {
 public:
  explicit ProfilerImpl(Gpu gpu) : gpu_(std::move(gpu)) {}

  const wv1::DeviceInfo& device() const override { return gpu_.info; }

  wv1::ProfileDone Run(const wv1::ProfileTask& task, const Emit& emit) override {
    TaskRun run(gpu_, &usable_, task, emit);
    return run.Execute();
  }

  bool usable() const override { return usable_; }

  wv1::DeviceState Probe() const override {
    wv1::DeviceState state;
    if (gpu_.nvml == nullptr) {
      state.set_nvml_error(gpu_.info.nvml_error());
      return state;
    }
    absl::StatusOr<NvmlSnapshot> snapshot = gpu_.nvml->Snapshot();
    if (!snapshot.ok()) {
      state.set_nvml_error(std::string(snapshot.status().message()));
      return state;
    }
    return DeviceStateOf(*snapshot, gpu_.nvml->default_sm_clock_mhz());
  }

 private:
  Gpu gpu_;
  bool usable_ = true;
};

// Device-to-device copies between two buffers much larger than L2 (at
// most 1 GiB, at most an eighth of free memory), timed by events: read +
// write bytes over the median copy time.
absl::StatusOr<double> MeasureCopyBandwidth(Gpu& gpu) {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  RETURN_IF_ERROR(
      gpu.driver->Check(gpu.cu().mem_get_info(&free_bytes, &total_bytes), "cuMemGetInfo"));
  const size_t bytes = std::min<size_t>(size_t{1} << 30, free_bytes / 8) / kAlignment * kAlignment;
  if (bytes < static_cast<size_t>(8 * gpu.info.l2_bytes())) {
    return absl::ResourceExhaustedError(
        absl::StrCat("only ", Bytes(static_cast<int64_t>(free_bytes)), " free"));
  }
  ASSIGN_OR_RETURN(DeviceBuffer source, DeviceBuffer::Allocate(*gpu.driver, bytes));
  ASSIGN_OR_RETURN(DeviceBuffer target, DeviceBuffer::Allocate(*gpu.driver, bytes));
  RETURN_IF_ERROR(gpu.driver->Check(
      gpu.cu().memset_d8_async(source.get(), 0x3c, bytes, gpu.stream.get()), "cuMemsetD8Async"));
  constexpr int kCopies = 12;  // the first two warm up
  static_assert(kTimingBase + 2 * kCopies <= kEventCount);
  for (int i = 0; i < kCopies; ++i) {
    RETURN_IF_ERROR(gpu.Record(kTimingBase + 2 * i));
    RETURN_IF_ERROR(gpu.driver->Check(
        gpu.cu().memcpy_dtod_async(target.get(), source.get(), bytes, gpu.stream.get()),
        "cuMemcpyDtoDAsync"));
    RETURN_IF_ERROR(gpu.Record(kTimingBase + 2 * i + 1));
  }
  RETURN_IF_ERROR(gpu.Wait(kTimingBase + 2 * kCopies - 1, kUtilityTimeoutS, "the copies"));
  std::vector<double> seconds;
  for (int i = 2; i < kCopies; ++i) {
    ASSIGN_OR_RETURN(double s, gpu.ElapsedSeconds(kTimingBase + 2 * i, kTimingBase + 2 * i + 1));
    seconds.push_back(s);
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = (seconds[seconds.size() / 2 - 1] + seconds[seconds.size() / 2]) / 2;
  if (!(median > 0)) return absl::InternalError("the copies took no time");
  return 2.0 * static_cast<double>(bytes) / median / 1e9;
}

std::string FormatUuid(const CUuuid& uuid) {
  std::string text = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    char hex[3];
    std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned char>(uuid.bytes[i]));
    text += hex;
  }
  return text;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Profiler>> Profiler::Open(int ordinal) {
  ASSIGN_OR_RETURN(const CudaDriver* driver, CudaDriver::Load());
  const CudaDriver::Api& cu = driver->api();
  if (CUresult rc = cu.init(0); rc != CUDA_SUCCESS) {
    return absl::FailedPreconditionError(absl::StrCat("cannot initialise the CUDA driver: ",
                                                      CudaStatus(*driver, rc, "cuInit").message()));
  }
  int count = 0;
  if (CUresult rc = cu.device_get_count(&count); rc != CUDA_SUCCESS) {
    return absl::FailedPreconditionError(CudaStatus(*driver, rc, "cuDeviceGetCount").message());
  }
  if (ordinal < 0 || ordinal >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("device ", ordinal, " of ", count, ": no such CUDA device"));
  }

  Gpu gpu;
  gpu.driver = driver;
  RETURN_IF_ERROR(driver->Check(cu.device_get(&gpu.device, ordinal), "cuDeviceGet"));
  auto attribute = [&](CUdevice_attribute which, const char* name) -> absl::StatusOr<int> {
    int value = 0;
    RETURN_IF_ERROR(driver->Check(cu.device_get_attribute(&value, which, gpu.device),
                                  absl::StrCat("cuDeviceGetAttribute(", name, ")")));
    return value;
  };
  wv1::DeviceInfo& info = gpu.info;
  info.set_ordinal(ordinal);
  info.set_device_count(count);
  char name[256] = {};
  RETURN_IF_ERROR(
      driver->Check(cu.device_get_name(name, sizeof(name) - 1, gpu.device), "cuDeviceGetName"));
  info.set_name(name);
  ASSIGN_OR_RETURN(int major, attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "CC_MAJOR"));
  ASSIGN_OR_RETURN(int minor, attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "CC_MINOR"));
  info.set_compute_capability(major * 10 + minor);
  ASSIGN_OR_RETURN(int sms, attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM_COUNT"));
  info.set_sm_count(sms);
  ASSIGN_OR_RETURN(int l2, attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2_CACHE_SIZE"));
  info.set_l2_bytes(l2);
  size_t total = 0;
  RETURN_IF_ERROR(driver->Check(cu.device_total_mem(&total, gpu.device), "cuDeviceTotalMem"));
  info.set_memory_bytes(static_cast<int64_t>(total));
  info.set_driver_version(
      absl::StrCat(driver->version() / 1000, ".", (driver->version() % 1000) / 10));
  // Peak DRAM bandwidth: the memory clock (kHz) times the bus width, times
  // two for double data rate, so read and write traffic together. Newer
  // drivers may not report the clock; 0 then means unknown.
  const absl::StatusOr<int> clock_khz =
      attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, "MEMORY_CLOCK_RATE");
  const absl::StatusOr<int> bus_bits =
      attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, "GLOBAL_MEMORY_BUS_WIDTH");
  if (clock_khz.ok() && bus_bits.ok() && *clock_khz > 0 && *bus_bits > 0) {
    info.set_peak_bandwidth_gbps(2.0 * *clock_khz * *bus_bits / 8 / 1e6);
  }
  ASSIGN_OR_RETURN(int threads,
                   attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK"));
  info.set_max_threads_per_block(threads);
  ASSIGN_OR_RETURN(int shared, attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                         "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"));
  info.set_max_shared_bytes_per_block(shared);
  CUuuid uuid{};
  RETURN_IF_ERROR(driver->Check(cu.device_get_uuid(&uuid, gpu.device), "cuDeviceGetUuid"));
  info.set_uuid(FormatUuid(uuid));

  LaunchLimits& limits = gpu.limits;
  limits.sm_count = sms;
  limits.max_threads_per_block = threads;
  limits.max_shared_optin = shared;
  const CUdevice_attribute grid[] = {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
                                     CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                                     CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z};
  const CUdevice_attribute block[] = {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
                                      CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                                      CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z};
  for (int d = 0; d < 3; ++d) {
    ASSIGN_OR_RETURN(limits.max_grid[d], attribute(grid[d], "MAX_GRID_DIM"));
    ASSIGN_OR_RETURN(limits.max_block[d], attribute(block[d], "MAX_BLOCK_DIM"));
  }

  ASSIGN_OR_RETURN(gpu.context, PrimaryContext::Retain(*driver, gpu.device));
  RETURN_IF_ERROR(gpu.context.MakeCurrent());
  ASSIGN_OR_RETURN(gpu.stream, Stream::Create(*driver));
  for (int i = 0; i < kEventCount; ++i) {
    ASSIGN_OR_RETURN(Event event, Event::Create(*driver));
    gpu.events.push_back(std::move(event));
  }
  absl::StatusOr<Module> utility = Module::Load(*driver, kDeviceKernelsPtx);
  if (!utility.ok()) {
    return absl::Status(utility.status().code(),
                        absl::StrCat("loading the profiler's own kernels (PTX for compute_75): ",
                                     utility.status().message()));
  }
  gpu.utility = *std::move(utility);
  ASSIGN_OR_RETURN(gpu.fill, gpu.utility.Function("autotune_fill"));
  ASSIGN_OR_RETURN(gpu.compare, gpu.utility.Function("autotune_compare"));
  ASSIGN_OR_RETURN(gpu.compare_finish, gpu.utility.Function("autotune_compare_finish"));

  // NVML, for the processes and clocks around serial rounds. This process
  // holds a context now, so NVML must list it: otherwise its pids are of
  // another namespace and no process could be told apart from ours.
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Open(info.uuid());
  if (!nvml.ok()) {
    info.set_nvml_error(std::string(nvml.status().message()));
  } else {
    absl::StatusOr<NvmlSnapshot> snapshot = (*nvml)->Snapshot();
    const uint32_t self = static_cast<uint32_t>(getpid());
    if (!snapshot.ok()) {
      info.set_nvml_error(std::string(snapshot.status().message()));
    } else if (std::none_of(snapshot->processes.begin(), snapshot->processes.end(),
                            [self](const NvmlProcess& p) { return p.pid == self; })) {
      info.set_nvml_error(absl::StrCat(
          "NVML does not list this worker (pid ", self, ") among the ", snapshot->processes.size(),
          " compute processes of the GPU (another pid namespace?): foreign processes cannot be "
          "told apart from it"));
    } else {
      info.set_sm_clock_mhz(snapshot->sm_clock_mhz);
      info.set_default_sm_clock_mhz((*nvml)->default_sm_clock_mhz());
      gpu.nvml = *std::move(nvml);
    }
  }
  absl::StatusOr<double> copy_gbps = MeasureCopyBandwidth(gpu);
  if (copy_gbps.ok()) {
    info.set_copy_gbps(*copy_gbps);
  } else {
    std::fprintf(stderr, "autotune-worker: device %d: copy bandwidth not measured: %s\n", ordinal,
                 std::string(copy_gbps.status().message()).c_str());
  }
  return std::make_unique<ProfilerImpl>(std::move(gpu));
}

}  // namespace autotune::kernels
