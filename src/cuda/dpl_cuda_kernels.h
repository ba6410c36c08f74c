/* dpl_cuda_kernels.h: the launchers of the plugin's CUDA kernels (the .cu
 * files), as plain C functions the plugin's host side (C, gcc) calls. Shared by
 * C and CUDA C++, so it holds only C types: the operands' geometry is a
 * dpl_cu_geom (shape and element strides of up to 4 operands over one common
 * shape, already broadcast and coalesced), dtypes are dpl_dtype ids, and every
 * launcher returns the cudaError_t of its launch (cudaSuccess = 0). */
#ifndef DPL_CUDA_KERNELS_H
#define DPL_CUDA_KERNELS_H
#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { DPL_CU_MAXDIM = 8, DPL_CU_MAXOP = 4 };

typedef struct dpl_cu_geom {
  int32_t ndim, nops;
  int64_t numel;
  int64_t shape[DPL_CU_MAXDIM];
  int64_t stride[DPL_CU_MAXOP][DPL_CU_MAXDIM]; /* elements; 0 = broadcast */
} dpl_cu_geom;

/* An operand that is a host scalar rather than device memory (ptr NULL). */
typedef struct dpl_cu_scalar {
  int32_t is_scalar;
  double d;
  int64_t i;
} dpl_cu_scalar;

/* op 0 = dst, op 1 = src: dst = (dst dtype) src */
int dpl_cu_copy(const dpl_cu_geom *g, void *dst, int32_t ddt, const void *src, int32_t sdt, cudaStream_t s);
/* op 0: writes the es-byte pattern `bytes` into every element */
int dpl_cu_fill(const dpl_cu_geom *g, void *dst, int32_t es, uint64_t bytes, cudaStream_t s);
/* out (od: kd, or bool for comparisons) = a op b, both in kd; ops 0, 1, 2 */
int dpl_cu_binary(const dpl_cu_geom *g, int32_t op, int32_t kd, void *out, const void *a, dpl_cu_scalar sa,
                  const void *b, dpl_cu_scalar sb, cudaStream_t s);
/* out = op(a) in kd (bool for logical_not/isnan) */
int dpl_cu_unary(const dpl_cu_geom *g, int32_t op, int32_t kd, void *out, const void *a, cudaStream_t s);
/* out = grad * f'(x) (ops 0 out, 1 grad, 2 x), kd float32/float64 */
int dpl_cu_act_bwd(const dpl_cu_geom *g, int32_t op, int32_t kd, void *out, const void *grad, const void *x,
                   cudaStream_t s);
/* kd float32/float64/int64 */
int dpl_cu_clamp(const dpl_cu_geom *g, int32_t kd, void *out, const void *a, double lo, double hi, int32_t has_lo,
                 int32_t has_hi, cudaStream_t s);
/* ops 0 out, 1 cond (bool/uint8), 2 a, 3 b; es bytes per element */
int dpl_cu_where(const dpl_cu_geom *g, int32_t es, void *out, const void *cond, const void *a, const void *b,
                 cudaStream_t s);
/* ops 0 a, 1 mask */
int dpl_cu_masked_fill(const dpl_cu_geom *g, int32_t es, void *a, const void *mask, uint64_t bytes, cudaStream_t s);
/* ops 0 a, 1 b: a += alpha * b, floating dtype dt */
int dpl_cu_axpy(const dpl_cu_geom *g, int32_t dt, void *a, const void *b, double alpha, cudaStream_t s);
/* Philox 4x32-10 draws into n contiguous elements, exactly as dpl_tensor_random.c */
int dpl_cu_rng(void *dst, int32_t dt, int64_t n, int32_t kind, uint64_t key, uint64_t start, double a, double b,
               int64_t ia, int64_t range, cudaStream_t s);

/* scans along the dim of contiguous [lines / inner, D, inner] data of dtype dt (op: DPL_SCAN_SUM,
 * PROD, MAX, MIN; MAX/MIN also write the 0-based position of the running extreme into idx, else
 * NULL); reverse 1: from the end. cumprod's gradient: float64 g, x, y = cumprod(x), r of that
 * shape (dpl_cuda_scan.cu, the CPU's loops of dpl_tensor_scan.c) */
