// gla_decode: one decode step (one token) of gated linear attention.
//
// For every batch b and head h, with S = state[b,h] a Dk x Dv fp32 matrix:
//   S'[i,j] = exp(g[i]) * S[i,j] + k[i] * v[j]      (the state, updated in place)
//   o[j]    = sum_i (scale * q[i]) * S'[i,j]
// q, k: [B,H,Dk]; v, o: [B,H,Dv] in AUTOTUNE_DTYPE; g: [B,H,Dk] fp32, the
// per-key-channel log-space decay (so exp(g) is in (0, 1] for g <= 0); the
// state and every accumulation are fp32. Dk = Dv = `dim`, a run-time
// argument: one binary serves every head dim the constraints admit.
//
// Macros: the element type comes as AUTOTUNE_DTYPE (float, __half or
// __nv_bfloat16) with AUTOTUNE_DTYPE_FP32, _FP16 or _BF16; AUTOTUNE_REFERENCE
// selects the reference kernel, else the tuned kernel needs its parameters:
//   BLOCK_V         state columns (of Dv) one block owns; grid.x = dim / BLOCK_V
//   VEC             adjacent fp32 columns per thread (4-, 8- or 16-byte accesses)
//   THREADS         threads per block. BLOCK_V / VEC threads cover a tile row;
//                   THREADS * VEC / BLOCK_V row groups split Dk, and their
//                   partial sums of o meet in a warp-shuffle + shared-memory
//                   reduction
//   UNROLL          state rows a thread loads before it updates any of them
//                   (memory-level parallelism)
// The descriptor's constraints guarantee that dim is a multiple of BLOCK_V and
// of (row groups * UNROLL), so no access needs a bounds check.
//
// fp16/bf16 headers come from the toolkit; the compiler passes its include directory.
//
// Launch: grid = (dim / BLOCK_V, batch * heads), block = THREADS,
// dynamic shared memory = 3 * dim * sizeof(float) (scaled q, k, exp(g)).
#if defined(AUTOTUNE_DTYPE_FP16)
#include <cuda_fp16.h>
#elif defined(AUTOTUNE_DTYPE_BF16)
#include <cuda_bf16.h>
#elif !defined(AUTOTUNE_DTYPE_FP32)
#error "the element type must be fp32, fp16 or bf16 (AUTOTUNE_DTYPE_FP32/FP16/BF16)"
#endif

typedef AUTOTUNE_DTYPE gla_t;

__device__ __forceinline__ float ToFloat(float v) { return v; }
#if defined(AUTOTUNE_DTYPE_FP16)
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
#elif defined(AUTOTUNE_DTYPE_BF16)
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
#endif

// Rounds to the element type, to nearest even.
__device__ __forceinline__ gla_t ToElement(float v) {
#if defined(AUTOTUNE_DTYPE_FP16)
  return __float2half_rn(v);
#elif defined(AUTOTUNE_DTYPE_BF16)
  return __float2bfloat16_rn(v);
#else
  return v;
#endif
}

#ifdef AUTOTUNE_REFERENCE

// The reference: one thread per state column (b, h, j). It walks the column
// top to bottom, updates it in double precision and accumulates o[j] in
// double. Launch: grid = (ceil(dim / 64), batch * heads), block = 64.
extern "C" __global__ void gla_decode_reference(float* state, const gla_t* q, const gla_t* k,
                                                const gla_t* v, const float* g, gla_t* o,
                                                float scale, int dim) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  const long long bh = blockIdx.y;
  const double vj = ToFloat(v[bh * dim + j]);
  double acc = 0.0;
  for (int i = 0; i < dim; ++i) {
    const long long at = (bh * dim + i) * dim + j;
    const double decay = exp(static_cast<double>(g[bh * dim + i]));
    const double updated = decay * state[at] + static_cast<double>(ToFloat(k[bh * dim + i])) * vj;
    state[at] = static_cast<float>(updated);
    acc += static_cast<double>(scale) * ToFloat(q[bh * dim + i]) * static_cast<float>(updated);
  }
  o[bh * dim + j] = ToElement(static_cast<float>(acc));
}

#else  // the tuned kernel

#if !defined(BLOCK_V) || !defined(VEC) || !defined(THREADS) || !defined(UNROLL)
#error "define BLOCK_V, VEC, THREADS and UNROLL"
#endif

#if VEC != 1 && VEC != 2 && VEC != 4
#error "VEC must be 1, 2 or 4"
#endif
#if BLOCK_V % VEC != 0
#error "BLOCK_V must be a multiple of VEC"
#endif
#if THREADS < 32 || THREADS > 1024 || THREADS % 32 != 0
#error "THREADS must be a multiple of 32 in [32, 1024]"
#endif
#if THREADS % (BLOCK_V / VEC) != 0
#error "THREADS must be a multiple of BLOCK_V / VEC"
#endif
#if UNROLL < 1
#error "UNROLL must be at least 1"
#endif
#if ((BLOCK_V / VEC) & (BLOCK_V / VEC - 1)) != 0
#error "BLOCK_V / VEC must be a power of two (the o reduction uses xor shuffles)"
#endif

