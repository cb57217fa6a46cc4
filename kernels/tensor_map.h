// Tensor maps (sm_90's TMA descriptors) as a family declares them
// (KernelFamily.tensor_maps) and as a launch carries them
// (LaunchDims.tensor_maps): the rules cuTensorMapEncodeTiled sets, checked
// without a driver, and the layout turned into the encoder's arguments.
//
//   RETURN_IF_ERROR(CheckTensorMapLayout(layout));          // plans, loads
//   ASSIGN_OR_RETURN(TensorMapArguments args, TensorMapArgumentsOf(layout, address));
//
// A layout describes a buffer as a row-major tensor of `shape` (outermost
// first, the innermost contiguous) copied a `box` at a time, with element
// strides of 1, no interleave, no L2 promotion and out-of-bound elements
// read as zero. The rules (CUDA driver API, cuTensorMapEncodeTiled):
//   - 1 to 5 dims, box and shape of the same rank;
//   - a known element type (int8, uint8 and the fp8 ones travel as bytes);
//   - each extent 1 to 2^32, each box extent 1 to 256 (a box may reach past
//     the end: what lies there reads as zero);
//   - the innermost box extent a multiple of 16 bytes and, with a swizzle,
//     at most the swizzle's span (32, 64 or 128 bytes);
//   - each row stride (the bytes from one index of a dim to the next, for
//     every dim but the innermost) a multiple of 16 and below 2^40;
//   - the address 16-byte aligned (checked by TensorMapArgumentsOf).
//
// Thread-safe: functions of their arguments only.
#ifndef AUTOTUNE_KERNELS_TENSOR_MAP_H_
#define AUTOTUNE_KERNELS_TENSOR_MAP_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/autotune.pb.h"

namespace autotune::kernels {

inline constexpr int kMaxTensorMapRank = 5;
inline constexpr int64_t kMaxTensorMapBox = 256;
// A family may declare at most this many (each is 128 bytes of the
// kernel's parameters).
inline constexpr int kMaxTensorMaps = 8;

// OK when `layout` keeps every rule above; else INVALID_ARGUMENT naming the
// rule and the values, e.g. "box[1] = 512 is above the TMA limit (256)".
// Does not look at `buffer` or `argument`.
absl::Status CheckTensorMapLayout(const v1::TensorMapLayout& layout);

// The element type as the driver's CUtensorMapDataType numbers it; -1 for
// DTYPE_UNSPECIFIED or an unknown value.
int TensorMapDataType(v1::DType dtype);

// cuTensorMapEncodeTiled's arguments, innermost dim first as the driver
// wants them; element strides 1.
struct TensorMapArguments {
  int data_type = 0;  // CUtensorMapDataType
  uint32_t rank = 0;
  uint64_t address = 0;
  uint64_t dims[kMaxTensorMapRank] = {};
  uint64_t strides[kMaxTensorMapRank - 1] = {};  // bytes, of dims 1..rank-1
  uint32_t box[kMaxTensorMapRank] = {};
  uint32_t element_strides[kMaxTensorMapRank] = {};
  int swizzle = 0;  // CUtensorMapSwizzle: 0 none, 1 32B, 2 64B, 3 128B
};

// The arguments for `layout` over the buffer at `address`. INVALID_ARGUMENT
// as CheckTensorMapLayout's, or "address 0x... is not 16-byte aligned".
absl::StatusOr<TensorMapArguments> TensorMapArgumentsOf(const v1::TensorMapLayout& layout,
                                                        uint64_t address);

}  // namespace autotune::kernels

#endif  // AUTOTUNE_KERNELS_TENSOR_MAP_H_
