// vector_scale: y[i] = alpha * x[i] for i in [0, count), count = batch * n.
//
// Compile-time parameters (all required, given as -D defines):
//   BLOCK             threads per block (the launch block size)
//   ELEMS_PER_THREAD  elements each thread handles; a block covers
//                     BLOCK * ELEMS_PER_THREAD consecutive elements
//   AUTOTUNE_DTYPE         float, __half or __nv_bfloat16
//
// Launch: grid = ceil(count / (BLOCK * ELEMS_PER_THREAD)), block = BLOCK.
// Arithmetic is done in fp32 and rounded once to AUTOTUNE_DTYPE, so the reference
// kernel below gives bit-identical results for every config.
//
//   nvcc -cubin -arch=sm_90 -DBLOCK=256 -DELEMS_PER_THREAD=2 \
//        -DAUTOTUNE_DTYPE=__nv_bfloat16 -o vector_scale.cubin vector_scale.cu
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef AUTOTUNE_DTYPE
#error "define AUTOTUNE_DTYPE (float, __half or __nv_bfloat16)"
#endif

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// The reference the tuner validates every variant against: one element per
// thread, any 1-D launch that covers `count`.
extern "C" __global__ void vector_scale_reference(const AUTOTUNE_DTYPE* __restrict__ x,
                                                  AUTOTUNE_DTYPE* __restrict__ y, float alpha,
                                                  long long count) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) y[i] = FromFloat<AUTOTUNE_DTYPE>(alpha * ToFloat(x[i]));
}

#if defined(BLOCK) && defined(ELEMS_PER_THREAD)

#if BLOCK < 32 || BLOCK > 1024 || (BLOCK % 32) != 0
#error "BLOCK must be a multiple of 32 in [32, 1024]"
#endif
#if ELEMS_PER_THREAD < 1
#error "ELEMS_PER_THREAD must be at least 1"
#endif

// Each thread strides by BLOCK inside its block's tile, so neighbouring
// threads touch neighbouring elements on every iteration (coalesced).
extern "C" __global__ void __launch_bounds__(BLOCK)
    vector_scale(const AUTOTUNE_DTYPE* __restrict__ x, AUTOTUNE_DTYPE* __restrict__ y, float alpha,
                 long long count) {
  const long long tile = static_cast<long long>(blockIdx.x) * (BLOCK * ELEMS_PER_THREAD);
#pragma unroll
  for (int k = 0; k < ELEMS_PER_THREAD; ++k) {
    const long long i = tile + static_cast<long long>(k) * BLOCK + threadIdx.x;
    if (i < count) y[i] = FromFloat<AUTOTUNE_DTYPE>(alpha * ToFloat(x[i]));
  }
}

#endif  // BLOCK && ELEMS_PER_THREAD
