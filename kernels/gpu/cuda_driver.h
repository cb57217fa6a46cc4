// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1"), and
// move-only owners of the driver objects the profiler uses.
//
//   ASSIGN_OR_RETURN(const CudaDriver* driver, CudaDriver::Load());
//   const CudaDriver::Api& cu = driver->api();
//   RETURN_IF_ERROR(driver->Check(cu.init(0), "cuInit"));
//   ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Allocate(*driver, 1 << 20));
//
// Nothing links libcuda: programs that include this module start on
// machines without a GPU driver, and Load() says what is missing. Entry
// points are resolved through cuGetProcAddress for the CUDA version this
// file was compiled against (CUDA_VERSION), so each name resolves to the ABI
// that cuda.h declares (cuMemAlloc -> cuMemAlloc_v2, ...); the versioned
// symbols are looked up with dlsym only if cuGetProcAddress is missing.
// A driver older than that CUDA version is refused: the ABIs of some entry
// points differ, and it could not load the PTX or cubins of this toolkit.
//
// Include only from .cc files: it pulls in cuda.h (types and enums only).
//
// Thread-safety: Load() may be called from any thread and returns the same
// object; the driver API itself is thread-safe. The owner types are
// thread-compatible.
#ifndef AUTOTUNE_KERNELS_GPU_CUDA_DRIVER_H_
#define AUTOTUNE_KERNELS_GPU_CUDA_DRIVER_H_

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/autotune.pb.h"

namespace autotune::kernels {

class CudaDriver {
 public:
  // Entry points typed from cuda.h's declarations. The macro-expanded names
  // (cuMemAlloc is cuMemAlloc_v2 there) give the right signatures.
  struct Api {
    decltype(&::cuGetErrorName) get_error_name = nullptr;
    decltype(&::cuGetErrorString) get_error_string = nullptr;
    decltype(&::cuInit) init = nullptr;
    decltype(&::cuDriverGetVersion) driver_get_version = nullptr;
    decltype(&::cuDeviceGetCount) device_get_count = nullptr;
    decltype(&::cuDeviceGet) device_get = nullptr;
    decltype(&::cuDeviceGetName) device_get_name = nullptr;
    decltype(&::cuDeviceGetUuid) device_get_uuid = nullptr;
    decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
    decltype(&::cuDeviceTotalMem) device_total_mem = nullptr;
    decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
    decltype(&::cuDevicePrimaryCtxRelease) primary_ctx_release = nullptr;
    decltype(&::cuCtxSetCurrent) ctx_set_current = nullptr;
    decltype(&::cuModuleLoadDataEx) module_load_data_ex = nullptr;
    decltype(&::cuModuleUnload) module_unload = nullptr;
    decltype(&::cuModuleGetFunction) module_get_function = nullptr;
    decltype(&::cuFuncGetAttribute) func_get_attribute = nullptr;
    decltype(&::cuFuncSetAttribute) func_set_attribute = nullptr;
    // Optional (nullptr when the driver lacks it): the parameter layout of a
    // kernel, to check the arguments a task passes.
    decltype(&::cuFuncGetParamInfo) func_get_param_info = nullptr;
    decltype(&::cuMemGetInfo) mem_get_info = nullptr;
    decltype(&::cuMemAlloc) mem_alloc = nullptr;
    decltype(&::cuMemFree) mem_free = nullptr;
    decltype(&::cuMemsetD8Async) memset_d8_async = nullptr;
    decltype(&::cuMemcpyDtoHAsync) memcpy_dtoh_async = nullptr;
    decltype(&::cuMemcpyHtoDAsync) memcpy_htod_async = nullptr;
    decltype(&::cuMemcpyDtoDAsync) memcpy_dtod_async = nullptr;
    decltype(&::cuStreamCreate) stream_create = nullptr;
    decltype(&::cuStreamDestroy) stream_destroy = nullptr;
    decltype(&::cuStreamBeginCapture) stream_begin_capture = nullptr;
    decltype(&::cuStreamEndCapture) stream_end_capture = nullptr;
    decltype(&::cuEventCreate) event_create = nullptr;
    decltype(&::cuEventDestroy) event_destroy = nullptr;
    decltype(&::cuEventRecord) event_record = nullptr;
    decltype(&::cuEventQuery) event_query = nullptr;
    decltype(&::cuEventElapsedTime) event_elapsed_time = nullptr;
    decltype(&::cuLaunchKernel) launch_kernel = nullptr;
    decltype(&::cuGraphDestroy) graph_destroy = nullptr;
    decltype(&::cuGraphInstantiateWithFlags) graph_instantiate = nullptr;
    decltype(&::cuGraphExecDestroy) graph_exec_destroy = nullptr;
    decltype(&::cuGraphLaunch) graph_launch = nullptr;
    decltype(&::cuTensorMapEncodeTiled) tensor_map_encode_tiled = nullptr;
  };

