// Turns one kernel variant's source into a cubin with NVRTC. Worker side:
// only autotune-worker and tools that compile link this (autotune::nvrtc);
// the daemon keys compiles with kernels/compile_request.h alone.
//
//   ASSIGN_OR_RETURN(const Nvrtc* nvrtc, Nvrtc::Load());   // dlopen, once
//   CompileRequest request{.source = family.source(),
//                          .program_name = "vector_scale.cu",
//                          .name_expression = "vector_scale",
//                          .options = {"-DBLOCK=256", "-DELEMS_PER_THREAD=2"},
//                          .arch = "sm_90"};
//   CompileResult result = Compile(*nvrtc, request);
//   if (result.status == CompileStatus::kOk) store(result.cubin);
//   else report(result.log);
//
// The library is found with dlopen, trying in order $AUTOTUNE_NVRTC (when
// set), "libnvrtc.so.13", "libnvrtc.so" and
// "/usr/local/cuda/lib64/libnvrtc.so.13"; the first that opens is used. So
// programs that link this module start on machines without the CUDA toolkit
// and say clearly what is missing. A loaded library is never unloaded.
//
// Thread-safety: Nvrtc::Load() is safe to call from any thread and returns
// the same object; Compile() may run on several threads at once (NVRTC
// programs are independent), though NVRTC scales poorly on threads: the
// compile pool uses processes.
#ifndef AUTOTUNE_KERNELS_GPU_COMPILER_H_
#define AUTOTUNE_KERNELS_GPU_COMPILER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/compile_request.h"

namespace autotune::kernels {

// The dlopen'ed NVRTC library.
class Nvrtc {
 public:
  // The process-wide NVRTC, loaded from SearchPaths() on the first call; the
  // outcome (success or error) is kept for the life of the process.
  // FAILED_PRECONDITION naming every path tried and dlerror() when NVRTC is
  // not installed or lacks a needed symbol.
  static absl::StatusOr<const Nvrtc*> Load();

  // Where Load() looks, in order: $AUTOTUNE_NVRTC when set and not empty,
  // then "libnvrtc.so.13", "libnvrtc.so",
  // "/usr/local/cuda/lib64/libnvrtc.so.13". Read anew on every call.
  static std::vector<std::string> SearchPaths();

  // Loads NVRTC from the first of `paths` that dlopen accepts, as a new object
  // independent of Load()'s (for tools and tests). FAILED_PRECONDITION
  // "cannot load NVRTC (set AUTOTUNE_NVRTC ...); tried: <path>: <dlerror>;
  // ..." when none opens, or
  // "<path>: NVRTC symbol nvrtcXxx not found: <dlerror>" when the first
  // library that opens is not a usable NVRTC (later paths are not tried).
  // Also FAILED_PRECONDITION when NVRTC's builtins cannot be loaded
  // (LoadBuiltins), since no compile could then succeed.
  static absl::StatusOr<std::unique_ptr<Nvrtc>> LoadFrom(const std::vector<std::string>& paths);

  // NVRTC opens its builtins library (`name`, "libnvrtc-builtins.so.13.0")
  // by name at its first compile. The loader looks for a name only on its
  // own path (LD_LIBRARY_PATH, ld.so.cache), not beside an NVRTC that was
  // opened by its absolute path, so on a host whose loader path lacks the
  // toolkit every compile would fail. This loads it first from `nvrtc_dir`,
  // the loaded NVRTC's own folder (so that the builtins match that NVRTC),
  // else by name; NVRTC's later open by name then finds it loaded.
  // FAILED_PRECONDITION "NVRTC's <name> is neither in <dir> (<dlerror>) nor
  // on the loader's path (<dlerror>); add the folder that holds it to
  // LD_LIBRARY_PATH". Never unloaded.
  static absl::Status LoadBuiltins(const std::string& nvrtc_dir, const std::string& name);

  ~Nvrtc();
  Nvrtc(const Nvrtc&) = delete;
  Nvrtc& operator=(const Nvrtc&) = delete;

  // "13.0": part of every compile key.
  const std::string& version() const { return version_; }
  // The path that was opened, as given to dlopen (e.g. "libnvrtc.so.13").
  const std::string& path() const { return path_; }
  // The CUDA toolkit's include directory (cuda_fp16.h, cuda_bf16.h...),
  // which NVRTC does not find by itself: ToolkitIncludeDir(library_dir())
  // (kernels/include_check.h). Compile() passes it with -I.
  const std::string& include_dir() const { return include_dir_; }
  // The folder of the loaded library, symlinks resolved (where its builtins
  // library lives too); empty when the loader cannot say.
  const std::string& library_dir() const { return library_dir_; }

  // Implementation detail: the resolved entry points (opaque to callers).
  struct Api;
  const Api& api() const { return *api_; }

 private:
  Nvrtc();
  std::string version_;
  std::string path_;
  std::string include_dir_;
  std::string library_dir_;
  std::unique_ptr<const Api> api_;
};

enum class CompileStatus {
  kOk,
  kCompileError,    // the source did not compile; `log` says why
  kInvalidRequest,  // bad arch or options, rejected before compiling
};

struct CompileResult {
  CompileStatus status = CompileStatus::kCompileError;
  std::string cubin;         // kOk: the ELF image
  std::string lowered_name;  // kOk: the symbol to look up in the module
  std::string log;           // NVRTC's log (warnings too, for kOk)
};

// Compiles `request` with "-arch=<arch>" followed by `options` as given.
//
// kInvalidRequest, with the reason in `log`: an empty name expression, an
// arch that is not sm_NN[a|f] (compute_NN included), an option that sets the
// architecture itself (-arch..., --gpu-architecture...), or an option NVRTC
// does not accept (e.g. -O3).
// kCompileError: the source did not compile; `log` is NVRTC's full log, whose
// messages read "<program_name>(<line>): error: ...". Also, before NVRTC
// runs, an #include of the source or of a header that names neither one of
// request.headers nor a header of include_dir() (kernels/include_check.h):
// "include refused: <program or header name>:<line>: ...".
// NVRTC gets -I<include_dir()> and -no-source-include after `options`: it
// never searches the process's working directory.
//
// Never throws; NVRTC failures that are not the source's fault (out of memory,
// internal errors) come back as kCompileError with NVRTC's message in `log`.
CompileResult Compile(const Nvrtc& nvrtc, const CompileRequest& request);

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_GPU_COMPILER_H_
