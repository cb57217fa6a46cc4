// gemm_bf16: C[M, N] = alpha * A[M, K] . B[N, K]^T, the nn.Linear layout: A
// (activations) and B (weights) row-major with K contiguous, C row-major.
// Inputs and output bf16, products accumulated in fp32, C rounded once.
//
// Arguments: a, b, c, workspace, the tensor maps of a, b and c (tuned
// kernel only: the descriptor's tensor_maps, [BM, 64], [BN, 64] and [BM, 64]
// boxes in the 128-byte swizzle, built by whoever launches), then the
// scalars alpha, m, n, k. The sizes are run-time values, so one binary serves every M of a
// bucket; only the tunables are compile-time.
//
// Macros: bf16 only (AUTOTUNE_DTYPE_BF16); AUTOTUNE_REFERENCE selects the
// reference kernel, else the tuned kernel needs its parameters:
//   WGMMA       the instruction path: 0 = mma.sync (sm_80 and later), 1 =
//               wgmma.mma_async (sm_90a only), every warp copying and
//               computing; 2 = wgmma with one more warpgroup that only
//               copies (warp-specialized: copies and products meet at
//               mbarriers, no block-wide barrier per K step); 3 = the same
//               with one thread of that warpgroup copying whole tiles with
//               the TMA (cp.async.bulk.tensor over the tensor maps), and C
//               staged in shared memory and stored by the TMA (SPLIT_K = 1)
//   PERSISTENT  WGMMA = 3, SPLIT_K = 1 only: 1 = a grid of at most one block
//               per SM (the launch's `sm_count`) whose blocks walk the tiles
//               blockIdx.x, + gridDim.x, ...: the TMA thread fetches the next
//               tile's stages while the computing warpgroups store the last
//               one's C from a staging area of its own; 0 = a block per tile
//   CLUSTER     WGMMA = 3, SPLIT_K = 1 only: 2 = blocks in clusters of two
//               (__cluster_dims__) that compute two tiles one above the
//               other (the same columns of C, so the same tile of B): each
//               block's TMA thread loads half of that B tile and multicasts
//               it into both blocks' shared memory, so B is read from L2
//               once for two tiles; a stage is freed when the computing
//               warpgroups of both blocks have released it. 1 = no cluster
//   BM, BN, BK  the block's tile of C (BM x BN) and the K step of one stage
//   WM, WN      mma.sync: warps along M and N; each warp owns a (BM/WM) x
//               (BN/WN) tile of C in m16n8 accumulator fragments (multiples
//               of 16 both ways). wgmma: WM warpgroups along M (WN = 1),
//               each owning (BM/WM) x BN in m64 slabs (BK = 64, BN one of
//               64, 128, 192 and 256)
//   STAGES      shared-memory stages of the cp.async ring (STAGES - 1 K steps
//               in flight while one is computed)
//   GROUP_M     block tiles walk GROUP_M tile rows down before moving right,
//               so neighbouring blocks share A and B tiles in L2
//   SPLIT_K     blocks that share one C tile, each over K / SPLIT_K; the last
//               of them to finish adds the fp32 partials (serial split-K)
// The descriptor's constraints guarantee K % (BK * SPLIT_K) == 0 (no K
// edge) and N % BN == 0 except on the TMA path without a split (WGMMA = 3,
// SPLIT_K = 1), where the TMA reads the rows of B past N as zeros and clips
// the store of C at N; rows of A past M are zero-filled and rows of C past M
// are not written.
//
// Tensor cores through inline PTX, no library: cp.async 16-byte copies
// global -> shared into XOR-swizzled tiles (no bank conflicts), then either
// ldmatrix.x4 fragments and mma.sync m16n8k16 bf16 -> fp32 per warp, or
// wgmma m64nBNk16 per warpgroup straight from shared memory (with BK = 64
// the swizzle is wgmma's 128-byte mode). B is N x K with K contiguous,
// which is exactly both instructions' K-major B: no transpose anywhere.
//
// The workspace (a SCRATCH buffer, zeroed when allocated) holds
//   [0, CounterWords)   one arrival counter per tile, for the smallest tile
//                       any config uses (16 x 32), so the counters sit at the
//                       same place for every config that shares the buffer
//   then                SPLIT_K fp32 partial tiles per tile of C
// A counter counts the arrivals of its tile's SPLIT_K blocks with
// atomicInc's wrap-around, so the last arrival puts it back to 0 in the same
// atomic: the next launch (the timing loop replays it on the same buffer),
// or a config with another SPLIT_K, finds every counter at 0.
//
// Launch: grid = (ceil(M / BM) * ceil(N / BN), SPLIT_K), or for PERSISTENT
// = 1 (min(that, sm_count), 1); with CLUSTER = 2 the tile rows are counted
// in pairs, ceil(ceil(M / BM) / 2) * 2 (a block of a pair whose tile lies
// wholly past M still loads its half of B and stores nothing), and a
// persistent grid is 2 * min(pairs of tiles, floor(sm_count / 2)); block = 32 * WM * WN (mma.sync),
// 128 * WM (WGMMA = 1) or 128 * (WM + 1) (WGMMA = 2, 3); dynamic shared memory = STAGES * (BM + BN)
// * BK * 2 bytes, plus 1024 for wgmma (its tiles are 1024-aligned), plus BM * BN * 2 for PERSISTENT
// = 1 (the staging of C). A block's result never depends on the grid: PERSISTENT = 1 is correct for
// any grid of at least one block.
#include <cuda_bf16.h>

#if !defined(AUTOTUNE_DTYPE_BF16)
#error "gemm_bf16 computes in bf16 only (AUTOTUNE_DTYPE_BF16)"
#endif

typedef __nv_bfloat16 bf16;

#ifdef AUTOTUNE_REFERENCE

// The reference: one thread per element of C, the K products accumulated in
// fp32 in plain order, alpha applied and rounded to bf16 once. It never
// touches the workspace. A warp covers 8 columns x 4 rows of C, so its
// loads at one k touch 12 rows of A and B, which stay in L1 for the next
// ones. Launch: grid = (ceil(N / 8), ceil(M / 32)), block = (8, 32).
extern "C" __global__ void __launch_bounds__(256)
    gemm_bf16_reference(const bf16* a, const bf16* b, bf16* c, float* workspace, float alpha, int m,
                        int n, int k) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= m || col >= n) return;
  const bf16* a_row = a + static_cast<long long>(row) * k;
  const bf16* b_row = b + static_cast<long long>(col) * k;
  float acc = 0.0f;
  for (int i = 0; i < k; ++i) {
    acc = fmaf(__bfloat162float(a_row[i]), __bfloat162float(b_row[i]), acc);
  }
  c[static_cast<long long>(row) * n + col] = __float2bfloat16_rn(alpha * acc);
}

