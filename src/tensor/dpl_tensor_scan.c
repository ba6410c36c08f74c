/* dpl_tensor_scan.c: the kernels of the shape group of tensor methods: cumulative
 * scans along a dim (cumsum, cumprod and cumprod's gradient, cummax/cummin with
 * their indices), index-mapped copies (flip, roll), tril/triu (out of place and in
 * place) and the index list of repeat_interleave. flip, roll and tril/triu of a tensor in
 * device memory are composed of backend ops (index_select with a mapped arange; a mask
 * fill); the others fail there with "<op>: not implemented on cuda". Dims and indices are
 * 0-based here (dpl.tensor_shape converts); results are new contiguous tensors on
 * the input's device. Work is split over the thread pool when it is large. */
#include "dpl_tensor_internal.h"
#include <stdlib.h>

enum { SCAN_CHUNK = 256, PAR_ELEMS = 32768 };

static int need_out(const char *name, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  return DPL_OK;
}

/* dim of a (0-based; a 0-d tensor counts as one dim of size 1) */
static int scan_dim(const char *name, const dpl_tensor *a, int32_t dim, int64_t *outer, int64_t *D, int64_t *inner)
{
  int32_t nd = a->_ndim > 0 ? a->_ndim : 1;
  if (dim < 0 || dim >= nd)
    return dpl_errorf(DPL_EINVAL, "%s: dim %d out of range (expected 0..%d for a %d-d tensor, 0-based)", name, (int)dim,
                      (int)nd - 1, (int)a->_ndim);
  *outer = 1;
  *inner = 1;
  *D = 1;
  if (a->_ndim == 0) return DPL_OK;
  for (int32_t i = 0; i < dim; i++) *outer *= a->_shape[i];
  for (int32_t i = dim + 1; i < a->_ndim; i++) *inner *= a->_shape[i];
  *D = a->_shape[dim];
  return DPL_OK;
}

/* ---- rows of n elements of dtype dt to and from double / int64 ---- */
static void load_d(const char *p, int32_t dt, int64_t n, double *v)
{
  switch (dt) {
  case DPL_FLOAT32: for (int64_t i = 0; i < n; i++) v[i] = ((const float *)p)[i]; break;
  case DPL_FLOAT64: memcpy(v, p, (size_t)n * sizeof(double)); break;
  case DPL_FLOAT16: for (int64_t i = 0; i < n; i++) v[i] = dpl_h2f(((const uint16_t *)p)[i]); break;
  case DPL_BFLOAT16: for (int64_t i = 0; i < n; i++) v[i] = dpl_bf2f(((const uint16_t *)p)[i]); break;
  default: for (int64_t i = 0; i < n; i++) v[i] = dpl_load_f64(p + i * dpl_elsize(dt), dt); break;
  }
}
static void store_d(char *p, int32_t dt, int64_t n, const double *v)
{
  switch (dt) {
  case DPL_FLOAT32: for (int64_t i = 0; i < n; i++) ((float *)p)[i] = (float)v[i]; break;
  case DPL_FLOAT64: memcpy(p, v, (size_t)n * sizeof(double)); break;
  default: for (int64_t i = 0; i < n; i++) dpl_store_f64(p + i * dpl_elsize(dt), dt, v[i]); break;
  }
}
static void load_i(const char *p, int32_t dt, int64_t n, int64_t *v)
{
  switch (dt) {
  case DPL_INT64: memcpy(v, p, (size_t)n * sizeof(int64_t)); break;
  case DPL_INT32: for (int64_t i = 0; i < n; i++) v[i] = ((const int32_t *)p)[i]; break;
  case DPL_UINT8: for (int64_t i = 0; i < n; i++) v[i] = ((const uint8_t *)p)[i]; break;
  default: for (int64_t i = 0; i < n; i++) v[i] = dpl_load_i64(p + i * dpl_elsize(dt), dt); break;
  }
}
static void store_i(char *p, int32_t dt, int64_t n, const int64_t *v)
{
  switch (dt) {
  case DPL_INT64: memcpy(p, v, (size_t)n * sizeof(int64_t)); break;
  case DPL_INT32: for (int64_t i = 0; i < n; i++) ((int32_t *)p)[i] = (int32_t)(uint32_t)(uint64_t)v[i]; break;
  default: for (int64_t i = 0; i < n; i++) dpl_store_i64(p + i * dpl_elsize(dt), dt, v[i]); break;
  }
}

