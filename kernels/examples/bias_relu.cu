// bias_relu: y[r, c] = max(x[r, c] + b[c], 0) over a [rows, cols] matrix,
// the epilogue of a linear layer. x, b and y are AUTOTUNE_DTYPE; the sum is
// taken in fp32 and rounded once.
//
// Arguments, in the descriptor's order: the buffers x, b, y, then the
// scalars n (rows * cols) and width (cols).
//
// Tunables, passed as -D macros (the reference is compiled without them):
//   BLOCK  threads per block
//   VEC    elements per vector access
//   ITEMS  vector accesses per thread
// Launch: grid = ceil(rows * cols / (BLOCK * VEC * ITEMS)), block = BLOCK.
#if defined(AUTOTUNE_DTYPE_FP16)
#include <cuda_fp16.h>
#elif defined(AUTOTUNE_DTYPE_BF16)
#include <cuda_bf16.h>
#endif

typedef AUTOTUNE_DTYPE elem_t;

#ifdef AUTOTUNE_REFERENCE

// One thread per element. Launch: grid = ceil(rows * cols / 256), block = 256.
extern "C" __global__ void bias_relu_reference(const elem_t* x, const elem_t* b, elem_t* y,
                                               long long n, int width) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = static_cast<float>(x[i]) + static_cast<float>(b[i % width]);
  y[i] = static_cast<elem_t>(v > 0.0f ? v : 0.0f);
}

#else  // the tuned kernel

// VEC elements moved as one access. The descriptor keeps VEC * dtype_bytes
// at most 16 and cols a multiple of VEC, so a vector never straddles two
// rows and every access is aligned.
struct alignas(VEC * sizeof(elem_t)) Vec {
  elem_t e[VEC];
};

extern "C" __global__ void __launch_bounds__(BLOCK)
    bias_relu(const elem_t* __restrict__ x, const elem_t* __restrict__ b, elem_t* __restrict__ y,
              long long n, int width) {
  const Vec* xv = reinterpret_cast<const Vec*>(x);
  Vec* yv = reinterpret_cast<Vec*>(y);
  const long long vectors = n / VEC;
  const long long first = static_cast<long long>(blockIdx.x) * BLOCK * ITEMS + threadIdx.x;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const long long i = first + static_cast<long long>(k) * BLOCK;
    if (i >= vectors) break;
    const Vec in = xv[i];
    const Vec bias = *reinterpret_cast<const Vec*>(b + (i * VEC) % width);
    Vec out;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const float v = static_cast<float>(in.e[e]) + static_cast<float>(bias.e[e]);
      out.e[e] = static_cast<elem_t>(v > 0.0f ? v : 0.0f);
    }
    yv[i] = out;
  }
}

#endif  // AUTOTUNE_REFERENCE
