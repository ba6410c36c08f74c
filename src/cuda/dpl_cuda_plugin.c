/* dpl_cuda_plugin.c: the entry point of dpl_cuda.so (dpl_cuda_plugin_init,
 * called by the core's loader), the backend vtable it registers with the
 * tensor core, per-device state created on first use (a compute stream, a
 * copy stream, events, pinned staging buffers, a cuBLAS handle), CUDA/cuBLAS
 * error messages, kernel geometry, synchronize (which reports failed index
 * checks, dpl_cuda_check.c) and the pick_single_gpu probe.
 * Loading creates no CUDA context: the first allocation on a device does. */
#include "dpl_cuda_internal.h"
#include "../device/dpl_device_internal.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static dpl_cu_dev devs[DPL_CU_MAX_DEV];
static _Atomic int dev_ready[DPL_CU_MAX_DEV];
/* set at the first CUDA runtime call that initialises CUDA in this process (a device's
 * state, a probe): a forked child could not use CUDA after it (dpl_cuda_initialized) */
static _Atomic int cuda_touched;
static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;

int dpl_cu_fail(cudaError_t e, const char *call, int32_t dev)
{
  int st = e == cudaErrorMemoryAllocation ? DPL_ENOMEM : DPL_EDEVICE;
  cudaGetLastError(); /* clear a sticky launch error where possible */
  return dpl_errorf(st, "%s on cuda:%d: %s (%s)", call, (int)dev, cudaGetErrorString(e), cudaGetErrorName(e));
}

int dpl_cu_blas_fail(cublasStatus_t e, const char *call, int32_t dev)
{
  int st = e == CUBLAS_STATUS_ALLOC_FAILED ? DPL_ENOMEM : e == CUBLAS_STATUS_NOT_SUPPORTED ? DPL_ENOTIMPL : DPL_EDEVICE;
  return dpl_errorf(st, "%s on cuda:%d: %s (%s)", call, (int)dev, cublasGetStatusString(e), cublasGetStatusName(e));
}

static int create_state(int32_t dev, dpl_cu_dev *d)
{
  DPL_CU(cudaStreamCreateWithFlags(&d->compute, cudaStreamNonBlocking), dev);
  DPL_CU(cudaStreamCreateWithFlags(&d->copy, cudaStreamNonBlocking), dev);
  DPL_CU(cudaEventCreateWithFlags(&d->compute_done, cudaEventDisableTiming), dev);
  DPL_CU(cudaEventCreateWithFlags(&d->copy_done, cudaEventDisableTiming), dev);
  DPL_CU(cudaEventCreateWithFlags(&d->stage_free[0], cudaEventDisableTiming), dev);
  DPL_CU(cudaEventCreateWithFlags(&d->stage_free[1], cudaEventDisableTiming), dev);
  pthread_mutex_init(&d->mu, NULL);
  dpl_cu_check_init(d);
  return DPL_OK;
}

dpl_cu_dev *dpl_cu_device(int32_t dev, const char *op)
{
  if (dev < 0 || dev >= DPL_CU_MAX_DEV) {
    dpl_errorf(DPL_EDEVICE, "%s: no device cuda:%d", op, (int)dev);
    return NULL;
  }
  atomic_store_explicit(&cuda_touched, 1, memory_order_relaxed);
  cudaError_t e = cudaSetDevice(dev);
  if (e != cudaSuccess) {
    dpl_cu_fail(e, "cudaSetDevice", dev);
    return NULL;
  }
  dpl_cu_dev *d = &devs[dev];
  if (atomic_load_explicit(&dev_ready[dev], memory_order_acquire)) return d;
  pthread_mutex_lock(&init_mu);
  int st = DPL_OK;
  if (!atomic_load(&dev_ready[dev])) {
    st = create_state(dev, d);
    if (st == DPL_OK) atomic_store_explicit(&dev_ready[dev], 1, memory_order_release);
  }
  pthread_mutex_unlock(&init_mu);
  return st == DPL_OK ? d : NULL;
}

