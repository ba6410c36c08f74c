/* dpl_tensor_conv.c: 2-d convolution (im2col + GEMM, with groups, stride,
 * padding, dilation) forward and backward, and 2-d max/average pooling forward
 * and backward, all NCHW, computed in float32 or float64. The im2col columns
 * of a chunk of samples (sized to stay in L2) go through one GEMM; im2col and
 * col2im are split across threads; max pooling has vector 2x2 kernels. Tensors
 * in device memory are validated here and then handed to the backend whole.
 * float32 3x3 stride-1 convs with enough channels go to Winograd F(2x2, 3x3)
 * (dpl_tensor_winograd.c) on AVX-512 CPUs, forward and backward (grad_input as a
 * conv of grad_out with the flipped kernels); dpl_conv2d_algo picks. */
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
  DPL_TRY(dpl_check_handle(name, "input", x));
  DPL_TRY(dpl_check_handle(name, "weight", w));
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

/* The valid output columns [*lo, *hi) of one kernel column: those ow with
 * 0 <= ow*sw + w0 < W; the others read the zero padding. */
static inline void ow_range(int64_t w0, int64_t sw, int64_t W, int64_t OW, int64_t *lo, int64_t *hi)
{
  int64_t l, h;
  if (sw == 1) { l = w0 < 0 ? -w0 : 0; h = W - w0 <= 0 ? 0 : W - w0; } /* no divisions on the common path */
  else { l = w0 < 0 ? (-w0 + sw - 1) / sw : 0; h = W - w0 <= 0 ? 0 : (W - w0 + sw - 1) / sw; }
  if (h > OW) h = OW;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

/* cols [Cg*kh*kw, ld] from one sample's channels c0..c0+Cg (rows r0..r1 of
 * the K rows): the row of (c, i, j) holds x[c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]. */
#define IM2COL(NAME, T)                                                                               \
  static inline __attribute__((always_inline)) void NAME##_rows(T *restrict row, const T *restrict xr, \
                                                                int64_t OH, int64_t step, int64_t OW) \
  {                                                                                                  \
    for (int64_t oh = 0; oh < OH; oh++, xr += step, row += OW)                                       \
      __builtin_memcpy(row, xr, (size_t)OW * sizeof(T)); /* inlined moves when OW is a constant */   \
  }                                                                                                  \
  DPL_CLONES static void NAME(const conv_geom *g, const T *x, T *cols, int64_t ld, int64_t r0, int64_t r1) \
  {                                                                                                  \
    const int64_t kh = g->kh, kw = g->kw, H = g->H, W = g->W, OH = g->OH, OW = g->OW;                \
    const int64_t sh = g->sh, sw = g->sw, ph = g->ph, pw = g->pw, dh = g->dh, dw = g->dw;            \
    int64_t c = r0 / (kh * kw), i = r0 / kw % kh, j = r0 % kw - 1;                                   \
    for (int64_t rr = r0; rr < r1; rr++) {                                                           \
      if (++j == kw) { j = 0; if (++i == kh) { i = 0; c++; } } /* (c, i, j) of row rr */           \
      T *row = cols + rr * ld;                                                                       \
      int64_t w0 = j * dw - pw, lo, hi;                                                              \
      ow_range(w0, sw, W, OW, &lo, &hi);                                                             \
      int64_t hfirst = i * dh - ph, hlast = (OH - 1) * sh - ph + i * dh;                             \
      if (sw == 1 && lo == 0 && hi == OW && hfirst >= 0 && hlast < H) { /* no padding touched */     \
        const T *xr = x + (c * H + hfirst) * W + w0;                                                 \
        switch (OW) { /* common widths as compile-time constants: straight vector moves */          \
        case 8: NAME##_rows(row, xr, OH, sh * W, 8); break;                                          \
        case 16: NAME##_rows(row, xr, OH, sh * W, 16); break;                                        \
        case 24: NAME##_rows(row, xr, OH, sh * W, 24); break;                                        \
        case 32: NAME##_rows(row, xr, OH, sh * W, 32); break;                                        \
        default: NAME##_rows(row, xr, OH, sh * W, OW); break;                                        \
        }                                                                                            \
        continue;                                                                                    \
      }                                                                                              \
      for (int64_t oh = 0; oh < OH; oh++) {                                                          \
        int64_t h = oh * sh - ph + i * dh;                                                           \
        T *r = row + oh * OW;                                                                        \
        if (h < 0 || h >= H) { for (int64_t ow = 0; ow < OW; ow++) r[ow] = 0; continue; }            \
        const T *xr = x + (c * H + h) * W + w0;                                                      \
        for (int64_t ow = 0; ow < lo; ow++) r[ow] = 0;                                               \
        if (sw == 1) for (int64_t ow = lo; ow < hi; ow++) r[ow] = xr[ow];                            \
        else for (int64_t ow = lo; ow < hi; ow++) r[ow] = xr[ow * sw];                               \
        for (int64_t ow = hi; ow < OW; ow++) r[ow] = 0;                                              \
      }                                                                                              \
    }                                                                                                \
  }                                                                                                  \
  /* gx[c] += the columns of channels c0..c1 (the rows of one channel overlap: one thread each) */  \
  DPL_CLONES static void NAME##_back(const conv_geom *g, const T *cols, T *gx, int64_t ld, int64_t c0, int64_t c1) \
  {                                                                                                  \
    const int64_t kh = g->kh, kw = g->kw, H = g->H, W = g->W, OH = g->OH, OW = g->OW;                \
    const int64_t sh = g->sh, sw = g->sw, ph = g->ph, pw = g->pw, dh = g->dh, dw = g->dw;            \
    for (int64_t c = c0; c < c1; c++)                                                                \
      for (int64_t i = 0; i < kh; i++)                                                               \
        for (int64_t j = 0; j < kw; j++) {                                                           \
          const T *row = cols + ((c * kh + i) * kw + j) * ld;                                        \
          int64_t w0 = j * dw - pw, lo, hi;                                                          \
          ow_range(w0, sw, W, OW, &lo, &hi);                                                         \
          int64_t hfirst = i * dh - ph, hlast = (OH - 1) * sh - ph + i * dh;                         \
          if (sw == 1 && lo == 0 && hi == OW && hfirst >= 0 && hlast < H) {                          \
            T *xr = gx + (c * H + hfirst) * W + w0;                                                  \
            for (int64_t oh = 0; oh < OH; oh++, xr += sh * W)                                        \
              for (int64_t ow = 0; ow < OW; ow++) xr[ow] += row[oh * OW + ow];                       \
            continue;                                                                                \
          }                                                                                          \
          for (int64_t oh = 0; oh < OH; oh++) {                                                      \
            int64_t h = oh * sh - ph + i * dh;                                                       \
            if (h < 0 || h >= H) continue;                                                           \
            T *xr = gx + (c * H + h) * W + w0;                                                       \
            const T *r = row + oh * OW;                                                              \
            if (sw == 1) for (int64_t ow = lo; ow < hi; ow++) xr[ow] += r[ow];                       \
            else for (int64_t ow = lo; ow < hi; ow++) xr[ow * sw] += r[ow];                          \
          }                                                                                          \
        }                                                                                            \
  }
