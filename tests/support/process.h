// Child processes for end-to-end tests: the real autotuned and autotune
// binaries, with their output captured. Each is tied to the thread that
// started it (PR_SET_PDEATHSIG): when the test process dies, crashed or
// killed by a ctest timeout, its daemons and commands die with it rather
// than run on. Start a Daemon from a thread that outlives it (the test's).
#ifndef AUTOTUNE_TESTS_SUPPORT_PROCESS_H_
#define AUTOTUNE_TESTS_SUPPORT_PROCESS_H_

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/temp_dir.h"
#include "proto/autotune.pb.h"

namespace autotune::testing {

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out;
  std::string err;
};

// Runs `argv` to completion (killed after `timeout`) and captures its output.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         absl::Duration timeout = absl::Seconds(60),
                         const std::string& stdin_text = "");

// The pids of `parent`'s children whose command name starts with `name`
// (/proc/<pid>/stat; the kernel keeps 15 characters of it).
std::vector<pid_t> ChildrenNamed(pid_t parent, const std::string& name);
// Whether `pid` has ended: gone, or a zombie its parent has not reaped.
bool ProcessEnded(pid_t pid);

// The daemon under test. Start() returns once it answers on its socket.
class Daemon {
 public:
  // `args` are extra flags; --db and --listen default to files in `dir`.
  Daemon(std::string dir, std::vector<std::string> args = {});
  ~Daemon();  // SIGKILL if still running

  // Starts and waits until the socket accepts a Stats call. On failure the
  // daemon's exit status and stderr are in the error.
  absl::Status Start(absl::Duration timeout = absl::Seconds(20));
  // SIGTERM, then waits for the exit code (SIGKILL after `timeout`).
  int Stop(absl::Duration timeout = absl::Seconds(20));
  // SIGKILL, as a crash or an OOM kill would end it; waits for it to go.
  void Kill();
  // Waits for the process to end by itself (start-up failures).
  int WaitExit(absl::Duration timeout = absl::Seconds(20));

  const std::string& address() const { return address_; }
  const std::string& socket_path() const { return socket_path_; }
  const std::string& db_path() const { return db_path_; }
  std::string Stderr() const;  // what it has written so far
  pid_t pid() const { return pid_; }

 private:
  std::string dir_;
  std::vector<std::string> args_;
  std::string socket_path_;
  std::string address_;
  std::string db_path_;
  std::string log_path_;
  pid_t pid_ = -1;
};

// Polls `autotune --server address jobs --json` every `every` until `done`
// accepts the newest job, or until `timeout`; returns the newest job seen
// last (check it with `done` again when the deadline may have passed).
v1::Job WaitForNewestJob(const std::string& address,
                         const std::function<bool(const v1::Job&)>& done, absl::Duration timeout,
                         absl::Duration every = absl::Milliseconds(200));

// One plain HTTP/1.0 exchange with 127.0.0.1:`port`. `headers` are whole
// lines without the line end ("Authorization: Bearer x"). status 0 when
// no answer came.
struct HttpAnswer {
  int status = 0;
  std::string headers;  // the status line and headers as received
  std::string body;
};
// "Host: localhost" is sent unless `headers` hold a Host line, or an empty
// string (then no Host header at all).
HttpAnswer HttpCall(int port, const std::string& method, const std::string& path,
                    const std::vector<std::string>& headers = {}, const std::string& body = "");

// The test family of service/testdata (service/testing/fake_profile_worker.cc
// acts out its MODE values) in `dir`: modes.textproto with only the MODE
// values `modes` ("[0, 1, 2, 6]"), modes.cu, and modes.manifest of the
// problems n = `n_values` ("[256, 512]") in FLOAT32. FAILED_PRECONDITION when
// the family no longer lists MODE as this expects.
absl::Status WriteModesFamily(const std::string& dir, const std::string& modes,
                              const std::string& n_values);

// The environment variable `name`, or `fallback` when it is unset or empty.
// A bundle run on another machine names its paths this way.
std::string EnvironmentOr(const char* name, const std::string& fallback);

// Paths of the binaries under test: set by CMake, overridden by the
// environment variables AUTOTUNED and AUTOTUNE_CLI (bundled runs).
std::string AutotunedPath();
std::string AutotuneCliPath();
std::string MakeSamplePath();

}  // namespace autotune::testing

#endif  // AUTOTUNE_TESTS_SUPPORT_PROCESS_H_
