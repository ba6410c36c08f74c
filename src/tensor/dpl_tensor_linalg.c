/* dpl_tensor_linalg.c: the factorizations and solves under dpl.linalg (LU, solve, inverse,
 * Cholesky, QR, symmetric eigendecomposition, SVD, triangular and LU solves) on float32 and
 * float64 CPU tensors with any batch dims, through the LAPACK routines of the OpenBLAS library
 * that dpl_tensor_blas.c loads. Each matrix of a batch is copied into a column-major work
 * buffer (LAPACK's layout), factored there, and copied back row-major, so every result is a
 * fresh contiguous tensor and each status a per-matrix LAPACK info in an int32 tensor of the
 * batch shape; what to make of a non-zero info (an error, a NaN) is dpl.linalg's choice.
 * Inputs in GPU memory take the device paths of dpl_tensor_linalg_dev.c after the same
 * checks (cuSOLVER through the CUDA plugin). */
#include "dpl_tensor_linalg.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

/* LAPACK's Fortran interfaces (32-bit integers; the trailing size_t: the hidden lengths of
 * character arguments, which routines written in C ignore) */
typedef void (*getrf_fn)(const int *, const int *, void *, const int *, int *, int *);
typedef void (*gesv_fn)(const int *, const int *, void *, const int *, int *, void *, const int *, int *);
typedef void (*getrs_fn)(const char *, const int *, const int *, const void *, const int *, const int *, void *,
                         const int *, int *, size_t);
typedef void (*potrf_fn)(const char *, const int *, void *, const int *, int *, size_t);
typedef void (*geqrf_fn)(const int *, const int *, void *, const int *, void *, void *, const int *, int *);
typedef void (*orgqr_fn)(const int *, const int *, const int *, void *, const int *, const void *, void *, const int *,
                         int *);
typedef void (*syevd_fn)(const char *, const char *, const int *, void *, const int *, void *, void *, const int *, int *,
                         const int *, int *, size_t, size_t);
typedef void (*gesdd_fn)(const char *, const int *, const int *, void *, const int *, void *, void *, const int *, void *,
                         const int *, void *, const int *, int *, int *, size_t);
/* cblas_?trsm: row-major triangular solves (no copies, and no singularity check: a zero on the
 * diagonal gives inf/nan, as PyTorch's solve_triangular) */
typedef void (*strsm_fn)(int, int, int, int, int, int, int, float, const float *, int, float *, int);
typedef void (*dtrsm_fn)(int, int, int, int, int, int, int, double, const double *, int, double *, int);

static void *lapack(const char *op, int32_t dt, const char *base, int *st)
{
  char name[32];
  snprintf(name, sizeof name, "%c%s_", dt == DPL_FLOAT64 ? 'd' : 's', base);
  void *f = dpl_blas_symbol(name);
  if (!f && *st == DPL_OK)
    *st = dpl_errorf(DPL_ENOTIMPL, "%s: not implemented here: LAPACK's %s was not found in the BLAS library (%s)", op,
                     name, dpl_blas_info());
  return f;
}

