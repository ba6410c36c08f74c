/* dpl_tensor_index.c: indexing kernels: index_select, index_add_, gather,
 * scatter_add_, cat, stack, embedding and its gradient, masked_select and
 * nonzero. Index tensors are integers (int64 or int32), counted from a base:
 * 0 for the plain entries, 1 (Lua's) for the *_base ones, which read the index
 * in place (no shifted copy; index_select/index_add_ also take -n..-1 from the
 * end), range-checked (a bad index is an error naming the op, the value and the
 * bound): before any write, except in scatter_add_, which checks each index as
 * it adds (as PyTorch's kernel).
 * Device tensors go to the backend after the shape checks that need no data. */
#include "dpl_tensor_internal.h"
#include "dpl_stream_copy.h"
#include <stdio.h>
#include <stdlib.h>

/* how a gather of rows of `row` bytes writes its fresh result res: 0 plain stores (short
 * rows, a block still in cache), 1 streaming stores, 2 the same 64 bytes at a time (AVX-512:
 * rows fetched from scattered places arrive much sooner with 64-byte loads, see
 * dpl_stream_copy.h) */
static int gather_stream_kind(size_t row, const dpl_tensor *res)
{
  if (row < 256 || !dpl_storage_cold(res)) return 0;
#ifdef DPL_HAVE_STREAM_COPY_512
  if (dpl_cpu_avx512f()) return 2;
#endif
  return 1;
}
#ifdef DPL_HAVE_STREAM_COPY_512
static void stream_row_512(void *dst, const void *src, size_t n) { dpl_stream_copy_nf_512(dst, src, n); }
#else
static void stream_row_512(void *dst, const void *src, size_t n) { dpl_stream_copy_nf(dst, src, n); }
#endif

int dpl_ix_contig(const char *name, const char *what, const dpl_tensor *idx, const dpl_tensor *self, dpl_tensor **ix)
{
  *ix = NULL;
  DPL_TRY(dpl_check_tensor(name, what, idx));
  if (dpl_is_float(idx->_dtype) || idx->_dtype == DPL_BOOL)
    return dpl_errorf(DPL_EINVAL, "%s: expected an integer %s tensor (int64 or int32), got %s", name, what,
                      dpl_dtype_name(idx->_dtype));
  int32_t dt = idx->_dtype == DPL_INT32 ? DPL_INT32 : DPL_INT64;
  DPL_TRY(dpl_contig_as(name, idx, dt, ix));
  if (self && dpl_spans_overlap(self, *ix)) { /* an index in the memory the op writes: read from a copy */
    dpl_tensor *c = NULL;
    int st = dpl_new(name, dt, (*ix)->_ndim, (*ix)->_shape, *ix, &c);
    if (st == DPL_OK) dpl_copy_raw(c, *ix);
    dpl_tensor_release(*ix);
    *ix = c;
    return st;
  }
  return DPL_OK;
}

int dpl_ix_range_error(const char *name, int64_t v, int64_t base, int neg, int32_t dim, int64_t D)
{
  if (neg && v < 0)
    return dpl_errorf(DPL_EINVAL, "%s: index %lld is out of range for a dim of size %lld (expected %lld..%lld, or -%lld..-1 "
                      "from the end)", name, (long long)v, (long long)D, (long long)base, (long long)(D - 1 + base),
                      (long long)D);
  return dpl_errorf(DPL_EINVAL, "%s: index %lld is out of range for dim %d of size %lld (expected 0..%lld, 0-based)", name,
                    (long long)(int64_t)((uint64_t)v - (uint64_t)base), (int)dim, (long long)D, (long long)D - 1);
}

/* one branch-free pass (it vectorizes): bad collects entries neither in base..base+D-1 nor, with
 * neg, in -D..-1; the loop that names the first bad one runs only on failure */
#define IX_SCAN(I)                                                                                     \
  do {                                                                                                 \
    const I *p = (const I *)ix->_data;                                                                 \
    for (int64_t k = 0; k < n; k++) {                                                                  \
      uint64_t u = (uint64_t)(int64_t)p[k] - ub, w = (uint64_t)(int64_t)p[k] + uD;                     \
      uint64_t far = u >= uD;                                                                          \
      fromend |= far;                                                                                  \
      bad |= far & (nb | (w >= uD));                                                                   \
    }                                                                                                  \
  } while (0)
int dpl_ix_check(const char *name, const dpl_tensor *ix, int64_t base, int neg, int32_t dim, int64_t D, int *any_neg)
{
  int64_t n = ix->_numel;
  uint64_t ub = (uint64_t)base, uD = (uint64_t)D, nb = neg ? 0 : 1, bad = 0, fromend = 0;
  if (ix->_dtype == DPL_INT32) IX_SCAN(int32_t);
  else IX_SCAN(int64_t);
  if (any_neg) *any_neg = fromend != 0;
  if (!bad) return DPL_OK;
  for (int64_t k = 0; k < n; k++) {
    int64_t v = dpl_ix_at(ix, k);
    if (dpl_ix_map(v, base, neg, uD) >= uD) return dpl_ix_range_error(name, v, base, neg, dim, D);
  }
  return DPL_OK;
}
#undef IX_SCAN

static int check_dim(const char *name, const dpl_tensor *t, int32_t dim)
{
  if (dim < 0 || dim >= t->_ndim)
    return dpl_errorf(DPL_EINVAL, "%s: dim %d out of range (expected 0..%d for a %d-d tensor)", name, (int)dim,
                      (int)t->_ndim - 1, (int)t->_ndim);
  return DPL_OK;
}

static void split3(const dpl_tensor *t, int32_t dim, int64_t *outer, int64_t *D, int64_t *inner)
{
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < dim; i++) *outer *= t->_shape[i];
  for (int i = dim + 1; i < t->_ndim; i++) *inner *= t->_shape[i];
  *D = t->_shape[dim];
}

/* Device tensors: the backend takes 0-based, non-negative indices; idx - base (with neg, idx + D
 * where idx < 0) is made on the device, *i0 NULL when idx already is that */
static int dev_index0(const dpl_tensor *idx, int64_t base, int neg, int64_t D, dpl_tensor **i0)
{
  *i0 = NULL;
  if (base == 0 && !neg) return DPL_OK;
  if (!neg) return dpl_binary_scalar(DPL_OP_SUB, idx, (double)base, 0, i0);
  dpl_tensor *lt = NULL, *p = NULL, *m = NULL;
  int st = dpl_binary_scalar(DPL_OP_LT, idx, 0, 0, &lt);
  if (st == DPL_OK) st = dpl_binary_scalar(DPL_OP_ADD, idx, (double)D, 0, &p);
  if (st == DPL_OK) st = dpl_binary_scalar(DPL_OP_SUB, idx, (double)base, 0, &m);
  if (st == DPL_OK) st = dpl_where(lt, p, m, i0);
  dpl_release_n(3, (dpl_tensor *[]){lt, p, m});
  return st;
}

