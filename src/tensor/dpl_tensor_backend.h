/* dpl_tensor_backend.h: the interface between the tensor core and a device
 * backend plugin (the CUDA plugin, src/cuda/), in the style of ggml's backends:
 * a small vtable the plugin registers when it loads, and a stable enum of the
 * ops it may run. A tensor whose storage lives in device memory carries
 * DPL_DEVMEM in its flags; the core never dereferences its data: every public
 * op either hands it to the backend (dpl_bk_call) or fails with
 * "<op>: not implemented on cuda". C only (the plugin's host side includes it;
 * its .cu files do not). Bump DPL_BACKEND_ABI on any change below. */
#ifndef DPL_TENSOR_BACKEND_H
#define DPL_TENSOR_BACKEND_H
#include "dpl.h"
#include <stdint.h>

enum { DPL_BACKEND_ABI = 10 }; /* 3: in[5] (layer norm's backward reads five tensors); 4: SCAN, CUMPROD_BWD; 5: SORT;
                                 6: SELECT, HISTC, IM2COL, COL2IM, ADAPTIVE_MAX_POOL2D, MAX_POOL1D;
                                 7: SPECIAL, CTC, CTC_BWD, ADAPTIVE_AVG_POOL2D, ADAPTIVE_AVG_POOL2D_BWD;
                                 8: LINALG (dpl_bk_linalg, dpl_bk_args.linalg); 9: INDEX_STORE;
                                 10: NONZERO's subs, SEARCHSORTED, SCATTER_REDUCE, SCAN's LOGSUMEXP,
                                 CUMPROD_BWD's sub 1, BINARY's GCD/LCM/shifts */

/* Stable op ids (never renumbered; new ops go at the end). The comment says
 * which fields of dpl_bk_args each one reads. */
