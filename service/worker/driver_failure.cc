#include "service/worker/driver_failure.h"

#include <cuda.h>

#include <optional>

#include "kernels/gpu/cuda_driver.h"

namespace autotune::kernel_worker {

DriverFailure ClassifyDriverFailure(const absl::Status& status, DriverCallOrigin origin) {
  const std::optional<CUresult> rc = kernels::CudaResultOf(status);
  if (!rc.has_value()) {
    // Our own checks; DEADLINE_EXCEEDED only comes from a wait.
    if (status.code() == absl::StatusCode::kDeadlineExceeded) return {v1::TIMEOUT, true};
    return {v1::UNSUPPORTED, false};
  }
  if (kernels::IsStickyError(*rc)) return {v1::FAULT, true};
  if (*rc == CUDA_ERROR_OUT_OF_MEMORY) return {v1::UNSUPPORTED, false};
  switch (origin) {
    case DriverCallOrigin::kLoad:
      return {v1::UNSUPPORTED, false};
    case DriverCallOrigin::kLaunch:
      // A launch the driver refuses for its shape or resources leaves the
      // context intact; anything else after a launch cannot be trusted.
      if (*rc == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES || *rc == CUDA_ERROR_INVALID_VALUE ||
          kernels::IsImageError(*rc)) {
        return {v1::UNSUPPORTED, false};
      }
      return {v1::FAULT, true};
    case DriverCallOrigin::kWait:
    case DriverCallOrigin::kSetup:
      // An error we cannot classify: the worker is replaced rather than
      // trusted with another variant.
      return {v1::FAULT, true};
  }
  return {v1::FAULT, true};  // not reached: every origin is handled above
}

}  // namespace autotune::kernel_worker
