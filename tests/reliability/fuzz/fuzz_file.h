// For fuzz targets whose input is a file: a private directory, made once per
// process, and writing the input into it.
#ifndef AUTOTUNE_TESTS_RELIABILITY_FUZZ_FUZZ_FILE_H_
#define AUTOTUNE_TESTS_RELIABILITY_FUZZ_FUZZ_FILE_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace autotune::fuzz {

// A directory of this process's own under $TMPDIR (or /tmp), removed when
// the process exits normally (a replay over the regressions, ctest's
// fuzz_*_replay). A fuzzer may end by being killed, which removes nothing:
// .ci/fuzz.sh gives each target a TMPDIR of its own and removes that.
inline const std::string& FuzzDirectory() {
  static const std::string* dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/autotune-fuzz-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    return new std::string(pattern);
  }();
  static const bool removed_at_exit = [] {
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(*dir, ignored);
    });
    return true;
  }();
  (void)removed_at_exit;
  return *dir;
}

// Writes `size` bytes at `data` to `name` in FuzzDirectory(); its path.
inline std::string WriteInput(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = FuzzDirectory() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace autotune::fuzz

#endif  // AUTOTUNE_TESTS_RELIABILITY_FUZZ_FUZZ_FILE_H_