  // The process-wide driver, loaded on the first call; the outcome (success
  // or error) is kept for the life of the process. FAILED_PRECONDITION
  // "no CUDA driver: libcuda.so.1: cannot open shared object file: ..." when
  // there is none, or naming the missing entry point or the too old version.
  // Does not call cuInit.
  static absl::StatusOr<const CudaDriver*> Load();

  // A driver over the table as given, for tests that fake the driver (only
  // the entry points a test reaches need to be set). Load() is the only way
  // to the real one.
  CudaDriver(const Api& api, int version) : api_(api), version_(version) {}

  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  const Api& api() const { return api_; }
  // cuDriverGetVersion: 1000 * major + 10 * minor (13000 for CUDA 13.0).
  int version() const { return version_; }

  // "CUDA_ERROR_ILLEGAL_ADDRESS"; "CUresult 1000" for a code the driver
  // does not name.
  std::string ErrorName(CUresult result) const;

  // OK for CUDA_SUCCESS; otherwise the status of CudaStatus().
  absl::Status Check(CUresult result, const std::string& context) const;

  // After a kernel hung or faulted, freeing memory or unloading a module
  // may wait for that kernel forever (or fail): the owner types below then
  // stop calling the driver and leak their objects, as the process is about
  // to exit. Irreversible.
  void Abandon() const { abandoned_.store(true, std::memory_order_relaxed); }
  bool abandoned() const { return abandoned_.load(std::memory_order_relaxed); }

 private:
  CudaDriver() = default;
  Api api_;
  int version_ = 0;
  mutable std::atomic<bool> abandoned_{false};
};

// The status for a failed driver call: "<context>: CUDA_ERROR_OUT_OF_MEMORY
// (2): out of memory", with the CUresult attached (CudaResultOf). Codes:
// out of memory and launch out of resources RESOURCE_EXHAUSTED; invalid
// value INVALID_ARGUMENT; not found NOT_FOUND; not supported UNIMPLEMENTED;
// no device, not initialised, stub library, no binary for the GPU, PTX the
// driver cannot take and similar FAILED_PRECONDITION; anything else
// INTERNAL. CUDA_SUCCESS gives OK.
absl::Status CudaStatus(const CudaDriver& driver, CUresult result, const std::string& context);

// The tensor map (TMA descriptor) of `layout` over the buffer at `address`,
// as a kernel parameter (`const __grid_constant__ CUtensorMap`) takes it:
// element strides 1, no interleave, no L2 promotion, out-of-bound elements
// read as zero. INVALID_ARGUMENT when the layout or the address breaks a
// rule (kernels/tensor_map.h), else the driver's error.
absl::StatusOr<CUtensorMap> EncodeTensorMap(const CudaDriver& driver,
                                            const v1::TensorMapLayout& layout, CUdeviceptr address);

// The CUresult attached by CudaStatus(), if any.
std::optional<CUresult> CudaResultOf(const absl::Status& status);

// True for errors that say a kernel image cannot be loaded on this device
// (no binary for the GPU, PTX it cannot take, JIT unavailable, a missing or
// broken symbol): the kernel's problem, not the device's.
bool IsImageError(CUresult result);

// True for the errors after which the context cannot be used again: every
// later call fails the same way (illegal address, misaligned address,
// illegal instruction, trap/assert, hardware stack error, invalid PC, launch
// failed, invalid address space, ECC uncorrectable, ...).
bool IsStickyError(CUresult result);

// Owner of one driver handle; destroying it never throws and ignores the
// driver's answer (nothing could be done with it). Moved-from owners hold
// nothing.
template <typename Handle, typename Traits>
class DriverHandle {
 public:
  DriverHandle() = default;
  DriverHandle(const CudaDriver& driver, Handle handle) : driver_(&driver), handle_(handle) {}
  DriverHandle(DriverHandle&& other) noexcept
      : driver_(other.driver_), handle_(std::exchange(other.handle_, Handle{})) {}
  DriverHandle& operator=(DriverHandle&& other) noexcept {
    if (this != &other) {
      Reset();
      driver_ = other.driver_;
      handle_ = std::exchange(other.handle_, Handle{});
    }
    return *this;
  }
  DriverHandle(const DriverHandle&) = delete;
  DriverHandle& operator=(const DriverHandle&) = delete;
  ~DriverHandle() { Reset(); }

  Handle get() const { return handle_; }
  explicit operator bool() const { return handle_ != Handle{}; }

