/* dpl_tensor_count.c: counting kernels: bincount (occurrences of each non-negative
 * integer, or the sums of their weights) and histc (a histogram of equal-width bins,
 * PyTorch's arithmetic: in the input's floating type). One pass over the data; the
 * checks (dtypes, shapes, negative values, the range) come first, so a bad input is
 * an error naming the op and the value, never a partial result. On a GPU: bincount is
 * composed (min / max reductions read back once for the checks and the length, then
 * index_add_ of ones or of the weights in float64), histc runs DPL_BK_HISTC (int64 atomic
 * counts) after the range is found (the data's min / max read back when min = max). */
#include "dpl_tensor_internal.h"
#include <float.h>
#include <stdlib.h>

/* the smallest and largest element of a tensor in device memory (reductions read back) */
static int dev_min_max(const dpl_tensor *a, int as_int, double *mn, double *mx, int64_t *imn, int64_t *imx)
{
  dpl_tensor *lo = NULL, *hi = NULL;
  int st = dpl_reduce(DPL_RED_MIN, a, -1, 0, 0, &lo);
  if (st == DPL_OK) st = dpl_reduce(DPL_RED_MAX, a, -1, 0, 0, &hi);
  if (st == DPL_OK && as_int) st = dpl_tensor_get_i64(lo, 0, imn);
  if (st == DPL_OK && as_int) st = dpl_tensor_get_i64(hi, 0, imx);
  if (st == DPL_OK && !as_int) st = dpl_tensor_get(lo, 0, mn);
  if (st == DPL_OK && !as_int) st = dpl_tensor_get(hi, 0, mx);
  dpl_release_n(2, (dpl_tensor *[]){lo, hi});
  return st;
}

/* bincount of a 1-d integer tensor in device memory (checked by the caller): zeros, then
 * index_add_ of ones (int64) or of the weights (float64, rounded to float32 for float32
 * weights, as the CPU sums them in double) */
static int bincount_dev(const char *name, const dpl_tensor *a, const dpl_tensor *weights, int64_t minlength, int32_t rd,
                        dpl_tensor **out)
{
  int64_t n = a->_numel, len = minlength, mn = 0, mx = -1;
  if (n > 0) {
    DPL_TRY(dev_min_max(a, 1, NULL, NULL, &mn, &mx));
    if (mn < 0) { /* the first negative element, for the CPU's message */
      dpl_dz z;
      dpl_dz_init(&z, name);
      dpl_tensor *neg = dpl_dz_as(&z, dpl_dz_bins(&z, DPL_OP_LT, a, 0, 0), DPL_INT32), *pos = NULL;
      int64_t at = 0, v = mn;
      if (neg) {
        int st = dpl_reduce(DPL_RED_ARGMAX, neg, -1, 0, 0, &pos);
        if (st == DPL_OK) st = dpl_tensor_get_i64(pos, 0, &at);
        if (st == DPL_OK) st = dpl_tensor_get_i64(a, at, &v);
        dpl_tensor_release(pos);
        if (st != DPL_OK && z.st == DPL_OK) z.st = st;
      }
      DPL_TRY(dpl_dz_end(&z));
      return dpl_errorf(DPL_EINVAL, "%s: expected non-negative values, got %lld (element %lld, 0-based)", name,
                        (long long)v, (long long)at);
    }
    if (mx == INT64_MAX) return dpl_errorf(DPL_EINVAL, "%s: value %lld is too large for a bin count", name, (long long)mx);
    if (mx + 1 > len) len = mx + 1;
  }
  int32_t acc_dt = rd == DPL_INT64 ? DPL_INT64 : DPL_FLOAT64;
  dpl_tensor *res = NULL;
  int st = dpl_new(name, acc_dt, 1, &len, a, &res);
  if (st == DPL_OK) st = dpl_tensor_fill_(res, 0);
  if (st == DPL_OK && n > 0) {
    dpl_dz z;
    dpl_dz_init(&z, name);
    dpl_tensor *idx = dpl_dz_as(&z, a, DPL_INT64), *src = NULL;
    if (weights) src = dpl_dz_as(&z, weights, DPL_FLOAT64);
    else if (z.st == DPL_OK) {
      int s2 = dpl_new(name, DPL_INT64, 1, &n, a, &src);
      if (s2 == DPL_OK) s2 = dpl_tensor_fill_(src, 1);
      if (s2 == DPL_OK && z.n < DPL_DZ_MAX) z.t[z.n++] = src;
      else { dpl_tensor_release(src); src = NULL; if (z.st == DPL_OK) z.st = s2 != DPL_OK ? s2 : DPL_EINVAL; }
    }
    if (idx && src) {
      int s2 = dpl_index_add_(res, 0, idx, src);
      if (s2 != DPL_OK && z.st == DPL_OK) z.st = s2;
    }
    st = dpl_dz_end(&z);
  }
  if (st == DPL_OK && rd != acc_dt) st = dpl_retype(name, &res, rd);
  return dpl_hand_over(st, 1, &res, &out);
}