typedef enum dpl_bk_op {
  DPL_BK_COPY = 0,          /* inout = dst, in[0] = src: broadcast + convert, any device pair */
  DPL_BK_FILL = 1,          /* inout; d[0] value, l[0] integer value, i[0] 1: use l[0] */
  DPL_BK_RNG = 2,           /* inout (contiguous); i[0] kind (0 uniform, 1 normal, 2 randint, 3 bernoulli),
                               u[0] key, u[1] first counter, d[0] d[1] parameters, l[0] low, l[1] range */
  DPL_BK_GEMM = 3,          /* gemm: row-major C = alpha op(A) op(B) + beta C, see dpl_bk_gemm */
  DPL_BK_BINARY = 4,        /* sub op; in[0] in[1]; inout (in place) or out[0] */
  DPL_BK_BINARY_SCALAR = 5, /* sub op; in[0]; d[0] scalar; i[0] reverse; inout or out[0] */
  DPL_BK_AXPY = 6,          /* inout += d[0] * in[0] */
  DPL_BK_UNARY = 7,         /* sub op; in[0]; inout or out[0] */
  DPL_BK_ACT_BWD = 8,       /* sub op; in[0] grad, in[1] saved input or output; out[0] */
  DPL_BK_CLAMP = 9,         /* in[0]; d[0] lo, d[1] hi; i[0] has_lo, i[1] has_hi; inout or out[0] */
  DPL_BK_WHERE = 10,        /* in[0] cond, in[1] a, in[2] b; out[0] */
  DPL_BK_MASKED_FILL = 11,  /* inout; in[0] mask; d[0] value */
  DPL_BK_REDUCE = 12,       /* sub op; in[0]; i[0] dim (-1 all), i[1] keepdim; d[0] param; out[0] */
  DPL_BK_REDUCE_INDEX = 13, /* sub op (MAX/MIN); in[0]; i[0] dim, i[1] keepdim; out[0] values, out[1] indices */
  DPL_BK_SOFTMAX = 14,      /* in[0]; i[0] dim, i[1] log; out[0] */
  DPL_BK_SOFTMAX_BWD = 15,  /* in[0] grad, in[1] output; i[0] dim, i[1] log; out[0] */
  DPL_BK_CROSS_ENTROPY = 16,     /* in[0] logits, in[1] target; i[0] reduction; l[0] ignore_index; out[0] */
  DPL_BK_CROSS_ENTROPY_BWD = 17, /* in[0] grad_out, in[1] logits, in[2] target; i[0]; l[0]; out[0] */
  DPL_BK_NLL = 18,               /* as CROSS_ENTROPY with log-probabilities */
  DPL_BK_NLL_BWD = 19,           /* as CROSS_ENTROPY_BWD */
  DPL_BK_MSE = 20,          /* in[0] a, in[1] b; i[0] reduction; out[0] */
  DPL_BK_MSE_BWD = 21,      /* in[0] grad_out, in[1] a, in[2] b; i[0] reduction; out[0] */
  DPL_BK_EMBEDDING = 22,    /* in[0] weight, in[1] idx; out[0] */
  DPL_BK_EMBEDDING_BWD = 23,/* in[0] grad, in[1] idx; l[0] num_weights; out[0] */
  DPL_BK_INDEX_SELECT = 24, /* in[0] a, in[1] idx; i[0] dim; out[0] */
  DPL_BK_INDEX_ADD = 25,    /* inout a; in[0] idx, in[1] src; i[0] dim */
  DPL_BK_GATHER = 26,       /* inout a (only read); in[0] idx; i[0] dim; out[0] */
  DPL_BK_SCATTER_ADD = 27,  /* inout a; in[0] idx, in[1] src; i[0] dim */
  DPL_BK_MASKED_SELECT = 28,/* in[0] a, in[1] mask; out[0] */
  DPL_BK_NONZERO = 29,      /* in[0] contiguous, any dtype (NaN counts as non-zero); sub 0: out[0] int64 [B + 1]:
                               the exclusive prefix sums of the per-chunk counts, the total last (read back by
                               the core to size the result); sub 1: in[1] those offsets, inout int64 contiguous:
                               the row-major positions of the non-zero elements, flat [total] (i[0] 1) or
                               0-based coordinates over in[0]'s shape [total, ndim] (i[0] 0) */
  DPL_BK_CONV2D = 30,       /* in[0] x, in[1] w, in[2] bias; params; i[0] groups; out[0] */
  DPL_BK_CONV2D_BWD = 31,   /* in[0] grad_out, in[1] x, in[2] w; params; i[0] groups; out[0..2] (may be NULL) */
  DPL_BK_MAX_POOL2D = 32,   /* in[0] x; params; out[0] values, out[1] indices */
  DPL_BK_MAX_POOL2D_BWD = 33,/* in[0] grad_out, in[1] x, in[2] indices; out[0] */
  DPL_BK_AVG_POOL2D = 34,   /* in[0] x; params; i[0] count_include_pad; out[0] */
  DPL_BK_AVG_POOL2D_BWD = 35,/* in[0] grad_out, in[1] x; params; i[0] count_include_pad; out[0] */
  DPL_BK_OPTIM_MULTI = 36,  /* optim: a multi-tensor SGD or Adam step (dpl_bk_optim) */
  DPL_BK_LAYER_NORM = 37,   /* in[0] x, in[1] weight, in[2] bias (may be NULL); l[0] normalized numel; d[0] eps;
                               out[0] y, out[1] mean, out[2] rstd (see dpl_layer_norm) */
  DPL_BK_LAYER_NORM_BWD = 38,/* in[0] grad_y, in[1] x, in[2] mean, in[3] rstd, in[4] weight (may be NULL);
                               out[0] grad_x, out[1] grad_w, out[2] grad_b (the last two may be NULL) */
  DPL_BK_BATCH_NORM = 39,   /* in[0] x, in[1] weight, in[2] bias, in[3] running_mean, in[4] running_var (may be
                             * NULL; updated in place); d[0] momentum, d[1] eps; out[0] y, out[1] mean, out[2] invstd */
  DPL_BK_BATCH_NORM_BWD = 40,/* in[0] grad_y, in[1] x, in[2] mean, in[3] invstd, in[4] weight (may be NULL);
                             * out[0..2] grad_x, grad_w, grad_b (each may be NULL) */
  DPL_BK_SCAN = 41,         /* sub DPL_SCAN_*; in[0] contiguous input in the result's dtype; l[0] D (the dim's size),
                               l[1] inner (the product of the dims after it); i[0] reverse; out[0] values, out[1]
                               int64 0-based indices of the running extreme (MAX/MIN; NULL: not wanted) */
  DPL_BK_CUMPROD_BWD = 42,  /* in[0] grad, in[1] input, in[2] cumprod result: contiguous float64; l[0] D, l[1] inner;
                               out[0] float64 gradient */
  DPL_BK_SORT = 43,         /* in[0] contiguous rows (its last dim, any length); i[0] descending; l[0] K: the
                               first K of each row in the CPU's total order (value, then position); out[0] values
                               (NULL: not wanted), out[1] int64 0-based positions: in[0]'s shape with K last */
  DPL_BK_SELECT = 44,       /* in[0] contiguous rows (its last dim, 1..2048 long); sub 0 kthvalue (l[0]: 0-based rank),
                               1 median, 2 mode (dpl_tensor_sort.c's rules); out[0] values, out[1] int64 0-based
                               positions: in[0]'s shape with 1 last */
  DPL_BK_HISTC = 45,        /* in[0] contiguous float32/float64; d[0] lo, d[1] hi (finite, lo < hi); l[0] bins;
                               out[0] int64 counts [bins] (outside [lo, hi] and NaN not counted) */
  DPL_BK_IM2COL = 46,       /* in[0] x [N, C, H, W] (any float dtype); params (8, dpl_im2col); out[0] */
  DPL_BK_COL2IM = 47,       /* in[0] cols [N, C*kh*kw, L]; l[0] H, l[1] W; params (8, dpl_col2im); out[0] */
  DPL_BK_ADAPTIVE_MAX_POOL2D = 48, /* in[0] x [N, C, H, W]; l[0] oh, l[1] ow; out[0] values, out[1] int64 indices */
  DPL_BK_MAX_POOL1D = 49,   /* in[0] x [N, C, L]; params (5, dpl_max_pool1d); out[0] values, out[1] int64 indices */
  DPL_BK_SPECIAL = 50,      /* sub dpl_specop; in[0] a, in[1] b (ZETA, GAMMAINC, GAMMAINCC; else NULL): any dtype and
                               strides, on inout's device, broadcast to inout's shape; l[0] polygamma's n; inout: the
                               result (a floating dtype, contiguous), each element computed in double
                               (dpl_special_math.h) */
  DPL_BK_CTC = 51,          /* in[0] log_probs [T, N, C] float32/float64 (any strides), in[1] int64 meta on its device:
                               input lengths [N], target lengths [N], label offsets [N], then the labels (0-based);
                               l[0] blank (0-based), l[1] S (the longest target); out[0] nll [N], out[1] log_alpha
                               [N, T, 2S + 1] in log_probs' dtype */
  DPL_BK_CTC_BWD = 52,      /* in[0..1] as CTC, in[2] grad (0-d or [N], any stride), in[3] nll, in[4] log_alpha (the
                               forward's, contiguous); l[0], l[1] as CTC; i[0] zero_infinity; out[0] the gradient of
                               log_probs [T, N, C] (contiguous) */
  DPL_BK_ADAPTIVE_AVG_POOL2D = 53,     /* in[0] x [N, C, H, W] (any float dtype); l[0] oh, l[1] ow; out[0] */
  DPL_BK_ADAPTIVE_AVG_POOL2D_BWD = 54, /* in[0] grad [N, C, oh, ow]; l[0] H, l[1] W; out[0] [N, C, H, W] */
  DPL_BK_LINALG = 55,       /* sub DPL_LA_*: a dense factorization or solve (dpl_bk_linalg, below) */
  DPL_BK_INDEX_STORE = 56,  /* inout dst (written at element offsets from its data pointer); in[0] contiguous int64
                             * offsets (n rows, each in range: checked by the core); in[1] contiguous src of dst's
                             * dtype (n * l[0] elements, or one with i[1] 0); l[0] inner (elements per row), l[1]
                             * slots (offset / u[1] < slots); i[1] src step (1 or 0); u[0] dst stride along a row;
                             * u[1] slot divisor; i[0] 1: no duplicate offsets (or one value), else the last row of
                             * an offset wins */
  DPL_BK_SEARCHSORTED = 57, /* in[0] sorted rows, contiguous float64 [R, M] (R 1: one row for all values), in[1]
                               values contiguous float64 [R, N]; l[0] R, l[1] M; i[0] right; inout int64 [R, N]
                               contiguous: the 0-based insertion positions (dpl.tensor_extra's binary search) */
  DPL_BK_SCATTER_REDUCE = 58, /* inout out (any strides; contiguous for mean); in[0] index, contiguous int64 of
                               out's ndim (>= 1), values l[0] .. l[0] + size - 1 along dim (checked by the core);
                               in[1] src, contiguous, out's dtype, the index's shape; i[0] dim, i[1] reduction (1
                               sum, 2 prod, 3 mean, 4 amax, 5 amin), i[2] include_self, i[3] bool data in uint8;
                               each line of the index along dim folded in order (the CPU's results) */
  DPL_BK_NUM_OPS = 59
} dpl_bk_op;

