/* dpl_tensor_scatter.c: the index/scatter writes of PyTorch's Tensor beyond those of
 * dpl_tensor_index.c: scatter_ (a source or one value; stored, added or multiplied),
 * index_fill_, index_copy_, index_put_ (advanced indexing over the leading dims, with
 * accumulate) and its read dpl_index_get (index_put_'s gradient), masked_scatter_, put_
 * (flat indices) and fill_diagonal_. Index tensors are integers (int64 or int32),
 * counted from base (0; the *_base entries also 1, Lua's: read in place, no shifted
 * copy; index_fill_/index_copy_/put_ take negative ones from the end), all
 * range-checked before the first write; sources have self's dtype; self is
 * written through any strides (a contiguous stand-in copied back when it is not
 * contiguous). Duplicate positions: the last write wins when storing, every value counts
 * when adding or multiplying (as PyTorch's CPU kernels). Device tensors: the same checks on
 * a host copy of the index (one wait for the GPU: the CPU's messages, raised at the op), the
 * write offsets computed here in the CPU's order and uploaded, then the backend's
 * DPL_BK_INDEX_STORE (the last write of a position wins) or DPL_BK_INDEX_ADD (accumulate,
 * reduce 'add'); reduce 'multiply' is DPL_BK_SCATTER_REDUCE (each index line multiplied in in
 * order); masked_scatter_ finds the mask's positions with the device compaction. Host loops: single-threaded: the writes go to positions
 * the data decides (duplicates), and these ops are memory-bound. */
#include "dpl_tensor_internal.h"
#include <stdio.h>
#include <stdlib.h>

enum { MODE_STORE = 0, MODE_ADD = 1, MODE_MUL = 2 };

/* ---- shared checks ---- */
/* the index read in place (int64 or int32, contiguous: a copy only when it is not, or when it
 * shares memory with self) */
static int index_tensor(const char *name, const char *what, const dpl_tensor *a, const dpl_tensor *idx,
                        dpl_tensor **out)
{
  *out = NULL;
  DPL_TRY(dpl_is_devmem(idx) && dpl_is_devmem(a) ? dpl_check_handle(name, what, idx) : dpl_check_tensor(name, what, idx));
  DPL_TRY(dpl_check_same_device(name, a, idx));
  if (idx->_dtype == DPL_UINT8)
    return dpl_errorf(DPL_EINVAL, "%s: expected an integer %s tensor (int64 or int32), got %s", name, what,
                      dpl_dtype_name(idx->_dtype));
  if (dpl_is_devmem(idx)) { /* the checks and offsets read a host copy */
    if (dpl_is_float(idx->_dtype) || idx->_dtype == DPL_BOOL)
      return dpl_errorf(DPL_EINVAL, "%s: expected an integer %s tensor (int64 or int32), got %s", name, what,
                        dpl_dtype_name(idx->_dtype));
    return dpl_tensor_to(idx, idx->_dtype == DPL_INT32 ? DPL_INT32 : DPL_INT64, DPL_DEVICE_CPU, 0, out);
  }
  return dpl_ix_contig(name, what, idx, a, out);
}

static int check_base(const char *name, int64_t base)
{
  if (base != 0 && base != 1) return dpl_errorf(DPL_EINVAL, "%s: index base must be 0 or 1, got %lld", name, (long long)base);
  return DPL_OK;
}

static int check_dim(const char *name, const dpl_tensor *t, int32_t dim)
{
  if (dim < 0 || dim >= t->_ndim)
    return dpl_errorf(DPL_EINVAL, "%s: dim %d out of range (expected 0..%d for a %d-d tensor, 0-based)", name, (int)dim,
                      (int)t->_ndim - 1, (int)t->_ndim);
  return DPL_OK;
}

static int same_dtype(const char *name, const char *what, const dpl_tensor *a, const dpl_tensor *s)
{
  if (s->_dtype == a->_dtype) return DPL_OK;
  return dpl_errorf(DPL_EINVAL, "%s: self and %s must have the same dtype, got %s (self) and %s (%s)", name, what,
                    dpl_dtype_name(a->_dtype), dpl_dtype_name(s->_dtype), what);
}

/* self, written: a live host tensor without several elements on one memory location */
static int check_self(const char *name, const dpl_tensor *a)
{
  if (dpl_is_devmem(a) && !dpl_backend_get())
    return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda (the CUDA plugin is not loaded)", name);
  DPL_TRY(dpl_is_devmem(a) ? dpl_check_handle(name, "self", a) : dpl_check_tensor(name, "self", a));
  return dpl_check_writable(name, "", a);
}

/* a contiguous copy of a source that shares memory with self (the loop would read what it wrote) */
static int src_apart(const char *name, const dpl_tensor *a, const dpl_tensor **src, dpl_tensor **tmp)
{
  *tmp = NULL;
  if (!dpl_spans_overlap(a, *src)) return DPL_OK;
  DPL_TRY(dpl_new(name, (*src)->_dtype, (*src)->_ndim, (*src)->_shape, *src, tmp));
  dpl_copy_raw(*tmp, *src);
  *src = *tmp;
  return DPL_OK;
}

/* a contiguous stand-in for a (a itself when contiguous); end_contig writes it back */
static int with_contig(const char *name, dpl_tensor *a, dpl_tensor **work)
{
  if (dpl_is_contig(a)) { *work = a; return DPL_OK; }
  return dpl_contig_as(name, a, a->_dtype, work);
}
static void end_contig(dpl_tensor *a, dpl_tensor *work, int st)
{
  if (work && work != a) {
    if (st == DPL_OK) dpl_copy_raw(a, work);
    dpl_tensor_release(work);
  }
}

/* one value of t, converted to dtype dt, into buf (8 bytes) */
static int value_bytes(const char *name, const dpl_tensor *v, int32_t dt, char *buf)
{
  DPL_TRY(dpl_check_tensor(name, "value", v));
  if (v->_numel != 1)
    return dpl_errorf(DPL_EINVAL, "%s: value must have one element, got %lld", name, (long long)v->_numel);
  if (dpl_is_int(dt) && dpl_is_int(v->_dtype)) dpl_store_i64(buf, dt, dpl_load_i64(v->_data, v->_dtype));
  else dpl_store_f64(buf, dt, dpl_load_f64(v->_data, v->_dtype));
  return DPL_OK;
}

/* ---- element loops ---- */
/* dst[k] (op)= src[k * sstep] for k < n, n elements of dtype dt (sstep 0: one value for all) */
#define BIN_LOOP(T, ADD, MUL)                                                        \
  {                                                                                  \
    T *d = (T *)dst;                                                                 \
    const T *s = (const T *)src;                                                     \
    if (mode == MODE_ADD) for (int64_t k = 0; k < n; k++) { T v = s[k * sstep]; d[k] = ADD; } \
    else for (int64_t k = 0; k < n; k++) { T v = s[k * sstep]; d[k] = MUL; }         \
    break;                                                                           \
  }
