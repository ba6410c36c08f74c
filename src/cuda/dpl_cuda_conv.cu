/* dpl_cuda_conv.cu: the plugin's convolution and pooling kernels (NCHW):
 * im2col / col2im (col2im as a gather, no atomics), the moves between a
 * GEMM's [Og, m*L] layout and the output, the bias gradient, and max/average
 * pooling forward and backward with the CPU's window, padding, first-maximum
 * and NaN rules (dpl_tensor_conv.c). float32 (kd 0) or float64 (kd 1). */
#include "dpl_cuda_common.cuh"

using namespace dplcu;

namespace {

template <typename T>
__global__ void k_im2col(dpl_cu_conv g, const T *x, T *cols, int64_t n0, int64_t m, int64_t gr)
{
  const int64_t L = g.OH * g.OW, K = g.Cg * g.kh * g.kw, ld = m * L;
  DPL_GRID_STRIDE(e, K * ld)
  {
    int64_t r = e / ld, q = e - r * ld, s = q / L, l = q - s * L;
    int64_t c = r / (g.kh * g.kw), i = (r / g.kw) % g.kh, j = r % g.kw;
    int64_t oh = l / g.OW, ow = l - oh * g.OW;
    int64_t h = oh * g.sh - g.ph + i * g.dh, w = ow * g.sw - g.pw + j * g.dw;
    T v = 0;
    if (h >= 0 && h < g.H && w >= 0 && w < g.W) v = x[(((n0 + s) * g.C + gr * g.Cg + c) * g.H + h) * g.W + w];
    cols[e] = v;
  }
}

/* gx[n0+s, gr*Cg + c, h, w] = sum of the columns that read it */
template <typename T>
__global__ void k_col2im(dpl_cu_conv g, const T *cols, T *gx, int64_t n0, int64_t m, int64_t gr)
{
  const int64_t L = g.OH * g.OW, ld = m * L, HW = g.H * g.W;
  DPL_GRID_STRIDE(e, m * g.Cg * HW)
  {
    int64_t s = e / (g.Cg * HW), q = e - s * g.Cg * HW, c = q / HW, p = q - c * HW, h = p / g.W, w = p - h * g.W;
    double acc = 0;
    for (int64_t i = 0; i < g.kh; i++) {
      int64_t hn = h + g.ph - i * g.dh;
      if (hn < 0 || hn % g.sh) continue;
      int64_t oh = hn / g.sh;
      if (oh >= g.OH) continue;
      for (int64_t j = 0; j < g.kw; j++) {
        int64_t wn = w + g.pw - j * g.dw;
        if (wn < 0 || wn % g.sw) continue;
        int64_t ow = wn / g.sw;
        if (ow >= g.OW) continue;
        acc += (double)cols[((c * g.kh + i) * g.kw + j) * ld + s * L + oh * g.OW + ow];
      }
    }
    gx[(((n0 + s) * g.C + gr * g.Cg + c) * g.H + h) * g.W + w] = (T)acc;
  }
}

/* out[n0+s, gr*Og + o, l] = tmp[o, s*L + l] + bias[gr*Og + o] */
template <typename T>
__global__ void k_conv_out(dpl_cu_conv g, const T *tmp, const T *bias, T *out, int64_t n0, int64_t m, int64_t gr)
{
  const int64_t L = g.OH * g.OW, ld = m * L;
  DPL_GRID_STRIDE(e, g.Og * ld)
  {
    int64_t o = e / ld, q = e - o * ld, s = q / L, l = q - s * L;
    out[((n0 + s) * g.O + gr * g.Og + o) * L + l] = tmp[e] + (bias ? bias[gr * g.Og + o] : (T)0);
  }
}

/* gyc[o, s*L + l] = gy[n0+s, gr*Og + o, l] */
template <typename T>
__global__ void k_conv_gy(dpl_cu_conv g, const T *gy, T *gyc, int64_t n0, int64_t m, int64_t gr)
{
  const int64_t L = g.OH * g.OW, ld = m * L;
  DPL_GRID_STRIDE(e, g.Og * ld)
  {
    int64_t o = e / ld, q = e - o * ld, s = q / L, l = q - s * L;
    gyc[e] = gy[((n0 + s) * g.O + gr * g.Og + o) * L + l];
  }
}

/* gb[o] = sum over samples and positions of gy[n, o, l] (one block per o) */
template <typename T>
__global__ void k_bias_grad(const T *gy, int64_t N, int64_t O, int64_t L, T *gb)
{
  __shared__ double sh[kThreads];
  for (int64_t o = blockIdx.x; o < O; o += gridDim.x) {
    double acc = 0;
    for (int64_t e = threadIdx.x; e < N * L; e += blockDim.x) {
      int64_t n = e / L, l = e - n * L;
      acc += (double)gy[(n * O + o) * L + l];
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) gb[o] = (T)sh[0];
    __syncthreads();
  }
}

/* ---- pooling; pl: N, C, H, W, kh, kw, sh, sw, ph, pw, OH, OW ---- */
template <typename T>
__global__ void k_maxpool(dpl_cu_pool g, const T *x, T *out, int64_t *idx)
{
  DPL_GRID_STRIDE(e, g.N * g.C * g.OH * g.OW)
  {
    int64_t p = e / (g.OH * g.OW), q = e - p * g.OH * g.OW, oh = q / g.OW, ow = q - oh * g.OW;
    const T *plane = x + p * g.H * g.W;
    int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw, bi = -1;
    T best = 0;
    for (int64_t i = 0; i < g.kh; i++) {
      int64_t h = h0 + i;
      if (h < 0 || h >= g.H) continue;
      for (int64_t j = 0; j < g.kw; j++) {
        int64_t w = w0 + j;
        if (w < 0 || w >= g.W) continue;
        T v = plane[h * g.W + w];
        if (bi < 0 || v > best || (v != v && best == best)) { best = v; bi = h * g.W + w; }
      }
    }
    out[e] = best;
    idx[e] = bi;
  }
}

template <typename T>
__global__ void k_maxpool_bwd(const T *gy, const int64_t *idx, int64_t P, int64_t L, int64_t plane, T *gx,
                              unsigned long long *bad)
{
  DPL_GRID_STRIDE(e, P * L)
  {
    int64_t p = e / L, k = idx[e];
    if (k < 0 || k >= plane) { atomicMin(bad, (unsigned long long)e); continue; }
    atomicAdd(gx + p * plane + k, gy[e]);
  }
}

/* average pooling in float64, forward (gy NULL: out = window means) or backward (gx += gy / div) */
__global__ void k_avgpool(dpl_cu_pool g, int cip, const double *x, const double *gy, double *out)
{
  DPL_GRID_STRIDE(e, g.N * g.C * g.OH * g.OW)
  {
    int64_t p = e / (g.OH * g.OW), q = e - p * g.OH * g.OW, oh = q / g.OW, ow = q - oh * g.OW;
    int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
    int64_t he = hs + g.kh < g.H + g.ph ? hs + g.kh : g.H + g.ph;
    int64_t we = ws + g.kw < g.W + g.pw ? ws + g.kw : g.W + g.pw;
    int64_t pool = (he - hs) * (we - ws);
    if (hs < 0) hs = 0;
    if (ws < 0) ws = 0;
    if (he > g.H) he = g.H;
    if (we > g.W) we = g.W;
    int64_t div = cip ? pool : (he - hs) * (we - ws);
    double d = (double)(div ? div : 1);
    if (gy) {
      double v = gy[e] / d;
      for (int64_t h = hs; h < he; h++)
        for (int64_t w = ws; w < we; w++) atomicAdd(out + (p * g.H + h) * g.W + w, v);
    } else {
      const double *plane = x + p * g.H * g.W;
      double s = 0;
      for (int64_t h = hs; h < he; h++)
        for (int64_t w = ws; w < we; w++) s += plane[h * g.W + w];
      out[e] = s / d;
    }
  }
}

} // namespace

