/* dpl_cuda_reduce.cu: the plugin's row kernels: reductions of a contiguous
 * [rows, R] matrix (one block per row, float64 or int64 accumulation, the
 * CPU's NaN and first-index rules for max/min/argmax/argmin), the class losses
 * (cross-entropy, NLL) with their gradients, and embedding gather / scatter-add. */
#include "dpl_cuda_common.cuh"
#include <math.h>

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
template <typename T>
__device__ T block_prod(T v, T *sh)
{
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] *= sh[threadIdx.x + s];
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
template <typename T>
__device__ void block_best(T &v, int64_t &i, bool mx, T *sv, int64_t *si)
{
  sv[threadIdx.x] = v;
  si[threadIdx.x] = i;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) {
      T ov = sv[threadIdx.x + s];
      int64_t oi = si[threadIdx.x + s];
      if (better(ov, oi, sv[threadIdx.x], si[threadIdx.x], mx)) { sv[threadIdx.x] = ov; si[threadIdx.x] = oi; }
    }
    __syncthreads();
  }
  v = sv[0];
  i = si[0];
  __syncthreads();
}

__global__ void k_reduce_f(int op, const double *x, int64_t rows, int64_t R, double param, double *val, int64_t *idx)
{
  __shared__ double sv[kThreads];
  __shared__ int64_t si[kThreads];
  const int t = threadIdx.x, nt = blockDim.x;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const double *p = x + row * R;
    double res = 0;
    int64_t arg = 0;
    switch (op) {
    case SUM: case MEAN: {
      double acc = 0;
      for (int64_t j = t; j < R; j += nt) acc += p[j];
      double s = block_sum(acc, sv);
      res = op == MEAN ? (R ? s / (double)R : NAN) : s;
      break;
    }
    case PROD: {
      double acc = 1;
      for (int64_t j = t; j < R; j += nt) acc *= p[j];
      res = block_prod(acc, sv);
      break;
    }
    case MAX: case MIN: case ARGMAX: case ARGMIN: {
      bool mx = op == MAX || op == ARGMAX;
      double bv = 0;
      int64_t bi = -1;
      for (int64_t j = t; j < R; j += nt)
        if (better(p[j], j, bv, bi, mx)) { bv = p[j]; bi = j; }
      block_best(bv, bi, mx, sv, si);
      res = bv;
      arg = bi;
      break;
    }
    case VAR: case STD: {
      double acc = 0;
      for (int64_t j = t; j < R; j += nt) acc += p[j];
      double m = block_sum(acc, sv) / (double)R;
      double acc2 = 0;
      for (int64_t j = t; j < R; j += nt) { double d = p[j] - m; acc2 += d * d; }
      double s = block_sum(acc2, sv);
      double den = (double)R - param;
      double v = den > 0 ? s / den : NAN;
      res = op == STD ? sqrt(v) : v;
      break;
    }
    case LOGSUMEXP: {
      double m = -INFINITY;
      for (int64_t j = t; j < R; j += nt) if (p[j] > m || p[j] != p[j]) m = p[j];
      m = block_max_nan(m, sv);
      if (R == 0 || m != m || isinf(m)) { res = R == 0 ? -INFINITY : m; break; }
      double acc = 0;
      for (int64_t j = t; j < R; j += nt) acc += exp(p[j] - m);
      res = m + log(block_sum(acc, sv));
      break;
    }
    case NORM: {
      double acc = 0;
      if (isinf(param)) {
        for (int64_t j = t; j < R; j += nt) { double v = fabs(p[j]); if (v > acc || v != v) acc = v; }
        res = block_max_nan(acc, sv);
      } else if (param == 0) {
        for (int64_t j = t; j < R; j += nt) acc += p[j] != 0;
        res = block_sum(acc, sv);
      } else if (param == 2) {
        for (int64_t j = t; j < R; j += nt) acc += p[j] * p[j];
        res = sqrt(block_sum(acc, sv));
      } else if (param == 1) {
        for (int64_t j = t; j < R; j += nt) acc += fabs(p[j]);
        res = block_sum(acc, sv);
      } else {
        for (int64_t j = t; j < R; j += nt) acc += pow(fabs(p[j]), param);
        res = pow(block_sum(acc, sv), 1.0 / param);
      }
      break;
    }
    case ANY: {
      double acc = 0;
      for (int64_t j = t; j < R; j += nt) acc += p[j] != 0;
      res = block_sum(acc, sv) > 0;
      break;
    }
    default: {
      double acc = 0;
      for (int64_t j = t; j < R; j += nt) acc += p[j] == 0;
      res = block_sum(acc, sv) == 0;
      break;
    }
    }
    if (t == 0) {
      val[row] = res;
      if (idx) idx[row] = arg;
    }
  }
}

