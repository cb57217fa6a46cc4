#include "kernels/gpu/compiler.h"

#include <dlfcn.h>
#include <link.h>
#include <nvrtc.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <exception>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "kernels/include_check.h"
#include "proto/problem.h"

namespace autotune::kernels {

// Function pointers typed from nvrtc.h's declarations; nothing links them.
struct Nvrtc::Api {
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetErrorString) get_error_string = nullptr;
  decltype(&::nvrtcCreateProgram) create_program = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy_program = nullptr;
  decltype(&::nvrtcAddNameExpression) add_name_expression = nullptr;
  decltype(&::nvrtcCompileProgram) compile_program = nullptr;
  decltype(&::nvrtcGetProgramLogSize) get_program_log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) get_program_log = nullptr;
  decltype(&::nvrtcGetCUBINSize) get_cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) get_cubin = nullptr;
  decltype(&::nvrtcGetLoweredName) get_lowered_name = nullptr;
};

namespace {

constexpr char kOverrideVariable[] = "AUTOTUNE_NVRTC";

std::string DlError() {
  const char* error = dlerror();
  return error != nullptr ? error : "unknown dlerror";
}

// Resolves `name` from `handle` into `*fn`, keeping the pointer's type.
// See Nvrtc::include_dir().
// The folder of the library behind `handle`, symlinks resolved; empty when
// the loader cannot say.
std::string LibraryDir(void* handle) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) {
    return "";
  }
  char resolved[PATH_MAX];
  if (realpath(map->l_name, resolved) == nullptr) return "";
  std::string library(resolved);
  const size_t slash = library.find_last_of('/');
  return slash == std::string::npos ? "" : library.substr(0, slash);
}

template <typename Fn>
absl::Status Resolve(void* handle, const std::string& path, const char* name, Fn* fn) {
  dlerror();  // Clears any earlier error so the one below is ours.
  void* symbol = dlsym(handle, name);
  if (symbol == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": NVRTC symbol ", name, " not found: ", DlError()));
  }
  *fn = reinterpret_cast<Fn>(symbol);
  return absl::OkStatus();
}