static int check_base(const char *name, int64_t base)
{
  if (base != 0 && base != 1) return dpl_errorf(DPL_EINVAL, "%s: index base must be 0 or 1, got %lld", name, (long long)base);
  return DPL_OK;
}

/* index_select with indices from base (neg: -D..-1 count from the end), read in place: one
 * check pass over the (1-d) index, then the copy loops map each entry as they read it */
static int index_select_impl(const dpl_tensor *a, int32_t dim, const dpl_tensor *idx, int64_t base, int neg,
                             dpl_tensor **out)
{
  const char *name = "index_select";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(check_base(name, base));
  DPL_TRY(dpl_check_handle(name, "self", a));
  DPL_TRY(dpl_check_same_device(name, a, idx ? idx : a));
  DPL_TRY(check_dim(name, a, dim));
  if (idx && idx->_ndim > 1)
    return dpl_errorf(DPL_EINVAL, "%s: expected a 0-d or 1-d index, got %d dims", name, idx ? (int)idx->_ndim : 0);
  if (idx && dpl_is_devmem(a)) {
    dpl_tensor *i0 = NULL;
    DPL_TRY(dev_index0(idx, base, neg, a->_shape[dim], &i0));
    dpl_bk_args k = {.op = DPL_BK_INDEX_SELECT, .in = {a, i0 ? i0 : idx}, .i = {dim}, .out = {out}, .name = name};
    int st = dpl_bk_call(&k);
    dpl_tensor_release(i0);
    return st;
  }
  DPL_TRY(dpl_check_tensor(name, "self", a));
  dpl_tensor *ix = NULL, *ca = NULL, *res = NULL;
  DPL_TRY(dpl_ix_contig(name, "index", idx, NULL, &ix));
  int64_t n = ix->_numel;
  int fe = 0;
  int st = dpl_ix_check(name, ix, base, neg, dim, a->_shape[dim], &fe);
  if (st == DPL_OK) st = dpl_contig_as(name, a, a->_dtype, &ca);
  if (st == DPL_OK) {
    int64_t shape[DPL_MAX_DIMS];
    memcpy(shape, a->_shape, sizeof shape);
    shape[dim] = n;
    st = dpl_new(name, a->_dtype, a->_ndim, shape, a, &res);
  }
  if (st == DPL_OK) {
    int64_t outer, D, inner, es = dpl_elsize(a->_dtype);
    split3(a, dim, &outer, &D, &inner);
    size_t row = (size_t)(inner * es);
    char *dst = res->_data;
    const char *src = ca->_data;
    /* rows of 256 bytes or more into a fresh result in cold memory: streaming stores (no
     * read-for-ownership of lines about to be overwritten whole), one fence at the end
     * (1000 rows of 1000x1000: 185 -> 125 us), 64 bytes at a time with AVX-512 */
    int stream = gather_stream_kind(row, res);
    /* (v: ip[j] - base; the mapping of negative entries only in a loop of its own; rows of one
     * 4- or 8-byte element, dim the last: typed copies through row pointers, no memcpy call each) */
#define IS_LOOP(I, T, COPY)                                                                            \
  do {                                                                                                 \
    const I *ip = (const I *)ix->_data;                                                                \
    for (int64_t o = 0; o < outer; o++) {                                                              \
      T *restrict d = (T *)dst + o * n * (int64_t)(row / sizeof(T));                                   \
      const T *restrict so = (const T *)src + o * D * (int64_t)(row / sizeof(T));                      \
      if (fe)                                                                                          \
        for (int64_t j = 0; j < n; j++) {                                                              \
          int64_t v = (int64_t)dpl_ix_map(ip[j], base, 1, (uint64_t)D);                                \
          COPY;                                                                                        \
        }                                                                                              \
      else                                                                                             \
        for (int64_t j = 0; j < n; j++) {                                                              \
          int64_t v = (int64_t)ip[j] - base;                                                           \
          COPY;                                                                                        \
        }                                                                                              \
    }                                                                                                  \
  } while (0)
#define IS_ROWS(I)                                                                                     \
  if (row == 4) IS_LOOP(I, uint32_t, d[j] = so[v]);                                                    \
  else if (row == 8) IS_LOOP(I, uint64_t, d[j] = so[v]);                                               \
  else if (stream == 2) IS_LOOP(I, char, stream_row_512(d + j * (int64_t)row, so + v * (int64_t)row, row)); \
  else if (stream) IS_LOOP(I, char, dpl_stream_copy_nf(d + j * (int64_t)row, so + v * (int64_t)row, row));  \
  else IS_LOOP(I, char, memcpy(d + j * (int64_t)row, so + v * (int64_t)row, row))
    if (ix->_dtype == DPL_INT32) IS_ROWS(int32_t);
    else IS_ROWS(int64_t);
    if (stream) dpl_stream_fence();
#undef IS_ROWS
#undef IS_LOOP
  }
  dpl_release_n(2, (dpl_tensor *[]){ix, ca});
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *out = res;
  return DPL_OK;
}

int dpl_index_select(const dpl_tensor *a, int32_t dim, const dpl_tensor *idx, dpl_tensor **out)
{
  return index_select_impl(a, dim, idx, 0, 0, out);
}
int dpl_index_select_base(const dpl_tensor *a, int32_t dim, const dpl_tensor *idx, int64_t base, dpl_tensor **out)
{
  return index_select_impl(a, dim, idx, base, 1, out);
}

/* dst[k] += src[k] for n elements of dtype dt */
static void add_into(int32_t dt, char *dst, const char *src, int64_t n)
{
  switch (dt) {
  case DPL_FLOAT32: { float *d = (float *)dst; const float *s = (const float *)src; for (int64_t k = 0; k < n; k++) d[k] += s[k]; break; }
  case DPL_FLOAT64: { double *d = (double *)dst; const double *s = (const double *)src; for (int64_t k = 0; k < n; k++) d[k] += s[k]; break; }
  case DPL_INT64: { uint64_t *d = (uint64_t *)dst; const uint64_t *s = (const uint64_t *)src; for (int64_t k = 0; k < n; k++) d[k] += s[k]; break; }
  case DPL_INT32: { uint32_t *d = (uint32_t *)dst; const uint32_t *s = (const uint32_t *)src; for (int64_t k = 0; k < n; k++) d[k] += s[k]; break; }
  default: {
    int64_t es = dpl_elsize(dt);
    for (int64_t k = 0; k < n; k++) {
      if (dpl_is_int(dt)) dpl_store_i64(dst + k * es, dt, dpl_load_i64(dst + k * es, dt) + dpl_load_i64(src + k * es, dt));
      else dpl_store_f64(dst + k * es, dt, dpl_load_f64(dst + k * es, dt) + dpl_load_f64(src + k * es, dt));
    }
  }
  }
}