#define HALF_LOOP(TOF, FROMF)                                                          \
  {                                                                                    \
    uint16_t *d = (uint16_t *)dst;                                                     \
    const uint16_t *s = (const uint16_t *)src;                                         \
    for (int64_t k = 0; k < n; k++) {                                                  \
      float x = TOF(d[k]), v = TOF(s[k * sstep]);                                      \
      d[k] = FROMF(mode == MODE_ADD ? x + v : x * v);                                  \
    }                                                                                  \
    break;                                                                             \
  }
#define STORE_LOOP(T)                                                                \
  {                                                                                  \
    T *d = (T *)dst;                                                                 \
    const T *s = (const T *)src;                                                     \
    for (int64_t k = 0; k < n; k++) d[k] = s[k * sstep];                             \
    return;                                                                          \
  }
static void combine(int32_t dt, int mode, char *dst, const char *src, int64_t n, int64_t sstep)
{
  if (mode == MODE_STORE) {
    int64_t es = dpl_elsize(dt);
    if (sstep == 1 && n * es >= 32) { memcpy(dst, src, (size_t)(n * es)); return; }
    switch (es) {
    case 1: STORE_LOOP(uint8_t)
    case 2: STORE_LOOP(uint16_t)
    case 4: STORE_LOOP(uint32_t)
    default: STORE_LOOP(uint64_t)
    }
  }
  switch (dt) {
  case DPL_FLOAT32: BIN_LOOP(float, d[k] + v, d[k] * v)
  case DPL_FLOAT64: BIN_LOOP(double, d[k] + v, d[k] * v)
  case DPL_FLOAT16: HALF_LOOP(dpl_h2f, dpl_f2h)
  case DPL_BFLOAT16: HALF_LOOP(dpl_bf2f, dpl_f2bf)
  /* integers wrap around (unsigned arithmetic: no undefined overflow) */
  case DPL_INT32: BIN_LOOP(int32_t, (int32_t)((uint32_t)d[k] + (uint32_t)v), (int32_t)((uint32_t)d[k] * (uint32_t)v))
  case DPL_INT64: BIN_LOOP(int64_t, (int64_t)((uint64_t)d[k] + (uint64_t)v), (int64_t)((uint64_t)d[k] * (uint64_t)v))
  case DPL_UINT8: BIN_LOOP(uint8_t, (uint8_t)(d[k] + v), (uint8_t)(d[k] * v))
  default: BIN_LOOP(uint8_t, (uint8_t)(d[k] || v), (uint8_t)(d[k] && v)) /* bool: add is or, multiply is and */
  }
}

/* one element stored: dst = src (es bytes); inlined in the per-element loops */
static inline void store1(int64_t es, char *dst, const char *src)
{
  switch (es) {
  case 1: *(uint8_t *)dst = *(const uint8_t *)src; break;
  case 2: memcpy(dst, src, 2); break;
  case 4: memcpy(dst, src, 4); break;
  default: memcpy(dst, src, 8); break;
  }
}

static void split3(const dpl_tensor *t, int32_t dim, int64_t *outer, int64_t *D, int64_t *inner)
{
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < dim; i++) *outer *= t->_shape[i];
  for (int i = dim + 1; i < t->_ndim; i++) *inner *= t->_shape[i];
  *D = t->_shape[dim];
}

/* ---- device tensors ---- */
/* a checked tensor argument: in device memory only beside a self there (the caller checks
 * the devices agree) */
static int check_arg(const char *name, const char *what, const dpl_tensor *a, const dpl_tensor *t)
{
  return dpl_is_devmem(t) && dpl_is_devmem(a) ? dpl_check_handle(name, what, t) : dpl_check_tensor(name, what, t);
}

/* one element past the last one a's view reaches (the slots of its storage it may write) */
static int64_t view_span(const dpl_tensor *a)
{
  int64_t hi = 1;
  for (int i = 0; i < a->_ndim; i++)
    if (a->_shape[i] > 0) hi += (a->_shape[i] - 1) * a->_stride[i];
  return hi;
}

/* rows of inner elements written into device tensor a at the element offsets off[] (a host
 * int64 tensor, in the CPU's order; each a multiple of div, the row's elements dstride apart),
 * from src (on a's device, a's dtype, contiguous: n * inner elements, or one value for all with
 * sstep 0). MODE_STORE: the last row of an offset wins (unique: no two rows share one, or all
 * rows hold one value); MODE_ADD: every row adds (index_add_ on a viewed as [slots, inner]). */
static int dev_rows(const char *name, dpl_tensor *a, const dpl_tensor *off, const dpl_tensor *src, int64_t inner,
                    int64_t sstep, int64_t dstride, int64_t div, int mode, int unique)
{
  int64_t n = off->_numel;
  if (n == 0 || inner == 0) return DPL_OK;
  if (mode == MODE_MUL) return dpl_errorf(DPL_EINVAL, "%s: dev_rows does not multiply (internal)", name);
  int64_t slots = (view_span(a) + div - 1) / div;
  dpl_tensor *od = NULL, *rows = NULL, *view = NULL, *sv = NULL, *se = NULL;
  int st = DPL_OK;
  if (mode == MODE_STORE) {
    st = dpl_tensor_to(off, DPL_INT64, DPL_DEVICE_CUDA, a->_devindex, &od);
    if (st == DPL_OK) {
      dpl_bk_args k = {.op = DPL_BK_INDEX_STORE, .inout = a, .in = {od, src}, .i = {unique, (int32_t)sstep},
                       .l = {inner, slots}, .u = {(uint64_t)dstride, (uint64_t)div}, .name = name};
      st = dpl_bk_call(&k);
    }
  } else {
    /* the rows' slot numbers (off / div) and a viewed as [slots, inner] */
    st = dpl_new_on(name, DPL_INT64, 1, &n, DPL_DEVICE_CPU, 0, &rows);
    if (st == DPL_OK) {
      const int64_t *o = off->_data;
      int64_t *r = rows->_data;
      for (int64_t b = 0; b < n; b++) r[b] = o[b] / div;
      st = dpl_tensor_to(rows, DPL_INT64, DPL_DEVICE_CUDA, a->_devindex, &od);
    }
    int64_t vshape[2] = {slots, inner}, vstride[2] = {div, dstride}, sshape[2] = {n, inner};
    if (st == DPL_OK) st = dpl_make_view(a, 2, vshape, vstride, a->_offset, &view);
    if (st == DPL_OK && sstep) st = dpl_tensor_view(src, 2, sshape, &sv);
    else if (st == DPL_OK) {
      int64_t one[2] = {1, 1};
      st = dpl_tensor_view(src, 2, one, &se);
      if (st == DPL_OK) st = dpl_tensor_expand(se, 2, sshape, &sv);
    }
    if (st == DPL_OK) {
      dpl_bk_args k = {.op = DPL_BK_INDEX_ADD, .inout = view, .in = {od, sv}, .i = {0}, .name = name};
      st = dpl_bk_call(&k);
    }
  }
  dpl_release_n(5, (dpl_tensor *[]){od, rows, view, sv, se});
  return st;
}

