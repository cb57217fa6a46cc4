// For the tests of client/cli only: the path of a model config under
// client/cli/testdata/models. The test target defines
// AUTOTUNE_CLIENT_TESTDATA as client/cli/testdata.
#ifndef AUTOTUNE_CLIENT_CLI_MODEL_TESTDATA_H_
#define AUTOTUNE_CLIENT_CLI_MODEL_TESTDATA_H_

#include <string>

#include "absl/strings/str_cat.h"

namespace autotune::client {

inline std::string ModelFile(const std::string& name) {
  return absl::StrCat(AUTOTUNE_CLIENT_TESTDATA, "/models/", name);
}

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_CLI_MODEL_TESTDATA_H_
