#include "base/posix_error.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace autotune {

absl::StatusCode PosixErrorCode(int error_number) {
  switch (error_number) {
    case ENOENT:
      return absl::StatusCode::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return absl::StatusCode::kResourceExhausted;
    case EAGAIN:
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK:
#endif
    case EINTR:
    case EBUSY:
      return absl::StatusCode::kUnavailable;
    case ENOTDIR:
    case EISDIR:
    case ELOOP:
      return absl::StatusCode::kFailedPrecondition;
    case EINVAL:
    case ENAMETOOLONG:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status PosixError(absl::string_view context, int error_number) {
  // The GNU strerror_r (glibc, _GNU_SOURCE) returns the text, which may be a
  // static string rather than `buffer`; unlike strerror it is thread-safe
  // for unknown numbers too.
  char buffer[256];
  const char* text = strerror_r(error_number, buffer, sizeof(buffer));
  return absl::Status(PosixErrorCode(error_number), absl::StrCat(context, ": ", text));
}

}  // namespace autotune
