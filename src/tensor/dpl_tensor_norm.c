/* dpl_tensor_norm.c: the fused layer normalization (dpl_layer_norm) and its
 * gradient: the argument checks shared by every device, the CPU row kernels
 * (rows in parallel, float64 accumulation; float16/bfloat16 through float32)
 * and the hand-off of device tensors to the backend (DPL_BK_LAYER_NORM*). */
#include "dpl_tensor_backend.h"
#include "dpl_tensor_internal.h"
#include <math.h>
#include <stdlib.h>

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
