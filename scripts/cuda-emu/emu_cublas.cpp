/* emu_cublas.cpp (dplhost CUDA emulator): cuBLAS on the host, as its
 * documentation specifies: handles bound to the device current at
 * cublasCreate, a stream per handle, column-major C = alpha op(A) op(B) + beta C
 * for Sgemm (float), Dgemm (double) and GemmEx (float16/bfloat16/float32
 * operands, float32 compute), beta 0 meaning C is not read; Strsm/Dtrsm
 * (triangular solves in place) through the BLAS of libopenblas.so.0 (dlopen). The arguments are
 * checked as cuBLAS does (operations, sizes, leading dimensions) and every
 * matrix the call reads or writes must lie in device memory of the handle's
 * device; a violation is reported on stderr ("cuda-emu:") and returned as the
 * status cuBLAS would give. A call is one operation on the handle's stream for
 * the ordering checker (A and B read, C written). */
#include "emu_internal.h"
#include "include/cublas_v2.h"
#include "include/cuda_fp16.h"
#include <algorithm>
#include <dlfcn.h>
#include <set>
#include <vector>
#include <mutex>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

namespace {

struct handle_s {
  int dev;
  cudaStream_t stream;
};

std::mutex mu;
std::set<const void *> handles;

__attribute__((format(printf, 2, 3))) cublasStatus_t misuse(cublasStatus_t s, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "cuda-emu: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (%s)\n", cublasGetStatusName(s));
  va_end(ap);
  return s;
}

handle_s *handle_of(cublasHandle_t h)
{
  std::lock_guard<std::mutex> g(mu);
  return handles.count(h) ? (handle_s *)h : nullptr;
}

/* a column-major rows x cols matrix with leading dimension ld of es-byte elements lies in device memory of dev */
bool matrix_ok(const char *call, const char *name, const void *p, int rows, int cols, int ld, size_t es, int dev)
{
  if (rows == 0 || cols == 0) return true;
  size_t bytes = ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * es;
  int cur = -1;
  cudaGetDevice(&cur);
  if (cur != dev) {
    misuse(CUBLAS_STATUS_EXECUTION_FAILED, "%s: called with cuda:%d current, the handle is of cuda:%d", call, cur, dev);
    return false;
  }
  if (!emu_device_range(p, bytes, dev)) {
    misuse(CUBLAS_STATUS_EXECUTION_FAILED, "%s: matrix %s (%dx%d, ld %d) at %p is not in device memory of cuda:%d", call,
           name, rows, cols, ld, p, dev);
    return false;
  }
  return true;
}