IM2COL(im2col_f32, float)
IM2COL(im2col_f64, double)

/* im2col / col2im of m samples side by side ([K, m*L]), split across threads. */
typedef struct cols_job {
  int32_t kd;
  const conv_geom *g;
  const char *x; /* first sample, channel c0 of its group */
  char *cols;
  int64_t ld, L, es, m, sample_stride; /* sample_stride: bytes between samples of x */
} cols_job;

static void im2col_range(int64_t lo, int64_t hi, void *ctx)
{
  const cols_job *jb = ctx;
  int64_t K = jb->g->Cg * jb->g->kh * jb->g->kw;
  /* the range runs over (sample, row) pairs, sample-major */
  for (int64_t s = lo / K; s <= (hi - 1) / K; s++) {
    int64_t r0 = s == lo / K ? lo % K : 0, r1 = s == (hi - 1) / K ? (hi - 1) % K + 1 : K;
    const char *xs = jb->x + s * jb->sample_stride;
    char *cs = jb->cols + s * jb->L * jb->es;
    if (jb->kd == DPL_FLOAT32) im2col_f32(jb->g, (const float *)xs, (float *)cs, jb->ld, r0, r1);
    else im2col_f64(jb->g, (const double *)xs, (double *)cs, jb->ld, r0, r1);
  }
}

static void col2im_range(int64_t lo, int64_t hi, void *ctx)
{
  const cols_job *jb = ctx;
  int64_t Cg = jb->g->Cg;
  for (int64_t s = lo / Cg; s <= (hi - 1) / Cg; s++) {
    int64_t c0 = s == lo / Cg ? lo % Cg : 0, c1 = s == (hi - 1) / Cg ? (hi - 1) % Cg + 1 : Cg;
    char *xs = (char *)jb->x + s * jb->sample_stride;
    const char *cs = jb->cols + s * jb->L * jb->es;
    if (jb->kd == DPL_FLOAT32) im2col_f32_back(jb->g, (const float *)cs, (float *)xs, jb->ld, c0, c1);
    else im2col_f64_back(jb->g, (const double *)cs, (double *)xs, jb->ld, c0, c1);
  }
}

#define CHUNK_PAR_ELEMS (INT64_C(1) << 20) /* per thread, at least */
static void im2col_m(int32_t kd, const conv_geom *g, const void *x, void *cols, int64_t ld, int64_t m)
{
  int64_t K = g->Cg * g->kh * g->kw, L = g->OH * g->OW, es = dpl_elsize(kd);
  cols_job jb = {kd, g, x, cols, ld, L, es, m, g->C * g->H * g->W * es};
  /* a chunk is sized for L2 (a few tens of microseconds of copying): waking the
   * pool for less costs more than it saves on a shared machine */
  int64_t grain = L > 0 ? (CHUNK_PAR_ELEMS + L - 1) / L : 1;
  dpl_parallel_for(m * K, grain, im2col_range, &jb);
}

static void col2im_m(int32_t kd, const conv_geom *g, const void *cols, void *gx, int64_t ld, int64_t m)
{
  int64_t L = g->OH * g->OW, es = dpl_elsize(kd);
  cols_job jb = {kd, g, gx, (char *)cols, ld, L, es, m, g->C * g->H * g->W * es};
  int64_t per = g->kh * g->kw * L;
  int64_t grain = per > 0 ? (CHUNK_PAR_ELEMS + per - 1) / per : 1;
  dpl_parallel_for(m * g->Cg, grain, col2im_range, &jb);
}

static int64_t conv_chunk_bytes(void)
{
  static int64_t v;
  if (!v) { const char *e = getenv("DPL_CONV_CHUNK_KB"); v = (e && atoll(e) > 0 ? atoll(e) : 512) << 10; }
  return v;
}

/* Samples go through GEMM in chunks: the im2col columns of nb samples side by
 * side ([K, nb*L]) make one product instead of nb small ones. */
