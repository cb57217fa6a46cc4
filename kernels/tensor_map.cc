#include "kernels/tensor_map.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/problem.h"

namespace autotune::kernels {
namespace {

// CUtensorMapDataType (cuda.h), which this library does not include.
enum : int {
  kUint8 = 0,
  kInt32 = 3,
  kInt64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
};

constexpr int64_t kMaxExtent = int64_t{1} << 32;
constexpr int64_t kMaxStride = int64_t{1} << 40;

// CUtensorMapSwizzle's number for `swizzle` (0: none, 1: 32 bytes, 2: 64, 3:
// 128), and the span it swizzles over (0: none).
int SwizzleCode(v1::TensorMapSwizzle swizzle) {
  switch (swizzle) {
    case v1::SWIZZLE_32B:
      return 1;
    case v1::SWIZZLE_64B:
      return 2;
    case v1::SWIZZLE_128B:
      return 3;
    default:
      return 0;
  }
}
int SwizzleBytes(v1::TensorMapSwizzle swizzle) {
  const int code = SwizzleCode(swizzle);
  return code == 0 ? 0 : 16 << code;
}

}  // namespace

int TensorMapDataType(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return kFloat32;
    case v1::FLOAT16:
      return kFloat16;
    case v1::BFLOAT16:
      return kBfloat16;
    case v1::FLOAT64:
      return kFloat64;
    case v1::INT32:
      return kInt32;
    case v1::INT64:
      return kInt64;
    case v1::INT8:
    case v1::UINT8:
    case v1::FLOAT8_E4M3:
    case v1::FLOAT8_E5M2:
      return kUint8;
    default:
      return -1;
  }
}

absl::Status CheckTensorMapLayout(const v1::TensorMapLayout& layout) {
  const int rank = layout.shape_size();
  if (rank < 1 || rank > kMaxTensorMapRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("a tensor map has 1 to ", kMaxTensorMapRank, " dims, not ", rank));
  }
  if (layout.box_size() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("the box has ", layout.box_size(), " extents for a shape of ", rank, " dims"));
  }
  if (TensorMapDataType(layout.dtype()) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", DTypeName(layout.dtype()), " has no tensor map element type"));
  }
  if (!v1::TensorMapSwizzle_IsValid(layout.swizzle())) {
    return absl::InvalidArgumentError(absl::StrCat("swizzle ", layout.swizzle(), " is unknown"));
  }
  const int64_t element = DTypeBytes(layout.dtype());
  for (int i = 0; i < rank; ++i) {
    if (layout.shape(i) < 1 || layout.shape(i) > kMaxExtent) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape[", i, "] = ", layout.shape(i), " is outside [1, 2^32]"));
    }
    if (layout.box(i) < 1 || layout.box(i) > kMaxTensorMapBox) {
      return absl::InvalidArgumentError(absl::StrCat(
          "box[", i, "] = ", layout.box(i), " is outside the TMA's [1, ", kMaxTensorMapBox, "]"));
    }
  }
  const int64_t inner_bytes = layout.box(rank - 1) * element;
  if (inner_bytes % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the innermost box extent is ", inner_bytes, " bytes, not a multiple of 16"));
  }
  const int span = SwizzleBytes(layout.swizzle());
  if (span > 0 && inner_bytes > span) {
    return absl::InvalidArgumentError(absl::StrCat("the innermost box extent is ", inner_bytes,
                                                   " bytes, more than the ", span,
                                                   "-byte swizzle's span"));
  }
  int64_t stride = element;
  for (int i = rank - 1; i > 0; --i) {
    if (__builtin_mul_overflow(stride, layout.shape(i), &stride) || stride >= kMaxStride) {
      return absl::InvalidArgumentError(
          absl::StrCat("the stride of dim ", i - 1, " is 2^40 bytes or more"));
    }
    if (stride % 16 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("the stride of dim ", i - 1, " is ", stride,
                                                     " bytes, not a multiple of 16"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorMapArguments> TensorMapArgumentsOf(const v1::TensorMapLayout& layout,
                                                        uint64_t address) {
  if (absl::Status status = CheckTensorMapLayout(layout); !status.ok()) return status;
  if (address % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("address 0x", absl::Hex(address), " is not 16-byte aligned"));
  }
  TensorMapArguments args;
  args.data_type = TensorMapDataType(layout.dtype());
  args.rank = static_cast<uint32_t>(layout.shape_size());
  args.address = address;
  args.swizzle = SwizzleCode(layout.swizzle());
  uint64_t stride = static_cast<uint64_t>(DTypeBytes(layout.dtype()));
  for (uint32_t d = 0; d < args.rank; ++d) {
    const int i = static_cast<int>(args.rank - 1 - d);  // outermost-first index
    args.dims[d] = static_cast<uint64_t>(layout.shape(i));
    args.box[d] = static_cast<uint32_t>(layout.box(i));
    args.element_strides[d] = 1;
    if (d > 0) args.strides[d - 1] = stride;
    stride *= args.dims[d];
  }
  return args;
}

}  // namespace autotune::kernels
