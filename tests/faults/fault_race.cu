// fault_race: y[i] = 2 * x[i ^ 31] (each aligned group of 32 reversed; an
// element whose partner lies past n keeps its own value), staged through
// shared memory by producer warps and read back by consumer warps, fp32 or
// fp16 (fp32 arithmetic).
//
// Used only by tests: SYNC=0 drops the barrier between the producers' stores
// to shared memory and the consumers' loads, the shape of a warp-specialized
// kernel whose consumer reads a shared buffer before waiting for the
// producer's barrier. Without it the result is wrong on every run, not just
// now and then: the producers wait about 30 us before they store (a clock
// spin), the consumers load at once, so they read whatever an earlier block
// or kernel left in shared memory.
//   TILE  elements per block (a multiple of 32); the block has 2 * TILE
//         threads: warps [0, TILE/32) produce, the others consume, so every
//         slot a consumer reads was written by another warp
//   SYNC  1: __syncthreads() between the stores and the loads (correct);
//         0: no barrier (a data race)
#if defined(AUTOTUNE_DTYPE_FP16)
#include <cuda_fp16.h>
#elif !defined(AUTOTUNE_DTYPE_FP32)
#error "fault_race is fp32 or fp16"
#endif

typedef AUTOTUNE_DTYPE race_t;

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ race_t ToElement(float v) { return static_cast<race_t>(v); }
#if defined(AUTOTUNE_DTYPE_FP16)
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
#endif

#ifdef AUTOTUNE_REFERENCE

extern "C" __global__ void fault_race_reference(const race_t* x, race_t* y, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const long long partner = i ^ 31;
  y[i] = ToElement(2.0f * ToFloat(x[partner < n ? partner : i]));
}

#else

#if !defined(TILE) || !defined(SYNC)
#error "define TILE and SYNC"
#endif
#if TILE % 32 != 0
#error "TILE must be a multiple of 32"
#endif

// About 30 us at the H200's clocks: far longer than the consumers need to
// reach their loads.
constexpr long long kProducerDelayCycles = 50000;

extern "C" __global__ void __launch_bounds__(2 * TILE)
    fault_race(const race_t* __restrict__ x, race_t* __restrict__ y, long long n) {
  __shared__ float stage[TILE];
  const long long base = static_cast<long long>(blockIdx.x) * TILE;
  const int t = threadIdx.x;
  if (t < TILE) {
    const long long start = clock64();
    while (clock64() - start < kProducerDelayCycles) __nanosleep(500);
    const long long i = base + t;
    stage[t] = i < n ? ToFloat(x[i]) : 0.0f;
  }
#if SYNC
  __syncthreads();
#endif
  if (t >= TILE) {
    const int k = t - TILE;
    const long long i = base + k;
    if (i >= n) return;
    // Groups of 32 are aligned and TILE is a multiple of 32, so the partner
    // is in this block's tile.
    const long long partner = i ^ 31;
    const float v = stage[partner < n ? partner - base : k];
    y[i] = ToElement(2.0f * v);
  }
}

#endif  // AUTOTUNE_REFERENCE
