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

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "base/pid_folder.h"

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
  int removed = 0;
  std::error_code error;
  for (const auto& item : std::filesystem::directory_iterator(parent, error)) {
    if (!FolderOfGoneProcess(item.path().filename().string(), "autotune-test-")) continue;
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
