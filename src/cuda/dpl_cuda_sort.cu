/* dpl_cuda_sort.cu: sort / argsort / topk, and the selections kthvalue / median(dim) /
 * mode, of contiguous rows on the GPU: one block per row, a bitonic sort in shared
 * memory of (key, position) pairs for rows of up to DPL_CU_SORT_MAX elements. The keys are the CPU's order-preserving 64-bit keys
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

extern "C" int dpl_cu_sort_rows(const void *src, int32_t dt, int32_t desc, int64_t rows, int64_t R, int64_t K,
                                void *vals, int64_t *idx, cudaStream_t s)
{
  if (rows == 0 || K == 0) return 0;
  if (R > DPL_CU_SORT_MAX) return (int)cudaErrorInvalidValue;
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
