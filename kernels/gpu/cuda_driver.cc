#include "kernels/gpu/cuda_driver.h"

#include <dlfcn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/tensor_map.h"

namespace autotune::kernels {
namespace {

constexpr char kLibrary[] = "libcuda.so.1";
constexpr char kResultPayload[] = "type.autotune.dev/cuda.CUresult";

std::string DlError() {
  const char* error = dlerror();
  return error != nullptr ? error : "unknown dlerror";
}

using GetProcAddress = decltype(&::cuGetProcAddress);  // cuGetProcAddress_v2

// Resolves one entry point: through cuGetProcAddress with this build's CUDA
// version when the driver has it, else by dlsym of the versioned name (what
// cuda.h's macros expand the name to).
class Resolver {
 public:
  Resolver(void* handle, GetProcAddress get_proc_address)
      : handle_(handle), get_proc_address_(get_proc_address) {}

  template <typename Fn>
  void Resolve(const char* name, const char* versioned_name, Fn* fn, bool required = true) {
    void* symbol = nullptr;
    std::string why;
    if (get_proc_address_ != nullptr) {
      CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      const CUresult rc =
          get_proc_address_(name, &symbol, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found);
      if (rc != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS) {
        symbol = nullptr;
        why = absl::StrCat("cuGetProcAddress(", name, ", ", CUDA_VERSION, ") gave CUresult ",
                           static_cast<int>(rc), ", query result ", static_cast<int>(found));
      }
    }
    if (symbol == nullptr) {
      dlerror();
      symbol = dlsym(handle_, versioned_name);
      if (symbol == nullptr) {
        absl::StrAppend(&why, why.empty() ? "" : "; ", "dlsym(", versioned_name, "): ", DlError());
      }
    }
    if (symbol == nullptr) {
      if (required) missing_.push_back(absl::StrCat(name, " (", why, ")"));
      return;
    }
    *fn = reinterpret_cast<Fn>(symbol);
  }

  const std::vector<std::string>& missing() const { return missing_; }

