// Where the built-in kernel families (this folder) are found by a program
// that is not told (autotuned without --kernels, `autotune plan`):
// installed beside the program (<prefix>/bin/autotuned ->
// <prefix>/share/autotune/kernels), else, for a binary that sits in its
// build tree, the checkout it was built from. An installed program never
// reads the checkout: a deployed service must not depend on a source tree
// (nor can it reach one under ProtectHome=yes).
//
//   ASSIGN_OR_RETURN(BuiltinFamiliesDir dir, FindBuiltinFamilies());
//   kernels::LoadFamilyDirectory(dir.path);
//
// NOT_FOUND, naming both places and what to pass instead (`--kernels DIR`,
// and `--kernels none` where the caller takes it), when neither exists.
#ifndef AUTOTUNE_KERNELS_BUILTIN_BUILTIN_DIR_H_
#define AUTOTUNE_KERNELS_BUILTIN_BUILTIN_DIR_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace autotune::kernels {

struct BuiltinFamiliesDir {
  std::string path;
  const char* origin;  // how `path` was chosen, for a log line
};

// `instead` ends the NOT_FOUND message: what the caller may pass instead
// ("pass --kernels DIR, or --kernels none").
absl::StatusOr<BuiltinFamiliesDir> FindBuiltinFamilies(absl::string_view instead);

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_BUILTIN_BUILTIN_DIR_H_