/* a host int64 tensor of n offsets */
static int host_offsets(const char *name, int64_t n, dpl_tensor **off)
{
  return dpl_new_on(name, DPL_INT64, 1, &n, DPL_DEVICE_CPU, 0, off);
}

/* a contiguous copy on a's device in a's dtype of t (a fresh block: never self's memory) */
static int dev_fresh(const char *name, const dpl_tensor *a, const dpl_tensor *t, dpl_tensor **out)
{
  DPL_TRY(dpl_new_on(name, a->_dtype, t->_ndim, t->_shape, DPL_DEVICE_CUDA, a->_devindex, out));
  int st = dpl_copy_any(name, *out, t);
  if (st != DPL_OK) { dpl_tensor_release(*out); *out = NULL; }
  return st;
}

/* a contiguous stand-in for device tensor a (a itself when contiguous); dev_end writes it back */
static int dev_work(const char *name, dpl_tensor *a, dpl_tensor **work)
{
  if (dpl_is_contig(a)) return dpl_tensor_alias(a, work);
  return dev_fresh(name, a, a, work);
}
static int dev_end(const char *name, dpl_tensor *a, dpl_tensor *work, int st)
{
  if (work && work->_data != a->_data && st == DPL_OK) st = dpl_copy_any(name, a, work);
  dpl_tensor_release(work);
  return st;
}

/* ---- scatter_ ---- */
/* device self: each index position's offset in self (row-major order of the index: the CPU's),
 * src narrowed to the index's shape in a contiguous copy (or its one value) */
/* reduce='multiply' on a device: the backend's scatter_reduce fold (prod, self included), each
 * line of the index along dim multiplied in in order, through self's strides */
static int scatter_mul_dev(dpl_tensor *a, int32_t dim, const dpl_tensor *ix, const dpl_tensor *src, int64_t base,
                           int scalar)
{
  const char *name = "scatter_";
  dpl_tensor *di = NULL, *sv = NULL, *cs = NULL;
  int st = dpl_tensor_to(ix, DPL_INT64, DPL_DEVICE_CUDA, a->_devindex, &di);
  if (st == DPL_OK && scalar) st = dpl_tensor_expand(src, ix->_ndim, ix->_shape, &sv);
  else if (st == DPL_OK) st = dpl_make_view(src, a->_ndim, ix->_shape, src->_stride, src->_offset, &sv);
  if (st == DPL_OK) st = dev_fresh(name, a, sv, &cs);
  if (st == DPL_OK) st = dpl_scatter_reduce_run(name, a, dim, di, cs, 2, 1, a->_dtype == DPL_BOOL, base);
  dpl_release_n(3, (dpl_tensor *[]){di, sv, cs});
  return st;
}

static int scatter_dev(dpl_tensor *a, int32_t dim, const dpl_tensor *ix, const dpl_tensor *src, int32_t reduce,
                       int64_t base, int scalar)
{
  const char *name = "scatter_";
  if (reduce == MODE_MUL) return ix->_numel > 0 ? scatter_mul_dev(a, dim, ix, src, base, scalar) : DPL_OK;
  int nd = a->_ndim;
  int64_t n = ix->_numel;
  dpl_tensor *off = NULL, *cs = NULL, *nv = NULL;
  int st = host_offsets(name, n, &off);
  if (st == DPL_OK) {
    int64_t pos[DPL_MAX_DIMS] = {0}, *o = off->_data;
    for (int64_t k = 0; k < n; k++) {
      int64_t e = (dpl_ix_at(ix, k) - base) * a->_stride[dim];
      for (int d = 0; d < nd; d++)
        if (d != dim) e += pos[d] * a->_stride[d];
      o[k] = e;
      for (int d = nd - 1; d >= 0; d--) {
        if (++pos[d] < ix->_shape[d]) break;
        pos[d] = 0;
      }
    }
  }
  if (st == DPL_OK && scalar) st = dev_fresh(name, a, src, &cs);
  else if (st == DPL_OK) {
    st = dpl_make_view(src, nd, ix->_shape, src->_stride, src->_offset, &nv);
    if (st == DPL_OK) st = dev_fresh(name, a, nv, &cs);
  }
  if (st == DPL_OK) st = dev_rows(name, a, off, cs, 1, scalar ? 0 : 1, 1, 1, reduce, 0);
  dpl_release_n(3, (dpl_tensor *[]){off, cs, nv});
  return st;
}

