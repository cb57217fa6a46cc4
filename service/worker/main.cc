// autotune-worker: a process the daemon starts (posix_spawn) to do work
// that must not run inside the daemon. `autotune-worker compile` compiles
// kernel variants with NVRTC: it writes a Hello, then answers each
// CompileTask read from stdin with a CompileOutcome on stdout, until stdin
// closes. The daemon kills it when a task runs past its deadline.
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
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "kernels/gpu/compiler.h"
#include "proto/worker.pb.h"
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
      autotune::service::ReadDelimited(STDIN_FILENO, absl::InfiniteFuture(), request);
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

int ServeCompile() {
  wv1::WorkerResponse hello;
  hello.mutable_hello()->set_pid(getpid());
  auto nvrtc = autotune::kernels::Nvrtc::Load();
  if (!nvrtc.ok()) {
    hello.mutable_hello()->set_error(std::string(nvrtc.status().message()));
    (void)autotune::service::WriteDelimited(STDOUT_FILENO, hello);
    return 1;
  }
  hello.mutable_hello()->set_nvrtc_version((*nvrtc)->version());
  if (!autotune::service::WriteDelimited(STDOUT_FILENO, hello).ok()) return 1;

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
    if (!autotune::service::WriteDelimited(STDOUT_FILENO, response).ok()) return 1;
  }
}

// Exit status of a profile worker whose GPU context is lost (a variant hung
// or faulted): the daemon starts a new worker for the variants that remain.
constexpr int kContextLostExit = 3;

int ServeProfile(int ordinal) {
  wv1::WorkerResponse hello;
  hello.mutable_hello()->set_pid(getpid());
  auto profiler = autotune::kernels::Profiler::Open(ordinal);
  if (!profiler.ok()) {
    const std::string reason(profiler.status().message());
    std::fprintf(stderr, "autotune-worker: device %d: %s\n", ordinal, reason.c_str());
    hello.mutable_hello()->set_error(reason);
    (void)autotune::service::WriteDelimited(STDOUT_FILENO, hello);
    return 1;
  }
  *hello.mutable_hello()->mutable_device() = (*profiler)->device();
  if (!autotune::service::WriteDelimited(STDOUT_FILENO, hello).ok()) return 1;

  while (true) {
    wv1::WorkerRequest request;
    if (std::optional<int> exit_code =
            NextRequest(wv1::WorkerRequest::kProfile, &request, wv1::WorkerRequest::kProbe)) {
      return *exit_code;
    }
    if (request.has_probe()) {
      wv1::WorkerResponse response;
      *response.mutable_device_state() = (*profiler)->Probe();
      if (!autotune::service::WriteDelimited(STDOUT_FILENO, response).ok()) return 1;
      continue;
    }
    const wv1::ProfileDone done =
        (*profiler)->Run(request.profile(), [](const wv1::VariantOutcome& outcome) {
          wv1::WorkerResponse response;
          *response.mutable_variant() = outcome;
          if (absl::Status written = autotune::service::WriteDelimited(STDOUT_FILENO, response);
              !written.ok()) {
            // Nobody is listening any more; the GPU work in flight dies with
            // the process.
            std::fprintf(stderr, "autotune-worker: %s\n", std::string(written.message()).c_str());
            _exit(1);
          }
        });
    wv1::WorkerResponse response;
    *response.mutable_profile_done() = done;
    const absl::Status written = autotune::service::WriteDelimited(STDOUT_FILENO, response);
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
               "usage: autotune-worker compile\n"
               "       autotune-worker profile --device N\n"
               "autotune-worker is started by autotuned; it is not meant to be run by hand.\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "compile") == 0) return ServeCompile();
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
