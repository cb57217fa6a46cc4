#include "service/pools/worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/posix_error.h"
#include "service/worker/worker_pipe.h"

extern char** environ;

namespace autotune::service {

namespace wv1 = ::autotune::worker::v1;

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with status ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(wait_status), " (",
                        strsignal(WTERMSIG(wait_status)), ")");
  }
  return "ended";
}

WorkerProcess::~WorkerProcess() { Stop(); }

WorkerProcess::WorkerProcess(WorkerProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      to_worker_(std::exchange(other.to_worker_, -1)),
      from_worker_(std::exchange(other.from_worker_, -1)),
      exit_reason_(std::move(other.exit_reason_)) {}

WorkerProcess& WorkerProcess::operator=(WorkerProcess&& other) noexcept {
  if (this != &other) {
    Stop();
    pid_ = std::exchange(other.pid_, -1);
    to_worker_ = std::exchange(other.to_worker_, -1);
    from_worker_ = std::exchange(other.from_worker_, -1);
    exit_reason_ = std::move(other.exit_reason_);
  }
  return *this;
}

absl::StatusOr<wv1::Hello> WorkerProcess::Start(const std::string& path,
                                                const std::vector<std::string>& args,
                                                absl::Duration start_timeout,
                                                const std::string& working_dir) {
  Kill();
  exit_reason_.clear();
  const std::string command = absl::StrCat(path, " ", absl::StrJoin(args, " "));
  int to_worker[2], from_worker[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, to_worker) != 0) {
    return PosixError("socketpair", errno);
  }
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, from_worker) != 0) {
    const int error = errno;
    close(to_worker[0]);
    close(to_worker[1]);
    return PosixError("socketpair", error);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_worker[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, from_worker[1], STDOUT_FILENO);
  if (!working_dir.empty()) posix_spawn_file_actions_addchdir_np(&actions, working_dir.c_str());
  std::vector<std::string> words = {path};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(to_worker[1]);
  close(from_worker[1]);
  if (spawned != 0) {
    close(to_worker[0]);
    close(from_worker[0]);
    // FAILED_PRECONDITION whatever the errno (see the header): a worker that
    // cannot be run is the daemon's set-up, not something to retry.
    return absl::FailedPreconditionError(
        PosixError(absl::StrCat("cannot start ", command), spawned).message());
  }
  pid_ = pid;
  to_worker_ = to_worker[0];
  from_worker_ = from_worker[0];

  wv1::WorkerResponse hello;
  absl::Status read = Receive(absl::Now() + start_timeout, &hello);
  if (!read.ok() || !hello.has_hello() || !hello.hello().error().empty()) {
    std::string why = !read.ok()          ? std::string(read.message())
                      : hello.has_hello() ? hello.hello().error()
                                          : "it did not say hello";
    Kill();
    return absl::FailedPreconditionError(absl::StrCat(command, ": ", why));
  }
  return hello.hello();
}

absl::Status WorkerProcess::Send(const wv1::WorkerRequest& request) {
  if (to_worker_ < 0) return absl::AbortedError("the worker is not running");
  return kernel_worker::WriteDelimited(to_worker_, request);
}

absl::Status WorkerProcess::Receive(absl::Time deadline, wv1::WorkerResponse* response) {
  if (from_worker_ < 0) return absl::AbortedError("the worker is not running");
  return kernel_worker::ReadDelimited(from_worker_, deadline, response);
}

std::string WorkerProcess::ExitReason() {
  if (!exit_reason_.empty()) return exit_reason_;
  if (pid_ <= 0) return "is not running";
  int status = 0;
  // The worker may be a moment away from exiting after closing its output.
  const absl::Time deadline = absl::Now() + absl::Milliseconds(500);
  while (true) {
    const pid_t reaped = waitpid(pid_, &status, WNOHANG);
    if (reaped == pid_) {
      exit_reason_ = DescribeExit(status);
      pid_ = -1;
      return exit_reason_;
    }
    if (reaped < 0 || absl::Now() > deadline) return "stopped answering";
    absl::SleepFor(absl::Milliseconds(5));
  }
}

void WorkerProcess::Kill() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  CloseFds();
}

void WorkerProcess::Stop(absl::Duration grace) {
  if (pid_ > 0) {
    if (to_worker_ >= 0) {
      close(to_worker_);  // end of input: the worker exits
      to_worker_ = -1;
    }
    const absl::Time deadline = absl::Now() + grace;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    pid_ = -1;
  }
  CloseFds();
}

void WorkerProcess::CloseFds() {
  if (to_worker_ >= 0) close(to_worker_);
  if (from_worker_ >= 0) close(from_worker_);
  to_worker_ = -1;
  from_worker_ = -1;
}

}  // namespace autotune::service
