/* dpl_cuda_ops.c: the backend's elementwise ops (binary, unary, activation
 * gradients, clamp, where, masked_fill, axpy) and GEMM. The core has already
 * done dtype promotion, conversion to the kernel dtype and allocation (the
 * shared code of dpl_tensor_elementwise.c / dpl_tensor_blas.c); here the
 * operands become a kernel geometry, or a cuBLAS call (row-major products as
 * column-major ones with the operands swapped; float16/bfloat16 operands with
 * float32 accumulation through cublasGemmEx); integer products (int64, to
 * which the core converts every integer dtype) through the tiled kernel of
 * dpl_cuda_igemm.cu. */
#include "dpl_cuda_internal.h"
#include <limits.h>
#include <stdio.h>

/* an operand: device memory, or a one-element host tensor passed by value */
static int operand(const char *name, const dpl_tensor *t, int32_t kd, const void **ptr, dpl_cu_scalar *sc)
{
  memset(sc, 0, sizeof *sc);
  *ptr = NULL;
  if (dpl_is_devmem(t)) {
    *ptr = t->_data;
    return DPL_OK;
  }
  if (t->_numel != 1)
    return dpl_errorf(DPL_EDEVICE, "%s: expected all tensors on the same device, got a cpu tensor of %lld elements",
                      name, (long long)t->_numel);
  sc->is_scalar = 1;
  sc->d = dpl_load_f64(t->_data, t->_dtype);
  sc->i = dpl_load_i64(t->_data, t->_dtype);
  (void)kd;
  return DPL_OK;
}

/* The elementwise ops the kernels of dpl_cuda_elementwise.cu know: a newer core's op id
 * (appended to the stable enums) is refused here instead of reaching a kernel's default */
static int known_binop(int32_t op)
{
  return (op >= DPL_OP_ADD && op <= DPL_OP_RSHIFT) || (op >= DPL_OP_EQ && op <= DPL_OP_GE) ||
         (op >= DPL_OP_LOGICAL_AND && op <= DPL_OP_BITWISE_XOR);
}
static int known_unop(int32_t op) { return op >= DPL_OP_NEG && op <= DPL_OP_BITWISE_NOT; }

static int binary(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev, const char *name)
{
  if (!known_binop(a->sub)) return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda", name);
  dpl_tensor *out = a->inout;
  int32_t kd = a->i[3];
  const void *pa, *pb;
  dpl_cu_scalar sa, sb;
  DPL_TRY(operand(name, a->in[0], kd, &pa, &sa));
  DPL_TRY(operand(name, a->in[1], kd, &pb, &sb));
  const dpl_tensor *ops[3] = {out, pa ? a->in[0] : NULL, pb ? a->in[1] : NULL};
  dpl_cu_geom g;
  dpl_cu_geom_init(&g, 3, ops, out->_ndim, out->_shape);
  DPL_CU_LAUNCH(dpl_cu_binary(&g, a->sub, kd, out->_data, pa, sa, pb, sb, d->compute), name, dev);
  return DPL_OK;
}

static int need_dev(const char *name, const dpl_tensor *t)
{
  if (dpl_is_devmem(t)) return DPL_OK;
  return dpl_errorf(DPL_EDEVICE, "%s: expected all tensors on the same device, got a cpu tensor with cuda ones", name);
}

int dpl_cu_op_elementwise(const dpl_bk_args *a)
{
  const char *name = a->name ? a->name : dpl_bk_op_name(a->op);
  dpl_tensor *out = a->inout;
  int32_t dev = out->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  dpl_cu_geom g;
  switch (a->op) {
  case DPL_BK_BINARY: return binary(a, d, dev, name);
  case DPL_BK_UNARY: {
    if (!known_unop(a->sub)) return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda", name);
    DPL_TRY(need_dev(name, a->in[0]));
    const dpl_tensor *ops[2] = {out, a->in[0]};
    dpl_cu_geom_init(&g, 2, ops, out->_ndim, out->_shape);
    DPL_CU_LAUNCH(dpl_cu_unary(&g, a->sub, a->i[3], out->_data, a->in[0]->_data, d->compute), name, dev);
    return DPL_OK;
  }
  case DPL_BK_ACT_BWD: {
    DPL_TRY(need_dev(name, a->in[0]));
    DPL_TRY(need_dev(name, a->in[1]));
    const dpl_tensor *ops[3] = {out, a->in[0], a->in[1]};
    dpl_cu_geom_init(&g, 3, ops, out->_ndim, out->_shape);
    DPL_CU_LAUNCH(dpl_cu_act_bwd(&g, a->sub, a->i[3], out->_data, a->in[0]->_data, a->in[1]->_data, d->compute), name,
                  dev);
    return DPL_OK;
  }
  case DPL_BK_CLAMP: {
    DPL_TRY(need_dev(name, a->in[0]));
    const dpl_tensor *ops[2] = {out, a->in[0]};
    dpl_cu_geom_init(&g, 2, ops, out->_ndim, out->_shape);
    DPL_CU_LAUNCH(dpl_cu_clamp(&g, a->i[3], out->_data, a->in[0]->_data, a->d[0], a->d[1], a->i[0], a->i[1],
                               d->compute),
                  name, dev);
    return DPL_OK;
  }
  case DPL_BK_WHERE: {
    for (int k = 0; k < 3; k++) DPL_TRY(need_dev(name, a->in[k]));
    const dpl_tensor *ops[4] = {out, a->in[0], a->in[1], a->in[2]};
    dpl_cu_geom_init(&g, 4, ops, out->_ndim, out->_shape);
    DPL_CU_LAUNCH(dpl_cu_where(&g, (int32_t)dpl_elsize(out->_dtype), out->_data, a->in[0]->_data, a->in[1]->_data,
                               a->in[2]->_data, d->compute),
                  name, dev);
    return DPL_OK;
  }
  case DPL_BK_MASKED_FILL: {
    DPL_TRY(need_dev(name, a->in[0]));
    char buf[8] = {0};
    dpl_store_f64(buf, out->_dtype, a->d[0]);
    uint64_t bytes;
    memcpy(&bytes, buf, 8);
    const dpl_tensor *ops[2] = {out, a->in[0]};
    dpl_cu_geom_init(&g, 2, ops, out->_ndim, out->_shape);
    DPL_CU_LAUNCH(dpl_cu_masked_fill(&g, (int32_t)dpl_elsize(out->_dtype), out->_data, a->in[0]->_data, bytes,
                                     d->compute),
                  name, dev);
    return DPL_OK;
  }
  case DPL_BK_AXPY: {
    DPL_TRY(need_dev(name, a->in[0]));
    const dpl_tensor *ops[2] = {out, a->in[0]};
    dpl_cu_geom_init(&g, 2, ops, out->_ndim, out->_shape);
    DPL_CU_LAUNCH(dpl_cu_axpy(&g, out->_dtype, out->_data, a->in[0]->_data, a->d[0], d->compute), name, dev);
    return DPL_OK;
  }
  default: return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda", name);
  }
}