/* ---- cumsum / cumprod / cummax / cummin ----
 * The input, contiguous in the result's dtype, is cut into tasks: one slice of
 * the outer dims times a chunk of up to SCAN_CHUNK inner positions, scanned
 * along the dim with one accumulator per inner position (double for floating
 * dtypes, as PyTorch's CPU kernels accumulate, int64 with wrap-around for
 * integers). */
typedef struct scan_job {
  int32_t op, dt, reverse;
  int64_t D, inner, nchunks, es;
  const char *src;
  char *dst;
  int64_t *idx; /* cummax / cummin */
} scan_job;

/* 1 when v takes over from the running extreme acc (cummax: mx = 1) */
static inline int takes_d(double v, double acc, int mx)
{
  return v != v || (acc == acc && (mx ? v >= acc : v <= acc));
}
static inline int takes_i(int64_t v, int64_t acc, int mx) { return mx ? v >= acc : v <= acc; }

/* inner == 1: each task scans one contiguous slice, SCAN_CHUNK elements at a time */
static void scan_rows(const scan_job *j, int64_t lo, int64_t hi)
{
  double vd[SCAN_CHUNK];
  int64_t vi[SCAN_CHUNK], bi[SCAN_CHUNK];
  int fl = dpl_is_float(j->dt), mx = j->op == DPL_SCAN_MAX;
  for (int64_t o = lo; o < hi; o++) {
    double ad = 0;
    int64_t ai = 0, best = 0;
    for (int64_t k0 = 0; k0 < j->D; k0 += SCAN_CHUNK) {
      int64_t n = j->D - k0 < SCAN_CHUNK ? j->D - k0 : SCAN_CHUNK;
      int64_t start = j->reverse ? j->D - k0 - n : k0; /* the chunk's first element */
      int64_t off = o * j->D + start;
      if (fl) load_d(j->src + off * j->es, j->dt, n, vd); else load_i(j->src + off * j->es, j->dt, n, vi);
      for (int64_t s = 0; s < n; s++) {
        int64_t e = j->reverse ? n - 1 - s : s;
        int first = k0 == 0 && s == 0;
        switch (j->op) {
        case DPL_SCAN_SUM:
          if (fl) vd[e] = ad = first ? vd[e] : ad + vd[e];
          else vi[e] = ai = first ? vi[e] : (int64_t)((uint64_t)ai + (uint64_t)vi[e]);
          break;
        case DPL_SCAN_PROD:
          if (fl) vd[e] = ad = first ? vd[e] : ad * vd[e];
          else vi[e] = ai = first ? vi[e] : (int64_t)((uint64_t)ai * (uint64_t)vi[e]);
          break;
        default:
          if (fl) { if (first || takes_d(vd[e], ad, mx)) { ad = vd[e]; best = start + e; } vd[e] = ad; }
          else { if (first || takes_i(vi[e], ai, mx)) { ai = vi[e]; best = start + e; } vi[e] = ai; }
          bi[e] = best;
          break;
        }
      }
      if (fl) store_d(j->dst + off * j->es, j->dt, n, vd); else store_i(j->dst + off * j->es, j->dt, n, vi);
      if (j->idx) memcpy(j->idx + off, bi, (size_t)n * sizeof(int64_t));
    }
  }
}

/* cumsum of float32 / float64 rows (inner == 1, forward): ROWS rows at a time, each with its
 * double accumulator, so that the additions of different rows overlap (one row alone is a
 * chain of dependent additions); the first element is copied (-0 stays -0), as scan_rows does */
enum { ROWS = 8 };
#define CUMSUM_ROWS(T)                                                                                \
  do {                                                                                                \
    const T *x = (const T *)j->src;                                                                   \
    T *y = (T *)j->dst;                                                                               \
    int64_t o = lo, D = j->D;                                                                         \
    for (; o + ROWS <= hi; o += ROWS) {                                                               \
      double acc[ROWS];                                                                               \
      for (int r = 0; r < ROWS; r++) { acc[r] = x[(o + r) * D]; y[(o + r) * D] = x[(o + r) * D]; }   \
      for (int64_t k = 1; k < D; k++)                                                                 \
        for (int r = 0; r < ROWS; r++) {                                                              \
          acc[r] += x[(o + r) * D + k];                                                               \
          y[(o + r) * D + k] = (T)acc[r];                                                             \
        }                                                                                             \
    }                                                                                                 \
    for (; o < hi; o++) {                                                                             \
      double acc = x[o * D];                                                                          \
      y[o * D] = x[o * D];                                                                            \
      for (int64_t k = 1; k < D; k++) { acc += x[o * D + k]; y[o * D + k] = (T)acc; }                 \
    }                                                                                                 \
  } while (0)