/* runs body on a contiguous stand-in for a, copying back when a is not contiguous */
static int with_contig(const char *name, dpl_tensor *a, dpl_tensor **work)
{
  if (dpl_is_contig(a)) { *work = a; return DPL_OK; }
  return dpl_contig_as(name, a, a->_dtype, work);
}
static void end_contig(dpl_tensor *a, dpl_tensor *work)
{
  if (work != a) { dpl_copy_raw(a, work); dpl_tensor_release(work); }
}

/* A source sharing memory with self (x:index_add_(1, i, x)): a copy of it, since the loop
 * (or the GPU's threads) would read rows it already added into. *tmp is released by the caller. */
static int src_apart(const char *name, const dpl_tensor *a, const dpl_tensor **src, dpl_tensor **tmp)
{
  *tmp = NULL;
  if (!dpl_spans_overlap(a, *src)) return DPL_OK;
  DPL_TRY(dpl_new(name, (*src)->_dtype, (*src)->_ndim, (*src)->_shape, *src, tmp));
  int st = dpl_copy_any(name, *tmp, *src);
  if (st != DPL_OK) { dpl_tensor_release(*tmp); *tmp = NULL; return st; }
  *src = *tmp;
  return DPL_OK;
}

static int index_add_impl(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src, int64_t base,
                          int neg);

static int index_add_entry(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src, int64_t base,
                           int neg)
{
  DPL_TRY(check_base("index_add_", base));
  DPL_TRY(dpl_check_handle("index_add_", "self", a));
  DPL_TRY(dpl_check_handle("index_add_", "source", src));
  dpl_tensor *tmp;
  DPL_TRY(src_apart("index_add_", a, &src, &tmp));
  int st = index_add_impl(a, dim, idx, src, base, neg);
  dpl_tensor_release(tmp);
  return st;
}
int dpl_index_add_(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src)
{
  return index_add_entry(a, dim, idx, src, 0, 0);
}
int dpl_index_add_base(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src, int64_t base)
{
  return index_add_entry(a, dim, idx, src, base, 1);
}

static int index_add_impl(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src, int64_t base,
                          int neg)
{
  const char *name = "index_add_";
  DPL_TRY(dpl_check_same_device(name, a, src));
  DPL_TRY(check_dim(name, a, dim));
  if (idx && idx->_ndim > 1) return dpl_errorf(DPL_EINVAL, "%s: expected a 1-d index, got %d dims", name, (int)idx->_ndim);
  if (idx && dpl_is_devmem(a)) {
    DPL_TRY(dpl_check_same_device(name, a, idx));
    int64_t n = idx->_numel;
    int ok = src->_ndim == a->_ndim;
    for (int i = 0; ok && i < a->_ndim; i++) ok = src->_shape[i] == (i == dim ? n : a->_shape[i]);
    if (!ok) {
      char b1[160], b2[160];
      return dpl_errorf(DPL_EINVAL, "%s: source shape %s does not match self %s with dim %d of size %lld (the index length)",
                        name, dpl_shape_str(src->_ndim, src->_shape, b1, sizeof b1),
                        dpl_shape_str(a->_ndim, a->_shape, b2, sizeof b2), (int)dim, (long long)n);
    }
    dpl_tensor *i0 = NULL;
    DPL_TRY(dev_index0(idx, base, neg, a->_shape[dim], &i0));
    dpl_bk_args k = {.op = DPL_BK_INDEX_ADD, .inout = a, .in = {i0 ? i0 : idx, src}, .i = {dim}, .name = name};
    int st = dpl_bk_call(&k);
    dpl_tensor_release(i0);
    return st;
  }
  DPL_TRY(dpl_check_tensor(name, "self", a));
  DPL_TRY(dpl_check_tensor(name, "source", src));
  dpl_tensor *ix = NULL, *cs = NULL, *work = NULL;
  DPL_TRY(dpl_ix_contig(name, "index", idx, a, &ix));
  int64_t n = ix->_numel;
  int ok = src->_ndim == a->_ndim;
  for (int i = 0; ok && i < a->_ndim; i++) ok = src->_shape[i] == (i == dim ? n : a->_shape[i]);
  int st = DPL_OK, fe = 0;
  if (!ok) {
    char b1[160], b2[160];
    st = dpl_errorf(DPL_EINVAL, "%s: source shape %s does not match self %s with dim %d of size %lld (the index length)",
                    name, dpl_shape_str(src->_ndim, src->_shape, b1, sizeof b1),
                    dpl_shape_str(a->_ndim, a->_shape, b2, sizeof b2), (int)dim, (long long)n);
  }
  if (st == DPL_OK) st = dpl_ix_check(name, ix, base, neg, dim, a->_shape[dim], &fe);
  if (st == DPL_OK) st = dpl_contig_as(name, src, a->_dtype, &cs);
  if (st == DPL_OK) st = with_contig(name, a, &work);
  if (st == DPL_OK) {
    int64_t outer, D, inner, es = dpl_elsize(a->_dtype);
    split3(a, dim, &outer, &D, &inner);
    char *w = work->_data;
    const char *sp = cs->_data;
    /* (each entry mapped as it is read: v - base, or v + D counted from the end) */
#define IA_ONE(I, T, U)                                                                               \
  do {                                                                                                \
    const I *ip = (const I *)ix->_data;                                                               \
    for (int64_t o = 0; o < outer; o++)                                                               \
      for (int64_t j = 0; j < n; j++) {                                                               \
        T *d = (T *)w + o * D + (int64_t)dpl_ix_map(ip[j], base, fe, (uint64_t)D);                   \
        *d = (T)((U)*d + (U)((const T *)sp)[o * n + j]);                                              \
      }                                                                                               \
  } while (0)
#define IA_TYPES(I)                                                                                   \
  if (inner == 1 && a->_dtype == DPL_FLOAT32) IA_ONE(I, float, float);                                \
  else if (inner == 1 && a->_dtype == DPL_FLOAT64) IA_ONE(I, double, double);                         \
  else if (inner == 1 && a->_dtype == DPL_INT64) IA_ONE(I, int64_t, uint64_t);                        \
  else if (inner == 1 && a->_dtype == DPL_INT32) IA_ONE(I, int32_t, uint32_t);                        \
  else {                                                                                              \
    const I *ip = (const I *)ix->_data;                                                               \
    for (int64_t o = 0; o < outer; o++)                                                               \
      for (int64_t j = 0; j < n; j++) {                                                               \
        int64_t v = (int64_t)dpl_ix_map(ip[j], base, fe, (uint64_t)D);                                \
        add_into(a->_dtype, w + (o * D + v) * inner * es, sp + (o * n + j) * inner * es, inner);      \
      }                                                                                               \
  }
    if (ix->_dtype == DPL_INT32) IA_TYPES(int32_t) else IA_TYPES(int64_t)
#undef IA_TYPES
#undef IA_ONE
    end_contig(a, work);
  }
  dpl_tensor_release(ix);
  dpl_tensor_release(cs);
  return st;
}

