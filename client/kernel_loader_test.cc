// The kernel loader where there is no GPU driver (the build machine and
// CI); the GPU suite (tests/gpu/e2e_gpu_test.cc) loads and launches tuned
// kernels on a real one.
#include "client/kernel_loader.h"

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::client {
namespace {

using ::autotune::testing::StatusIs;

TEST(KernelLoaderTest, WithoutADriverOpenSaysWhatIsMissing) {
  absl::StatusOr<std::unique_ptr<KernelLoader>> loader = KernelLoader::Open(0);
  if (loader.ok()) GTEST_SKIP() << "a CUDA driver and GPU are here: the GPU suite covers loading";
  EXPECT_THAT(loader.status(), StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
  EXPECT_FALSE(loader.status().message().empty());
}

TEST(KernelLoaderTest, ANegativeOrdinalIsNoDevice) {
  absl::StatusOr<std::unique_ptr<KernelLoader>> loader = KernelLoader::Open(-1);
  EXPECT_FALSE(loader.ok());
  EXPECT_THAT(loader.status(), StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
}

}  // namespace
}  // namespace autotune::client