constexpr int kColThreads = BLOCK_V / VEC;         // threads across one tile row
constexpr int kRowGroups = THREADS / kColThreads;  // threads down one tile column
// Partial sums of o left after the in-warp shuffle: one per warp when a warp
// holds several row groups, else one per row group.
constexpr bool kShuffle = kColThreads < 32 && kRowGroups > 1;
constexpr int kPartials = kShuffle ? THREADS / 32 : kRowGroups;

template <int N>
struct FloatVec;
template <>
struct FloatVec<1> {
  float v[1];
  __device__ __forceinline__ static FloatVec Load(const float* p) { return {{*p}}; }
  __device__ __forceinline__ void Store(float* p) const { *p = v[0]; }
};
template <>
struct FloatVec<2> {
  float v[2];
  __device__ __forceinline__ static FloatVec Load(const float* p) {
    const float2 t = *reinterpret_cast<const float2*>(p);
    return {{t.x, t.y}};
  }
  __device__ __forceinline__ void Store(float* p) const {
    *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
  }
};
template <>
struct FloatVec<4> {
  float v[4];
  __device__ __forceinline__ static FloatVec Load(const float* p) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    return {{t.x, t.y, t.z, t.w}};
  }
  __device__ __forceinline__ void Store(float* p) const {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  }
};

extern "C" __global__ void __launch_bounds__(THREADS)
    gla_decode(float* __restrict__ state, const gla_t* __restrict__ q, const gla_t* __restrict__ k,
               const gla_t* __restrict__ v, const float* __restrict__ g, gla_t* __restrict__ o,
               float scale, int dim) {
  extern __shared__ float staged[];  // [3][dim]: scale * q, k, exp(g)
  float* const q_s = staged;
  float* const k_s = staged + dim;
  float* const decay_s = staged + 2 * dim;
  __shared__ float partial[kPartials > 1 ? kPartials * BLOCK_V : 1];

  const long long bh = blockIdx.y;
  const int tid = threadIdx.x;
  for (int i = tid; i < dim; i += THREADS) {
    q_s[i] = scale * ToFloat(q[bh * dim + i]);
    k_s[i] = ToFloat(k[bh * dim + i]);
    decay_s[i] = expf(g[bh * dim + i]);
  }

  const int col_thread = tid % kColThreads;
  const int row_group = tid / kColThreads;
  const int col = blockIdx.x * BLOCK_V + col_thread * VEC;

  float v_r[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) v_r[e] = ToFloat(v[bh * dim + col + e]);
  __syncthreads();

  float acc[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) acc[e] = 0.0f;

  // Row groups interleave (row_group, row_group + kRowGroups, ...), so a warp
  // that spans several groups reads several whole tile rows per instruction.
  float* const tile = state + bh * dim * dim + col;
  constexpr int kStep = kRowGroups * UNROLL;
  for (int base = row_group; base < dim; base += kStep) {
    FloatVec<VEC> s[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      s[u] = FloatVec<VEC>::Load(tile + static_cast<long long>(base + u * kRowGroups) * dim);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int i = base + u * kRowGroups;
      const float decay = decay_s[i], key = k_s[i], query = q_s[i];
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        s[u].v[e] = fmaf(decay, s[u].v[e], key * v_r[e]);
        acc[e] = fmaf(query, s[u].v[e], acc[e]);
      }
      s[u].Store(tile + static_cast<long long>(i) * dim);
    }
  }

  if constexpr (kShuffle) {
    // Lanes that share col_thread differ only in the bits at and above
    // log2(kColThreads).
#pragma unroll
    for (int offset = kColThreads; offset < 32; offset *= 2) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], offset);
    }
  }

  if constexpr (kPartials == 1) {
    if (kShuffle ? (tid % 32) < kColThreads : true) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) o[bh * dim + col + e] = ToElement(acc[e]);
    }
  } else {
    const int slot = kShuffle ? tid / 32 : row_group;
    if (kShuffle ? (tid % 32) < kColThreads : true) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) partial[slot * BLOCK_V + col_thread * VEC + e] = acc[e];
    }
    __syncthreads();
    for (int c = tid; c < BLOCK_V; c += THREADS) {
      float sum = 0.0f;
#pragma unroll 4
      for (int p = 0; p < kPartials; ++p) sum += partial[p * BLOCK_V + c];
      o[bh * dim + blockIdx.x * BLOCK_V + c] = ToElement(sum);
    }
  }
}

#endif  // AUTOTUNE_REFERENCE
