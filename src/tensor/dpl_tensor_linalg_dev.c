/* dpl_tensor_linalg_dev.c: the GPU paths of dpl.linalg's factorizations and solves (LU,
 * solve, inverse, determinant, LU solve, Cholesky, QR, symmetric eigendecomposition, SVD,
 * triangular solve), called by dpl_tensor_linalg.c after its checks when an input is in
 * device memory. Each mirrors its CPU routine step for step, with the same LAPACK calls on
 * the same layouts (a batch copied at once into column-major matrices with a transposing
 * device copy, the factorization in place through the backend's DPL_BK_LINALG routines,
 * cuSOLVER in the CUDA plugin, and the results copied back row-major), so results, infos
 * and empty-matrix conventions are the CPU's. The per-matrix info is read back to the host
 * once per call (one wait for the GPU; dpl.linalg raises from it) and returned there, as an
 * int32 CPU tensor of the batch shape; a solve or inverse needs it before its second step
 * (the CPU skips singular matrices), which waits at that point instead. */
#include "dpl_tensor_linalg.h"
#include <math.h>
#include <stdlib.h>

static int la_run(const char *op, int32_t sub, const dpl_bk_linalg *g)
{
  dpl_bk_args a;
  memset(&a, 0, sizeof a);
  a.op = DPL_BK_LINALG;
  a.sub = sub;
  a.linalg = g;
  a.name = op;
  return dpl_bk_call(&a);
}

static dpl_bk_linalg la_init(const dpl_mats *q, const dpl_tensor *like)
{
  dpl_bk_linalg g;
  memset(&g, 0, sizeof g);
  g.dtype = q->dt;
  g.devindex = like->_devindex;
  g.count = q->count;
  return g;
}

static int need_plugin(const char *op)
{
  if (dpl_backend_get()) return DPL_OK;
  return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda (the CUDA plugin is not loaded)", op);
}

/* a fresh contiguous copy of t, with its last two dims swapped when tr (each matrix then
 * lies column-major); never t's storage (the routines work in place) */
static int fresh(const char *op, const dpl_tensor *t, int tr, dpl_tensor **out)
{
  *out = NULL;
  dpl_tensor *v = NULL, *r = NULL;
  int st = tr ? dpl_tensor_transpose(t, t->_ndim - 2, t->_ndim - 1, &v) : dpl_tensor_contiguous(t, &v);
  if (st == DPL_OK) st = dpl_new(op, t->_dtype, v->_ndim, v->_shape, t, &r);
  if (st == DPL_OK) st = dpl_copy_any(op, r, v);
  dpl_tensor_release(v);
  if (st != DPL_OK) { dpl_tensor_release(r); return st; }
  *out = r;
  return DPL_OK;
}
/* the row-major matrices of a column-major batch (a new contiguous tensor) */
static int back(const char *op, const dpl_tensor *cm, dpl_tensor **out)
{
  dpl_tensor *v = NULL;
  int st = dpl_tensor_transpose(cm, cm->_ndim - 2, cm->_ndim - 1, &v);
  if (st == DPL_OK) st = dpl_contig_as(op, v, v->_dtype, out);
  dpl_tensor_release(v);
  return st;
}
/* device int32 infos -> a host tensor of the batch shape (waits for the GPU) */
static int info_to_host(const char *op, const dpl_mats *q, const dpl_tensor *dev, dpl_tensor **out)
{
  DPL_TRY(dpl_la_new(op, q, DPL_INT32, -1, -1, NULL, out));
  if (!dev) { memset((*out)->_data, 0, (size_t)(q->count * 4)); return DPL_OK; }
  return dpl_copy_any(op, *out, dev);
}
/* batch copies of the identity (rows x cols) on like's device */
static int eyes(const char *op, const dpl_mats *q, int64_t rows, int64_t cols, const dpl_tensor *like, dpl_tensor **out)
{
  dpl_tensor *e = NULL;
  int st = dpl_la_new(op, q, q->dt, rows, cols, like, out);
  if (st == DPL_OK && (*out)->_numel > 0) st = dpl_tensor_eye(rows, cols, q->dt, like->_devtype, like->_devindex, &e);
  if (st == DPL_OK && e) st = dpl_copy_any(op, *out, e);
  dpl_tensor_release(e);
  return st;
}
static int zeros(const char *op, const dpl_mats *q, int32_t dt, int64_t r, int64_t c, const dpl_tensor *like,
                 dpl_tensor **out)
{
  DPL_TRY(dpl_la_new(op, q, dt, r, c, like, out));
  return (*out)->_numel > 0 ? dpl_tensor_fill_(*out, 0) : DPL_OK;
}

