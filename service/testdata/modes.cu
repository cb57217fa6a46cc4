// y = 2 x over `count` floats; the tests' stand-in worker never runs it, the
// compile pool compiles it for real.
#ifndef AUTOTUNE_REFERENCE
extern "C" __global__ void twice(const float* x, float* y, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) y[i] = 2.0f * x[i] + 0.0f * MODE;
}
#endif

extern "C" __global__ void twice_reference(const float* x, float* y, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) y[i] = 2.0f * x[i];
}