static int64_t chunk_samples(const conv_geom *g, int64_t K, int64_t L, int64_t es)
{
  int64_t per = (K > g->Og ? K : g->Og) * L * es;
  int64_t nb = per > 0 ? conv_chunk_bytes() / per : g->N;
  if (nb < 1) nb = 1;
  if (nb > g->N) nb = g->N;
  return nb;
}

/* A float32 row summed with 32 float partial sums, each of at most 256 terms
 * before it is added into float64: vectorised, where one serial chain would be
 * bound by the add latency. */
DPL_CLONES static double sum_f32(const float *r, int64_t n)
{
  double sum = 0;
  int64_t l = 0;
  while (l + 32 <= n) {
    float acc[32] = {0};
    int64_t end = l + 32 * 256 < n ? l + 32 * 256 : n - 31;
    for (; l < end; l += 32)
      for (int q = 0; q < 32; q++) acc[q] += r[l + q];
    for (int q = 0; q < 32; q++) sum += acc[q];
  }
  for (; l < n; l++) sum += r[l];
  return sum;
}

static int conv_inputs(const char *name, const dpl_tensor *x, const dpl_tensor *w, int32_t *kd, dpl_tensor **cx, dpl_tensor **cw)
{
  *kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  DPL_TRY(dpl_contig_as(name, x, *kd, cx));
  int st = dpl_contig_as(name, w, *kd, cw);
  if (st != DPL_OK) dpl_tensor_release(*cx);
  return st;
}


/* float32 forward straight into the output: one product per sample (the AVX-512
 * GEMM reads its operands in place, so a per-sample call costs no packing), the
 * bias added as the tiles are stored. 0 when the GEMM declines (no AVX-512, a
 * small product): the caller then takes the batched path. */
static int conv_fwd_direct(const conv_geom *g, int64_t K, int64_t L, const float *ws, const float *cols, int64_t ld,
                           int64_t m, const float *bias, float *out)
{
  for (int64_t s = 0; s < m; s++) {
    float *o = out + s * g->O * L;
    int ok = bias ? dpl_sgemm_avx512_bias(g->Og, L, K, ws, K, cols + s * L, ld, bias, o, L)
                  : dpl_sgemm_avx512(0, 0, g->Og, L, K, 1.0f, ws, K, cols + s * L, ld, 0.0f, o, L);
    if (!ok) return 0; /* declines for every sample alike (it depends on the shape only) */
  }
  return 1;
}

static _Atomic int32_t conv_algo = -1; /* DPL_CONV_AUTO or DPL_CONV_IM2COL; -1 until read from the environment */

int32_t dpl_conv2d_algo(int32_t algo)
{
  int32_t prev = atomic_load(&conv_algo);
  if (prev < 0) {
    const char *e = getenv("DPL_CONV_ALGO");
    prev = e && strcmp(e, "im2col") == 0 ? DPL_CONV_IM2COL : DPL_CONV_AUTO;
  }
  if (algo == DPL_CONV_AUTO || algo == DPL_CONV_IM2COL) atomic_store(&conv_algo, algo);
  else if (atomic_load(&conv_algo) < 0) atomic_store(&conv_algo, prev);
  return prev;
}

/* 1 when the n floats are all finite: Winograd's transforms subtract neighbouring values,
 * so an inf there would become NaN where im2col keeps the inf (such inputs take im2col) */
static int all_finite_f32(const float *p, int64_t n)
{
  const uint32_t *u = (const uint32_t *)p;
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad |= (u[i] & 0x7f800000u) == 0x7f800000u;
  return !bad;
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
    DPL_TRY(dpl_check_handle(name, "bias", bias));
    DPL_TRY(dpl_check_same_device(name, x, bias));
    if (bias->_ndim != 1 || bias->_shape[0] != g.O)
      return dpl_errorf(DPL_EINVAL, "%s: expected bias of shape [%lld], got %d dims", name, (long long)g.O, (int)bias->_ndim);
  }
  if (dpl_is_devmem(x)) {
    dpl_bk_args k = {.op = DPL_BK_CONV2D, .in = {x, w, bias}, .params = params, .i = {groups}, .out = {out}, .name = name};
    return dpl_bk_call(&k);
  }
  DPL_TRY(dpl_check_tensor(name, "input", x)); /* host memory from here on */
  DPL_TRY(dpl_check_tensor(name, "weight", w));
  if (bias) DPL_TRY(dpl_check_tensor(name, "bias", bias));
  int32_t kd;
  dpl_tensor *cx, *cw, *res = NULL, *cb = NULL;
  DPL_TRY(conv_inputs(name, x, w, &kd, &cx, &cw));
  int64_t oshape[4] = {g.N, g.O, g.OH, g.OW};
  if (kd == DPL_FLOAT32 && dpl_conv_winograd_fits(g.Cg, g.Og, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw) &&
      dpl_conv2d_algo(-1) == DPL_CONV_AUTO && all_finite_f32(cx->_data, cx->_numel) &&
      all_finite_f32(cw->_data, cw->_numel)) {
    int st = dpl_new(name, kd, 4, oshape, x, &res);
    if (st == DPL_OK && bias) st = dpl_contig_as(name, bias, kd, &cb);
    if (st == DPL_OK)
      st = dpl_conv_winograd_f32(g.N, g.C, g.H, g.W, g.O, g.groups, g.ph, g.pw, cx->_data, cw->_data,
                                 cb ? cb->_data : NULL, res->_data);
    if (st == DPL_OK) st = dpl_retype(name, &res, x->_dtype);
    dpl_release_n(3, (dpl_tensor *[]){cx, cw, cb});
    return dpl_hand_over(st, 1, &res, &out);
  }
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
        im2col_m(kd, &g, (const char *)cx->_data + ((n0 * g.C + gr * g.Cg) * g.H * g.W) * es, cols, ld, m);
        const char *ws = (const char *)cw->_data + (gr * g.Og * K) * es;
        if (kd == DPL_FLOAT32 && conv_fwd_direct(&g, K, L, (const float *)ws, (const float *)cols, ld, m,
                                                 cb ? (const float *)cb->_data + gr * g.Og : NULL,
                                                 (float *)res->_data + (n0 * g.O + gr * g.Og) * L))
          continue;
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
    st = dpl_retype(name, &res, x->_dtype);
  }
  free(cols);
  free(tmp);
  dpl_release_n(3, (dpl_tensor *[]){cx, cw, cb});
  return dpl_hand_over(st, 1, &res, &out);
}

