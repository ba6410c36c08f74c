/* dpl_cuda_compact.c: the backend's data-dependent ops (kernels in dpl_cuda_compact.cu):
 * DPL_BK_NONZERO (sub 0: per-chunk counts and their prefix sums; sub 1: the positions or
 * coordinates of the non-zero elements, into the result the core sized from the total),
 * DPL_BK_SEARCHSORTED (binary searches over float64 rows) and DPL_BK_SCATTER_REDUCE
 * (scatter_reduce / index_reduce / scatter_ with reduce='multiply', folded in the CPU's
 * order). The core checked the arguments (index ranges included) and made the inputs
 * contiguous; nothing here waits for the GPU. */
#include "dpl_cuda_internal.h"

static int need_dev(const char *name, const dpl_tensor *t, int contig)
{
  if (!t || !dpl_is_devmem(t) || (contig && !dpl_is_contig(t)))
    return dpl_errorf(DPL_EINVAL, "%s: expected %sdevice tensors (internal)", name, contig ? "contiguous " : "");
  return DPL_OK;
}

static int op_nonzero(const dpl_bk_args *a, const char *name)
{
  const dpl_tensor *x = a->in[0];
  DPL_TRY(need_dev(name, x, 1));
  int32_t dev = x->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  int64_t n = x->_numel, nb = dpl_cu_nz_blocks(n);
  if (a->sub == 0) {
    if (!a->out[0]) return dpl_errorf(DPL_EINVAL, "%s: no output (internal)", name);
    int64_t len = nb + 1;
    dpl_tensor *off = NULL;
    void *counts = NULL;
    int st = dpl_cu_new(name, DPL_INT64, 1, &len, x, &off);
    if (st == DPL_OK && nb > 0) st = dpl_cu_scratch(dev, nb * 8, &counts);
    if (st == DPL_OK) {
      int e = dpl_cu_nz_count(x->_data, x->_dtype, n, counts, off->_data, d->compute);
      if (e != 0) st = dpl_cu_fail((cudaError_t)e, name, dev);
    }
    if (counts) dpl_cu_scratch_free(dev, counts, nb * 8); /* stream-ordered: after the scan read it */
    return dpl_hand_over(st, 1, (dpl_tensor *[]){off}, a->out);
  }
  const dpl_tensor *off = a->in[1];
  dpl_tensor *r = a->inout;
  DPL_TRY(need_dev(name, off, 1));
  DPL_TRY(need_dev(name, r, 1));
  if (off->_dtype != DPL_INT64 || off->_numel != nb + 1 || r->_dtype != DPL_INT64 || x->_ndim > DPL_CU_MAXDIM)
    return dpl_errorf(DPL_EINVAL, "%s: bad offsets or result (internal)", name);
  dpl_cu_shape sh = {.ndim = a->i[0] ? 0 : x->_ndim};
  for (int32_t k = 0; k < sh.ndim; k++) sh.shape[k] = x->_shape[k];
  if (r->_numel == 0) return DPL_OK;
  DPL_CU_LAUNCH(dpl_cu_nz_write(x->_data, x->_dtype, n, off->_data, &sh, r->_data, d->compute), name, dev);
  return DPL_OK;
}

static int op_search(const dpl_bk_args *a, const char *name)
{
  const dpl_tensor *s = a->in[0], *v = a->in[1];
  dpl_tensor *r = a->inout;
  DPL_TRY(need_dev(name, s, 1));
  DPL_TRY(need_dev(name, v, 1));
  DPL_TRY(need_dev(name, r, 1));
  int64_t R = a->l[0], M = a->l[1];
  if (s->_dtype != DPL_FLOAT64 || v->_dtype != DPL_FLOAT64 || r->_dtype != DPL_INT64 || R < 1 ||
      r->_numel != v->_numel || v->_numel % R != 0 || s->_numel != (R > 1 ? R * M : M))
    return dpl_errorf(DPL_EINVAL, "%s: bad rows or dtypes (internal)", name);
  int32_t dev = r->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  DPL_CU_LAUNCH(dpl_cu_search(s->_data, v->_data, r->_data, R, M, v->_numel / R, a->i[0] != 0, d->compute), name,
                dev);
  return DPL_OK;
}

static int op_scatter_reduce(const dpl_bk_args *a, const char *name)
{
  dpl_tensor *out = a->inout;
  const dpl_tensor *ix = a->in[0], *src = a->in[1];
  DPL_TRY(need_dev(name, out, 0));
  DPL_TRY(need_dev(name, ix, 1));
  DPL_TRY(need_dev(name, src, 1));
  int32_t nd = out->_ndim, dim = a->i[0], red = a->i[1], inc = a->i[2] != 0;
  if (ix->_dtype != DPL_INT64 || src->_dtype != out->_dtype || ix->_ndim != nd || src->_numel != ix->_numel ||
      nd < 1 || nd > DPL_CU_MAXDIM || dim < 0 || dim >= nd || red < 1 || red > 5 ||
      (red == 3 && !dpl_is_contig(out)))
    return dpl_errorf(DPL_EINVAL, "%s: bad operands (internal)", name);
  dpl_cu_sred g = {.ndim = nd, .dim = dim, .numel = ix->_numel};
  for (int32_t k = 0; k < nd; k++) {
    g.ishape[k] = ix->_shape[k];
    g.ostride[k] = out->_stride[k];
  }
  int32_t dev = out->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  if (ix->_numel == 0) return DPL_OK;
  int need_cnt = !inc || red == 3;
  int64_t cb = need_cnt ? out->_numel * 4 : 0;
  void *cnt = NULL;
  if (cb > 0) {
    DPL_TRY(dpl_cu_scratch(dev, cb, &cnt));
    cudaError_t e = cudaMemsetAsync(cnt, 0, (size_t)cb, d->compute);
    if (e != cudaSuccess) {
      dpl_cu_scratch_free(dev, cnt, cb);
      return dpl_cu_fail(e, "cudaMemsetAsync", dev);
    }
  }
  int st = DPL_OK;
  int e = dpl_cu_scatter_reduce(out->_data, out->_dtype, out->_numel, ix->_data, a->l[0], src->_data, cnt, &g, red,
                                inc, a->i[3] != 0, d->compute);
  if (e != 0) st = dpl_cu_fail((cudaError_t)e, name, dev);
  if (cnt) dpl_cu_scratch_free(dev, cnt, cb);
  return st;
}

int dpl_cu_op_compact(const dpl_bk_args *a)
{
  const char *name = a->name ? a->name : dpl_bk_op_name(a->op);
  switch (a->op) {
  case DPL_BK_NONZERO: return op_nonzero(a, name);
  case DPL_BK_SEARCHSORTED: return op_search(a, name);
  default: return op_scatter_reduce(a, name);
  }
}
