// The one place a C library error (errno) becomes an absl::Status, after
// leveldb's PosixError:
//
//   if (fd < 0) return PosixError(absl::StrCat("cannot open database ", path), errno);
//   // -> NOT_FOUND "cannot open database /x/cache.db: No such file or directory"
//
// The message is "<context>: <strerror(error_number)>"; the code follows the
// errno:
//   ENOENT                                            NOT_FOUND
//   EACCES EPERM EROFS                                PERMISSION_DENIED
//   EEXIST                                            ALREADY_EXISTS
//   ENOSPC EDQUOT ENOMEM EMFILE ENFILE                RESOURCE_EXHAUSTED
//   EAGAIN EWOULDBLOCK EINTR EBUSY                    UNAVAILABLE (may pass if retried)
//   EIO                                               INTERNAL (the device failed)
//   ENOTDIR EISDIR ELOOP                              FAILED_PRECONDITION (the file system
//                                                     is not as the path needs it)
//   EINVAL ENAMETOOLONG                               INVALID_ARGUMENT (wrong whatever the
//                                                     file system holds)
//   anything else                                     INTERNAL
// Callers whose contract fixes one code for a whole class of failures (a
// worker pipe that broke is ABORTED, whatever the errno) state that code
// themselves instead.
#ifndef AUTOTUNE_BASE_POSIX_ERROR_H_
#define AUTOTUNE_BASE_POSIX_ERROR_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace autotune {

// The canonical code for `error_number` (the table above). 0 is INTERNAL
// too: an error reported without its errno has lost track of the cause.
absl::StatusCode PosixErrorCode(int error_number);

// A non-OK status "<context>: <strerror(error_number)>" with
// PosixErrorCode(error_number). Pass errno before anything can overwrite it.
absl::Status PosixError(absl::string_view context, int error_number);

}  // namespace autotune

#endif  // AUTOTUNE_BASE_POSIX_ERROR_H_