/* ---- LU (getrf of the column-major copy) ---- */
int dpl_la_lu_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, dpl_tensor **lu, dpl_tensor **pivots,
                  dpl_tensor **info)
{
  DPL_TRY(need_plugin(op));
  int64_t k = q->m < q->n ? q->m : q->n;
  dpl_tensor *cm = NULL, *r = NULL, *p = NULL, *id = NULL, *inf = NULL;
  int st = fresh(op, a, 1, &cm);
  if (st == DPL_OK) st = dpl_la_new(op, q, DPL_INT32, k, -1, a, &p);
  if (st == DPL_OK && k > 0) st = dpl_la_new(op, q, DPL_INT32, -1, -1, a, &id);
  if (st == DPL_OK && k > 0) {
    dpl_bk_linalg g = la_init(q, a);
    g.m = q->m; g.n = q->n;
    g.a = cm->_data; g.stride_a = q->m * q->n;
    g.ipiv = p->_data; g.stride_ipiv = k;
    g.info = id->_data;
    st = la_run(op, DPL_LA_GETRF, &g);
  }
  if (st == DPL_OK) st = back(op, cm, &r);
  if (st == DPL_OK) st = info_to_host(op, q, id, &inf);
  dpl_release_n(2, (dpl_tensor *[]){cm, id});
  return dpl_hand_over(st, 3, (dpl_tensor *[]){r, p, inf}, (dpl_tensor **[]){lu, pivots, info});
}

/* ---- solve: A's rows as columns are A^T: getrf of that, getrs('T') on B's column-major
 * copy, singular matrices skipped (X = B there, as on the CPU) ---- */
int dpl_la_solve_dev(const char *op, const dpl_mats *qa, const dpl_mats *qb, const dpl_tensor *a,
                     const dpl_tensor *b, dpl_tensor **x, dpl_tensor **info)
{
  DPL_TRY(need_plugin(op));
  int64_t n = qa->n, k = qb->n;
  dpl_tensor *wa = NULL, *wb = NULL, *p = NULL, *id = NULL, *inf = NULL, *r = NULL;
  int st = DPL_OK;
  if (n == 0 || k == 0) {
    st = dpl_la_new(op, qb, qa->dt, qb->m, qb->n, a, &r);
    if (st == DPL_OK) st = info_to_host(op, qa, NULL, &inf);
    return dpl_hand_over(st, 2, (dpl_tensor *[]){r, inf}, (dpl_tensor **[]){x, info});
  }
  st = fresh(op, a, 0, &wa);
  if (st == DPL_OK) st = fresh(op, b, 1, &wb);
  if (st == DPL_OK) st = dpl_la_new(op, qa, DPL_INT32, n, -1, a, &p);
  if (st == DPL_OK) st = dpl_la_new(op, qa, DPL_INT32, -1, -1, a, &id);
  dpl_bk_linalg g = la_init(qa, a);
  g.m = g.n = n;
  g.a = wa ? wa->_data : NULL; g.stride_a = n * n;
  g.ipiv = p ? p->_data : NULL; g.stride_ipiv = n;
  g.info = id ? id->_data : NULL;
  if (st == DPL_OK) st = la_run(op, DPL_LA_GETRF, &g);
  if (st == DPL_OK) st = info_to_host(op, qa, id, &inf);
  if (st == DPL_OK) {
    g.info = NULL;
    g.k = k; g.trans = 1;
    g.b = wb->_data; g.stride_b = n * k;
    g.skip = (const int32_t *)inf->_data;
    st = la_run(op, DPL_LA_GETRS, &g);
  }
  if (st == DPL_OK) st = back(op, wb, &r);
  dpl_release_n(4, (dpl_tensor *[]){wa, wb, p, id});
  return dpl_hand_over(st, 2, (dpl_tensor *[]){r, inf}, (dpl_tensor **[]){x, info});
}

