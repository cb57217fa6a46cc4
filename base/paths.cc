#include "base/paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "base/posix_error.h"

namespace autotune {
namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return (value != nullptr && value[0] != '\0') ? std::string(value) : fallback;
}

}  // namespace

std::string DefaultServerAddress() {
  const char* runtime_dir = std::getenv("XDG_RUNTIME_DIR");
  if (runtime_dir != nullptr && runtime_dir[0] != '\0') {
    return absl::StrCat("unix://", runtime_dir, "/autotune.sock");
  }
  return absl::StrCat("unix:///tmp/autotune-", getuid(), ".sock");
}

std::string ClientServerAddress() { return EnvOr("AUTOTUNE_SERVER", DefaultServerAddress()); }

std::string DefaultDatabasePath() {
  std::string state_home = EnvOr("XDG_STATE_HOME", "");
  if (state_home.empty()) state_home = absl::StrCat(EnvOr("HOME", "/tmp"), "/.local/state");
  return absl::StrCat(state_home, "/autotune/cache.db");
}

absl::Status MakeDirectories(const std::string& dir, unsigned mode) {
  if (dir.empty()) return absl::OkStatus();
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
  }
  const size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    absl::Status parent = MakeDirectories(dir.substr(0, slash), mode);
    if (!parent.ok()) return parent;
  }
  if (mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) {
    return PosixError(absl::StrCat("cannot create directory ", dir), errno);
  }
  return absl::OkStatus();
}

std::string ThisProgramDirectory() {
  char buffer[4096];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) return "";
  std::string dir(buffer, static_cast<size_t>(n));
  dir.erase(dir.find_last_of('/') == std::string::npos ? 0 : dir.find_last_of('/'));
  return dir;
}

std::string FindBesideThisProgram(const std::string& name,
                                  const std::vector<std::string>& other_dirs) {
  const std::string dir = ThisProgramDirectory();
  if (dir.empty()) return name;
  const std::string beside = dir + "/" + name;
  if (access(beside.c_str(), X_OK) == 0) return beside;
  for (const std::string& other : other_dirs) {
    const std::string candidate = dir + "/" + other + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return beside;
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace autotune
