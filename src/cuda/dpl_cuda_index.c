/* dpl_cuda_index.c: the backend's index_select, index_add_, gather and
 * scatter_add_ on device tensors. The core checked dims and shapes; here the
 * indices become contiguous int64 on the device, range errors come back from
 * the kernels through a flag (with the CPU's message), and the adds run with
 * atomics in a float32/float64/int32/int64/uint8/bool working tensor that is
 * copied back (converted) when it is not the tensor itself; uint8 wraps and
 * bool is a logical or, as on the CPU (src converted to self's dtype first). */
#include "dpl_cuda_internal.h"
#include <stdio.h>

#define TRYC(x) do { if (st == DPL_OK) st = (x); } while (0)

static int index_input(const char *name, const dpl_tensor *a, const dpl_tensor *idx, dpl_tensor **ix)
{
  *ix = NULL;
  DPL_TRY(dpl_check_handle(name, "index", idx));
  DPL_TRY(dpl_check_same_device(name, a, idx));
  if (!dpl_is_devmem(idx))
    return dpl_errorf(DPL_EDEVICE, "%s: expected all tensors on the same device, got a cpu index", name);
  if (dpl_is_float(idx->_dtype) || idx->_dtype == DPL_BOOL)
    return dpl_errorf(DPL_EINVAL, "%s: expected an integer index tensor (int64 or int32), got %s", name,
                      dpl_dtype_name(idx->_dtype));
  return dpl_contig_as(name, idx, DPL_INT64, ix);
}

/* queues the check of the kernels' flag: a bad index is reported, in the CPU's
 * words, by a later call that waits for the GPU (dpl_cuda_check.c) */
static int range_error(const char *name, int32_t dev, dpl_cu_dev *d, void *bad, const dpl_tensor *ix, int64_t bound,
                       int32_t dim)
{
  return dpl_cu_check_submit(dev, d, bad, ix, name, DPL_CU_CHK_INDEX, bound, dim);
}

static int32_t add_dtype(int32_t dt)
{
  switch (dt) {
  case DPL_FLOAT64: return DPL_FLOAT64;
  case DPL_FLOAT32: case DPL_FLOAT16: case DPL_BFLOAT16: return DPL_FLOAT32;
  case DPL_INT64: return DPL_INT64;
  case DPL_INT32: return DPL_INT32;
  case DPL_UINT8: return DPL_UINT8; /* byte compare-and-swap in the kernels */
  case DPL_BOOL: return DPL_BOOL;
  default: return -1;
  }
}

static void split3(const dpl_tensor *t, int32_t dim, int64_t *outer, int64_t *D, int64_t *inner)
{
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < dim; i++) *outer *= t->_shape[i];
  for (int i = dim + 1; i < t->_ndim; i++) *inner *= t->_shape[i];
  *D = t->_shape[dim];
}

#define LAUNCH(call, what) do { if (st == DPL_OK) { int e_ = (call); if (e_) st = dpl_cu_fail((cudaError_t)e_, what, dev); } } while (0)

static int index_select(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev)
{
  const char *name = a->name;
  const dpl_tensor *t = a->in[0];
  int32_t dim = a->i[0];
  dpl_tensor *ix = NULL, *ca = NULL, *res = NULL;
  void *bad = NULL;
  int st = index_input(name, t, a->in[1], &ix);
  TRYC(dpl_contig_as(name, t, t->_dtype, &ca));
  int64_t outer, D, inner, n = ix ? ix->_numel : 0;
  split3(t, dim, &outer, &D, &inner);
  if (st == DPL_OK) {
    int64_t shape[DPL_MAX_DIMS];
    memcpy(shape, t->_shape, sizeof shape);
    shape[dim] = n;
    st = dpl_new_on(name, t->_dtype, t->_ndim, shape, DPL_DEVICE_CUDA, dev, &res);
  }
  TRYC(dpl_cu_flag_new(dev, d->compute, &bad));
  LAUNCH(dpl_cu_index_select((int32_t)dpl_elsize(t->_dtype), outer, D, inner, n, ix->_data, ca->_data, res->_data, bad,
                             d->compute),
         "index_select kernel");
  if (st == DPL_OK) st = range_error(name, dev, d, bad, ix, D, dim);
  dpl_cu_flag_free(dev, bad);
  dpl_tensor_release(ix);
  dpl_tensor_release(ca);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *a->out[0] = res;
  return DPL_OK;
}

/* a contiguous working tensor of a in kd (a itself when it already is one) */
static int work_of(const char *name, dpl_tensor *t, int32_t kd, dpl_tensor **w)
{
  if (dpl_is_contig(t) && t->_dtype == kd) return dpl_tensor_alias(t, w);
  return dpl_contig_as(name, t, kd, w);
}

static void index_geom(const dpl_tensor *t, const dpl_tensor *ix, int32_t dim, const dpl_tensor *src, dpl_cu_index *g)
{
  memset(g, 0, sizeof *g);
  g->ndim = ix->_ndim;
  g->dim = dim;
  g->n = ix->_numel;
  g->bound = t->_shape[dim];
  for (int i = 0; i < ix->_ndim; i++) {
    g->shape[i] = ix->_shape[i];
    g->astride[i] = t->_stride[i];
    g->sstride[i] = src ? src->_stride[i] : 0;
  }
}

