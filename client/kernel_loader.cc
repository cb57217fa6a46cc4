#include "client/kernel_loader.h"

#include <cuda.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "base/status_macros.h"
#include "client/cubin_check.h"
#include "kernels/gpu/compiler.h"
#include "kernels/gpu/cuda_driver.h"
#include "proto/problem.h"

namespace autotune::client {
namespace {

std::string Context(const StartupAnswer& answer) {
  return ProblemContext(answer.request.family(), answer.request.problem());
}

}  // namespace

absl::StatusOr<LocalBinary> CompileRecipe(const v1::CompileRecipe& recipe, absl::string_view source,
                                          absl::string_view arch) {
  const std::string what = absl::StrCat(recipe.program_name(), " (", recipe.name_expression(), ")");
  if (Sha256Hex(source) != recipe.source_sha256()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": the source does not match the recipe's sha256 ", recipe.source_sha256()));
  }
  ASSIGN_OR_RETURN(const kernels::Nvrtc* nvrtc, kernels::Nvrtc::Load());
  kernels::CompileRequest request;
  request.source = std::string(source);
  request.program_name = recipe.program_name();
  request.name_expression = recipe.name_expression();
  request.options.assign(recipe.options().begin(), recipe.options().end());
  request.arch = std::string(arch);
  for (const v1::SourceHeader& header : recipe.headers()) {
    request.headers.push_back({header.name(), header.text()});
  }
  kernels::CompileResult result = kernels::Compile(*nvrtc, request);
  if (result.status != kernels::CompileStatus::kOk) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " does not compile with NVRTC ", nvrtc->version(), " for ", arch, ": ", result.log));
  }
  LocalBinary binary;
  binary.cubin = std::move(result.cubin);
  binary.function_name = std::move(result.lowered_name);
  binary.nvrtc_version = nvrtc->version();
  binary.log = std::move(result.log);
  return binary;
}

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
  DeviceLimits limits;
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
  DeviceLimits& limits = state->limits;
  limits.compute_capability = major * 10 + minor;
  const std::pair<int64_t*, CUdevice_attribute> wanted[] = {
      {&limits.max_grid[0], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X},
      {&limits.max_grid[1], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y},
      {&limits.max_grid[2], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z},
      {&limits.max_block[0], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X},
      {&limits.max_block[1], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y},
      {&limits.max_block[2], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z},
      {&limits.max_threads_per_block, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
      {&limits.max_dynamic_shared_bytes, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN}};
  for (const auto& [value, attribute] : wanted) {
    int got = 0;
    RETURN_IF_ERROR(driver->Check(cu.device_get_attribute(&got, attribute, state->device),
                                  "cuDeviceGetAttribute"));
    *value = got;
  }
  ASSIGN_OR_RETURN(state->context, kernels::PrimaryContext::Retain(*driver, state->device));
  auto loader = std::unique_ptr<KernelLoader>(new KernelLoader(std::move(state)));
  loader->device_.set_name(name);
  loader->device_.set_compute_capability(major * 10 + minor);
  loader->device_.set_sm_count(sms);
  loader->driver_version_ =
      absl::StrCat(driver->version() / 1000, ".", (driver->version() % 1000) / 10);
  return loader;
}

absl::StatusOr<LoadedKernel> KernelLoader::LoadCubin(const StartupAnswer& answer,
                                                     absl::string_view cubin,
                                                     const std::string& function_name,
                                                     const v1::LaunchDims& launch) const {
  RETURN_IF_ERROR(state_->context.MakeCurrent());
  ASSIGN_OR_RETURN(kernels::Module module, kernels::Module::Load(*state_->driver, cubin.data()));
  LoadedKernel kernel;
  kernel.function_name_ = function_name;
  absl::StatusOr<CUfunction> function = module.Function(kernel.function_name_);
  if (!function.ok()) {
    return absl::Status(function.status().code(),
                        absl::StrCat(Context(answer), ": ", function.status().message()));
  }
  const kernels::CudaDriver::Api& cu = state_->driver->api();
  const int64_t shared = launch.dynamic_shared_bytes();
  if (shared > 48 * 1024) {
    RETURN_IF_ERROR(state_->driver->Check(
        cu.func_set_attribute(*function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                              static_cast<int>(shared)),
        absl::StrCat(Context(answer), ": cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, ",
                     shared, ")")));
  }
  kernel.function_ = *function;
  kernel.launch_ = launch;
  if (launch.tensor_maps_size() > 0 && cu.func_get_param_info != nullptr) {
    // Launch puts the maps among the caller's arguments: it needs the count.
    kernel.parameters_ = 0;
    for (size_t offset = 0, size = 0;
         cu.func_get_param_info(*function, static_cast<size_t>(kernel.parameters_), &offset,
                                &size) == CUDA_SUCCESS;) {
      ++kernel.parameters_;
    }
  }
  kernel.module_ = std::make_unique<LoadedKernel::Module>();
  kernel.module_->module = std::move(module);
  return kernel;
}

