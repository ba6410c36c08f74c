/* dpl_cuda_norm.cu: the layer norm kernels (dpl_layer_norm on the GPU) and
 * their launchers: forward and grad_x one block per row (a small block for
 * short rows) with block reductions in float64, the CPU's formulas
 * (dpl_tensor_norm.c); grad_w / grad_b summed over the rows without atomics:
 * per-chunk partials in float64, then one ordered pass per column. */
#include "dpl_cuda_common.cuh"
#include <math.h>

using namespace dplcu;

namespace {

/* the block's sum of v (every thread calls it; blockDim.x a power of two <= kThreads) */
__device__ double ln_block_sum(double v, double *sh)
{
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  double r = sh[0];
  __syncthreads();
  return r;
}

template <typename T>
__global__ void k_ln_fwd(const T *x, const T *w, const T *b, T *y, T *mean, T *rstd, int64_t rows, int64_t n,
                         double eps)
{
  __shared__ double sh[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *p = x + row * n;
    T *o = y + row * n;
    double s = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += (double)p[k];
    double m = ln_block_sum(s, sh) / (double)n;
    double v = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      double c = (double)p[k] - m;
      v += c * c;
    }
    double rs = (double)(T)(1.0 / sqrt(ln_block_sum(v, sh) / (double)n + eps)); /* the saved value */
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      double t = ((double)p[k] - m) * rs;
      if (w) t *= (double)w[k];
      if (b) t += (double)b[k];
      o[k] = (T)t;
    }
    if (threadIdx.x == 0) {
      mean[row] = (T)m;
      rstd[row] = (T)rs;
    }
  }
}

/* grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = grad_y * weight */
template <typename T>
__global__ void k_ln_bwd(const T *gy, const T *x, const T *mean, const T *rstd, const T *w, T *gx, int64_t rows,
                         int64_t n)
{
  __shared__ double sh[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *p = x + row * n, *q = gy + row * n;
    double m = (double)mean[row], rs = (double)rstd[row], s1 = 0, s2 = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      double g = (double)q[k] * (w ? (double)w[k] : 1.0);
      s1 += g;
      s2 += g * ((double)p[k] - m) * rs;
    }
    s1 = ln_block_sum(s1, sh) / (double)n;
    s2 = ln_block_sum(s2, sh) / (double)n;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      double g = (double)q[k] * (w ? (double)w[k] : 1.0);
      gx[row * n + k] = (T)(rs * (g - s1 - ((double)p[k] - m) * rs * s2));
    }
  }
}

/* partials of grad_w (pw) and grad_b (pb) over the rows [chunk * blockIdx.y, +chunk), one column per thread */
template <typename T>
__global__ void k_ln_cols_part(const T *gy, const T *x, const T *mean, const T *rstd, int64_t rows, int64_t n,
                               int64_t chunk, double *pw, double *pb)
{
  int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= n) return;
  int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
  double sw = 0, sb = 0;
  for (int64_t r = r0; r < r1; r++) {
    double g = (double)gy[r * n + col];
    if (pw) sw += g * ((double)x[r * n + col] - (double)mean[r]) * (double)rstd[r];
    sb += g;
  }
  if (pw) pw[blockIdx.y * n + col] = sw;
  if (pb) pb[blockIdx.y * n + col] = sb;
}

/* the partials of each column summed in order */
template <typename T>
__global__ void k_ln_cols_fin(const double *pw, const double *pb, int64_t parts, int64_t n, T *gw, T *gb)
{
  DPL_GRID_STRIDE(col, n)
  {
    double sw = 0, sb = 0;
    for (int64_t p = 0; p < parts; p++) {
      if (pw) sw += pw[p * n + col];
      if (pb) sb += pb[p * n + col];
    }
    if (gw) gw[col] = (T)sw;
    if (gb) gb[col] = (T)sb;
  }
}

