/* dpl_comm_kernels.c: the elementwise reductions behind all_reduce, reduce and
 * reduce_scatter, for every dtype: dst = s0 op s1 op ... over sources given in
 * rank order, so every rank that reduces the same data gets bitwise the same
 * result. float16/bfloat16 accumulate in float32 and round once (to nearest
 * even); AVG is the sum divided by the group size; BOOL: SUM/MAX = or,
 * PROD/MIN = and. Loops are plain, restrict-qualified, for the vectorizer. */
#if defined(__GNUC__) && !defined(__clang__)
/* -O2 of GCC 12 only vectorizes loops with known trip counts; these are the hot loops */
#pragma GCC optimize("O3")
#endif
#include "dpl_comm_internal.h"
#include <math.h>
#include <string.h>

int64_t dpl_comm_dtype_size(int32_t dtype)
{
  static const int64_t sz[] = { 4, 8, 2, 2, 4, 8, 1, 1 };
  return (dtype >= 0 && dtype < 8) ? sz[dtype] : 0;
}

const char *dpl_comm_dtype_name(int32_t dtype)
{
  static const char *nm[] = { "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "bool" };
  return (dtype >= 0 && dtype < 8) ? nm[dtype] : "?";
}

int dpl_comm_op_valid(int32_t op, int32_t dtype)
{
  if (op < DPL_COMM_SUM || op > DPL_COMM_PROD)
    return dpl_errorf(DPL_EINVAL, "dist: unknown reduce op %d (sum, mean/avg, max, min, prod)", op);
  if (dpl_comm_dtype_size(dtype) == 0) return dpl_errorf(DPL_EINVAL, "dist: unknown dtype %d", dtype);
  if (op == DPL_COMM_AVG && dtype >= DPL_INT32)
    return dpl_errorf(DPL_EINVAL, "dist: op 'mean' needs a floating dtype, got %s", dpl_comm_dtype_name(dtype));
  return DPL_OK;
}

/* ---- half types ---- */
static inline float h2f(uint16_t h)
{
  uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, f;
  if (e == 0) {
    if (m == 0) f = s;
    else { /* subnormal */
      float v = (float)m * (1.0f / 16777216.0f);
      return s ? -v : v;
    }
  } else if (e == 31) f = s | 0x7f800000u | (m << 13);
  else f = s | ((e + 112) << 23) | (m << 13);
  float out;
  memcpy(&out, &f, 4);
  return out;
}

static inline uint16_t f2h(float x)
{
  uint32_t f;
  memcpy(&f, &x, 4);
  uint32_t s = (f >> 16) & 0x8000;
  uint32_t a = f & 0x7fffffffu;
  if (a >= 0x7f800000u) return (uint16_t)(s | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0));
  if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00); /* overflow to inf */
  if (a < 0x38800000u) { /* subnormal or zero: round x * 2^24 */
    float v;
    memcpy(&v, &a, 4);
    v = v * 16777216.0f;
    uint32_t m = (uint32_t)lrintf(v);
    return (uint16_t)(s | m);
  }
  uint32_t r = a + 0xfff + ((a >> 13) & 1); /* round to nearest even */
  return (uint16_t)(s | ((r - 0x38000000u) >> 13));
}

static inline float bf2f(uint16_t h)
{
  uint32_t f = (uint32_t)h << 16;
  float out;
  memcpy(&out, &f, 4);
  return out;
}

