#include "tile.cuh"
#include <cuda_fp16.h>
// x \
/*
#include "detail/mma.cuh"
// */
extern "C" __global__ void k(float* x) { x[0] = TILE; }