__global__ void k_reduce_i(int op, const int64_t *x, int64_t rows, int64_t R, int64_t *val, int64_t *idx)
{
  __shared__ int64_t sv[kThreads];
  __shared__ int64_t si[kThreads];
  __shared__ unsigned long long su[kThreads];
  const int t = threadIdx.x, nt = blockDim.x;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t *p = x + row * R;
    int64_t res = 0, arg = 0;
    switch (op) {
    case SUM: {
      unsigned long long acc = 0;
      for (int64_t j = t; j < R; j += nt) acc += (unsigned long long)p[j];
      res = (int64_t)block_sum(acc, su);
      break;
    }
    case PROD: {
      unsigned long long acc = 1;
      for (int64_t j = t; j < R; j += nt) acc *= (unsigned long long)p[j];
      res = (int64_t)block_prod(acc, su);
      break;
    }
    case ANY: case ALL: {
      unsigned long long acc = 0;
      for (int64_t j = t; j < R; j += nt) acc += op == ANY ? p[j] != 0 : p[j] == 0;
      unsigned long long n = block_sum(acc, su);
      res = op == ANY ? n > 0 : n == 0;
      break;
    }
    default: {
      bool mx = op == MAX || op == ARGMAX;
      int64_t bv = 0, bi = -1;
      for (int64_t j = t; j < R; j += nt)
        if (better(p[j], j, bv, bi, mx)) { bv = p[j]; bi = j; }
      block_best(bv, bi, mx, sv, si);
      res = bv;
      arg = bi;
      break;
    }
    }
    if (t == 0) {
      val[row] = res;
      if (idx) idx[row] = arg;
    }
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

/* SUM/MEAN of few long rows: blockIdx.y slices each row, partial sums are added
 * into val (zeroed by the launcher) with double atomics; MEAN divides after */
__global__ void k_sum_slices(const double *x, int64_t R, int64_t slice, double *val)
{
  __shared__ double sh[kThreads];
  int64_t row = blockIdx.x, lo = (int64_t)blockIdx.y * slice, hi = lo + slice < R ? lo + slice : R;
  const double *p = x + row * R;
  double acc = 0;
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) acc += p[j];
  double s = block_sum(acc, sh);
  if (threadIdx.x == 0) atomicAdd(val + row, s);
}

__global__ void k_scale(double *val, int64_t n, double f)
{
  DPL_GRID_STRIDE(i, n) val[i] *= f;
}

static unsigned row_grid(int64_t rows)
{
  int64_t g = rows < 65535 * 4 ? rows : 65535 * 4;
  return (unsigned)(g > 0 ? g : 1);
}

/* ---- class losses ---- */
__global__ void k_class_loss(int ce, const double *x, const int64_t *t, int64_t N, int64_t C, int64_t ignore, double *l,
                             unsigned long long *bad)
{
  __shared__ double sh[kThreads];
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    int64_t ti = t[row];
    if (ti == ignore || ti < 0 || ti >= C) {
      if (threadIdx.x == 0) {
        l[row] = 0;
        if (ti != ignore) atomicMin(bad, (unsigned long long)row);
      }
      continue;
    }
    const double *r = x + row * C;
    if (ce) {
      double m = -INFINITY;
      for (int64_t k = threadIdx.x; k < C; k += blockDim.x) if (r[k] > m) m = r[k];
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
      for (int64_t k = threadIdx.x; k < C; k += blockDim.x) acc += exp(r[k] - m);
      double s = block_sum(acc, sh);
      if (threadIdx.x == 0) l[row] = m + log(s) - r[ti];
    } else if (threadIdx.x == 0) {
      l[row] = -r[ti];
    }
  }
}

