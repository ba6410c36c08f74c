/* dpl_cuda_compact.cu: kernels of the ops whose output depends on the data, or that
 * fold values into positions the data names, each giving the CPU's results exactly:
 *  - compaction (nonzero, masked_select, masked_scatter_): a count of the non-zero
 *    elements per chunk of kNzChunk, an exclusive scan of those counts in one block
 *    (the total last: the one number the host reads back to size the output), then each
 *    chunk writes the positions (flat, or coordinates over a shape) of its non-zero
 *    elements in order after a block scan of its threads' counts: row-major order, as
 *    the CPU's loops;
 *  - searchsorted: one thread per value, the CPU's binary search (dpl.tensor_extra);
 *  - scatter_reduce / index_reduce / scatter_(reduce='multiply'): one thread per line of
 *    the index along the reduced dim, folding its entries in order: every output element
 *    is written by one thread only, in the CPU's order (no atomics, bit-equal results),
 *    with the counts that include_self=false and mean need; floating values fold in
 *    double and are stored in the output's dtype at each step (for float32, float16 and
 *    bfloat16 the same roundings as the CPU's float arithmetic), integers wrap in int64.
 * Launchers: dpl_cuda_kernels.h; host side: dpl_cuda_compact.c. */
#include "dpl_cuda_common.cuh"

using namespace dplcu;

namespace {

const int kNzThreads = 256, kNzPer = 4, kNzChunk = kNzThreads * kNzPer, kScanThreads = 1024;

__device__ __forceinline__ bool nonzero_at(const char *src, int dt, int64_t i)
{
  const char *p = src + i * elsize(dt);
  if (dt == F32 || dt == F64 || dt == F16 || dt == BF16) return ld_f64(p, dt) != 0; /* NaN counts */
  return ld_i64(p, dt) != 0;
}

/* block-wide exclusive scan of one int64 per thread (blockDim.x threads); returns the total too */
__device__ int64_t block_excl_scan(int64_t v, int64_t *total)
{
  __shared__ int64_t buf[2][kScanThreads];
  int t = threadIdx.x, n = blockDim.x, cur = 0;
  buf[0][t] = v;
  __syncthreads();
  for (int off = 1; off < n; off <<= 1) {
    int64_t x = buf[cur][t];
    if (t >= off) x += buf[cur][t - off];
    buf[1 - cur][t] = x;
    cur = 1 - cur;
    __syncthreads();
  }
  int64_t incl = buf[cur][t];
  *total = buf[cur][n - 1];
  __syncthreads(); /* buf is reused by the caller's next scan */
  return incl - v;
}

__global__ void k_nz_count(const char *src, int dt, int64_t n, int64_t *counts)
{
  __shared__ int64_t part[kNzThreads];
  int64_t lo = (int64_t)blockIdx.x * kNzChunk;
  int64_t c = 0;
  for (int k = threadIdx.x; k < kNzChunk; k += kNzThreads)
    if (lo + k < n && nonzero_at(src, dt, lo + k)) c++;
  part[threadIdx.x] = c;
  __syncthreads();
  for (int s = kNzThreads / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) counts[blockIdx.x] = part[0];
}

/* offsets[0..nb]: the exclusive prefix sums of counts[0..nb), offsets[nb] the total (one block) */
__global__ void k_nz_scan(const int64_t *counts, int64_t nb, int64_t *offsets)
{
  int64_t per = (nb + kScanThreads - 1) / kScanThreads, lo = threadIdx.x * per, hi = lo + per;
  if (hi > nb) hi = nb;
  int64_t s = 0;
  for (int64_t k = lo; k < hi; k++) s += counts[k];
  int64_t total = 0, ex = block_excl_scan(s, &total);
  for (int64_t k = lo; k < hi; k++) {
    offsets[k] = ex;
    ex += counts[k];
  }
  if (threadIdx.x == 0) offsets[nb] = total;
}

/* each chunk's non-zero elements in order: their flat positions (ndim 0) or coordinates */
__global__ void k_nz_write(const char *src, int dt, int64_t n, const int64_t *offsets, dpl_cu_shape sh, int64_t *out)
{
  int64_t lo = (int64_t)blockIdx.x * kNzChunk + (int64_t)threadIdx.x * kNzPer;
  bool f[kNzPer];
  int64_t c = 0, total = 0;
  for (int k = 0; k < kNzPer; k++) {
    f[k] = lo + k < n && nonzero_at(src, dt, lo + k);
    c += f[k];
  }
  int64_t w = offsets[blockIdx.x] + block_excl_scan(c, &total);
  for (int k = 0; k < kNzPer; k++) {
    if (!f[k]) continue;
    int64_t i = lo + k;
    if (sh.ndim == 0) out[w] = i;
    else
      for (int d = sh.ndim - 1; d >= 0; d--) {
        int64_t q = i / sh.shape[d];
        out[w * sh.ndim + d] = i - q * sh.shape[d];
        i = q;
      }
    w++;
  }
}

/* out[r, j] = #{i: s[r, i] < v[r, j]} (right: not s > v), by the CPU's binary search */
__global__ void k_search(const double *s, const double *v, int64_t *out, int64_t R, int64_t M, int64_t N, int right)
{
  int64_t sstep = R > 1 ? M : 0;
  DPL_GRID_STRIDE(t, R * N)
  {
    int64_t r = t / N;
    const double *row = s + r * sstep;
    double x = v[t];
    int64_t lo = 0, hi = M;
    while (lo < hi) {
      int64_t mid = (lo + hi) / 2;
      bool go = right ? !(row[mid] > x) : row[mid] < x;
      if (go) lo = mid + 1;
      else hi = mid;
    }
    out[t] = lo;
  }
}

enum { R_SUM = 1, R_PROD = 2, R_MEAN = 3, R_AMAX = 4, R_AMIN = 5 };

/* one thread per line of the index along dim: its entries folded into out in order */
__global__ void k_sred(char *out, int dt, const int64_t *idx, int64_t base, const char *src, int32_t *cnt,
                       dpl_cu_sred g, int red, int include_self, int is_bool)
{
  const int es = elsize(dt);
  const bool fl = dt == F32 || dt == F64 || dt == F16 || dt == BF16;
  int64_t D = g.ishape[g.dim], inner = 1;
  for (int k = g.dim + 1; k < g.ndim; k++) inner *= g.ishape[k];
  int64_t lines = D > 0 ? g.numel / D : 0;
  DPL_GRID_STRIDE(t, lines)
  {
    /* the line's offset in out without dim: its coordinates in the index's shape */
    int64_t ob = 0, rest = t;
    for (int k = g.ndim - 1; k >= 0; k--) {
      if (k == g.dim) continue;
      int64_t q = rest / g.ishape[k];
      ob += (rest - q * g.ishape[k]) * g.ostride[k];
      rest = q;
    }
    int64_t first = (t / inner) * D * inner + t % inner;
    for (int64_t k = 0; k < D; k++) {
      int64_t p = first + k * inner, o = ob + (idx[p] - base) * g.ostride[g.dim];
      char *q = out + o * es;
      const char *sp = src + p * es;
      int32_t c = cnt ? cnt[o] : 1;
      if (c == 0 && !include_self) {
        if (fl) st_f64(q, dt, ld_f64(sp, dt));
        else st_i64(q, dt, ld_i64(sp, dt));
      } else if (fl) {
        double x = ld_f64(q, dt), s = ld_f64(sp, dt);
        if (red == R_SUM || red == R_MEAN) x = __dadd_rn(x, s);
        else if (red == R_PROD) x = __dmul_rn(x, s);
        else if (s != s || (x == x && (red == R_AMAX ? s > x : s < x))) x = s;
        st_f64(q, dt, x);
      } else {
        int64_t x = ld_i64(q, dt), s = ld_i64(sp, dt);
        if (red == R_SUM || red == R_MEAN) x = is_bool ? (x != 0 || s != 0) : (int64_t)((uint64_t)x + (uint64_t)s);
        else if (red == R_PROD) x = is_bool ? (x != 0 && s != 0) : (int64_t)((uint64_t)x * (uint64_t)s);
        else if (red == R_AMAX ? s > x : s < x) x = s;
        st_i64(q, dt, x);
      }
      if (cnt) cnt[o] = c + 1;
    }
  }
}

/* mean: each element with entries divided by their count (+1 with self); integers: floor */
__global__ void k_sred_mean(char *out, int dt, const int32_t *cnt, int64_t n, int include_self)
{
  const int es = elsize(dt);
  const bool fl = dt == F32 || dt == F64 || dt == F16 || dt == BF16;
  DPL_GRID_STRIDE(i, n)
  {
    if (cnt[i] == 0) continue;
    int64_t m = cnt[i] + (include_self ? 1 : 0);
    char *q = out + i * es;
    if (fl) st_f64(q, dt, ld_f64(q, dt) / (double)m);
    else {
      int64_t s = ld_i64(q, dt), d = s / m;
      if (d * m != s && s < 0) d--;
      st_i64(q, dt, d);
    }
  }
}

} // namespace

