/* dpl_cuda_internal.h: what the CUDA plugin's host-side files share: per-device
 * state (streams, cuBLAS handle, pinned staging buffers, events), error
 * conversion of CUDA/cuBLAS status codes into dpl_errorf messages naming the
 * call and the device, the caching allocator, geometry building for the
 * kernels, and the op entry points dispatched from dpl_cuda_plugin.c. */
#ifndef DPL_CUDA_INTERNAL_H
#define DPL_CUDA_INTERNAL_H
#include "../tensor/dpl_tensor_internal.h"
#include "dpl_cuda_kernels.h"
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <pthread.h>

#define DPL_CU_MAX_DEV 64
#define DPL_CU_STAGE_BYTES ((size_t)32 << 20) /* each of the two pinned staging buffers */

typedef struct dpl_cu_dev {
  int ready;
  pthread_mutex_t mu;     /* staging buffers and handle creation */
  cudaStream_t compute;   /* every kernel and cuBLAS call */
  cudaStream_t copy;      /* host <-> device transfers */
  cudaEvent_t compute_done, copy_done, stage_free[2];
  void *stage[2];         /* pinned host memory */
  int up_k;               /* uploads fill stage[up_k] from up_off on (a ring over the two), */
  size_t up_off;          /* so that small ones never wait for the previous one */
  cublasHandle_t blas;
} dpl_cu_dev;

/* The device's state, created on first use (cudaSetDevice done). NULL + error set on failure. */
dpl_cu_dev *dpl_cu_device(int32_t dev, const char *op);
/* CUDA error -> status with "<call> on cuda:<dev>: <text> (<name>)". */
int dpl_cu_fail(cudaError_t e, const char *call, int32_t dev);
int dpl_cu_blas_fail(cublasStatus_t e, const char *call, int32_t dev);
#define DPL_CU(call, dev) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return dpl_cu_fail(e_, #call, (dev)); } while (0)
/* a kernel launcher's result */
#define DPL_CU_LAUNCH(call, name, dev) \
  do { int e_ = (call); if (e_ != 0) return dpl_cu_fail((cudaError_t)e_, name, (dev)); } while (0)

/* ---- allocator (dpl_cuda_alloc.c) ---- */
int dpl_cu_alloc(int32_t dev, int64_t nbytes, void **ptr);
void dpl_cu_release(int32_t dev, void *ptr, int64_t nbytes);
int dpl_cu_empty_cache(int32_t dev, int64_t *freed);
int dpl_cu_memory_stats(int32_t dev, dpl_cuda_mem_stats *out);
/* A device scratch buffer: a tensor-less allocation released by dpl_cu_scratch_free. */
int dpl_cu_scratch(int32_t dev, int64_t nbytes, void **ptr);
void dpl_cu_scratch_free(int32_t dev, void *ptr, int64_t nbytes);

/* A device flag for kernels that find bad indices: 8 bytes set to all ones
 * (dpl_cu_flag_new); dpl_cu_flag_read waits for the stream and returns the
 * flag (~0ULL: nothing found, else the smallest offending position). */
int dpl_cu_flag_new(int32_t dev, cudaStream_t s, void **flag);
int dpl_cu_flag_read(int32_t dev, cudaStream_t s, const void *flag, unsigned long long *out);
void dpl_cu_flag_free(int32_t dev, void *flag);

/* ---- geometry ---- */
/* ops[0..n) viewed at (ndim, shape) with broadcasting (the caller checked the
 * shapes), dims coalesced. ops[0] is the output. */
void dpl_cu_geom_init(dpl_cu_geom *g, int n, const dpl_tensor *const *ops, int32_t ndim, const int64_t *shape);
/* data pointer of a device tensor */
static inline void *dpl_cu_ptr(const dpl_tensor *t) { return t->_data; }

/* ---- ops ---- */
int dpl_cu_op_copy(const dpl_bk_args *a);
int dpl_cu_op_fill(const dpl_bk_args *a);
int dpl_cu_op_rng(const dpl_bk_args *a);
int dpl_cu_op_gemm(const dpl_bk_args *a);
int dpl_cu_op_elementwise(const dpl_bk_args *a); /* BINARY, UNARY, ACT_BWD, CLAMP, WHERE, MASKED_FILL, AXPY */
int dpl_cu_op_reduce(const dpl_bk_args *a);      /* REDUCE, REDUCE_INDEX */
int dpl_cu_op_softmax(const dpl_bk_args *a);     /* SOFTMAX, SOFTMAX_BWD */
int dpl_cu_op_loss(const dpl_bk_args *a);        /* CROSS_ENTROPY(_BWD), NLL(_BWD), MSE(_BWD) */
int dpl_cu_op_embedding(const dpl_bk_args *a);   /* EMBEDDING(_BWD) */
int dpl_cu_op_conv(const dpl_bk_args *a);        /* CONV2D(_BWD), MAX_POOL2D(_BWD), AVG_POOL2D(_BWD) */
int dpl_cu_op_index(const dpl_bk_args *a);       /* INDEX_SELECT, INDEX_ADD, GATHER, SCATTER_ADD */
#endif
