/* dpl_cuda_index.cu: the plugin's indexing kernels: index_select and gather
 * (element moves of any dtype), index_add_ and scatter_add_ (atomic adds in a
 * float32/float64/int32/int64 working tensor, or in the uint8/bool tensor
 * itself through word-sized compare-and-swap). Out-of-range indices are
 * skipped and reported through a device flag (the smallest offending position),
 * also when there are no elements to move (dpl_cu_check_index); dpl_cu_bad_value
 * puts the offending index beside it, so the host reads both later. */
#include "dpl_cuda_common.cuh"

using namespace dplcu;

namespace {

template <typename W>
__global__ void k_index_select(int64_t outer, int64_t D, int64_t inner, int64_t n, const int64_t *ix, const W *src,
                               W *dst, unsigned long long *bad)
{
  DPL_GRID_STRIDE(e, outer * n * inner)
  {
    int64_t o = e / (n * inner), q = e - o * n * inner, j = q / inner, in = q - j * inner;
    int64_t r = ix[j];
    if (r < 0 || r >= D) { atomicMin(bad, (unsigned long long)j); continue; }
    dst[e] = src[(o * D + r) * inner + in];
  }
}

__device__ __forceinline__ void add_at(float *p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void add_at(double *p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void add_at(int32_t *p, int32_t v) { atomicAdd((int *)p, (int)v); }
__device__ __forceinline__ void add_at(int64_t *p, int64_t v)
{
  atomicAdd((unsigned long long *)p, (unsigned long long)v); /* two's complement: wraps like the CPU */
}

/* uint8 and bool have no byte atomics: a compare-and-swap loop on the aligned
 * 32-bit word that holds the byte, changing only that byte (the caching
 * allocator's blocks are cudaMalloc'ed, at least 512 bytes and a multiple of 4,
 * so the word lies inside the allocation; the other three bytes are written
 * back as read). The result does not depend on the order of the updates: uint8
 * adds wrap modulo 256 like the CPU's store of (uint8_t)(a + b), and bool is
 * the CPU's (a + b) != 0, i.e. a logical or that also turns a stored byte other
 * than 0/1 into 1. */
struct bool8 {
  uint8_t v;
};

template <typename F>
__device__ __forceinline__ void byte_update(uint8_t *p, F f)
{
  const uintptr_t addr = (uintptr_t)p;
  unsigned int *w = (unsigned int *)(addr & ~(uintptr_t)3);
  const unsigned int sh = (unsigned int)(addr & 3) * 8u;
  unsigned int old = *(volatile unsigned int *)w, assumed;
  do {
    assumed = old;
    const unsigned int cur = (assumed >> sh) & 0xffu, nb = f(cur) & 0xffu;
    if (nb == cur) break; /* nothing to write (bool: bytes only ever become 1, so a stale read cannot mislead) */
    old = atomicCAS(w, assumed, (assumed & ~(0xffu << sh)) | (nb << sh));
  } while (old != assumed);
}

struct add_u8 {
  unsigned int v;
  __device__ unsigned int operator()(unsigned int cur) const { return cur + v; }
};
struct or_bool {
  unsigned int v;
  __device__ unsigned int operator()(unsigned int cur) const { return (cur != 0 || v != 0) ? 1u : 0u; }
};
__device__ __forceinline__ void add_at(uint8_t *p, uint8_t v) { byte_update(p, add_u8{v}); }
__device__ __forceinline__ void add_at(bool8 *p, bool8 v) { byte_update(&p->v, or_bool{v.v}); }

template <typename T>
__global__ void k_index_add(int64_t outer, int64_t D, int64_t inner, int64_t n, const int64_t *ix, const T *src, T *dst,
                            unsigned long long *bad)
{
  DPL_GRID_STRIDE(e, outer * n * inner)
  {
    int64_t o = e / (n * inner), q = e - o * n * inner, j = q / inner, in = q - j * inner;
    int64_t r = ix[j];
    if (r < 0 || r >= D) { atomicMin(bad, (unsigned long long)j); continue; }
    add_at(dst + (o * D + r) * inner + in, src[e]);
  }
}

/* offsets of idx position k (idx contiguous of shape g.shape) in a (strides g.astride, dim replaced by r) and src */
__device__ __forceinline__ void gs_offsets(const dpl_cu_index &g, int64_t k, int64_t r, int64_t *ao, int64_t *so)
{
  int64_t a = 0, s = 0;
  for (int d = g.ndim - 1; d >= 0; d--) {
    int64_t c = k % g.shape[d];
    k /= g.shape[d];
    a += (d == g.dim ? r : c) * g.astride[d];
    s += c * g.sstride[d];
  }
  *ao = a;
  *so = s;
}

template <typename W>
__global__ void k_gather(dpl_cu_index g, const int64_t *ix, const W *a, W *out, unsigned long long *bad)
{
  DPL_GRID_STRIDE(k, g.n)
  {
    int64_t r = ix[k];
    if (r < 0 || r >= g.bound) { atomicMin(bad, (unsigned long long)k); continue; }
    int64_t ao, so;
    gs_offsets(g, k, r, &ao, &so);
    out[k] = a[ao];
  }
}

template <typename T>
__global__ void k_scatter_add(dpl_cu_index g, const int64_t *ix, const T *src, T *a, unsigned long long *bad)
{
  DPL_GRID_STRIDE(k, g.n)
  {
    int64_t r = ix[k];
    if (r < 0 || r >= g.bound) { atomicMin(bad, (unsigned long long)k); continue; }
    int64_t ao, so;
    gs_offsets(g, k, r, &ao, &so);
    add_at(a + ao, src[so]);
  }
}

/* only the indices: for empty rows (no element to move, the indices are still checked, as on the CPU) */
__global__ void k_check_index(const int64_t *ix, int64_t n, int64_t D, unsigned long long *bad)
{
  DPL_GRID_STRIDE(j, n)
  {
    int64_t r = ix[j];
    if (r < 0 || r >= D) atomicMin(bad, (unsigned long long)j);
  }
}

/* flag[1] = ix[flag[0]] when an index check found a bad position */
__global__ void k_bad_value(unsigned long long *flag, const int64_t *ix)
{
  unsigned long long j = flag[0];
  if (threadIdx.x == 0 && j != ~0ULL) flag[1] = (unsigned long long)ix[j];
}

/* index_store: the last row b of each offset (the CPU's sequential order) wins: win[slot] = max b + 1 */
__global__ void k_store_win(int64_t n, const int64_t *off, int64_t *win, int64_t div)
{
  DPL_GRID_STRIDE(b, n)
  {
    atomicMax((unsigned long long *)&win[off[b] / div], (unsigned long long)(b + 1));
  }
}

template <typename W>
__global__ void k_store_rows(int64_t n, int64_t inner, const int64_t *off, const W *src, int64_t sstep,
                             int64_t dstride, W *dst, const int64_t *win, int64_t div)
{
  DPL_GRID_STRIDE(e, n * inner)
  {
    int64_t b = e / inner, j = e - b * inner, o = off[b];
    if (win && win[o / div] != b + 1) continue;
    dst[o + j * dstride] = src[e * sstep];
  }
}

} // namespace

extern "C" int dpl_cu_index_store(int32_t es, int64_t n, int64_t inner, const int64_t *off, const void *src,
                                  int64_t sstep, int64_t dstride, void *dst, int64_t *win, int64_t slots, int64_t div,
                                  cudaStream_t s)
{
  if (n <= 0 || inner <= 0) return 0;
  if (win) {
    cudaError_t e = cudaMemsetAsync(win, 0, (size_t)slots * sizeof(int64_t), s);
    if (e != cudaSuccess) return (int)e;
    k_store_win<<<grid_for(n), kThreads, 0, s>>>(n, off, win, div);
  }
  unsigned grid = grid_for(n * inner);
  switch (es) {
  case 1: k_store_rows<uint8_t><<<grid, kThreads, 0, s>>>(n, inner, off, (const uint8_t *)src, sstep, dstride, (uint8_t *)dst, win, div); break;
  case 2: k_store_rows<uint16_t><<<grid, kThreads, 0, s>>>(n, inner, off, (const uint16_t *)src, sstep, dstride, (uint16_t *)dst, win, div); break;
  case 4: k_store_rows<uint32_t><<<grid, kThreads, 0, s>>>(n, inner, off, (const uint32_t *)src, sstep, dstride, (uint32_t *)dst, win, div); break;
  default: k_store_rows<uint64_t><<<grid, kThreads, 0, s>>>(n, inner, off, (const uint64_t *)src, sstep, dstride, (uint64_t *)dst, win, div); break;
  }
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_bad_value(unsigned long long *flag, const int64_t *ix, cudaStream_t s)
{
  k_bad_value<<<1, 1, 0, s>>>(flag, ix);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_check_index(const int64_t *ix, int64_t n, int64_t D, unsigned long long *bad, cudaStream_t s)
{
  if (n <= 0) return 0;
  k_check_index<<<grid_for(n), kThreads, 0, s>>>(ix, n, D, bad);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_index_select(int32_t es, int64_t outer, int64_t D, int64_t inner, int64_t n, const int64_t *ix,
                                   const void *src, void *dst, unsigned long long *bad, cudaStream_t s)
{
  int64_t total = outer * n * inner;
  if (total == 0) return dpl_cu_check_index(ix, n, D, bad, s);
  unsigned grid = grid_for(total);
  switch (es) {
  case 1: k_index_select<uint8_t><<<grid, kThreads, 0, s>>>(outer, D, inner, n, ix, (const uint8_t *)src, (uint8_t *)dst, bad); break;
  case 2: k_index_select<uint16_t><<<grid, kThreads, 0, s>>>(outer, D, inner, n, ix, (const uint16_t *)src, (uint16_t *)dst, bad); break;
  case 4: k_index_select<uint32_t><<<grid, kThreads, 0, s>>>(outer, D, inner, n, ix, (const uint32_t *)src, (uint32_t *)dst, bad); break;
  default: k_index_select<uint64_t><<<grid, kThreads, 0, s>>>(outer, D, inner, n, ix, (const uint64_t *)src, (uint64_t *)dst, bad); break;
  }
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_index_add(int32_t kd, int64_t outer, int64_t D, int64_t inner, int64_t n, const int64_t *ix,
                                const void *src, void *dst, unsigned long long *bad, cudaStream_t s)
{
  int64_t total = outer * n * inner;
  if (total == 0) return dpl_cu_check_index(ix, n, D, bad, s);
  unsigned grid = grid_for(total);
  switch (kd) {
  case F32: k_index_add<float><<<grid, kThreads, 0, s>>>(outer, D, inner, n, ix, (const float *)src, (float *)dst, bad); break;
  case F64: k_index_add<double><<<grid, kThreads, 0, s>>>(outer, D, inner, n, ix, (const double *)src, (double *)dst, bad); break;
  case I32: k_index_add<int32_t><<<grid, kThreads, 0, s>>>(outer, D, inner, n, ix, (const int32_t *)src, (int32_t *)dst, bad); break;
  case U8: k_index_add<uint8_t><<<grid, kThreads, 0, s>>>(outer, D, inner, n, ix, (const uint8_t *)src, (uint8_t *)dst, bad); break;
  case BOOL: k_index_add<bool8><<<grid, kThreads, 0, s>>>(outer, D, inner, n, ix, (const bool8 *)src, (bool8 *)dst, bad); break;
  default: k_index_add<int64_t><<<grid, kThreads, 0, s>>>(outer, D, inner, n, ix, (const int64_t *)src, (int64_t *)dst, bad); break;
  }
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_gather(int32_t es, const dpl_cu_index *g, const int64_t *ix, const void *a, void *out,
                             unsigned long long *bad, cudaStream_t s)
{
  if (g->n == 0) return 0;
  unsigned grid = grid_for(g->n);
  switch (es) {
  case 1: k_gather<uint8_t><<<grid, kThreads, 0, s>>>(*g, ix, (const uint8_t *)a, (uint8_t *)out, bad); break;
  case 2: k_gather<uint16_t><<<grid, kThreads, 0, s>>>(*g, ix, (const uint16_t *)a, (uint16_t *)out, bad); break;
  case 4: k_gather<uint32_t><<<grid, kThreads, 0, s>>>(*g, ix, (const uint32_t *)a, (uint32_t *)out, bad); break;
  default: k_gather<uint64_t><<<grid, kThreads, 0, s>>>(*g, ix, (const uint64_t *)a, (uint64_t *)out, bad); break;
  }
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_scatter_add(int32_t kd, const dpl_cu_index *g, const int64_t *ix, const void *src, void *a,
                                  unsigned long long *bad, cudaStream_t s)
{
  if (g->n == 0) return 0;
  unsigned grid = grid_for(g->n);
  switch (kd) {
  case F32: k_scatter_add<float><<<grid, kThreads, 0, s>>>(*g, ix, (const float *)src, (float *)a, bad); break;
  case F64: k_scatter_add<double><<<grid, kThreads, 0, s>>>(*g, ix, (const double *)src, (double *)a, bad); break;
  case I32: k_scatter_add<int32_t><<<grid, kThreads, 0, s>>>(*g, ix, (const int32_t *)src, (int32_t *)a, bad); break;
  case U8: k_scatter_add<uint8_t><<<grid, kThreads, 0, s>>>(*g, ix, (const uint8_t *)src, (uint8_t *)a, bad); break;
  case BOOL: k_scatter_add<bool8><<<grid, kThreads, 0, s>>>(*g, ix, (const bool8 *)src, (bool8 *)a, bad); break;
  default: k_scatter_add<int64_t><<<grid, kThreads, 0, s>>>(*g, ix, (const int64_t *)src, (int64_t *)a, bad); break;
  }
  return (int)cudaGetLastError();
}
