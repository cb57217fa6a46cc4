// Warmup manifests (kernels/manifest.h) as a user's file: parsing and the
// checks that need no families.
#include <cstdint>

#include "kernels/manifest.h"
#include "tests/reliability/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = autotune::fuzz::WriteInput("warmup.manifest", data, size);
  autotune::kernels::LoadManifestFile(path).IgnoreError();
  return 0;
}
