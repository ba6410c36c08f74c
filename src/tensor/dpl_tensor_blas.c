/* dpl_tensor_blas.c: matrix products. OpenBLAS is dlopen'ed on first use (so
 * `dplhost -e ''` never pays for its thread-pool start), with its core type
 * chosen safely when the library does not recognise the CPU; a plain C gemm
 * stands in when it is missing. matmul/mm/bmm/addmm hand strided and
 * transposed operands to cblas_{s,d}gemm as leading dimensions and transpose
 * flags instead of copying. */
#define _GNU_SOURCE
#include "dpl_tensor_internal.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { RowMajor = 101, NoTrans = 111, Trans = 112 };
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double *, int, const double *, int, double, double *,
                         int);
typedef void (*setthreads_fn)(int);
typedef char *(*str_fn)(void);

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static sgemm_fn p_sgemm;
static dgemm_fn p_dgemm;
static setthreads_fn p_setthreads;
static str_fn p_corename, p_config;
static char blas_desc[512];
static void *blas_handle; /* the library the gemm (and LAPACK's routines) come from */
static _Atomic int blas_threads_wanted;

/* The core OpenBLAS 0.3.21 should use on this CPU when it does not know the model
 * (it then falls back to a generic SSE kernel): the best one whose features the CPU has. */
static const char *suggest_coretype(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd")) {
    if (__builtin_cpu_supports("avx512bf16")) return "Cooperlake";
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  if (__builtin_cpu_supports("avx")) return "Sandybridge";
#endif
  return NULL;
}

static int generic_core(const char *name)
{
  return name && (strcasecmp(name, "prescott") == 0 || strcasecmp(name, "core2") == 0 ||
                  strcasecmp(name, "katmai") == 0 || strcasecmp(name, "coppermine") == 0 ||
                  strcasecmp(name, "northwood") == 0 || strcasecmp(name, "banias") == 0 ||
                  strcasecmp(name, "atom") == 0 || strcasecmp(name, "nehalem") == 0 || strcasecmp(name, "unknown") == 0);
}