/* ---- inverse: getrf of A^T, getrs('N') on the identity = inv(A^T) column-major = inv(A)
 * row-major; singular matrices factored again the other way round for A's own info ---- */
int dpl_la_inv_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, dpl_tensor **x, dpl_tensor **info)
{
  DPL_TRY(need_plugin(op));
  int64_t n = q->n;
  dpl_tensor *wa = NULL, *p = NULL, *id = NULL, *inf = NULL, *r = NULL, *ca = NULL, *inf2 = NULL;
  int st = DPL_OK;
  if (n == 0) {
    st = dpl_la_new(op, q, q->dt, 0, 0, a, &r);
    if (st == DPL_OK) st = info_to_host(op, q, NULL, &inf);
    return dpl_hand_over(st, 2, (dpl_tensor *[]){r, inf}, (dpl_tensor **[]){x, info});
  }
  st = fresh(op, a, 0, &wa);
  if (st == DPL_OK) st = eyes(op, q, n, n, a, &r);
  if (st == DPL_OK) st = dpl_la_new(op, q, DPL_INT32, n, -1, a, &p);
  if (st == DPL_OK) st = dpl_la_new(op, q, DPL_INT32, -1, -1, a, &id);
  dpl_bk_linalg g = la_init(q, a);
  g.m = g.n = n;
  g.a = wa ? wa->_data : NULL; g.stride_a = n * n;
  g.ipiv = p ? p->_data : NULL; g.stride_ipiv = n;
  g.info = id ? id->_data : NULL;
  if (st == DPL_OK) st = la_run(op, DPL_LA_GETRF, &g);
  if (st == DPL_OK) st = info_to_host(op, q, id, &inf);
  int32_t *iv = st == DPL_OK ? (int32_t *)inf->_data : NULL;
  int64_t bad = 0;
  for (int64_t b = 0; iv && b < q->count; b++) bad += iv[b] != 0;
  if (st == DPL_OK) {
    dpl_bk_linalg s = g;
    s.info = NULL;
    s.k = n; s.trans = 0;
    s.b = r->_data; s.stride_b = n * n;
    s.skip = iv;
    st = la_run(op, DPL_LA_GETRS, &s);
  }
  if (st == DPL_OK && bad > 0) { /* the singular ones: A's own LU for the zero pivot PyTorch names */
    int32_t *keep = malloc((size_t)q->count * sizeof(int32_t));
    if (!keep) st = dpl_errorf(DPL_ENOMEM, "%s: out of memory", op);
    for (int64_t b = 0; keep && b < q->count; b++) keep[b] = iv[b] == 0;
    if (st == DPL_OK) st = fresh(op, a, 1, &ca);
    if (st == DPL_OK) {
      dpl_bk_linalg s = g;
      s.a = ca->_data;
      s.skip = keep;
      st = la_run(op, DPL_LA_GETRF, &s);
    }
    if (st == DPL_OK) st = info_to_host(op, q, id, &inf2);
    for (int64_t b = 0; st == DPL_OK && b < q->count; b++)
      if (!keep[b]) iv[b] = ((int32_t *)inf2->_data)[b];
    free(keep);
  }
  dpl_release_n(5, (dpl_tensor *[]){wa, p, id, ca, inf2});
  return dpl_hand_over(st, 2, (dpl_tensor *[]){r, inf}, (dpl_tensor **[]){x, info});
}

/* ---- determinants: getrf of A^T on the GPU, then U's diagonal and the pivots read back and
 * combined on the host exactly as the CPU does (double products, the sign rules) ---- */
