/* dpl_cuda_reduce_ops.c: the backend's whole-op implementations of
 * reductions (one kernel reading the input in its own dtype and layout, see
 * dpl_cuda_reduce.cu), the softmax family (a fused row kernel
 * over the last dim; another dim is moved last in a copy), the class losses
 * (cross-entropy, NLL) and MSE with their gradients, and embedding. Dtype
 * rules and messages follow the CPU code in dpl_tensor_reduce.c and
 * dpl_tensor_index.c. */
#include "dpl_cuda_internal.h"
#include <math.h>
#include <stdio.h>

static const char *red_names[] = {"sum", "mean", "prod", "max", "min", "argmax", "argmin", "var", "std", "logsumexp",
                                  "norm", "any", "all"};


/* (shape, stride) dims without the size-1 ones, neighbours merged where one
 * stride steps over the other: the same row-major positions, fewer dims */
static int32_t coalesce(int32_t nd, const int64_t *shape, const int64_t *stride, int64_t *osh, int64_t *ost)
{
  int32_t m = 0;
  for (int32_t i = 0; i < nd; i++) {
    if (shape[i] == 1) continue;
    if (m > 0 && ost[m - 1] == stride[i] * shape[i]) {
      osh[m - 1] *= shape[i];
      ost[m - 1] = stride[i];
      continue;
    }
    osh[m] = shape[i];
    ost[m] = stride[i];
    m++;
  }
  return m;
}

/* the kernels' geometry of reducing dim `dim` of t (-1: all, in row-major order): the outputs
 * over the other dims, each reducing a run read in t's own layout (no copy, any strides) */
static void red_geom(const dpl_tensor *t, int32_t dim, dpl_cu_red *g)
{
  memset(g, 0, sizeof *g);
  int64_t sh[DPL_MAX_DIMS], stv[DPL_MAX_DIMS];
  if (dim < 0) {
    g->rndim = coalesce(t->_ndim, t->_shape, t->_stride, g->rshape, g->rstride);
    g->R = t->_numel;
    g->rows = 1;
    return;
  }
  int32_t k = 0;
  for (int32_t i = 0; i < t->_ndim; i++)
    if (i != dim) { sh[k] = t->_shape[i]; stv[k] = t->_stride[i]; k++; }
  g->ondim = coalesce(k, sh, stv, g->oshape, g->ostride);
  g->rows = dpl_shape_numel(k, sh);
  g->R = t->_shape[dim];
  g->rndim = coalesce(1, &t->_shape[dim], &t->_stride[dim], g->rshape, g->rstride);
}

/* Every reduction is one kernel (two for long float sums) reading t in its own dtype and layout
 * and writing the outputs' dtypes: no copy or conversion pass before or after. (No case needs
 * the former contiguous float64/int64 copy: DPL_CU_MAXDIM covers every tensor's dims.) */
