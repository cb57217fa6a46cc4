// Import bundles (client/bundle.h): the JSON a user hands `autotune import`.
#include <cstdint>
#include <sstream>
#include <string>

#include "client/bundle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  autotune::client::ReadBundle(in, "fuzz.json").IgnoreError();
  return 0;
}
