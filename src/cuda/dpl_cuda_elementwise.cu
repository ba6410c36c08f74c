/* dpl_cuda_elementwise.cu: the plugin's elementwise kernels over strided,
 * broadcast operands (dpl_cu_geom): copy with dtype conversion, fill, binary
 * arithmetic/comparisons, unary math, activation gradients, clamp, where,
 * masked_fill and axpy. Each computes exactly what the CPU loops of
 * dpl_tensor_elementwise.c / dpl_tensor_copy.c compute, in the same kernel
 * dtype (float32, float64, int32, int64, uint8). */
#include "dpl_cuda_common.cuh"
#include <math.h>
#include <string.h>

using namespace dplcu;

namespace {

/* ---- copy / fill ---- */
template <bool CONTIG>
__global__ void k_copy_same(dpl_cu_geom g, char *dst, const char *src, int es)
{
  DPL_GRID_STRIDE(i, g.numel)
  {
    int64_t o[2];
    if (CONTIG) o[0] = o[1] = i;
    else offsets<2>(g, i, o);
    char *d = dst + o[0] * es;
    const char *s = src + o[1] * es;
    switch (es) {
    case 1: *(uint8_t *)d = *(const uint8_t *)s; break;
    case 2: *(uint16_t *)d = *(const uint16_t *)s; break;
    case 4: *(uint32_t *)d = *(const uint32_t *)s; break;
    default: *(uint64_t *)d = *(const uint64_t *)s; break;
    }
  }
}

__device__ __forceinline__ bool is_int(int dt) { return dt >= I32; }

__global__ void k_copy_conv(dpl_cu_geom g, char *dst, int ddt, const char *src, int sdt)
{
  int des = elsize(ddt), ses = elsize(sdt);
  DPL_GRID_STRIDE(i, g.numel)
  {
    int64_t o[2];
    offsets<2>(g, i, o);
    char *d = dst + o[0] * des;
    const char *s = src + o[1] * ses;
    if (ddt == F32 && sdt == I64) *(float *)d = (float)*(const int64_t *)s; /* one rounding, as the CPU */
    else if (is_int(ddt) && is_int(sdt)) st_i64(d, ddt, ld_i64(s, sdt));
    else if (sdt == I64) st_f64(d, ddt, (double)*(const int64_t *)s);
    else st_f64(d, ddt, ld_f64(s, sdt));
  }
}

template <typename T>
__global__ void k_fill(dpl_cu_geom g, T *dst, T v)
{
  DPL_GRID_STRIDE(i, g.numel)
  {
    int64_t o[1];
    offsets<1>(g, i, o);
    dst[o[0]] = v;
  }
}

/* ---- binary ---- */
enum { ADD = 0, SUB = 1, MUL = 2, DIV = 3, POW = 4, MAXIMUM = 5, MINIMUM = 6, REMAINDER = 7, ATAN2 = 8, FMOD = 9,
       GCD = 10, LCM = 11, SHL = 12, SHR = 13, EQ = 16, NE = 17,
       LT = 18, LE = 19, GT = 20, GE = 21, LAND = 24, LOR = 25, LXOR = 26, BAND = 27, BOR = 28, BXOR = 29 };
/* comparisons and logical ops write bool; the bitwise ops (integer dtypes only) keep the dtype */
__host__ __device__ __forceinline__ bool is_cmp(int op) { return op >= EQ && op <= LXOR; }

__device__ __forceinline__ double py_fmod(double x, double y)
{
  double r = fmod(x, y);
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return r;
}
__device__ __forceinline__ int64_t py_imod(int64_t x, int64_t y)
{
  if (y == 0 || y == -1) return 0;
  int64_t r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return r;
}
__device__ __forceinline__ int64_t c_imod(int64_t x, int64_t y) { return (y == 0 || y == -1) ? 0 : x % y; }
__device__ __forceinline__ int64_t ipow(int64_t b, int64_t e)
{
  if (e < 0) return b == 1 ? 1 : b == -1 ? ((e & 1) ? -1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)b;
  while (e) {
    if (e & 1) r *= x;
    x *= x;
    e >>= 1;
  }
  return (int64_t)r;
}

/* gcd, lcm, shifts in int64 (dpl_tensor_elementwise.c's rules; the caller truncates to the dtype) */
__device__ __forceinline__ uint64_t int_gcd(int64_t x, int64_t y)
{
  uint64_t a = x < 0 ? 0 - (uint64_t)x : (uint64_t)x, b = y < 0 ? 0 - (uint64_t)y : (uint64_t)y;
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}
__device__ __forceinline__ int64_t int_lcm(int64_t x, int64_t y)
{
  uint64_t g = int_gcd(x, y);
  if (g == 0) return 0;
  int64_t v = (int64_t)((uint64_t)(x / (int64_t)g) * (uint64_t)y);
  return v < 0 ? (int64_t)(0 - (uint64_t)v) : v;
}
__device__ __forceinline__ int64_t int_shl(int64_t x, int64_t s, int w) { return s < 0 || s >= w ? 0 : (int64_t)((uint64_t)x << s); }
__device__ __forceinline__ int64_t int_shr(int64_t x, int64_t s, int w) { return s < 0 || s >= w ? (x < 0 ? -1 : 0) : x >> s; }

__device__ __forceinline__ float fpow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double fpow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float fatan2(float x, float y) { return atan2f(x, y); }
__device__ __forceinline__ double fatan2(double x, double y) { return atan2(x, y); }

template <typename T>
__device__ __forceinline__ T arith_f(int op, T x, T y)
{
  switch (op) {
  case ADD: return x + y;
  case SUB: return x - y;
  case MUL: return x * y;
  case DIV: return x / y;
  case POW: return fpow(x, y);
  case MAXIMUM: return (x != x || x > y) ? x : y;
  case MINIMUM: return (x != x || x < y) ? x : y;
  case REMAINDER: return (T)py_fmod((double)x, (double)y);
  case FMOD: return (T)fmod((double)x, (double)y);
  default: return fatan2(x, y);
  }
}
template <typename T, typename U>
__device__ __forceinline__ T arith_i(int op, T x, T y)
{
  switch (op) {
  case ADD: return (T)((U)x + (U)y);
  case SUB: return (T)((U)x - (U)y);
  case MUL: return (T)((U)x * (U)y);
  case POW: return (T)ipow(x, y);
  case MAXIMUM: return x > y ? x : y;
  case MINIMUM: return x < y ? x : y;
  case REMAINDER: return (T)py_imod(x, y);
  case FMOD: return (T)c_imod(x, y);
  case BAND: return (T)(x & y);
  case BOR: return (T)(x | y);
  case BXOR: return (T)(x ^ y);
  case GCD: return (T)int_gcd(x, y);
  case LCM: return (T)int_lcm(x, y);
  case SHL: return (T)int_shl(x, y, (int)sizeof(T) * 8);
  case SHR: return (T)int_shr(x, y, (int)sizeof(T) * 8);
  default: return 0; /* div/atan2 run in float (the core converts) */
  }
}
template <typename T>
__device__ __forceinline__ uint8_t compare(int op, T x, T y)
{
  switch (op) {
  case EQ: return x == y;
  case NE: return x != y;
  case LT: return x < y;
  case LE: return x <= y;
  case GT: return x > y;
  case GE: return x >= y;
  case LAND: return (x != 0) && (y != 0);
  case LOR: return (x != 0) || (y != 0);
  default: return (x != 0) != (y != 0);
  }
}

template <typename T> struct Arith;
template <> struct Arith<float> { static __device__ float f(int op, float x, float y) { return arith_f(op, x, y); } };
template <> struct Arith<double> { static __device__ double f(int op, double x, double y) { return arith_f(op, x, y); } };
template <> struct Arith<int32_t> {
  static __device__ int32_t f(int op, int32_t x, int32_t y) { return arith_i<int32_t, uint32_t>(op, x, y); }
};
template <> struct Arith<int64_t> {
  static __device__ int64_t f(int op, int64_t x, int64_t y) { return arith_i<int64_t, uint64_t>(op, x, y); }
};
template <> struct Arith<uint8_t> {
  static __device__ uint8_t f(int op, uint8_t x, uint8_t y) { return arith_i<uint8_t, uint32_t>(op, x, y); }
};

template <typename T> __host__ __device__ T scalar_as(const dpl_cu_scalar &s);
template <> __host__ __device__ float scalar_as<float>(const dpl_cu_scalar &s) { return (float)s.d; }
template <> __host__ __device__ double scalar_as<double>(const dpl_cu_scalar &s) { return s.d; }
template <> __host__ __device__ int32_t scalar_as<int32_t>(const dpl_cu_scalar &s) { return (int32_t)s.i; }
template <> __host__ __device__ int64_t scalar_as<int64_t>(const dpl_cu_scalar &s) { return s.i; }
template <> __host__ __device__ uint8_t scalar_as<uint8_t>(const dpl_cu_scalar &s) { return (uint8_t)s.i; }

template <typename T, bool CONTIG>
__global__ void k_binary(dpl_cu_geom g, int op, void *out, const T *a, dpl_cu_scalar sa, const T *b, dpl_cu_scalar sb)
{
  const bool cmp = is_cmp(op);
  const T av = scalar_as<T>(sa), bv = scalar_as<T>(sb);
  DPL_GRID_STRIDE(i, g.numel)
  {
    int64_t o[3];
    if (CONTIG) o[0] = o[1] = o[2] = i;
    else offsets<3>(g, i, o);
    T x = sa.is_scalar ? av : a[o[1]];
    T y = sb.is_scalar ? bv : b[o[2]];
    if (cmp) ((uint8_t *)out)[o[0]] = compare(op, x, y);
    else ((T *)out)[o[0]] = Arith<T>::f(op, x, y);
  }
}

/* contiguous operands, 16 bytes of T per thread and step (V elements), the tail element-wise */
template <typename T, int V> struct alignas(sizeof(T) * V) VecT { T v[V]; };

template <typename T, typename O>
__global__ void k_binary_vec(int64_t n, int op, O *out, const T *a, dpl_cu_scalar sa, const T *b, dpl_cu_scalar sb)
{
  constexpr int V = 16 / sizeof(T);
  const T av = scalar_as<T>(sa), bv = scalar_as<T>(sb);
  const int64_t nv = n / V;
  DPL_GRID_STRIDE(i, nv)
  {
    VecT<T, V> x, y;
    if (sa.is_scalar) { for (int k = 0; k < V; k++) x.v[k] = av; } else x = ((const VecT<T, V> *)a)[i];
    if (sb.is_scalar) { for (int k = 0; k < V; k++) y.v[k] = bv; } else y = ((const VecT<T, V> *)b)[i];
    VecT<O, V> r;
#pragma unroll
    for (int k = 0; k < V; k++) {
      if (is_cmp(op)) r.v[k] = (O)compare(op, x.v[k], y.v[k]);
      else r.v[k] = (O)Arith<T>::f(op, x.v[k], y.v[k]);
    }
    ((VecT<O, V> *)out)[i] = r;
  }
  for (int64_t i = nv * V + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    T x = sa.is_scalar ? av : a[i], y = sb.is_scalar ? bv : b[i];
    out[i] = is_cmp(op) ? (O)compare(op, x, y) : (O)Arith<T>::f(op, x, y);
  }
}

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

template <typename T>
int launch_binary(const dpl_cu_geom *g, int op, void *out, const void *a, dpl_cu_scalar sa, const void *b,
                  dpl_cu_scalar sb, cudaStream_t s)
{
  unsigned grid = grid_for(g->numel);
  /* contiguous, a scalar operand aside */
  bool contig = g->ndim == 0 || (g->ndim == 1 && g->stride[0][0] == 1 && (sa.is_scalar || g->stride[1][0] == 1) &&
                                 (sb.is_scalar || g->stride[2][0] == 1));
  constexpr int V = 16 / sizeof(T);
  bool cmp = is_cmp(op);
  if (contig && g->numel >= 4096 && (sa.is_scalar || aligned16(a)) && (sb.is_scalar || aligned16(b)) &&
      ((uintptr_t)out % (cmp ? V : 16)) == 0) {
    unsigned vg = grid_for((g->numel + V - 1) / V);
    if (cmp) k_binary_vec<T, uint8_t><<<vg, kThreads, 0, s>>>(g->numel, op, (uint8_t *)out, (const T *)a, sa, (const T *)b, sb);
    else k_binary_vec<T, T><<<vg, kThreads, 0, s>>>(g->numel, op, (T *)out, (const T *)a, sa, (const T *)b, sb);
  } else if (contig)
    k_binary<T, true><<<grid, kThreads, 0, s>>>(*g, op, out, (const T *)a, sa, (const T *)b, sb);
  else
    k_binary<T, false><<<grid, kThreads, 0, s>>>(*g, op, out, (const T *)a, sa, (const T *)b, sb);
  return (int)cudaGetLastError();
}

/* ---- unary ---- */
enum { NEG = 0, ABS = 1, EXP = 2, LOG = 3, SQRT = 4, RSQRT = 5, TANH = 6, SIGMOID = 7, RELU = 8, GELU = 9, SIN = 10,
       COS = 11, FLOOR = 12, CEIL = 13, ROUND = 14, SIGN = 15, RECIPROCAL = 16, SQUARE = 17, LOG1P = 18, EXPM1 = 19,
       LOGICAL_NOT = 20, SILU = 21, ERF = 22, TRUNC = 23, LOG2 = 24, ISNAN = 25, LOG10 = 26, EXP2 = 27, SINH = 28,
       COSH = 29, TAN = 30, ASIN = 31, ACOS = 32, ATAN = 33, ASINH = 34, ACOSH = 35, ATANH = 36, FRAC = 37, ISINF = 38,
       ISFINITE = 39, BITWISE_NOT = 40 };

__device__ __forceinline__ float un_f(int op, float x)
{
  switch (op) {
  case NEG: return -x;
  case ABS: return fabsf(x);
  case EXP: return expf(x);
  case LOG: return logf(x);
  case SQRT: return sqrtf(x);
  case RSQRT: return 1.0f / sqrtf(x);
  case TANH: return tanhf(x);
  case SIGMOID: return 1.0f / (1.0f + expf(-x));
  case RELU: return x < 0 ? 0.0f : x;
  case GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
  case SIN: return sinf(x);
  case COS: return cosf(x);
  case FLOOR: return floorf(x);
  case CEIL: return ceilf(x);
  case ROUND: return rintf(x);
  case TRUNC: return truncf(x);
  case SIGN: return x > 0 ? 1.0f : x < 0 ? -1.0f : 0.0f; // NaN and -0 give 0, as torch.sign
  case RECIPROCAL: return 1.0f / x;
  case SQUARE: return x * x;
  case LOG1P: return log1pf(x);
  case EXPM1: return expm1f(x);
  case SILU: return x / (1.0f + expf(-x));
  case ERF: return erff(x);
  case LOG10: return log10f(x);
  case EXP2: return exp2f(x);
  case SINH: return sinhf(x);
  case COSH: return coshf(x);
  case TAN: return tanf(x);
  case ASIN: return asinf(x);
  case ACOS: return acosf(x);
  case ATAN: return atanf(x);
  case ASINH: return asinhf(x);
  case ACOSH: return acoshf(x);
  case ATANH: return atanhf(x);
  case FRAC: return x - truncf(x);
  default: return log2f(x);
  }
}
__device__ __forceinline__ double un_f(int op, double x)
{
  switch (op) {
  case NEG: return -x;
  case ABS: return fabs(x);
  case EXP: return exp(x);
  case LOG: return log(x);
  case SQRT: return sqrt(x);
  case RSQRT: return 1.0 / sqrt(x);
  case TANH: return tanh(x);
  case SIGMOID: return 1.0 / (1.0 + exp(-x));
  case RELU: return x < 0 ? 0.0 : x;
  case GELU: return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
  case SIN: return sin(x);
  case COS: return cos(x);
  case FLOOR: return floor(x);
  case CEIL: return ceil(x);
  case ROUND: return rint(x);
  case TRUNC: return trunc(x);
  case SIGN: return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
  case RECIPROCAL: return 1.0 / x;
  case SQUARE: return x * x;
  case LOG1P: return log1p(x);
  case EXPM1: return expm1(x);
  case SILU: return x / (1.0 + exp(-x));
  case ERF: return erf(x);
  case LOG10: return log10(x);
  case EXP2: return exp2(x);
  case SINH: return sinh(x);
  case COSH: return cosh(x);
  case TAN: return tan(x);
  case ASIN: return asin(x);
  case ACOS: return acos(x);
  case ATAN: return atan(x);
  case ASINH: return asinh(x);
  case ACOSH: return acosh(x);
  case ATANH: return atanh(x);
  case FRAC: return x - trunc(x);
  default: return log2(x);
  }
}
template <typename T, typename U>
__device__ __forceinline__ T un_i(int op, T x)
{
  switch (op) {
  case NEG: return (T)(0 - (U)x);
  case ABS: return ((int64_t)x < 0) ? (T)(0 - (U)x) : x;
  case RELU: return x > 0 ? x : 0;
  case SIGN: return x > 0 ? 1 : ((int64_t)x < 0 ? (T)-1 : 0);
  case SQUARE: return (T)((U)x * (U)x);
  case BITWISE_NOT: return (T)~(U)x; /* (bool comes as LOGICAL_NOT) */
  default: return x; /* floor, ceil, round, trunc */
  }
}
template <typename T> struct Un;
template <> struct Un<float> { static __device__ float f(int op, float x) { return un_f(op, x); } };
template <> struct Un<double> { static __device__ double f(int op, double x) { return un_f(op, x); } };
template <> struct Un<int32_t> { static __device__ int32_t f(int op, int32_t x) { return un_i<int32_t, uint32_t>(op, x); } };
template <> struct Un<int64_t> { static __device__ int64_t f(int op, int64_t x) { return un_i<int64_t, uint64_t>(op, x); } };
template <> struct Un<uint8_t> { static __device__ uint8_t f(int op, uint8_t x) { return un_i<uint8_t, uint32_t>(op, x); } };

template <typename T, bool CONTIG>
__global__ void k_unary(dpl_cu_geom g, int op, void *out, const T *a)
{
  DPL_GRID_STRIDE(i, g.numel)
  {
    int64_t o[2];
    if (CONTIG) o[0] = o[1] = i;
    else offsets<2>(g, i, o);
    T x = a[o[1]];
    if (op == LOGICAL_NOT) ((uint8_t *)out)[o[0]] = x == 0;
    else if (op == ISNAN) ((uint8_t *)out)[o[0]] = x != x;
    else if (op == ISINF) ((uint8_t *)out)[o[0]] = isinf((double)x) != 0; /* (integers: never) */
    else if (op == ISFINITE) ((uint8_t *)out)[o[0]] = isfinite((double)x) != 0;
    else ((T *)out)[o[0]] = Un<T>::f(op, x);
  }
}

template <typename T>
__global__ void k_unary_vec(int64_t n, int op, T *out, const T *a)
{
  constexpr int V = 16 / sizeof(T);
  const int64_t nv = n / V;
  DPL_GRID_STRIDE(i, nv)
  {
    VecT<T, V> x = ((const VecT<T, V> *)a)[i], r;
#pragma unroll
    for (int k = 0; k < V; k++) r.v[k] = Un<T>::f(op, x.v[k]);
    ((VecT<T, V> *)out)[i] = r;
  }
  for (int64_t i = nv * V + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = Un<T>::f(op, a[i]);
}

template <typename T>
int launch_unary(const dpl_cu_geom *g, int op, void *out, const void *a, cudaStream_t s)
{
  unsigned grid = grid_for(g->numel);
  constexpr int V = 16 / sizeof(T);
  bool boolean = op == LOGICAL_NOT || op == ISNAN || op == ISINF || op == ISFINITE;
  if (geom_contig(g, 2) && !boolean && g->numel >= 4096 && aligned16(out) && aligned16(a))
    k_unary_vec<T><<<grid_for((g->numel + V - 1) / V), kThreads, 0, s>>>(g->numel, op, (T *)out, (const T *)a);
  else if (geom_contig(g, 2)) k_unary<T, true><<<grid, kThreads, 0, s>>>(*g, op, out, (const T *)a);
  else k_unary<T, false><<<grid, kThreads, 0, s>>>(*g, op, out, (const T *)a);
  return (int)cudaGetLastError();
}

/* ---- activation gradients ---- */
__device__ __forceinline__ float act_b(int op, float gr, float x)
{
  switch (op) {
  case RELU: return x > 0 ? gr : 0.0f;
  case TANH: return gr * (1.0f - x * x);
  case SIGMOID: return gr * x * (1.0f - x);
  case GELU: {
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
    float pdf = expf(-0.5f * x * x) * 0.39894228040143267794f;
    return gr * (cdf + x * pdf);
  }
  default: {
    float sg = 1.0f / (1.0f + expf(-x));
    return gr * sg * (1.0f + x * (1.0f - sg));
  }
  }
}
__device__ __forceinline__ double act_b(int op, double gr, double x)
{
  switch (op) {
  case RELU: return x > 0 ? gr : 0.0;
  case TANH: return gr * (1.0 - x * x);
  case SIGMOID: return gr * x * (1.0 - x);
  case GELU: {
    double cdf = 0.5 * (1.0 + erf(x * 0.70710678118654752440));
    double pdf = exp(-0.5 * x * x) * 0.39894228040143267794;
    return gr * (cdf + x * pdf);
  }
  default: {
    double sg = 1.0 / (1.0 + exp(-x));
    return gr * sg * (1.0 + x * (1.0 - sg));
  }
  }
}
template <typename T>
__global__ void k_act_bwd(dpl_cu_geom g, int op, T *out, const T *gr, const T *x)
{
  DPL_GRID_STRIDE(i, g.numel)
  {
    int64_t o[3];
    offsets<3>(g, i, o);
    out[o[0]] = act_b(op, gr[o[1]], x[o[2]]);
  }
}

/* ---- clamp, where, masked_fill, axpy ---- */
template <typename T>
__global__ void k_clamp(dpl_cu_geom g, T *out, const T *a, T lo, T hi, int has_lo, int has_hi)
{
  DPL_GRID_STRIDE(i, g.numel)
  {
    int64_t o[2];
    offsets<2>(g, i, o);
    T x = a[o[1]];
    if (has_lo && x < lo) x = lo;
    if (has_hi && x > hi) x = hi;
    out[o[0]] = x;
  }
}

template <typename T>
__global__ void k_where(dpl_cu_geom g, T *out, const uint8_t *cond, const T *a, const T *b)
{
  DPL_GRID_STRIDE(i, g.numel)
  {
    int64_t o[4];
    offsets<4>(g, i, o);
    out[o[0]] = cond[o[1]] ? a[o[2]] : b[o[3]];
  }
}

template <typename T>
__global__ void k_masked_fill(dpl_cu_geom g, T *a, const uint8_t *mask, T v)
{
  DPL_GRID_STRIDE(i, g.numel)
  {
    int64_t o[2];
    offsets<2>(g, i, o);
    if (mask[o[1]]) a[o[0]] = v;
  }
}

__global__ void k_axpy(dpl_cu_geom g, int dt, char *a, const char *b, double alpha)
{
  int es = elsize(dt);
  float al = (float)alpha;
  DPL_GRID_STRIDE(i, g.numel)
  {
    int64_t o[2];
    offsets<2>(g, i, o);
    char *pa = a + o[0] * es;
    const char *pb = b + o[1] * es;
    if (dt == F64) *(double *)pa += alpha * *(const double *)pb;
    else if (dt == F32) *(float *)pa += al * *(const float *)pb;
    else st_f64(pa, dt, (double)((float)ld_f64(pa, dt) + al * (float)ld_f64(pb, dt)));
  }
}

template <typename T>
T pattern_as(uint64_t bytes)
{
  T v;
  memcpy(&v, &bytes, sizeof v);
  return v;
}

} // namespace

extern "C" int dpl_cu_copy(const dpl_cu_geom *g, void *dst, int32_t ddt, const void *src, int32_t sdt, cudaStream_t s)
{
  if (g->numel == 0) return 0;
  unsigned grid = grid_for(g->numel);
  if (ddt == sdt) {
    if (geom_contig(g, 2))
      k_copy_same<true><<<grid, kThreads, 0, s>>>(*g, (char *)dst, (const char *)src, elsize(ddt));
    else
      k_copy_same<false><<<grid, kThreads, 0, s>>>(*g, (char *)dst, (const char *)src, elsize(ddt));
  } else {
    k_copy_conv<<<grid, kThreads, 0, s>>>(*g, (char *)dst, ddt, (const char *)src, sdt);
  }
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_fill(const dpl_cu_geom *g, void *dst, int32_t es, uint64_t bytes, cudaStream_t s)
{
  if (g->numel == 0) return 0;
  unsigned grid = grid_for(g->numel);
  switch (es) {
  case 1: k_fill<uint8_t><<<grid, kThreads, 0, s>>>(*g, (uint8_t *)dst, pattern_as<uint8_t>(bytes)); break;
  case 2: k_fill<uint16_t><<<grid, kThreads, 0, s>>>(*g, (uint16_t *)dst, pattern_as<uint16_t>(bytes)); break;
  case 4: k_fill<uint32_t><<<grid, kThreads, 0, s>>>(*g, (uint32_t *)dst, pattern_as<uint32_t>(bytes)); break;
  default: k_fill<uint64_t><<<grid, kThreads, 0, s>>>(*g, (uint64_t *)dst, pattern_as<uint64_t>(bytes)); break;
  }
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_binary(const dpl_cu_geom *g, int32_t op, int32_t kd, void *out, const void *a, dpl_cu_scalar sa,
                             const void *b, dpl_cu_scalar sb, cudaStream_t s)
{
  if (g->numel == 0) return 0;
  switch (kd) {
  case F32: return launch_binary<float>(g, op, out, a, sa, b, sb, s);
  case F64: return launch_binary<double>(g, op, out, a, sa, b, sb, s);
  case I32: return launch_binary<int32_t>(g, op, out, a, sa, b, sb, s);
  case I64: return launch_binary<int64_t>(g, op, out, a, sa, b, sb, s);
  default: return launch_binary<uint8_t>(g, op, out, a, sa, b, sb, s);
  }
}

extern "C" int dpl_cu_unary(const dpl_cu_geom *g, int32_t op, int32_t kd, void *out, const void *a, cudaStream_t s)
{
  if (g->numel == 0) return 0;
  switch (kd) {
  case F32: return launch_unary<float>(g, op, out, a, s);
  case F64: return launch_unary<double>(g, op, out, a, s);
  case I32: return launch_unary<int32_t>(g, op, out, a, s);
  case I64: return launch_unary<int64_t>(g, op, out, a, s);
  default: return launch_unary<uint8_t>(g, op, out, a, s);
  }
}

extern "C" int dpl_cu_act_bwd(const dpl_cu_geom *g, int32_t op, int32_t kd, void *out, const void *grad, const void *x,
                              cudaStream_t s)
{
  if (g->numel == 0) return 0;
  unsigned grid = grid_for(g->numel);
  if (kd == F64) k_act_bwd<double><<<grid, kThreads, 0, s>>>(*g, op, (double *)out, (const double *)grad, (const double *)x);
  else k_act_bwd<float><<<grid, kThreads, 0, s>>>(*g, op, (float *)out, (const float *)grad, (const float *)x);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_clamp(const dpl_cu_geom *g, int32_t kd, void *out, const void *a, double lo, double hi,
                            int32_t has_lo, int32_t has_hi, cudaStream_t s)
{
  if (g->numel == 0) return 0;
  unsigned grid = grid_for(g->numel);
  if (kd == F32)
    k_clamp<float><<<grid, kThreads, 0, s>>>(*g, (float *)out, (const float *)a, (float)lo, (float)hi, has_lo, has_hi);
  else if (kd == F64)
    k_clamp<double><<<grid, kThreads, 0, s>>>(*g, (double *)out, (const double *)a, lo, hi, has_lo, has_hi);
  else
    k_clamp<int64_t><<<grid, kThreads, 0, s>>>(*g, (int64_t *)out, (const int64_t *)a, (int64_t)lo, (int64_t)hi,
                                               has_lo, has_hi);
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_where(const dpl_cu_geom *g, int32_t es, void *out, const void *cond, const void *a, const void *b,
                            cudaStream_t s)
{
  if (g->numel == 0) return 0;
  unsigned grid = grid_for(g->numel);
  const uint8_t *c = (const uint8_t *)cond;
  switch (es) {
  case 1: k_where<uint8_t><<<grid, kThreads, 0, s>>>(*g, (uint8_t *)out, c, (const uint8_t *)a, (const uint8_t *)b); break;
  case 2: k_where<uint16_t><<<grid, kThreads, 0, s>>>(*g, (uint16_t *)out, c, (const uint16_t *)a, (const uint16_t *)b); break;
  case 4: k_where<uint32_t><<<grid, kThreads, 0, s>>>(*g, (uint32_t *)out, c, (const uint32_t *)a, (const uint32_t *)b); break;
  default: k_where<uint64_t><<<grid, kThreads, 0, s>>>(*g, (uint64_t *)out, c, (const uint64_t *)a, (const uint64_t *)b); break;
  }
  return (int)cudaGetLastError();
}

extern "C" int dpl_cu_masked_fill(const dpl_cu_geom *g, int32_t es, void *a, const void *mask, uint64_t bytes,
                                  cudaStream_t s)
{
  if (g->numel == 0) return 0;
  unsigned grid = grid_for(g->numel);
  const uint8_t *m = (const uint8_t *)mask;
  switch (es) {
  case 1: k_masked_fill<uint8_t><<<grid, kThreads, 0, s>>>(*g, (uint8_t *)a, m, pattern_as<uint8_t>(bytes)); break;
  case 2: k_masked_fill<uint16_t><<<grid, kThreads, 0, s>>>(*g, (uint16_t *)a, m, pattern_as<uint16_t>(bytes)); break;
  case 4: k_masked_fill<uint32_t><<<grid, kThreads, 0, s>>>(*g, (uint32_t *)a, m, pattern_as<uint32_t>(bytes)); break;
  default: k_masked_fill<uint64_t><<<grid, kThreads, 0, s>>>(*g, (uint64_t *)a, m, pattern_as<uint64_t>(bytes)); break;
  }
  return (int)cudaGetLastError();
}

__global__ void k_axpy_f32(int64_t n, float *a, const float *b, float al)
{
  const int64_t nv = n / 4;
  DPL_GRID_STRIDE(i, nv)
  {
    float4 x = ((float4 *)a)[i], y = ((const float4 *)b)[i];
    x.x += al * y.x;
    x.y += al * y.y;
    x.z += al * y.z;
    x.w += al * y.w;
    ((float4 *)a)[i] = x;
  }
  for (int64_t i = nv * 4 + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    a[i] += al * b[i];
}

extern "C" int dpl_cu_axpy(const dpl_cu_geom *g, int32_t dt, void *a, const void *b, double alpha, cudaStream_t s)
{
  if (g->numel == 0) return 0;
  if (dt == F32 && geom_contig(g, 2) && ((uintptr_t)a & 15) == 0 && ((uintptr_t)b & 15) == 0) {
    k_axpy_f32<<<grid_for((g->numel + 3) / 4), kThreads, 0, s>>>(g->numel, (float *)a, (const float *)b, (float)alpha);
    return (int)cudaGetLastError();
  }
  k_axpy<<<grid_for(g->numel), kThreads, 0, s>>>(*g, dt, (char *)a, (const char *)b, alpha);
  return (int)cudaGetLastError();
}
