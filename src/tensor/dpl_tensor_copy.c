/* dpl_tensor_copy.c: moving and converting data: copy_ between any dtypes and
 * devices (with broadcasting; device memory through the backend), contiguous
 * copies, .to(), fill, element get/set for Lua (device tensors staged through
 * a host copy), and the filled constructors (arange, linspace, eye). */
#include "dpl_tensor_internal.h"
#include "dpl_stream_copy.h"
#include <stdio.h>

#define GRAIN 65536

/* a big copy into a fresh result in cold memory (dpl_storage_cold, as the elementwise kernels):
 * streaming stores skip the read-for-ownership of lines that are not in cache anyway (a 4 MB
 * clone: ~110 us instead of ~145 us here); memmove otherwise. d and s do not overlap. */
#define STREAM_BYTES ((size_t)1 << 20)
static void copy_fresh(dpl_tensor *dst, const dpl_tensor *src, size_t nb)
{
  if (nb < STREAM_BYTES || !dpl_storage_cold(dst)) memcpy(dst->_data, src->_data, nb);
  else dpl_stream_copy(dst->_data, src->_data, nb);
}

typedef struct conv_ctx { int32_t dd, sd; } conv_ctx;

#define CONV_CASE(DT, ST, EXPR)                                                       \
  do {                                                                                \
    if (sd_ == sizeof(ST) && dd_ == sizeof(DT)) {                                     \
      DT *d = (DT *)p[0]; const ST *s = (const ST *)p[1];                             \
      for (int64_t i = 0; i < n; i++) { ST x = s[i]; d[i] = (EXPR); }                 \
    } else {                                                                          \
      for (int64_t i = 0; i < n; i++) {                                               \
        ST x = *(const ST *)(p[1] + i * st[1]); *(DT *)(p[0] + i * st[0]) = (EXPR);   \
      }                                                                               \
    }                                                                                 \
  } while (0)

static void copy_same(char **p, const int64_t *st, int64_t n, void *vctx)
{
  conv_ctx *c = vctx;
  int64_t es = dpl_elsize(c->dd);
  if (st[0] == es && st[1] == es) { memmove(p[0], p[1], (size_t)(n * es)); return; }
  switch (es) {
  case 1: for (int64_t i = 0; i < n; i++) *(uint8_t *)(p[0] + i * st[0]) = *(const uint8_t *)(p[1] + i * st[1]); break;
  case 2: for (int64_t i = 0; i < n; i++) *(uint16_t *)(p[0] + i * st[0]) = *(const uint16_t *)(p[1] + i * st[1]); break;
  case 4: for (int64_t i = 0; i < n; i++) *(uint32_t *)(p[0] + i * st[0]) = *(const uint32_t *)(p[1] + i * st[1]); break;
  default: for (int64_t i = 0; i < n; i++) *(uint64_t *)(p[0] + i * st[0]) = *(const uint64_t *)(p[1] + i * st[1]); break;
  }
}

