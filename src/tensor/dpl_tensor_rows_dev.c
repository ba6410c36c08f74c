/* dpl_tensor_rows_dev.c: the device halves of ops that Lua composes and runs on the CPU in
 * its own loops (lua/dpl/tensor_extra.lua, tensor_more.lua): searchsorted's binary searches,
 * logcumsumexp and its gradient, and scatter_reduce / index_reduce's folds. Each entry point
 * takes tensors in GPU memory only and hands them to the backend (DPL_BK_SEARCHSORTED,
 * DPL_BK_SCAN with DPL_SCAN_LOGSUMEXP, DPL_BK_CUMPROD_BWD sub 1, DPL_BK_SCATTER_REDUCE),
 * whose kernels compute what the Lua loops compute, in their order. scatter_reduce checks
 * its index on a host copy first (one wait for the GPU), so that a bad index raises the CPU
 * path's message at the op and the kernel never writes out of bounds. */
#include "dpl_tensor_internal.h"
#include <stdio.h>

static int need_dev(const char *name, const char *what, const dpl_tensor *t)
{
  DPL_TRY(dpl_check_handle(name, what, t));
  if (!dpl_is_devmem(t))
    return dpl_errorf(DPL_EINVAL, "%s: %s must be a GPU tensor (CPU tensors take the Lua loops)", name, what);
  return DPL_OK;
}

static int need_f64_contig(const char *name, const char *what, const dpl_tensor *t)
{
  DPL_TRY(need_dev(name, what, t));
  if (t->_dtype != DPL_FLOAT64 || !dpl_is_contig(t))
    return dpl_errorf(DPL_EINVAL, "%s: %s must be a contiguous float64 tensor, got %s", name, what,
                      dpl_dtype_name(t->_dtype));
  return DPL_OK;
}

int dpl_search_rows(const dpl_tensor *s, const dpl_tensor *v, int32_t right, int64_t rows, dpl_tensor *out)
{
  const char *name = "searchsorted";
  DPL_TRY(need_f64_contig(name, "sorted_sequence", s));
  DPL_TRY(need_f64_contig(name, "values", v));
  DPL_TRY(need_dev(name, "out", out));
  DPL_TRY(dpl_check_same_device(name, s, v));
  DPL_TRY(dpl_check_same_device(name, s, out));
  if (out->_dtype != DPL_INT64 || !dpl_is_contig(out) || out->_numel != v->_numel)
    return dpl_errorf(DPL_EINVAL, "%s: out must be a contiguous int64 tensor of values' size", name);
  if (rows < 1 || v->_numel % rows != 0 || (rows > 1 && s->_numel % rows != 0))
    return dpl_errorf(DPL_EINVAL, "%s: %lld rows do not divide the sequence and the values", name, (long long)rows);
  if (v->_numel == 0) return DPL_OK;
  int64_t M = rows > 1 ? s->_numel / rows : s->_numel;
  dpl_bk_args k = {.op = DPL_BK_SEARCHSORTED, .in = {s, v}, .inout = out, .i = {right != 0}, .l = {rows, M},
                   .name = name};
  return dpl_bk_call(&k);
}

/* the rows' length: the last dim (a 0-d tensor: one row of one) */
static void rows_of(const dpl_tensor *x, int64_t *D)
{
  *D = x->_ndim > 0 ? x->_shape[x->_ndim - 1] : 1;
}

int dpl_logcumsumexp_rows(const dpl_tensor *x, dpl_tensor **out)
{
  const char *name = "logcumsumexp";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(need_f64_contig(name, "input", x));
  int64_t D;
  rows_of(x, &D);
  dpl_bk_args k = {.op = DPL_BK_SCAN, .sub = DPL_SCAN_LOGSUMEXP, .l = {D, 1}, .in = {x}, .out = {out, NULL},
                   .name = name};
  return dpl_bk_call(&k);
}

