/* dpl_tensor_norm.c: the fused layer normalization (dpl_layer_norm) and its
 * gradient: the argument checks shared by every device, the CPU row kernels
 * (rows in parallel, float64 accumulation; float16/bfloat16 through float32)
 * and the hand-off of device tensors to the backend (DPL_BK_LAYER_NORM*); batch normalization
 * with batch statistics (dpl_batch_norm) and its gradient, channels in parallel. */
#include "dpl_tensor_backend.h"
#include "dpl_tensor_internal.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* rows of x for a normalized suffix of n elements, or an error naming the op */
static int ln_rows(const char *name, const dpl_tensor *x, int64_t n, int64_t *rows)
{
  if (!dpl_is_float(x->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected a floating input, got %s", name, dpl_dtype_name(x->_dtype));
  if (n < 1) return dpl_errorf(DPL_EINVAL, "%s: normalized_numel must be at least 1, got %lld", name, (long long)n);
  int64_t p = 1;
  int d = x->_ndim;
  while (p < n && d > 0) p *= x->_shape[--d];
  if (p != n) {
    char b[160];
    return dpl_errorf(DPL_EINVAL, "%s: input of shape %s has no trailing dims of %lld elements", name,
                      dpl_shape_str(x->_ndim, x->_shape, b, sizeof b), (long long)n);
  }
  *rows = dpl_shape_numel(d, x->_shape);
  return DPL_OK;
}

/* weight or bias: n elements, x's dtype and device */
static int ln_param(const char *name, const char *what, const dpl_tensor *x, const dpl_tensor *p, int64_t n)
{
  if (!p) return DPL_OK;
  DPL_TRY(dpl_check_handle(name, what, p));
  DPL_TRY(dpl_check_same_device(name, x, p));
  if (p->_dtype != x->_dtype)
    return dpl_errorf(DPL_EINVAL, "%s: expected %s of dtype %s (the input's), got %s", name, what,
                      dpl_dtype_name(x->_dtype), dpl_dtype_name(p->_dtype));
  if (p->_numel != n)
    return dpl_errorf(DPL_EINVAL, "%s: expected %s of %lld elements, got %lld", name, what, (long long)n,
                      (long long)p->_numel);
  return DPL_OK;
}

static int32_t ln_kd(int32_t dt) { return dt == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32; }

/* a contiguous copy (or alias) of t in dtype dt */
static int ln_contig(const char *name, const dpl_tensor *t, int32_t dt, dpl_tensor **out)
{
  *out = NULL;
  if (!t) return DPL_OK;
  if (t->_dtype == dt && dpl_is_contig(t)) return dpl_tensor_alias(t, out);
  return dpl_contig_as(name, t, dt, out);
}

typedef struct ln_job {
  int isf;
  int64_t n;
  double eps;
  const char *x, *w, *b, *g;
  char *mean, *rstd; /* written by the forward, read by the backward */
  char *y, *gx, *gw, *gb;
  int64_t rows;
} ln_job;

#define LD(p, i) (j->isf ? (double)((const float *)(p))[i] : ((const double *)(p))[i])
#define ST(p, i, v) do { if (j->isf) ((float *)(p))[i] = (float)(v); else ((double *)(p))[i] = (v); } while (0)

static void ln_fwd_range(int64_t lo, int64_t hi, void *vj)
{
  ln_job *j = vj;
  int64_t n = j->n;
  for (int64_t r = lo; r < hi; r++) {
    int64_t o = r * n;
    double s = 0;
    for (int64_t k = 0; k < n; k++) s += LD(j->x, o + k);
    double m = s / (double)n, v = 0;
    for (int64_t k = 0; k < n; k++) { double c = LD(j->x, o + k) - m; v += c * c; }
    double rs = 1.0 / sqrt(v / (double)n + j->eps);
    if (j->isf) rs = (float)rs; /* the saved value, as the backward reads it */
    for (int64_t k = 0; k < n; k++) {
      double t = (LD(j->x, o + k) - m) * rs;
      if (j->w) t *= LD(j->w, k);
      if (j->b) t += LD(j->b, k);
      ST(j->y, o + k, t);
    }
    ST(j->mean, r, m);
    ST(j->rstd, r, rs);
  }
}

/* grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = grad_y * weight */
static void ln_bwd_range(int64_t lo, int64_t hi, void *vj)
{
  ln_job *j = vj;
  int64_t n = j->n;
  for (int64_t r = lo; r < hi; r++) {
    int64_t o = r * n;
    double m = LD(j->mean, r), rs = LD(j->rstd, r), s1 = 0, s2 = 0;
    for (int64_t k = 0; k < n; k++) {
      double g = LD(j->g, o + k) * (j->w ? LD(j->w, k) : 1.0);
      s1 += g;
      s2 += g * (LD(j->x, o + k) - m) * rs;
    }
    s1 /= (double)n;
    s2 /= (double)n;
    for (int64_t k = 0; k < n; k++) {
      double g = LD(j->g, o + k) * (j->w ? LD(j->w, k) : 1.0);
      ST(j->gx, o + k, rs * (g - s1 - (LD(j->x, o + k) - m) * rs * s2));
    }
  }
}

/* grad_w / grad_b: columns in parallel, each a sum over the rows in order */
static void ln_cols_range(int64_t lo, int64_t hi, void *vj)
{
  ln_job *j = vj;
  int64_t n = j->n;
  for (int64_t k = lo; k < hi; k++) {
    double sw = 0, sb = 0;
    for (int64_t r = 0; r < j->rows; r++) {
      double g = LD(j->g, r * n + k);
      if (j->gw) sw += g * (LD(j->x, r * n + k) - LD(j->mean, r)) * LD(j->rstd, r);
      sb += g;
    }
    if (j->gw) ST(j->gw, k, sw);
    if (j->gb) ST(j->gb, k, sb);
  }
}
#undef LD
#undef ST


int dpl_layer_norm(const dpl_tensor *x, const dpl_tensor *weight, const dpl_tensor *bias, int64_t normalized_numel,
                   double eps, dpl_tensor **y, dpl_tensor **mean, dpl_tensor **rstd)
{
  const char *name = "layer_norm";
  if (!y || !mean || !rstd) return dpl_errorf(DPL_EINVAL, "%s: an output pointer is NULL", name);
  *y = *mean = *rstd = NULL;
  int64_t rows;
  DPL_TRY(dpl_check_handle(name, "input", x));
  DPL_TRY(ln_rows(name, x, normalized_numel, &rows));
  DPL_TRY(ln_param(name, "weight", x, weight, normalized_numel));
  DPL_TRY(ln_param(name, "bias", x, bias, normalized_numel));
  if (!(eps >= 0)) return dpl_errorf(DPL_EINVAL, "%s: eps must be >= 0, got %g", name, eps);
  if (dpl_is_devmem(x)) {
    dpl_bk_args k = {.op = DPL_BK_LAYER_NORM, .in = {x, weight, bias}, .l = {normalized_numel}, .d = {eps},
                     .out = {y, mean, rstd}, .name = name};
    return dpl_bk_call(&k);
  }
  DPL_TRY(dpl_check_tensor(name, "input", x)); /* host memory from here on */
  int32_t kd = ln_kd(x->_dtype);
  dpl_tensor *cx = NULL, *cw = NULL, *cb = NULL, *ry = NULL, *rm = NULL, *rr = NULL;
  int st = ln_contig(name, x, kd, &cx);
  if (st == DPL_OK) st = ln_contig(name, weight, kd, &cw);
  if (st == DPL_OK) st = ln_contig(name, bias, kd, &cb);
  if (st == DPL_OK) st = dpl_new(name, kd, x->_ndim, x->_shape, x, &ry);
  if (st == DPL_OK) st = dpl_new(name, kd, 1, &rows, x, &rm);
  if (st == DPL_OK) st = dpl_new(name, kd, 1, &rows, x, &rr);
  if (st == DPL_OK && rows > 0) {
    ln_job j = {.isf = kd == DPL_FLOAT32, .n = normalized_numel, .eps = eps, .x = cx->_data,
                .w = cw ? cw->_data : NULL, .b = cb ? cb->_data : NULL, .y = ry->_data,
                .mean = rm->_data, .rstd = rr->_data, .rows = rows};
    dpl_parallel_for(rows, 16384 / normalized_numel + 1, ln_fwd_range, &j);
  }
  if (st == DPL_OK) st = dpl_retype(name, &ry, x->_dtype);
  dpl_release_n(3, (dpl_tensor *[]){cx, cw, cb});
  return dpl_hand_over(st, 3, (dpl_tensor *[]){ry, rm, rr}, (dpl_tensor **[]){y, mean, rstd});
}

int dpl_layer_norm_backward(const dpl_tensor *grad_y, const dpl_tensor *x, const dpl_tensor *mean,
                            const dpl_tensor *rstd, const dpl_tensor *weight, dpl_tensor **grad_x,
                            dpl_tensor **grad_w, dpl_tensor **grad_b)
{
  const char *name = "layer_norm_backward";
  if (!grad_x) return dpl_errorf(DPL_EINVAL, "%s: grad_x is NULL", name);
  *grad_x = NULL;
  if (grad_w) *grad_w = NULL;
  if (grad_b) *grad_b = NULL;
  DPL_TRY(dpl_check_handle(name, "grad", grad_y));
  DPL_TRY(dpl_check_handle(name, "input", x));
  DPL_TRY(dpl_check_handle(name, "mean", mean));
  DPL_TRY(dpl_check_handle(name, "rstd", rstd));
  DPL_TRY(dpl_check_same_device(name, x, grad_y));
  DPL_TRY(dpl_check_same_device(name, x, mean));
  DPL_TRY(dpl_check_same_device(name, x, rstd));
  if (!dpl_is_float(x->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected a floating input, got %s", name, dpl_dtype_name(x->_dtype));
  if (!dpl_same_shape(grad_y, x)) {
    char b1[160], b2[160];
    return dpl_errorf(DPL_EINVAL, "%s: grad shape %s does not match the input shape %s", name,
                      dpl_shape_str(grad_y->_ndim, grad_y->_shape, b1, sizeof b1),
                      dpl_shape_str(x->_ndim, x->_shape, b2, sizeof b2));
  }
  if (grad_y->_dtype != x->_dtype)
    return dpl_errorf(DPL_EINVAL, "%s: expected grad of dtype %s (the input's), got %s", name,
                      dpl_dtype_name(x->_dtype), dpl_dtype_name(grad_y->_dtype));
  int32_t kd = ln_kd(x->_dtype);
  int64_t rows = mean->_numel;
  if (mean->_dtype != kd || rstd->_dtype != kd)
    return dpl_errorf(DPL_EINVAL, "%s: expected mean and rstd of dtype %s (as layer_norm saves them), got %s and %s",
                      name, dpl_dtype_name(kd), dpl_dtype_name(mean->_dtype), dpl_dtype_name(rstd->_dtype));
  if (rstd->_numel != rows || (rows == 0 ? x->_numel != 0 : x->_numel % rows != 0))
    return dpl_errorf(DPL_EINVAL, "%s: mean and rstd have %lld and %lld elements, which do not split the input's %lld into rows",
                      name, (long long)rows, (long long)rstd->_numel, (long long)x->_numel);
  int64_t n = rows ? x->_numel / rows : 0, rows2;
  if (rows == 0) { /* no rows: the normalized size comes from the weight */
    if (!weight) return dpl_errorf(DPL_EINVAL, "%s: an empty input needs the weight", name);
    n = weight->_numel;
  }
  DPL_TRY(ln_rows(name, x, n, &rows2));
  if (rows2 != rows)
    return dpl_errorf(DPL_EINVAL, "%s: mean and rstd have %lld elements, expected %lld (one per row)", name,
                      (long long)rows, (long long)rows2);
  DPL_TRY(ln_param(name, "weight", x, weight, n));
  if (grad_w && !weight) return dpl_errorf(DPL_EINVAL, "%s: grad_w asked for without a weight", name);
  if (dpl_is_devmem(x)) {
    dpl_bk_args k = {.op = DPL_BK_LAYER_NORM_BWD, .in = {grad_y, x, mean, rstd, weight},
                     .out = {grad_x, grad_w, grad_b}, .name = name};
    return dpl_bk_call(&k);
  }
  DPL_TRY(dpl_check_tensor(name, "input", x)); /* host memory from here on */
  dpl_tensor *cx = NULL, *cg = NULL, *cw = NULL, *cm = NULL, *cr = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
  int st = ln_contig(name, x, kd, &cx);
  if (st == DPL_OK) st = ln_contig(name, grad_y, kd, &cg);
  if (st == DPL_OK) st = ln_contig(name, weight, kd, &cw);
  if (st == DPL_OK) st = ln_contig(name, mean, kd, &cm);
  if (st == DPL_OK) st = ln_contig(name, rstd, kd, &cr);
  if (st == DPL_OK) st = dpl_new(name, kd, x->_ndim, x->_shape, x, &gx);
  const int64_t *pshape = weight ? weight->_shape : &n;
  int32_t pnd = weight ? weight->_ndim : 1;
  if (st == DPL_OK && grad_w) st = dpl_new(name, kd, pnd, pshape, x, &gw);
  if (st == DPL_OK && grad_b) st = dpl_new(name, kd, pnd, pshape, x, &gb);
  if (st == DPL_OK) {
    ln_job j = {.isf = kd == DPL_FLOAT32, .n = n, .x = cx->_data, .g = cg->_data, .w = cw ? cw->_data : NULL,
                .mean = cm->_data, .rstd = cr->_data, .gx = gx->_data, .gw = gw ? gw->_data : NULL,
                .gb = gb ? gb->_data : NULL, .rows = rows};
    if (rows > 0) dpl_parallel_for(rows, 16384 / n + 1, ln_bwd_range, &j);
    if (gw || gb) dpl_parallel_for(n, 16384 / (rows + 1) + 1, ln_cols_range, &j);
  }
  int32_t pd = weight ? weight->_dtype : x->_dtype;
  if (st == DPL_OK) st = dpl_retype(name, &gx, x->_dtype);
  if (st == DPL_OK) st = dpl_retype(name, &gw, pd);
  if (st == DPL_OK) st = dpl_retype(name, &gb, pd);
  dpl_release_n(5, (dpl_tensor *[]){cx, cg, cw, cm, cr});
  return dpl_hand_over(st, 3, (dpl_tensor *[]){gx, gw, gb}, (dpl_tensor **[]){grad_x, grad_w, grad_b});
}

/* ---- batch normalization with batch statistics (dpl_batch_norm) and its gradient ----
 * x contiguous [N, C, R...]: channel c's values are N runs of R. The statistics are those of the
 * composed path (a [C, M] row mean of x, then of the float-rounded squares of x - mean; M = N * R),
 * in the reduce kernel's order: float32 rows in four double lanes (element j into lane j % 4, the
 * last M % 4 into lane 0, then (l0 + l1) + (l2 + l3)), float64 rows in one double sum. The output is
 * rounded as the composed ops round it: ((x - mean) * invstd) * weight + bias, each in x's dtype. */
typedef struct bn_job {
  int isf;
  int64_t N, C, R;
  double eps, momentum;
  const char *x, *w, *b, *g;
  char *rm, *rv;      /* running stats (or NULL), updated in place */
  char *mean, *inv;   /* forward: written; backward: read */
  char *y, *gx, *gw, *gb;
} bn_job;

/* the sum over channel c of f(x) in the reduce kernel's order (see above) */
#define BN_SUM_F32(EXPR)                                                                            \
  do {                                                                                              \
    double l0 = 0, l1 = 0, l2 = 0, l3 = 0;                                                          \
    int64_t M4 = M - M % 4;                                                                         \
    if (R % 4 == 0) {                                                                               \
      for (int64_t n = 0; n < N; n++) {                                                             \
        const float *p = xf + (n * C + c) * R;                                                      \
        for (int64_t r = 0; r < R; r += 4) {                                                        \
          float v0 = p[r], v1 = p[r + 1], v2 = p[r + 2], v3 = p[r + 3];                             \
          l0 += (double)(EXPR(v0)); l1 += (double)(EXPR(v1));                                       \
          l2 += (double)(EXPR(v2)); l3 += (double)(EXPR(v3));                                       \
        }                                                                                           \
      }                                                                                             \
    } else {                                                                                        \
      int64_t jj = 0;                                                                               \
      for (int64_t n = 0; n < N; n++) {                                                             \
        const float *p = xf + (n * C + c) * R;                                                      \
        for (int64_t r = 0; r < R; r++, jj++) {                                                     \
          float v0 = p[r];                                                                          \
          double t = (double)(EXPR(v0));                                                            \
          if (jj >= M4) l0 += t;                                                                    \
          else switch (jj & 3) { case 0: l0 += t; break; case 1: l1 += t; break;                    \
                                 case 2: l2 += t; break; default: l3 += t; }                        \
        }                                                                                           \
      }                                                                                             \
    }                                                                                               \
    acc = (l0 + l1) + (l2 + l3);                                                                    \
  } while (0)
#define BN_ID(v) (v)
#define BN_SQ_F32(v) ((v - mf) * (v - mf))

typedef double bn_v4d __attribute__((vector_size(32)));
typedef float bn_v4f __attribute__((vector_size(16)));
#define bn_ld4(p) __extension__({ bn_v4f f_; memcpy(&f_, (p), sizeof f_); __builtin_convertvector(f_, bn_v4d); })

/* the statistics of 4 channels c0.. at once (R % 4 == 0: each run starts on lane 0), the four
 * lanes of each as one vector, so the chains interleave; channels past hi repeat the last */
DPL_CLONES static void bn_stats4_f32(const bn_job *j, int64_t c0, int64_t hi, float *mf, float *vf)
{
  int64_t N = j->N, C = j->C, R = j->R, M = N * R, cc[4];
  const float *xf = (const float *)j->x;
  for (int k = 0; k < 4; k++) cc[k] = c0 + k < hi ? c0 + k : hi - 1;
  bn_v4d a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
  for (int64_t n = 0; n < N; n++) {
    const float *p0 = xf + (n * C + cc[0]) * R, *p1 = xf + (n * C + cc[1]) * R;
    const float *p2 = xf + (n * C + cc[2]) * R, *p3 = xf + (n * C + cc[3]) * R;
    for (int64_t r = 0; r < R; r += 4) {
      a0 += bn_ld4(p0 + r); a1 += bn_ld4(p1 + r); a2 += bn_ld4(p2 + r); a3 += bn_ld4(p3 + r);
    }
  }
  bn_v4d *acc[4] = {&a0, &a1, &a2, &a3};
  for (int k = 0; k < 4; k++) mf[k] = (float)((((*acc[k])[0] + (*acc[k])[1]) + ((*acc[k])[2] + (*acc[k])[3])) / (double)M);
  bn_v4f m0 = {mf[0], mf[0], mf[0], mf[0]}, m1 = {mf[1], mf[1], mf[1], mf[1]};
  bn_v4f m2 = {mf[2], mf[2], mf[2], mf[2]}, m3 = {mf[3], mf[3], mf[3], mf[3]};
  a0 = a1 = a2 = a3 = (bn_v4d){0};
  for (int64_t n = 0; n < N; n++) {
    const float *p0 = xf + (n * C + cc[0]) * R, *p1 = xf + (n * C + cc[1]) * R;
    const float *p2 = xf + (n * C + cc[2]) * R, *p3 = xf + (n * C + cc[3]) * R;
    for (int64_t r = 0; r < R; r += 4) {
      bn_v4f f0, f1, f2, f3;
      memcpy(&f0, p0 + r, 16); memcpy(&f1, p1 + r, 16); memcpy(&f2, p2 + r, 16); memcpy(&f3, p3 + r, 16);
      f0 -= m0; f1 -= m1; f2 -= m2; f3 -= m3;
      a0 += __builtin_convertvector(f0 * f0, bn_v4d); a1 += __builtin_convertvector(f1 * f1, bn_v4d);
      a2 += __builtin_convertvector(f2 * f2, bn_v4d); a3 += __builtin_convertvector(f3 * f3, bn_v4d);
    }
  }
  for (int k = 0; k < 4; k++) vf[k] = (float)((((*acc[k])[0] + (*acc[k])[1]) + ((*acc[k])[2] + (*acc[k])[3])) / (double)M);
}

/* one channel's statistics in the reduce kernel's order, any R */
static void bn_stats1_f32(const bn_job *j, int64_t c, float *mfo, float *vfo)
{
  int64_t N = j->N, C = j->C, R = j->R, M = N * R;
  const float *xf = (const float *)j->x;
  double acc;
  BN_SUM_F32(BN_ID);
  float mf = (float)(acc / (double)M);
  BN_SUM_F32(BN_SQ_F32);
  *mfo = mf;
  *vfo = (float)(acc / (double)M);
}

/* channel c from its statistics: invstd, the running stats, the output */
DPL_CLONES static void bn_out_f32(const bn_job *j, int64_t c, float mf, float vf)
{
  int64_t N = j->N, C = j->C, R = j->R, M = N * R;
  const float *xf = (const float *)j->x;
  float inv = (float)1 / sqrtf(vf + (float)j->eps);
  ((float *)j->mean)[c] = mf;
  ((float *)j->inv)[c] = inv;
  if (j->rm) {
    float *rm = (float *)j->rm + c, *rv = (float *)j->rv + c;
    double mo = j->momentum, uf = mo * (double)M / (double)(M - 1 > 1 ? M - 1 : 1);
    *rm = *rm * (float)(1 - mo) + mf * (float)mo;
    *rv = *rv * (float)(1 - mo) + vf * (float)uf;
  }
  float wc = j->w ? ((const float *)j->w)[c] : 1, bc = j->b ? ((const float *)j->b)[c] : 0;
  for (int64_t n = 0; n < N; n++) {
    const float *p = xf + (n * C + c) * R;
    float *q = (float *)j->y + (n * C + c) * R;
    if (j->w && j->b) for (int64_t r = 0; r < R; r++) q[r] = ((p[r] - mf) * inv) * wc + bc;
    else if (j->w) for (int64_t r = 0; r < R; r++) q[r] = ((p[r] - mf) * inv) * wc;
    else if (j->b) for (int64_t r = 0; r < R; r++) q[r] = ((p[r] - mf) * inv) + bc;
    else for (int64_t r = 0; r < R; r++) q[r] = (p[r] - mf) * inv;
  }
}

static void bn_fwd_f64(bn_job *j, int64_t c)
{
  int64_t N = j->N, C = j->C, R = j->R, M = N * R;
  const double *xd = (const double *)j->x;
  double s = 0;
  for (int64_t n = 0; n < N; n++) {
    const double *p = xd + (n * C + c) * R;
    for (int64_t r = 0; r < R; r++) s += p[r];
  }
  double m = s / (double)M;
  s = 0;
  for (int64_t n = 0; n < N; n++) {
    const double *p = xd + (n * C + c) * R;
    for (int64_t r = 0; r < R; r++) { double d = p[r] - m; s += d * d; }
  }
  double v = s / (double)M, inv = 1.0 / sqrt(v + j->eps);
  ((double *)j->mean)[c] = m;
  ((double *)j->inv)[c] = inv;
  if (j->rm) {
    double *rm = (double *)j->rm + c, *rv = (double *)j->rv + c;
    double mo = j->momentum, uf = mo * (double)M / (double)(M - 1 > 1 ? M - 1 : 1);
    *rm = *rm * (1 - mo) + m * mo;
    *rv = *rv * (1 - mo) + v * uf;
  }
  double wc = j->w ? ((const double *)j->w)[c] : 1, bc = j->b ? ((const double *)j->b)[c] : 0;
  for (int64_t n = 0; n < N; n++) {
    const double *p = xd + (n * C + c) * R;
    double *q = (double *)j->y + (n * C + c) * R;
    if (j->w && j->b) for (int64_t r = 0; r < R; r++) q[r] = ((p[r] - m) * inv) * wc + bc;
    else if (j->w) for (int64_t r = 0; r < R; r++) q[r] = ((p[r] - m) * inv) * wc;
    else if (j->b) for (int64_t r = 0; r < R; r++) q[r] = ((p[r] - m) * inv) + bc;
    else for (int64_t r = 0; r < R; r++) q[r] = (p[r] - m) * inv;
  }
}
#undef BN_SUM_F32
#undef BN_ID
#undef BN_SQ_F32

static void bn_fwd_range(int64_t lo, int64_t hi, void *vj)
{
  bn_job *j = vj;
  if (!j->isf) {
    for (int64_t c = lo; c < hi; c++) bn_fwd_f64(j, c);
    return;
  }
  for (int64_t c = lo; c < hi; c += 4) {
    float mf[4], vf[4];
    int g = hi - c < 4 ? (int)(hi - c) : 4;
    if (j->R % 4 == 0) bn_stats4_f32(j, c, hi, mf, vf);
    else for (int k = 0; k < g; k++) bn_stats1_f32(j, c + k, mf + k, vf + k);
    for (int k = 0; k < g; k++) bn_out_f32(j, c + k, mf[k], vf[k]);
  }
}

/* PyTorch's closed form per channel: sg = sum(g), sgx = sum(g * xc) (xc = x - mean, double sums),
 * grad_b = sg, grad_w = sgx * invstd, grad_x = (g - xc * (invstd^2 * sgx / M) - sg / M) * invstd * w */
#define BN_BWD_BODY(T)                                                                              \
  do {                                                                                              \
    const T *xs = (const T *)j->x, *gs = (const T *)j->g;                                           \
    T m = ((const T *)j->mean)[c], inv = ((const T *)j->inv)[c];                                    \
    double a[8] = {0}, e[8] = {0};                                                                  \
    for (int64_t n = 0; n < N; n++) {                                                               \
      const T *p = xs + (n * C + c) * R, *q = gs + (n * C + c) * R;                                 \
      int64_t r = 0;                                                                                \
      for (; r + 8 <= R; r += 8)                                                                    \
        for (int l = 0; l < 8; l++) { a[l] += (double)q[r + l]; e[l] += (double)q[r + l] * (double)(p[r + l] - m); } \
      for (; r < R; r++) { a[0] += (double)q[r]; e[0] += (double)q[r] * (double)(p[r] - m); }     \
    }                                                                                               \
    double sg = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));                  \
    double sgx = ((e[0] + e[1]) + (e[2] + e[3])) + ((e[4] + e[5]) + (e[6] + e[7]));                 \
    if (j->gb) ((T *)j->gb)[c] = (T)sg;                                                             \
    if (j->gw) ((T *)j->gw)[c] = (T)(sgx * (double)inv);                                            \
    if (j->gx) {                                                                                    \
      T k = (T)((double)inv * (double)inv * sgx / (double)M), gm = (T)(sg / (double)M);             \
      T sc = j->w ? inv * ((const T *)j->w)[c] : inv;                                               \
      for (int64_t n = 0; n < N; n++) {                                                             \
        const T *p = xs + (n * C + c) * R, *q = gs + (n * C + c) * R;                               \
        T *o = (T *)j->gx + (n * C + c) * R;                                                        \
        for (int64_t r = 0; r < R; r++) o[r] = (q[r] - (p[r] - m) * k - gm) * sc;                   \
      }                                                                                             \
    }                                                                                               \
  } while (0)

/* float32 channel c: the two sums in double vectors (8 lanes each), then grad_x in float */
DPL_CLONES static void bn_bwd_f32(const bn_job *j, int64_t c)
{
  int64_t N = j->N, C = j->C, R = j->R, M = N * R;
  const float *xs = (const float *)j->x, *gs = (const float *)j->g;
  float m = ((const float *)j->mean)[c], inv = ((const float *)j->inv)[c];
  bn_v4f mv = {m, m, m, m};
  bn_v4d a0 = {0}, a1 = {0}, e0 = {0}, e1 = {0};
  double sg = 0, sgx = 0;
  for (int64_t n = 0; n < N; n++) {
    const float *p = xs + (n * C + c) * R, *q = gs + (n * C + c) * R;
    int64_t r = 0;
    for (; r + 8 <= R; r += 8) {
      bn_v4f x0, x1;
      memcpy(&x0, p + r, 16); memcpy(&x1, p + r + 4, 16);
      bn_v4d g0 = bn_ld4(q + r), g1 = bn_ld4(q + r + 4);
      a0 += g0; a1 += g1;
      e0 += g0 * __builtin_convertvector(x0 - mv, bn_v4d);
      e1 += g1 * __builtin_convertvector(x1 - mv, bn_v4d);
    }
    for (; r < R; r++) { sg += (double)q[r]; sgx += (double)q[r] * (double)(p[r] - m); }
  }
  bn_v4d a = a0 + a1, e = e0 + e1;
  sg += (a[0] + a[1]) + (a[2] + a[3]);
  sgx += (e[0] + e[1]) + (e[2] + e[3]);
  if (j->gb) ((float *)j->gb)[c] = (float)sg;
  if (j->gw) ((float *)j->gw)[c] = (float)(sgx * (double)inv);
  if (!j->gx) return;
  float k = (float)((double)inv * (double)inv * sgx / (double)M), gm = (float)(sg / (double)M);
  float sc = j->w ? inv * ((const float *)j->w)[c] : inv;
  for (int64_t n = 0; n < N; n++) {
    const float *p = xs + (n * C + c) * R, *q = gs + (n * C + c) * R;
    float *o = (float *)j->gx + (n * C + c) * R;
    for (int64_t r = 0; r < R; r++) o[r] = (q[r] - (p[r] - m) * k - gm) * sc;
  }
}

static void bn_bwd_range(int64_t lo, int64_t hi, void *vj)
{
  bn_job *j = vj;
  int64_t N = j->N, C = j->C, R = j->R, M = N * R;
  for (int64_t c = lo; c < hi; c++) {
    if (j->isf) bn_bwd_f32(j, c);
    else BN_BWD_BODY(double);
  }
}
#undef BN_BWD_BODY

/* x: a float32/float64 host tensor of shape [N, C, ...] with N * (the rest) > 0; C out */
static int bn_input(const char *name, const dpl_tensor *x, int64_t *C)
{
  DPL_TRY(dpl_check_handle(name, "input", x));
  if (x->_dtype != DPL_FLOAT32 && x->_dtype != DPL_FLOAT64)
    return dpl_errorf(DPL_EINVAL, "%s: expected a float32 or float64 input, got %s", name, dpl_dtype_name(x->_dtype));
  if (x->_ndim < 2) {
    char b[160];
    return dpl_errorf(DPL_EINVAL, "%s: input has shape %s, expected [N, C, ...]", name,
                      dpl_shape_str(x->_ndim, x->_shape, b, sizeof b));
  }
  *C = x->_shape[1];
  if (x->_numel == 0) return dpl_errorf(DPL_EINVAL, "%s: the input is empty", name);
  return DPL_OK;
}

/* the per-channel tensors: C elements, x's dtype and device; `inplace`: contiguous (written) */
static int bn_chan(const char *name, const char *what, const dpl_tensor *x, const dpl_tensor *p, int64_t C,
                   int inplace)
{
  if (!p) return DPL_OK;
  DPL_TRY(ln_param(name, what, x, p, C));
  if (inplace && !dpl_is_contig(p))
    return dpl_errorf(DPL_EINVAL, "%s: expected a contiguous %s (it is updated in place)", name, what);
  return DPL_OK;
}

int dpl_batch_norm(const dpl_tensor *x, const dpl_tensor *weight, const dpl_tensor *bias, dpl_tensor *running_mean,
                   dpl_tensor *running_var, double momentum, double eps, dpl_tensor **y, dpl_tensor **mean,
                   dpl_tensor **invstd)
{
  const char *name = "batch_norm";
  if (!y || !mean || !invstd) return dpl_errorf(DPL_EINVAL, "%s: an output pointer is NULL", name);
  *y = *mean = *invstd = NULL;
  int64_t C;
  DPL_TRY(bn_input(name, x, &C));
  DPL_TRY(bn_chan(name, "weight", x, weight, C, 0));
  DPL_TRY(bn_chan(name, "bias", x, bias, C, 0));
  if (!running_mean != !running_var)
    return dpl_errorf(DPL_EINVAL, "%s: expected both running_mean and running_var, or neither", name);
  DPL_TRY(bn_chan(name, "running_mean", x, running_mean, C, 1));
  DPL_TRY(bn_chan(name, "running_var", x, running_var, C, 1));
  if (!(eps >= 0)) return dpl_errorf(DPL_EINVAL, "%s: eps must be >= 0, got %g", name, eps);
  if (!(momentum == momentum)) return dpl_errorf(DPL_EINVAL, "%s: momentum must be a number, got %g", name, momentum);
  int64_t M = x->_numel / (C ? C : 1);
  if (C == 0 || M < 2) {
    char b[160];
    return dpl_errorf(DPL_EINVAL, "%s: expected more than 1 value per channel, got input size %s", name,
                      dpl_shape_str(x->_ndim, x->_shape, b, sizeof b));
  }
  if (dpl_is_devmem(x)) {
    dpl_bk_args k = {.op = DPL_BK_BATCH_NORM, .in = {x, weight, bias, running_mean, running_var},
                     .d = {momentum, eps}, .out = {y, mean, invstd}, .name = name};
    return dpl_bk_call(&k);
  }
  DPL_TRY(dpl_check_tensor(name, "input", x)); /* host memory from here on */
  int32_t kd = x->_dtype;
  dpl_tensor *cx = NULL, *cw = NULL, *cb = NULL, *ry = NULL, *rm = NULL, *rr = NULL;
  int st = ln_contig(name, x, kd, &cx);
  if (st == DPL_OK) st = ln_contig(name, weight, kd, &cw);
  if (st == DPL_OK) st = ln_contig(name, bias, kd, &cb);
  if (st == DPL_OK) st = dpl_new(name, kd, x->_ndim, x->_shape, x, &ry);
  if (st == DPL_OK) st = dpl_new(name, kd, 1, &C, x, &rm);
  if (st == DPL_OK) st = dpl_new(name, kd, 1, &C, x, &rr);
  if (st == DPL_OK) {
    int64_t N = x->_shape[0];
    bn_job j = {.isf = kd == DPL_FLOAT32, .N = N, .C = C, .R = M / N, .eps = eps, .momentum = momentum,
                .x = cx->_data, .w = cw ? cw->_data : NULL, .b = cb ? cb->_data : NULL,
                .rm = running_mean ? running_mean->_data : NULL, .rv = running_var ? running_var->_data : NULL,
                .mean = rm->_data, .inv = rr->_data, .y = ry->_data};
    dpl_parallel_for(C, 65536 / M + 1, bn_fwd_range, &j);
  }
  dpl_release_n(3, (dpl_tensor *[]){cx, cw, cb});
  return dpl_hand_over(st, 3, (dpl_tensor *[]){ry, rm, rr}, (dpl_tensor **[]){y, mean, invstd});
}

int dpl_batch_norm_backward(const dpl_tensor *grad_y, const dpl_tensor *x, const dpl_tensor *mean,
                            const dpl_tensor *invstd, const dpl_tensor *weight, dpl_tensor **grad_x,
                            dpl_tensor **grad_w, dpl_tensor **grad_b)
{
  const char *name = "batch_norm_backward";
  if (grad_x) *grad_x = NULL;
  if (grad_w) *grad_w = NULL;
  if (grad_b) *grad_b = NULL;
  int64_t C;
  DPL_TRY(dpl_check_handle(name, "grad", grad_y));
  DPL_TRY(bn_input(name, x, &C));
  DPL_TRY(dpl_check_same_device(name, x, grad_y));
  if (!dpl_same_shape(grad_y, x)) {
    char b1[160], b2[160];
    return dpl_errorf(DPL_EINVAL, "%s: grad shape %s does not match the input shape %s", name,
                      dpl_shape_str(grad_y->_ndim, grad_y->_shape, b1, sizeof b1),
                      dpl_shape_str(x->_ndim, x->_shape, b2, sizeof b2));
  }
  if (grad_y->_dtype != x->_dtype)
    return dpl_errorf(DPL_EINVAL, "%s: expected grad of dtype %s (the input's), got %s", name,
                      dpl_dtype_name(x->_dtype), dpl_dtype_name(grad_y->_dtype));
  DPL_TRY(dpl_check_handle(name, "mean", mean));
  DPL_TRY(dpl_check_handle(name, "invstd", invstd));
  DPL_TRY(bn_chan(name, "mean", x, mean, C, 0));
  DPL_TRY(bn_chan(name, "invstd", x, invstd, C, 0));
  DPL_TRY(bn_chan(name, "weight", x, weight, C, 0));
  if (grad_w && !weight) return dpl_errorf(DPL_EINVAL, "%s: grad_w asked for without a weight", name);
  if (dpl_is_devmem(x)) {
    dpl_bk_args k = {.op = DPL_BK_BATCH_NORM_BWD, .in = {grad_y, x, mean, invstd, weight},
                     .out = {grad_x, grad_w, grad_b}, .name = name};
    return dpl_bk_call(&k);
  }
  DPL_TRY(dpl_check_tensor(name, "input", x)); /* host memory from here on */
  int32_t kd = x->_dtype;
  int64_t M = x->_numel / C, N = x->_shape[0];
  dpl_tensor *cx = NULL, *cg = NULL, *cw = NULL, *cm = NULL, *cr = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
  int st = ln_contig(name, x, kd, &cx);
  if (st == DPL_OK) st = ln_contig(name, grad_y, kd, &cg);
  if (st == DPL_OK) st = ln_contig(name, weight, kd, &cw);
  if (st == DPL_OK) st = ln_contig(name, mean, kd, &cm);
  if (st == DPL_OK) st = ln_contig(name, invstd, kd, &cr);
  if (st == DPL_OK && grad_x) st = dpl_new(name, kd, x->_ndim, x->_shape, x, &gx);
  if (st == DPL_OK && grad_w) st = dpl_new(name, kd, weight->_ndim, weight->_shape, x, &gw);
  if (st == DPL_OK && grad_b) st = dpl_new(name, kd, 1, &C, x, &gb);
  if (st == DPL_OK) {
    bn_job j = {.isf = kd == DPL_FLOAT32, .N = N, .C = C, .R = M / N, .x = cx->_data, .g = cg->_data,
                .w = cw ? cw->_data : NULL, .mean = cm->_data, .inv = cr->_data, .gx = gx ? gx->_data : NULL,
                .gw = gw ? gw->_data : NULL, .gb = gb ? gb->_data : NULL};
    dpl_parallel_for(C, 65536 / M + 1, bn_bwd_range, &j);
  }
  dpl_release_n(5, (dpl_tensor *[]){cx, cg, cw, cm, cr});
  return dpl_hand_over(st, 3, (dpl_tensor *[]){gx, gw, gb}, (dpl_tensor **[]){grad_x, grad_w, grad_b});
}
