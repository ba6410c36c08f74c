/* dpl_tensor_reduce.c: reductions over one dim or all (sum, mean, prod,
 * max/min with indices, argmax/argmin, var/std, logsumexp, norm, any/all),
 * the softmax family and its gradient, and the losses (cross-entropy, NLL,
 * MSE) with their gradients. Floats accumulate in double; results do not
 * depend on the thread count (each output is reduced by one thread, in order).
 * Tensors in device memory go to the backend as whole ops (DPL_BK_REDUCE, ...). */
#include "dpl_tensor_internal.h"
#include "dpl_tensor_vmath.h"
#include <float.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *red_name(int op)
{
  static const char *n[] = {"sum", "mean", "prod", "max", "min", "argmax", "argmin", "var", "std", "logsumexp",
                            "norm", "any", "all"};
  return op >= 0 && op <= DPL_RED_ALL ? n[op] : NULL;
}

/* Geometry of "reduce dim d of t": the other dims (outer) and the reduced run. */
typedef struct along {
  int32_t ondim;
  int64_t oshape[DPL_MAX_DIMS], ostride[DPL_MAX_DIMS];
  int64_t R, rs; /* length and stride (elements) of the reduced dim */
} along;

static void along_dim(const dpl_tensor *t, int32_t dim, along *g)
{
  g->ondim = 0;
  for (int i = 0; i < t->_ndim; i++)
    if (i != dim) { g->oshape[g->ondim] = t->_shape[i]; g->ostride[g->ondim] = t->_stride[i]; g->ondim++; }
  g->R = t->_ndim ? t->_shape[dim] : 1;
  g->rs = t->_ndim ? t->_stride[dim] : 1;
}

static int norm_dim(const char *op, const dpl_tensor *t, int32_t dim)
{
  if (dim == -1) return DPL_OK;
  if (t->_ndim == 0 && dim == 0) return DPL_OK;
  if (dim < 0 || dim >= t->_ndim)
    return dpl_errorf(DPL_EINVAL, "%s: dim %d out of range (expected 0..%d for a %d-d tensor, or -1 for all)", op,
                      (int)dim, (int)t->_ndim - 1, (int)t->_ndim);
  return DPL_OK;
}

typedef struct red_ctx {
  int op;
  int64_t R, rs; /* rs in bytes */
  double param;
  int32_t kd;
} red_ctx;

DPL_CLONES static double red_float_row(const red_ctx *c, const char *p, int64_t *arg)
{
  int64_t R = c->R, rs = c->rs;
  int isf = c->kd == DPL_FLOAT32;
#define LD(j) (isf ? (double)*(const float *)(p + (j) * rs) : *(const double *)(p + (j) * rs))
  switch (c->op) {
  case DPL_RED_SUM: case DPL_RED_MEAN: {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t j = 0;
    if (isf && rs == 4) {
      const float *f = (const float *)p;
      for (; j + 4 <= R; j += 4) { s0 += f[j]; s1 += f[j + 1]; s2 += f[j + 2]; s3 += f[j + 3]; }
    }
    for (; j < R; j++) s0 += LD(j);
    double s = (s0 + s1) + (s2 + s3);
    return c->op == DPL_RED_MEAN ? (R ? s / (double)R : NAN) : s;
  }
  case DPL_RED_PROD: { double s = 1; for (int64_t j = 0; j < R; j++) s *= LD(j); return s; }
  case DPL_RED_MAX: case DPL_RED_ARGMAX: case DPL_RED_MIN: case DPL_RED_ARGMIN: {
    int mx = c->op == DPL_RED_MAX || c->op == DPL_RED_ARGMAX;
    double best = LD(0);
    int64_t bi = 0;
    for (int64_t j = 1; j < R && best == best; j++) {
      double v = LD(j);
      if (v != v || (mx ? v > best : v < best)) { best = v; bi = j; }
    }
    if (arg) *arg = bi;
    return best;
  }
  case DPL_RED_VAR: case DPL_RED_STD: {
    double m = 0;
    int same = 1; /* a constant slice: exactly 0, as PyTorch's Welford gives (the mean's rounding
                   * would leave ~1e-16, and std's gradient there is 0 only at an exact 0) */
    double x0 = R > 0 ? LD(0) : 0;
    for (int64_t j = 0; j < R; j++) { double x = LD(j); m += x; same &= x == x0; }
    m /= (double)R;
    if (!(x0 - x0 == 0)) same = 0; /* (infinities and NaN: inf - inf is NaN, as before) */
    double s = 0;
    if (!same)
      for (int64_t j = 0; j < R; j++) { double d = LD(j) - m; s += d * d; }
    double den = (double)R - c->param;
    double v = den > 0 ? s / den : NAN;
    return c->op == DPL_RED_STD ? sqrt(v) : v;
  }
  case DPL_RED_LOGSUMEXP: {
    if (R == 0) return -INFINITY;
    double m = -INFINITY;
    for (int64_t j = 0; j < R; j++) { double v = LD(j); if (v > m || v != v) m = v; }
    if (m != m) return m;
    if (isinf(m)) return m;
    double s = 0;
    for (int64_t j = 0; j < R; j++) s += exp(LD(j) - m);
    return m + log(s);
  }
  case DPL_RED_NORM: {
    double pp = c->param, s = 0;
    if (isinf(pp) && pp > 0) { for (int64_t j = 0; j < R; j++) { double v = fabs(LD(j)); if (v > s || v != v) s = v; } return s; }
    if (isinf(pp)) { /* -inf: the smallest magnitude (inf over nothing) */
      s = INFINITY;
      for (int64_t j = 0; j < R; j++) { double v = fabs(LD(j)); if (v < s || v != v) s = v; if (v != v) break; }
      return s;
    }
    if (pp == 0) { for (int64_t j = 0; j < R; j++) s += LD(j) != 0; return s; }
    if (pp == 2) { for (int64_t j = 0; j < R; j++) { double v = LD(j); s += v * v; } return sqrt(s); }
    if (pp == 1) { for (int64_t j = 0; j < R; j++) s += fabs(LD(j)); return s; }
    for (int64_t j = 0; j < R; j++) s += pow(fabs(LD(j)), pp);
    return pow(s, 1.0 / pp);
  }
  case DPL_RED_ANY: { for (int64_t j = 0; j < R; j++) if (LD(j) != 0) return 1; return 0; }
  default: { for (int64_t j = 0; j < R; j++) if (LD(j) == 0) return 0; return 1; }
  }
#undef LD
}