#else  // the tuned kernel

#if !defined(BM) || !defined(BN) || !defined(BK) || !defined(WM) || !defined(WN) ||  \
    !defined(STAGES) || !defined(GROUP_M) || !defined(SPLIT_K) || !defined(WGMMA) || \
    !defined(PERSISTENT) || !defined(CLUSTER)
#error "define BM, BN, BK, WM, WN, STAGES, GROUP_M, SPLIT_K, WGMMA, PERSISTENT and CLUSTER"
#endif
#if WGMMA && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the wgmma paths (WGMMA=1, 2, 3) run on sm_90a only: compile with -arch=sm_90a"
#endif

// A tensor map (CUtensorMap) as a kernel parameter: 128 opaque bytes the
// driver encoded, read by the TMA from the parameter space.
struct __align__(64) TensorMap {
  unsigned char bytes[128];
};

// mma.sync: WM x WN warps, each owning a kWarpM x kWarpN tile of C in m16n8
// fragments. wgmma: WM warpgroups (WN = 1), each owning kWarpM rows of the
// tile in m64 slabs of BN columns; warp w of a warpgroup holds rows 16 w to
// 16 w + 15 of each slab, in the same m16n8 fragment layout. WGMMA = 2 and 3
// put a copying warpgroup (threads 0-127) before the WM computing ones.
constexpr int kComputeThreads = WGMMA ? 128 * WM : 32 * WM * WN;
constexpr int kFirstComputeThread = WGMMA >= 2 ? 128 : 0;
constexpr int kThreads = kFirstComputeThread + kComputeThreads;
constexpr int kLoaderThreads = WGMMA == 2 ? 128 : kThreads;  // threads that issue the copies
constexpr int kWarpM = BM / WM;
constexpr int kWarpN = BN / WN;
constexpr int kFragRows = WGMMA ? 64 : 16;  // rows from one fragment row to the next
constexpr int kFragM = kWarpM / kFragRows;
constexpr int kFragN = kWarpN / 8;
constexpr int kChunksPerRow = BK / 8;  // 16-byte chunks in a tile row of BK bf16
// Rows of a tile that share one 128-byte line of the 32 shared-memory banks.
constexpr int kRowsPerLine = 8 / kChunksPerRow;
constexpr int kStageBytesA = BM * BK * 2;
constexpr int kStageBytesB = BN * BK * 2;

static_assert(BK == 32 || BK == 64, "BK must be 32 or 64 (tile rows of 64 or 128 bytes)");
#if WGMMA
static_assert(WGMMA >= 1 && WGMMA <= 3, "WGMMA is 0, 1, 2 or 3");
static_assert(WN == 1 && BK == 64 && BM % (64 * WM) == 0,
              "wgmma: WN = 1, BK = 64 (the 128-byte swizzle), a warpgroup's rows a multiple of 64");
static_assert(WGMMA >= 2 || STAGES >= 3,
              "WGMMA = 1 needs a stage beyond the one the last wgmma group may still read");
static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256,
              "wgmma: BN is one of 64, 128, 192 and 256");
#else
static_assert(BM % (16 * WM) == 0 && BN % (16 * WN) == 0,
              "a warp's tile must be a multiple of 16 along M and N (ldmatrix.x4 loads 16 rows)");
#endif
// The counters are laid out for 16 x 32 tiles (CounterWords); a larger tile
// uses a prefix of them.
static_assert(BM >= 16 && BN >= 32, "the smallest tile the counters allow is 16 x 32");
static_assert(STAGES >= 2, "the ring needs at least two stages");
static_assert(GROUP_M >= 1 && SPLIT_K >= 1, "GROUP_M and SPLIT_K must be at least 1");
static_assert(PERSISTENT == 0 || (PERSISTENT == 1 && WGMMA == 3 && SPLIT_K == 1),
              "PERSISTENT = 1 is a schedule of the TMA path without a split (WGMMA = 3, "
              "SPLIT_K = 1)");
// Each block of a pair loads BN / 2 rows of the B tile: whole 8-row atoms
// of the 128-byte swizzle, so either half lands as the whole box would.
static_assert(CLUSTER == 1 || (CLUSTER == 2 && WGMMA == 3 && SPLIT_K == 1 && BN / 2 % 8 == 0),
              "CLUSTER = 2 is a schedule of the TMA path without a split (WGMMA = 3, "
              "SPLIT_K = 1)");

// One counter per 16 x 32 tile of C, rounded up to 4 words so that the fp32
// partial tiles after them are 16-byte aligned. The descriptor sizes the
// workspace with the same expression.
__device__ __forceinline__ long long CounterWords(int m, int n) {
  const long long tiles = static_cast<long long>((m + 15) / 16) * ((n + 31) / 32);
  return (tiles + 3) / 4 * 4;
}

// The XOR swizzle of a stage: 16-byte chunk `chunk` of tile row `row` is
// stored at chunk position chunk ^ Swizzle(row) of that row. The 8 rows an
// ldmatrix 8x8 matrix reads (8 consecutive rows, one logical chunk) then
// land on 8 different 16-byte bank groups, and so do the rows of a cp.async
// store. Two properties keep the per-thread arithmetic small:
//   Swizzle(16 q + r) == Swizzle(r): a fragment's 16-row offset is a
//     constant, so a lane's ldmatrix offsets depend only on the k16 step;
//   Swizzle(r + i R) == Swizzle(r) ^ Swizzle(i R) for 0 <= r < R and R =
//     kLoaderThreads / kChunksPerRow (a multiple of 4 rows; no carry reaches the
//     swizzled bits), so a thread's i-th copy differs from its first by a
//     compile-time XOR.
__device__ __forceinline__ constexpr int Swizzle(int row) {
  return (row / kRowsPerLine) % kChunksPerRow;
}