static inline uint16_t f2bf(float x)
{
  uint32_t f;
  memcpy(&f, &x, 4);
  if ((f & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((f >> 16) | 0x40);
  f += 0x7fff + ((f >> 16) & 1);
  return (uint16_t)(f >> 16);
}

/* ---- typed loops ---- */
#define BIN_LOOP(T, EXPR)                                                              \
  do {                                                                                 \
    T *restrict d_ = (T *)dst;                                                         \
    const T *restrict a_ = (const T *)a;                                               \
    const T *restrict b_ = (const T *)b;                                               \
    for (int64_t i = 0; i < n; i++) { T x = a_[i], y = b_[i]; d_[i] = (EXPR); }        \
  } while (0)

#define OPS_FOR(T, U, NANX)                                                               \
  switch (op) {                                                                        \
  case DPL_COMM_SUM: case DPL_COMM_AVG: BIN_LOOP(T, (T)((U)x + (U)y)); break;                \
  case DPL_COMM_PROD: BIN_LOOP(T, (T)((U)x * (U)y)); break;                                  \
  case DPL_COMM_MAX: BIN_LOOP(T, (x > y || NANX) ? x : y); break;                      \
  default: BIN_LOOP(T, (x < y || NANX) ? x : y); break;                                \
  }

/* dst = a op b for the non-half types; dst may equal a (not b unless a == b). */
static void bin_op(void *dst, const void *a, const void *b, int64_t n, int32_t dtype, int32_t op)
{
  if (dst != a && dst == b) { const void *t = a; a = b; b = t; } /* every op here commutes */
  if (dst == a) {
    /* restrict would be violated: use an aliasing-safe loop */
#define INPLACE(T, EXPR) do { T *d_ = (T *)dst; const T *restrict b_ = (const T *)b; \
      for (int64_t i = 0; i < n; i++) { T x = d_[i], y = b_[i]; d_[i] = (EXPR); } } while (0)
#define OPS_IN(T, U, NANX) switch (op) { \
  case DPL_COMM_SUM: case DPL_COMM_AVG: INPLACE(T, (T)((U)x + (U)y)); break; \
  case DPL_COMM_PROD: INPLACE(T, (T)((U)x * (U)y)); break; \
  case DPL_COMM_MAX: INPLACE(T, (x > y || NANX) ? x : y); break; \
  default: INPLACE(T, (x < y || NANX) ? x : y); break; }
    switch (dtype) {
    case DPL_FLOAT32: OPS_IN(float, float, isnan(x)); break;
    case DPL_FLOAT64: OPS_IN(double, double, isnan(x)); break;
    case DPL_INT32: OPS_IN(int32_t, uint32_t, 0); break;
    case DPL_INT64: OPS_IN(int64_t, uint64_t, 0); break;
    case DPL_UINT8: OPS_IN(uint8_t, uint32_t, 0); break;
    default: { /* bool: or / and */
      uint8_t *d_ = (uint8_t *)dst;
      const uint8_t *b_ = (const uint8_t *)b;
      int orop = (op == DPL_COMM_SUM || op == DPL_COMM_MAX || op == DPL_COMM_AVG);
      for (int64_t i = 0; i < n; i++) d_[i] = orop ? (uint8_t)((d_[i] | b_[i]) != 0) : (uint8_t)(d_[i] && b_[i]);
    }
    }
    return;
  }
  switch (dtype) {
  case DPL_FLOAT32: OPS_FOR(float, float, isnan(x)); break;
  case DPL_FLOAT64: OPS_FOR(double, double, isnan(x)); break;
  case DPL_INT32: OPS_FOR(int32_t, uint32_t, 0); break;
  case DPL_INT64: OPS_FOR(int64_t, uint64_t, 0); break;
  case DPL_UINT8: OPS_FOR(uint8_t, uint32_t, 0); break;
  default: {
    uint8_t *d_ = (uint8_t *)dst;
    const uint8_t *a_ = (const uint8_t *)a, *b_ = (const uint8_t *)b;
    int orop = (op == DPL_COMM_SUM || op == DPL_COMM_MAX || op == DPL_COMM_AVG);
    for (int64_t i = 0; i < n; i++) d_[i] = orop ? (uint8_t)((a_[i] | b_[i]) != 0) : (uint8_t)(a_[i] && b_[i]);
  }
  }
}

static inline float fop(float x, float y, int32_t op)
{
  switch (op) {
  case DPL_COMM_PROD: return x * y;
  case DPL_COMM_MAX: return (x > y || x != x) ? x : y;
  case DPL_COMM_MIN: return (x < y || x != x) ? x : y;
  default: return x + y;
  }
}