int dpl_cu_scan(int32_t op, int32_t dt, int32_t reverse, const void *src, void *dst, int64_t *idx, int64_t lines,
                int64_t D, int64_t inner, cudaStream_t s);
int dpl_cu_cumprod_bwd(const double *g, const double *x, const double *y, double *r, int64_t lines, int64_t D,
                       int64_t inner, cudaStream_t s);
/* logcumsumexp's gradient (float64 g, x, o = logcumsumexp(x), r; the scan is op 4 of dpl_cu_scan) */
int dpl_cu_lcse_bwd(const double *g, const double *x, const double *o, double *r, int64_t lines, int64_t D,
                    int64_t inner, cudaStream_t s);

/* sort of contiguous rows [rows, R] of dtype dt (dpl_cuda_sort.cu): the first K of each row in the
 * CPU's order (ascending, or descending with desc; NaN last ascending, first descending; ties by
 * position): 0-based positions into idx [rows, K], the values into vals [rows, K] (NULL: not
 * wanted). Rows past DPL_CU_SORT_MAX need dpl_cu_sort_scratch(rows, R) bytes of device scratch
 * (else scratch may be NULL). */
enum { DPL_CU_SORT_MAX = 2048 };
int64_t dpl_cu_sort_scratch(int64_t rows, int64_t R);
int dpl_cu_sort_rows(const void *src, int32_t dt, int32_t desc, int64_t rows, int64_t R, int64_t K, void *vals,
                     int64_t *idx, void *scratch, cudaStream_t s);
/* one selection per contiguous row [rows, R] (R <= DPL_CU_SORT_MAX) in the CPU's order: kind 0 the
 * item of 0-based rank r (kthvalue), 1 the lower median (a row with a NaN: its first NaN), 2 the mode
 * (the most frequent value, the smallest of several, at its last position); its value into vals
 * [rows] and its 0-based position into idx [rows] */
int dpl_cu_select_rows(const void *src, int32_t dt, int32_t kind, int64_t r, int64_t rows, int64_t R, void *vals,
                       int64_t *idx, cudaStream_t s);

/* layer norm of contiguous rows [rows, n] in kd (float32 0 / float64 1): y, and mean / rstd per row
 * (w, b may be NULL); backward: grad_x; then grad_w / grad_b (either may be NULL) summed over the rows
 * through `scratch`, 2 * dpl_cu_layer_norm_parts(rows) * n doubles (no atomics: deterministic) */
int dpl_cu_layer_norm(int32_t kd, const void *x, const void *w, const void *b, void *y, void *mean, void *rstd,
                      int64_t rows, int64_t n, double eps, cudaStream_t s);
int dpl_cu_layer_norm_bwd(int32_t kd, const void *gy, const void *x, const void *mean, const void *rstd, const void *w,
                          void *gx, int64_t rows, int64_t n, cudaStream_t s);
int64_t dpl_cu_layer_norm_parts(int64_t rows);
int dpl_cu_layer_norm_cols(int32_t kd, const void *gy, const void *x, const void *mean, const void *rstd, void *gw,
                           void *gb, int64_t rows, int64_t n, double *scratch, cudaStream_t s);

/* softmax (log 0) / log_softmax (log 1) of contiguous rows [rows, R] in kd (float32 0 / float64 1);
 * bwd 1: x is the forward's output and g the incoming gradient */
int dpl_cu_softmax_rows(int32_t kd, const void *x, const void *g, void *out, int64_t rows, int64_t R, int32_t log,
                        int32_t bwd, cudaStream_t s);
/* Class losses of x [N, C] read in place: float dtype xdt (float32, float64,
 * float16, bfloat16), element (i, k) at x + i * sN + k * sC (elements; any
 * strides), int64 t [N] contiguous; computed in float64. l[N]: per-sample
 * losses (0 where ignored) in dtype ldt; *bad (device memory the caller preset
 * to all ones) gets the smallest sample whose target is out of range.
 * ce: 1 cross-entropy, 0 NLL. */
int dpl_cu_class_loss(int32_t ce, int32_t xdt, const void *x, int64_t sN, int64_t sC, const int64_t *t, int64_t N,
                      int64_t C, int64_t ignore, void *l, int32_t ldt, unsigned long long *bad, cudaStream_t s);