static int64_t red_int_row(const red_ctx *c, const char *p, int64_t *arg)
{
  int64_t R = c->R, rs = c->rs;
#define LI(j) (*(const int64_t *)(p + (j) * rs))
  switch (c->op) {
  case DPL_RED_SUM: { uint64_t s = 0; for (int64_t j = 0; j < R; j++) s += (uint64_t)LI(j); return (int64_t)s; }
  case DPL_RED_PROD: { uint64_t s = 1; for (int64_t j = 0; j < R; j++) s *= (uint64_t)LI(j); return (int64_t)s; }
  case DPL_RED_ANY: { for (int64_t j = 0; j < R; j++) if (LI(j)) return 1; return 0; }
  case DPL_RED_ALL: { for (int64_t j = 0; j < R; j++) if (!LI(j)) return 0; return 1; }
  default: {
    int mx = c->op == DPL_RED_MAX || c->op == DPL_RED_ARGMAX;
    int64_t best = LI(0), bi = 0;
    for (int64_t j = 1; j < R; j++) {
      int64_t v = LI(j);
      if (mx ? v > best : v < best) { best = v; bi = j; }
    }
    if (arg) *arg = bi;
    return best;
  }
  }
#undef LI
}

/* out[0]: value (kd or i64/u8 per op), out[1] (optional): int64 index */
static void red_loop(char **p, const int64_t *st, int64_t n, void *vctx)
{
  red_ctx *c = vctx;
  int idx_only = c->op == DPL_RED_ARGMAX || c->op == DPL_RED_ARGMIN;
  int has_idx = st[2] >= 0; /* stride slot 2 unused when -1 */
  for (int64_t i = 0; i < n; i++) {
    const char *in = p[1] + i * st[1];
    int64_t arg = 0;
    char *o = p[0] + i * st[0];
    if (c->kd == DPL_INT64) {
      int64_t v = red_int_row(c, in, &arg);
      if (idx_only) *(int64_t *)o = arg;
      else if (c->op == DPL_RED_ANY || c->op == DPL_RED_ALL) *(uint8_t *)o = (uint8_t)v;
      else *(int64_t *)o = v;
    } else {
      double v = red_float_row(c, in, &arg);
      if (idx_only) *(int64_t *)o = arg;
      else if (c->op == DPL_RED_ANY || c->op == DPL_RED_ALL) *(uint8_t *)o = (uint8_t)(v != 0);
      else if (c->kd == DPL_FLOAT32) *(float *)o = (float)v;
      else *(double *)o = v;
    }
    if (has_idx && p[2]) *(int64_t *)(p[2] + i * st[2]) = arg;
  }
}

typedef struct red_job {
  red_ctx c;
  char *out, *idx, *in;
  int64_t out_es;
  along g;
  int64_t es;
} red_job;

/* generic driver: for each outer position, reduce the run */
static void red_range(int64_t lo, int64_t hi, void *vj)
{
  red_job *j = vj;
  int nd = j->g.ondim;
  int64_t ix[DPL_MAX_DIMS];
  int64_t rem = lo;
  for (int d = nd - 1; d >= 0; d--) { ix[d] = rem % j->g.oshape[d]; rem /= j->g.oshape[d]; }
  for (int64_t o = lo; o < hi; o++) {
    int64_t off = 0;
    for (int d = 0; d < nd; d++) off += ix[d] * j->g.ostride[d];
    char *ptrs[3] = {j->out + o * j->out_es, j->in + off * j->es, j->idx ? j->idx + o * 8 : NULL};
    int64_t sts[3] = {0, 0, j->idx ? 0 : -1};
    red_loop(ptrs, sts, 1, &j->c);
    for (int d = nd - 1; d >= 0; d--) { if (++ix[d] < j->g.oshape[d]) break; ix[d] = 0; }
  }
}

/* any() / all() of a whole contiguous bool tensor: its bytes scanned in place, in word-sized
 * steps (the general path copies them to int64 first) */
static int bool_any_all(const char *name, int op, const dpl_tensor *a, dpl_tensor **out)
{
  const uint8_t *p = (const uint8_t *)a->_data;
  int64_t n = a->_numel, i = 0;
  int v;
  if (op == DPL_RED_ALL) {
    v = n == 0 || memchr(p, 0, (size_t)n) == NULL;
  } else {
    uint64_t acc = 0;
    for (; i + 64 <= n && !acc; i += 64)
      for (int k = 0; k < 8; k++) {
        uint64_t w;
        memcpy(&w, p + i + 8 * k, 8);
        acc |= w;
      }
    for (; i < n && !acc; i++) acc |= p[i];
    v = acc != 0;
  }
  dpl_tensor *res = NULL;
  int64_t none[1] = {0};
  DPL_TRY(dpl_new(name, DPL_BOOL, 0, none, a, &res));
  *(uint8_t *)res->_data = (uint8_t)v;
  *out = res;
  return DPL_OK;
}

