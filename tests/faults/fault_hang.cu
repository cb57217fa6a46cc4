// fault_hang: y = 2 * x + 1, elementwise, fp32; HANG=1 never returns.
//
// Used only by tests: a variant that spins until the launch deadline, so the
// profile worker must report TIMEOUT and be replaced.
//   BLOCK  threads per block, one element each
//   HANG   0: the plain kernel; 1: every thread first waits for an input
//          above 2, which the family's fill (uniform in [-1, 1)) never
//          produces. The wait reads memory through a volatile pointer, so
//          the compiler must load it on every iteration and cannot prove the
//          loop infinite and drop it; a NaN would keep it waiting as well.

#ifndef AUTOTUNE_DTYPE_FP32
#error "fault_hang is fp32 only"
#endif

#ifdef AUTOTUNE_REFERENCE

extern "C" __global__ void fault_hang_reference(const float* x, float* y, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}

#else

#if !defined(BLOCK) || !defined(HANG)
#error "define BLOCK and HANG"
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
    fault_hang(const float* __restrict__ x, float* __restrict__ y, long long n) {
#if HANG
  const volatile float* probe = x;
  while (!(probe[0] > 2.0f)) __nanosleep(1000);
#endif
  const long long i = static_cast<long long>(blockIdx.x) * BLOCK + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}

#endif  // AUTOTUNE_REFERENCE