// 16 bytes global -> shared, bypassing L1; src_bytes = 0 zero-fills the
// destination without reading (the source must still be a valid address).
__device__ __forceinline__ void CpAsync16(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}

__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `kPending` of this thread's committed groups are in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8x8 b16 matrices; lanes 8j..8j+7 give the row addresses of matrix j,
// and r[j] receives each lane's pair of matrix j (row lane/4, columns
// 2*(lane%4) and 2*(lane%4)+1), which is mma's fragment layout.
__device__ __forceinline__ void LdMatrixX4(unsigned (&r)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// acc += A (16x16, row) . B (16x8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void Mma(float (&acc)[4], const unsigned (&a)[4],
                                    const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#if WGMMA
// wgmma.mma_async (sm_90a): a warpgroup's m64nBNk16 product from two shared-
// memory descriptors, accumulated into d (BN / 2 registers a thread, in
// m16n8 fragment order: d[j] is fragment j of the thread's warp).
#define AT_ACC4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define AT_ACC32(j)                                                                           \
  AT_ACC4(j), AT_ACC4(j + 1), AT_ACC4(j + 2), AT_ACC4(j + 3), AT_ACC4(j + 4), AT_ACC4(j + 5), \
      AT_ACC4(j + 6), AT_ACC4(j + 7)
#if BN == 64
__device__ __forceinline__ void Wgmma(float (&d)[8][4], unsigned long long a,
                                      unsigned long long b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : AT_ACC32(0)
      : "l"(a), "l"(b), "r"(1));
}
#elif BN == 128
__device__ __forceinline__ void Wgmma(float (&d)[16][4], unsigned long long a,
                                      unsigned long long b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : AT_ACC32(0), AT_ACC32(8)
      : "l"(a), "l"(b), "r"(1));
}
#elif BN == 192
__device__ __forceinline__ void Wgmma(float (&d)[24][4], unsigned long long a,
                                      unsigned long long b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
      "}, %96, %97, p, 1, 1, 0, 0;\n}\n"
      : AT_ACC32(0), AT_ACC32(8), AT_ACC32(16)
      : "l"(a), "l"(b), "r"(1));
}
#elif BN == 256
__device__ __forceinline__ void Wgmma(float (&d)[32][4], unsigned long long a,
                                      unsigned long long b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
      "%127"
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : AT_ACC32(0), AT_ACC32(8), AT_ACC32(16), AT_ACC32(24)
      : "l"(a), "l"(b), "r"(1));
}
#endif
#undef AT_ACC32
#undef AT_ACC4

// The descriptor of a K-major operand tile in the 128-byte swizzle that
// TileLoader writes for BK = 64 (row r of 128 bytes at r * 128, its 16-byte
// chunk c at c ^ (r % 8)): start address / 16 in bits 0-13, leading byte
// offset 16 (unused by this swizzle) in bits 16-29, 1024 bytes from one
// group of 8 rows to the next in bits 32-45, swizzle mode 1 (128 bytes) in
// bits 62-63. The hardware swizzles the address it computes, so the k16
// step kk of a 1024-aligned tile starts kk * 32 bytes in.
__device__ __forceinline__ unsigned long long SmemDescriptor(unsigned address) {
  return static_cast<unsigned long long>((address & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) |
         (1ull << 62);
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most `kPending` of the warpgroup's wgmma groups are in flight.
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Orders this thread's shared-memory writes (cp.async, landed) before
// reads of the async proxy, which is how wgmma reads its operands.
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving accesses to the accumulators across the
// asynchronous wgmma that owns them.
__device__ __forceinline__ void FenceAccumulators(float (&acc)[kFragM][kFragN][4]) {
#pragma unroll
  for (int mi = 0; mi < kFragM; ++mi) {
#pragma unroll
    for (int ni = 0; ni < kFragN; ++ni) {
#pragma unroll
      for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(acc[mi][ni][e])::"memory");
    }
  }
}

// The warpgroup's wgmmas over one stage (stage_a: its own kWarpM rows),
// committed as one group; returns with at most one group (this one) in
// flight, so the stage read one step before is free again.
__device__ __forceinline__ void WgmmaStage(unsigned stage_a, unsigned stage_b,
                                           float (&acc)[kFragM][kFragN][4]) {
  FenceAccumulators(acc);
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < BK / 16; ++kk) {
    const unsigned long long b = SmemDescriptor(stage_b + kk * 32);
#pragma unroll
    for (int mi = 0; mi < kFragM; ++mi) {
      Wgmma(acc[mi], SmemDescriptor(stage_a + mi * 64 * BK * 2 + kk * 32), b);
    }
  }
  WgmmaCommit();
  WgmmaWait<1>();
  FenceAccumulators(acc);
}
#endif  // WGMMA

#if WGMMA >= 2
// mbarriers in shared memory (PTX ISA, "Parallel synchronization and
// communication instructions: mbarrier"): a barrier completes a phase when
// `count` arrivals have been made, then starts the next; phases alternate
// parity, which is what a waiter names.
__device__ __forceinline__ void MbarrierInit(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void MbarrierArrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Returns once the phase of parity `parity` has completed.
__device__ __forceinline__ void MbarrierWait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// One arrival on `bar` once every cp.async this thread issued has landed
// (.noinc: the arrival is one of the `count` the barrier expects).
__device__ __forceinline__ void CpAsyncArrive(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// One arrival on `bar` that also expects `bytes` more of asynchronous
// copies (the TMA's complete_tx) before its phase can complete.
__device__ __forceinline__ void MbarrierArriveExpectTx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// The TMA copies the box of `map` whose first element is at (column `x`,
// row `y`) into shared memory at `dst` (in the map's swizzle), and counts
// its bytes on `bar`. Elements past the tensor's edges arrive as zero.
__device__ __forceinline__ void TmaLoad2d(unsigned dst, const TensorMap& map, int x, int y,
                                          unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
#if WGMMA == 3
// The box of `map` at (column `x`, row `y`) from shared memory at `src` (in
// the map's swizzle) to global memory, in this thread's bulk group.
__device__ __forceinline__ void TmaStore2d(const TensorMap& map, unsigned src, int x, int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
          reinterpret_cast<unsigned long long>(&map)),
      "r"(x), "r"(y), "r"(src)
      : "memory");
}
__device__ __forceinline__ void StoreShared32(unsigned address, unsigned value) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(value) : "memory");
}
// A barrier of the computing warpgroups only (named barrier 1).
__device__ __forceinline__ void ComputeBarrier() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kComputeThreads) : "memory");
}
#if CLUSTER > 1
// This block's rank in its cluster.
__device__ __forceinline__ unsigned ClusterRank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
// Every thread of every block of the cluster (release, then acquire).
__device__ __forceinline__ void ClusterSync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// The address in block `rank`'s shared memory of what is at `address` in
// this block's.
__device__ __forceinline__ unsigned ClusterAddress(unsigned address, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(address), "r"(rank));
  return remote;
}
// One arrival on the barrier at `remote` (an address from ClusterAddress),
// with the arrive's default semantics (release at CTA scope): what it
// orders is this block's reads of its own stage, finished by the wgmma wait
// before it. A release at cluster scope made every stage wait for it: 3.8x
// slower on an H100 (M=256 N=4096 K=4096: 86.8 against 24.5 us).
__device__ __forceinline__ void MbarrierArriveCluster(unsigned remote) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}
// TmaLoad2d into the shared memory of every block of `mask` (bit r = rank
// r), at `dst` in each, counting the bytes on the barrier at `bar` in each.
__device__ __forceinline__ void TmaLoad2dMulticast(unsigned dst, const TensorMap& map, int x, int y,
                                                   unsigned bar, unsigned short mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(x), "r"(y), "r"(bar), "h"(mask)
      : "memory");
}
#endif
#endif
#endif  // WGMMA >= 2