/* shared by gather and scatter_add: idx and (for scatter) src walk the same positions */
static int gather_checks(const char *name, const dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src)
{
  DPL_TRY(dpl_check_handle(name, "self", a));
  DPL_TRY(dpl_check_handle(name, "index", idx));
  DPL_TRY(dpl_check_same_device(name, a, idx));
  DPL_TRY(check_dim(name, a, dim));
  char b1[160], b2[160];
  if (idx->_ndim != a->_ndim)
    return dpl_errorf(DPL_EINVAL, "%s: index must have as many dims as self (%d), got %d", name, (int)a->_ndim, (int)idx->_ndim);
  for (int i = 0; i < a->_ndim; i++)
    if (i != dim && idx->_shape[i] > a->_shape[i])
      return dpl_errorf(DPL_EINVAL, "%s: index shape %s is larger than self %s at dim %d", name,
                        dpl_shape_str(idx->_ndim, idx->_shape, b1, sizeof b1), dpl_shape_str(a->_ndim, a->_shape, b2, sizeof b2), i);
  if (src) {
    DPL_TRY(dpl_check_same_device(name, a, src));
    if (src->_ndim != idx->_ndim)
      return dpl_errorf(DPL_EINVAL, "%s: src must have as many dims as index (%d), got %d", name, (int)idx->_ndim, (int)src->_ndim);
    for (int i = 0; i < idx->_ndim; i++)
      if (idx->_shape[i] > src->_shape[i])
        return dpl_errorf(DPL_EINVAL, "%s: index shape %s is larger than src %s at dim %d", name,
                          dpl_shape_str(idx->_ndim, idx->_shape, b1, sizeof b1), dpl_shape_str(src->_ndim, src->_shape, b2, sizeof b2), i);
  }
  return DPL_OK;
}

/* The element loops of gather (res[k] = a[.., ix[k] - base, ..]) and scatter_add (a[.., ix[k] -
 * base, ..] += cs[..]): the outer positions walk idx's leading dims; along its last dim one typed
 * loop runs with fixed strides (a's offset: ba + v * stride[dim] + j * stride[last] unless dim is
 * the last), idx read as it is (int64 or int32, contiguous). Each index is checked as it is used
 * (one compare: (uint64)(ix - base) < D); the loop stops at the first bad one and returns its
 * position (-1: none), so scatter_add's additions before it stay, as in PyTorch's kernel.
 * Duplicate indices accumulate in order; a may have any strides. */
/* an index read from base as an offset: (unsigned) so that one compare with the dim's size checks both ends */
static inline uint64_t ix_off(int64_t x, int64_t base) { return (uint64_t)x - (uint64_t)base; }
#define GS_LOOP(T, U, I)                                                                               \
  do {                                                                                                 \
    T *A = (T *)a->_data;                                                                              \
    const I *ir = (const I *)ix->_data + o * inner;                                                    \
    if (scatter && sd == 1 && sj == 0 && ssj == 1) { /* along contiguous rows: the common case */      \
      T *Ar = A + ba;                                                                                  \
      const T *Sr = (const T *)cs->_data + bs;                                                         \
      for (j = 0; j + 2 <= inner; j += 2) {                                                            \
        uint64_t v0 = ix_off(ir[j], base), v1 = ix_off(ir[j + 1], base);                               \
        if ((v0 >= D) | (v1 >= D)) break;                                                              \
        T s0 = Sr[j], s1 = Sr[j + 1];                                                                  \
        Ar[v0] = (T)((U)Ar[v0] + (U)s0);                                                               \
        Ar[v1] = (T)((U)Ar[v1] + (U)s1);                                                               \
      }                                                                                                \
      for (; j < inner; j++) {                                                                         \
        uint64_t v = ix_off(ir[j], base);                                                              \
        if (v >= D) goto bad;                                                                          \
        Ar[v] = (T)((U)Ar[v] + (U)Sr[j]);                                                              \
      }                                                                                                \
    } else if (scatter) {                                                                              \
      const T *S = (const T *)cs->_data;                                                               \
      for (j = 0; j < inner; j++) {                                                                    \
        uint64_t v = ix_off(ir[j], base);                                                              \
        if (v >= D) goto bad;                                                                          \
        T *d = A + ba + (int64_t)v * sd + j * sj;                                                      \
        *d = (T)((U)*d + (U)S[bs + j * ssj]);                                                          \
      }                                                                                                \
    } else {                                                                                           \
      T *R = (T *)res->_data + o * inner;                                                              \
      const T *Ar = A + ba;                                                                            \
      for (j = 0; j < inner; j++) {                                                                    \
        uint64_t v = ix_off(ir[j], base);                                                              \
        if (v >= D) goto bad;                                                                          \
        R[j] = Ar[(int64_t)v * sd + j * sj];                                                           \
      }                                                                                                \
    }                                                                                                  \
  } while (0)
#define GS_TYPES(I)                                                                                    \
  switch (a->_dtype) {                                                                                 \
  case DPL_FLOAT32: GS_LOOP(float, float, I); break;                                                   \
  case DPL_FLOAT64: GS_LOOP(double, double, I); break;                                                 \
  case DPL_INT64: GS_LOOP(int64_t, uint64_t, I); break;                                                \
  case DPL_INT32: GS_LOOP(int32_t, uint32_t, I); break;                                                \
  default:                                                                                             \
    for (j = 0; j < inner; j++) {                                                                      \
      uint64_t v = ix_off(((const I *)ix->_data)[o * inner + j], base);                                \
      if (v >= D) goto bad;                                                                            \
      char *pa = (char *)a->_data + (ba + (int64_t)v * sd + j * sj) * es;                              \
      if (scatter) add_into(a->_dtype, pa, (const char *)cs->_data + (bs + j * ssj) * es, 1);          \
      else memcpy((char *)res->_data + (o * inner + j) * es, pa, (size_t)es);                          \
    }                                                                                                  \
    break;                                                                                             \
  }
