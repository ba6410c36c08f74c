/* dpl_cuda_sort.cu: sort / argsort / topk, and the selections kthvalue / median(dim) /
 * mode, of contiguous rows on the GPU: one block per row, a bitonic sort in shared
 * memory of (key, position) pairs for rows of up to DPL_CU_SORT_MAX elements; longer rows
 * (sort, topk, and unique's sort of all elements) are sorted in tiles of DPL_CU_SORT_MAX by
 * the same bitonic sort, then merged pairwise in global memory (each element finds its place
 * by a binary search in the other run: the order is total, so no two ever tie). The keys are the CPU's order-preserving 64-bit keys
 * (dpl_tensor_sort.c: NaN above +inf, -0.0 equal to 0.0, descending = flipped keys),
 * and pairs compare by key then position: a total order, so the result is the CPU's
 * stable sort whatever the algorithm, and topk's first k are the CPU's (ties by the
 * lower index). Padding pairs (all ones) sort after every element. */
#include "dpl_cuda_common.cuh"

using namespace dplcu;

namespace {

__device__ __forceinline__ uint64_t key_f(float v)
{
  if (v != v) return ~0ull;
  if (v == 0) v = 0.0f;
  uint32_t u = __float_as_uint(v);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return u;
}
__device__ __forceinline__ uint64_t key_d(double v)
{
  if (v != v) return ~0ull;
  if (v == 0) v = 0.0;
  uint64_t u = (uint64_t)__double_as_longlong(v);
  return (u & 0x8000000000000000ull) ? ~u : (u | 0x8000000000000000ull);
}
__device__ __forceinline__ uint64_t elem_key(const char *q, int dt, int desc)
{
  uint64_t k;
  switch (dt) {
  case F32: k = key_f(*(const float *)q); break;
  case F64: k = key_d(*(const double *)q); break;
  case F16: k = key_f(h2f(*(const uint16_t *)q)); break;
  case BF16: k = key_f(bf2f(*(const uint16_t *)q)); break;
  case I32: k = (uint32_t)*(const int32_t *)q ^ 0x80000000u; break;
  case I64: k = (uint64_t)*(const int64_t *)q ^ 0x8000000000000000ull; break;
  default: k = *(const uint8_t *)q; break;
  }
  return desc ? ~k : k;
}

/* loads row `in` (R elements) as (key, position) pairs padded to P (a power of two) and sorts
 * them in the order (key, position); every thread of the block calls it */
__device__ void sort_row(const char *in, int dt, int desc, int64_t R, int P, uint64_t *key, int32_t *pos)
{
  const int es = elsize(dt);
  for (int t = threadIdx.x; t < P; t += blockDim.x) {
    if (t < R) { key[t] = elem_key(in + (int64_t)t * es, dt, desc); pos[t] = t; }
    else { key[t] = ~0ull; pos[t] = 0x7fffffff; }
  }
  __syncthreads();
  for (int k = 2; k <= P; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int t = threadIdx.x; t < P / 2; t += blockDim.x) {
        int i = (t / j) * 2 * j + (t % j), l = i + j;
        bool later = key[l] < key[i] || (key[l] == key[i] && pos[l] < pos[i]); /* l before i */
        if (later == ((i & k) == 0)) {
          uint64_t kk = key[i]; key[i] = key[l]; key[l] = kk;
          int32_t pp = pos[i]; pos[i] = pos[l]; pos[l] = pp;
        }
      }
      __syncthreads();
    }
}

__global__ void k_sort_rows(const char *src, int dt, int desc, int64_t rows, int64_t R, int64_t K, int P, char *vals,
                            int64_t *idx)
{
  __shared__ uint64_t key[DPL_CU_SORT_MAX];
  __shared__ int32_t pos[DPL_CU_SORT_MAX];
  const int es = elsize(dt);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const char *in = src + row * R * es;
    sort_row(in, dt, desc, R, P, key, pos);
    for (int64_t t = threadIdx.x; t < K; t += blockDim.x) {
      int64_t p = pos[t];
      idx[row * K + t] = p;
      if (vals) {
        const char *s = in + p * es;
        char *d = vals + (row * K + t) * es;
        for (int b = 0; b < es; b++) d[b] = s[b];
      }
    }
    __syncthreads();
  }
}

