/* dpl_tensor_conv.c: 2-d convolution (im2col + GEMM, with groups, stride,
 * padding, dilation) forward and backward, and 2-d max/average pooling forward
 * and backward, all NCHW, computed in float32 or float64. */
#include "dpl_tensor_internal.h"
#include <stdio.h>
#include <stdlib.h>

typedef struct conv_geom {
  int64_t N, C, H, W, O, Cg, Og, kh, kw, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw, groups;
} conv_geom;

static inline size_t CF(int64_t v) { return v > 0 ? (size_t)v : 1; }

static int conv_setup(const char *name, const dpl_tensor *x, const dpl_tensor *w, const int32_t *params, int32_t groups,
                      conv_geom *g)
{
  DPL_TRY(dpl_check_tensor(name, "input", x));
  DPL_TRY(dpl_check_tensor(name, "weight", w));
  DPL_TRY(dpl_check_same_device(name, x, w));
  char b1[160], b2[160];
  if (!params) return dpl_errorf(DPL_EINVAL, "%s: params is NULL (expected stride, padding, dilation)", name);
  if (x->_ndim != 4) return dpl_errorf(DPL_EINVAL, "%s: expected input [N, C, H, W], got shape %s", name, dpl_shape_str(x->_ndim, x->_shape, b1, sizeof b1));
  if (w->_ndim != 4) return dpl_errorf(DPL_EINVAL, "%s: expected weight [O, C/groups, kh, kw], got shape %s", name, dpl_shape_str(w->_ndim, w->_shape, b1, sizeof b1));
  if (!dpl_is_float(x->_dtype) || x->_dtype != w->_dtype)
    return dpl_errorf(DPL_EINVAL, "%s: expected floating-point input and weight of one dtype, got %s and %s", name,
                      dpl_dtype_name(x->_dtype), dpl_dtype_name(w->_dtype));
  g->N = x->_shape[0]; g->C = x->_shape[1]; g->H = x->_shape[2]; g->W = x->_shape[3];
  g->O = w->_shape[0]; g->kh = w->_shape[2]; g->kw = w->_shape[3];
  g->sh = params[0]; g->sw = params[1]; g->ph = params[2]; g->pw = params[3]; g->dh = params[4]; g->dw = params[5];
  g->groups = groups;
  if (g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->ph < 0 || g->pw < 0)
    return dpl_errorf(DPL_EINVAL, "%s: expected stride >= 1, dilation >= 1, padding >= 0, got stride (%lld, %lld) padding (%lld, %lld) dilation (%lld, %lld)",
                      name, (long long)g->sh, (long long)g->sw, (long long)g->ph, (long long)g->pw, (long long)g->dh, (long long)g->dw);
  if (groups < 1 || g->C % groups || g->O % groups)
    return dpl_errorf(DPL_EINVAL, "%s: groups %d must divide the %lld input and %lld output channels", name, (int)groups,
                      (long long)g->C, (long long)g->O);
  g->Cg = g->C / groups;
  g->Og = g->O / groups;
  if (w->_shape[1] != g->Cg)
    return dpl_errorf(DPL_EINVAL, "%s: weight %s expects %lld input channels per group, input %s has %lld (groups %d)", name,
                      dpl_shape_str(w->_ndim, w->_shape, b1, sizeof b1), (long long)w->_shape[1],
                      dpl_shape_str(x->_ndim, x->_shape, b2, sizeof b2), (long long)g->Cg, (int)groups);
  int64_t eh = g->dh * (g->kh - 1) + 1, ew = g->dw * (g->kw - 1) + 1;
  if (g->H + 2 * g->ph < eh || g->W + 2 * g->pw < ew)
    return dpl_errorf(DPL_EINVAL, "%s: kernel %lldx%lld (dilated %lldx%lld) is larger than the padded input %lldx%lld", name,
                      (long long)g->kh, (long long)g->kw, (long long)eh, (long long)ew, (long long)(g->H + 2 * g->ph),
                      (long long)(g->W + 2 * g->pw));
  g->OH = (g->H + 2 * g->ph - eh) / g->sh + 1;
  g->OW = (g->W + 2 * g->pw - ew) / g->sw + 1;
  return DPL_OK;
}

