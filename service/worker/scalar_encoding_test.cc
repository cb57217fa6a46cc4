// The bytes of scalar kernel arguments. Expected patterns were derived by
// hand (the derivation beside each case) and cross-checked with an exact
// reference outside this code: every finite value of each format enumerated
// as a fraction, the nearest taken, ties to the even pattern; FLOAT16 also
// against CPython's struct format 'e' (IEEE binary16), which agrees on every
// case but the NaN payload (it writes 0x7e00).
#include "service/worker/scalar_encoding.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <ostream>
#include <string>

#include "base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace autotune::kernel_worker {
namespace {

using ::autotune::testing::StatusIs;
using ::testing::HasSubstr;

// A slot is read by the driver as the first `size` bytes in host order;
// comparing the whole slot with the pattern also checks that the rest is 0.
static_assert(std::endian::native == std::endian::little);

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct EncodeCase {
  std::string name;
  v1::DType dtype;
  double value;
  uint64_t slot;
  size_t size;
};

void PrintTo(const EncodeCase& c, std::ostream* os) { *os << c.name; }

class EncodeScalarTest : public ::testing::TestWithParam<EncodeCase> {};

TEST_P(EncodeScalarTest, Encodes) {
  const EncodeCase& c = GetParam();
  absl::StatusOr<EncodedScalar> encoded = EncodeScalar(c.dtype, c.value);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  EXPECT_EQ(encoded->slot, c.slot) << std::hex << "0x" << encoded->slot << " != 0x" << c.slot;
  EXPECT_EQ(encoded->size, c.size);
}

INSTANTIATE_TEST_SUITE_P(
    Float16, EncodeScalarTest,
    ::testing::Values(
        // Sign, 5 exponent bits (bias 15), 10 mantissa bits.
        EncodeCase{"one", v1::FLOAT16, 1.0, 0x3c00, 2},  // exponent 15 << 10
        EncodeCase{"minus_two", v1::FLOAT16, -2.0, 0xc000, 2},
        EncodeCase{"zero", v1::FLOAT16, 0.0, 0x0000, 2},
        EncodeCase{"negative_zero", v1::FLOAT16, -0.0, 0x8000, 2},
        // 0.1 = 1.6 * 2^-4: exponent 11, mantissa 0.6 * 1024 = 614.4 -> 614.
        EncodeCase{"one_tenth", v1::FLOAT16, 0.1, 0x2e66, 2},
        // (2 - 2^-10) * 2^15: exponent 30, mantissa all ones.
        EncodeCase{"max_finite", v1::FLOAT16, 65504.0, 0x7bff, 2},
        EncodeCase{"minus_max_finite", v1::FLOAT16, -65504.0, 0xfbff, 2},
        // Below the midpoint 65520 to the next binade: rounds down to max.
        EncodeCase{"just_below_overflow", v1::FLOAT16, 65519.99, 0x7bff, 2},
        // 1 + 2^-11 is halfway between 1 (mantissa 0) and 1 + 2^-10
        // (mantissa 1): the even one.
        EncodeCase{"tie_down_to_even", v1::FLOAT16, 1.0 + std::ldexp(1.0, -11), 0x3c00, 2},
        // 1 + 3 * 2^-11 is halfway between mantissas 1 and 2: 2.
        EncodeCase{"tie_up_to_even", v1::FLOAT16, 1.0 + 3 * std::ldexp(1.0, -11), 0x3c02, 2},
        // 2049 lies between 2048 and 2050 (spacing 2 in [2^11, 2^12)): 2048.
        EncodeCase{"integer_tie", v1::FLOAT16, 2049.0, 0x6800, 2},
        // Subnormals are multiples of 2^-24.
        EncodeCase{"min_subnormal", v1::FLOAT16, std::ldexp(1.0, -24), 0x0001, 2},
        EncodeCase{"max_subnormal", v1::FLOAT16, 1023 * std::ldexp(1.0, -24), 0x03ff, 2},
        EncodeCase{"min_normal", v1::FLOAT16, std::ldexp(1.0, -14), 0x0400, 2},
        // 1e-5 / 2^-24 = 167.77: 168 = 0xa8 (the header's example).
        EncodeCase{"subnormal_rounded", v1::FLOAT16, 1e-5, 0x00a8, 2},
        // 2^-25 is halfway between 0 and 2^-24: 0; 3 * 2^-25 between 1 and 2
        // steps: 2; a hair above 2^-25 goes up.
        EncodeCase{"half_min_subnormal_to_zero", v1::FLOAT16, std::ldexp(1.0, -25), 0x0000, 2},
        EncodeCase{"subnormal_tie_to_even", v1::FLOAT16, 3 * std::ldexp(1.0, -25), 0x0002, 2},
        EncodeCase{"above_half_min_subnormal", v1::FLOAT16, std::ldexp(1.0000001, -25), 0x0001, 2},
        EncodeCase{"underflow_keeps_sign", v1::FLOAT16, -1e-10, 0x8000, 2},
        EncodeCase{"infinity", v1::FLOAT16, kInf, 0x7c00, 2},
        EncodeCase{"minus_infinity", v1::FLOAT16, -kInf, 0xfc00, 2},
        EncodeCase{"nan", v1::FLOAT16, kNaN, 0x7fff, 2},
        EncodeCase{"negative_nan", v1::FLOAT16, -kNaN, 0x7fff, 2}),
    [](const ::testing::TestParamInfo<EncodeCase>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    BFloat16, EncodeScalarTest,
    ::testing::Values(
        // Sign, 8 exponent bits (bias 127), 7 mantissa bits: the top half of
        // the FLOAT32 pattern, rounded.
        EncodeCase{"one", v1::BFLOAT16, 1.0, 0x3f80, 2},
        EncodeCase{"minus_one_and_a_half", v1::BFLOAT16, -1.5, 0xbfc0, 2},
        // pi = 1.5708 * 2^1: mantissa 0.5708 * 128 = 73.06 -> 73 = 0x49.
        EncodeCase{"pi", v1::BFLOAT16, std::numbers::pi, 0x4049, 2},
        // 0.1 = 1.6 * 2^-4: exponent 123, mantissa 0.6 * 128 = 76.8 -> 77.
        EncodeCase{"one_tenth", v1::BFLOAT16, 0.1, 0x3dcd, 2},
        EncodeCase{"max_finite", v1::BFLOAT16, std::ldexp(255.0, 120), 0x7f7f, 2},
        // A quarter of the last step above max: still max.
        EncodeCase{"just_above_max_rounds_down", v1::BFLOAT16,
                   std::ldexp(255.0, 120) * (1 + std::ldexp(1.0, -9)), 0x7f7f, 2},
        EncodeCase{"tie_down_to_even", v1::BFLOAT16, 1.0 + std::ldexp(1.0, -8), 0x3f80, 2},
        EncodeCase{"tie_up_to_even", v1::BFLOAT16, 1.0 + 3 * std::ldexp(1.0, -8), 0x3f82, 2},
        // Subnormals are multiples of 2^-133.
        EncodeCase{"min_subnormal", v1::BFLOAT16, std::ldexp(1.0, -133), 0x0001, 2},
        EncodeCase{"half_min_subnormal_to_zero", v1::BFLOAT16, std::ldexp(1.0, -134), 0x0000, 2},
        EncodeCase{"subnormal_tie_to_even", v1::BFLOAT16, 3 * std::ldexp(1.0, -134), 0x0002, 2},
        EncodeCase{"min_normal", v1::BFLOAT16, std::ldexp(1.0, -126), 0x0080, 2},
        EncodeCase{"negative_zero", v1::BFLOAT16, -0.0, 0x8000, 2},
        EncodeCase{"infinity", v1::BFLOAT16, kInf, 0x7f80, 2},
        EncodeCase{"minus_infinity", v1::BFLOAT16, -kInf, 0xff80, 2},
        EncodeCase{"nan", v1::BFLOAT16, kNaN, 0x7fff, 2}),
    [](const ::testing::TestParamInfo<EncodeCase>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Float8E4M3, EncodeScalarTest,
    ::testing::Values(
        // Sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 15 is a
        // normal binade except for mantissa 111 (NaN).
        EncodeCase{"one", v1::FLOAT8_E4M3, 1.0, 0x38, 1},  // 7 << 3
        // 240 = 1.875 * 2^7: exponent 14, mantissa 7.
        EncodeCase{"largest_below_top_binade", v1::FLOAT8_E4M3, 240.0, 0x77, 1},
        // 256 = 2^8: exponent 15, which IEEE formats keep for infinities.
        EncodeCase{"top_binade_is_finite", v1::FLOAT8_E4M3, 256.0, 0x78, 1},
        // 448 = 1.75 * 2^8: exponent 15, mantissa 110.
        EncodeCase{"max_finite", v1::FLOAT8_E4M3, 448.0, 0x7e, 1},
        EncodeCase{"minus_max_finite", v1::FLOAT8_E4M3, -448.0, 0xfe, 1},
        // 464 is halfway between 448 (mantissa 110) and what would be 480
        // (111, the NaN pattern): the even one, 448.
        EncodeCase{"tie_at_max_rounds_to_max", v1::FLOAT8_E4M3, 464.0, 0x7e, 1},
        // 1.0625 between 1 and 1.125: 1; 1.1875 between 1.125 (001) and
        // 1.25 (010): 1.25.
        EncodeCase{"tie_down_to_even", v1::FLOAT8_E4M3, 1.0625, 0x38, 1},
        EncodeCase{"tie_up_to_even", v1::FLOAT8_E4M3, 1.1875, 0x3a, 1},
        // 0.3 = 1.2 * 2^-2: exponent 5, mantissa 0.2 * 8 = 1.6 -> 2.
        EncodeCase{"three_tenths", v1::FLOAT8_E4M3, 0.3, 0x2a, 1},
        // Subnormals are multiples of 2^-9.
        EncodeCase{"min_subnormal", v1::FLOAT8_E4M3, std::ldexp(1.0, -9), 0x01, 1},
        EncodeCase{"max_subnormal", v1::FLOAT8_E4M3, 7 * std::ldexp(1.0, -9), 0x07, 1},
        EncodeCase{"min_normal", v1::FLOAT8_E4M3, std::ldexp(1.0, -6), 0x08, 1},
        EncodeCase{"half_min_subnormal_to_zero", v1::FLOAT8_E4M3, std::ldexp(1.0, -10), 0x00, 1},
        EncodeCase{"subnormal_tie_to_even", v1::FLOAT8_E4M3, 3 * std::ldexp(1.0, -10), 0x02, 1},
        EncodeCase{"underflow_keeps_sign", v1::FLOAT8_E4M3, -1e-5, 0x80, 1},
        EncodeCase{"nan", v1::FLOAT8_E4M3, kNaN, 0x7f, 1}),
    [](const ::testing::TestParamInfo<EncodeCase>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Float8E5M2, EncodeScalarTest,
    ::testing::Values(
        // Sign, 5 exponent bits (bias 15), 2 mantissa bits: FLOAT16's top byte.
        EncodeCase{"one", v1::FLOAT8_E5M2, 1.0, 0x3c, 1},
        // 0.1 = 1.6 * 2^-4: exponent 11, mantissa 0.6 * 4 = 2.4 -> 2.
        EncodeCase{"one_tenth", v1::FLOAT8_E5M2, 0.1, 0x2e, 1},
        // 57344 = 1.75 * 2^15: exponent 30, mantissa 11.
        EncodeCase{"max_finite", v1::FLOAT8_E5M2, 57344.0, 0x7b, 1},
        EncodeCase{"minus_max_finite", v1::FLOAT8_E5M2, -57344.0, 0xfb, 1},
        EncodeCase{"just_below_overflow", v1::FLOAT8_E5M2, 61439.0, 0x7b, 1},
        // 1.125 between 1 and 1.25: 1; 1.375 between 1.25 (01) and 1.5 (10).
        EncodeCase{"tie_down_to_even", v1::FLOAT8_E5M2, 1.125, 0x3c, 1},
        EncodeCase{"tie_up_to_even", v1::FLOAT8_E5M2, 1.375, 0x3e, 1},
        // Subnormals are multiples of 2^-16.
        EncodeCase{"min_subnormal", v1::FLOAT8_E5M2, std::ldexp(1.0, -16), 0x01, 1},
        EncodeCase{"max_subnormal", v1::FLOAT8_E5M2, 3 * std::ldexp(1.0, -16), 0x03, 1},
        EncodeCase{"min_normal", v1::FLOAT8_E5M2, std::ldexp(1.0, -14), 0x04, 1},
        EncodeCase{"half_min_subnormal_to_zero", v1::FLOAT8_E5M2, std::ldexp(1.0, -17), 0x00, 1},
        EncodeCase{"subnormal_tie_to_even", v1::FLOAT8_E5M2, 3 * std::ldexp(1.0, -17), 0x02, 1},
        EncodeCase{"negative_zero", v1::FLOAT8_E5M2, -0.0, 0x80, 1},
        EncodeCase{"infinity", v1::FLOAT8_E5M2, kInf, 0x7c, 1},
        EncodeCase{"minus_infinity", v1::FLOAT8_E5M2, -kInf, 0xfc, 1},
        EncodeCase{"nan", v1::FLOAT8_E5M2, kNaN, 0x7f, 1}),
    [](const ::testing::TestParamInfo<EncodeCase>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    WideFloats, EncodeScalarTest,
    ::testing::Values(
        EncodeCase{"float32_one", v1::FLOAT32, 1.0, 0x3f800000, 4},
        // 0.1 = 1.6 * 2^-4: mantissa 0.6 * 2^23 = 5033164.8 -> 0x4ccccd.
        EncodeCase{"float32_one_tenth", v1::FLOAT32, 0.1, 0x3dcccccd, 4},
        EncodeCase{"float32_tie_to_even", v1::FLOAT32, 1.0 + std::ldexp(1.0, -24), 0x3f800000, 4},
        EncodeCase{"float32_max_finite", v1::FLOAT32, std::numeric_limits<float>::max(), 0x7f7fffff,
                   4},
        EncodeCase{"float32_min_subnormal", v1::FLOAT32, std::ldexp(1.0, -149), 0x00000001, 4},
        EncodeCase{"float32_minus_infinity", v1::FLOAT32, -kInf, 0xff800000, 4},
        EncodeCase{"float32_nan", v1::FLOAT32, kNaN, 0x7fc00000, 4},
        EncodeCase{"float64_minus_two_and_a_half", v1::FLOAT64, -2.5, 0xc004000000000000, 8},
        EncodeCase{"float64_infinity", v1::FLOAT64, kInf, 0x7ff0000000000000, 8}),
    [](const ::testing::TestParamInfo<EncodeCase>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Integers, EncodeScalarTest,
    ::testing::Values(
        EncodeCase{"int8_min", v1::INT8, -128, 0x80, 1},
        EncodeCase{"int8_max", v1::INT8, 127, 0x7f, 1},
        EncodeCase{"int8_minus_one", v1::INT8, -1, 0xff, 1},
        EncodeCase{"uint8_zero", v1::UINT8, 0, 0x00, 1},
        EncodeCase{"uint8_max", v1::UINT8, 255, 0xff, 1},
        EncodeCase{"int32_min", v1::INT32, -2147483648.0, 0x80000000, 4},
        EncodeCase{"int32_max", v1::INT32, 2147483647.0, 0x7fffffff, 4},
        EncodeCase{"int32_minus_one", v1::INT32, -1, 0xffffffff, 4},
        EncodeCase{"int64_min", v1::INT64, -9223372036854775808.0, 0x8000000000000000, 8},
        // 2^63 - 1024, the largest double below 2^63.
        EncodeCase{"int64_max_double", v1::INT64, 9223372036854774784.0, 0x7ffffffffffffc00, 8},
        EncodeCase{"int64_minus_one", v1::INT64, -1, 0xffffffffffffffff, 8}),
    [](const ::testing::TestParamInfo<EncodeCase>& info) { return info.param.name; });

struct RejectCase {
  std::string name;
  v1::DType dtype;
  double value;
  std::string message;
};

void PrintTo(const RejectCase& c, std::ostream* os) { *os << c.name; }

class EncodeScalarRejectTest : public ::testing::TestWithParam<RejectCase> {};

TEST_P(EncodeScalarRejectTest, Rejects) {
  const RejectCase& c = GetParam();
  EXPECT_THAT(EncodeScalar(c.dtype, c.value),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, EncodeScalarRejectTest,
    ::testing::Values(
        // The midpoint to the next binade ties to its even pattern, which is
        // an infinity: beyond the largest finite value, not saturated.
        RejectCase{"float16_overflow_tie", v1::FLOAT16, 65520.0,
                   "65520 is beyond the largest finite value 65504"},
        RejectCase{"float16_overflow", v1::FLOAT16, -1e5,
                   "-100000 is beyond the largest finite value 65504"},
        // FLT_MAX is past bfloat16's midpoint (2 - 2^-8) * 2^127.
        RejectCase{"bfloat16_overflow", v1::BFLOAT16, std::numeric_limits<float>::max(),
                   "is beyond the largest finite value 3.38953139e+38"},
        // Just above the tie at 464: rounds to 480, which E4M3 lacks.
        RejectCase{"float8_e4m3_overflow", v1::FLOAT8_E4M3, 465.0,
                   "465 is beyond the largest finite value 448"},
        RejectCase{"float8_e4m3_infinity", v1::FLOAT8_E4M3, kInf, "infinity is not representable"},
        RejectCase{"float8_e4m3_minus_infinity", v1::FLOAT8_E4M3, -kInf,
                   "infinity is not representable"},
        // 61440 ties between max (mantissa 11) and 2^16 (even): overflow.
        RejectCase{"float8_e5m2_overflow_tie", v1::FLOAT8_E5M2, 61440.0,
                   "61440 is beyond the largest finite value 57344"},
        RejectCase{"float32_overflow", v1::FLOAT32, 1e39, "1e+39 overflows FLOAT32"},
        RejectCase{"int8_above", v1::INT8, 128, "128 is not a whole number in [-128, 127]"},
        RejectCase{"int8_below", v1::INT8, -129, "-129 is not a whole number in [-128, 127]"},
        RejectCase{"int8_fraction", v1::INT8, 1.5, "1.5 is not a whole number"},
        RejectCase{"uint8_negative", v1::UINT8, -1, "-1 is not a whole number in [0, 255]"},
        RejectCase{"uint8_above", v1::UINT8, 256, "256 is not a whole number in [0, 255]"},
        RejectCase{"int32_above", v1::INT32, 2147483648.0, "2.14748365e+09 is not a whole number"},
        RejectCase{"int32_nan", v1::INT32, kNaN, "nan is not a whole number"},
        RejectCase{"int64_two_to_63", v1::INT64, 9223372036854775808.0,
                   "9.22337204e+18 is not a whole number"},
        RejectCase{"int64_infinity", v1::INT64, -kInf, "-inf is not a whole number"},
        RejectCase{"int64_fraction", v1::INT64, 0.5, "0.5 is not a whole number"},
        RejectCase{"unspecified_dtype", v1::DTYPE_UNSPECIFIED, 1.0, "unsupported dtype 0"},
        RejectCase{"unknown_dtype", static_cast<v1::DType>(99), 1.0, "unsupported dtype 99"}),
    [](const ::testing::TestParamInfo<RejectCase>& info) { return info.param.name; });

}  // namespace
}  // namespace autotune::kernel_worker