DPL_CLONES static void copy_conv(char **p, const int64_t *st, int64_t n, void *vctx)
{
  conv_ctx *c = vctx;
  int64_t dd_ = st[0], sd_ = st[1];
  int32_t dd = c->dd, sd = c->sd;
  /* the common float pairs get typed loops */
  if (dd == DPL_FLOAT32 && sd == DPL_FLOAT64) { CONV_CASE(float, double, (float)x); return; }
  if (dd == DPL_FLOAT64 && sd == DPL_FLOAT32) { CONV_CASE(double, float, (double)x); return; }
  if (dd == DPL_FLOAT32 && sd == DPL_INT64) { CONV_CASE(float, int64_t, (float)x); return; }
  if (dd == DPL_FLOAT32 && sd == DPL_INT32) { CONV_CASE(float, int32_t, (float)x); return; }
  if (dd == DPL_FLOAT32 && sd == DPL_UINT8) { CONV_CASE(float, uint8_t, (float)x); return; }
  if (dd == DPL_FLOAT64 && sd == DPL_INT64) { CONV_CASE(double, int64_t, (double)x); return; }
  if (dd == DPL_INT64 && sd == DPL_INT32) { CONV_CASE(int64_t, int32_t, (int64_t)x); return; }
  if (dd == DPL_INT32 && sd == DPL_INT64) { CONV_CASE(int32_t, int64_t, (int32_t)x); return; }
  if (dd == DPL_INT64 && sd == DPL_FLOAT32) { CONV_CASE(int64_t, float, dpl_d2i64(x)); return; }
  if (dd == DPL_FLOAT32 && sd == DPL_BOOL) { CONV_CASE(float, uint8_t, x ? 1.0f : 0.0f); return; }
  if (dd == DPL_FLOAT32 && sd == DPL_FLOAT16) { CONV_CASE(float, uint16_t, dpl_h2f(x)); return; }
  if (dd == DPL_FLOAT16 && sd == DPL_FLOAT32) { CONV_CASE(uint16_t, float, dpl_f2h(x)); return; }
  if (dd == DPL_FLOAT32 && sd == DPL_BFLOAT16) { CONV_CASE(float, uint16_t, dpl_bf2f(x)); return; }
  if (dd == DPL_BFLOAT16 && sd == DPL_FLOAT32) { CONV_CASE(uint16_t, float, dpl_f2bf(x)); return; }
  if (dpl_is_int(dd) && dpl_is_int(sd)) {
    for (int64_t i = 0; i < n; i++) dpl_store_i64(p[0] + i * st[0], dd, dpl_load_i64(p[1] + i * st[1], sd));
  } else if (sd == DPL_INT64) {
    for (int64_t i = 0; i < n; i++) dpl_store_f64(p[0] + i * st[0], dd, (double)*(const int64_t *)(p[1] + i * st[1]));
  } else {
    for (int64_t i = 0; i < n; i++) dpl_store_f64(p[0] + i * st[0], dd, dpl_load_f64(p[1] + i * st[1], sd));
  }
}

/* no checks; dst and src have the same numel shape-wise after broadcasting */
void dpl_copy_raw(dpl_tensor *dst, const dpl_tensor *src)
{
  dpl_tensor *ops[2] = {dst, (dpl_tensor *)src};
  conv_ctx c = {dst->_dtype, src->_dtype};
  if (dst->_dtype == src->_dtype && dpl_is_contig(dst) && dpl_is_contig(src) && dst->_numel == src->_numel) {
    if (dst->_data != src->_data) memmove(dst->_data, src->_data, (size_t)(dst->_numel * dpl_elsize(dst->_dtype)));
    return;
  }
  dpl_iter it;
  dpl_iter_init(&it, 2, ops, dst->_ndim, dst->_shape);
  dpl_iter_run(&it, dst->_dtype == src->_dtype ? copy_same : copy_conv, &c, GRAIN);
}

int dpl_copy_any(const char *op, dpl_tensor *dst, const dpl_tensor *src)
{
  if (!dpl_is_devmem(dst) && !dpl_is_devmem(src)) {
    /* overlapping views of one block that memmove does not cover (strided, broadcast,
     * converted: x:copy_(x:t())): the loop would read elements it already wrote, so the
     * source goes through a temporary (PyTorch refuses these copies) */
    int plain = dst->_dtype == src->_dtype && dpl_is_contig(dst) && dpl_is_contig(src) && dst->_numel == src->_numel;
    int same = dst->_data == src->_data && dst->_dtype == src->_dtype && dpl_same_shape(dst, src) &&
               !memcmp(dst->_stride, src->_stride, sizeof(int64_t) * (size_t)dst->_ndim);
    if (same) return DPL_OK;
    if (!plain && dpl_spans_overlap(dst, src)) {
      dpl_tensor *tmp = NULL;
      DPL_TRY(dpl_new(op, src->_dtype, src->_ndim, src->_shape, src, &tmp));
      dpl_copy_raw(tmp, src);
      dpl_copy_raw(dst, tmp);
      dpl_tensor_release(tmp);
      return DPL_OK;
    }
    dpl_copy_raw(dst, src);
    return DPL_OK;
  }
  dpl_bk_args k = {.op = DPL_BK_COPY, .inout = dst, .in = {src}, .name = op};
  return dpl_bk_call(&k);
}