/* grad_input of a 3x3 stride-1 float32 conv by the Winograd forward kernel: a conv of
 * grad_out [N, O, OH, OW] with the kernels flipped in space and the input and output
 * channels of each group swapped ([C, Og, 3, 3]), padding 2 - p (negative: rows of
 * grad_out that reach no input are skipped), whose output is H + 2p - 2 + 2(2 - p) - 2 = H
 * rows (the same for the columns); every element of gx is written. */
static int conv_bwd_input_winograd(const char *name, const conv_geom *g, const float *gy, const float *w, float *gx)
{
  float *wf = malloc(CF(g->C * g->Og * 9) * sizeof(float));
  if (!wf) return dpl_errorf(DPL_ENOMEM, "%s: out of memory for the flipped kernels", name);
  for (int64_t gr = 0; gr < g->groups; gr++)
    for (int64_t o = 0; o < g->Og; o++)
      for (int64_t c = 0; c < g->Cg; c++) {
        const float *k = w + ((gr * g->Og + o) * g->Cg + c) * 9;
        float *f = wf + ((gr * g->Cg + c) * g->Og + o) * 9;
        for (int q = 0; q < 9; q++) f[q] = k[8 - q];
      }
  int st = dpl_conv_winograd_f32(g->N, g->O, g->OH, g->OW, g->C, g->groups, 2 - g->ph, 2 - g->pw, gy, wf, NULL, gx);
  free(wf);
  return st;
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
  DPL_TRY(dpl_check_handle(name, "grad_out", grad_out));
  DPL_TRY(dpl_check_same_device(name, x, grad_out));
  if (grad_out->_ndim != 4 || grad_out->_shape[0] != g.N || grad_out->_shape[1] != g.O || grad_out->_shape[2] != g.OH ||
      grad_out->_shape[3] != g.OW) {
    char b1[160];
    int64_t want[4] = {g.N, g.O, g.OH, g.OW};
    char b2[160];
    return dpl_errorf(DPL_EINVAL, "%s: expected grad_out of shape %s, got %s", name, dpl_shape_str(4, want, b2, sizeof b2),
                      dpl_shape_str(grad_out->_ndim, grad_out->_shape, b1, sizeof b1));
  }
  if (dpl_is_devmem(x)) {
    dpl_bk_args k = {.op = DPL_BK_CONV2D_BWD, .in = {grad_out, x, w}, .params = params, .i = {groups},
                     .out = {grad_x, grad_w, grad_bias}, .name = name};
    return dpl_bk_call(&k);
  }
  DPL_TRY(dpl_check_tensor(name, "input", x)); /* host memory from here on */
  DPL_TRY(dpl_check_tensor(name, "weight", w));
  DPL_TRY(dpl_check_tensor(name, "grad_out", grad_out));
  int32_t kd;
  dpl_tensor *cx, *cw, *cg = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
  DPL_TRY(conv_inputs(name, x, w, &kd, &cx, &cw));
  int64_t K = g.Cg * g.kh * g.kw, L = g.OH * g.OW, es = dpl_elsize(kd);
  /* float32 3x3 stride-1 convs that the forward runs by Winograd: grad_input by the
   * same kernel (a conv of grad_out), grad_weight by Winograd's transforms, grad_bias
   * straight from grad_out; everything else through im2col + GEMM (the loop below) */
  int wino = kd == DPL_FLOAT32 && dpl_conv_winograd_fits(g.Cg, g.Og, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw) &&
             dpl_conv2d_algo(-1) == DPL_CONV_AUTO;
  int st = dpl_contig_as(name, grad_out, kd, &cg);
  if (st == DPL_OK && wino) /* (non-finite values take im2col: see all_finite_f32) */
    wino = all_finite_f32(cg->_data, cg->_numel) && all_finite_f32(cx->_data, cx->_numel) &&
           all_finite_f32(cw->_data, cw->_numel);
  int loop = !wino && (grad_x || grad_w || grad_bias);
  int64_t nb = chunk_samples(&g, K, L, es);
  void *cols = loop ? malloc(CF(K * nb * L * es)) : NULL;
  void *gyc = loop ? malloc(CF(g.Og * nb * L * es)) : NULL;
  if (st == DPL_OK && loop && !(cols && gyc)) st = dpl_errorf(DPL_ENOMEM, "%s: out of memory for the im2col buffer", name);
  /* the im2col loop adds into the gradients: zeros first (the Winograd path writes them whole) */
  if (st == DPL_OK && grad_x) st = dpl_new(name, kd, 4, x->_shape, x, &gx);
  if (st == DPL_OK && gx && loop) memset(gx->_data, 0, (size_t)(gx->_numel * es));
  if (st == DPL_OK && grad_w) st = dpl_new(name, kd, 4, w->_shape, w, &gw);
  if (st == DPL_OK && gw && loop) memset(gw->_data, 0, (size_t)(gw->_numel * es));
  if (st == DPL_OK && grad_bias) st = dpl_new(name, kd, 1, &g.O, w, &gb);
  if (st == DPL_OK && gb && loop) memset(gb->_data, 0, (size_t)(gb->_numel * es));
  if (st == DPL_OK && wino && gx)
    st = conv_bwd_input_winograd(name, &g, (const float *)cg->_data, (const float *)cw->_data, (float *)gx->_data);
  if (st == DPL_OK && wino && gw)
    st = dpl_conv_winograd_wgrad_f32(g.N, g.C, g.H, g.W, g.O, g.groups, g.ph, g.pw, (const float *)cx->_data,
                                     (const float *)cg->_data, (float *)gw->_data);
  if (st == DPL_OK && wino && gb)
    for (int64_t o = 0; o < g.O; o++) {
      double sum = 0;
      for (int64_t n = 0; n < g.N; n++) sum += sum_f32((const float *)cg->_data + (n * g.O + o) * L, L);
      ((float *)gb->_data)[o] = (float)sum;
    }
  if (st == DPL_OK && loop) {
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
          im2col_m(kd, &g, (const char *)cx->_data + ((n0 * g.C + gr * g.Cg) * g.H * g.W) * es, cols, ld, m);
          dpl_gemm(kd, 0, 1, g.Og, K, ld, 1.0, gyc, ld, cols, ld, 1.0, (char *)gw->_data + gr * g.Og * K * es, K);
        }
        if (gx) {
          dpl_gemm(kd, 1, 0, K, ld, g.Og, 1.0, ws, K, gyc, ld, 0.0, cols, ld);
          col2im_m(kd, &g, cols, (char *)gx->_data + ((n0 * g.C + gr * g.Cg) * g.H * g.W) * es, ld, m);
        }
        if (gb)
          for (int64_t o = 0; o < g.Og; o++) {
            double sum = 0;
            if (kd == DPL_FLOAT32) sum = sum_f32((const float *)gyc + o * ld, ld);
            else { const double *r = (const double *)gyc + o * ld; for (int64_t l = 0; l < ld; l++) sum += r[l]; }
            char *pb = (char *)gb->_data + (gr * g.Og + o) * es;
            dpl_store_f64(pb, kd, dpl_load_f64(pb, kd) + sum);
          }
      }
    }
  }
  if (st == DPL_OK) st = dpl_retype(name, &gx, x->_dtype);
  if (st == DPL_OK) st = dpl_retype(name, &gw, x->_dtype);
  if (st == DPL_OK) st = dpl_retype(name, &gb, x->_dtype);
  free(cols);
  free(gyc);
  dpl_release_n(3, (dpl_tensor *[]){cx, cw, cg});
  return dpl_hand_over(st, 3, (dpl_tensor *[]){gx, gw, gb}, (dpl_tensor **[]){grad_x, grad_w, grad_bias});
}