/* cols [Cg*kh*kw, OH*OW] from one sample's channels c0..c0+Cg */
#define IM2COL(NAME, T)                                                                               \
  static void NAME(const conv_geom *g, const T *x, T *cols, int64_t ld)                              \
  {                                                                                                  \
    for (int64_t c = 0; c < g->Cg; c++)                                                              \
      for (int64_t i = 0; i < g->kh; i++)                                                            \
        for (int64_t j = 0; j < g->kw; j++) {                                                        \
          T *row = cols + ((c * g->kh + i) * g->kw + j) * ld;                                        \
          for (int64_t oh = 0; oh < g->OH; oh++) {                                                   \
            int64_t h = oh * g->sh - g->ph + i * g->dh;                                              \
            T *r = row + oh * g->OW;                                                                 \
            if (h < 0 || h >= g->H) { for (int64_t ow = 0; ow < g->OW; ow++) r[ow] = 0; continue; }  \
            const T *xr = x + (c * g->H + h) * g->W;                                                 \
            for (int64_t ow = 0; ow < g->OW; ow++) {                                                 \
              int64_t ww = ow * g->sw - g->pw + j * g->dw;                                           \
              r[ow] = (ww >= 0 && ww < g->W) ? xr[ww] : 0;                                           \
            }                                                                                        \
          }                                                                                          \
        }                                                                                            \
  }                                                                                                  \
  static void NAME##_back(const conv_geom *g, const T *cols, T *gx, int64_t ld)                      \
  {                                                                                                  \
    for (int64_t c = 0; c < g->Cg; c++)                                                              \
      for (int64_t i = 0; i < g->kh; i++)                                                            \
        for (int64_t j = 0; j < g->kw; j++) {                                                        \
          const T *row = cols + ((c * g->kh + i) * g->kw + j) * ld;                                  \
          for (int64_t oh = 0; oh < g->OH; oh++) {                                                   \
            int64_t h = oh * g->sh - g->ph + i * g->dh;                                              \
            if (h < 0 || h >= g->H) continue;                                                        \
            T *xr = gx + (c * g->H + h) * g->W;                                                      \
            const T *r = row + oh * g->OW;                                                           \
            for (int64_t ow = 0; ow < g->OW; ow++) {                                                 \
              int64_t ww = ow * g->sw - g->pw + j * g->dw;                                           \
              if (ww >= 0 && ww < g->W) xr[ww] += r[ow];                                             \
            }                                                                                        \
          }                                                                                          \
        }                                                                                            \
  }
IM2COL(im2col_f32, float)
IM2COL(im2col_f64, double)

static void im2col(int32_t kd, const conv_geom *g, const void *x, void *cols, int64_t ld)
{
  if (kd == DPL_FLOAT32) im2col_f32(g, x, cols, ld); else im2col_f64(g, x, cols, ld);
}
static void col2im(int32_t kd, const conv_geom *g, const void *cols, void *gx, int64_t ld)
{
  if (kd == DPL_FLOAT32) im2col_f32_back(g, cols, gx, ld); else im2col_f64_back(g, cols, gx, ld);
}

/* Samples go through GEMM in chunks: the im2col columns of nb samples side by
 * side ([K, nb*L]) make one product instead of nb small ones. */
static int64_t chunk_samples(const conv_geom *g, int64_t K, int64_t L, int64_t es)
{
  int64_t per = (K > g->Og ? K : g->Og) * L * es;
  int64_t nb = per > 0 ? (INT64_C(32) << 20) / per : g->N;
  if (nb < 1) nb = 1;
  if (nb > g->N) nb = g->N;
  return nb;
}

static int conv_inputs(const char *name, const dpl_tensor *x, const dpl_tensor *w, int32_t *kd, dpl_tensor **cx, dpl_tensor **cw)
{
  *kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  DPL_TRY(dpl_contig_as(name, x, *kd, cx));
  int st = dpl_contig_as(name, w, *kd, cw);
  if (st != DPL_OK) dpl_tensor_release(*cx);
  return st;
}

static int to_dtype(const char *name, dpl_tensor **t, int32_t dt)
{
  if (!*t || (*t)->_dtype == dt) return DPL_OK;
  dpl_tensor *r = NULL;
  int st = dpl_contig_as(name, *t, dt, &r);
  dpl_tensor_release(*t);
  *t = r;
  return st;
}

