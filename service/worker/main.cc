// autotune-worker: a process the daemon starts (posix_spawn) to do work
// that must not run inside the daemon. `autotune-worker compile` compiles
// kernel variants with NVRTC: it writes a Hello, then answers each
// CompileTask read from stdin with a CompileOutcome on stdout, until stdin
// closes. The daemon kills it when a task runs past its deadline.
//
// `autotune-worker compile [--memory-limit-mb N] [--allow-unconfined]`
// confines itself before its Hello (service/worker/confinement.h): reads
// only beneath the CUDA toolkit's headers and NVRTC's own folder, no
// writes. It works in an empty folder (the compile pool starts it there and
// it refuses any other), so that no relative path leads anywhere (NVRTC is
// also told never to search the working directory: kernels/gpu/compiler.h). Where the kernel cannot
// confine it, it says hello with the reason as an error and exits, unless
// --allow-unconfined, when it serves and its Hello says why it is not
// confined. --memory-limit-mb caps its data memory (not applied in a
// sanitizer build, whose shadow memory the cap would count; the Hello says
// so).
//
// `autotune-worker profile --device N` validates and times kernel variants
// on GPU N (service/worker/profiler.h): it writes a Hello with the device (or with
// the reason it cannot serve, then exits 1), then answers each ProfileTask
// with one VariantOutcome per variant, each written as soon as it is known,
// and a ProfileDone, and each DeviceProbe with a DeviceState (what NVML sees
// on the GPU besides this worker). After a variant hung or faulted the GPU context is
// unusable: the worker writes the ProfileDone and exits with status 3
// without running destructors, which could wait on the hung kernel.
//
// stdout carries the protocol alone; diagnostics go to stderr.
#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/gpu/compiler.h"
#include "proto/worker.pb.h"
#include "service/worker/confinement.h"
#include "service/worker/profiler.h"
#include "service/worker/worker_pipe.h"

namespace {

namespace wv1 = ::autotune::worker::v1;

wv1::CompileOutcome::Status ToProto(autotune::kernels::CompileStatus status) {
  switch (status) {
    case autotune::kernels::CompileStatus::kOk:
      return wv1::CompileOutcome::OK;
    case autotune::kernels::CompileStatus::kCompileError:
      return wv1::CompileOutcome::COMPILE_ERROR;
    case autotune::kernels::CompileStatus::kInvalidRequest:
      return wv1::CompileOutcome::INVALID_REQUEST;
  }
  return wv1::CompileOutcome::COMPILE_ERROR;
}

// Reads the next request, which must be of kind `expected` (or `also`). nullopt when
// one was read; otherwise the worker's exit status: 0 when the daemon
// closed our stdin, 1 for anything else (said on stderr).
std::optional<int> NextRequest(
    wv1::WorkerRequest::KindCase expected, wv1::WorkerRequest* request,
    wv1::WorkerRequest::KindCase also = wv1::WorkerRequest::KIND_NOT_SET) {
  absl::Status read =
      autotune::kernel_worker::ReadDelimited(STDIN_FILENO, absl::InfiniteFuture(), request);
  if (absl::IsAborted(read)) return 0;
  if (!read.ok()) {
    std::fprintf(stderr, "autotune-worker: %s\n", std::string(read.message()).c_str());
    return 1;
  }
  if (request->kind_case() != expected &&
      (also == wv1::WorkerRequest::KIND_NOT_SET || request->kind_case() != also)) {
    std::fprintf(stderr, "autotune-worker: a request of another kind (%d) than this worker's\n",
                 static_cast<int>(request->kind_case()));
    return 1;
  }
  return std::nullopt;
}

struct CompileFlags {
  int64_t memory_limit_mb = 0;  // 0 = none
  bool allow_unconfined = false;
};

// A first compile, once confined: it shows that NVRTC works within the
// confinement (its builtins library loaded, the toolkit's headers readable)
// before the worker says hello.
constexpr char kWarmUpSource[] = R"(
#include <cuda_fp16.h>
extern "C" __global__ void autotune_warm_up(__half* x) { x[0] = __float2half(1.0f); }
)";

