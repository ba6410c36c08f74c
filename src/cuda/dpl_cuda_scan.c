/* dpl_cuda_scan.c: the backend's scans (DPL_BK_SCAN: cumsum, cumprod, cummax,
 * cummin, logcumsumexp), cumprod's gradient (DPL_BK_CUMPROD_BWD; sub 1: logcumsumexp's), sort (DPL_BK_SORT: sort,
 * argsort, topk) and the selections (DPL_BK_SELECT: kthvalue, median, mode): the
 * core checked the arguments and made the inputs contiguous
 * in the result's dtype (float64 for the gradient; rows with the sorted dim last,
 * dpl_tensor_scan.c, dpl_tensor_sort.c); here the results are allocated and the
 * kernels of dpl_cuda_scan.cu / dpl_cuda_sort.cu launched on the compute stream. */
#include "dpl_cuda_internal.h"

int dpl_cu_op_scan(const dpl_bk_args *a)
{
  const char *name = a->name ? a->name : dpl_bk_op_name(a->op);
  int nin = a->op == DPL_BK_SCAN ? 1 : 3;
  for (int k = 0; k < nin; k++)
    if (!a->in[k] || !dpl_is_devmem(a->in[k]) || !dpl_is_contig(a->in[k]))
      return dpl_errorf(DPL_EINVAL, "%s: expected contiguous device inputs (internal)", name);
  const dpl_tensor *x = a->in[0];
  int32_t dev = x->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  int64_t D = a->l[0], inner = a->l[1], lines = D > 0 && inner > 0 ? x->_numel / D : 0;
  if (a->op == DPL_BK_SCAN) {
    if (a->sub == DPL_SCAN_LOGSUMEXP && x->_dtype != DPL_FLOAT64)
      return dpl_errorf(DPL_EINVAL, "%s: expected a float64 input (internal)", name);
    int want_idx = a->out[1] != NULL;
    dpl_tensor *v = NULL, *ix = NULL;
    int st = dpl_cu_new(name, x->_dtype, x->_ndim, x->_shape, x, &v);
    if (st == DPL_OK && want_idx) st = dpl_cu_new(name, DPL_INT64, x->_ndim, x->_shape, x, &ix);
    if (st == DPL_OK) {
      int e = dpl_cu_scan(a->sub, x->_dtype, a->i[0], x->_data, v->_data, ix ? (int64_t *)ix->_data : NULL, lines, D,
                          inner, d->compute);
      if (e != 0) st = dpl_cu_fail((cudaError_t)e, name, dev);
    }
    return dpl_hand_over(st, 2, (dpl_tensor *[]){v, ix}, a->out);
  }
  if (x->_dtype != DPL_FLOAT64 || a->in[1]->_dtype != DPL_FLOAT64 || a->in[2]->_dtype != DPL_FLOAT64)
    return dpl_errorf(DPL_EINVAL, "%s: expected float64 inputs (internal)", name);
  dpl_tensor *r = NULL;
  int st = dpl_cu_new(name, DPL_FLOAT64, x->_ndim, x->_shape, x, &r);
  if (st == DPL_OK) {
    int e = a->sub == 1 ? dpl_cu_lcse_bwd(x->_data, a->in[1]->_data, a->in[2]->_data, r->_data, lines, D, inner,
                                          d->compute) /* logcumsumexp's */
                        : dpl_cu_cumprod_bwd(x->_data, a->in[1]->_data, a->in[2]->_data, r->_data, lines, D, inner,
                                             d->compute);
    if (e != 0) st = dpl_cu_fail((cudaError_t)e, name, dev);
  }
  return dpl_hand_over(st, 1, (dpl_tensor *[]){r}, a->out);
}