static int reduce_core(int op, const dpl_tensor *a, int32_t dim, int32_t keepdim, double param, dpl_tensor **out,
                       dpl_tensor **out_idx)
{
  const char *name = red_name(op);
  if (!name) return dpl_errorf(DPL_EINVAL, "reduce: unknown op id %d", (int)op);
  DPL_TRY(dpl_check_tensor(name, "self", a));
  DPL_TRY(norm_dim(name, a, dim));
  if ((op == DPL_RED_ANY || op == DPL_RED_ALL) && dim == -1 && !keepdim && !out_idx && a->_dtype == DPL_BOOL &&
      dpl_is_contig(a))
    return bool_any_all(name, op, a, out);
  int isf = dpl_is_float(a->_dtype);
  if (!isf && (op == DPL_RED_MEAN || op == DPL_RED_VAR || op == DPL_RED_STD || op == DPL_RED_LOGSUMEXP || op == DPL_RED_NORM))
    return dpl_errorf(DPL_EINVAL, "%s: expected a floating-point tensor, got %s (convert with :float() first)", name,
                      dpl_dtype_name(a->_dtype));
  int32_t kd = !isf ? DPL_INT64 : a->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  int32_t rd; /* result dtype */
  if (op == DPL_RED_ARGMAX || op == DPL_RED_ARGMIN) rd = DPL_INT64;
  else if (op == DPL_RED_ANY || op == DPL_RED_ALL) rd = DPL_BOOL;
  else if (!isf && (op == DPL_RED_SUM || op == DPL_RED_PROD)) rd = DPL_INT64;
  else rd = a->_dtype;
  int32_t od = (rd == DPL_INT64 || rd == DPL_BOOL) ? rd : kd; /* written by the kernel */
  if (op != DPL_RED_ARGMAX && op != DPL_RED_ARGMIN && op != DPL_RED_ANY && op != DPL_RED_ALL && kd == DPL_INT64 &&
      (op == DPL_RED_MAX || op == DPL_RED_MIN))
    od = DPL_INT64;
  /* inputs */
  dpl_tensor *src = NULL;
  int st;
  if (dim == -1 || a->_ndim == 0) st = dpl_contig_as(name, a, kd, &src); /* flatten */
  else if (a->_dtype != kd) st = dpl_contig_as(name, a, kd, &src);
  else st = dpl_tensor_alias(a, &src);
  if (st != DPL_OK) return st;
  along g;
  if (dim == -1 || a->_ndim == 0) {
    g.ondim = 0;
    g.R = src->_numel;
    g.rs = 1;
  } else {
    along_dim(src, dim, &g);
  }
  int needs_nonempty = op == DPL_RED_MAX || op == DPL_RED_MIN || op == DPL_RED_ARGMAX || op == DPL_RED_ARGMIN;
  if (needs_nonempty && g.R == 0) {
    dpl_tensor_release(src);
    return dpl_errorf(DPL_EINVAL, "%s: cannot reduce over an empty dim (size 0): the result has no identity", name);
  }
  /* output shapes */
  int64_t oshape[DPL_MAX_DIMS];
  int32_t ond = 0;
  if (dim == -1) {
    if (keepdim) for (int i = 0; i < a->_ndim; i++) oshape[ond++] = 1;
  } else {
    for (int i = 0; i < a->_ndim; i++) {
      if (i == dim) { if (keepdim) oshape[ond++] = 1; }
      else oshape[ond++] = a->_shape[i];
    }
  }
  dpl_tensor *res = NULL, *idx = NULL;
  st = dpl_new(name, od, ond, oshape, a, &res);
  if (st == DPL_OK && out_idx) st = dpl_new(name, DPL_INT64, ond, oshape, a, &idx);
  int64_t inner = 1;
  if (dim >= 0) for (int i = dim + 1; i < src->_ndim; i++) inner *= src->_shape[i];
  if (st == DPL_OK && (op == DPL_RED_SUM || op == DPL_RED_MEAN) && kd != DPL_INT64 && dim >= 0 && inner > 1 &&
      dpl_is_contig(src) && g.R > 0) {
    /* sum over a dim that is not the innermost, on contiguous data: accumulate whole
     * rows (the bias gradient's sum(1)), in double, instead of strided columns */
    int64_t outer = 1, R = g.R;
    for (int i = 0; i < dim; i++) outer *= src->_shape[i];
    double *acc = malloc((size_t)inner * sizeof(double));
    if (!acc) st = dpl_errorf(DPL_ENOMEM, "%s: out of memory", name);
    for (int64_t o = 0; st == DPL_OK && o < outer; o++) {
      for (int64_t j = 0; j < inner; j++) acc[j] = 0;
      for (int64_t r = 0; r < R; r++) {
        if (kd == DPL_FLOAT32) {
          const float *x = (const float *)src->_data + (o * R + r) * inner;
          for (int64_t j = 0; j < inner; j++) acc[j] += x[j];
        } else {
          const double *x = (const double *)src->_data + (o * R + r) * inner;
          for (int64_t j = 0; j < inner; j++) acc[j] += x[j];
        }
      }
      double scale = op == DPL_RED_MEAN ? 1.0 / (double)R : 1.0;
      if (kd == DPL_FLOAT32) {
        float *y = (float *)res->_data + o * inner;
        for (int64_t j = 0; j < inner; j++) y[j] = (float)(acc[j] * scale);
      } else {
        double *y = (double *)res->_data + o * inner;
        for (int64_t j = 0; j < inner; j++) y[j] = acc[j] * scale;
      }
    }
    free(acc);
    if (st == DPL_OK) st = dpl_retype(name, &res, rd);
  } else if (st == DPL_OK) {
    red_job j;
    j.c.op = op;
    j.c.R = g.R;
    j.c.rs = g.rs * dpl_elsize(kd);
    j.c.param = param;
    j.c.kd = kd;
    j.out = res->_data;
    j.idx = idx ? idx->_data : NULL;
    j.in = src->_data;
    j.out_es = dpl_elsize(od);
    j.g = g;
    j.es = dpl_elsize(kd);
    int64_t nout = dpl_shape_numel(g.ondim, g.oshape);
    int64_t grain = g.R > 0 ? 65536 / g.R + 1 : 65536;
    dpl_parallel_for(nout, grain, red_range, &j);
    st = dpl_retype(name, &res, rd);
  }
  dpl_tensor_release(src);
  return dpl_hand_over(st, 2, (dpl_tensor *[]){res, idx}, (dpl_tensor **[]){out, out_idx});
}

int dpl_reduce(int32_t op, const dpl_tensor *a, int32_t dim, int32_t keepdim, double param, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "reduce: out is NULL");
  *out = NULL;
  if (dpl_is_devmem(a)) {
    dpl_bk_args k = {.op = DPL_BK_REDUCE, .sub = op, .in = {a}, .i = {dim, keepdim}, .d = {param}, .out = {out},
                     .name = red_name(op) ? red_name(op) : "reduce"};
    return dpl_bk_call(&k);
  }
  return reduce_core(op, a, dim, keepdim, param, out, NULL);
}

int dpl_reduce_index(int32_t op, const dpl_tensor *a, int32_t dim, int32_t keepdim, dpl_tensor **values,
                     dpl_tensor **indices)
{
  if (!values || !indices) return dpl_errorf(DPL_EINVAL, "reduce_index: values or indices is NULL");
  *values = *indices = NULL;
  if (op != DPL_RED_MAX && op != DPL_RED_MIN)
    return dpl_errorf(DPL_EINVAL, "reduce_index: expected op max (%d) or min (%d), got %d", DPL_RED_MAX, DPL_RED_MIN, (int)op);
  if (dim == -1) return dpl_errorf(DPL_EINVAL, "%s: values with indices need a dim", op == DPL_RED_MAX ? "max" : "min");
  if (dpl_is_devmem(a)) {
    dpl_bk_args k = {.op = DPL_BK_REDUCE_INDEX, .sub = op, .in = {a}, .i = {dim, keepdim}, .out = {values, indices},
                     .name = op == DPL_RED_MAX ? "max" : "min"};
    return dpl_bk_call(&k);
  }
  return reduce_core(op, a, dim, keepdim, 0, values, indices);
}