// Compiles run in an empty working directory, so that no relative path a
// compile names finds a file whatever the daemon's working directory holds
// ("/" under systemd holds etc/passwd): the compile pool starts every
// worker in an empty folder of its own. A worker started elsewhere refuses
// rather than compile there. (A removed directory would be as empty, but
// NVRTC 13.0 then reads past a buffer of its own: getcwd fails there.)
absl::Status CheckTheWorkingDirectoryIsEmpty() {
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("the working directory is gone or unreadable: ", std::strerror(errno)));
  }
  DIR* dir = opendir(".");
  if (dir == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read the working directory ", cwd, ": ", std::strerror(errno)));
  }
  std::string found;
  while (const dirent* entry = readdir(dir)) {
    if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0) {
      found = entry->d_name;
      break;
    }
  }
  closedir(dir);
  if (!found.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the working directory ", cwd, " is not empty (it holds '", found,
        "'): a compile's relative include could read it; start compile workers in an empty "
        "folder (autotuned's compile pool does)"));
  }
  return absl::OkStatus();
}

int ServeCompile(const CompileFlags& flags) {
  wv1::WorkerResponse hello;
  wv1::Hello& said = *hello.mutable_hello();
  said.set_pid(getpid());
  auto refuse = [&](std::string why) {
    said.set_error(std::move(why));
    (void)autotune::kernel_worker::WriteDelimited(STDOUT_FILENO, hello);
    return 1;
  };
  auto nvrtc = autotune::kernels::Nvrtc::Load();
  if (!nvrtc.ok()) return refuse(std::string(nvrtc.status().message()));
  said.set_nvrtc_version((*nvrtc)->version());
  if (absl::Status empty = CheckTheWorkingDirectoryIsEmpty(); !empty.ok()) {
    return refuse(std::string(empty.message()));
  }

  // Confined before its first compile, while NVRTC has started no thread
  // of its own (Landlock binds the calling thread and those it starts).
  absl::StatusOr<autotune::kernel_worker::Confinement> confined =
      autotune::kernel_worker::ConfineToReadOnly(
          {(*nvrtc)->include_dir(), (*nvrtc)->library_dir()});
  if (confined.ok()) {
    said.set_confinement(confined->description);
  } else if (flags.allow_unconfined) {
    said.set_confinement(absl::StrCat("none: ", confined.status().message()));
  } else {
    return refuse(absl::StrCat("cannot confine compiles: ", confined.status().message(),
                               "; start autotuned with --allow-unconfined-compiles to compile "
                               "family sources without confinement"));
  }
  autotune::kernels::CompileRequest warm_up;
  warm_up.source = kWarmUpSource;
  warm_up.program_name = "warm_up.cu";
  warm_up.name_expression = "autotune_warm_up";
  warm_up.arch = "sm_90";
  if (autotune::kernels::CompileResult warm = autotune::kernels::Compile(**nvrtc, warm_up);
      warm.status != autotune::kernels::CompileStatus::kOk) {
    return refuse(absl::StrCat("NVRTC ", (*nvrtc)->version(),
                               " cannot compile a kernel that includes cuda_fp16.h (confinement: ",
                               said.confinement(), "): ", warm.log));
  }
  if (flags.memory_limit_mb <= 0) {
    said.set_memory_limit("none: no limit given");
  } else if (autotune::kSanitizerBuild) {
    said.set_memory_limit("none: a sanitizer build (its shadow memory would count)");
  } else if (absl::Status limited =
                 autotune::kernel_worker::LimitMemory(flags.memory_limit_mb << 20);
             !limited.ok()) {
    return refuse(std::string(limited.message()));
  } else {
    said.set_memory_limit(absl::StrCat(flags.memory_limit_mb, " MiB (RLIMIT_DATA)"));
  }
  if (!autotune::kernel_worker::WriteDelimited(STDOUT_FILENO, hello).ok()) return 1;

  while (true) {
    wv1::WorkerRequest request;
    if (std::optional<int> exit_code = NextRequest(wv1::WorkerRequest::kCompile, &request)) {
      return *exit_code;
    }
    const wv1::CompileTask& task = request.compile();
    autotune::kernels::CompileRequest compile;
    compile.source = task.source();
    compile.program_name = task.program_name();
    compile.name_expression = task.name_expression();
    compile.options.assign(task.options().begin(), task.options().end());
    compile.arch = task.arch();
    for (const autotune::v1::SourceHeader& header : task.headers()) {
      compile.headers.push_back({header.name(), header.text()});
    }
    const absl::Time start = absl::Now();
    autotune::kernels::CompileResult result = autotune::kernels::Compile(**nvrtc, compile);
    wv1::WorkerResponse response;
    wv1::CompileOutcome* outcome = response.mutable_compile();
    outcome->set_task_id(task.task_id());
    outcome->set_status(ToProto(result.status));
    outcome->set_cubin(std::move(result.cubin));
    outcome->set_lowered_name(std::move(result.lowered_name));
    outcome->set_log(std::move(result.log));
    outcome->set_compile_seconds(absl::ToDoubleSeconds(absl::Now() - start));
    if (!autotune::kernel_worker::WriteDelimited(STDOUT_FILENO, response).ok()) return 1;
  }
}

