// Kernels the profiler itself runs on the device (service/worker/profiler.cc):
// filling buffers from a seed and comparing a variant's outputs with the
// reference's. Built at build time to PTX for compute_75 and embedded into the
// library as text; the driver compiles it for the GPU at Profiler::Open, so
// one build serves every GPU from Turing on.
//
// The numbering of `dtype` is autotune.v1.DType's (proto/autotune.proto); the
// fill kinds and CompareResult's layout are repeated in profiler.cc, which
// must agree with this file.
//
// Indices are 64-bit and every loop is grid-stride: a buffer may hold more
// than 2^31 elements and the grid is sized from the device, not the buffer.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace {

// autotune.v1.DType.
enum DType : int {
  kFloat32 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kFloat64 = 4,
  kInt8 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kUInt8 = 8,
  kFloat8E4M3 = 9,
  kFloat8E5M2 = 10,
};

// How autotune_fill makes a value (the host maps autotune.v1.Fill onto these).
enum FillKind : int {
  kUniform = 0,   // [a, b)
  kNormal = 1,    // mean a, standard deviation b (Box-Muller)
  kConstant = 2,  // a
};

// splitmix64's finalizer: a bijection on 64 bits whose output bits each
// depend on every input bit.
__device__ __forceinline__ uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Counter-based: the value of an element depends on (seed, buffer, index,
// lane) alone, never on the launch shape, so a refill reproduces it exactly.
__device__ __forceinline__ uint64_t Hash(uint64_t seed, uint64_t buffer, uint64_t index,
                                         uint64_t lane) {
  uint64_t h = Mix64(seed + 0x9e3779b97f4a7c15ull);
  h = Mix64(h ^ (buffer * 0xd1b54a32d192ed03ull + lane));
  return Mix64(h ^ (index + 0x632be59bd9b4e019ull));
}

// Uniform in [0, 1) from the top 53 bits.
__device__ __forceinline__ double UnitOpen(uint64_t h) {
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

// Uniform in (0, 1]: never 0, so log() is finite.
__device__ __forceinline__ double UnitClosed(uint64_t h) {
  return static_cast<double>((h >> 11) + 1) * 0x1.0p-53;
}

template <typename T>
__device__ __forceinline__ T ClampToInteger(double v, double lo, double hi) {
  // floor first: the fill of an integer buffer takes floor(value), clamped
  // to the type's range (NaN cannot occur: the generators give finite values
  // for finite parameters; it maps to lo if it does).
  v = floor(v);
  if (!(v >= lo)) return static_cast<T>(lo);
  if (v > hi) return static_cast<T>(hi);
  return static_cast<T>(v);
}

template <typename T>
struct Element;

template <>
struct Element<float> {
  static __device__ __forceinline__ float From(double v) { return static_cast<float>(v); }
  static __device__ __forceinline__ double ToDouble(float v) { return v; }
};
template <>
struct Element<double> {
  static __device__ __forceinline__ double From(double v) { return v; }
  static __device__ __forceinline__ double ToDouble(double v) { return v; }
};
template <>
struct Element<__half> {
  static __device__ __forceinline__ __half From(double v) { return __double2half(v); }
  static __device__ __forceinline__ double ToDouble(__half v) { return __half2float(v); }
};
template <>
struct Element<__nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 From(double v) { return __double2bfloat16(v); }
  static __device__ __forceinline__ double ToDouble(__nv_bfloat16 v) { return __bfloat162float(v); }
};
template <>
struct Element<int8_t> {
  static __device__ __forceinline__ int8_t From(double v) {
    return ClampToInteger<int8_t>(v, -128.0, 127.0);
  }
  static __device__ __forceinline__ double ToDouble(int8_t v) { return v; }
};
template <>
struct Element<uint8_t> {
  static __device__ __forceinline__ uint8_t From(double v) {
    return ClampToInteger<uint8_t>(v, 0.0, 255.0);
  }
  static __device__ __forceinline__ double ToDouble(uint8_t v) { return v; }
};
template <>
struct Element<int32_t> {
  static __device__ __forceinline__ int32_t From(double v) {
    return ClampToInteger<int32_t>(v, -2147483648.0, 2147483647.0);
  }
  static __device__ __forceinline__ double ToDouble(int32_t v) { return v; }
};
template <>
struct Element<long long> {
  static __device__ __forceinline__ long long From(double v) {
    // 2^63 is not an int64; the largest double below it is 2^63 - 1024.
    v = floor(v);
    if (!(v >= -9223372036854775808.0)) return static_cast<long long>(0x8000000000000000ull);
    if (v >= 9223372036854775808.0) return 0x7fffffffffffffffll;
    return static_cast<long long>(v);
  }
  static __device__ __forceinline__ double ToDouble(long long v) { return static_cast<double>(v); }
};

// FP8 values are held as their storage byte; conversions saturate to the
// largest finite value, as the fill of any type clamps to its range.
struct Fp8E4M3 {
  __nv_fp8_storage_t bits;
};
struct Fp8E5M2 {
  __nv_fp8_storage_t bits;
};
template <>
struct Element<Fp8E4M3> {
  static __device__ __forceinline__ Fp8E4M3 From(double v) {
    return Fp8E4M3{__nv_cvt_double_to_fp8(v, __NV_SATFINITE, __NV_E4M3)};
  }
  static __device__ __forceinline__ double ToDouble(Fp8E4M3 v) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(v.bits, __NV_E4M3)));
  }
};
template <>
struct Element<Fp8E5M2> {
  static __device__ __forceinline__ Fp8E5M2 From(double v) {
    return Fp8E5M2{__nv_cvt_double_to_fp8(v, __NV_SATFINITE, __NV_E5M2)};
  }
  static __device__ __forceinline__ double ToDouble(Fp8E5M2 v) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(v.bits, __NV_E5M2)));
  }
};
static_assert(sizeof(Fp8E4M3) == 1 && sizeof(Fp8E5M2) == 1, "fp8 elements are one byte");

