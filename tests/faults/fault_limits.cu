// fault_limits: y = 2 * x + 1, elementwise, fp32, in blocks of 256 threads;
// LIMIT picks a variant the device cannot launch as the family describes it.
//
// Used only by tests: each LIMIT > 0 passes the search space's checks
// (256 threads, at most 227 KiB of dynamic shared memory) and is only found
// out on the device, from the loaded function's attributes, where it must
// end UNSUPPORTED before any launch.
//   LIMIT  0: the plain kernel (correct);
//          1: __launch_bounds__(64), so the function takes at most 64
//             threads per block (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
//             launched with 256;
//          2: 40 KiB of static shared memory plus the 200 KiB of dynamic
//             shared memory the descriptor asks for: 240 KiB in all, above
//             the 227 KiB a block may opt in to on sm_90. The data goes
//             through both arrays, so neither can be optimized away.

#ifndef AUTOTUNE_DTYPE_FP32
#error "fault_limits is fp32 only"
#endif

#ifdef AUTOTUNE_REFERENCE

extern "C" __global__ void fault_limits_reference(const float* x, float* y, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}

#else

#if !defined(LIMIT)
#error "define LIMIT"
#endif

constexpr int kBlock = 256;
constexpr int kMaxThreads = LIMIT == 1 ? 64 : kBlock;

extern "C" __global__ void __launch_bounds__(kMaxThreads)
    fault_limits(const float* __restrict__ x, float* __restrict__ y, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * kBlock + threadIdx.x;
  float value = i < n ? 2.0f * x[i] + 1.0f : 0.0f;
#if LIMIT == 2
  constexpr int kStaticFloats = 40 * 1024 / 4;
  __shared__ float fixed[kStaticFloats];
  extern __shared__ float dynamic[];
  // Each thread copies its value through a slot of each array, spread over
  // the whole of the static one.
  const int slot = threadIdx.x * (kStaticFloats / kBlock);
  fixed[slot] = value;
  __syncthreads();
  dynamic[slot] = fixed[slot];
  __syncthreads();
  value = dynamic[slot];
#endif
  if (i < n) y[i] = value;
}

#endif  // AUTOTUNE_REFERENCE
