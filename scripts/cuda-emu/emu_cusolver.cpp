/* emu_cusolver.cpp (dplhost CUDA emulator): cuSOLVER's dense routines on the host, the ones
 * src/cuda/dpl_cuda_linalg.c loads with dlopen (run-ops.sh points DPL_LIBCUSOLVER at the
 * emulator's library): handles bound to the device current at cusolverDnCreate with a stream
 * each, {S,D}getrf, getrs, potrf, geqrf, orgqr, syevd, gesvd and their *_bufferSize queries,
 * column-major with leading dimensions, as cuSOLVER's documentation specifies. The arithmetic
 * is LAPACK's, from the OpenBLAS library dplhost loads (libopenblas.so.0, dlopen): the
 * workspace the caller passes (device memory, of the size the query reported) is LAPACK's
 * work array, and info goes to devInfo in device memory. Arguments are checked as cuSOLVER
 * does (sizes, leading dimensions, jobs; gesvd needs m >= n), and every matrix, vector,
 * workspace and devInfo must lie in device memory of the handle's device; a violation is
 * reported on stderr ("cuda-emu:") and returned as cuSOLVER's status. A call is one
 * operation on the handle's stream for the ordering checker. */
#include "emu_internal.h"
#include <dlfcn.h>
#include <mutex>
#include <set>
#include <vector>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct emu_solver *cusolverDnHandle_t;
typedef int cusolverStatus_t;
enum {
  ST_SUCCESS = 0, ST_NOT_INITIALIZED = 1, ST_ALLOC_FAILED = 2, ST_INVALID_VALUE = 3, ST_EXECUTION_FAILED = 6,
  ST_INTERNAL_ERROR = 7, ST_NOT_SUPPORTED = 9
};

namespace {

struct solver_s {
  int dev;
  cudaStream_t stream;
};
std::mutex mu;
std::set<const void *> handles;

const char *status_name(int s)
{
  switch (s) {
  case ST_NOT_INITIALIZED: return "CUSOLVER_STATUS_NOT_INITIALIZED";
  case ST_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
  case ST_EXECUTION_FAILED: return "CUSOLVER_STATUS_EXECUTION_FAILED";
  case ST_INTERNAL_ERROR: return "CUSOLVER_STATUS_INTERNAL_ERROR";
  case ST_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
  }
  return "CUSOLVER_STATUS_?";
}

__attribute__((format(printf, 2, 3))) int misuse(int s, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "cuda-emu: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (%s)\n", status_name(s));
  va_end(ap);
  return s;
}

solver_s *handle_of(cusolverDnHandle_t h)
{
  std::lock_guard<std::mutex> g(mu);
  return handles.count(h) ? (solver_s *)h : nullptr;
}

/* LAPACK (Fortran interfaces, 32-bit integers, hidden character lengths last) */
struct lapack_t {
  bool ok = false;
  void *getrf[2], *getrs[2], *potrf[2], *geqrf[2], *orgqr[2], *syevd[2], *gesvd[2];
};
lapack_t lp;
std::once_flag lp_once;

void lp_load()
{
  void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) return;
  bool ok = true;
  const char *base[] = {"getrf_", "getrs_", "potrf_", "geqrf_", "orgqr_", "syevd_", "gesvd_"};
  void **dst[] = {lp.getrf, lp.getrs, lp.potrf, lp.geqrf, lp.orgqr, lp.syevd, lp.gesvd};
  for (int r = 0; r < 7; r++)
    for (int k = 0; k < 2; k++) {
      char name[32];
      snprintf(name, sizeof name, "%c%s", k ? 'd' : 's', base[r]);
      dst[r][k] = dlsym(h, name);
      if (!dst[r][k]) ok = false;
    }
  lp.ok = ok;
}

typedef void (*getrf_f)(const int *, const int *, void *, const int *, int *, int *);
typedef void (*getrs_f)(const char *, const int *, const int *, const void *, const int *, const int *, void *,
                        const int *, int *, size_t);
typedef void (*potrf_f)(const char *, const int *, void *, const int *, int *, size_t);
typedef void (*geqrf_f)(const int *, const int *, void *, const int *, void *, void *, const int *, int *);
typedef void (*orgqr_f)(const int *, const int *, const int *, void *, const int *, const void *, void *, const int *,
                        int *);
