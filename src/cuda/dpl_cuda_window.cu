/* dpl_cuda_window.cu: the kernels of F.unfold / F.fold (im2col / col2im of [N, C*kh*kw, L]
 * columns, col2im as a gather summing in the CPU's order), adaptive max pooling (PyTorch's
 * windows), adaptive average pooling and its gradient (a gather per input element adding in the
 * CPU's order), 1-d max pooling with dilation, and histc's bin counts (atomics on int64). The
 * formulas and the NaN / first-maximum rules are those of dpl_tensor_nnconv.c and
 * dpl_tensor_count.c; float32 (kd 0) or float64 (kd 1). */
#include "dpl_cuda_common.cuh"

using namespace dplcu;

namespace {

/* cols[n, (c*kh + i)*kw + j, oh*OW + ow] = x[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw] or 0 */
template <typename T>
__global__ void k_unfold(dpl_cu_cols g, const T *x, T *cols)
{
  const int64_t L = g.OH * g.OW, K = g.C * g.kh * g.kw;
  DPL_GRID_STRIDE(e, g.N * K * L)
  {
    int64_t l = e % L, r = (e / L) % K, n = e / (L * K);
    int64_t c = r / (g.kh * g.kw), i = (r / g.kw) % g.kh, j = r % g.kw;
    int64_t oh = l / g.OW, ow = l - oh * g.OW;
    int64_t h = oh * g.sh - g.ph + i * g.dh, w = ow * g.sw - g.pw + j * g.dw;
    T v = 0;
    if (h >= 0 && h < g.H && w >= 0 && w < g.W) v = x[((n * g.C + c) * g.H + h) * g.W + w];
    cols[e] = v;
  }
}

/* x[n, c, h, w] = the sum of the columns that read it, added in the CPU's order (i, then j) */
template <typename T>
__global__ void k_fold(dpl_cu_cols g, const T *cols, T *x)
{
  const int64_t L = g.OH * g.OW, HW = g.H * g.W;
  DPL_GRID_STRIDE(e, g.N * g.C * HW)
  {
    int64_t p = e / HW, q = e - p * HW, h = q / g.W, w = q - h * g.W;
    const T *src = cols + p * g.kh * g.kw * L; /* plane p = n*C + c: rows (c*kh + i)*kw + j of sample n */
    T acc = 0;
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
        acc += src[(i * g.kw + j) * L + oh * g.OW + ow];
      }
    }
    x[e] = acc;
  }
}

__device__ __forceinline__ int64_t ad_start(int64_t o, int64_t n, int64_t c) { return (o / n) * c + ((o % n) * c) / n; }
__device__ __forceinline__ int64_t ad_end(int64_t o, int64_t n, int64_t c) { return 1 + ((o + 1) * c - 1) / n; }

/* the first maximum of each window, a NaN taking over (the last NaN) */
template <typename T>
__global__ void k_adaptive_max(const T *x, int64_t P, int64_t H, int64_t W, int64_t OH, int64_t OW, T *out,
                               int64_t *idx)
{
  DPL_GRID_STRIDE(e, P * OH * OW)
  {
    int64_t p = e / (OH * OW), q = e - p * OH * OW, oh = q / OW, ow = q - oh * OW;
    int64_t h0 = ad_start(oh, OH, H), h1 = ad_end(oh, OH, H), w0 = ad_start(ow, OW, W), w1 = ad_end(ow, OW, W);
    const T *plane = x + p * H * W;
    T best = -(T)INFINITY;
    int64_t bi = h0 * W + w0;
    for (int64_t h = h0; h < h1; h++)
      for (int64_t w = w0; w < w1; w++) {
        T v = plane[h * W + w];
        if (v > best || v != v) { best = v; bi = h * W + w; }
      }
    out[e] = best;
    idx[e] = bi;
  }
}

