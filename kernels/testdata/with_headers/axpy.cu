// y = alpha * x + y. Each block covers BLOCK * ELEMS consecutive elements;
// a thread handles ELEMS of them, BLOCK apart, so loads stay coalesced.
#include <cuda_fp16.h>

#include "detail/fma.cuh"

#ifndef AUTOTUNE_REFERENCE
extern "C" __global__ void __launch_bounds__(BLOCK)
    axpy(const AUTOTUNE_DTYPE* __restrict__ x, AUTOTUNE_DTYPE* __restrict__ y, float alpha,
         long long n) {
  const long long base = static_cast<long long>(blockIdx.x) * (BLOCK * ELEMS) + threadIdx.x;
#pragma unroll
  for (int i = 0; i < ELEMS; ++i) {
    const long long j = base + static_cast<long long>(i) * BLOCK;
    if (j < n) {
      y[j] = static_cast<AUTOTUNE_DTYPE>(
          axpy_fma(alpha, static_cast<float>(x[j]), static_cast<float>(y[j])));
    }
  }
}
#endif

extern "C" __global__ void axpy_reference(const AUTOTUNE_DTYPE* x, AUTOTUNE_DTYPE* y, float alpha,
                                          long long n) {
  const long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < n) {
    y[j] = static_cast<AUTOTUNE_DTYPE>(
        axpy_fma(alpha, static_cast<float>(x[j]), static_cast<float>(y[j])));
  }
}
