// What the kernel loader checks in an answer before the driver sees it: the
// served cubin's ELF header, its kernel's parameters against those the
// family declares, and the launch against the device's limits.
// An answer comes from the service or from a local cache, and neither may
// make the inference server load a file that is not a CUDA binary for its
// GPU, or launch with a geometry the device cannot run.
//
//   RETURN_IF_ERROR(CheckCubinHeader(cubin, 90));        // before cuModuleLoadData
//   RETURN_IF_ERROR(CheckLaunch(answer_launch, limits));  // before loading at all
//
//   RETURN_IF_ERROR(CheckParameters(cubin, function_name, answer.parameter_bytes()));
//

// Thread-safe: functions of their arguments only.
#ifndef AUTOTUNE_CLIENT_CUBIN_CHECK_H_
#define AUTOTUNE_CLIENT_CUBIN_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/autotune.pb.h"

namespace autotune::client {

// The device's limits, as cuDeviceGetAttribute gives them.
struct DeviceLimits {
  int compute_capability = 0;         // 90 for sm_90
  int64_t max_grid[3] = {0, 0, 0};    // MAX_GRID_DIM_X/Y/Z
  int64_t max_block[3] = {0, 0, 0};   // MAX_BLOCK_DIM_X/Y/Z
  int64_t max_threads_per_block = 0;  // MAX_THREADS_PER_BLOCK
  // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: the most dynamic shared memory a
  // kernel may opt in to.
  int64_t max_dynamic_shared_bytes = 0;
};

// OK when `cubin` starts with the header of a CUDA ELF the device of
// `compute_capability` runs: ELF64, little-endian, machine EM_CUDA (190),
// its section and program header tables within the bytes, and built for an
// SM of the device's major version no newer than the device (the SM is in
// e_flags: bits 8-15 from ELF ABI version 8, CUDA 13's; bits 0-7 before).
// Else INVALID_ARGUMENT naming the check: "not a cubin: e_machine is 62,
// not EM_CUDA (190)", "built for sm_100, which a device of compute
// capability 9.0 does not run".
absl::Status CheckCubinHeader(absl::string_view cubin, int compute_capability);

// The SM a cubin's header names (90), or INVALID_ARGUMENT as above when
// the header is not a CUDA ELF64 one.
absl::StatusOr<int> CubinArch(absl::string_view cubin);

// OK when the entry `function_name` of `cubin` takes parameters of exactly
// the sizes `expected` lists (LookupResponse.parameter_bytes: what the
// launch passes), read from the cubin's .nv.info (kernels/cubin.h); OK too
// when `expected` is empty (an answer from a daemon that did not send it).
// Else INVALID_ARGUMENT: "the kernel 'k' takes 2 parameters (8, 128 bytes);
// the answer's family passes 3 (8, 8, 4 bytes)", "parameter 2 of kernel 'k'
// is 8 bytes; the answer's family passes 4 there", or why the parameters
// cannot be read (no such kernel, not an ELF image).
absl::Status CheckParameters(absl::string_view cubin, absl::string_view function_name,
                             const google::protobuf::RepeatedField<int64_t>& expected);

// OK when `launch` fits `limits`: 1 to 3 grid and block values, each at
// least 1 and at most the device's, the block's threads (their product)
// at most max_threads_per_block, dynamic shared memory from 0 to the
// opt-in maximum, and each tensor map over a buffer that comes before it
// among the parameters (0 <= buffer < argument) and keeping the TMA's rules
// (kernels/tensor_map.h), at most kMaxTensorMaps of them. Else
// INVALID_ARGUMENT naming the value and the limit: "block[0] * block[1] *
// block[2] = 67108864 threads, more than the device's 1024".
absl::Status CheckLaunch(const v1::LaunchDims& launch, const DeviceLimits& limits);

}  // namespace autotune::client

#endif  // AUTOTUNE_CLIENT_CUBIN_CHECK_H_
