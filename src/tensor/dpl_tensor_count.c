/* dpl_tensor_count.c: counting kernels: bincount (occurrences of each non-negative
 * integer, or the sums of their weights) and histc (a histogram of equal-width bins,
 * PyTorch's arithmetic: in the input's floating type). One pass over the data; the
 * checks (dtypes, shapes, negative values, the range) come first, so a bad input is
 * an error naming the op and the value, never a partial result. */
#include "dpl_tensor_internal.h"
#include <float.h>
#include <stdlib.h>

int dpl_bincount(const dpl_tensor *a, const dpl_tensor *weights, int64_t minlength, dpl_tensor **out)
{
  const char *name = "bincount";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(dpl_check_tensor(name, "self", a));
  if (weights) {
    DPL_TRY(dpl_check_tensor(name, "weights", weights));
    DPL_TRY(dpl_check_same_device(name, a, weights));
  }
  if (a->_ndim != 1)
    return dpl_errorf(DPL_EINVAL, "%s: expected a 1-d tensor of non-negative integers, got a %d-d tensor", name,
                      (int)a->_ndim);
  if (dpl_is_float(a->_dtype) || a->_dtype == DPL_BOOL)
    return dpl_errorf(DPL_EINVAL, "%s: expected a 1-d tensor of non-negative integers (uint8, int32 or int64), got %s",
                      name, dpl_dtype_name(a->_dtype));
  if (minlength < 0) return dpl_errorf(DPL_EINVAL, "%s: minlength must be >= 0, got %lld", name, (long long)minlength);
  int64_t n = a->_numel;
  if (weights && (weights->_ndim != 1 || weights->_numel != n)) {
    char b1[160];
    return dpl_errorf(DPL_EINVAL, "%s: weights must be 1-d with as many elements as the input (%lld), got shape %s", name,
                      (long long)n, dpl_shape_str(weights->_ndim, weights->_shape, b1, sizeof b1));
  }
  const char *p = a->_data;
  int64_t rs = a->_stride[0] * dpl_elsize(a->_dtype), mx = -1;
  for (int64_t i = 0; i < n; i++) {
    int64_t v = dpl_load_i64(p + i * rs, a->_dtype);
    if (v < 0)
      return dpl_errorf(DPL_EINVAL, "%s: expected non-negative values, got %lld (element %lld, 0-based)", name,
                        (long long)v, (long long)i);
    if (v > mx) mx = v;
  }
  if (mx == INT64_MAX) return dpl_errorf(DPL_EINVAL, "%s: value %lld is too large for a bin count", name, (long long)mx);
  int64_t len = mx + 1 > minlength ? mx + 1 : minlength;
  /* float32 weights give float32 sums, other weights float64 (PyTorch's result types) */
  int32_t rd = !weights ? DPL_INT64 : weights->_dtype == DPL_FLOAT32 ? DPL_FLOAT32 : DPL_FLOAT64;
  dpl_tensor *res = NULL;
  DPL_TRY(dpl_new(name, rd, 1, &len, a, &res));
  if (!weights) {
    int64_t *o = res->_data;
    memset(o, 0, (size_t)len * sizeof *o);
    for (int64_t i = 0; i < n; i++) o[dpl_load_i64(p + i * rs, a->_dtype)]++;
  } else {
    double *acc = rd == DPL_FLOAT64 ? res->_data : calloc((size_t)(len > 0 ? len : 1), sizeof *acc);
    if (!acc) { dpl_tensor_release(res); return dpl_errorf(DPL_ENOMEM, "%s: out of memory (%lld bins)", name, (long long)len); }
    if (rd == DPL_FLOAT64) memset(acc, 0, (size_t)len * sizeof *acc);
    const char *w = weights->_data;
    int64_t ws = weights->_stride[0] * dpl_elsize(weights->_dtype);
    for (int64_t i = 0; i < n; i++) acc[dpl_load_i64(p + i * rs, a->_dtype)] += dpl_load_f64(w + i * ws, weights->_dtype);
    if (rd == DPL_FLOAT32) {
      float *o = res->_data;
      for (int64_t b = 0; b < len; b++) o[b] = (float)acc[b];
      free(acc);
    }
  }
  *out = res;
  return DPL_OK;
}