/* row-major m x n (src, row stride n) -> column-major (dst, leading dimension m), and back */
static void to_cm(void *dst, const void *src, int64_t m, int64_t n, int32_t dt)
{
  if (dt == DPL_FLOAT64) {
    const double *s = src; double *d = dst;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) d[j * m + i] = s[i * n + j];
  } else {
    const float *s = src; float *d = dst;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) d[j * m + i] = s[i * n + j];
  }
}
/* column-major m x n (src, leading dimension ld >= m) -> row-major (dst, row stride n) */
static void from_cm(void *dst, const void *src, int64_t m, int64_t n, int64_t ld, int32_t dt)
{
  if (dt == DPL_FLOAT64) {
    const double *s = src; double *d = dst;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) d[i * n + j] = s[j * ld + i];
  } else {
    const float *s = src; float *d = dst;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) d[i * n + j] = s[j * ld + i];
  }
}
static double getd(const void *p, int64_t i, int32_t dt)
{
  return dt == DPL_FLOAT64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

/* The checks every routine shares (dpl_tensor_linalg.h) */
typedef dpl_mats mats;

int dpl_la_check(const char *op, const char *what, const dpl_tensor *a, int square, mats *q)
{
  DPL_TRY(dpl_check_handle(op, what, a));
  if (a->_ndim < 2)
    return dpl_errorf(DPL_EINVAL, "%s: the input tensor %s must have at least 2 dimensions, got %d", op, what,
                      (int)a->_ndim);
  if (a->_dtype == DPL_FLOAT16 || a->_dtype == DPL_BFLOAT16)
    return dpl_errorf(DPL_EINVAL, "%s: low precision dtypes are not supported, got %s (use float32 or float64)", op,
                      dpl_dtype_name(a->_dtype));
  if (!dpl_is_float(a->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected a floating point tensor as input %s, got %s", op, what,
                      dpl_dtype_name(a->_dtype));
  q->dt = a->_dtype;
  q->es = dpl_elsize(a->_dtype);
  q->nb = a->_ndim - 2;
  q->m = a->_shape[a->_ndim - 2];
  q->n = a->_shape[a->_ndim - 1];
  q->count = 1;
  for (int32_t i = 0; i < q->nb; i++) { q->bshape[i] = a->_shape[i]; q->count *= a->_shape[i]; }
  if (square && q->m != q->n)
    return dpl_errorf(DPL_EINVAL, "%s: %s must be batches of square matrices, but they are %lld by %lld matrices", op,
                      what, (long long)q->m, (long long)q->n);
  if (q->m > INT_MAX / 2 || q->n > INT_MAX / 2 || q->m * q->n > INT_MAX / 2)
    return dpl_errorf(DPL_EINVAL, "%s: %lld by %lld matrices are too large for LAPACK's 32-bit sizes", op,
                      (long long)q->m, (long long)q->n);
  return DPL_OK;
}

int dpl_la_new(const char *op, const mats *q, int32_t dt, int64_t r, int64_t c, const dpl_tensor *like,
               dpl_tensor **out)
{
  int64_t shape[DPL_MAX_DIMS];
  int32_t nd = q->nb;
  memcpy(shape, q->bshape, sizeof(int64_t) * (size_t)q->nb);
  if (r >= 0) shape[nd++] = r;
  if (c >= 0) shape[nd++] = c;
  return dpl_new(op, dt, nd, shape, like, out);
}
static int new_batched(const char *op, const mats *q, int32_t dt, int64_t r, int64_t c, dpl_tensor **out)
{
  return dpl_la_new(op, q, dt, r, c, NULL, out);
}
/* a second input on the first's device (both CPU memory, or one GPU) */
static int same_dev(const char *op, const dpl_tensor *a, const dpl_tensor *b)
{
  if (dpl_is_devmem(a) != dpl_is_devmem(b) || (dpl_is_devmem(a) && a->_devindex != b->_devindex))
    return dpl_check_same_device(op, a, b);
  return DPL_OK;
}

static void *work_alloc(int *st, const char *op, int64_t bytes)
{
  void *p = malloc(bytes > 0 ? (size_t)bytes : 1);
  if (!p && *st == DPL_OK) *st = dpl_errorf(DPL_ENOMEM, "%s: out of memory for a %lld-byte work buffer", op, (long long)bytes);
  return p;
}
/* LAPACK's answer to a workspace query (lwork = -1), as a count */
static int lwork_of(const void *w, int32_t dt)
{
  double v = getd(w, 0, dt);
  return v < 1 ? 1 : v > INT_MAX ? INT_MAX : (int)v;
}

/* ---- LU: P A = L U (getrf), any m x n ---- */
int dpl_linalg_lu(const dpl_tensor *a, dpl_tensor **lu, dpl_tensor **pivots, dpl_tensor **info)
{
  const char *op = "linalg.lu_factor";
  if (!lu || !pivots || !info) return dpl_errorf(DPL_EINVAL, "%s: an output pointer is NULL", op);
  *lu = *pivots = *info = NULL;
  mats q;
  DPL_TRY(dpl_la_check(op, "A", a, 0, &q));
  int64_t k = q.m < q.n ? q.m : q.n;
  if (dpl_is_devmem(a)) return dpl_la_lu_dev(op, &q, a, lu, pivots, info);
  dpl_tensor *c = NULL, *r = NULL, *p = NULL, *inf = NULL;
  int st = dpl_contig_as(op, a, q.dt, &c);
  if (st == DPL_OK) st = new_batched(op, &q, q.dt, q.m, q.n, &r);
  if (st == DPL_OK) st = new_batched(op, &q, DPL_INT32, k, -1, &p);
  if (st == DPL_OK) st = new_batched(op, &q, DPL_INT32, -1, -1, &inf);
  getrf_fn getrf = st == DPL_OK ? (getrf_fn)lapack(op, q.dt, "getrf", &st) : NULL;
  void *w = st == DPL_OK ? work_alloc(&st, op, q.m * q.n * q.es) : NULL;
  if (st == DPL_OK) {
    int m = (int)q.m, n = (int)q.n, ld = m > 1 ? m : 1;
    for (int64_t b = 0; b < q.count; b++) {
      int32_t *piv = (int32_t *)p->_data + b * k, *iv = (int32_t *)inf->_data + b;
      *iv = 0;
      if (k == 0) continue;
      to_cm(w, c->_data + b * q.m * q.n * q.es, q.m, q.n, q.dt);
      getrf(&m, &n, w, &ld, piv, iv);
      from_cm(r->_data + b * q.m * q.n * q.es, w, q.m, q.n, ld, q.dt);
    }
  }
  free(w);
  dpl_release_n(1, &c);
  return dpl_hand_over(st, 3, (dpl_tensor *[]){r, p, inf}, (dpl_tensor **[]){lu, pivots, info});
}

/* ---- solve A X = B (gesv) and the inverse (getrf + getri) ---- */
static int check_rhs(const char *op, const mats *qa, const dpl_tensor *a, const dpl_tensor *b, mats *qb)
{
  DPL_TRY(dpl_la_check(op, "B", b, 0, qb));
  DPL_TRY(same_dev(op, a, b));
  if (qb->dt != qa->dt)
    return dpl_errorf(DPL_EINVAL, "%s: expected A and B to have the same dtype, but found A of type %s and B of type %s "
                      "instead", op, dpl_dtype_name(qa->dt), dpl_dtype_name(qb->dt));
  if (qb->nb != qa->nb || qb->m != qa->n || memcmp(qb->bshape, qa->bshape, sizeof(int64_t) * (size_t)qa->nb) != 0)
    return dpl_errorf(DPL_EINVAL, "%s: B's batch shape and rows must match A's (%lld rows), got %lld rows", op,
                      (long long)qa->n, (long long)qb->m);
  return DPL_OK;
}

int dpl_linalg_solve(const dpl_tensor *a, const dpl_tensor *b, dpl_tensor **x, dpl_tensor **info)
{
  const char *op = "linalg.solve";
  if (!x || !info) return dpl_errorf(DPL_EINVAL, "%s: an output pointer is NULL", op);
  *x = *info = NULL;
  mats qa, qb;
  DPL_TRY(dpl_la_check(op, "A", a, 1, &qa));
  DPL_TRY(check_rhs(op, &qa, a, b, &qb));
  if (dpl_is_devmem(a)) return dpl_la_solve_dev(op, &qa, &qb, a, b, x, info);
  dpl_tensor *ca = NULL, *cb = NULL, *r = NULL, *inf = NULL;
  int st = dpl_contig_as(op, a, qa.dt, &ca);
  if (st == DPL_OK) st = dpl_contig_as(op, b, qa.dt, &cb);
  if (st == DPL_OK) st = new_batched(op, &qb, qa.dt, qb.m, qb.n, &r);
  if (st == DPL_OK) st = new_batched(op, &qa, DPL_INT32, -1, -1, &inf);
  getrf_fn getrf = st == DPL_OK ? (getrf_fn)lapack(op, qa.dt, "getrf", &st) : NULL;
  getrs_fn getrs = st == DPL_OK ? (getrs_fn)lapack(op, qa.dt, "getrs", &st) : NULL;
  int64_t n = qa.n, k = qb.n, es = qa.es;
  void *wa = st == DPL_OK ? work_alloc(&st, op, n * n * es) : NULL;
  void *wb = st == DPL_OK ? work_alloc(&st, op, n * k * es) : NULL;
  int *piv = st == DPL_OK ? work_alloc(&st, op, n * (int64_t)sizeof(int)) : NULL;
  if (st == DPL_OK) {
    int in = (int)n, ik = (int)k, ld = in > 1 ? in : 1, iv2 = 0;
    for (int64_t bi = 0; bi < qa.count; bi++) {
      int32_t *iv = (int32_t *)inf->_data + bi;
      *iv = 0;
      if (n == 0 || k == 0) continue;
      /* A's rows read as LAPACK's columns are A^T: factor that (no transposed copy) and solve
       * (A^T)^T X = B with getrs('T') */
      memcpy(wa, ca->_data + bi * n * n * es, (size_t)(n * n * es));
      getrf(&in, &in, wa, &ld, piv, iv);
      to_cm(wb, cb->_data + bi * n * k * es, n, k, qa.dt);
      if (*iv == 0) getrs("T", &in, &ik, wa, &ld, piv, wb, &ld, &iv2, 1);
      from_cm(r->_data + bi * n * k * es, wb, n, k, ld, qa.dt);
    }
  }
  free(wa); free(wb); free(piv);
  dpl_release_n(2, (dpl_tensor *[]){ca, cb});
  return dpl_hand_over(st, 2, (dpl_tensor *[]){r, inf}, (dpl_tensor **[]){x, info});
}

int dpl_linalg_inv(const dpl_tensor *a, dpl_tensor **x, dpl_tensor **info)
{
  const char *op = "linalg.inv";
  if (!x || !info) return dpl_errorf(DPL_EINVAL, "%s: an output pointer is NULL", op);
  *x = *info = NULL;
  mats q;
  DPL_TRY(dpl_la_check(op, "A", a, 1, &q));
  if (dpl_is_devmem(a)) return dpl_la_inv_dev(op, &q, a, x, info);
  dpl_tensor *c = NULL, *r = NULL, *inf = NULL;
  int st = dpl_contig_as(op, a, q.dt, &c);
  if (st == DPL_OK) st = new_batched(op, &q, q.dt, q.n, q.n, &r);
  if (st == DPL_OK) st = new_batched(op, &q, DPL_INT32, -1, -1, &inf);
  getrf_fn getrf = st == DPL_OK ? (getrf_fn)lapack(op, q.dt, "getrf", &st) : NULL;
  getrs_fn getrs = st == DPL_OK ? (getrs_fn)lapack(op, q.dt, "getrs", &st) : NULL;
  int64_t n = q.n, es = q.es;
  int in = (int)n, ld = in > 1 ? in : 1;
  void *wa = st == DPL_OK ? work_alloc(&st, op, n * n * es) : NULL;
  int *piv = st == DPL_OK ? work_alloc(&st, op, n * (int64_t)sizeof(int)) : NULL;
  if (st == DPL_OK) {
    for (int64_t b = 0; b < q.count; b++) {
      int32_t *iv = (int32_t *)inf->_data + b;
      *iv = 0;
      if (n == 0) continue;
      /* A's rows read as LAPACK's columns are A^T, and inv(A^T) read back row-major is inv(A):
       * no transposed copies. A singular matrix is factored again the other way round, for the
       * zero pivot of A's own LU (the one PyTorch names). */
      char *o = r->_data + b * n * n * es;
      memcpy(wa, c->_data + b * n * n * es, (size_t)(n * n * es));
      getrf(&in, &in, wa, &ld, piv, iv);
      if (*iv == 0) { /* inv(A^T) by solving A^T X = I (faster than getri) */
        memset(o, 0, (size_t)(n * n * es));
        for (int64_t i = 0; i < n; i++) dpl_store_f64(o + (i * n + i) * es, q.dt, 1.0);
        int iv2 = 0;
        getrs("N", &in, &in, wa, &ld, piv, o, &ld, &iv2, 1);
      } else {
        to_cm(wa, c->_data + b * n * n * es, n, n, q.dt);
        getrf(&in, &in, wa, &ld, piv, iv);
      }
    }
  }
  free(wa); free(piv);
  dpl_release_n(1, &c);
  return dpl_hand_over(st, 2, (dpl_tensor *[]){r, inf}, (dpl_tensor **[]){x, info});
}

/* ---- A X = B from lu_factor's LU and pivots (getrs); trans = 1: A^T X = B ---- */
int dpl_linalg_lu_solve(const dpl_tensor *lu, const dpl_tensor *pivots, const dpl_tensor *b, int32_t trans,
                        dpl_tensor **x)
{
  const char *op = "linalg.lu_solve";
  if (!x) return dpl_errorf(DPL_EINVAL, "%s: the output pointer is NULL", op);
  *x = NULL;
  mats qa, qb;
  DPL_TRY(dpl_la_check(op, "LU", lu, 1, &qa));
  DPL_TRY(check_rhs(op, &qa, lu, b, &qb));
  DPL_TRY(dpl_check_handle(op, "pivots", pivots));
  if (!dpl_is_devmem(lu)) DPL_TRY(dpl_check_tensor(op, "pivots", pivots));
  if (pivots->_dtype != DPL_INT32 || pivots->_ndim != qa.nb + 1 || pivots->_shape[qa.nb] != qa.n ||
      memcmp(pivots->_shape, qa.bshape, sizeof(int64_t) * (size_t)qa.nb) != 0)
    return dpl_errorf(DPL_EINVAL, "%s: pivots must be int32 of LU's batch shape and %lld (lu_factor's pivots)", op,
                      (long long)qa.n);
  dpl_tensor *ca = NULL, *cb = NULL, *cp = NULL, *r = NULL;
  if (dpl_is_devmem(lu)) return dpl_la_lu_solve_dev(op, &qa, &qb, lu, pivots, b, trans, x);
  int st = dpl_contig_as(op, lu, qa.dt, &ca);
  if (st == DPL_OK) st = dpl_contig_as(op, b, qa.dt, &cb);
  if (st == DPL_OK) st = dpl_contig_as(op, pivots, DPL_INT32, &cp);
  if (st == DPL_OK) st = new_batched(op, &qb, qa.dt, qb.m, qb.n, &r);
  getrs_fn getrs = st == DPL_OK ? (getrs_fn)lapack(op, qa.dt, "getrs", &st) : NULL;
  int64_t n = qa.n, k = qb.n, es = qa.es;
  void *wa = st == DPL_OK ? work_alloc(&st, op, n * n * es) : NULL;
  void *wb = st == DPL_OK ? work_alloc(&st, op, n * k * es) : NULL;
  if (st == DPL_OK) {
    int in = (int)n, ik = (int)k, ld = in > 1 ? in : 1, iv = 0;
    for (int64_t bi = 0; bi < qa.count && st == DPL_OK; bi++) {
      if (n == 0 || k == 0) continue;
      const int32_t *piv = (const int32_t *)cp->_data + bi * n;
      for (int64_t i = 0; i < n && st == DPL_OK; i++)
        if (piv[i] < 1 || piv[i] > n)
          st = dpl_errorf(DPL_EINVAL, "%s: pivot %lld of matrix %lld is %d, expected 1..%lld (lu_factor's pivots)", op,
                          (long long)i + 1, (long long)bi + 1, (int)piv[i], (long long)n);
      if (st != DPL_OK) break;
      to_cm(wa, ca->_data + bi * n * n * es, n, n, qa.dt);
      to_cm(wb, cb->_data + bi * n * k * es, n, k, qa.dt);
      getrs(trans ? "T" : "N", &in, &ik, wa, &ld, piv, wb, &ld, &iv, 1);
      from_cm(r->_data + bi * n * k * es, wb, n, k, ld, qa.dt);
    }
  }
  free(wa); free(wb);
  dpl_release_n(3, (dpl_tensor *[]){ca, cb, cp});
  return dpl_hand_over(st, 1, (dpl_tensor *[]){r}, (dpl_tensor **[]){x});
}

/* ---- Cholesky: A = L L^T (upper = 1: A = U^T U), from A's lower (upper) triangle ---- */
int dpl_linalg_cholesky(const dpl_tensor *a, int32_t upper, dpl_tensor **l, dpl_tensor **info)
{
  const char *op = "linalg.cholesky";
  if (!l || !info) return dpl_errorf(DPL_EINVAL, "%s: an output pointer is NULL", op);
  *l = *info = NULL;
  mats q;
  DPL_TRY(dpl_la_check(op, "A", a, 1, &q));
  if (dpl_is_devmem(a)) return dpl_la_cholesky_dev(op, &q, a, upper, l, info);
  dpl_tensor *c = NULL, *r = NULL, *inf = NULL;
  int st = dpl_contig_as(op, a, q.dt, &c);
  if (st == DPL_OK) st = new_batched(op, &q, q.dt, q.n, q.n, &r);
  if (st == DPL_OK) st = new_batched(op, &q, DPL_INT32, -1, -1, &inf);
  potrf_fn potrf = st == DPL_OK ? (potrf_fn)lapack(op, q.dt, "potrf", &st) : NULL;
  int64_t n = q.n, es = q.es;
  void *w = st == DPL_OK ? work_alloc(&st, op, n * n * es) : NULL;
  if (st == DPL_OK) {
    int in = (int)n, ld = in > 1 ? in : 1;
    for (int64_t b = 0; b < q.count; b++) {
      int32_t *iv = (int32_t *)inf->_data + b;
      *iv = 0;
      if (n == 0) continue;
      to_cm(w, c->_data + b * n * n * es, n, n, q.dt);
      potrf(upper ? "U" : "L", &in, w, &ld, iv, 1);
      char *o = r->_data + b * n * n * es;
      from_cm(o, w, n, n, ld, q.dt);
      for (int64_t i = 0; i < n; i++) /* the other triangle is A's: zero it */
        for (int64_t j = 0; j < n; j++)
          if (upper ? j < i : j > i) memset(o + (i * n + j) * es, 0, (size_t)es);
    }
  }
  free(w);
  dpl_release_n(1, &c);
  return dpl_hand_over(st, 2, (dpl_tensor *[]){r, inf}, (dpl_tensor **[]){l, info});
}

/* ---- QR (geqrf + orgqr): mode 0 reduced (Q m x k, R k x n), 1 complete (Q m x m, R m x n),
 * 2 R only (k x n; q is not made) ---- */
int dpl_linalg_qr(const dpl_tensor *a, int32_t mode, dpl_tensor **qo, dpl_tensor **ro)
{
  const char *op = "linalg.qr";
  if (!qo || !ro) return dpl_errorf(DPL_EINVAL, "%s: an output pointer is NULL", op);
  *qo = *ro = NULL;
  if (mode < 0 || mode > 2) return dpl_errorf(DPL_EINVAL, "%s: mode must be 0 (reduced), 1 (complete) or 2 (r), got %d", op, (int)mode);
  mats q;
  DPL_TRY(dpl_la_check(op, "A", a, 0, &q));
  if (dpl_is_devmem(a)) return dpl_la_qr_dev(op, &q, a, mode, qo, ro);
  int64_t m = q.m, n = q.n, k = m < n ? m : n, es = q.es;
  int64_t qc = mode == 1 ? m : k, rr = mode == 1 ? m : k; /* Q's columns, R's rows */
  dpl_tensor *c = NULL, *Q = NULL, *R = NULL;
  int st = dpl_contig_as(op, a, q.dt, &c);
  if (st == DPL_OK && mode != 2) st = new_batched(op, &q, q.dt, m, qc, &Q);
  if (st == DPL_OK) st = new_batched(op, &q, q.dt, rr, n, &R);
  geqrf_fn geqrf = st == DPL_OK ? (geqrf_fn)lapack(op, q.dt, "geqrf", &st) : NULL;
  orgqr_fn orgqr = st == DPL_OK ? (orgqr_fn)lapack(op, q.dt, "orgqr", &st) : NULL;
  int im = (int)m, in = (int)n, ik = (int)k, iqc = (int)qc, ld = im > 1 ? im : 1, lw = -1, iv = 0, lwork = 1;
  int64_t wcols = n > qc ? n : qc; /* the buffer holds A (m x n), then Q (m x qc) */
  char wq[16];
  if (st == DPL_OK && k > 0) {
    geqrf(&im, &in, wq, &ld, wq, wq, &lw, &iv);
    lwork = lwork_of(wq, q.dt);
    if (mode != 2) {
      lw = -1;
      orgqr(&im, &iqc, &ik, wq, &ld, wq, wq, &lw, &iv);
      int l2 = lwork_of(wq, q.dt);
      if (l2 > lwork) lwork = l2;
    }
  }
  void *w = st == DPL_OK ? work_alloc(&st, op, m * wcols * es) : NULL;
  void *tau = st == DPL_OK ? work_alloc(&st, op, (k > 0 ? k : 1) * es) : NULL;
  void *work = st == DPL_OK ? work_alloc(&st, op, (int64_t)lwork * es) : NULL;
  if (st == DPL_OK) {
    for (int64_t b = 0; b < q.count; b++) {
      char *ro_ = R->_data + b * rr * n * es;
      memset(ro_, 0, (size_t)(rr * n * es));
      if (k == 0) { /* an empty A: R is zeros, a complete Q the identity */
        if (Q) {
          char *qd = Q->_data + b * m * qc * es;
          memset(qd, 0, (size_t)(m * qc * es));
          for (int64_t i = 0; i < m && i < qc; i++) dpl_store_f64(qd + (i * qc + i) * es, q.dt, 1.0);
        }
        continue;
      }
      to_cm(w, c->_data + b * m * n * es, m, n, q.dt);
      geqrf(&im, &in, w, &ld, tau, work, &lwork, &iv);
      for (int64_t i = 0; i < k; i++) /* R: the upper triangle of the first k rows */
        for (int64_t j = i; j < n; j++) memcpy(ro_ + (i * n + j) * es, (char *)w + (j * m + i) * es, (size_t)es);
      if (!Q) continue;
      orgqr(&im, &iqc, &ik, w, &ld, tau, work, &lwork, &iv);
      from_cm(Q->_data + b * m * qc * es, w, m, qc, ld, q.dt);
    }
  }
  free(w); free(tau); free(work);
  dpl_release_n(1, &c);
  return dpl_hand_over(st, 2, (dpl_tensor *[]){Q, R}, (dpl_tensor **[]){qo, ro});
}

/* ---- symmetric eigendecomposition (syevd): eigenvalues ascending, eigenvectors as the
 * columns of v (not made when vectors = 0), from A's lower (upper = 1: upper) triangle ---- */
int dpl_linalg_eigh(const dpl_tensor *a, int32_t upper, int32_t vectors, dpl_tensor **w, dpl_tensor **v,
                    dpl_tensor **info)
{
  const char *op = "linalg.eigh";
  if (!w || !v || !info) return dpl_errorf(DPL_EINVAL, "%s: an output pointer is NULL", op);
  *w = *v = *info = NULL;
  mats q;
  DPL_TRY(dpl_la_check(op, "A", a, 1, &q));
  if (dpl_is_devmem(a)) return dpl_la_eigh_dev(op, &q, a, upper, vectors, w, v, info);
  int64_t n = q.n, es = q.es;
  dpl_tensor *c = NULL, *W = NULL, *V = NULL, *inf = NULL;
  int st = dpl_contig_as(op, a, q.dt, &c);
  if (st == DPL_OK) st = new_batched(op, &q, q.dt, n, -1, &W);
  if (st == DPL_OK && vectors) st = new_batched(op, &q, q.dt, n, n, &V);
  if (st == DPL_OK) st = new_batched(op, &q, DPL_INT32, -1, -1, &inf);
  syevd_fn syevd = st == DPL_OK ? (syevd_fn)lapack(op, q.dt, "syevd", &st) : NULL;
  const char *jobz = vectors ? "V" : "N", *uplo = upper ? "U" : "L";
  int in = (int)n, ld = in > 1 ? in : 1, lw = -1, liw = -1, iv = 0, lwork = 1, liwork = 1, iwq = 0;
  char wq[16];
  if (st == DPL_OK && n > 0) {
    syevd(jobz, uplo, &in, wq, &ld, wq + 8, wq, &lw, &iwq, &liw, &iv, 1, 1);
    lwork = lwork_of(wq, q.dt);
    liwork = iwq > 1 ? iwq : 1;
  }
  void *buf = st == DPL_OK ? work_alloc(&st, op, n * n * es) : NULL;
  void *work = st == DPL_OK ? work_alloc(&st, op, (int64_t)lwork * es) : NULL;
  int *iwork = st == DPL_OK ? work_alloc(&st, op, (int64_t)liwork * (int64_t)sizeof(int)) : NULL;
  if (st == DPL_OK) {
    for (int64_t b = 0; b < q.count; b++) {
      int32_t *ip = (int32_t *)inf->_data + b;
      *ip = 0;
      if (n == 0) continue;
      to_cm(buf, c->_data + b * n * n * es, n, n, q.dt);
      syevd(jobz, uplo, &in, buf, &ld, W->_data + b * n * es, work, &lwork, iwork, &liwork, ip, 1, 1);
      if (V) from_cm(V->_data + b * n * n * es, buf, n, n, ld, q.dt);
    }
  }
  free(buf); free(work); free(iwork);
  dpl_release_n(1, &c);
  return dpl_hand_over(st, 3, (dpl_tensor *[]){W, V, inf}, (dpl_tensor **[]){w, v, info});
}

/* ---- SVD (gesdd): A = U diag(S) Vh, S descending; full = 1: U m x m and Vh n x n, else
 * m x k and k x n; uv = 0: S only (u, vh not made) ---- */
int dpl_linalg_svd(const dpl_tensor *a, int32_t full, int32_t uv, dpl_tensor **u, dpl_tensor **s, dpl_tensor **vh,
                   dpl_tensor **info)
{
  const char *op = "linalg.svd";
  if (!u || !s || !vh || !info) return dpl_errorf(DPL_EINVAL, "%s: an output pointer is NULL", op);
  *u = *s = *vh = *info = NULL;
  mats q;
  DPL_TRY(dpl_la_check(op, "A", a, 0, &q));
  if (dpl_is_devmem(a)) return dpl_la_svd_dev(op, &q, a, full, uv, u, s, vh, info);
  int64_t m = q.m, n = q.n, k = m < n ? m : n, es = q.es;
  int64_t uc = full ? m : k, vr = full ? n : k;
  dpl_tensor *c = NULL, *U = NULL, *S = NULL, *VH = NULL, *inf = NULL;
  int st = dpl_contig_as(op, a, q.dt, &c);
  if (st == DPL_OK && uv) st = new_batched(op, &q, q.dt, m, uc, &U);
  if (st == DPL_OK) st = new_batched(op, &q, q.dt, k, -1, &S);
  if (st == DPL_OK && uv) st = new_batched(op, &q, q.dt, vr, n, &VH);
  if (st == DPL_OK) st = new_batched(op, &q, DPL_INT32, -1, -1, &inf);
  gesdd_fn gesdd = st == DPL_OK ? (gesdd_fn)lapack(op, q.dt, "gesdd", &st) : NULL;
  const char *jobz = !uv ? "N" : full ? "A" : "S";
  int im = (int)m, in = (int)n, ld = im > 1 ? im : 1, ldu = im > 1 ? im : 1, ldvt = (int)(vr > 1 ? vr : 1);
  int lw = -1, iv = 0, lwork = 1;
  char wq[16];
  if (st == DPL_OK && k > 0) {
    int iwq[1];
    gesdd(jobz, &im, &in, wq, &ld, wq, wq, &ldu, wq, &ldvt, wq, &lw, iwq, &iv, 1);
    lwork = lwork_of(wq, q.dt);
  }
  void *wa = st == DPL_OK ? work_alloc(&st, op, m * n * es) : NULL;
  void *wu = st == DPL_OK && uv ? work_alloc(&st, op, m * uc * es) : NULL;
  void *wv = st == DPL_OK && uv ? work_alloc(&st, op, vr * n * es) : NULL;
  void *work = st == DPL_OK ? work_alloc(&st, op, (int64_t)lwork * es) : NULL;
  int *iwork = st == DPL_OK ? work_alloc(&st, op, 8 * (k > 0 ? k : 1) * (int64_t)sizeof(int)) : NULL;
  if (st == DPL_OK) {
    for (int64_t b = 0; b < q.count; b++) {
      int32_t *ip = (int32_t *)inf->_data + b;
      *ip = 0;
      if (k == 0) { /* an empty A: full U and Vh are identities */
        for (int t = 0; t < 2 && uv; t++) {
          dpl_tensor *E = t ? VH : U;
          int64_t rows = t ? vr : m, cols = t ? n : uc;
          char *d = E->_data + b * rows * cols * es;
          memset(d, 0, (size_t)(rows * cols * es));
          for (int64_t i = 0; i < rows && i < cols; i++) dpl_store_f64(d + (i * cols + i) * es, q.dt, 1.0);
        }
        continue;
      }
      const char *src = c->_data + b * m * n * es;
      int finite = 1;
      for (int64_t i = 0; i < m * n && finite; i++) finite = isfinite(getd(src, i, q.dt));
      if (!finite) { *ip = -1; continue; } /* (gesdd may loop on NaN: dpl.linalg reports it) */
      to_cm(wa, src, m, n, q.dt);
      gesdd(jobz, &im, &in, wa, &ld, S->_data + b * k * es, uv ? wu : wq, &ldu, uv ? wv : wq, &ldvt, work, &lwork,
            iwork, ip, 1);
      if (uv) {
        from_cm(U->_data + b * m * uc * es, wu, m, uc, ldu, q.dt);
        from_cm(VH->_data + b * vr * n * es, wv, vr, n, ldvt, q.dt);
      }
    }
  }
  free(wa); free(wu); free(wv); free(work); free(iwork);
  dpl_release_n(1, &c);
  return dpl_hand_over(st, 4, (dpl_tensor *[]){U, S, VH, inf}, (dpl_tensor **[]){u, s, vh, info});
}

/* ---- triangular solve: A X = B (left = 1) or X A = B (left = 0), A's upper (lower)
 * triangle, unit = 1: its diagonal taken as ones (trsm: no singularity check) ---- */
int dpl_linalg_solve_triangular(const dpl_tensor *a, const dpl_tensor *b, int32_t upper, int32_t left, int32_t unit,
                                dpl_tensor **x)
{
  const char *op = "linalg.solve_triangular";
  if (!x) return dpl_errorf(DPL_EINVAL, "%s: the output pointer is NULL", op);
  *x = NULL;
  mats qa, qb;
  DPL_TRY(dpl_la_check(op, "A", a, 1, &qa));
  DPL_TRY(dpl_la_check(op, "B", b, 0, &qb));
  DPL_TRY(same_dev(op, a, b));
  if (qb.dt != qa.dt)
    return dpl_errorf(DPL_EINVAL, "%s: expected A and B to have the same dtype, but found A of type %s and B of type %s "
                      "instead", op, dpl_dtype_name(qa.dt), dpl_dtype_name(qb.dt));
  int64_t need = left ? qb.m : qb.n;
  if (qb.nb != qa.nb || need != qa.n || memcmp(qb.bshape, qa.bshape, sizeof(int64_t) * (size_t)qa.nb) != 0)
    return dpl_errorf(DPL_EINVAL, "%s: B (%lld x %lld) does not fit A (%lld x %lld) with left=%s, or their batch shapes "
                      "differ", op, (long long)qb.m, (long long)qb.n, (long long)qa.n, (long long)qa.n,
                      left ? "true" : "false");
  if (dpl_is_devmem(a)) return dpl_la_trsm_dev(op, &qa, &qb, a, b, upper, left, unit, x);
  dpl_tensor *ca = NULL, *r = NULL;
  int st = dpl_contig_as(op, a, qa.dt, &ca);
  if (st == DPL_OK) st = new_batched(op, &qb, qa.dt, qb.m, qb.n, &r); /* the result: B, solved in place */
  if (st == DPL_OK) dpl_copy_raw(r, b);
  void *f = st == DPL_OK ? dpl_blas_symbol(qa.dt == DPL_FLOAT64 ? "cblas_dtrsm" : "cblas_strsm") : NULL;
  if (st == DPL_OK && !f)
    st = dpl_errorf(DPL_ENOTIMPL, "%s: not implemented here: cblas_?trsm was not found (%s)", op, dpl_blas_info());
  if (st == DPL_OK && qb.m > 0 && qb.n > 0) {
    /* CBLAS: RowMajor 101, Left 141 / Right 142, Upper 121 / Lower 122, NoTrans 111, NonUnit 131 / Unit 132 */
    int side = left ? 141 : 142, ul = upper ? 121 : 122, dg = unit ? 132 : 131;
    int M = (int)qb.m, N = (int)qb.n, lda = (int)qa.n, ldb = (int)qb.n;
    for (int64_t bi = 0; bi < qa.count; bi++) {
      const char *ap = ca->_data + bi * qa.n * qa.n * qa.es;
      char *bp = r->_data + bi * qb.m * qb.n * qa.es;
      if (qa.dt == DPL_FLOAT64) ((dtrsm_fn)f)(101, side, ul, 111, dg, M, N, 1.0, (const double *)ap, lda, (double *)bp, ldb);
      else ((strsm_fn)f)(101, side, ul, 111, dg, M, N, 1.0f, (const float *)ap, lda, (float *)bp, ldb);
    }
  }
  dpl_release_n(1, &ca);
  return dpl_hand_over(st, 1, (dpl_tensor *[]){r}, (dpl_tensor **[]){x});
}

/* ---- determinants through LU (getrf of A^T: det(A^T) = det(A), no transposed copy) ---- */
int dpl_linalg_det(const dpl_tensor *a, dpl_tensor **det, dpl_tensor **sign, dpl_tensor **logabsdet)
{
  const char *op = "linalg.det";
  if (!det || !sign || !logabsdet) return dpl_errorf(DPL_EINVAL, "%s: an output pointer is NULL", op);
  *det = *sign = *logabsdet = NULL;
  mats q;
  DPL_TRY(dpl_la_check(op, "A", a, 1, &q));
  if (dpl_is_devmem(a)) return dpl_la_det_dev(op, &q, a, det, sign, logabsdet);
  dpl_tensor *c = NULL, *D = NULL, *S = NULL, *L = NULL;
  int st = dpl_contig_as(op, a, q.dt, &c);
  if (st == DPL_OK) st = new_batched(op, &q, q.dt, -1, -1, &D);
  if (st == DPL_OK) st = new_batched(op, &q, q.dt, -1, -1, &S);
  if (st == DPL_OK) st = new_batched(op, &q, q.dt, -1, -1, &L);
  getrf_fn getrf = st == DPL_OK && q.n > 0 ? (getrf_fn)lapack(op, q.dt, "getrf", &st) : NULL;
  int64_t n = q.n, es = q.es;
  void *w = st == DPL_OK ? work_alloc(&st, op, n * n * es) : NULL;
  int *piv = st == DPL_OK ? work_alloc(&st, op, (n > 0 ? n : 1) * (int64_t)sizeof(int)) : NULL;
  if (st == DPL_OK) {
    int in = (int)n, ld = in > 1 ? in : 1, iv = 0;
    for (int64_t b = 0; b < q.count; b++) {
      double prod = 1, sgn = 1, logabs = 0;
      if (n > 0) {
        memcpy(w, c->_data + b * n * n * es, (size_t)(n * n * es));
        getrf(&in, &in, w, &ld, piv, &iv);
        for (int64_t i = 0; i < n; i++) {
          double d = getd(w, i * n + i, q.dt);
          if (piv[i] != i + 1) { prod = -prod; sgn = -sgn; }
          prod *= d;
          if (d != d) sgn = NAN;
          else sgn = d > 0 ? sgn : d < 0 ? -sgn : 0 * sgn;
          logabs += log(fabs(d));
        }
      }
      dpl_store_f64(D->_data + b * es, q.dt, prod);
      dpl_store_f64(S->_data + b * es, q.dt, sgn);
      dpl_store_f64(L->_data + b * es, q.dt, logabs);
    }
  }
  free(w); free(piv);
  dpl_release_n(1, &c);
  return dpl_hand_over(st, 3, (dpl_tensor *[]){D, S, L}, (dpl_tensor **[]){det, sign, logabsdet});
}

/* ---- geqrf: A = QR as LAPACK keeps it (R on and above the diagonal, the Householder vectors
 * below it, their scales in tau [..., min(m, n)]), row-major like A ---- */
int dpl_linalg_geqrf(const dpl_tensor *a, dpl_tensor **qr, dpl_tensor **tau)
{
  const char *op = "geqrf";
  if (!qr || !tau) return dpl_errorf(DPL_EINVAL, "%s: an output pointer is NULL", op);
  *qr = *tau = NULL;
  mats q;
  DPL_TRY(dpl_la_check(op, "A", a, 0, &q));
  if (dpl_is_devmem(a)) return dpl_la_geqrf_dev(op, &q, a, qr, tau); /* cuSOLVER's geqrf */
  int64_t m = q.m, n = q.n, k = m < n ? m : n, es = q.es;
  dpl_tensor *c = NULL, *R = NULL, *TAU = NULL;
  int st = dpl_contig_as(op, a, q.dt, &c);
  if (st == DPL_OK) st = new_batched(op, &q, q.dt, m, n, &R);
  if (st == DPL_OK) st = new_batched(op, &q, q.dt, k, -1, &TAU);
  geqrf_fn geqrf = st == DPL_OK && k > 0 ? (geqrf_fn)lapack(op, q.dt, "geqrf", &st) : NULL;
  int im = (int)m, in = (int)n, ld = im > 1 ? im : 1, lw = -1, iv = 0, lwork = 1;
  char wq[16];
  if (st == DPL_OK && k > 0) { geqrf(&im, &in, wq, &ld, wq, wq, &lw, &iv); lwork = lwork_of(wq, q.dt); }
  void *w = st == DPL_OK ? work_alloc(&st, op, m * n * es) : NULL;
  void *work = st == DPL_OK ? work_alloc(&st, op, (int64_t)lwork * es) : NULL;
  if (st == DPL_OK && k > 0) {
    for (int64_t b = 0; b < q.count; b++) {
      to_cm(w, c->_data + b * m * n * es, m, n, q.dt);
      geqrf(&im, &in, w, &ld, TAU->_data + b * k * es, work, &lwork, &iv);
      from_cm(R->_data + b * m * n * es, w, m, n, ld, q.dt);
    }
  } else if (st == DPL_OK && R->_numel > 0) {
    memcpy(R->_data, c->_data, (size_t)(R->_numel * es));
  }
  free(w); free(work);
  dpl_release_n(1, &c);
  return dpl_hand_over(st, 2, (dpl_tensor *[]){R, TAU}, (dpl_tensor **[]){qr, tau});
}