__device__ __forceinline__ uint64_t GlobalThread() {
  return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ uint64_t GridThreads() {
  return static_cast<uint64_t>(gridDim.x) * blockDim.x;
}

template <typename T>
__device__ void FillBody(void* data, uint64_t n, int kind, double a, double b, uint64_t seed,
                         uint64_t buffer) {
  T* out = static_cast<T*>(data);
  for (uint64_t i = GlobalThread(); i < n; i += GridThreads()) {
    double v;
    if (kind == kNormal) {
      const double u1 = UnitClosed(Hash(seed, buffer, i, 0));
      const double u2 = UnitOpen(Hash(seed, buffer, i, 1));
      v = a + b * sqrt(-2.0 * log(u1)) * cospi(2.0 * u2);
    } else if (kind == kUniform) {
      v = a + (b - a) * UnitOpen(Hash(seed, buffer, i, 0));
    } else {
      v = a;
    }
    out[i] = Element<T>::From(v);
  }
}

// One comparison's outcome; profiler.cc holds the same layout
// (DeviceCompareResult). Zero bytes are the starting state.
struct CompareResult {
  unsigned long long mismatches;     // elements that fail (NaN ones included)
  unsigned long long nan_values;     // NaN in the checked buffer
  unsigned long long nan_reference;  // NaN in the reference buffer
  unsigned long long max_abs_bits;   // bits of max |v - r| over pairs without NaN
  unsigned long long first_bad_inv;  // ~(first failing index); 0 = none
  double value;                      // v and r at the first failing index
  double reference;                  // (autotune_compare_finish)
};

template <typename T>
__device__ void CompareBody(const void* checked, const void* reference, uint64_t n, double rtol,
                            double atol, CompareResult* result) {
  const T* v_data = static_cast<const T*>(checked);
  const T* r_data = static_cast<const T*>(reference);
  unsigned long long mismatches = 0;
  unsigned long long nan_values = 0;
  unsigned long long nan_reference = 0;
  double max_abs = 0.0;
  unsigned long long first_bad = ~0ull;
  for (uint64_t i = GlobalThread(); i < n; i += GridThreads()) {
    const double v = Element<T>::ToDouble(v_data[i]);
    const double r = Element<T>::ToDouble(r_data[i]);
    bool pass;
    if (isnan(v) || isnan(r)) {
      nan_values += isnan(v) ? 1 : 0;
      nan_reference += isnan(r) ? 1 : 0;
      pass = false;
    } else if (v == r) {
      pass = true;  // infinities of one sign included
    } else {
      // Infinite when either side is: such a pair never passes, even
      // against a tolerance that is itself infinite (rtol * |inf|).
      const double d = fabs(v - r);
      max_abs = fmax(max_abs, d);
      pass = isfinite(d) && d <= atol + rtol * fabs(r);
    }
    if (!pass) {
      ++mismatches;
      if (i < first_bad) first_bad = i;
    }
  }
  // One atomic per warp instead of one per thread.
  for (int offset = 16; offset > 0; offset /= 2) {
    mismatches += __shfl_xor_sync(0xffffffffu, mismatches, offset);
    nan_values += __shfl_xor_sync(0xffffffffu, nan_values, offset);
    nan_reference += __shfl_xor_sync(0xffffffffu, nan_reference, offset);
    max_abs = fmax(max_abs, __shfl_xor_sync(0xffffffffu, max_abs, offset));
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, first_bad, offset);
    first_bad = other < first_bad ? other : first_bad;
  }
  if ((threadIdx.x & 31) != 0) return;
  if (mismatches != 0) {
    atomicAdd(&result->mismatches, mismatches);
    atomicMax(&result->first_bad_inv, ~first_bad);
  }
  if (nan_values != 0) atomicAdd(&result->nan_values, nan_values);
  if (nan_reference != 0) atomicAdd(&result->nan_reference, nan_reference);
  // Non-negative doubles (+inf included) order as their bit patterns do.
  if (max_abs > 0.0) {
    atomicMax(&result->max_abs_bits,
              static_cast<unsigned long long>(__double_as_longlong(max_abs)));
  }
}