/* ---- softmax ---- */
/* One contiguous float32 row x[0..R): m = its max (NaN when it holds a NaN, 0 when every
 * value is -inf), e[k] = exp(x[k] - m) by the vectorised kernel (e may be another row or
 * scratch, not x), and the sum of e in double: four partial sums in a fixed order, so
 * the result does not depend on the thread count. Used by softmax and cross_entropy. */
static double row_exp_f32(const float *x, float *e, int64_t R, float *m_out)
{
  int64_t k = 0;
  float m = -INFINITY;
  int nan = 0;
#if defined(__SSE2__)
  /* eight running maxima in two registers (maxps keeps the running value when x is NaN:
   * a NaN is noted apart), the partial sums of e as two pairs of doubles */
  __m128 m0 = _mm_set1_ps(-INFINITY), m1 = m0, un = _mm_setzero_ps();
  for (; k + 8 <= R; k += 8) {
    __m128 a = _mm_loadu_ps(x + k), b = _mm_loadu_ps(x + k + 4);
    un = _mm_or_ps(un, _mm_or_ps(_mm_cmpunord_ps(a, a), _mm_cmpunord_ps(b, b)));
    m0 = _mm_max_ps(a, m0);
    m1 = _mm_max_ps(b, m1);
  }
  float mv[8];
  _mm_storeu_ps(mv, m0);
  _mm_storeu_ps(mv + 4, m1);
  nan = _mm_movemask_ps(un) != 0;
  for (int u = 0; u < 8; u++) m = mv[u] > m ? mv[u] : m;
#endif
  for (; k < R; k++) { float v = x[k]; nan |= v != v; m = v > m ? v : m; }
  if (nan) m = NAN;
  if (isinf(m) && m < 0) m = 0;
  for (k = 0; k < R; k++) e[k] = x[k] - m;
  dpl_vm_map(DPL_VM_EXP, (char *)e, 4, (const char *)e, 4, R, 0, 0);
  double sp[4] = {0, 0, 0, 0}; /* sp[u] sums e[k + u], k = 0, 4, 8, ...: a fixed order */
  k = 0;
#if defined(__SSE2__)
  __m128d s01 = _mm_setzero_pd(), s23 = _mm_setzero_pd();
  for (; k + 4 <= R; k += 4) {
    __m128 v = _mm_loadu_ps(e + k);
    s01 = _mm_add_pd(s01, _mm_cvtps_pd(v));
    s23 = _mm_add_pd(s23, _mm_cvtps_pd(_mm_movehl_ps(v, v)));
  }
  _mm_storeu_pd(sp, s01);
  _mm_storeu_pd(sp + 2, s23);
#endif
  for (; k + 4 <= R; k += 4)
    for (int u = 0; u < 4; u++) sp[u] += e[k + u];
  for (; k < R; k++) sp[0] += e[k];
  *m_out = m;
  return (sp[0] + sp[1]) + (sp[2] + sp[3]);
}

typedef struct sm_job {
  along gi, go, gg; /* input (or y), output, grad */
  char *in, *out, *grad;
  int32_t kd;
  int log, backward;
} sm_job;

static void sm_range(int64_t lo, int64_t hi, void *vj)
{
  sm_job *j = vj;
  int nd = j->gi.ondim;
  int64_t es = dpl_elsize(j->kd);
  int isf = j->kd == DPL_FLOAT32;
  int64_t ix[DPL_MAX_DIMS], rem = lo;
  for (int d = nd - 1; d >= 0; d--) { ix[d] = rem % j->gi.oshape[d]; rem /= j->gi.oshape[d]; }
  int64_t R = j->gi.R;
  for (int64_t o = lo; o < hi; o++) {
    int64_t oi = 0, oo = 0, og = 0;
    for (int d = 0; d < nd; d++) {
      oi += ix[d] * j->gi.ostride[d];
      oo += ix[d] * j->go.ostride[d];
      if (j->backward) og += ix[d] * j->gg.ostride[d];
    }
    char *pi = j->in + oi * es, *po = j->out + oo * es, *pg = j->backward ? j->grad + og * es : NULL;
    int64_t si = j->gi.rs * es, so = j->go.rs * es, sg = j->backward ? j->gg.rs * es : 0;
#define RD(p, s, k) (isf ? (double)*(const float *)((p) + (k) * (s)) : *(const double *)((p) + (k) * (s)))
#define WR(p, s, k, v) do { if (isf) *(float *)((p) + (k) * (s)) = (float)(v); else *(double *)((p) + (k) * (s)) = (v); } while (0)
    if (!j->backward && isf && si == 4 && so == 4 && dpl_vm_isa() != DPL_VM_OFF) {
      /* float32 rows: exp(x - m) by the vectorised kernel into the output row (the sum in
       * double), then the scaling (softmax) or x - m - log(sum) (log_softmax) */
      const float *x = (const float *)pi;
      float *y = (float *)po;
      float m;
      double s = row_exp_f32(x, y, R, &m);
      if (j->log) {
        double ls = log(s) + m;
        for (int64_t k = 0; k < R; k++) y[k] = (float)((double)x[k] - ls);
      } else {
        float r = (float)(1.0 / s);
        for (int64_t k = 0; k < R; k++) y[k] *= r;
      }
    } else if (!j->backward) {
      double m = -INFINITY;
      for (int64_t k = 0; k < R; k++) { double v = RD(pi, si, k); if (v > m || v != v) m = v; }
      double s = 0;
      if (isinf(m) && m < 0) m = 0;
      for (int64_t k = 0; k < R; k++) s += exp(RD(pi, si, k) - m);
      if (j->log) {
        double ls = log(s) + m;
        for (int64_t k = 0; k < R; k++) WR(po, so, k, RD(pi, si, k) - ls);
      } else {
        for (int64_t k = 0; k < R; k++) WR(po, so, k, exp(RD(pi, si, k) - m) / s);
      }
    } else {
      /* pi: forward output y, pg: incoming grad */
      double s = 0;
      if (j->log) {
        for (int64_t k = 0; k < R; k++) s += RD(pg, sg, k);
        for (int64_t k = 0; k < R; k++) WR(po, so, k, RD(pg, sg, k) - exp(RD(pi, si, k)) * s);
      } else {
        for (int64_t k = 0; k < R; k++) s += RD(pg, sg, k) * RD(pi, si, k);
        for (int64_t k = 0; k < R; k++) WR(po, so, k, RD(pi, si, k) * (RD(pg, sg, k) - s));
      }
    }
#undef RD
#undef WR
    for (int d = nd - 1; d >= 0; d--) { if (++ix[d] < j->gi.oshape[d]) break; ix[d] = 0; }
  }
}