enum { GS_PF = 2 };
static int64_t gs_loop(int scatter, dpl_tensor *a, int32_t dim, const dpl_tensor *ix, int64_t base,
                       const dpl_tensor *cs, dpl_tensor *res)
{
  int nd = a->_ndim, last = nd - 1;
  int64_t es = dpl_elsize(a->_dtype);
  int64_t inner = ix->_shape[last], outer = ix->_numel / inner;
  int64_t sd = a->_stride[dim], sj = dim == last ? 0 : a->_stride[last], ssj = scatter ? cs->_stride[last] : 0;
  uint64_t D = (uint64_t)a->_shape[dim];
  int64_t pos[DPL_MAX_DIMS] = {0}, ppf[DPL_MAX_DIMS] = {0};
  int64_t o = 0, j = 0;
  /* scatter along contiguous rows: self's row GS_PF rows ahead is prefetched for writing (its
   * elements are read and written in random order, which the hardware prefetchers do not
   * follow; a freshly allocated self is often out of cache) */
  int pf = scatter && sd == 1 && sj == 0 && a->_shape[dim] * es >= 1024;
  for (int k = 0; pf && k < GS_PF && k < outer; k++)
    for (int d = last - 1; d >= 0; d--) { if (++ppf[d] < ix->_shape[d]) break; ppf[d] = 0; }
  for (; o < outer; o++) {
    int64_t ba = 0, bs = 0;
    for (int d = 0; d < last; d++) {
      if (d != dim) ba += pos[d] * a->_stride[d];
      if (scatter) bs += pos[d] * cs->_stride[d];
    }
    if (pf && o + GS_PF < outer) {
      int64_t bp = 0;
      for (int d = 0; d < last; d++) if (d != dim) bp += ppf[d] * a->_stride[d];
      const char *row = (const char *)a->_data + bp * es;
      for (int64_t q = 0; q < a->_shape[dim] * es; q += 64) __builtin_prefetch(row + q, 1, 3);
      for (int d = last - 1; d >= 0; d--) { if (++ppf[d] < ix->_shape[d]) break; ppf[d] = 0; }
    }
    if (ix->_dtype == DPL_INT32) GS_TYPES(int32_t) else GS_TYPES(int64_t)
    for (int d = last - 1; d >= 0; d--) { if (++pos[d] < ix->_shape[d]) break; pos[d] = 0; }
  }
  return -1;
bad:
  /* the bad index: row o's first one from j on */
  for (;; j++) {
    int64_t k = o * inner + j;
    if (ix_off(ix->_dtype == DPL_INT32 ? ((const int32_t *)ix->_data)[k] : ((const int64_t *)ix->_data)[k], base) >= D)
      return k;
  }
}
#undef GS_TYPES
#undef GS_LOOP

/* gather (out) / scatter_add (src) with indices counted from base; device tensors go to the
 * backend with 0-based indices (idx - base made there when base is not 0) */
static int gather_scatter(const char *name, int scatter, dpl_tensor *a, int32_t dim, const dpl_tensor *idx,
                          const dpl_tensor *src, int64_t base, dpl_tensor **out)
{
  DPL_TRY(gather_checks(name, a, dim, idx, src));
  if (base != 0 && base != 1) return dpl_errorf(DPL_EINVAL, "%s: index base must be 0 or 1, got %lld", name, (long long)base);
  if (idx->_dtype != DPL_INT64 && idx->_dtype != DPL_INT32)
    return dpl_errorf(DPL_EINVAL, "%s: expected an integer index tensor (int64 or int32), got %s", name,
                      dpl_dtype_name(idx->_dtype));
  if (dpl_is_devmem(a)) {
    dpl_tensor *i0 = NULL;
    if (base != 0) DPL_TRY(dpl_binary_scalar(DPL_OP_SUB, idx, (double)base, 0, &i0));
    dpl_bk_args k = {.op = scatter ? DPL_BK_SCATTER_ADD : DPL_BK_GATHER, .in = {i0 ? i0 : idx, src}, .i = {dim},
                     .name = name};
    if (scatter) k.inout = a;
    else { k.inout = a; k.out[0] = out; }
    int st = dpl_bk_call(&k);
    dpl_tensor_release(i0);
    return st;
  }
  DPL_TRY(dpl_check_tensor(name, "self", a)); /* host memory from here on */
  if (src) DPL_TRY(dpl_check_tensor(name, "src", src));
  DPL_TRY(dpl_check_tensor(name, "index", idx));
  dpl_tensor *ix = NULL, *cs = NULL, *res = NULL;
  int32_t idt = idx->_dtype == DPL_INT32 ? DPL_INT32 : DPL_INT64; /* (as it is when contiguous: no copy) */
  DPL_TRY(dpl_contig_as(name, idx, idt, &ix));
  int st = DPL_OK;
  if (scatter) st = dpl_contig_as(name, src, a->_dtype, &cs); /* contiguous: walk with idx's positions */
  if (st == DPL_OK && !scatter) st = dpl_new(name, a->_dtype, idx->_ndim, idx->_shape, a, &res);
  if (st == DPL_OK && ix->_numel > 0) {
    int64_t k = gs_loop(scatter, a, dim, ix, base, cs, res);
    if (k >= 0) {
      int64_t v = (int64_t)ix_off(idt == DPL_INT32 ? ((const int32_t *)ix->_data)[k] : ((const int64_t *)ix->_data)[k], base);
      int64_t bound = a->_shape[dim];
      st = dpl_errorf(DPL_EINVAL, "%s: index %lld is out of range for dim %d of size %lld (expected 0..%lld, 0-based)",
                      name, (long long)v, (int)dim, (long long)bound, (long long)bound - 1);
    }
  }
  dpl_tensor_release(ix);
  dpl_tensor_release(cs);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  if (out) *out = res;
  return DPL_OK;
}

int dpl_gather_base(const dpl_tensor *a, int32_t dim, const dpl_tensor *idx, int64_t base, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "gather: out is NULL");
  *out = NULL;
  return gather_scatter("gather", 0, (dpl_tensor *)a, dim, idx, NULL, base, out);
}
int dpl_gather(const dpl_tensor *a, int32_t dim, const dpl_tensor *idx, dpl_tensor **out)
{
  return dpl_gather_base(a, dim, idx, 0, out);
}

int dpl_scatter_add_base(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src, int64_t base)
{
  if (!src) return dpl_errorf(DPL_EINVAL, "scatter_add_: src is NULL (expected a tensor)");
  DPL_TRY(dpl_check_handle("scatter_add_", "self", a));
  DPL_TRY(dpl_check_handle("scatter_add_", "src", src));
  DPL_TRY(dpl_check_handle("scatter_add_", "index", idx));
  DPL_TRY(dpl_check_writable("scatter_add_", "", a)); /* (an expanded self: several elements, one location) */
  /* src and the index are read in place as self is written: copies of those sharing its memory */
  dpl_tensor *tmp, *itmp;
  DPL_TRY(src_apart("scatter_add_", a, &src, &tmp));
  int st = src_apart("scatter_add_", a, &idx, &itmp);
  if (st == DPL_OK) st = gather_scatter("scatter_add_", 1, a, dim, idx, src, base, NULL);
  dpl_tensor_release(tmp);
  dpl_tensor_release(itmp);
  return st;
}
int dpl_scatter_add_(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src)
{
  return dpl_scatter_add_base(a, dim, idx, src, 0);
}