static int gather(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev)
{
  const char *name = a->name;
  const dpl_tensor *t = a->inout;
  int32_t dim = a->i[0];
  dpl_tensor *ix = NULL, *res = NULL;
  void *bad = NULL;
  int st = index_input(name, t, a->in[0], &ix);
  TRYC(dpl_new_on(name, t->_dtype, ix->_ndim, ix->_shape, DPL_DEVICE_CUDA, dev, &res));
  TRYC(dpl_cu_flag_new(dev, d->compute, &bad));
  if (st == DPL_OK) {
    dpl_cu_index g;
    index_geom(t, ix, dim, NULL, &g);
    LAUNCH(dpl_cu_gather((int32_t)dpl_elsize(t->_dtype), &g, ix->_data, t->_data, res->_data, bad, d->compute),
           "gather kernel");
  }
  if (st == DPL_OK) st = range_error(name, dev, d, bad, ix, t->_shape[dim], dim);
  dpl_cu_flag_free(dev, bad);
  dpl_tensor_release(ix);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *a->out[0] = res;
  return DPL_OK;
}

/* index_add_ and scatter_add_: src (converted) added into a working tensor of t
 * in the kernel dtype, copied back when it is not t itself */
static int index_accumulate(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev)
{
  const char *name = a->name;
  dpl_tensor *t = a->inout;
  const dpl_tensor *src = a->in[1];
  int32_t dim = a->i[0], kd = add_dtype(t->_dtype);
  if (kd < 0) return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda for %s tensors", name, dpl_dtype_name(t->_dtype));
  if (!src || !dpl_is_devmem(src)) return dpl_errorf(DPL_EDEVICE, "%s: expected all tensors on the same device", name);
  dpl_tensor *ix = NULL, *cs = NULL, *w = NULL;
  void *bad = NULL;
  int st = index_input(name, t, a->in[0], &ix);
  TRYC(dpl_contig_as(name, src, kd, &cs));
  TRYC(work_of(name, t, kd, &w));
  TRYC(dpl_cu_flag_new(dev, d->compute, &bad));
  if (st == DPL_OK && a->op == DPL_BK_INDEX_ADD) {
    int64_t outer, D, inner;
    split3(t, dim, &outer, &D, &inner);
    LAUNCH(dpl_cu_index_add(kd, outer, D, inner, ix->_numel, ix->_data, cs->_data, w->_data, bad, d->compute),
           "index_add_ kernel");
  } else if (st == DPL_OK) {
    dpl_cu_index g;
    index_geom(w, ix, dim, cs, &g);
    LAUNCH(dpl_cu_scatter_add(kd, &g, ix->_data, cs->_data, w->_data, bad, d->compute), "scatter_add_ kernel");
  }
  if (st == DPL_OK) st = range_error(name, dev, d, bad, ix, t->_shape[dim], dim);
  if (st == DPL_OK && w->_data != t->_data) st = dpl_copy_any(name, t, w);
  dpl_cu_flag_free(dev, bad);
  dpl_release_n(3, (dpl_tensor *[]){ix, cs, w});
  return st;
}

/* rows stored at offsets the core computed and checked (scatter_, index_put_, index_copy_, ...):
 * the last row of an offset wins, as in the CPU's sequential loops */
static int index_store(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev)
{
  const char *name = a->name;
  dpl_tensor *t = a->inout;
  const dpl_tensor *off = a->in[0], *src = a->in[1];
  int64_t inner = a->l[0], slots = a->l[1], sstep = a->i[1], dstride = (int64_t)a->u[0], div = (int64_t)a->u[1];
  if (!off || !src || !dpl_is_devmem(off) || !dpl_is_devmem(src) || off->_devindex != dev || src->_devindex != dev)
    return dpl_errorf(DPL_EDEVICE, "%s: expected all tensors on the same device", name);
  if (off->_dtype != DPL_INT64 || !dpl_is_contig(off) || !dpl_is_contig(src) || src->_dtype != t->_dtype ||
      (sstep != 0 && sstep != 1) || div < 1 || inner < 0 || (sstep && src->_numel != off->_numel * inner) ||
      (!sstep && src->_numel != 1))
    return dpl_errorf(DPL_EINVAL, "%s: bad index_store arguments (internal)", name);
  int64_t n = off->_numel;
  if (n == 0 || inner == 0) return DPL_OK;
  dpl_tensor *win = NULL;
  int st = DPL_OK;
  if (!a->i[0]) TRYC(dpl_new_on(name, DPL_INT64, 1, &slots, DPL_DEVICE_CUDA, dev, &win));
  LAUNCH(dpl_cu_index_store((int32_t)dpl_elsize(t->_dtype), n, inner, off->_data, src->_data, sstep, dstride, t->_data,
                            win ? win->_data : NULL, slots, div, d->compute),
         "index_store kernel");
  dpl_tensor_release(win);
  return st;
}

int dpl_cu_op_index(const dpl_bk_args *a)
{
  const char *name = a->name ? a->name : dpl_bk_op_name(a->op);
  const dpl_tensor *t = a->op == DPL_BK_INDEX_SELECT ? a->in[0] : a->inout;
  if (!dpl_is_devmem(t)) return dpl_errorf(DPL_EDEVICE, "%s: expected all tensors on the same device", name);
  int32_t dev = t->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  switch (a->op) {
  case DPL_BK_INDEX_SELECT: return index_select(a, d, dev);
  case DPL_BK_GATHER: return gather(a, d, dev);
  case DPL_BK_INDEX_STORE: return index_store(a, d, dev);
  default: return index_accumulate(a, d, dev); /* index_add_, scatter_add_ */
  }
}
