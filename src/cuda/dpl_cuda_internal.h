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
#define DPL_CU_CHECKS 64 /* index checks a device keeps pending (dpl_cuda_check.c) */

/* what an index check's error message needs (the CPU's wording) */
enum { DPL_CU_CHK_TARGET, DPL_CU_CHK_INDEX, DPL_CU_CHK_POOL };
typedef struct dpl_cu_check {
  int32_t kind;  /* DPL_CU_CHK_* */
  int32_t dim;   /* INDEX: the indexed dim */
  int64_t limit; /* TARGET: classes; INDEX: the dim's size; POOL: the plane's elements */
  char name[48]; /* the op */
} dpl_cu_check;

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
  void *solver;           /* cusolverDnHandle_t, created at the first dpl.linalg call (dpl_cuda_linalg.c) */
  /* pending index checks (dpl_cuda_check.c), a ring under chk_mu: check i's
   * flag {position, value} is copied into chk_host[2i..2i+1] (pinned) on the
   * compute stream, then chk_ev[i] is recorded; the host reads the slot after
   * the event. The first failure found waits in chk_msg until reported. */
  pthread_mutex_t chk_mu;
  int chk_sync;                   /* DPL_CUDA_SYNC_CHECKS=1 / CUDA_LAUNCH_BLOCKING=1: wait at the op */
  int chk_head, chk_n;            /* oldest pending check, count */
  unsigned long long *chk_host;   /* DPL_CU_CHECKS x {position, value}, pinned; NULL until the first check */
  cudaEvent_t chk_ev[DPL_CU_CHECKS];
  dpl_cu_check chk[DPL_CU_CHECKS];
  int chk_status;                 /* != DPL_OK: a failure found, not yet reported */
  long long chk_more;             /* further failures found before it was reported */
  char chk_msg[400];
} dpl_cu_dev;

/* a new contiguous tensor on like's GPU */
int dpl_cu_new(const char *name, int32_t dtype, int32_t ndim, const int64_t *shape, const dpl_tensor *like,
               dpl_tensor **out);
/* The device's state, created on first use (cudaSetDevice done). NULL + error set on failure. */
dpl_cu_dev *dpl_cu_device(int32_t dev, const char *op);
/* The device's state if it was created, else NULL (no CUDA call, no error). */
dpl_cu_dev *dpl_cu_device_ready(int32_t dev);
/* CUDA error -> status with "<call> on cuda:<dev>: <text> (<name>)". */
int dpl_cu_fail(cudaError_t e, const char *call, int32_t dev);
int dpl_cu_blas_fail(cublasStatus_t e, const char *call, int32_t dev);
#define DPL_CU(call, dev) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return dpl_cu_fail(e_, #call, (dev)); } while (0)
/* a kernel launcher's result */
#define DPL_CU_LAUNCH(call, name, dev) \
  do { int e_ = (call); if (e_ != 0) return dpl_cu_fail((cudaError_t)e_, name, (dev)); } while (0)

/* the device's cuBLAS handle on its compute stream, created at first use (dpl_cuda_ops.c) */
int dpl_cu_blas_handle(dpl_cu_dev *d, int32_t dev, cublasHandle_t *h);

/* ---- allocator (dpl_cuda_alloc.c) ---- */
int dpl_cu_alloc(int32_t dev, int64_t nbytes, void **ptr);
void dpl_cu_release(int32_t dev, void *ptr, int64_t nbytes);
int dpl_cu_empty_cache(int32_t dev, int64_t *freed);
int dpl_cu_memory_stats(int32_t dev, dpl_cuda_mem_stats *out);
/* A device scratch buffer: a tensor-less allocation released by dpl_cu_scratch_free. */
int dpl_cu_scratch(int32_t dev, int64_t nbytes, void **ptr);
void dpl_cu_scratch_free(int32_t dev, void *ptr, int64_t nbytes);

/* A device flag for kernels that find bad indices: 16 bytes set to all ones
 * (dpl_cu_flag_new); the kernels put the smallest offending position in the
 * first 8 (all ones: nothing found). Freed (stream-ordered) after
 * dpl_cu_check_submit. */
int dpl_cu_flag_new(int32_t dev, cudaStream_t s, void **flag);
void dpl_cu_flag_free(int32_t dev, void *flag);

/* ---- index checks (dpl_cuda_check.c) ----
 * dpl_cu_check_submit queues the check of a flag the kernels just set on d's
 * compute stream (ix: the contiguous int64 device indices they read, for
 * the offending value; kind, limit, dim: as in dpl_cu_check) and returns without waiting for the GPU; a failure is
 * raised by the next dpl_cu_check_report of the device, which every call that
 * waits for the GPU makes (device -> host copies, synchronize, empty_cache).
 * With d->chk_sync it waits and returns the op's error at once. */
int dpl_cu_check_submit(int32_t dev, dpl_cu_dev *d, void *flag, const dpl_tensor *ix, const char *name, int32_t kind,
                        int64_t limit, int32_t dim);
/* The first failure of the device's checks queued so far (waiting for them), as
 * its op's error with a note that it is reported late; DPL_OK when none. */
int dpl_cu_check_report(int32_t dev);
void dpl_cu_check_init(dpl_cu_dev *d); /* at the device state's creation */

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
int dpl_cu_op_optim(const dpl_bk_args *a);       /* OPTIM_MULTI (dpl_cuda_optim.c) */
int dpl_cu_op_layer_norm(const dpl_bk_args *a);  /* LAYER_NORM(_BWD) (dpl_cuda_norm.c) */
int dpl_cu_op_scan(const dpl_bk_args *a);        /* SCAN, CUMPROD_BWD (dpl_cuda_scan.c) */
int dpl_cu_op_sort(const dpl_bk_args *a);        /* SORT (dpl_cuda_scan.c) */
int dpl_cu_op_select(const dpl_bk_args *a);      /* SELECT (dpl_cuda_scan.c) */
int dpl_cu_op_window(const dpl_bk_args *a);      /* HISTC, IM2COL, COL2IM, ADAPTIVE_MAX_POOL2D, MAX_POOL1D,
                                                    ADAPTIVE_AVG_POOL2D(_BWD) (dpl_cuda_window.c) */
int dpl_cu_op_special(const dpl_bk_args *a);     /* SPECIAL (dpl_cuda_special.c) */
int dpl_cu_op_ctc(const dpl_bk_args *a);         /* CTC, CTC_BWD (dpl_cuda_ctc.c) */
int dpl_cu_op_linalg(const dpl_bk_args *a);      /* LINALG: cuSOLVER (dlopen) and cuBLAS trsm (dpl_cuda_linalg.c) */
int dpl_cu_op_compact(const dpl_bk_args *a);     /* NONZERO, SEARCHSORTED, SCATTER_REDUCE (dpl_cuda_compact.c) */
#endif