int dpl_la_det_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, dpl_tensor **det, dpl_tensor **sign,
                   dpl_tensor **logabsdet)
{
  DPL_TRY(need_plugin(op));
  int64_t n = q->n, es = q->es;
  dpl_tensor *wa = NULL, *p = NULL, *id = NULL, *dv = NULL, *hd = NULL, *hp = NULL;
  dpl_tensor *D = NULL, *S = NULL, *L = NULL, *dD = NULL, *dS = NULL, *dL = NULL;
  int st = DPL_OK;
  if (n > 0) {
    st = fresh(op, a, 0, &wa);
    if (st == DPL_OK) st = dpl_la_new(op, q, DPL_INT32, n, -1, a, &p);
    if (st == DPL_OK) st = dpl_la_new(op, q, DPL_INT32, -1, -1, a, &id);
    if (st == DPL_OK) {
      dpl_bk_linalg g = la_init(q, a);
      g.m = g.n = n;
      g.a = wa->_data; g.stride_a = n * n;
      g.ipiv = p->_data; g.stride_ipiv = n;
      g.info = id->_data;
      st = la_run(op, DPL_LA_GETRF, &g);
    }
    int64_t shape[2] = {q->count, n}, stride[2] = {n * n, n + 1};
    if (st == DPL_OK) st = dpl_make_view(wa, 2, shape, stride, wa->_offset, &dv);
    if (st == DPL_OK) st = dpl_tensor_to(dv, q->dt, DPL_DEVICE_CPU, 0, &hd);
    if (st == DPL_OK) st = dpl_tensor_to(p, DPL_INT32, DPL_DEVICE_CPU, 0, &hp);
  }
  if (st == DPL_OK) st = dpl_la_new(op, q, q->dt, -1, -1, NULL, &D);
  if (st == DPL_OK) st = dpl_la_new(op, q, q->dt, -1, -1, NULL, &S);
  if (st == DPL_OK) st = dpl_la_new(op, q, q->dt, -1, -1, NULL, &L);
  for (int64_t b = 0; st == DPL_OK && b < q->count; b++) {
    double prod = 1, sgn = 1, logabs = 0;
    const int32_t *piv = n > 0 ? (const int32_t *)hp->_data + b * n : NULL;
    for (int64_t i = 0; i < n; i++) {
      double d = dpl_load_f64(hd->_data + (b * n + i) * es, q->dt);
      if (piv[i] != i + 1) { prod = -prod; sgn = -sgn; }
      prod *= d;
      if (d != d) sgn = NAN;
      else sgn = d > 0 ? sgn : d < 0 ? -sgn : 0 * sgn;
      logabs += log(fabs(d));
    }
    dpl_store_f64(D->_data + b * es, q->dt, prod);
    dpl_store_f64(S->_data + b * es, q->dt, sgn);
    dpl_store_f64(L->_data + b * es, q->dt, logabs);
  }
  if (st == DPL_OK) st = dpl_tensor_to(D, q->dt, a->_devtype, a->_devindex, &dD);
  if (st == DPL_OK) st = dpl_tensor_to(S, q->dt, a->_devtype, a->_devindex, &dS);
  if (st == DPL_OK) st = dpl_tensor_to(L, q->dt, a->_devtype, a->_devindex, &dL);
  dpl_release_n(9, (dpl_tensor *[]){wa, p, id, dv, hd, hp, D, S, L});
  return dpl_hand_over(st, 3, (dpl_tensor *[]){dD, dS, dL}, (dpl_tensor **[]){det, sign, logabsdet});
}

/* ---- A X = B from lu_factor's LU and pivots (getrs; trans: A^T X = B). The pivots are read
 * to the host and checked as on the CPU (a bad one would make getrs read out of bounds) ---- */