int dpl_tensor_copy_(dpl_tensor *dst, const dpl_tensor *src)
{
  DPL_TRY(dpl_check_handle("copy_", "dst", dst));
  DPL_TRY(dpl_check_handle("copy_", "src", src));
  DPL_TRY(dpl_check_writable("copy_", "", dst));
  int64_t st[DPL_MAX_DIMS];
  if (dpl_broadcast_strides(src, dst->_ndim, dst->_shape, st) != 0) {
    char b1[160], b2[160];
    return dpl_errorf(DPL_EINVAL, "copy_: source of shape %s cannot be broadcast to destination shape %s",
                      dpl_shape_str(src->_ndim, src->_shape, b1, sizeof b1),
                      dpl_shape_str(dst->_ndim, dst->_shape, b2, sizeof b2));
  }
  return dpl_copy_any("copy_", dst, src);
}

int dpl_unalias(const char *op, const dpl_tensor *dst, dpl_tensor **tmp, const dpl_tensor **use)
{
  const dpl_tensor *u = *use;
  if (dpl_same_view(dst, u) || !dpl_spans_overlap(dst, u)) return DPL_OK;
  dpl_tensor *c = NULL;
  DPL_TRY(dpl_new(op, u->_dtype, u->_ndim, u->_shape, u, &c));
  int st = dpl_copy_any(op, c, u);
  if (st != DPL_OK) { dpl_tensor_release(c); return st; }
  dpl_tensor_release(*tmp);
  *tmp = c;
  *use = c;
  return DPL_OK;
}

int dpl_contig_as(const char *op, const dpl_tensor *t, int32_t dtype, dpl_tensor **out)
{
  if (dpl_is_contig(t) && t->_dtype == dtype) return dpl_make_view(t, t->_ndim, t->_shape, t->_stride, t->_offset, out);
  DPL_TRY(dpl_new(op, dtype, t->_ndim, t->_shape, t, out));
  int st = dpl_copy_any(op, *out, t);
  if (st != DPL_OK) { dpl_tensor_release(*out); *out = NULL; }
  return st;
}

int dpl_retype(const char *op, dpl_tensor **t, int32_t dt)
{
  if (!*t || (*t)->_dtype == dt) return DPL_OK;
  dpl_tensor *r = NULL;
  int st = dpl_contig_as(op, *t, dt, &r);
  dpl_tensor_release(*t);
  *t = r;
  return st;
}

int dpl_tensor_to(const dpl_tensor *t, int32_t dtype, int32_t devtype, int32_t devindex, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "to: out is NULL");
  *out = NULL;
  DPL_TRY(dpl_check_handle("to", "tensor", t));
  if (!dpl_dtype_valid(dtype)) return dpl_errorf(DPL_EINVAL, "to: unknown dtype id %d (expected 0..7)", (int)dtype);
  DPL_TRY(dpl_new_on("to", dtype, t->_ndim, t->_shape, devtype, devindex, out));
  if (dtype == t->_dtype && !dpl_is_devmem(t) && !dpl_is_devmem(*out) && dpl_is_contig(t)) { /* a fresh block: no overlap */
    copy_fresh(*out, t, (size_t)(t->_numel * dpl_elsize(dtype)));
    return DPL_OK;
  }
  int st = dpl_copy_any("to", *out, t);
  if (st != DPL_OK) { dpl_tensor_release(*out); *out = NULL; }
  return st;
}

/* a host copy of a device tensor (a new handle on t when t is on the host) */
static int to_host(const char *op, const dpl_tensor *t, dpl_tensor **out)
{
  if (!dpl_is_devmem(t)) return dpl_make_view(t, t->_ndim, t->_shape, t->_stride, t->_offset, out);
  DPL_TRY(dpl_new_on(op, t->_dtype, t->_ndim, t->_shape, DPL_DEVICE_CPU, 0, out));
  int st = dpl_copy_any(op, *out, t);
  if (st != DPL_OK) { dpl_tensor_release(*out); *out = NULL; }
  return st;
}

