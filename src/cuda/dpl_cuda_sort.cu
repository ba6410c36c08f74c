/* dpl_cuda_sort.cu: sort / argsort / topk of contiguous rows on the GPU: one block per
 * row, a bitonic sort in shared memory of (key, position) pairs for rows of up to
 * DPL_CU_SORT_MAX elements. The keys are the CPU's order-preserving 64-bit keys
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

__global__ void k_sort_rows(const char *src, int dt, int desc, int64_t rows, int64_t R, int64_t K, int P, char *vals,
                            int64_t *idx)
{
  __shared__ uint64_t key[DPL_CU_SORT_MAX];
  __shared__ int32_t pos[DPL_CU_SORT_MAX];
  const int es = elsize(dt);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const char *in = src + row * R * es;
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
