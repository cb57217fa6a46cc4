// A private temporary directory for tests, removed with everything in it
// when the object goes. Under $TEST_TMPDIR when set, else the system's
// temporary directory. path() is empty if it could not be made.
#ifndef AUTOTUNE_BASE_TEMP_DIR_H_
#define AUTOTUNE_BASE_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace autotune::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TEST_TMPDIR");
    const std::filesystem::path parent = base != nullptr && *base != '\0'
                                             ? std::filesystem::path(base)
                                             : std::filesystem::temp_directory_path();
    std::string pattern = (parent / "autotune-test-XXXXXX").string();
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