template <typename T>
__device__ void FinishBody(const void* checked, const void* reference, CompareResult* result) {
  if (result->first_bad_inv == 0) return;
  const unsigned long long index = ~result->first_bad_inv;
  result->value = Element<T>::ToDouble(static_cast<const T*>(checked)[index]);
  result->reference = Element<T>::ToDouble(static_cast<const T*>(reference)[index]);
}

// Calls body.template operator()<T>() for the element type of `dtype`.
template <typename Body>
__device__ __forceinline__ void Dispatch(int dtype, Body body) {
  switch (dtype) {
    case kFloat32:
      body.template operator()<float>();
      break;
    case kFloat16:
      body.template operator()<__half>();
      break;
    case kBFloat16:
      body.template operator()<__nv_bfloat16>();
      break;
    case kFloat64:
      body.template operator()<double>();
      break;
    case kInt8:
      body.template operator()<int8_t>();
      break;
    case kInt32:
      body.template operator()<int32_t>();
      break;
    case kInt64:
      body.template operator()<long long>();
      break;
    case kUInt8:
      body.template operator()<uint8_t>();
      break;
    case kFloat8E4M3:
      body.template operator()<Fp8E4M3>();
      break;
    case kFloat8E5M2:
      body.template operator()<Fp8E5M2>();
      break;
    default:
      break;  // the host never launches with another dtype
  }
}

}  // namespace

// Fills n elements of `data` (dtype) from (seed, buffer, element index).
extern "C" __global__ void autotune_fill(void* data, unsigned long long n, int dtype, int kind,
                                         double a, double b, unsigned long long seed,
                                         unsigned long long buffer) {
  Dispatch(dtype, [&]<typename T>() { FillBody<T>(data, n, kind, a, b, seed, buffer); });
}

// Compares n elements of `checked` with `reference` (both dtype) into
// *result, which starts as zero bytes. Blocks must be whole warps.
extern "C" __global__ void autotune_compare(const void* checked, const void* reference,
                                            unsigned long long n, int dtype, double rtol,
                                            double atol, CompareResult* result) {
  Dispatch(dtype, [&]<typename T>() { CompareBody<T>(checked, reference, n, rtol, atol, result); });
}

// After autotune_compare: reads both values at the first failing index.
// One thread.
extern "C" __global__ void autotune_compare_finish(const void* checked, const void* reference,
                                                   int dtype, CompareResult* result) {
  Dispatch(dtype, [&]<typename T>() { FinishBody<T>(checked, reference, result); });
}