inline float ld_half(const void *p, size_t i)
{
  __half_raw r;
  memcpy(&r.x, (const char *)p + 2 * i, 2);
  return __half2float(__half(r));
}
inline float ld_bf16(const void *p, size_t i)
{
  uint16_t b;
  memcpy(&b, (const char *)p + 2 * i, 2);
  uint32_t f = (uint32_t)b << 16;
  float x;
  memcpy(&x, &f, 4);
  return x;
}
inline uint16_t f2bf(float x)
{
  uint32_t f;
  memcpy(&f, &x, 4);
  if ((f & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((f >> 16) | 0x40u);
  f += 0x7fffu + ((f >> 16) & 1);
  return (uint16_t)(f >> 16);
}

float ld_any(cudaDataType_t t, const void *p, size_t i)
{
  switch (t) {
  case CUDA_R_16F: return ld_half(p, i);
  case CUDA_R_16BF: return ld_bf16(p, i);
  default: return ((const float *)p)[i];
  }
}
void st_any(cudaDataType_t t, void *p, size_t i, float v)
{
  if (t == CUDA_R_16F) {
    __half_raw r = __half_raw(__float2half_rn(v));
    memcpy((char *)p + 2 * i, &r.x, 2);
  } else if (t == CUDA_R_16BF) {
    uint16_t b = f2bf(v);
    memcpy((char *)p + 2 * i, &b, 2);
  } else {
    ((float *)p)[i] = v;
  }
}
size_t type_size(cudaDataType_t t) { return t == CUDA_R_16F || t == CUDA_R_16BF ? 2 : t == CUDA_R_64F ? 8 : 4; }

/* the checks every gemm shares: handle, operations, sizes, leading dimensions (cuBLAS's rules), matrices */
cublasStatus_t gemm_check(const char *call, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                          int k, const void *alpha, const void *A, int lda, size_t esa, const void *B, int ldb,
                          size_t esb, const void *beta, const void *C, int ldc, size_t esc, handle_s **hs)
{
  *hs = handle_of(h);
  if (!*hs) return misuse(CUBLAS_STATUS_NOT_INITIALIZED, "%s: %p is not a live handle", call, (void *)h);
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T && ta != CUBLAS_OP_C) ||
      (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T && tb != CUBLAS_OP_C))
    return misuse(CUBLAS_STATUS_INVALID_VALUE, "%s: bad operation %d/%d", call, (int)ta, (int)tb);
  int rows_a = ta == CUBLAS_OP_N ? m : k, rows_b = tb == CUBLAS_OP_N ? k : n;
  if (m < 0 || n < 0 || k < 0) return misuse(CUBLAS_STATUS_INVALID_VALUE, "%s: m=%d n=%d k=%d", call, m, n, k);
  if (lda < (rows_a > 1 ? rows_a : 1) || ldb < (rows_b > 1 ? rows_b : 1) || ldc < (m > 1 ? m : 1))
    return misuse(CUBLAS_STATUS_INVALID_VALUE, "%s: m=%d n=%d k=%d op %d/%d: lda=%d (>= %d), ldb=%d (>= %d), ldc=%d (>= %d)",
                  call, m, n, k, (int)ta, (int)tb, lda, rows_a, ldb, rows_b, ldc, m);
  if (!alpha || !beta) return misuse(CUBLAS_STATUS_INVALID_VALUE, "%s: alpha or beta is NULL", call);
  int dev = (*hs)->dev;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (k > 0) {
    if (!matrix_ok(call, "A", A, rows_a, ta == CUBLAS_OP_N ? k : m, lda, esa, dev)) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (!matrix_ok(call, "B", B, rows_b, tb == CUBLAS_OP_N ? n : k, ldb, esb, dev)) return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  if (!matrix_ok(call, "C", C, m, n, ldc, esc, dev)) return CUBLAS_STATUS_EXECUTION_FAILED;
  cudaStream_t s = (*hs)->stream;
  emu_op(s);
  if (k > 0) {
    emu_access(s, A, 0, call);
    emu_access(s, B, 0, call);
  }
  emu_access(s, C, 1, call);
  return CUBLAS_STATUS_SUCCESS;
}

/* C = alpha op(A) op(B) + beta C in accumulator type T; la/lb/lc load elements, sc stores one. Each
 * element sums its k products in order; with op(A) = A a column of C at a time (A read down its columns) */
template <typename T, typename LA, typename LB, typename LC, typename SC>
void gemm_run(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, T alpha, int lda, int ldb, T beta,
              int ldc, LA la, LB lb, LC lc, SC sc)
{
  std::vector<T> acc((size_t)m);
  for (int j = 0; j < n; j++) {
    if (ta == CUBLAS_OP_N) {
      std::fill(acc.begin(), acc.end(), (T)0);
      for (int p = 0; p < k; p++) {
        T bv = lb(tb == CUBLAS_OP_N ? (size_t)j * ldb + p : (size_t)p * ldb + j);
        for (int i = 0; i < m; i++) acc[i] += la((size_t)p * lda + i) * bv;
      }
    } else {
      for (int i = 0; i < m; i++) {
        T a = 0;
        for (int p = 0; p < k; p++)
          a += la((size_t)i * lda + p) * lb(tb == CUBLAS_OP_N ? (size_t)j * ldb + p : (size_t)p * ldb + j);
        acc[i] = a;
      }
    }
    for (int i = 0; i < m; i++) {
      size_t ic = (size_t)j * ldc + i;
      T v = alpha * acc[i];
      if (beta != 0) v += beta * lc(ic);
      sc(ic, v);
    }
  }
}

} // namespace