/* out[0] (dtype odt) = sum(l) (reduction 2) or sum(l)/count (1) over the non-ignored samples of the
 * float64 l; cnt[0] = count. l is read only when out is set (NULL otherwise) */
int dpl_cu_loss_finish(const double *l, const int64_t *t, int64_t N, int64_t ignore, int32_t reduction, void *out,
                       int32_t odt, double *cnt, cudaStream_t s);
/* gx [N, C] contiguous in xdt of a class loss of x (as above); g: grad_out in dtype gdt, sample i's
 * value at g + i * gs elements (reduction 0; otherwise g[0]); cnt from loss_finish */
int dpl_cu_class_loss_bwd(int32_t ce, int32_t xdt, const void *x, int64_t sN, int64_t sC, const int64_t *t, int64_t N,
                          int64_t C, int64_t ignore, int32_t reduction, const void *g, int32_t gdt, int64_t gs,
                          const double *cnt, void *gx, cudaStream_t s);
/* out[i, :] = w[idx[i], :] (rows of row_bytes); *bad gets the smallest i with idx out of [0, V) */
int dpl_cu_embedding(const void *w, const int64_t *idx, int64_t n, int64_t V, int64_t row_bytes, void *out,
                     unsigned long long *bad, cudaStream_t s);
/* gw[idx[i], :] += g[i, :], float32 (kd 0) or float64 (kd 1), gw zeroed by the caller */
int dpl_cu_embedding_bwd(int32_t kd, const void *g, const int64_t *idx, int64_t n, int64_t V, int64_t D, void *gw,
                         unsigned long long *bad, cudaStream_t s);

/* ---- special functions (dpl_cuda_special.cu) ----
 * out (dtype odt) = op(a) (b NULL; n: polygamma's order) or op(a, b), ops 0 out, 1 a, 2 b of g;
 * op a dpl_specop, each element in double by dpl_special_math.h */
int dpl_cu_special(const dpl_cu_geom *g, int32_t op, int64_t n, void *out, int32_t odt, const void *a, int32_t adt,
                   const void *b, int32_t bdt, cudaStream_t s);

/* ---- the CTC loss (dpl_cuda_ctc.cu), log_probs [T, N, C] of float32 (kd 0) / float64 (kd 1) at
 * element strides st, sn, sc; meta: int64 input lengths [N], target lengths [N], label offsets
 * [N], then the 0-based labels; one block per sequence. Forward: nll [N], alpha [N, T, 2S + 1];
 * backward: glp [T, N, C] contiguous from grad (sample b's at b * gstride), the forward's nll
 * and alpha, beta ([N, T, 2S + 1] scratch) */
typedef struct dpl_cu_ctc_geom {
  int64_t T, N, C, st, sn, sc, S, blank, gstride;
  int32_t zero_infinity;
} dpl_cu_ctc_geom;
int dpl_cu_ctc(int32_t kd, const dpl_cu_ctc_geom *g, const void *lp, const int64_t *meta, void *nll, void *alpha,
               cudaStream_t s);
int dpl_cu_ctc_bwd(int32_t kd, const dpl_cu_ctc_geom *g, const void *lp, const int64_t *meta, const void *grad,
                   const void *nll, const void *alpha, void *beta, void *glp, cudaStream_t s);

/* ---- integer GEMM (dpl_cuda_igemm.cu) ----
 * row-major int64 C = alpha op(A) op(B) + beta C (C not read when beta is 0),
 * wrapping modulo 2^64 like the CPU; `batch` products sa/sb/sc elements apart */
int dpl_cu_igemm(int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k, int64_t alpha, const int64_t *a, int64_t lda,
                 const int64_t *b, int64_t ldb, int64_t beta, int64_t *c, int64_t ldc, int64_t batch, int64_t sa,
                 int64_t sb, int64_t sc, cudaStream_t s);