unsigned ln_grid(int64_t rows)
{
  int64_t g = rows < 65535 * 4 ? rows : 65535 * 4;
  return (unsigned)(g > 0 ? g : 1);
}
/* a warp for rows up to 32 elements, 128 threads up to 512, else kThreads */
unsigned ln_threads(int64_t n) { return n <= 32 ? 32 : n <= 512 ? 128 : kThreads; }

} // namespace

extern "C" int dpl_cu_layer_norm(int32_t kd, const void *x, const void *w, const void *b, void *y, void *mean,
                                 void *rstd, int64_t rows, int64_t n, double eps, cudaStream_t s)
{
  if (rows == 0) return 0;
  if (kd == F64)
    k_ln_fwd<double><<<ln_grid(rows), ln_threads(n), 0, s>>>((const double *)x, (const double *)w, (const double *)b,
                                                             (double *)y, (double *)mean, (double *)rstd, rows, n, eps);
  else
    k_ln_fwd<float><<<ln_grid(rows), ln_threads(n), 0, s>>>((const float *)x, (const float *)w, (const float *)b,
                                                            (float *)y, (float *)mean, (float *)rstd, rows, n, eps);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_layer_norm_bwd(int32_t kd, const void *gy, const void *x, const void *mean, const void *rstd,
                                     const void *w, void *gx, int64_t rows, int64_t n, cudaStream_t s)
{
  if (rows == 0) return 0;
  if (kd == F64)
    k_ln_bwd<double><<<ln_grid(rows), ln_threads(n), 0, s>>>((const double *)gy, (const double *)x,
                                                             (const double *)mean, (const double *)rstd,
                                                             (const double *)w, (double *)gx, rows, n);
  else
    k_ln_bwd<float><<<ln_grid(rows), ln_threads(n), 0, s>>>((const float *)gy, (const float *)x, (const float *)mean,
                                                            (const float *)rstd, (const float *)w, (float *)gx, rows, n);
  return (int)cudaGetLastError();
}

extern "C" int64_t dpl_cu_layer_norm_parts(int64_t rows)
{
  int64_t p = (rows + 63) / 64; /* chunks of at least 64 rows, at most 256 of them */
  if (p > 256) p = 256;
  return p > 0 ? p : 1;
}

extern "C" int dpl_cu_layer_norm_cols(int32_t kd, const void *gy, const void *x, const void *mean, const void *rstd,
                                      void *gw, void *gb, int64_t rows, int64_t n, double *scratch, cudaStream_t s)
{
  if (n == 0 || (!gw && !gb)) return 0;
  int64_t parts = dpl_cu_layer_norm_parts(rows), chunk = (rows + parts - 1) / parts;
  double *pw = gw ? scratch : nullptr, *pb = gb ? scratch + parts * n : nullptr;
  dim3 grid((unsigned)((n + kThreads - 1) / kThreads), (unsigned)parts);
  if (rows > 0) {
    if (kd == F64)
      k_ln_cols_part<double><<<grid, kThreads, 0, s>>>((const double *)gy, (const double *)x, (const double *)mean,
                                                       (const double *)rstd, rows, n, chunk, pw, pb);
    else
      k_ln_cols_part<float><<<grid, kThreads, 0, s>>>((const float *)gy, (const float *)x, (const float *)mean,
                                                      (const float *)rstd, rows, n, chunk, pw, pb);
    int e = (int)cudaGetLastError();
    if (e) return e;
  }
  int64_t np = rows > 0 ? parts : 0; /* no rows: zero sums */
  if (kd == F64)
    k_ln_cols_fin<double><<<grid_for(n), kThreads, 0, s>>>(pw, pb, np, n, (double *)gw, (double *)gb);
  else
    k_ln_cols_fin<float><<<grid_for(n), kThreads, 0, s>>>(pw, pb, np, n, (float *)gw, (float *)gb);
  return (int)cudaGetLastError();
}