static int scatter_impl(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src, int32_t reduce,
                        int64_t base)
{
  const char *name = "scatter_";
  char b1[160], b2[160], b3[160];
  DPL_TRY(check_base(name, base));
  DPL_TRY(check_self(name, a));
  DPL_TRY(check_arg(name, "index", a, idx));
  DPL_TRY(check_arg(name, "src", a, src));
  DPL_TRY(dpl_check_same_device(name, a, src));
  if (reduce < MODE_STORE || reduce > MODE_MUL)
    return dpl_errorf(DPL_EINVAL, "%s: reduce must be 0 (none), 1 (add) or 2 (multiply), got %d", name, (int)reduce);
  DPL_TRY(check_dim(name, a, dim));
  if (idx->_ndim != a->_ndim)
    return dpl_errorf(DPL_EINVAL, "%s: index must have as many dims as self (%d), got %d", name, (int)a->_ndim,
                      (int)idx->_ndim);
  DPL_TRY(same_dtype(name, "src", a, src));
  int scalar = src->_ndim == 0; /* one value for every position */
  if (!scalar && src->_ndim != idx->_ndim)
    return dpl_errorf(DPL_EINVAL, "%s: src must have as many dims as index (%d), got %d", name, (int)idx->_ndim,
                      (int)src->_ndim);
  dpl_tensor *ix = NULL, *tmp = NULL;
  DPL_TRY(index_tensor(name, "index", a, idx, &ix));
  int st = DPL_OK;
  if (ix->_numel == 0) goto done; /* nothing to write: PyTorch checks no more */
  for (int d = 0; d < a->_ndim && st == DPL_OK; d++)
    if ((d != dim && idx->_shape[d] > a->_shape[d]) || (!scalar && idx->_shape[d] > src->_shape[d])) {
      st = dpl_errorf(DPL_EINVAL, "%s: index of shape %s must be no larger than self %s (but in the scatter dim) and "
                      "than src %s", name, dpl_shape_str(idx->_ndim, idx->_shape, b1, sizeof b1),
                      dpl_shape_str(a->_ndim, a->_shape, b2, sizeof b2),
                      scalar ? "(a value)" : dpl_shape_str(src->_ndim, src->_shape, b3, sizeof b3));
    }
  if (st == DPL_OK) st = dpl_ix_check(name, ix, base, 0, dim, a->_shape[dim], NULL);
  if (st == DPL_OK && dpl_is_devmem(a)) {
    st = scatter_dev(a, dim, ix, src, reduce, base, scalar);
    goto done;
  }
  if (st == DPL_OK) st = src_apart(name, a, &src, &tmp);
  if (st == DPL_OK) {
    int nd = a->_ndim, last = nd - 1;
    int64_t es = dpl_elsize(a->_dtype);
    int64_t pos[DPL_MAX_DIMS] = {0};
    int64_t oa = 0, os = 0; /* offsets of self (without the scatter dim) and src, in elements */
    char *pa = (char *)a->_data;
    const char *ps = (const char *)src->_data;
    int64_t sdim = a->_stride[dim];
    /* stores of 4- or 8-byte elements along idx's last dim: one typed loop per row (strides
     * fixed along it), the index read as it is */
    int64_t inner = idx->_shape[last], sj = dim == last ? 0 : a->_stride[last], ssj = scalar ? 0 : src->_stride[last];
    int rows = reduce == MODE_STORE && (es == 4 || es == 8) && inner > 0;
    for (int64_t k = 0; k < ix->_numel; k += rows ? inner : 1) {
      if (rows) {
#define SC_ROW(T, I)                                                                                   \
  do {                                                                                                 \
    const I *ir = (const I *)ix->_data + k;                                                            \
    T *A = (T *)pa + oa;                                                                               \
    const T *S = (const T *)ps + os;                                                                   \
    for (int64_t j = 0; j < inner; j++) A[(ir[j] - base) * sdim + j * sj] = S[j * ssj];                \
  } while (0)
        if (es == 4) { if (ix->_dtype == DPL_INT32) SC_ROW(uint32_t, int32_t); else SC_ROW(uint32_t, int64_t); }
        else { if (ix->_dtype == DPL_INT32) SC_ROW(uint64_t, int32_t); else SC_ROW(uint64_t, int64_t); }
#undef SC_ROW
        pos[last] = inner - 1; /* the walk below moves on to the next row */
        if (last != dim) oa += (inner - 1) * a->_stride[last];
        if (!scalar) os += (inner - 1) * src->_stride[last];
      } else {
        int64_t v = dpl_ix_at(ix, k) - base;
        if (reduce == MODE_STORE) store1(es, pa + (oa + v * sdim) * es, ps + os * es);
        else combine(a->_dtype, reduce, pa + (oa + v * sdim) * es, ps + os * es, 1, 0);
      }
      for (int d = nd - 1; d >= 0; d--) {
        if (++pos[d] < idx->_shape[d]) {
          if (d != dim) oa += a->_stride[d];
          if (!scalar) os += src->_stride[d];
          break;
        }
        if (d != dim) oa -= (idx->_shape[d] - 1) * a->_stride[d];
        if (!scalar) os -= (idx->_shape[d] - 1) * src->_stride[d];
        pos[d] = 0;
      }
    }
  }
done:
  dpl_tensor_release(ix);
  dpl_tensor_release(tmp);
  return st;
}
int dpl_scatter_(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src, int32_t reduce)
{
  return scatter_impl(a, dim, idx, src, reduce, 0);
}
int dpl_scatter_base(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src, int32_t reduce,
                     int64_t base)
{
  return scatter_impl(a, dim, idx, src, reduce, base);
}

/* ---- index_fill_, index_copy_ ---- */
/* device self: slice ix[j] (mapped as the CPU maps it) along dim of every outer block gets
 * value (fill: one element, any dtype and device) or slice j of src (copy: src's shape
 * checked); through a contiguous stand-in */
static int slices_dev(const char *name, dpl_tensor *a, int32_t dim, const dpl_tensor *ix, int64_t base, int fe,
                      const dpl_tensor *vs, int fill)
{
  int64_t outer, D, inner, n = ix->_numel, nb;
  split3(a, dim, &outer, &D, &inner);
  nb = outer * n;
  dpl_tensor *off = NULL, *cs = NULL, *work = NULL;
  int st = host_offsets(name, nb, &off);
  if (st == DPL_OK) {
    int64_t *o = off->_data;
    for (int64_t q = 0; q < outer; q++)
      for (int64_t j = 0; j < n; j++)
        o[q * n + j] = (q * D + (int64_t)dpl_ix_map(dpl_ix_at(ix, j), base, fe, (uint64_t)D)) * inner;
  }
  if (st == DPL_OK) st = dev_fresh(name, a, vs, &cs); /* (the value converted to self's dtype, on its device) */
  if (st == DPL_OK) st = dev_work(name, a, &work);
  if (st == DPL_OK) st = dev_rows(name, work, off, cs, inner, fill ? 0 : 1, 1, inner, MODE_STORE, fill);
  st = dev_end(name, a, work, st);
  dpl_release_n(2, (dpl_tensor *[]){off, cs});
  return st;
}

static int index_1d(const char *name, const dpl_tensor *idx)
{
  if (idx->_ndim > 1)
    return dpl_errorf(DPL_EINVAL, "%s: expected a 0-d or 1-d index, got %d dims", name, (int)idx->_ndim);
  return DPL_OK;
}