extern "C" cublasStatus_t cublasCreate(cublasHandle_t *handle)
{
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaSetDevice(dev) != cudaSuccess) {
    cudaGetLastError();
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  handle_s *h = new handle_s{dev, 0};
  std::lock_guard<std::mutex> g(mu);
  handles.insert(h);
  *handle = (cublasHandle_t)h;
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasDestroy(cublasHandle_t handle)
{
  std::unique_lock<std::mutex> g(mu);
  if (!handles.erase(handle)) {
    g.unlock();
    return misuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasDestroy: %p is not a live handle", (void *)handle);
  }
  g.unlock();
  delete (handle_s *)handle;
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t s)
{
  handle_s *h = handle_of(handle);
  if (!h) return misuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetStream: %p is not a live handle", (void *)handle);
  int sd = emu_stream_device(s);
  if (sd < 0) return misuse(CUBLAS_STATUS_INVALID_VALUE, "cublasSetStream: %p is not a live stream", (void *)s);
  if (s && sd != h->dev)
    return misuse(CUBLAS_STATUS_INVALID_VALUE, "cublasSetStream: a stream of cuda:%d for a handle of cuda:%d", sd, h->dev);
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" const char *cublasGetStatusName(cublasStatus_t s)
{
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

extern "C" const char *cublasGetStatusString(cublasStatus_t s)
{
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "success";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
  case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
  case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
  case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
  case CUBLAS_STATUS_LICENSE_ERROR: return "an error was detected when checking the current licensing";
  }
  return "unknown error";
}

extern "C" cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                      int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                                      const float *beta, float *C, int ldc)
{
  handle_s *h;
  cublasStatus_t s = gemm_check("cublasSgemm", handle, ta, tb, m, n, k, alpha, A, lda, 4, B, ldb, 4, beta, C, ldc, 4, &h);
  if (s != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0) return s;
  gemm_run<float>(ta, tb, m, n, k, *alpha, lda, ldb, *beta, ldc, [&](size_t i) { return A[i]; },
                  [&](size_t i) { return B[i]; }, [&](size_t i) { return C[i]; }, [&](size_t i, float v) { C[i] = v; });
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasDgemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                      int k, const double *alpha, const double *A, int lda, const double *B, int ldb,
                                      const double *beta, double *C, int ldc)
{
  handle_s *h;
  cublasStatus_t s = gemm_check("cublasDgemm", handle, ta, tb, m, n, k, alpha, A, lda, 8, B, ldb, 8, beta, C, ldc, 8, &h);
  if (s != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0) return s;
  gemm_run<double>(ta, tb, m, n, k, *alpha, lda, ldb, *beta, ldc, [&](size_t i) { return A[i]; },
                   [&](size_t i) { return B[i]; }, [&](size_t i) { return C[i]; }, [&](size_t i, double v) { C[i] = v; });
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                       int k, const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                                       cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                                       cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
  /* the float32-compute combinations of the cublasGemmEx table: A and B alike (16F, 16BF or 32F), C alike or 32F */
  bool ab = at == bt && (at == CUDA_R_16F || at == CUDA_R_16BF || at == CUDA_R_32F);
  bool c = ct == at || ct == CUDA_R_32F;
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    return misuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasGemmEx: compute type %d (the emulator has float32 only)",
                  (int)compute);
  if (!ab || !c)
    return misuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasGemmEx: types A %d, B %d, C %d with float32 compute", (int)at,
                  (int)bt, (int)ct);
  if (algo != CUBLAS_GEMM_DEFAULT) return misuse(CUBLAS_STATUS_INVALID_VALUE, "cublasGemmEx: algo %d", (int)algo);
  handle_s *h;
  cublasStatus_t s = gemm_check("cublasGemmEx", handle, ta, tb, m, n, k, alpha, A, lda, type_size(at), B, ldb,
                                type_size(bt), beta, C, ldc, type_size(ct), &h);
  if (s != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0) return s;
  float al = *(const float *)alpha, be = *(const float *)beta;
  gemm_run<float>(ta, tb, m, n, k, al, lda, ldb, be, ldc, [&](size_t i) { return ld_any(at, A, i); },
                  [&](size_t i) { return ld_any(bt, B, i); }, [&](size_t i) { return ld_any(ct, C, i); },
                  [&](size_t i, float v) { st_any(ct, C, i, v); });
  return CUBLAS_STATUS_SUCCESS;
}

