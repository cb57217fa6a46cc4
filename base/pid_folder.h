// Folders named after the process that made them ("<prefix><pid>-XXXXXX"),
// so that a process killed before it could remove its own folder leaves
// something the next one can recognise and remove: the test folders
// (base/temp_dir.h) and the compile pool's working folder
// (service/pools/compile_pool.h).
//
//   for (each folder under the parent)
//     if (FolderOfGoneProcess(name, "autotune-compile-")) rmdir(folder);
//
// Pids are this PID namespace's: two containers sharing one temporary folder
// should each use a folder of their own.
#ifndef AUTOTUNE_BASE_PID_FOLDER_H_
#define AUTOTUNE_BASE_PID_FOLDER_H_

#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>

#include <cerrno>
#include <string>
#include <string_view>

namespace autotune {

// The pid in `name` when it is "<prefix><pid>-...", else 0.
inline pid_t PidOfFolderName(std::string_view name, std::string_view prefix) {
  if (name.substr(0, prefix.size()) != prefix) return 0;
  const std::string rest(name.substr(prefix.size()));
  const size_t dash = rest.find('-');
  if (dash == std::string::npos || dash == 0 || dash > 9) return 0;
  char* end = nullptr;
  const long pid = strtol(rest.c_str(), &end, 10);
  if (end != rest.c_str() + dash || pid <= 0) return 0;
  return static_cast<pid_t>(pid);
}

// True when `name` is "<prefix><pid>-..." and no process has that pid.
inline bool FolderOfGoneProcess(std::string_view name, std::string_view prefix) {
  const pid_t pid = PidOfFolderName(name, prefix);
  return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace autotune

#endif  // AUTOTUNE_BASE_PID_FOLDER_H_