static void *open_blas(void)
{
  const char *names[] = {"libopenblas.so.0", "libopenblas.so", "libopenblasp.so.0"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  return NULL;
}

static void load_blas(void)
{
  const char *user_core = getenv("OPENBLAS_CORETYPE");
  int set_threads_env = getenv("OPENBLAS_NUM_THREADS") == NULL && getenv("OMP_NUM_THREADS") == NULL;
  char nt[16];
  if (set_threads_env) { /* start OpenBLAS with our thread count, not one per core */
    snprintf(nt, sizeof nt, "%d", dpl_threads());
    setenv("OPENBLAS_NUM_THREADS", nt, 1);
  }
  const char *chosen = NULL;
  if (!user_core || !*user_core) {
    /* Probe what OpenBLAS picks by itself; when it is a generic core on a CPU with
     * AVX2/AVX-512, reload with the matching core type (the CPU has every feature that core uses). */
    void *h = open_blas();
    if (h) {
      str_fn core = (str_fn)dlsym(h, "openblas_get_corename");
      const char *name = core ? core() : NULL;
      const char *better = suggest_coretype();
      if (generic_core(name) && better) chosen = better;
      dlclose(h);
    }
    if (chosen) setenv("OPENBLAS_CORETYPE", chosen, 1);
  }
  void *h = open_blas();
  if (chosen) unsetenv("OPENBLAS_CORETYPE");
  if (set_threads_env) unsetenv("OPENBLAS_NUM_THREADS");
  if (!h) {
    snprintf(blas_desc, sizeof blas_desc, "builtin C gemm (OpenBLAS not found: %s)", dlerror());
    return;
  }
  blas_handle = h;
  p_sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
  p_dgemm = (dgemm_fn)dlsym(h, "cblas_dgemm");
  p_setthreads = (setthreads_fn)dlsym(h, "openblas_set_num_threads");
  p_corename = (str_fn)dlsym(h, "openblas_get_corename");
  p_config = (str_fn)dlsym(h, "openblas_get_config");
  if (!p_sgemm || !p_dgemm) {
    p_sgemm = NULL;
    p_dgemm = NULL;
    snprintf(blas_desc, sizeof blas_desc, "builtin C gemm (libopenblas lacks cblas_sgemm)");
    return;
  }
  int want = atomic_load(&blas_threads_wanted);
  if (p_setthreads) p_setthreads(want > 0 ? want : dpl_threads());
  snprintf(blas_desc, sizeof blas_desc, "%s; core %s%s", p_config ? p_config() : "OpenBLAS",
           p_corename ? p_corename() : "?",
           chosen ? " (set by dplhost: OpenBLAS did not recognise this CPU)" :
           (user_core && *user_core) ? " (from OPENBLAS_CORETYPE)" : "");
}

const char *dpl_blas_info(void)
{
  pthread_once(&blas_once, load_blas);
  return blas_desc;
}

void *dpl_blas_symbol(const char *name)
{
  pthread_once(&blas_once, load_blas);
  return blas_handle ? dlsym(blas_handle, name) : NULL;
}

void dpl_blas_set_threads(int n)
{
  atomic_store(&blas_threads_wanted, n);
  if (p_setthreads) p_setthreads(n); /* only when already loaded: never load it just for this */
}

/* ---- fallback gemm (row-major) ---- */
#define REF_GEMM(NAME, T)                                                                                         \
  static void NAME(int ta, int tb, int64_t m, int64_t n, int64_t k, T alpha, const T *a, int64_t lda, const T *b, \
                   int64_t ldb, T beta, T *c, int64_t ldc)                                                        \
  {                                                                                                               \
    for (int64_t i = 0; i < m; i++) {                                                                             \
      T *cr = c + i * ldc;                                                                                        \
      for (int64_t j = 0; j < n; j++) cr[j] = beta == 0 ? 0 : beta * cr[j];                                       \
      for (int64_t p = 0; p < k; p++) {                                                                           \
        T av = alpha * (ta ? a[p * lda + i] : a[i * lda + p]);                                                    \
        if (!tb) { const T *br = b + p * ldb; for (int64_t j = 0; j < n; j++) cr[j] += av * br[j]; }              \
        else { for (int64_t j = 0; j < n; j++) cr[j] += av * b[j * ldb + p]; }                                    \
      }                                                                                                           \
    }                                                                                                             \
  }
REF_GEMM(ref_sgemm, float)
REF_GEMM(ref_dgemm, double)
/* int64 in unsigned arithmetic: wraps modulo 2^64 (as torch's integer matmul), never
 * signed overflow (undefined behaviour); int64_t and uint64_t share a representation */
REF_GEMM(ref_igemm, uint64_t)

static void gemm_impl(int op, int32_t dtype, int transa, int transb, int64_t m, int64_t n, int64_t k, double alpha,
                      const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
  if (m == 0 || n == 0) return;
  if (dtype == DPL_INT64) {
    ref_igemm(transa, transb, m, n, k, (uint64_t)(int64_t)alpha, a, lda, b, ldb, (uint64_t)(int64_t)beta, c, ldc);
    return;
  }
  pthread_once(&blas_once, load_blas);
  int big = m > INT32_MAX / 2 || n > INT32_MAX / 2 || k > INT32_MAX / 2 || lda > INT32_MAX / 2 || ldb > INT32_MAX / 2 ||
            ldc > INT32_MAX / 2;
  if (k == 0) { /* BLAS may not touch C when k == 0: do the beta scaling here */
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        if (dtype == DPL_FLOAT32) { float *x = (float *)c + i * ldc + j; *x = beta == 0 ? 0 : (float)beta * *x; }
        else { double *x = (double *)c + i * ldc + j; *x = beta == 0 ? 0 : beta * *x; }
      }
    return;
  }
  if (dtype == DPL_FLOAT32) {
    if (!(op && dpl_sgemm_prefers_blas(transb, m, n, k)) &&
        dpl_sgemm_avx512(transa, transb, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, c, ldc))
      return;
    if (p_sgemm && !big)
      p_sgemm(RowMajor, transa ? Trans : NoTrans, transb ? Trans : NoTrans, (int)m, (int)n, (int)k, (float)alpha, a,
              (int)lda, b, (int)ldb, (float)beta, c, (int)ldc);
    else ref_sgemm(transa, transb, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, c, ldc);
  } else {
    if (p_dgemm && !big)
      p_dgemm(RowMajor, transa ? Trans : NoTrans, transb ? Trans : NoTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
              (int)ldb, beta, c, (int)ldc);
    else ref_dgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

void dpl_gemm(int32_t dtype, int transa, int transb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
              int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
  gemm_impl(0, dtype, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void dpl_gemm_op(int32_t dtype, int transa, int transb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                 int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
  gemm_impl(1, dtype, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* ---- operands ---- */
/* How a [rows, cols] matrix with strides (s0, s1) goes to BLAS: 1 when it can, with trans and ld set. */
static int blas_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1, int *trans, int64_t *ld)
{
  if (cols <= 1 && rows <= 1) { *trans = 0; *ld = cols > 0 ? cols : 1; return 1; }
  /* no elements, any strides (an empty dim's stride may be 0): plain, with the smallest valid ld */
  if (rows == 0 || cols == 0) { *trans = 0; *ld = cols > 1 ? cols : 1; return 1; }
  if ((s1 == 1 || cols == 1) && (s0 >= (cols > 1 ? cols : 1) || rows == 1)) {
    *trans = 0;
    *ld = rows == 1 ? (cols > 1 ? cols : 1) : s0;
    if (*ld < (cols > 1 ? cols : 1)) *ld = cols > 1 ? cols : 1;
    return 1;
  }
  if ((s0 == 1 || rows == 1) && (s1 >= (rows > 1 ? rows : 1) || cols == 1)) {
    *trans = 1;
    *ld = cols == 1 ? (rows > 1 ? rows : 1) : s1;
    if (*ld < (rows > 1 ? rows : 1)) *ld = rows > 1 ? rows : 1;
    return 1;
  }
  return 0;
}

/* one GEMM on host data (OpenBLAS) or device data (the backend's cuBLAS) */
static int gemm_any(const char *name, const dpl_tensor *o, int32_t kd, int ta, int tb, int64_t m, int64_t n, int64_t k,
                    double alpha, const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                    int64_t ldc)
{
  if (!dpl_is_devmem(o)) {
    dpl_gemm_op(kd, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return DPL_OK;
  }
  dpl_bk_gemm g = {.dtype = kd, .devindex = o->_devindex, .transa = ta, .transb = tb, .m = m, .n = n, .k = k,
                   .lda = lda, .ldb = ldb, .ldc = ldc, .batch = 1, .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c};
  dpl_bk_args args = {.op = DPL_BK_GEMM, .gemm = &g, .name = name};
  return dpl_bk_call(&args);
}

static int32_t mm_kernel_dtype(const dpl_tensor *o)
{
  int32_t d = o->_dtype;
  if (dpl_is_devmem(o) && (d == DPL_FLOAT16 || d == DPL_BFLOAT16)) return d; /* cuBLAS: 16-bit operands, fp32 accumulation */
  if (d == DPL_FLOAT64) return DPL_FLOAT64;
  if (dpl_is_float(d)) return DPL_FLOAT32;
  return DPL_INT64;
}

/* Batched product: a [B.., n, k] @ b [B.., k, m] with both batch shapes already
 * broadcast to bshape (strides 0 where broadcast). out is contiguous [B.., n, m]. */
static int batched_gemm(const char *name, const dpl_tensor *a, const dpl_tensor *b, int32_t nb, const int64_t *bshape,
                        double alpha, double beta, dpl_tensor *out)
{
  int32_t kd = mm_kernel_dtype(out);
  dpl_tensor *ca = NULL, *cb = NULL, *co = NULL;
  int st = DPL_OK;
  int64_t n = a->_shape[a->_ndim - 2], k = a->_shape[a->_ndim - 1], m = b->_shape[b->_ndim - 1];
  /* an empty inner dim on a GPU: out = beta * out (zeros for beta 0, whatever out held) by
   * tensor ops; cuBLAS is not documented to treat k == 0 as BLAS does (dpl_gemm does it
   * by hand on the host) */
  if (k == 0 && dpl_is_devmem(out)) {
    if (beta == 0) return dpl_tensor_fill_(out, 0);
    return beta == 1 ? DPL_OK : dpl_binary_scalar_(DPL_OP_MUL, out, beta);
  }
  int ta, tb;
  int64_t lda, ldb;
  /* convert dtypes / make BLAS-compatible */
  if (a->_dtype != kd || !blas_layout(n, k, a->_stride[a->_ndim - 2], a->_stride[a->_ndim - 1], &ta, &lda))
    st = dpl_contig_as(name, a, kd, &ca);
  if (st == DPL_OK && (b->_dtype != kd || !blas_layout(k, m, b->_stride[b->_ndim - 2], b->_stride[b->_ndim - 1], &tb, &ldb)))
    st = dpl_contig_as(name, b, kd, &cb);
  if (st == DPL_OK && out->_dtype != kd) {
    st = dpl_new(name, kd, out->_ndim, out->_shape, out, &co);
    if (st == DPL_OK && beta != 0) st = dpl_copy_any(name, co, out);
  }
  if (st == DPL_OK) {
    const dpl_tensor *ua = ca ? ca : a, *ub = cb ? cb : b;
    dpl_tensor *uo = co ? co : out;
    blas_layout(n, k, ua->_stride[ua->_ndim - 2], ua->_stride[ua->_ndim - 1], &ta, &lda);
    blas_layout(k, m, ub->_stride[ub->_ndim - 2], ub->_stride[ub->_ndim - 1], &tb, &ldb);
    int64_t es = dpl_elsize(kd);
    /* batch strides (elements) broadcast to bshape */
    int64_t sa[DPL_MAX_DIMS] = {0}, sb[DPL_MAX_DIMS] = {0};
    int la = ua->_ndim - 2, lb = ub->_ndim - 2;
    for (int i = 0; i < nb; i++) {
      int ia = i - (nb - la), ib = i - (nb - lb);
      sa[i] = (ia >= 0 && ua->_shape[ia] != 1) ? ua->_stride[ia] : 0;
      sb[i] = (ib >= 0 && ub->_shape[ib] != 1) ? ub->_stride[ib] : 0;
    }
    int64_t nbatch = dpl_shape_numel(nb, bshape);
    /* fold the batch of a into its rows when b is shared and a's rows are evenly spaced */
    int fold = nbatch > 1 && !ta && n > 0 && k > 0;
    for (int i = 0; fold && i < nb; i++) if (sb[i] != 0) fold = 0;
    if (fold) {
      int64_t expect = lda * n;
      for (int i = nb - 1; fold && i >= 0; i--) {
        if (bshape[i] == 1) continue;
        if (sa[i] != expect) fold = 0;
        expect *= bshape[i];
      }
    }
    if (fold) {
      st = gemm_any(name, uo, kd, 0, tb, nbatch * n, m, k, alpha, ua->_data, lda, ub->_data, ldb, beta, uo->_data, m);
    } else {
      int64_t ix[DPL_MAX_DIMS] = {0};
      for (int64_t bi = 0; bi < nbatch && st == DPL_OK; bi++) {
        int64_t oa = 0, ob = 0;
        for (int i = 0; i < nb; i++) { oa += ix[i] * sa[i]; ob += ix[i] * sb[i]; }
        st = gemm_any(name, uo, kd, ta, tb, n, m, k, alpha, (const char *)ua->_data + oa * es, lda,
                      (const char *)ub->_data + ob * es, ldb, beta, (char *)uo->_data + bi * n * m * es, m);
        for (int i = nb - 1; i >= 0; i--) { if (++ix[i] < bshape[i]) break; ix[i] = 0; }
      }
    }
    if (co && st == DPL_OK) st = dpl_copy_any(name, out, co);
  }
  dpl_tensor_release(ca);
  dpl_tensor_release(cb);
  dpl_tensor_release(co);
  return st;
}

static int mm_checks(const char *name, const dpl_tensor *a, const dpl_tensor *b)
{
  DPL_TRY(dpl_check_handle(name, "self", a));
  DPL_TRY(dpl_check_handle(name, "other", b));
  DPL_TRY(dpl_check_same_device(name, a, b));
  if (a->_dtype != b->_dtype)
    return dpl_errorf(DPL_EINVAL, "%s: expected both operands of the same dtype, got %s and %s", name,
                      dpl_dtype_name(a->_dtype), dpl_dtype_name(b->_dtype));
  if (a->_dtype == DPL_BOOL) return dpl_errorf(DPL_EINVAL, "%s: not supported for bool tensors", name);
  return DPL_OK;
}

static int shape_err(const char *name, const dpl_tensor *a, const dpl_tensor *b, const char *why)
{
  char b1[160], b2[160];
  return dpl_errorf(DPL_EINVAL, "%s: %s (got shapes %s and %s)", name, why, dpl_shape_str(a->_ndim, a->_shape, b1, sizeof b1),
                    dpl_shape_str(b->_ndim, b->_shape, b2, sizeof b2));
}

int dpl_matmul(const dpl_tensor *a, const dpl_tensor *b, dpl_tensor **out)
{
  const char *name = "matmul";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(mm_checks(name, a, b));
  if (a->_ndim == 0 || b->_ndim == 0) return shape_err(name, a, b, "both operands need at least 1 dim");
  if (a->_ndim == 2 && b->_ndim == 2) { /* the common case, without intermediate views */
    if (a->_shape[1] != b->_shape[0]) {
      char b1[160], b2[160];
      return dpl_errorf(DPL_EINVAL, "%s: inner dims do not match: %s @ %s (%lld vs %lld)", name,
                        dpl_shape_str(2, a->_shape, b1, sizeof b1), dpl_shape_str(2, b->_shape, b2, sizeof b2),
                        (long long)a->_shape[1], (long long)b->_shape[0]);
    }
    int64_t oshape[2] = {a->_shape[0], b->_shape[1]};
    dpl_tensor *r = NULL;
    DPL_TRY(dpl_new(name, a->_dtype, 2, oshape, a, &r));
    int st = batched_gemm(name, a, b, 0, NULL, 1.0, 0.0, r);
    if (st != DPL_OK) { dpl_tensor_release(r); return st; }
    *out = r;
    return DPL_OK;
  }
  /* promote 1-d operands to matrices through views */
  dpl_tensor *va = NULL, *vb = NULL, *res = NULL;
  int st = DPL_OK;
  if (a->_ndim == 1) st = dpl_tensor_unsqueeze(a, 0, &va);
  else st = dpl_tensor_alias(a, &va);
  if (st == DPL_OK) st = b->_ndim == 1 ? dpl_tensor_unsqueeze(b, 1, &vb) : dpl_tensor_alias(b, &vb);
  if (st != DPL_OK) { dpl_tensor_release(va); return st; }
  int64_t k = va->_shape[va->_ndim - 1];
  if (vb->_shape[vb->_ndim - 2] != k) {
    char b1[160], b2[160];
    st = dpl_errorf(DPL_EINVAL, "%s: inner dims do not match: %s @ %s (%lld vs %lld)", name,
                    dpl_shape_str(a->_ndim, a->_shape, b1, sizeof b1), dpl_shape_str(b->_ndim, b->_shape, b2, sizeof b2),
                    (long long)k, (long long)vb->_shape[vb->_ndim - 2]);
  }
  int64_t bshape[DPL_MAX_DIMS];
  int32_t nb = 0;
  if (st == DPL_OK)
    st = dpl_broadcast_shapes(name, va->_ndim - 2, va->_shape, vb->_ndim - 2, vb->_shape, &nb, bshape);
  if (st == DPL_OK) {
    int64_t oshape[DPL_MAX_DIMS];
    for (int i = 0; i < nb; i++) oshape[i] = bshape[i];
    oshape[nb] = va->_shape[va->_ndim - 2];
    oshape[nb + 1] = vb->_shape[vb->_ndim - 1];
    if (nb + 2 > DPL_MAX_DIMS) st = shape_err(name, a, b, "too many dims");
    else st = dpl_new(name, a->_dtype, nb + 2, oshape, a, &res);
    if (st == DPL_OK) st = batched_gemm(name, va, vb, nb, bshape, 1.0, 0.0, res);
    if (st == DPL_OK && (a->_ndim == 1 || b->_ndim == 1)) {
      /* drop the dims the 1-d operands gained */
      int64_t fs[DPL_MAX_DIMS];
      int32_t fn = 0;
      for (int i = 0; i < nb; i++) fs[fn++] = bshape[i];
      if (a->_ndim != 1) fs[fn++] = oshape[nb];
      if (b->_ndim != 1) fs[fn++] = oshape[nb + 1];
      dpl_tensor *r2 = NULL;
      st = dpl_tensor_view(res, fn, fs, &r2);
      dpl_tensor_release(res);
      res = r2;
    }
  }
  dpl_tensor_release(va);
  dpl_tensor_release(vb);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *out = res;
  return DPL_OK;
}

int dpl_mm(const dpl_tensor *a, const dpl_tensor *b, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "mm: out is NULL");
  *out = NULL;
  DPL_TRY(mm_checks("mm", a, b));
  if (a->_ndim != 2 || b->_ndim != 2) return shape_err("mm", a, b, "expected two 2-d tensors");
  return dpl_matmul(a, b, out);
}

int dpl_bmm(const dpl_tensor *a, const dpl_tensor *b, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "bmm: out is NULL");
  *out = NULL;
  DPL_TRY(mm_checks("bmm", a, b));
  if (a->_ndim != 3 || b->_ndim != 3) return shape_err("bmm", a, b, "expected two 3-d tensors");
  if (a->_shape[0] != b->_shape[0]) return shape_err("bmm", a, b, "batch sizes differ");
  return dpl_matmul(a, b, out);
}

int dpl_addmm(const dpl_tensor *c, const dpl_tensor *a, const dpl_tensor *b, double beta, double alpha, dpl_tensor **out)
{
  const char *name = "addmm";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  DPL_TRY(mm_checks(name, a, b));
  DPL_TRY(dpl_check_handle(name, "input", c));
  DPL_TRY(dpl_check_same_device(name, c, a));
  if (a->_ndim != 2 || b->_ndim != 2) return shape_err(name, a, b, "expected two 2-d tensors");
  if (a->_shape[1] != b->_shape[0]) return shape_err(name, a, b, "inner dims do not match");
  int64_t oshape[2] = {a->_shape[0], b->_shape[1]};
  int64_t stc[DPL_MAX_DIMS];
  if (dpl_broadcast_strides(c, 2, oshape, stc) != 0) {
    char b1[160], b2[160];
    return dpl_errorf(DPL_EINVAL, "%s: input of shape %s cannot be broadcast to the product's shape %s", name,
                      dpl_shape_str(c->_ndim, c->_shape, b1, sizeof b1), dpl_shape_str(2, oshape, b2, sizeof b2));
  }
  dpl_tensor *res = NULL;
  DPL_TRY(dpl_new(name, a->_dtype, 2, oshape, a, &res));
  int st = beta != 0 ? dpl_copy_any(name, res, c) : DPL_OK;
  if (st == DPL_OK) st = batched_gemm(name, a, b, 0, NULL, alpha, beta, res);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *out = res;
  return DPL_OK;
}