/* ---- pooling ---- */
typedef struct pool_geom { int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, OH, OW; } pool_geom;

/* output size along one dim: floor (ceil_mode: ceil) of (in + 2p - k) / s, plus one; with
 * ceil_mode the last window must start inside the input or the left padding (PyTorch's rule) */
static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int32_t ceil_mode)
{
  int64_t span = in + 2 * p - k, o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) o--;
  return o;
}

static int pool_setup(const char *name, const dpl_tensor *x, const int32_t *params, pool_geom *g)
{
  DPL_TRY(dpl_check_handle(name, "input", x));
  char b1[160];
  if (!params) return dpl_errorf(DPL_EINVAL, "%s: params is NULL (expected kernel, stride, padding, ceil_mode)", name);
  if (params[6] != 0 && params[6] != 1) return dpl_errorf(DPL_EINVAL, "%s: ceil_mode must be 0 or 1, got %d", name, (int)params[6]);
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
  g->OH = pool_out(g->H, g->kh, g->sh, g->ph, params[6]);
  g->OW = pool_out(g->W, g->kw, g->sw, g->pw, params[6]);
  return DPL_OK;
}

/* Max over each window of planes p0..p1; ix gets the 0-based position of the
 * first maximum in its plane (NaN wins, as in PyTorch). The geometry is copied
 * into locals: the int64 index stores could otherwise alias it. */
#define MAXROW(NAME, T)                                                                           \
  /* one output row of a 2x2, stride 2 pool: a tree of branch-free selects (first max wins) */   \
  DPL_CLONES static void NAME##_row2x2(const T *r0, int64_t W, int64_t OW, T *restrict op,       \
                                       int64_t *restrict ip, int64_t base)                       \
  {                                                                                              \
    const T *r1 = r0 + W;                                                                        \
    for (int64_t ow = 0; ow < OW; ow++) {                                                        \
      T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];                 \
      int64_t t1 = (b > a) | ((b != b) & (a == a));                                              \
      int64_t t2 = (d > c) | ((d != d) & (c == c));                                              \
      T m1 = t1 ? b : a, m2 = t2 ? d : c;                                                        \
      int64_t t3 = (m2 > m1) | ((m2 != m2) & (m1 == m1));                                        \
      op[ow] = t3 ? m2 : m1;                                                                     \
      ip[ow] = base + 2 * ow + (t3 ? W + t2 : t1);                                               \
    }                                                                                            \
  }