static int index_fill_impl(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *value, int64_t base,
                           int neg)
{
  const char *name = "index_fill_";
  DPL_TRY(check_base(name, base));
  DPL_TRY(check_self(name, a));
  DPL_TRY(check_dim(name, a, dim));
  DPL_TRY(check_arg(name, "index", a, idx));
  DPL_TRY(index_1d(name, idx));
  char v[8];
  if (dpl_is_devmem(a)) {
    DPL_TRY(check_arg(name, "value", a, value));
    if (value->_numel != 1)
      return dpl_errorf(DPL_EINVAL, "%s: value must have one element, got %lld", name, (long long)value->_numel);
  } else DPL_TRY(value_bytes(name, value, a->_dtype, v));
  dpl_tensor *ix = NULL, *work = NULL;
  DPL_TRY(index_tensor(name, "index", a, idx, &ix));
  int64_t n = ix->_numel;
  int fe = 0;
  int st = dpl_ix_check(name, ix, base, neg, dim, a->_shape[dim], &fe);
  if (dpl_is_devmem(a)) {
    if (st == DPL_OK && n > 0 && a->_numel > 0) st = slices_dev(name, a, dim, ix, base, fe, value, 1);
    dpl_tensor_release(ix);
    return st;
  }
  if (st == DPL_OK && n > 0 && a->_numel > 0) st = with_contig(name, a, &work);
  if (st == DPL_OK && work) {
    int64_t outer, D, inner, es = dpl_elsize(a->_dtype);
    split3(a, dim, &outer, &D, &inner);
    char *w = (char *)work->_data;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < n; j++) {
        int64_t r = (int64_t)dpl_ix_map(dpl_ix_at(ix, j), base, fe, (uint64_t)D);
        if (inner == 1) store1(es, w + (o * D + r) * es, v); /* the last dim: one element per index */
        else combine(a->_dtype, MODE_STORE, w + (o * D + r) * inner * es, v, inner, 0);
      }
  }
  end_contig(a, work, st);
  dpl_tensor_release(ix);
  return st;
}
int dpl_index_fill_(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *value)
{
  return index_fill_impl(a, dim, idx, value, 0, 0);
}
int dpl_index_fill_base(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *value, int64_t base)
{
  return index_fill_impl(a, dim, idx, value, base, 1);
}

static int index_copy_impl(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src, int64_t base,
                           int neg)
{
  const char *name = "index_copy_";
  char b1[160], b2[160], b3[160];
  DPL_TRY(check_base(name, base));
  DPL_TRY(check_self(name, a));
  DPL_TRY(check_dim(name, a, dim));
  DPL_TRY(check_arg(name, "index", a, idx));
  DPL_TRY(index_1d(name, idx));
  DPL_TRY(check_arg(name, "source", a, src));
  DPL_TRY(dpl_check_same_device(name, a, src));
  DPL_TRY(same_dtype(name, "source", a, src));
  int64_t n = idx->_numel;
  int ok = src->_ndim == a->_ndim;
  for (int i = 0; ok && i < a->_ndim; i++) ok = src->_shape[i] == (i == dim ? n : a->_shape[i]);
  if (!ok) {
    int64_t want[DPL_MAX_DIMS];
    memcpy(want, a->_shape, sizeof want);
    want[dim] = n;
    return dpl_errorf(DPL_EINVAL, "%s: source of shape %s does not match self %s with the indexed dim's size replaced "
                      "by the index length %lld (expected %s)", name, dpl_shape_str(src->_ndim, src->_shape, b1, sizeof b1),
                      dpl_shape_str(a->_ndim, a->_shape, b2, sizeof b2), (long long)n,
                      dpl_shape_str(a->_ndim, want, b3, sizeof b3));
  }
  dpl_tensor *ix = NULL, *tmp = NULL, *cs = NULL, *work = NULL;
  DPL_TRY(index_tensor(name, "index", a, idx, &ix));
  int fe = 0;
  int st = dpl_ix_check(name, ix, base, neg, dim, a->_shape[dim], &fe);
  if (dpl_is_devmem(a)) {
    if (st == DPL_OK && n > 0 && a->_numel > 0) st = slices_dev(name, a, dim, ix, base, fe, src, 0);
    dpl_tensor_release(ix);
    return st;
  }
  if (st == DPL_OK && n > 0 && a->_numel > 0) {
    st = src_apart(name, a, &src, &tmp);
    if (st == DPL_OK) st = dpl_contig_as(name, src, src->_dtype, &cs);
    if (st == DPL_OK) st = with_contig(name, a, &work);
  }
  if (st == DPL_OK && work) {
    int64_t outer, D, inner, es = dpl_elsize(a->_dtype);
    split3(a, dim, &outer, &D, &inner);
    char *w = (char *)work->_data;
    const char *s = (const char *)cs->_data;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < n; j++) {
        int64_t r = (int64_t)dpl_ix_map(dpl_ix_at(ix, j), base, fe, (uint64_t)D);
        if (inner == 1) store1(es, w + (o * D + r) * es, s + (o * n + j) * es);
        else combine(a->_dtype, MODE_STORE, w + (o * D + r) * inner * es, s + (o * n + j) * inner * es, inner, 1);
      }
  }
  end_contig(a, work, st);
  dpl_release_n(3, (dpl_tensor *[]){ix, tmp, cs});
  return st;
}
int dpl_index_copy_(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src)
{
  return index_copy_impl(a, dim, idx, src, 0, 0);
}
int dpl_index_copy_base(dpl_tensor *a, int32_t dim, const dpl_tensor *idx, const dpl_tensor *src, int64_t base)
{
  return index_copy_impl(a, dim, idx, src, base, 1);
}

/* ---- index_put_, index_get ---- */
/* n index tensors of one shape over a's first n dims: their int64 contiguous copies in ix[],
 * range-checked; *nb positions; the result shape (the indices' + a's other dims) in rshape */
static int put_indices(const char *name, const dpl_tensor *a, int32_t n, dpl_tensor *const *indices, dpl_tensor **ix,
                       int64_t *nb, int32_t *rnd, int64_t *rshape)
{
  char b1[160], b2[160];
  if (n < 1 || !indices) return dpl_errorf(DPL_EINVAL, "%s: expected at least one index tensor, got %d", name, (int)n);
  if (n > a->_ndim)
    return dpl_errorf(DPL_EINVAL, "%s: too many indices for a tensor of %d dims (got %d)", name, (int)a->_ndim, (int)n);
  for (int j = 0; j < n; j++) {
    DPL_TRY(check_arg(name, "index", a, indices[j]));
    if (!dpl_same_shape(indices[j], indices[0]))
      return dpl_errorf(DPL_EINVAL, "%s: the index tensors must have one shape (broadcast them first), got %s and %s",
                        name, dpl_shape_str(indices[0]->_ndim, indices[0]->_shape, b1, sizeof b1),
                        dpl_shape_str(indices[j]->_ndim, indices[j]->_shape, b2, sizeof b2));
  }
  const dpl_tensor *i0 = indices[0];
  if (i0->_ndim + a->_ndim - n > DPL_MAX_DIMS)
    return dpl_errorf(DPL_EINVAL, "%s: the indexing result would have more than %d dims", name, DPL_MAX_DIMS);
  *rnd = i0->_ndim + a->_ndim - n;
  for (int i = 0; i < i0->_ndim; i++) rshape[i] = i0->_shape[i];
  for (int i = n; i < a->_ndim; i++) rshape[i0->_ndim + i - n] = a->_shape[i];
  *nb = i0->_numel;
  for (int j = 0; j < n; j++) {
    DPL_TRY(index_tensor(name, "index", a, indices[j], &ix[j]));
    DPL_TRY(dpl_ix_check(name, ix[j], 0, 0, j, a->_shape[j], NULL));
  }
  return DPL_OK;
}