/* long rows: tile (row, b) of DPL_CU_SORT_MAX elements sorted into okey / opos (positions in the row) */
__global__ void k_sort_tiles(const char *src, int dt, int desc, int64_t rows, int64_t R, int64_t tiles, uint64_t *okey,
                             int64_t *opos)
{
  __shared__ uint64_t key[DPL_CU_SORT_MAX];
  __shared__ int32_t pos[DPL_CU_SORT_MAX];
  const int es = elsize(dt);
  for (int64_t b = blockIdx.x; b < rows * tiles; b += gridDim.x) {
    int64_t row = b / tiles, t0 = (b % tiles) * DPL_CU_SORT_MAX;
    int64_t len = R - t0 < (int64_t)DPL_CU_SORT_MAX ? R - t0 : (int64_t)DPL_CU_SORT_MAX;
    sort_row(src + (row * R + t0) * es, dt, desc, len, DPL_CU_SORT_MAX, key, pos);
    for (int64_t t = threadIdx.x; t < len; t += blockDim.x) {
      okey[row * R + t0 + t] = key[t];
      opos[row * R + t0 + t] = t0 + pos[t];
    }
    __syncthreads();
  }
}

/* one merge pass over runs of w sorted items within each row: an item at offset j of its run
 * goes to the start of its pair of runs + j + the number of items of the other run before it */
__global__ void k_merge_runs(const uint64_t *ik, const int64_t *ip, uint64_t *ok, int64_t *op, int64_t rows, int64_t R,
                             int64_t w)
{
  DPL_GRID_STRIDE(e, rows * R)
  {
    int64_t row = e / R, i = e - row * R, r = i / w, j = i - r * w;
    int64_t ps = (r ^ 1) * w, base = (r & ~(int64_t)1) * w;
    const uint64_t *kr = ik + row * R;
    const int64_t *pr = ip + row * R;
    uint64_t k = kr[i];
    int64_t p = pr[i], cnt = 0;
    if (ps < R) {
      int64_t lo = ps, hi = ps + w < R ? ps + w : R;
      while (lo < hi) {
        int64_t m = lo + (hi - lo) / 2;
        if (kr[m] < k || (kr[m] == k && pr[m] < p)) lo = m + 1;
        else hi = m;
      }
      cnt = lo - ps;
    }
    ok[row * R + base + j + cnt] = k;
    op[row * R + base + j + cnt] = p;
  }
}

/* the first K of each sorted long row: positions, and values read from the input */
__global__ void k_sorted_out(const char *src, int dt, const int64_t *pos, int64_t rows, int64_t R, int64_t K, char *vals,
                             int64_t *idx)
{
  const int es = elsize(dt);
  DPL_GRID_STRIDE(e, rows * K)
  {
    int64_t row = e / K, t = e - row * K, p = pos[row * R + t];
    idx[e] = p;
    if (vals) {
      const char *s = src + (row * R + p) * es;
      for (int b = 0; b < es; b++) vals[e * es + b] = s[b];
    }
  }
}

/* One selection per row (kind 0: the item of rank r, kthvalue; 1: the lower median, or the
 * first NaN of a row holding one; 2: the mode), as one_row of dpl_tensor_sort.c. After the
 * sort, the NaNs of a floating row are its last keys (~0), in position order. The mode: runs of
 * equal keys (a NaN is a run of one), the longest, the first (smallest value) of equal lengths,
 * at its last position; each thread takes the run ends in its stride and walks back to the run's
 * start, then a tree over (length, -end) picks the block's best. */