extern "C" int64_t dpl_cu_nz_blocks(int64_t n) { return (n + kNzChunk - 1) / kNzChunk; }

extern "C" int dpl_cu_nz_count(const void *src, int32_t dt, int64_t n, int64_t *counts, int64_t *offsets,
                               cudaStream_t s)
{
  int64_t nb = dpl_cu_nz_blocks(n);
  if (nb > 0) k_nz_count<<<(unsigned)nb, kNzThreads, 0, s>>>((const char *)src, dt, n, counts);
  k_nz_scan<<<1, kScanThreads, 0, s>>>(counts, nb, offsets);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_nz_write(const void *src, int32_t dt, int64_t n, const int64_t *offsets, const dpl_cu_shape *sh,
                               int64_t *out, cudaStream_t s)
{
  int64_t nb = dpl_cu_nz_blocks(n);
  if (nb == 0) return 0;
  k_nz_write<<<(unsigned)nb, kNzThreads, 0, s>>>((const char *)src, dt, n, offsets, *sh, out);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_search(const double *sorted, const double *v, int64_t *out, int64_t R, int64_t M, int64_t N,
                             int32_t right, cudaStream_t s)
{
  if (R * N == 0) return 0;
  k_search<<<grid_for(R * N), kThreads, 0, s>>>(sorted, v, out, R, M, N, right);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_scatter_reduce(void *out, int32_t dt, int64_t out_numel, const int64_t *idx, int64_t base,
                                     const void *src, int32_t *cnt, const dpl_cu_sred *g, int32_t red,
                                     int32_t include_self, int32_t is_bool, cudaStream_t s)
{
  int64_t D = g->ndim > 0 ? g->ishape[g->dim] : 1, lines = D > 0 ? g->numel / D : 0;
  if (lines > 0)
    k_sred<<<grid_for(lines), kThreads, 0, s>>>((char *)out, dt, idx, base, (const char *)src, cnt, *g, red,
                                                include_self, is_bool);
  if (red == R_MEAN && out_numel > 0)
    k_sred_mean<<<grid_for(out_numel), kThreads, 0, s>>>((char *)out, dt, cnt, out_numel, include_self);
  return (int)cudaGetLastError();
}
