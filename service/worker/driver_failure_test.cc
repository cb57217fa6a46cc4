// What a failed driver call means for a variant and its context, without a
// GPU: driver errors are made by CudaStatus over an empty (fake) driver
// table, exactly as the profiler makes them from the real one.
#include "service/worker/driver_failure.h"

#include <cuda.h>

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "kernels/gpu/cuda_driver.h"

namespace autotune::kernel_worker {
namespace {

using Origin = DriverCallOrigin;

// No entry points at all: CudaStatus names codes as "CUresult N", which is
// all a classification may depend on (the attached CUresult, not the text).
const kernels::CudaDriver& FakeDriver() {
  static const kernels::CudaDriver* const driver =
      new kernels::CudaDriver(kernels::CudaDriver::Api{}, CUDA_VERSION);
  return *driver;
}

absl::Status Driver(CUresult rc) { return kernels::CudaStatus(FakeDriver(), rc, "cuSomething"); }

constexpr Origin kOrigins[] = {Origin::kSetup, Origin::kLoad, Origin::kLaunch, Origin::kWait};

std::string OriginName(Origin origin) {
  switch (origin) {
    case Origin::kSetup:
      return "setup";
    case Origin::kLoad:
      return "load";
    case Origin::kLaunch:
      return "launch";
    case Origin::kWait:
      return "wait";
  }
  return "unknown";
}

struct ClassifyCase {
  std::string name;
  absl::Status status;
  Origin origin;
  v1::VariantStatus expected;
  bool context_lost;
};

void PrintTo(const ClassifyCase& c, std::ostream* os) { *os << c.name; }

class ClassifyDriverFailureTest : public ::testing::TestWithParam<ClassifyCase> {};

TEST_P(ClassifyDriverFailureTest, Classifies) {
  const ClassifyCase& c = GetParam();
  const DriverFailure failure = ClassifyDriverFailure(c.status, c.origin);
  EXPECT_EQ(v1::VariantStatus_Name(failure.status), v1::VariantStatus_Name(c.expected));
  EXPECT_EQ(failure.context_lost, c.context_lost);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ClassifyDriverFailureTest,
    ::testing::Values(
        // The profiler's own checks carry no CUresult.
        ClassifyCase{"wait_out_of_time", absl::DeadlineExceededError("did not finish"),
                     Origin::kWait, v1::TIMEOUT, true},
        ClassifyCase{"own_check", absl::InvalidArgumentError("block 2048 > 1024"), Origin::kLoad,
                     v1::UNSUPPORTED, false},
        ClassifyCase{"own_check_at_setup", absl::ResourceExhaustedError("over budget"),
                     Origin::kSetup, v1::UNSUPPORTED, false},
        // A code alone means nothing: only the attached CUresult counts.
        ClassifyCase{"internal_without_cuda_result", absl::InternalError("illegal address"),
                     Origin::kWait, v1::UNSUPPORTED, false},
        // Sticky errors, wherever they surface (a launch is asynchronous:
        // the fault shows at the next call, often our own).
        ClassifyCase{"illegal_address_at_wait", Driver(CUDA_ERROR_ILLEGAL_ADDRESS), Origin::kWait,
                     v1::FAULT, true},
        ClassifyCase{"illegal_address_at_setup", Driver(CUDA_ERROR_ILLEGAL_ADDRESS), Origin::kSetup,
                     v1::FAULT, true},
        ClassifyCase{"trap_at_launch", Driver(CUDA_ERROR_ASSERT), Origin::kLaunch, v1::FAULT, true},
        ClassifyCase{"watchdog_is_a_fault", Driver(CUDA_ERROR_LAUNCH_TIMEOUT), Origin::kWait,
                     v1::FAULT, true},
        ClassifyCase{"launch_failed_at_load", Driver(CUDA_ERROR_LAUNCH_FAILED), Origin::kLoad,
                     v1::FAULT, true},
        // Out of memory: the problem does not fit; the context is fine.
        ClassifyCase{"out_of_memory_at_setup", Driver(CUDA_ERROR_OUT_OF_MEMORY), Origin::kSetup,
                     v1::UNSUPPORTED, false},
        ClassifyCase{"out_of_memory_at_launch", Driver(CUDA_ERROR_OUT_OF_MEMORY), Origin::kLaunch,
                     v1::UNSUPPORTED, false},
        // Loading: whatever the image's problem, the variant's.
        ClassifyCase{"no_binary_for_gpu_at_load", Driver(CUDA_ERROR_NO_BINARY_FOR_GPU),
                     Origin::kLoad, v1::UNSUPPORTED, false},
        ClassifyCase{"invalid_handle_at_load", Driver(CUDA_ERROR_INVALID_HANDLE), Origin::kLoad,
                     v1::UNSUPPORTED, false},
        // Launching: refusals of the shape or resources leave the context.
        ClassifyCase{"out_of_resources_at_launch", Driver(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES),
                     Origin::kLaunch, v1::UNSUPPORTED, false},
        ClassifyCase{"invalid_value_at_launch", Driver(CUDA_ERROR_INVALID_VALUE), Origin::kLaunch,
                     v1::UNSUPPORTED, false},
        ClassifyCase{"invalid_image_at_launch", Driver(CUDA_ERROR_INVALID_IMAGE), Origin::kLaunch,
                     v1::UNSUPPORTED, false},
        ClassifyCase{"invalid_handle_at_launch", Driver(CUDA_ERROR_INVALID_HANDLE), Origin::kLaunch,
                     v1::FAULT, true},
        ClassifyCase{"not_supported_at_launch", Driver(CUDA_ERROR_NOT_SUPPORTED), Origin::kLaunch,
                     v1::FAULT, true},
        // Waiting and setup: nothing is trusted after an unclassified error,
        // not even what would be the variant's problem at load or launch.
        ClassifyCase{"invalid_value_at_setup", Driver(CUDA_ERROR_INVALID_VALUE), Origin::kSetup,
                     v1::FAULT, true},
        ClassifyCase{"out_of_resources_at_wait", Driver(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES),
                     Origin::kWait, v1::FAULT, true},
        ClassifyCase{"invalid_image_at_setup", Driver(CUDA_ERROR_INVALID_IMAGE), Origin::kSetup,
                     v1::FAULT, true},
        ClassifyCase{"not_ready_at_wait", Driver(CUDA_ERROR_NOT_READY), Origin::kWait, v1::FAULT,
                     true},
        // A message rewritten around the driver's status keeps the CUresult
        // (TaskRun::Allocate does this) and so its meaning.
        ClassifyCase{"rewrapped_out_of_memory",
                     [] {
                       const absl::Status inner = Driver(CUDA_ERROR_OUT_OF_MEMORY);
                       absl::Status outer(inner.code(), "allocating 1 GiB: ...");
                       inner.ForEachPayload([&outer](absl::string_view url, const absl::Cord& p) {
                         outer.SetPayload(url, p);
                       });
                       return outer;
                     }(),
                     Origin::kSetup, v1::UNSUPPORTED, false}),
    [](const ::testing::TestParamInfo<ClassifyCase>& info) { return info.param.name; });

// Every sticky code is FAULT with the context lost from every origin; the
// codes IsStickyError lists are the contract of cuda_driver.h.
TEST(ClassifyDriverFailure, StickyErrorsLoseTheContextFromEveryOrigin) {
  const std::vector<CUresult> sticky = {CUDA_ERROR_ILLEGAL_ADDRESS,
                                        CUDA_ERROR_MISALIGNED_ADDRESS,
                                        CUDA_ERROR_ILLEGAL_INSTRUCTION,
                                        CUDA_ERROR_HARDWARE_STACK_ERROR,
                                        CUDA_ERROR_INVALID_PC,
                                        CUDA_ERROR_LAUNCH_FAILED,
                                        CUDA_ERROR_ASSERT,
                                        CUDA_ERROR_INVALID_ADDRESS_SPACE,
                                        CUDA_ERROR_LAUNCH_TIMEOUT,
                                        CUDA_ERROR_ECC_UNCORRECTABLE,
                                        CUDA_ERROR_NVLINK_UNCORRECTABLE,
                                        CUDA_ERROR_CONTAINED,
                                        CUDA_ERROR_TENSOR_MEMORY_LEAK,
                                        CUDA_ERROR_CONTEXT_IS_DESTROYED,
                                        CUDA_ERROR_DEINITIALIZED,
                                        CUDA_ERROR_UNKNOWN};
  for (const CUresult rc : sticky) {
    EXPECT_TRUE(kernels::IsStickyError(rc)) << rc;
    for (const Origin origin : kOrigins) {
      const DriverFailure failure = ClassifyDriverFailure(Driver(rc), origin);
      EXPECT_EQ(failure.status, v1::FAULT) << rc << " at " << OriginName(origin);
      EXPECT_TRUE(failure.context_lost) << rc << " at " << OriginName(origin);
    }
  }
}

// An image the device cannot take is the variant's problem at load and
// launch, and an unexplained error anywhere else.
TEST(ClassifyDriverFailure, ImageErrorsAreTheVariantsOnlyAtLoadAndLaunch) {
  const std::vector<CUresult> image = {CUDA_ERROR_NO_BINARY_FOR_GPU,
                                       CUDA_ERROR_INVALID_IMAGE,
                                       CUDA_ERROR_INVALID_PTX,
                                       CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
                                       CUDA_ERROR_JIT_COMPILER_NOT_FOUND,
                                       CUDA_ERROR_JIT_COMPILATION_DISABLED,
                                       CUDA_ERROR_INVALID_SOURCE,
                                       CUDA_ERROR_SHARED_OBJECT_INIT_FAILED,
                                       CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND};
  for (const CUresult rc : image) {
    EXPECT_TRUE(kernels::IsImageError(rc)) << rc;
    EXPECT_FALSE(kernels::IsStickyError(rc)) << rc;
    for (const Origin origin : kOrigins) {
      const bool variants = origin == Origin::kLoad || origin == Origin::kLaunch;
      const DriverFailure failure = ClassifyDriverFailure(Driver(rc), origin);
      EXPECT_EQ(failure.status, variants ? v1::UNSUPPORTED : v1::FAULT)
          << rc << " at " << OriginName(origin);
      EXPECT_EQ(failure.context_lost, !variants) << rc << " at " << OriginName(origin);
    }
  }
}

}  // namespace
}  // namespace autotune::kernel_worker
