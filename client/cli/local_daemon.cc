#include "client/cli/local_daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "base/paths.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "base/subprocess.h"
#include "client/client.h"

namespace autotune::client {
namespace {

std::string AutotunedPath() {
  const char* given = std::getenv("AUTOTUNED");
  if (given != nullptr && *given != '\0') return given;
  return FindBesideThisProgram("autotuned", {"../service"});
}

}  // namespace

LocalDaemon::LocalDaemon(std::string folder, bool keep)
    : folder_(std::move(folder)), address_("unix://" + folder_ + "/autotune.sock"), keep_(keep) {}

absl::StatusOr<std::unique_ptr<LocalDaemon>> LocalDaemon::Start(const LocalDaemonOptions& options) {
  std::string pattern = (std::filesystem::temp_directory_path() / "autotune-local-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return PosixError(absl::StrCat("cannot make a folder like ", pattern), errno);
  }
  std::unique_ptr<LocalDaemon> daemon(new LocalDaemon(pattern, options.keep));
  const std::string& folder = daemon->folder_;
  std::vector<std::string> argv = {AutotunedPath(), "--db",           folder + "/cache.db",
                                   "--listen",      daemon->address_, "--audit-log",
                                   "none"};
  for (const std::string& dir : options.kernels_dirs) argv.insert(argv.end(), {"--kernels", dir});
  if (!options.gpus.empty()) argv.insert(argv.end(), {"--gpus", options.gpus});
  if (options.compile_workers > 0) {
    argv.insert(argv.end(), {"--compile-workers", absl::StrCat(options.compile_workers)});
  }
  std::vector<char*> args;
  for (std::string& arg : argv) args.push_back(arg.data());
  args.push_back(nullptr);

  const std::string log_path = folder + "/autotuned.log";
  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log < 0) return PosixError(absl::StrCat("cannot open ", log_path), errno);
  const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0) {
    close(log);
    return PosixError("cannot open /dev/null", errno);
  }
  // SIGTERM when this command ends, even killed outright: the daemon then
  // stops as asked, and none is left running (its folder may be).
  const int spawned = SpawnTiedToThisThread(
      args, {{null, STDIN_FILENO}, {log, STDOUT_FILENO}, {log, STDERR_FILENO}}, SIGTERM,
      &daemon->pid_);
  close(log);
  close(null);
  if (spawned != 0) {
    daemon->pid_ = -1;
    return PosixError(absl::StrCat("cannot run ", argv[0]), spawned);
  }

  ClientOptions client_options;
  client_options.address = daemon->address_;
  client_options.timeout = absl::Seconds(1);
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(client_options));
  const absl::Time deadline = absl::Now() + options.start_timeout;
  while (true) {
    int status = 0;
    if (WaitForExit(daemon->pid_, absl::Now(), &status)) {
      daemon->pid_ = -1;
      return absl::FailedPreconditionError(
          absl::StrCat("the local autotuned (", argv[0], ") exited at start-up:\n", daemon->Log()));
    }
    if (client->Stats(v1::StatsRequest()).ok()) return daemon;
    if (absl::Now() >= deadline) {
      return absl::FailedPreconditionError(
          absl::StrCat("the local autotuned did not answer within ",
                       absl::FormatDuration(options.start_timeout), ":\n", daemon->Log()));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

LocalDaemon::~LocalDaemon() {
  Stop();
  if (!keep_) {
    std::error_code ignored;
    std::filesystem::remove_all(folder_, ignored);
  }
}

std::string LocalDaemon::Log() const {
  absl::StatusOr<std::string> log = ReadFile(folder_ + "/autotuned.log");
  return log.ok() ? *std::move(log) : std::string(log.status().message());
}

int LocalDaemon::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  if (!WaitForExit(pid_, absl::Now() + absl::Seconds(30), &status)) {
    kill(pid_, SIGKILL);
    WaitForExit(pid_, absl::InfiniteFuture(), &status);
    pid_ = -1;
    return -1;
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace autotune::client
