/* dpl_tensor_internal.h: what the tensor files share and Lua never sees: the
 * storage struct, dtype helpers (sizes, half/bfloat16 conversion, load/store as
 * double), shape and broadcasting helpers, the strided N-ary element iterator,
 * the thread pool entry point, and the OpenBLAS function table. */
#ifndef DPL_TENSOR_INTERNAL_H
#define DPL_TENSOR_INTERNAL_H
#include "dpl.h"
#include "../host/dpl_internal.h"
#include "dpl_tensor_backend.h"
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define DPL_CONTIG 1u
/* the data is device memory (a real GPU): never dereferenced on the host */
#define DPL_DEVMEM 2u

enum { DPL_STORAGE_BLOCK = 0, DPL_STORAGE_MALLOC = 1, DPL_STORAGE_MMAP = 2, DPL_STORAGE_DEVICE = 3,
       DPL_STORAGE_SUB = 4 /* bytes of another storage (block = it, kept alive); counted there */ };

struct dpl_storage {
  _Atomic int64_t refcount;
  char *data;
  int64_t nbytes;
  int32_t devtype, devindex;
  int32_t kind;
  void *block;       /* what to free (block/malloc) or munmap (mmap) */
  size_t map_len;
  int64_t stamp;     /* the large-block clock when this storage was made (its data last written, roughly) */
  int32_t cold;      /* 1: made in memory not touched lately (fresh, or a long-freed block): its lines are
                      * not in cache, so kernels writing all of it may use streaming stores */
  int64_t serial;    /* when it was made: the count of storages made before it (dpl_storage_newer) */
};

/* 1 when a fresh result's storage is probably not in cache (see dpl_storage.cold) */
static inline int dpl_storage_cold(const struct dpl_tensor *t) { return t->_storage && t->_storage->cold; }

/* ---- dtypes ---- */
static inline int64_t dpl_elsize(int32_t dt)
{
  static const int8_t sz[8] = {4, 8, 2, 2, 4, 8, 1, 1};
  return (dt >= 0 && dt < 8) ? sz[dt] : 0;
}
static inline int dpl_dtype_valid(int32_t dt) { return dt >= 0 && dt < DPL_NUM_DTYPES; }
static inline int dpl_is_float(int32_t dt) { return dt <= DPL_BFLOAT16; }
/* PyTorch's dtype categories for promotion with 0-d tensors: 0 bool, 1 integer, 2 floating */
static inline int dpl_dtype_kind(int32_t dt) { return dt == DPL_BOOL ? 0 : dpl_is_float(dt) ? 2 : 1; }
static inline int dpl_is_int(int32_t dt) { return dt >= DPL_INT32; }