__global__ void k_loss_finish(const double *l, const int64_t *t, int64_t N, int64_t ignore, int reduction, double *out,
                              double *cnt)
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
    if (out) out[0] = reduction == 1 ? (c > 0 ? s / c : NAN) : s;
    if (cnt) cnt[0] = c;
  }
}

__global__ void k_class_loss_bwd(int ce, const double *x, const int64_t *t, int64_t N, int64_t C, int64_t ignore,
                                 int reduction, const double *g, const double *cnt, double *gx)
{
  __shared__ double sh[kThreads];
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    int64_t ti = t[row];
    double *o = gx + row * C;
    if (ti == ignore || ti < 0 || ti >= C) {
      for (int64_t k = threadIdx.x; k < C; k += blockDim.x) o[k] = 0;
      continue;
    }
    double gi = reduction == 0 ? g[row] : reduction == 1 ? g[0] / cnt[0] : g[0];
    const double *r = x + row * C;
    if (!ce) {
      for (int64_t k = threadIdx.x; k < C; k += blockDim.x) o[k] = k == ti ? -gi : 0.0;
      continue;
    }
    double m = -INFINITY;
    for (int64_t k = threadIdx.x; k < C; k += blockDim.x) if (r[k] > m) m = r[k];
    sh[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if ((int)threadIdx.x < s && sh[threadIdx.x + s] > sh[threadIdx.x]) sh[threadIdx.x] = sh[threadIdx.x + s];
      __syncthreads();
    }
    m = sh[0];
    __syncthreads();
    double acc = 0;
    for (int64_t k = threadIdx.x; k < C; k += blockDim.x) acc += exp(r[k] - m);
    double s = block_sum(acc, sh);
    for (int64_t k = threadIdx.x; k < C; k += blockDim.x) o[k] = gi * (exp(r[k] - m) / s - (k == ti ? 1.0 : 0.0));
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

extern "C" int dpl_cu_reduce_rows(int32_t op, int32_t kd, const void *x, int64_t rows, int64_t R, double param,
                                  void *val, int64_t *idx, cudaStream_t s)
{
  if (rows == 0) return 0;
  if (kd == F64 && (op == SUM || op == MEAN) && rows <= 64 && R >= (1 << 18)) {
    int64_t parts = 1024 / rows, slice = (R + parts - 1) / parts;
    cudaError_t e = cudaMemsetAsync(val, 0, (size_t)rows * sizeof(double), s);
    if (e != cudaSuccess) return (int)e;
    k_sum_slices<<<dim3((unsigned)rows, (unsigned)parts), kThreads, 0, s>>>((const double *)x, R, slice, (double *)val);
    if (op == MEAN) k_scale<<<grid_for(rows), kThreads, 0, s>>>((double *)val, rows, 1.0 / (double)R);
    return (int)cudaGetLastError();
  }
  if (kd == I64) k_reduce_i<<<row_grid(rows), kThreads, 0, s>>>(op, (const int64_t *)x, rows, R, (int64_t *)val, idx);
  else k_reduce_f<<<row_grid(rows), kThreads, 0, s>>>(op, (const double *)x, rows, R, param, (double *)val, idx);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_class_loss(int32_t ce, const double *x, const int64_t *t, int64_t N, int64_t C, int64_t ignore,
                                 double *l, unsigned long long *bad, cudaStream_t s)
{
  if (N == 0) return 0;
  k_class_loss<<<row_grid(N), kThreads, 0, s>>>(ce, x, t, N, C, ignore, l, bad);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_loss_finish(const double *l, const int64_t *t, int64_t N, int64_t ignore, int32_t reduction,
                                  double *out, double *cnt, cudaStream_t s)
{
  k_loss_finish<<<1, kThreads, 0, s>>>(l, t, N, ignore, reduction, out, cnt);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_class_loss_bwd(int32_t ce, const double *x, const int64_t *t, int64_t N, int64_t C,
                                     int64_t ignore, int32_t reduction, const double *g, const double *cnt, double *gx,
                                     cudaStream_t s)
{
  if (N == 0) return 0;
  k_class_loss_bwd<<<row_grid(N), kThreads, 0, s>>>(ce, x, t, N, C, ignore, reduction, g, cnt, gx);
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