static int softmax_core(const char *name, const dpl_tensor *grad, const dpl_tensor *a, int32_t dim, int32_t log,
                        dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(dpl_check_tensor(name, grad ? "output" : "self", a));
  if (grad) {
    DPL_TRY(dpl_check_tensor(name, "grad", grad));
    DPL_TRY(dpl_check_same_device(name, grad, a));
    if (!dpl_same_shape(grad, a)) {
      char b1[160], b2[160];
      return dpl_errorf(DPL_EINVAL, "%s: grad shape %s does not match the output shape %s", name,
                        dpl_shape_str(grad->_ndim, grad->_shape, b1, sizeof b1), dpl_shape_str(a->_ndim, a->_shape, b2, sizeof b2));
    }
  }
  if (a->_ndim == 0 ? dim != 0 : (dim < 0 || dim >= a->_ndim))
    return dpl_errorf(DPL_EINVAL, "%s: dim %d out of range (expected 0..%d for a %d-d tensor)", name, (int)dim,
                      a->_ndim ? (int)a->_ndim - 1 : 0, (int)a->_ndim);
  int32_t rd = dpl_is_float(a->_dtype) ? a->_dtype : DPL_FLOAT32;
  int32_t kd = rd == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  dpl_tensor *ta = NULL, *tg = NULL, *res = NULL;
  int st = a->_dtype == kd ? dpl_tensor_alias(a, &ta) : dpl_contig_as(name, a, kd, &ta);
  if (st == DPL_OK && grad) st = grad->_dtype == kd ? dpl_tensor_alias(grad, &tg) : dpl_contig_as(name, grad, kd, &tg);
  if (st == DPL_OK) st = dpl_new(name, kd, a->_ndim, a->_shape, a, &res);
  if (st == DPL_OK && a->_numel > 0) {
    sm_job j;
    int32_t d = a->_ndim ? dim : 0;
    if (a->_ndim == 0) { j.gi.ondim = j.go.ondim = j.gg.ondim = 0; j.gi.R = j.go.R = j.gg.R = 1; j.gi.rs = j.go.rs = j.gg.rs = 1; }
    else {
      along_dim(ta, d, &j.gi);
      along_dim(res, d, &j.go);
      if (tg) along_dim(tg, d, &j.gg);
    }
    j.in = ta->_data;
    j.out = res->_data;
    j.grad = tg ? tg->_data : NULL;
    j.kd = kd;
    j.log = log != 0;
    j.backward = grad != NULL;
    int64_t nout = dpl_shape_numel(j.gi.ondim, j.gi.oshape);
    dpl_parallel_for(nout, 16384 / (j.gi.R + 1) + 1, sm_range, &j);
  }
  if (st == DPL_OK) st = dpl_retype(name, &res, rd);
  dpl_release_n(2, (dpl_tensor *[]){ta, tg});
  return dpl_hand_over(st, 1, &res, &out);
}

int dpl_softmax(const dpl_tensor *a, int32_t dim, int32_t log, dpl_tensor **out)
{
  if (out && dpl_is_devmem(a)) {
    *out = NULL;
    dpl_bk_args k = {.op = DPL_BK_SOFTMAX, .in = {a}, .i = {dim, log}, .out = {out},
                     .name = log ? "log_softmax" : "softmax"};
    return dpl_bk_call(&k);
  }
  return softmax_core(log ? "log_softmax" : "softmax", NULL, a, dim, log, out);
}

int dpl_softmax_backward(const dpl_tensor *grad, const dpl_tensor *output, int32_t dim, int32_t log, dpl_tensor **out)
{
  if (out && (dpl_is_devmem(grad) || dpl_is_devmem(output))) {
    *out = NULL;
    dpl_bk_args k = {.op = DPL_BK_SOFTMAX_BWD, .in = {grad, output}, .i = {dim, log}, .out = {out},
                     .name = log ? "log_softmax_backward" : "softmax_backward"};
    return dpl_bk_call(&k);
  }
  return softmax_core(log ? "log_softmax_backward" : "softmax_backward", grad, output, dim, log, out);
}

/* ---- losses ---- */
static int check_reduction(const char *name, int32_t r)
{
  if (r < 0 || r > 2) return dpl_errorf(DPL_EINVAL, "%s: reduction must be 0 (none), 1 (mean) or 2 (sum), got %d", name, (int)r);
  return DPL_OK;
}