// One thread's share of the copies of a kRows x BK operand tile per K
// step: chunks first_row + i * kRowStep (i < kPerThread) of one column of
// 16-byte chunks. Rows at or past `valid_rows` (A's rows past M) are
// zero-filled from the tile's first row, which always exists.
template <int kRows, bool kGuardRows>
struct TileLoader {
  static constexpr int kChunks = kRows * kChunksPerRow;
  static constexpr int kPerThread = (kChunks + kLoaderThreads - 1) / kLoaderThreads;
  static constexpr int kRowStep = kLoaderThreads / kChunksPerRow;

  const bf16* src;       // the thread's first chunk at K step 0
  const bf16* fallback;  // the same chunk column of the tile's first row
  long long row_step;    // elements from one of the thread's chunks to the next
  unsigned dst;          // the first chunk's byte offset in a stage, row part
  unsigned chunk;        // its swizzled chunk position
  int first_row;
  int valid_rows;

  __device__ __forceinline__ TileLoader(const bf16* tile, int ld, int rows, int tid)
      : first_row(tid / kChunksPerRow), valid_rows(rows) {
    const int column = tid % kChunksPerRow;
    fallback = tile + column * 8;
    src = fallback + static_cast<long long>(first_row) * ld;
    row_step = static_cast<long long>(kRowStep) * ld;
    dst = static_cast<unsigned>(first_row * BK * 2);
    chunk = static_cast<unsigned>(column ^ Swizzle(first_row));
  }

  // Issues the copies of the K step that starts `k` elements into the tile.
  __device__ __forceinline__ void Load(unsigned stage, int k) const {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int row = first_row + i * kRowStep;
      if (kChunks % kLoaderThreads == 0 || row < kRows) {
        const bool valid = !kGuardRows || row < valid_rows;
        const bf16* from = (valid ? src + i * row_step : fallback) + k;
        const unsigned to =
            stage + dst + i * kRowStep * BK * 2 + ((chunk ^ Swizzle(i * kRowStep)) << 4);
        CpAsync16(to, from, valid ? 16 : 0);
      }
    }
  }
};

// The warp's MMAs over one stage. a_offset/b_offset: per k16 step, the byte
// offset in a stage of the row this lane addresses for ldmatrix in
// fragment 0; fragment mi (nj) is 16 rows further (a constant).
__device__ __forceinline__ void ComputeStage(unsigned stage_a, unsigned stage_b,
                                             float (&acc)[kFragM][kFragN][4],
                                             const unsigned (&a_offset)[BK / 16],
                                             const unsigned (&b_offset)[BK / 16]) {
#pragma unroll
  for (int kk = 0; kk < BK / 16; ++kk) {
    // A, 16x16 per fragment: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7),
    // (rows 0-7, k 8-15), (rows 8-15, k 8-15) = a0, a1, a2, a3.
    unsigned a[kFragM][4];
#pragma unroll
    for (int mi = 0; mi < kFragM; ++mi) {
      LdMatrixX4(a[mi], stage_a + a_offset[kk] + mi * 16 * BK * 2);
    }
    // B, two n8 fragments per x4: matrices (n 0-7, k 0-7), (n 0-7, k 8-15)
    // = b0, b1 of the first, (n 8-15, k 0-7), (n 8-15, k 8-15) of the second.
    unsigned b[kFragN][2];
#pragma unroll
    for (int nj = 0; nj < kFragN / 2; ++nj) {
      unsigned r[4];
      LdMatrixX4(r, stage_b + b_offset[kk] + nj * 16 * BK * 2);
      b[2 * nj][0] = r[0];
      b[2 * nj][1] = r[1];
      b[2 * nj + 1][0] = r[2];
      b[2 * nj + 1][1] = r[3];
    }
#pragma unroll
    for (int mi = 0; mi < kFragM; ++mi) {
#pragma unroll
      for (int ni = 0; ni < kFragN; ++ni) Mma(acc[mi][ni], a[mi], b[ni]);
    }
  }
}

// An accumulator fragment's four values: (row, col), (row, col + 1),
// (row + 8, col), (row + 8, col + 1); rows at or past m are not written.
__device__ __forceinline__ void StoreFragment(bf16* c, int row, int col, int m, int n, float alpha,
                                              float v0, float v1, float v2, float v3) {
  if (row < m) {
    *reinterpret_cast<__nv_bfloat162*>(c + static_cast<long long>(row) * n + col) =
        __floats2bfloat162_rn(alpha * v0, alpha * v1);
  }
  if (row + 8 < m) {
    *reinterpret_cast<__nv_bfloat162*>(c + static_cast<long long>(row + 8) * n + col) =
        __floats2bfloat162_rn(alpha * v2, alpha * v3);
  }
}

