// Whole-file reads and writes with errors that name the file.
#ifndef AUTOTUNE_CLIENT_FILE_IO_H_
#define AUTOTUNE_CLIENT_FILE_IO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace autotune::client {

// Reads all of `path`. `what` names the file's role in errors:
// "cannot open manifest x.textproto: No such file or directory". NOT_FOUND,
// PERMISSION_DENIED or UNKNOWN after the errno.
absl::StatusOr<std::string> ReadFileToString(const std::string& path, absl::string_view what);

// Writes `contents` to a temporary file beside `path` and renames it over
// `path`: readers see the old file or the new one, never half of one.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents,
                                 absl::string_view what);

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_FILE_IO_H_
