#include "base/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/posix_error.h"

namespace autotune {

absl::StatusOr<PrivateFile> OpenPrivateFile(const std::string& path, int flags,
                                            absl::string_view what, bool create) {
  const int fd = open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
  if (fd < 0) {
    const int error = errno;
    if (error == ELOOP) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, " ", path,
          " is a symbolic link: refused (a link could send this daemon's writes to another "
          "file; name the file itself)"));
    }
    return PosixError(absl::StrCat("cannot open ", what, " ", path), error);
  }
  PrivateFile file{.fd = fd};
  const auto fail = [&](absl::Status status) {
    close(fd);
    return status;
  };
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    return fail(PosixError(absl::StrCat("cannot stat ", what, " ", path), errno));
  }
  if (!S_ISREG(info.st_mode)) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat(what, " ", path, " is not a regular file: refused")));
  }
  if (info.st_uid != geteuid()) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        what, " ", path, " belongs to uid ", info.st_uid, ", not to this process's uid ", geteuid(),
        ": refused (its owner could read or change it under this daemon, whatever its mode; "
        "chown it, or use another path)")));
  }
  if ((info.st_mode & 077) != 0) {
    if (fchmod(fd, info.st_mode & 07700) != 0) {
      return fail(PosixError(absl::StrFormat("cannot tighten %s %s from mode %04o to owner-only",
                                             what, path, info.st_mode & 07777),
                             errno));
    }
    file.tightened_from = info.st_mode & 07777;
  }
  return file;
}

}  // namespace autotune
