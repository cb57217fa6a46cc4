// The daemon's GPU side: one `autotune-worker profile --device N` process
// per GPU, each with its GPU to itself, running ProfileTasks (validation and
// timing of a problem's variants, service/worker/profiler.h) under deadlines.
//
//   ASSIGN_OR_RETURN(auto pool, ProfilePool::Start({.worker_path = path}));
//   ProfileResult result = pool->Profile(task, [](const VariantOutcome& v) {...});
//
// Supervision: every variant ends in exactly one outcome. The worker reports
// TIMEOUT and FAULT itself and exits; a worker that does not answer within a
// variant's deadline (derived from the task's launch_timeout_s and timing
// budget) is killed with SIGKILL and the variant is TIMEOUT; a worker that
// dies is FAULT for the variant it was on ("worker died: signal 11"). In
// each case a new worker is started (exec, never a bare fork) and runs the
// variants that remain. The daemon itself never loads the CUDA driver.
//
// Exclusivity: a GPU runs one task at a time. A Reservation holds one GPU
// for several calls (a probe, then a serial task on the same GPU). With
// `lease_dir` set, every task also holds the host-wide lease of its GPU
// (base/gpu_lease.h, by UUID) while it runs, so two daemons, or a daemon and
// a benchmark, never measure on one GPU at once; a task waits for the lease
// and says so.
//
// Thread-safe: Profile() and Reserve() take a free GPU, waiting for one; the
// waiters are served in the order they came (several jobs take turns).
#ifndef AUTOTUNE_SERVICE_POOLS_PROFILE_POOL_H_
#define AUTOTUNE_SERVICE_POOLS_PROFILE_POOL_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"
#include "service/pools/worker_process.h"

namespace autotune::service {

struct ProfilePoolOptions {
  std::string worker_path;   // the autotune-worker executable
  std::vector<int> devices;  // ordinals; empty = every GPU the first worker sees
  absl::Duration start_timeout = absl::Seconds(60);
  // Added to every variant's deadline: process start, module load, pool fill.
  absl::Duration grace = absl::Seconds(20);
  // Host-wide GPU leases (base/gpu_lease.h); empty = none taken.
  std::string lease_dir;
  // How long a task waits for its GPU's lease before it fails (FAULT for
  // the problem, naming the holder).
  absl::Duration lease_wait = absl::Minutes(10);
};

struct ProfileResult {
  // One per variant of the task, in task order (those not run after a
  // problem-level failure are absent).
  std::vector<worker::v1::VariantOutcome> outcomes;
  worker::v1::ProfileDone done;
  worker::v1::DeviceInfo device;  // where it ran
  int workers_replaced = 0;       // workers this task lost
};

// One GPU as the pool sees it now.
struct GpuStatus {
  worker::v1::DeviceInfo info;
  bool busy = false;  // a task or a Reservation holds it
  // The last probe of what else is on the GPU (Reservation::Probe, before
  // and between serial rounds); unset until the first.
  std::optional<worker::v1::DeviceState> last_probe;
  absl::Time probed_at;
};

class ProfilePool {
 private:
  struct Gpu;

 public:
  // Starts the worker of the first device and, from what it reports, the
  // others. FAILED_PRECONDITION with the worker's reason when no GPU can be
  // used ("no CUDA driver: ...", "no CUDA device"), and when the GPUs are
  // not all of one model (name, compute capability, SM count): a task runs
  // on whichever is free.
  static absl::StatusOr<std::unique_ptr<ProfilePool>> Start(const ProfilePoolOptions& options);
  ~ProfilePool();
  ProfilePool(const ProfilePool&) = delete;
  ProfilePool& operator=(const ProfilePool&) = delete;

  // The devices, in ordinal order.
  std::vector<worker::v1::DeviceInfo> devices() const;
  // Each device's state now, in ordinal order.
  std::vector<GpuStatus> Status() const;
  // Workers lost (killed after a hang, faulted, died) so far; each is
  // replaced when its GPU next has work.
  int64_t replaced() const { return replaced_.load(); }

  // Runs `task` on a free GPU. `on_variant` is called for each outcome as it
  // arrives (from the calling thread).
  using OnVariant = std::function<void(const worker::v1::VariantOutcome&)>;
  // Called about once a second while a task waits for its GPU's lease, with
  // what the holder wrote ("4121 autotuned ...").
  using OnLeaseWait = std::function<void(const std::string& holder)>;
  ProfileResult Profile(const worker::v1::ProfileTask& task, const OnVariant& on_variant = nullptr,
                        const OnLeaseWait& on_lease_wait = nullptr);

  // One GPU held until destroyed.
  class Reservation {
   public:
    ~Reservation();
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    worker::v1::DeviceInfo device() const;
    // What the GPU's worker sees through NVML besides itself (nvml_error
    // set when it cannot see). UNAVAILABLE when no worker can be started or
    // it does not answer.
    absl::StatusOr<worker::v1::DeviceState> Probe();
    ProfileResult Profile(const worker::v1::ProfileTask& task,
                          const OnVariant& on_variant = nullptr,
                          const OnLeaseWait& on_lease_wait = nullptr);
    // Replaces the GPU's worker with a fresh process (the old one stopped
    // gracefully), so that the next task runs in a new CUDA context with new
    // allocations: the serial phase times its leaders in two processes.
    // UNAVAILABLE when the new worker cannot be started.
    absl::Status Renew();

   private:
    friend class ProfilePool;
    Reservation(ProfilePool& pool, Gpu& gpu) : pool_(pool), gpu_(gpu) {}
    ProfilePool& pool_;
    Gpu& gpu_;
  };
  // Waits for a free GPU and holds it.
  std::unique_ptr<Reservation> Reserve();
  // Reserve() callers waiting for a GPU now.
  int waiting() const;

  // The deadline for one variant of `task` (exposed for tests).
  static absl::Duration VariantDeadline(const worker::v1::ProfileTask& task, absl::Duration grace);

 private:
  class TaskDispatch;
  ProfileResult RunOn(Gpu& gpu, const worker::v1::ProfileTask& task, const OnVariant& on_variant,
                      const OnLeaseWait& on_lease_wait);
  struct Gpu {
    worker::v1::DeviceInfo info;  // written under mu_ (a restart renews it)
    WorkerProcess process;        // not running after a kill, until restarted
    bool busy = false;
    std::optional<worker::v1::DeviceState> last_probe;  // guarded by mu_
    absl::Time probed_at;                               // guarded by mu_
  };
  explicit ProfilePool(ProfilePoolOptions options);
  absl::Status StartWorker(Gpu& gpu, int ordinal);

  const ProfilePoolOptions options_;
  std::atomic<int64_t> replaced_{0};
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Gpu>> gpus_;  // `busy` guarded by mu_
  // Reserve() callers waiting for a GPU, by arrival.
  int64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<int64_t> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace autotune::service

#endif  // AUTOTUNE_SERVICE_POOLS_PROFILE_POOL_H_