/* the bin of x in [lo, hi] (bins of equal width), or -1 outside (NaN too); in float32
 * arithmetic for float32/float16/bfloat16 input, as PyTorch computes it */
static inline int64_t bin_f(float x, float lo, float hi, int64_t bins)
{
  if (!(x >= lo && x <= hi)) return -1;
  int64_t b = (int64_t)((x - lo) * (float)bins / (hi - lo));
  return b >= bins ? bins - 1 : b;
}
static inline int64_t bin_d(double x, double lo, double hi, int64_t bins)
{
  if (!(x >= lo && x <= hi)) return -1;
  int64_t b = (int64_t)((x - lo) * (double)bins / (hi - lo));
  return b >= bins ? bins - 1 : b;
}

int dpl_histc(const dpl_tensor *a, int64_t bins, double min, double max, dpl_tensor **out)
{
  const char *name = "histc";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(dpl_check_tensor(name, "self", a));
  if (!dpl_is_float(a->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected a floating-point tensor, got %s (as in PyTorch; convert with :float())",
                      name, dpl_dtype_name(a->_dtype));
  if (bins <= 0) return dpl_errorf(DPL_EINVAL, "%s: bins must be > 0, got %lld", name, (long long)bins);
  if (min > max) return dpl_errorf(DPL_EINVAL, "%s: max must be larger than min, got min %g, max %g", name, min, max);
  dpl_tensor *c = NULL, *res = NULL;
  int32_t kd = a->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  DPL_TRY(dpl_contig_as(name, a, kd, &c));
  int64_t n = c->_numel;
  int isd = kd == DPL_FLOAT64;
  const double *pd = c->_data;
  const float *pf = c->_data;
  /* the range: the given one (in the input's type), else the data's smallest and largest */
  double lo = isd ? min : (double)(float)min, hi = isd ? max : (double)(float)max;
  if (min == max && n > 0) {
    lo = INFINITY;
    hi = -INFINITY;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
      double x = isd ? pd[i] : (double)pf[i];
      if (x != x) nan = 1;
      if (x < lo) lo = x;
      if (x > hi) hi = x;
    }
    if (nan) lo = hi = NAN;
  }
  if (!isfinite(lo) || !isfinite(hi) || (!isd && (fabs(lo) > FLT_MAX || fabs(hi) > FLT_MAX))) {
    dpl_tensor_release(c);
    return dpl_errorf(DPL_EINVAL, "%s: range of [%g, %g] is not finite", name, lo, hi);
  }
  if (lo == hi) { lo -= 1; hi += 1; }
  int st = dpl_new(name, a->_dtype, 1, &bins, a, &res);
  int64_t *cnt = NULL;
  if (st == DPL_OK) {
    cnt = calloc((size_t)bins, sizeof *cnt);
    if (!cnt) st = dpl_errorf(DPL_ENOMEM, "%s: out of memory (%lld bins)", name, (long long)bins);
  }
  if (st == DPL_OK) {
    if (isd) {
      for (int64_t i = 0; i < n; i++) { int64_t b = bin_d(pd[i], lo, hi, bins); if (b >= 0) cnt[b]++; }
    } else {
      float flo = (float)lo, fhi = (float)hi;
      for (int64_t i = 0; i < n; i++) { int64_t b = bin_f(pf[i], flo, fhi, bins); if (b >= 0) cnt[b]++; }
    }
    for (int64_t b = 0; b < bins; b++) dpl_store_f64((char *)res->_data + b * dpl_elsize(a->_dtype), a->_dtype, (double)cnt[b]);
  }
  free(cnt);
  dpl_tensor_release(c);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *out = res;
  return DPL_OK;
}