static void cumsum_rows(const scan_job *j, int64_t lo, int64_t hi)
{
  if (j->dt == DPL_FLOAT32) CUMSUM_ROWS(float);
  else CUMSUM_ROWS(double);
}
#undef CUMSUM_ROWS

static void scan_range(int64_t lo, int64_t hi, void *ctx)
{
  const scan_job *j = ctx;
  if (j->inner == 1 && j->op == DPL_SCAN_SUM && !j->reverse && j->D > 0 &&
      (j->dt == DPL_FLOAT32 || j->dt == DPL_FLOAT64)) { cumsum_rows(j, lo, hi); return; }
  if (j->inner == 1) { scan_rows(j, lo, hi); return; }
  double accd[SCAN_CHUNK], vd[SCAN_CHUNK];
  int64_t acci[SCAN_CHUNK], vi[SCAN_CHUNK], best[SCAN_CHUNK];
  int fl = dpl_is_float(j->dt);
  for (int64_t task = lo; task < hi; task++) {
    int64_t o = task / j->nchunks, i0 = (task % j->nchunks) * SCAN_CHUNK;
    int64_t n = j->inner - i0 < SCAN_CHUNK ? j->inner - i0 : SCAN_CHUNK;
    for (int64_t s = 0; s < j->D; s++) {
      int64_t k = j->reverse ? j->D - 1 - s : s;
      int64_t off = (o * j->D + k) * j->inner + i0;
      const char *p = j->src + off * j->es;
      char *q = j->dst + off * j->es;
      if (fl) load_d(p, j->dt, n, vd); else load_i(p, j->dt, n, vi);
      switch (j->op) {
      case DPL_SCAN_SUM:
        if (fl) { for (int64_t i = 0; i < n; i++) accd[i] = s ? accd[i] + vd[i] : vd[i]; }
        else { for (int64_t i = 0; i < n; i++) acci[i] = s ? (int64_t)((uint64_t)acci[i] + (uint64_t)vi[i]) : vi[i]; }
        break;
      case DPL_SCAN_PROD:
        if (fl) { for (int64_t i = 0; i < n; i++) accd[i] = s ? accd[i] * vd[i] : vd[i]; }
        else { for (int64_t i = 0; i < n; i++) acci[i] = s ? (int64_t)((uint64_t)acci[i] * (uint64_t)vi[i]) : vi[i]; }
        break;
      default: { /* PyTorch's rule: a NaN always takes over; ties move to the later index */
        int mx = j->op == DPL_SCAN_MAX;
        for (int64_t i = 0; i < n; i++) {
          int take = s == 0 || (fl ? takes_d(vd[i], accd[i], mx) : takes_i(vi[i], acci[i], mx));
          if (take) {
            if (fl) accd[i] = vd[i]; else acci[i] = vi[i];
            best[i] = k;
          }
        }
        memcpy(j->idx + off, best, (size_t)n * sizeof(int64_t));
        break;
      }
      }
      if (fl) store_d(q, j->dt, n, accd); else store_i(q, j->dt, n, acci);
    }
  }
}

static int run_scan(const char *name, int32_t op, const dpl_tensor *a, int32_t dim, int32_t dt, int32_t reverse,
                    dpl_tensor **res, dpl_tensor **idx)
{
  int64_t outer = 0, D = 1, inner = 1;
  DPL_TRY(scan_dim(name, a, dim, &outer, &D, &inner));
  dpl_tensor *ca = NULL;
  DPL_TRY(dpl_contig_as(name, a, dt, &ca));
  if (dpl_is_devmem(a)) { /* the backend's scan kernel (the same order and accumulators) */
    dpl_bk_args k = {.op = DPL_BK_SCAN, .sub = op, .i = {reverse}, .l = {D, inner}, .in = {ca}, .out = {res, idx},
                     .name = name};
    int st = dpl_bk_call(&k);
    dpl_tensor_release(ca);
    return st;
  }
  int st = dpl_new(name, dt, a->_ndim, a->_shape, a, res);
  if (st == DPL_OK && idx) st = dpl_new(name, DPL_INT64, a->_ndim, a->_shape, a, idx);
  if (st == DPL_OK && a->_numel > 0) {
    scan_job j = {.op = op, .dt = dt, .reverse = reverse, .D = D, .inner = inner,
                  .nchunks = (inner + SCAN_CHUNK - 1) / SCAN_CHUNK, .es = dpl_elsize(dt), .src = ca->_data,
                  .dst = (*res)->_data, .idx = idx ? (*idx)->_data : NULL};
    int64_t per = D * (inner < SCAN_CHUNK ? inner : SCAN_CHUNK);
    dpl_parallel_for(outer * j.nchunks, PAR_ELEMS / (per > 0 ? per : 1) + 1, scan_range, &j);
  }
  dpl_tensor_release(ca);
  return st;
}