  void Reset() noexcept {
    if (handle_ != Handle{} && driver_ != nullptr && !driver_->abandoned()) {
      Traits::Destroy(driver_->api(), handle_);
    }
    handle_ = Handle{};
  }

 protected:
  const CudaDriver* driver() const { return driver_; }

 private:
  const CudaDriver* driver_ = nullptr;
  Handle handle_{};
};

namespace cuda_internal {
struct ModuleTraits {
  static void Destroy(const CudaDriver::Api& api, CUmodule h) { (void)api.module_unload(h); }
};
struct DevicePointerTraits {
  static void Destroy(const CudaDriver::Api& api, CUdeviceptr h) { (void)api.mem_free(h); }
};
struct StreamTraits {
  static void Destroy(const CudaDriver::Api& api, CUstream h) { (void)api.stream_destroy(h); }
};
struct EventTraits {
  static void Destroy(const CudaDriver::Api& api, CUevent h) { (void)api.event_destroy(h); }
};
struct GraphTraits {
  static void Destroy(const CudaDriver::Api& api, CUgraph h) { (void)api.graph_destroy(h); }
};
struct GraphExecTraits {
  static void Destroy(const CudaDriver::Api& api, CUgraphExec h) {
    (void)api.graph_exec_destroy(h);
  }
};
}  // namespace cuda_internal

// The primary context of a device, retained (cuDevicePrimaryCtxRetain) for
// the owner's life and released after. The primary context is the one the
// CUDA runtime shares, so other code in the process sees the same memory.
class PrimaryContext {
 public:
  static absl::StatusOr<PrimaryContext> Retain(const CudaDriver& driver, CUdevice device);
  PrimaryContext() = default;
  PrimaryContext(PrimaryContext&& other) noexcept;
  PrimaryContext& operator=(PrimaryContext&& other) noexcept;
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  ~PrimaryContext();

  CUcontext get() const { return context_; }
  // Binds the context to the calling thread (cuCtxSetCurrent).
  absl::Status MakeCurrent() const;

 private:
  void Reset() noexcept;
  const CudaDriver* driver_ = nullptr;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

// A loaded module (cubin, fatbin or NUL-terminated PTX).
class Module : public DriverHandle<CUmodule, cuda_internal::ModuleTraits> {
 public:
  using DriverHandle::DriverHandle;
  // cuModuleLoadDataEx; the error carries the driver's JIT/loader log when
  // it wrote one (a PTX error, "no kernel image is available ...").
  static absl::StatusOr<Module> Load(const CudaDriver& driver, const void* image);
  // NOT_FOUND "no kernel 'name' in the module" when absent.
  absl::StatusOr<CUfunction> Function(const std::string& name) const;
};

// Device memory from cuMemAlloc (256-byte aligned).
class DeviceBuffer : public DriverHandle<CUdeviceptr, cuda_internal::DevicePointerTraits> {
 public:
  DeviceBuffer() = default;
  // INVALID_ARGUMENT for 0 bytes; RESOURCE_EXHAUSTED (with the CUresult)
  // when the device is out of memory.
  static absl::StatusOr<DeviceBuffer> Allocate(const CudaDriver& driver, size_t bytes);
  size_t size() const { return size_; }

 private:
  DeviceBuffer(const CudaDriver& driver, CUdeviceptr pointer, size_t size)
      : DriverHandle(driver, pointer), size_(size) {}
  size_t size_ = 0;
};

// A stream that does not synchronise with the legacy default stream
// (CU_STREAM_NON_BLOCKING).
class Stream : public DriverHandle<CUstream, cuda_internal::StreamTraits> {
 public:
  using DriverHandle::DriverHandle;
  static absl::StatusOr<Stream> Create(const CudaDriver& driver);
};

// An event; CU_EVENT_DEFAULT records timing.
class Event : public DriverHandle<CUevent, cuda_internal::EventTraits> {
 public:
  using DriverHandle::DriverHandle;
  static absl::StatusOr<Event> Create(const CudaDriver& driver,
                                      unsigned int flags = CU_EVENT_DEFAULT);
};

// A graph, as stream capture returns it (adopted).
class Graph : public DriverHandle<CUgraph, cuda_internal::GraphTraits> {
 public:
  using DriverHandle::DriverHandle;
};

// An instantiated graph, ready to launch.
class GraphExec : public DriverHandle<CUgraphExec, cuda_internal::GraphExecTraits> {
 public:
  using DriverHandle::DriverHandle;
  static absl::StatusOr<GraphExec> Instantiate(const CudaDriver& driver, const Graph& graph);
};

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_GPU_CUDA_DRIVER_H_