// Adds 1 to *counter, or puts it back to 0 when it was `last`; returns the
// old value. Release: the block's partial tile (stored before) is visible to
// the block that sees `last`; acquire: that block then sees every other's.
__device__ __forceinline__ unsigned AtomicIncAcqRel(unsigned* counter, unsigned last) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;\n"
               : "=r"(old)
               : "l"(counter), "r"(last)
               : "memory");
  return old;
}

// The copy ring of the paths where every warp copies and computes (mma.sync
// and WGMMA = 1): step kt's copies are issued kAhead steps before it is
// computed, one commit group per step (empty past the last one), so before
// step kt exactly kAhead + kt groups are committed and waiting until
// kAhead - 1 are pending means step kt has landed; a block-wide barrier then
// makes it visible to every warp. compute(stage_a, stage_b) runs step kt on
// its stage. Returns with no copy in flight.
template <int kAhead, typename LoaderA, typename LoaderB, typename Compute>
__device__ __forceinline__ void CopyRing(const LoaderA& load_a, const LoaderB& load_b,
                                         unsigned smem_a, unsigned smem_b, int k_tiles,
                                         Compute compute) {
  static_assert(kAhead >= 1 && kAhead < STAGES, "a ring of STAGES holds kAhead steps and one more");
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < k_tiles) {
      load_a.Load(smem_a + s * kStageBytesA, s * BK);
      load_b.Load(smem_b + s * kStageBytesB, s * BK);
    }
    CpAsyncCommit();
  }
  int read_stage = 0;        // kt % STAGES
  int write_stage = kAhead;  // (kt + kAhead) % STAGES
  for (int kt = 0; kt < k_tiles; ++kt) {
    CpAsyncWait<kAhead - 1>();
#if WGMMA
    FenceProxyAsync();  // wgmma reads shared memory through the async proxy
#endif
    __syncthreads();
    const int next = kt + kAhead;
    if (next < k_tiles) {
      load_a.Load(smem_a + write_stage * kStageBytesA, next * BK);
      load_b.Load(smem_b + write_stage * kStageBytesB, next * BK);
    }
    CpAsyncCommit();
    compute(smem_a + read_stage * kStageBytesA, smem_b + read_stage * kStageBytesB);
    read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;
    write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;
  }
  CpAsyncWait<0>();  // only empty groups are left; none outlives the block
}

// The origin (m0, n0) in C of tile number `tile`, in grouped rasterization
// (Triton's matmul tutorial): tiles walk a band of GROUP_M tile rows column
// by column; the last band may be shorter.
// `rows`: the height of a tile row (CLUSTER = 2 counts pairs of tiles).
__device__ __forceinline__ void TileOrigin(int tile, int tiles_m, int tiles_n, int& m0, int& n0,
                                           int rows = BM) {
  const int band_tiles = GROUP_M * tiles_n;
  const int first_m = tile / band_tiles * GROUP_M;
  const int band_rows = min(tiles_m - first_m, GROUP_M);
  const int in_band = tile % band_tiles;
  m0 = (first_m + in_band % band_rows) * rows;
  n0 = in_band / band_rows * BN;
}

#if WGMMA == 3 && SPLIT_K == 1
// The TMA path without a split, the whole of a block's work: thread 0 (of
// the copying warpgroup) issues each K step's [BM, BK] and [BN, BK] boxes
// into the stage ring, the WM computing warpgroups run their wgmmas on each
// stage once its `full` barrier completes and release it on `empty`, then
// write their tile of C, alpha applied and rounded to bf16, into shared
// memory as BN / 64 column slabs of [BM, 64] in the 128-byte swizzle, and
// one thread stores each slab with map_c (the TMA clips the box at the
// tensor's edges: rows past M and columns past N are not written).
//
// A block computes tiles blockIdx.x, blockIdx.x + gridDim.x, ... (one tile
// when PERSISTENT = 0, whose grid has a block per tile). The copying thread
// and the computing warpgroups each keep their place in the ring (stage and
// phase parity) from one tile to the next, so the next tile's stages fill
// while C of the last one is stored. PERSISTENT = 1 stages C in an area of
// its own after the ring (its bulk stores are waited for before it is
// written again); PERSISTENT = 0 stages it over the ring, free by then.
// Where a block's tiles are: its cluster's tiles (pairs of tiles one above
// the other when CLUSTER = 2, counted as one tile of CLUSTER * BM rows) and
// its rank in the cluster, whose BM rows of each it computes.
struct TmaSchedule {
  int tiles_m, tiles_n, tiles;  // in cluster tiles
  int first_tile, tile_step;
  int rank;
  int k_tiles;

  __device__ __forceinline__ TmaSchedule(int m, int n, int k) {
    tiles_m = ((m + BM - 1) / BM + CLUSTER - 1) / CLUSTER;
    tiles_n = (n + BN - 1) / BN;
    tiles = tiles_m * tiles_n;
    first_tile = blockIdx.x / CLUSTER;
    tile_step = PERSISTENT ? gridDim.x / CLUSTER : tiles;  // PERSISTENT = 0: one tile
#if CLUSTER > 1
    rank = static_cast<int>(ClusterRank());
#else
    rank = 0;
#endif
    k_tiles = k / BK;
  }
  // The origin in C of this block's part of cluster tile `tile`.
  __device__ __forceinline__ void Origin(int tile, int& m0, int& n0) const {
    TileOrigin(tile, tiles_m, tiles_n, m0, n0, CLUSTER * BM);
    m0 += rank * BM;
  }
};

