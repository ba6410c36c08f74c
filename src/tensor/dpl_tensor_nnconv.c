/* dpl_tensor_nnconv.c: the CPU kernels of nn's conv group (lua/dpl/nn/functional_conv.lua):
 * im2col / col2im over NCHW (F.unfold / F.fold, each the other's gradient); padding of the
 * last 1-3 dims (constant, reflect, replicate, circular: one source-index table per dim)
 * and its gradient; interpolation over 1 or 2 spatial dims (nearest, nearest-exact,
 * linear/bilinear, with PyTorch 1.13's coordinate mapping) and its gradient; adaptive
 * average and max pooling over 2 dims (PyTorch's windows) and the average's gradient (the
 * max's goes through dpl_max_pool2d_backward); 1-d max pooling with dilation, returning
 * 0-based indices. Planes (or rows) are split across threads. Floating kernels compute
 * float16/bfloat16 in float32 through converted temporaries; padding and nearest
 * interpolation move elements of any dtype. im2col / col2im, adaptive max and average pooling
 * (and the average's gradient) and 1-d max pooling of a tensor in GPU memory run in the
 * backend after the same checks
 * (DPL_BK_IM2COL, ...: src/cuda/dpl_cuda_window.c); the others fail there with "<op>: not
 * implemented on cuda" (dpl_check_tensor). */
#include "dpl_tensor_internal.h"
#include <float.h>
#include <stdio.h>
#include <stdlib.h>

#define PAR_ELEMS (INT64_C(1) << 16) /* elements per thread, at least */

static int64_t grain_for(int64_t per) { return per > 0 ? (PAR_ELEMS + per - 1) / per : 1; }

/* floor division (PyTorch's div_rtn) */
static int64_t div_floor(int64_t a, int64_t b)
{
  int64_t q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}

