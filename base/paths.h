// Default locations shared by the daemon and its clients.
//
// Socket:   unix://$XDG_RUNTIME_DIR/autotune.sock, else unix:///tmp/autotune-$UID.sock
// Database: $XDG_STATE_HOME/autotune/cache.db, else ~/.local/state/autotune/cache.db
// The AUTOTUNE_SERVER environment variable, when set, overrides the socket
// address clients use.
#ifndef AUTOTUNE_BASE_PATHS_H_
#define AUTOTUNE_BASE_PATHS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace autotune {

// The address the daemon listens on and clients dial without flags.
std::string DefaultServerAddress();
// Clients: AUTOTUNE_SERVER if set, else DefaultServerAddress().
std::string ClientServerAddress();
// The database file the daemon opens without --db.
std::string DefaultDatabasePath();

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
