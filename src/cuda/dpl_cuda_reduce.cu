/* dpl_cuda_reduce.cu: the plugin's reduction and row kernels: reductions of
 * any layout read in the input's own dtype (a block per output for contiguous
 * or long runs, a column kernel for a reduced outer dim, slices for few long
 * sums; float64 or int64 accumulation, the CPU's NaN and first-index rules
 * for max/min/argmax/argmin) writing the output dtype directly, softmax rows,
 * the class losses (cross-entropy, NLL) with their gradients, and embedding
 * gather / scatter-add. */
#include "dpl_cuda_common.cuh"
#include <math.h>
#include <type_traits>

using namespace dplcu;

namespace {

enum { SUM = 0, MEAN = 1, PROD = 2, MAX = 3, MIN = 4, ARGMAX = 5, ARGMIN = 6, VAR = 7, STD = 8, LOGSUMEXP = 9, NORM = 10,
       ANY = 11, ALL = 12 };

/* block-wide reductions: every thread of the block calls them (uniform control flow) */
template <typename T>
__device__ T block_sum(T v, T *sh)
{
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  T r = sh[0];
  __syncthreads();
  return r;
}
/* max where NaN wins */
__device__ double block_max_nan(double v, double *sh)
{
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) {
      double o = sh[threadIdx.x + s];
      if (o > sh[threadIdx.x] || o != o) sh[threadIdx.x] = o;
    }
    __syncthreads();
  }
  double r = sh[0];
  __syncthreads();
  return r;
}

/* (value, index) candidates: index < 0 = none; NaN beats numbers; ties go to the smaller index */
template <typename T>
__device__ __forceinline__ bool better(T av, int64_t ai, T bv, int64_t bi, bool mx)
{
  if (ai < 0) return false;
  if (bi < 0) return true;
  bool an = av != av, bn = bv != bv;
  if (an || bn) return an && bn ? ai < bi : an;
  if (av == bv) return ai < bi;
  return mx ? av > bv : av < bv;
}
/* ---- reductions of any layout in the input's own dtype (dpl_cu_reduce) ----
 * Each output reduces its run in one or two passes (var/std: the mean, then the
 * squared deviations; logsumexp: the max, then the exponentials). A pass maps
 * each element (red_map), joins the values of a thread (red_join), then the
 * threads' partials (red_tree), all of one kind: */
enum { K_ADD, K_MUL, K_MAXNAN, K_BMAX, K_BMIN, K_MINNAN }; /* sum, product, max where NaN wins, best (value,
                                                           index), min where NaN wins */
static const int kCols = 32;                     /* outputs per block of k_red_cols */

template <typename A>
struct Acc {
  A v;
  int64_t i; /* index of the best value (K_BMAX, K_BMIN); -1: none */
};

__device__ __forceinline__ bool is_nan(double v) { return v != v; }
__device__ __forceinline__ bool is_nan(int64_t) { return false; }
__device__ __forceinline__ double wadd(double a, double b) { return a + b; }
__device__ __forceinline__ int64_t wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
__device__ __forceinline__ double wmul(double a, double b) { return a * b; }
__device__ __forceinline__ int64_t wmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

__device__ __forceinline__ int red_kind(int op, int pass, double p)
{
  switch (op) {
  case PROD: return K_MUL;
  case MAX: case ARGMAX: return K_BMAX;
  case MIN: case ARGMIN: return K_BMIN;
  case LOGSUMEXP: return pass ? K_ADD : K_MAXNAN;
  case NORM: return isinf(p) ? (p > 0 ? K_MAXNAN : K_MINNAN) : K_ADD;
  default: return K_ADD;
  }
}
__device__ __forceinline__ bool two_pass(int op) { return op == VAR || op == STD || op == LOGSUMEXP; }

__device__ __forceinline__ double red_low(double) { return -INFINITY; }
__device__ __forceinline__ int64_t red_low(int64_t) { return INT64_MIN; }
__device__ __forceinline__ double red_high(double) { return INFINITY; }
__device__ __forceinline__ int64_t red_high(int64_t) { return INT64_MAX; }
template <typename A>
__device__ __forceinline__ Acc<A> red_ident(int kind, int op)
{
  Acc<A> a;
  a.i = -1;
  a.v = kind == K_MUL ? (A)1 : kind == K_MAXNAN && op == LOGSUMEXP ? red_low(A()) : kind == K_MINNAN ? red_high(A()) : (A)0;
  return a;
}