int dpl_la_lu_solve_dev(const char *op, const dpl_mats *qa, const dpl_mats *qb, const dpl_tensor *lu,
                        const dpl_tensor *pivots, const dpl_tensor *b, int32_t trans, dpl_tensor **x)
{
  DPL_TRY(need_plugin(op));
  if (dpl_is_devmem(pivots) && pivots->_devindex != lu->_devindex) DPL_TRY(dpl_check_same_device(op, lu, pivots));
  int64_t n = qa->n, k = qb->n;
  dpl_tensor *hp = NULL, *dp = NULL, *ca = NULL, *cb = NULL, *r = NULL;
  if (n == 0 || k == 0) {
    int st = dpl_la_new(op, qb, qa->dt, qb->m, qb->n, lu, &r);
    return dpl_hand_over(st, 1, (dpl_tensor *[]){r}, (dpl_tensor **[]){x});
  }
  int st = dpl_tensor_to(pivots, DPL_INT32, DPL_DEVICE_CPU, 0, &hp);
  if (st == DPL_OK && !dpl_is_contig(hp)) {
    dpl_tensor *c = NULL;
    st = dpl_contig_as(op, hp, DPL_INT32, &c);
    dpl_tensor_release(hp);
    hp = c;
  }
  for (int64_t bi = 0; st == DPL_OK && bi < qa->count; bi++) {
    const int32_t *piv = (const int32_t *)hp->_data + bi * n;
    for (int64_t i = 0; i < n && st == DPL_OK; i++)
      if (piv[i] < 1 || piv[i] > n)
        st = dpl_errorf(DPL_EINVAL, "%s: pivot %lld of matrix %lld is %d, expected 1..%lld (lu_factor's pivots)", op,
                        (long long)i + 1, (long long)bi + 1, (int)piv[i], (long long)n);
  }
  if (st == DPL_OK) st = dpl_tensor_to(hp, DPL_INT32, lu->_devtype, lu->_devindex, &dp);
  if (st == DPL_OK) st = fresh(op, lu, 1, &ca);
  if (st == DPL_OK) st = fresh(op, b, 1, &cb);
  if (st == DPL_OK) {
    dpl_bk_linalg g = la_init(qa, lu);
    g.m = g.n = n; g.k = k; g.trans = trans ? 1 : 0;
    g.a = ca->_data; g.stride_a = n * n;
    g.ipiv = dp->_data; g.stride_ipiv = n;
    g.b = cb->_data; g.stride_b = n * k;
    st = la_run(op, DPL_LA_GETRS, &g);
  }
  if (st == DPL_OK) st = back(op, cb, &r);
  dpl_release_n(4, (dpl_tensor *[]){hp, dp, ca, cb});
  return dpl_hand_over(st, 1, (dpl_tensor *[]){r}, (dpl_tensor **[]){x});
}

/* ---- Cholesky (potrf of the column-major copy; the other triangle zeroed) ---- */
int dpl_la_cholesky_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, int32_t upper, dpl_tensor **l,
                        dpl_tensor **info)
{
  DPL_TRY(need_plugin(op));
  int64_t n = q->n;
  dpl_tensor *cm = NULL, *id = NULL, *r0 = NULL, *r = NULL, *inf = NULL;
  int st = fresh(op, a, 1, &cm);
  if (st == DPL_OK && n > 0) st = dpl_la_new(op, q, DPL_INT32, -1, -1, a, &id);
  if (st == DPL_OK && n > 0) {
    dpl_bk_linalg g = la_init(q, a);
    g.m = g.n = n; g.upper = upper ? 1 : 0;
    g.a = cm->_data; g.stride_a = n * n;
    g.info = id->_data;
    st = la_run(op, DPL_LA_POTRF, &g);
  }
  if (st == DPL_OK) st = back(op, cm, &r0);
  if (st == DPL_OK) st = n > 0 ? dpl_tril(r0, 0, upper ? 1 : 0, &r) : dpl_tensor_contiguous(r0, &r);
  if (st == DPL_OK) st = info_to_host(op, q, id, &inf);
  dpl_release_n(3, (dpl_tensor *[]){cm, id, r0});
  return dpl_hand_over(st, 2, (dpl_tensor *[]){r, inf}, (dpl_tensor **[]){l, info});
}

/* ---- QR: geqrf in a column-major buffer m x max(n, Q's columns), R its upper triangle, then
 * orgqr in place for Q (modes as dpl_linalg_qr) ---- */
