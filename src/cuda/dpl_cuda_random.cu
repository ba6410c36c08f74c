/* dpl_cuda_random.cu: the counter-based generator on the GPU: Philox 4x32-10
 * and the uniform/normal/randint/bernoulli formulas of dpl_tensor_random.c,
 * element i drawing counter start + i under the seed, so a seed gives the
 * same numbers on the CPU and on the GPU. */
#include "dpl_cuda_common.cuh"
#include <math.h>

using namespace dplcu;

namespace {

__device__ __forceinline__ void philox(uint64_t key, uint64_t ctr, uint32_t out[4])
{
  uint32_t c0 = (uint32_t)ctr, c1 = (uint32_t)(ctr >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
#pragma unroll
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

enum { R_UNIFORM = 0, R_NORMAL = 1, R_RANDINT = 2 };

__global__ void k_rng(char *dst, int dt, int64_t n, int kind, uint64_t key, uint64_t start, double a, double b,
                      int64_t ia, int64_t range)
{
  int es = elsize(dt);
  DPL_GRID_STRIDE(i, n)
  {
    uint32_t u[4];
    philox(key, start + (uint64_t)i, u);
    char *p = dst + i * es;
    if (kind == R_UNIFORM) {
      if (dt == F32) {
        float f = (float)(u[0] >> 8) * (1.0f / 16777216.0f);
        float v = __fadd_rn((float)a, __fmul_rn(f, (float)(b - a))); /* no FMA contraction: the CPU rounds twice */
        if (v >= (float)b && b > a) v = nextafterf((float)b, (float)a);
        *(float *)p = v;
      } else {
        double f = (double)(((uint64_t)u[0] << 21) ^ (u[1] >> 11)) * (1.0 / 9007199254740992.0);
        st_f64(p, dt, __dadd_rn(a, __dmul_rn(f, b - a)));
      }
    } else if (kind == R_NORMAL) {
      double u1 = ((double)u[0] + 1.0) * (1.0 / 4294967296.0);
      double u2 = (double)u[1] * (1.0 / 4294967296.0);
      double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
      double v = __dadd_rn(a, __dmul_rn(b, z));
      if (dt == F32) *(float *)p = (float)v;
      else st_f64(p, dt, v);
    } else if (kind == R_RANDINT) {
      uint64_t r = ((uint64_t)u[0] << 32) | u[1];
      st_i64(p, dt, ia + (int64_t)(r % (uint64_t)range));
    } else {
      double f = (double)(u[0] >> 8) * (1.0 / 16777216.0);
      st_f64(p, dt, f < a ? 1.0 : 0.0);
    }
  }
}

} // namespace

extern "C" int dpl_cu_rng(void *dst, int32_t dt, int64_t n, int32_t kind, uint64_t key, uint64_t start, double a,
                          double b, int64_t ia, int64_t range, cudaStream_t s)
{
  if (n == 0) return 0;
  k_rng<<<grid_for(n), kThreads, 0, s>>>((char *)dst, dt, n, kind, key, start, a, b, ia, range);
  return (int)cudaGetLastError();
}
