#include "base/gpu_lease.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>
#include <variant>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/posix_error.h"
#include "base/status_macros.h"

namespace autotune {
namespace {

constexpr absl::Duration kRetryInterval = absl::Milliseconds(200);
constexpr absl::Duration kWaitReportInterval = absl::Seconds(1);
// More than any holder line; a longer file is not ours to show whole.
constexpr size_t kMaxHolderBytes = 512;

struct Locked {
  int fd;
};
struct Taken {
  std::string holder;  // DescribeHolder() of what the file holds
};
using LockOutcome = std::variant<Locked, Taken>;

absl::StatusOr<std::string> LockPath(const std::string& dir, const std::string& uuid) {
  if (uuid.empty() || uuid.find_first_of(std::string("/\0", 2)) != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU UUID '", absl::CHexEscape(uuid), "' cannot name a lock file"));
  }
  return absl::StrCat(dir, "/gpu-", uuid, ".lock");
}

absl::Status CreateDirectory(const std::string& dir) {
  if (mkdir(dir.c_str(), 01777) == 0) {
    // mkdir's mode passes through the umask.
    if (chmod(dir.c_str(), 01777) != 0) {
      return PosixError(absl::StrCat("cannot make lease directory ", dir, " mode 01777"), errno);
    }
    return absl::OkStatus();
  }
  if (errno == EEXIST) return absl::OkStatus();
  return PosixError(absl::StrCat("cannot create lease directory ", dir), errno);
}

// A descriptor of the lock file, created (mode 0666) if missing.
absl::StatusOr<int> OpenLockFile(const std::string& path) {
  for (;;) {
    // Without O_CREAT first: where fs.protected_regular is set, O_CREAT on
    // another user's file in a sticky world-writable directory fails with
    // EACCES even though the file is 0666. O_NOFOLLOW: in a directory anyone
    // can write, a symlink would have us truncate its target.
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) return fd;
    if (errno == EINTR) continue;
    if (errno != ENOENT) return PosixError(absl::StrCat("cannot open lock file ", path), errno);
    fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd >= 0) {
      if (fchmod(fd, 0666) != 0) {
        const int error = errno;
        close(fd);
        return PosixError(absl::StrCat("cannot make lock file ", path, " mode 0666"), error);
      }
      return fd;
    }
    if (errno == EEXIST || errno == EINTR) continue;  // another process made it first
    return PosixError(absl::StrCat("cannot create lock file ", path), errno);
  }
}

// "4121 autotuned job 7 serial\n" -> "pid 4121 (autotuned job 7 serial)".
std::string DescribeHolder(std::string text) {
  absl::StripAsciiWhitespace(&text);
  if (text.empty()) return "a holder that has not written its name yet";
  const size_t space = text.find(' ');
  const std::string pid_text = text.substr(0, space);
  int pid = 0;
  if (!absl::SimpleAtoi(pid_text, &pid)) return absl::StrCat("\"", absl::CHexEscape(text), "\"");
  if (space == std::string::npos) return absl::StrCat("pid ", pid);
  return absl::StrCat("pid ", pid, " (", absl::CHexEscape(text.substr(space + 1)), ")");
}

absl::StatusOr<std::string> ReadHolder(int fd, const std::string& path) {
  std::string text(kMaxHolderBytes, '\0');
  ssize_t n;
  do {
    n = pread(fd, text.data(), text.size(), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return PosixError(absl::StrCat("cannot read lock file ", path), errno);
  text.resize(static_cast<size_t>(n));
  return DescribeHolder(std::move(text));
}

absl::Status WriteHolder(int fd, const std::string& path, const std::string& holder) {
  const std::string line =
      absl::StrCat(getpid(), " ", absl::StrReplaceAll(holder, {{"\n", " "}}), "\n");
  const std::string context = absl::StrCat("cannot write lock file ", path);
  if (ftruncate(fd, 0) != 0) return PosixError(context, errno);
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = pwrite(fd, line.data() + done, line.size() - done, done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError(context, errno);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// One try at the lock of `path` (in `dir`, created if missing).
absl::StatusOr<LockOutcome> LockOnce(const std::string& dir, const std::string& path,
                                     const std::string& holder) {
  RETURN_IF_ERROR(CreateDirectory(dir));
  ASSIGN_OR_RETURN(const int fd, OpenLockFile(path));
  absl::Cleanup close_fd = [fd] { close(fd); };
  struct stat st;
  if (fstat(fd, &st) != 0) return PosixError(absl::StrCat("cannot stat lock file ", path), errno);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("lock file ", path, " is not a regular file"));
  }
  int rc;
  do {
    rc = flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno != EWOULDBLOCK) return PosixError(absl::StrCat("cannot lock ", path), errno);
    ASSIGN_OR_RETURN(std::string taken_by, ReadHolder(fd, path));
    return Taken{std::move(taken_by)};
  }
  RETURN_IF_ERROR(WriteHolder(fd, path, holder));
  std::move(close_fd).Cancel();
  return Locked{fd};
}

}  // namespace

absl::StatusOr<GpuLease> GpuLease::TryAcquire(const std::string& dir, const std::string& uuid,
                                              const std::string& holder) {
  ASSIGN_OR_RETURN(std::string path, LockPath(dir, uuid));
  ASSIGN_OR_RETURN(LockOutcome outcome, LockOnce(dir, path, holder));
  if (const Locked* locked = std::get_if<Locked>(&outcome)) return GpuLease(path, locked->fd);
  return absl::UnavailableError(
      absl::StrCat(uuid, " is leased by ", std::get<Taken>(outcome).holder, "; lock file ", path));
}

absl::StatusOr<GpuLease> GpuLease::Acquire(
    const std::string& dir, const std::string& uuid, const std::string& holder, absl::Duration wait,
    const std::function<bool(const std::string& holder)>& on_wait) {
  ASSIGN_OR_RETURN(std::string path, LockPath(dir, uuid));
  const absl::Time deadline = absl::Now() + wait;
  absl::Time next_report = absl::InfinitePast();
  for (;;) {
    ASSIGN_OR_RETURN(LockOutcome outcome, LockOnce(dir, path, holder));
    if (const Locked* locked = std::get_if<Locked>(&outcome)) return GpuLease(path, locked->fd);
    const std::string& taken_by = std::get<Taken>(outcome).holder;
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("waited ", absl::FormatDuration(wait),
                                                      " for ", uuid, ", still leased by ", taken_by,
                                                      "; lock file ", path));
    }
    if (on_wait && now >= next_report) {
      if (!on_wait(taken_by)) {
        return absl::CancelledError(absl::StrCat("gave up waiting for ", uuid, ", leased by ",
                                                 taken_by, "; lock file ", path));
      }
      next_report = now + kWaitReportInterval;
    }
    absl::SleepFor(std::min(kRetryInterval, deadline - absl::Now()));
  }
}

GpuLease::GpuLease(GpuLease&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

GpuLease& GpuLease::operator=(GpuLease&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

GpuLease::~GpuLease() { Release(); }

void GpuLease::Release() noexcept {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

}  // namespace autotune
