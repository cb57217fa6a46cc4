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
// The CUDA driver is loaded with dlopen (kernels/gpu/cuda_driver.h): a program
// that links this library starts on a machine without one, and Open() says
// what is missing. Nothing here includes cuda.h: functions and streams are
// passed as void* (CUfunction, CUstream).
//
// What is loaded, and launched with which geometry:
// - EXACT and NEAREST: the entry's config, with the launch for the
//   requested problem (LookupResponse.launch; a NEAREST entry's own launch
//   was computed for the dims it was tuned at).
// - MISS_DRIVER_TOO_OLD: the entry's config, compiled here.
// - Any other MISS: the family's default config (default_launch), compiled
//   here.
// "Compiled here": when the answer has no cubin that loads (none at hand,
// or the driver refuses it: built by a newer NVRTC, for another
// architecture) and it carries a compile recipe with its source
// (StartupOptions.recipes), the config is compiled with the NVRTC found on
// this host for this GPU (sm_<compute capability>) and that is loaded; the
// LoadedKernel says so (origin, note). NVRTC is dlopen'ed like the driver
// ($AUTOTUNE_NVRTC, libnvrtc.so.13, ...; kernels/gpu/compiler.h).
//
// What is served is checked before the driver sees it (client/cubin_check.h):
// a cubin whose ELF header is not a CUDA binary the device runs, or whose
// kernel takes other parameters than the answer's family declares
// (LookupResponse.parameter_bytes against the cubin's .nv.info), is treated
// as a cubin that does not load ("its cubin is refused: ..."), and the
// recipe, when there is one, is compiled here (and checked the same way:
// FAILED_PRECONDITION "... it is refused: parameter 2 ..."); a launch outside the
// device's limits (grid, block, threads, dynamic shared memory, tensor
// maps) is FAILED_PRECONDITION "the answer's launch is refused: ...", with
// no fallback (every kernel of the answer would run with it). Recipes are
// compiled through the include check of every compile
// (kernels/include_check.h): a recipe that includes anything but its own
// headers and the toolkit's does not compile.
//
// Errors name the problem and what failed: FAILED_PRECONDITION when there is
// nothing to load (a MISS without a default config, no cubin and no recipe:
// the answer's note says why; no launch for the requested problem), when
// the cubin does not load and there is no recipe or NVRTC to compile it
// (the driver's message, and NVRTC's), or when the recipe does not compile
// (NVRTC's log); NOT_FOUND when the function is not in the module.
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

enum class KernelOrigin {
  kServedBinary,  // the cubin the answer carried (from the service or local cache)
  kCompiledHere,  // the answer's recipe, compiled on this host
};

// A cubin compiled here from a recipe.
struct LocalBinary {
  std::string cubin;
  std::string function_name;  // the lowered name of the recipe's name expression
  std::string nvrtc_version;  // "13.0"
  std::string log;            // NVRTC's (warnings)
};

// Compiles `recipe` over `source` (its text: recipe.source() or the
// answer's recipe_source) for `arch` ("sm_90") with this host's NVRTC.
// FAILED_PRECONDITION when NVRTC cannot be loaded (every path tried) or the
// source does not match recipe.source_sha256; INVALID_ARGUMENT with NVRTC's
// log when it does not compile.
absl::StatusOr<LocalBinary> CompileRecipe(const v1::CompileRecipe& recipe, absl::string_view source,
                                          absl::string_view arch);

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
  KernelOrigin origin() const { return origin_; }
  // For people: why it was compiled here, and how ("the answer has no cubin
  // (MISS_NO_ENTRY): the default config compiled here by NVRTC 13.0 for
  // sm_90"); empty for a served binary.
  const std::string& note() const { return note_; }

 private:
  friend class KernelLoader;
  struct Module;
  LoadedKernel();
  std::unique_ptr<Module> module_;
  void* function_ = nullptr;
  std::string function_name_;
  v1::LaunchDims launch_;
  v1::Config config_;
  KernelOrigin origin_ = KernelOrigin::kServedBinary;
  std::string note_;
  // The kernel's parameter count, read at load for a kernel with tensor
  // maps; -1 when not read (no tensor maps, or the driver cannot tell).
  int parameters_ = -1;
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

  // Loads the answer's kernel (see above). `kernel_name` is the family's
  // kernel_name, used when the entry does not name its function (entries
  // stored before Entry.function_name).
  absl::StatusOr<LoadedKernel> Load(const StartupAnswer& answer,
                                    absl::string_view kernel_name) const;

  // cuLaunchKernel with the kernel's tuned grid, block and dynamic shared
  // memory on `stream` (a CUstream; null = the default stream). `args` as
  // cuLaunchKernel takes them: one pointer per kernel parameter, except
  // that a kernel with tensor maps (launch().tensor_maps(), the family's
  // `tensor_maps`) gets the family's buffers and scalars only: each tensor
  // map is built over the device pointer passed for its buffer and goes in
  // its place after the buffers. INVALID_ARGUMENT when a tensor map cannot
  // be built over that pointer (not 16-byte aligned).
  absl::Status Launch(const LoadedKernel& kernel, void** args, void* stream = nullptr) const;

 private:
  struct State;
  explicit KernelLoader(std::unique_ptr<State> state);
  // `cubin` loaded, `function_name` resolved, set up for `launch`.
  absl::StatusOr<LoadedKernel> LoadCubin(const StartupAnswer& answer, absl::string_view cubin,
                                         const std::string& function_name,
                                         const v1::LaunchDims& launch) const;
  std::unique_ptr<State> state_;
  v1::Device device_;
  std::string driver_version_;
};

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_KERNEL_LOADER_H_