/* logits/logp [N, C] (or [C] with a 0-d target); target int [N]: fills N and C (the CUDA plugin's too) */
int dpl_class_loss_dims(const char *name, const dpl_tensor *x, const dpl_tensor *target, int64_t *N, int64_t *C)
{
  char b1[160], b2[160];
  if (!dpl_is_float(x->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected floating-point input, got %s", name, dpl_dtype_name(x->_dtype));
  if (dpl_is_float(target->_dtype) || target->_dtype == DPL_BOOL)
    return dpl_errorf(DPL_EINVAL, "%s: expected integer class indices as target, got %s", name, dpl_dtype_name(target->_dtype));
  if (x->_ndim == 2) {
    if (target->_ndim != 1 || target->_shape[0] != x->_shape[0])
      return dpl_errorf(DPL_EINVAL, "%s: input of shape %s needs a target of shape [%lld], got %s", name,
                        dpl_shape_str(x->_ndim, x->_shape, b1, sizeof b1), (long long)x->_shape[0],
                        dpl_shape_str(target->_ndim, target->_shape, b2, sizeof b2));
    *N = x->_shape[0];
    *C = x->_shape[1];
  } else if (x->_ndim == 1) {
    if (target->_ndim != 0)
      return dpl_errorf(DPL_EINVAL, "%s: a 1-d input needs a 0-d target, got shape %s", name,
                        dpl_shape_str(target->_ndim, target->_shape, b2, sizeof b2));
    *N = 1;
    *C = x->_shape[0];
  } else {
    return dpl_errorf(DPL_EINVAL, "%s: expected input of shape [N, C] or [C], got %s", name,
                      dpl_shape_str(x->_ndim, x->_shape, b1, sizeof b1));
  }
  return DPL_OK;
}

/* the CPU's: dims checked, the input contiguous in its kernel dtype (float32 stays float32
 * when the vectorised exp is on: no float64 copy; others become float64) and the target
 * as contiguous int64 */
static int class_inputs(const char *name, const dpl_tensor *x, const dpl_tensor *target, int64_t ignore,
                        int64_t *N, int64_t *C, dpl_tensor **xd, dpl_tensor **td)
{
  DPL_TRY(dpl_check_tensor(name, "input", x));
  DPL_TRY(dpl_check_tensor(name, "target", target));
  DPL_TRY(dpl_check_same_device(name, x, target));
  DPL_TRY(dpl_class_loss_dims(name, x, target, N, C));
  int32_t kd = x->_dtype == DPL_FLOAT32 && dpl_vm_isa() != DPL_VM_OFF ? DPL_FLOAT32 : DPL_FLOAT64;
  DPL_TRY(dpl_contig_as(name, x, kd, xd));
  int st = dpl_contig_as(name, target, DPL_INT64, td);
  if (st != DPL_OK) { dpl_tensor_release(*xd); return st; }
  const int64_t *t = (*td)->_data;
  for (int64_t i = 0; i < *N; i++) {
    if (t[i] == ignore) continue;
    if (t[i] < 0 || t[i] >= *C) {
      dpl_tensor_release(*xd);
      dpl_tensor_release(*td);
      return dpl_errorf(DPL_EINVAL, "%s: target %lld of sample %lld is out of range: expected a class index in [0, %lld) (0-based)",
                        name, (long long)t[i], (long long)i, (long long)*C);
    }
  }
  return DPL_OK;
}

/* the rows of the class losses, split across the thread pool (each row on its own: the same
 * values whatever the thread count). x and r are float32 when f32, else float64. */
typedef struct class_rows {
  int ce, f32;
  const void *x;
  const int64_t *t;
  int64_t C, ignore;
  double *l;        /* forward: per-sample losses */
  const double *g;  /* backward: per-sample gradient scales */
  void *r;          /* backward: the gradient rows */
} class_rows;

/* m + log(sum exp(row - m)) of a float32 row, the exps into e (C floats) when it is
 * given, else by libm one at a time (no scratch memory) */
static double lse_f32(const float *row, int64_t C, float *e)
{
  float m;
  if (e) {
    double s = row_exp_f32(row, e, C, &m);
    return m + log(s);
  }
  double dm = -INFINITY, s = 0;
  for (int64_t k = 0; k < C; k++) if (row[k] > dm || row[k] != row[k]) dm = row[k];
  if (isinf(dm) && dm < 0) dm = 0;
  for (int64_t k = 0; k < C; k++) s += exp((double)row[k] - dm);
  return dm + log(s);
}

static void class_loss_range(int64_t lo, int64_t hi, void *ctx)
{
  const class_rows *j = ctx;
  int64_t C = j->C;
  float stack[1024], *e = NULL;
  if (j->ce && j->f32) e = C <= 1024 ? stack : malloc((size_t)C * sizeof(float));
  for (int64_t i = lo; i < hi; i++) {
    int64_t ti = j->t[i];
    if (ti == j->ignore) { j->l[i] = 0; continue; }
    if (j->f32) {
      const float *row = (const float *)j->x + i * C;
      j->l[i] = j->ce ? lse_f32(row, C, e) - row[ti] : -(double)row[ti];
      continue;
    }
    const double *row = (const double *)j->x + i * C;
    if (j->ce) {
      double m = -INFINITY;
      for (int64_t k = 0; k < C; k++) if (row[k] > m) m = row[k];
      double s = 0;
      for (int64_t k = 0; k < C; k++) s += exp(row[k] - m);
      j->l[i] = m + log(s) - row[ti];
    } else {
      j->l[i] = -row[ti];
    }
  }
  if (e != stack) free(e);
}

/* rows per task: about 64K elements of work each */
static int64_t class_grain(int64_t C) { return 65536 / (C + 1) + 1; }

/* per-sample losses into l (N doubles); returns the count of non-ignored samples */
static int64_t class_loss_rows(int ce, const dpl_tensor *x, const int64_t *t, int64_t N, int64_t C, int64_t ignore,
                               double *l)
{
  int64_t cnt = 0;
  for (int64_t i = 0; i < N; i++) cnt += t[i] != ignore;
  class_rows j = {.ce = ce, .f32 = x->_dtype == DPL_FLOAT32, .x = x->_data, .t = t, .C = C, .ignore = ignore, .l = l};
  dpl_parallel_for(N, class_grain(C), class_loss_range, &j);
  return cnt;
}

/* gradient rows: softmax(row) * g - g at the target (cross_entropy), -g at the target (nll_loss) */
static void class_grad_range(int64_t lo, int64_t hi, void *ctx)
{
  const class_rows *j = ctx;
  int64_t C = j->C;
  for (int64_t i = lo; i < hi; i++) {
    double gi = j->g[i];
    int64_t ti = j->t[i];
    if (j->f32) {
      const float *row = (const float *)j->x + i * C;
      float *gr = (float *)j->r + i * C;
      if (ti == j->ignore) { memset(gr, 0, (size_t)C * sizeof(float)); continue; }
      if (j->ce) {
        float m;
        double s = row_exp_f32(row, gr, C, &m);
        float sc = (float)(gi / s);
        for (int64_t k = 0; k < C; k++) gr[k] *= sc;
        gr[ti] -= (float)gi; /* in float, as PyTorch: a certain prediction gives exactly 0 */
      } else {
        memset(gr, 0, (size_t)C * sizeof(float));
        gr[ti] = (float)-gi;
      }
      continue;
    }
    const double *row = (const double *)j->x + i * C;
    double *gr = (double *)j->r + i * C;
    if (ti == j->ignore) { for (int64_t k = 0; k < C; k++) gr[k] = 0; continue; }
    if (j->ce) {
      double m = -INFINITY, s = 0;
      for (int64_t k = 0; k < C; k++) if (row[k] > m) m = row[k];
      for (int64_t k = 0; k < C; k++) s += gr[k] = exp(row[k] - m); /* (one exp per element) */
      for (int64_t k = 0; k < C; k++) gr[k] = gi * gr[k] / s;
      gr[ti] -= gi;
    } else {
      for (int64_t k = 0; k < C; k++) gr[k] = 0;
      gr[ti] = -gi;
    }
  }
}

static int finish_loss(const char *name, const dpl_tensor *x, const double *l, int64_t N, int64_t cnt, int32_t reduction,
                       int target_1d, dpl_tensor **out)
{
  int32_t rd = x->_dtype;
  if (reduction == 0) {
    int64_t shape[1] = {N};
    DPL_TRY(dpl_new(name, DPL_FLOAT64, target_1d ? 1 : 0, shape, x, out));
    memcpy((*out)->_data, l, (size_t)N * sizeof(double));
  } else {
    double s = 0;
    for (int64_t i = 0; i < N; i++) s += l[i];
    if (reduction == 1) s = cnt ? s / (double)cnt : NAN;
    DPL_TRY(dpl_new(name, DPL_FLOAT64, 0, NULL, x, out));
    *(double *)(*out)->_data = s;
  }
  if (rd != DPL_FLOAT64) {
    dpl_tensor *r = NULL;
    int st = dpl_contig_as(name, *out, rd, &r);
    dpl_tensor_release(*out);
    *out = r;
    return st;
  }
  return DPL_OK;
}

static int class_loss(const char *name, int ce, const dpl_tensor *x, const dpl_tensor *target, int32_t reduction,
                      int64_t ignore, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(check_reduction(name, reduction));
  if (dpl_is_devmem(x) || dpl_is_devmem(target)) {
    dpl_bk_args k = {.op = ce ? DPL_BK_CROSS_ENTROPY : DPL_BK_NLL, .in = {x, target}, .i = {reduction},
                     .l = {ignore}, .out = {out}, .name = name};
    return dpl_bk_call(&k);
  }
  int64_t N, C;
  dpl_tensor *xd, *td;
  DPL_TRY(class_inputs(name, x, target, ignore, &N, &C, &xd, &td));
  double *l = malloc((size_t)(N ? N : 1) * sizeof(double));
  int st = DPL_OK;
  if (!l) st = dpl_errorf(DPL_ENOMEM, "%s: out of memory", name);
  else {
    int64_t cnt = class_loss_rows(ce, xd, td->_data, N, C, ignore, l);
    st = finish_loss(name, x, l, N, cnt, reduction, x->_ndim == 2, out);
  }
  free(l);
  dpl_tensor_release(xd);
  dpl_tensor_release(td);
  return st;
}

int dpl_cross_entropy(const dpl_tensor *logits, const dpl_tensor *target, int32_t reduction, int64_t ignore_index,
                      dpl_tensor **out)
{
  return class_loss("cross_entropy", 1, logits, target, reduction, ignore_index, out);
}

int dpl_nll_loss(const dpl_tensor *logp, const dpl_tensor *target, int32_t reduction, int64_t ignore_index,
                 dpl_tensor **out)
{
  return class_loss("nll_loss", 0, logp, target, reduction, ignore_index, out);
}

/* reads grad_out into per-sample scales g[i] */
static int grad_scales(const char *name, const dpl_tensor *grad_out, int32_t reduction, int64_t N, int64_t cnt, double *g)
{
  DPL_TRY(dpl_check_tensor(name, "grad_out", grad_out));
  if (reduction == 0) {
    if (grad_out->_numel != N)
      return dpl_errorf(DPL_EINVAL, "%s: grad_out must have %lld elements (reduction none), got %lld", name, (long long)N,
                        (long long)grad_out->_numel);
    for (int64_t i = 0; i < N; i++) dpl_tensor_get(grad_out, i, &g[i]);
  } else {
    if (grad_out->_numel != 1)
      return dpl_errorf(DPL_EINVAL, "%s: grad_out must have one element (reduced loss), got %lld", name,
                        (long long)grad_out->_numel);
    double v;
    dpl_tensor_get(grad_out, 0, &v);
    if (reduction == 1) v = cnt ? v / (double)cnt : 0;
    for (int64_t i = 0; i < N; i++) g[i] = v;
  }
  return DPL_OK;
}

static int class_loss_backward(const char *name, int ce, const dpl_tensor *grad_out, const dpl_tensor *x,
                               const dpl_tensor *target, int32_t reduction, int64_t ignore, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(check_reduction(name, reduction));
  int64_t N, C;
  dpl_tensor *xd, *td, *res = NULL;
  DPL_TRY(class_inputs(name, x, target, ignore, &N, &C, &xd, &td));
  double *g = malloc((size_t)(N ? N : 1) * sizeof(double));
  const int64_t *t = td->_data;
  int64_t cnt = 0;
  for (int64_t i = 0; i < N; i++) cnt += t[i] != ignore;
  int st = g ? grad_scales(name, grad_out, reduction, N, cnt, g) : dpl_errorf(DPL_ENOMEM, "%s: out of memory", name);
  if (st == DPL_OK) st = dpl_new(name, xd->_dtype, x->_ndim, x->_shape, x, &res);
  if (st == DPL_OK) {
    class_rows j = {.ce = ce, .f32 = xd->_dtype == DPL_FLOAT32, .x = xd->_data, .t = t, .C = C, .ignore = ignore,
                    .g = g, .r = res->_data};
    dpl_parallel_for(N, class_grain(C), class_grad_range, &j);
    st = dpl_retype(name, &res, x->_dtype);
  }
  free(g);
  dpl_release_n(2, (dpl_tensor *[]){xd, td});
  return dpl_hand_over(st, 1, &res, &out);
}

int dpl_cross_entropy_backward(const dpl_tensor *grad_out, const dpl_tensor *logits, const dpl_tensor *target,
                               int32_t reduction, int64_t ignore_index, dpl_tensor **grad_logits)
{
  if (grad_logits && (dpl_is_devmem(logits) || dpl_is_devmem(grad_out))) {
    *grad_logits = NULL;
    DPL_TRY(check_reduction("cross_entropy_backward", reduction));
    dpl_bk_args k = {.op = DPL_BK_CROSS_ENTROPY_BWD, .in = {grad_out, logits, target}, .i = {reduction},
                     .l = {ignore_index}, .out = {grad_logits}, .name = "cross_entropy_backward"};
    return dpl_bk_call(&k);
  }
  return class_loss_backward("cross_entropy_backward", 1, grad_out, logits, target, reduction, ignore_index, grad_logits);
}

int dpl_nll_loss_backward(const dpl_tensor *grad_out, const dpl_tensor *logp, const dpl_tensor *target,
                          int32_t reduction, int64_t ignore_index, dpl_tensor **grad_logp)
{
  if (grad_logp && (dpl_is_devmem(logp) || dpl_is_devmem(grad_out))) {
    *grad_logp = NULL;
    DPL_TRY(check_reduction("nll_loss_backward", reduction));
    dpl_bk_args k = {.op = DPL_BK_NLL_BWD, .in = {grad_out, logp, target}, .i = {reduction}, .l = {ignore_index},
                     .out = {grad_logp}, .name = "nll_loss_backward"};
    return dpl_bk_call(&k);
  }
  return class_loss_backward("nll_loss_backward", 0, grad_out, logp, target, reduction, ignore_index, grad_logp);
}

int dpl_mse_check(const char *name, const dpl_tensor *a, const dpl_tensor *b)
{
  DPL_TRY(dpl_check_same_device(name, a, b));
  if (!dpl_same_shape(a, b)) {
    char b1[160], b2[160];
    return dpl_errorf(DPL_EINVAL, "%s: input shape %s and target shape %s must match", name,
                      dpl_shape_str(a->_ndim, a->_shape, b1, sizeof b1), dpl_shape_str(b->_ndim, b->_shape, b2, sizeof b2));
  }
  if (!dpl_is_float(a->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected floating-point input, got %s", name, dpl_dtype_name(a->_dtype));
  return DPL_OK;
}

/* the CPU's: checked, contiguous float64 copies of the input and the target */
static int mse_inputs(const char *name, const dpl_tensor *a, const dpl_tensor *b, dpl_tensor **ad, dpl_tensor **bd)
{
  DPL_TRY(dpl_check_tensor(name, "input", a));
  DPL_TRY(dpl_check_tensor(name, "target", b));
  DPL_TRY(dpl_mse_check(name, a, b));
  DPL_TRY(dpl_contig_as(name, a, DPL_FLOAT64, ad));
  int st = dpl_contig_as(name, b, DPL_FLOAT64, bd);
  if (st != DPL_OK) dpl_tensor_release(*ad);
  return st;
}

int dpl_mse_loss(const dpl_tensor *a, const dpl_tensor *b, int32_t reduction, dpl_tensor **out)
{
  const char *name = "mse_loss";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(check_reduction(name, reduction));
  if (dpl_is_devmem(a) || dpl_is_devmem(b)) {
    dpl_bk_args k = {.op = DPL_BK_MSE, .in = {a, b}, .i = {reduction}, .out = {out}, .name = name};
    return dpl_bk_call(&k);
  }
  dpl_tensor *ad, *bd, *res = NULL;
  DPL_TRY(mse_inputs(name, a, b, &ad, &bd));
  const double *x = ad->_data, *y = bd->_data;
  int64_t n = a->_numel;
  int st;
  if (reduction == 0) {
    st = dpl_new(name, DPL_FLOAT64, a->_ndim, a->_shape, a, &res);
    if (st == DPL_OK) for (int64_t i = 0; i < n; i++) ((double *)res->_data)[i] = (x[i] - y[i]) * (x[i] - y[i]);
  } else {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (x[i] - y[i]) * (x[i] - y[i]);
    if (reduction == 1) s = n ? s / (double)n : NAN;
    st = dpl_new(name, DPL_FLOAT64, 0, NULL, a, &res);
    if (st == DPL_OK) *(double *)res->_data = s;
  }
  if (st == DPL_OK) st = dpl_retype(name, &res, a->_dtype);
  dpl_release_n(2, (dpl_tensor *[]){ad, bd});
  return dpl_hand_over(st, 1, &res, &out);
}

int dpl_mse_loss_backward(const dpl_tensor *grad_out, const dpl_tensor *a, const dpl_tensor *b, int32_t reduction,
                          dpl_tensor **grad_a)
{
  const char *name = "mse_loss_backward";
  if (!grad_a) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *grad_a = NULL;
  DPL_TRY(check_reduction(name, reduction));
  if (dpl_is_devmem(a) || dpl_is_devmem(grad_out)) {
    dpl_bk_args k = {.op = DPL_BK_MSE_BWD, .in = {grad_out, a, b}, .i = {reduction}, .out = {grad_a}, .name = name};
    return dpl_bk_call(&k);
  }
  dpl_tensor *ad, *bd, *res = NULL;
  DPL_TRY(mse_inputs(name, a, b, &ad, &bd));
  int64_t n = a->_numel;
  int st = dpl_check_tensor(name, "grad_out", grad_out);
  if (st == DPL_OK && reduction == 0 && grad_out->_numel != n)
    st = dpl_errorf(DPL_EINVAL, "%s: grad_out must have %lld elements (reduction none), got %lld", name, (long long)n,
                    (long long)grad_out->_numel);
  if (st == DPL_OK && reduction != 0 && grad_out->_numel != 1)
    st = dpl_errorf(DPL_EINVAL, "%s: grad_out must have one element (reduced loss), got %lld", name,
                    (long long)grad_out->_numel);
  if (st == DPL_OK) st = dpl_new(name, DPL_FLOAT64, a->_ndim, a->_shape, a, &res);
  if (st == DPL_OK) {
    const double *x = ad->_data, *y = bd->_data;
    double *r = res->_data, g0 = 0;
    if (reduction != 0) {
      dpl_tensor_get(grad_out, 0, &g0);
      if (reduction == 1 && n) g0 /= (double)n;
    }
    for (int64_t i = 0; i < n; i++) {
      double g = g0;
      if (reduction == 0) dpl_tensor_get(grad_out, i, &g);
      r[i] = 2.0 * (x[i] - y[i]) * g;
    }
    st = dpl_retype(name, &res, a->_dtype);
  }
  dpl_release_n(2, (dpl_tensor *[]){ad, bd});
  return dpl_hand_over(st, 1, &res, &grad_a);
}