// Owns one nvrtcProgram; destroying it never throws and ignores errors (there
// is nothing a caller could do about a failed destroy).
class Program {
 public:
  Program(const Nvrtc::Api& api, nvrtcProgram program) : api_(&api), program_(program) {}
  Program(Program&& other) noexcept
      : api_(other.api_), program_(std::exchange(other.program_, nullptr)) {}
  Program& operator=(Program&& other) noexcept {
    if (this != &other) {
      Reset();
      api_ = other.api_;
      program_ = std::exchange(other.program_, nullptr);
    }
    return *this;
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  ~Program() { Reset(); }

  nvrtcProgram get() const { return program_; }

 private:
  void Reset() noexcept {
    if (program_ != nullptr) api_->destroy_program(&program_);
    program_ = nullptr;
  }

  const Nvrtc::Api* api_;
  nvrtcProgram program_;
};
static_assert(!std::is_copy_constructible_v<Program>);
static_assert(std::is_nothrow_move_constructible_v<Program>);
static_assert(std::is_nothrow_destructible_v<Program>);

std::string ErrorText(const Nvrtc::Api& api, const char* call, nvrtcResult result) {
  const char* text = api.get_error_string(result);
  return absl::StrCat(call, " failed: ", text != nullptr ? text : "unknown NVRTC error", " (",
                      static_cast<int>(result), ")");
}

// NVRTC's log without its terminating NUL; a failure to read it is reported
// in its place.
std::string ProgramLog(const Nvrtc::Api& api, nvrtcProgram program) {
  size_t size = 0;
  nvrtcResult result = api.get_program_log_size(program, &size);
  if (result != NVRTC_SUCCESS) return ErrorText(api, "nvrtcGetProgramLogSize", result);
  std::string log(size, '\0');
  if (size > 0) {
    result = api.get_program_log(program, log.data());
    if (result != NVRTC_SUCCESS) return ErrorText(api, "nvrtcGetProgramLog", result);
  }
  while (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

bool AllDigits(absl::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "90", "90a", "100f": a compute capability with an optional feature suffix.
bool IsCapability(absl::string_view text) {
  if (!text.empty() && (text.back() == 'a' || text.back() == 'f')) text.remove_suffix(1);
  return text.size() >= 2 && text.size() <= 3 && AllDigits(text);
}

// Empty when `arch` names a real architecture, else why not.
std::string ArchProblem(const std::string& arch) {
  absl::string_view view(arch);
  if (IsGpuArch(arch)) return "";
  view = arch;
  if (absl::ConsumePrefix(&view, "compute_") && IsCapability(view)) {
    return absl::StrCat("arch '", arch,
                        "' is a virtual architecture that produces PTX only; a cubin needs a real "
                        "one such as 'sm_",
                        view, "'");
  }
  return absl::StrCat("arch '", arch, "' is not a GPU architecture (expected e.g. 'sm_90')");
}

CompileResult Rejected(std::string why) {
  CompileResult result;
  result.status = CompileStatus::kInvalidRequest;
  result.log = std::move(why);
  return result;
}

CompileResult Failed(std::string log) {
  CompileResult result;
  result.status = CompileStatus::kCompileError;
  result.log = std::move(log);
  return result;
}

// Appends `text` after `log`, on a line of its own.
std::string JoinLog(std::string log, const std::string& text) {
  if (text.empty()) return log;
  if (!log.empty() && log.back() != '\n') log.push_back('\n');
  return log + text;
}

CompileResult CompileOrThrow(const Nvrtc& nvrtc, const CompileRequest& request) {
  if (request.name_expression.empty()) {
    return Rejected("no name expression: the kernel to look up in the result is required");
  }
  if (std::string problem = ArchProblem(request.arch); !problem.empty()) {
    return Rejected(std::move(problem));
  }
  // Only options that cannot make NVRTC touch a file of the host
  // (compile_request.h), whoever sends the request.
  for (const std::string& option : request.options) {
    if (absl::Status allowed = CheckCompileOption(option); !allowed.ok()) {
      return Rejected(absl::StrCat("option refused: ", allowed.message()));
    }
  }

  // Only the family's headers and the toolkit's: the preprocessor reads
  // nothing else of the host, wherever this process runs (include_check.h).
  IncludeRules rules{.shipped = {}, .toolkit_include_dir = nvrtc.include_dir()};
  for (const SourceHeader& header : request.headers) rules.shipped.push_back(header.name);
  if (std::optional<IncludeProblem> problem = FindForbiddenInclude(request.source, rules)) {
    return Failed(absl::StrCat("include refused: ", request.program_name, ":", problem->line, ": ",
                               problem->message));
  }
  for (const SourceHeader& header : request.headers) {
    if (std::optional<IncludeProblem> problem = FindForbiddenInclude(header.text, rules)) {
      return Failed(absl::StrCat("include refused: ", header.name, ":", problem->line, ": ",
                                 problem->message));
    }
  }

  const Nvrtc::Api& api = nvrtc.api();
  nvrtcProgram raw = nullptr;
  std::vector<const char*> header_texts;
  std::vector<const char*> header_names;
  for (const SourceHeader& header : request.headers) {
    header_texts.push_back(header.text.c_str());
    header_names.push_back(header.name.c_str());
  }
  nvrtcResult rc = api.create_program(
      &raw, request.source.c_str(),
      request.program_name.empty() ? nullptr : request.program_name.c_str(),
      static_cast<int>(request.headers.size()), header_texts.data(), header_names.data());
  if (rc != NVRTC_SUCCESS) return Failed(ErrorText(api, "nvrtcCreateProgram", rc));
  Program program(api, raw);

  rc = api.add_name_expression(program.get(), request.name_expression.c_str());
  if (rc != NVRTC_SUCCESS) {
    return Failed(absl::StrCat(ErrorText(api, "nvrtcAddNameExpression", rc), " for '",
                               request.name_expression, "'"));
  }

  std::vector<std::string> options;
  options.reserve(request.options.size() + 3);
  options.push_back(absl::StrCat("-arch=", request.arch));
  options.insert(options.end(), request.options.begin(), request.options.end());
  if (!nvrtc.include_dir().empty()) options.push_back(absl::StrCat("-I", nvrtc.include_dir()));
  // NVRTC would also search the folder of the program's source, which for a
  // program made from memory is the process's working directory.
  options.push_back("-no-source-include");
  std::vector<const char*> argv;
  argv.reserve(options.size());
  for (const std::string& option : options) argv.push_back(option.c_str());

  rc = api.compile_program(program.get(), static_cast<int>(argv.size()), argv.data());
  std::string log = ProgramLog(api, program.get());
  if (rc == NVRTC_ERROR_COMPILATION) return Failed(std::move(log));
  if (rc == NVRTC_ERROR_INVALID_OPTION) {
    CompileResult result =
        Rejected(JoinLog(std::move(log), ErrorText(api, "nvrtcCompileProgram", rc)));
    absl::StrAppend(&result.log, "; options: ", absl::StrJoin(options, " "));
    return result;
  }
  if (rc != NVRTC_SUCCESS) {
    return Failed(JoinLog(std::move(log), ErrorText(api, "nvrtcCompileProgram", rc)));
  }

  // The lowered name lives in the program; copy it before the program goes.
  const char* lowered = nullptr;
  rc = api.get_lowered_name(program.get(), request.name_expression.c_str(), &lowered);
  if (rc != NVRTC_SUCCESS || lowered == nullptr) {
    return Failed(JoinLog(std::move(log), absl::StrCat(ErrorText(api, "nvrtcGetLoweredName", rc),
                                                       " for '", request.name_expression, "'")));
  }
  CompileResult result;
  result.lowered_name = lowered;

  size_t size = 0;
  rc = api.get_cubin_size(program.get(), &size);
  if (rc != NVRTC_SUCCESS) {
    return Failed(JoinLog(std::move(log), ErrorText(api, "nvrtcGetCUBINSize", rc)));
  }
  if (size == 0) return Failed(JoinLog(std::move(log), "NVRTC produced an empty cubin"));
  result.cubin.resize(size);
  rc = api.get_cubin(program.get(), result.cubin.data());
  if (rc != NVRTC_SUCCESS) {
    return Failed(JoinLog(std::move(log), ErrorText(api, "nvrtcGetCUBIN", rc)));
  }
  result.status = CompileStatus::kOk;
  result.log = std::move(log);
  return result;
}

}  // namespace

Nvrtc::Nvrtc() = default;
Nvrtc::~Nvrtc() = default;

std::vector<std::string> Nvrtc::SearchPaths() {
  std::vector<std::string> paths;
  // getenv is not synchronised with setenv; the environment is expected to
  // be set before threads start.
  if (const char* override_path = std::getenv(kOverrideVariable);
      override_path != nullptr && override_path[0] != '\0') {
    paths.push_back(override_path);
  }
  paths.push_back("libnvrtc.so.13");
  paths.push_back("libnvrtc.so");
  paths.push_back("/usr/local/cuda/lib64/libnvrtc.so.13");
  return paths;
}

absl::StatusOr<std::unique_ptr<Nvrtc>> Nvrtc::LoadFrom(const std::vector<std::string>& paths) {
  void* handle = nullptr;
  std::string opened;
  std::vector<std::string> tried;
  for (const std::string& path : paths) {
    // RTLD_LOCAL: NVRTC's symbols stay out of the global namespace. The
    // handle is never closed: NVRTC may keep threads and state alive.
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      opened = path;
      break;
    }
    tried.push_back(absl::StrCat(path, ": ", DlError()));
  }
  if (handle == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load NVRTC (set ", kOverrideVariable, " to libnvrtc.so's path); tried: ",
        tried.empty() ? std::string("no paths") : absl::StrJoin(tried, "; ")));
  }

  auto api = std::make_unique<Api>();
  absl::Status status = Resolve(handle, opened, "nvrtcVersion", &api->version);
  if (status.ok()) status = Resolve(handle, opened, "nvrtcGetErrorString", &api->get_error_string);
  if (status.ok()) status = Resolve(handle, opened, "nvrtcCreateProgram", &api->create_program);
  if (status.ok()) status = Resolve(handle, opened, "nvrtcDestroyProgram", &api->destroy_program);
  if (status.ok()) {
    status = Resolve(handle, opened, "nvrtcAddNameExpression", &api->add_name_expression);
  }
  if (status.ok()) status = Resolve(handle, opened, "nvrtcCompileProgram", &api->compile_program);
  if (status.ok()) {
    status = Resolve(handle, opened, "nvrtcGetProgramLogSize", &api->get_program_log_size);
  }
  if (status.ok()) status = Resolve(handle, opened, "nvrtcGetProgramLog", &api->get_program_log);
  if (status.ok()) status = Resolve(handle, opened, "nvrtcGetCUBINSize", &api->get_cubin_size);
  if (status.ok()) status = Resolve(handle, opened, "nvrtcGetCUBIN", &api->get_cubin);
  if (status.ok()) status = Resolve(handle, opened, "nvrtcGetLoweredName", &api->get_lowered_name);
  if (!status.ok()) return status;

  int major = 0;
  int minor = 0;
  if (nvrtcResult rc = api->version(&major, &minor); rc != NVRTC_SUCCESS) {
    return absl::FailedPreconditionError(
        absl::StrCat(opened, ": ", ErrorText(*api, "nvrtcVersion", rc)));
  }

  if (absl::Status builtins = LoadBuiltins(
          LibraryDir(handle), absl::StrCat("libnvrtc-builtins.so.", major, ".", minor));
      !builtins.ok()) {
    return builtins;
  }

  std::unique_ptr<Nvrtc> nvrtc(new Nvrtc());
  nvrtc->version_ = absl::StrCat(major, ".", minor);
  nvrtc->path_ = opened;
  nvrtc->include_dir_ = ToolkitIncludeDir(LibraryDir(handle));
  nvrtc->library_dir_ = LibraryDir(handle);
  nvrtc->api_ = std::move(api);
  return nvrtc;
}

absl::Status Nvrtc::LoadBuiltins(const std::string& nvrtc_dir, const std::string& name) {
  std::string beside_error = "NVRTC's folder is unknown";
  if (!nvrtc_dir.empty()) {
    const std::string beside = absl::StrCat(nvrtc_dir, "/", name);
    if (dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL) != nullptr) return absl::OkStatus();
    beside_error = DlError();
  }
  if (dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL) != nullptr) return absl::OkStatus();
  const std::string by_name_error = DlError();
  return absl::FailedPreconditionError(absl::StrCat(
      "NVRTC's ", name, " is neither in ", nvrtc_dir.empty() ? "NVRTC's folder" : nvrtc_dir, " (",
      beside_error, ") nor on the loader's path (", by_name_error,
      "); add the folder that holds it to LD_LIBRARY_PATH"));
}

absl::StatusOr<const Nvrtc*> Nvrtc::Load() {
  // Built once, thread-safely; never destroyed, so compiles running while the
  // process exits keep a valid library.
  static const absl::StatusOr<std::unique_ptr<Nvrtc>>* const loaded =
      new absl::StatusOr<std::unique_ptr<Nvrtc>>(LoadFrom(SearchPaths()));
  if (!loaded->ok()) return loaded->status();
  return loaded->value().get();
}

CompileResult Compile(const Nvrtc& nvrtc, const CompileRequest& request) {
  try {
    return CompileOrThrow(nvrtc, request);
  } catch (const std::bad_alloc&) {
    return Failed("out of memory while compiling");
  } catch (const std::exception& e) {
    return Failed(absl::StrCat("compile failed: ", e.what()));
  }
}

}  // namespace autotune::kernels
