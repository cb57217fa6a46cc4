// Whole-file reads and atomic replacement, with errors that name the file.
//
//   ASSIGN_OR_RETURN(std::string text, ReadFile(path, "manifest"));
//   // NOT_FOUND "cannot read manifest x.textproto: No such file or directory"
//   RETURN_IF_ERROR(WriteFileAtomically(path, json, "bundle file"));
//
// Codes are PosixError's (base/posix_error.h) for the errno of the call that
// failed; a directory where a file was expected is FAILED_PRECONDITION
// (EISDIR). Thread-safe.
#ifndef AUTOTUNE_BASE_FILE_H_
#define AUTOTUNE_BASE_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace autotune {

// All bytes of `path`. Errors read "cannot read <what> <path>: <strerror>",
// or "cannot read <path>: ..." when `what` (the file's role, e.g.
// "--tls-key", "manifest") is empty.
absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view what = {});

// Writes `contents` to a temporary file beside `path` ("<path>.tmp.<pid>.<n>",
// unique per call) and renames it over `path`: a reader sees the old file or
// the new one, never half of one, and writers racing on one path (threads or
// processes) each replace it whole. Nothing is fsync'ed: the promise is to concurrent
// readers, not across a crash. The temporary file is removed on failure.
// The file is created with `mode` (less the umask). Errors read "cannot
// write <what> <path>: <strerror>".
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents,
                                 absl::string_view what = {}, unsigned mode = 0666);

}  // namespace autotune

#endif  // AUTOTUNE_BASE_FILE_H_