int dpl_cat(int32_t n, dpl_tensor *const *ts, int32_t dim, dpl_tensor **out)
{
  const char *name = "cat";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  if (n < 1 || !ts) return dpl_errorf(DPL_EINVAL, "%s: expected a non-empty list of tensors, got %d", name, (int)n);
  for (int i = 0; i < n; i++) {
    char what[32];
    snprintf(what, sizeof what, "tensor %d", i);
    DPL_TRY(dpl_check_handle(name, what, ts[i]));
    DPL_TRY(dpl_check_same_device(name, ts[0], ts[i]));
  }
  /* PyTorch's legacy rule: an empty 1-d tensor (shape [0]) is skipped whatever the others' shape
     (`acc = torch.tensor([]); acc = torch.cat([acc, x])`); it still takes part in the dtype.
     f: the first tensor that is not one, the shape of the result (ts[0] when all are) */
  int fi = 0; /* (its index, for messages) */
  for (int i = 0; i < n; i++)
    if (!(ts[i]->_ndim == 1 && ts[i]->_shape[0] == 0)) { fi = i; break; }
  const dpl_tensor *f = ts[fi];
  if (f->_ndim == 0) return dpl_errorf(DPL_EINVAL, "%s: zero-dimensional tensors cannot be concatenated", name);
  DPL_TRY(check_dim(name, f, dim));
  int32_t rd = f->_dtype;
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    const dpl_tensor *t = ts[i];
    char b1[160], b2[160];
    if (t != f && t->_ndim == 1 && t->_shape[0] == 0) { rd = dpl_promote(rd, t->_dtype); continue; }
    if (t->_ndim == 0)
      return dpl_errorf(DPL_EINVAL, "%s: zero-dimensional tensors cannot be concatenated (tensor %d)", name, i);
    if (t->_ndim != f->_ndim)
      return dpl_errorf(DPL_EINVAL, "%s: tensor %d has %d dims, tensor %d has %d", name, i, (int)t->_ndim, fi,
                        (int)f->_ndim);
    for (int d = 0; d < f->_ndim; d++)
      if (d != dim && t->_shape[d] != f->_shape[d])
        return dpl_errorf(DPL_EINVAL, "%s: sizes must match except in dim %d: tensor %d is %s, tensor %d is %s", name,
                          (int)dim, fi, dpl_shape_str(f->_ndim, f->_shape, b1, sizeof b1), i,
                          dpl_shape_str(t->_ndim, t->_shape, b2, sizeof b2));
    total += t->_shape[dim];
    rd = dpl_promote(rd, t->_dtype);
  }
  int64_t shape[DPL_MAX_DIMS];
  memcpy(shape, f->_shape, sizeof shape);
  shape[dim] = total;
  dpl_tensor *res = NULL;
  DPL_TRY(dpl_new(name, rd, f->_ndim, shape, f, &res));
  int64_t at = 0;
  for (int i = 0; i < n; i++) {
    int64_t sh[DPL_MAX_DIMS];
    memcpy(sh, shape, sizeof sh);
    if (ts[i]->_ndim != f->_ndim) continue; /* a skipped empty 1-d tensor */
    sh[dim] = ts[i]->_shape[dim];
    if (sh[dim] == 0) continue;
    dpl_tensor *v = NULL;
    int st = dpl_make_view(res, res->_ndim, sh, res->_stride, at * res->_stride[dim], &v);
    if (st != DPL_OK) { dpl_tensor_release(res); return st; }
    st = dpl_copy_any(name, v, ts[i]);
    dpl_tensor_release(v);
    if (st != DPL_OK) { dpl_tensor_release(res); return st; }
    at += sh[dim];
  }
  *out = res;
  return DPL_OK;
}

int dpl_stack(int32_t n, dpl_tensor *const *ts, int32_t dim, dpl_tensor **out)
{
  const char *name = "stack";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  if (n < 1 || !ts) return dpl_errorf(DPL_EINVAL, "%s: expected a non-empty list of tensors, got %d", name, (int)n);
  if (n > 1000000) return dpl_errorf(DPL_EINVAL, "%s: too many tensors (%d)", name, (int)n);
  for (int i = 0; i < n; i++) {
    char what[32];
    snprintf(what, sizeof what, "tensor %d", i);
    DPL_TRY(dpl_check_handle(name, what, ts[i])); /* any device: dpl_cat checks they share one */
    if (!dpl_same_shape(ts[i], ts[0])) {
      char b1[160], b2[160];
      return dpl_errorf(DPL_EINVAL, "%s: expected tensors of equal shape, tensor 0 is %s, tensor %d is %s", name,
                        dpl_shape_str(ts[0]->_ndim, ts[0]->_shape, b1, sizeof b1), i,
                        dpl_shape_str(ts[i]->_ndim, ts[i]->_shape, b2, sizeof b2));
    }
  }
  if (dim < 0 || dim > ts[0]->_ndim)
    return dpl_errorf(DPL_EINVAL, "%s: dim %d out of range (expected 0..%d)", name, (int)dim, (int)ts[0]->_ndim);
  if (ts[0]->_ndim >= DPL_MAX_DIMS) return dpl_errorf(DPL_EINVAL, "%s: the result would have more than %d dims", name, DPL_MAX_DIMS);
  dpl_tensor **us = calloc((size_t)n, sizeof *us);
  if (!us) return dpl_errorf(DPL_ENOMEM, "%s: out of memory", name);
  int st = DPL_OK;
  for (int i = 0; i < n && st == DPL_OK; i++) st = dpl_tensor_unsqueeze(ts[i], dim, &us[i]);
  if (st == DPL_OK) st = dpl_cat(n, us, dim, out);
  for (int i = 0; i < n; i++) dpl_tensor_release(us[i]);
  free(us);
  return st;
}

/* embedding and its backward with ids from base (0 or 1), read in place (int64 or int32, any
 * strides: a contiguous copy only when not contiguous); checked in one pass before any row */