/* ---- convolution and pooling (dpl_cuda_conv.cu), NCHW, kd float32 (0) / float64 (1) ---- */
typedef struct dpl_cu_conv {
  int64_t N, C, H, W, O, Cg, Og, kh, kw, OH, OW, sh, sw, ph, pw, dh, dw;
} dpl_cu_conv;
typedef struct dpl_cu_pool {
  int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, OH, OW;
} dpl_cu_pool;
/* F.unfold / F.fold, adaptive max pooling, dilated 1-d max pooling and histc (dpl_cuda_window.cu):
 * contiguous float32 (kd 0) / float64 (kd 1) data, the CPU's loops of dpl_tensor_nnconv.c and
 * dpl_tensor_count.c. cols [N, C*kh*kw, OH*OW] <-> x [N, C, H, W] (fold sums, no zeroing needed). */
typedef struct dpl_cu_cols {
  int64_t N, C, H, W, kh, kw, dh, dw, ph, pw, sh, sw, OH, OW;
} dpl_cu_cols;
int dpl_cu_unfold(int32_t kd, const dpl_cu_cols *g, const void *x, void *cols, cudaStream_t s);
int dpl_cu_fold(int32_t kd, const dpl_cu_cols *g, const void *cols, void *x, cudaStream_t s);
/* P planes of H*W to P*OH*OW window maxima; idx: 0-based positions in the plane */
int dpl_cu_adaptive_max(int32_t kd, const void *x, int64_t P, int64_t H, int64_t W, int64_t OH, int64_t OW, void *out,
                        int64_t *idx, cudaStream_t s);
/* adaptive average pooling of P planes of H*W to P*OH*OW window means (bwd 0: x the input, out
 * [P, OH, OW]); bwd 1: x the gradient [P, OH, OW], out [P, H, W] (every element written) */
int dpl_cu_adaptive_avg(int32_t kd, int32_t bwd, const void *x, int64_t P, int64_t H, int64_t W, int64_t OH,
                        int64_t OW, void *out, cudaStream_t s);
/* P rows of L to P*OL maxima over kernel k, stride st, padding pad, dilation d; idx: 0-based in L */
int dpl_cu_max_pool1d(int32_t kd, const void *x, int64_t P, int64_t L, int64_t OL, int64_t k, int64_t st, int64_t pad,
                      int64_t d, void *out, int64_t *idx, cudaStream_t s);
/* cnt[bins] (zeroed by the caller) += the elements of x[n] in each of bins equal bins over [lo, hi] */
int dpl_cu_histc(int32_t kd, const void *x, int64_t n, double lo, double hi, int64_t bins, int64_t *cnt,
                 cudaStream_t s);
/* cols [K = Cg*kh*kw, m*L] of samples n0..n0+m, group gr */
int dpl_cu_im2col(int32_t kd, const dpl_cu_conv *g, const void *x, void *cols, int64_t n0, int64_t m, int64_t gr,
                  cudaStream_t s);
/* gx (those samples' group channels) = the sum of the columns that read each element */
int dpl_cu_col2im(int32_t kd, const dpl_cu_conv *g, const void *cols, void *gx, int64_t n0, int64_t m, int64_t gr,
                  cudaStream_t s);
/* out[n0+s, gr*Og+o, :] = tmp[o, s*L:(s+1)*L] + bias (bias may be NULL) */
int dpl_cu_conv_out(int32_t kd, const dpl_cu_conv *g, const void *tmp, const void *bias, void *out, int64_t n0,
                    int64_t m, int64_t gr, cudaStream_t s);
/* gyc [Og, m*L] from grad_out's samples n0.. and group gr */
int dpl_cu_conv_gy(int32_t kd, const dpl_cu_conv *g, const void *gy, void *gyc, int64_t n0, int64_t m, int64_t gr,
                   cudaStream_t s);
/* gb[o] = sum of gy[:, o, :] ([N, O, L]) */
int dpl_cu_bias_grad(int32_t kd, const void *gy, int64_t N, int64_t O, int64_t L, void *gb, cudaStream_t s);
int dpl_cu_maxpool(int32_t kd, const dpl_cu_pool *g, const void *x, void *out, int64_t *idx, cudaStream_t s);
/* gx (zeroed) += gy at the indices; *bad gets the smallest position with an index out of its plane */
int dpl_cu_maxpool_bwd(int32_t kd, const void *gy, const int64_t *idx, int64_t P, int64_t L, int64_t plane, void *gx,
                       unsigned long long *bad, cudaStream_t s);