absl::StatusOr<LoadedKernel> KernelLoader::Load(const StartupAnswer& answer,
                                                absl::string_view kernel_name) const {
  if (!answer.error.ok()) return answer.error;
  const v1::LookupResponse& response = answer.response;
  const v1::Entry& entry = response.entry();
  // The config to run and its launch for the requested problem.
  const bool entry_applies =
      response.match() != v1::MISS || response.miss_kind() == v1::MISS_DRIVER_TOO_OLD;
  const v1::Config* config = nullptr;
  v1::LaunchDims launch;
  if (entry_applies) {
    config = &entry.config();
    if (response.has_launch()) {
      launch = response.launch();
    } else if (response.match() == v1::EXACT) {
      launch = entry.launch();  // an answer stored before LookupResponse.launch
    } else {
      return absl::FailedPreconditionError(
          absl::StrCat(Context(answer), ": the answer (", v1::MatchKind_Name(response.match()),
                       ") has no launch for the requested problem; look it up again"));
    }
  } else if (response.has_default_config()) {
    config = &response.default_config();
    launch = response.default_launch();
  } else {
    return absl::FailedPreconditionError(absl::StrCat(Context(answer), ": nothing to load (MISS, ",
                                                      v1::MissKind_Name(response.miss_kind()),
                                                      ", and the family has no default "
                                                      "config that fits): ",
                                                      response.miss_reason()));
  }

  // Whichever kernel runs, it runs with this launch: one the device cannot
  // run is no answer to use.
  if (absl::Status fits = CheckLaunch(launch, state_->limits); !fits.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Context(answer), ": the answer's launch is refused: ", fits.message()));
  }

  // Why the served binary cannot be used, when it cannot.
  std::string why_compile;
  const std::string served_function =
      entry.function_name().empty() ? std::string(kernel_name) : entry.function_name();
  absl::Status header = absl::OkStatus();
  if (response.match() != v1::MISS && answer.cubin != nullptr && !answer.cubin->empty() &&
      (!(header = CheckCubinHeader(*answer.cubin, state_->limits.compute_capability)).ok() ||
       !(header = CheckParameters(*answer.cubin, served_function, response.parameter_bytes()))
            .ok())) {
    why_compile = absl::StrCat("its cubin is refused: ", header.message());
  } else if (response.match() != v1::MISS && answer.cubin != nullptr && !answer.cubin->empty()) {
    const std::string& function_name = served_function;
    absl::StatusOr<LoadedKernel> served = LoadCubin(answer, *answer.cubin, function_name, launch);
    if (served.ok()) {
      served->config_ = *config;
      return served;
    }
    why_compile = absl::StrCat("its cubin (NVRTC ", entry.nvrtc_version(), ", ", entry.arch(),
                               ") does not load on this driver (CUDA ", driver_version_,
                               ") and device (", device_.name(), ", sm_",
                               device_.compute_capability(), "): ", served.status().message());
  } else if (response.match() != v1::MISS) {
    why_compile = absl::StrCat("no cubin at hand (", answer.note, ")");
  } else {
    why_compile = absl::StrCat("a MISS (", v1::MissKind_Name(response.miss_kind()), ")");
  }

  const std::string* source = nullptr;
  if (response.has_recipe()) {
    if (answer.recipe_source != nullptr) {
      source = answer.recipe_source.get();
    } else if (!response.recipe().source().empty()) {
      source = &response.recipe().source();
    }
  }
  if (source == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        Context(answer), ": ", why_compile, "; and no compile recipe with its source to build ",
        entry_applies ? "the entry's" : "the default", " config here",
        response.has_recipe() ? absl::StrCat(" (", answer.note, ")") : std::string()));
  }
  const std::string arch = absl::StrCat("sm_", device_.compute_capability());
  absl::StatusOr<LocalBinary> compiled = CompileRecipe(response.recipe(), *source, arch);
  if (!compiled.ok()) {
    return absl::Status(compiled.status().code(),
                        absl::StrCat(Context(answer), ": ", why_compile,
                                     "; compiling it here failed: ", compiled.status().message()));
  }
  if (absl::Status parameters =
          CheckParameters(compiled->cubin, compiled->function_name, response.parameter_bytes());
      !parameters.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        Context(answer), ": ", why_compile, "; compiled here by NVRTC ", compiled->nvrtc_version,
        " for ", arch, ", it is refused: ", parameters.message()));
  }
  absl::StatusOr<LoadedKernel> kernel =
      LoadCubin(answer, compiled->cubin, compiled->function_name, launch);
  if (!kernel.ok()) {
    return absl::Status(
        kernel.status().code(),
        absl::StrCat(Context(answer), ": ", why_compile, "; compiled here by NVRTC ",
                     compiled->nvrtc_version, " for ", arch,
                     ", it does not load either: ", kernel.status().message()));
  }
  kernel->config_ = *config;
  kernel->origin_ = KernelOrigin::kCompiledHere;
  kernel->note_ =
      absl::StrCat(why_compile, ": ", entry_applies ? "the entry's" : "the default",
                   " config compiled here by NVRTC ", compiled->nvrtc_version, " for ", arch);
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
  const auto function = static_cast<CUfunction>(kernel.function());
  std::vector<CUtensorMap> maps;
  std::vector<void*> params;
  if (launch.tensor_maps_size() > 0) {
    // The caller passed buffers and scalars: the maps go in between.
    if (kernel.parameters_ < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(kernel.function_name(),
                       ": takes tensor maps, and this driver cannot list a kernel's parameters"));
    }
    const auto count = static_cast<size_t>(kernel.parameters_);
    maps.resize(static_cast<size_t>(launch.tensor_maps_size()));
    params.assign(count, nullptr);
    for (int t = 0; t < launch.tensor_maps_size(); ++t) {
      const v1::TensorMapLayout& layout = launch.tensor_maps(t);
      const auto position = static_cast<size_t>(layout.argument());
      if (layout.buffer() < 0 || layout.buffer() >= layout.argument() || position >= count ||
          params[position] != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            kernel.function_name(), ": tensor map ", t, " is parameter ", layout.argument(),
            " over buffer ", layout.buffer(), "; the kernel has ", count, " parameters"));
      }
      const CUdeviceptr address = *static_cast<const CUdeviceptr*>(args[layout.buffer()]);
      absl::StatusOr<CUtensorMap> map = kernels::EncodeTensorMap(*state_->driver, layout, address);
      if (!map.ok()) {
        return absl::Status(
            map.status().code(),
            absl::StrCat(kernel.function_name(), ": tensor map ", t, " over buffer ",
                         layout.buffer(), ": ", map.status().message()));
      }
      maps[static_cast<size_t>(t)] = *map;
      params[position] = &maps[static_cast<size_t>(t)];
    }
    size_t next = 0;
    for (void*& param : params) {
      if (param == nullptr) param = args[next++];
    }
    args = params.data();
  }
  return state_->driver->Check(state_->driver->api().launch_kernel(
                                   function, grid[0], grid[1], grid[2], block[0], block[1],
                                   block[2], static_cast<unsigned>(launch.dynamic_shared_bytes()),
                                   static_cast<CUstream>(stream), args, nullptr),
                               absl::StrCat("cuLaunchKernel(", kernel.function_name(), ")"));
}

}  // namespace autotune::client