static inline float dpl_h2f(uint16_t h)
{
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, f;
  if (exp == 0) {
    if (man == 0) f = sign;
    else { /* subnormal */
      int e = -1;
      do { man <<= 1; e++; } while (!(man & 0x400u));
      f = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) f = sign | 0x7f800000u | (man << 13);
  else f = sign | ((exp + 112) << 23) | (man << 13);
  float r; memcpy(&r, &f, 4); return r;
}
static inline uint16_t dpl_f2h(float x)
{
  uint32_t f; memcpy(&f, &x, 4);
  uint32_t sign = (f >> 16) & 0x8000u;
  int32_t exp = (int32_t)((f >> 23) & 0xff);
  uint32_t man = f & 0x7fffffu;
  if (exp == 255) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
  int32_t e = exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
  return (uint16_t)h;
}
static inline float dpl_bf2f(uint16_t b) { uint32_t f = (uint32_t)b << 16; float r; memcpy(&r, &f, 4); return r; }
static inline uint16_t dpl_f2bf(float x)
{
  uint32_t f; memcpy(&f, &x, 4);
  if ((f & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((f >> 16) | 0x40u);
  f += 0x7fffu + ((f >> 16) & 1);
  return (uint16_t)(f >> 16);
}
/* A NaN as the one quiet NaN (0x7ff8...): what goes to Lua. LuaJIT keeps type tags in the high
 * bits of NaNs, so an arbitrary NaN (the bits of uninitialized memory, say 0xffffffff read as a
 * float) handed to Lua as a number can read back as a boolean or a GC object. */
static inline double dpl_canon_nan(double v) { return v != v ? (double)NAN : v; }
/* double -> integer without undefined behaviour (NaN -> 0, saturating) */
static inline int64_t dpl_d2i64(double v)
{
  if (!(v == v)) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}
static inline int32_t dpl_d2i32(double v)
{
  if (!(v == v)) return 0;
  if (v >= 2147483647.0) return INT32_MAX;
  if (v <= -2147483648.0) return INT32_MIN;
  return (int32_t)v;
}
static inline uint8_t dpl_d2u8(double v)
{
  if (!(v == v)) return 0;
  int64_t i = dpl_d2i64(v);
  return (uint8_t)(i & 0xff); /* wraps like a C cast of the integer */
}
static inline double dpl_load_f64(const void *p, int32_t dt)
{
  switch (dt) {
  case DPL_FLOAT32: return *(const float *)p;
  case DPL_FLOAT64: return *(const double *)p;
  case DPL_FLOAT16: return dpl_h2f(*(const uint16_t *)p);
  case DPL_BFLOAT16: return dpl_bf2f(*(const uint16_t *)p);
  case DPL_INT32: return *(const int32_t *)p;
  case DPL_INT64: return (double)*(const int64_t *)p;
  case DPL_UINT8: return *(const uint8_t *)p;
  default: return *(const uint8_t *)p ? 1.0 : 0.0;
  }
}
static inline int64_t dpl_load_i64(const void *p, int32_t dt)
{
  switch (dt) {
  case DPL_INT32: return *(const int32_t *)p;
  case DPL_INT64: return *(const int64_t *)p;
  case DPL_UINT8: return *(const uint8_t *)p;
  case DPL_BOOL: return *(const uint8_t *)p ? 1 : 0;
  default: return dpl_d2i64(dpl_load_f64(p, dt));
  }
}
static inline void dpl_store_f64(void *p, int32_t dt, double v)
{
  switch (dt) {
  case DPL_FLOAT32: *(float *)p = (float)v; break;
  case DPL_FLOAT64: *(double *)p = v; break;
  case DPL_FLOAT16: *(uint16_t *)p = dpl_f2h((float)v); break;
  case DPL_BFLOAT16: *(uint16_t *)p = dpl_f2bf((float)v); break;
  case DPL_INT32: *(int32_t *)p = dpl_d2i32(v); break;
  case DPL_INT64: *(int64_t *)p = dpl_d2i64(v); break;
  case DPL_UINT8: *(uint8_t *)p = dpl_d2u8(v); break;
  default: *(uint8_t *)p = v != 0; break;
  }
}
static inline void dpl_store_i64(void *p, int32_t dt, int64_t v)
{
  switch (dt) {
  case DPL_INT32: *(int32_t *)p = (int32_t)v; break;
  case DPL_INT64: *(int64_t *)p = v; break;
  case DPL_UINT8: *(uint8_t *)p = (uint8_t)v; break;
  case DPL_BOOL: *(uint8_t *)p = v != 0; break;
  default: dpl_store_f64(p, dt, (double)v); break;
  }
}

/* PyTorch's promotion lattice: bool < uint8 < int32 < int64 < f16/bf16 < f32 < f64. */
int32_t dpl_promote(int32_t a, int32_t b);

/* ---- tensors ---- */
/* New contiguous tensor on the device of `like` (or CPU when like is NULL). */
int dpl_new(const char *op, int32_t dtype, int32_t ndim, const int64_t *shape, const dpl_tensor *like,
            dpl_tensor **out);
int dpl_new_on(const char *op, int32_t dtype, int32_t ndim, const int64_t *shape, int32_t devtype,
               int32_t devindex, dpl_tensor **out);
/* A view handle with the given geometry on t's storage (no checks). */
int dpl_make_view(const dpl_tensor *t, int32_t ndim, const int64_t *shape, const int64_t *stride,
                  int64_t offset, dpl_tensor **out);
void dpl_update_contig(dpl_tensor *t);
static inline int dpl_is_contig(const dpl_tensor *t) { return (t->_flags & DPL_CONTIG) != 0; }
static inline int dpl_is_devmem(const dpl_tensor *t) { return t && (t->_flags & DPL_DEVMEM) != 0; }
/* 1 when a and b have the same shape */
static inline int dpl_same_shape(const dpl_tensor *a, const dpl_tensor *b)
{
  if (a->_ndim != b->_ndim) return 0;
  for (int i = 0; i < a->_ndim; i++)
    if (a->_shape[i] != b->_shape[i]) return 0;
  return 1;
}
/* 1 when the bytes dst spans and those src spans meet (views of one block that overlap). */
static inline int dpl_spans_overlap(const dpl_tensor *dst, const dpl_tensor *src)
{
  if (dst->_numel == 0 || src->_numel == 0) return 0;
  const dpl_tensor *t[2] = {dst, src};
  uintptr_t lo[2], hi[2];
  for (int k = 0; k < 2; k++) {
    int64_t mn = 0, mx = 0;
    for (int32_t i = 0; i < t[k]->_ndim; i++) {
      if (t[k]->_shape[i] <= 1) continue;
      int64_t e = (t[k]->_shape[i] - 1) * t[k]->_stride[i];
      if (e < 0) mn += e; else mx += e;
    }
    int64_t es = dpl_elsize(t[k]->_dtype);
    lo[k] = (uintptr_t)t[k]->_data + (uintptr_t)(mn * es);
    hi[k] = (uintptr_t)t[k]->_data + (uintptr_t)((mx + 1) * es);
  }
  return lo[0] < hi[1] && lo[1] < hi[0];
}
/* An in-place op's destination where several elements are one memory location (an
 * expanded view: a dim of size > 1 with stride 0): an error, as PyTorch's (the op would
 * apply several times to one element, or keep whichever write came last). */
static inline int dpl_check_writable(const char *op, const char *suffix, const dpl_tensor *t)
{
  if (t->_numel == 0) return DPL_OK; /* (an empty tensor's other dims may have stride 0) */
  for (int32_t i = 0; i < t->_ndim; i++)
    if (t->_shape[i] > 1 && t->_stride[i] == 0)
      return dpl_errorf(DPL_EINVAL, "%s%s: unsupported operation: more than one element of the written-to tensor refers "
                        "to a single memory location (an expanded view); clone() it before the in-place operation", op,
                        suffix);
  return DPL_OK;
}
/* 1 when a and b are the very same view (data, dtype, shape, strides). */
static inline int dpl_same_view(const dpl_tensor *a, const dpl_tensor *b)
{
  if (a->_data != b->_data || a->_dtype != b->_dtype || !dpl_same_shape(a, b)) return 0;
  for (int32_t i = 0; i < a->_ndim; i++)
    if (a->_shape[i] > 1 && a->_stride[i] != b->_stride[i]) return 0;
  return 1;
}
/* An operand of an in-place op on dst that overlaps dst without being the same view
 * (x:add_(x:t())): replaced by a copy (*tmp, released by the caller, after releasing a
 * previous *tmp); an element-wise loop would read elements it already wrote. */
int dpl_unalias(const char *op, const dpl_tensor *dst, dpl_tensor **tmp, const dpl_tensor **use);
/* Contiguous copy in dtype (a new handle on t when t already is contiguous in that dtype). */
/* the non-zero elements of device tensor a by the backend's compaction (one read back of their
 * count): flat = 1: their row-major positions [count], else their coordinates [count, ndim];
 * 0-based int64 on a's device (dpl_tensor_index.c) */
int dpl_nonzero_dev(const char *name, const dpl_tensor *a, int flat, dpl_tensor **out);
/* scatter_reduce's device fold after the checks (dpl_tensor_rows_dev.c; scatter_'s multiply too):
 * indices counted from base, checked on a host copy */
int dpl_scatter_reduce_run(const char *name, dpl_tensor *out, int32_t dim, const dpl_tensor *index,
                           const dpl_tensor *src, int32_t red, int32_t include_self, int32_t is_bool, int64_t base);
int dpl_contig_as(const char *op, const dpl_tensor *t, int32_t dtype, dpl_tensor **out);
/* *t (NULL allowed) replaced by a contiguous copy in dtype dt when its dtype differs
 * (the old handle released, *t NULL on failure): a kernel's result into the op's dtype */
int dpl_retype(const char *op, dpl_tensor **t, int32_t dt);
/* Compositions of backend ops for tensors in device memory (dpl_tensor_compose.c): the
 * temporaries of one op; each helper returns NULL after a failed step (z->st keeps the
 * first failure), dpl_dz_take hands a result over, dpl_dz_end releases the rest. */
enum { DPL_DZ_MAX = 40 };
typedef struct dpl_dz {
  dpl_tensor *t[DPL_DZ_MAX];
  int n, st;
  const char *name;
} dpl_dz;
void dpl_dz_init(dpl_dz *z, const char *name);
dpl_tensor *dpl_dz_bin(dpl_dz *z, int32_t op, const dpl_tensor *a, const dpl_tensor *b);
dpl_tensor *dpl_dz_bins(dpl_dz *z, int32_t op, const dpl_tensor *a, double s, int32_t reverse);
dpl_tensor *dpl_dz_un(dpl_dz *z, int32_t op, const dpl_tensor *a);
dpl_tensor *dpl_dz_where(dpl_dz *z, const dpl_tensor *c, const dpl_tensor *a, const dpl_tensor *b);
dpl_tensor *dpl_dz_as(dpl_dz *z, const dpl_tensor *t, int32_t dtype);
dpl_tensor *dpl_dz_clone(dpl_dz *z, const dpl_tensor *t, int32_t dtype);
dpl_tensor *dpl_dz_arange(dpl_dz *z, int64_t start, int64_t step, int64_t n, const dpl_tensor *like, int32_t nd,
                          int32_t d);
dpl_tensor *dpl_dz_index_select(dpl_dz *z, const dpl_tensor *a, int32_t dim, const dpl_tensor *idx);
void dpl_dz_masked_fill_(dpl_dz *z, dpl_tensor *a, const dpl_tensor *mask, double value);
dpl_tensor *dpl_dz_take(dpl_dz *z, dpl_tensor *t);
int dpl_dz_end(dpl_dz *z);
/* unique of a tensor in device memory (dpl_tensor_unique.c), after dpl_unique's checks */
int dpl_unique_dev(const char *name, const dpl_tensor *a, int32_t dim, dpl_tensor **out, dpl_tensor **inverse,
                   dpl_tensor **counts);
/* Releases t[0..n-1] (NULL entries allowed): an op's temporaries. */
void dpl_release_n(int n, dpl_tensor *const *t);
/* An op's ending with n results: when st is DPL_OK each res[k] is stored
 * through out[k] (released when out[k] is NULL), else every res[k] is
 * released; returns st. The shared tail of ops with one to three outputs. */
int dpl_hand_over(int st, int n, dpl_tensor *const *res, dpl_tensor **const *out);
/* cross_entropy / nll_loss on any device: floating input of shape [N, C] (or [C]) and
 * integer class indices of shape [N] (or []): *N samples of *C classes, or an error
 * naming the op (the caller has checked the handles and their device) */
int dpl_class_loss_dims(const char *name, const dpl_tensor *x, const dpl_tensor *target, int64_t *N, int64_t *C);
/* mse_loss on any device: input and target on one device, of one shape, the input
 * floating, or an error naming the op (the caller has checked the handles) */
int dpl_mse_check(const char *name, const dpl_tensor *a, const dpl_tensor *b);
/* copy with broadcasting and conversion, no checks */
void dpl_copy_raw(dpl_tensor *dst, const dpl_tensor *src);
/* A live tensor in host memory; a tensor in device memory fails with
 * "<op>: not implemented on cuda" (the guard of every CPU kernel). */
int dpl_check_tensor(const char *op, const char *name, const dpl_tensor *t);
/* A live tensor on any device (views, metadata, backend ops). */
int dpl_check_handle(const char *op, const char *name, const dpl_tensor *t);
/* dpl_tensor_to/copy_ for any device pair (the backend moves device data). */
int dpl_copy_any(const char *op, dpl_tensor *dst, const dpl_tensor *src);
int dpl_check_same_device(const char *op, const dpl_tensor *a, const dpl_tensor *b);
/* "cpu" or "cuda:k" into buf */
const char *dpl_device_str(int32_t devtype, int32_t devindex, char *buf, size_t n);
/* "[2, 3]" into buf */
const char *dpl_shape_str(int32_t ndim, const int64_t *shape, char *buf, size_t n);
/* Broadcast two shapes; returns DPL_EINVAL with a message on mismatch. */
int dpl_broadcast_shapes(const char *op, int32_t na, const int64_t *sa, int32_t nb, const int64_t *sb,
                         int32_t *nout, int64_t *out);
/* strides of t broadcast to shape (ndim >= t's), 0 where broadcast; -1 when impossible */
int dpl_broadcast_strides(const dpl_tensor *t, int32_t ndim, const int64_t *shape, int64_t *stride);
int64_t dpl_shape_numel(int32_t ndim, const int64_t *shape);

/* ---- element iterator ----
 * Up to 4 operands over one common shape, strides in bytes (0 = broadcast).
 * run() coalesces dims and calls fn on 1-D runs, split across threads when large. */
#define DPL_ITER_MAX 4
typedef void (*dpl_loop_fn)(char **ptr, const int64_t *stride, int64_t n, void *ctx);
typedef struct dpl_iter {
  int nargs, ndim;
  int64_t shape[DPL_MAX_DIMS];
  int64_t stride[DPL_ITER_MAX][DPL_MAX_DIMS];
  char *base[DPL_ITER_MAX];
  int64_t numel;
} dpl_iter;
/* ops[i] is viewed at shape (ndim, shape) with broadcasting; the caller checked shapes. */
void dpl_iter_init(dpl_iter *it, int nargs, dpl_tensor *const *ops, int32_t ndim, const int64_t *shape);
void dpl_iter_run(dpl_iter *it, dpl_loop_fn fn, void *ctx, int64_t grain);

/* ---- threads ---- */
typedef void (*dpl_range_fn)(int64_t lo, int64_t hi, void *ctx);
/* Calls fn on disjoint ranges covering [0, n), in parallel when n >= 2*grain. */
void dpl_parallel_for(int64_t n, int64_t grain, dpl_range_fn fn, void *ctx);
int dpl_threads(void);

/* ---- BLAS (dlopen'ed OpenBLAS, with a plain C fallback) ---- */
/* C = alpha * op(A) @ op(B) + beta * C, row-major, like cblas_{s,d}gemm. */
void dpl_gemm(int32_t dtype, int transa, int transb, int64_t m, int64_t n, int64_t k, double alpha,
              const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);
/* the same for the tensor ops (matmul, mm, bmm, addmm): small float32 products may go to
 * OpenBLAS first (dpl_sgemm_prefers_blas) */
void dpl_gemm_op(int32_t dtype, int transa, int transb, int64_t m, int64_t n, int64_t k, double alpha,
              const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);
void dpl_blas_set_threads(int n);
/* A function of the OpenBLAS library (LAPACK's sgetrf_, ...), loading it first; NULL when
 * the library or the symbol is missing (dpl_blas_info() then says why). */
void *dpl_blas_symbol(const char *name);
/* 1 when this CPU runs AVX-512F (x86-64 builds with GCC/Clang; else 0), detected once
 * (dpl_tensor_vmath.c, which owns the choice of vector ISA) */
int dpl_cpu_avx512f(void);
/* float32 GEMM with AVX-512 (dpl_tensor_gemm_avx512.c); 0 when it declines (no
 * AVX-512F, a small product, DPL_SGEMM=blas): the caller then runs OpenBLAS. */
int dpl_sgemm_avx512(int transa, int transb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* 1 when a tensor op's float32 product of this shape (matmul, mm, bmm, addmm) should go
 * straight to OpenBLAS on this CPU (under DPL_SGEMM_OWN_MIN multiply-adds: 2^20 on AMD
 * Zen 4, 2^15 elsewhere); conv2d's products do not ask */
int dpl_sgemm_prefers_blas(int transb, int64_t m, int64_t n, int64_t k);
/* C = A @ B + bias[i] along the rows (row-major, no transposes); 0 when it declines */
int dpl_sgemm_avx512_bias(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                          const float *bias, float *c, int64_t ldc);

/* ---- Winograd F(2x2, 3x3) convolution (dpl_tensor_winograd.c) ---- */
/* 1 when conv2d with these per-group channels, kernel, stride and dilation should
 * take the Winograd path (float32 only; the caller checks the dtype). */
int dpl_conv_winograd_fits(int64_t Cg, int64_t Og, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw);
/* out [N, O, OH, OW] = conv2d(x [N, C, H, W], w [O, C/groups, 3, 3]) + bias (may be
 * NULL), stride 1, padding (ph, pw), all contiguous float32; DPL_OK or DPL_ENOMEM. */
int dpl_conv_winograd_f32(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t groups, int64_t ph, int64_t pw,
                          const float *x, const float *w, const float *bias, float *out);
/* gw [O, C/groups, 3, 3] = the weight gradient of that conv for grad_out gy [N, O, OH, OW]
 * (overwritten, not added to), all contiguous float32; DPL_OK or DPL_ENOMEM. */
int dpl_conv_winograd_wgrad_f32(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t groups, int64_t ph,
                                int64_t pw, const float *x, const float *gy, float *gw);

/* ---- index tensors read in place ---- */
/* Index tensors as the user wrote them: int64 or int32, counted from base (0, or Lua's 1), no
 * shifted copy. With neg, -D..-1 also count from the end of a dim of size D (PyTorch's rule).
 * dpl_ix_map gives the 0-based offset; >= D (unsigned) means out of range: one compare when
 * no index is negative. */
static inline int64_t dpl_ix_at(const dpl_tensor *ix, int64_t k)
{
  return ix->_dtype == DPL_INT32 ? ((const int32_t *)ix->_data)[k] : ((const int64_t *)ix->_data)[k];
}
static inline uint64_t dpl_ix_map(int64_t v, int64_t base, int neg, uint64_t D)
{
  uint64_t u = (uint64_t)v - (uint64_t)base;
  if (neg && u >= D) u = (uint64_t)v + D;
  return u;
}
/* idx (host memory, checked live) as a contiguous int64 or int32 tensor: a new handle on idx
 * when it already is one (no copy), a copy when it shares memory with self (NULL: not
 * checked; an op writing self); floating and bool dtypes are an error naming what */
int dpl_ix_contig(const char *op, const char *what, const dpl_tensor *idx, const dpl_tensor *self, dpl_tensor **ix);
/* One pass over ix (from dpl_ix_contig): every entry in range for a dim of size D (see
 * dpl_ix_map), else the error for the first bad one (dpl_ix_range_error). *any_neg (NULL
 * allowed): whether an entry counted from the end (the loops then map with neg). */
int dpl_ix_check(const char *op, const dpl_tensor *ix, int64_t base, int neg, int32_t dim, int64_t D, int *any_neg);
/* The error for index v out of range for dim of size D: "index <v - base> is out of range for
 * dim <dim> of size D (expected 0..D-1, 0-based)" (dpl.capi says it 1-based), or, for a negative
 * v with neg, "index v is out of range for a dim of size D (expected 1..D, or -D..-1 from the end)"
 * (base 1; 0..D-1 for base 0). Returns DPL_EINVAL. */
int dpl_ix_range_error(const char *op, int64_t v, int64_t base, int neg, int32_t dim, int64_t D);

/* ---- random ---- */
/* Reserves n counters of the global generator; returns the key and first counter. */
void dpl_rng_reserve(uint64_t n, uint64_t *key, uint64_t *start);

/* x86-64: hot loops get an AVX2 clone picked at load time (ifunc); the SSE2
 * baseline stays for older CPUs. In-cache float loops run ~1.7x faster. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(DPL_NO_CLONES)
#define DPL_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DPL_CLONES
#endif

#define DPL_TRY(x) do { int st_ = (x); if (st_ != DPL_OK) return st_; } while (0)
#endif