// Exit status of a profile worker whose GPU context is lost (a variant hung
// or faulted): the daemon starts a new worker for the variants that remain.
constexpr int kContextLostExit = 3;

// Writes an answer of a task in flight to the daemon; exits when nobody
// listens any more (the GPU work in flight dies with the process).
void Answer(const wv1::WorkerResponse& response) {
  if (absl::Status written = autotune::kernel_worker::WriteDelimited(STDOUT_FILENO, response);
      !written.ok()) {
    std::fprintf(stderr, "autotune-worker: %s\n", std::string(written.message()).c_str());
    _exit(1);
  }
}

int ServeProfile(int ordinal) {
  wv1::WorkerResponse hello;
  hello.mutable_hello()->set_pid(getpid());
  auto profiler = autotune::kernel_worker::Profiler::Open(ordinal);
  if (!profiler.ok()) {
    const std::string reason(profiler.status().message());
    std::fprintf(stderr, "autotune-worker: device %d: %s\n", ordinal, reason.c_str());
    hello.mutable_hello()->set_error(reason);
    (void)autotune::kernel_worker::WriteDelimited(STDOUT_FILENO, hello);
    return 1;
  }
  *hello.mutable_hello()->mutable_device() = (*profiler)->device();
  if (!autotune::kernel_worker::WriteDelimited(STDOUT_FILENO, hello).ok()) return 1;

  while (true) {
    wv1::WorkerRequest request;
    if (std::optional<int> exit_code =
            NextRequest(wv1::WorkerRequest::kProfile, &request, wv1::WorkerRequest::kProbe)) {
      return *exit_code;
    }
    if (request.has_probe()) {
      wv1::WorkerResponse response;
      *response.mutable_device_state() = (*profiler)->Probe();
      if (!autotune::kernel_worker::WriteDelimited(STDOUT_FILENO, response).ok()) return 1;
      continue;
    }
    const wv1::ProfileDone done = (*profiler)->Run(
        request.profile(),
        [&request] {
          wv1::WorkerResponse response;
          response.mutable_reference_done()->set_task_id(request.profile().task_id());
          Answer(response);
        },
        [](const wv1::VariantOutcome& outcome) {
          wv1::WorkerResponse response;
          *response.mutable_variant() = outcome;
          Answer(response);
        });
    wv1::WorkerResponse response;
    *response.mutable_profile_done() = done;
    const absl::Status written = autotune::kernel_worker::WriteDelimited(STDOUT_FILENO, response);
    if (!(*profiler)->usable()) {
      std::fprintf(stderr, "autotune-worker: device %d unusable, exiting: %s\n", ordinal,
                   done.detail().c_str());
      // _exit: no destructors, no atexit handlers, nothing that could wait
      // for a kernel that never ends; the driver frees the GPU when the
      // process is gone.
      _exit(kContextLostExit);
    }
    if (!written.ok()) return 1;
  }
}

int Usage() {
  std::fprintf(stderr,
               "usage: autotune-worker compile [--memory-limit-mb N] [--allow-unconfined]\n"
               "       autotune-worker profile --device N\n"
               "autotune-worker is started by autotuned; it is not meant to be run by hand.\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "compile") == 0) {
    CompileFlags flags;
    for (int i = 2; i < argc; ++i) {
      if (std::strcmp(argv[i], "--allow-unconfined") == 0) {
        flags.allow_unconfined = true;
      } else if (std::strcmp(argv[i], "--memory-limit-mb") == 0 && i + 1 < argc) {
        if (!absl::SimpleAtoi(argv[++i], &flags.memory_limit_mb) || flags.memory_limit_mb < 0) {
          return Usage();
        }
      } else {
        return Usage();
      }
    }
    return ServeCompile(flags);
  }
  if (argc >= 2 && std::strcmp(argv[1], "profile") == 0) {
    // --device N or --device=N; device 0 when not given.
    int ordinal = 0;
    for (int i = 2; i < argc; ++i) {
      std::string value;
      if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
        value = argv[++i];
      } else if (absl::StartsWith(argv[i], "--device=")) {
        value = argv[i] + std::strlen("--device=");
      } else {
        return Usage();
      }
      if (!absl::SimpleAtoi(value, &ordinal) || ordinal < 0) return Usage();
    }
    return ServeProfile(ordinal);
  }
  return Usage();
}
