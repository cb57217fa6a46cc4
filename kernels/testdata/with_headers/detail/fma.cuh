// alpha * x + y in fp32, shipped with the family and given to NVRTC in memory.
#pragma once
__device__ inline float axpy_fma(float alpha, float x, float y) { return alpha * x + y; }