/* the window averages, summed in double in the CPU's order (rows, then columns) */
template <typename T>
__global__ void k_adaptive_avg(const T *x, int64_t P, int64_t H, int64_t W, int64_t OH, int64_t OW, T *out)
{
  DPL_GRID_STRIDE(e, P * OH * OW)
  {
    int64_t p = e / (OH * OW), q = e - p * OH * OW, oh = q / OW, ow = q - oh * OW;
    int64_t h0 = ad_start(oh, OH, H), h1 = ad_end(oh, OH, H), w0 = ad_start(ow, OW, W), w1 = ad_end(ow, OW, W);
    const T *plane = x + p * H * W;
    double s = 0;
    for (int64_t h = h0; h < h1; h++)
      for (int64_t w = w0; w < w1; w++) s += plane[h * W + w];
    out[e] = (T)(s / (double)((h1 - h0) * (w1 - w0)));
  }
}

/* its gradient as a gather: gx[h, w] adds grad / window size of every window holding (h, w), in
 * the CPU's order (windows by row, then column; those holding row h start at oh = h*OH/H) */
template <typename T>
__global__ void k_adaptive_avg_bwd(const T *g, int64_t P, int64_t H, int64_t W, int64_t OH, int64_t OW, T *gx)
{
  DPL_GRID_STRIDE(e, P * H * W)
  {
    int64_t p = e / (H * W), q = e - p * H * W, h = q / W, w = q - h * W;
    const T *gp = g + p * OH * OW;
    T acc = 0;
    for (int64_t oh = h * OH / H; oh < OH && ad_start(oh, OH, H) <= h; oh++) {
      int64_t hn = ad_end(oh, OH, H) - ad_start(oh, OH, H);
      for (int64_t ow = w * OW / W; ow < OW && ad_start(ow, OW, W) <= w; ow++) {
        int64_t wn = ad_end(ow, OW, W) - ad_start(ow, OW, W);
        acc += gp[oh * OW + ow] / (T)(hn * wn);
      }
    }
    gx[e] = acc;
  }
}

template <typename T>
__global__ void k_max_pool1d(const T *x, int64_t P, int64_t L, int64_t OL, int64_t k, int64_t s, int64_t pad, int64_t d,
                             T *out, int64_t *idx)
{
  DPL_GRID_STRIDE(e, P * OL)
  {
    int64_t r = e / OL, q = e - r * OL;
    const T *row = x + r * L;
    int64_t i0 = q * s - pad, i1 = i0 + (k - 1) * d + 1;
    if (i1 > L) i1 = L;
    while (i0 < 0) i0 += d;
    T best = -(T)INFINITY;
    int64_t bi = i0;
    for (int64_t i = i0; i < i1; i += d) {
      T v = row[i];
      if (v > best || v != v) { best = v; bi = i; }
    }
    out[e] = best;
    idx[e] = bi < L ? bi : L - 1;
  }
}

/* histc: the bin of x in [lo, hi], in T's arithmetic rounded at each step as on the CPU (a
 * subtraction, a product, an IEEE division: nothing nvcc could contract into an FMA) */
__device__ __forceinline__ int64_t bin_of(float x, float lo, float hi, int64_t bins)
{
  if (!(x >= lo && x <= hi)) return -1;
  int64_t b = (int64_t)(__fmul_rn(x - lo, (float)bins) / (hi - lo));
  return b >= bins ? bins - 1 : b;
}
__device__ __forceinline__ int64_t bin_of(double x, double lo, double hi, int64_t bins)
{
  if (!(x >= lo && x <= hi)) return -1;
  int64_t b = (int64_t)(__dmul_rn(x - lo, (double)bins) / (hi - lo));
  return b >= bins ? bins - 1 : b;
}
template <typename T>
__global__ void k_histc(const T *x, int64_t n, T lo, T hi, int64_t bins, unsigned long long *cnt)
{
  DPL_GRID_STRIDE(e, n)
  {
    int64_t b = bin_of(x[e], lo, hi, bins);
    if (b >= 0) atomicAdd(cnt + b, 1ull);
  }
}

} // namespace