typedef void (*syevd_f)(const char *, const char *, const int *, void *, const int *, void *, void *, const int *, int *,
                        const int *, int *, size_t, size_t);
typedef void (*gesvd_f)(const char *, const char *, const int *, const int *, void *, const int *, void *, void *,
                        const int *, void *, const int *, void *, const int *, int *, size_t, size_t);

/* the checks every routine shares: a live handle, its device current, LAPACK loaded */
int begin(const char *call, cusolverDnHandle_t handle, solver_s **hs)
{
  *hs = handle_of(handle);
  if (!*hs) return misuse(ST_NOT_INITIALIZED, "%s: %p is not a live handle", call, (void *)handle);
  int cur = -1;
  cudaGetDevice(&cur);
  if (cur != (*hs)->dev)
    return misuse(ST_EXECUTION_FAILED, "%s: called with cuda:%d current, the handle is of cuda:%d", call, cur,
                  (*hs)->dev);
  std::call_once(lp_once, lp_load);
  if (!lp.ok) return misuse(ST_INTERNAL_ERROR, "%s: the emulator found no LAPACK (libopenblas.so.0)", call);
  return ST_SUCCESS;
}

/* bytes in device memory of the handle's device (NULL with 0 bytes is fine) */
bool in_dev(const char *call, const char *what, const void *p, size_t bytes, const solver_s *h)
{
  if (bytes == 0) return true;
  if (p && emu_device_range(p, bytes, h->dev)) return true;
  misuse(ST_EXECUTION_FAILED, "%s: %s (%zu bytes) at %p is not in device memory of cuda:%d", call, what, bytes, p,
         h->dev);
  return false;
}
/* a column-major rows x cols matrix with leading dimension ld */
size_t mat_bytes(int rows, int cols, int ld, size_t es)
{
  return rows == 0 || cols == 0 ? 0 : ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * es;
}
void touch(const solver_s *h, const void *p, int write, const char *call)
{
  if (p) emu_access(h->stream, p, write, call);
}

int work_of(double w) { return w < 1 ? 1 : (int)w; }

/* the workspace sizes reported by the queries (elements): LAPACK's optimal ones */
template <typename T> int q_geqrf(int k, int m, int n)
{
  T w = 0;
  int lw = -1, info = 0, ld = m > 1 ? m : 1;
  ((geqrf_f)lp.geqrf[k])(&m, &n, &w, &ld, &w, &w, &lw, &info);
  return work_of((double)w);
}
template <typename T> int q_orgqr(int k, int m, int n, int kk)
{
  T w = 0;
  int lw = -1, info = 0, ld = m > 1 ? m : 1;
  ((orgqr_f)lp.orgqr[k])(&m, &n, &kk, &w, &ld, &w, &w, &lw, &info);
  return work_of((double)w);
}
template <typename T> int q_syevd(int k, int jobz, int uplo, int n, int *liwork)
{
  T w = 0;
  int lw = -1, liw = -1, iw = 0, info = 0, ld = n > 1 ? n : 1;
  ((syevd_f)lp.syevd[k])(jobz ? "V" : "N", uplo ? "U" : "L", &n, &w, &ld, &w, &w, &lw, &iw, &liw, &info, 1, 1);
  if (liwork) *liwork = iw > 1 ? iw : 1;
  return work_of((double)w);
}
template <typename T> int q_gesvd(int k, int m, int n)
{
  T w = 0;
  int lw = -1, info = 0, ld = m > 1 ? m : 1, ldv = n > 1 ? n : 1;
  ((gesvd_f)lp.gesvd[k])("A", "A", &m, &n, &w, &ld, &w, &w, &ld, &w, &ldv, &w, &lw, &info, 1, 1);
  return work_of((double)w);
}

template <typename T> int kind() { return sizeof(T) == 8 ? 1 : 0; }