int dpl_logcumsumexp_grad_rows(const dpl_tensor *g, const dpl_tensor *x, const dpl_tensor *o, dpl_tensor **out)
{
  const char *name = "logcumsumexp_backward";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(need_f64_contig(name, "grad", g));
  DPL_TRY(need_f64_contig(name, "input", x));
  DPL_TRY(need_f64_contig(name, "result", o));
  DPL_TRY(dpl_check_same_device(name, g, x));
  DPL_TRY(dpl_check_same_device(name, g, o));
  if (!dpl_same_shape(g, x) || !dpl_same_shape(o, x))
    return dpl_errorf(DPL_EINVAL, "%s: grad, input and result must have one shape", name);
  int64_t D;
  rows_of(x, &D);
  dpl_bk_args k = {.op = DPL_BK_CUMPROD_BWD, .sub = 1, .l = {D, 1}, .in = {g, x, o}, .out = {out}, .name = name};
  return dpl_bk_call(&k);
}

/* out's ndim and index's checked, the index read on the host: every value in base..base+size-1
 * along dim (the CPU path's message for the first one that is not, in row-major order) */
int dpl_scatter_reduce_run(const char *name, dpl_tensor *out, int32_t dim, const dpl_tensor *index,
                           const dpl_tensor *src, int32_t red, int32_t include_self, int32_t is_bool, int64_t base)
{
  if (index->_dtype != DPL_INT64 || !dpl_is_contig(index) || !dpl_is_contig(src) || src->_dtype != out->_dtype ||
      src->_numel != index->_numel || index->_ndim != (out->_ndim > 0 ? out->_ndim : 1) ||
      (out->_ndim > 0 && (dim < 0 || dim >= out->_ndim)) || red < 1 || red > 5 || (red == 3 && !dpl_is_contig(out)))
    return dpl_errorf(DPL_EINVAL, "%s: expected a contiguous int64 index and a contiguous src of self's dtype, with "
                      "self's dims, and a reduction 1..5", name);
  int64_t dsize = out->_ndim > 0 ? out->_shape[dim] : 1;
  for (int32_t k = 0; k < out->_ndim; k++)
    if (k != dim && index->_shape[k] > out->_shape[k])
      return dpl_errorf(DPL_EINVAL, "%s: index is larger than self in dim %d", name, (int)k + 1);
  if (index->_numel == 0) return DPL_OK;
  dpl_tensor *hi = NULL, *o1 = NULL;
  DPL_TRY(dpl_tensor_to(index, DPL_INT64, DPL_DEVICE_CPU, 0, &hi));
  const int64_t *ip = hi->_data;
  int st = DPL_OK;
  for (int64_t p = 0; p < hi->_numel; p++)
    if (ip[p] < base || ip[p] > base + dsize - 1) {
      st = dpl_errorf(DPL_EINVAL, "%s: index %lld is out of range for dim %d of size %lld (expected %lld..%lld)", name,
                      (long long)ip[p], (int)dim + 1, (long long)dsize, (long long)base,
                      (long long)(base + dsize - 1));
      break;
    }
  dpl_tensor_release(hi);
  if (st != DPL_OK) return st;
  dpl_tensor *target = out;
  if (out->_ndim == 0) { /* one element: a 1-d view */
    int64_t one = 1, unit = 1;
    DPL_TRY(dpl_make_view(out, 1, &one, &unit, out->_offset, &o1));
    target = o1;
    dim = 0;
  }
  dpl_bk_args k = {.op = DPL_BK_SCATTER_REDUCE, .inout = target, .in = {index, src},
                   .i = {dim, red, include_self != 0, is_bool != 0}, .l = {base}, .name = name};
  st = dpl_bk_call(&k);
  dpl_tensor_release(o1);
  return st;
}

int dpl_scatter_reduce_dev(dpl_tensor *out, int32_t dim, const dpl_tensor *index, const dpl_tensor *src, int32_t red,
                           int32_t include_self, int32_t is_bool, const char *name)
{
  if (!name) name = "scatter_reduce";
  DPL_TRY(need_dev(name, "self", out));
  DPL_TRY(need_dev(name, "index", index));
  DPL_TRY(need_dev(name, "src", src));
  DPL_TRY(dpl_check_same_device(name, out, index));
  DPL_TRY(dpl_check_same_device(name, out, src));
  DPL_TRY(dpl_check_writable(name, "", out));
  return dpl_scatter_reduce_run(name, out, dim, index, src, red, include_self, is_bool, 1);
}