#define MAXPOOL(NAME, T)                                                                          \
  static void NAME(const pool_geom *g, const T *xs, T *o, int64_t *ix, int64_t p0, int64_t p1)  \
  {                                                                                              \
    const int64_t H = g->H, W = g->W, OH = g->OH, OW = g->OW, kh = g->kh, kw = g->kw;            \
    const int64_t sh = g->sh, sw = g->sw, ph = g->ph, pw = g->pw;                                \
    for (int64_t p = p0; p < p1; p++) {                                                          \
      const T *plane = xs + p * H * W;                                                           \
      T *op = o + p * OH * OW;                                                                   \
      int64_t *ip = ix + p * OH * OW;                                                            \
      if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && 2 * OH <= H &&       \
          2 * OW <= W) { /* (ceil_mode: no partial window at the edge) */                       \
        for (int64_t oh = 0; oh < OH; oh++)                                                      \
          ROW2X2_##NAME(plane + 2 * oh * W, W, OW, op + oh * OW, ip + oh * OW, 2 * oh * W);       \
        continue;                                                                                \
      }                                                                                          \
      for (int64_t oh = 0; oh < OH; oh++)                                                        \
        for (int64_t ow = 0; ow < OW; ow++) {                                                    \
          int64_t h0 = oh * sh - ph, w0 = ow * sw - pw;                                          \
          T best = 0;                                                                            \
          int64_t bi = -1;                                                                       \
          for (int64_t i = 0; i < kh; i++) {                                                     \
            int64_t h = h0 + i;                                                                  \
            if (h < 0 || h >= H) continue;                                                       \
            for (int64_t j = 0; j < kw; j++) {                                                   \
              int64_t ww = w0 + j;                                                               \
              if (ww < 0 || ww >= W) continue;                                                   \
              T v = plane[h * W + ww];                                                           \
              /* branch-free select (random data defeats branch prediction); NaN wins */         \
              int take = (bi < 0) | (v > best) | ((v != v) & (best == best));                    \
              best = take ? v : best;                                                            \
              bi = take ? h * W + ww : bi;                                                       \
            }                                                                                    \
          }                                                                                      \
          op[oh * OW + ow] = best;                                                               \
          ip[oh * OW + ow] = bi;                                                                 \
        }                                                                                        \
    }                                                                                            \
  }
MAXROW(maxpool_f32, float)
MAXROW(maxpool_f64, double)
#define ROW2X2_maxpool_f64 maxpool_f64_row2x2
#if defined(__SSE2__)
#include <emmintrin.h>
#define ROW2X2_maxpool_f32 maxpool_f32_row2x2_sse
/* float32 2x2 rows, 4 outputs at a time with SSE2 (the selects above stay scalar
 * branches in GCC's output, which random data mispredicts). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
/* 16 outputs at a time with AVX-512: even/odd columns split by two permutes, the
 * selects as mask blends, the indices widened to int64 in registers; returns how
 * many outputs it wrote */
__attribute__((target("avx512f"))) static int64_t maxpool_f32_row2x2_512(const float *r0, int64_t W, int64_t OW,
                                                                         float *restrict op, int64_t *restrict ip,
                                                                         int64_t base)
{
  const float *r1 = r0 + W;
  const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i od = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  const __m512i one = _mm512_set1_epi32(1), wv = _mm512_set1_epi32((int32_t)W);
  const __m512i ramp = _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0);
  int64_t ow = 0;
  for (; ow + 16 <= OW; ow += 16) {
    __m512 x0 = _mm512_loadu_ps(r0 + 2 * ow), x1 = _mm512_loadu_ps(r0 + 2 * ow + 16);
    __m512 y0 = _mm512_loadu_ps(r1 + 2 * ow), y1 = _mm512_loadu_ps(r1 + 2 * ow + 16);
    __m512 a = _mm512_permutex2var_ps(x0, ev, x1), b = _mm512_permutex2var_ps(x0, od, x1);
    __m512 c = _mm512_permutex2var_ps(y0, ev, y1), d = _mm512_permutex2var_ps(y0, od, y1);
    __mmask16 t1 = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ) |
                   (_mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(a, a, _CMP_ORD_Q));
    __mmask16 t2 = _mm512_cmp_ps_mask(d, c, _CMP_GT_OQ) |
                   (_mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(c, c, _CMP_ORD_Q));
    __m512 m1 = _mm512_mask_blend_ps(t1, a, b), m2 = _mm512_mask_blend_ps(t2, c, d);
    __mmask16 t3 = _mm512_cmp_ps_mask(m2, m1, _CMP_GT_OQ) |
                   (_mm512_cmp_ps_mask(m2, m2, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(m1, m1, _CMP_ORD_Q));
    _mm512_storeu_ps(op + ow, _mm512_mask_blend_ps(t3, m1, m2));
    __m512i k1 = _mm512_maskz_mov_epi32(t1, one), k2 = _mm512_mask_add_epi32(wv, t2, wv, one);
    __m512i k = _mm512_mask_blend_epi32(t3, k1, k2);
    __m512i b0 = _mm512_add_epi64(_mm512_set1_epi64(base + 2 * ow), ramp);
    __m512i b1 = _mm512_add_epi64(_mm512_set1_epi64(base + 2 * ow + 16), ramp);
    _mm512_storeu_si512(ip + ow, _mm512_add_epi64(b0, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(k))));
    _mm512_storeu_si512(ip + ow + 8, _mm512_add_epi64(b1, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(k, 1))));
  }
  return ow;
}
static int cpu_avx512(void) { return dpl_cpu_avx512f(); }
#else
static int64_t maxpool_f32_row2x2_512(const float *r0, int64_t W, int64_t OW, float *op, int64_t *ip, int64_t base)
{
  (void)r0; (void)W; (void)OW; (void)op; (void)ip; (void)base;
  return 0;
}
static int cpu_avx512(void) { return 0; }
#endif