/* element offset in a contiguous tensor of a's shape of position b of the indices */
static inline int64_t put_offset(const dpl_tensor *a, int32_t n, dpl_tensor *const *ix, int64_t b, int64_t inner)
{
  int64_t off = 0;
  for (int j = 0; j < n; j++) off = off * a->_shape[j] + dpl_ix_at(ix[j], b);
  return off * inner;
}

int dpl_index_put_(dpl_tensor *a, int32_t n, dpl_tensor *const *indices, const dpl_tensor *values, int32_t accumulate)
{
  const char *name = "index_put_";
  char b1[160], b2[160];
  DPL_TRY(check_self(name, a));
  DPL_TRY(check_arg(name, "values", a, values));
  DPL_TRY(dpl_check_same_device(name, a, values));
  DPL_TRY(same_dtype(name, "values", a, values));
  if (accumulate != 0 && accumulate != 1)
    return dpl_errorf(DPL_EINVAL, "%s: accumulate must be 0 or 1, got %d", name, (int)accumulate);
  dpl_tensor *ix[DPL_MAX_DIMS] = {0};
  dpl_tensor *cv = NULL, *work = NULL;
  int64_t nb = 0, rshape[DPL_MAX_DIMS], vst[DPL_MAX_DIMS];
  int32_t rnd = 0;
  int st = put_indices(name, a, n, indices, ix, &nb, &rnd, rshape);
  if (st == DPL_OK && dpl_broadcast_strides(values, rnd, rshape, vst) != 0)
    st = dpl_errorf(DPL_EINVAL, "%s: shape mismatch: values of shape %s cannot be broadcast to the indexing result of "
                    "shape %s", name, dpl_shape_str(values->_ndim, values->_shape, b1, sizeof b1),
                    dpl_shape_str(rnd, rshape, b2, sizeof b2));
  int64_t inner = 1;
  for (int i = n; i < a->_ndim; i++) inner *= a->_shape[i];
  if (dpl_is_devmem(a)) {
    dpl_tensor *off = NULL, *ev = NULL;
    if (st == DPL_OK && nb > 0 && inner > 0) st = host_offsets(name, nb, &off);
    if (off) {
      int64_t *o = off->_data;
      for (int64_t b = 0; b < nb; b++) o[b] = put_offset(a, n, ix, b, inner);
      st = dpl_tensor_expand(values, rnd, rshape, &ev);
      if (st == DPL_OK) st = dev_fresh(name, a, ev, &cv);
      if (st == DPL_OK) st = dev_work(name, a, &work);
      if (st == DPL_OK) st = dev_rows(name, work, off, cv, inner, 1, 1, inner, accumulate ? MODE_ADD : MODE_STORE, 0);
      st = dev_end(name, a, work, st);
    }
    dpl_release_n(DPL_MAX_DIMS, ix);
    dpl_release_n(3, (dpl_tensor *[]){off, ev, cv});
    return st;
  }
  if (st == DPL_OK && nb > 0 && inner > 0) {
    /* the values as one contiguous block per index position (a fresh copy: never self's memory) */
    st = dpl_new(name, a->_dtype, rnd, rshape, a, &cv);
    if (st == DPL_OK) dpl_copy_raw(cv, values);
    if (st == DPL_OK) st = with_contig(name, a, &work);
  }
  if (st == DPL_OK && work) {
    int64_t es = dpl_elsize(a->_dtype);
    char *w = (char *)work->_data;
    const char *v = (const char *)cv->_data;
    int mode = accumulate ? MODE_ADD : MODE_STORE;
    if (inner == 1 && mode == MODE_STORE)
      for (int64_t b = 0; b < nb; b++) store1(es, w + put_offset(a, n, ix, b, 1) * es, v + b * es);
    else
      for (int64_t b = 0; b < nb; b++)
        combine(a->_dtype, mode, w + put_offset(a, n, ix, b, inner) * es, v + b * inner * es, inner, 1);
  }
  end_contig(a, work, st);
  dpl_release_n(DPL_MAX_DIMS, ix);
  dpl_tensor_release(cv);
  return st;
}

int dpl_index_get(const dpl_tensor *a, int32_t n, dpl_tensor *const *indices, dpl_tensor **out)
{
  const char *name = "index_get";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(check_arg(name, "self", a, a));
  dpl_tensor *ix[DPL_MAX_DIMS] = {0};
  dpl_tensor *ca = NULL, *res = NULL;
  int64_t nb = 0, rshape[DPL_MAX_DIMS];
  int32_t rnd = 0;
  int st = put_indices(name, a, n, indices, ix, &nb, &rnd, rshape);
  if (dpl_is_devmem(a)) { /* an index_select of rows of a viewed as [rows, inner] */
    int64_t inner = 1, rows = 1;
    for (int i = n; i < a->_ndim; i++) inner *= a->_shape[i];
    for (int i = 0; i < n; i++) rows *= a->_shape[i];
    dpl_tensor *r = NULL, *rd = NULL, *sel = NULL;
    if (st == DPL_OK) st = dpl_contig_as(name, a, a->_dtype, &ca);
    if (st == DPL_OK) st = host_offsets(name, nb, &r);
    if (st == DPL_OK) {
      int64_t *o = r->_data;
      for (int64_t b = 0; b < nb; b++) o[b] = put_offset(a, n, ix, b, 1);
      st = dpl_tensor_to(r, DPL_INT64, DPL_DEVICE_CUDA, a->_devindex, &rd);
    }
    int64_t vshape[2] = {rows, inner};
    dpl_tensor *v2 = NULL;
    if (st == DPL_OK) st = dpl_tensor_view(ca, 2, vshape, &v2);
    if (st == DPL_OK) st = dpl_index_select(v2, 0, rd, &sel);
    if (st == DPL_OK) st = dpl_tensor_reshape(sel, rnd, rshape, &res);
    dpl_release_n(DPL_MAX_DIMS, ix);
    dpl_release_n(5, (dpl_tensor *[]){ca, r, rd, sel, v2});
    if (st != DPL_OK) { dpl_tensor_release(res); return st; }
    *out = res;
    return DPL_OK;
  }
  if (st == DPL_OK) st = dpl_new(name, a->_dtype, rnd, rshape, a, &res);
  int64_t inner = 1;
  for (int i = n; i < a->_ndim; i++) inner *= a->_shape[i];
  if (st == DPL_OK && nb > 0 && inner > 0) st = dpl_contig_as(name, a, a->_dtype, &ca);
  if (st == DPL_OK && ca) {
    int64_t es = dpl_elsize(a->_dtype);
    for (int64_t b = 0; b < nb; b++)
      combine(a->_dtype, MODE_STORE, (char *)res->_data + b * inner * es,
              (const char *)ca->_data + put_offset(a, n, ix, b, inner) * es, inner, 1);
  }
  dpl_release_n(DPL_MAX_DIMS, ix);
  dpl_tensor_release(ca);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *out = res;
  return DPL_OK;
}

