// softmax: y[r, i] = exp(x[r, i] - m) / sum_j exp(x[r, j] - m), m = max_j x[r, j],
// over the rows of a [rows, hidden] matrix; x and y in AUTOTUNE_DTYPE, all
// arithmetic in fp32. Subtracting the row maximum keeps every exponent <= 0,
// so no input overflows the sum.
//
// Macros: the element type comes as AUTOTUNE_DTYPE (float, __half or
// __nv_bfloat16) with AUTOTUNE_DTYPE_FP32, _FP16 or _BF16; AUTOTUNE_REFERENCE
// selects the reference kernel, else the tuned kernel needs its parameters:
//   VEC             elements per vector access (VEC * sizeof(element) is 4, 8 or 16 bytes)
//   ITEMS           vector accesses per thread per row
//   ROWS_PER_BLOCK  rows one block handles side by side
//   CACHE_ROW       1: a thread keeps its slice of the row in registers; the
//                   maximum and the sum are two block reductions and x is read
//                   once. 0: one pass keeps a running (maximum, sum) pair per
//                   thread, merged in a single reduction, and a second pass
//                   reads x again (fewer registers, one barrier fewer)
// A row takes exactly hidden / (VEC * ITEMS) threads (a multiple of 32,
// checked by the descriptor), so one binary serves every hidden size it
// tiles exactly.
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

typedef AUTOTUNE_DTYPE softmax_t;

__device__ __forceinline__ float ToFloat(float v) { return v; }
#if defined(AUTOTUNE_DTYPE_FP16)
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
#elif defined(AUTOTUNE_DTYPE_BF16)
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
#endif

// Rounds to the element type, to nearest even.
__device__ __forceinline__ softmax_t ToElement(float v) {
#if defined(AUTOTUNE_DTYPE_FP16)
  return __float2half_rn(v);
#elif defined(AUTOTUNE_DTYPE_BF16)
  return __float2bfloat16_rn(v);
#else
  return v;
#endif
}

#ifdef AUTOTUNE_REFERENCE

