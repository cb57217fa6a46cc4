// Internal to the profiler (service/worker/profiler.cc, task_*.cc,
// serial_rounds.cc); nothing else includes it. The device the profiler holds
// between tasks (Gpu) and the work it does there besides the kernels under
// test: its own fill, poison and compare kernels (device_kernels.cu), event
// timing, and waits that give up instead of blocking on a hung kernel.
//
// Thread-compatibility: a Gpu is used by one thread at a time.
#ifndef AUTOTUNE_SERVICE_WORKER_PROFILER_GPU_H_
#define AUTOTUNE_SERVICE_WORKER_PROFILER_GPU_H_

#include <cuda.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/gpu/cuda_driver.h"
#include "kernels/gpu/nvml.h"
#include "proto/autotune.pb.h"
#include "proto/worker.pb.h"

namespace autotune::kernel_worker::internal {

namespace wv1 = ::autotune::worker::v1;
using Clock = std::chrono::steady_clock;

// Fill kinds of autotune_fill (device_kernels.cu).
inline constexpr int kFillUniform = 0;
inline constexpr int kFillNormal = 1;
inline constexpr int kFillConstant = 2;

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

double SecondsSince(Clock::time_point start);

// Numbers in messages: enough digits to tell neighbouring fp32 values apart.
std::string Num(double v);
// Four significant digits: times, rates and sizes in messages.
std::string Short(double v);
// "N bytes", and the GiB beside it from 1 MiB up.
std::string Bytes(int64_t bytes);

// How autotune_fill fills a buffer.
struct DeviceFill {
  int kind = kFillUniform;
  double a = -1;
  double b = 1;
};

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
  bool is_scratch() const { return role == v1::SCRATCH; }
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

// The device and what the profiler keeps on it between tasks. Members are
// destroyed in reverse order: the context goes last.
struct Gpu {
  const kernels::CudaDriver* driver = nullptr;
  CUdevice device = 0;
  kernels::PrimaryContext context;
  kernels::Stream stream;
  kernels::Module utility;
  CUfunction fill = nullptr;
  CUfunction compare = nullptr;
  CUfunction compare_finish = nullptr;
  std::vector<kernels::Event> events;
  LaunchLimits limits;
  wv1::DeviceInfo info;
  // Null when NVML cannot be used (info.nvml_error says why).
  std::unique_ptr<kernels::Nvml> nvml;

  const kernels::CudaDriver::Api& cu() const { return driver->api(); }
  CUevent event(int slot) const { return events[slot].get(); }

  absl::Status Launch(CUfunction function, const LaunchShape& shape, void** params,
                      const char* what) const;
  absl::Status Record(int slot) const;
  // Polls the event until it completes: never a blocking synchronise, so a
  // kernel that does not finish costs `timeout_s` and no more.
  // DEADLINE_EXCEEDED (no CUresult) when time runs out; the driver's error
  // when the work before the event failed.
  absl::Status Wait(int slot, double timeout_s, const std::string& what) const;
  absl::StatusOr<double> ElapsedSeconds(int begin, int end) const;
  // A grid-stride launch shape for the utility kernels over `elements`.
  LaunchShape UtilityShape(int64_t elements) const;
  // Fills `buffer` at `data` as its DeviceFill says, from `seed` and
  // `buffer_index` (counter-based: the same pair gives the same values).
  absl::Status Fill(CUdeviceptr data, const BufferSlot& buffer, uint64_t seed,
                    uint64_t buffer_index) const;
  // All bytes 0xFF: NaN in every floating type, so an element the kernel
  // does not write cannot pass for a result.
  absl::Status Poison(CUdeviceptr data, size_t bytes) const;
  // All bytes 0 (SCRATCH buffers, once when their set is allocated).
  absl::Status Zero(CUdeviceptr data, size_t bytes) const;
  // Enqueues the comparison of `checked` with `reference`, which leaves a
  // DeviceCompareResult at `result`; the caller waits for it.
  absl::Status Compare(CUdeviceptr checked, CUdeviceptr reference, const BufferSlot& buffer,
                       double rtol, double atol, CUdeviceptr result) const;
};

// What NVML sees, this process left out: only others contend with us. So
// are the other profile workers of this executable (other daemons' idle
// workers keep a context open): they touch the GPU only while they hold its
// lease (base/gpu_lease.h), which excludes this worker's own task.
wv1::DeviceState DeviceStateOf(const kernels::NvmlSnapshot& snapshot, int default_clock_mhz);

}  // namespace autotune::kernel_worker::internal

#endif  // AUTOTUNE_SERVICE_WORKER_PROFILER_GPU_H_
