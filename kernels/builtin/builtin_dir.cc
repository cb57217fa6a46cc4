#include "kernels/builtin/builtin_dir.h"

#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/paths.h"

namespace autotune::kernels {

absl::StatusOr<BuiltinFamiliesDir> FindBuiltinFamilies(absl::string_view instead) {
  namespace fs = std::filesystem;
  const std::string program_dir = ThisProgramDirectory();
  const std::string source = AUTOTUNE_SOURCE_KERNELS_DIR;
  std::error_code error;
  if (program_dir.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "built-in kernel families: cannot tell where this program is (/proc/self/exe), so "
        "neither the installed families nor ",
        source, " can be found; ", instead));
  }
  const std::string installed =
      (fs::path(program_dir) / AUTOTUNE_INSTALLED_KERNELS_DIR).lexically_normal().string();
  if (fs::is_directory(installed, error)) return BuiltinFamiliesDir{installed, "installed"};
  const std::string build_tree = fs::weakly_canonical(AUTOTUNE_BUILD_TREE_DIR, error).string();
  const bool in_build_tree =
      !error && absl::StartsWith(absl::StrCat(program_dir, "/"), absl::StrCat(build_tree, "/"));
  if (in_build_tree && fs::is_directory(source, error)) {
    return BuiltinFamiliesDir{source, "the checkout of this build tree"};
  }
  if (in_build_tree) {
    return absl::NotFoundError(absl::StrCat("built-in kernel families: neither ", installed,
                                            " (the installed layout) nor ", source,
                                            " (the checkout this build tree was made from) "
                                            "exists; ",
                                            instead));
  }
  return absl::NotFoundError(absl::StrCat(
      "built-in kernel families: ", installed, " (the installed layout beside ", program_dir,
      ") does not exist, and ", source, " serves only binaries in the build tree ",
      AUTOTUNE_BUILD_TREE_DIR, "; ", instead));
}

}  // namespace autotune::kernels