/* ---- GEMM ---- */
int dpl_cu_blas_handle(dpl_cu_dev *d, int32_t dev, cublasHandle_t *h)
{
  pthread_mutex_lock(&d->mu);
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  if (!d->blas) {
    s = cublasCreate(&d->blas);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(d->blas, d->compute);
    if (s != CUBLAS_STATUS_SUCCESS && d->blas) { cublasDestroy(d->blas); d->blas = NULL; }
  }
  *h = d->blas;
  pthread_mutex_unlock(&d->mu);
  if (s != CUBLAS_STATUS_SUCCESS) return dpl_cu_blas_fail(s, "cublasCreate", dev);
  return DPL_OK;
}

/* Integer products: the core computes every integer dtype in int64 (as the
 * CPU's ref_igemm does) and converts around the call; alpha and beta are cast
 * to int64 as there. A tiled kernel (dpl_cuda_igemm.cu), not cuBLAS. */
static int igemm(const dpl_bk_gemm *g, const char *name, int32_t dev)
{
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  int64_t batch = g->batch > 1 ? g->batch : 1;
  char what[64];
  snprintf(what, sizeof what, "integer gemm kernel (%s)", name);
  DPL_CU_LAUNCH(dpl_cu_igemm(g->transa, g->transb, g->m, g->n, g->k, (int64_t)g->alpha, g->a, g->lda, g->b, g->ldb,
                             (int64_t)g->beta, g->c, g->ldc, batch, g->stride_a, g->stride_b, g->stride_c, d->compute),
                what, dev);
  return DPL_OK;
}

int dpl_cu_op_gemm(const dpl_bk_args *a)
{
  const dpl_bk_gemm *g = a->gemm;
  const char *name = a->name ? a->name : "matmul";
  int32_t dev = g->devindex;
  if (g->m == 0 || g->n == 0) return DPL_OK;
  if (g->dtype == DPL_INT64) return igemm(g, name, dev);
  if (g->dtype != DPL_FLOAT32 && g->dtype != DPL_FLOAT64 && g->dtype != DPL_FLOAT16 && g->dtype != DPL_BFLOAT16)
    return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda for %s tensors (cuBLAS multiplies floats only)", name,
                      dpl_dtype_name(g->dtype));
  if (g->m > INT_MAX || g->n > INT_MAX || g->k > INT_MAX || g->lda > INT_MAX || g->ldb > INT_MAX || g->ldc > INT_MAX)
    return dpl_errorf(DPL_EINVAL, "%s: matrix dims past 2^31-1 are not supported on cuda", name);
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  cublasHandle_t h;
  DPL_TRY(dpl_cu_blas_handle(d, dev, &h));
  /* row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T */
  cublasOperation_t ob = g->transb ? CUBLAS_OP_T : CUBLAS_OP_N, oa = g->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  int m = (int)g->n, n = (int)g->m, k = (int)g->k;
  cublasStatus_t s;
  const char *call;
  if (g->dtype == DPL_FLOAT64) {
    double al = g->alpha, be = g->beta;
    call = "cublasDgemm";
    s = cublasDgemm(h, ob, oa, m, n, k, &al, g->b, (int)g->ldb, g->a, (int)g->lda, &be, g->c, (int)g->ldc);
  } else if (g->dtype == DPL_FLOAT32) {
    float al = (float)g->alpha, be = (float)g->beta;
    call = "cublasSgemm";
    s = cublasSgemm(h, ob, oa, m, n, k, &al, g->b, (int)g->ldb, g->a, (int)g->lda, &be, g->c, (int)g->ldc);
  } else {
    float al = (float)g->alpha, be = (float)g->beta;
    cudaDataType_t t = g->dtype == DPL_FLOAT16 ? CUDA_R_16F : CUDA_R_16BF;
    call = "cublasGemmEx";
    s = cublasGemmEx(h, ob, oa, m, n, k, &al, g->b, t, (int)g->ldb, g->a, t, (int)g->lda, &be, g->c, t, (int)g->ldc,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  }
  if (s != CUBLAS_STATUS_SUCCESS) {
    char what[64];
    snprintf(what, sizeof what, "%s (%s)", call, name);
    return dpl_cu_blas_fail(s, what, dev);
  }
  return DPL_OK;
}
