// A pool of `autotune-worker compile` processes that compile kernel
// variants in parallel, each compile with a deadline.
//
//   ASSIGN_OR_RETURN(auto pool, CompilePool::Start({.worker_path = path}));
//   worker::v1::CompileOutcome outcome = pool->Compile(task, absl::Seconds(60));
//
// Why processes: NVRTC in one process stops scaling near 4 threads, while
// separate processes scale almost linearly; and a compile that hangs can
// only be stopped by killing its process. A worker that runs past the
// deadline is killed (SIGKILL) and the outcome is TIMEOUT; one that dies is
// WORKER_LOST; either way the next task gets a fresh worker. Workers start
// lazily, up to `workers`, and are started with posix_spawn (never a bare
// fork of the daemon).
//
// Thread-safe: Compile() blocks until a worker is free.
#ifndef AUTOTUNE_SERVICE_POOLS_COMPILE_POOL_H_
#define AUTOTUNE_SERVICE_POOLS_COMPILE_POOL_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"
#include "service/pools/worker_process.h"

namespace autotune::service {

struct CompilePoolOptions {
  std::string worker_path;  // the autotune-worker executable
  int workers = 0;          // 0 = one per core
  absl::Duration start_timeout = absl::Seconds(30);
  // Each worker's data memory cap in MiB (0 = none); a compile that needs
  // more ends in COMPILE_ERROR saying so.
  int64_t memory_limit_mb = 0;
  // Workers confine themselves (service/worker/confinement.h); where the
  // kernel cannot, Start fails with the reason, unless this is set.
  bool allow_unconfined = false;
};

class CompilePool {
 public:
  // Starts one worker to check that it runs and that NVRTC loads there:
  // FAILED_PRECONDITION with the worker's own message otherwise.
  static absl::StatusOr<std::unique_ptr<CompilePool>> Start(const CompilePoolOptions& options);
  // Closes every worker's input and reaps it (SIGKILL after a grace period),
  // then removes the workers' working directory.
  ~CompilePool();
  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  const std::string& nvrtc_version() const { return nvrtc_version_; }
  // As the first worker's Hello said: "Landlock ABI 7: read-only beneath
  // ...", or "none: <why>"; "8192 MiB (RLIMIT_DATA)", or "none: <why>".
  const std::string& confinement() const { return confinement_; }
  const std::string& memory_limit() const { return memory_limit_; }
  int size() const { return size_; }
  // The empty folder every worker runs in (see work_dir_).
  const std::string& work_dir() const { return work_dir_; }
  // Workers killed or lost and replaced so far.
  int64_t replaced() const { return replaced_.load(); }

  // Compiles on a free worker; `timeout` counts from when the task is sent.
  worker::v1::CompileOutcome Compile(const worker::v1::CompileTask& task, absl::Duration timeout);

 private:
  struct Slot {
    WorkerProcess process;
    bool busy = false;
  };

  explicit CompilePool(CompilePoolOptions options);
  // Starts the worker of `slot` and reads its Hello.
  absl::Status Spawn(Slot& slot);

  const CompilePoolOptions options_;
  const int size_;
  // Every worker's working directory: an empty folder of this pool's own
  // (mode 0700, under TMPDIR), so that no relative path a compile names
  // finds a file, whatever this process's working directory holds ("/"
  // under systemd holds etc/passwd). Named autotune-compile-<pid>-XXXXXX;
  // removed when the pool goes, or, when its process was killed, by the
  // next pool started under the same TMPDIR.
  std::string work_dir_;
  std::string nvrtc_version_;
  std::string confinement_;
  std::string memory_limit_;
  std::atomic<int64_t> replaced_{0};
  absl::Mutex mu_;
  // Fixed size; `busy` is guarded by mu_, the rest of a slot belongs to the
  // thread that marked it busy.
  std::vector<Slot> slots_;
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_POOLS_COMPILE_POOL_H_