extern "C" int dpl_cu_unfold(int32_t kd, const dpl_cu_cols *g, const void *x, void *cols, cudaStream_t s)
{
  int64_t n = g->N * g->C * g->kh * g->kw * g->OH * g->OW;
  if (kd == F64) { if (n > 0) k_unfold<double><<<grid_for(n), kThreads, 0, s>>>(*g, (const double *)x, (double *)cols); }
  else if (n > 0) k_unfold<float><<<grid_for(n), kThreads, 0, s>>>(*g, (const float *)x, (float *)cols);
  return n > 0 ? (int)cudaGetLastError() : 0;
}

extern "C" int dpl_cu_fold(int32_t kd, const dpl_cu_cols *g, const void *cols, void *x, cudaStream_t s)
{
  int64_t n = g->N * g->C * g->H * g->W;
  if (kd == F64) { if (n > 0) k_fold<double><<<grid_for(n), kThreads, 0, s>>>(*g, (const double *)cols, (double *)x); }
  else if (n > 0) k_fold<float><<<grid_for(n), kThreads, 0, s>>>(*g, (const float *)cols, (float *)x);
  return n > 0 ? (int)cudaGetLastError() : 0;
}

extern "C" int dpl_cu_adaptive_max(int32_t kd, const void *x, int64_t P, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                   void *out, int64_t *idx, cudaStream_t s)
{
  int64_t n = P * OH * OW;
  if (n <= 0) return 0;
  if (kd == F64) k_adaptive_max<double><<<grid_for(n), kThreads, 0, s>>>((const double *)x, P, H, W, OH, OW, (double *)out, idx);
  else k_adaptive_max<float><<<grid_for(n), kThreads, 0, s>>>((const float *)x, P, H, W, OH, OW, (float *)out, idx);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_adaptive_avg(int32_t kd, int32_t bwd, const void *x, int64_t P, int64_t H, int64_t W, int64_t OH,
                                   int64_t OW, void *out, cudaStream_t s)
{
  int64_t n = P * (bwd ? H * W : OH * OW);
  if (n <= 0) return 0;
  if (bwd) {
    if (kd == F64) k_adaptive_avg_bwd<double><<<grid_for(n), kThreads, 0, s>>>((const double *)x, P, H, W, OH, OW, (double *)out);
    else k_adaptive_avg_bwd<float><<<grid_for(n), kThreads, 0, s>>>((const float *)x, P, H, W, OH, OW, (float *)out);
  } else {
    if (kd == F64) k_adaptive_avg<double><<<grid_for(n), kThreads, 0, s>>>((const double *)x, P, H, W, OH, OW, (double *)out);
    else k_adaptive_avg<float><<<grid_for(n), kThreads, 0, s>>>((const float *)x, P, H, W, OH, OW, (float *)out);
  }
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_max_pool1d(int32_t kd, const void *x, int64_t P, int64_t L, int64_t OL, int64_t k, int64_t st,
                                 int64_t pad, int64_t d, void *out, int64_t *idx, cudaStream_t s)
{
  int64_t n = P * OL;
  if (n <= 0) return 0;
  if (kd == F64) k_max_pool1d<double><<<grid_for(n), kThreads, 0, s>>>((const double *)x, P, L, OL, k, st, pad, d, (double *)out, idx);
  else k_max_pool1d<float><<<grid_for(n), kThreads, 0, s>>>((const float *)x, P, L, OL, k, st, pad, d, (float *)out, idx);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_histc(int32_t kd, const void *x, int64_t n, double lo, double hi, int64_t bins, int64_t *cnt,
                            cudaStream_t s)
{
  if (n <= 0) return 0;
  if (kd == F64) k_histc<double><<<grid_for(n), kThreads, 0, s>>>((const double *)x, n, lo, hi, bins, (unsigned long long *)cnt);
  else k_histc<float><<<grid_for(n), kThreads, 0, s>>>((const float *)x, n, (float)lo, (float)hi, bins, (unsigned long long *)cnt);
  return (int)cudaGetLastError();
}
