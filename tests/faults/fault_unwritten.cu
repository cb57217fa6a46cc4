// fault_unwritten: y = 2 * x + 1, elementwise, fp32 or fp16 (fp32
// arithmetic); SKIP leaves part of y unwritten.
//
// Used only by tests: the values a variant does write are right, so only
// poisoned outputs (validation fills y with NaN before each launch) reveal
// the elements it leaves alone.
//   BLOCK  threads per block, one element each
//   SKIP   0: every element is written; 1: the last block writes nothing;
//          2: every 1000th element (index 999, 1999, ...) is left alone

#if defined(AUTOTUNE_DTYPE_FP16)
#include <cuda_fp16.h>
#elif !defined(AUTOTUNE_DTYPE_FP32)
#error "fault_unwritten is fp32 or fp16"
#endif

typedef AUTOTUNE_DTYPE unwritten_t;

__device__ __forceinline__ float ToFloat(float v) { return v; }
#if defined(AUTOTUNE_DTYPE_FP16)
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
#endif

#ifdef AUTOTUNE_REFERENCE

extern "C" __global__ void fault_unwritten_reference(const unwritten_t* x, unwritten_t* y,
                                                     long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = static_cast<unwritten_t>(2.0f * ToFloat(x[i]) + 1.0f);
}

#else

#if !defined(BLOCK) || !defined(SKIP)
#error "define BLOCK and SKIP"
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
    fault_unwritten(const unwritten_t* __restrict__ x, unwritten_t* __restrict__ y, long long n) {
#if SKIP == 1
  if (blockIdx.x == gridDim.x - 1) return;
#endif
  const long long i = static_cast<long long>(blockIdx.x) * BLOCK + threadIdx.x;
  if (i >= n) return;
#if SKIP == 2
  if (i % 1000 == 999) return;
#endif
  y[i] = static_cast<unwritten_t>(2.0f * ToFloat(x[i]) + 1.0f);
}

#endif  // AUTOTUNE_REFERENCE