int dpl_conv2d(const dpl_tensor *x, const dpl_tensor *w, const dpl_tensor *bias, const int32_t *params, int32_t groups,
               dpl_tensor **out)
{
  const char *name = "conv2d";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  conv_geom g;
  DPL_TRY(conv_setup(name, x, w, params, groups, &g));
  if (bias) {
    DPL_TRY(dpl_check_tensor(name, "bias", bias));
    DPL_TRY(dpl_check_same_device(name, x, bias));
    if (bias->_ndim != 1 || bias->_shape[0] != g.O)
      return dpl_errorf(DPL_EINVAL, "%s: expected bias of shape [%lld], got %d dims", name, (long long)g.O, (int)bias->_ndim);
  }
  int32_t kd;
  dpl_tensor *cx, *cw, *res = NULL, *cb = NULL;
  DPL_TRY(conv_inputs(name, x, w, &kd, &cx, &cw));
  int64_t oshape[4] = {g.N, g.O, g.OH, g.OW};
  int64_t K = g.Cg * g.kh * g.kw, L = g.OH * g.OW, es = dpl_elsize(kd);
  int64_t nb = chunk_samples(&g, K, L, es);
  void *cols = malloc(CF(K * nb * L * es));
  void *tmp = malloc(CF(g.Og * nb * L * es));
  int st = cols && tmp ? DPL_OK : dpl_errorf(DPL_ENOMEM, "%s: out of memory for the im2col buffer", name);
  if (st == DPL_OK) st = dpl_new(name, kd, 4, oshape, x, &res);
  if (st == DPL_OK && bias) st = dpl_contig_as(name, bias, kd, &cb);
  if (st == DPL_OK) {
    for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
      int64_t m = g.N - n0 < nb ? g.N - n0 : nb, ld = m * L;
      for (int64_t gr = 0; gr < g.groups; gr++) {
        for (int64_t s = 0; s < m; s++)
          im2col(kd, &g, (const char *)cx->_data + (((n0 + s) * g.C + gr * g.Cg) * g.H * g.W) * es,
                 (char *)cols + s * L * es, ld);
        const char *ws = (const char *)cw->_data + (gr * g.Og * K) * es;
        dpl_gemm(kd, 0, 0, g.Og, ld, K, 1.0, ws, K, cols, ld, 0.0, tmp, ld);
        /* [Og, m*L] -> out[n0+s, gr*Og + o, :], plus bias */
        for (int64_t s = 0; s < m; s++)
          for (int64_t o = 0; o < g.Og; o++) {
            char *dst = (char *)res->_data + (((n0 + s) * g.O + gr * g.Og + o) * L) * es;
            const char *src = (const char *)tmp + (o * ld + s * L) * es;
            if (kd == DPL_FLOAT32) {
              float bv = cb ? ((const float *)cb->_data)[gr * g.Og + o] : 0.0f;
              for (int64_t l = 0; l < L; l++) ((float *)dst)[l] = ((const float *)src)[l] + bv;
            } else {
              double bv = cb ? ((const double *)cb->_data)[gr * g.Og + o] : 0.0;
              for (int64_t l = 0; l < L; l++) ((double *)dst)[l] = ((const double *)src)[l] + bv;
            }
          }
      }
    }
    st = to_dtype(name, &res, x->_dtype);
  }
  free(cols);
  free(tmp);
  dpl_tensor_release(cx);
  dpl_tensor_release(cw);
  dpl_tensor_release(cb);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *out = res;
  return DPL_OK;
}