extern "C" int dpl_cu_im2col(int32_t kd, const dpl_cu_conv *g, const void *x, void *cols, int64_t n0, int64_t m,
                             int64_t gr, cudaStream_t s)
{
  int64_t n = g->Cg * g->kh * g->kw * m * g->OH * g->OW;
  if (n == 0) return 0;
  if (kd == F64) k_im2col<double><<<grid_for(n), kThreads, 0, s>>>(*g, (const double *)x, (double *)cols, n0, m, gr);
  else k_im2col<float><<<grid_for(n), kThreads, 0, s>>>(*g, (const float *)x, (float *)cols, n0, m, gr);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_col2im(int32_t kd, const dpl_cu_conv *g, const void *cols, void *gx, int64_t n0, int64_t m,
                             int64_t gr, cudaStream_t s)
{
  int64_t n = m * g->Cg * g->H * g->W;
  if (n == 0) return 0;
  if (kd == F64) k_col2im<double><<<grid_for(n), kThreads, 0, s>>>(*g, (const double *)cols, (double *)gx, n0, m, gr);
  else k_col2im<float><<<grid_for(n), kThreads, 0, s>>>(*g, (const float *)cols, (float *)gx, n0, m, gr);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_conv_out(int32_t kd, const dpl_cu_conv *g, const void *tmp, const void *bias, void *out,
                               int64_t n0, int64_t m, int64_t gr, cudaStream_t s)
{
  int64_t n = g->Og * m * g->OH * g->OW;
  if (n == 0) return 0;
  if (kd == F64)
    k_conv_out<double><<<grid_for(n), kThreads, 0, s>>>(*g, (const double *)tmp, (const double *)bias, (double *)out, n0, m, gr);
  else
    k_conv_out<float><<<grid_for(n), kThreads, 0, s>>>(*g, (const float *)tmp, (const float *)bias, (float *)out, n0, m, gr);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_conv_gy(int32_t kd, const dpl_cu_conv *g, const void *gy, void *gyc, int64_t n0, int64_t m,
                              int64_t gr, cudaStream_t s)
{
  int64_t n = g->Og * m * g->OH * g->OW;
  if (n == 0) return 0;
  if (kd == F64) k_conv_gy<double><<<grid_for(n), kThreads, 0, s>>>(*g, (const double *)gy, (double *)gyc, n0, m, gr);
  else k_conv_gy<float><<<grid_for(n), kThreads, 0, s>>>(*g, (const float *)gy, (float *)gyc, n0, m, gr);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_bias_grad(int32_t kd, const void *gy, int64_t N, int64_t O, int64_t L, void *gb, cudaStream_t s)
{
  if (O == 0) return 0;
  unsigned grid = (unsigned)(O < 65535 ? O : 65535);
  if (kd == F64) k_bias_grad<double><<<grid, kThreads, 0, s>>>((const double *)gy, N, O, L, (double *)gb);
  else k_bias_grad<float><<<grid, kThreads, 0, s>>>((const float *)gy, N, O, L, (float *)gb);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_maxpool(int32_t kd, const dpl_cu_pool *g, const void *x, void *out, int64_t *idx, cudaStream_t s)
{
  int64_t n = g->N * g->C * g->OH * g->OW;
  if (n == 0) return 0;
  if (kd == F64) k_maxpool<double><<<grid_for(n), kThreads, 0, s>>>(*g, (const double *)x, (double *)out, idx);
  else k_maxpool<float><<<grid_for(n), kThreads, 0, s>>>(*g, (const float *)x, (float *)out, idx);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_maxpool_bwd(int32_t kd, const void *gy, const int64_t *idx, int64_t P, int64_t L, int64_t plane,
                                  void *gx, unsigned long long *bad, cudaStream_t s)
{
  if (P * L == 0) return 0;
  if (kd == F64)
    k_maxpool_bwd<double><<<grid_for(P * L), kThreads, 0, s>>>((const double *)gy, idx, P, L, plane, (double *)gx, bad);
  else
    k_maxpool_bwd<float><<<grid_for(P * L), kThreads, 0, s>>>((const float *)gy, idx, P, L, plane, (float *)gx, bad);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_avgpool(const dpl_cu_pool *g, int32_t cip, const double *x, const double *gy, double *out,
                              cudaStream_t s)
{
  int64_t n = g->N * g->C * g->OH * g->OW;
  if (n == 0) return 0;
  k_avgpool<<<grid_for(n), kThreads, 0, s>>>(*g, cip, x, gy, out);
  return (int)cudaGetLastError();
}