static void maxpool_f32_row2x2_sse(const float *r0, int64_t W, int64_t OW, float *restrict op, int64_t *restrict ip,
                                   int64_t base)
{
  if (W > INT32_MAX / 4) { maxpool_f32_row2x2(r0, W, OW, op, ip, base); return; }
  if (OW >= 16 && cpu_avx512()) { /* whole groups of 16 (masked stores are slow on some CPUs) */
    int64_t done = maxpool_f32_row2x2_512(r0, W, OW, op, ip, base);
    r0 += 2 * done; op += done; ip += done; base += 2 * done; OW -= done;
  }
  const float *r1 = r0 + W;
  const __m128i wv = _mm_set1_epi32((int32_t)W);
  int64_t ow = 0;
  for (; ow + 4 <= OW; ow += 4) {
    __m128 x0 = _mm_loadu_ps(r0 + 2 * ow), x1 = _mm_loadu_ps(r0 + 2 * ow + 4);
    __m128 y0 = _mm_loadu_ps(r1 + 2 * ow), y1 = _mm_loadu_ps(r1 + 2 * ow + 4);
    __m128 a = _mm_shuffle_ps(x0, x1, _MM_SHUFFLE(2, 0, 2, 0)), b = _mm_shuffle_ps(x0, x1, _MM_SHUFFLE(3, 1, 3, 1));
    __m128 c = _mm_shuffle_ps(y0, y1, _MM_SHUFFLE(2, 0, 2, 0)), d = _mm_shuffle_ps(y0, y1, _MM_SHUFFLE(3, 1, 3, 1));
    __m128 t1 = _mm_or_ps(_mm_cmpgt_ps(b, a), _mm_and_ps(_mm_cmpunord_ps(b, b), _mm_cmpord_ps(a, a)));
    __m128 t2 = _mm_or_ps(_mm_cmpgt_ps(d, c), _mm_and_ps(_mm_cmpunord_ps(d, d), _mm_cmpord_ps(c, c)));
    __m128 m1 = _mm_or_ps(_mm_and_ps(t1, b), _mm_andnot_ps(t1, a));
    __m128 m2 = _mm_or_ps(_mm_and_ps(t2, d), _mm_andnot_ps(t2, c));
    __m128 t3 = _mm_or_ps(_mm_cmpgt_ps(m2, m1), _mm_and_ps(_mm_cmpunord_ps(m2, m2), _mm_cmpord_ps(m1, m1)));
    _mm_storeu_ps(op + ow, _mm_or_ps(_mm_and_ps(t3, m2), _mm_andnot_ps(t3, m1)));
    __m128i i1 = _mm_srli_epi32(_mm_castps_si128(t1), 31), i2 = _mm_srli_epi32(_mm_castps_si128(t2), 31);
    __m128i i3 = _mm_castps_si128(t3);
    __m128i k = _mm_or_si128(_mm_and_si128(i3, _mm_add_epi32(wv, i2)), _mm_andnot_si128(i3, i1));
    int32_t kk[4];
    _mm_storeu_si128((__m128i *)kk, k);
    for (int q = 0; q < 4; q++) ip[ow + q] = base + 2 * (ow + q) + kk[q];
  }
  if (ow < OW) maxpool_f32_row2x2(r0 + 2 * ow, W, OW - ow, op + ow, ip + ow, base + 2 * ow);
}
#else
#define ROW2X2_maxpool_f32 maxpool_f32_row2x2
#endif
MAXPOOL(maxpool_f32, float)
MAXPOOL(maxpool_f64, double)

typedef struct pool_job { const pool_geom *g; const void *x; void *o; int64_t *ix; int32_t kd; } pool_job;
static void maxpool_range(int64_t lo, int64_t hi, void *ctx)
{
  const pool_job *jb = ctx;
  if (jb->kd == DPL_FLOAT32) maxpool_f32(jb->g, jb->x, jb->o, jb->ix, lo, hi);
  else maxpool_f64(jb->g, jb->x, jb->o, jb->ix, lo, hi);
}

int dpl_max_pool2d(const dpl_tensor *x, const int32_t *params, dpl_tensor **out, dpl_tensor **indices)
{
  const char *name = "max_pool2d";
  if (!out || !indices) return dpl_errorf(DPL_EINVAL, "%s: out or indices is NULL", name);
  *out = *indices = NULL;
  pool_geom g;
  DPL_TRY(pool_setup(name, x, params, &g));
  if (dpl_is_devmem(x)) {
    dpl_bk_args k = {.op = DPL_BK_MAX_POOL2D, .in = {x}, .params = params, .out = {out, indices}, .name = name};
    return dpl_bk_call(&k);
  }
  int32_t kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  dpl_tensor *cx = NULL, *res = NULL, *idx = NULL;
  int64_t oshape[4] = {g.N, g.C, g.OH, g.OW};
  int st = dpl_contig_as(name, x, kd, &cx);
  if (st == DPL_OK) st = dpl_new(name, kd, 4, oshape, x, &res);
  if (st == DPL_OK) st = dpl_new(name, DPL_INT64, 4, oshape, x, &idx);
  if (st == DPL_OK) {
    pool_job jb = {&g, cx->_data, res->_data, idx->_data, kd};
    int64_t per = g.H * g.W;
    dpl_parallel_for(g.N * g.C, per > 0 ? (CHUNK_PAR_ELEMS + per - 1) / per : 1, maxpool_range, &jb);
    st = dpl_retype(name, &res, x->_dtype);
  }
  dpl_tensor_release(cx);
  return dpl_hand_over(st, 2, (dpl_tensor *[]){res, idx}, (dpl_tensor **[]){out, indices});
}

