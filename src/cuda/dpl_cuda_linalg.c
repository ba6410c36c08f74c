/* dpl_cuda_linalg.c: DPL_BK_LINALG, the dense factorizations and solves under dpl.linalg
 * on a GPU: cuSOLVER's dense API (getrf, getrs, potrf, geqrf, orgqr, syevd, gesvd) and
 * cuBLAS's trsm, on the column-major device matrices dpl_tensor_linalg_dev.c prepares.
 * libcusolver is loaded with dlopen at the first call (DPL_LIBCUSOLVER, else
 * libcusolver.so.12 found through the plugin's rpath to the toolkit): the plugin builds and
 * loads without it, and the routines that need it then fail with a message saying why.
 * One cuSOLVER handle per device, created lazily on its compute stream; the workspace
 * comes from the plugin's caching allocator, sized by the *_bufferSize query once per call;
 * a batch is a loop over its matrices on the compute stream (nothing here waits for the
 * GPU: the core reads the per-matrix info back once). */
#include "dpl_cuda_internal.h"
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

/* cuSOLVER's dense C interface (cusolverDn.h), declared here so that the plugin builds
 * without the header: status and enums are ints, the handle opaque */
typedef int (*create_fn)(void **);
typedef int (*destroy_fn)(void *);
typedef int (*set_stream_fn)(void *, cudaStream_t);
typedef int (*getrf_bs_fn)(void *, int, int, void *, int, int *);
typedef int (*getrf_fn)(void *, int, int, void *, int, void *, int *, int *);
typedef int (*getrs_fn)(void *, int, int, int, const void *, int, const int *, void *, int, int *);
typedef int (*potrf_bs_fn)(void *, int, int, void *, int, int *);
typedef int (*potrf_fn)(void *, int, int, void *, int, void *, int, int *);
typedef int (*geqrf_bs_fn)(void *, int, int, void *, int, int *);
typedef int (*geqrf_fn)(void *, int, int, void *, int, void *, void *, int, int *);
typedef int (*orgqr_bs_fn)(void *, int, int, int, const void *, int, const void *, int *);
typedef int (*orgqr_fn)(void *, int, int, int, void *, int, const void *, void *, int, int *);
typedef int (*syevd_bs_fn)(void *, int, int, int, const void *, int, const void *, int *);
typedef int (*syevd_fn)(void *, int, int, int, void *, int, void *, void *, int, int *);
typedef int (*gesvd_bs_fn)(void *, int, int, int *);
typedef int (*gesvd_fn)(void *, signed char, signed char, int, int, void *, int, void *, void *, int, void *, int,
                        void *, int, void *, int *);

typedef struct typed {
  getrf_bs_fn getrf_bs;
  getrf_fn getrf;
  getrs_fn getrs;
  potrf_bs_fn potrf_bs;
  potrf_fn potrf;
  geqrf_bs_fn geqrf_bs;
  geqrf_fn geqrf;
  orgqr_bs_fn orgqr_bs;
  orgqr_fn orgqr;
  syevd_bs_fn syevd_bs;
  syevd_fn syevd;
  gesvd_bs_fn gesvd_bs;
  gesvd_fn gesvd;
} typed;

static struct {
  pthread_once_t once;
  void *h;
  char why[512];
  create_fn create;
  destroy_fn destroy;
  set_stream_fn set_stream;
  typed t[2]; /* float32, float64 */
} S = {.once = PTHREAD_ONCE_INIT};

static void *sym(void *h, const char *name, int *missing)
{
  void *f = dlsym(h, name);
  if (!f) *missing = 1;
  return f;
}