typedef struct fill_ctx { int32_t dt; double v; int64_t iv; int use_int; } fill_ctx;

DPL_CLONES static void fill_loop(char **p, const int64_t *st, int64_t n, void *vctx)
{
  fill_ctx *c = vctx;
  switch (c->dt) {
  case DPL_FLOAT32: { float v = (float)c->v; for (int64_t i = 0; i < n; i++) *(float *)(p[0] + i * st[0]) = v; break; }
  case DPL_FLOAT64: { double v = c->v; for (int64_t i = 0; i < n; i++) *(double *)(p[0] + i * st[0]) = v; break; }
  default: {
    char buf[8];
    if (c->use_int) dpl_store_i64(buf, c->dt, c->iv); else dpl_store_f64(buf, c->dt, c->v);
    int64_t es = dpl_elsize(c->dt);
    for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * st[0], buf, (size_t)es);
  }
  }
}

static int fill_common(const char *op, dpl_tensor *t, double v, int64_t iv, int use_int)
{
  DPL_TRY(dpl_check_handle(op, "tensor", t));
  if (dpl_is_devmem(t)) {
    dpl_bk_args k = {.op = DPL_BK_FILL, .inout = t, .d = {v}, .l = {iv}, .i = {use_int}, .name = op};
    return dpl_bk_call(&k);
  }
  fill_ctx c = {t->_dtype, v, iv, use_int};
  dpl_iter it;
  dpl_iter_init(&it, 1, &t, t->_ndim, t->_shape);
  dpl_iter_run(&it, fill_loop, &c, GRAIN);
  return DPL_OK;
}

int dpl_tensor_fill_(dpl_tensor *t, double value) { return fill_common("fill_", t, value, 0, 0); }
int dpl_tensor_fill_i64_(dpl_tensor *t, int64_t value) { return fill_common("fill_", t, (double)value, value, 1); }

static int elem_ptr(const char *op, const dpl_tensor *t, int64_t pos, const char **p)
{
  DPL_TRY(dpl_check_tensor(op, "tensor", t));
  if (pos < 0 || pos >= t->_numel)
    return dpl_errorf(DPL_EINVAL, "%s: position %lld out of range for a tensor of %lld elements", op, (long long)pos,
                      (long long)t->_numel);
  int64_t off = 0, rem = pos;
  for (int d = t->_ndim - 1; d >= 0; d--) {
    off += (rem % t->_shape[d]) * t->_stride[d];
    rem /= t->_shape[d];
  }
  *p = (const char *)t->_data + off * dpl_elsize(t->_dtype);
  return DPL_OK;
}

/* element pos of a device tensor, copied into a 0-d host tensor */
static int stage_elem(const dpl_tensor *t, int64_t pos, dpl_tensor **host)
{
  DPL_TRY(dpl_check_handle("get", "tensor", t));
  if (pos < 0 || pos >= t->_numel)
    return dpl_errorf(DPL_EINVAL, "get: position %lld out of range for a tensor of %lld elements", (long long)pos,
                      (long long)t->_numel);
  int64_t off = 0, rem = pos;
  for (int d = t->_ndim - 1; d >= 0; d--) {
    off += (rem % t->_shape[d]) * t->_stride[d];
    rem /= t->_shape[d];
  }
  dpl_tensor *v = NULL;
  DPL_TRY(dpl_make_view(t, 0, NULL, NULL, t->_offset + off, &v));
  int st = to_host("get", v, host);
  dpl_tensor_release(v);
  return st;
}

/* The element at pos as host bytes: in place for host tensors, else staged into
 * *hold (released by the caller). */
