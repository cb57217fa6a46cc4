// A private temporary directory for tests, removed with everything in it
// when the object goes. Under $TEST_TMPDIR when set, else the system's
// temporary directory. path() is empty if it could not be made.
//
// Its name holds the pid of the process that made it
// ("autotune-test-<pid>-XXXXXX"). A process killed before its destructors
// ran leaves its folders behind; ReapTempDirsOfDeadProcesses() removes
// those, and every new TempDir calls it first (.ci/test.sh runs
// tests/reap_temp_dirs.sh, which does the same, once ctest has ended).
#ifndef AUTOTUNE_BASE_TEMP_DIR_H_
#define AUTOTUNE_BASE_TEMP_DIR_H_

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace autotune::testing {

inline std::filesystem::path TempDirParent() {
  const char* base = getenv("TEST_TMPDIR");
  return base != nullptr && *base != '\0' ? std::filesystem::path(base)
                                          : std::filesystem::temp_directory_path();
}

// Removes the TempDir folders under `parent` whose process is gone (no
// process has their pid). Returns how many it removed. Pids are this PID
// namespace's: two containers sharing one temporary folder should each set
// TEST_TMPDIR to a folder of their own.
inline int ReapTempDirsOfDeadProcesses(const std::filesystem::path& parent = TempDirParent()) {
  constexpr std::string_view kPrefix = "autotune-test-";
  int removed = 0;
  std::error_code error;
  for (const auto& item : std::filesystem::directory_iterator(parent, error)) {
    const std::string name = item.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;
    const size_t dash = name.find('-', kPrefix.size());
    if (dash == std::string::npos) continue;
    char* end = nullptr;
    const long pid = strtol(name.c_str() + kPrefix.size(), &end, 10);
    if (end != name.c_str() + dash || pid <= 0) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive
    std::error_code ignored;
    if (std::filesystem::remove_all(item.path(), ignored) > 0) ++removed;
  }
  return removed;
}

class TempDir {
 public:
  TempDir() {
    const std::filesystem::path parent = TempDirParent();
    ReapTempDirsOfDeadProcesses(parent);
    std::string pattern =
        (parent / ("autotune-test-" + std::to_string(getpid()) + "-XXXXXX")).string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace autotune::testing

#endif  // AUTOTUNE_BASE_TEMP_DIR_H_