static int embedding_impl(const dpl_tensor *weight, const dpl_tensor *idx, int64_t base, dpl_tensor **out)
{
  const char *name = "embedding";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(check_base(name, base));
  if (dpl_is_devmem(weight) || dpl_is_devmem(idx)) {
    dpl_tensor *i0 = NULL;
    if (base != 0 && weight && idx && dpl_is_devmem(weight) && dpl_is_devmem(idx)) /* (else the backend's own error) */
      DPL_TRY(dev_index0(idx, base, 0, 0, &i0));
    dpl_bk_args k = {.op = DPL_BK_EMBEDDING, .in = {weight, i0 ? i0 : idx}, .out = {out}, .name = name};
    int st = dpl_bk_call(&k);
    dpl_tensor_release(i0);
    return st;
  }
  DPL_TRY(dpl_check_tensor(name, "weight", weight));
  DPL_TRY(dpl_check_tensor(name, "input", idx));
  DPL_TRY(dpl_check_same_device(name, weight, idx));
  if (weight->_ndim != 2) return dpl_errorf(DPL_EINVAL, "%s: expected a 2-d weight [num, dim], got %d dims", name, (int)weight->_ndim);
  if (idx->_ndim >= DPL_MAX_DIMS) return dpl_errorf(DPL_EINVAL, "%s: input has too many dims", name);
  dpl_tensor *ix = NULL, *cw = NULL, *res = NULL;
  DPL_TRY(dpl_ix_contig(name, "input", idx, NULL, &ix));
  int st = dpl_ix_check(name, ix, base, 0, 0, weight->_shape[0], NULL);
  if (st == DPL_OK) st = dpl_contig_as(name, weight, weight->_dtype, &cw);
  if (st == DPL_OK) {
    int64_t shape[DPL_MAX_DIMS];
    memcpy(shape, idx->_shape, sizeof(int64_t) * (size_t)idx->_ndim);
    shape[idx->_ndim] = weight->_shape[1];
    st = dpl_new(name, weight->_dtype, idx->_ndim + 1, shape, weight, &res);
  }
  if (st == DPL_OK) {
    int64_t row = weight->_shape[1] * dpl_elsize(weight->_dtype);
    char *r = res->_data;
    const char *w = cw->_data;
    int stream = gather_stream_kind((size_t)row, res);
#define EMB_ROWS(I, COPY)                                                                              \
  for (int64_t i = 0; i < ix->_numel; i++) COPY(r + i * row, w + (((const I *)ix->_data)[i] - base) * row, (size_t)row)
#define EMB_BY(I)                                                                                      \
  if (stream == 2) EMB_ROWS(I, stream_row_512);                                                        \
  else if (stream) EMB_ROWS(I, dpl_stream_copy_nf);                                                    \
  else EMB_ROWS(I, memcpy)
    if (ix->_dtype == DPL_INT32) EMB_BY(int32_t);
    else EMB_BY(int64_t);
    if (stream) dpl_stream_fence();
#undef EMB_BY
#undef EMB_ROWS
  }
  dpl_release_n(2, (dpl_tensor *[]){ix, cw});
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *out = res;
  return DPL_OK;
}
int dpl_embedding(const dpl_tensor *weight, const dpl_tensor *idx, dpl_tensor **out)
{
  return embedding_impl(weight, idx, 0, out);
}
int dpl_embedding_base(const dpl_tensor *weight, const dpl_tensor *idx, int64_t base, dpl_tensor **out)
{
  return embedding_impl(weight, idx, base, out);
}

static int embedding_backward_impl(const dpl_tensor *grad, const dpl_tensor *idx, int64_t num_weights, int64_t base,
                                   dpl_tensor **out)
{
  const char *name = "embedding_backward";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(check_base(name, base));
  if (dpl_is_devmem(grad) || dpl_is_devmem(idx)) {
    dpl_tensor *i0 = NULL;
    if (base != 0 && grad && idx && dpl_is_devmem(grad) && dpl_is_devmem(idx)) DPL_TRY(dev_index0(idx, base, 0, 0, &i0));
    dpl_bk_args k = {.op = DPL_BK_EMBEDDING_BWD, .in = {grad, i0 ? i0 : idx}, .l = {num_weights}, .out = {out}, .name = name};
    int st = dpl_bk_call(&k);
    dpl_tensor_release(i0);
    return st;
  }
  DPL_TRY(dpl_check_tensor(name, "grad", grad));
  DPL_TRY(dpl_check_tensor(name, "input", idx));
  DPL_TRY(dpl_check_same_device(name, grad, idx));
  if (num_weights < 0) return dpl_errorf(DPL_EINVAL, "%s: num_weights must be >= 0, got %lld", name, (long long)num_weights);
  if (grad->_ndim != idx->_ndim + 1 || grad->_numel != idx->_numel * (grad->_ndim ? grad->_shape[grad->_ndim - 1] : 1)) {
    char b1[160], b2[160];
    return dpl_errorf(DPL_EINVAL, "%s: grad shape %s does not match input shape %s plus the embedding dim", name,
                      dpl_shape_str(grad->_ndim, grad->_shape, b1, sizeof b1), dpl_shape_str(idx->_ndim, idx->_shape, b2, sizeof b2));
  }
  int64_t D = grad->_shape[grad->_ndim - 1];
  dpl_tensor *ix = NULL, *cg = NULL, *res = NULL;
  DPL_TRY(dpl_ix_contig(name, "input", idx, NULL, &ix));
  int st = dpl_ix_check(name, ix, base, 0, 0, num_weights, NULL);
  if (st == DPL_OK) st = dpl_contig_as(name, grad, grad->_dtype, &cg);
  int64_t shape[2] = {num_weights, D};
  if (st == DPL_OK) st = dpl_new(name, grad->_dtype, 2, shape, grad, &res);
  if (st == DPL_OK) {
    int64_t es = dpl_elsize(grad->_dtype);
    memset(res->_data, 0, (size_t)(res->_numel * es));
    for (int64_t i = 0; i < ix->_numel; i++) {
      int64_t v = dpl_ix_at(ix, i) - base;
      add_into(grad->_dtype, (char *)res->_data + v * D * es, (const char *)cg->_data + i * D * es, D);
    }
  }
  dpl_release_n(2, (dpl_tensor *[]){ix, cg});
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *out = res;
  return DPL_OK;
}
int dpl_embedding_backward(const dpl_tensor *grad, const dpl_tensor *idx, int64_t num_weights, dpl_tensor **out)
{
  return embedding_backward_impl(grad, idx, num_weights, 0, out);
}
int dpl_embedding_backward_base(const dpl_tensor *grad, const dpl_tensor *idx, int64_t num_weights, int64_t base,
                                dpl_tensor **out)
{
  return embedding_backward_impl(grad, idx, num_weights, base, out);
}

/* Device tensors: the backend's compaction (DPL_BK_NONZERO): per-chunk counts and their prefix
 * sums, one read back of the total (the result's size has to reach the host), then the positions
 * in row-major order: flat [total] (flat = 1) or coordinates [total, ndim], 0-based int64. */