/* A GEMM on raw device pointers (DPL_BK_GEMM), the one the matmul family's
 * driver in dpl_tensor_blas.c issues: row-major like cblas, batch products
 * `count` apart by stride_{a,b,c} elements. */
typedef struct dpl_bk_gemm {
  int32_t dtype, devindex;
  int32_t transa, transb;
  int64_t m, n, k, lda, ldb, ldc;
  int64_t batch, stride_a, stride_b, stride_c;
  double alpha, beta;
  const void *a, *b;
  void *c;
} dpl_bk_gemm;

/* A multi-tensor optimizer step (DPL_BK_OPTIM_MULTI), validated by the core
 * (dpl_tensor_optim.c): n contiguous tensors per list, one dtype (float32 or
 * float64) and device. The per-tensor scalars are computed by the core in
 * double, exactly as the Lua optimizers compute them; the kernels round each
 * to the dtype and each operation as the per-tensor ops do. */
enum { DPL_OPTIM_SGD = 0, DPL_OPTIM_ADAM = 1 };
typedef struct dpl_bk_optim {
  int32_t kind, n, dtype, devindex;
  int32_t maximize, nesterov, decoupled, amsgrad;
  dpl_tensor *const *param;
  dpl_tensor *const *grad;
  dpl_tensor *const *s0, *const *s1, *const *s2; /* SGD: s0 momentum buffers (NULL: no momentum);
                                                   Adam: exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad) */
  const uint8_t *init;                         /* SGD: buffer i starts as the gradient (NULL: none) */
  const double *step_size, *bc2_sqrt;          /* Adam, per tensor: -lr / (1 - beta1^t), sqrt(1 - beta2^t) */
  double neg_lr, momentum, damp1, weight_decay; /* SGD: -lr, momentum, 1 - dampening, weight_decay */
  double beta1, omb1, beta2, omb2, eps, decay;  /* Adam: beta1, 1 - beta1, beta2, 1 - beta2, eps,
                                                   1 - lr * weight_decay (decoupled); weight_decay above */
} dpl_bk_optim;