int dpl_conv2d_backward(const dpl_tensor *grad_out, const dpl_tensor *x, const dpl_tensor *w, const int32_t *params,
                        int32_t groups, dpl_tensor **grad_x, dpl_tensor **grad_w, dpl_tensor **grad_bias)
{
  const char *name = "conv2d_backward";
  if (grad_x) *grad_x = NULL;
  if (grad_w) *grad_w = NULL;
  if (grad_bias) *grad_bias = NULL;
  conv_geom g;
  DPL_TRY(conv_setup(name, x, w, params, groups, &g));
  DPL_TRY(dpl_check_tensor(name, "grad_out", grad_out));
  DPL_TRY(dpl_check_same_device(name, x, grad_out));
  if (grad_out->_ndim != 4 || grad_out->_shape[0] != g.N || grad_out->_shape[1] != g.O || grad_out->_shape[2] != g.OH ||
      grad_out->_shape[3] != g.OW) {
    char b1[160];
    int64_t want[4] = {g.N, g.O, g.OH, g.OW};
    char b2[160];
    return dpl_errorf(DPL_EINVAL, "%s: expected grad_out of shape %s, got %s", name, dpl_shape_str(4, want, b2, sizeof b2),
                      dpl_shape_str(grad_out->_ndim, grad_out->_shape, b1, sizeof b1));
  }
  int32_t kd;
  dpl_tensor *cx, *cw, *cg = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
  DPL_TRY(conv_inputs(name, x, w, &kd, &cx, &cw));
  int64_t K = g.Cg * g.kh * g.kw, L = g.OH * g.OW, es = dpl_elsize(kd);
  int64_t nb = chunk_samples(&g, K, L, es);
  void *cols = malloc(CF(K * nb * L * es));
  void *gyc = malloc(CF(g.Og * nb * L * es));
  int st = cols && gyc ? DPL_OK : dpl_errorf(DPL_ENOMEM, "%s: out of memory for the im2col buffer", name);
  if (st == DPL_OK) st = dpl_contig_as(name, grad_out, kd, &cg);
  if (st == DPL_OK && grad_x) {
    st = dpl_new(name, kd, 4, x->_shape, x, &gx);
    if (st == DPL_OK) memset(gx->_data, 0, (size_t)(gx->_numel * es));
  }
  if (st == DPL_OK && grad_w) {
    st = dpl_new(name, kd, 4, w->_shape, w, &gw);
    if (st == DPL_OK) memset(gw->_data, 0, (size_t)(gw->_numel * es));
  }
  if (st == DPL_OK && grad_bias) {
    st = dpl_new(name, kd, 1, &g.O, w, &gb);
    if (st == DPL_OK) memset(gb->_data, 0, (size_t)(gb->_numel * es));
  }
  if (st == DPL_OK) {
    for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
      int64_t m = g.N - n0 < nb ? g.N - n0 : nb, ld = m * L;
      for (int64_t gr = 0; gr < g.groups; gr++) {
        /* grad_out of these samples and this group as [Og, m*L] */
        for (int64_t s = 0; s < m; s++)
          for (int64_t o = 0; o < g.Og; o++)
            memcpy((char *)gyc + (o * ld + s * L) * es,
                   (const char *)cg->_data + (((n0 + s) * g.O + gr * g.Og + o) * L) * es, (size_t)(L * es));
        const char *ws = (const char *)cw->_data + (gr * g.Og * K) * es;
        if (gw) {
          for (int64_t s = 0; s < m; s++)
            im2col(kd, &g, (const char *)cx->_data + (((n0 + s) * g.C + gr * g.Cg) * g.H * g.W) * es,
                   (char *)cols + s * L * es, ld);
          dpl_gemm(kd, 0, 1, g.Og, K, ld, 1.0, gyc, ld, cols, ld, 1.0, (char *)gw->_data + gr * g.Og * K * es, K);
        }
        if (gx) {
          dpl_gemm(kd, 1, 0, K, ld, g.Og, 1.0, ws, K, gyc, ld, 0.0, cols, ld);
          for (int64_t s = 0; s < m; s++)
            col2im(kd, &g, (const char *)cols + s * L * es,
                   (char *)gx->_data + (((n0 + s) * g.C + gr * g.Cg) * g.H * g.W) * es, ld);
        }
        if (gb)
          for (int64_t o = 0; o < g.Og; o++) {
            double sum = 0;
            if (kd == DPL_FLOAT32) { const float *r = (const float *)gyc + o * ld; for (int64_t l = 0; l < ld; l++) sum += r[l]; }
            else { const double *r = (const double *)gyc + o * ld; for (int64_t l = 0; l < ld; l++) sum += r[l]; }
            char *pb = (char *)gb->_data + (gr * g.Og + o) * es;
            dpl_store_f64(pb, kd, dpl_load_f64(pb, kd) + sum);
          }
      }
    }
    if (st == DPL_OK) st = to_dtype(name, &gx, x->_dtype);
    if (st == DPL_OK) st = to_dtype(name, &gw, x->_dtype);
    if (st == DPL_OK) st = to_dtype(name, &gb, x->_dtype);
  }
  free(cols);
  free(gyc);
  dpl_tensor_release(cx);
  dpl_tensor_release(cw);
  dpl_tensor_release(cg);
  if (st != DPL_OK) {
    dpl_tensor_release(gx);
    dpl_tensor_release(gw);
    dpl_tensor_release(gb);
    return st;
  }
  if (grad_x) *grad_x = gx;
  if (grad_w) *grad_w = gw;
  if (grad_bias) *grad_bias = gb;
  return DPL_OK;
}