template <typename T>
int getrf_bs(const char *call, cusolverDnHandle_t handle, int m, int n, int lda, int *lwork)
{
  solver_s *h;
  int s = begin(call, handle, &h);
  if (s) return s;
  if (m < 0 || n < 0 || lda < (m > 1 ? m : 1) || !lwork)
    return misuse(ST_INVALID_VALUE, "%s: m=%d n=%d lda=%d", call, m, n, lda);
  *lwork = n > 1 ? n : 1; /* getrf needs none: a token amount, checked at the call */
  return ST_SUCCESS;
}

template <typename T>
int getrf(const char *call, cusolverDnHandle_t handle, int m, int n, T *A, int lda, T *work, int *ipiv, int *info)
{
  solver_s *h;
  int s = begin(call, handle, &h);
  if (s) return s;
  if (m < 0 || n < 0 || lda < (m > 1 ? m : 1)) return misuse(ST_INVALID_VALUE, "%s: m=%d n=%d lda=%d", call, m, n, lda);
  int k = m < n ? m : n;
  if (!in_dev(call, "A", A, mat_bytes(m, n, lda, sizeof(T)), h) || !in_dev(call, "Workspace", work, (size_t)(n > 1 ? n : 1) * sizeof(T), h) ||
      !in_dev(call, "devIpiv", ipiv, (size_t)k * 4, h) || !in_dev(call, "devInfo", info, 4, h))
    return ST_EXECUTION_FAILED;
  emu_op(h->stream);
  touch(h, A, 1, call); touch(h, ipiv, 1, call); touch(h, info, 1, call);
  *info = 0;
  if (k > 0) ((getrf_f)lp.getrf[kind<T>()])(&m, &n, A, &lda, ipiv, info);
  return ST_SUCCESS;
}

template <typename T>
int getrs(const char *call, cusolverDnHandle_t handle, int trans, int n, int nrhs, const T *A, int lda, const int *ipiv,
          T *B, int ldb, int *info)
{
  solver_s *h;
  int s = begin(call, handle, &h);
  if (s) return s;
  if ((trans != 0 && trans != 1 && trans != 2) || n < 0 || nrhs < 0 || lda < (n > 1 ? n : 1) || ldb < (n > 1 ? n : 1))
    return misuse(ST_INVALID_VALUE, "%s: trans=%d n=%d nrhs=%d lda=%d ldb=%d", call, trans, n, nrhs, lda, ldb);
  if (!in_dev(call, "A", A, mat_bytes(n, n, lda, sizeof(T)), h) || !in_dev(call, "devIpiv", ipiv, (size_t)n * 4, h) ||
      !in_dev(call, "B", B, mat_bytes(n, nrhs, ldb, sizeof(T)), h) || !in_dev(call, "devInfo", info, 4, h))
    return ST_EXECUTION_FAILED;
  emu_op(h->stream);
  touch(h, A, 0, call); touch(h, ipiv, 0, call); touch(h, B, 1, call); touch(h, info, 1, call);
  *info = 0;
  if (n > 0 && nrhs > 0)
    ((getrs_f)lp.getrs[kind<T>()])(trans ? "T" : "N", &n, &nrhs, A, &lda, ipiv, B, &ldb, info, 1);
  return ST_SUCCESS;
}

template <typename T> int potrf_bs(const char *call, cusolverDnHandle_t handle, int uplo, int n, int lda, int *lwork)
{
  solver_s *h;
  int s = begin(call, handle, &h);
  if (s) return s;
  if ((uplo != 0 && uplo != 1) || n < 0 || lda < (n > 1 ? n : 1) || !lwork)
    return misuse(ST_INVALID_VALUE, "%s: uplo=%d n=%d lda=%d", call, uplo, n, lda);
  *lwork = n > 1 ? n : 1;
  return ST_SUCCESS;
}

template <typename T>
int potrf(const char *call, cusolverDnHandle_t handle, int uplo, int n, T *A, int lda, T *work, int lwork, int *info)
{
  solver_s *h;
  int s = begin(call, handle, &h);
  if (s) return s;
  if ((uplo != 0 && uplo != 1) || n < 0 || lda < (n > 1 ? n : 1) || lwork < 1)
    return misuse(ST_INVALID_VALUE, "%s: uplo=%d n=%d lda=%d lwork=%d", call, uplo, n, lda, lwork);
  if (!in_dev(call, "A", A, mat_bytes(n, n, lda, sizeof(T)), h) || !in_dev(call, "Workspace", work, (size_t)lwork * sizeof(T), h) ||
      !in_dev(call, "devInfo", info, 4, h))
    return ST_EXECUTION_FAILED;
  emu_op(h->stream);
  touch(h, A, 1, call); touch(h, info, 1, call);
  *info = 0;
  if (n > 0) ((potrf_f)lp.potrf[kind<T>()])(uplo ? "U" : "L", &n, A, &lda, info, 1);
  return ST_SUCCESS;
}