dpl_cu_dev *dpl_cu_device_ready(int32_t dev)
{
  if (dev < 0 || dev >= DPL_CU_MAX_DEV || !atomic_load_explicit(&dev_ready[dev], memory_order_acquire)) return NULL;
  return &devs[dev];
}

/* ---- flags ---- */
#define FLAG_BYTES 16 /* {smallest bad position, its index} (dpl_cuda_check.c) */
int dpl_cu_new(const char *name, int32_t dtype, int32_t ndim, const int64_t *shape, const dpl_tensor *like,
               dpl_tensor **out)
{
  return dpl_new_on(name, dtype, ndim, shape, DPL_DEVICE_CUDA, like->_devindex, out);
}

int dpl_cu_flag_new(int32_t dev, cudaStream_t s, void **flag)
{
  DPL_TRY(dpl_cu_scratch(dev, FLAG_BYTES, flag));
  cudaError_t e = cudaMemsetAsync(*flag, 0xff, FLAG_BYTES, s);
  if (e != cudaSuccess) {
    dpl_cu_scratch_free(dev, *flag, FLAG_BYTES);
    *flag = NULL;
    return dpl_cu_fail(e, "cudaMemsetAsync", dev);
  }
  return DPL_OK;
}

void dpl_cu_flag_free(int32_t dev, void *flag)
{
  if (flag) dpl_cu_scratch_free(dev, flag, FLAG_BYTES);
}

/* ---- geometry ---- */
void dpl_cu_geom_init(dpl_cu_geom *g, int n, const dpl_tensor *const *ops, int32_t ndim, const int64_t *shape)
{
  memset(g, 0, sizeof *g);
  g->nops = n;
  int64_t st[DPL_CU_MAXOP][DPL_MAX_DIMS];
  for (int k = 0; k < n; k++) {
    if (!ops[k] || dpl_broadcast_strides(ops[k], ndim, shape, st[k]) != 0)
      for (int i = 0; i < ndim; i++) st[k][i] = 0; /* a host scalar: never indexed */
  }
  g->numel = dpl_shape_numel(ndim, shape);
  int m = 0;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == 1) continue;
    if (m > 0) {
      int can = 1;
      for (int k = 0; k < n; k++)
        if (g->stride[k][m - 1] != st[k][i] * shape[i]) can = 0;
      if (can) {
        g->shape[m - 1] *= shape[i];
        for (int k = 0; k < n; k++) g->stride[k][m - 1] = st[k][i];
        continue;
      }
    }
    g->shape[m] = shape[i];
    for (int k = 0; k < n; k++) g->stride[k][m] = st[k][i];
    m++;
  }
  g->ndim = m;
}

/* ---- the backend table ---- */
static int supports(int32_t op)
{
  switch (op) {
  case DPL_BK_COPY: case DPL_BK_FILL: case DPL_BK_RNG: case DPL_BK_GEMM: case DPL_BK_BINARY: case DPL_BK_AXPY:
  case DPL_BK_UNARY: case DPL_BK_ACT_BWD: case DPL_BK_CLAMP: case DPL_BK_WHERE: case DPL_BK_MASKED_FILL:
  case DPL_BK_REDUCE: case DPL_BK_REDUCE_INDEX: case DPL_BK_SOFTMAX: case DPL_BK_SOFTMAX_BWD:
  case DPL_BK_CROSS_ENTROPY: case DPL_BK_CROSS_ENTROPY_BWD: case DPL_BK_NLL: case DPL_BK_NLL_BWD: case DPL_BK_MSE:
  case DPL_BK_MSE_BWD: case DPL_BK_EMBEDDING: case DPL_BK_EMBEDDING_BWD: case DPL_BK_CONV2D: case DPL_BK_CONV2D_BWD:
  case DPL_BK_MAX_POOL2D: case DPL_BK_MAX_POOL2D_BWD: case DPL_BK_AVG_POOL2D: case DPL_BK_AVG_POOL2D_BWD:
  case DPL_BK_INDEX_SELECT: case DPL_BK_INDEX_ADD: case DPL_BK_GATHER: case DPL_BK_SCATTER_ADD:
  case DPL_BK_OPTIM_MULTI: case DPL_BK_LAYER_NORM: case DPL_BK_LAYER_NORM_BWD: case DPL_BK_SCAN:
  case DPL_BK_CUMPROD_BWD: case DPL_BK_SORT: case DPL_BK_SELECT: case DPL_BK_HISTC: case DPL_BK_IM2COL:
  case DPL_BK_COL2IM: case DPL_BK_ADAPTIVE_MAX_POOL2D: case DPL_BK_MAX_POOL1D: case DPL_BK_SPECIAL: case DPL_BK_CTC:
  case DPL_BK_CTC_BWD: case DPL_BK_ADAPTIVE_AVG_POOL2D: case DPL_BK_ADAPTIVE_AVG_POOL2D_BWD: case DPL_BK_LINALG:
  case DPL_BK_INDEX_STORE: case DPL_BK_NONZERO: case DPL_BK_SEARCHSORTED: case DPL_BK_SCATTER_REDUCE:
    return 1;
  default:
    return 0;
  }
}