/* ---- pooling ---- */
typedef struct pool_geom { int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, OH, OW; } pool_geom;

static int pool_setup(const char *name, const dpl_tensor *x, const int32_t *params, pool_geom *g)
{
  DPL_TRY(dpl_check_tensor(name, "input", x));
  char b1[160];
  if (!params) return dpl_errorf(DPL_EINVAL, "%s: params is NULL (expected kernel, stride, padding)", name);
  if (x->_ndim != 4) return dpl_errorf(DPL_EINVAL, "%s: expected input [N, C, H, W], got shape %s", name, dpl_shape_str(x->_ndim, x->_shape, b1, sizeof b1));
  if (!dpl_is_float(x->_dtype)) return dpl_errorf(DPL_EINVAL, "%s: expected a floating-point input, got %s", name, dpl_dtype_name(x->_dtype));
  g->N = x->_shape[0]; g->C = x->_shape[1]; g->H = x->_shape[2]; g->W = x->_shape[3];
  g->kh = params[0]; g->kw = params[1]; g->sh = params[2]; g->sw = params[3]; g->ph = params[4]; g->pw = params[5];
  if (g->kh < 1 || g->kw < 1 || g->sh < 1 || g->sw < 1 || g->ph < 0 || g->pw < 0)
    return dpl_errorf(DPL_EINVAL, "%s: expected kernel >= 1, stride >= 1, padding >= 0, got kernel (%lld, %lld) stride (%lld, %lld) padding (%lld, %lld)",
                      name, (long long)g->kh, (long long)g->kw, (long long)g->sh, (long long)g->sw, (long long)g->ph, (long long)g->pw);
  if (2 * g->ph > g->kh || 2 * g->pw > g->kw)
    return dpl_errorf(DPL_EINVAL, "%s: padding (%lld, %lld) must be at most half the kernel (%lld, %lld)", name,
                      (long long)g->ph, (long long)g->pw, (long long)g->kh, (long long)g->kw);
  if (g->H + 2 * g->ph < g->kh || g->W + 2 * g->pw < g->kw)
    return dpl_errorf(DPL_EINVAL, "%s: kernel %lldx%lld is larger than the padded input %lldx%lld", name, (long long)g->kh,
                      (long long)g->kw, (long long)(g->H + 2 * g->ph), (long long)(g->W + 2 * g->pw));
  g->OH = (g->H + 2 * g->ph - g->kh) / g->sh + 1;
  g->OW = (g->W + 2 * g->pw - g->kw) / g->sw + 1;
  return DPL_OK;
}