static void load(void)
{
  const char *env = getenv("DPL_LIBCUSOLVER");
  const char *names[] = {env && *env ? env : "libcusolver.so.12", "libcusolver.so.11", "libcusolver.so"};
  int tries = env && *env ? 1 : 3;
  void *h = NULL;
  const char *e = NULL;
  for (int i = 0; i < tries && !h; i++) {
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h && !e) e = dlerror();
  }
  if (!h) {
    snprintf(S.why, sizeof S.why, "cuSOLVER not found (dlopen %s: %s)", names[0], e ? e : "?");
    return;
  }
  int miss = 0;
  S.create = (create_fn)sym(h, "cusolverDnCreate", &miss);
  S.destroy = (destroy_fn)sym(h, "cusolverDnDestroy", &miss);
  S.set_stream = (set_stream_fn)sym(h, "cusolverDnSetStream", &miss);
  for (int k = 0; k < 2; k++) {
    char p = k ? 'D' : 'S', nm[48];
    typed *t = &S.t[k];
#define GET(field, type, base) (snprintf(nm, sizeof nm, "cusolverDn%c%s", p, base), t->field = (type)sym(h, nm, &miss))
    GET(getrf_bs, getrf_bs_fn, "getrf_bufferSize");
    GET(getrf, getrf_fn, "getrf");
    GET(getrs, getrs_fn, "getrs");
    GET(potrf_bs, potrf_bs_fn, "potrf_bufferSize");
    GET(potrf, potrf_fn, "potrf");
    GET(geqrf_bs, geqrf_bs_fn, "geqrf_bufferSize");
    GET(geqrf, geqrf_fn, "geqrf");
    GET(orgqr_bs, orgqr_bs_fn, "orgqr_bufferSize");
    GET(orgqr, orgqr_fn, "orgqr");
    GET(syevd_bs, syevd_bs_fn, "syevd_bufferSize");
    GET(syevd, syevd_fn, "syevd");
    GET(gesvd_bs, gesvd_bs_fn, "gesvd_bufferSize");
    GET(gesvd, gesvd_fn, "gesvd");
#undef GET
  }
  if (miss) {
    snprintf(S.why, sizeof S.why, "cuSOLVER unusable: %s lacks the dense routines dpl.linalg calls", names[0]);
    dlclose(h);
    return;
  }
  S.h = h;
}

static const char *status_name(int s)
{
  static const char *const names[] = {"CUSOLVER_STATUS_SUCCESS", "CUSOLVER_STATUS_NOT_INITIALIZED",
                                      "CUSOLVER_STATUS_ALLOC_FAILED", "CUSOLVER_STATUS_INVALID_VALUE",
                                      "CUSOLVER_STATUS_ARCH_MISMATCH", "CUSOLVER_STATUS_MAPPING_ERROR",
                                      "CUSOLVER_STATUS_EXECUTION_FAILED", "CUSOLVER_STATUS_INTERNAL_ERROR",
                                      "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED", "CUSOLVER_STATUS_NOT_SUPPORTED"};
  return s >= 0 && s < (int)(sizeof names / sizeof names[0]) ? names[s] : "CUSOLVER_STATUS_UNKNOWN";
}

static int solver_fail(int s, const char *call, const char *name, int32_t dev)
{
  int st = s == 2 ? DPL_ENOMEM : s == 9 ? DPL_ENOTIMPL : DPL_EDEVICE;
  return dpl_errorf(st, "%s (%s) on cuda:%d: %s (status %d)", call, name, (int)dev, status_name(s), s);
}

static int solver_handle(dpl_cu_dev *d, int32_t dev, const char *name, void **h)
{
  pthread_once(&S.once, load);
  if (!S.h) return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda here: %s", name, S.why);
  pthread_mutex_lock(&d->mu);
  int s = 0;
  const char *call = "cusolverDnCreate";
  if (!d->solver) {
    void *x = NULL;
    s = S.create(&x);
    if (s == 0) {
      call = "cusolverDnSetStream";
      s = S.set_stream(x, d->compute);
      if (s != 0) S.destroy(x);
      else d->solver = x;
    }
  }
  *h = d->solver;
  pthread_mutex_unlock(&d->mu);
  return s == 0 ? DPL_OK : solver_fail(s, call, name, dev);
}

/* one call's device scratch: workspace, a per-matrix info array when none is given, rwork */
typedef struct scratch {
  int32_t dev;
  int n;
  void *p[3];
  int64_t bytes[3];
} scratch;

