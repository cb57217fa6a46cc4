// autotune-worker: a process the daemon starts (posix_spawn) to do work
// that must not run inside the daemon. `autotune-worker compile` compiles
// kernel variants with NVRTC: it writes a Hello, then answers each
// CompileTask read from stdin with a CompileOutcome on stdout, until stdin
// closes. The daemon kills it when a task runs past its deadline.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "absl/time/clock.h"
#include "kernels/compiler.h"
#include "proto/worker.pb.h"
#include "service/worker_pipe.h"

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
    absl::Status read =
        autotune::service::ReadDelimited(STDIN_FILENO, absl::InfiniteFuture(), &request);
    if (absl::IsAborted(read)) return 0;  // the daemon closed our stdin
    if (!read.ok()) {
      std::fprintf(stderr, "autotune-worker: %s\n", std::string(read.message()).c_str());
      return 1;
    }
    if (!request.has_compile()) {
      std::fprintf(stderr, "autotune-worker: unexpected request for a compile worker\n");
      return 1;
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

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "compile") == 0) return ServeCompile();
  std::fprintf(stderr,
               "usage: autotune-worker compile\n"
               "autotune-worker is started by autotuned; it is not meant to be run by hand.\n");
  return 2;
}
