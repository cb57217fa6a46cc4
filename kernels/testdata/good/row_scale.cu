// out[r][c] = in[r][c] * scale[r] with TILE_X x TILE_Y thread blocks.
template <int TILE_X, int TILE_Y>
__global__ void __launch_bounds__(TILE_X* TILE_Y)
    row_scale(const AUTOTUNE_DTYPE* in, const AUTOTUNE_DTYPE* scale, AUTOTUNE_DTYPE* out,
              int num_rows, int num_cols) {
  const int c = blockIdx.x * TILE_X + threadIdx.x;
  const int r = blockIdx.y * TILE_Y + threadIdx.y;
  if (r < num_rows && c < num_cols) {
    const long long i = static_cast<long long>(r) * num_cols + c;
    out[i] = in[i] * scale[r];
  }
}

extern "C" __global__ void row_scale_reference(const AUTOTUNE_DTYPE* in,
                                               const AUTOTUNE_DTYPE* scale, AUTOTUNE_DTYPE* out,
                                               int num_rows, int num_cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r < num_rows && c < num_cols) {
    const long long i = static_cast<long long>(r) * num_cols + c;
    out[i] = in[i] * scale[r];
  }
}