static void *take(scratch *sc, int64_t bytes, int *st)
{
  if (*st != DPL_OK) return NULL;
  void *p = NULL;
  if (bytes < 16) bytes = 16;
  *st = dpl_cu_scratch(sc->dev, bytes, &p);
  if (*st != DPL_OK) return NULL;
  sc->p[sc->n] = p;
  sc->bytes[sc->n++] = bytes;
  return p;
}
static void give_back(scratch *sc)
{
  for (int i = 0; i < sc->n; i++) dpl_cu_scratch_free(sc->dev, sc->p[i], sc->bytes[i]);
}

static int trsm(const dpl_bk_linalg *g, dpl_cu_dev *d, const char *name)
{
  int32_t dev = g->devindex;
  cublasHandle_t h;
  DPL_TRY(dpl_cu_blas_handle(d, dev, &h));
  int m = (int)g->m, n = (int)g->n, ka = g->left ? m : n;
  int lda = ka > 1 ? ka : 1, ldb = m > 1 ? m : 1;
  cublasSideMode_t side = g->left ? CUBLAS_SIDE_LEFT : CUBLAS_SIDE_RIGHT;
  cublasFillMode_t uplo = g->upper ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
  cublasOperation_t op = g->trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasDiagType_t diag = g->unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
  int64_t es = g->dtype == DPL_FLOAT64 ? 8 : 4;
  for (int64_t b = 0; b < g->count; b++) {
    if (g->skip && g->skip[b]) continue;
    const char *pa = (const char *)g->a + b * g->stride_a * es;
    char *pb = (char *)g->b + b * g->stride_b * es;
    cublasStatus_t s;
    const char *call;
    if (g->dtype == DPL_FLOAT64) {
      double one = 1;
      call = "cublasDtrsm";
      s = cublasDtrsm(h, side, uplo, op, diag, m, n, &one, (const double *)pa, lda, (double *)pb, ldb);
    } else {
      float one = 1;
      call = "cublasStrsm";
      s = cublasStrsm(h, side, uplo, op, diag, m, n, &one, (const float *)pa, lda, (float *)pb, ldb);
    }
    if (s != CUBLAS_STATUS_SUCCESS) {
      char what[96];
      snprintf(what, sizeof what, "%s (%s)", call, name);
      return dpl_cu_blas_fail(s, what, dev);
    }
  }
  return DPL_OK;
}

#define CALL(expr, call)                                                                                                \
  do {                                                                                                                  \
    int s_ = (expr);                                                                                                    \
    if (s_ != 0) { st = solver_fail(s_, call, name, dev); goto done; }                                                 \
  } while (0)

