#include "tests/support/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "base/subprocess.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "proto/autotune.grpc.pb.h"

namespace autotune::testing {
namespace {

std::vector<char*> Argv(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  return argv;
}

// Starts `args` (base/subprocess.h): the child receives SIGKILL when the
// thread that started it ends, so a test process that dies (a crash, a
// ctest timeout) takes the processes it started with it.
int SpawnTestChild(const std::vector<char*>& args, const std::vector<std::pair<int, int>>& dups,
                   pid_t* pid) {
  return SpawnTiedToThisThread(args, dups, SIGKILL, pid);
}

// Waits for `pid` until `deadline` (WaitForExit); fills exit code (-1 when
// it did not exit) and signal (0 when none). False on timeout.
bool WaitUntil(pid_t pid, absl::Time deadline, int* exit_code, int* signal_number) {
  int status = 0;
  if (!WaitForExit(pid, deadline, &status)) return false;
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  *signal_number = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return true;
}

}  // namespace

std::vector<pid_t> ChildrenNamed(pid_t parent, const std::string& name) {
  std::vector<pid_t> pids;
  for (const auto& process : std::filesystem::directory_iterator("/proc")) {
    const std::string pid_text = process.path().filename().string();
    if (pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(process.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    const std::string comm = line.substr(open + 1, close - open - 1);
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && comm.rfind(name.substr(0, 15), 0) == 0) {
      pids.push_back(static_cast<pid_t>(std::stol(pid_text)));
    }
  }
  return pids;
}

bool ProcessEnded(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

CommandResult RunCommand(const std::vector<std::string>& argv, absl::Duration timeout,
                         const std::string& stdin_text) {
  CommandResult result;
  int out_pipe[2], err_pipe[2], in_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 ||
      pipe2(in_pipe, O_CLOEXEC) != 0) {
    result.err = std::string(PosixError("pipe", errno).message());
    return result;
  }
  pid_t pid = -1;
  std::vector<char*> args = Argv(argv);
  const int spawned =
      SpawnTestChild(args, {{in_pipe[0], 0}, {out_pipe[1], 1}, {err_pipe[1], 2}}, &pid);
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (spawned != 0) {
    close(in_pipe[1]);
    close(out_pipe[0]);
    close(err_pipe[0]);
    result.err = std::string(PosixError(absl::StrCat("cannot run ", argv[0]), spawned).message());
    return result;
  }
  if (!stdin_text.empty()) {
    size_t written = 0;
    while (written < stdin_text.size()) {
      const ssize_t n = write(in_pipe[1], stdin_text.data() + written, stdin_text.size() - written);
      if (n <= 0) break;
      written += static_cast<size_t>(n);
    }
  }
  close(in_pipe[1]);
  const absl::Time deadline = absl::Now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  char buffer[65536];
  while (open_fds > 0) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      kill(pid, SIGKILL);
      break;
    }
    if (poll(fds, 2, static_cast<int>(std::min<int64_t>(left_ms, 1000))) < 0 && errno != EINTR) {
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd& fd : fds) {
    if (fd.fd >= 0) close(fd.fd);
  }
  WaitUntil(pid, absl::InfiniteFuture(), &result.exit_code, &result.signal);
  return result;
}

Daemon::Daemon(std::string dir, std::vector<std::string> args)
    : dir_(std::move(dir)), args_(std::move(args)) {
  socket_path_ = dir_ + "/autotune.sock";
  address_ = "unix://" + socket_path_;
  db_path_ = dir_ + "/state/cache.db";
  log_path_ = dir_ + "/autotuned.log";
}

Daemon::~Daemon() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int code = 0, sig = 0;
    WaitUntil(pid_, absl::InfiniteFuture(), &code, &sig);
  }
}

absl::Status Daemon::Start(absl::Duration timeout) {
  std::vector<std::string> argv = {AutotunedPath()};
  const bool has_db = std::find(args_.begin(), args_.end(), "--db") != args_.end();
  const bool has_listen = std::find(args_.begin(), args_.end(), "--listen") != args_.end();
  if (!has_db) argv.insert(argv.end(), {"--db", db_path_});
  if (!has_listen) argv.insert(argv.end(), {"--listen", address_});
  argv.insert(argv.end(), args_.begin(), args_.end());

  const int log = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log < 0) return PosixError(absl::StrCat("cannot open ", log_path_), errno);
  std::vector<char*> args = Argv(argv);
  const int spawned = SpawnTestChild(args, {{log, 1}, {log, 2}}, &pid_);
  close(log);
  if (spawned != 0) {
    pid_ = -1;
    return PosixError(absl::StrCat("cannot run ", args[0]), spawned);
  }
  if (has_listen) return absl::OkStatus();  // the caller knows how to reach it

  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int code = 0, sig = 0;
    if (WaitUntil(pid_, absl::Now(), &code, &sig)) {
      pid_ = -1;
      return absl::FailedPreconditionError(
          absl::StrCat("autotuned exited with ", code, " (signal ", sig, "): ", Stderr()));
    }
    // A fresh channel each try: a failed one waits out gRPC's reconnect backoff.
    auto stub =
        v1::Autotune::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(500)));
    v1::StatsRequest request;
    v1::StatsResponse response;
    // Refused is answered too: a daemon whose roles leave this uid out is up.
    const grpc::Status answered = stub->Stats(&context, request, &response);
    if (answered.ok() || answered.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        answered.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
      return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("autotuned did not answer within ",
                                                  absl::FormatDuration(timeout), ": ", Stderr()));
}