/* float64; gy NULL: out = window averages; else out (zeroed, input-shaped) += gy / divisor */
int dpl_cu_avgpool(const dpl_cu_pool *g, int32_t cip, const double *x, const double *gy, double *out, cudaStream_t s);

/* ---- indexing (dpl_cuda_index.cu); indices int64, contiguous ---- */
typedef struct dpl_cu_index {
  int32_t ndim, dim;
  int64_t n, bound;                  /* index elements; size of a's dim */
  int64_t shape[DPL_CU_MAXDIM];      /* the index's shape */
  int64_t astride[DPL_CU_MAXDIM];    /* a's strides (elements) */
  int64_t sstride[DPL_CU_MAXDIM];    /* src's strides (scatter_add) */
} dpl_cu_index;
/* *bad gets the smallest j with ix[j] out of [0, D) (for ops whose rows are empty: no element kernel runs) */
int dpl_cu_check_index(const int64_t *ix, int64_t n, int64_t D, unsigned long long *bad, cudaStream_t s);
/* flag[1] = ix[flag[0]] when flag[0] is not all ones (ix: the int64 indices the check ran on) */
int dpl_cu_bad_value(unsigned long long *flag, const int64_t *ix, cudaStream_t s);
/* [outer, D, inner] -> [outer, n, inner] rows ix; es bytes per element */
int dpl_cu_index_select(int32_t es, int64_t outer, int64_t D, int64_t inner, int64_t n, const int64_t *ix,
                        const void *src, void *dst, unsigned long long *bad, cudaStream_t s);
/* dst [outer, D, inner] += src [outer, n, inner] at rows ix; kd float32/float64/int32/int64/uint8 (wrapping)/
 * bool (logical or, as the CPU's (a + b) != 0); scatter_add likewise */
int dpl_cu_index_add(int32_t kd, int64_t outer, int64_t D, int64_t inner, int64_t n, const int64_t *ix,
                     const void *src, void *dst, unsigned long long *bad, cudaStream_t s);
/* rows of inner elements (es bytes each) stored at dst + off[b] (+ j * dstride); src advances by
 * sstep elements; win (slots int64, zeroed; NULL: offsets distinct) picks each offset's last row */
int dpl_cu_index_store(int32_t es, int64_t n, int64_t inner, const int64_t *off, const void *src, int64_t sstep,
                       int64_t dstride, void *dst, int64_t *win, int64_t slots, int64_t div, cudaStream_t s);
int dpl_cu_gather(int32_t es, const dpl_cu_index *g, const int64_t *ix, const void *a, void *out,
                  unsigned long long *bad, cudaStream_t s);
int dpl_cu_scatter_add(int32_t kd, const dpl_cu_index *g, const int64_t *ix, const void *src, void *a,
                       unsigned long long *bad, cudaStream_t s);

/* ---- reductions (dpl_cuda_reduce.cu) ----
 * op (a dpl_redop) of x, read in its own dtype idt and layout: output element
 * `row` (row-major over oshape) reduces the R elements at
 * row's offset (oshape/ostride) + each reduced position's offset
 * (rshape/rstride, row-major: the order that argmax/argmin count). Strides in
 * elements, any sign or 0. Floating inputs accumulate in float64, integers and
 * bool in int64 (wrapping sum/prod), with the CPU's NaN and first-index rules.
 * val[rows] (contiguous, dtype odt; NULL for argmax/argmin) and idx[rows]
 * (int64; NULL unless argmax, argmin or max/min with indices). param: correction (var/std),
 * p (norm). */
typedef struct dpl_cu_red {
  int32_t op, idt, odt, ondim, rndim;
  int64_t rows, R;
  int64_t oshape[DPL_CU_MAXDIM], ostride[DPL_CU_MAXDIM];
  int64_t rshape[DPL_CU_MAXDIM], rstride[DPL_CU_MAXDIM];
  double param;
} dpl_cu_red;
/* bytes of device scratch dpl_cu_reduce needs for g (0: none) */
int64_t dpl_cu_reduce_scratch(const dpl_cu_red *g);
int dpl_cu_reduce(const dpl_cu_red *g, const void *x, void *val, int64_t *idx, void *scratch, cudaStream_t s);