int dpl_cu_op_linalg(const dpl_bk_args *a)
{
  const dpl_bk_linalg *g = a->linalg;
  const char *name = a->name ? a->name : "linalg";
  if (!g) return dpl_errorf(DPL_EINVAL, "%s: no linalg arguments (internal)", name);
  int32_t dev = g->devindex;
  if (g->dtype != DPL_FLOAT32 && g->dtype != DPL_FLOAT64)
    return dpl_errorf(DPL_EINVAL, "%s: cuSOLVER routines take float32 or float64, got %s (internal)", name,
                      dpl_dtype_name(g->dtype));
  if (g->m < 0 || g->n < 0 || g->k < 0 || g->m > INT_MAX / 2 || g->n > INT_MAX / 2 || g->k > INT_MAX / 2 ||
      g->count < 0)
    return dpl_errorf(DPL_EINVAL, "%s: matrix sizes %lld x %lld (k %lld) out of range (internal)", name,
                      (long long)g->m, (long long)g->n, (long long)g->k);
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  if (g->count == 0) return DPL_OK;
  if (a->sub == DPL_LA_TRSM) return g->m > 0 && g->n > 0 ? trsm(g, d, name) : DPL_OK;
  if (a->sub < 0 || a->sub >= DPL_LA_NUM) return dpl_errorf(DPL_ENOTIMPL, "%s: linalg routine %d (internal)", name, a->sub);
  void *h = NULL;
  DPL_TRY(solver_handle(d, dev, name, &h));
  const typed *t = &S.t[g->dtype == DPL_FLOAT64];
  int64_t es = g->dtype == DPL_FLOAT64 ? 8 : 4;
  int m = (int)g->m, n = (int)g->n, k = (int)g->k, lw = 0, st = DPL_OK;
  int ld = m > 1 ? m : 1, ldn = n > 1 ? n : 1;
  int uplo = g->upper ? 1 : 0; /* CUBLAS_FILL_MODE_UPPER / _LOWER */
  scratch sc = {.dev = dev};
  int *info = g->info;
  if (!info) info = take(&sc, g->count * (int64_t)sizeof(int), &st);
  void *work = NULL, *rwork = NULL;
  char jobu = 'N', jobvt = 'N';
  switch (a->sub) { /* the workspace, once per call (every matrix has the same sizes) */
  case DPL_LA_GETRF: CALL(t->getrf_bs(h, m, n, g->a, ld, &lw), "cusolverDn?getrf_bufferSize"); break;
  case DPL_LA_POTRF: CALL(t->potrf_bs(h, uplo, n, g->a, ldn, &lw), "cusolverDn?potrf_bufferSize"); break;
  case DPL_LA_GEQRF: CALL(t->geqrf_bs(h, m, n, g->a, ld, &lw), "cusolverDn?geqrf_bufferSize"); break;
  case DPL_LA_ORGQR: CALL(t->orgqr_bs(h, m, n, k, g->a, ld, g->w, &lw), "cusolverDn?orgqr_bufferSize"); break;
  case DPL_LA_SYEVD:
    CALL(t->syevd_bs(h, g->vectors ? 1 : 0, uplo, n, g->a, ldn, g->w, &lw), "cusolverDn?syevd_bufferSize");
    break;
  case DPL_LA_GESVD:
    if (m < n) { st = dpl_errorf(DPL_EINVAL, "%s: gesvd needs m >= n, got %d x %d (internal)", name, m, n); goto done; }
    CALL(t->gesvd_bs(h, m, n, &lw), "cusolverDn?gesvd_bufferSize");
    if (g->vectors) { jobu = g->full ? 'A' : 'S'; jobvt = 'A'; }
    rwork = take(&sc, (int64_t)(n > 1 ? n : 1) * es, &st);
    break;
  default: break;
  }
  work = take(&sc, (int64_t)(lw > 1 ? lw : 1) * es, &st);
  if (st != DPL_OK) goto done;
  for (int64_t b = 0; b < g->count; b++) {
    if (g->skip && g->skip[b]) continue;
    char *pa = (char *)g->a + b * g->stride_a * es;
    char *pw = g->w ? (char *)g->w + b * g->stride_w * es : NULL;
    int *piv = g->ipiv ? g->ipiv + b * g->stride_ipiv : NULL;
    int *iv = info + b;
    switch (a->sub) {
    case DPL_LA_GETRF: CALL(t->getrf(h, m, n, pa, ld, work, piv, iv), "cusolverDn?getrf"); break;
    case DPL_LA_GETRS:
      CALL(t->getrs(h, g->trans ? 1 : 0, n, k, pa, ldn, piv, (char *)g->b + b * g->stride_b * es, ldn, iv),
           "cusolverDn?getrs");
      break;
    case DPL_LA_POTRF: CALL(t->potrf(h, uplo, n, pa, ldn, work, lw, iv), "cusolverDn?potrf"); break;
    case DPL_LA_GEQRF: CALL(t->geqrf(h, m, n, pa, ld, pw, work, lw, iv), "cusolverDn?geqrf"); break;
    case DPL_LA_ORGQR: CALL(t->orgqr(h, m, n, k, pa, ld, pw, work, lw, iv), "cusolverDn?orgqr"); break;
    case DPL_LA_SYEVD: CALL(t->syevd(h, g->vectors ? 1 : 0, uplo, n, pa, ldn, pw, work, lw, iv), "cusolverDn?syevd"); break;
    case DPL_LA_GESVD: {
      char *pu = g->vectors ? (char *)g->b + b * g->stride_b * es : NULL;
      char *pv = g->vectors ? (char *)g->c + b * g->stride_c * es : NULL;
      CALL(t->gesvd(h, (signed char)jobu, (signed char)jobvt, m, n, pa, ld, pw, pu, ld, pv, ldn, work, lw, rwork, iv),
           "cusolverDn?gesvd");
      break;
    }
    default: break;
    }
  }
done:
  give_back(&sc); /* stream-ordered: the blocks are reused only by later work on the stream */
  return st;
}
