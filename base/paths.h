// Default locations shared by the daemon and its clients.
//
// Socket:   unix://$XDG_RUNTIME_DIR/autotune.sock, else
//           unix:///tmp/autotune-$UID/autotune.sock, in a folder only its
//           user may enter (the daemon creates it 0700 and refuses one that
//           is not so: PrivateSocketDirectory)
// Database: $XDG_STATE_HOME/autotune/cache.db, else ~/.local/state/autotune/cache.db
// The AUTOTUNE_SERVER environment variable, when set, overrides the socket
// address clients use.
#ifndef AUTOTUNE_BASE_PATHS_H_
#define AUTOTUNE_BASE_PATHS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace autotune {

// The address the daemon listens on and clients dial without flags.
std::string DefaultServerAddress();
// Clients: AUTOTUNE_SERVER if set, else DefaultServerAddress().
std::string ClientServerAddress();
// The database file the daemon opens without --db.
std::string DefaultDatabasePath();

// The folder of the default socket when XDG_RUNTIME_DIR is not set
// ("/tmp/autotune-$UID"), which another user could otherwise create first.
std::string FallbackSocketDirectory();
// OK when `dir` is a folder (not a symlink) owned by this process's user
// that no one else may enter or write (mode & 077 == 0); else
// FAILED_PRECONDITION saying what is wrong and that another user may have
// made it.
absl::Status CheckPrivateDirectory(const std::string& dir);

// Before a client sends anything to the Unix socket `path`: OK when the
// socket, and the folder holding it, belong to this process's user, root,
// or `trusted_owner` (the daemon's user where it runs as another one), and
// the folder cannot be written by anyone else unless it is sticky (/tmp).
// OK too when nothing is at `path` (connecting will fail on its own).
// PERMISSION_DENIED naming the path, its owner and what to set when that
// owner is the daemon's: another local user may be listening there to
// collect tokens and hand out wrong answers.
absl::Status CheckSocketOwner(const std::string& path, std::optional<uid_t> trusted_owner);
// The uid of AUTOTUNE_SOCKET_OWNER (a user name or a number); nullopt when
// unset. INVALID_ARGUMENT for a name that is no user.
absl::StatusOr<std::optional<uid_t>> SocketOwnerFromEnvironment();

// The directory of the running program (/proc/self/exe, symlinks resolved),
// e.g. "/usr/local/bin"; empty when it cannot be read.
std::string ThisProgramDirectory();

// The path of `name` beside the running program (/proc/self/exe), else in
// the first of `other_dirs` (relative to the program's directory, e.g.
// "../service") where it exists; when none has it, the path beside the
// program; `name` alone when the program's path cannot be read.
std::string FindBesideThisProgram(const std::string& name,
                                  const std::vector<std::string>& other_dirs = {});

// Creates `dir` and its missing parents with `mode` (existing ones are left
// as they are). Errors name the path and the reason.
absl::Status MakeDirectories(const std::string& dir, unsigned mode);

// The directory part of `path`: "a/b" for "a/b/c", "/" for "/c", "." for "c".
std::string Dirname(const std::string& path);

}  // namespace autotune

#endif  // AUTOTUNE_BASE_PATHS_H_