/* A dense factorization or solve on device memory (DPL_BK_LINALG), the primitives that
 * dpl_tensor_linalg_dev.c composes dpl.linalg's entry points of (cuSOLVER's and cuBLAS's
 * conventions): `count` column-major matrices per operand, contiguous (leading dimension =
 * rows), stride_* elements apart; the core has checked sizes (< 2^31), dtype (float32 or
 * float64) and devices (devindex). info (int32 per matrix, device memory; NULL: not wanted)
 * receives LAPACK's info; skip (host, int32 per matrix; NULL: none) leaves the matrices
 * whose entry is non-zero untouched (their outputs and info are not written).
 *   GETRF  a m x n in place: P A = L U; ipiv min(m, n) 1-based rows; info
 *   GETRS  a n x n (GETRF's), ipiv; b n x k solved in place (trans: A^T X = B)
 *   POTRF  a n x n in place from its lower (upper = 1: upper) triangle; info
 *   GEQRF  a m x n in place (R and the reflectors), w: k = min(m, n) scalar factors tau
 *   ORGQR  a m x n with k reflectors (GEQRF's, n >= k) -> Q's first n columns in place; w: tau
 *   SYEVD  a n x n (its lower / upper triangle): w n ascending eigenvalues, the eigenvectors
 *          in a when vectors; info
 *   GESVD  a m x n (m >= n; destroyed): w n singular values (descending); vectors: b U
 *          (m x m when full, else m x n), c Vh (n x n); info
 *   TRSM   a k x k triangular (upper, unit); b m x n solved in place: op(a) X = B (left) or
 *          X op(a) = B (trans: op = transpose) */
