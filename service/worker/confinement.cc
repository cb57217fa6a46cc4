#include "service/worker/confinement.h"

#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/posix_error.h"

// Rights and fields newer than the oldest kernel headers we build with; the
// values are the kernel's ABI and never change.
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif
#ifndef SYS_landlock_add_rule
#define SYS_landlock_add_rule 445
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif

namespace autotune::kernel_worker {
namespace {

// struct landlock_ruleset_attr as of ABI 6; the kernel reads only the
// prefix that `size` covers, so older kernels get the ABI 1 part.
struct RulesetAttr {
  uint64_t handled_access_fs = 0;
  uint64_t handled_access_net = 0;  // ABI 4
  uint64_t scoped = 0;              // ABI 6
};
constexpr uint64_t kNetBindTcp = 1ULL << 0;
constexpr uint64_t kNetConnectTcp = 1ULL << 1;
constexpr uint64_t kScopeAbstractUnixSocket = 1ULL << 0;
constexpr uint64_t kScopeSignal = 1ULL << 1;

constexpr uint64_t kReadAccess = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;

uint64_t HandledFsAccess(int abi) {
  uint64_t access =
      LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE |
      LANDLOCK_ACCESS_FS_READ_DIR | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
      LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
      LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
      LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) access |= 1ULL << 13;  // REFER: links and renames across folders
  if (abi >= 3) access |= LANDLOCK_ACCESS_FS_TRUNCATE;
  if (abi >= 5) access |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
  return access;
}

// The number of threads of this process, from /proc/self/status; 0 when it
// cannot be read.
int ThreadCount() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "Threads:")) {
      int threads = 0;
      return absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &threads) ? threads : 0;
    }
  }
  return 0;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<int> LandlockAbi() {
  const long abi =
      syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi >= 1) return static_cast<int>(abi);
  const int error = errno;
  if (error == EOPNOTSUPP) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Landlock is turned off in this kernel (landlock_create_ruleset: ", std::strerror(error),
        "): add landlock to the lsm= boot parameter"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "this kernel has no Landlock (landlock_create_ruleset: ", std::strerror(error), ")"));
}

absl::StatusOr<Confinement> ConfineToReadOnly(const std::vector<std::string>& read_only) {
  absl::StatusOr<int> abi = LandlockAbi();
  if (!abi.ok()) return abi.status();
  if (const int threads = ThreadCount(); threads != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot confine a process of ", threads,
                     " threads: Landlock restricts only the calling thread and its children"));
  }
  RulesetAttr attr;
  attr.handled_access_fs = HandledFsAccess(*abi);
  size_t attr_size = sizeof(uint64_t);
  std::vector<std::string> denied = {"no writes"};
  if (*abi >= 4) {
    attr.handled_access_net = kNetBindTcp | kNetConnectTcp;
    attr_size = 2 * sizeof(uint64_t);
    denied.push_back("no TCP");
  }
  if (*abi >= 6) {
    attr.scoped = kScopeAbstractUnixSocket | kScopeSignal;
    attr_size = sizeof(RulesetAttr);
    denied.push_back("no signals or abstract sockets beyond the worker");
  }
  Fd ruleset(static_cast<int>(syscall(SYS_landlock_create_ruleset, &attr, attr_size, 0)));
  if (ruleset.get() < 0) {
    return absl::FailedPreconditionError(PosixError("landlock_create_ruleset", errno).message());
  }
  std::vector<std::string> readable;
  for (const std::string& path : read_only) {
    if (path.empty()) continue;
    Fd beneath(open(path.c_str(), O_PATH | O_CLOEXEC));
    if (beneath.get() < 0) {
      return absl::FailedPreconditionError(
          PosixError(absl::StrCat("cannot open '", path, "' to allow reads beneath it"), errno)
              .message());
    }
    landlock_path_beneath_attr rule{};
    rule.allowed_access = kReadAccess;
    rule.parent_fd = beneath.get();
    if (syscall(SYS_landlock_add_rule, ruleset.get(), LANDLOCK_RULE_PATH_BENEATH, &rule, 0) != 0) {
      return absl::FailedPreconditionError(
          PosixError(absl::StrCat("landlock_add_rule '", path, "'"), errno).message());
    }
    readable.push_back(path);
  }
  // Required of an unprivileged process, and wanted anyway: nothing it
  // executes may gain privileges.
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return absl::FailedPreconditionError(PosixError("prctl(PR_SET_NO_NEW_PRIVS)", errno).message());
  }
  if (syscall(SYS_landlock_restrict_self, ruleset.get(), 0) != 0) {
    return absl::FailedPreconditionError(PosixError("landlock_restrict_self", errno).message());
  }
  Confinement confinement;
  confinement.description = absl::StrCat(
      "Landlock ABI ", *abi, ": ",
      readable.empty() ? std::string("nothing readable")
                       : absl::StrCat("read-only beneath ", absl::StrJoin(readable, ", ")),
      "; ", absl::StrJoin(denied, ", "));
  return confinement;
}

absl::Status LimitMemory(int64_t bytes) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("memory limit ", bytes, " is not positive"));
  }
  rlimit limit{};
  limit.rlim_cur = static_cast<rlim_t>(bytes);
  limit.rlim_max = static_cast<rlim_t>(bytes);
  if (setrlimit(RLIMIT_DATA, &limit) != 0) return PosixError("setrlimit(RLIMIT_DATA)", errno);
  return absl::OkStatus();
}

}  // namespace autotune::kernel_worker
