#include "service/compile_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "service/worker_pipe.h"

extern char** environ;

namespace autotune::service {
namespace {

namespace wv1 = ::autotune::worker::v1;

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return "ended";
}

wv1::CompileOutcome Failed(const wv1::CompileTask& task, wv1::CompileOutcome::Status status,
                           std::string log) {
  wv1::CompileOutcome outcome;
  outcome.set_task_id(task.task_id());
  outcome.set_status(status);
  outcome.set_log(std::move(log));
  return outcome;
}

}  // namespace

CompilePool::CompilePool(CompilePoolOptions options)
    : options_(std::move(options)),
      size_(options_.workers > 0
                ? options_.workers
                : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))),
      slots_(static_cast<size_t>(size_)) {}

absl::StatusOr<std::unique_ptr<CompilePool>> CompilePool::Start(const CompilePoolOptions& options) {
  if (options.worker_path.empty()) {
    return absl::InvalidArgumentError("compile pool: worker_path is empty");
  }
  auto pool = std::unique_ptr<CompilePool>(new CompilePool(options));
  absl::Status started = pool->Spawn(pool->slots_[0]);
  if (!started.ok()) return started;
  return pool;
}

CompilePool::~CompilePool() {
  for (Slot& slot : slots_) {
    if (slot.pid <= 0) continue;
    close(slot.to_worker);  // end of input: the worker exits
    const absl::Time deadline = absl::Now() + absl::Seconds(2);
    int status = 0;
    while (waitpid(slot.pid, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(slot.pid, SIGKILL);
        waitpid(slot.pid, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    close(slot.from_worker);
    slot.pid = -1;
  }
}

absl::Status CompilePool::Spawn(Slot& slot) {
  int to_worker[2], from_worker[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, to_worker) != 0 ||
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, from_worker) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_worker[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, from_worker[1], STDOUT_FILENO);
  std::string path = options_.worker_path;
  std::string mode = "compile";
  char* argv[] = {path.data(), mode.data(), nullptr};
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(to_worker[1]);
  close(from_worker[1]);
  if (spawned != 0) {
    close(to_worker[0]);
    close(from_worker[0]);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot start ", path, ": ", std::strerror(spawned)));
  }
  slot.pid = pid;
  slot.to_worker = to_worker[0];
  slot.from_worker = from_worker[0];

  wv1::WorkerResponse hello;
  absl::Status read = ReadDelimited(slot.from_worker, absl::Now() + options_.start_timeout, &hello);
  if (!read.ok() || !hello.has_hello() || !hello.hello().error().empty()) {
    std::string why = !read.ok()          ? std::string(read.message())
                      : hello.has_hello() ? hello.hello().error()
                                          : "it did not say hello";
    Kill(slot);
    return absl::FailedPreconditionError(absl::StrCat("compile worker ", path, ": ", why));
  }
  if (nvrtc_version_.empty()) nvrtc_version_ = hello.hello().nvrtc_version();
  return absl::OkStatus();
}

void CompilePool::Kill(Slot& slot) {
  if (slot.pid > 0) {
    kill(slot.pid, SIGKILL);
    int status = 0;
    waitpid(slot.pid, &status, 0);
  }
  if (slot.to_worker >= 0) close(slot.to_worker);
  if (slot.from_worker >= 0) close(slot.from_worker);
  slot = Slot{.busy = slot.busy};
}

wv1::CompileOutcome CompilePool::Compile(const wv1::CompileTask& task, absl::Duration timeout) {
  Slot* slot = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto has_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const Slot& candidate : slots_) {
        if (!candidate.busy) return true;
      }
      return false;
    };
    mu_.Await(absl::Condition(&has_free));
    // Prefer a running worker; start a new one only when none is idle.
    for (Slot& candidate : slots_) {
      if (!candidate.busy && (slot == nullptr || (slot->pid <= 0 && candidate.pid > 0))) {
        slot = &candidate;
      }
    }
    slot->busy = true;
  }
  auto release = [this, slot] {
    absl::MutexLock lock(&mu_);
    slot->busy = false;
  };

  if (slot->pid <= 0) {
    absl::Status spawned = Spawn(*slot);
    if (!spawned.ok()) {
      release();
      return Failed(task, wv1::CompileOutcome::WORKER_LOST, std::string(spawned.message()));
    }
  }
  wv1::WorkerRequest request;
  *request.mutable_compile() = task;
  absl::Status status = WriteDelimited(slot->to_worker, request);
  wv1::WorkerResponse response;
  if (status.ok()) status = ReadDelimited(slot->from_worker, absl::Now() + timeout, &response);
  if (status.ok() && !response.has_compile()) {
    status = absl::DataLossError("the worker answered with something other than a compile outcome");
  }
  wv1::CompileOutcome outcome;
  if (status.ok()) {
    outcome = std::move(*response.mutable_compile());
  } else if (absl::IsDeadlineExceeded(status)) {
    Kill(*slot);
    ++replaced_;
    outcome = Failed(task, wv1::CompileOutcome::TIMEOUT,
                     absl::StrCat("compile did not finish within ", absl::FormatDuration(timeout),
                                  "; the worker was killed"));
  } else {
    // Reap it to say how it ended.
    int exit_status = 0;
    std::string how = "stopped answering";
    if (slot->pid > 0 && waitpid(slot->pid, &exit_status, WNOHANG) == slot->pid) {
      how = DescribeExit(exit_status);
      slot->pid = -1;
    }
    Kill(*slot);
    ++replaced_;
    outcome = Failed(
        task, wv1::CompileOutcome::WORKER_LOST,
        absl::StrCat("the compile worker ", how, " while compiling (", status.message(), ")"));
  }
  release();
  return outcome;
}

}  // namespace autotune::service
