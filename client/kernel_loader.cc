#include "client/kernel_loader.h"

#include <cuda.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda_driver.h"
#include "proto/problem.h"

namespace autotune::client {
namespace {

std::string Context(const StartupAnswer& answer) {
  return ProblemContext(answer.request.family(), answer.request.problem());
}

}  // namespace

struct LoadedKernel::Module {
  kernels::Module module;
};

LoadedKernel::LoadedKernel() = default;
LoadedKernel::LoadedKernel(LoadedKernel&&) noexcept = default;
LoadedKernel& LoadedKernel::operator=(LoadedKernel&&) noexcept = default;
LoadedKernel::~LoadedKernel() = default;

struct KernelLoader::State {
  const kernels::CudaDriver* driver = nullptr;
  CUdevice device = 0;
  kernels::PrimaryContext context;
};

KernelLoader::KernelLoader(std::unique_ptr<State> state) : state_(std::move(state)) {}
KernelLoader::~KernelLoader() = default;

absl::StatusOr<std::unique_ptr<KernelLoader>> KernelLoader::Open(int ordinal) {
  ASSIGN_OR_RETURN(const kernels::CudaDriver* driver, kernels::CudaDriver::Load());
  const kernels::CudaDriver::Api& cu = driver->api();
  RETURN_IF_ERROR(driver->Check(cu.init(0), "cuInit"));
  int count = 0;
  RETURN_IF_ERROR(driver->Check(cu.device_get_count(&count), "cuDeviceGetCount"));
  if (ordinal < 0 || ordinal >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("no GPU ", ordinal, ": the driver sees ", count));
  }
  auto state = std::make_unique<State>();
  state->driver = driver;
  RETURN_IF_ERROR(driver->Check(cu.device_get(&state->device, ordinal), "cuDeviceGet"));
  char name[256] = {};
  RETURN_IF_ERROR(
      driver->Check(cu.device_get_name(name, sizeof(name), state->device), "cuDeviceGetName"));
  int major = 0;
  int minor = 0;
  int sms = 0;
  RETURN_IF_ERROR(driver->Check(
      cu.device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, state->device),
      "cuDeviceGetAttribute"));
  RETURN_IF_ERROR(driver->Check(
      cu.device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, state->device),
      "cuDeviceGetAttribute"));
  RETURN_IF_ERROR(driver->Check(
      cu.device_get_attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, state->device),
      "cuDeviceGetAttribute"));
  ASSIGN_OR_RETURN(state->context, kernels::PrimaryContext::Retain(*driver, state->device));
  auto loader = std::unique_ptr<KernelLoader>(new KernelLoader(std::move(state)));
  loader->device_.set_name(name);
  loader->device_.set_compute_capability(major * 10 + minor);
  loader->device_.set_sm_count(sms);
  loader->driver_version_ =
      absl::StrCat(driver->version() / 1000, ".", (driver->version() % 1000) / 10);
  return loader;
}

absl::StatusOr<LoadedKernel> KernelLoader::Load(const StartupAnswer& answer,
                                                absl::string_view kernel_name) const {
  if (!answer.error.ok()) return answer.error;
  const v1::LookupResponse& response = answer.response;
  const v1::Entry& entry = response.entry();
  if (response.match() == v1::MISS) {
    return absl::FailedPreconditionError(
        absl::StrCat(Context(answer), ": no tuned binary to load (MISS, ",
                     v1::MissKind_Name(response.miss_kind()), "): ", response.miss_reason()));
  }
  if (answer.cubin.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Context(answer), ": no cubin at hand (", answer.note, ")"));
  }
  RETURN_IF_ERROR(state_->context.MakeCurrent());
  absl::StatusOr<kernels::Module> module =
      kernels::Module::Load(*state_->driver, answer.cubin.data());
  if (!module.ok()) {
    return absl::Status(
        module.status().code(),
        absl::StrCat(Context(answer), ": its cubin (NVRTC ", entry.nvrtc_version(), ", ",
                     entry.arch(), ") does not load on this driver (CUDA ", driver_version_,
                     ") and device (", device_.name(), ", sm_", device_.compute_capability(),
                     "): ", module.status().message()));
  }
  LoadedKernel kernel;
  kernel.function_name_ =
      entry.function_name().empty() ? std::string(kernel_name) : entry.function_name();
  absl::StatusOr<CUfunction> function = module->Function(kernel.function_name_);
  if (!function.ok()) {
    return absl::Status(function.status().code(),
                        absl::StrCat(Context(answer), ": ", function.status().message()));
  }
  const kernels::CudaDriver::Api& cu = state_->driver->api();
  const int64_t shared = entry.launch().dynamic_shared_bytes();
  if (shared > 48 * 1024) {
    RETURN_IF_ERROR(state_->driver->Check(
        cu.func_set_attribute(*function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                              static_cast<int>(shared)),
        absl::StrCat(Context(answer), ": cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, ",
                     shared, ")")));
  }
  kernel.function_ = *function;
  kernel.launch_ = entry.launch();
  kernel.config_ = entry.config();
  kernel.module_ = std::make_unique<LoadedKernel::Module>();
  kernel.module_->module = *std::move(module);
  return kernel;
}

absl::Status KernelLoader::Launch(const LoadedKernel& kernel, void** args, void* stream) const {
  const v1::LaunchDims& launch = kernel.launch();
  if (launch.grid_size() < 1 || launch.grid_size() > 3 || launch.block_size() < 1 ||
      launch.block_size() > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(kernel.function_name(), ": the entry's launch has ", launch.grid_size(),
                     " grid and ", launch.block_size(), " block values, 1 to 3 each expected"));
  }
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  for (int i = 0; i < launch.grid_size(); ++i) grid[i] = static_cast<unsigned>(launch.grid(i));
  for (int i = 0; i < launch.block_size(); ++i) block[i] = static_cast<unsigned>(launch.block(i));
  RETURN_IF_ERROR(state_->context.MakeCurrent());
  return state_->driver->Check(
      state_->driver->api().launch_kernel(static_cast<CUfunction>(kernel.function()), grid[0],
                                          grid[1], grid[2], block[0], block[1], block[2],
                                          static_cast<unsigned>(launch.dynamic_shared_bytes()),
                                          static_cast<CUstream>(stream), args, nullptr),
      absl::StrCat("cuLaunchKernel(", kernel.function_name(), ")"));
}

}  // namespace autotune::client