int dpl_la_qr_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, int32_t mode, dpl_tensor **qo,
                  dpl_tensor **ro)
{
  DPL_TRY(need_plugin(op));
  int64_t m = q->m, n = q->n, k = m < n ? m : n;
  int64_t qc = mode == 1 ? m : k, rr = mode == 1 ? m : k, wcols = n > qc ? n : qc;
  int32_t nd = q->nb + 2;
  dpl_tensor *Q = NULL, *R = NULL, *buf = NULL, *bt = NULL, *head = NULL, *at = NULL, *tau = NULL;
  dpl_tensor *rv = NULL, *rt = NULL, *rtop = NULL, *qv = NULL;
  int st = zeros(op, q, q->dt, rr, n, a, &R);
  if (st == DPL_OK && k == 0) { /* an empty A: R is zeros, a complete Q the identity */
    if (mode != 2) st = eyes(op, q, m, qc, a, &Q);
    return dpl_hand_over(st, 2, (dpl_tensor *[]){Q, R}, (dpl_tensor **[]){qo, ro});
  }
  if (st == DPL_OK) st = zeros(op, q, q->dt, wcols, m, a, &buf); /* column-major m x wcols */
  if (st == DPL_OK) st = dpl_tensor_narrow(buf, nd - 2, 0, n, &head);
  if (st == DPL_OK) st = dpl_tensor_transpose(a, nd - 2, nd - 1, &at);
  if (st == DPL_OK) st = dpl_copy_any(op, head, at);
  if (st == DPL_OK) st = dpl_la_new(op, q, q->dt, k, -1, a, &tau);
  dpl_bk_linalg g = la_init(q, a);
  g.m = m; g.n = n; g.k = k;
  g.a = buf ? buf->_data : NULL; g.stride_a = m * wcols;
  g.w = tau ? tau->_data : NULL; g.stride_w = k;
  if (st == DPL_OK) st = la_run(op, DPL_LA_GEQRF, &g);
  /* R: the upper triangle of the first k rows of A's place (rows of bt = A's rows) */
  if (st == DPL_OK) st = dpl_tensor_transpose(head, nd - 2, nd - 1, &bt);
  if (st == DPL_OK) st = dpl_tensor_narrow(bt, nd - 2, 0, k, &rv);
  if (st == DPL_OK) st = dpl_tril(rv, 0, 1, &rt);
  if (st == DPL_OK) st = dpl_tensor_narrow(R, nd - 2, 0, k, &rtop);
  if (st == DPL_OK) st = dpl_copy_any(op, rtop, rt);
  if (st == DPL_OK && mode != 2) {
    g.n = qc;
    st = la_run(op, DPL_LA_ORGQR, &g);
    if (st == DPL_OK) st = dpl_tensor_narrow(buf, nd - 2, 0, qc, &qv);
    if (st == DPL_OK) st = back(op, qv, &Q);
  }
  dpl_release_n(9, (dpl_tensor *[]){buf, bt, head, at, tau, rv, rt, rtop, qv});
  return dpl_hand_over(st, 2, (dpl_tensor *[]){Q, R}, (dpl_tensor **[]){qo, ro});
}

/* ---- geqrf: LAPACK's compact QR (R and the reflectors in A's place, tau [..., k]) from
 * cuSOLVER's geqrf of the column-major copy, read back row-major (dpl_linalg_geqrf's result) ---- */
int dpl_la_geqrf_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, dpl_tensor **qr, dpl_tensor **tau)
{
  DPL_TRY(need_plugin(op));
  int64_t m = q->m, n = q->n, k = m < n ? m : n;
  dpl_tensor *c = NULL, *cm = NULL, *R = NULL, *T = NULL;
  int st = dpl_contig_as(op, a, q->dt, &c);
  if (st == DPL_OK) st = fresh(op, c, 1, &cm);
  if (st == DPL_OK) st = dpl_la_new(op, q, q->dt, k, -1, a, &T);
  if (st == DPL_OK && k > 0 && q->count > 0) {
    dpl_bk_linalg g = la_init(q, a);
    g.m = m; g.n = n; g.k = k;
    g.a = cm->_data; g.stride_a = m * n;
    g.w = T->_data; g.stride_w = k;
    st = la_run(op, DPL_LA_GEQRF, &g);
  }
  if (st == DPL_OK) st = back(op, cm, &R);
  dpl_release_n(2, (dpl_tensor *[]){c, cm});
  return dpl_hand_over(st, 2, (dpl_tensor *[]){R, T}, (dpl_tensor **[]){qr, tau});
}

/* ---- symmetric eigendecomposition (syevd of the column-major copy) ---- */
int dpl_la_eigh_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, int32_t upper, int32_t vectors,
                    dpl_tensor **w, dpl_tensor **v, dpl_tensor **info)
{
  DPL_TRY(need_plugin(op));
  int64_t n = q->n;
  dpl_tensor *cm = NULL, *W = NULL, *V = NULL, *id = NULL, *inf = NULL;
  int st = fresh(op, a, 1, &cm);
  if (st == DPL_OK) st = dpl_la_new(op, q, q->dt, n, -1, a, &W);
  if (st == DPL_OK && n > 0) st = dpl_la_new(op, q, DPL_INT32, -1, -1, a, &id);
  if (st == DPL_OK && n > 0) {
    dpl_bk_linalg g = la_init(q, a);
    g.m = g.n = n; g.upper = upper ? 1 : 0; g.vectors = vectors ? 1 : 0;
    g.a = cm->_data; g.stride_a = n * n;
    g.w = W->_data; g.stride_w = n;
    g.info = id->_data;
    st = la_run(op, DPL_LA_SYEVD, &g);
  }
  if (st == DPL_OK && vectors) st = back(op, cm, &V);
  if (st == DPL_OK) st = info_to_host(op, q, id, &inf);
  dpl_release_n(2, (dpl_tensor *[]){cm, id});
  return dpl_hand_over(st, 3, (dpl_tensor *[]){W, V, inf}, (dpl_tensor **[]){w, v, info});
}