int dpl_cu_op_reduce(const dpl_bk_args *a)
{
  int op = a->sub;
  const dpl_tensor *t = a->in[0];
  int32_t dim = a->i[0], keepdim = a->i[1];
  if (op < 0 || op > DPL_RED_ALL) return dpl_errorf(DPL_EINVAL, "reduce: unknown op id %d", op);
  const char *name = a->op == DPL_BK_REDUCE_INDEX ? a->name : red_names[op];
  DPL_TRY(dpl_check_handle(name, "self", t));
  if (!(dim == -1 || (t->_ndim == 0 && dim == 0) || (dim >= 0 && dim < t->_ndim)))
    return dpl_errorf(DPL_EINVAL, "%s: dim %d out of range (expected 0..%d for a %d-d tensor, or -1 for all)", name,
                      (int)dim, (int)t->_ndim - 1, (int)t->_ndim);
  int isf = dpl_is_float(t->_dtype);
  if (!isf && (op == DPL_RED_MEAN || op == DPL_RED_VAR || op == DPL_RED_STD || op == DPL_RED_LOGSUMEXP || op == DPL_RED_NORM))
    return dpl_errorf(DPL_EINVAL, "%s: expected a floating-point tensor, got %s (convert with :float() first)", name,
                      dpl_dtype_name(t->_dtype));
  int32_t rd;
  if (op == DPL_RED_ARGMAX || op == DPL_RED_ARGMIN) rd = DPL_INT64;
  else if (op == DPL_RED_ANY || op == DPL_RED_ALL) rd = DPL_BOOL;
  else if (!isf && (op == DPL_RED_SUM || op == DPL_RED_PROD)) rd = DPL_INT64;
  else rd = t->_dtype;
  dpl_cu_red g;
  red_geom(t, t->_ndim == 0 ? -1 : dim, &g);
  g.op = op;
  g.idt = t->_dtype;
  g.odt = rd;
  g.param = a->d[0];
  if ((op == DPL_RED_MAX || op == DPL_RED_MIN || op == DPL_RED_ARGMAX || op == DPL_RED_ARGMIN) && g.R == 0)
    return dpl_errorf(DPL_EINVAL, "%s: cannot reduce over an empty dim (size 0): the result has no identity", name);
  int64_t oshape[DPL_MAX_DIMS];
  int32_t ond = 0;
  if (dim == -1) {
    if (keepdim) for (int i = 0; i < t->_ndim; i++) oshape[ond++] = 1;
  } else {
    for (int i = 0; i < t->_ndim; i++) {
      if (i == dim) { if (keepdim) oshape[ond++] = 1; }
      else oshape[ond++] = t->_shape[i];
    }
  }
  int both = a->op == DPL_BK_REDUCE_INDEX, arg = op == DPL_RED_ARGMAX || op == DPL_RED_ARGMIN;
  dpl_tensor *val = NULL, *idx = NULL;
  void *scratch = NULL;
  int64_t nscratch = dpl_cu_reduce_scratch(&g);
  dpl_cu_dev *d = dpl_cu_device(t->_devindex, name);
  int st = d ? DPL_OK : DPL_EDEVICE;
  if (st == DPL_OK && !arg) st = dpl_cu_new(name, rd, ond, oshape, t, &val);
  if (st == DPL_OK && (arg || both)) st = dpl_cu_new(name, DPL_INT64, ond, oshape, t, &idx);
  if (st == DPL_OK && nscratch > 0) st = dpl_cu_scratch(t->_devindex, nscratch, &scratch);
  if (st == DPL_OK) {
    int e = dpl_cu_reduce(&g, t->_data, val ? val->_data : NULL, idx ? (int64_t *)idx->_data : NULL, scratch,
                          d->compute);
    if (e) st = dpl_cu_fail((cudaError_t)e, name, t->_devindex);
  }
  if (scratch) dpl_cu_scratch_free(t->_devindex, scratch, nscratch);
  if (st != DPL_OK) {
    dpl_tensor_release(val);
    dpl_tensor_release(idx);
    return st;
  }
  if (both) { *a->out[0] = val; *a->out[1] = idx; }
  else *a->out[0] = arg ? idx : val;
  return DPL_OK;
}

/* ---- softmax family: the fused row kernel in float32/float64 over the last dim; another dim is moved
 * last in a copy and back, so that every dim gets the CPU's formulas (NaN and infinity rules included) ---- */
#define TRYC(x) do { if (st == DPL_OK) st = (x); } while (0)

/* the row kernel over the last dim of contiguous xk (and gk) into a new *res */
static int softmax_last(const char *name, const dpl_tensor *like, int32_t kd, const dpl_tensor *xk,
                        const dpl_tensor *gk, int log, int bwd, dpl_tensor **res)
{
  int64_t R = xk->_ndim ? xk->_shape[xk->_ndim - 1] : 1, rows = R ? xk->_numel / R : 0;
  DPL_TRY(dpl_cu_new(name, kd, xk->_ndim, xk->_shape, like, res));
  dpl_cu_dev *d = dpl_cu_device(like->_devindex, name);
  if (!d) return DPL_EDEVICE;
  int e = dpl_cu_softmax_rows(kd, xk->_data, gk ? gk->_data : NULL, (*res)->_data, rows, R, log, bwd, d->compute);
  if (e) return dpl_cu_fail((cudaError_t)e, name, like->_devindex);
  return DPL_OK;
}