/* DPL_BK_SORT: the first K of each contiguous row of in[0] (its last dim) in the CPU's order */
int dpl_cu_op_sort(const dpl_bk_args *a)
{
  const char *name = a->name ? a->name : dpl_bk_op_name(a->op);
  const dpl_tensor *x = a->in[0];
  if (!x || !dpl_is_devmem(x) || !dpl_is_contig(x) || x->_ndim < 1)
    return dpl_errorf(DPL_EINVAL, "%s: expected a contiguous device input of at least 1 dim (internal)", name);
  int32_t nd = x->_ndim, dev = x->_devindex;
  int64_t R = x->_shape[nd - 1], K = a->l[0], rows = R > 0 ? x->_numel / R : 0;
  if (K < 0 || K > R)
    return dpl_errorf(DPL_EINVAL, "%s: rows of %lld, k %lld: past the kernel's limits (internal)", name, (long long)R,
                      (long long)K);
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  int64_t shape[DPL_MAX_DIMS];
  for (int32_t i = 0; i < nd; i++) shape[i] = i == nd - 1 ? K : x->_shape[i];
  dpl_tensor *v = NULL, *ix = NULL;
  int st = a->out[0] ? dpl_cu_new(name, x->_dtype, nd, shape, x, &v) : DPL_OK;
  if (st == DPL_OK) st = dpl_cu_new(name, DPL_INT64, nd, shape, x, &ix);
  int64_t sb = K > 0 ? dpl_cu_sort_scratch(rows, R) : 0; /* rows past DPL_CU_SORT_MAX: tiles, then merges */
  void *scratch = NULL;
  if (st == DPL_OK && sb > 0) st = dpl_cu_scratch(dev, sb, &scratch);
  if (st == DPL_OK) {
    int e = dpl_cu_sort_rows(x->_data, x->_dtype, a->i[0], rows, R, K, v ? v->_data : NULL, ix->_data, scratch,
                             d->compute);
    if (e != 0) st = dpl_cu_fail((cudaError_t)e, name, dev);
  }
  if (scratch) dpl_cu_scratch_free(dev, scratch, sb);
  return dpl_hand_over(st, 2, (dpl_tensor *[]){v, ix}, a->out);
}

/* DPL_BK_SELECT: kthvalue (l[0]: 0-based rank), median, mode of each contiguous row of in[0] */
int dpl_cu_op_select(const dpl_bk_args *a)
{
  const char *name = a->name ? a->name : dpl_bk_op_name(a->op);
  const dpl_tensor *x = a->in[0];
  if (!x || !dpl_is_devmem(x) || !dpl_is_contig(x) || x->_ndim < 1 || !a->out[0] || !a->out[1])
    return dpl_errorf(DPL_EINVAL, "%s: expected a contiguous device input of at least 1 dim (internal)", name);
  int32_t nd = x->_ndim, dev = x->_devindex;
  int64_t R = x->_shape[nd - 1], rows = R > 0 ? x->_numel / R : 0;
  if (R < 1 || R > DPL_CU_SORT_MAX || a->sub < 0 || a->sub > 2 || (a->sub == 0 && (a->l[0] < 0 || a->l[0] >= R)))
    return dpl_errorf(DPL_EINVAL, "%s: rows of %lld, kind %d, rank %lld: past the kernel's limits (internal)", name,
                      (long long)R, (int)a->sub, (long long)a->l[0]);
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  int64_t shape[DPL_MAX_DIMS];
  for (int32_t i = 0; i < nd; i++) shape[i] = i == nd - 1 ? 1 : x->_shape[i];
  dpl_tensor *v = NULL, *ix = NULL;
  int st = dpl_cu_new(name, x->_dtype, nd, shape, x, &v);
  if (st == DPL_OK) st = dpl_cu_new(name, DPL_INT64, nd, shape, x, &ix);
  if (st == DPL_OK) {
    int e = dpl_cu_select_rows(x->_data, x->_dtype, a->sub, a->l[0], rows, R, v->_data, ix->_data, d->compute);
    if (e != 0) st = dpl_cu_fail((cudaError_t)e, name, dev);
  }
  return dpl_hand_over(st, 2, (dpl_tensor *[]){v, ix}, a->out);
}
