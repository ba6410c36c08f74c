/* dpl_cuda_conv.c: the backend's conv2d (im2col + cuBLAS GEMM per group and
 * chunk of samples, bias added on the way out) and its backward (grad_w by
 * GEMM with the columns, grad_x by GEMM then col2im, grad_bias by a row sum),
 * and max/average pooling forward and backward. The core validated shapes and
 * parameters (dpl_tensor_conv.c); dtypes follow the CPU: float32/float64
 * kernels, float16/bfloat16 through float32, results in the input's dtype. */
#include "dpl_cuda_internal.h"
#include <stdio.h>

#define TRYC(x) do { if (st == DPL_OK) st = (x); } while (0)
#define CONV_CHUNK_BYTES ((int64_t)256 << 20) /* im2col buffer per chunk of samples */



static int gemm(const char *name, int32_t kd, int32_t dev, int ta, int tb, int64_t m, int64_t n, int64_t k,
                double alpha, const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
  dpl_bk_gemm g = {.dtype = kd, .devindex = dev, .transa = ta, .transb = tb, .m = m, .n = n, .k = k, .lda = lda,
                   .ldb = ldb, .ldc = ldc, .batch = 1, .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c};
  dpl_bk_args args = {.op = DPL_BK_GEMM, .gemm = &g, .name = name};
  return dpl_cu_op_gemm(&args);
}

static void conv_geom(const dpl_tensor *x, const dpl_tensor *w, const int32_t *p, int32_t groups, dpl_cu_conv *g)
{
  g->N = x->_shape[0]; g->C = x->_shape[1]; g->H = x->_shape[2]; g->W = x->_shape[3];
  g->O = w->_shape[0]; g->kh = w->_shape[2]; g->kw = w->_shape[3];
  g->sh = p[0]; g->sw = p[1]; g->ph = p[2]; g->pw = p[3]; g->dh = p[4]; g->dw = p[5];
  g->Cg = g->C / groups;
  g->Og = g->O / groups;
  g->OH = (g->H + 2 * g->ph - (g->dh * (g->kh - 1) + 1)) / g->sh + 1;
  g->OW = (g->W + 2 * g->pw - (g->dw * (g->kw - 1) + 1)) / g->sw + 1;
}

static int64_t chunk(const dpl_cu_conv *g, int64_t K, int64_t L, int64_t es)
{
  int64_t per = (K > g->Og ? K : g->Og) * L * es;
  int64_t nb = per > 0 ? CONV_CHUNK_BYTES / per : g->N;
  if (nb < 1) nb = 1;
  if (nb > g->N) nb = g->N;
  return nb;
}

#define LAUNCH(call, what) do { if (st == DPL_OK) { int e_ = (call); if (e_) st = dpl_cu_fail((cudaError_t)e_, what, dev); } } while (0)

static int conv_fwd(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev)
{
  const char *name = a->name;
  const dpl_tensor *x = a->in[0], *w = a->in[1], *bias = a->in[2];
  dpl_cu_conv g;
  conv_geom(x, w, a->params, a->i[0], &g);
  int32_t kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  int64_t K = g.Cg * g.kh * g.kw, L = g.OH * g.OW, es = dpl_elsize(kd), nb = chunk(&g, K, L, es);
  int64_t oshape[4] = {g.N, g.O, g.OH, g.OW};
  dpl_tensor *cx = NULL, *cw = NULL, *cb = NULL, *res = NULL;
  void *cols = NULL, *tmp = NULL;
  int st = dpl_contig_as(name, x, kd, &cx);
  TRYC(dpl_contig_as(name, w, kd, &cw));
  if (bias) TRYC(dpl_contig_as(name, bias, kd, &cb));
  TRYC(dpl_cu_new(name, kd, 4, oshape, x, &res));
  TRYC(dpl_cu_scratch(dev, K * nb * L * es, &cols));
  TRYC(dpl_cu_scratch(dev, g.Og * nb * L * es, &tmp));
  for (int64_t n0 = 0; st == DPL_OK && n0 < g.N; n0 += nb) {
    int64_t m = g.N - n0 < nb ? g.N - n0 : nb, ld = m * L;
    for (int64_t gr = 0; st == DPL_OK && gr < a->i[0]; gr++) {
      LAUNCH(dpl_cu_im2col(kd, &g, cx->_data, cols, n0, m, gr, d->compute), "im2col kernel (conv2d)");
      TRYC(gemm(name, kd, dev, 0, 0, g.Og, ld, K, 1.0, (const char *)cw->_data + gr * g.Og * K * es, K, cols, ld, 0.0,
                tmp, ld));
      LAUNCH(dpl_cu_conv_out(kd, &g, tmp, cb ? cb->_data : NULL, res->_data, n0, m, gr, d->compute),
             "conv2d output kernel");
    }
  }
  TRYC(dpl_retype(name, &res, x->_dtype));
  dpl_cu_scratch_free(dev, cols, K * nb * L * es);
  dpl_cu_scratch_free(dev, tmp, g.Og * nb * L * es);
  dpl_release_n(3, (dpl_tensor *[]){cx, cw, cb});
  return dpl_hand_over(st, 1, &res, a->out);
}

