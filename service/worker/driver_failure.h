// What a failed driver call means for the kernel variant under test and for
// the GPU context it ran in: the profiler's one rule for turning an error
// into a VariantStatus.
//
//   const DriverFailure failure = ClassifyDriverFailure(status, DriverCallOrigin::kLaunch);
//   if (failure.context_lost) driver.Abandon();  // then report and exit
//
// The status is a driver call's (CudaStatus, with its CUresult attached) or
// one of the profiler's own checks (no CUresult). In order:
//  - no CUresult: DEADLINE_EXCEEDED (a wait ran out of time: a kernel
//    cannot be stopped) is TIMEOUT, context lost; anything else is the
//    task's or variant's own problem, UNSUPPORTED;
//  - a sticky error (IsStickyError: illegal address, trap, launch failed,
//    ...) is FAULT, context lost, wherever it came from;
//  - out of memory is UNSUPPORTED: the problem does not fit;
//  - otherwise by origin: while loading an image, UNSUPPORTED; at a launch,
//    a refusal for resources, an invalid value (a shape the function does
//    not take) or an image error is UNSUPPORTED, anything else FAULT with
//    the context lost; while waiting or in the profiler's own setup, FAULT
//    with the context lost: an error nobody can classify is not trusted
//    with another variant.
// A lost context is never used again: the caller stops calling the driver
// (CudaDriver::Abandon) and the worker exits.
//
// Pure code; safe from any thread.
#ifndef AUTOTUNE_SERVICE_WORKER_DRIVER_FAILURE_H_
#define AUTOTUNE_SERVICE_WORKER_DRIVER_FAILURE_H_

#include "absl/status/status.h"
#include "proto/autotune.pb.h"

namespace autotune::kernel_worker {

// Where a failed driver call was made, which decides what its error means.
enum class DriverCallOrigin {
  kSetup,   // our own work: allocations, fills, comparisons, queries
  kLoad,    // loading a kernel image and reading its attributes
  kLaunch,  // launching (or capturing) a kernel under test
  kWait,    // waiting for work that holds a kernel under test
};

struct DriverFailure {
  v1::VariantStatus status = v1::UNSUPPORTED;
  // True when the context cannot be used again (TIMEOUT, FAULT).
  bool context_lost = false;
};

// `status` must not be OK.
DriverFailure ClassifyDriverFailure(const absl::Status& status, DriverCallOrigin origin);

}  // namespace autotune::kernel_worker

#endif  // AUTOTUNE_SERVICE_WORKER_DRIVER_FAILURE_H_