int dpl_cumulative(int32_t op, const dpl_tensor *a, int32_t dim, int32_t dtype, int32_t reverse, dpl_tensor **out)
{
  const char *name = op == DPL_SCAN_PROD ? "cumprod" : "cumsum";
  DPL_TRY(need_out(name, out));
  if (op != DPL_SCAN_SUM && op != DPL_SCAN_PROD)
    return dpl_errorf(DPL_EINVAL, "cumulative: op must be DPL_SCAN_SUM or DPL_SCAN_PROD, got %d", (int)op);
  DPL_TRY(dpl_check_handle(name, "input", a));
  if (dtype < 0) dtype = dpl_is_float(a->_dtype) ? a->_dtype : DPL_INT64; /* integers count in int64, as PyTorch */
  if (!dpl_dtype_valid(dtype)) return dpl_errorf(DPL_EINVAL, "%s: unknown dtype id %d (expected 0..7)", name, (int)dtype);
  if (dtype == DPL_BOOL)
    return dpl_errorf(DPL_EINVAL, "%s: dtype bool is not supported for the result (as in PyTorch); use int64", name);
  dpl_tensor *res = NULL;
  int st = run_scan(name, op, a, dim, dtype, reverse != 0, &res, NULL);
  return dpl_hand_over(st, 1, (dpl_tensor *[]){res}, (dpl_tensor **[]){out});
}

int dpl_cumulative_index(int32_t op, const dpl_tensor *a, int32_t dim, dpl_tensor **values, dpl_tensor **indices)
{
  const char *name = op == DPL_SCAN_MIN ? "cummin" : "cummax";
  if (!values || !indices) return dpl_errorf(DPL_EINVAL, "%s: values or indices is NULL", name);
  *values = *indices = NULL;
  if (op != DPL_SCAN_MAX && op != DPL_SCAN_MIN)
    return dpl_errorf(DPL_EINVAL, "cumulative_index: op must be DPL_SCAN_MAX or DPL_SCAN_MIN, got %d", (int)op);
  DPL_TRY(dpl_check_handle(name, "input", a));
  dpl_tensor *v = NULL, *ix = NULL;
  int st = run_scan(name, op, a, dim, a->_dtype, 0, &v, &ix);
  return dpl_hand_over(st, 2, (dpl_tensor *[]){v, ix}, (dpl_tensor **[]){values, indices});
}

/* ---- cumprod's gradient ----
 * Per slice x[0..D-1] with first zero at z (D when none) and y = cumprod(x) (the
 * forward's result, as PyTorch uses it): k < z: sum_{j >= k} g[j] y[j] / x[k] (y[j] = 0
 * from z on); k = z: y[z-1] (1 when z = 0) times sum_{j >= z} g[j] prod_{z < i <= j} x[i];
 * k > z: 0 (PyTorch's formula, zeros included). Computed in float64. */
typedef struct cpb_job {
  int64_t D, inner;
  const double *g, *x, *y;
  double *r;
} cpb_job;

static void cpb_range(int64_t lo, int64_t hi, void *ctx)
{
  const cpb_job *j = ctx;
  int64_t D = j->D, in = j->inner;
  for (int64_t sl = lo; sl < hi; sl++) {
    int64_t base = (sl / in) * D * in + sl % in;
    const double *g = j->g + base, *x = j->x + base, *y = j->y + base;
    double *r = j->r + base;
    int64_t z = D;
    for (int64_t k = 0; k < D; k++)
      if (x[k * in] == 0) { z = k; break; }
    double acc = 0, yz = z > 0 ? y[(z - 1) * in] : 1;
    for (int64_t k = z - 1; k >= 0; k--) {
      acc += g[k * in] * y[k * in];
      r[k * in] = acc / x[k * in];
    }
    if (z < D) {
      double p = 1, s = 0;
      for (int64_t k = z; k < D; k++) {
        if (k > z) p *= x[k * in];
        s += g[k * in] * p;
      }
      r[z * in] = yz * s;
      for (int64_t k = z + 1; k < D; k++) r[k * in] = 0;
    }
  }
}