enum { DPL_LA_GETRF = 0, DPL_LA_GETRS, DPL_LA_POTRF, DPL_LA_GEQRF, DPL_LA_ORGQR, DPL_LA_SYEVD, DPL_LA_GESVD,
       DPL_LA_TRSM, DPL_LA_NUM };
typedef struct dpl_bk_linalg {
  int32_t dtype, devindex;
  int32_t upper, trans, left, unit, vectors, full;
  int64_t count, m, n, k;
  void *a, *b, *c, *w;
  int32_t *ipiv, *info;
  int64_t stride_a, stride_b, stride_c, stride_w, stride_ipiv;
  const int32_t *skip;
} dpl_bk_linalg;

typedef struct dpl_bk_args {
  int32_t op, sub;
  int32_t i[4];
  double d[2];
  int64_t l[2];
  uint64_t u[2];
  const dpl_tensor *in[5];
  dpl_tensor *inout;
  dpl_tensor **out[3];
  const int32_t *params;
  const dpl_bk_gemm *gemm;
  const dpl_bk_optim *optim;
  const dpl_bk_linalg *linalg;
  const char *name; /* the op's user-facing name ("add", "sum", ...) for messages */
} dpl_bk_args;

typedef struct dpl_cuda_mem_stats dpl_cuda_mem_stats;

typedef struct dpl_backend {
  int32_t abi;      /* DPL_BACKEND_ABI of the plugin's build */
  const char *name; /* "cuda" */
  /* device memory for a storage: nbytes may be 0 (ptr may then be NULL) */
  int (*alloc)(int32_t dev, int64_t nbytes, void **ptr);
  void (*release)(int32_t dev, void *ptr, int64_t nbytes);
  /* 1 when run() implements op */
  int (*supports)(int32_t op);
  int (*run)(const dpl_bk_args *a);
  int (*synchronize)(int32_t dev);
  int (*empty_cache)(int32_t dev, int64_t *freed);
  int (*memory_stats)(int32_t dev, dpl_cuda_mem_stats *out);
} dpl_backend;

/* The plugin registers its table when it loads (NULL unregisters). */
void dpl_backend_register(const dpl_backend *b);
const dpl_backend *dpl_backend_get(void);
/* Runs a->op on the backend; "<name>: not implemented on cuda" (DPL_ENOTIMPL)
 * when the backend lacks it or is not loaded. */
int dpl_bk_call(dpl_bk_args *a);
const char *dpl_bk_op_name(int32_t op);
#endif
