#include "cache/lock_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/posix_error.h"

namespace autotune::cache {

LockFile::~LockFile() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<LockFile> LockFile::Acquire(const std::string& database_path) {
  const std::string path = absl::StrCat(database_path, ".lock");
  LockFile lock;
  lock.fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock.fd_ < 0) return PosixError(absl::StrCat("cannot open lock file ", path), errno);
  if (flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return PosixError(absl::StrCat("cannot lock ", path), errno);
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", database_path, " is in use by another process (pid ", lock.ReadPid(), ")"));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(lock.fd_, 0) != 0 ||
      pwrite(lock.fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return PosixError(absl::StrCat("cannot write lock file ", path), errno);
  }
  return lock;
}

std::string LockFile::ReadPid() const {
  char buffer[32];
  const ssize_t n = pread(fd_, buffer, sizeof(buffer) - 1, 0);
  int64_t pid = 0;
  if (n <= 0 || !absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buffer, n)), &pid)) {
    return "unknown";
  }
  return absl::StrCat(pid);
}

}  // namespace autotune::cache