#define MAXPOOL(NAME, T)                                                                          \
  static void NAME(const pool_geom *g, const T *xs, T *o, int64_t *ix)                           \
  {                                                                                              \
    for (int64_t p = 0; p < g->N * g->C; p++) {                                                  \
      const T *plane = xs + p * g->H * g->W;                                                     \
      for (int64_t oh = 0; oh < g->OH; oh++)                                                     \
        for (int64_t ow = 0; ow < g->OW; ow++) {                                                 \
          int64_t h0 = oh * g->sh - g->ph, w0 = ow * g->sw - g->pw;                              \
          T best = 0;                                                                            \
          int64_t bi = -1;                                                                       \
          for (int64_t i = 0; i < g->kh; i++) {                                                  \
            int64_t h = h0 + i;                                                                  \
            if (h < 0 || h >= g->H) continue;                                                    \
            for (int64_t j = 0; j < g->kw; j++) {                                                \
              int64_t ww = w0 + j;                                                               \
              if (ww < 0 || ww >= g->W) continue;                                                \
              T v = plane[h * g->W + ww];                                                        \
              /* branch-free select (random data defeats branch prediction); NaN wins */         \
              int take = (bi < 0) | (v > best) | ((v != v) & (best == best));                    \
              best = take ? v : best;                                                            \
              bi = take ? h * g->W + ww : bi;                                                    \
            }                                                                                    \
          }                                                                                      \
          o[(p * g->OH + oh) * g->OW + ow] = best;                                               \
          ix[(p * g->OH + oh) * g->OW + ow] = bi;                                                \
        }                                                                                        \
    }                                                                                            \
  }
MAXPOOL(maxpool_f32, float)
MAXPOOL(maxpool_f64, double)

int dpl_max_pool2d(const dpl_tensor *x, const int32_t *params, dpl_tensor **out, dpl_tensor **indices)
{
  const char *name = "max_pool2d";
  if (!out || !indices) return dpl_errorf(DPL_EINVAL, "%s: out or indices is NULL", name);
  *out = *indices = NULL;
  pool_geom g;
  DPL_TRY(pool_setup(name, x, params, &g));
  int32_t kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  dpl_tensor *cx = NULL, *res = NULL, *idx = NULL;
  int64_t oshape[4] = {g.N, g.C, g.OH, g.OW};
  int st = dpl_contig_as(name, x, kd, &cx);
  if (st == DPL_OK) st = dpl_new(name, kd, 4, oshape, x, &res);
  if (st == DPL_OK) st = dpl_new(name, DPL_INT64, 4, oshape, x, &idx);
  if (st == DPL_OK) {
    if (kd == DPL_FLOAT32) maxpool_f32(&g, cx->_data, res->_data, idx->_data);
    else maxpool_f64(&g, cx->_data, res->_data, idx->_data);
    st = to_dtype(name, &res, x->_dtype);
  }
  dpl_tensor_release(cx);
  if (st != DPL_OK) { dpl_tensor_release(res); dpl_tensor_release(idx); return st; }
  *out = res;
  *indices = idx;
  return DPL_OK;
}

int dpl_max_pool2d_backward(const dpl_tensor *grad_out, const dpl_tensor *x, const dpl_tensor *indices, dpl_tensor **grad_x)
{
  const char *name = "max_pool2d_backward";
  if (!grad_x) return dpl_errorf(DPL_EINVAL, "%s: grad_x is NULL", name);
  *grad_x = NULL;
  DPL_TRY(dpl_check_tensor(name, "grad_out", grad_out));
  DPL_TRY(dpl_check_tensor(name, "input", x));
  DPL_TRY(dpl_check_tensor(name, "indices", indices));
  if (x->_ndim != 4 || grad_out->_ndim != 4 || indices->_ndim != 4 || indices->_dtype != DPL_INT64 ||
      grad_out->_numel != indices->_numel || grad_out->_shape[0] != x->_shape[0] || grad_out->_shape[1] != x->_shape[1])
    return dpl_errorf(DPL_EINVAL, "%s: expected 4-d grad_out and int64 indices from max_pool2d of this input", name);
  int64_t plane = x->_shape[2] * x->_shape[3], L = grad_out->_shape[2] * grad_out->_shape[3];
  int32_t kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  dpl_tensor *cg = NULL, *ci = NULL, *res = NULL;
  int st = dpl_contig_as(name, grad_out, kd, &cg);
  if (st == DPL_OK) st = dpl_contig_as(name, indices, DPL_INT64, &ci);
  if (st == DPL_OK) st = dpl_new(name, kd, 4, x->_shape, x, &res);
  if (st == DPL_OK) {
    int64_t es = dpl_elsize(kd);
    memset(res->_data, 0, (size_t)(res->_numel * es));
    const int64_t *is = ci->_data;
    for (int64_t p = 0; p < x->_shape[0] * x->_shape[1] && st == DPL_OK; p++)
      for (int64_t l = 0; l < L; l++) {
        int64_t k = is[p * L + l];
        if (k < 0 || k >= plane) {
          st = dpl_errorf(DPL_EINVAL, "%s: index %lld out of range for a %lld-element plane", name, (long long)k, (long long)plane);
          break;
        }
        if (kd == DPL_FLOAT32) ((float *)res->_data)[p * plane + k] += ((const float *)cg->_data)[p * L + l];
        else ((double *)res->_data)[p * plane + k] += ((const double *)cg->_data)[p * L + l];
      }
    if (st == DPL_OK) st = to_dtype(name, &res, x->_dtype);
  }
  dpl_tensor_release(cg);
  dpl_tensor_release(ci);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *grad_x = res;
  return DPL_OK;
}

