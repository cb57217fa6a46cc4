// One autotune-worker process and the two socketpairs the daemon talks to
// it over (its stdin and stdout), started with posix_spawn: a fresh exec,
// never a bare fork of the daemon (a forked child of a process that used
// the CUDA driver cannot initialise it).
//
//   WorkerProcess worker;
//   ASSIGN_OR_RETURN(worker::v1::Hello hello,
//                    worker.Start(path, {"profile", "--device", "0"}, absl::Seconds(30)));
//   RETURN_IF_ERROR(worker.Send(request));
//   absl::Status read = worker.Receive(absl::Now() + timeout, &response);
//   if (absl::IsDeadlineExceeded(read)) worker.Kill();
//
// Thread-compatible: one thread at a time uses a WorkerProcess.
#ifndef AUTOTUNE_SERVICE_POOLS_WORKER_PROCESS_H_
#define AUTOTUNE_SERVICE_POOLS_WORKER_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"

namespace autotune::service {

// "exited with status 3", "was killed by signal 9 (Killed)".
std::string DescribeExit(int wait_status);

class WorkerProcess {
 public:
  WorkerProcess() = default;
  // Stop(): closes the worker's input and reaps it.
  ~WorkerProcess();
  WorkerProcess(WorkerProcess&& other) noexcept;
  WorkerProcess& operator=(WorkerProcess&& other) noexcept;
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // Starts `path args...` and reads its Hello. FAILED_PRECONDITION naming
  // the path and the reason when it cannot start, does not say hello in
  // time, or says hello with an error (the worker's own message); the
  // process is gone then. A non-empty `working_dir` is the worker's working
  // directory (else it inherits this process's).
  absl::StatusOr<worker::v1::Hello> Start(const std::string& path,
                                          const std::vector<std::string>& args,
                                          absl::Duration start_timeout,
                                          const std::string& working_dir = "");

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  // ABORTED when the worker is gone.
  absl::Status Send(const worker::v1::WorkerRequest& request);
  // DEADLINE_EXCEEDED when nothing came by `deadline`; ABORTED at end of
  // stream (the worker exited); DATA_LOSS for a malformed message.
  absl::Status Receive(absl::Time deadline, worker::v1::WorkerResponse* response);

  // How the worker ended, if it has (reaps it without waiting): "exited
  // with status 1", or "stopped answering" when it still runs.
  std::string ExitReason();
  // SIGKILL, reap, close. Safe on a worker that is not running.
  void Kill();
  // Closes the worker's input so it exits on its own; SIGKILL after `grace`.
  void Stop(absl::Duration grace = absl::Seconds(2));

 private:
  void CloseFds();

  pid_t pid_ = -1;
  int to_worker_ = -1;
  int from_worker_ = -1;
  std::string exit_reason_;  // set once reaped
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_POOLS_WORKER_PROCESS_H_
