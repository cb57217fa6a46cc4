// What the GPU tests read from their environment: the paths of the bundle
// tests/gpu/run.sh runs them from (defaults: the build tree, set by CMake
// as AUTOTUNE_WORKER_PATH, AUTOTUNE_KERNELS_DIR and AUTOTUNE_FAULTS_DIR),
// whether a GPU must be there, and the summary lines run.sh collects.
#ifndef AUTOTUNE_TESTS_GPU_GPU_TEST_ENV_H_
#define AUTOTUNE_TESTS_GPU_GPU_TEST_ENV_H_

#include <cstdio>
#include <string>

#include "tests/support/process.h"

namespace autotune::testing {

inline std::string WorkerPath() { return EnvironmentOr("AUTOTUNE_WORKER", AUTOTUNE_WORKER_PATH); }
inline std::string KernelsDir() {
  return EnvironmentOr("AUTOTUNE_KERNELS_DIR", AUTOTUNE_KERNELS_DIR);
}
inline std::string FaultsDir() { return EnvironmentOr("AUTOTUNE_FAULTS_DIR", AUTOTUNE_FAULTS_DIR); }

// AUTOTUNE_REQUIRE_GPU=1 (run.sh sets it where nvidia-smi sees a GPU): a
// test that cannot use the GPU fails instead of skipping.
inline bool GpuRequired() { return EnvironmentOr("AUTOTUNE_REQUIRE_GPU", "0") == "1"; }

// A line for the table tests/gpu/run.sh prints last.
inline void Summary(const std::string& key, const std::string& text) {
  std::printf("[gpu-summary] %s: %s\n", key.c_str(), text.c_str());
  std::fflush(stdout);
}

}  // namespace autotune::testing

#endif  // AUTOTUNE_TESTS_GPU_GPU_TEST_ENV_H_