static int avg_common(const char *name, const dpl_tensor *grad_out, const dpl_tensor *x, const int32_t *params,
                      int32_t cip, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  pool_geom g;
  DPL_TRY(pool_setup(name, x, params, &g));
  if (grad_out) {
    DPL_TRY(dpl_check_tensor(name, "grad_out", grad_out));
    if (grad_out->_ndim != 4 || grad_out->_shape[0] != g.N || grad_out->_shape[1] != g.C || grad_out->_shape[2] != g.OH ||
        grad_out->_shape[3] != g.OW)
      return dpl_errorf(DPL_EINVAL, "%s: grad_out must have shape [%lld, %lld, %lld, %lld]", name, (long long)g.N,
                        (long long)g.C, (long long)g.OH, (long long)g.OW);
  }
  dpl_tensor *cx = NULL, *cg = NULL, *res = NULL;
  int64_t oshape[4] = {g.N, g.C, g.OH, g.OW};
  int st = grad_out ? dpl_contig_as(name, grad_out, DPL_FLOAT64, &cg) : dpl_contig_as(name, x, DPL_FLOAT64, &cx);
  if (st == DPL_OK) st = dpl_new(name, DPL_FLOAT64, 4, grad_out ? x->_shape : oshape, x, &res);
  if (st == DPL_OK) {
    double *r = res->_data;
    if (grad_out) memset(r, 0, (size_t)res->_numel * sizeof(double));
    for (int64_t p = 0; p < g.N * g.C; p++)
      for (int64_t oh = 0; oh < g.OH; oh++)
        for (int64_t ow = 0; ow < g.OW; ow++) {
          int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
          int64_t he = hs + g.kh < g.H + g.ph ? hs + g.kh : g.H + g.ph;
          int64_t we = ws + g.kw < g.W + g.pw ? ws + g.kw : g.W + g.pw;
          int64_t pool = (he - hs) * (we - ws);
          if (hs < 0) hs = 0;
          if (ws < 0) ws = 0;
          if (he > g.H) he = g.H;
          if (we > g.W) we = g.W;
          int64_t div = cip ? pool : (he - hs) * (we - ws);
          int64_t o = (p * g.OH + oh) * g.OW + ow;
          if (grad_out) {
            double v = ((const double *)cg->_data)[o] / (double)(div ? div : 1);
            for (int64_t h = hs; h < he; h++)
              for (int64_t w = ws; w < we; w++) r[(p * g.H + h) * g.W + w] += v;
          } else {
            double s = 0;
            const double *plane = (const double *)cx->_data + p * g.H * g.W;
            for (int64_t h = hs; h < he; h++)
              for (int64_t w = ws; w < we; w++) s += plane[h * g.W + w];
            r[o] = s / (double)(div ? div : 1);
          }
        }
    st = to_dtype(name, &res, x->_dtype);
  }
  dpl_tensor_release(cx);
  dpl_tensor_release(cg);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *out = res;
  return DPL_OK;
}

int dpl_avg_pool2d(const dpl_tensor *x, const int32_t *params, int32_t count_include_pad, dpl_tensor **out)
{
  return avg_common("avg_pool2d", NULL, x, params, count_include_pad, out);
}

int dpl_avg_pool2d_backward(const dpl_tensor *grad_out, const dpl_tensor *x, const int32_t *params,
                            int32_t count_include_pad, dpl_tensor **grad_x)
{
  return avg_common("avg_pool2d_backward", grad_out, x, params, count_include_pad, grad_x);
}
