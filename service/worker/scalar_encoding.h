// The bytes a scalar kernel argument (a family's `scalars`, passed after the
// buffers) has in memory when cuLaunchKernel reads it, from the double that
// a ProfileTask carries.
//
//   ASSIGN_OR_RETURN(EncodedScalar eps, EncodeScalar(v1::FLOAT16, 1e-5));
//   // eps.slot == 0x00a8, eps.size == 2: what a `__half eps` parameter reads
//
// Floating types round to nearest, ties to even (the default floating-point
// environment is assumed; nothing here changes it):
//   FLOAT32, FLOAT64   IEEE binary32 / binary64 (the C++ conversion)
//   FLOAT16            IEEE binary16: 5 exponent bits, 10 mantissa bits,
//                      largest finite 65504
//   BFLOAT16           8 exponent bits, 7 mantissa bits, largest finite
//                      (2 - 2^-7) * 2^127
//   FLOAT8_E4M3        OCP FP8 E4M3 ("e4m3fn", __nv_fp8_e4m3): no infinity,
//                      S.1111.111 is its only NaN, largest finite 448
//   FLOAT8_E5M2        OCP FP8 E5M2 (__nv_fp8_e5m2): IEEE-like, largest
//                      finite 57344
// Subnormals are kept; magnitudes below half the smallest subnormal become
// a zero of the value's sign. A value whose rounded magnitude is beyond the
// largest finite one (FLOAT32: whose magnitude is, before rounding) is
// INVALID_ARGUMENT, not saturated or turned into an infinity: a kernel
// constant that does not fit its type is a mistake in the descriptor.
// Infinities keep their sign where the format has them and are
// INVALID_ARGUMENT in FLOAT8_E4M3. A NaN of either sign becomes the positive
// pattern with every exponent and mantissa bit set (0x7fff, 0x7f, ...).
//
// Integer types (INT8, UINT8, INT32, INT64) take whole numbers within their
// range, two's complement; anything else (a fraction, NaN, out of range) is
// INVALID_ARGUMENT. INT64's range stops at the largest double below 2^63
// (2^63 - 1024): a double cannot hold 2^63 - 1.
//
// Pure code: no driver, no state; safe from any thread.
#ifndef AUTOTUNE_SERVICE_WORKER_SCALAR_ENCODING_H_
#define AUTOTUNE_SERVICE_WORKER_SCALAR_ENCODING_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "proto/autotune.pb.h"

namespace autotune::kernel_worker {

// A scalar argument: its `size` bytes (the dtype's C size) at the start of
// an 8-byte slot, in host byte order, the rest of the slot zero.
struct EncodedScalar {
  uint64_t slot = 0;
  size_t size = 0;
};

// `value` as a `dtype` kernel argument. INVALID_ARGUMENT (with the value
// and the limit in the message) when it does not fit, as above, or for a
// dtype with no scalar form (DTYPE_UNSPECIFIED, unknown numbers).
absl::StatusOr<EncodedScalar> EncodeScalar(v1::DType dtype, double value);

}  // namespace autotune::kernel_worker

#endif  // AUTOTUNE_SERVICE_WORKER_SCALAR_ENCODING_H_
