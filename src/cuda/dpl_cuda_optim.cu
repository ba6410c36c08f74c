/* dpl_cuda_optim.cu: the multi-tensor optimizer kernel (SGD with momentum,
 * dampening, nesterov, weight decay, maximize; Adam/AdamW with amsgrad): one
 * launch walks a table of up to DPL_CU_OPT_TENSORS tensors in chunks of
 * DPL_CU_OPT_CHUNK elements, a block per chunk. Each element is computed with
 * the operations of the CPU loop in dpl_tensor_optim.c in the same order and
 * dtype; multiplications and additions are explicitly rounded (__fmul_rn &
 * co.) so that nvcc does not contract them into FMAs, and division and sqrt
 * are IEEE-rounded, so results match the CPU bit for bit. */
#include "dpl_cuda_common.cuh"
#include <math.h>

using namespace dplcu;

/* both tables travel as kernel parameters: CUDA's classic limit is 4 KiB */
static_assert(sizeof(dpl_cu_optim_hp) + sizeof(dpl_cu_optim_tab) <= 4000, "optimizer launch table too large");

namespace {

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return sqrtf(a); }
__device__ __forceinline__ double sqrt_rn(double a) { return sqrt(a); }

template <typename T>
__global__ void k_sgd_multi(dpl_cu_optim_hp hp, dpl_cu_optim_tab tab)
{
  const int t = tab.blk_tensor[blockIdx.x];
  const int64_t start = (int64_t)tab.blk_chunk[blockIdx.x] * DPL_CU_OPT_CHUNK;
  const int64_t end = start + DPL_CU_OPT_CHUNK < tab.numel[t] ? start + DPL_CU_OPT_CHUNK : tab.numel[t];
  T *P = (T *)tab.p[t], *B = (T *)tab.s0[t];
  const T *G = (const T *)tab.g[t];
  const T neg_lr = (T)hp.neg_lr, m = (T)hp.momentum, d1 = (T)hp.damp1, wd = (T)hp.weight_decay;
  const bool init = tab.a[t] != 0;
  for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
    T x = G[i];
    if (hp.maximize) x = -x;
    if (hp.has_wd) x = add_rn(x, mul_rn(P[i], wd));
    if (hp.has_buf) {
      T b = init ? x : add_rn(mul_rn(B[i], m), mul_rn(d1, x));
      B[i] = b;
      x = hp.nesterov ? add_rn(x, mul_rn(b, m)) : b;
    }
    P[i] = add_rn(P[i], mul_rn(neg_lr, x));
  }
}

template <typename T>
__global__ void k_adam_multi(dpl_cu_optim_hp hp, dpl_cu_optim_tab tab)
{
  const int t = tab.blk_tensor[blockIdx.x];
  const int64_t start = (int64_t)tab.blk_chunk[blockIdx.x] * DPL_CU_OPT_CHUNK;
  const int64_t end = start + DPL_CU_OPT_CHUNK < tab.numel[t] ? start + DPL_CU_OPT_CHUNK : tab.numel[t];
  T *P = (T *)tab.p[t], *M = (T *)tab.s0[t], *V = (T *)tab.s1[t], *X = (T *)tab.s2[t];
  const T *G = (const T *)tab.g[t];
  const T b1 = (T)hp.beta1, omb1 = (T)hp.omb1, b2 = (T)hp.beta2, omb2 = (T)hp.omb2;
  const T eps = (T)hp.eps, wd = (T)hp.weight_decay, decay = (T)hp.decay;
  const T ss = (T)tab.a[t], bc2s = (T)tab.b[t];
  for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
    T x = G[i], pv = P[i];
    if (hp.maximize) x = -x;
    if (hp.has_wd) {
      if (hp.decoupled) pv = mul_rn(pv, decay);
      else x = add_rn(x, mul_rn(pv, wd));
    }
    T m = add_rn(mul_rn(M[i], b1), mul_rn(omb1, x));
    T v = add_rn(mul_rn(V[i], b2), mul_rn(omb2, mul_rn(x, x)));
    M[i] = m;
    V[i] = v;
    T vv = v;
    if (hp.amsgrad) {
      T mx = X[i];
      vv = (mx != mx || mx > v) ? mx : v;
      X[i] = vv;
    }
    T den = add_rn(sqrt_rn(vv) / bc2s, eps);
    P[i] = add_rn(pv, mul_rn(ss, m / den));
  }
}

} // namespace

extern "C" int dpl_cu_optim(const dpl_cu_optim_hp *hp, const dpl_cu_optim_tab *tab, cudaStream_t s)
{
  if (tab->nblocks == 0) return 0;
  const unsigned grid = (unsigned)tab->nblocks;
  if (hp->kind == 0) {
    if (hp->dt == F32) k_sgd_multi<float><<<grid, kThreads, 0, s>>>(*hp, *tab);
    else k_sgd_multi<double><<<grid, kThreads, 0, s>>>(*hp, *tab);
  } else {
    if (hp->dt == F32) k_adam_multi<float><<<grid, kThreads, 0, s>>>(*hp, *tab);
    else k_adam_multi<double><<<grid, kThreads, 0, s>>>(*hp, *tab);
  }
  return (int)cudaGetLastError();
}
