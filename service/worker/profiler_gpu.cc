#include "service/worker/profiler_gpu.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/gpu/cuda_driver.h"
#include "kernels/gpu/nvml.h"
#include "proto/worker.pb.h"

namespace autotune::kernel_worker::internal {
namespace {

constexpr unsigned kUtilityBlock = 256;

// The executable of process `pid`, "" when it cannot be read (another
// user's, another pid namespace's, gone).
std::string ExecutableOf(const std::string& proc_entry) {
  char path[4096];
  const ssize_t n = readlink(proc_entry.c_str(), path, sizeof(path) - 1);
  if (n <= 0) return "";
  return std::string(path, static_cast<size_t>(n));
}

}  // namespace

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

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

absl::Status Gpu::Launch(CUfunction function, const LaunchShape& shape, void** params,
                         const char* what) const {
  return driver->Check(cu().launch_kernel(function, shape.grid[0], shape.grid[1], shape.grid[2],
                                          shape.block[0], shape.block[1], shape.block[2],
                                          shape.dynamic_shared, stream.get(), params, nullptr),
                       absl::StrCat("cuLaunchKernel (", what, ")"));
}

absl::Status Gpu::Record(int slot) const {
  return driver->Check(cu().event_record(event(slot), stream.get()), "cuEventRecord");
}

absl::Status Gpu::Wait(int slot, double timeout_s, const std::string& what) const {
  const Clock::time_point start = Clock::now();
  while (true) {
    const CUresult rc = cu().event_query(event(slot));
    if (rc == CUDA_SUCCESS) return absl::OkStatus();
    if (rc != CUDA_ERROR_NOT_READY) {
      return kernels::CudaStatus(*driver, rc, absl::StrCat("cuEventQuery, waiting for ", what));
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

absl::StatusOr<double> Gpu::ElapsedSeconds(int begin, int end) const {
  float ms = 0;
  RETURN_IF_ERROR(
      driver->Check(cu().event_elapsed_time(&ms, event(begin), event(end)), "cuEventElapsedTime"));
  return ms * 1e-3;
}

LaunchShape Gpu::UtilityShape(int64_t elements) const {
  LaunchShape shape;
  const int64_t blocks = (elements + kUtilityBlock - 1) / kUtilityBlock;
  shape.grid[0] = static_cast<unsigned>(
      std::clamp<int64_t>(blocks, 1, int64_t{8} * std::max(limits.sm_count, 1)));
  shape.block[0] = kUtilityBlock;
  return shape;
}

absl::Status Gpu::Fill(CUdeviceptr data, const BufferSlot& buffer, uint64_t seed,
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

absl::Status Gpu::Poison(CUdeviceptr data, size_t bytes) const {
  return driver->Check(cu().memset_d8_async(data, 0xFF, bytes, stream.get()),
                       "cuMemsetD8Async (poison)");
}

absl::Status Gpu::Zero(CUdeviceptr data, size_t bytes) const {
  return driver->Check(cu().memset_d8_async(data, 0, bytes, stream.get()),
                       "cuMemsetD8Async (zero)");
}

absl::Status Gpu::Compare(CUdeviceptr checked, CUdeviceptr reference, const BufferSlot& buffer,
                          double rtol, double atol, CUdeviceptr result) const {
  unsigned long long n = static_cast<unsigned long long>(buffer.elements);
  int dtype = static_cast<int>(buffer.dtype);
  void* params[] = {&checked, &reference, &n, &dtype, &rtol, &atol, &result};
  RETURN_IF_ERROR(Launch(compare, UtilityShape(buffer.elements), params, "autotune_compare"));
  void* finish_params[] = {&checked, &reference, &dtype, &result};
  LaunchShape one;
  return Launch(compare_finish, one, finish_params, "autotune_compare_finish");
}

wv1::DeviceState DeviceStateOf(const kernels::NvmlSnapshot& snapshot, int default_clock_mhz) {
  wv1::DeviceState state;
  const uint32_t self = static_cast<uint32_t>(getpid());
  static const std::string* const own_executable = new std::string(ExecutableOf("/proc/self/exe"));
  for (const kernels::NvmlProcess& process : snapshot.processes) {
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
  state.set_power_mw(snapshot.power_mw);
  state.set_power_limit_mw(snapshot.power_limit_mw);
  state.set_temperature_c(snapshot.temperature_c);
  state.set_clocks_event_reasons(snapshot.clocks_event_reasons);
  return state;
}

}  // namespace autotune::kernel_worker::internal
