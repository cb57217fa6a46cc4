// Profiler::Open: the device, its limits and its copy bandwidth, the
// profiler's own kernels loaded on it, and the Profiler that runs tasks there
// (a TaskRun each, service/worker/task_run.h).
#include "service/worker/profiler.h"

#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/gpu/cuda_driver.h"
#include "kernels/gpu/nvml.h"
#include "proto/worker.pb.h"
#include "service/worker/profiler_gpu.h"
#include "service/worker/task_run.h"

namespace autotune::kernel_worker {

// service/worker/device_kernels.cu compiled to PTX at build time (a generated
// source, see kernels/CMakeLists.txt).
extern const char kDeviceKernelsPtx[];

namespace {

namespace wv1 = ::autotune::worker::v1;
using internal::Bytes;
using internal::DeviceStateOf;
using internal::Emit;
using internal::Gpu;
using internal::kAlignment;
using internal::kEventCount;
using internal::kTimingBase;
using internal::kUtilityTimeoutS;
using internal::LaunchLimits;
using internal::TaskRun;

class ProfilerImpl final : public Profiler {
 public:
  explicit ProfilerImpl(Gpu gpu) : gpu_(std::move(gpu)) {}

  const wv1::DeviceInfo& device() const override { return gpu_.info; }

  wv1::ProfileDone Run(const wv1::ProfileTask& task, const std::function<void()>& reference_done,
                       const Emit& emit) override {
    TaskRun run(gpu_, &usable_, task, reference_done, emit);
    return run.Execute();
  }

  bool usable() const override { return usable_; }

  wv1::DeviceState Probe() const override {
    wv1::DeviceState state;
    if (gpu_.nvml == nullptr) {
      state.set_nvml_error(gpu_.info.nvml_error());
      return state;
    }
    absl::StatusOr<kernels::NvmlSnapshot> snapshot = gpu_.nvml->Snapshot();
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
  ASSIGN_OR_RETURN(kernels::DeviceBuffer source,
                   kernels::DeviceBuffer::Allocate(*gpu.driver, bytes));
  ASSIGN_OR_RETURN(kernels::DeviceBuffer target,
                   kernels::DeviceBuffer::Allocate(*gpu.driver, bytes));
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
  ASSIGN_OR_RETURN(const kernels::CudaDriver* driver, kernels::CudaDriver::Load());
  const kernels::CudaDriver::Api& cu = driver->api();
  if (CUresult rc = cu.init(0); rc != CUDA_SUCCESS) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot initialise the CUDA driver: ",
                     kernels::CudaStatus(*driver, rc, "cuInit").message()));
  }
  int count = 0;
  if (CUresult rc = cu.device_get_count(&count); rc != CUDA_SUCCESS) {
    return absl::FailedPreconditionError(
        kernels::CudaStatus(*driver, rc, "cuDeviceGetCount").message());
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

  ASSIGN_OR_RETURN(gpu.context, kernels::PrimaryContext::Retain(*driver, gpu.device));
  RETURN_IF_ERROR(gpu.context.MakeCurrent());
  ASSIGN_OR_RETURN(gpu.stream, kernels::Stream::Create(*driver));
  for (int i = 0; i < kEventCount; ++i) {
    ASSIGN_OR_RETURN(kernels::Event event, kernels::Event::Create(*driver));
    gpu.events.push_back(std::move(event));
  }
  absl::StatusOr<kernels::Module> utility = kernels::Module::Load(*driver, kDeviceKernelsPtx);
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
  absl::StatusOr<std::unique_ptr<kernels::Nvml>> nvml = kernels::Nvml::Open(info.uuid());
  if (!nvml.ok()) {
    info.set_nvml_error(std::string(nvml.status().message()));
  } else {
    absl::StatusOr<kernels::NvmlSnapshot> snapshot = (*nvml)->Snapshot();
    const uint32_t self = static_cast<uint32_t>(getpid());
    if (!snapshot.ok()) {
      info.set_nvml_error(std::string(snapshot.status().message()));
    } else if (std::none_of(snapshot->processes.begin(), snapshot->processes.end(),
                            [self](const kernels::NvmlProcess& p) { return p.pid == self; })) {
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

}  // namespace autotune::kernel_worker