int dpl_cu_op_softmax(const dpl_bk_args *a)
{
  int bwd = a->op == DPL_BK_SOFTMAX_BWD, log = a->i[1];
  int32_t dim = a->i[0];
  const char *name = a->name;
  const dpl_tensor *x = bwd ? a->in[1] : a->in[0], *grad = bwd ? a->in[0] : NULL;
  DPL_TRY(dpl_check_handle(name, bwd ? "output" : "self", x));
  if (grad) {
    DPL_TRY(dpl_check_handle(name, "grad", grad));
    DPL_TRY(dpl_check_same_device(name, grad, x));
    if (!dpl_same_shape(grad, x)) return dpl_errorf(DPL_EINVAL, "%s: grad shape does not match the output shape", name);
  }
  if (x->_ndim == 0 ? dim != 0 : (dim < 0 || dim >= x->_ndim))
    return dpl_errorf(DPL_EINVAL, "%s: dim %d out of range (expected 0..%d for a %d-d tensor)", name, (int)dim,
                      x->_ndim ? (int)x->_ndim - 1 : 0, (int)x->_ndim);
  if (!dpl_is_devmem(x) || (grad && !dpl_is_devmem(grad)))
    return dpl_errorf(DPL_EDEVICE, "%s: expected all tensors on the same device", name);
  int32_t rd = dpl_is_float(x->_dtype) ? x->_dtype : DPL_FLOAT32;
  int32_t kd = rd == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  int32_t rdim = x->_ndim == 0 ? -1 : dim;
  dpl_tensor *xk = NULL, *gk = NULL, *res = NULL;
  int st = dpl_contig_as(name, x, kd, &xk);
  if (grad) TRYC(dpl_contig_as(name, grad, kd, &gk));
  if (rdim == -1 || rdim == x->_ndim - 1) {
    TRYC(softmax_last(name, x, kd, xk, gk, log, bwd, &res));
  } else { /* dim moved last in contiguous copies, the kernel, the result moved back */
    int32_t last = x->_ndim - 1;
    dpl_tensor *xv = NULL, *xt = NULL, *gv = NULL, *gt = NULL, *rt = NULL, *rv = NULL;
    TRYC(dpl_tensor_transpose(xk, rdim, last, &xv));
    TRYC(dpl_contig_as(name, xv, kd, &xt));
    if (gk) TRYC(dpl_tensor_transpose(gk, rdim, last, &gv));
    if (gk) TRYC(dpl_contig_as(name, gv, kd, &gt));
    TRYC(softmax_last(name, x, kd, xt, gt, log, bwd, &rt));
    TRYC(dpl_tensor_transpose(rt, rdim, last, &rv));
    TRYC(dpl_contig_as(name, rv, kd, &res));
    dpl_release_n(6, (dpl_tensor *[]){xv, xt, gv, gt, rt, rv});
  }
  TRYC(dpl_retype(name, &res, rd));
  dpl_release_n(2, (dpl_tensor *[]){xk, gk});
  return dpl_hand_over(st, 1, &res, a->out);
}

/* ---- class losses ---- */
static int class_inputs(const char *name, const dpl_tensor *x, const dpl_tensor *target, int64_t *N, int64_t *C)
{
  DPL_TRY(dpl_check_handle(name, "input", x));
  DPL_TRY(dpl_check_handle(name, "target", target));
  DPL_TRY(dpl_check_same_device(name, x, target));
  if (!dpl_is_devmem(x) || !dpl_is_devmem(target))
    return dpl_errorf(DPL_EDEVICE, "%s: expected all tensors on the same device", name);
  return dpl_class_loss_dims(name, x, target, N, C);
}

/* queues the check of the device flag `bad` the kernel filled: a bad index is
 * reported by a later call that waits for the GPU (dpl_cuda_check.c) */
static int check_bad(const char *name, int32_t dev, dpl_cu_dev *d, void *bad, const dpl_tensor *idx, int64_t limit,
                     int32_t kind)
{
  return dpl_cu_check_submit(dev, d, bad, idx, name, kind, limit, 0);
}

/* the kernels' row and class strides of a class-loss input ([N, C] or [C]) */
static void class_strides(const dpl_tensor *x, int64_t *sN, int64_t *sC)
{
  *sN = x->_ndim == 2 ? x->_stride[0] : 0;
  *sC = x->_stride[x->_ndim - 1];
}

