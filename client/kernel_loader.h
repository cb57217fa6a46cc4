// Turns a start-up answer (client/startup_lookup.h) into a kernel ready to
// launch: its cubin loaded into a module on the device's primary context
// (the one the CUDA runtime shares), its function resolved, and the launch
// geometry tuned for the problem.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<KernelLoader> gpu, KernelLoader::Open(0));
//   options.device = gpu->device();                  // so lookups check both
//   options.driver_version = gpu->driver_version();
//   ... answers = lookup->LookupAll(requests) ...
//   ASSIGN_OR_RETURN(LoadedKernel kernel, gpu->Load(answers[0], "gla_decode"));
//   void* args[] = {&q, &k, &v, &state, &out, &batch};
//   RETURN_IF_ERROR(gpu->Launch(kernel, args, stream));
//
// The CUDA driver is loaded with dlopen (kernels/cuda_driver.h): a program
// that links this library starts on a machine without one, and Open() says
// what is missing. Nothing here includes cuda.h: functions and streams are
// passed as void* (CUfunction, CUstream).
//
// Errors name the problem and what failed: FAILED_PRECONDITION when the
// answer has nothing to load (a MISS, or no cubin at hand: its note says
// why) or when the cubin does not load on this driver and device (built by
// a newer NVRTC, for another architecture), with the driver's message;
// NOT_FOUND when the function is not in the module.
//
// Thread-safe; a LoadedKernel may be launched from any thread.
#ifndef AUTOTUNE_CLIENT_KERNEL_LOADER_H_
#define AUTOTUNE_CLIENT_KERNEL_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/startup_lookup.h"
#include "proto/autotune.pb.h"

namespace autotune::client {

// A loaded kernel. Move-only; unloads its module when destroyed.
class LoadedKernel {
 public:
  LoadedKernel(LoadedKernel&&) noexcept;
  LoadedKernel& operator=(LoadedKernel&&) noexcept;
  ~LoadedKernel();

  void* function() const { return function_; }  // a CUfunction
  const std::string& function_name() const { return function_name_; }
  const v1::LaunchDims& launch() const { return launch_; }
  const v1::Config& config() const { return config_; }

 private:
  friend class KernelLoader;
  struct Module;
  LoadedKernel();
  std::unique_ptr<Module> module_;
  void* function_ = nullptr;
  std::string function_name_;
  v1::LaunchDims launch_;
  v1::Config config_;
};

class KernelLoader {
 public:
  // The device `ordinal`: the driver loaded and initialised, its primary
  // context retained. FAILED_PRECONDITION with the reason when there is no
  // driver or no such device.
  static absl::StatusOr<std::unique_ptr<KernelLoader>> Open(int ordinal = 0);
  ~KernelLoader();

  // As lookups name them: "NVIDIA H200", compute capability, SMs.
  const v1::Device& device() const { return device_; }
  // The CUDA version the driver supports: "13.0".
  const std::string& driver_version() const { return driver_version_; }

  // Loads the answer's cubin. `kernel_name` is the family's kernel_name,
  // used when the entry does not name its function (entries stored before
  // Entry.function_name).
  absl::StatusOr<LoadedKernel> Load(const StartupAnswer& answer,
                                    absl::string_view kernel_name) const;

  // cuLaunchKernel with the kernel's tuned grid, block and dynamic shared
  // memory on `stream` (a CUstream; null = the default stream). `args` as
  // cuLaunchKernel takes them: one pointer per kernel parameter.
  absl::Status Launch(const LoadedKernel& kernel, void** args, void* stream = nullptr) const;

 private:
  struct State;
  explicit KernelLoader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
  v1::Device device_;
  std::string driver_version_;
};

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_KERNEL_LOADER_H_