/* ---- masked_scatter_ ---- */
/* device self: the mask's true positions by the compaction (one read back of their count), the
 * first count elements of source (row-major, a fresh contiguous copy) stored there */
static int masked_scatter_dev(dpl_tensor *a, const dpl_tensor *mask, const dpl_tensor *src)
{
  const char *name = "masked_scatter_";
  dpl_tensor *em = NULL, *cm = NULL, *pos = NULL, *cs = NULL, *head = NULL, *work = NULL;
  int st = dpl_tensor_expand(mask, a->_ndim, a->_shape, &em);
  if (st == DPL_OK) st = dpl_contig_as(name, em, DPL_UINT8, &cm);
  if (st == DPL_OK) st = dpl_nonzero_dev(name, cm, 1, &pos);
  int64_t cnt = pos ? pos->_numel : 0, unit = 1;
  if (st == DPL_OK && cnt > src->_numel)
    st = dpl_errorf(DPL_EINVAL, "%s: source has %lld elements, fewer than the %lld true elements of the mask", name,
                    (long long)src->_numel, (long long)cnt);
  if (st == DPL_OK && cnt > 0) st = dev_fresh(name, a, src, &cs);
  if (st == DPL_OK && cnt > 0) st = dpl_make_view(cs, 1, &cnt, &unit, cs->_offset, &head);
  if (st == DPL_OK && cnt > 0) st = dev_work(name, a, &work);
  if (st == DPL_OK && cnt > 0) {
    dpl_bk_args k = {.op = DPL_BK_INDEX_STORE, .inout = work, .in = {pos, head}, .i = {1, 1}, .l = {1, work->_numel},
                     .u = {1, 1}, .name = name};
    st = dpl_bk_call(&k);
  }
  if (work) st = dev_end(name, a, work, st);
  dpl_release_n(5, (dpl_tensor *[]){em, cm, pos, cs, head});
  return st;
}

int dpl_masked_scatter_(dpl_tensor *a, const dpl_tensor *mask, const dpl_tensor *src)
{
  const char *name = "masked_scatter_";
  char b1[160], b2[160];
  DPL_TRY(check_self(name, a));
  DPL_TRY(check_arg(name, "mask", a, mask));
  DPL_TRY(check_arg(name, "source", a, src));
  DPL_TRY(dpl_check_same_device(name, a, mask));
  DPL_TRY(dpl_check_same_device(name, a, src));
  if (mask->_dtype != DPL_BOOL && mask->_dtype != DPL_UINT8)
    return dpl_errorf(DPL_EINVAL, "%s: expected a bool mask, got %s", name, dpl_dtype_name(mask->_dtype));
  DPL_TRY(same_dtype(name, "source", a, src));
  int64_t mst[DPL_MAX_DIMS];
  if (dpl_broadcast_strides(mask, a->_ndim, a->_shape, mst) != 0)
    return dpl_errorf(DPL_EINVAL, "%s: mask of shape %s cannot be broadcast to self's shape %s", name,
                      dpl_shape_str(mask->_ndim, mask->_shape, b1, sizeof b1), dpl_shape_str(a->_ndim, a->_shape, b2, sizeof b2));
  if (dpl_is_devmem(a)) return masked_scatter_dev(a, mask, src);
  dpl_tensor *em = NULL, *cm = NULL, *tmp = NULL, *cs = NULL, *work = NULL;
  int st = dpl_tensor_expand(mask, a->_ndim, a->_shape, &em);
  if (st == DPL_OK) st = dpl_new(name, DPL_UINT8, a->_ndim, a->_shape, a, &cm); /* (a copy: never self's memory) */
  if (st == DPL_OK) dpl_copy_raw(cm, em);
  int64_t cnt = 0;
  if (st == DPL_OK) {
    const uint8_t *m = cm->_data;
    for (int64_t i = 0; i < cm->_numel; i++) cnt += m[i] != 0;
    if (cnt > src->_numel)
      st = dpl_errorf(DPL_EINVAL, "%s: source has %lld elements, fewer than the %lld true elements of the mask", name,
                      (long long)src->_numel, (long long)cnt);
  }
  if (st == DPL_OK && cnt > 0) {
    st = src_apart(name, a, &src, &tmp);
    if (st == DPL_OK) st = dpl_contig_as(name, src, src->_dtype, &cs);
    if (st == DPL_OK) st = with_contig(name, a, &work);
  }
  if (st == DPL_OK && work) {
    int64_t es = dpl_elsize(a->_dtype), k = 0;
    const uint8_t *m = cm->_data;
    char *w = (char *)work->_data;
    const char *s = (const char *)cs->_data;
    for (int64_t i = 0; i < cm->_numel; i++)
      if (m[i]) { store1(es, w + i * es, s + k * es); k++; }
  }
  end_contig(a, work, st);
  dpl_release_n(4, (dpl_tensor *[]){em, cm, tmp, cs});
  return st;
}