int dpl_comm_reduce_n(void *dst, const void *const *srcs, int32_t nsrc, int64_t n, int32_t dtype,
                      int32_t op, int32_t avg_div)
{
  if (n <= 0) return DPL_OK;
  int64_t es = dpl_comm_dtype_size(dtype);
  if (dtype == DPL_FLOAT16 || dtype == DPL_BFLOAT16) {
    enum { B = 512 };
    float acc[B];
    int half = dtype == DPL_FLOAT16;
    for (int64_t o = 0; o < n; o += B) {
      int64_t m = n - o < B ? n - o : B;
      const uint16_t *s0 = (const uint16_t *)srcs[0] + o;
      for (int64_t i = 0; i < m; i++) acc[i] = half ? h2f(s0[i]) : bf2f(s0[i]);
      for (int32_t k = 1; k < nsrc; k++) {
        const uint16_t *sk = (const uint16_t *)srcs[k] + o;
        for (int64_t i = 0; i < m; i++) acc[i] = fop(acc[i], half ? h2f(sk[i]) : bf2f(sk[i]), op);
      }
      if (op == DPL_COMM_AVG && avg_div > 1)
        for (int64_t i = 0; i < m; i++) acc[i] /= (float)avg_div;
      uint16_t *d = (uint16_t *)dst + o;
      for (int64_t i = 0; i < m; i++) d[i] = half ? f2h(acc[i]) : f2bf(acc[i]);
    }
    return DPL_OK;
  }
  if (dtype == DPL_FLOAT32 && (op == DPL_COMM_SUM || op == DPL_COMM_AVG) && nsrc >= 2) {
    /* the gradient path: sum and scale in one pass (a power-of-two group size
     * scales by its exact reciprocal, others divide, as the separate pass did) */
    float *d = dst, q = op == DPL_COMM_AVG && avg_div > 1 ? (float)avg_div : 1.0f;
    const float *a = srcs[0], *b = srcs[1];
    int pow2 = (avg_div & (avg_div - 1)) == 0;
    if (nsrc == 2 && q != 1.0f && pow2) {
      float r = 1.0f / q;
      for (int64_t i = 0; i < n; i++) d[i] = (a[i] + b[i]) * r;
    } else if (nsrc == 2 && q != 1.0f) {
      for (int64_t i = 0; i < n; i++) d[i] = (a[i] + b[i]) / q;
    } else {
      bin_op(dst, srcs[0], srcs[1], n, dtype, DPL_COMM_SUM);
      for (int32_t k = 2; k < nsrc; k++) bin_op(dst, dst, srcs[k], n, dtype, DPL_COMM_SUM);
      if (q != 1.0f) for (int64_t i = 0; i < n; i++) d[i] /= q;
    }
    return DPL_OK;
  }
  if (nsrc == 1) {
    if (dst != srcs[0]) memcpy(dst, srcs[0], (size_t)(n * es));
  } else {
    bin_op(dst, srcs[0], srcs[1], n, dtype, op);
    for (int32_t k = 2; k < nsrc; k++) bin_op(dst, dst, srcs[k], n, dtype, op);
  }
  if (op == DPL_COMM_AVG && avg_div > 1) {
    if (dtype == DPL_FLOAT32) {
      float *d = (float *)dst, q = (float)avg_div;
      for (int64_t i = 0; i < n; i++) d[i] /= q;
    } else if (dtype == DPL_FLOAT64) {
      double *d = (double *)dst, q = (double)avg_div;
      for (int64_t i = 0; i < n; i++) d[i] /= q;
    }
  }
  return DPL_OK;
}

int dpl_comm_reduce_local(void *dst, const void *src, int64_t count, int32_t dtype, int32_t op)
{
  int st = dpl_comm_op_valid(op == DPL_COMM_AVG ? DPL_COMM_SUM : op, dtype);
  if (st) return st;
  if (count < 0) return dpl_errorf(DPL_EINVAL, "dist: count must be >= 0, got %lld", (long long)count);
  if (count > 0 && (!dst || !src)) return dpl_errorf(DPL_EINVAL, "dist: NULL buffer");
  const void *srcs[2] = { dst, src };
  return dpl_comm_reduce_n(dst, srcs, 2, count, dtype, op == DPL_COMM_AVG ? DPL_COMM_SUM : op, 1);
}

void dpl_comm_half_to_f32(float *dst, const void *src, int64_t n, int32_t dtype)
{
  const uint16_t *h = src;
  if (dtype == DPL_BFLOAT16) for (int64_t i = 0; i < n; i++) dst[i] = bf2f(h[i]);
  else for (int64_t i = 0; i < n; i++) dst[i] = h2f(h[i]);
}

void dpl_comm_f32_to_half(void *dst, const float *src, int64_t n, int32_t dtype)
{
  uint16_t *h = dst;
  if (dtype == DPL_BFLOAT16) for (int64_t i = 0; i < n; i++) h[i] = f2bf(src[i]);
  else for (int64_t i = 0; i < n; i++) h[i] = f2h(src[i]);
}