template <typename A>
__device__ __forceinline__ void red_join(int kind, Acc<A> &a, A v, int64_t i)
{
  switch (kind) {
  case K_ADD: a.v = wadd(a.v, v); break;
  case K_MUL: a.v = wmul(a.v, v); break;
  case K_MAXNAN: if (v > a.v || is_nan(v)) a.v = v; break;
  case K_MINNAN: if (v < a.v || is_nan(v)) a.v = v; break;
  default: if (better(v, i, a.v, a.i, kind == K_BMAX)) { a.v = v; a.i = i; } break;
  }
}

/* the value an element adds to pass `pass`; m: the first pass's mean (var/std) or max (logsumexp) */
__device__ __forceinline__ double red_map(int op, int pass, double x, double m, double p)
{
  switch (op) {
  case VAR: case STD: if (pass) { double d = x - m; return d * d; } return x;
  case LOGSUMEXP: return pass ? exp(x - m) : x;
  case NORM:
    if (isinf(p)) return fabs(x);
    if (p == 0) return x != 0;
    if (p == 2) return x * x;
    if (p == 1) return fabs(x);
    return pow(fabs(x), p);
  case ANY: return x != 0;
  case ALL: return x == 0;
  default: return x;
  }
}
__device__ __forceinline__ int64_t red_map(int op, int, int64_t x, int64_t, double)
{
  return op == ANY ? x != 0 : op == ALL ? x == 0 : x;
}
__device__ __forceinline__ double red_mid(const dpl_cu_red &g, double s) { return g.op == LOGSUMEXP ? s : s / (double)g.R; }
__device__ __forceinline__ int64_t red_mid(const dpl_cu_red &, int64_t s) { return s; }

/* the result from the passes' totals s (first) and s2 (second), the CPU's formulas */
__device__ __forceinline__ double red_final(const dpl_cu_red &g, double s, double s2)
{
  double p = g.param;
  switch (g.op) {
  case MEAN: return g.R ? s / (double)g.R : NAN;
  case VAR: case STD: {
    double den = (double)g.R - p;
    double v = den > 0 ? s2 / den : NAN;
    return g.op == STD ? sqrt(v) : v;
  }
  case LOGSUMEXP: return g.R == 0 ? -INFINITY : (s != s || isinf(s)) ? s : s + log(s2);
  case NORM: return isinf(p) || p == 0 || p == 1 ? s : p == 2 ? sqrt(s) : pow(s, 1.0 / p);
  case ANY: return s > 0;
  case ALL: return s == 0;
  default: return s;
  }
}
__device__ __forceinline__ int64_t red_final(const dpl_cu_red &g, int64_t s, int64_t)
{
  return g.op == ANY ? s > 0 : g.op == ALL ? s == 0 : s;
}

template <int DT>
__device__ __forceinline__ void red_load(const char *x, int64_t off, double &v) { v = ld_f64(x + off * elsize(DT), DT); }
template <int DT>
__device__ __forceinline__ void red_load(const char *x, int64_t off, int64_t &v) { v = ld_i64(x + off * elsize(DT), DT); }
__device__ __forceinline__ void red_put(char *val, int odt, int64_t row, double v) { st_f64(val + row * elsize(odt), odt, v); }
__device__ __forceinline__ void red_put(char *val, int odt, int64_t row, int64_t v) { st_i64(val + row * elsize(odt), odt, v); }

/* offset (elements) of row-major position i over (nd, shape, stride) */
__device__ __forceinline__ int64_t red_off(int nd, const int64_t *shape, const int64_t *stride, int64_t i)
{
  int64_t o = 0;
  for (int d = nd - 1; d >= 0; d--) {
    int64_t q = i / shape[d];
    o += (i - q * shape[d]) * stride[d];
    i = q;
  }
  return o;
}

/* one thread's part of a pass: reduced positions j0, j0 + step, ... below j1 of the run at base */
template <typename A, int DT>
__device__ Acc<A> red_part(const dpl_cu_red &g, const char *x, int64_t base, int64_t j0, int64_t j1, int64_t step,
                           int pass, A m)
{
  const int kind = red_kind(g.op, pass, g.param);
  Acc<A> a = red_ident<A>(kind, g.op);
  if (g.rndim == 1) {
    const int64_t rs = g.rstride[0];
    for (int64_t j = j0; j < j1; j += step) {
      A v;
      red_load<DT>(x, base + j * rs, v);
      red_join(kind, a, red_map(g.op, pass, v, m, g.param), j);
    }
  } else {
    for (int64_t j = j0; j < j1; j += step) {
      A v;
      red_load<DT>(x, base + red_off(g.rndim, g.rshape, g.rstride, j), v);
      red_join(kind, a, red_map(g.op, pass, v, m, g.param), j);
    }
  }
  return a;
}

