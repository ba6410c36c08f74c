/* dpl_cuda_window.c: the backend's F.unfold / F.fold (DPL_BK_IM2COL, DPL_BK_COL2IM), adaptive
 * max pooling (DPL_BK_ADAPTIVE_MAX_POOL2D), 1-d max pooling with any dilation
 * (DPL_BK_MAX_POOL1D), adaptive average pooling and its gradient (DPL_BK_ADAPTIVE_AVG_POOL2D(_BWD))
 * and histc's counts (DPL_BK_HISTC). The core validated shapes and
 * parameters and computed the output sizes' inputs (dpl_tensor_nnconv.c, dpl_tensor_count.c);
 * here the input is made contiguous in its compute dtype (float16/bfloat16 through float32,
 * as on the CPU), the kernels of dpl_cuda_window.cu run on the compute stream, and the
 * results come back in the input's dtype. */
#include "dpl_cuda_internal.h"

#define TRYC(x) do { if (st == DPL_OK) st = (x); } while (0)
#define LAUNCH(call, what) do { if (st == DPL_OK) { int e_ = (call); if (e_) st = dpl_cu_fail((cudaError_t)e_, what, dev); } } while (0)

static int64_t div_floor(int64_t a, int64_t b)
{
  int64_t q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}

/* params: kernel h, w, dilation h, w, padding h, w, stride h, w (checked by the core) */
static void cols_geom(int64_t N, int64_t C, int64_t H, int64_t W, const int32_t *p, dpl_cu_cols *g)
{
  *g = (dpl_cu_cols){N, C, H, W, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], 0, 0};
  g->OH = div_floor(H + 2 * g->ph - (g->dh * (g->kh - 1) + 1), g->sh) + 1;
  g->OW = div_floor(W + 2 * g->pw - (g->dw * (g->kw - 1) + 1), g->sw) + 1;
}

static int kd_of(const dpl_tensor *x) { return x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32; }

static int cols_op(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev, const char *name)
{
  const dpl_tensor *x = a->in[0];
  int32_t kd = kd_of(x);
  dpl_cu_cols g;
  dpl_tensor *cx = NULL, *res = NULL;
  int st = DPL_OK;
  if (a->op == DPL_BK_IM2COL) {
    cols_geom(x->_shape[0], x->_shape[1], x->_shape[2], x->_shape[3], a->params, &g);
    int64_t oshape[3] = {g.N, g.C * g.kh * g.kw, g.OH * g.OW};
    TRYC(dpl_contig_as(name, x, kd, &cx));
    TRYC(dpl_cu_new(name, kd, 3, oshape, x, &res));
    LAUNCH(dpl_cu_unfold(kd, &g, cx->_data, res->_data, d->compute), "unfold kernel");
  } else {
    int64_t kk = (int64_t)a->params[0] * a->params[1];
    cols_geom(x->_shape[0], x->_shape[1] / kk, a->l[0], a->l[1], a->params, &g);
    int64_t oshape[4] = {g.N, g.C, g.H, g.W};
    TRYC(dpl_contig_as(name, x, kd, &cx));
    TRYC(dpl_cu_new(name, kd, 4, oshape, x, &res));
    LAUNCH(dpl_cu_fold(kd, &g, cx->_data, res->_data, d->compute), "fold kernel");
  }
  TRYC(dpl_retype(name, &res, x->_dtype));
  dpl_tensor_release(cx);
  return dpl_hand_over(st, 1, &res, a->out);
}

static int max_op(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev, const char *name)
{
  const dpl_tensor *x = a->in[0];
  int32_t kd = kd_of(x), nd = x->_ndim;
  int64_t oshape[4];
  for (int i = 0; i < nd; i++) oshape[i] = x->_shape[i];
  int64_t P = x->_shape[0] * x->_shape[1];
  dpl_tensor *cx = NULL, *res = NULL, *idx = NULL;
  int64_t k = 0, s = 0, p = 0, dl = 0, OL = 0;
  if (a->op == DPL_BK_ADAPTIVE_MAX_POOL2D) {
    oshape[2] = a->l[0];
    oshape[3] = a->l[1];
  } else {
    const int32_t *q = a->params;
    int64_t L = x->_shape[2];
    k = q[0], s = q[1], p = q[2], dl = q[3];
    OL = div_floor(L + 2 * p - dl * (k - 1) - 1 + (q[4] ? s - 1 : 0), s) + 1;
    if (q[4] && (OL - 1) * s >= L + p) OL--;
    oshape[2] = OL;
  }
  int st = dpl_contig_as(name, x, kd, &cx);
  TRYC(dpl_cu_new(name, kd, nd, oshape, x, &res));
  TRYC(dpl_cu_new(name, DPL_INT64, nd, oshape, x, &idx));
  if (a->op == DPL_BK_ADAPTIVE_MAX_POOL2D)
    LAUNCH(dpl_cu_adaptive_max(kd, cx->_data, P, x->_shape[2], x->_shape[3], a->l[0], a->l[1], res->_data, idx->_data,
                               d->compute), "adaptive_max_pool2d kernel");
  else
    LAUNCH(dpl_cu_max_pool1d(kd, cx->_data, P, x->_shape[2], OL, k, s, p, dl, res->_data, idx->_data, d->compute),
           "max_pool1d kernel");
  TRYC(dpl_retype(name, &res, x->_dtype));
  dpl_tensor_release(cx);
  return dpl_hand_over(st, 2, (dpl_tensor *[]){res, idx}, a->out);
}