/* ---- multi-tensor optimizer steps (dpl_cuda_optim.cu) ----
 * One launch updates up to DPL_CU_OPT_TENSORS tensors in up to
 * DPL_CU_OPT_BLOCKS blocks: block b runs chunk blk_chunk[b] (DPL_CU_OPT_CHUNK
 * elements) of tensor blk_tensor[b]. The table travels as a kernel parameter
 * (< 4 KiB). Hyperparameters as in dpl_bk_optim (dpl_tensor_backend.h). */
enum { DPL_CU_OPT_TENSORS = 24, DPL_CU_OPT_BLOCKS = 256, DPL_CU_OPT_CHUNK = 16384 };
typedef struct dpl_cu_optim_hp {
  int32_t kind, dt, maximize, nesterov, decoupled, amsgrad, has_wd, has_buf;
  double neg_lr, momentum, damp1, weight_decay, beta1, omb1, beta2, omb2, eps, decay;
} dpl_cu_optim_hp;
typedef struct dpl_cu_optim_tab {
  int32_t ntensors, nblocks;
  void *p[DPL_CU_OPT_TENSORS];
  const void *g[DPL_CU_OPT_TENSORS];
  void *s0[DPL_CU_OPT_TENSORS], *s1[DPL_CU_OPT_TENSORS], *s2[DPL_CU_OPT_TENSORS];
  int64_t numel[DPL_CU_OPT_TENSORS];
  double a[DPL_CU_OPT_TENSORS], b[DPL_CU_OPT_TENSORS]; /* SGD: a 1 = init the buffer; Adam: step size, sqrt(bc2) */
  uint8_t blk_tensor[DPL_CU_OPT_BLOCKS];
  int32_t blk_chunk[DPL_CU_OPT_BLOCKS];
} dpl_cu_optim_tab;
int dpl_cu_optim(const dpl_cu_optim_hp *hp, const dpl_cu_optim_tab *tab, cudaStream_t s);

/* compaction, searchsorted, scatter_reduce (dpl_cuda_compact.cu). nonzero of n contiguous
 * elements of dtype dt (NaN counts): dpl_cu_nz_count writes per-chunk counts (counts: scratch
 * of dpl_cu_nz_blocks(n) int64) and their exclusive prefix sums into offsets [blocks + 1], the
 * total last; dpl_cu_nz_write then writes, in row-major order, the flat positions (sh->ndim 0)
 * or the 0-based coordinates over sh of each non-zero element: [total] or [total, ndim] int64 */
typedef struct dpl_cu_shape {
  int32_t ndim;
  int64_t shape[DPL_CU_MAXDIM];
} dpl_cu_shape;
int64_t dpl_cu_nz_blocks(int64_t n);
int dpl_cu_nz_count(const void *src, int32_t dt, int64_t n, int64_t *counts, int64_t *offsets, cudaStream_t s);
int dpl_cu_nz_write(const void *src, int32_t dt, int64_t n, const int64_t *offsets, const dpl_cu_shape *sh,
                    int64_t *out, cudaStream_t s);
/* out [R, N] = the count of sorted[r, :] (contiguous float64 [R, M], or one row shared when R
 * is 1) below v[r, j] (right: not above), by binary search */
int dpl_cu_search(const double *sorted, const double *v, int64_t *out, int64_t R, int64_t M, int64_t N,
                  int32_t right, cudaStream_t s);
/* scatter_reduce: index (contiguous int64, values base..base + out size along dim - 1, checked)
 * and src (contiguous, out's dtype) of shape ishape; out written at its strides ostride; red 1
 * sum, 2 prod, 3 mean, 4 amax, 5 amin; cnt: int32 per out element, zeroed (NULL only for a
 * reduction with include_self that is not mean); is_bool: uint8 data as bool (sum or, prod and) */
typedef struct dpl_cu_sred {
  int32_t ndim, dim;
  int64_t numel; /* of the index */
  int64_t ishape[DPL_CU_MAXDIM], ostride[DPL_CU_MAXDIM];
} dpl_cu_sred;
int dpl_cu_scatter_reduce(void *out, int32_t dt, int64_t out_numel, const int64_t *idx, int64_t base,
                          const void *src, int32_t *cnt, const dpl_cu_sred *g, int32_t red, int32_t include_self,
                          int32_t is_bool, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