// The copying thread: each K step's [BM, BK] box of A into this block's
// stage and, CLUSTER = 2, its half of the [BN, BK] box of B into the same
// stage of both blocks of the pair (the other half comes from the other
// block), each block's `full` barrier counting the bytes it receives.
__device__ __forceinline__ void TmaCopies(const TmaSchedule& schedule, const TensorMap& map_a,
                                          const TensorMap& map_b, unsigned smem_a, unsigned smem_b,
                                          unsigned full, unsigned empty) {
  int stage = 0;
  unsigned parity = 1;  // of the phase of `empty` that frees the stage
  bool lapped = false;  // every stage filled once: each must be freed first
  for (int tile = schedule.first_tile; tile < schedule.tiles; tile += schedule.tile_step) {
    int m0, n0;
    schedule.Origin(tile, m0, n0);
    for (int kt = 0; kt < schedule.k_tiles; ++kt) {
      if (lapped) MbarrierWait(empty + stage * 8, parity);
      MbarrierArriveExpectTx(full + stage * 8, kStageBytesA + kStageBytesB);
      TmaLoad2d(smem_a + stage * kStageBytesA, map_a, kt * BK, m0, full + stage * 8);
#if CLUSTER > 1
      constexpr int kHalfRows = BN / CLUSTER;
      TmaLoad2dMulticast(smem_b + stage * kStageBytesB + schedule.rank * kHalfRows * BK * 2, map_b,
                         kt * BK, n0 + schedule.rank * kHalfRows, full + stage * 8,
                         static_cast<unsigned short>((1u << CLUSTER) - 1));
#else
      TmaLoad2d(smem_b + stage * kStageBytesB, map_b, kt * BK, n0, full + stage * 8);
#endif
      if (++stage == STAGES) {
        stage = 0;
        parity ^= 1;
        lapped = true;
      }
    }
  }
}

// A computing thread's release of the stage at `bar` (its `empty` barrier):
// CLUSTER = 2, one lane a warp arrives on the barrier of both blocks, whose
// copies both write into this block's stage.
__device__ __forceinline__ void ReleaseStage(unsigned bar) {
#if CLUSTER > 1
  __syncwarp();
  if (threadIdx.x % 32 == 0) {
#pragma unroll
    for (unsigned r = 0; r < CLUSTER; ++r) MbarrierArriveCluster(ClusterAddress(bar, r));
  }
#else
  MbarrierArrive(bar);
#endif
}

// The computing warpgroups: the products of each stage once its `full`
// barrier completes, then C of the tile through the staging area and the
// TMA.
__device__ __forceinline__ void TmaProducts(const TmaSchedule& schedule, const TensorMap& map_c,
                                            float alpha, int n, unsigned smem_a, unsigned smem_b,
                                            unsigned staging, unsigned full, unsigned empty) {
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int ctid = tid - kFirstComputeThread;
  const unsigned warpgroup_a = static_cast<unsigned>((warp / 4 - 1) * kWarpM * BK * 2);
  const int tile_row = (warp / 4 - 1) * kWarpM + warp % 4 * 16 + lane / 4;
  const int k_tiles = schedule.k_tiles;
  int stage = 0;
  unsigned parity = 0;  // of the phase of `full` that fills the stage
  float acc[kFragM][kFragN][4];
  for (int tile = schedule.first_tile; tile < schedule.tiles; tile += schedule.tile_step) {
    int m0, n0;
    schedule.Origin(tile, m0, n0);
#pragma unroll
    for (int mi = 0; mi < kFragM; ++mi) {
#pragma unroll
      for (int ni = 0; ni < kFragN; ++ni) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;
      }
    }
    int previous = 0;
    for (int kt = 0; kt < k_tiles; ++kt) {
      MbarrierWait(full + stage * 8, parity);
      WgmmaStage(smem_a + stage * kStageBytesA + warpgroup_a, smem_b + stage * kStageBytesB, acc);
      if (kt > 0) ReleaseStage(empty + previous * 8);
      previous = stage;
      if (++stage == STAGES) {
        stage = 0;
        parity ^= 1;
      }
    }
    WgmmaWait<0>();
    FenceAccumulators(acc);
    ReleaseStage(empty + previous * 8);

    // The staging area is free once the last tile's bulk stores have read
    // it (PERSISTENT = 1), or once every warpgroup is past its last wgmma
    // on the ring (PERSISTENT = 0): then the barrier.
    if (PERSISTENT && ctid == 0) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    ComputeBarrier();
#pragma unroll
    for (int mi = 0; mi < kFragM; ++mi) {
#pragma unroll
      for (int ni = 0; ni < kFragN; ++ni) {
        const float(&v)[4] = acc[mi][ni];
        const int col = lane % 4 * 2 + ni * 8;
        const int row = tile_row + mi * kFragRows;
        const unsigned slab = staging + static_cast<unsigned>(col / 64 * BM * 128);
        const unsigned chunk = static_cast<unsigned>(col % 64 / 8);
        const unsigned within = static_cast<unsigned>(col % 8 * 2);
        const __nv_bfloat162 top = __floats2bfloat162_rn(alpha * v[0], alpha * v[1]);
        const __nv_bfloat162 bottom = __floats2bfloat162_rn(alpha * v[2], alpha * v[3]);
        StoreShared32(slab + row * 128 + ((chunk ^ (row % 8)) << 4) + within,
                      *reinterpret_cast<const unsigned*>(&top));
        StoreShared32(slab + (row + 8) * 128 + ((chunk ^ ((row + 8) % 8)) << 4) + within,
                      *reinterpret_cast<const unsigned*>(&bottom));
      }
    }
    FenceProxyAsync();  // the TMA reads what the generic proxy wrote
    ComputeBarrier();
    if (ctid == 0) {
#pragma unroll
      for (int s = 0; s < BN / 64; ++s) {
        // A slab wholly past N (the last tile of a ragged N) is not stored.
        if (n0 + s * 64 < n) {
          TmaStore2d(map_c, staging + static_cast<unsigned>(s * BM * 128), n0 + s * 64, m0);
        }
      }
      asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    }
  }
  // The block's shared memory must outlive the stores' reads of it.
  if (ctid == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ void TmaTiles(const TensorMap& map_a, const TensorMap& map_b,
                                         const TensorMap& map_c, float alpha, int m, int n, int k,
                                         unsigned smem_a) {
  const int tid = threadIdx.x;
  const TmaSchedule schedule(m, n, k);
  const unsigned smem_b = smem_a + STAGES * kStageBytesA;
  const unsigned staging = PERSISTENT ? smem_b + STAGES * kStageBytesB : smem_a;

  __shared__ unsigned long long barriers[2 * STAGES];  // full, then empty
  const unsigned full = static_cast<unsigned>(__cvta_generic_to_shared(barriers));
  const unsigned empty = full + STAGES * 8;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      MbarrierInit(full + s * 8, 1);  // the copying thread's arrival, with the bytes
      // Every computing thread's release, or CLUSTER = 2 one per warp of
      // both blocks.
      MbarrierInit(empty + s * 8, CLUSTER > 1 ? CLUSTER * kComputeThreads / 32 : kComputeThreads);
    }
    // The TMA (the async proxy) and the other block of the cluster must see
    // the initialized barriers.
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    FenceProxyAsync();
  }