template <typename T> int geqrf_bs(const char *call, cusolverDnHandle_t handle, int m, int n, int lda, int *lwork)
{
  solver_s *h;
  int s = begin(call, handle, &h);
  if (s) return s;
  if (m < 0 || n < 0 || lda < (m > 1 ? m : 1) || !lwork) return misuse(ST_INVALID_VALUE, "%s: m=%d n=%d lda=%d", call, m, n, lda);
  *lwork = m > 0 && n > 0 ? q_geqrf<T>(kind<T>(), m, n) : 1;
  return ST_SUCCESS;
}

template <typename T>
int geqrf(const char *call, cusolverDnHandle_t handle, int m, int n, T *A, int lda, T *tau, T *work, int lwork, int *info)
{
  solver_s *h;
  int s = begin(call, handle, &h);
  if (s) return s;
  int k = m < n ? m : n;
  if (m < 0 || n < 0 || lda < (m > 1 ? m : 1) || lwork < 1)
    return misuse(ST_INVALID_VALUE, "%s: m=%d n=%d lda=%d lwork=%d", call, m, n, lda, lwork);
  if (!in_dev(call, "A", A, mat_bytes(m, n, lda, sizeof(T)), h) || !in_dev(call, "TAU", tau, (size_t)k * sizeof(T), h) ||
      !in_dev(call, "Workspace", work, (size_t)lwork * sizeof(T), h) || !in_dev(call, "devInfo", info, 4, h))
    return ST_EXECUTION_FAILED;
  emu_op(h->stream);
  touch(h, A, 1, call); touch(h, tau, 1, call); touch(h, info, 1, call);
  *info = 0;
  if (k > 0) ((geqrf_f)lp.geqrf[kind<T>()])(&m, &n, A, &lda, tau, work, &lwork, info);
  return ST_SUCCESS;
}

template <typename T>
int orgqr_bs(const char *call, cusolverDnHandle_t handle, int m, int n, int k, int lda, int *lwork)
{
  solver_s *h;
  int s = begin(call, handle, &h);
  if (s) return s;
  if (m < 0 || n < 0 || n > m || k < 0 || k > n || lda < (m > 1 ? m : 1) || !lwork)
    return misuse(ST_INVALID_VALUE, "%s: m=%d n=%d k=%d lda=%d", call, m, n, k, lda);
  *lwork = n > 0 ? q_orgqr<T>(kind<T>(), m, n, k) : 1;
  return ST_SUCCESS;
}

template <typename T>
int orgqr(const char *call, cusolverDnHandle_t handle, int m, int n, int k, T *A, int lda, const T *tau, T *work,
          int lwork, int *info)
{
  solver_s *h;
  int s = begin(call, handle, &h);
  if (s) return s;
  if (m < 0 || n < 0 || n > m || k < 0 || k > n || lda < (m > 1 ? m : 1) || lwork < 1)
    return misuse(ST_INVALID_VALUE, "%s: m=%d n=%d k=%d lda=%d lwork=%d", call, m, n, k, lda, lwork);
  if (!in_dev(call, "A", A, mat_bytes(m, n, lda, sizeof(T)), h) || !in_dev(call, "tau", tau, (size_t)k * sizeof(T), h) ||
      !in_dev(call, "work", work, (size_t)lwork * sizeof(T), h) || !in_dev(call, "devInfo", info, 4, h))
    return ST_EXECUTION_FAILED;
  emu_op(h->stream);
  touch(h, A, 1, call); touch(h, tau, 0, call); touch(h, info, 1, call);
  *info = 0;
  if (n > 0) ((orgqr_f)lp.orgqr[kind<T>()])(&m, &n, &k, A, &lda, tau, work, &lwork, info);
  return ST_SUCCESS;
}

