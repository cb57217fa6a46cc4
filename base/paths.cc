#include "base/paths.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  return absl::StrCat("unix://", FallbackSocketDirectory(), "/autotune.sock");
}

std::string FallbackSocketDirectory() { return absl::StrCat("/tmp/autotune-", getuid()); }

absl::Status CheckPrivateDirectory(const std::string& dir) {
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) return PosixError(absl::StrCat("cannot inspect ", dir), errno);
  const auto refuse = [&dir](absl::string_view what) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " ", what, "; it must be a folder only uid ", getuid(),
                     " may enter (mode 0700): another user may have made it to catch the "
                     "socket's clients. Remove it, or give --listen another path"));
  };
  if (S_ISLNK(st.st_mode)) return refuse("is a symbolic link");
  if (!S_ISDIR(st.st_mode)) return refuse("is not a folder");
  if (st.st_uid != getuid()) return refuse(absl::StrCat("belongs to uid ", st.st_uid));
  if ((st.st_mode & 077) != 0) {
    return refuse(absl::StrFormat("has mode %04o", st.st_mode & 0777));
  }
  return absl::OkStatus();
}

absl::Status CheckSocketOwner(const std::string& path, std::optional<uid_t> trusted_owner) {
  const auto trusted = [&](uid_t uid) {
    return uid == getuid() || uid == 0 || (trusted_owner.has_value() && uid == *trusted_owner);
  };
  const std::string hint =
      "; if the daemon runs as that user, set AUTOTUNE_SOCKET_OWNER to it (user name or uid)";
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return absl::OkStatus();
    return PosixError(absl::StrCat("cannot inspect the socket ", path), errno);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, " is not a socket; nothing is sent to it"));
  }
  if (!trusted(st.st_uid)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the socket ", path, " belongs to uid ", st.st_uid, ", not to you (uid ", getuid(),
        ") or root: another user may be listening there, so nothing is sent to it", hint));
  }
  const std::string dir = Dirname(path);
  if (stat(dir.c_str(), &st) != 0) {
    return PosixError(absl::StrCat("cannot inspect the socket's folder ", dir), errno);
  }
  if (!trusted(st.st_uid)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the socket's folder ", dir, " belongs to uid ", st.st_uid, ", not to you (uid ", getuid(),
        ") or root: its owner could put another socket there", hint));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("the socket's folder ", dir,
                     " may be written by other users and is not sticky: "
                     "anyone could replace the socket, so nothing is sent to it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<uid_t>> SocketOwnerFromEnvironment() {
  const std::string owner = EnvOr("AUTOTUNE_SOCKET_OWNER", "");
  if (owner.empty()) return std::nullopt;
  uint32_t uid = 0;
  if (absl::SimpleAtoi(owner, &uid)) return static_cast<uid_t>(uid);
  const passwd* user = getpwnam(owner.c_str());
  if (user == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("AUTOTUNE_SOCKET_OWNER is '", owner, "', which is no user of this host"));
  }
  return user->pw_uid;
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