/* joins the partials of the threads t, t + w, t + 2w, ... of a block (every thread calls it):
 * each thread gets the total of its column t % w */
template <typename A>
__device__ Acc<A> red_tree(int kind, Acc<A> a, A *sv, int64_t *si, int w)
{
  const int t = threadIdx.x, y = t / w;
  sv[t] = a.v;
  si[t] = a.i;
  __syncthreads();
  for (int s = (int)blockDim.x / w / 2; s > 0; s >>= 1) {
    if (y < s) {
      Acc<A> c = {sv[t], si[t]};
      red_join(kind, c, sv[t + s * w], si[t + s * w]);
      sv[t] = c.v;
      si[t] = c.i;
    }
    __syncthreads();
  }
  Acc<A> r = {sv[t - y * w], si[t - y * w]};
  __syncthreads();
  return r;
}

/* one output per block (a run read along by the block's threads): runs that are contiguous or long */
template <typename A, int DT>
__global__ void k_red_rows(dpl_cu_red g, const char *x, char *val, int64_t *idx)
{
  __shared__ A sv[kThreads];
  __shared__ int64_t si[kThreads];
  const int t = threadIdx.x, nt = blockDim.x;
  for (int64_t row = blockIdx.x; row < g.rows; row += gridDim.x) {
    int64_t base = red_off(g.ondim, g.oshape, g.ostride, row);
    Acc<A> a = red_tree(red_kind(g.op, 0, g.param), red_part<A, DT>(g, x, base, t, g.R, nt, 0, (A)0), sv, si, 1);
    Acc<A> b = a;
    if (two_pass(g.op))
      b = red_tree(K_ADD, red_part<A, DT>(g, x, base, t, g.R, nt, 1, red_mid(g, a.v)), sv, si, 1);
    if (t == 0) {
      if (val) red_put(val, g.odt, row, red_final(g, a.v, b.v));
      if (idx) idx[row] = a.i;
    }
  }
}

/* kCols outputs per block, each run split in blockDim.x / kCols slices (threadIdx.x / kCols): for a
 * reduced dim that is not the innermost (the bias gradient's sum over the batch), neighbouring
 * threads read neighbouring outputs' elements */
template <typename A, int DT>
__global__ void k_red_cols(dpl_cu_red g, const char *x, char *val, int64_t *idx)
{
  __shared__ A sv[kThreads];
  __shared__ int64_t si[kThreads];
  const int c = threadIdx.x % kCols, y = threadIdx.x / kCols, ny = blockDim.x / kCols;
  for (int64_t r0 = (int64_t)blockIdx.x * kCols; r0 < g.rows; r0 += (int64_t)gridDim.x * kCols) {
    const int64_t row = r0 + c, end = row < g.rows ? g.R : 0;
    const int64_t base = row < g.rows ? red_off(g.ondim, g.oshape, g.ostride, row) : 0;
    Acc<A> a = red_tree(red_kind(g.op, 0, g.param), red_part<A, DT>(g, x, base, y, end, ny, 0, (A)0), sv, si, kCols);
    Acc<A> b = a;
    if (two_pass(g.op))
      b = red_tree(K_ADD, red_part<A, DT>(g, x, base, y, end, ny, 1, red_mid(g, a.v)), sv, si, kCols);
    if (y == 0 && row < g.rows) {
      if (val) red_put(val, g.odt, row, red_final(g, a.v, b.v));
      if (idx) idx[row] = a.i;
    }
  }
}

/* SUM/MEAN of few long float runs: block (row, slice) sums one slice into part[row * gridDim.y + slice]
 * (no atomics: the result does not depend on timing); k_red_parts adds a row's parts and writes it */
