// An advisory, host-wide lease on one GPU, so that two autotune daemons (or
// a daemon and a benchmark) never measure on the same GPU at once.
//
//   ASSIGN_OR_RETURN(GpuLease lease,
//                    GpuLease::Acquire(kDefaultLeaseDir, uuid, "autotuned job 12 serial",
//                                      absl::Minutes(5), [](const std::string& holder) {
//                                        spdlog::info("waiting for the GPU, leased by {}", holder);
//                                        return true;
//                                      }));
//   ... measure; the lease ends with `lease` ...
//
// The lease is flock(LOCK_EX) on "<dir>/gpu-<uuid>.lock". The kernel drops
// the lock when the holder's descriptor closes, so a holder that crashes
// leaves no stale lease. The holder writes "<pid> <holder>\n" into the file,
// which is what a waiting process shows.
//
// The lock belongs to the open file description, not to the process: two
// GpuLease objects in one process exclude each other just as two processes
// do (each opens the file itself). The descriptor is opened O_CLOEXEC, so
// programs exec'ed by the holder do not keep the lease; a child that forks
// without exec shares it until it closes its copy or exits.
//
// The directory is created (mode 01777: shared by all users, each file
// removable only by its owner, like /tmp) if missing; its parent must exist.
// Lock files are created mode 0666 whatever the umask, so another user's
// daemon can lock them too, and are never removed: removing one while
// another process is opening it would let both hold "the" lease.
//
// Thread-safety: the static functions may be called from any thread. A
// GpuLease is thread-compatible.
#ifndef AUTOTUNE_BASE_GPU_LEASE_H_
#define AUTOTUNE_BASE_GPU_LEASE_H_

#include <functional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace autotune {

inline constexpr const char* kDefaultLeaseDir = "/tmp/autotune-gpu-leases";

class GpuLease {
 public:
  // One try. OK with the lease, the file then holding "<pid> <holder>\n".
  // Errors:
  //   UNAVAILABLE       another holder has it: "GPU-… is leased by pid 4121
  //                     (autotuned job 7 serial); lock file <path>"
  //   INVALID_ARGUMENT  `uuid` is empty or holds '/' (or NUL)
  //   FAILED_PRECONDITION  the lock file is not a regular file (a symlink,
  //                     a directory)
  //   PosixError's code for any other failure, naming the directory or file.
  static absl::StatusOr<GpuLease> TryAcquire(const std::string& dir, const std::string& uuid,
                                             const std::string& holder);

  // Tries until `wait` has passed, about every 200 ms. While the lease is
  // taken, calls `on_wait` (when set) at the first refusal and about once a
  // second after with the holder's description ("pid 4121 (autotuned job 7
  // serial)"); returning false gives up at once with CANCELLED. When the
  // wait ends, DEADLINE_EXCEEDED naming the holder. A zero wait tries once.
  // Any other error of a try (TryAcquire's list) ends the wait with it.
  static absl::StatusOr<GpuLease> Acquire(
      const std::string& dir, const std::string& uuid, const std::string& holder,
      absl::Duration wait, const std::function<bool(const std::string& holder)>& on_wait);

  GpuLease(GpuLease&& other) noexcept;
  GpuLease& operator=(GpuLease&& other) noexcept;
  GpuLease(const GpuLease&) = delete;
  GpuLease& operator=(const GpuLease&) = delete;
  // Releases the lease (closes the descriptor). Never throws.
  ~GpuLease();

  // "<dir>/gpu-<uuid>.lock".
  const std::string& path() const { return path_; }

 private:
  GpuLease(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  void Release() noexcept;

  std::string path_;
  int fd_ = -1;  // holds the flock; -1 once released or moved from
};

}  // namespace autotune

#endif  // AUTOTUNE_BASE_GPU_LEASE_H_