int dpl_bincount(const dpl_tensor *a, const dpl_tensor *weights, int64_t minlength, dpl_tensor **out)
{
  const char *name = "bincount";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(dpl_check_handle(name, "self", a));
  if (weights) {
    DPL_TRY(dpl_check_handle(name, "weights", weights));
    DPL_TRY(dpl_check_same_device(name, a, weights));
  }
  int dev = dpl_is_devmem(a) || (weights && dpl_is_devmem(weights));
  if (!dev) {
    DPL_TRY(dpl_check_tensor(name, "self", a));
    if (weights) DPL_TRY(dpl_check_tensor(name, "weights", weights));
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
  if (dev) {
    if (!dpl_backend_get())
      return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda (the CUDA plugin is not loaded)", name);
    if (weights && !dpl_is_devmem(weights)) return dpl_check_tensor(name, "weights", weights);
    if (!dpl_is_devmem(a)) return dpl_check_tensor(name, "weights", weights);
    int32_t rdd = !weights ? DPL_INT64 : weights->_dtype == DPL_FLOAT32 ? DPL_FLOAT32 : DPL_FLOAT64;
    return bincount_dev(name, a, weights, minlength, rdd, out);
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
  DPL_TRY(dpl_check_handle(name, "self", a));
  if (!dpl_is_float(a->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected a floating-point tensor, got %s (as in PyTorch; convert with :float())",
                      name, dpl_dtype_name(a->_dtype));
  if (bins <= 0) return dpl_errorf(DPL_EINVAL, "%s: bins must be > 0, got %lld", name, (long long)bins);
  if (min > max) return dpl_errorf(DPL_EINVAL, "%s: max must be larger than min, got min %g, max %g", name, min, max);
  dpl_tensor *c = NULL, *res = NULL;
  int32_t kd = a->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  int dev = dpl_is_devmem(a);
  if (dev && !dpl_backend_get())
    return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda (the CUDA plugin is not loaded)", name);
  DPL_TRY(dpl_contig_as(name, a, kd, &c));
  int64_t n = c->_numel;
  int isd = kd == DPL_FLOAT64;
  const double *pd = dev ? NULL : c->_data;
  const float *pf = dev ? NULL : c->_data;
  /* the range: the given one (in the input's type), else the data's smallest and largest */
  double lo = isd ? min : (double)(float)min, hi = isd ? max : (double)(float)max;
  if (min == max && n > 0 && dev) { /* (the reductions propagate NaN, as the loop below) */
    int st = dev_min_max(c, 0, &lo, &hi, NULL, NULL);
    if (st != DPL_OK) { dpl_tensor_release(c); return st; }
    if (lo != lo || hi != hi) lo = hi = NAN; /* (the CPU's NaN, whatever the sign bit read back) */
  } else if (min == max && n > 0) {
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
  if (dev) { /* int64 counts from the backend, in a's dtype */
    if (!isd) { lo = (double)(float)lo; hi = (double)(float)hi; }
    dpl_bk_args k = {.op = DPL_BK_HISTC, .d = {lo, hi}, .l = {bins}, .in = {c}, .out = {&res}, .name = name};
    int st = dpl_bk_call(&k);
    if (st == DPL_OK) st = dpl_retype(name, &res, a->_dtype);
    dpl_tensor_release(c);
    return dpl_hand_over(st, 1, &res, &out);
  }
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