static int run(const dpl_bk_args *a)
{
  switch (a->op) {
  case DPL_BK_COPY: return dpl_cu_op_copy(a);
  case DPL_BK_FILL: return dpl_cu_op_fill(a);
  case DPL_BK_RNG: return dpl_cu_op_rng(a);
  case DPL_BK_GEMM: return dpl_cu_op_gemm(a);
  case DPL_BK_BINARY: case DPL_BK_AXPY: case DPL_BK_UNARY: case DPL_BK_ACT_BWD: case DPL_BK_CLAMP: case DPL_BK_WHERE:
  case DPL_BK_MASKED_FILL:
    return dpl_cu_op_elementwise(a);
  case DPL_BK_REDUCE: case DPL_BK_REDUCE_INDEX: return dpl_cu_op_reduce(a);
  case DPL_BK_SOFTMAX: case DPL_BK_SOFTMAX_BWD: return dpl_cu_op_softmax(a);
  case DPL_BK_CROSS_ENTROPY: case DPL_BK_CROSS_ENTROPY_BWD: case DPL_BK_NLL: case DPL_BK_NLL_BWD: case DPL_BK_MSE:
  case DPL_BK_MSE_BWD:
    return dpl_cu_op_loss(a);
  case DPL_BK_EMBEDDING: case DPL_BK_EMBEDDING_BWD: return dpl_cu_op_embedding(a);
  case DPL_BK_CONV2D: case DPL_BK_CONV2D_BWD: case DPL_BK_MAX_POOL2D: case DPL_BK_MAX_POOL2D_BWD: case DPL_BK_AVG_POOL2D:
  case DPL_BK_AVG_POOL2D_BWD:
    return dpl_cu_op_conv(a);
  case DPL_BK_INDEX_SELECT: case DPL_BK_INDEX_ADD: case DPL_BK_GATHER: case DPL_BK_SCATTER_ADD:
  case DPL_BK_INDEX_STORE:
    return dpl_cu_op_index(a);
  case DPL_BK_OPTIM_MULTI: return dpl_cu_op_optim(a);
  case DPL_BK_LAYER_NORM: case DPL_BK_LAYER_NORM_BWD: return dpl_cu_op_layer_norm(a);
  case DPL_BK_SCAN: case DPL_BK_CUMPROD_BWD: return dpl_cu_op_scan(a);
  case DPL_BK_SORT: return dpl_cu_op_sort(a);
  case DPL_BK_SELECT: return dpl_cu_op_select(a);
  case DPL_BK_HISTC: case DPL_BK_IM2COL: case DPL_BK_COL2IM: case DPL_BK_ADAPTIVE_MAX_POOL2D: case DPL_BK_MAX_POOL1D:
  case DPL_BK_ADAPTIVE_AVG_POOL2D: case DPL_BK_ADAPTIVE_AVG_POOL2D_BWD:
    return dpl_cu_op_window(a);
  case DPL_BK_SPECIAL: return dpl_cu_op_special(a);
  case DPL_BK_CTC: case DPL_BK_CTC_BWD: return dpl_cu_op_ctc(a);
  case DPL_BK_LINALG: return dpl_cu_op_linalg(a);
  case DPL_BK_NONZERO: case DPL_BK_SEARCHSORTED: case DPL_BK_SCATTER_REDUCE: return dpl_cu_op_compact(a);
  default: return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda", a->name ? a->name : dpl_bk_op_name(a->op));
  }
}