template <typename T>
int syevd_bs(const char *call, cusolverDnHandle_t handle, int jobz, int uplo, int n, int lda, int *lwork)
{
  solver_s *h;
  int s = begin(call, handle, &h);
  if (s) return s;
  if ((jobz != 0 && jobz != 1) || (uplo != 0 && uplo != 1) || n < 0 || lda < (n > 1 ? n : 1) || !lwork)
    return misuse(ST_INVALID_VALUE, "%s: jobz=%d uplo=%d n=%d lda=%d", call, jobz, uplo, n, lda);
  *lwork = n > 0 ? q_syevd<T>(kind<T>(), jobz, uplo, n, nullptr) : 1;
  return ST_SUCCESS;
}

template <typename T>
int syevd(const char *call, cusolverDnHandle_t handle, int jobz, int uplo, int n, T *A, int lda, T *W, T *work,
          int lwork, int *info)
{
  solver_s *h;
  int s = begin(call, handle, &h);
  if (s) return s;
  if ((jobz != 0 && jobz != 1) || (uplo != 0 && uplo != 1) || n < 0 || lda < (n > 1 ? n : 1) || lwork < 1)
    return misuse(ST_INVALID_VALUE, "%s: jobz=%d uplo=%d n=%d lda=%d lwork=%d", call, jobz, uplo, n, lda, lwork);
  if (!in_dev(call, "A", A, mat_bytes(n, n, lda, sizeof(T)), h) || !in_dev(call, "W", W, (size_t)n * sizeof(T), h) ||
      !in_dev(call, "work", work, (size_t)lwork * sizeof(T), h) || !in_dev(call, "devInfo", info, 4, h))
    return ST_EXECUTION_FAILED;
  emu_op(h->stream);
  touch(h, A, 1, call); touch(h, W, 1, call); touch(h, info, 1, call);
  *info = 0;
  if (n == 0) return ST_SUCCESS;
  int liwork = 1;
  int need = q_syevd<T>(kind<T>(), jobz, uplo, n, &liwork);
  if (lwork < need) return misuse(ST_INVALID_VALUE, "%s: lwork=%d, the query said %d", call, lwork, need);
  std::vector<int> iwork((size_t)liwork); /* (cuSOLVER keeps its integer work inside) */
  ((syevd_f)lp.syevd[kind<T>()])(jobz ? "V" : "N", uplo ? "U" : "L", &n, A, &lda, W, work, &lwork, iwork.data(), &liwork,
                                 info, 1, 1);
  return ST_SUCCESS;
}

template <typename T> int gesvd_bs(const char *call, cusolverDnHandle_t handle, int m, int n, int *lwork)
{
  solver_s *h;
  int s = begin(call, handle, &h);
  if (s) return s;
  if (m < 0 || n < 0 || !lwork) return misuse(ST_INVALID_VALUE, "%s: m=%d n=%d", call, m, n);
  *lwork = m > 0 && n > 0 ? q_gesvd<T>(kind<T>(), m, n) : 1;
  return ST_SUCCESS;
}

