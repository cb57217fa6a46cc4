#include "service/worker/scalar_encoding.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace autotune::kernel_worker {
namespace {

// Enough digits to tell neighbouring fp32 values apart in a message.
std::string Num(double v) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.9g", v);
  return text;
}

// Rounds `value` to nearest even in a small binary float format (sign,
// exp_bits, mant_bits) and returns its bit pattern. INVALID_ARGUMENT for a
// finite value beyond max_finite or an infinity the format lacks.
absl::StatusOr<uint32_t> EncodeSmallFloat(double value, int exp_bits, int mant_bits,
                                          double max_finite, bool has_infinity) {
  const uint32_t sign = std::signbit(value) ? (1u << (exp_bits + mant_bits)) : 0u;
  const uint32_t exp_all_ones = ((1u << exp_bits) - 1) << mant_bits;
  if (std::isnan(value)) return exp_all_ones | ((1u << mant_bits) - 1);
  const double magnitude = std::fabs(value);
  if (std::isinf(magnitude)) {
    if (has_infinity) return sign | exp_all_ones;
    return absl::InvalidArgumentError("infinity is not representable");
  }
  if (magnitude == 0) return sign;
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int min_exponent = 1 - bias;
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = f * 2^exponent, f in [0.5, 1)
  const int unbiased = std::max(exponent - 1, min_exponent);
  const double quantum = std::ldexp(1.0, unbiased - mant_bits);
  const double steps = std::nearbyint(magnitude / quantum);  // ties to even
  const double rounded = steps * quantum;
  if (rounded > max_finite) {
    return absl::InvalidArgumentError(
        absl::StrCat(Num(value), " is beyond the largest finite value ", Num(max_finite)));
  }
  if (rounded < std::ldexp(1.0, min_exponent)) {
    return sign | static_cast<uint32_t>(steps);  // subnormal (or rounded to zero)
  }
  std::frexp(rounded, &exponent);
  const int field = exponent - 1 + bias;
  const double mantissa = (std::ldexp(rounded, -(exponent - 1)) - 1.0) * (1 << mant_bits);
  return sign | (static_cast<uint32_t>(field) << mant_bits) | static_cast<uint32_t>(mantissa);
}

}  // namespace

absl::StatusOr<EncodedScalar> EncodeScalar(v1::DType dtype, double value) {
  EncodedScalar out;
  auto store = [&out](const auto& typed) {
    static_assert(sizeof(typed) <= sizeof(out.slot));
    std::memcpy(&out.slot, &typed, sizeof(typed));
    out.size = sizeof(typed);
  };
  auto integer = [&](double lo, double hi) -> absl::Status {
    if (!(value >= lo && value <= hi) || value != std::floor(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(Num(value), " is not a whole number in [", Num(lo), ", ", Num(hi), "]"));
    }
    return absl::OkStatus();
  };
  switch (dtype) {
    case v1::FLOAT32: {
      if (std::isfinite(value) && std::fabs(value) > std::numeric_limits<float>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(Num(value), " overflows FLOAT32"));
      }
      store(static_cast<float>(value));
      break;
    }
    case v1::FLOAT64:
      store(value);
      break;
    case v1::FLOAT16: {
      ASSIGN_OR_RETURN(uint32_t bits, EncodeSmallFloat(value, 5, 10, 65504.0, true));
      store(static_cast<uint16_t>(bits));
      break;
    }
    case v1::BFLOAT16: {
      ASSIGN_OR_RETURN(uint32_t bits, EncodeSmallFloat(value, 8, 7, std::ldexp(255.0, 120), true));
      store(static_cast<uint16_t>(bits));
      break;
    }
    case v1::FLOAT8_E4M3: {
      ASSIGN_OR_RETURN(uint32_t bits, EncodeSmallFloat(value, 4, 3, 448.0, false));
      store(static_cast<uint8_t>(bits));
      break;
    }
    case v1::FLOAT8_E5M2: {
      ASSIGN_OR_RETURN(uint32_t bits, EncodeSmallFloat(value, 5, 2, 57344.0, true));
      store(static_cast<uint8_t>(bits));
      break;
    }
    case v1::INT8:
      RETURN_IF_ERROR(integer(-128, 127));
      store(static_cast<int8_t>(value));
      break;
    case v1::UINT8:
      RETURN_IF_ERROR(integer(0, 255));
      store(static_cast<uint8_t>(value));
      break;
    case v1::INT32:
      RETURN_IF_ERROR(integer(-2147483648.0, 2147483647.0));
      store(static_cast<int32_t>(value));
      break;
    case v1::INT64:
      // Doubles reach +-2^63 only approximately; the largest below 2^63 is
      // 2^63 - 1024.
      RETURN_IF_ERROR(integer(-9223372036854775808.0, 9223372036854774784.0));
      store(static_cast<int64_t>(value));
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported dtype ", static_cast<int>(dtype)));
  }
  return out;
}

}  // namespace autotune::kernel_worker