template <int DT>
__global__ void k_red_slices(dpl_cu_red g, const char *x, int64_t slice, double *part)
{
  __shared__ double sv[kThreads];
  __shared__ int64_t si[kThreads];
  const int64_t row = blockIdx.x, lo = (int64_t)blockIdx.y * slice, hi = lo + slice < g.R ? lo + slice : g.R;
  const int64_t base = red_off(g.ondim, g.oshape, g.ostride, row);
  Acc<double> a = red_tree(K_ADD, red_part<double, DT>(g, x, base, lo + threadIdx.x, hi, blockDim.x, 0, 0.0), sv, si, 1);
  if (threadIdx.x == 0) part[row * gridDim.y + blockIdx.y] = a.v;
}

__global__ void k_red_parts(dpl_cu_red g, const double *part, int64_t parts, char *val)
{
  __shared__ double sh[kThreads];
  for (int64_t row = blockIdx.x; row < g.rows; row += gridDim.x) {
    double acc = 0;
    for (int64_t j = threadIdx.x; j < parts; j += blockDim.x) acc += part[row * parts + j];
    double s = block_sum(acc, sh);
    if (threadIdx.x == 0) red_put(val, g.odt, row, red_final(g, s, 0.0));
  }
}

/* softmax / log_softmax (and their gradients) of contiguous rows, one block per
 * row, with the CPU's formulas in float64 (dpl_tensor_reduce.c's sm_range) */
template <typename T>
__global__ void k_softmax_rows(const T *x, const T *g, T *out, int64_t rows, int64_t R, int lg, int bwd)
{
  __shared__ double sh[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *p = x + row * R;
    const T *q = g ? g + row * R : nullptr;
    T *o = out + row * R;
    if (!bwd) {
      double m = -INFINITY;
      for (int64_t j = threadIdx.x; j < R; j += blockDim.x) {
        double v = (double)p[j];
        if (v > m || v != v) m = v;
      }
      m = block_max_nan(m, sh);
      if (isinf(m) && m < 0) m = 0;
      double acc = 0;
      for (int64_t j = threadIdx.x; j < R; j += blockDim.x) acc += exp((double)p[j] - m);
      double sum = block_sum(acc, sh);
      if (lg) {
        double ls = log(sum) + m;
        for (int64_t j = threadIdx.x; j < R; j += blockDim.x) o[j] = (T)((double)p[j] - ls);
      } else {
        for (int64_t j = threadIdx.x; j < R; j += blockDim.x) o[j] = (T)(exp((double)p[j] - m) / sum);
      }
    } else {
      double acc = 0;
      for (int64_t j = threadIdx.x; j < R; j += blockDim.x) acc += lg ? (double)q[j] : (double)q[j] * (double)p[j];
      double sum = block_sum(acc, sh);
      for (int64_t j = threadIdx.x; j < R; j += blockDim.x)
        o[j] = lg ? (T)((double)q[j] - exp((double)p[j]) * sum) : (T)((double)p[j] * ((double)q[j] - sum));
    }
  }
}

static unsigned row_grid(int64_t rows)
{
  int64_t g = rows < 65535 * 4 ? rows : 65535 * 4;
  return (unsigned)(g > 0 ? g : 1);
}

/* ---- class losses ----
 * x [N, C] read in place in its own float dtype DT (F32, F64, F16, BF16) with
 * any row and class strides (sN, sC; 0 included), computed in float64 with the
 * CPU's formulas (class_loss_rows in dpl_tensor_reduce.c), outputs written in
 * their dtype: no conversion copy before or after. */
template <int DT>
__device__ __forceinline__ double ldx(const void *x, int64_t i)
{
  return ld_f64((const char *)x + i * elsize(DT), DT);
}

/* max-subtracted sum of exponentials of row r (every thread of the block calls it) */
template <int DT>
__device__ double row_lse_parts(const void *x, int64_t r, int64_t sC, int64_t C, double *sh, double *sum)
{
  double m = -INFINITY;
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) {
    double v = ldx<DT>(x, r + k * sC);
    if (v > m) m = v;
  }
  /* plain max (NaN does not win), as the CPU loop */
  sh[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s && sh[threadIdx.x + s] > sh[threadIdx.x]) sh[threadIdx.x] = sh[threadIdx.x + s];
    __syncthreads();
  }
  m = sh[0];
  __syncthreads();
  double acc = 0;
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) acc += exp(ldx<DT>(x, r + k * sC) - m);
  *sum = block_sum(acc, sh);
  return m;
}