__global__ void k_select_rows(const char *src, int dt, int kind, int64_t r, int64_t rows, int64_t R, int P, char *vals,
                              int64_t *idx)
{
  __shared__ uint64_t key[DPL_CU_SORT_MAX];
  __shared__ int32_t pos[DPL_CU_SORT_MAX];
  __shared__ int32_t best_len[kThreads], best_end[kThreads];
  __shared__ int32_t sel;
  const int es = elsize(dt);
  const bool fl = dt == F32 || dt == F64 || dt == F16 || dt == BF16;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const char *in = src + row * R * es;
    sort_row(in, dt, 0, R, P, key, pos);
    if (kind == 0) {
      if (threadIdx.x == 0) sel = (int32_t)r;
    } else if (kind == 1) {
      if (threadIdx.x == 0) sel = (int32_t)((R - 1) / 2);
      __syncthreads();
      if (fl)
        for (int t = threadIdx.x; t < R; t += blockDim.x)
          if (key[t] == ~0ull && (t == 0 || key[t - 1] != ~0ull)) sel = t; /* the first NaN (one thread) */
    } else {
      int32_t bl = 0, be = 0;
      for (int t = threadIdx.x; t < R; t += blockDim.x) {
        bool nan = fl && key[t] == ~0ull;
        if (!nan && t + 1 < R && key[t + 1] == key[t]) continue; /* not the end of its run */
        int s = t;
        if (!nan)
          while (s > 0 && key[s - 1] == key[t]) s--;
        int32_t len = t - s + 1;
        if (len > bl || (len == bl && t < be)) { bl = len; be = t; }
      }
      best_len[threadIdx.x] = bl;
      best_end[threadIdx.x] = be;
      __syncthreads();
      for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) {
          int32_t l2 = best_len[threadIdx.x + h], e2 = best_end[threadIdx.x + h];
          if (l2 > best_len[threadIdx.x] || (l2 == best_len[threadIdx.x] && e2 < best_end[threadIdx.x])) {
            best_len[threadIdx.x] = l2;
            best_end[threadIdx.x] = e2;
          }
        }
        __syncthreads();
      }
      if (threadIdx.x == 0) sel = best_end[0];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t p = pos[sel];
      idx[row] = p;
      const char *s = in + p * es;
      char *d = vals + row * es;
      for (int b = 0; b < es; b++) d[b] = s[b];
    }
    __syncthreads();
  }
}

} // namespace

extern "C" int64_t dpl_cu_sort_scratch(int64_t rows, int64_t R)
{
  return R > DPL_CU_SORT_MAX ? 4 * rows * R * 8 : 0;
}

extern "C" int dpl_cu_sort_rows(const void *src, int32_t dt, int32_t desc, int64_t rows, int64_t R, int64_t K,
                                void *vals, int64_t *idx, void *scratch, cudaStream_t s)
{
  if (rows == 0 || K == 0) return 0;
  if (R > DPL_CU_SORT_MAX) {
    if (!scratch) return (int)cudaErrorInvalidValue;
    int64_t n = rows * R, tiles = (R + DPL_CU_SORT_MAX - 1) / DPL_CU_SORT_MAX;
    uint64_t *k0 = (uint64_t *)scratch, *k1 = k0 + n;
    int64_t *p0 = (int64_t *)(k1 + n), *p1 = p0 + n;
    int64_t nb = rows * tiles;
    k_sort_tiles<<<nb > 65535 * 8 ? 65535 * 8 : (unsigned)nb, kThreads, 0, s>>>((const char *)src, dt, desc, rows, R,
                                                                               tiles, k0, p0);
    int e = (int)cudaGetLastError();
    for (int64_t w = DPL_CU_SORT_MAX; e == 0 && w < R; w *= 2) {
      k_merge_runs<<<grid_for(n), kThreads, 0, s>>>(k0, p0, k1, p1, rows, R, w);
      e = (int)cudaGetLastError();
      uint64_t *tk = k0; k0 = k1; k1 = tk;
      int64_t *tp = p0; p0 = p1; p1 = tp;
    }
    if (e != 0) return e;
    k_sorted_out<<<grid_for(rows * K), kThreads, 0, s>>>((const char *)src, dt, p0, rows, R, K, (char *)vals, idx);
    return (int)cudaGetLastError();
  }
  int P = 1;
  while (P < R) P <<= 1;
  int threads = P / 2 < kThreads ? (P / 2 > 32 ? P / 2 : 32) : kThreads;
  unsigned grid = rows > 65535 * 8 ? 65535 * 8 : (unsigned)rows;
  k_sort_rows<<<grid, threads, 0, s>>>((const char *)src, dt, desc, rows, R, K, P, (char *)vals, idx);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_select_rows(const void *src, int32_t dt, int32_t kind, int64_t r, int64_t rows, int64_t R,
                                  void *vals, int64_t *idx, cudaStream_t s)
{
  if (rows == 0 || R == 0) return 0;
  if (R > DPL_CU_SORT_MAX || kind < 0 || kind > 2 || (kind == 0 && (r < 0 || r >= R))) return (int)cudaErrorInvalidValue;
  int P = 1;
  while (P < R) P <<= 1;
  int threads = P / 2 < kThreads ? (P / 2 > 32 ? P / 2 : 32) : kThreads;
  unsigned grid = rows > 65535 * 8 ? 65535 * 8 : (unsigned)rows;
  k_select_rows<<<grid, threads, 0, s>>>((const char *)src, dt, kind, r, rows, R, P, (char *)vals, idx);
  return (int)cudaGetLastError();
}
