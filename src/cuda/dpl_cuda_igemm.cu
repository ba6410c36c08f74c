/* dpl_cuda_igemm.cu: the plugin's integer GEMM (cuBLAS multiplies floats only).
 * The matmul family computes every integer dtype in int64 on the CPU
 * (dpl_tensor_blas.c: operands converted to int64, ref_igemm, the result
 * converted back); the core does the same conversions for device tensors and
 * hands this kernel the int64 product: row-major C = alpha op(A) op(B) + beta C
 * (C not read when beta is 0), wrapping modulo 2^64 as the CPU's loop does
 * (all arithmetic in uint64_t: the same bits in any summation order). A plain
 * shared-memory tiled kernel: 16x16 output tiles, one thread per element,
 * operands staged through shared memory in 16-deep slices with coalesced loads
 * for both the plain and the transposed layouts. */
#include "dpl_cuda_common.cuh"

using namespace dplcu;

namespace {

enum { kTile = 16 };

/* a grid-stride loop over output tiles (batch, tile row, tile column) */
__global__ void k_igemm(int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k, uint64_t alpha, const uint64_t *a,
                        int64_t lda, const uint64_t *b, int64_t ldb, uint64_t beta, uint64_t *c, int64_t ldc,
                        int64_t batch, int64_t sa, int64_t sb, int64_t sc)
{
  __shared__ uint64_t as[kTile][kTile + 1]; /* as[r][p]: A(row0 + r, p0 + p) */
  __shared__ uint64_t bs[kTile][kTile + 1]; /* bs[p][q]: B(p0 + p, col0 + q) */
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t tm = (m + kTile - 1) / kTile, tn = (n + kTile - 1) / kTile, tiles = batch * tm * tn;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) { /* uniform per block: the barriers below are safe */
    const int64_t bi = t / (tm * tn), rest = t - bi * tm * tn;
    const int64_t row0 = (rest / tn) * kTile, col0 = (rest % tn) * kTile;
    const uint64_t *pa = a + bi * sa, *pb = b + bi * sb;
    uint64_t acc = 0;
    for (int64_t p0 = 0; p0 < k; p0 += kTile) {
      /* A(i, p) is pa[i*lda + p], or pa[p*lda + i] when transposed: consecutive tx read consecutive addresses */
      if (!ta) {
        const int64_t i = row0 + ty, p = p0 + tx;
        as[ty][tx] = (i < m && p < k) ? pa[i * lda + p] : 0;
      } else {
        const int64_t i = row0 + tx, p = p0 + ty;
        as[tx][ty] = (i < m && p < k) ? pa[p * lda + i] : 0;
      }
      /* B(p, j) is pb[p*ldb + j], or pb[j*ldb + p] when transposed */
      if (!tb) {
        const int64_t p = p0 + ty, j = col0 + tx;
        bs[ty][tx] = (p < k && j < n) ? pb[p * ldb + j] : 0;
      } else {
        const int64_t p = p0 + tx, j = col0 + ty;
        bs[tx][ty] = (p < k && j < n) ? pb[j * ldb + p] : 0;
      }
      __syncthreads();
#pragma unroll
      for (int q = 0; q < kTile; q++) acc += as[ty][q] * bs[q][tx];
      __syncthreads();
    }
    const int64_t i = row0 + ty, j = col0 + tx;
    if (i < m && j < n) {
      uint64_t *pc = c + bi * sc + i * ldc + j;
      *pc = (beta == 0 ? 0 : beta * *pc) + alpha * acc;
    }
  }
}

} // namespace

extern "C" int dpl_cu_igemm(int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k, int64_t alpha, const int64_t *a,
                            int64_t lda, const int64_t *b, int64_t ldb, int64_t beta, int64_t *c, int64_t ldc,
                            int64_t batch, int64_t sa, int64_t sb, int64_t sc, cudaStream_t s)
{
  if (m <= 0 || n <= 0 || batch <= 0) return 0;
  int64_t tiles = batch * ((m + kTile - 1) / kTile) * ((n + kTile - 1) / kTile);
  unsigned grid = (unsigned)(tiles < 65535 * 8 ? tiles : 65535 * 8); /* the loop covers the rest */
  k_igemm<<<grid, dim3(kTile, kTile), 0, s>>>(ta, tb, m, n, k, (uint64_t)alpha, (const uint64_t *)a, lda,
                                              (const uint64_t *)b, ldb, (uint64_t)beta, (uint64_t *)c, ldc, batch, sa,
                                              sb, sc);
  return (int)cudaGetLastError();
}