 private:
  void* handle_;
  GetProcAddress get_proc_address_;
  std::vector<std::string> missing_;
};

// #name is the plain name (cuGetProcAddress wants it); the second
// stringification expands cuda.h's macro to the versioned symbol.
#define AUTOTUNE_CU_STRINGIFY_(x) #x
#define AUTOTUNE_CU_VERSIONED_(x) AUTOTUNE_CU_STRINGIFY_(x)
#define AUTOTUNE_CU_RESOLVE_(resolver, name, field, ...) \
  (resolver).Resolve(#name, AUTOTUNE_CU_VERSIONED_(name), &(field)__VA_OPT__(, ) __VA_ARGS__)

absl::StatusCode CodeFor(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS:
      return absl::StatusCode::kOk;
    case CUDA_ERROR_OUT_OF_MEMORY:
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
      return absl::StatusCode::kResourceExhausted;
    case CUDA_ERROR_INVALID_VALUE:
      return absl::StatusCode::kInvalidArgument;
    case CUDA_ERROR_NOT_FOUND:
      return absl::StatusCode::kNotFound;
    case CUDA_ERROR_NOT_SUPPORTED:
      return absl::StatusCode::kUnimplemented;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_DEVICE_NOT_LICENSED:
    case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return IsImageError(result) ? absl::StatusCode::kFailedPrecondition
                                  : absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::StatusOr<const CudaDriver*> CudaDriver::Load() {
  // Built once, thread-safely; never destroyed (nor is libcuda unloaded):
  // the driver keeps threads and state for the life of the process.
  static const absl::StatusOr<const CudaDriver*>* const loaded =
      new absl::StatusOr<const CudaDriver*>([]() -> absl::StatusOr<const CudaDriver*> {
        void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
        if (handle == nullptr) {
          return absl::FailedPreconditionError(absl::StrCat("no CUDA driver: ", DlError()));
        }
        std::unique_ptr<CudaDriver> driver(new CudaDriver());
        Api& api = driver->api_;

        // cuDriverGetVersion has had one signature since CUDA 2.2: ask the
        // version first, so a driver that is too old is named as such rather
        // than by the entry point it lacks.
        dlerror();
        auto get_version =
            reinterpret_cast<decltype(&::cuDriverGetVersion)>(dlsym(handle, "cuDriverGetVersion"));
        if (get_version == nullptr) {
          return absl::FailedPreconditionError(
              absl::StrCat("no CUDA driver: ", kLibrary, " lacks cuDriverGetVersion: ", DlError()));
        }
        int version = 0;
        if (const CUresult rc = get_version(&version); rc != CUDA_SUCCESS) {
          return absl::FailedPreconditionError(absl::StrCat(
              "no CUDA driver: cuDriverGetVersion failed with CUresult ", static_cast<int>(rc)));
        }
        if (version < CUDA_VERSION) {
          return absl::FailedPreconditionError(
              absl::StrCat("the CUDA driver supports CUDA ", version / 1000, ".",
                           (version % 1000) / 10, "; this build needs CUDA ", CUDA_VERSION / 1000,
                           ".", (CUDA_VERSION % 1000) / 10, " or newer (update the GPU driver)"));
        }
        driver->version_ = version;

        dlerror();
        auto get_proc_address =
            reinterpret_cast<GetProcAddress>(dlsym(handle, "cuGetProcAddress_v2"));
        Resolver resolver(handle, get_proc_address);
        AUTOTUNE_CU_RESOLVE_(resolver, cuGetErrorName, api.get_error_name);
        AUTOTUNE_CU_RESOLVE_(resolver, cuGetErrorString, api.get_error_string);
        AUTOTUNE_CU_RESOLVE_(resolver, cuInit, api.init);
        AUTOTUNE_CU_RESOLVE_(resolver, cuDriverGetVersion, api.driver_get_version);
        AUTOTUNE_CU_RESOLVE_(resolver, cuDeviceGetCount, api.device_get_count);
        AUTOTUNE_CU_RESOLVE_(resolver, cuDeviceGet, api.device_get);
        AUTOTUNE_CU_RESOLVE_(resolver, cuDeviceGetName, api.device_get_name);
        AUTOTUNE_CU_RESOLVE_(resolver, cuDeviceGetUuid, api.device_get_uuid);
        AUTOTUNE_CU_RESOLVE_(resolver, cuDeviceGetAttribute, api.device_get_attribute);
        AUTOTUNE_CU_RESOLVE_(resolver, cuDeviceTotalMem, api.device_total_mem);
        AUTOTUNE_CU_RESOLVE_(resolver, cuDevicePrimaryCtxRetain, api.primary_ctx_retain);
        AUTOTUNE_CU_RESOLVE_(resolver, cuDevicePrimaryCtxRelease, api.primary_ctx_release);
        AUTOTUNE_CU_RESOLVE_(resolver, cuCtxSetCurrent, api.ctx_set_current);
        AUTOTUNE_CU_RESOLVE_(resolver, cuModuleLoadDataEx, api.module_load_data_ex);
        AUTOTUNE_CU_RESOLVE_(resolver, cuModuleUnload, api.module_unload);
        AUTOTUNE_CU_RESOLVE_(resolver, cuModuleGetFunction, api.module_get_function);
        AUTOTUNE_CU_RESOLVE_(resolver, cuFuncGetAttribute, api.func_get_attribute);
        AUTOTUNE_CU_RESOLVE_(resolver, cuFuncSetAttribute, api.func_set_attribute);
        AUTOTUNE_CU_RESOLVE_(resolver, cuFuncGetParamInfo, api.func_get_param_info,
                             /*required=*/false);
        AUTOTUNE_CU_RESOLVE_(resolver, cuMemGetInfo, api.mem_get_info);
        AUTOTUNE_CU_RESOLVE_(resolver, cuMemAlloc, api.mem_alloc);
        AUTOTUNE_CU_RESOLVE_(resolver, cuMemFree, api.mem_free);
        AUTOTUNE_CU_RESOLVE_(resolver, cuMemsetD8Async, api.memset_d8_async);
        AUTOTUNE_CU_RESOLVE_(resolver, cuMemcpyDtoHAsync, api.memcpy_dtoh_async);
        AUTOTUNE_CU_RESOLVE_(resolver, cuMemcpyHtoDAsync, api.memcpy_htod_async);
        AUTOTUNE_CU_RESOLVE_(resolver, cuMemcpyDtoDAsync, api.memcpy_dtod_async);
        AUTOTUNE_CU_RESOLVE_(resolver, cuStreamCreate, api.stream_create);
        AUTOTUNE_CU_RESOLVE_(resolver, cuStreamDestroy, api.stream_destroy);
        AUTOTUNE_CU_RESOLVE_(resolver, cuStreamBeginCapture, api.stream_begin_capture);
        AUTOTUNE_CU_RESOLVE_(resolver, cuStreamEndCapture, api.stream_end_capture);
        AUTOTUNE_CU_RESOLVE_(resolver, cuEventCreate, api.event_create);
        AUTOTUNE_CU_RESOLVE_(resolver, cuEventDestroy, api.event_destroy);
        AUTOTUNE_CU_RESOLVE_(resolver, cuEventRecord, api.event_record);
        AUTOTUNE_CU_RESOLVE_(resolver, cuEventQuery, api.event_query);
        AUTOTUNE_CU_RESOLVE_(resolver, cuEventElapsedTime, api.event_elapsed_time);
        AUTOTUNE_CU_RESOLVE_(resolver, cuLaunchKernel, api.launch_kernel);
        AUTOTUNE_CU_RESOLVE_(resolver, cuGraphDestroy, api.graph_destroy);
        AUTOTUNE_CU_RESOLVE_(resolver, cuGraphInstantiateWithFlags, api.graph_instantiate);
        AUTOTUNE_CU_RESOLVE_(resolver, cuGraphExecDestroy, api.graph_exec_destroy);
        AUTOTUNE_CU_RESOLVE_(resolver, cuGraphLaunch, api.graph_launch);
        AUTOTUNE_CU_RESOLVE_(resolver, cuTensorMapEncodeTiled, api.tensor_map_encode_tiled);
        if (!resolver.missing().empty()) {
          return absl::FailedPreconditionError(absl::StrCat(
              kLibrary, " (CUDA ", version / 1000, ".", (version % 1000) / 10,
              ") lacks driver entry points: ", absl::StrJoin(resolver.missing(), "; ")));
        }
        return driver.release();
      }());
  return *loaded;
}

absl::StatusOr<CUtensorMap> EncodeTensorMap(const CudaDriver& driver,
                                            const v1::TensorMapLayout& layout,
                                            CUdeviceptr address) {
  ASSIGN_OR_RETURN(const TensorMapArguments args, TensorMapArgumentsOf(layout, address));
  CUtensorMap map;
  RETURN_IF_ERROR(
      driver.Check(driver.api().tensor_map_encode_tiled(
                       &map, static_cast<CUtensorMapDataType>(args.data_type), args.rank,
                       reinterpret_cast<void*>(args.address), args.dims, args.strides, args.box,
                       args.element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                       static_cast<CUtensorMapSwizzle>(args.swizzle),
                       CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                   "cuTensorMapEncodeTiled"));
  return map;
}

std::string CudaDriver::ErrorName(CUresult result) const {
  const char* name = nullptr;
  if (api_.get_error_name != nullptr && api_.get_error_name(result, &name) == CUDA_SUCCESS &&
      name != nullptr) {
    return name;
  }
  return absl::StrCat("CUresult ", static_cast<int>(result));
}

absl::Status CudaDriver::Check(CUresult result, const std::string& context) const {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  return CudaStatus(*this, result, context);
}

absl::Status CudaStatus(const CudaDriver& driver, CUresult result, const std::string& context) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  const char* text = nullptr;
  const CudaDriver::Api& api = driver.api();
  if (api.get_error_string == nullptr || api.get_error_string(result, &text) != CUDA_SUCCESS) {
    text = nullptr;
  }
  absl::Status status(
      CodeFor(result),
      absl::StrCat(context, ": ", driver.ErrorName(result), " (", static_cast<int>(result), ")",
                   text != nullptr ? absl::StrCat(": ", text) : ""));
  status.SetPayload(kResultPayload, absl::Cord(absl::StrCat(static_cast<int>(result))));
  return status;
}

std::optional<CUresult> CudaResultOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kResultPayload);  // absl::optional in Debian's Abseil
  if (!payload.has_value()) return std::nullopt;
  int value = 0;
  if (!absl::SimpleAtoi(std::string(*payload), &value)) return std::nullopt;
  return static_cast<CUresult>(value);
}

bool IsImageError(CUresult result) {
  switch (result) {
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    case CUDA_ERROR_JIT_COMPILATION_DISABLED:
    case CUDA_ERROR_INVALID_SOURCE:
    case CUDA_ERROR_SHARED_OBJECT_INIT_FAILED:
    case CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND:
      return true;
    default:
      return false;
  }
}

bool IsStickyError(CUresult result) {
  switch (result) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_CONTAINED:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_UNKNOWN:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<PrimaryContext> PrimaryContext::Retain(const CudaDriver& driver, CUdevice device) {
  CUcontext context = nullptr;
  if (CUresult rc = driver.api().primary_ctx_retain(&context, device); rc != CUDA_SUCCESS) {
    return CudaStatus(driver, rc, absl::StrCat("cuDevicePrimaryCtxRetain(device ", device, ")"));
  }
  PrimaryContext owned;
  owned.driver_ = &driver;
  owned.device_ = device;
  owned.context_ = context;
  return owned;
}

PrimaryContext::PrimaryContext(PrimaryContext&& other) noexcept
    : driver_(other.driver_),
      device_(other.device_),
      context_(std::exchange(other.context_, nullptr)) {}

PrimaryContext& PrimaryContext::operator=(PrimaryContext&& other) noexcept {
  if (this != &other) {
    Reset();
    driver_ = other.driver_;
    device_ = other.device_;
    context_ = std::exchange(other.context_, nullptr);
  }
  return *this;
}

PrimaryContext::~PrimaryContext() { Reset(); }

void PrimaryContext::Reset() noexcept {
  if (context_ != nullptr && driver_ != nullptr && !driver_->abandoned()) {
    (void)driver_->api().primary_ctx_release(device_);
  }
  context_ = nullptr;
}

absl::Status PrimaryContext::MakeCurrent() const {
  if (context_ == nullptr) return absl::FailedPreconditionError("no primary context retained");
  return driver_->Check(driver_->api().ctx_set_current(context_), "cuCtxSetCurrent");
}

absl::StatusOr<Module> Module::Load(const CudaDriver& driver, const void* image) {
  // The loader and the PTX JIT write their complaints here ("ptxas fatal",
  // "no kernel image is available for execution on the device").
  constexpr size_t kLogBytes = 8192;
  std::vector<char> log(kLogBytes, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(kLogBytes))};
  CUmodule module = nullptr;
  const CUresult rc = driver.api().module_load_data_ex(&module, image, 2, options, values);
  if (rc != CUDA_SUCCESS) {
    log.back() = '\0';
    std::string text(log.data());
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return CudaStatus(driver, rc,
                      text.empty() ? std::string("cuModuleLoadDataEx")
                                   : absl::StrCat("cuModuleLoadDataEx (log: ", text, ")"));
  }
  return Module(driver, module);
}

absl::StatusOr<CUfunction> Module::Function(const std::string& name) const {
  CUfunction function = nullptr;
  const CUresult rc = driver()->api().module_get_function(&function, get(), name.c_str());
  if (rc == CUDA_ERROR_NOT_FOUND) {
    absl::Status status =
        CudaStatus(*driver(), rc, absl::StrCat("cuModuleGetFunction('", name, "')"));
    return absl::NotFoundError(
        absl::StrCat("no kernel '", name, "' in the module (", status.message(), ")"));
  }
  if (rc != CUDA_SUCCESS) {
    return CudaStatus(*driver(), rc, absl::StrCat("cuModuleGetFunction('", name, "')"));
  }
  return function;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(const CudaDriver& driver, size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes of device memory");
  CUdeviceptr pointer = 0;
  if (CUresult rc = driver.api().mem_alloc(&pointer, bytes); rc != CUDA_SUCCESS) {
    return CudaStatus(driver, rc, absl::StrCat("cuMemAlloc(", bytes, " bytes)"));
  }
  return DeviceBuffer(driver, pointer, bytes);
}

absl::StatusOr<Stream> Stream::Create(const CudaDriver& driver) {
  CUstream stream = nullptr;
  if (CUresult rc = driver.api().stream_create(&stream, CU_STREAM_NON_BLOCKING);
      rc != CUDA_SUCCESS) {
    return CudaStatus(driver, rc, "cuStreamCreate");
  }
  return Stream(driver, stream);
}

absl::StatusOr<Event> Event::Create(const CudaDriver& driver, unsigned int flags) {
  CUevent event = nullptr;
  if (CUresult rc = driver.api().event_create(&event, flags); rc != CUDA_SUCCESS) {
    return CudaStatus(driver, rc, "cuEventCreate");
  }
  return Event(driver, event);
}

absl::StatusOr<GraphExec> GraphExec::Instantiate(const CudaDriver& driver, const Graph& graph) {
  CUgraphExec exec = nullptr;
  if (CUresult rc = driver.api().graph_instantiate(&exec, graph.get(), 0); rc != CUDA_SUCCESS) {
    return CudaStatus(driver, rc, "cuGraphInstantiateWithFlags");
  }
  return GraphExec(driver, exec);
}

}  // namespace autotune::kernels