template <typename T>
int gesvd(const char *call, cusolverDnHandle_t handle, signed char jobu, signed char jobvt, int m, int n, T *A, int lda,
          T *S, T *U, int ldu, T *VT, int ldvt, T *work, int lwork, T *rwork, int *info)
{
  solver_s *h;
  int s = begin(call, handle, &h);
  if (s) return s;
  auto job_ok = [](signed char j) { return j == 'A' || j == 'S' || j == 'O' || j == 'N'; };
  if (!job_ok(jobu) || !job_ok(jobvt) || (jobu == 'O' && jobvt == 'O'))
    return misuse(ST_INVALID_VALUE, "%s: jobu=%c jobvt=%c", call, jobu, jobvt);
  if (m < n) return misuse(ST_INVALID_VALUE, "%s: m=%d < n=%d (cuSOLVER's gesvd supports m >= n only)", call, m, n);
  int ucols = jobu == 'A' ? m : jobu == 'S' ? n : 0, vrows = jobvt == 'A' || jobvt == 'S' ? n : 0;
  if (n < 0 || lda < (m > 1 ? m : 1) || (ucols && ldu < (m > 1 ? m : 1)) || (vrows && ldvt < (n > 1 ? n : 1)) ||
      lwork < 1)
    return misuse(ST_INVALID_VALUE, "%s: m=%d n=%d lda=%d ldu=%d ldvt=%d lwork=%d", call, m, n, lda, ldu, ldvt, lwork);
  if (!in_dev(call, "A", A, mat_bytes(m, n, lda, sizeof(T)), h) || !in_dev(call, "S", S, (size_t)n * sizeof(T), h) ||
      !in_dev(call, "U", U, mat_bytes(m, ucols, ldu, sizeof(T)), h) ||
      !in_dev(call, "VT", VT, mat_bytes(vrows, n, ldvt, sizeof(T)), h) ||
      !in_dev(call, "work", work, (size_t)lwork * sizeof(T), h) ||
      (rwork && !in_dev(call, "rwork", rwork, (size_t)(n > 1 ? n - 1 : 1) * sizeof(T), h)) ||
      !in_dev(call, "devInfo", info, 4, h))
    return ST_EXECUTION_FAILED;
  emu_op(h->stream);
  touch(h, A, 1, call); touch(h, S, 1, call); touch(h, info, 1, call);
  if (ucols) touch(h, U, 1, call);
  if (vrows) touch(h, VT, 1, call);
  *info = 0;
  if (m == 0 || n == 0) return ST_SUCCESS;
  int need = q_gesvd<T>(kind<T>(), m, n);
  if (lwork < need) return misuse(ST_INVALID_VALUE, "%s: lwork=%d, the query said %d", call, lwork, need);
  char ju[2] = {(char)jobu, 0}, jv[2] = {(char)jobvt, 0};
  int ldu1 = ldu > 0 ? ldu : 1, ldv1 = ldvt > 0 ? ldvt : 1;
  T dummy[1];
  ((gesvd_f)lp.gesvd[kind<T>()])(ju, jv, &m, &n, A, &lda, S, ucols ? U : dummy, &ldu1, vrows ? VT : dummy, &ldv1, work,
                                 &lwork, info, 1, 1);
  return ST_SUCCESS;
}

} // namespace

extern "C" {
cusolverStatus_t cusolverDnCreate(cusolverDnHandle_t *handle)
{
  if (!handle) return ST_INVALID_VALUE;
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaSetDevice(dev) != cudaSuccess) {
    cudaGetLastError();
    return ST_NOT_INITIALIZED;
  }
  solver_s *h = new solver_s{dev, 0};
  std::lock_guard<std::mutex> g(mu);
  handles.insert(h);
  *handle = (cusolverDnHandle_t)h;
  return ST_SUCCESS;
}

cusolverStatus_t cusolverDnDestroy(cusolverDnHandle_t handle)
{
  std::unique_lock<std::mutex> g(mu);
  if (!handles.erase(handle)) {
    g.unlock();
    return misuse(ST_NOT_INITIALIZED, "cusolverDnDestroy: %p is not a live handle", (void *)handle);
  }
  g.unlock();
  delete (solver_s *)handle;
  return ST_SUCCESS;
}

cusolverStatus_t cusolverDnSetStream(cusolverDnHandle_t handle, cudaStream_t s)
{
  solver_s *h = handle_of(handle);
  if (!h) return misuse(ST_NOT_INITIALIZED, "cusolverDnSetStream: %p is not a live handle", (void *)handle);
  int sd = emu_stream_device(s);
  if (sd < 0) return misuse(ST_INVALID_VALUE, "cusolverDnSetStream: %p is not a live stream", (void *)s);
  if (s && sd != h->dev)
    return misuse(ST_INVALID_VALUE, "cusolverDnSetStream: a stream of cuda:%d for a handle of cuda:%d", sd, h->dev);
  h->stream = s;
  return ST_SUCCESS;
}