static int conv_bwd(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev)
{
  const char *name = a->name;
  const dpl_tensor *gy = a->in[0], *x = a->in[1], *w = a->in[2];
  dpl_tensor **pgx = a->out[0], **pgw = a->out[1], **pgb = a->out[2];
  int32_t groups = a->i[0];
  dpl_cu_conv g;
  conv_geom(x, w, a->params, groups, &g);
  int32_t kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  int64_t K = g.Cg * g.kh * g.kw, L = g.OH * g.OW, es = dpl_elsize(kd), nb = chunk(&g, K, L, es);
  dpl_tensor *cx = NULL, *cw = NULL, *cg = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
  void *cols = NULL, *gyc = NULL;
  int st = dpl_contig_as(name, x, kd, &cx);
  TRYC(dpl_contig_as(name, w, kd, &cw));
  TRYC(dpl_contig_as(name, gy, kd, &cg));
  if (pgx) TRYC(dpl_cu_new(name, kd, 4, x->_shape, x, &gx)); /* col2im writes every element */
  if (pgw) {
    TRYC(dpl_cu_new(name, kd, 4, w->_shape, w, &gw));
    TRYC(dpl_tensor_fill_(gw, 0));
  }
  if (pgb) {
    TRYC(dpl_cu_new(name, kd, 1, &g.O, w, &gb));
    LAUNCH(dpl_cu_bias_grad(kd, cg->_data, g.N, g.O, L, gb->_data, d->compute), "bias gradient kernel (conv2d)");
  }
  TRYC(dpl_cu_scratch(dev, K * nb * L * es, &cols));
  TRYC(dpl_cu_scratch(dev, g.Og * nb * L * es, &gyc));
  for (int64_t n0 = 0; st == DPL_OK && (gx || gw) && n0 < g.N; n0 += nb) {
    int64_t m = g.N - n0 < nb ? g.N - n0 : nb, ld = m * L;
    for (int64_t gr = 0; st == DPL_OK && gr < groups; gr++) {
      const char *ws = (const char *)cw->_data + gr * g.Og * K * es;
      LAUNCH(dpl_cu_conv_gy(kd, &g, cg->_data, gyc, n0, m, gr, d->compute), "grad_out kernel (conv2d_backward)");
      if (gw) {
        LAUNCH(dpl_cu_im2col(kd, &g, cx->_data, cols, n0, m, gr, d->compute), "im2col kernel (conv2d_backward)");
        TRYC(gemm(name, kd, dev, 0, 1, g.Og, K, ld, 1.0, gyc, ld, cols, ld, 1.0, (char *)gw->_data + gr * g.Og * K * es, K));
      }
      if (gx) {
        TRYC(gemm(name, kd, dev, 1, 0, K, ld, g.Og, 1.0, ws, K, gyc, ld, 0.0, cols, ld));
        LAUNCH(dpl_cu_col2im(kd, &g, cols, gx->_data, n0, m, gr, d->compute), "col2im kernel (conv2d_backward)");
      }
    }
  }
  TRYC(dpl_retype(name, &gx, x->_dtype));
  TRYC(dpl_retype(name, &gw, x->_dtype));
  TRYC(dpl_retype(name, &gb, x->_dtype));
  dpl_cu_scratch_free(dev, cols, K * nb * L * es);
  dpl_cu_scratch_free(dev, gyc, g.Og * nb * L * es);
  dpl_release_n(3, (dpl_tensor *[]){cx, cw, cg});
  return dpl_hand_over(st, 3, (dpl_tensor *[]){gx, gw, gb}, a->out);
}

/* the core's output size (dpl_tensor_conv.c, pool_out): floor, or with ceil_mode (p[6]) ceil
 * with the last window starting inside the input or the left padding; the kernels clip
 * windows to the input as they do padding */
static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int32_t ceil_mode)
{
  int64_t span = in + 2 * p - k, o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) o--;
  return o;
}

static void pool_geom(const dpl_tensor *x, const int32_t *p, dpl_cu_pool *g)
{
  g->N = x->_shape[0]; g->C = x->_shape[1]; g->H = x->_shape[2]; g->W = x->_shape[3];
  g->kh = p[0]; g->kw = p[1]; g->sh = p[2]; g->sw = p[3]; g->ph = p[4]; g->pw = p[5];
  g->OH = pool_out(g->H, g->kh, g->sh, g->ph, p[6]);
  g->OW = pool_out(g->W, g->kw, g->sw, g->pw, p[6]);
}