/* adaptive average pooling (in[0] x [N, C, H, W], l: oh, ow) or its gradient (in[0] grad
 * [N, C, oh, ow], l: H, W), in the input's dtype */
static int adaptive_avg_op(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev, const char *name)
{
  const dpl_tensor *x = a->in[0];
  int bwd = a->op == DPL_BK_ADAPTIVE_AVG_POOL2D_BWD;
  if (x->_ndim != 4 || a->l[0] < 0 || a->l[1] < 0 || (bwd && (a->l[0] < 1 || a->l[1] < 1)) ||
      (!bwd && (x->_shape[2] < 1 || x->_shape[3] < 1)))
    return dpl_errorf(DPL_EINVAL, "%s: expected a 4-d input and valid sizes (internal)", name);
  int32_t kd = kd_of(x);
  int64_t oshape[4] = {x->_shape[0], x->_shape[1], a->l[0], a->l[1]};
  int64_t P = x->_shape[0] * x->_shape[1];
  int64_t H = bwd ? a->l[0] : x->_shape[2], W = bwd ? a->l[1] : x->_shape[3];
  int64_t OH = bwd ? x->_shape[2] : a->l[0], OW = bwd ? x->_shape[3] : a->l[1];
  dpl_tensor *cx = NULL, *res = NULL;
  int st = dpl_contig_as(name, x, kd, &cx);
  TRYC(dpl_cu_new(name, kd, 4, oshape, x, &res));
  LAUNCH(dpl_cu_adaptive_avg(kd, bwd, cx->_data, P, H, W, OH, OW, res->_data, d->compute),
         bwd ? "adaptive_avg_pool2d backward kernel" : "adaptive_avg_pool2d kernel");
  TRYC(dpl_retype(name, &res, x->_dtype));
  dpl_tensor_release(cx);
  return dpl_hand_over(st, 1, &res, a->out);
}

static int histc_op(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev, const char *name)
{
  const dpl_tensor *x = a->in[0];
  if ((x->_dtype != DPL_FLOAT32 && x->_dtype != DPL_FLOAT64) || !dpl_is_contig(x) || a->l[0] < 1)
    return dpl_errorf(DPL_EINVAL, "%s: expected a contiguous float32/float64 input and bins >= 1 (internal)", name);
  int64_t bins = a->l[0];
  dpl_tensor *res = NULL;
  int st = dpl_cu_new(name, DPL_INT64, 1, &bins, x, &res);
  TRYC(dpl_tensor_fill_i64_(res, 0));
  LAUNCH(dpl_cu_histc(x->_dtype, x->_data, x->_numel, a->d[0], a->d[1], bins, res->_data, d->compute), "histc kernel");
  return dpl_hand_over(st, 1, &res, a->out);
}

int dpl_cu_op_window(const dpl_bk_args *a)
{
  const char *name = a->name ? a->name : dpl_bk_op_name(a->op);
  const dpl_tensor *x = a->in[0];
  if (!x || !dpl_is_devmem(x) || !a->out[0])
    return dpl_errorf(DPL_EINVAL, "%s: expected a device input and an output (internal)", name);
  int32_t dev = x->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  switch (a->op) {
  case DPL_BK_HISTC: return histc_op(a, d, dev, name);
  case DPL_BK_IM2COL: case DPL_BK_COL2IM: return cols_op(a, d, dev, name);
  case DPL_BK_ADAPTIVE_AVG_POOL2D: case DPL_BK_ADAPTIVE_AVG_POOL2D_BWD: return adaptive_avg_op(a, d, dev, name);
  default:
    if (!a->out[1]) return dpl_errorf(DPL_EINVAL, "%s: expected an indices output (internal)", name);
    return max_op(a, d, dev, name);
  }
}
