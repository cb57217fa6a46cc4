// rmsnorm: y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w over the rows of
// a [rows, hidden] matrix; x, w and y in AUTOTUNE_DTYPE, all arithmetic in fp32.
//
// Macros: the element type comes as AUTOTUNE_DTYPE (float, __half or
// __nv_bfloat16) with AUTOTUNE_DTYPE_FP32, _FP16 or _BF16; AUTOTUNE_REFERENCE
// selects the reference kernel, else the tuned kernel needs its parameters:
//   VEC             elements per vector access (VEC * sizeof(element) is 4, 8 or 16 bytes)
//   ITEMS           vector accesses per thread per row
//   ROWS_PER_BLOCK  rows one block normalizes side by side
//   CACHE_ROW       1: a thread keeps its slice of the row in registers between
//                   the two passes (x is read once); 0: the second pass reads
//                   x again (fewer registers, more resident blocks)
// The block size is not a compile-time parameter: a row takes exactly
// hidden / (VEC * ITEMS) threads (a multiple of 32, checked by the
// descriptor), so one binary serves every hidden size it tiles exactly.
//
// fp16/bf16 headers come from the toolkit; the compiler passes its include directory.
//
// Launch: grid = ceil(rows / ROWS_PER_BLOCK),
//         block = ROWS_PER_BLOCK * hidden / (VEC * ITEMS).
#if defined(AUTOTUNE_DTYPE_FP16)
#include <cuda_fp16.h>
#elif defined(AUTOTUNE_DTYPE_BF16)
#include <cuda_bf16.h>
#elif !defined(AUTOTUNE_DTYPE_FP32)
#error "the element type must be fp32, fp16 or bf16 (AUTOTUNE_DTYPE_FP32/FP16/BF16)"
#endif

typedef AUTOTUNE_DTYPE rmsnorm_t;

__device__ __forceinline__ float ToFloat(float v) { return v; }
#if defined(AUTOTUNE_DTYPE_FP16)
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
#elif defined(AUTOTUNE_DTYPE_BF16)
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
#endif

// Rounds to the element type, to nearest even.
__device__ __forceinline__ rmsnorm_t ToElement(float v) {
#if defined(AUTOTUNE_DTYPE_FP16)
  return __float2half_rn(v);
#elif defined(AUTOTUNE_DTYPE_BF16)
  return __float2bfloat16_rn(v);
#else
  return v;
#endif
}

#ifdef AUTOTUNE_REFERENCE

// The reference: one thread per row, sum of squares and scaling in double.
// Launch: grid = ceil(rows / 128), block = 128.
extern "C" __global__ void rmsnorm_reference(const rmsnorm_t* x, const rmsnorm_t* w, rmsnorm_t* y,
                                             float eps, int rows, int hidden) {
  const long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const rmsnorm_t* xr = x + row * hidden;
  double sum_sq = 0.0;
  for (int i = 0; i < hidden; ++i) {
    const double v = ToFloat(xr[i]);
    sum_sq += v * v;
  }
  const double inv_rms = 1.0 / sqrt(sum_sq / hidden + static_cast<double>(eps));
  for (int i = 0; i < hidden; ++i) {
    const double out = static_cast<double>(ToFloat(xr[i])) * inv_rms * ToFloat(w[i]);
    y[row * hidden + i] = ToElement(static_cast<float>(out));
  }
}

#else  // the tuned kernel

#if !defined(VEC) || !defined(ITEMS) || !defined(ROWS_PER_BLOCK) || !defined(CACHE_ROW)
#error "define VEC, ITEMS, ROWS_PER_BLOCK and CACHE_ROW"
#endif

#if ITEMS < 1 || ROWS_PER_BLOCK < 1
#error "ITEMS and ROWS_PER_BLOCK must be at least 1"
#endif

template <int kBytes>
struct RawVector;
template <>
struct RawVector<4> {
  typedef unsigned int type;
};
template <>
struct RawVector<8> {
  typedef uint2 type;
};
template <>
struct RawVector<16> {
  typedef uint4 type;
};

constexpr int kVecBytes = VEC * static_cast<int>(sizeof(rmsnorm_t));
static_assert(kVecBytes == 4 || kVecBytes == 8 || kVecBytes == 16,
              "VEC * sizeof(element) must be 4, 8 or 16 bytes");
typedef RawVector<kVecBytes>::type RawVec;

// The largest block the register budget allows. With CACHE_ROW a thread holds
// ITEMS * VEC elements in registers, and a block of N threads leaves each
// 65536 / N registers: 64 at 1024 threads (room for a 64-byte slice), 128 at
// 512 (a 128-byte slice), 255 at 256 (a 256-byte slice). The descriptor's
// constraints admit only blocks within this bound.
constexpr int kRowBytes = CACHE_ROW ? ITEMS * kVecBytes : 0;
static_assert(kRowBytes <= 256, "a cached row slice is at most 256 bytes (64 registers)");
constexpr int kMaxBlock = kRowBytes <= 64 ? 1024 : kRowBytes <= 128 ? 512 : 256;

__device__ __forceinline__ float Lane(const RawVec& raw, int e) {
  return ToFloat(reinterpret_cast<const rmsnorm_t*>(&raw)[e]);
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

extern "C" __global__ void __launch_bounds__(kMaxBlock)
    rmsnorm(const rmsnorm_t* __restrict__ x, const rmsnorm_t* __restrict__ w,
            rmsnorm_t* __restrict__ y, float eps, int rows, int hidden) {
  __shared__ float warp_sums[32];

  const int row_threads = blockDim.x / ROWS_PER_BLOCK;  // hidden / (VEC * ITEMS)
  const int group = threadIdx.x / row_threads;
  const int t = threadIdx.x - group * row_threads;
  const long long row = static_cast<long long>(blockIdx.x) * ROWS_PER_BLOCK + group;
  // A block may run past the last row; its idle groups still take part in
  // the block-wide barrier below.
  const bool active = row < rows;

  const RawVec* xr = reinterpret_cast<const RawVec*>(x + (active ? row : 0) * hidden);
#if CACHE_ROW
  RawVec cached[ITEMS];
#endif
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if (active) {
      const RawVec raw = xr[k * row_threads + t];
#if CACHE_ROW
      cached[k] = raw;
#endif
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float v = Lane(raw, e);
        sum_sq = fmaf(v, v, sum_sq);
      }
    }
  }

  sum_sq = WarpSum(sum_sq);
  const int warps_per_row = row_threads / 32;
  if (warps_per_row > 1) {  // uniform over the block
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) warp_sums[warp] = sum_sq;
    __syncthreads();
    sum_sq = 0.0f;
    for (int i = 0; i < warps_per_row; ++i) sum_sq += warp_sums[group * warps_per_row + i];
  }
  if (!active) return;

  const float inv_rms = rsqrtf(sum_sq / static_cast<float>(hidden) + eps);
  const RawVec* wr = reinterpret_cast<const RawVec*>(w);
  RawVec* yr = reinterpret_cast<RawVec*>(y + row * hidden);
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int at = k * row_threads + t;
#if CACHE_ROW
    const RawVec raw = cached[k];
#else
    const RawVec raw = xr[at];
#endif
    const RawVec weight = wr[at];
    RawVec out;
    rmsnorm_t* out_elems = reinterpret_cast<rmsnorm_t*>(&out);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      out_elems[e] = ToElement(Lane(raw, e) * inv_rms * Lane(weight, e));
    }
    yr[at] = out;
  }
}

#endif  // AUTOTUNE_REFERENCE
