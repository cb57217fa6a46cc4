// A private autotuned for `autotune tune --local`: started in a temporary
// folder of its own (database, socket, log), with the families of the given
// folders registered at start-up, and stopped (SIGTERM) and removed when the
// object goes. The daemon also gets SIGTERM when the thread that started it
// ends, even by SIGKILL of the whole command (base/subprocess.h): start it
// from the main thread. CI tunes a user's kernels with it without a service.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<LocalDaemon> daemon,
//                    LocalDaemon::Start({.kernels_dirs = {"my_kernels"}}));
//   ClientOptions options;
//   options.address = daemon->address();
//
// The autotuned used is the one beside this program (or in ../service for a
// binary in the build tree), else $AUTOTUNED.
#ifndef AUTOTUNE_CLIENT_CLI_LOCAL_DAEMON_H_
#define AUTOTUNE_CLIENT_CLI_LOCAL_DAEMON_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace autotune::client {

struct LocalDaemonOptions {
  std::vector<std::string> kernels_dirs;  // autotuned --kernels, each
  std::string gpus;                       // autotuned --gpus; empty = its default
  int compile_workers = 0;                // autotuned --compile-workers; 0 = its default
  bool keep = false;                      // leave the folder (its log, its database)
  absl::Duration start_timeout = absl::Seconds(60);
};

class LocalDaemon {
 public:
  // Starts autotuned and waits until it answers. FAILED_PRECONDITION with
  // its log when it exits first or does not answer in time (a family that
  // does not load fails its start, naming the file).
  static absl::StatusOr<std::unique_ptr<LocalDaemon>> Start(const LocalDaemonOptions& options);
  // Stop() if still running, then removes the folder unless options.keep.
  ~LocalDaemon();
  LocalDaemon(const LocalDaemon&) = delete;
  LocalDaemon& operator=(const LocalDaemon&) = delete;

  const std::string& address() const { return address_; }
  const std::string& folder() const { return folder_; }
  // What it has written to stdout and stderr so far.
  std::string Log() const;
  // SIGTERM, then waits (SIGKILL after 30 s). Its exit status, -1 when killed.
  int Stop();

 private:
  LocalDaemon(std::string folder, bool keep);

  std::string folder_;
  std::string address_;
  bool keep_ = false;
  pid_t pid_ = -1;
};

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_CLI_LOCAL_DAEMON_H_