#if CLUSTER > 1
  ClusterSync();  // no copy reaches a block whose barriers are not ready
#else
  __syncthreads();
#endif

  if (tid == 0) {
    TmaCopies(schedule, map_a, map_b, smem_a, smem_b, full, empty);
  } else if (tid >= kFirstComputeThread) {
    TmaProducts(schedule, map_c, alpha, n, smem_a, smem_b, staging, full, empty);
  }
#if CLUSTER > 1
  // No block leaves while the other may still arrive on its barriers.
  ClusterSync();
#endif
}
#endif  // WGMMA == 3 && SPLIT_K == 1

// CLUSTER = 2: the cluster's shape is part of the kernel, so a plain launch
// (a grid of pairs) forms the clusters.
#if CLUSTER > 1
#define GEMM_CLUSTER_DIMS __cluster_dims__(CLUSTER, 1, 1)
#else
#define GEMM_CLUSTER_DIMS
#endif
extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(kThreads, 1)
    gemm_bf16(const bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ c,
              float* __restrict__ workspace, const __grid_constant__ TensorMap map_a,
              const __grid_constant__ TensorMap map_b, const __grid_constant__ TensorMap map_c,
              float alpha, int m, int n, int k) {
  extern __shared__ __align__(128) unsigned char smem[];
  // wgmma's swizzled tiles start at 1024-byte boundaries (the launch gives
  // 1024 bytes more for it); every stage is a multiple of 8 KiB then.
  unsigned smem_a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if (WGMMA) smem_a = (smem_a + 1023) & ~1023u;
#if WGMMA == 3 && SPLIT_K == 1
  TmaTiles(map_a, map_b, map_c, alpha, m, n, k, smem_a);
#else
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;

  const int tiles_m = (m + BM - 1) / BM;
  const int tiles_n = (n + BN - 1) / BN;
  const int tile = blockIdx.x;
  int m0, n0;
  TileOrigin(tile, tiles_m, tiles_n, m0, n0);

  const int split = blockIdx.y;
  const int split_k = k / SPLIT_K;
  const int k_tiles = split_k / BK;
  const TileLoader<BM, true> load_a(a + static_cast<long long>(m0) * k + split * split_k, k, m - m0,
                                    tid);
  const TileLoader<BN, false> load_b(b + static_cast<long long>(n0) * k + split * split_k, k, BN,
                                     tid);

  const unsigned smem_b = smem_a + STAGES * kStageBytesA;

  float acc[kFragM][kFragN][4];
#pragma unroll
  for (int mi = 0; mi < kFragM; ++mi) {
#pragma unroll
    for (int ni = 0; ni < kFragN; ++ni) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;
    }
  }

#if WGMMA >= 2
  // Warp-specialized: the copying warpgroup fills stage kt % STAGES for
  // step kt once the computing warpgroups have released it (empty), and
  // the barrier `full` of the stage completes when those copies have
  // landed; each computing warpgroup waits for it, runs its wgmmas, and
  // releases the stage of the step before once that step's group is done.
  __shared__ unsigned long long barriers[2 * STAGES];  // full, then empty
  const unsigned full = static_cast<unsigned>(__cvta_generic_to_shared(barriers));
  const unsigned empty = full + STAGES * 8;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      // WGMMA = 3: one arrival (with the bytes the TMA will bring).
      MbarrierInit(full + s * 8, WGMMA == 3 ? 1 : kLoaderThreads);
      MbarrierInit(empty + s * 8, kComputeThreads);
    }
    // The TMA (the async proxy) must see the initialized barriers.
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    FenceProxyAsync();
  }
  __syncthreads();
