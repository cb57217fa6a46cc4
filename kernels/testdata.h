// For the tests of kernels/ only: the path of a file under kernels/testdata.
// The test targets define AUTOTUNE_KERNELS_DIR as the kernels/ folder.
#ifndef AUTOTUNE_KERNELS_TESTDATA_H_
#define AUTOTUNE_KERNELS_TESTDATA_H_

#include <string>

#include "absl/strings/str_cat.h"

namespace autotune::kernels {

inline std::string Testdata(const std::string& relative) {
  return absl::StrCat(AUTOTUNE_KERNELS_DIR, "/testdata/", relative);
}

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_TESTDATA_H_