int dpl_nonzero_dev(const char *name, const dpl_tensor *a, int flat, dpl_tensor **out)
{
  dpl_tensor *ca = NULL, *off = NULL, *last = NULL, *tot = NULL, *res = NULL;
  int st = dpl_contig_as(name, a, a->_dtype, &ca);
  if (st == DPL_OK) {
    dpl_bk_args k = {.op = DPL_BK_NONZERO, .sub = 0, .in = {ca}, .out = {&off}, .name = name};
    st = dpl_bk_call(&k);
  }
  if (st == DPL_OK) {
    int64_t one = 1, unit = 1;
    st = dpl_make_view(off, 1, &one, &unit, off->_offset + off->_numel - 1, &last);
  }
  if (st == DPL_OK) st = dpl_tensor_to(last, DPL_INT64, DPL_DEVICE_CPU, 0, &tot);
  if (st == DPL_OK) {
    int64_t shape[2] = {*(const int64_t *)tot->_data, a->_ndim};
    st = dpl_new(name, DPL_INT64, flat ? 1 : 2, shape, a, &res);
  }
  if (st == DPL_OK) {
    dpl_bk_args k = {.op = DPL_BK_NONZERO, .sub = 1, .i = {flat}, .in = {ca, off}, .inout = res, .name = name};
    st = dpl_bk_call(&k);
  }
  dpl_release_n(4, (dpl_tensor *[]){ca, off, last, tot});
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *out = res;
  return DPL_OK;
}

int dpl_masked_select(const dpl_tensor *a, const dpl_tensor *mask, dpl_tensor **out)
{
  const char *name = "masked_select";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(dpl_check_handle(name, "self", a));
  DPL_TRY(dpl_check_handle(name, "mask", mask));
  DPL_TRY(dpl_check_same_device(name, a, mask));
  if (dpl_is_devmem(a)) { /* the mask's positions by the compaction, then an index_select */
    if (mask->_dtype != DPL_BOOL && mask->_dtype != DPL_UINT8)
      return dpl_errorf(DPL_EINVAL, "%s: expected a bool mask, got %s", name, dpl_dtype_name(mask->_dtype));
    int64_t shape[DPL_MAX_DIMS];
    int32_t nd;
    DPL_TRY(dpl_broadcast_shapes(name, a->_ndim, a->_shape, mask->_ndim, mask->_shape, &nd, shape));
    dpl_tensor *ea = NULL, *em = NULL, *ca = NULL, *cm = NULL, *fa = NULL, *pos = NULL;
    int64_t n = 1;
    for (int32_t i = 0; i < nd; i++) n *= shape[i];
    int st = dpl_tensor_expand(a, nd, shape, &ea);
    if (st == DPL_OK) st = dpl_tensor_expand(mask, nd, shape, &em);
    if (st == DPL_OK) st = dpl_contig_as(name, em, DPL_UINT8, &cm);
    if (st == DPL_OK) st = dpl_nonzero_dev(name, cm, 1, &pos);
    if (st == DPL_OK) st = dpl_contig_as(name, ea, a->_dtype, &ca);
    if (st == DPL_OK) st = dpl_tensor_view(ca, 1, &n, &fa);
    if (st == DPL_OK) st = dpl_index_select(fa, 0, pos, out);
    dpl_release_n(6, (dpl_tensor *[]){ea, em, ca, cm, fa, pos});
    return st;
  }
  DPL_TRY(dpl_check_tensor(name, "self", a));
  DPL_TRY(dpl_check_tensor(name, "mask", mask));
  DPL_TRY(dpl_check_same_device(name, a, mask));
  if (mask->_dtype != DPL_BOOL && mask->_dtype != DPL_UINT8)
    return dpl_errorf(DPL_EINVAL, "%s: expected a bool mask, got %s", name, dpl_dtype_name(mask->_dtype));
  int64_t shape[DPL_MAX_DIMS];
  int32_t nd;
  DPL_TRY(dpl_broadcast_shapes(name, a->_ndim, a->_shape, mask->_ndim, mask->_shape, &nd, shape));
  dpl_tensor *ea = NULL, *em = NULL, *ca = NULL, *cm = NULL, *res = NULL;
  int st = dpl_tensor_expand(a, nd, shape, &ea);
  if (st == DPL_OK) st = dpl_tensor_expand(mask, nd, shape, &em);
  if (st == DPL_OK) st = dpl_contig_as(name, ea, a->_dtype, &ca);
  if (st == DPL_OK) st = dpl_contig_as(name, em, DPL_UINT8, &cm);
  if (st == DPL_OK) {
    const uint8_t *m = cm->_data;
    int64_t cnt = 0;
    for (int64_t i = 0; i < cm->_numel; i++) cnt += m[i] != 0;
    st = dpl_new(name, a->_dtype, 1, &cnt, a, &res);
    if (st == DPL_OK) {
      int64_t es = dpl_elsize(a->_dtype), k = 0;
      for (int64_t i = 0; i < cm->_numel; i++)
        if (m[i]) memcpy((char *)res->_data + (k++) * es, (const char *)ca->_data + i * es, (size_t)es);
    }
  }
  dpl_tensor_release(ea);
  dpl_tensor_release(em);
  dpl_tensor_release(ca);
  dpl_tensor_release(cm);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *out = res;
  return DPL_OK;
}

int dpl_nonzero(const dpl_tensor *a, dpl_tensor **out)
{
  const char *name = "nonzero";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  if (dpl_is_devmem(a)) {
    DPL_TRY(dpl_check_handle(name, "self", a));
    return dpl_nonzero_dev(name, a, 0, out);
  }
  DPL_TRY(dpl_check_tensor(name, "self", a));
  dpl_tensor *ca = NULL, *res = NULL;
  DPL_TRY(dpl_contig_as(name, a, DPL_FLOAT64, &ca));
  const double *v = ca->_data;
  int64_t cnt = 0;
  for (int64_t i = 0; i < ca->_numel; i++) cnt += v[i] != 0;
  int64_t shape[2] = {cnt, a->_ndim};
  int st = dpl_new(name, DPL_INT64, 2, shape, a, &res);
  if (st == DPL_OK) {
    int64_t *o = res->_data, k = 0;
    int64_t pos[DPL_MAX_DIMS] = {0};
    for (int64_t i = 0; i < ca->_numel; i++) {
      if (v[i] != 0) { for (int d = 0; d < a->_ndim; d++) o[k * a->_ndim + d] = pos[d]; k++; }
      for (int d = a->_ndim - 1; d >= 0; d--) { if (++pos[d] < a->_shape[d]) break; pos[d] = 0; }
    }
  }
  dpl_tensor_release(ca);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *out = res;
  return DPL_OK;
}