static int class_loss(const dpl_bk_args *a)
{
  int ce = a->op == DPL_BK_CROSS_ENTROPY;
  const char *name = a->name;
  const dpl_tensor *x = a->in[0], *target = a->in[1];
  int32_t reduction = a->i[0];
  int64_t ignore = a->l[0], N, C, sN, sC;
  DPL_TRY(class_inputs(name, x, target, &N, &C));
  int32_t dev = x->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  /* x is read in place in its own dtype and layout; the output is written in x's dtype:
   * per sample directly (reduction none), else through float64 per-sample losses */
  class_strides(x, &sN, &sC);
  dpl_tensor *td = NULL, *l = NULL, *r = NULL;
  void *bad = NULL;
  int st = dpl_contig_as(name, target, DPL_INT64, &td);
  if (reduction == 0) TRYC(dpl_cu_new(name, x->_dtype, x->_ndim == 2 ? 1 : 0, &N, x, &r));
  else {
    TRYC(dpl_cu_new(name, DPL_FLOAT64, 1, &N, x, &l));
    TRYC(dpl_cu_new(name, x->_dtype, 0, &N, x, &r));
  }
  TRYC(dpl_cu_flag_new(dev, d->compute, &bad));
  if (st == DPL_OK) {
    int e = dpl_cu_class_loss(ce, x->_dtype, x->_data, sN, sC, td->_data, N, C, ignore, l ? l->_data : r->_data,
                              l ? DPL_FLOAT64 : x->_dtype, bad, d->compute);
    if (e) st = dpl_cu_fail((cudaError_t)e, name, dev);
  }
  TRYC(check_bad(name, dev, d, bad, td, C, DPL_CU_CHK_TARGET));
  if (st == DPL_OK && reduction != 0) {
    int e = dpl_cu_loss_finish(l->_data, td->_data, N, ignore, reduction, r->_data, x->_dtype, NULL, d->compute);
    if (e) st = dpl_cu_fail((cudaError_t)e, name, dev);
  }
  dpl_cu_flag_free(dev, bad);
  dpl_tensor_release(td);
  dpl_tensor_release(l);
  if (st != DPL_OK) { dpl_tensor_release(r); return st; }
  *a->out[0] = r;
  return DPL_OK;
}

static int class_loss_bwd(const dpl_bk_args *a)
{
  int ce = a->op == DPL_BK_CROSS_ENTROPY_BWD;
  const char *name = a->name;
  const dpl_tensor *g = a->in[0], *x = a->in[1], *target = a->in[2];
  int32_t reduction = a->i[0];
  int64_t ignore = a->l[0], N, C, sN, sC;
  DPL_TRY(class_inputs(name, x, target, &N, &C));
  DPL_TRY(dpl_check_handle(name, "grad_out", g));
  DPL_TRY(dpl_check_same_device(name, g, x));
  if (reduction == 0 && g->_numel != N)
    return dpl_errorf(DPL_EINVAL, "%s: grad_out must have %lld elements (reduction none), got %lld", name, (long long)N,
                      (long long)g->_numel);
  if (reduction != 0 && g->_numel != 1)
    return dpl_errorf(DPL_EINVAL, "%s: grad_out must have one element (reduced loss), got %lld", name,
                      (long long)g->_numel);
  int32_t dev = x->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  /* x and grad_out are read in place in their own dtypes and layouts; the gradient is written
   * contiguous in x's dtype. grad_out's N values must sit at one stride (0-d, 1-d, any shape that
   * coalesces to one dim); only a grad_out whose dims do not coalesce is copied (contiguous, its
   * own dtype). */
  class_strides(x, &sN, &sC);
  int64_t gsh[DPL_MAX_DIMS], gst[DPL_MAX_DIMS];
  int32_t gnd = coalesce(g->_ndim, g->_shape, g->_stride, gsh, gst);
  dpl_tensor *td = NULL, *gd = NULL, *cnt = NULL, *res = NULL;
  int64_t one = 1, gs = gnd == 1 ? gst[0] : gnd == 0 ? 0 : 1;
  int st = dpl_contig_as(name, target, DPL_INT64, &td);
  if (gnd > 1) TRYC(dpl_contig_as(name, g, g->_dtype, &gd));
  TRYC(dpl_cu_new(name, DPL_FLOAT64, 1, &one, x, &cnt));
  TRYC(dpl_cu_new(name, x->_dtype, x->_ndim, x->_shape, x, &res));
  if (st == DPL_OK) {
    int e = dpl_cu_loss_finish(NULL, td->_data, N, ignore, 2, NULL, DPL_FLOAT64, cnt->_data, d->compute);
    if (!e)
      e = dpl_cu_class_loss_bwd(ce, x->_dtype, x->_data, sN, sC, td->_data, N, C, ignore, reduction,
                                gd ? gd->_data : g->_data, g->_dtype, gs, cnt->_data, res->_data, d->compute);
    if (e) st = dpl_cu_fail((cudaError_t)e, name, dev);
  }
  dpl_tensor_release(td);
  dpl_tensor_release(gd);
  dpl_tensor_release(cnt);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *a->out[0] = res;
  return DPL_OK;
}

