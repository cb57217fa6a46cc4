// fault_oob: y = 2 * x + 1, elementwise, fp32; OOB=1 writes far outside y.
//
// Used only by tests: a variant whose stores hit addresses no allocation can
// hold, so the launch ends in a sticky illegal-address error and the profile
// worker must report FAULT and be replaced.
//   BLOCK  threads per block, one element each
//   OOB    0: the plain kernel; 1: each thread also stores 128 TiB + i GiB
//          past y (element i * 2^28 beyond 2^45). That is above the 47-bit
//          user address space of the host, so no mapping of the process
//          (with HMM the device may reach host memory) can be hit, and the
//          higher threads go past any device virtual address; nothing near y
//          (other buffers of the task) is touched.

#ifndef AUTOTUNE_DTYPE_FP32
#error "fault_oob is fp32 only"
#endif

#ifdef AUTOTUNE_REFERENCE

extern "C" __global__ void fault_oob_reference(const float* x, float* y, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}

#else

#if !defined(BLOCK) || !defined(OOB)
#error "define BLOCK and OOB"
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
    fault_oob(const float* __restrict__ x, float* __restrict__ y, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * BLOCK + threadIdx.x;
  if (i >= n) return;
  const float value = 2.0f * x[i] + 1.0f;
#if OOB
  y[(1LL << 45) + i * (1LL << 28)] = value;
#endif
  y[i] = value;
}

#endif  // AUTOTUNE_REFERENCE