/* l[row] (dtype ldt: DT for reduction none, float64 scratch for loss_finish) */
template <int DT>
__global__ void k_class_loss(int ce, const void *x, int64_t sN, int64_t sC, const int64_t *t, int64_t N, int64_t C,
                             int64_t ignore, void *l, int ldt, unsigned long long *bad)
{
  __shared__ double sh[kThreads];
  char *lo = (char *)l;
  int les = elsize(ldt);
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    int64_t ti = t[row];
    if (ti == ignore || ti < 0 || ti >= C) {
      if (threadIdx.x == 0) {
        st_f64(lo + row * les, ldt, 0.0);
        if (ti != ignore) atomicMin(bad, (unsigned long long)row);
      }
      continue;
    }
    int64_t r = row * sN;
    if (ce) {
      double s, m = row_lse_parts<DT>(x, r, sC, C, sh, &s);
      if (threadIdx.x == 0) st_f64(lo + row * les, ldt, m + log(s) - ldx<DT>(x, r + ti * sC));
    } else if (threadIdx.x == 0) {
      st_f64(lo + row * les, ldt, -ldx<DT>(x, r + ti * sC));
    }
  }
}

/* out[0] (dtype odt) = the sum or mean of l; cnt[0] = the count of non-ignored samples */
__global__ void k_loss_finish(const double *l, const int64_t *t, int64_t N, int64_t ignore, int reduction, void *out,
                              int odt, double *cnt)
{
  __shared__ double sh[kThreads];
  double s = 0, c = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    if (out) s += l[i]; /* l is only read for out (the backward passes no per-sample losses) */
    c += t[i] != ignore;
  }
  s = block_sum(s, sh);
  c = block_sum(c, sh);
  if (threadIdx.x == 0) {
    if (out) st_f64(out, odt, reduction == 1 ? (c > 0 ? s / c : NAN) : s);
    if (cnt) cnt[0] = c;
  }
}

/* gx [N, C] contiguous in DT; g: grad_out in any dtype gdt, element i at g + i * gs (gs 0: one value) */
template <int DT>
__global__ void k_class_loss_bwd(int ce, const void *x, int64_t sN, int64_t sC, const int64_t *t, int64_t N, int64_t C,
                                 int64_t ignore, int reduction, const void *g, int gdt, int64_t gs, const double *cnt,
                                 void *gx)
{
  __shared__ double sh[kThreads];
  const char *gp = (const char *)g;
  int ges = elsize(gdt);
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    int64_t ti = t[row];
    int64_t o = row * C;
    if (ti == ignore || ti < 0 || ti >= C) {
      for (int64_t k = threadIdx.x; k < C; k += blockDim.x) st_f64((char *)gx + (o + k) * elsize(DT), DT, 0.0);
      continue;
    }
    double g0 = ld_f64(gp + (reduction == 0 ? row * gs : 0) * ges, gdt);
    double gi = reduction == 1 ? g0 / cnt[0] : g0;
    int64_t r = row * sN;
    if (!ce) {
      for (int64_t k = threadIdx.x; k < C; k += blockDim.x)
        st_f64((char *)gx + (o + k) * elsize(DT), DT, k == ti ? -gi : 0.0);
      continue;
    }
    double s, m = row_lse_parts<DT>(x, r, sC, C, sh, &s);
    for (int64_t k = threadIdx.x; k < C; k += blockDim.x)
      st_f64((char *)gx + (o + k) * elsize(DT), DT,
             gi * (exp(ldx<DT>(x, r + k * sC) - m) / s - (k == ti ? 1.0 : 0.0)));
  }
}

/* ---- embedding ---- */
template <typename W>
__global__ void k_embedding(const W *w, const int64_t *idx, int64_t n, int64_t V, int64_t row_words, W *out,
                            unsigned long long *bad)
{
  DPL_GRID_STRIDE(e, n * row_words)
  {
    int64_t i = e / row_words, j = e - i * row_words;
    int64_t r = idx[i];
    if (r < 0 || r >= V) {
      if (j == 0) atomicMin(bad, (unsigned long long)i);
      continue;
    }
    out[e] = w[r * row_words + j];
  }
}

template <typename T>
__global__ void k_embedding_bwd(const T *g, const int64_t *idx, int64_t n, int64_t V, int64_t D, T *gw,
                                unsigned long long *bad)
{
  DPL_GRID_STRIDE(e, n * D)
  {
    int64_t i = e / D, j = e - i * D;
    int64_t r = idx[i];
    if (r < 0 || r >= V) {
      if (j == 0) atomicMin(bad, (unsigned long long)i);
      continue;
    }
    atomicAdd(gw + r * D + j, g[e]);
  }
}

} // namespace

