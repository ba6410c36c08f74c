/* dpl_cuda_ctc.cu: the kernels of the CTC loss (DPL_BK_CTC, DPL_BK_CTC_BWD): one block per
 * sequence runs the CPU's log-space recursions of dpl_tensor_ctc.c (PyTorch 1.13's algorithm)
 * over the time steps, the threads sharing the positions s of the extended target (a barrier
 * per time step); the gradient's log-sums per class are added in the CPU's order (s
 * descending), each class by one thread. Arithmetic in the input's dtype T (float: expf/logf,
 * double: exp/log), as on the CPU. */
#include "dpl_cuda_common.cuh"
#include <math.h>

using namespace dplcu;

namespace {

const int kCtcThreads = 256;

__device__ __forceinline__ float ctc_exp(float x) { return expf(x); }
__device__ __forceinline__ double ctc_exp(double x) { return exp(x); }
__device__ __forceinline__ float ctc_log(float x) { return logf(x); }
__device__ __forceinline__ double ctc_log(double x) { return log(x); }

/* the s-th label of sequence b's extended target (blanks around and between its labels) */
__device__ __forceinline__ int64_t tprime(const dpl_cu_ctc_geom &g, const int64_t *meta, int64_t b, int64_t s)
{
  return (s & 1) ? meta[3 * g.N + meta[2 * g.N + b] + s / 2] : g.blank;
}

/* log(exp(acc) + exp(v)) into *acc, -inf standing for the empty sum (ctc_logadd on the CPU) */
template <typename T>
__device__ __forceinline__ void logadd(T *acc, T v)
{
  if (*acc == (T)-INFINITY) { *acc = v; return; }
  T m = *acc > v ? *acc : v;
  *acc = ctc_log(ctc_exp(*acc - m) + ctc_exp(v - m)) + m;
}

/* alpha [N, T, L] (L = 2S + 1) and nll [N]; block b = sequence b */
template <typename T>
__global__ void k_ctc_fwd(dpl_cu_ctc_geom g, const T *lp, const int64_t *meta, T *nll, T *alpha)
{
  const T ninf = -INFINITY;
  const int64_t b = blockIdx.x, L = 2 * g.S + 1;
  const int64_t il = meta[b], tl = meta[g.N + b];
  T *la = alpha + b * g.T * L;
  const T *lpb = lp + b * g.sn;
  for (int64_t i = threadIdx.x; i < g.T * L; i += blockDim.x) la[i] = ninf;
  if (il == 0) { /* no time step: only the empty target has probability 1 */
    if (threadIdx.x == 0) nll[b] = tl == 0 ? (T)0 : (T)INFINITY;
    return;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    la[0] = lpb[g.blank * g.sc];
    if (tl > 0) la[1] = lpb[tprime(g, meta, b, 1) * g.sc];
  }
  __syncthreads();
  for (int64_t t = 1; t < il; t++) {
    const T *prev = la + (t - 1) * L;
    T *cur = la + t * L;
    const T *lpt = lpb + t * g.st;
    for (int64_t s = threadIdx.x; s < 2 * tl + 1; s += blockDim.x) {
      int64_t ctp = tprime(g, meta, b, s);
      T la1 = prev[s], lamax = la1, la2, la3;
      if (s > 0) {
        la2 = prev[s - 1];
        if (la2 > lamax) lamax = la2;
      } else {
        la2 = ninf;
      }
      if (s > 1 && tprime(g, meta, b, s - 2) != ctp) {
        la3 = prev[s - 2];
        if (la3 > lamax) lamax = la3;
      } else {
        la3 = ninf;
      }
      if (lamax == ninf) lamax = 0;
      cur[s] = ctc_log(ctc_exp(la1 - lamax) + ctc_exp(la2 - lamax) + ctc_exp(la3 - lamax)) + lamax + lpt[ctp * g.sc];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const T *last = la + (il - 1) * L;
    if (tl == 0) {
      nll[b] = -last[0];
    } else {
      T l1 = last[tl * 2], l2 = last[tl * 2 - 1];
      T m = l1 > l2 ? l1 : l2;
      if (m == ninf) m = 0;
      nll[b] = -(ctc_log(ctc_exp(l1 - m) + ctc_exp(l2 - m)) + m);
    }
  }
}

/* the gradient of log_probs, gl [T, N, C] contiguous; beta [N, T, L] scratch */
template <typename T>
__global__ void k_ctc_bwd(dpl_cu_ctc_geom g, const T *lp, const int64_t *meta, const T *grad, const T *nll_in,
                          const T *alpha, T *beta, T *gl)
{
  const T ninf = -INFINITY;
  const int64_t b = blockIdx.x, L = 2 * g.S + 1, C = g.C, N = g.N;
  const int64_t il = meta[b], tl = meta[N + b];
  const T nll = nll_in[b], gr = grad[b * g.gstride];
  const bool zero = g.zero_infinity && nll == (T)INFINITY;
  for (int64_t i = threadIdx.x; i < g.T * C; i += blockDim.x) {
    int64_t t = i / C, c = i - t * C;
    gl[(t * N + b) * C + c] = t < il && !zero ? ninf : (T)0;
  }
  if (zero || il == 0) return;
  const T *la = alpha + b * g.T * L;
  T *lb = beta + b * g.T * L;
  const T *lpb = lp + b * g.sn;
  for (int64_t i = threadIdx.x; i < g.T * L; i += blockDim.x) lb[i] = ninf;
  __syncthreads();
  if (threadIdx.x == 0) {
    T *glast = gl + ((il - 1) * N + b) * C;
    const T *lplast = lpb + (il - 1) * g.st;
    lb[(il - 1) * L + 2 * tl] = lplast[g.blank * g.sc];
    glast[g.blank] = la[(il - 1) * L + 2 * tl] + lb[(il - 1) * L + 2 * tl];
    if (tl > 0) {
      int64_t ctp = tprime(g, meta, b, 2 * tl - 1);
      lb[(il - 1) * L + 2 * tl - 1] = lplast[ctp * g.sc];
      glast[ctp] = la[(il - 1) * L + 2 * tl - 1] + lb[(il - 1) * L + 2 * tl - 1];
    }
  }
  __syncthreads();
  for (int64_t t = il - 2; t >= 0; t--) {
    const T *nxt = lb + (t + 1) * L;
    T *cur = lb + t * L;
    const T *lat = la + t * L;
    const T *lpt = lpb + t * g.st;
    T *gt = gl + (t * N + b) * C;
    for (int64_t s = threadIdx.x; s <= 2 * tl; s += blockDim.x) {
      int64_t ctp = tprime(g, meta, b, s);
      T lb1 = nxt[s], lbmax = lb1, lb2, lb3;
      if (s < 2 * tl) {
        lb2 = nxt[s + 1];
        if (lb2 > lbmax) lbmax = lb2;
      } else {
        lb2 = ninf;
      }
      if (s < 2 * tl - 1 && tprime(g, meta, b, s + 2) != ctp) {
        lb3 = nxt[s + 2];
        if (lb3 > lbmax) lbmax = lb3;
      } else {
        lb3 = ninf;
      }
      if (lbmax == ninf) lbmax = 0;
      cur[s] = ctc_log(ctc_exp(lb1 - lbmax) + ctc_exp(lb2 - lbmax) + ctc_exp(lb3 - lbmax)) + lbmax + lpt[ctp * g.sc];
    }
    __syncthreads();
    /* gt[c] log-sums alpha * beta over the positions of class c, from the last position down:
     * the blank's (the even s) by the thread of s = 0, a label's by the thread of its last
     * occurrence */
    for (int64_t s = threadIdx.x; s <= 2 * tl; s += blockDim.x) {
      if (s == 0) {
        for (int64_t j = 2 * tl; j >= 0; j -= 2) logadd(&gt[g.blank], lat[j] + cur[j]);
      } else if (s & 1) {
        int64_t c = tprime(g, meta, b, s);
        bool last = true;
        for (int64_t j = s + 2; j < 2 * tl && last; j += 2)
          if (tprime(g, meta, b, j) == c) last = false;
        if (last)
          for (int64_t j = s; j >= 1; j -= 2)
            if (tprime(g, meta, b, j) == c) logadd(&gt[c], lat[j] + cur[j]);
      }
    }
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < il * C; i += blockDim.x) {
    int64_t t = i / C, c = i - t * C;
    T *p = gl + (t * N + b) * C + c;
    T l = lpb[t * g.st + c * g.sc];
    *p = (ctc_exp(l) - ctc_exp(*p + nll - l)) * gr;
  }
}

} // namespace

extern "C" int dpl_cu_ctc(int32_t kd, const dpl_cu_ctc_geom *g, const void *lp, const int64_t *meta, void *nll, void *alpha,
                          cudaStream_t s)
{
  if (g->N <= 0) return 0;
  if (kd == F64) k_ctc_fwd<double><<<(unsigned)g->N, kCtcThreads, 0, s>>>(*g, (const double *)lp, meta, (double *)nll, (double *)alpha);
  else k_ctc_fwd<float><<<(unsigned)g->N, kCtcThreads, 0, s>>>(*g, (const float *)lp, meta, (float *)nll, (float *)alpha);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_ctc_bwd(int32_t kd, const dpl_cu_ctc_geom *g, const void *lp, const int64_t *meta, const void *grad,
                              const void *nll, const void *alpha, void *beta, void *glp, cudaStream_t s)
{
  if (g->N <= 0) return 0;
  if (kd == F64)
    k_ctc_bwd<double><<<(unsigned)g->N, kCtcThreads, 0, s>>>(*g, (const double *)lp, meta, (const double *)grad,
                                                           (const double *)nll, (const double *)alpha, (double *)beta,
                                                           (double *)glp);
  else
    k_ctc_bwd<float><<<(unsigned)g->N, kCtcThreads, 0, s>>>(*g, (const float *)lp, meta, (const float *)grad,
                                                          (const float *)nll, (const float *)alpha, (float *)beta,
                                                          (float *)glp);
  return (int)cudaGetLastError();
}
