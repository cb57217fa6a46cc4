// Files a process keeps to itself (the daemon's database and audit log):
// opened without following a symbolic link, owned by this process's user,
// and readable and writable by it alone.
//
//   ASSIGN_OR_RETURN(PrivateFile file,
//                    OpenPrivateFile(path, O_WRONLY | O_APPEND, "the audit log"));
//   if (file.tightened_from != 0) LOG("mode %o tightened to 0600", ...);
//
// What is refused, FAILED_PRECONDITION naming `what`, the path and why:
// - a symbolic link at `path` (O_NOFOLLOW): whoever can write the folder
//   could point the daemon's writes at another of its user's files;
// - anything but a regular file;
// - a file another user owns: its owner can read it, or change it under
//   the daemon, whatever its mode says, and chmod is theirs, not ours.
// A file of ours that group or others may read or write is tightened to
// 0600 in place, and `tightened_from` says what it was: an operator's
// `cp` or umask loosened it, and the daemon's tokens, audit trail and
// binaries are not for other users.
#ifndef AUTOTUNE_BASE_PRIVATE_FILE_H_
#define AUTOTUNE_BASE_PRIVATE_FILE_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace autotune {

struct PrivateFile {
  int fd = -1;                // the caller closes it
  mode_t tightened_from = 0;  // the permission bits before, when they were loosened
};

// Opens (creating, mode 0600) `path` with `flags` (O_RDWR, or
// O_WRONLY | O_APPEND...; O_NOFOLLOW, O_CLOEXEC and O_CREAT are added)
// and checks it as above. With `create` false a missing file is NOT_FOUND.
// Other errors as PosixError, naming `what` and the path.
absl::StatusOr<PrivateFile> OpenPrivateFile(const std::string& path, int flags,
                                            absl::string_view what, bool create = true);

}  // namespace autotune

#endif  // AUTOTUNE_BASE_PRIVATE_FILE_H_