#define EMU_BOTH(P, T)                                                                                                  \
  cusolverStatus_t cusolverDn##P##getrf_bufferSize(cusolverDnHandle_t h, int m, int n, T *, int lda, int *lw)           \
  { return getrf_bs<T>("cusolverDn" #P "getrf_bufferSize", h, m, n, lda, lw); }                                        \
  cusolverStatus_t cusolverDn##P##getrf(cusolverDnHandle_t h, int m, int n, T *A, int lda, T *w, int *ipiv, int *info)  \
  { return getrf<T>("cusolverDn" #P "getrf", h, m, n, A, lda, w, ipiv, info); }                                         \
  cusolverStatus_t cusolverDn##P##getrs(cusolverDnHandle_t h, int tr, int n, int nrhs, const T *A, int lda,             \
                                        const int *ipiv, T *B, int ldb, int *info)                                      \
  { return getrs<T>("cusolverDn" #P "getrs", h, tr, n, nrhs, A, lda, ipiv, B, ldb, info); }                            \
  cusolverStatus_t cusolverDn##P##potrf_bufferSize(cusolverDnHandle_t h, int uplo, int n, T *, int lda, int *lw)        \
  { return potrf_bs<T>("cusolverDn" #P "potrf_bufferSize", h, uplo, n, lda, lw); }                                     \
  cusolverStatus_t cusolverDn##P##potrf(cusolverDnHandle_t h, int uplo, int n, T *A, int lda, T *w, int lw, int *info)  \
  { return potrf<T>("cusolverDn" #P "potrf", h, uplo, n, A, lda, w, lw, info); }                                        \
  cusolverStatus_t cusolverDn##P##geqrf_bufferSize(cusolverDnHandle_t h, int m, int n, T *, int lda, int *lw)           \
  { return geqrf_bs<T>("cusolverDn" #P "geqrf_bufferSize", h, m, n, lda, lw); }                                        \
  cusolverStatus_t cusolverDn##P##geqrf(cusolverDnHandle_t h, int m, int n, T *A, int lda, T *tau, T *w, int lw,        \
                                        int *info)                                                                      \
  { return geqrf<T>("cusolverDn" #P "geqrf", h, m, n, A, lda, tau, w, lw, info); }                                      \
  cusolverStatus_t cusolverDn##P##orgqr_bufferSize(cusolverDnHandle_t h, int m, int n, int k, const T *, int lda,       \
                                                   const T *, int *lw)                                                  \
  { return orgqr_bs<T>("cusolverDn" #P "orgqr_bufferSize", h, m, n, k, lda, lw); }                                     \
  cusolverStatus_t cusolverDn##P##orgqr(cusolverDnHandle_t h, int m, int n, int k, T *A, int lda, const T *tau, T *w,   \
                                        int lw, int *info)                                                              \
  { return orgqr<T>("cusolverDn" #P "orgqr", h, m, n, k, A, lda, tau, w, lw, info); }                                   \
  cusolverStatus_t cusolverDn##P##syevd_bufferSize(cusolverDnHandle_t h, int jobz, int uplo, int n, const T *, int lda, \
                                                   const T *, int *lw)                                                  \
  { return syevd_bs<T>("cusolverDn" #P "syevd_bufferSize", h, jobz, uplo, n, lda, lw); }                               \
  cusolverStatus_t cusolverDn##P##syevd(cusolverDnHandle_t h, int jobz, int uplo, int n, T *A, int lda, T *W, T *w,     \
                                        int lw, int *info)                                                              \
  { return syevd<T>("cusolverDn" #P "syevd", h, jobz, uplo, n, A, lda, W, w, lw, info); }                               \
  cusolverStatus_t cusolverDn##P##gesvd_bufferSize(cusolverDnHandle_t h, int m, int n, int *lw)                        \
  { return gesvd_bs<T>("cusolverDn" #P "gesvd_bufferSize", h, m, n, lw); }                                             \
  cusolverStatus_t cusolverDn##P##gesvd(cusolverDnHandle_t h, signed char ju, signed char jv, int m, int n, T *A,       \
                                        int lda, T *S, T *U, int ldu, T *VT, int ldvt, T *w, int lw, T *rw, int *info) \
  { return gesvd<T>("cusolverDn" #P "gesvd", h, ju, jv, m, n, A, lda, S, U, ldu, VT, ldvt, w, lw, rw, info); }

EMU_BOTH(S, float)
EMU_BOTH(D, double)
#undef EMU_BOTH
}