namespace {
/* trsm: OpenBLAS's Fortran ?trsm_ (the CPU path's library: the same arithmetic) */
typedef void (*trsm_f)(const char *, const char *, const char *, const char *, const int *, const int *, const void *,
                       const void *, const int *, void *, const int *, size_t, size_t, size_t, size_t);
trsm_f trsm_fn[2];
std::once_flag trsm_once;
void trsm_load()
{
  void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) return;
  trsm_fn[0] = (trsm_f)dlsym(h, "strsm_");
  trsm_fn[1] = (trsm_f)dlsym(h, "dtrsm_");
}

cublasStatus_t trsm(const char *call, int k, cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo,
                    cublasOperation_t trans, cublasDiagType_t diag, int m, int n, const void *alpha, const void *A,
                    int lda, void *B, int ldb, size_t es)
{
  handle_s *h = handle_of(handle);
  if (!h) return misuse(CUBLAS_STATUS_NOT_INITIALIZED, "%s: %p is not a live handle", call, (void *)handle);
  if ((side != CUBLAS_SIDE_LEFT && side != CUBLAS_SIDE_RIGHT) ||
      (uplo != CUBLAS_FILL_MODE_LOWER && uplo != CUBLAS_FILL_MODE_UPPER) ||
      (trans != CUBLAS_OP_N && trans != CUBLAS_OP_T && trans != CUBLAS_OP_C) ||
      (diag != CUBLAS_DIAG_NON_UNIT && diag != CUBLAS_DIAG_UNIT))
    return misuse(CUBLAS_STATUS_INVALID_VALUE, "%s: side %d uplo %d trans %d diag %d", call, (int)side, (int)uplo,
                  (int)trans, (int)diag);
  int ka = side == CUBLAS_SIDE_LEFT ? m : n;
  if (m < 0 || n < 0 || lda < (ka > 1 ? ka : 1) || ldb < (m > 1 ? m : 1) || !alpha)
    return misuse(CUBLAS_STATUS_INVALID_VALUE, "%s: m=%d n=%d lda=%d (>= %d) ldb=%d (>= %d)", call, m, n, lda, ka, ldb,
                  m);
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (!matrix_ok(call, "A", A, ka, ka, lda, es, h->dev) || !matrix_ok(call, "B", B, m, n, ldb, es, h->dev))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  std::call_once(trsm_once, trsm_load);
  if (!trsm_fn[k]) return misuse(CUBLAS_STATUS_INTERNAL_ERROR, "%s: the emulator found no BLAS trsm (libopenblas)", call);
  emu_op(h->stream);
  emu_access(h->stream, A, 0, call);
  emu_access(h->stream, B, 1, call);
  trsm_fn[k](side == CUBLAS_SIDE_LEFT ? "L" : "R", uplo == CUBLAS_FILL_MODE_UPPER ? "U" : "L",
             trans == CUBLAS_OP_N ? "N" : "T", diag == CUBLAS_DIAG_UNIT ? "U" : "N", &m, &n, alpha, A, &lda, B, &ldb, 1,
             1, 1, 1);
  return CUBLAS_STATUS_SUCCESS;
}
} // namespace

extern "C" cublasStatus_t cublasStrsm_v2(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo,
                                         cublasOperation_t trans, cublasDiagType_t diag, int m, int n,
                                         const float *alpha, const float *A, int lda, float *B, int ldb)
{
  return trsm("cublasStrsm", 0, handle, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb, 4);
}

extern "C" cublasStatus_t cublasDtrsm_v2(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo,
                                         cublasOperation_t trans, cublasDiagType_t diag, int m, int n,
                                         const double *alpha, const double *A, int lda, double *B, int ldb)
{
  return trsm("cublasDtrsm", 1, handle, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb, 8);
}
