/* dpl_cuda_special.cu: the kernel of the special functions (DPL_BK_SPECIAL): one thread per
 * output element over a broadcast geometry, the input(s) read in their own dtype and layout,
 * the value computed in double by the CPU's formulas (dpl_special_math.h, the one copy of the
 * math) and stored in the output's dtype with the CPU's conversion. */
#include "dpl_cuda_common.cuh"
#include "../tensor/dpl_special_math.h"

using namespace dplcu;

namespace {

/* ops 0 out, 1 a, 2 b (b NULL: a one-argument function, n its order for polygamma) */
__global__ void k_special(dpl_cu_geom g, int32_t op, int64_t n, char *out, int32_t odt, const char *a, int32_t adt,
                          const char *b, int32_t bdt)
{
  const int64_t eo = elsize(odt), ea = elsize(adt), eb = elsize(bdt);
  DPL_GRID_STRIDE(i, g.numel)
  {
    int64_t o[3];
    offsets<3>(g, i, o);
    double x = ld_f64(a + o[1] * ea, adt);
    double r = b ? dpl_sp_eval2(op, x, ld_f64(b + o[2] * eb, bdt)) : dpl_sp_eval1(op, n, x);
    st_f64(out + o[0] * eo, odt, r);
  }
}

} // namespace

extern "C" int dpl_cu_special(const dpl_cu_geom *g, int32_t op, int64_t n, void *out, int32_t odt, const void *a,
                              int32_t adt, const void *b, int32_t bdt, cudaStream_t s)
{
  if (g->numel <= 0) return 0;
  k_special<<<grid_for(g->numel), kThreads, 0, s>>>(*g, op, n, (char *)out, odt, (const char *)a, adt,
                                                    (const char *)b, bdt);
  return (int)cudaGetLastError();
}