/* ---- SVD: cuSOLVER's gesvd (m >= n only) of A's column-major copy, or of A^T (its rows
 * read as columns) when m < n: A^T = U' S V'^T gives U = V', Vh = U'^T, which are the
 * row-major readings of gesvd's Vt' and U' as they lie. A matrix with a non-finite element
 * is replaced by zeros for the call and gets info -1 (the CPU's mark: dpl.linalg raises) ---- */
int dpl_la_svd_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, int32_t full, int32_t uv, dpl_tensor **u,
                   dpl_tensor **s, dpl_tensor **vh, dpl_tensor **info)
{
  DPL_TRY(need_plugin(op));
  int64_t m = q->m, n = q->n, k = m < n ? m : n;
  int64_t uc = full ? m : k, vr = full ? n : k;
  dpl_tensor *U = NULL, *S = NULL, *VH = NULL, *inf = NULL;
  int st = dpl_la_new(op, q, q->dt, k, -1, a, &S);
  if (st == DPL_OK && k == 0) { /* an empty A: full U and Vh are identities */
    if (uv) st = eyes(op, q, m, uc, a, &U);
    if (st == DPL_OK && uv) st = eyes(op, q, vr, n, a, &VH);
    if (st == DPL_OK) st = info_to_host(op, q, NULL, &inf);
    return dpl_hand_over(st, 4, (dpl_tensor *[]){U, S, VH, inf}, (dpl_tensor **[]){u, s, vh, info});
  }
  dpl_tensor *fin = NULL, *flat = NULL, *isf = NULL, *ok = NULL, *okm = NULL, *zero = NULL, *a2 = NULL, *cm = NULL;
  dpl_tensor *id = NULL, *minus = NULL, *okv = NULL, *id2 = NULL, *Ub = NULL, *Vb = NULL;
  int tall = m >= n;
  int64_t M = tall ? m : n, N = tall ? n : m;             /* the matrix gesvd sees: M x N, M >= N */
  int64_t ucols = full ? M : N;                             /* its U's columns */
  int64_t one3[3] = {q->count, 1, 1}, flat2[2] = {q->count, m * n}, mn3[3] = {q->count, m, n};
  /* per matrix: all elements finite */
  if (st == DPL_OK) st = dpl_unary(DPL_OP_ISFINITE, a, &isf);
  if (st == DPL_OK) st = dpl_tensor_reshape(isf, 2, flat2, &flat);
  if (st == DPL_OK) st = dpl_reduce(DPL_RED_ALL, flat, 1, 0, 0, &ok);
  if (st == DPL_OK) st = dpl_tensor_reshape(ok, 3, one3, &okm);
  if (st == DPL_OK) st = dpl_new_on(op, q->dt, 0, NULL, a->_devtype, a->_devindex, &zero);
  if (st == DPL_OK) st = dpl_tensor_fill_(zero, 0);
  if (st == DPL_OK) st = dpl_tensor_reshape(a, 3, mn3, &fin);
  if (st == DPL_OK) st = dpl_where(okm, fin, zero, &a2); /* [count, m, n], non-finite matrices zeroed */
  if (st == DPL_OK) st = fresh(op, a2, tall, &cm);       /* column-major A (tall) or A^T (wide) */
  if (st == DPL_OK) st = dpl_la_new(op, q, DPL_INT32, -1, -1, a, &id);
  if (st == DPL_OK && uv) {
    int64_t us[3] = {q->count, ucols, M}, vs[3] = {q->count, N, N};
    st = dpl_new(op, q->dt, 3, us, a, &Ub);
    if (st == DPL_OK) st = dpl_new(op, q->dt, 3, vs, a, &Vb);
  }
  if (st == DPL_OK) {
    dpl_bk_linalg g = la_init(q, a);
    g.m = M; g.n = N; g.full = full ? 1 : 0; g.vectors = uv ? 1 : 0;
    g.a = cm->_data; g.stride_a = M * N;
    g.w = S->_data; g.stride_w = k;
    g.info = id->_data;
    if (uv) { g.b = Ub->_data; g.stride_b = M * ucols; g.c = Vb->_data; g.stride_c = N * N; }
    st = la_run(op, DPL_LA_GESVD, &g);
  }
  /* info = finite ? gesvd's : -1, read back once */
  if (st == DPL_OK) st = dpl_new_on(op, DPL_INT32, 0, NULL, a->_devtype, a->_devindex, &minus);
  if (st == DPL_OK) st = dpl_tensor_fill_(minus, -1);
  if (st == DPL_OK) st = dpl_tensor_reshape(ok, q->nb, q->bshape, &okv);
  if (st == DPL_OK) st = dpl_where(okv, id, minus, &id2);
  if (st == DPL_OK) st = info_to_host(op, q, id2, &inf);
  if (st == DPL_OK && uv) {
    int64_t us[DPL_MAX_DIMS], vs[DPL_MAX_DIMS];
    memcpy(us, q->bshape, sizeof(int64_t) * (size_t)q->nb);
    memcpy(vs, q->bshape, sizeof(int64_t) * (size_t)q->nb);
    if (tall) { /* Ub: U^T row-major, Vb: Vt^T = V row-major */
      st = back(op, Ub, &U);
      if (st == DPL_OK) st = back(op, Vb, &VH);
    } else {    /* Ub: U'^T = Vh, Vb: V' = U */
      us[q->nb] = m; us[q->nb + 1] = m;
      vs[q->nb] = ucols; vs[q->nb + 1] = n;
      st = dpl_tensor_reshape(Vb, q->nb + 2, us, &U);
      if (st == DPL_OK) st = dpl_tensor_reshape(Ub, q->nb + 2, vs, &VH);
    }
    if (st == DPL_OK && tall) { /* back to the batch shape */
      dpl_tensor *u2 = NULL, *v2 = NULL;
      us[q->nb] = m; us[q->nb + 1] = uc;
      vs[q->nb] = vr; vs[q->nb + 1] = n;
      st = dpl_tensor_reshape(U, q->nb + 2, us, &u2);
      if (st == DPL_OK) st = dpl_tensor_reshape(VH, q->nb + 2, vs, &v2);
      dpl_release_n(2, (dpl_tensor *[]){U, VH});
      U = u2; VH = v2;
    }
  }
  dpl_release_n(14, (dpl_tensor *[]){fin, flat, isf, ok, okm, zero, a2, cm, id, minus, okv, id2, Ub, Vb});
  return dpl_hand_over(st, 4, (dpl_tensor *[]){U, S, VH, inf}, (dpl_tensor **[]){u, s, vh, info});
}

