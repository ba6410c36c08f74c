/* dpl_cuda_scan.cu: the scan kernels (cumsum, cumprod, cummax, cummin along a dim,
 * and cumprod's gradient) and their launchers: one thread per line of the scanned
 * dim (outer x inner lines of D elements, contiguous input), walking it in order as
 * the CPU's loops do (dpl_tensor_scan.c): floating dtypes accumulate in double and
 * store the running value rounded to the dtype at each step, integers in int64
 * with wrap-around; cummax/cummin take a NaN, and ties move to the later index.
 * logcumsumexp (op 4, float64 only) is the running log-add-exp of dpl.tensor_extra, and its
 * gradient the reverse recurrence there. The gradient of cumprod is the CPU's formula in float64 (zeros included), its
 * multiply-adds kept apart (no FMA contraction), so results equal the CPU's. */
#include "dpl_cuda_common.cuh"

using namespace dplcu;

namespace {

enum { SUM = 0, PROD = 1, MAX = 2, MIN = 3, LSE = 4 };

/* logcumsumexp's step (lua/dpl/tensor_extra.lua's loop): a NaN takes over, -inf adds nothing */
__device__ __forceinline__ double lse_step(double acc, double v)
{
  if (v != v || acc != acc) return NAN;
  if (acc == -INFINITY) return v;
  if (v == -INFINITY) return acc;
  double hi = acc > v ? acc : v, lo = acc > v ? v : acc;
  if (hi == INFINITY) return INFINITY;
  return __dadd_rn(hi, log(__dadd_rn(1.0, exp(lo - hi))));
}

__global__ void k_scan(int op, int dt, int reverse, const char *src, char *dst, int64_t *idx, int64_t lines, int64_t D,
                       int64_t inner)
{
  const int es = elsize(dt);
  const bool fl = dt == F32 || dt == F64 || dt == F16 || dt == BF16, mx = op == MAX;
  DPL_GRID_STRIDE(t, lines)
  {
    int64_t o = t / inner, i = t - o * inner, base = o * D * inner + i;
    double ad = 0;
    int64_t ai = 0, best = 0;
    for (int64_t s = 0; s < D; s++) {
      int64_t k = reverse ? D - 1 - s : s, off = base + k * inner;
      const char *p = src + off * es;
      char *q = dst + off * es;
      if (fl) {
        double v = ld_f64(p, dt);
        if (op == SUM) ad = s ? __dadd_rn(ad, v) : v;
        else if (op == PROD) ad = s ? __dmul_rn(ad, v) : v;
        else if (op == LSE) ad = s ? lse_step(ad, v) : v;
        else if (s == 0 || v != v || (ad == ad && (mx ? v >= ad : v <= ad))) { ad = v; best = k; }
        st_f64(q, dt, ad);
      } else {
        int64_t v = ld_i64(p, dt);
        if (op == SUM) ai = s ? (int64_t)((uint64_t)ai + (uint64_t)v) : v;
        else if (op == PROD) ai = s ? (int64_t)((uint64_t)ai * (uint64_t)v) : v;
        else if (s == 0 || (mx ? v >= ai : v <= ai)) { ai = v; best = k; }
        st_i64(q, dt, ai);
      }
      if (idx) idx[off] = best;
    }
  }
}

/* per line x[0..D-1] with its first zero at z: k < z: sum_{j >= k} g[j] y[j] / x[k]; k = z:
 * y[z-1] sum_{j >= z} g[j] prod_{z < i <= j} x[i]; k > z: 0 */
__global__ void k_cumprod_bwd(const double *g, const double *x, const double *y, double *r, int64_t lines, int64_t D,
                              int64_t in)
{
  DPL_GRID_STRIDE(sl, lines)
  {
    int64_t base = (sl / in) * D * in + sl % in;
    const double *gg = g + base, *xx = x + base, *yy = y + base;
    double *rr = r + base;
    int64_t z = D;
    for (int64_t k = 0; k < D; k++)
      if (xx[k * in] == 0) { z = k; break; }
    double acc = 0, yz = z > 0 ? yy[(z - 1) * in] : 1;
    for (int64_t k = z - 1; k >= 0; k--) {
      acc = __dadd_rn(acc, __dmul_rn(gg[k * in], yy[k * in]));
      rr[k * in] = acc / xx[k * in];
    }
    if (z < D) {
      double p = 1, s = 0;
      for (int64_t k = z; k < D; k++) {
        if (k > z) p = __dmul_rn(p, xx[k * in]);
        s = __dadd_rn(s, __dmul_rn(gg[k * in], p));
      }
      rr[z * in] = yz * s;
      for (int64_t k = z + 1; k < D; k++) rr[k * in] = 0;
    }
  }
}

/* logcumsumexp's gradient per line (the reverse recurrence of lua/dpl/tensor_extra.lua):
 * B_j = g_j + B_{j+1} exp(o_j - o_{j+1}) (0 when either is -inf), r_j = B_j exp(x_j - o_j) (0 at x_j = -inf) */
__global__ void k_lcse_bwd(const double *g, const double *x, const double *o, double *r, int64_t lines, int64_t D,
                           int64_t in)
{
  DPL_GRID_STRIDE(sl, lines)
  {
    int64_t base = (sl / in) * D * in + sl % in;
    double B = 0;
    for (int64_t j = D - 1; j >= 0; j--) {
      int64_t p = base + j * in;
      if (j < D - 1) {
        double o1 = o[p + in], o0 = o[p];
        B = __dmul_rn(B, (o1 == -INFINITY || o0 == -INFINITY) ? 0.0 : exp(o0 - o1));
      }
      B = __dadd_rn(B, g[p]);
      r[p] = x[p] == -INFINITY ? 0.0 : __dmul_rn(B, exp(x[p] - o[p]));
    }
  }
}

} // namespace

extern "C" int dpl_cu_scan(int32_t op, int32_t dt, int32_t reverse, const void *src, void *dst, int64_t *idx,
                           int64_t lines, int64_t D, int64_t inner, cudaStream_t s)
{
  if (lines == 0 || D == 0) return 0;
  k_scan<<<grid_for(lines), kThreads, 0, s>>>(op, dt, reverse, (const char *)src, (char *)dst, idx, lines, D, inner);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_cumprod_bwd(const double *g, const double *x, const double *y, double *r, int64_t lines,
                                  int64_t D, int64_t inner, cudaStream_t s)
{
  if (lines == 0 || D == 0) return 0;
  k_cumprod_bwd<<<grid_for(lines), kThreads, 0, s>>>(g, x, y, r, lines, D, inner);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_lcse_bwd(const double *g, const double *x, const double *o, double *r, int64_t lines, int64_t D,
                               int64_t inner, cudaStream_t s)
{
  if (lines == 0 || D == 0) return 0;
  k_lcse_bwd<<<grid_for(lines), kThreads, 0, s>>>(g, x, o, r, lines, D, inner);
  return (int)cudaGetLastError();
}