int Daemon::Stop(absl::Duration timeout) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int code = -1, sig = 0;
  if (!WaitUntil(pid_, absl::Now() + timeout, &code, &sig)) {
    kill(pid_, SIGKILL);
    WaitUntil(pid_, absl::InfiniteFuture(), &code, &sig);
    code = -1;
  }
  pid_ = -1;
  return code;
}

void Daemon::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int code = 0, sig = 0;
  WaitUntil(pid_, absl::InfiniteFuture(), &code, &sig);
  pid_ = -1;
}

int Daemon::WaitExit(absl::Duration timeout) {
  if (pid_ <= 0) return -1;
  int code = -1, sig = 0;
  if (!WaitUntil(pid_, absl::Now() + timeout, &code, &sig)) return -1;
  pid_ = -1;
  return code;
}

std::string Daemon::Stderr() const {
  absl::StatusOr<std::string> log = ReadFile(log_path_);
  // A test shows this text when the daemon failed; a missing log says why.
  return log.ok() ? *std::move(log) : std::string(log.status().message());
}

std::string EnvironmentOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

std::string AutotunedPath() { return EnvironmentOr("AUTOTUNED", AUTOTUNE_AUTOTUNED_PATH); }
std::string AutotuneCliPath() { return EnvironmentOr("AUTOTUNE_CLI", AUTOTUNE_CLI_PATH); }
std::string MakeSamplePath() { return AUTOTUNE_MAKE_SAMPLE_PATH; }

v1::Job WaitForNewestJob(const std::string& address,
                         const std::function<bool(const v1::Job&)>& done, absl::Duration timeout,
                         absl::Duration every) {
  const absl::Time deadline = absl::Now() + timeout;
  v1::Job newest;
  while (absl::Now() < deadline) {
    CommandResult jobs = RunCommand({AutotuneCliPath(), "--server", address, "jobs", "--json"});
    v1::ListJobsResponse response;
    if (jobs.exit_code == 0 &&
        google::protobuf::util::JsonStringToMessage(jobs.out, &response).ok() &&
        response.jobs_size() > 0) {
      newest = response.jobs(0);
      if (done(newest)) return newest;
    }
    absl::SleepFor(every);
  }
  return newest;
}

absl::Status WriteModesFamily(const std::string& dir, const std::string& modes,
                              const std::string& n_values) {
  constexpr absl::string_view kAllModes = "values: [0, 1, 2, 3, 4, 5, 6, 7]";
  ASSIGN_OR_RETURN(std::string family, ReadFile(SERVICE_TESTDATA_DIR "/modes.textproto"));
  if (!absl::StrContains(family, kAllModes)) {
    return absl::FailedPreconditionError(
        absl::StrCat(SERVICE_TESTDATA_DIR "/modes.textproto no longer says ", kAllModes));
  }
  ASSIGN_OR_RETURN(const std::string source, ReadFile(SERVICE_TESTDATA_DIR "/modes.cu"));
  RETURN_IF_ERROR(WriteFileAtomically(
      dir + "/modes.textproto",
      absl::StrReplaceAll(family, {{kAllModes, absl::StrCat("values: ", modes)}})));
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/modes.cu", source));
  return WriteFileAtomically(dir + "/modes.manifest",
                             absl::StrCat("items { family: \"modes\" dims { name: \"n\" values: ",
                                          n_values, " } dtypes: [FLOAT32] }\n"));
}

HttpAnswer HttpCall(int port, const std::string& method, const std::string& path,
                    const std::vector<std::string>& headers, const std::string& body) {
  HttpAnswer answer;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return answer;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    std::string request = absl::StrCat(method, " ", path, " HTTP/1.0\r\n");
    // Host: localhost unless the caller gives one ("" for none at all).
    const bool own_host = std::any_of(headers.begin(), headers.end(), [](const std::string& h) {
      return absl::StartsWithIgnoreCase(h, "Host:") || h.empty();
    });
    if (!own_host) absl::StrAppend(&request, "Host: localhost\r\n");
    for (const std::string& header : headers) {
      if (!header.empty()) absl::StrAppend(&request, header, "\r\n");
    }
    if (!body.empty()) absl::StrAppend(&request, "Content-Length: ", body.size(), "\r\n");
    absl::StrAppend(&request, "\r\n", body);
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      ssize_t n = 0;
      while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
    }
  }
  close(fd);
  const size_t end = response.find("\r\n\r\n");
  if (end == std::string::npos) return answer;
  answer.headers = response.substr(0, end);
  answer.body = response.substr(end + 4);
  const size_t space = answer.headers.find(' ');
  if (space == std::string::npos ||
      !absl::SimpleAtoi(answer.headers.substr(space + 1, 3), &answer.status)) {
    answer.status = 0;
  }
  return answer;
}

}  // namespace autotune::testing