#if WGMMA == 3
  if (tid == 0) {
    // One thread issues whole tiles; the maps' boxes are [BM, BK] and
    // [BN, BK].
    int stage = 0;
    unsigned parity = 1;  // of the phase of `empty` that frees the stage
    const int k0 = split * split_k;
    for (int kt = 0; kt < k_tiles; ++kt) {
      if (kt >= STAGES) MbarrierWait(empty + stage * 8, parity);
      MbarrierArriveExpectTx(full + stage * 8, kStageBytesA + kStageBytesB);
      TmaLoad2d(smem_a + stage * kStageBytesA, map_a, k0 + kt * BK, m0, full + stage * 8);
      TmaLoad2d(smem_b + stage * kStageBytesB, map_b, k0 + kt * BK, n0, full + stage * 8);
      if (++stage == STAGES) {
        stage = 0;
        parity ^= 1;
      }
    }
  } else if (tid < kFirstComputeThread) {
    // The rest of the copying warpgroup only takes part in the barriers
    // after the products.
  } else {
#else
  if (tid < kFirstComputeThread) {
    int stage = 0;
    unsigned parity = 1;  // of the phase of `empty` that frees the stage
    for (int kt = 0; kt < k_tiles; ++kt) {
      if (kt >= STAGES) MbarrierWait(empty + stage * 8, parity);
      load_a.Load(smem_a + stage * kStageBytesA, kt * BK);
      load_b.Load(smem_b + stage * kStageBytesB, kt * BK);
      CpAsyncArrive(full + stage * 8);
      if (++stage == STAGES) {
        stage = 0;
        parity ^= 1;
      }
    }
    CpAsyncWait<0>();
  } else {
#endif  // WGMMA == 3
    const unsigned warpgroup_a = static_cast<unsigned>((warp / 4 - 1) * kWarpM * BK * 2);
    int stage = 0;
    unsigned parity = 0;  // of the phase of `full` that fills the stage
    int previous = STAGES - 1;
    for (int kt = 0; kt < k_tiles; ++kt) {
      MbarrierWait(full + stage * 8, parity);
      if (WGMMA == 2) FenceProxyAsync();  // cp.async wrote through the generic proxy
      WgmmaStage(smem_a + stage * kStageBytesA + warpgroup_a, smem_b + stage * kStageBytesB, acc);
      if (kt > 0) MbarrierArrive(empty + previous * 8);
      previous = stage;
      if (++stage == STAGES) {
        stage = 0;
        parity ^= 1;
      }
    }
    WgmmaWait<0>();
    FenceAccumulators(acc);
  }

  // Fragment (mi, ni) covers rows row0 + mi*64 + {0, 8}, columns col0 + ni*8 + {0, 1}.
  const int row0 = m0 + (warp / 4 - 1) * kWarpM + warp % 4 * 16 + lane / 4;
  const int col0 = n0 + lane % 4 * 2;
#elif WGMMA
  // STAGES - 2 steps of copies ahead: the wgmma group of step kt - 1 may
  // still read its stage while step kt's is issued, so step kt + STAGES - 2
  // goes into the stage of step kt - 2, which every warpgroup has finished
  // with (WgmmaStage returned with only its last group in flight, before the
  // barrier).
  const unsigned warpgroup_a = static_cast<unsigned>(warp / 4 * kWarpM * BK * 2);
  CopyRing<STAGES - 2>(
      load_a, load_b, smem_a, smem_b, k_tiles,
      [&](unsigned stage_a, unsigned stage_b) { WgmmaStage(stage_a + warpgroup_a, stage_b, acc); });
  WgmmaWait<0>();
  FenceAccumulators(acc);

  // Fragment (mi, ni) covers rows row0 + mi*64 + {0, 8}, columns col0 + ni*8 + {0, 1}.
  const int row0 = m0 + warp / 4 * kWarpM + warp % 4 * 16 + lane / 4;
  const int col0 = n0 + lane % 4 * 2;
#else
  const int warp_m = warp / WN;
  const int warp_n = warp % WN;

  // ldmatrix rows: A's lanes 0-15 address rows 0-15 at k 0-7, lanes 16-31
  // the same rows at k 8-15; B's lanes address n rows 0-7 (lanes 0-15) and
  // 8-15 (lanes 16-31), at k 0-7 for lanes 0-7 and 16-23, else k 8-15.
  unsigned a_offset[BK / 16], b_offset[BK / 16];
  {
    const int a_row = lane % 16;
    const int b_row = lane % 8 + lane / 16 * 8;
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      a_offset[kk] = static_cast<unsigned>((warp_m * kWarpM + a_row) * BK * 2 +
                                           (((kk * 2 + lane / 16) ^ Swizzle(a_row)) << 4));
      b_offset[kk] = static_cast<unsigned>((warp_n * kWarpN + b_row) * BK * 2 +
                                           (((kk * 2 + lane / 8 % 2) ^ Swizzle(b_row)) << 4));
    }
  }

  // STAGES - 1 steps of copies ahead: after the barrier of step kt every
  // warp is done with step kt - 1, whose stage the copies overwrite.
  CopyRing<STAGES - 1>(load_a, load_b, smem_a, smem_b, k_tiles,
                       [&](unsigned stage_a, unsigned stage_b) {
                         ComputeStage(stage_a, stage_b, acc, a_offset, b_offset);
                       });

  // Fragment (mi, ni) covers rows row0 + mi*16 + {0, 8}, columns col0 + ni*8 + {0, 1}.
  const int row0 = m0 + warp_m * kWarpM + lane / 4;
  const int col0 = n0 + warp_n * kWarpN + lane % 4 * 2;
#endif

  // Threads that hold accumulators, numbered from 0 (WGMMA = 2: not the
  // copying warpgroup, which still takes part in the barriers below).
  const bool computes = tid >= kFirstComputeThread;
  const int ctid = tid - kFirstComputeThread;
  if constexpr (SPLIT_K == 1) {
    if (!computes) return;
#pragma unroll
    for (int mi = 0; mi < kFragM; ++mi) {
#pragma unroll
      for (int ni = 0; ni < kFragN; ++ni) {
        const float(&v)[4] = acc[mi][ni];
        StoreFragment(c, row0 + mi * kFragRows, col0 + ni * 8, m, n, alpha, v[0], v[1], v[2], v[3]);
      }
    }
  } else {
    // The tile's SPLIT_K partials, each in fragment order: float4 number
    // (mi * kFragN + ni) * kComputeThreads + ctid is this thread's fragment (mi, ni),
    // so every store and load of a warp is 512 contiguous bytes.
    constexpr long long kTileFloat4s = BM * BN / 4;
    unsigned* const counter = reinterpret_cast<unsigned*>(workspace) + tile;
    float4* const partials = reinterpret_cast<float4*>(workspace + CounterWords(m, n)) +
                             static_cast<long long>(tile) * SPLIT_K * kTileFloat4s;
    float4* const mine = partials + split * kTileFloat4s;
#pragma unroll
    for (int mi = 0; mi < kFragM && computes; ++mi) {
#pragma unroll
      for (int ni = 0; ni < kFragN; ++ni) {
        const float(&v)[4] = acc[mi][ni];
        __stcg(mine + (mi * kFragN + ni) * kComputeThreads + ctid,
               make_float4(v[0], v[1], v[2], v[3]));
      }
    }
    // Every thread's stores are ordered before the arrival (the pattern of
    // the CUDA guide's threadFenceReduction), then one thread arrives.
    __threadfence();
    __syncthreads();
    int last = 0;
    if (tid == 0) last = AtomicIncAcqRel(counter, SPLIT_K - 1) == SPLIT_K - 1;
    // Only the last block goes on. It adds all SPLIT_K partials (its own
    // read back) in split order, so C does not depend on which block came
    // last; __ldcg reads L2, where the other blocks' stores are, never a
    // stale L1 line.
    if (!__syncthreads_or(last) || !computes) return;
#pragma unroll
    for (int mi = 0; mi < kFragM; ++mi) {
#pragma unroll
      for (int ni = 0; ni < kFragN; ++ni) {
        const float4* from = partials + (mi * kFragN + ni) * kComputeThreads + ctid;
        float4 sum = __ldcg(from);
#pragma unroll
        for (int s = 1; s < SPLIT_K; ++s) {
          const float4 part = __ldcg(from + s * kTileFloat4s);
          sum.x += part.x;
          sum.y += part.y;
          sum.z += part.z;
          sum.w += part.w;
        }
        StoreFragment(c, row0 + mi * kFragRows, col0 + ni * 8, m, n, alpha, sum.x, sum.y, sum.z,
                      sum.w);
      }
    }
  }
#endif  // WGMMA == 3 && SPLIT_K == 1
}

#endif  // AUTOTUNE_REFERENCE