int dpl_max_pool2d_backward(const dpl_tensor *grad_out, const dpl_tensor *x, const dpl_tensor *indices, dpl_tensor **grad_x)
{
  const char *name = "max_pool2d_backward";
  if (!grad_x) return dpl_errorf(DPL_EINVAL, "%s: grad_x is NULL", name);
  *grad_x = NULL;
  DPL_TRY(dpl_check_handle(name, "grad_out", grad_out));
  DPL_TRY(dpl_check_handle(name, "input", x));
  DPL_TRY(dpl_check_handle(name, "indices", indices));
  if (x->_ndim != 4 || grad_out->_ndim != 4 || indices->_ndim != 4 || indices->_dtype != DPL_INT64 ||
      grad_out->_numel != indices->_numel || grad_out->_shape[0] != x->_shape[0] || grad_out->_shape[1] != x->_shape[1])
    return dpl_errorf(DPL_EINVAL, "%s: expected 4-d grad_out and int64 indices from max_pool2d of this input", name);
  if (dpl_is_devmem(x)) {
    if (!dpl_is_float(x->_dtype))
      return dpl_errorf(DPL_EINVAL, "%s: expected a floating-point input, got %s", name, dpl_dtype_name(x->_dtype));
    dpl_bk_args k = {.op = DPL_BK_MAX_POOL2D_BWD, .in = {grad_out, x, indices}, .out = {grad_x}, .name = name};
    return dpl_bk_call(&k);
  }
  DPL_TRY(dpl_check_tensor(name, "grad_out", grad_out)); /* host memory from here on */
  DPL_TRY(dpl_check_tensor(name, "input", x));
  DPL_TRY(dpl_check_tensor(name, "indices", indices));
  int64_t plane = x->_shape[2] * x->_shape[3], L = grad_out->_shape[2] * grad_out->_shape[3];
  int32_t kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  dpl_tensor *cg = NULL, *ci = NULL, *res = NULL;
  int st = dpl_contig_as(name, grad_out, kd, &cg);
  if (st == DPL_OK) st = dpl_contig_as(name, indices, DPL_INT64, &ci);
  if (st == DPL_OK) st = dpl_new(name, kd, 4, x->_shape, x, &res);
  int64_t OH = grad_out->_shape[2], OW = grad_out->_shape[3], H = x->_shape[2], W = x->_shape[3];
  int fast = 0;
  if (st == DPL_OK && kd == DPL_FLOAT32 && H == 2 * OH && W == 2 * OW) {
    /* the common 2x2 / stride 2 case: when every index lies in its own 2x2 block the
     * blocks tile the plane, so each block row is zeroed while in cache and gets one
     * store per block (no whole-tensor memset, no read-modify-write scatter). */
    const int64_t *is = ci->_data;
    const float *gs = cg->_data;
    float *r = res->_data;
    int64_t NC = x->_shape[0] * x->_shape[1], done = 0;
    for (int64_t p = 0; p < NC; p++, done++) {
      const int64_t *ip = is + p * L;
      const float *gp = gs + p * L;
      float *rp = r + p * plane;
      int bad = 0;
      /* zero the two rows of each block row, then one store per block; an index
       * outside its block is stored in bounds (at the block's corner) and sends
       * the whole tensor to the general path, which starts from zeros again */
      for (int64_t oh = 0; oh < OH; oh++) {
        memset(rp + 2 * oh * W, 0, (size_t)(2 * W) * sizeof(float));
        for (int64_t ow = 0; ow < OW; ow++) {
          int64_t k = ip[oh * OW + ow], b0 = 2 * oh * W + 2 * ow, d = k - b0;
          int v = ((uint64_t)d < 2) | ((uint64_t)(d - W) < 2);
          bad |= !v;
          rp[v ? k : b0] = gp[oh * OW + ow];
        }
      }
      if (bad) break;
    }
    fast = done == NC;
  }
  if (st == DPL_OK && !fast) {
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
  }
  if (st == DPL_OK) st = dpl_retype(name, &res, x->_dtype);
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
    DPL_TRY(dpl_check_handle(name, "grad_out", grad_out));
    if (grad_out->_ndim != 4 || grad_out->_shape[0] != g.N || grad_out->_shape[1] != g.C || grad_out->_shape[2] != g.OH ||
        grad_out->_shape[3] != g.OW)
      return dpl_errorf(DPL_EINVAL, "%s: grad_out must have shape [%lld, %lld, %lld, %lld]", name, (long long)g.N,
                        (long long)g.C, (long long)g.OH, (long long)g.OW);
  }
  if (dpl_is_devmem(x)) {
    dpl_bk_args k = {.op = grad_out ? DPL_BK_AVG_POOL2D_BWD : DPL_BK_AVG_POOL2D, .in = {grad_out ? grad_out : x, x},
                     .params = params, .i = {cip}, .out = {out}, .name = name};
    return dpl_bk_call(&k);
  }
  DPL_TRY(dpl_check_tensor(name, "input", x)); /* host memory from here on */
  if (grad_out) DPL_TRY(dpl_check_tensor(name, "grad_out", grad_out));
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
    st = dpl_retype(name, &res, x->_dtype);
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