/* ---- MSE, composed: mean/sum of (a - b)^2; gradient 2 (a - b) g [/ n] ---- */
static int mse(const dpl_bk_args *a)
{
  const char *name = a->name;
  int bwd = a->op == DPL_BK_MSE_BWD;
  const dpl_tensor *g = bwd ? a->in[0] : NULL, *x = bwd ? a->in[1] : a->in[0], *y = bwd ? a->in[2] : a->in[1];
  int32_t reduction = a->i[0];
  DPL_TRY(dpl_check_handle(name, "input", x));
  DPL_TRY(dpl_check_handle(name, "target", y));
  DPL_TRY(dpl_mse_check(name, x, y));
  if (g) {
    DPL_TRY(dpl_check_handle(name, "grad_out", g));
    if (reduction == 0 && g->_numel != x->_numel)
      return dpl_errorf(DPL_EINVAL, "%s: grad_out must have %lld elements (reduction none), got %lld", name,
                        (long long)x->_numel, (long long)g->_numel);
    if (reduction != 0 && g->_numel != 1)
      return dpl_errorf(DPL_EINVAL, "%s: grad_out must have one element (reduced loss), got %lld", name,
                        (long long)g->_numel);
  }
  int32_t kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  dpl_tensor *xk = NULL, *yk = NULL, *diff = NULL, *t1 = NULL, *t2 = NULL, *res = NULL, *gv = NULL;
  int st = dpl_contig_as(name, x, kd, &xk);
  TRYC(dpl_contig_as(name, y, kd, &yk));
  TRYC(dpl_binary(DPL_OP_SUB, xk, yk, &diff));
  if (!bwd) {
    TRYC(dpl_binary(DPL_OP_MUL, diff, diff, &t1));
    if (reduction == 0) { res = t1; t1 = NULL; }
    else TRYC(dpl_reduce(reduction == 1 ? DPL_RED_MEAN : DPL_RED_SUM, t1, -1, 0, 0, &res));
  } else {
    double scale = reduction == 1 ? 2.0 / (double)(x->_numel ? x->_numel : 1) : 2.0;
    TRYC(dpl_contig_as(name, g, kd, &t1));
    if (reduction == 0) TRYC(dpl_tensor_view(t1, x->_ndim, x->_shape, &gv));
    else TRYC(dpl_tensor_view(t1, 0, NULL, &gv));
    TRYC(dpl_binary(DPL_OP_MUL, diff, gv, &t2));
    TRYC(dpl_binary_scalar(DPL_OP_MUL, t2, scale, 0, &res));
  }
  TRYC(dpl_retype(name, &res, x->_dtype));
  dpl_release_n(6, (dpl_tensor *[]){xk, yk, diff, t1, t2, gv});
  return dpl_hand_over(st, 1, &res, a->out);
}

int dpl_cu_op_loss(const dpl_bk_args *a)
{
  switch (a->op) {
  case DPL_BK_CROSS_ENTROPY: case DPL_BK_NLL: return class_loss(a);
  case DPL_BK_CROSS_ENTROPY_BWD: case DPL_BK_NLL_BWD: return class_loss_bwd(a);
  default: return mse(a);
  }
}