static int elem_host(const dpl_tensor *t, int64_t pos, const char **p, int32_t *dt, dpl_tensor **hold)
{
  *hold = NULL;
  if (dpl_is_devmem(t)) {
    DPL_TRY(stage_elem(t, pos, hold));
    *p = (*hold)->_data;
    *dt = (*hold)->_dtype;
    return DPL_OK;
  }
  *dt = t->_dtype;
  return elem_ptr("get", t, pos, p);
}

int dpl_tensor_get(const dpl_tensor *t, int64_t pos, double *out)
{
  const char *p;
  int32_t dt;
  dpl_tensor *h;
  if (!out) return dpl_errorf(DPL_EINVAL, "get: out is NULL");
  DPL_TRY(elem_host(t, pos, &p, &dt, &h));
  *out = dpl_canon_nan(dpl_load_f64(p, dt));
  dpl_tensor_release(h);
  return DPL_OK;
}

int dpl_tensor_get_i64(const dpl_tensor *t, int64_t pos, int64_t *out)
{
  const char *p;
  int32_t dt;
  dpl_tensor *h;
  if (!out) return dpl_errorf(DPL_EINVAL, "get: out is NULL");
  DPL_TRY(elem_host(t, pos, &p, &dt, &h));
  *out = dpl_load_i64(p, dt);
  dpl_tensor_release(h);
  return DPL_OK;
}

int dpl_tensor_set_from_f64(dpl_tensor *t, const double *values, int64_t n)
{
  if (dpl_is_devmem(t)) {
    dpl_tensor *h = NULL;
    DPL_TRY(dpl_new_on("set", t->_dtype, t->_ndim, t->_shape, DPL_DEVICE_CPU, 0, &h));
    int st = dpl_tensor_set_from_f64(h, values, n);
    if (st == DPL_OK) st = dpl_tensor_copy_(t, h);
    dpl_tensor_release(h);
    return st;
  }
  DPL_TRY(dpl_check_tensor("set", "tensor", t));
  if (!dpl_is_contig(t)) return dpl_errorf(DPL_EINVAL, "set: expected a contiguous tensor");
  if (n != t->_numel)
    return dpl_errorf(DPL_EINVAL, "set: expected %lld values, got %lld", (long long)t->_numel, (long long)n);
  if (n > 0 && !values) return dpl_errorf(DPL_EINVAL, "set: values is NULL");
  int64_t es = dpl_elsize(t->_dtype);
  for (int64_t i = 0; i < n; i++) dpl_store_f64((char *)t->_data + i * es, t->_dtype, values[i]);
  return DPL_OK;
}

int dpl_tensor_read_f64(const dpl_tensor *t, double *values, int64_t n)
{
  if (dpl_is_devmem(t)) {
    dpl_tensor *h = NULL;
    DPL_TRY(dpl_check_handle("read", "tensor", t));
    DPL_TRY(to_host("read", t, &h));
    int st = dpl_tensor_read_f64(h, values, n);
    dpl_tensor_release(h);
    return st;
  }
  DPL_TRY(dpl_check_tensor("read", "tensor", t));
  if (n != t->_numel)
    return dpl_errorf(DPL_EINVAL, "read: expected room for %lld values, got %lld", (long long)t->_numel, (long long)n);
  if (n > 0 && !values) return dpl_errorf(DPL_EINVAL, "read: values is NULL");
  int64_t idx[DPL_MAX_DIMS] = {0};
  int nd = t->_ndim;
  int64_t es = dpl_elsize(t->_dtype);
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    for (int d = 0; d < nd; d++) off += idx[d] * t->_stride[d];
    values[i] = dpl_canon_nan(dpl_load_f64((const char *)t->_data + off * es, t->_dtype));
    for (int d = nd - 1; d >= 0; d--) {
      if (++idx[d] < t->_shape[d]) break;
      idx[d] = 0;
    }
  }
  return DPL_OK;
}

/* A filled constructor on a real GPU: st is how building it on the host into *h
 * went; then moved to the device into *out, the host tensor released. */
static int moved_from_host(int st, dpl_tensor **h, int32_t dtype, int32_t devtype, int32_t devindex, dpl_tensor **out)
{
  if (st == DPL_OK) st = dpl_tensor_to(*h, dtype, devtype, devindex, out);
  dpl_tensor_release(*h);
  return st;
}