// The reference: one thread per row, three passes (maximum, sum, output)
// in double. Launch: grid = ceil(rows / 128), block = 128.
extern "C" __global__ void softmax_reference(const softmax_t* x, softmax_t* y, int rows,
                                             int hidden) {
  const long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const softmax_t* xr = x + row * hidden;
  double m = ToFloat(xr[0]);
  for (int i = 1; i < hidden; ++i) m = fmax(m, static_cast<double>(ToFloat(xr[i])));
  double sum = 0.0;
  for (int i = 0; i < hidden; ++i) sum += exp(ToFloat(xr[i]) - m);
  for (int i = 0; i < hidden; ++i) {
    y[row * hidden + i] = ToElement(static_cast<float>(exp(ToFloat(xr[i]) - m) / sum));
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

constexpr int kVecBytes = VEC * static_cast<int>(sizeof(softmax_t));
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

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float Lane(const RawVec& raw, int e) {
  return ToFloat(reinterpret_cast<const softmax_t*>(&raw)[e]);
}

// exp(v - m) as 2^(v * log2(e) - m * log2(e)), one fused multiply-add and one
// exp2; `m_log2e` is m * log2(e).
__device__ __forceinline__ float ShiftedExp(float v, float m_log2e) {
  return exp2f(fmaf(v, kLog2e, -m_log2e));
}

// exp(from - to) for to >= from, exactly 1 when both are equal (also when
// both are -inf, for a thread that saw no element).
__device__ __forceinline__ float Rescale(float from, float to) {
  return from == to ? 1.0f : exp2f((from - to) * kLog2e);
}

extern "C" __global__ void __launch_bounds__(kMaxBlock)
    softmax(const softmax_t* __restrict__ x, softmax_t* __restrict__ y, int rows, int hidden) {
  __shared__ float warp_max[32];
  __shared__ float warp_sum[32];

  const int row_threads = blockDim.x / ROWS_PER_BLOCK;  // hidden / (VEC * ITEMS)
  const int group = threadIdx.x / row_threads;
  const int t = threadIdx.x - group * row_threads;
  const long long row = static_cast<long long>(blockIdx.x) * ROWS_PER_BLOCK + group;
  // A block may run past the last row; its idle groups still take part in
  // the block-wide barriers below.
  const bool active = row < rows;
  const int warp = threadIdx.x / 32;
  const bool warp_leader = threadIdx.x % 32 == 0;
  const int warps_per_row = row_threads / 32;  // the same for every thread

  const RawVec* xr = reinterpret_cast<const RawVec*>(x + (active ? row : 0) * hidden);
  float m = __int_as_float(0xff800000);  // -inf
  float sum = 0.0f;

#if CACHE_ROW
  RawVec cached[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if (active) {
      cached[k] = xr[k * row_threads + t];
#pragma unroll
      for (int e = 0; e < VEC; ++e) m = fmaxf(m, Lane(cached[k], e));
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  }
  if (warps_per_row > 1) {
    if (warp_leader) warp_max[warp] = m;
    __syncthreads();
    m = warp_max[group * warps_per_row];
    for (int i = 1; i < warps_per_row; ++i) m = fmaxf(m, warp_max[group * warps_per_row + i]);
  }
  const float m_log2e = m * kLog2e;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if (active) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) sum += ShiftedExp(Lane(cached[k], e), m_log2e);
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (warps_per_row > 1) {
    if (warp_leader) warp_sum[warp] = sum;
    __syncthreads();
    sum = 0.0f;
    for (int i = 0; i < warps_per_row; ++i) sum += warp_sum[group * warps_per_row + i];
  }
#else
  // Online pass: after each vector, `sum` is the sum of exp(v - m) over what
  // this thread has seen, for its running maximum m.
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if (active) {
      const RawVec raw = xr[k * row_threads + t];
      float vmax = Lane(raw, 0);
#pragma unroll
      for (int e = 1; e < VEC; ++e) vmax = fmaxf(vmax, Lane(raw, e));
      const float new_m = fmaxf(m, vmax);
      const float new_m_log2e = new_m * kLog2e;
      float part = 0.0f;
#pragma unroll
      for (int e = 0; e < VEC; ++e) part += ShiftedExp(Lane(raw, e), new_m_log2e);
      sum = fmaf(sum, Rescale(m, new_m), part);
      m = new_m;
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other_m = __shfl_xor_sync(0xffffffffu, m, offset);
    const float other_sum = __shfl_xor_sync(0xffffffffu, sum, offset);
    const float new_m = fmaxf(m, other_m);
    sum = sum * Rescale(m, new_m) + other_sum * Rescale(other_m, new_m);
    m = new_m;
  }
  if (warps_per_row > 1) {
    if (warp_leader) {
      warp_max[warp] = m;
      warp_sum[warp] = sum;
    }
    __syncthreads();
    m = warp_max[group * warps_per_row];
    for (int i = 1; i < warps_per_row; ++i) m = fmaxf(m, warp_max[group * warps_per_row + i]);
    sum = 0.0f;
    for (int i = 0; i < warps_per_row; ++i) {
      const int at = group * warps_per_row + i;
      sum = fmaf(warp_sum[at], Rescale(warp_max[at], m), sum);
    }
  }
  const float m_log2e = m * kLog2e;
#endif
  if (!active) return;

  const float inv_sum = 1.0f / sum;
  softmax_t* const yrow = y + row * hidden;
  RawVec* yr = reinterpret_cast<RawVec*>(yrow);
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int at = k * row_threads + t;
#if CACHE_ROW
    const RawVec raw = cached[k];
#else
    const RawVec raw = xr[at];
#endif
    RawVec out;
    softmax_t* out_elems = reinterpret_cast<softmax_t*>(&out);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      out_elems[e] = ToElement(ShiftedExp(Lane(raw, e), m_log2e) * inv_sum);
    }
    yr[at] = out;
  }
}

#endif  // AUTOTUNE_REFERENCE