int dpl_cumprod_backward(const dpl_tensor *grad, const dpl_tensor *a, const dpl_tensor *result, int32_t dim,
                         dpl_tensor **out)
{
  const char *name = "cumprod_backward";
  DPL_TRY(need_out(name, out));
  DPL_TRY(dpl_check_handle(name, "grad", grad));
  DPL_TRY(dpl_check_handle(name, "input", a));
  DPL_TRY(dpl_check_handle(name, "result", result));
  DPL_TRY(dpl_check_same_device(name, grad, a));
  DPL_TRY(dpl_check_same_device(name, result, a));
  if (!dpl_same_shape(grad, a) || !dpl_same_shape(result, a)) {
    char b1[160], b2[160], b3[160];
    return dpl_errorf(DPL_EINVAL, "%s: grad shape %s and result shape %s must match the input shape %s", name,
                      dpl_shape_str(grad->_ndim, grad->_shape, b1, sizeof b1),
                      dpl_shape_str(result->_ndim, result->_shape, b3, sizeof b3),
                      dpl_shape_str(a->_ndim, a->_shape, b2, sizeof b2));
  }
  if (!dpl_is_float(grad->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected a floating grad, got %s", name, dpl_dtype_name(grad->_dtype));
  int64_t outer = 0, D = 1, inner = 1;
  DPL_TRY(scan_dim(name, a, dim, &outer, &D, &inner));
  dpl_tensor *cg = NULL, *cx = NULL, *cy = NULL, *res = NULL;
  int st = dpl_contig_as(name, grad, DPL_FLOAT64, &cg);
  if (st == DPL_OK) st = dpl_contig_as(name, a, DPL_FLOAT64, &cx);
  if (st == DPL_OK) st = dpl_contig_as(name, result, DPL_FLOAT64, &cy);
  if (st == DPL_OK && dpl_is_devmem(a)) { /* the backend's kernel (the same formula in float64) */
    dpl_bk_args k = {.op = DPL_BK_CUMPROD_BWD, .l = {D, inner}, .in = {cg, cx, cy}, .out = {&res}, .name = name};
    st = dpl_bk_call(&k);
  } else if (st == DPL_OK) st = dpl_new(name, DPL_FLOAT64, a->_ndim, a->_shape, a, &res);
  if (st == DPL_OK && a->_numel > 0 && !dpl_is_devmem(a)) {
    cpb_job j = {.D = D, .inner = inner, .g = cg->_data, .x = cx->_data, .y = cy->_data, .r = res->_data};
    dpl_parallel_for(outer * inner, PAR_ELEMS / D + 1, cpb_range, &j);
  }
  if (st == DPL_OK) st = dpl_retype(name, &res, grad->_dtype);
  dpl_release_n(3, (dpl_tensor *[]){cg, cx, cy});
  return dpl_hand_over(st, 1, (dpl_tensor *[]){res}, (dpl_tensor **[]){out});
}

/* ---- flip, roll: out[i] = a[map(i)], one map per dim ----
 * mode 0: identity, 1: reversed, 2: rolled (out[i] = a[(i - shift) mod n]). */
typedef struct map_job {
  int32_t nd, es;
  int64_t shape[DPL_MAX_DIMS], stride[DPL_MAX_DIMS], shift[DPL_MAX_DIMS];
  int32_t mode[DPL_MAX_DIMS];
  const char *src;
  char *dst;
} map_job;

static int64_t map_index(const map_job *j, int32_t d, int64_t i)
{
  int64_t n = j->shape[d];
  if (j->mode[d] == 1) return n - 1 - i;
  if (j->mode[d] == 2) { int64_t k = i - j->shift[d]; return k < 0 ? k + n : k; }
  return i;
}

/* n elements of es bytes from src (step sstep elements) to a contiguous dst */
static void copy_run(char *dst, const char *src, int64_t n, int64_t sstep, int32_t es)
{
  if (sstep == 1) { memcpy(dst, src, (size_t)(n * es)); return; }
  switch (es) {
  case 1: for (int64_t i = 0; i < n; i++) dst[i] = src[i * sstep]; break;
  case 2: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = ((const uint16_t *)src)[i * sstep]; break;
  case 4: for (int64_t i = 0; i < n; i++) ((uint32_t *)dst)[i] = ((const uint32_t *)src)[i * sstep]; break;
  default: for (int64_t i = 0; i < n; i++) ((uint64_t *)dst)[i] = ((const uint64_t *)src)[i * sstep]; break;
  }
}

static void map_range(int64_t lo, int64_t hi, void *ctx)
{
  const map_job *j = ctx;
  int32_t last = j->nd - 1, es = j->es;
  int64_t n = j->shape[last], s = j->stride[last];
  for (int64_t row = lo; row < hi; row++) {
    int64_t off = 0, r = row;
    for (int32_t d = last - 1; d >= 0; d--) {
      int64_t i = r % j->shape[d];
      r /= j->shape[d];
      off += map_index(j, d, i) * j->stride[d];
    }
    const char *src = j->src + off * es;
    char *dst = j->dst + row * n * es;
    if (j->mode[last] == 1) copy_run(dst, src + (n - 1) * s * es, n, -s, es);
    else if (j->mode[last] == 2) {
      int64_t sh = j->shift[last];
      copy_run(dst, src + (n - sh) * s * es, sh, s, es);
      copy_run(dst + sh * es, src, n - sh, s, es);
    } else copy_run(dst, src, n, s, es);
  }
}

static int mapped_copy(const char *name, const dpl_tensor *a, map_job *j, dpl_tensor **out)
{
  dpl_tensor *res = NULL;
  DPL_TRY(dpl_new(name, a->_dtype, a->_ndim, a->_shape, a, &res));
  if (a->_numel > 0) {
    j->es = (int32_t)dpl_elsize(a->_dtype);
    j->src = a->_data;
    j->dst = res->_data;
    if (a->_ndim == 0) memcpy(j->dst, j->src, (size_t)j->es);
    else {
      j->nd = a->_ndim;
      for (int32_t d = 0; d < a->_ndim; d++) { j->shape[d] = a->_shape[d]; j->stride[d] = a->_stride[d]; }
      int64_t n = a->_shape[a->_ndim - 1];
      dpl_parallel_for(a->_numel / n, PAR_ELEMS / n + 1, map_range, j);
    }
  }
  *out = res;
  return DPL_OK;
}

/* on the device: one index_select per mapped dim (a reversed or rotated arange), else a copy */
static int mapped_copy_dev(const char *name, const dpl_tensor *a, const map_job *j, dpl_tensor **out)
{
  dpl_dz z;
  dpl_dz_init(&z, name);
  const dpl_tensor *cur = a;
  for (int32_t d = 0; d < a->_ndim && a->_numel > 0; d++) {
    int64_t n = a->_shape[d];
    if (j->mode[d] == 0) continue;
    dpl_tensor *idx = j->mode[d] == 1 ? dpl_dz_arange(&z, n - 1, -1, n, a, 1, 0)
                                      : dpl_dz_bins(&z, DPL_OP_REMAINDER, dpl_dz_arange(&z, n - j->shift[d], 1, n, a, 1, 0),
                                                    (double)n, 0);
    cur = dpl_dz_index_select(&z, cur, d, idx);
  }
  dpl_tensor *r = cur == a ? dpl_dz_clone(&z, a, a->_dtype) : (dpl_tensor *)cur;
  if (z.st == DPL_OK) *out = dpl_dz_take(&z, r);
  return dpl_dz_end(&z);
}

static int check_dims_list(const char *name, const dpl_tensor *a, int32_t n, const int32_t *dims, int unique)
{
  if (n < 0 || n > DPL_MAX_DIMS) return dpl_errorf(DPL_EINVAL, "%s: expected 0..%d dims, got %d", name, DPL_MAX_DIMS, (int)n);
  if (n > 0 && !dims) return dpl_errorf(DPL_EINVAL, "%s: dims is NULL", name);
  int32_t nd = a->_ndim > 0 ? a->_ndim : 1;
  int seen[DPL_MAX_DIMS] = {0};
  for (int32_t k = 0; k < n; k++) {
    if (dims[k] < 0 || dims[k] >= nd)
      return dpl_errorf(DPL_EINVAL, "%s: dim %d out of range (expected 0..%d for a %d-d tensor, 0-based)", name,
                        (int)dims[k], (int)nd - 1, (int)a->_ndim);
    if (unique && seen[dims[k]]++)
      return dpl_errorf(DPL_EINVAL, "%s: dim %d appears multiple times in the list of dims (0-based)", name, (int)dims[k]);
  }
  return DPL_OK;
}

int dpl_flip(const dpl_tensor *a, int32_t n, const int32_t *dims, dpl_tensor **out)
{
  const char *name = "flip";
  DPL_TRY(need_out(name, out));
  DPL_TRY(dpl_check_handle(name, "input", a));
  DPL_TRY(check_dims_list(name, a, n, dims, 1));
  map_job j = {0};
  for (int32_t k = 0; k < n; k++)
    if (a->_ndim > 0) j.mode[dims[k]] = 1;
  if (dpl_is_devmem(a)) return mapped_copy_dev(name, a, &j, out);
  return mapped_copy(name, a, &j, out);
}

int dpl_roll(const dpl_tensor *a, int32_t n, const int64_t *shifts, const int32_t *dims, dpl_tensor **out)
{
  const char *name = "roll";
  DPL_TRY(need_out(name, out));
  DPL_TRY(dpl_check_handle(name, "input", a));
  DPL_TRY(check_dims_list(name, a, n, dims, 0));
  if (n > 0 && !shifts) return dpl_errorf(DPL_EINVAL, "%s: shifts is NULL", name);
  map_job j = {0};
  for (int32_t k = 0; k < n && a->_ndim > 0; k++) { /* a dim listed twice rolls by the sum */
    int32_t d = dims[k];
    int64_t size = a->_shape[d];
    if (size == 0) continue;
    int64_t sh = ((shifts[k] % size) + size) % size;
    j.shift[d] = (j.shift[d] + sh) % size;
    j.mode[d] = j.shift[d] ? 2 : 0;
  }
  if (dpl_is_devmem(a)) return mapped_copy_dev(name, a, &j, out);
  return mapped_copy(name, a, &j, out);
}

/* ---- tril / triu over the last two dims ----
 * Row i of a matrix keeps columns j with j - i <= diagonal (tril) or >= diagonal (triu). */
typedef struct tri_job {
  int32_t upper, nd, es;
  int64_t diag, R, C;
  const dpl_tensor *a;
  char *dst; /* NULL: zero in place in a */
} tri_job;

/* columns [*lo, *hi) of row i are kept */
static void kept(const tri_job *j, int64_t i, int64_t *lo, int64_t *hi)
{
  int64_t e = i + j->diag;
  if (j->upper) { *lo = e < 0 ? 0 : e > j->C ? j->C : e; *hi = j->C; }
  else { *lo = 0; *hi = e + 1 < 0 ? 0 : e + 1 > j->C ? j->C : e + 1; }
}

static void tri_range(int64_t lo, int64_t hi, void *ctx)
{
  const tri_job *j = ctx;
  const dpl_tensor *a = j->a;
  int32_t es = j->es, nd = j->nd;
  int64_t sr = a->_stride[nd - 2], sc = a->_stride[nd - 1];
  for (int64_t row = lo; row < hi; row++) {
    int64_t i = row % j->R, b = row / j->R, off = 0;
    for (int32_t d = nd - 3; d >= 0; d--) {
      off += (b % a->_shape[d]) * a->_stride[d];
      b /= a->_shape[d];
    }
    char *src = (char *)a->_data + (off + i * sr) * es;
    int64_t k0, k1;
    kept(j, i, &k0, &k1);
    if (j->dst) {
      char *dst = j->dst + row * j->C * es;
      memset(dst, 0, (size_t)(k0 * es));
      copy_run(dst + k0 * es, src + k0 * sc * es, k1 - k0, sc, es);
      memset(dst + k1 * es, 0, (size_t)((j->C - k1) * es));
    } else {
      for (int64_t c = 0; c < k0; c++) memset(src + c * sc * es, 0, (size_t)es);
      for (int64_t c = k1; c < j->C; c++) memset(src + c * sc * es, 0, (size_t)es);
    }
  }
}

static int tri_check(const char *name, const dpl_tensor *a)
{
  DPL_TRY(dpl_check_handle(name, "input", a));
  if (a->_ndim < 2)
    return dpl_errorf(DPL_EINVAL, "%s: expected a tensor with at least 2 dims, got a %d-d tensor", name, (int)a->_ndim);
  return DPL_OK;
}

/* on the device: the elements outside the triangle of dst (a's copy, or a itself) zeroed
 * through a mask of the matrix, (column - row) compared with the diagonal */
static int tri_dev(const char *name, const dpl_tensor *a, int64_t diagonal, int32_t upper, dpl_tensor **out)
{
  dpl_dz z;
  dpl_dz_init(&z, name);
  int32_t nd = a->_ndim;
  dpl_tensor *dst = out ? dpl_dz_clone(&z, a, a->_dtype) : (dpl_tensor *)a;
  if (a->_numel > 0) {
    dpl_tensor *cols = dpl_dz_arange(&z, 0, 1, a->_shape[nd - 1], a, 2, 1);
    dpl_tensor *rows = dpl_dz_arange(&z, 0, 1, a->_shape[nd - 2], a, 2, 0);
    dpl_tensor *diff = dpl_dz_bin(&z, DPL_OP_SUB, cols, rows);
    dpl_dz_masked_fill_(&z, dst, dpl_dz_bins(&z, upper ? DPL_OP_LT : DPL_OP_GT, diff, (double)diagonal, 0), 0);
  }
  if (z.st == DPL_OK && out) *out = dpl_dz_take(&z, dst);
  return dpl_dz_end(&z);
}

static void tri_run(tri_job *j, const dpl_tensor *a)
{
  j->nd = a->_ndim;
  j->es = (int32_t)dpl_elsize(a->_dtype);
  j->R = a->_shape[a->_ndim - 2];
  j->C = a->_shape[a->_ndim - 1];
  j->a = a;
  if (a->_numel > 0) dpl_parallel_for(a->_numel / j->C, PAR_ELEMS / j->C + 1, tri_range, j);
}

int dpl_tril(const dpl_tensor *a, int64_t diagonal, int32_t upper, dpl_tensor **out)
{
  const char *name = upper ? "triu" : "tril";
  DPL_TRY(need_out(name, out));
  DPL_TRY(tri_check(name, a));
  if (dpl_is_devmem(a)) return tri_dev(name, a, diagonal, upper, out);
  dpl_tensor *res = NULL;
  DPL_TRY(dpl_new(name, a->_dtype, a->_ndim, a->_shape, a, &res));
  tri_job j = {.upper = upper != 0, .diag = diagonal, .dst = res->_data};
  tri_run(&j, a);
  *out = res;
  return DPL_OK;
}

int dpl_tril_(dpl_tensor *a, int64_t diagonal, int32_t upper)
{
  const char *name = upper ? "triu_" : "tril_";
  DPL_TRY(tri_check(name, a));
  DPL_TRY(dpl_check_writable(name, "", a));
  if (dpl_is_devmem(a)) return tri_dev(name, a, diagonal, upper, NULL);
  tri_job j = {.upper = upper != 0, .diag = diagonal, .dst = NULL};
  tri_run(&j, a);
  return DPL_OK;
}

/* ---- repeat_interleave's index list: i repeated repeats[i] times (0-based) ---- */
int dpl_repeat_interleave_index(const dpl_tensor *repeats, dpl_tensor **out)
{
  const char *name = "repeat_interleave";
  DPL_TRY(need_out(name, out));
  DPL_TRY(dpl_check_tensor(name, "repeats", repeats));
  if (dpl_is_float(repeats->_dtype) || repeats->_dtype == DPL_BOOL)
    return dpl_errorf(DPL_EINVAL, "%s: expected an integer repeats tensor (int64 or int32), got %s", name,
                      dpl_dtype_name(repeats->_dtype));
  if (repeats->_ndim > 1)
    return dpl_errorf(DPL_EINVAL, "%s: repeats must be a 0-d or 1-d tensor, got a %d-d tensor", name,
                      (int)repeats->_ndim);
  dpl_tensor *cr = NULL, *res = NULL;
  DPL_TRY(dpl_contig_as(name, repeats, DPL_INT64, &cr));
  const int64_t *r = cr->_data;
  int64_t n = cr->_numel, total = 0;
  int st = DPL_OK;
  for (int64_t i = 0; i < n && st == DPL_OK; i++) {
    if (r[i] < 0) st = dpl_errorf(DPL_EINVAL, "%s: repeats must not be negative, got %lld", name, (long long)r[i]);
    else if (r[i] > INT64_MAX / 2 - total) st = dpl_errorf(DPL_EINVAL, "%s: the repeats add up to too many elements", name);
    else total += r[i];
  }
  if (st == DPL_OK) st = dpl_new(name, DPL_INT64, 1, &total, repeats, &res);
  if (st == DPL_OK) {
    int64_t *p = res->_data;
    for (int64_t i = 0; i < n; i++)
      for (int64_t k = 0; k < r[i]; k++) *p++ = i;
  }
  dpl_tensor_release(cr);
  return dpl_hand_over(st, 1, (dpl_tensor *[]){res}, (dpl_tensor **[]){out});
}