static int sync_one(int32_t dev)
{
  dpl_cu_dev *d = dpl_cu_device(dev, "cuda.synchronize");
  if (!d) return DPL_EDEVICE; /* the message names the failing call */
  DPL_CU(cudaStreamSynchronize(d->compute), dev);
  DPL_CU(cudaStreamSynchronize(d->copy), dev);
  return dpl_cu_check_report(dev); /* an index check that failed since the last report */
}

static int synchronize(int32_t dev)
{
  if (dev >= 0) return sync_one(dev);
  for (int i = 0; i < DPL_CU_MAX_DEV; i++)
    if (atomic_load(&dev_ready[i])) DPL_TRY(sync_one(i));
  return DPL_OK;
}

/* cudaFree waits for the device: failed index checks are reported here too */
static int empty_cache(int32_t dev, int64_t *freed)
{
  DPL_TRY(dpl_cu_empty_cache(dev, freed));
  if (dev >= 0) return dpl_cu_check_report(dev);
  for (int i = 0; i < DPL_CU_MAX_DEV; i++)
    if (atomic_load(&dev_ready[i])) DPL_TRY(dpl_cu_check_report(i));
  return DPL_OK;
}

static const dpl_backend cuda_backend = {
  .abi = DPL_BACKEND_ABI,
  .name = "cuda",
  .alloc = dpl_cu_alloc,
  .release = dpl_cu_release,
  .supports = supports,
  .run = run,
  .synchronize = synchronize,
  .empty_cache = empty_cache,
  .memory_stats = dpl_cu_memory_stats,
};

/* pick_single_gpu's probe: a real cudaMalloc/cudaFree, which creates the context */
static int probe_alloc(int32_t index, uint64_t bytes)
{
  atomic_store_explicit(&cuda_touched, 1, memory_order_relaxed);
  cudaError_t e = cudaSetDevice(index);
  void *p = NULL;
  if (e == cudaSuccess) e = cudaMalloc(&p, bytes);
  if (e == cudaSuccess) e = cudaFree(p);
  if (e == cudaSuccess) return DPL_OK;
  cudaGetLastError();
  if (e == cudaErrorMemoryAllocation)
    return dpl_errorf(DPL_ENOMEM, "cudaMalloc(%llu bytes) on cuda:%d: out of memory (transient)",
                      (unsigned long long)bytes, (int)index);
  return dpl_errorf(DPL_EDEVICE, "cuda:%d is busy or unavailable: %s (%s)", (int)index, cudaGetErrorString(e),
                    cudaGetErrorName(e));
}

/* (optional symbol, found by dlsym: dpl_cuda_initialized in the core) */
__attribute__((visibility("default"))) int dpl_cuda_plugin_touched(void)
{
  return atomic_load_explicit(&cuda_touched, memory_order_relaxed);
}

__attribute__((visibility("default"))) int dpl_cuda_plugin_init(int32_t abi, char *err, size_t errlen)
{
  if (abi != DPL_BACKEND_ABI) {
    snprintf(err, errlen, "backend ABI %d expected by dplhost, the plugin has %d (rebuild both)", (int)abi,
             (int)DPL_BACKEND_ABI);
    return -1;
  }
  dpl_backend_register(&cuda_backend);
  dpl_device_set_cuda_probe_alloc(probe_alloc);
  return 0;
}