extern "C" int dpl_cu_class_loss(int32_t ce, int32_t xdt, const void *x, int64_t sN, int64_t sC, const int64_t *t,
                                 int64_t N, int64_t C, int64_t ignore, void *l, int32_t ldt, unsigned long long *bad,
                                 cudaStream_t s)
{
  if (N == 0) return 0;
  unsigned gr = row_grid(N);
  switch (xdt) {
  case F32: k_class_loss<F32><<<gr, kThreads, 0, s>>>(ce, x, sN, sC, t, N, C, ignore, l, ldt, bad); break;
  case F64: k_class_loss<F64><<<gr, kThreads, 0, s>>>(ce, x, sN, sC, t, N, C, ignore, l, ldt, bad); break;
  case F16: k_class_loss<F16><<<gr, kThreads, 0, s>>>(ce, x, sN, sC, t, N, C, ignore, l, ldt, bad); break;
  case BF16: k_class_loss<BF16><<<gr, kThreads, 0, s>>>(ce, x, sN, sC, t, N, C, ignore, l, ldt, bad); break;
  default: return (int)cudaErrorInvalidValue;
  }
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_loss_finish(const double *l, const int64_t *t, int64_t N, int64_t ignore, int32_t reduction,
                                  void *out, int32_t odt, double *cnt, cudaStream_t s)
{
  k_loss_finish<<<1, kThreads, 0, s>>>(l, t, N, ignore, reduction, out, odt, cnt);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_class_loss_bwd(int32_t ce, int32_t xdt, const void *x, int64_t sN, int64_t sC, const int64_t *t,
                                     int64_t N, int64_t C, int64_t ignore, int32_t reduction, const void *g,
                                     int32_t gdt, int64_t gs, const double *cnt, void *gx, cudaStream_t s)
{
  if (N == 0) return 0;
  unsigned gr = row_grid(N);
  switch (xdt) {
  case F32:
    k_class_loss_bwd<F32><<<gr, kThreads, 0, s>>>(ce, x, sN, sC, t, N, C, ignore, reduction, g, gdt, gs, cnt, gx);
    break;
  case F64:
    k_class_loss_bwd<F64><<<gr, kThreads, 0, s>>>(ce, x, sN, sC, t, N, C, ignore, reduction, g, gdt, gs, cnt, gx);
    break;
  case F16:
    k_class_loss_bwd<F16><<<gr, kThreads, 0, s>>>(ce, x, sN, sC, t, N, C, ignore, reduction, g, gdt, gs, cnt, gx);
    break;
  case BF16:
    k_class_loss_bwd<BF16><<<gr, kThreads, 0, s>>>(ce, x, sN, sC, t, N, C, ignore, reduction, g, gdt, gs, cnt, gx);
    break;
  default: return (int)cudaErrorInvalidValue;
  }
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_embedding(const void *w, const int64_t *idx, int64_t n, int64_t V, int64_t row_bytes, void *out,
                                unsigned long long *bad, cudaStream_t s)
{
  if (n == 0) return 0;
  if (row_bytes == 0) return dpl_cu_check_index(idx, n, V, bad, s); /* empty rows: the indices are still checked */
  uintptr_t al = (uintptr_t)w | (uintptr_t)out | (uintptr_t)row_bytes; /* the widest unit all of them allow */
  if (al % 4 == 0) {
    int64_t words = row_bytes / 4;
    k_embedding<uint32_t><<<grid_for(n * words), kThreads, 0, s>>>((const uint32_t *)w, idx, n, V, words,
                                                                   (uint32_t *)out, bad);
  } else if (al % 2 == 0) {
    int64_t words = row_bytes / 2;
    k_embedding<uint16_t><<<grid_for(n * words), kThreads, 0, s>>>((const uint16_t *)w, idx, n, V, words,
                                                                   (uint16_t *)out, bad);
  } else {
    k_embedding<uint8_t><<<grid_for(n * row_bytes), kThreads, 0, s>>>((const uint8_t *)w, idx, n, V, row_bytes,
                                                                      (uint8_t *)out, bad);
  }
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_embedding_bwd(int32_t kd, const void *g, const int64_t *idx, int64_t n, int64_t V, int64_t D,
                                    void *gw, unsigned long long *bad, cudaStream_t s)
{
  if (n == 0) return 0;
  if (D == 0) return dpl_cu_check_index(idx, n, V, bad, s);
  if (kd == F64)
    k_embedding_bwd<double><<<grid_for(n * D), kThreads, 0, s>>>((const double *)g, idx, n, V, D, (double *)gw, bad);
  else
    k_embedding_bwd<float><<<grid_for(n * D), kThreads, 0, s>>>((const float *)g, idx, n, V, D, (float *)gw, bad);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_softmax_rows(int32_t kd, const void *x, const void *g, void *out, int64_t rows, int64_t R,
                                   int32_t log, int32_t bwd, cudaStream_t s)
{
  if (rows == 0 || R == 0) return 0;
  if (kd == F64)
    k_softmax_rows<double><<<row_grid(rows), kThreads, 0, s>>>((const double *)x, (const double *)g, (double *)out, rows,
                                                               R, log, bwd);
  else
    k_softmax_rows<float><<<row_grid(rows), kThreads, 0, s>>>((const float *)x, (const float *)g, (float *)out, rows, R,
                                                              log, bwd);
  return (int)cudaGetLastError();
}

/* ---- reductions ---- */
namespace {
/* few long runs of floats summed: sliced over the whole GPU (k_red_slices) */
bool red_sliced(const dpl_cu_red *g, int64_t *parts)
{
  bool f = g->idt == F32 || g->idt == F64 || g->idt == F16 || g->idt == BF16;
  if (!f || (g->op != SUM && g->op != MEAN) || g->rows > 64 || g->R < (1 << 18)) return false;
  *parts = 1024 / g->rows;
  return true;
}

template <typename A, int DT>
void red_launch(const dpl_cu_red *g, const char *x, char *val, int64_t *idx, void *scratch, cudaStream_t s)
{
  int64_t parts = 0;
  if (red_sliced(g, &parts)) {
    if constexpr (std::is_same<A, double>::value) { /* floats only */
      k_red_slices<DT><<<dim3((unsigned)g->rows, (unsigned)parts), kThreads, 0, s>>>(*g, x, (g->R + parts - 1) / parts,
                                                                                     (double *)scratch);
      k_red_parts<<<row_grid(g->rows), kThreads, 0, s>>>(*g, (const double *)scratch, parts, val);
    }
  } else if ((g->rndim == 0 || (g->rndim == 1 && g->rstride[0] != 1)) && (g->rows >= kCols || g->R <= 256)) {
    /* a run of one element, or a reduced dim that is not the innermost */
    int64_t b = (g->rows + kCols - 1) / kCols;
    k_red_cols<A, DT><<<(unsigned)(b < 65535 * 4 ? b : 65535 * 4), kThreads, 0, s>>>(*g, x, val, idx);
  } else {
    k_red_rows<A, DT><<<row_grid(g->rows), kThreads, 0, s>>>(*g, x, val, idx);
  }
}
} // namespace

extern "C" int64_t dpl_cu_reduce_scratch(const dpl_cu_red *g)
{
  int64_t parts = 0;
  return g->rows > 0 && red_sliced(g, &parts) ? g->rows * parts * (int64_t)sizeof(double) : 0;
}

extern "C" int dpl_cu_reduce(const dpl_cu_red *g, const void *x, void *val, int64_t *idx, void *scratch, cudaStream_t s)
{
  if (g->rows == 0) return 0;
  const char *xc = (const char *)x;
  char *v = (char *)val;
  switch (g->idt) {
  case F32: red_launch<double, F32>(g, xc, v, idx, scratch, s); break;
  case F64: red_launch<double, F64>(g, xc, v, idx, scratch, s); break;
  case F16: red_launch<double, F16>(g, xc, v, idx, scratch, s); break;
  case BF16: red_launch<double, BF16>(g, xc, v, idx, scratch, s); break;
  case I32: red_launch<int64_t, I32>(g, xc, v, idx, scratch, s); break;
  case I64: red_launch<int64_t, I64>(g, xc, v, idx, scratch, s); break;
  case U8: red_launch<int64_t, U8>(g, xc, v, idx, scratch, s); break;
  default: red_launch<int64_t, BOOL>(g, xc, v, idx, scratch, s); break;
  }
  return (int)cudaGetLastError();
}