static int max_pool(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev)
{
  const char *name = a->name;
  const dpl_tensor *x = a->in[0];
  dpl_cu_pool g;
  pool_geom(x, a->params, &g);
  int32_t kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  int64_t oshape[4] = {g.N, g.C, g.OH, g.OW};
  dpl_tensor *cx = NULL, *res = NULL, *idx = NULL;
  int st = dpl_contig_as(name, x, kd, &cx);
  TRYC(dpl_cu_new(name, kd, 4, oshape, x, &res));
  TRYC(dpl_cu_new(name, DPL_INT64, 4, oshape, x, &idx));
  LAUNCH(dpl_cu_maxpool(kd, &g, cx->_data, res->_data, idx->_data, d->compute), "max_pool2d kernel");
  TRYC(dpl_retype(name, &res, x->_dtype));
  dpl_tensor_release(cx);
  return dpl_hand_over(st, 2, (dpl_tensor *[]){res, idx}, a->out);
}

static int max_pool_bwd(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev)
{
  const char *name = a->name;
  const dpl_tensor *gy = a->in[0], *x = a->in[1], *indices = a->in[2];
  int32_t kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  int64_t plane = x->_shape[2] * x->_shape[3], L = gy->_shape[2] * gy->_shape[3], P = x->_shape[0] * x->_shape[1];
  dpl_tensor *cg = NULL, *ci = NULL, *res = NULL;
  void *bad = NULL;
  int st = dpl_contig_as(name, gy, kd, &cg);
  TRYC(dpl_contig_as(name, indices, DPL_INT64, &ci));
  TRYC(dpl_cu_new(name, kd, 4, x->_shape, x, &res));
  TRYC(dpl_tensor_fill_(res, 0));
  TRYC(dpl_cu_flag_new(dev, d->compute, &bad));
  LAUNCH(dpl_cu_maxpool_bwd(kd, cg->_data, ci->_data, P, L, plane, res->_data, bad, d->compute),
         "max_pool2d_backward kernel");
  /* a bad index is reported by a later call that waits for the GPU (dpl_cuda_check.c) */
  TRYC(dpl_cu_check_submit(dev, d, bad, ci, name, DPL_CU_CHK_POOL, plane, 0));
  TRYC(dpl_retype(name, &res, x->_dtype));
  dpl_cu_flag_free(dev, bad);
  dpl_release_n(2, (dpl_tensor *[]){cg, ci});
  return dpl_hand_over(st, 1, &res, a->out);
}

static int avg_pool(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev)
{
  const char *name = a->name;
  int bwd = a->op == DPL_BK_AVG_POOL2D_BWD;
  const dpl_tensor *gy = bwd ? a->in[0] : NULL, *x = bwd ? a->in[1] : a->in[0];
  dpl_cu_pool g;
  pool_geom(x, a->params, &g);
  int64_t oshape[4] = {g.N, g.C, g.OH, g.OW};
  dpl_tensor *cx = NULL, *cg = NULL, *res = NULL;
  int st = bwd ? dpl_contig_as(name, gy, DPL_FLOAT64, &cg) : dpl_contig_as(name, x, DPL_FLOAT64, &cx);
  TRYC(dpl_cu_new(name, DPL_FLOAT64, 4, bwd ? x->_shape : oshape, x, &res));
  if (bwd) TRYC(dpl_tensor_fill_(res, 0));
  LAUNCH(dpl_cu_avgpool(&g, a->i[0], cx ? cx->_data : NULL, cg ? cg->_data : NULL, res->_data, d->compute),
         bwd ? "avg_pool2d_backward kernel" : "avg_pool2d kernel");
  TRYC(dpl_retype(name, &res, x->_dtype));
  dpl_release_n(2, (dpl_tensor *[]){cx, cg});
  return dpl_hand_over(st, 1, &res, a->out);
}

int dpl_cu_op_conv(const dpl_bk_args *a)
{
  const char *name = a->name ? a->name : dpl_bk_op_name(a->op);
  for (int k = 0; k < 3; k++)
    if (a->in[k] && !dpl_is_devmem(a->in[k]))
      return dpl_errorf(DPL_EDEVICE, "%s: expected all tensors on the same device, got a cpu tensor with cuda ones",
                        name);
  int32_t dev = a->in[0]->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  switch (a->op) {
  case DPL_BK_CONV2D: return conv_fwd(a, d, dev);
  case DPL_BK_CONV2D_BWD: return conv_bwd(a, d, dev);
  case DPL_BK_MAX_POOL2D: return max_pool(a, d, dev);
  case DPL_BK_MAX_POOL2D_BWD: return max_pool_bwd(a, d, dev);
  default: return avg_pool(a, d, dev);
  }
}