int dpl_tensor_arange(double start, double step, int64_t n, int32_t dtype, int32_t devtype, int32_t devindex,
                      dpl_tensor **out)
{
  if (devtype == DPL_DEVICE_CUDA && dpl_backend_get() && out) { /* real GPUs: built on the host, then moved */
    dpl_tensor *h = NULL;
    return moved_from_host(dpl_tensor_arange(start, step, n, dtype, DPL_DEVICE_CPU, 0, &h), &h, dtype, devtype, devindex, out);
  }
  if (n < 0) return dpl_errorf(DPL_EINVAL, "arange: negative length %lld", (long long)n);
  if (!(step == step) || !(start == start)) return dpl_errorf(DPL_EINVAL, "arange: start and step must not be NaN");
  DPL_TRY(dpl_new_on("arange", dtype, 1, &n, devtype, devindex, out));
  dpl_tensor *t = *out;
  int64_t es = dpl_elsize(dtype);
  if (dpl_is_int(dtype) && start == floor(start) && step == floor(step)) {
    int64_t s = dpl_d2i64(start), k = dpl_d2i64(step);
    for (int64_t i = 0; i < n; i++) dpl_store_i64((char *)t->_data + i * es, dtype, s + i * k);
  } else {
    for (int64_t i = 0; i < n; i++) dpl_store_f64((char *)t->_data + i * es, dtype, start + (double)i * step);
  }
  return DPL_OK;
}

int dpl_tensor_linspace(double start, double end, int64_t n, int32_t dtype, int32_t devtype, int32_t devindex,
                        dpl_tensor **out)
{
  if (devtype == DPL_DEVICE_CUDA && dpl_backend_get() && out) { /* real GPUs: built on the host, then moved */
    dpl_tensor *h = NULL;
    return moved_from_host(dpl_tensor_linspace(start, end, n, dtype, DPL_DEVICE_CPU, 0, &h), &h, dtype, devtype, devindex, out);
  }
  if (n < 0) return dpl_errorf(DPL_EINVAL, "linspace: steps must be >= 0, got %lld", (long long)n);
  DPL_TRY(dpl_new_on("linspace", dtype, 1, &n, devtype, devindex, out));
  dpl_tensor *t = *out;
  int64_t es = dpl_elsize(dtype);
  double step = n > 1 ? (end - start) / (double)(n - 1) : 0;
  int64_t half = n / 2;
  for (int64_t i = 0; i < n; i++) {
    /* like PyTorch: from the start for the first half, from the end for the second */
    double v = n == 1 ? start : i < half ? start + step * (double)i : end - step * (double)(n - 1 - i);
    dpl_store_f64((char *)t->_data + i * es, dtype, v);
  }
  return DPL_OK;
}

int dpl_tensor_eye(int64_t n, int64_t m, int32_t dtype, int32_t devtype, int32_t devindex, dpl_tensor **out)
{
  if (devtype == DPL_DEVICE_CUDA && dpl_backend_get() && out) { /* real GPUs: built on the host, then moved */
    dpl_tensor *h = NULL;
    return moved_from_host(dpl_tensor_eye(n, m, dtype, DPL_DEVICE_CPU, 0, &h), &h, dtype, devtype, devindex, out);
  }
  if (n < 0 || m < 0) return dpl_errorf(DPL_EINVAL, "eye: sizes must be >= 0, got %lld x %lld", (long long)n, (long long)m);
  int64_t shape[2] = {n, m};
  DPL_TRY(dpl_new_on("eye", dtype, 2, shape, devtype, devindex, out));
  dpl_tensor *t = *out;
  memset(t->_data, 0, (size_t)(t->_numel * dpl_elsize(dtype)));
  int64_t es = dpl_elsize(dtype);
  for (int64_t i = 0; i < n && i < m; i++) dpl_store_f64((char *)t->_data + (i * m + i) * es, dtype, 1.0);
  return DPL_OK;
}
