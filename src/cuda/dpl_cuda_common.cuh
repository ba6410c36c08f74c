/* dpl_cuda_common.cuh: device-side helpers shared by the plugin's .cu files:
 * dtype ids, half/bfloat16 bit conversions, load/store of any dtype as
 * double/int64 with the CPU's conversion rules (dpl_tensor_internal.h), the
 * strided-offset computation over a dpl_cu_geom, and the launch shape. */
#ifndef DPL_CUDA_COMMON_CUH
#define DPL_CUDA_COMMON_CUH
#include "dpl_cuda_kernels.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace dplcu {

enum { F32 = 0, F64 = 1, F16 = 2, BF16 = 3, I32 = 4, I64 = 5, U8 = 6, BOOL = 7 };

__device__ __forceinline__ float h2f(uint16_t h)
{
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
}
__device__ __forceinline__ uint16_t f2h(float f)
{
  __half_raw r = __half_raw(__float2half_rn(f));
  return r.x;
}
__device__ __forceinline__ float bf2f(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }
__device__ __forceinline__ uint16_t f2bf(float x)
{
  uint32_t f = __float_as_uint(x);
  if ((f & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((f >> 16) | 0x40u);
  f += 0x7fffu + ((f >> 16) & 1);
  return (uint16_t)(f >> 16);
}
__device__ __forceinline__ int64_t d2i64(double v)
{
  if (!(v == v)) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}
__device__ __forceinline__ int32_t d2i32(double v)
{
  if (!(v == v)) return 0;
  if (v >= 2147483647.0) return INT32_MAX;
  if (v <= -2147483648.0) return INT32_MIN;
  return (int32_t)v;
}
__device__ __forceinline__ double ld_f64(const void *p, int dt)
{
  switch (dt) {
  case F32: return *(const float *)p;
  case F64: return *(const double *)p;
  case F16: return h2f(*(const uint16_t *)p);
  case BF16: return bf2f(*(const uint16_t *)p);
  case I32: return *(const int32_t *)p;
  case I64: return (double)*(const int64_t *)p;
  case U8: return *(const uint8_t *)p;
  default: return *(const uint8_t *)p ? 1.0 : 0.0;
  }
}
__device__ __forceinline__ int64_t ld_i64(const void *p, int dt)
{
  switch (dt) {
  case I32: return *(const int32_t *)p;
  case I64: return *(const int64_t *)p;
  case U8: return *(const uint8_t *)p;
  case BOOL: return *(const uint8_t *)p ? 1 : 0;
  default: return d2i64(ld_f64(p, dt));
  }
}
__device__ __forceinline__ void st_f64(void *p, int dt, double v)
{
  switch (dt) {
  case F32: *(float *)p = (float)v; break;
  case F64: *(double *)p = v; break;
  case F16: *(uint16_t *)p = f2h((float)v); break;
  case BF16: *(uint16_t *)p = f2bf((float)v); break;
  case I32: *(int32_t *)p = d2i32(v); break;
  case I64: *(int64_t *)p = d2i64(v); break;
  case U8: *(uint8_t *)p = (uint8_t)(d2i64(v) & 0xff); break;
  default: *(uint8_t *)p = v != 0; break;
  }
}
__device__ __forceinline__ void st_i64(void *p, int dt, int64_t v)
{
  switch (dt) {
  case I32: *(int32_t *)p = (int32_t)v; break;
  case I64: *(int64_t *)p = v; break;
  case U8: *(uint8_t *)p = (uint8_t)v; break;
  case BOOL: *(uint8_t *)p = v != 0; break;
  default: st_f64(p, dt, (double)v); break;
  }
}
__host__ __device__ __forceinline__ int elsize(int dt)
{
  return dt == F64 || dt == I64 ? 8 : dt == F32 || dt == I32 ? 4 : dt == F16 || dt == BF16 ? 2 : 1;
}

/* element offsets (in elements) of linear position i for the first N operands */
template <int N>
__device__ __forceinline__ void offsets(const dpl_cu_geom &g, int64_t i, int64_t *o)
{
#pragma unroll
  for (int k = 0; k < N; k++) o[k] = 0;
  for (int d = g.ndim - 1; d >= 0; d--) {
    int64_t sz = g.shape[d], q = i / sz, r = i - q * sz;
    i = q;
#pragma unroll
    for (int k = 0; k < N; k++) o[k] += r * g.stride[k][d];
  }
}

/* 1 when the first n operands are all contiguous over the geometry */
static inline bool geom_contig(const dpl_cu_geom *g, int n)
{
  if (g->ndim > 1) return false;
  if (g->ndim == 0) return true;
  for (int k = 0; k < n; k++)
    if (g->stride[k][0] != 1) return false;
  return true;
}

static const int kThreads = 256;
static inline unsigned grid_for(int64_t n)
{
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b > 65535 * 8) b = 65535 * 8; /* grid-stride loops cover the rest */
  return (unsigned)(b > 0 ? b : 1);
}

#define DPL_GRID_STRIDE(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

} // namespace dplcu
#endif