/* ---- embedding ---- */
int dpl_cu_op_embedding(const dpl_bk_args *a)
{
  const char *name = a->name;
  int bwd = a->op == DPL_BK_EMBEDDING_BWD;
  const dpl_tensor *w = a->in[0], *idx = a->in[1];
  DPL_TRY(dpl_check_handle(name, bwd ? "grad" : "weight", w));
  DPL_TRY(dpl_check_handle(name, "input", idx));
  DPL_TRY(dpl_check_same_device(name, w, idx));
  if (!dpl_is_devmem(w) || !dpl_is_devmem(idx))
    return dpl_errorf(DPL_EDEVICE, "%s: expected all tensors on the same device", name);
  if (dpl_is_float(idx->_dtype) || idx->_dtype == DPL_BOOL)
    return dpl_errorf(DPL_EINVAL, "%s: expected integer indices as input, got %s", name, dpl_dtype_name(idx->_dtype));
  int32_t dev = w->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  dpl_tensor *ix = NULL, *cw = NULL, *res = NULL, *acc = NULL;
  void *bad = NULL;
  int64_t n = idx->_numel;
  int st = dpl_contig_as(name, idx, DPL_INT64, &ix);
  TRYC(dpl_cu_flag_new(dev, d->compute, &bad));
  if (!bwd) {
    if (w->_ndim != 2)
      st = dpl_errorf(DPL_EINVAL, "%s: expected a 2-d weight [num, dim], got %d dims", name, (int)w->_ndim);
    else if (idx->_ndim >= DPL_MAX_DIMS) st = dpl_errorf(DPL_EINVAL, "%s: input has too many dims", name);
    int64_t V = w->_ndim == 2 ? w->_shape[0] : 0, D = w->_ndim == 2 ? w->_shape[1] : 0;
    TRYC(dpl_contig_as(name, w, w->_dtype, &cw));
    if (st == DPL_OK) {
      int64_t shape[DPL_MAX_DIMS];
      memcpy(shape, idx->_shape, sizeof(int64_t) * (size_t)idx->_ndim);
      shape[idx->_ndim] = D;
      st = dpl_cu_new(name, w->_dtype, idx->_ndim + 1, shape, w, &res);
    }
    if (st == DPL_OK) {
      int e = dpl_cu_embedding(cw->_data, ix->_data, n, V, D * dpl_elsize(w->_dtype), res->_data, bad, d->compute);
      if (e) st = dpl_cu_fail((cudaError_t)e, name, dev);
    }
    TRYC(check_bad(name, dev, d, bad, ix, V, DPL_CU_CHK_INDEX));
  } else {
    int64_t V = a->l[0];
    int64_t D = w->_ndim ? w->_shape[w->_ndim - 1] : 1;
    if (V < 0) st = dpl_errorf(DPL_EINVAL, "%s: num_weights must be >= 0, got %lld", name, (long long)V);
    else if (w->_numel != n * D)
      st = dpl_errorf(DPL_EINVAL, "%s: grad has %lld elements, expected %lld (input elements x dim)", name,
                      (long long)w->_numel, (long long)(n * D));
    int32_t kd = w->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
    int64_t shape[2] = {V, D};
    TRYC(dpl_contig_as(name, w, kd, &cw));
    TRYC(dpl_cu_new(name, kd, 2, shape, w, &acc));
    TRYC(dpl_tensor_fill_(acc, 0));
    if (st == DPL_OK) {
      int e = dpl_cu_embedding_bwd(kd, cw->_data, ix->_data, n, V, D, acc->_data, bad, d->compute);
      if (e) st = dpl_cu_fail((cudaError_t)e, name, dev);
    }
    TRYC(check_bad(name, dev, d, bad, ix, V, DPL_CU_CHK_INDEX));
    if (st == DPL_OK) {
      if (w->_dtype == kd) { res = acc; acc = NULL; }
      else st = dpl_contig_as(name, acc, w->_dtype, &res);
    }
  }
  dpl_cu_flag_free(dev, bad);
  dpl_tensor_release(ix);
  dpl_tensor_release(cw);
  dpl_tensor_release(acc);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *a->out[0] = res;
  return DPL_OK;
}
