// What a compile worker may touch once it serves requests: the files it may
// read, and how much memory it may take. A family's source comes from a
// user who may be hostile, and NVRTC runs it through a full C++ front end:
// an #include, a pragma or an option it did not expect must find nothing of
// the host to read and nowhere to write.
//
//   ASSIGN_OR_RETURN(Confinement confined,
//                    ConfineToReadOnly({nvrtc.include_dir(), nvrtc_lib_dir}));
//   RETURN_IF_ERROR(LimitMemory(int64_t{4} << 30));
//
// ConfineToReadOnly uses Linux Landlock (kernel 5.13 and later, unprivileged,
// kept across exec and inherited by children, and it cannot be undone): the
// process may read files and list folders beneath `read_only` and nothing
// else; it may not write, create, remove, rename, link or truncate any file,
// nor execute one. Where the kernel's Landlock has them (ABI 4 and 6), TCP
// bind/connect, abstract unix sockets and signals to processes outside the
// sandbox are refused too. What it does not cover: file descriptors already
// open (the worker's pipes to the daemon), memory (LimitMemory) and CPU
// time (the daemon's compile deadline). Not a mount namespace: that needs privileges or user
// namespaces, which containers and hardened hosts often lack, while
// Landlock needs neither.
#ifndef AUTOTUNE_SERVICE_WORKER_CONFINEMENT_H_
#define AUTOTUNE_SERVICE_WORKER_CONFINEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/sanitizers.h"

namespace autotune::kernel_worker {

struct Confinement {
  // For logs and the worker's Hello: "Landlock ABI 7: read-only beneath
  // /usr/local/cuda-13.0/include, /usr/local/cuda-13.0/lib64; no writes, no
  // TCP, no signals or abstract sockets beyond the worker".
  std::string description;
};

// Confines the calling process for good (see above). Must run while the
// process has a single thread, since Landlock restricts the calling thread
// and the threads it starts afterwards; FAILED_PRECONDITION otherwise.
// FAILED_PRECONDITION naming why when the kernel cannot ("this kernel has no
// Landlock (landlock_create_ruleset: Function not implemented)", "Landlock is
// turned off in this kernel (...): add landlock to the lsm= boot parameter")
// and when a path of `read_only` cannot be opened. Empty entries are skipped.
absl::StatusOr<Confinement> ConfineToReadOnly(const std::vector<std::string>& read_only);

// The Landlock ABI the kernel offers, or the reason there is none (the
// messages of ConfineToReadOnly).
absl::StatusOr<int> LandlockAbi();

// Whether this is an ASan or TSan build, whose shadow memory RLIMIT_DATA
// would count: LimitMemory's callers leave the cap off there.
using ::autotune::kSanitizerBuild;

// Caps the process's data memory (RLIMIT_DATA: heap and private mappings)
// at `bytes`, so that an allocation past it fails instead of growing the
// host's memory. INVALID_ARGUMENT for bytes <= 0.
absl::Status LimitMemory(int64_t bytes);

}  // namespace autotune::kernel_worker

#endif  // AUTOTUNE_SERVICE_WORKER_CONFINEMENT_H_