/* ---- triangular solve (cuBLAS trsm): row-major op(A) X = B is column-major X^T A^T = B^T
 * on the same memory: the other side, the other triangle ---- */
int dpl_la_trsm_dev(const char *op, const dpl_mats *qa, const dpl_mats *qb, const dpl_tensor *a, const dpl_tensor *b,
                    int32_t upper, int32_t left, int32_t unit, dpl_tensor **x)
{
  DPL_TRY(need_plugin(op));
  dpl_tensor *ca = NULL, *r = NULL;
  int st = dpl_contig_as(op, a, qa->dt, &ca);
  if (st == DPL_OK) st = fresh(op, b, 0, &r);
  if (st == DPL_OK && qb->m > 0 && qb->n > 0) {
    dpl_bk_linalg g = la_init(qa, a);
    g.m = qb->n; g.n = qb->m;
    g.left = left ? 0 : 1; g.upper = upper ? 0 : 1; g.unit = unit ? 1 : 0;
    g.a = ca->_data; g.stride_a = qa->n * qa->n;
    g.b = r->_data; g.stride_b = qb->m * qb->n;
    st = la_run(op, DPL_LA_TRSM, &g);
  }
  dpl_release_n(1, &ca);
  return dpl_hand_over(st, 1, (dpl_tensor *[]){r}, (dpl_tensor **[]){x});
}