/* a contiguous float32/float64 copy of a floating host tensor (*kd: the compute dtype) */
static int float_in(const char *name, const char *what, const dpl_tensor *x, int32_t *kd, dpl_tensor **cx)
{
  *kd = DPL_FLOAT32;
  *cx = NULL;
  DPL_TRY(dpl_check_tensor(name, what, x));
  if (!dpl_is_float(x->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected a floating-point %s, got %s", name, what, dpl_dtype_name(x->_dtype));
  *kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  return dpl_contig_as(name, x, *kd, cx);
}

/* a new zeroed tensor */
static int new_zeros(const char *name, int32_t dt, int32_t nd, const int64_t *shape, const dpl_tensor *like,
                     dpl_tensor **out)
{
  DPL_TRY(dpl_new(name, dt, nd, shape, like, out));
  memset((*out)->_data, 0, (size_t)((*out)->_numel * dpl_elsize(dt)));
  return DPL_OK;
}

/* a tensor in device memory: the op in the backend (after the CPU path's checks), which takes
 * any floating dtype and layout and returns the input's dtype */
static int dev_float(const char *name, const char *what, const dpl_tensor *x)
{
  if (!dpl_is_float(x->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected a floating-point %s, got %s", name, what, dpl_dtype_name(x->_dtype));
  return DPL_OK;
}

/* ================================================================ im2col / col2im */
typedef struct col_geom { int64_t N, C, H, W, kh, kw, dh, dw, ph, pw, sh, sw, OH, OW; } col_geom;

/* params: kernel h, w, dilation h, w, padding h, w, stride h, w (F.unfold's order) */
static int col_setup(const char *name, int64_t N, int64_t C, int64_t H, int64_t W, const int32_t *p, col_geom *g)
{
  if (!p) return dpl_errorf(DPL_EINVAL, "%s: params is NULL (expected kernel, dilation, padding, stride)", name);
  *g = (col_geom){N, C, H, W, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], 0, 0};
  if (g->kh < 1 || g->kw < 1 || g->dh < 1 || g->dw < 1 || g->ph < 0 || g->pw < 0 || g->sh < 1 || g->sw < 1)
    return dpl_errorf(DPL_EINVAL, "%s: expected kernel_size >= 1, dilation >= 1, padding >= 0, stride >= 1, got kernel_size "
                      "(%d, %d), dilation (%d, %d), padding (%d, %d), stride (%d, %d)", name, (int)p[0], (int)p[1],
                      (int)p[2], (int)p[3], (int)p[4], (int)p[5], (int)p[6], (int)p[7]);
  g->OH = div_floor(H + 2 * g->ph - (g->dh * (g->kh - 1) + 1), g->sh) + 1;
  g->OW = div_floor(W + 2 * g->pw - (g->dw * (g->kw - 1) + 1), g->sw) + 1;
  if (g->OH < 1 || g->OW < 1)
    return dpl_errorf(DPL_EINVAL, "%s: given input with spatial size (%lld, %lld), kernel_size (%lld, %lld), dilation "
                      "(%lld, %lld), padding (%lld, %lld), the array of sliding blocks has shape (%lld, %lld), but its "
                      "sizes must be at least 1", name, (long long)H, (long long)W, (long long)g->kh, (long long)g->kw,
                      (long long)g->dh, (long long)g->dw, (long long)g->ph, (long long)g->pw, (long long)g->OH,
                      (long long)g->OW);
  return DPL_OK;
}

/* the output columns [lo, hi) whose input column ow*sw + w0 lies in [0, W) */
static inline void valid_range(int64_t w0, int64_t sw, int64_t W, int64_t OW, int64_t *lo, int64_t *hi)
{
  int64_t l = w0 < 0 ? (-w0 + sw - 1) / sw : 0, h = W - w0 <= 0 ? 0 : (W - w0 + sw - 1) / sw;
  if (h > OW) h = OW;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

#define COLS(T)                                                                                          \
  /* the kh*kw rows of L columns of one (sample, channel) plane */                                      \
  static void im2col_plane_##T(const col_geom *g, const T *x, T *cols)                                  \
  {                                                                                                     \
    const int64_t L = g->OH * g->OW;                                                                    \
    for (int64_t i = 0; i < g->kh; i++)                                                                 \
      for (int64_t j = 0; j < g->kw; j++) {                                                             \
        T *row = cols + (i * g->kw + j) * L;                                                            \
        int64_t w0 = j * g->dw - g->pw, lo, hi;                                                         \
        valid_range(w0, g->sw, g->W, g->OW, &lo, &hi);                                                  \
        for (int64_t oh = 0; oh < g->OH; oh++) {                                                        \
          T *r = row + oh * g->OW;                                                                      \
          int64_t h = oh * g->sh - g->ph + i * g->dh;                                                   \
          if (h < 0 || h >= g->H) { for (int64_t ow = 0; ow < g->OW; ow++) r[ow] = 0; continue; }       \
          const T *xr = x + h * g->W + w0;                                                              \
          for (int64_t ow = 0; ow < lo; ow++) r[ow] = 0;                                                \
          if (g->sw == 1) for (int64_t ow = lo; ow < hi; ow++) r[ow] = xr[ow];                          \
          else for (int64_t ow = lo; ow < hi; ow++) r[ow] = xr[ow * g->sw];                             \
          for (int64_t ow = hi; ow < g->OW; ow++) r[ow] = 0;                                            \
        }                                                                                               \
      }                                                                                                 \
  }                                                                                                     \
  /* the plane (zeroed by the caller) += its kh*kw rows */                                              \
  static void col2im_plane_##T(const col_geom *g, const T *cols, T *x)                                  \
  {                                                                                                     \
    const int64_t L = g->OH * g->OW;                                                                    \
    for (int64_t i = 0; i < g->kh; i++)                                                                 \
      for (int64_t j = 0; j < g->kw; j++) {                                                             \
        const T *row = cols + (i * g->kw + j) * L;                                                      \
        int64_t w0 = j * g->dw - g->pw, lo, hi;                                                         \
        valid_range(w0, g->sw, g->W, g->OW, &lo, &hi);                                                  \
        for (int64_t oh = 0; oh < g->OH; oh++) {                                                        \
          int64_t h = oh * g->sh - g->ph + i * g->dh;                                                   \
          if (h < 0 || h >= g->H) continue;                                                             \
          T *xr = x + h * g->W + w0;                                                                    \
          const T *r = row + oh * g->OW;                                                                \
          if (g->sw == 1) for (int64_t ow = lo; ow < hi; ow++) xr[ow] += r[ow];                         \
          else for (int64_t ow = lo; ow < hi; ow++) xr[ow * g->sw] += r[ow];                            \
        }                                                                                               \
      }                                                                                                 \
  }
COLS(float)
COLS(double)

typedef struct col_job { const col_geom *g; const char *src; char *dst; int32_t kd; int back; } col_job;
static void col_range(int64_t lo, int64_t hi, void *ctx)
{
  const col_job *jb = ctx;
  const col_geom *g = jb->g;
  int64_t es = dpl_elsize(jb->kd), plane = g->H * g->W, block = g->kh * g->kw * g->OH * g->OW;
  for (int64_t p = lo; p < hi; p++) {
    if (!jb->back) {
      if (jb->kd == DPL_FLOAT32) im2col_plane_float(g, (const float *)(jb->src + p * plane * es), (float *)(jb->dst + p * block * es));
      else im2col_plane_double(g, (const double *)(jb->src + p * plane * es), (double *)(jb->dst + p * block * es));
    } else {
      if (jb->kd == DPL_FLOAT32) col2im_plane_float(g, (const float *)(jb->src + p * block * es), (float *)(jb->dst + p * plane * es));
      else col2im_plane_double(g, (const double *)(jb->src + p * block * es), (double *)(jb->dst + p * plane * es));
    }
  }
}

int dpl_im2col(const dpl_tensor *x, const int32_t *params, dpl_tensor **out)
{
  const char *name = "unfold";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(dpl_check_handle(name, "input", x));
  char b1[160];
  if (x->_ndim != 4)
    return dpl_errorf(DPL_EINVAL, "%s: expected a 4-d input [N, C, H, W], got shape %s", name,
                      dpl_shape_str(x->_ndim, x->_shape, b1, sizeof b1));
  col_geom g;
  DPL_TRY(col_setup(name, x->_shape[0], x->_shape[1], x->_shape[2], x->_shape[3], params, &g));
  if (dpl_is_devmem(x)) {
    DPL_TRY(dev_float(name, "input", x));
    dpl_bk_args k = {.op = DPL_BK_IM2COL, .in = {x}, .params = params, .out = {out}, .name = name};
    return dpl_bk_call(&k);
  }
  int32_t kd;
  dpl_tensor *cx = NULL, *res = NULL;
  DPL_TRY(float_in(name, "input", x, &kd, &cx));
  int64_t oshape[3] = {g.N, g.C * g.kh * g.kw, g.OH * g.OW};
  int st = dpl_new(name, kd, 3, oshape, x, &res);
  if (st == DPL_OK) {
    col_job jb = {&g, cx->_data, res->_data, kd, 0};
    dpl_parallel_for(g.N * g.C, grain_for(g.kh * g.kw * g.OH * g.OW), col_range, &jb);
    st = dpl_retype(name, &res, x->_dtype);
  }
  dpl_tensor_release(cx);
  return dpl_hand_over(st, 1, &res, &out);
}

int dpl_col2im(const dpl_tensor *cols, int64_t H, int64_t W, const int32_t *params, dpl_tensor **out)
{
  const char *name = "fold";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(dpl_check_handle(name, "input", cols));
  char b1[160];
  if (cols->_ndim != 3)
    return dpl_errorf(DPL_EINVAL, "%s: expected a 3-d input [N, C * kh * kw, L], got shape %s", name,
                      dpl_shape_str(cols->_ndim, cols->_shape, b1, sizeof b1));
  if (!params) return dpl_errorf(DPL_EINVAL, "%s: params is NULL", name);
  if (H < 1 || W < 1)
    return dpl_errorf(DPL_EINVAL, "%s: output_size must be at least 1, got (%lld, %lld)", name, (long long)H, (long long)W);
  int64_t kk = (int64_t)params[0] * params[1];
  if (kk < 1 || cols->_shape[1] % kk)
    return dpl_errorf(DPL_EINVAL, "%s: expected size of input's dimension 2 to be divisible by the product of "
                      "kernel_size (%lld), but got input.size(2)=%lld", name, (long long)kk, (long long)cols->_shape[1]);
  col_geom g;
  DPL_TRY(col_setup(name, cols->_shape[0], cols->_shape[1] / kk, H, W, params, &g));
  if (cols->_shape[2] != g.OH * g.OW)
    return dpl_errorf(DPL_EINVAL, "%s: given output_size (%lld, %lld), kernel_size (%d, %d), dilation (%d, %d), padding "
                      "(%d, %d), stride (%d, %d), expected size of input's dimension 3 to match the number of sliding "
                      "blocks %lld * %lld = %lld, but got input.size(3)=%lld", name, (long long)H, (long long)W,
                      (int)params[0], (int)params[1], (int)params[2], (int)params[3], (int)params[4], (int)params[5],
                      (int)params[6], (int)params[7], (long long)g.OH, (long long)g.OW, (long long)(g.OH * g.OW),
                      (long long)cols->_shape[2]);
  if (dpl_is_devmem(cols)) {
    DPL_TRY(dev_float(name, "input", cols));
    dpl_bk_args k = {.op = DPL_BK_COL2IM, .in = {cols}, .l = {H, W}, .params = params, .out = {out}, .name = name};
    return dpl_bk_call(&k);
  }
  int32_t kd;
  dpl_tensor *cc = NULL, *res = NULL;
  DPL_TRY(float_in(name, "input", cols, &kd, &cc));
  int64_t oshape[4] = {g.N, g.C, H, W};
  int st = new_zeros(name, kd, 4, oshape, cols, &res);
  if (st == DPL_OK) {
    col_job jb = {&g, cc->_data, res->_data, kd, 1};
    dpl_parallel_for(g.N * g.C, grain_for(g.kh * g.kw * g.OH * g.OW), col_range, &jb);
    st = dpl_retype(name, &res, cols->_dtype);
  }
  dpl_tensor_release(cc);
  return dpl_hand_over(st, 1, &res, &out);
}

/* ================================================================ padding */
/* the source index of output position j along a dim of size D padded by l before and r after:
 * -1 for the constant value. Circular padding wraps the input cropped by the negative pads
 * (PyTorch's: it copies the cropped input, then the wrapped parts from the output). */
static inline int64_t pad_src(int64_t j, int64_t l, int64_t r, int64_t D, int32_t mode)
{
  int64_t i = j - l;
  switch (mode) {
  case 0: return i >= 0 && i < D ? i : -1;
  case 1: if (i < 0) i = -i; if (i >= D) i = 2 * (D - 1) - i; return i;
  case 2: return i < 0 ? 0 : i >= D ? D - 1 : i;
  default: {
    int64_t a = l < 0 ? -l : 0, dc = D - a - (r < 0 ? -r : 0);
    i = (j - (l > 0 ? l : 0)) % dc;
    return a + (i < 0 ? i + dc : i);
  }
  }
}

typedef struct pad_geom {
  int64_t outer, D[3], O[3], l[3], r[3];
  int64_t *map[3]; /* source index per output position, -1: value */
  int64_t a, b;    /* the output range of the last dim that copies the input straight */
} pad_geom;

/* checks the sizes; pads[2k], pads[2k+1]: before and after of padded dim k (of n, the last dims) */
static int pad_setup(const char *name, const dpl_tensor *t, int32_t n, const int64_t *pads, int32_t mode, int from_out,
                     pad_geom *g, int64_t *shape)
{
  char b1[160];
  if (n < 1 || n > 3 || n > t->_ndim)
    return dpl_errorf(DPL_EINVAL, "%s: expected 1 to 3 padded dims (at most the input's %d), got %d", name,
                      (int)t->_ndim, (int)n);
  if (mode < 0 || mode > 3) return dpl_errorf(DPL_EINVAL, "%s: unknown mode %d (expected 0..3)", name, (int)mode);
  if (!pads) return dpl_errorf(DPL_EINVAL, "%s: pads is NULL", name);
  g->outer = 1;
  for (int32_t i = 0; i < t->_ndim - n; i++) { g->outer *= t->_shape[i]; shape[i] = t->_shape[i]; }
  for (int k = 0; k < 3; k++) { g->D[k] = g->O[k] = 1; g->l[k] = g->r[k] = 0; g->map[k] = NULL; }
  for (int32_t k = 0; k < n; k++) {
    int32_t d = t->_ndim - n + k;
    int64_t l = pads[2 * k], r = pads[2 * k + 1], s = t->_shape[d];
    int64_t D = from_out ? s - l - r : s, O = D + l + r;
    if (mode == 0 && (O < 0 || D < 0))
      return dpl_errorf(DPL_EINVAL, "%s: the input size %lld, plus negative padding %lld and %lld, gives a negative output "
                        "size along dim %d", name, (long long)D, (long long)l, (long long)r, (int)d + 1);
    if (mode == 1 && (l >= D || r >= D))
      return dpl_errorf(DPL_EINVAL, "%s: reflect padding must be less than the input size, but got padding (%lld, %lld) "
                        "along dim %d of input %s", name, (long long)l, (long long)r, (int)d + 1,
                        dpl_shape_str(t->_ndim, t->_shape, b1, sizeof b1));
    if (mode == 2 && D < 1)
      return dpl_errorf(DPL_EINVAL, "%s: replicate padding needs a non-empty dim %d, input %s", name, (int)d + 1,
                        dpl_shape_str(t->_ndim, t->_shape, b1, sizeof b1));
    int64_t dc = D - (l < 0 ? -l : 0) - (r < 0 ? -r : 0); /* circular: what is left after cropping */
    if (mode == 3 && (dc < 1 || l > dc || r > dc))
      return dpl_errorf(DPL_EINVAL, "%s: circular padding (%lld, %lld) along dim %d of size %lld wraps around more than "
                        "once (or crops it all)", name, (long long)l, (long long)r, (int)d + 1, (long long)D);
    if (mode != 0 && O < 1)
      return dpl_errorf(DPL_EINVAL, "%s: input size %lld along dim %d is too small for padding (%lld, %lld): the output "
                        "size would be %lld", name, (long long)D, (int)d + 1, (long long)l, (long long)r, (long long)O);
    int slot = 3 - n + k;
    g->D[slot] = D; g->O[slot] = O; g->l[slot] = l; g->r[slot] = r;
    shape[d] = from_out ? D : O;
  }
  return DPL_OK;
}

static int pad_tables(const char *name, pad_geom *g, int32_t mode)
{
  for (int k = 0; k < 3; k++) {
    g->map[k] = malloc((size_t)(g->O[k] > 0 ? g->O[k] : 1) * sizeof(int64_t));
    if (!g->map[k]) return dpl_errorf(DPL_ENOMEM, "%s: out of memory for the index tables", name);
    for (int64_t j = 0; j < g->O[k]; j++) g->map[k][j] = g->D[k] > 0 ? pad_src(j, g->l[k], g->r[k], g->D[k], mode) : -1;
  }
  g->a = g->l[2] > 0 ? g->l[2] : 0;
  g->b = g->D[2] + g->l[2] < g->O[2] ? g->D[2] + g->l[2] : g->O[2];
  if (g->b < g->a) g->b = g->a;
  return DPL_OK;
}
static void pad_free(pad_geom *g) { for (int k = 0; k < 3; k++) free(g->map[k]); }

typedef struct pad_job { const pad_geom *g; const char *x; char *o; int64_t es; char val[8]; int32_t kd; } pad_job;

#define PAD_ROW(U)                                                                                        \
  do {                                                                                                    \
    U *d = (U *)dst;                                                                                      \
    const U *s = (const U *)src;                                                                          \
    U v;                                                                                                  \
    memcpy(&v, jb->val, sizeof v);                                                                        \
    if (!s) { for (int64_t j = 0; j < O3; j++) d[j] = v; break; }                                         \
    if (g->b > g->a) memcpy(d + g->a, s + (g->a - g->l[2]), (size_t)(g->b - g->a) * sizeof(U));          \
    for (int64_t j = 0; j < g->a; j++) d[j] = m3[j] < 0 ? v : s[m3[j]];                                   \
    for (int64_t j = g->b; j < O3; j++) d[j] = m3[j] < 0 ? v : s[m3[j]];                                  \
  } while (0)

static void pad_range(int64_t lo, int64_t hi, void *ctx)
{
  const pad_job *jb = ctx;
  const pad_geom *g = jb->g;
  const int64_t O1 = g->O[0], O2 = g->O[1], O3 = g->O[2], D1 = g->D[0], D2 = g->D[1], D3 = g->D[2], es = jb->es;
  const int64_t *m3 = g->map[2];
  for (int64_t r = lo; r < hi; r++) {
    int64_t o2 = r % O2, o1 = (r / O2) % O1, ou = r / (O1 * O2);
    int64_t s1 = g->map[0][o1], s2 = g->map[1][o2];
    const char *src = s1 < 0 || s2 < 0 ? NULL : jb->x + (((ou * D1 + s1) * D2 + s2) * D3) * es;
    char *dst = jb->o + r * O3 * es;
    switch (es) {
    case 1: PAD_ROW(uint8_t); break;
    case 2: PAD_ROW(uint16_t); break;
    case 4: PAD_ROW(uint32_t); break;
    default: PAD_ROW(uint64_t); break;
    }
  }
}

#define PAD_BACK(T)                                                                                       \
  static void pad_back_##T(const pad_geom *g, const T *gy, T *gx, int64_t u0, int64_t u1)                 \
  {                                                                                                       \
    const int64_t O1 = g->O[0], O2 = g->O[1], O3 = g->O[2], D1 = g->D[0], D2 = g->D[1], D3 = g->D[2];     \
    const int64_t *m3 = g->map[2];                                                                        \
    for (int64_t u = u0; u < u1; u++)                                                                     \
      for (int64_t o1 = 0; o1 < O1; o1++)                                                                 \
        for (int64_t o2 = 0; o2 < O2; o2++) {                                                             \
          int64_t s1 = g->map[0][o1], s2 = g->map[1][o2];                                                 \
          if (s1 < 0 || s2 < 0) continue;                                                                 \
          T *d = gx + ((u * D1 + s1) * D2 + s2) * D3;                                                     \
          const T *s = gy + ((u * O1 + o1) * O2 + o2) * O3;                                               \
          const T *sm = s + g->a;                                                                         \
          T *dm = d + (g->a - g->l[2]);                                                                   \
          for (int64_t j = 0; j < g->b - g->a; j++) dm[j] += sm[j];                                       \
          for (int64_t j = 0; j < g->a; j++) if (m3[j] >= 0) d[m3[j]] += s[j];                             \
          for (int64_t j = g->b; j < O3; j++) if (m3[j] >= 0) d[m3[j]] += s[j];                            \
        }                                                                                                 \
  }
PAD_BACK(float)
PAD_BACK(double)

static void pad_back_range(int64_t lo, int64_t hi, void *ctx)
{
  const pad_job *jb = ctx;
  if (jb->kd == DPL_FLOAT32) pad_back_float(jb->g, (const float *)jb->x, (float *)jb->o, lo, hi);
  else pad_back_double(jb->g, (const double *)jb->x, (double *)jb->o, lo, hi);
}

int dpl_pad(const dpl_tensor *x, int32_t n, const int64_t *pads, int32_t mode, double value, dpl_tensor **out)
{
  const char *name = "pad";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(dpl_check_tensor(name, "input", x));
  pad_geom g;
  int64_t shape[DPL_MAX_DIMS];
  DPL_TRY(pad_setup(name, x, n, pads, mode, 0, &g, shape));
  dpl_tensor *cx = NULL, *res = NULL;
  int st = pad_tables(name, &g, mode);
  if (st == DPL_OK) st = dpl_contig_as(name, x, x->_dtype, &cx);
  if (st == DPL_OK) st = dpl_new(name, x->_dtype, x->_ndim, shape, x, &res);
  if (st == DPL_OK && res->_numel > 0) {
    pad_job jb = {&g, cx->_data, res->_data, dpl_elsize(x->_dtype), {0}, 0};
    dpl_store_f64(jb.val, x->_dtype, value);
    dpl_parallel_for(g.outer * g.O[0] * g.O[1], grain_for(g.O[2]), pad_range, &jb);
  }
  pad_free(&g);
  dpl_tensor_release(cx);
  return dpl_hand_over(st, 1, &res, &out);
}

int dpl_pad_backward(const dpl_tensor *grad, int32_t n, const int64_t *pads, int32_t mode, dpl_tensor **out)
{
  const char *name = "pad_backward";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(dpl_check_tensor(name, "grad", grad));
  pad_geom g;
  int64_t shape[DPL_MAX_DIMS];
  DPL_TRY(pad_setup(name, grad, n, pads, mode, 1, &g, shape));
  int32_t kd;
  dpl_tensor *cg = NULL, *res = NULL;
  int st = pad_tables(name, &g, mode);
  if (st == DPL_OK) st = float_in(name, "grad", grad, &kd, &cg);
  if (st == DPL_OK) st = new_zeros(name, kd, grad->_ndim, shape, grad, &res);
  if (st == DPL_OK) {
    pad_job jb = {&g, cg->_data, res->_data, dpl_elsize(kd), {0}, kd};
    dpl_parallel_for(g.outer, grain_for(g.O[0] * g.O[1] * g.O[2]), pad_back_range, &jb);
    st = dpl_retype(name, &res, grad->_dtype);
  }
  pad_free(&g);
  dpl_tensor_release(cg);
  return dpl_hand_over(st, 1, &res, &out);
}

/* ================================================================ interpolation */
/* PyTorch 1.13's index of the source of output position o (nearest: floor(o * scale), with
 * exact shortcuts for equal and doubled sizes; nearest-exact: floor((o + 0.5) * scale)), the
 * scale in float: 1/scale_factor when one was given, else in/out */
static float nearest_scale(int64_t in, int64_t out, double sf)
{
  return sf > 0 ? (float)(1.0 / sf) : (float)in / (float)out;
}
static int64_t nearest_index(int64_t o, int64_t in, int64_t out, double sf, int exact)
{
  int64_t i;
  if (exact) i = (int64_t)floorf((float)(((double)o + 0.5) * (double)nearest_scale(in, out, sf)));
  else if (out == in) return o;
  else if (out == 2 * in) return o >> 1;
  else i = (int64_t)floorf((float)o * nearest_scale(in, out, sf));
  return i < in - 1 ? i : in - 1;
}

/* linear: the two source indices and their weights of output position o (PyTorch's
 * area_pixel_compute_scale / area_pixel_compute_source_index in the compute type T) */
#define LINEAR_INDEX(T)                                                                                  \
  static void linear_index_##T(int64_t o, int64_t in, int64_t out, double sf, int align, int64_t *i0,   \
                               int64_t *i1, T *w0, T *w1)                                               \
  {                                                                                                     \
    if (out == in) { *i0 = *i1 = o; *w0 = 1; *w1 = 0; return; }                                         \
    T scale;                                                                                            \
    if (align) scale = out > 1 ? (T)(in - 1) / (T)(out - 1) : (T)0;                                     \
    else scale = sf > 0 ? (T)(1.0 / sf) : (T)in / (T)out;                                               \
    T src = align ? scale * (T)o : scale * ((T)o + (T)0.5) - (T)0.5;                                    \
    if (!align && src < 0) src = 0;                                                                     \
    *i0 = (int64_t)src;                                                                                 \
    *i1 = *i0 + (*i0 < in - 1 ? 1 : 0);                                                                 \
    T l1 = src - (T)*i0;                                                                                \
    l1 = l1 < 0 ? 0 : l1 > 1 ? 1 : l1;                                                                  \
    *w1 = l1;                                                                                           \
    *w0 = (T)1 - l1;                                                                                    \
  }
LINEAR_INDEX(float)
LINEAR_INDEX(double)

typedef struct interp_geom {
  int64_t planes, H, W, OH, OW; /* H = OH = 1 for one spatial dim */
  int32_t mode, nsp, kd;
  int64_t *hi0, *hi1, *wi0, *wi1; /* source indices per output row / column */
  void *hw0, *hw1, *ww0, *ww1;    /* linear weights (kd) */
} interp_geom;

static void interp_free(interp_geom *g)
{
  free(g->hi0); free(g->hi1); free(g->wi0); free(g->wi1);
  free(g->hw0); free(g->hw1); free(g->ww0); free(g->ww1);
}

static int interp_tables(const char *name, interp_geom *g, const double *scales, int32_t align)
{
  int64_t es = g->kd == DPL_FLOAT64 ? 8 : 4;
  size_t nh = (size_t)g->OH, nw = (size_t)g->OW;
  g->hi0 = malloc(nh * 8); g->hi1 = malloc(nh * 8); g->wi0 = malloc(nw * 8); g->wi1 = malloc(nw * 8);
  g->hw0 = malloc(nh * (size_t)es); g->hw1 = malloc(nh * (size_t)es);
  g->ww0 = malloc(nw * (size_t)es); g->ww1 = malloc(nw * (size_t)es);
  if (!g->hi0 || !g->hi1 || !g->wi0 || !g->wi1 || !g->hw0 || !g->hw1 || !g->ww0 || !g->ww1)
    return dpl_errorf(DPL_ENOMEM, "%s: out of memory for the index tables", name);
  double sh = g->nsp == 2 ? scales[0] : 0, sw = scales[g->nsp - 1];
  for (int pass = 0; pass < 2; pass++) {
    int64_t in = pass ? g->W : g->H, out = pass ? g->OW : g->OH;
    double sf = pass ? sw : sh;
    int64_t *i0 = pass ? g->wi0 : g->hi0, *i1 = pass ? g->wi1 : g->hi1;
    void *w0 = pass ? g->ww0 : g->hw0, *w1 = pass ? g->ww1 : g->hw1;
    for (int64_t o = 0; o < out; o++) {
      if (g->mode < 2) {
        i0[o] = i1[o] = nearest_index(o, in, out, sf, g->mode == 1);
      } else if (g->kd == DPL_FLOAT32) {
        linear_index_float(o, in, out, sf, align, &i0[o], &i1[o], (float *)w0 + o, (float *)w1 + o);
      } else {
        linear_index_double(o, in, out, sf, align, &i0[o], &i1[o], (double *)w0 + o, (double *)w1 + o);
      }
    }
  }
  return DPL_OK;
}

typedef struct interp_job { const interp_geom *g; const char *x; char *o; int64_t es; } interp_job;

#define NEAREST_PLANE(U)                                                                                  \
  do {                                                                                                    \
    const U *xs = (const U *)jb->x + p * g->H * g->W;                                                     \
    U *os = (U *)jb->o + p * g->OH * g->OW;                                                               \
    for (int64_t oh = 0; oh < g->OH; oh++) {                                                              \
      const U *xr = xs + g->hi0[oh] * g->W;                                                               \
      U *orow = os + oh * g->OW;                                                                          \
      for (int64_t ow = 0; ow < g->OW; ow++) orow[ow] = xr[g->wi0[ow]];                                   \
    }                                                                                                     \
  } while (0)

#define LINEAR_PLANE(T)                                                                                   \
  static void linear_plane_##T(const interp_geom *g, const T *xs, T *os)                                  \
  {                                                                                                       \
    const T *hw0 = g->hw0, *hw1 = g->hw1, *ww0 = g->ww0, *ww1 = g->ww1;                                   \
    for (int64_t oh = 0; oh < g->OH; oh++) {                                                              \
      const T *r0 = xs + g->hi0[oh] * g->W, *r1 = xs + g->hi1[oh] * g->W;                                 \
      T *orow = os + oh * g->OW;                                                                          \
      if (g->nsp == 1) {                                                                                  \
        for (int64_t ow = 0; ow < g->OW; ow++)                                                            \
          orow[ow] = r0[g->wi0[ow]] * ww0[ow] + r0[g->wi1[ow]] * ww1[ow];                                 \
        continue;                                                                                         \
      }                                                                                                   \
      T a = hw0[oh], b = hw1[oh];                                                                         \
      for (int64_t ow = 0; ow < g->OW; ow++) {                                                            \
        int64_t j0 = g->wi0[ow], j1 = g->wi1[ow];                                                         \
        orow[ow] = (r0[j0] * ww0[ow] + r0[j1] * ww1[ow]) * a + (r1[j0] * ww0[ow] + r1[j1] * ww1[ow]) * b;  \
      }                                                                                                   \
    }                                                                                                     \
  }                                                                                                       \
  static void interp_back_plane_##T(const interp_geom *g, const T *gy, T *gx)                             \
  {                                                                                                       \
    const T *hw0 = g->hw0, *hw1 = g->hw1, *ww0 = g->ww0, *ww1 = g->ww1;                                   \
    for (int64_t oh = 0; oh < g->OH; oh++) {                                                              \
      T *r0 = gx + g->hi0[oh] * g->W, *r1 = gx + g->hi1[oh] * g->W;                                       \
      const T *grow = gy + oh * g->OW;                                                                    \
      if (g->mode < 2) {                                                                                  \
        for (int64_t ow = 0; ow < g->OW; ow++) r0[g->wi0[ow]] += grow[ow];                                \
        continue;                                                                                         \
      }                                                                                                   \
      if (g->nsp == 1) {                                                                                  \
        for (int64_t ow = 0; ow < g->OW; ow++) {                                                          \
          r0[g->wi0[ow]] += ww0[ow] * grow[ow];                                                           \
          r0[g->wi1[ow]] += ww1[ow] * grow[ow];                                                           \
        }                                                                                                 \
        continue;                                                                                         \
      }                                                                                                   \
      T a = hw0[oh], b = hw1[oh];                                                                         \
      for (int64_t ow = 0; ow < g->OW; ow++) {                                                            \
        int64_t j0 = g->wi0[ow], j1 = g->wi1[ow];                                                         \
        T v = grow[ow];                                                                                   \
        r0[j0] += a * ww0[ow] * v;                                                                        \
        r0[j1] += a * ww1[ow] * v;                                                                        \
        r1[j0] += b * ww0[ow] * v;                                                                        \
        r1[j1] += b * ww1[ow] * v;                                                                        \
      }                                                                                                   \
    }                                                                                                     \
  }
LINEAR_PLANE(float)
LINEAR_PLANE(double)

static void interp_range(int64_t lo, int64_t hi, void *ctx)
{
  const interp_job *jb = ctx;
  const interp_geom *g = jb->g;
  for (int64_t p = lo; p < hi; p++) {
    if (g->mode < 2) {
      switch (jb->es) {
      case 1: NEAREST_PLANE(uint8_t); break;
      case 2: NEAREST_PLANE(uint16_t); break;
      case 4: NEAREST_PLANE(uint32_t); break;
      default: NEAREST_PLANE(uint64_t); break;
      }
    } else if (g->kd == DPL_FLOAT32) {
      linear_plane_float(g, (const float *)jb->x + p * g->H * g->W, (float *)jb->o + p * g->OH * g->OW);
    } else {
      linear_plane_double(g, (const double *)jb->x + p * g->H * g->W, (double *)jb->o + p * g->OH * g->OW);
    }
  }
}

static void interp_back_range(int64_t lo, int64_t hi, void *ctx)
{
  const interp_job *jb = ctx;
  const interp_geom *g = jb->g;
  for (int64_t p = lo; p < hi; p++) {
    if (g->kd == DPL_FLOAT32)
      interp_back_plane_float(g, (const float *)jb->x + p * g->OH * g->OW, (float *)jb->o + p * g->H * g->W);
    else
      interp_back_plane_double(g, (const double *)jb->x + p * g->OH * g->OW, (double *)jb->o + p * g->H * g->W);
  }
}

static const char *interp_mode_name(int32_t m)
{
  static const char *n[] = {"nearest", "nearest-exact", "linear"};
  return m >= 0 && m < 3 ? n[m] : "?";
}

/* t: the input (forward) or the gradient (backward); in_size: the input's spatial sizes */
static int interp_setup(const char *name, const dpl_tensor *t, int32_t nsp, const int64_t *in_size,
                        const int64_t *size, const double *scales, int32_t mode, interp_geom *g)
{
  char b1[160];
  memset(g, 0, sizeof *g);
  if (!size || !scales || !in_size) return dpl_errorf(DPL_EINVAL, "%s: size, in_size or scales is NULL", name);
  if (nsp != 1 && nsp != 2) return dpl_errorf(DPL_EINVAL, "%s: expected 1 or 2 spatial dims, got %d", name, (int)nsp);
  if (mode < 0 || mode > 2) return dpl_errorf(DPL_EINVAL, "%s: unknown mode %d (expected 0..2)", name, (int)mode);
  if (t->_ndim != nsp + 2)
    return dpl_errorf(DPL_EINVAL, "%s: expected a %d-d tensor for %d spatial dim%s, got shape %s", name, (int)nsp + 2,
                      (int)nsp, nsp > 1 ? "s" : "", dpl_shape_str(t->_ndim, t->_shape, b1, sizeof b1));
  for (int k = 0; k < nsp; k++)
    if (in_size[k] < 1 || size[k] < 1)
      return dpl_errorf(DPL_EINVAL, "%s (%s): input and output sizes should be greater than 0, but got input %lld and "
                        "output %lld along spatial dim %d", name, interp_mode_name(mode), (long long)in_size[k],
                        (long long)size[k], k + 1);
  g->planes = t->_shape[0] * t->_shape[1];
  g->nsp = nsp;
  g->mode = mode;
  g->H = nsp == 2 ? in_size[0] : 1;
  g->OH = nsp == 2 ? size[0] : 1;
  g->W = in_size[nsp - 1];
  g->OW = size[nsp - 1];
  return DPL_OK;
}

int dpl_interpolate(const dpl_tensor *x, int32_t nsp, const int64_t *size, const double *scales, int32_t mode,
                    int32_t align_corners, dpl_tensor **out)
{
  const char *name = "interpolate";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(dpl_check_tensor(name, "input", x));
  if (x->_ndim < 3 || x->_ndim > 4) {
    char b1[160];
    return dpl_errorf(DPL_EINVAL, "%s: expected a 3-d or 4-d input, got shape %s", name,
                      dpl_shape_str(x->_ndim, x->_shape, b1, sizeof b1));
  }
  interp_geom g;
  DPL_TRY(interp_setup(name, x, nsp, x->_shape + 2, size, scales, mode, &g));
  if (mode == 2 && !dpl_is_float(x->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: linear interpolation needs a floating-point input, got %s", name,
                      dpl_dtype_name(x->_dtype));
  g.kd = mode < 2 ? x->_dtype : x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  dpl_tensor *cx = NULL, *res = NULL;
  int64_t oshape[4] = {x->_shape[0], x->_shape[1], size[0], nsp == 2 ? size[1] : 0};
  int st = interp_tables(name, &g, scales, align_corners);
  if (st == DPL_OK) st = dpl_contig_as(name, x, g.kd, &cx);
  if (st == DPL_OK) st = dpl_new(name, g.kd, x->_ndim, oshape, x, &res);
  if (st == DPL_OK) {
    interp_job jb = {&g, cx->_data, res->_data, dpl_elsize(g.kd)};
    dpl_parallel_for(g.planes, grain_for(g.OH * g.OW * (mode == 2 ? 4 : 1)), interp_range, &jb);
    st = dpl_retype(name, &res, x->_dtype);
  }
  interp_free(&g);
  dpl_tensor_release(cx);
  return dpl_hand_over(st, 1, &res, &out);
}

int dpl_interpolate_backward(const dpl_tensor *grad, int32_t nsp, const int64_t *in_size, const double *scales,
                             int32_t mode, int32_t align_corners, dpl_tensor **out)
{
  const char *name = "interpolate_backward";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(dpl_check_tensor(name, "grad", grad));
  interp_geom g;
  DPL_TRY(interp_setup(name, grad, nsp, in_size, grad->_shape + 2, scales, mode, &g));
  dpl_tensor *cg = NULL, *res = NULL;
  int st = float_in(name, "grad", grad, &g.kd, &cg);
  int64_t ishape[4] = {grad->_shape[0], grad->_shape[1], in_size[0], nsp == 2 ? in_size[1] : 0};
  if (st == DPL_OK) st = interp_tables(name, &g, scales, align_corners);
  if (st == DPL_OK) st = new_zeros(name, g.kd, grad->_ndim, ishape, grad, &res);
  if (st == DPL_OK) {
    interp_job jb = {&g, cg->_data, res->_data, dpl_elsize(g.kd)};
    dpl_parallel_for(g.planes, grain_for(g.OH * g.OW * 4), interp_back_range, &jb);
    st = dpl_retype(name, &res, grad->_dtype);
  }
  interp_free(&g);
  dpl_tensor_release(cg);
  return dpl_hand_over(st, 1, &res, &out);
}

/* ================================================================ adaptive pooling */
/* PyTorch's windows: output o of n over an input of c covers [start, end) */
static inline int64_t ad_start(int64_t o, int64_t n, int64_t c) { return (o / n) * c + ((o % n) * c) / n; }
static inline int64_t ad_end(int64_t o, int64_t n, int64_t c) { return 1 + ((o + 1) * c - 1) / n; }

typedef struct ad_job { const char *x; char *o; int64_t *ix; int64_t H, W, OH, OW; int32_t kd; } ad_job;

/* global average pooling (output 1x1): planes p0..p1 of n elements each, summed in 8 partial
 * sums of the input's type over blocks of at most 4096 terms, each block's total added in double */
#define GLOBAL_AVG(T)                                                                                   \
  DPL_CLONES static void global_avg_##T(const T *x, T *o, int64_t n, int64_t p0, int64_t p1)           \
  {                                                                                                     \
    const double inv = 1.0 / (double)n;                                                                 \
    for (int64_t p = p0; p < p1; p++) {                                                                 \
      const T *r = x + p * n;                                                                           \
      double s = 0;                                                                                     \
      int64_t i = 0;                                                                                    \
      while (i + 8 <= n) {                                                                              \
        T acc[8] = {0};                                                                                 \
        int64_t end = i + 4096 < n - 7 ? i + 4096 : n - 7;                                              \
        for (; i < end; i += 8)                                                                         \
          for (int q = 0; q < 8; q++) acc[q] += r[i + q];                                               \
        s += ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));          \
      }                                                                                                 \
      for (; i < n; i++) s += r[i];                                                                     \
      o[p] = (T)(s * inv);                                                                              \
    }                                                                                                   \
  }                                                                                                     \
  /* its gradient: each plane filled with its gradient / n */                                          \
  DPL_CLONES static void global_avg_back_##T(const T *g, T *gx, int64_t n, int64_t p0, int64_t p1)     \
  {                                                                                                     \
    for (int64_t p = p0; p < p1; p++) {                                                                 \
      T v = (T)((double)g[p] / (double)n), *r = gx + p * n;                                             \
      for (int64_t i = 0; i < n; i++) r[i] = v;                                                         \
    }                                                                                                   \
  }
GLOBAL_AVG(float)
GLOBAL_AVG(double)

#define ADAPTIVE(T)                                                                                     \
  static void adavg_plane_##T(const ad_job *jb, const T *x, T *o)                                       \
  {                                                                                                     \
    const int64_t H = jb->H, W = jb->W, OH = jb->OH, OW = jb->OW;                                       \
    for (int64_t oh = 0; oh < OH; oh++) {                                                               \
      int64_t h0 = ad_start(oh, OH, H), h1 = ad_end(oh, OH, H);                                         \
      for (int64_t ow = 0; ow < OW; ow++) {                                                             \
        int64_t w0 = ad_start(ow, OW, W), w1 = ad_end(ow, OW, W);                                       \
        double s = 0;                                                                                   \
        for (int64_t h = h0; h < h1; h++)                                                               \
          for (int64_t w = w0; w < w1; w++) s += x[h * W + w];                                          \
        o[oh * OW + ow] = (T)(s / (double)((h1 - h0) * (w1 - w0)));                                     \
      }                                                                                                 \
    }                                                                                                   \
  }                                                                                                     \
  static void adavg_back_plane_##T(const ad_job *jb, const T *g, T *gx)                                 \
  {                                                                                                     \
    const int64_t H = jb->H, W = jb->W, OH = jb->OH, OW = jb->OW;                                       \
    for (int64_t oh = 0; oh < OH; oh++) {                                                               \
      int64_t h0 = ad_start(oh, OH, H), h1 = ad_end(oh, OH, H);                                         \
      for (int64_t ow = 0; ow < OW; ow++) {                                                             \
        int64_t w0 = ad_start(ow, OW, W), w1 = ad_end(ow, OW, W);                                       \
        T v = g[oh * OW + ow] / (T)((h1 - h0) * (w1 - w0));                                             \
        for (int64_t h = h0; h < h1; h++)                                                               \
          for (int64_t w = w0; w < w1; w++) gx[h * W + w] += v;                                         \
      }                                                                                                 \
    }                                                                                                   \
  }                                                                                                     \
  /* the first maximum of each window, a NaN taking over (PyTorch's rule: the last NaN) */            \
  static void admax_plane_##T(const ad_job *jb, const T *x, T *o, int64_t *ix)                          \
  {                                                                                                     \
    const int64_t H = jb->H, W = jb->W, OH = jb->OH, OW = jb->OW;                                       \
    for (int64_t oh = 0; oh < OH; oh++) {                                                               \
      int64_t h0 = ad_start(oh, OH, H), h1 = ad_end(oh, OH, H);                                         \
      for (int64_t ow = 0; ow < OW; ow++) {                                                             \
        int64_t w0 = ad_start(ow, OW, W), w1 = ad_end(ow, OW, W);                                       \
        T best = -(T)INFINITY;                                                                          \
        int64_t bi = h0 * W + w0;                                                                       \
        for (int64_t h = h0; h < h1; h++)                                                               \
          for (int64_t w = w0; w < w1; w++) {                                                           \
            T v = x[h * W + w];                                                                         \
            if (v > best || v != v) { best = v; bi = h * W + w; }                                       \
          }                                                                                             \
        o[oh * OW + ow] = best;                                                                         \
        ix[oh * OW + ow] = bi;                                                                          \
      }                                                                                                 \
    }                                                                                                   \
  }
ADAPTIVE(float)
ADAPTIVE(double)

static void adavg_range(int64_t lo, int64_t hi, void *ctx)
{
  const ad_job *jb = ctx;
  int64_t pi = jb->H * jb->W, po = jb->OH * jb->OW;
  if (po == 1) {
    if (jb->kd == DPL_FLOAT32) global_avg_float((const float *)jb->x, (float *)jb->o, pi, lo, hi);
    else global_avg_double((const double *)jb->x, (double *)jb->o, pi, lo, hi);
    return;
  }
  for (int64_t p = lo; p < hi; p++) {
    if (jb->kd == DPL_FLOAT32) adavg_plane_float(jb, (const float *)jb->x + p * pi, (float *)jb->o + p * po);
    else adavg_plane_double(jb, (const double *)jb->x + p * pi, (double *)jb->o + p * po);
  }
}
static void adavg_back_range(int64_t lo, int64_t hi, void *ctx)
{
  const ad_job *jb = ctx;
  int64_t pi = jb->H * jb->W, po = jb->OH * jb->OW;
  if (po == 1) {
    if (jb->kd == DPL_FLOAT32) global_avg_back_float((const float *)jb->x, (float *)jb->o, pi, lo, hi);
    else global_avg_back_double((const double *)jb->x, (double *)jb->o, pi, lo, hi);
    return;
  }
  for (int64_t p = lo; p < hi; p++) {
    if (jb->kd == DPL_FLOAT32) adavg_back_plane_float(jb, (const float *)jb->x + p * po, (float *)jb->o + p * pi);
    else adavg_back_plane_double(jb, (const double *)jb->x + p * po, (double *)jb->o + p * pi);
  }
}
static void admax_range(int64_t lo, int64_t hi, void *ctx)
{
  const ad_job *jb = ctx;
  int64_t pi = jb->H * jb->W, po = jb->OH * jb->OW;
  for (int64_t p = lo; p < hi; p++) {
    if (jb->kd == DPL_FLOAT32) admax_plane_float(jb, (const float *)jb->x + p * pi, (float *)jb->o + p * po, jb->ix + p * po);
    else admax_plane_double(jb, (const double *)jb->x + p * pi, (double *)jb->o + p * po, jb->ix + p * po);
  }
}

/* dev_ok: a tensor in device memory may pass (the op then runs in the backend) */
static int adaptive_setup(const char *name, const dpl_tensor *x, int64_t oh, int64_t ow, int dev_ok)
{
  DPL_TRY(dev_ok ? dpl_check_handle(name, "input", x) : dpl_check_tensor(name, "input", x));
  char b1[160];
  if (x->_ndim != 4)
    return dpl_errorf(DPL_EINVAL, "%s: expected a 4-d input [N, C, H, W], got shape %s", name,
                      dpl_shape_str(x->_ndim, x->_shape, b1, sizeof b1));
  if (x->_shape[2] < 1 || x->_shape[3] < 1)
    return dpl_errorf(DPL_EINVAL, "%s: expected an input of non-zero size in its pooled dims, got shape %s", name,
                      dpl_shape_str(x->_ndim, x->_shape, b1, sizeof b1));
  if (oh < 0 || ow < 0)
    return dpl_errorf(DPL_EINVAL, "%s: output_size must be >= 0, got (%lld, %lld)", name, (long long)oh, (long long)ow);
  return DPL_OK;
}

int dpl_adaptive_avg_pool2d(const dpl_tensor *x, int64_t oh, int64_t ow, dpl_tensor **out)
{
  const char *name = "adaptive_avg_pool2d";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(adaptive_setup(name, x, oh, ow, 1));
  if (dpl_is_devmem(x)) {
    DPL_TRY(dev_float(name, "input", x));
    dpl_bk_args k = {.op = DPL_BK_ADAPTIVE_AVG_POOL2D, .in = {x}, .l = {oh, ow}, .out = {out}, .name = name};
    return dpl_bk_call(&k);
  }
  int32_t kd;
  dpl_tensor *cx = NULL, *res = NULL;
  DPL_TRY(float_in(name, "input", x, &kd, &cx));
  int64_t oshape[4] = {x->_shape[0], x->_shape[1], oh, ow};
  int st = dpl_new(name, kd, 4, oshape, x, &res);
  if (st == DPL_OK) {
    ad_job jb = {cx->_data, res->_data, NULL, x->_shape[2], x->_shape[3], oh, ow, kd};
    dpl_parallel_for(oshape[0] * oshape[1], grain_for(x->_shape[2] * x->_shape[3]), adavg_range, &jb);
    st = dpl_retype(name, &res, x->_dtype);
  }
  dpl_tensor_release(cx);
  return dpl_hand_over(st, 1, &res, &out);
}

int dpl_adaptive_avg_pool2d_backward(const dpl_tensor *grad, int64_t H, int64_t W, dpl_tensor **out)
{
  const char *name = "adaptive_avg_pool2d_backward";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  int dev = dpl_is_devmem(grad);
  DPL_TRY(dev ? dpl_check_handle(name, "grad", grad) : dpl_check_tensor(name, "grad", grad));
  char b1[160];
  if (grad->_ndim != 4 || H < 1 || W < 1)
    return dpl_errorf(DPL_EINVAL, "%s: expected a 4-d grad and an input size >= 1, got grad %s and size (%lld, %lld)", name,
                      dpl_shape_str(grad->_ndim, grad->_shape, b1, sizeof b1), (long long)H, (long long)W);
  if (dev) {
    DPL_TRY(dev_float(name, "grad", grad));
    dpl_bk_args k = {.op = DPL_BK_ADAPTIVE_AVG_POOL2D_BWD, .in = {grad}, .l = {H, W}, .out = {out}, .name = name};
    return dpl_bk_call(&k);
  }
  int32_t kd;
  dpl_tensor *cg = NULL, *res = NULL;
  DPL_TRY(float_in(name, "grad", grad, &kd, &cg));
  int64_t ishape[4] = {grad->_shape[0], grad->_shape[1], H, W};
  int global = grad->_shape[2] == 1 && grad->_shape[3] == 1; /* (every element written: no zeroing) */
  int st = global ? dpl_new(name, kd, 4, ishape, grad, &res) : new_zeros(name, kd, 4, ishape, grad, &res);
  if (st == DPL_OK) {
    ad_job jb = {cg->_data, res->_data, NULL, H, W, grad->_shape[2], grad->_shape[3], kd};
    dpl_parallel_for(ishape[0] * ishape[1], grain_for(H * W), adavg_back_range, &jb);
    st = dpl_retype(name, &res, grad->_dtype);
  }
  dpl_tensor_release(cg);
  return dpl_hand_over(st, 1, &res, &out);
}

int dpl_adaptive_max_pool2d(const dpl_tensor *x, int64_t oh, int64_t ow, dpl_tensor **out, dpl_tensor **indices)
{
  const char *name = "adaptive_max_pool2d";
  if (!out || !indices) return dpl_errorf(DPL_EINVAL, "%s: out or indices is NULL", name);
  *out = *indices = NULL;
  DPL_TRY(adaptive_setup(name, x, oh, ow, 1));
  if (dpl_is_devmem(x)) {
    DPL_TRY(dev_float(name, "input", x));
    dpl_bk_args k = {.op = DPL_BK_ADAPTIVE_MAX_POOL2D, .in = {x}, .l = {oh, ow}, .out = {out, indices}, .name = name};
    return dpl_bk_call(&k);
  }
  int32_t kd;
  dpl_tensor *cx = NULL, *res = NULL, *idx = NULL;
  DPL_TRY(float_in(name, "input", x, &kd, &cx));
  int64_t oshape[4] = {x->_shape[0], x->_shape[1], oh, ow};
  int st = dpl_new(name, kd, 4, oshape, x, &res);
  if (st == DPL_OK) st = dpl_new(name, DPL_INT64, 4, oshape, x, &idx);
  if (st == DPL_OK) {
    ad_job jb = {cx->_data, res->_data, idx->_data, x->_shape[2], x->_shape[3], oh, ow, kd};
    dpl_parallel_for(oshape[0] * oshape[1], grain_for(x->_shape[2] * x->_shape[3]), admax_range, &jb);
    st = dpl_retype(name, &res, x->_dtype);
  }
  dpl_tensor_release(cx);
  return dpl_hand_over(st, 2, (dpl_tensor *[]){res, idx}, (dpl_tensor **[]){out, indices});
}

/* ================================================================ 1-d max pooling */
typedef struct mp1_job { const char *x; char *o; int64_t *ix; int64_t L, OL, k, s, p, d; int32_t kd; } mp1_job;

#define MAXPOOL1D(T)                                                                                    \
  static void mp1_rows_##T(const mp1_job *jb, int64_t r0, int64_t r1)                                   \
  {                                                                                                     \
    const int64_t L = jb->L, OL = jb->OL, k = jb->k, s = jb->s, p = jb->p, d = jb->d;                   \
    for (int64_t r = r0; r < r1; r++) {                                                                 \
      const T *x = (const T *)jb->x + r * L;                                                            \
      T *o = (T *)jb->o + r * OL;                                                                       \
      int64_t *ix = jb->ix + r * OL;                                                                    \
      for (int64_t q = 0; q < OL; q++) {                                                                \
        int64_t i0 = q * s - p, i1 = i0 + (k - 1) * d + 1;                                              \
        if (i1 > L) i1 = L;                                                                             \
        while (i0 < 0) i0 += d;                                                                         \
        T best = -(T)INFINITY;                                                                          \
        int64_t bi = i0;                                                                                \
        for (int64_t i = i0; i < i1; i += d) {                                                          \
          T v = x[i];                                                                                   \
          if (v > best || v != v) { best = v; bi = i; }                                                 \
        }                                                                                               \
        o[q] = best;                                                                                    \
        ix[q] = bi < L ? bi : L - 1;                                                                    \
      }                                                                                                 \
    }                                                                                                   \
  }
MAXPOOL1D(float)
MAXPOOL1D(double)
static void mp1_range(int64_t lo, int64_t hi, void *ctx)
{
  const mp1_job *jb = ctx;
  if (jb->kd == DPL_FLOAT32) mp1_rows_float(jb, lo, hi);
  else mp1_rows_double(jb, lo, hi);
}

int dpl_max_pool1d(const dpl_tensor *x, const int32_t *params, dpl_tensor **out, dpl_tensor **indices)
{
  const char *name = "max_pool1d";
  if (!out || !indices) return dpl_errorf(DPL_EINVAL, "%s: out or indices is NULL", name);
  *out = *indices = NULL;
  DPL_TRY(dpl_check_handle(name, "input", x));
  char b1[160];
  if (!params) return dpl_errorf(DPL_EINVAL, "%s: params is NULL (expected kernel, stride, padding, dilation, ceil_mode)", name);
  if (x->_ndim != 3)
    return dpl_errorf(DPL_EINVAL, "%s: expected a 3-d input [N, C, L], got shape %s", name,
                      dpl_shape_str(x->_ndim, x->_shape, b1, sizeof b1));
  int64_t k = params[0], s = params[1], p = params[2], d = params[3], L = x->_shape[2];
  if (k < 1 || s < 1 || p < 0 || d < 1 || (params[4] != 0 && params[4] != 1))
    return dpl_errorf(DPL_EINVAL, "%s: expected kernel_size >= 1, stride >= 1, padding >= 0, dilation >= 1, ceil_mode 0 "
                      "or 1, got %d, %d, %d, %d, %d", name, (int)params[0], (int)params[1], (int)params[2],
                      (int)params[3], (int)params[4]);
  if (2 * p > k)
    return dpl_errorf(DPL_EINVAL, "%s: padding should be at most half of kernel size, but got padding=%lld and "
                      "kernel_size=%lld", name, (long long)p, (long long)k);
  int64_t OL = div_floor(L + 2 * p - d * (k - 1) - 1 + (params[4] ? s - 1 : 0), s) + 1;
  if (params[4] && (OL - 1) * s >= L + p) OL--;
  if (OL < 1)
    return dpl_errorf(DPL_EINVAL, "%s: input of length %lld is too small for kernel_size %lld (dilation %lld, padding "
                      "%lld): the output length would be %lld", name, (long long)L, (long long)k, (long long)d,
                      (long long)p, (long long)OL);
  if (dpl_is_devmem(x)) {
    DPL_TRY(dev_float(name, "input", x));
    dpl_bk_args kb = {.op = DPL_BK_MAX_POOL1D, .in = {x}, .params = params, .out = {out, indices}, .name = name};
    return dpl_bk_call(&kb);
  }
  int32_t kd;
  dpl_tensor *cx = NULL, *res = NULL, *idx = NULL;
  DPL_TRY(float_in(name, "input", x, &kd, &cx));
  int64_t oshape[3] = {x->_shape[0], x->_shape[1], OL};
  int st = dpl_new(name, kd, 3, oshape, x, &res);
  if (st == DPL_OK) st = dpl_new(name, DPL_INT64, 3, oshape, x, &idx);
  if (st == DPL_OK) {
    mp1_job jb = {cx->_data, res->_data, idx->_data, L, OL, k, s, p, d, kd};
    dpl_parallel_for(oshape[0] * oshape[1], grain_for(L), mp1_range, &jb);
    st = dpl_retype(name, &res, x->_dtype);
  }
  dpl_tensor_release(cx);
  return dpl_hand_over(st, 2, (dpl_tensor *[]){res, idx}, (dpl_tensor **[]){out, indices});
}