/* ---- put_ ---- */
static int put_impl(dpl_tensor *a, const dpl_tensor *idx, const dpl_tensor *src, int32_t accumulate, int64_t base,
                    int neg)
{
  const char *name = "put_";
  DPL_TRY(check_base(name, base));
  DPL_TRY(check_self(name, a));
  DPL_TRY(check_arg(name, "index", a, idx));
  DPL_TRY(check_arg(name, "source", a, src));
  DPL_TRY(dpl_check_same_device(name, a, src));
  DPL_TRY(same_dtype(name, "source", a, src));
  if (accumulate != 0 && accumulate != 1)
    return dpl_errorf(DPL_EINVAL, "%s: accumulate must be 0 or 1, got %d", name, (int)accumulate);
  if (src->_numel != idx->_numel)
    return dpl_errorf(DPL_EINVAL, "%s: source and index must have the same number of elements, got %lld (source) and "
                      "%lld (index)", name, (long long)src->_numel, (long long)idx->_numel);
  if (a->_numel == 0 && idx->_numel > 0)
    return dpl_errorf(DPL_EINVAL, "%s: cannot put elements into an empty tensor", name);
  dpl_tensor *ix = NULL, *tmp = NULL, *cs = NULL, *work = NULL;
  DPL_TRY(index_tensor(name, "index", a, idx, &ix));
  int64_t n = ix->_numel, N = a->_numel;
  int st = DPL_OK, fe = 0;
  if (dpl_ix_check(name, ix, base, neg, 0, N, &fe) != DPL_OK) /* (its message names a dim: put_'s names self) */
    for (int64_t i = 0; i < n && st == DPL_OK; i++) {
      int64_t v = dpl_ix_at(ix, i);
      if (dpl_ix_map(v, base, neg, (uint64_t)N) < (uint64_t)N) continue;
      if (neg && v < 0)
        st = dpl_errorf(DPL_EINVAL, "%s: index %lld is out of range for self with %lld elements (expected %lld..%lld, or "
                        "-%lld..-1 from the end)", name, (long long)v, (long long)N, (long long)base,
                        (long long)(N - 1 + base), (long long)N);
      else
        st = dpl_errorf(DPL_EINVAL, "%s: index %lld is out of range for self with %lld elements (expected 0..%lld, 0-based)",
                        name, (long long)(int64_t)((uint64_t)v - (uint64_t)base), (long long)N, (long long)N - 1);
    }
  if (st == DPL_OK && n > 0 && dpl_is_devmem(a)) { /* the flat indices as offsets through self's strides */
    dpl_tensor *off = NULL;
    st = host_offsets(name, n, &off);
    if (st == DPL_OK) {
      int64_t *o = off->_data;
      for (int64_t i = 0; i < n; i++) {
        int64_t r = (int64_t)dpl_ix_map(dpl_ix_at(ix, i), base, fe, (uint64_t)N), e = 0;
        for (int d = a->_ndim - 1; d >= 0; d--) {
          e += (r % a->_shape[d]) * a->_stride[d];
          r /= a->_shape[d];
        }
        o[i] = e;
      }
      st = dev_fresh(name, a, src, &cs);
    }
    if (st == DPL_OK) st = dev_rows(name, a, off, cs, 1, 1, 1, 1, accumulate ? MODE_ADD : MODE_STORE, 0);
    dpl_release_n(3, (dpl_tensor *[]){ix, off, cs});
    return st;
  }
  if (st == DPL_OK && n > 0) {
    st = src_apart(name, a, &src, &tmp);
    if (st == DPL_OK) st = dpl_contig_as(name, src, src->_dtype, &cs);
    if (st == DPL_OK) st = with_contig(name, a, &work);
  }
  if (st == DPL_OK && work) {
    int64_t es = dpl_elsize(a->_dtype);
    int mode = accumulate ? MODE_ADD : MODE_STORE;
    char *w = (char *)work->_data;
    const char *s = (const char *)cs->_data;
    for (int64_t i = 0; i < n; i++) {
      int64_t r = (int64_t)dpl_ix_map(dpl_ix_at(ix, i), base, fe, (uint64_t)N);
      if (mode == MODE_STORE) store1(es, w + r * es, s + i * es);
      else combine(a->_dtype, mode, w + r * es, s + i * es, 1, 0);
    }
  }
  end_contig(a, work, st);
  dpl_release_n(3, (dpl_tensor *[]){ix, tmp, cs});
  return st;
}
int dpl_put_(dpl_tensor *a, const dpl_tensor *idx, const dpl_tensor *src, int32_t accumulate)
{
  return put_impl(a, idx, src, accumulate, 0, 0);
}
int dpl_put_base(dpl_tensor *a, const dpl_tensor *idx, const dpl_tensor *src, int32_t accumulate, int64_t base)
{
  return put_impl(a, idx, src, accumulate, base, 1);
}

/* ---- fill_diagonal_ ---- */
/* device self: the CPU's diagonal positions as offsets, one value stored at each */
static int fill_diagonal_dev(dpl_tensor *a, const dpl_tensor *value, int32_t wrap)
{
  const char *name = "fill_diagonal_";
  DPL_TRY(check_arg(name, "value", a, value));
  if (value->_numel != 1)
    return dpl_errorf(DPL_EINVAL, "%s: value must have one element, got %lld", name, (long long)value->_numel);
  int64_t n = 0, h = a->_shape[0], w = a->_shape[1], m = h < w ? h : w, step = 0;
  if (a->_ndim > 2) {
    n = a->_shape[0];
    for (int i = 0; i < a->_ndim; i++) step += a->_stride[i];
  } else
    for (int64_t k = 0; (wrap || k < m) && k * (w + 1) < h * w; k++) n++;
  dpl_tensor *off = NULL, *cv = NULL;
  int st = host_offsets(name, n, &off);
  if (st == DPL_OK) {
    int64_t *o = off->_data;
    for (int64_t k = 0; k < n; k++) {
      int64_t f = k * (w + 1);
      o[k] = a->_ndim > 2 ? k * step : (f / w) * a->_stride[0] + (f % w) * a->_stride[1];
    }
  }
  if (st == DPL_OK && n > 0) st = dev_fresh(name, a, value, &cv);
  if (st == DPL_OK && n > 0) st = dev_rows(name, a, off, cv, 1, 0, 1, 1, MODE_STORE, 1);
  dpl_release_n(2, (dpl_tensor *[]){off, cv});
  return st;
}

int dpl_fill_diagonal_(dpl_tensor *a, const dpl_tensor *value, int32_t wrap)
{
  const char *name = "fill_diagonal_";
  char b1[160];
  DPL_TRY(check_self(name, a));
  if (a->_ndim < 2)
    return dpl_errorf(DPL_EINVAL, "%s: expected a tensor with at least 2 dims, got %d", name, (int)a->_ndim);
  for (int i = 1; i < a->_ndim; i++)
    if (a->_ndim > 2 && a->_shape[i] != a->_shape[0])
      return dpl_errorf(DPL_EINVAL, "%s: all dims of a tensor with more than 2 dims must have the same size, got %s",
                        name, dpl_shape_str(a->_ndim, a->_shape, b1, sizeof b1));
  if (dpl_is_devmem(a)) return fill_diagonal_dev(a, value, wrap);
  char v[8];
  DPL_TRY(value_bytes(name, value, a->_dtype, v));
  int64_t es = dpl_elsize(a->_dtype);
  char *p = (char *)a->_data;
  if (a->_ndim > 2) {
    int64_t step = 0;
    for (int i = 0; i < a->_ndim; i++) step += a->_stride[i];
    for (int64_t i = 0; i < a->_shape[0]; i++) memcpy(p + i * step * es, v, (size_t)es);
    return DPL_OK;
  }
  /* 2-d: the positions k * (w + 1) of the row-major order; with wrap, past the first
   * min(h, w) (PyTorch's wrap of a tall matrix: the diagonal starts again below) */
  int64_t h = a->_shape[0], w = a->_shape[1], m = h < w ? h : w;
  for (int64_t k = 0;; k++) {
    if (!wrap && k >= m) break;
    int64_t f = k * (w + 1);
    if (f >= h * w) break;
    memcpy(p + ((f / w) * a->_stride[0] + (f % w) * a->_stride[1]) * es, v, (size_t)es);
  }
  return DPL_OK;
}
