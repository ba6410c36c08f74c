/* dpl_tensor_elementwise.c: elementwise kernels: binary arithmetic and
 * comparisons with broadcasting and PyTorch type promotion (tensor-tensor and
 * tensor-scalar, out-of-place and in-place), unary math, activation
 * gradients, axpy, clamp, where and masked_fill. Kernels exist for the compute
 * dtypes float32, float64, int32, int64 and uint8; float16/bfloat16 compute in
 * float32 and bool in uint8, through converted temporaries. Tensors in device
 * memory share all of the dtype and shape logic here; only the loop itself runs
 * in the backend (DPL_BK_BINARY, _UNARY, ... with the kernel dtype in i[3]). The
 * float32 transcendental ops and the gelu/silu gradients run the vector kernels of
 * dpl_tensor_vmath.c (dpl_vmath() chooses their path; "off": libm as before). */
#include "dpl_tensor_internal.h"
#include "dpl_tensor_vmath.h"
#include <stdio.h>
#include <stdlib.h>

#define GRAIN 32768


static const char *binop_name(int op)
{
  switch (op) {
  case DPL_OP_ADD: return "add"; case DPL_OP_SUB: return "sub"; case DPL_OP_MUL: return "mul";
  case DPL_OP_DIV: return "div"; case DPL_OP_POW: return "pow"; case DPL_OP_MAXIMUM: return "maximum";
  case DPL_OP_MINIMUM: return "minimum"; case DPL_OP_REMAINDER: return "remainder"; case DPL_OP_ATAN2: return "atan2"; case DPL_OP_FMOD: return "fmod";
  case DPL_OP_EQ: return "eq"; case DPL_OP_NE: return "ne"; case DPL_OP_LT: return "lt"; case DPL_OP_LE: return "le";
  case DPL_OP_GT: return "gt"; case DPL_OP_GE: return "ge"; case DPL_OP_LOGICAL_AND: return "logical_and";
  case DPL_OP_LOGICAL_OR: return "logical_or"; case DPL_OP_LOGICAL_XOR: return "logical_xor";
  case DPL_OP_BITWISE_AND: return "bitwise_and"; case DPL_OP_BITWISE_OR: return "bitwise_or";
  case DPL_OP_BITWISE_XOR: return "bitwise_xor";
  case DPL_OP_GCD: return "gcd"; case DPL_OP_LCM: return "lcm"; case DPL_OP_LSHIFT: return "bitwise_left_shift";
  case DPL_OP_RSHIFT: return "bitwise_right_shift";
  default: return NULL;
  }
}
static int is_cmp(int op) { return op >= DPL_OP_EQ && op <= DPL_OP_LOGICAL_XOR; }
static int needs_float(int op) { return op == DPL_OP_DIV || op == DPL_OP_ATAN2; }
static int is_intop(int op) { return op >= DPL_OP_GCD && op <= DPL_OP_RSHIFT; } /* integers, not bool */
static int is_bitwise(int op) { return (op >= DPL_OP_BITWISE_AND && op <= DPL_OP_BITWISE_XOR) || is_intop(op); }

/* gcd, lcm and shifts in int64 (the integer loops' and lua/dpl/tensor_compat.lua's rules; the
 * callers truncate to the dtype, w its width in bits) */
static inline uint64_t int_gcd(int64_t x, int64_t y)
{
  uint64_t a = x < 0 ? 0 - (uint64_t)x : (uint64_t)x, b = y < 0 ? 0 - (uint64_t)y : (uint64_t)y;
  while (b) { uint64_t t = a % b; a = b; b = t; }
  return a;
}
static inline int64_t int_lcm(int64_t x, int64_t y)
{
  uint64_t g = int_gcd(x, y);
  if (g == 0) return 0;
  int64_t v = (int64_t)((uint64_t)(x / (int64_t)g) * (uint64_t)y);
  return v < 0 ? (int64_t)(0 - (uint64_t)v) : v;
}
static inline int64_t int_shl(int64_t x, int64_t s, int w) { return s < 0 || s >= w ? 0 : (int64_t)((uint64_t)x << s); }
static inline int64_t int_shr(int64_t x, int64_t s, int w) { return s < 0 || s >= w ? (x < 0 ? -1 : 0) : x >> s; }

static int32_t kernel_dtype(int32_t d)
{
  if (d == DPL_FLOAT16 || d == DPL_BFLOAT16) return DPL_FLOAT32;
  if (d == DPL_BOOL) return DPL_UINT8;
  return d;
}

/* ---- binary loops ---- */
#define BIN_LOOP(OT, T, EXPR)                                                                    \
  do {                                                                                           \
    if (st[0] == sizeof(OT) && st[1] == sizeof(T) && st[2] == sizeof(T)) {                       \
      OT *o = (OT *)p[0]; const T *A = (const T *)p[1], *B = (const T *)p[2];                    \
      for (int64_t i = 0; i < n; i++) { T x = A[i], y = B[i]; o[i] = (OT)(EXPR); }               \
    } else if (st[0] == sizeof(OT) && st[1] == sizeof(T) && st[2] == 0) {                        \
      OT *o = (OT *)p[0]; const T *A = (const T *)p[1]; const T y = *(const T *)p[2];            \
      for (int64_t i = 0; i < n; i++) { T x = A[i]; o[i] = (OT)(EXPR); }                         \
    } else if (st[0] == sizeof(OT) && st[1] == 0 && st[2] == sizeof(T)) {                        \
      OT *o = (OT *)p[0]; const T x = *(const T *)p[1]; const T *B = (const T *)p[2];            \
      for (int64_t i = 0; i < n; i++) { T y = B[i]; o[i] = (OT)(EXPR); }                         \
    } else {                                                                                     \
      for (int64_t i = 0; i < n; i++) {                                                          \
        T x = *(const T *)(p[1] + i * st[1]), y = *(const T *)(p[2] + i * st[2]);                \
        *(OT *)(p[0] + i * st[0]) = (OT)(EXPR);                                                  \
      }                                                                                          \
    }                                                                                            \
  } while (0)

static inline double py_fmod(double x, double y)
{
  double r = fmod(x, y);
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return r;
}
static inline int64_t py_imod(int64_t x, int64_t y)
{
  if (y == 0 || y == -1) return 0;
  int64_t r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return r;
}
/* C's % (the sign of the dividend), as torch.fmod on integers; y == 0 is refused before */
static inline int64_t c_imod(int64_t x, int64_t y) { return (y == 0 || y == -1) ? 0 : x % y; }
static inline int64_t ipow(int64_t b, int64_t e)
{
  if (e < 0) return b == 1 ? 1 : b == -1 ? ((e & 1) ? -1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)b;
  while (e) { if (e & 1) r *= x; x *= x; e >>= 1; }
  return (int64_t)r;
}

#define FLOAT_BINARY(NAME, T, POWF, FMODF, ATAN2F)                                        \
  DPL_CLONES static void NAME(char **p, const int64_t *st, int64_t n, void *ctx)                      \
  {                                                                                        \
    switch (*(int *)ctx) {                                                                 \
    case DPL_OP_ADD: BIN_LOOP(T, T, x + y); break;                                         \
    case DPL_OP_SUB: BIN_LOOP(T, T, x - y); break;                                         \
    case DPL_OP_MUL: BIN_LOOP(T, T, x * y); break;                                         \
    case DPL_OP_DIV: BIN_LOOP(T, T, x / y); break;                                         \
    case DPL_OP_POW: BIN_LOOP(T, T, POWF(x, y)); break;                                    \
    case DPL_OP_MAXIMUM: BIN_LOOP(T, T, (x != x || x > y) ? x : y); break;                 \
    case DPL_OP_MINIMUM: BIN_LOOP(T, T, (x != x || x < y) ? x : y); break;                 \
    case DPL_OP_REMAINDER: BIN_LOOP(T, T, (T)py_fmod(x, y)); break;                        \
    case DPL_OP_FMOD: BIN_LOOP(T, T, FMODF(x, y)); break;                                  \
    case DPL_OP_ATAN2: BIN_LOOP(T, T, ATAN2F(x, y)); break;                                \
    case DPL_OP_EQ: BIN_LOOP(uint8_t, T, x == y); break;                                   \
    case DPL_OP_NE: BIN_LOOP(uint8_t, T, x != y); break;                                   \
    case DPL_OP_LT: BIN_LOOP(uint8_t, T, x < y); break;                                    \
    case DPL_OP_LE: BIN_LOOP(uint8_t, T, x <= y); break;                                   \
    case DPL_OP_GT: BIN_LOOP(uint8_t, T, x > y); break;                                    \
    case DPL_OP_GE: BIN_LOOP(uint8_t, T, x >= y); break;                                   \
    case DPL_OP_LOGICAL_AND: BIN_LOOP(uint8_t, T, (x != 0) && (y != 0)); break;            \
    case DPL_OP_LOGICAL_OR: BIN_LOOP(uint8_t, T, (x != 0) || (y != 0)); break;             \
    case DPL_OP_LOGICAL_XOR: BIN_LOOP(uint8_t, T, (x != 0) != (y != 0)); break;            \
    }                                                                                      \
  }
FLOAT_BINARY(bin_f32_plain, float, powf, fmodf, atan2f)

/* Big contiguous float32 results in cold memory (dpl_storage_cold): streaming
 * (non-temporal) stores skip the read-for-ownership of output lines that are not
 * in cache anyway; a warm result (a block freed lately) takes plain stores. The
 * loops' ctx is an ew_ctx (op first: loops that only need the op read an int). */
#define STREAM_MIN (256 * 1024) /* elements */
typedef struct ew_ctx { int op; int stream; int vm1; /* unary float32: the dpl_tensor_vmath function + 1, 0: libm */ } ew_ctx;
#if defined(__SSE2__)
#include <immintrin.h>
#define STREAM_LOOP(VEXPR, SEXPR)                                                          \
  do {                                                                                     \
    int64_t i = 0;                                                                         \
    while (i < n && ((uintptr_t)(o + i) & 15)) { float x = A[i], y = B[i]; o[i] = (SEXPR); i++; } \
    for (; i + 4 <= n; i += 4) {                                                           \
      __m128 x = _mm_loadu_ps(A + i), y = _mm_loadu_ps(B + i);                             \
      _mm_stream_ps(o + i, (VEXPR));                                                       \
    }                                                                                      \
    for (; i < n; i++) { float x = A[i], y = B[i]; o[i] = (SEXPR); }                       \
    _mm_sfence();                                                                          \
  } while (0)
static int stream_f32(int op, char **p, int64_t n)
{
  float *o = (float *)p[0];
  const float *A = (const float *)p[1], *B = (const float *)p[2];
  if ((const void *)o == (const void *)A || (const void *)o == (const void *)B) return 0; /* in place: lines are cached */
  switch (op) {
  case DPL_OP_ADD: STREAM_LOOP(_mm_add_ps(x, y), x + y); return 1;
  case DPL_OP_SUB: STREAM_LOOP(_mm_sub_ps(x, y), x - y); return 1;
  case DPL_OP_MUL: STREAM_LOOP(_mm_mul_ps(x, y), x * y); return 1;
  case DPL_OP_DIV: STREAM_LOOP(_mm_div_ps(x, y), x / y); return 1;
  default: return 0;
  }
}
#else
static int stream_f32(int op, char **p, int64_t n) { (void)op; (void)p; (void)n; return 0; }
#endif

static void bin_f32(char **p, const int64_t *st, int64_t n, void *ctx)
{
  const ew_ctx *c = ctx;
  if (n >= STREAM_MIN && c->stream && st[0] == 4 && st[1] == 4 && st[2] == 4 && stream_f32(c->op, p, n)) return;
  bin_f32_plain(p, st, n, ctx);
}
FLOAT_BINARY(bin_f64, double, pow, fmod, atan2)

/* integer arithmetic wraps (through unsigned) instead of overflowing */
#define INT_BINARY(NAME, T, U)                                                            \
  DPL_CLONES static void NAME(char **p, const int64_t *st, int64_t n, void *ctx)                      \
  {                                                                                        \
    switch (*(int *)ctx) {                                                                 \
    case DPL_OP_ADD: BIN_LOOP(T, T, (T)((U)x + (U)y)); break;                              \
    case DPL_OP_SUB: BIN_LOOP(T, T, (T)((U)x - (U)y)); break;                              \
    case DPL_OP_MUL: BIN_LOOP(T, T, (T)((U)x * (U)y)); break;                              \
    case DPL_OP_POW: BIN_LOOP(T, T, (T)ipow(x, y)); break;                                 \
    case DPL_OP_MAXIMUM: BIN_LOOP(T, T, x > y ? x : y); break;                             \
    case DPL_OP_MINIMUM: BIN_LOOP(T, T, x < y ? x : y); break;                             \
    case DPL_OP_REMAINDER: BIN_LOOP(T, T, (T)py_imod(x, y)); break;                        \
    case DPL_OP_FMOD: BIN_LOOP(T, T, (T)c_imod(x, y)); break;                              \
    case DPL_OP_EQ: BIN_LOOP(uint8_t, T, x == y); break;                                   \
    case DPL_OP_NE: BIN_LOOP(uint8_t, T, x != y); break;                                   \
    case DPL_OP_LT: BIN_LOOP(uint8_t, T, x < y); break;                                    \
    case DPL_OP_LE: BIN_LOOP(uint8_t, T, x <= y); break;                                   \
    case DPL_OP_GT: BIN_LOOP(uint8_t, T, x > y); break;                                    \
    case DPL_OP_GE: BIN_LOOP(uint8_t, T, x >= y); break;                                   \
    case DPL_OP_LOGICAL_AND: BIN_LOOP(uint8_t, T, (x != 0) && (y != 0)); break;            \
    case DPL_OP_LOGICAL_OR: BIN_LOOP(uint8_t, T, (x != 0) || (y != 0)); break;             \
    case DPL_OP_LOGICAL_XOR: BIN_LOOP(uint8_t, T, (x != 0) != (y != 0)); break;            \
    case DPL_OP_BITWISE_AND: BIN_LOOP(T, T, x & y); break;                                 \
    case DPL_OP_BITWISE_OR: BIN_LOOP(T, T, x | y); break;                                  \
    case DPL_OP_BITWISE_XOR: BIN_LOOP(T, T, x ^ y); break;                                 \
    case DPL_OP_GCD: BIN_LOOP(T, T, (T)int_gcd(x, y)); break;                              \
    case DPL_OP_LCM: BIN_LOOP(T, T, (T)int_lcm(x, y)); break;                              \
    case DPL_OP_LSHIFT: BIN_LOOP(T, T, (T)int_shl(x, y, (int)sizeof(T) * 8)); break;       \
    case DPL_OP_RSHIFT: BIN_LOOP(T, T, (T)int_shr(x, y, (int)sizeof(T) * 8)); break;       \
    }                                                                                      \
  }
INT_BINARY(bin_i32, int32_t, uint32_t)
INT_BINARY(bin_i64, int64_t, uint64_t)
INT_BINARY(bin_u8, uint8_t, uint32_t)

/* a kernel family's loop for kernel dtype kd: fam = {f32, f64, i32, i64, u8 (uint8 and bool)} */
static dpl_loop_fn loop_for(int32_t kd, const dpl_loop_fn fam[5])
{
  switch (kd) {
  case DPL_FLOAT32: return fam[0];
  case DPL_FLOAT64: return fam[1];
  case DPL_INT32: return fam[2];
  case DPL_INT64: return fam[3];
  default: return fam[4];
  }
}
static const dpl_loop_fn bin_loops[5] = {bin_f32, bin_f64, bin_i32, bin_i64, bin_u8};

/* a dtype for a Lua number: integral values count as integers (PyTorch's wrapped numbers) */
static int32_t scalar_dtype(int32_t tensor_dt, double s)
{
  int integral = s == floor(s) && fabs(s) < 9.2e18;
  if (dpl_is_float(tensor_dt)) return tensor_dt;
  if (!integral) return DPL_FLOAT32;
  return tensor_dt == DPL_BOOL ? DPL_INT64 : tensor_dt;
}

/* a 0-d stand-in for a scalar, stored in dtype dt */
typedef struct scalar_t {
  dpl_tensor t;
  union { double d; float f; int64_t i; int32_t i32; uint8_t u8; uint16_t h; } v;
} scalar_t;
static void make_scalar(scalar_t *s, int32_t dt, double v, const dpl_tensor *like)
{
  memset(s, 0, sizeof *s);
  s->t._devtype = like->_devtype;
  s->t._devindex = like->_devindex;
  s->t._dtype = dt;
  s->t._ndim = 0;
  s->t._numel = 1;
  s->t._data = &s->v;
  s->t._flags = DPL_CONTIG;
  s->t._storage = (dpl_storage *)&s->v; /* never dereferenced: passes dpl_check_tensor */
  /* an integer scalar wraps into a narrower integer dtype, as PyTorch's does
   * (int32 + 3e9 adds -1294967296), where a float-to-int cast saturates */
  if (dt == DPL_INT32 || dt == DPL_UINT8) dpl_store_i64(&s->v, dt, dpl_d2i64(v));
  else dpl_store_f64(&s->v, dt, v);
}

static int temp_convert(const char *op, const dpl_tensor *t, int32_t kd, dpl_tensor **tmp, const dpl_tensor **use)
{
  *tmp = NULL;
  *use = t;
  if (t->_dtype == kd) return DPL_OK;
  DPL_TRY(dpl_contig_as(op, t, kd, tmp));
  *use = *tmp;
  return DPL_OK;
}

static int can_cast(int32_t from, int32_t to)
{
  if (dpl_is_float(from) && !dpl_is_float(to)) return 0;
  if (to == DPL_BOOL && from != DPL_BOOL) return 0;
  return 1;
}

static int binary_core(const char *name, int op, const dpl_tensor *a, const dpl_tensor *b, int32_t bdt_for_promo,
                       dpl_tensor *dst, dpl_tensor **out)
{
  int32_t pd = dpl_promote(a->_dtype, bdt_for_promo);
  int32_t rd = is_cmp(op) ? DPL_BOOL : (needs_float(op) && !dpl_is_float(pd)) ? DPL_FLOAT32 : pd;
  int32_t kd = kernel_dtype((needs_float(op) && !dpl_is_float(pd)) ? DPL_FLOAT32 : pd);
  if (!is_cmp(op) && (op == DPL_OP_SUB) && pd == DPL_BOOL)
    return dpl_errorf(DPL_EINVAL, "%s: subtracting bool tensors is not supported; use logical_xor or convert first", name);
  if (is_intop(op) && pd == DPL_BOOL)
    return dpl_errorf(DPL_EINVAL, "%s: expected integer operands (uint8, int32, int64), got bool", name);
  if (is_bitwise(op) && dpl_is_float(pd)) /* integer kernels only (the CPU's and the backend's) */
    return dpl_errorf(DPL_EINVAL, "%s: expected integer or bool operands, got %s (the promoted type of %s and %s)", name,
                      dpl_dtype_name(pd), dpl_dtype_name(a->_dtype), dpl_dtype_name(bdt_for_promo));
  int64_t shape[DPL_MAX_DIMS];
  int32_t nd;
  DPL_TRY(dpl_broadcast_shapes(name, a->_ndim, a->_shape, b->_ndim, b->_shape, &nd, shape));
  if (dst) {
    DPL_TRY(dpl_check_writable(name, "_", dst));
    int same = nd == dst->_ndim;
    for (int i = 0; same && i < nd; i++) same = shape[i] == dst->_shape[i];
    if (!same) {
      char b1[160], b2[160];
      return dpl_errorf(DPL_EINVAL, "%s_: the result shape %s does not match the in-place tensor's shape %s", name,
                        dpl_shape_str(nd, shape, b1, sizeof b1), dpl_shape_str(dst->_ndim, dst->_shape, b2, sizeof b2));
    }
    if (!can_cast(rd, dst->_dtype))
      return dpl_errorf(DPL_EINVAL, "%s_: the result type %s cannot be stored in place in a %s tensor", name,
                        dpl_dtype_name(rd), dpl_dtype_name(dst->_dtype));
  }
  dpl_tensor *ta = NULL, *tb = NULL, *res = NULL, *tmp = NULL;
  const dpl_tensor *ua, *ub;
  int st = temp_convert(name, a, kd, &ta, &ua);
  if (st == DPL_OK) st = temp_convert(name, b, kd, &tb, &ub);
  /* in place: an operand that partly overlaps the tensor written goes through a copy */
  if (st == DPL_OK && dst) st = dpl_unalias(name, dst, &ta, &ua);
  if (st == DPL_OK && dst) st = dpl_unalias(name, dst, &tb, &ub);
  int32_t od = is_cmp(op) ? DPL_BOOL : kd; /* what the kernel writes */
  dpl_tensor *target = NULL;
  if (st == DPL_OK) {
    if (dst) {
      if (dst->_dtype == od) target = dst;
      else st = dpl_new(name, od, nd, shape, a, &tmp), target = tmp;
    } else {
      st = dpl_new(name, rd, nd, shape, a, &res);
      if (st == DPL_OK) {
        if (rd == od) target = res;
        else st = dpl_new(name, od, nd, shape, a, &tmp), target = tmp;
      }
    }
  }
  /* a bitwise op reads device operands only in the backend's kernel (as before it ran there) */
  if (st == DPL_OK && is_bitwise(op) && !dpl_is_devmem(target) && (dpl_is_devmem(ua) || dpl_is_devmem(ub)))
    st = dpl_check_tensor(name, dpl_is_devmem(ua) ? "self" : "other", dpl_is_devmem(ua) ? ua : ub);
  if (st == DPL_OK && dpl_is_devmem(target)) {
    dpl_bk_args k = {.op = DPL_BK_BINARY, .sub = op, .i = {0, 0, 0, kd}, .inout = target, .in = {ua, ub}, .name = name};
    st = dpl_bk_call(&k);
    if (st == DPL_OK && tmp) st = dpl_copy_any(name, dst ? dst : res, tmp);
  } else if (st == DPL_OK && target->_numel <= GRAIN && dpl_is_contig(target) && dpl_is_contig(ua) && dpl_is_contig(ub) &&
      ua->_numel == target->_numel && ub->_numel == target->_numel) {
    /* small, same shape, contiguous: one run, no iterator */
    char *ptrs[3] = {target->_data, ua->_data, ub->_data};
    int64_t sts[3] = {dpl_elsize(target->_dtype), dpl_elsize(kd), dpl_elsize(kd)};
    ew_ctx c = {op, 0, 0};
    loop_for(kd, bin_loops)(ptrs, sts, target->_numel, &c);
    if (tmp) dpl_copy_raw(dst ? dst : res, tmp);
  } else if (st == DPL_OK) {
    dpl_tensor *ops[3] = {target, (dpl_tensor *)ua, (dpl_tensor *)ub};
    dpl_iter it;
    dpl_iter_init(&it, 3, ops, nd, shape);
    ew_ctx c = {op, target != dst && dpl_storage_cold(target), 0};
    dpl_iter_run(&it, loop_for(kd, bin_loops), &c, GRAIN);
    if (tmp) dpl_copy_raw(dst ? dst : res, tmp);
  }
  dpl_tensor_release(ta);
  dpl_tensor_release(tb);
  dpl_tensor_release(tmp);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  if (out) *out = res;
  return DPL_OK;
}

static int check_binop(int32_t op, const char **name)
{
  *name = binop_name(op);
  if (!*name) return dpl_errorf(DPL_EINVAL, "binary: unknown op id %d", (int)op);
  return DPL_OK;
}

int dpl_binary(int32_t op, const dpl_tensor *a, const dpl_tensor *b, dpl_tensor **out)
{
  const char *name;
  if (!out) return dpl_errorf(DPL_EINVAL, "binary: out is NULL");
  *out = NULL;
  DPL_TRY(check_binop(op, &name));
  DPL_TRY(dpl_check_handle(name, "self", a));
  DPL_TRY(dpl_check_handle(name, "other", b));
  DPL_TRY(dpl_check_same_device(name, a, b));
  int32_t bd = b->_dtype;
  /* a 0-d operand does not promote within the same kind (PyTorch's rule for dimensionless tensors) */
  if (b->_ndim == 0 && a->_ndim > 0 && dpl_dtype_kind(a->_dtype) == dpl_dtype_kind(b->_dtype)) bd = a->_dtype;
  int32_t ad = a->_dtype;
  if (a->_ndim == 0 && b->_ndim > 0 && dpl_dtype_kind(a->_dtype) == dpl_dtype_kind(b->_dtype)) {
    ad = b->_dtype;
    if (ad != a->_dtype) { /* promote through b's dtype: swap roles for the promotion only */
      dpl_tensor *ca = NULL;
      DPL_TRY(dpl_contig_as(name, a, ad, &ca));
      int st = binary_core(name, op, ca, b, b->_dtype, NULL, out);
      dpl_tensor_release(ca);
      return st;
    }
  }
  return binary_core(name, op, a, b, bd, NULL, out);
}

int dpl_binary_(int32_t op, dpl_tensor *a, const dpl_tensor *b)
{
  const char *name;
  DPL_TRY(check_binop(op, &name));
  DPL_TRY(dpl_check_handle(name, "self", a));
  DPL_TRY(dpl_check_handle(name, "other", b));
  DPL_TRY(dpl_check_same_device(name, a, b));
  int32_t bd = b->_dtype;
  if (b->_ndim == 0 && dpl_dtype_kind(a->_dtype) == dpl_dtype_kind(b->_dtype)) bd = a->_dtype;
  return binary_core(name, op, a, b, bd, a, NULL);
}

/* an integer tensor to a negative integer scalar power (PyTorch refuses it: the results
 * would be 0 or +-1 truncations) */
static int check_int_pow(const char *name, int32_t op, const dpl_tensor *a, double s, int32_t reverse)
{
  if (op != DPL_OP_POW || reverse || dpl_is_float(a->_dtype) || s >= 0 || s != floor(s)) return DPL_OK;
  return dpl_errorf(DPL_EINVAL, "%s: integers to negative integer powers are not allowed (got %s ^ %g); "
                    "convert the tensor to a floating dtype first", name, dpl_dtype_name(a->_dtype), s);
}

/* a comparison of a uint8 or int32 tensor with an integer scalar outside the dtype's range
 * (uint8 3 > 256): the answer is the same for every element (PyTorch 1.13 wraps the scalar,
 * 3 > 256 -> true; dplhost compares mathematically). Rewrites it as x < lo (always false) or
 * x >= lo (always true), not reversed, so the kernels run as usual. */
static void cmp_out_of_range(int32_t *op, double *s, int32_t *reverse, int32_t pd)
{
  double lo, hi;
  if (*op < DPL_OP_EQ || *op > DPL_OP_GE) return;
  if (pd == DPL_UINT8) { lo = 0; hi = 255; }
  else if (pd == DPL_INT32) { lo = -2147483648.0; hi = 2147483647.0; }
  else return;
  if (*s >= lo && *s <= hi) return;
  int above = (*s > hi) != (*reverse != 0); /* s op x with s above the range is x op s with s below it */
  int truth = 0;
  switch (*op) {
  case DPL_OP_EQ: truth = 0; break;
  case DPL_OP_NE: truth = 1; break;
  case DPL_OP_LT: case DPL_OP_LE: truth = above; break;
  default: truth = !above; break; /* GT, GE */
  }
  *op = truth ? DPL_OP_GE : DPL_OP_LT;
  *s = lo;
  *reverse = 0;
}

int dpl_binary_scalar(int32_t op, const dpl_tensor *a, double s, int32_t reverse, dpl_tensor **out)
{
  const char *name;
  if (!out) return dpl_errorf(DPL_EINVAL, "binary: out is NULL");
  *out = NULL;
  DPL_TRY(check_binop(op, &name));
  DPL_TRY(dpl_check_handle(name, "self", a));
  DPL_TRY(check_int_pow(name, op, a, s, reverse));
  /* x ^ 2 of a floating tensor: x * x (one read, no libm pow; PyTorch's square too) */
  if (op == DPL_OP_POW && !reverse && s == 2.0 && dpl_is_float(a->_dtype)) return dpl_unary(DPL_OP_SQUARE, a, out);
  int32_t sd = scalar_dtype(a->_dtype, s);
  int32_t pd = dpl_promote(a->_dtype, sd);
  cmp_out_of_range(&op, &s, &reverse, pd);
  int32_t kd = kernel_dtype((needs_float(op) && !dpl_is_float(pd)) ? DPL_FLOAT32 : pd);
  scalar_t sc;
  make_scalar(&sc, kd, s, a);
  if (reverse) {
    /* s op a: same promotion, operands swapped */
    dpl_tensor *ca = NULL;
    const dpl_tensor *ua;
    DPL_TRY(temp_convert(name, a, kd, &ca, &ua));
    int st = binary_core(name, op, &sc.t, ua, kd, NULL, out);
    dpl_tensor_release(ca);
    if (st == DPL_OK && (*out)->_dtype != (is_cmp(op) ? DPL_BOOL : (needs_float(op) && !dpl_is_float(pd)) ? DPL_FLOAT32 : pd)) {
      /* the kernel dtype differs from the result dtype (f16/bf16/bool): convert back */
      dpl_tensor *r = NULL;
      int32_t want = is_cmp(op) ? DPL_BOOL : (needs_float(op) && !dpl_is_float(pd)) ? DPL_FLOAT32 : pd;
      st = dpl_contig_as(name, *out, want, &r);
      dpl_tensor_release(*out);
      *out = r;
    }
    return st;
  }
  return binary_core(name, op, a, &sc.t, pd, NULL, out);
}

int dpl_binary_scalar_(int32_t op, dpl_tensor *a, double s)
{
  const char *name;
  DPL_TRY(check_binop(op, &name));
  DPL_TRY(dpl_check_handle(name, "self", a));
  DPL_TRY(check_int_pow(name, op, a, s, 0));
  int32_t sd = scalar_dtype(a->_dtype, s);
  int32_t pd = dpl_promote(a->_dtype, sd);
  int32_t rev = 0;
  cmp_out_of_range(&op, &s, &rev, pd);
  int32_t kd = kernel_dtype((needs_float(op) && !dpl_is_float(pd)) ? DPL_FLOAT32 : pd);
  scalar_t sc;
  make_scalar(&sc, kd, s, a);
  return binary_core(name, op, a, &sc.t, pd, a, NULL);
}

/* ---- axpy ---- */
typedef struct axpy_ctx { double alpha; } axpy_ctx;
DPL_CLONES static void axpy_f32(char **p, const int64_t *st, int64_t n, void *vctx)
{
  float al = (float)((axpy_ctx *)vctx)->alpha;
  if (st[0] == 4 && st[1] == 4) {
    float *a = (float *)p[0]; const float *b = (const float *)p[1];
    for (int64_t i = 0; i < n; i++) a[i] += al * b[i];
  } else {
    for (int64_t i = 0; i < n; i++) *(float *)(p[0] + i * st[0]) += al * *(const float *)(p[1] + i * st[1]);
  }
}
DPL_CLONES static void axpy_f64(char **p, const int64_t *st, int64_t n, void *vctx)
{
  double al = ((axpy_ctx *)vctx)->alpha;
  for (int64_t i = 0; i < n; i++) *(double *)(p[0] + i * st[0]) += al * *(const double *)(p[1] + i * st[1]);
}

int dpl_axpy_(dpl_tensor *a, double alpha, const dpl_tensor *b)
{
  DPL_TRY(dpl_check_handle("add_", "self", a));
  DPL_TRY(dpl_check_writable("add_", "", a));
  DPL_TRY(dpl_check_handle("add_", "other", b));
  DPL_TRY(dpl_check_same_device("add_", a, b));
  int64_t st[DPL_MAX_DIMS];
  if (dpl_broadcast_strides(b, a->_ndim, a->_shape, st) != 0) {
    char b1[160], b2[160];
    return dpl_errorf(DPL_EINVAL, "add_: other of shape %s cannot be broadcast to the in-place shape %s",
                      dpl_shape_str(b->_ndim, b->_shape, b1, sizeof b1), dpl_shape_str(a->_ndim, a->_shape, b2, sizeof b2));
  }
  if (b->_dtype == a->_dtype && (dpl_is_devmem(a) ? dpl_is_float(a->_dtype)
                                                  : (a->_dtype == DPL_FLOAT32 || a->_dtype == DPL_FLOAT64))) {
    /* other partly overlapping self (x:add_(x:t(), alpha)) goes through a copy */
    dpl_tensor *tb = NULL;
    const dpl_tensor *ub = b;
    DPL_TRY(dpl_unalias("add_", a, &tb, &ub));
    int r = DPL_OK;
    if (dpl_is_devmem(a)) {
      dpl_bk_args k = {.op = DPL_BK_AXPY, .inout = a, .in = {ub}, .d = {alpha}, .name = "add_"};
      r = dpl_bk_call(&k);
    } else {
      dpl_tensor *ops[2] = {a, (dpl_tensor *)ub};
      dpl_iter it;
      dpl_iter_init(&it, 2, ops, a->_ndim, a->_shape);
      axpy_ctx c = {alpha};
      dpl_iter_run(&it, a->_dtype == DPL_FLOAT32 ? axpy_f32 : axpy_f64, &c, GRAIN);
    }
    dpl_tensor_release(tb);
    return r;
  }
  dpl_tensor *t = NULL;
  DPL_TRY(dpl_binary_scalar(DPL_OP_MUL, b, alpha, 0, &t));
  int r = dpl_binary_(DPL_OP_ADD, a, t);
  dpl_tensor_release(t);
  return r;
}

/* ---- unary ---- */
static const char *unop_name(int op)
{
  static const char *names[] = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu",
                                "sin", "cos", "floor", "ceil", "round", "sign", "reciprocal", "square", "log1p",
                                "expm1", "logical_not", "silu", "erf", "trunc", "log2", "isnan", "log10", "exp2",
                                "sinh", "cosh", "tan", "asin", "acos", "atan", "asinh", "acosh", "atanh", "frac",
                                "isinf", "isfinite", "bitwise_not"};
  return op >= 0 && op < (int)(sizeof names / sizeof names[0]) ? names[op] : NULL;
}
static int un_float_only(int op)
{
  switch (op) {
  case DPL_OP_EXP: case DPL_OP_LOG: case DPL_OP_SQRT: case DPL_OP_RSQRT: case DPL_OP_TANH: case DPL_OP_SIGMOID:
  case DPL_OP_GELU: case DPL_OP_SIN: case DPL_OP_COS: case DPL_OP_RECIPROCAL: case DPL_OP_LOG1P: case DPL_OP_EXPM1:
  case DPL_OP_SILU: case DPL_OP_ERF: case DPL_OP_LOG2: return 1;
  default: return op >= DPL_OP_LOG10 && op <= DPL_OP_ATANH;
  }
}
static int un_bool_out(int op)
{
  return op == DPL_OP_LOGICAL_NOT || op == DPL_OP_ISNAN || op == DPL_OP_ISINF || op == DPL_OP_ISFINITE;
}

#define UN_LOOP(OT, T, EXPR)                                                               \
  do {                                                                                     \
    if (st[0] == sizeof(OT) && st[1] == sizeof(T)) {                                       \
      OT *o = (OT *)p[0]; const T *A = (const T *)p[1];                                    \
      for (int64_t i = 0; i < n; i++) { T x = A[i]; o[i] = (OT)(EXPR); }                   \
    } else {                                                                               \
      for (int64_t i = 0; i < n; i++) {                                                    \
        T x = *(const T *)(p[1] + i * st[1]); *(OT *)(p[0] + i * st[0]) = (OT)(EXPR);      \
      }                                                                                    \
    }                                                                                      \
  } while (0)

#define FLOAT_UNARY(NAME, T, S)                                                                     \
  DPL_CLONES static void NAME(char **p, const int64_t *st, int64_t n, void *ctx)                               \
  {                                                                                                 \
    switch (*(int *)ctx) {                                                                          \
    case DPL_OP_NEG: UN_LOOP(T, T, -x); break;                                                      \
    case DPL_OP_ABS: UN_LOOP(T, T, fabs##S(x)); break;                                              \
    case DPL_OP_EXP: UN_LOOP(T, T, exp##S(x)); break;                                               \
    case DPL_OP_LOG: UN_LOOP(T, T, log##S(x)); break;                                               \
    case DPL_OP_SQRT: UN_LOOP(T, T, sqrt##S(x)); break;                                             \
    case DPL_OP_RSQRT: UN_LOOP(T, T, (T)1 / sqrt##S(x)); break;                                     \
    case DPL_OP_TANH: UN_LOOP(T, T, tanh##S(x)); break;                                             \
    case DPL_OP_SIGMOID: UN_LOOP(T, T, (T)1 / ((T)1 + exp##S(-x))); break;                          \
    case DPL_OP_RELU: UN_LOOP(T, T, x < 0 ? (T)0 : x); break;                                       \
    case DPL_OP_GELU: UN_LOOP(T, T, (T)0.5 * x * ((T)1 + erf##S(x * (T)0.70710678118654752440))); break; \
    case DPL_OP_SIN: UN_LOOP(T, T, sin##S(x)); break;                                               \
    case DPL_OP_COS: UN_LOOP(T, T, cos##S(x)); break;                                               \
    case DPL_OP_FLOOR: UN_LOOP(T, T, floor##S(x)); break;                                           \
    case DPL_OP_CEIL: UN_LOOP(T, T, ceil##S(x)); break;                                             \
    case DPL_OP_ROUND: UN_LOOP(T, T, nearbyint##S(x)); break;                                       \
    case DPL_OP_TRUNC: UN_LOOP(T, T, trunc##S(x)); break;                                           \
    case DPL_OP_SIGN: UN_LOOP(T, T, x > 0 ? (T)1 : x < 0 ? (T)-1 : (T)0); break;                    \
    case DPL_OP_RECIPROCAL: UN_LOOP(T, T, (T)1 / x); break;                                         \
    case DPL_OP_SQUARE: UN_LOOP(T, T, x * x); break;                                                \
    case DPL_OP_LOG1P: UN_LOOP(T, T, log1p##S(x)); break;                                           \
    case DPL_OP_EXPM1: UN_LOOP(T, T, expm1##S(x)); break;                                           \
    case DPL_OP_SILU: UN_LOOP(T, T, x / ((T)1 + exp##S(-x))); break;                                \
    case DPL_OP_ERF: UN_LOOP(T, T, erf##S(x)); break;                                               \
    case DPL_OP_LOG2: UN_LOOP(T, T, log2##S(x)); break;                                             \
    case DPL_OP_LOGICAL_NOT: UN_LOOP(uint8_t, T, x == 0); break;                                    \
    case DPL_OP_ISNAN: UN_LOOP(uint8_t, T, x != x); break;                                          \
    case DPL_OP_LOG10: UN_LOOP(T, T, log10##S(x)); break;                                           \
    case DPL_OP_EXP2: UN_LOOP(T, T, exp2##S(x)); break;                                             \
    case DPL_OP_SINH: UN_LOOP(T, T, sinh##S(x)); break;                                             \
    case DPL_OP_COSH: UN_LOOP(T, T, cosh##S(x)); break;                                             \
    case DPL_OP_TAN: UN_LOOP(T, T, tan##S(x)); break;                                               \
    case DPL_OP_ASIN: UN_LOOP(T, T, asin##S(x)); break;                                             \
    case DPL_OP_ACOS: UN_LOOP(T, T, acos##S(x)); break;                                             \
    case DPL_OP_ATAN: UN_LOOP(T, T, atan##S(x)); break;                                             \
    case DPL_OP_ASINH: UN_LOOP(T, T, asinh##S(x)); break;                                           \
    case DPL_OP_ACOSH: UN_LOOP(T, T, acosh##S(x)); break;                                           \
    case DPL_OP_ATANH: UN_LOOP(T, T, atanh##S(x)); break;                                           \
    case DPL_OP_FRAC: UN_LOOP(T, T, x - trunc##S(x)); break;                                        \
    case DPL_OP_ISINF: UN_LOOP(uint8_t, T, isinf(x) != 0); break;                                   \
    case DPL_OP_ISFINITE: UN_LOOP(uint8_t, T, isfinite(x) != 0); break;                             \
    }                                                                                               \
  }
FLOAT_UNARY(un_f32_plain, float, f)

static void un_f32(char **p, const int64_t *st, int64_t n, void *ctx)
{
  const ew_ctx *c = ctx;
  if (c->vm1) { dpl_vm_map(c->vm1 - 1, p[0], st[0], p[1], st[1], n, 0, 0); return; }
#if defined(__SSE2__)
  if (n >= STREAM_MIN && c->stream && st[0] == 4 && st[1] == 4 && p[0] != p[1] && c->op == DPL_OP_RELU) {
    float *o = (float *)p[0];
    const float *A = (const float *)p[1];
    int64_t i = 0;
    const __m128 zero = _mm_setzero_ps();
    while (i < n && ((uintptr_t)(o + i) & 15)) { float x = A[i]; o[i] = x < 0 ? 0.0f : x; i++; }
    for (; i + 4 <= n; i += 4) {
      __m128 x = _mm_loadu_ps(A + i);
      _mm_stream_ps(o + i, _mm_andnot_ps(_mm_cmplt_ps(x, zero), x)); /* NaN stays NaN */
    }
    for (; i < n; i++) { float x = A[i]; o[i] = x < 0 ? 0.0f : x; }
    _mm_sfence();
    return;
  }
#endif
  un_f32_plain(p, st, n, ctx);
}
FLOAT_UNARY(un_f64, double, )

static inline int isneg(int64_t x) { return x < 0; }
#define INT_UNARY(NAME, T, U)                                                                       \
  DPL_CLONES static void NAME(char **p, const int64_t *st, int64_t n, void *ctx)                               \
  {                                                                                                 \
    switch (*(int *)ctx) {                                                                          \
    case DPL_OP_NEG: UN_LOOP(T, T, (T)(0 - (U)x)); break;                                           \
    case DPL_OP_ABS: UN_LOOP(T, T, isneg((int64_t)x) ? (T)(0 - (U)x) : x); break;                    \
    case DPL_OP_RELU: UN_LOOP(T, T, x > 0 ? x : 0); break;                                          \
    case DPL_OP_SIGN: UN_LOOP(T, T, x > 0 ? 1 : isneg((int64_t)x) ? -1 : 0); break;                  \
    case DPL_OP_SQUARE: UN_LOOP(T, T, (T)((U)x * (U)x)); break;                                     \
    case DPL_OP_FLOOR: case DPL_OP_CEIL: case DPL_OP_ROUND: case DPL_OP_TRUNC: UN_LOOP(T, T, x); break; \
    case DPL_OP_LOGICAL_NOT: UN_LOOP(uint8_t, T, x == 0); break;                                    \
    case DPL_OP_ISNAN: case DPL_OP_ISINF: UN_LOOP(uint8_t, T, 0 * x); break;                        \
    case DPL_OP_ISFINITE: UN_LOOP(uint8_t, T, 1 + 0 * x); break;                                    \
    case DPL_OP_BITWISE_NOT: UN_LOOP(T, T, (T)~x); break;                                           \
    }                                                                                               \
  }
INT_UNARY(un_i32, int32_t, uint32_t)
INT_UNARY(un_i64, int64_t, uint64_t)
INT_UNARY(un_u8, uint8_t, uint32_t)

static const dpl_loop_fn un_loops[5] = {un_f32, un_f64, un_i32, un_i64, un_u8};

/* the vectorised float32 kernel of a unary op (dpl_tensor_vmath.c), -1 for none or when
 * DPL_VMATH=off */
static int vm_of_unary(int op)
{
  static const int8_t map[] = {
    [DPL_OP_EXP] = DPL_VM_EXP + 1, [DPL_OP_LOG] = DPL_VM_LOG + 1, [DPL_OP_TANH] = DPL_VM_TANH + 1,
    [DPL_OP_SIGMOID] = DPL_VM_SIGMOID + 1, [DPL_OP_GELU] = DPL_VM_GELU + 1, [DPL_OP_SIN] = DPL_VM_SIN + 1,
    [DPL_OP_COS] = DPL_VM_COS + 1, [DPL_OP_LOG1P] = DPL_VM_LOG1P + 1, [DPL_OP_EXPM1] = DPL_VM_EXPM1 + 1,
    [DPL_OP_SILU] = DPL_VM_SILU + 1, [DPL_OP_ERF] = DPL_VM_ERF + 1, [DPL_OP_LOG2] = DPL_VM_LOG2 + 1,
    [DPL_OP_LOG10] = DPL_VM_LOG10 + 1, [DPL_OP_EXP2] = DPL_VM_EXP2 + 1, [DPL_OP_SINH] = DPL_VM_SINH + 1,
    [DPL_OP_COSH] = DPL_VM_COSH + 1, [DPL_OP_TAN] = DPL_VM_TAN + 1, [DPL_OP_ASIN] = DPL_VM_ASIN + 1,
    [DPL_OP_ACOS] = DPL_VM_ACOS + 1, [DPL_OP_ATAN] = DPL_VM_ATAN + 1, [DPL_OP_ASINH] = DPL_VM_ASINH + 1,
    [DPL_OP_ACOSH] = DPL_VM_ACOSH + 1, [DPL_OP_ATANH] = DPL_VM_ATANH + 1,
  };
  if (op < 0 || op >= (int)sizeof map || dpl_vm_isa() == DPL_VM_OFF) return -1;
  return map[op] - 1;
}

const char *dpl_vmath(const char *isa)
{
  if (isa) {
    int v = dpl_vm_parse_isa(isa);
    if (v == -2) {
      dpl_errorf(DPL_EINVAL, "vmath: unknown path '%s' (expected auto, avx512, avx2, scalar or off)", isa);
      return NULL;
    }
    dpl_vm_set_isa(v < DPL_VM_OFF ? -2 : v);
  }
  return dpl_vm_isa_name(dpl_vm_isa());
}

static int unary_core(int32_t op, const dpl_tensor *a, dpl_tensor *dst, dpl_tensor **out)
{
  const char *name = unop_name(op);
  if (!name) return dpl_errorf(DPL_EINVAL, "unary: unknown op id %d", (int)op);
  DPL_TRY(dpl_check_handle(name, "self", a));
  if (op >= DPL_OP_LOG10) { /* the ops of the math group */
    if (op == DPL_OP_FRAC && !dpl_is_float(a->_dtype))
      return dpl_errorf(DPL_EINVAL, "frac: expected a floating-point tensor, got %s", dpl_dtype_name(a->_dtype));
    if (op == DPL_OP_BITWISE_NOT && dpl_is_float(a->_dtype))
      return dpl_errorf(DPL_EINVAL, "bitwise_not: expected an integer or bool tensor, got %s", dpl_dtype_name(a->_dtype));
    if (op == DPL_OP_BITWISE_NOT && a->_dtype == DPL_BOOL) op = DPL_OP_LOGICAL_NOT; /* (~ on 0/1 bytes would give 255) */
  }
  int32_t rd = un_bool_out(op) ? DPL_BOOL : (un_float_only(op) && !dpl_is_float(a->_dtype)) ? DPL_FLOAT32 : a->_dtype;
  int32_t kd = kernel_dtype(un_float_only(op) && !dpl_is_float(a->_dtype) ? DPL_FLOAT32 : a->_dtype);
  if (op == DPL_OP_NEG && a->_dtype == DPL_BOOL)
    return dpl_errorf(DPL_EINVAL, "neg: negating a bool tensor is not supported; use logical_not");
  if (dst) DPL_TRY(dpl_check_writable(name, "_", dst));
  if (dst && !can_cast(rd, dst->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s_: the result type %s cannot be stored in place in a %s tensor", name,
                      dpl_dtype_name(rd), dpl_dtype_name(dst->_dtype));
  int32_t od = un_bool_out(op) ? DPL_BOOL : kd;
  dpl_tensor *ta = NULL, *res = NULL, *tmp = NULL, *target = NULL;
  const dpl_tensor *ua;
  int st = temp_convert(name, a, kd, &ta, &ua);
  if (st == DPL_OK) {
    if (dst) {
      if (dst->_dtype == od) target = dst;
      else st = dpl_new(name, od, a->_ndim, a->_shape, a, &tmp), target = tmp;
    } else {
      st = dpl_new(name, rd, a->_ndim, a->_shape, a, &res);
      if (st == DPL_OK) {
        if (rd == od) target = res;
        else st = dpl_new(name, od, a->_ndim, a->_shape, a, &tmp), target = tmp;
      }
    }
  }
  if (st == DPL_OK && dpl_is_devmem(ua) != dpl_is_devmem(target)) /* (never both kinds of memory in one kernel) */
    st = dpl_check_tensor(name, "self", dpl_is_devmem(ua) ? ua : target);
  if (st == DPL_OK && dpl_is_devmem(target)) {
    dpl_bk_args k = {.op = DPL_BK_UNARY, .sub = op, .i = {0, 0, 0, kd}, .inout = target, .in = {ua}, .name = name};
    st = dpl_bk_call(&k);
    if (st == DPL_OK && tmp) st = dpl_copy_any(name, dst ? dst : res, tmp);
  } else if (st == DPL_OK) {
    dpl_tensor *ops[2] = {target, (dpl_tensor *)ua};
    dpl_iter it;
    dpl_iter_init(&it, 2, ops, a->_ndim, a->_shape);
    ew_ctx c = {op, target != dst && dpl_storage_cold(target), kd == DPL_FLOAT32 ? vm_of_unary(op) + 1 : 0};
    dpl_iter_run(&it, loop_for(kd, un_loops), &c, GRAIN / 4);
    if (tmp) dpl_copy_raw(dst ? dst : res, tmp);
  }
  dpl_tensor_release(ta);
  dpl_tensor_release(tmp);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  if (out) *out = res;
  return DPL_OK;
}

int dpl_unary(int32_t op, const dpl_tensor *a, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "unary: out is NULL");
  *out = NULL;
  return unary_core(op, a, NULL, out);
}

int dpl_unary_(int32_t op, dpl_tensor *a) { return unary_core(op, a, a, NULL); }

/* ---- activation gradients ---- */
/* op dispatched outside the loop, a contiguous fast path: relu's backward then
 * vectorises like its forward. */
#define ACT_LOOP(T, EXPR)                                                                             \
  do {                                                                                                \
    if (st[0] == sizeof(T) && st[1] == sizeof(T) && st[2] == sizeof(T)) {                             \
      T *o = (T *)p[0]; const T *G = (const T *)p[1], *X = (const T *)p[2];                           \
      for (int64_t i = 0; i < n; i++) { T g = G[i], x = X[i]; o[i] = (EXPR); }                        \
    } else {                                                                                          \
      for (int64_t i = 0; i < n; i++) {                                                               \
        T g = *(const T *)(p[1] + i * st[1]), x = *(const T *)(p[2] + i * st[2]);                     \
        *(T *)(p[0] + i * st[0]) = (EXPR);                                                            \
      }                                                                                               \
    }                                                                                                 \
  } while (0)
#define ACT_BWD(NAME, T, S)                                                                           \
  static inline T NAME##_gelu(T g, T x)                                                               \
  {                                                                                                   \
    T cdf = (T)0.5 * ((T)1 + erf##S(x * (T)0.70710678118654752440));                                  \
    T pdf = exp##S((T)-0.5 * x * x) * (T)0.39894228040143267794;                                      \
    return g * (cdf + x * pdf);                                                                       \
  }                                                                                                   \
  static inline T NAME##_silu(T g, T x)                                                               \
  {                                                                                                   \
    T s = (T)1 / ((T)1 + exp##S(-x));                                                                 \
    return g * s * ((T)1 + x * ((T)1 - s));                                                           \
  }                                                                                                   \
  DPL_CLONES static void NAME(char **p, const int64_t *st, int64_t n, void *ctx)                      \
  {                                                                                                   \
    switch (*(int *)ctx) {                                                                            \
    case DPL_OP_RELU: ACT_LOOP(T, x > 0 ? g : (T)0); break;                                           \
    case DPL_OP_TANH: ACT_LOOP(T, g * ((T)1 - x * x)); break;                                         \
    case DPL_OP_SIGMOID: ACT_LOOP(T, g * x * ((T)1 - x)); break;                                      \
    case DPL_OP_GELU: ACT_LOOP(T, NAME##_gelu(g, x)); break;                                          \
    default: ACT_LOOP(T, NAME##_silu(g, x)); break;                                                   \
    }                                                                                                 \
  }
ACT_BWD(act_f32_plain, float, f)
ACT_BWD(act_f64, double, )
/* gelu and silu in float32: the vectorised kernels (ctx: the op, then the dpl_tensor_vmath
 * gradient + 1, 0 for libm) */
static void act_f32(char **p, const int64_t *st, int64_t n, void *ctx)
{
  const int *c = ctx;
  if (c[1]) dpl_vm_grad(c[1] - 1, p[0], st[0], p[1], st[1], p[2], st[2], n, 0, 0);
  else act_f32_plain(p, st, n, ctx);
}

int dpl_activation_backward(int32_t op, const dpl_tensor *grad, const dpl_tensor *x, const dpl_tensor *y,
                            dpl_tensor **out)
{
  const char *name = "activation_backward";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  if (op != DPL_OP_RELU && op != DPL_OP_TANH && op != DPL_OP_SIGMOID && op != DPL_OP_GELU && op != DPL_OP_SILU)
    return dpl_errorf(DPL_EINVAL, "%s: op %d has no gradient kernel (expected relu, tanh, sigmoid, gelu, silu)", name, (int)op);
  const dpl_tensor *in = (op == DPL_OP_TANH || op == DPL_OP_SIGMOID) ? y : x;
  DPL_TRY(dpl_check_handle(name, "grad", grad));
  DPL_TRY(dpl_check_handle(name, (op == DPL_OP_TANH || op == DPL_OP_SIGMOID) ? "output" : "input", in));
  DPL_TRY(dpl_check_same_device(name, grad, in));
  if (!dpl_same_shape(grad, in)) {
    char b1[160], b2[160];
    return dpl_errorf(DPL_EINVAL, "%s: grad shape %s does not match the saved tensor's shape %s", name,
                      dpl_shape_str(grad->_ndim, grad->_shape, b1, sizeof b1), dpl_shape_str(in->_ndim, in->_shape, b2, sizeof b2));
  }
  int32_t rd = dpl_promote(grad->_dtype, in->_dtype);
  if (!dpl_is_float(rd)) rd = DPL_FLOAT32;
  int32_t kd = rd == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  dpl_tensor *tg = NULL, *tx = NULL, *res = NULL;
  const dpl_tensor *ug, *ux;
  int st = temp_convert(name, grad, kd, &tg, &ug);
  if (st == DPL_OK) st = temp_convert(name, in, kd, &tx, &ux);
  if (st == DPL_OK) st = dpl_new(name, kd, grad->_ndim, grad->_shape, grad, &res);
  if (st == DPL_OK) {
    if (dpl_is_devmem(res)) {
      dpl_bk_args k = {.op = DPL_BK_ACT_BWD, .sub = op, .i = {0, 0, 0, kd}, .inout = res, .in = {ug, ux}, .name = name};
      st = dpl_bk_call(&k);
    } else {
      dpl_tensor *ops[3] = {res, (dpl_tensor *)ug, (dpl_tensor *)ux};
      dpl_iter it;
      dpl_iter_init(&it, 3, ops, grad->_ndim, grad->_shape);
      int c[2] = {op, 0};
      if (kd == DPL_FLOAT32 && dpl_vm_isa() != DPL_VM_OFF && (op == DPL_OP_GELU || op == DPL_OP_SILU))
        c[1] = (op == DPL_OP_GELU ? DPL_VM_D_GELU : DPL_VM_D_SILU) + 1;
      dpl_iter_run(&it, kd == DPL_FLOAT32 ? act_f32 : act_f64, c, GRAIN / 4);
    }
    if (st == DPL_OK) st = dpl_retype(name, &res, rd);
  }
  dpl_release_n(2, (dpl_tensor *[]){tg, tx});
  return dpl_hand_over(st, 1, &res, &out);
}

/* ---- clamp ---- */
typedef struct clamp_ctx { double lo, hi; int has_lo, has_hi; } clamp_ctx;
#define CLAMP_FN(NAME, T)                                                                  \
  DPL_CLONES static void NAME(char **p, const int64_t *st, int64_t n, void *vctx)                     \
  {                                                                                        \
    clamp_ctx *c = vctx;                                                                   \
    T lo = (T)c->lo, hi = (T)c->hi;                                                        \
    for (int64_t i = 0; i < n; i++) {                                                      \
      T x = *(const T *)(p[1] + i * st[1]);                                                \
      if (c->has_lo && x < lo) x = lo;                                                     \
      if (c->has_hi && x > hi) x = hi;                                                     \
      *(T *)(p[0] + i * st[0]) = x;                                                        \
    }                                                                                      \
  }
CLAMP_FN(clamp_f32, float)
CLAMP_FN(clamp_f64, double)
CLAMP_FN(clamp_i64, int64_t)

static int clamp_core(const dpl_tensor *a, double lo, double hi, int32_t has_lo, int32_t has_hi, dpl_tensor *dst,
                      dpl_tensor **out)
{
  const char *name = dst ? "clamp_" : "clamp";
  DPL_TRY(dpl_check_handle(name, "self", a));
  if (!has_lo && !has_hi) return dpl_errorf(DPL_EINVAL, "%s: at least one of min and max must be given", name);
  if (a->_dtype == DPL_BOOL) return dpl_errorf(DPL_EINVAL, "%s: not supported for bool tensors", name);
  int32_t kd = a->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : dpl_is_float(a->_dtype) ? DPL_FLOAT32 : DPL_INT64;
  if (kd == DPL_INT64) {
    lo = has_lo ? ceil(lo) : 0;
    hi = has_hi ? floor(hi) : 0;
    if (lo < -9.2e18) lo = -9.2e18;
    if (hi > 9.2e18) hi = 9.2e18;
    if (hi < -9.2e18) hi = -9.2e18;
    if (lo > 9.2e18) lo = 9.2e18;
  }
  dpl_tensor *ta = NULL, *tmp = NULL, *res = NULL;
  const dpl_tensor *ua;
  int st = temp_convert(name, a, kd, &ta, &ua);
  dpl_tensor *target = NULL;
  if (st == DPL_OK) {
    if (dst && dst->_dtype == kd) target = dst;
    else if (!dst && a->_dtype == kd) { st = dpl_new(name, kd, a->_ndim, a->_shape, a, &res); target = res; }
    else { st = dpl_new(name, kd, a->_ndim, a->_shape, a, &tmp); target = tmp; }
  }
  if (st == DPL_OK) {
    if (dpl_is_devmem(target)) {
      dpl_bk_args k = {.op = DPL_BK_CLAMP, .i = {has_lo, has_hi, 0, kd}, .d = {lo, hi}, .inout = target, .in = {ua},
                       .name = name};
      st = dpl_bk_call(&k);
    } else {
      dpl_tensor *ops[2] = {target, (dpl_tensor *)ua};
      dpl_iter it;
      dpl_iter_init(&it, 2, ops, a->_ndim, a->_shape);
      clamp_ctx c = {lo, hi, has_lo, has_hi};
      dpl_iter_run(&it, kd == DPL_FLOAT32 ? clamp_f32 : kd == DPL_FLOAT64 ? clamp_f64 : clamp_i64, &c, GRAIN);
    }
    if (st == DPL_OK && tmp) {
      if (dst) st = dpl_copy_any(name, dst, tmp);
      else st = dpl_contig_as(name, tmp, a->_dtype, &res);
    }
  }
  dpl_tensor_release(ta);
  dpl_tensor_release(tmp);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  if (out) *out = res;
  return DPL_OK;
}

int dpl_clamp(const dpl_tensor *a, double lo, double hi, int32_t has_lo, int32_t has_hi, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "clamp: out is NULL");
  *out = NULL;
  return clamp_core(a, lo, hi, has_lo, has_hi, NULL, out);
}

int dpl_clamp_(dpl_tensor *a, double lo, double hi, int32_t has_lo, int32_t has_hi)
{
  return clamp_core(a, lo, hi, has_lo, has_hi, a, NULL);
}

/* ---- where / masked_fill ---- */
static void where_loop(char **p, const int64_t *st, int64_t n, void *ctx)
{
  int64_t es = *(int64_t *)ctx;
  for (int64_t i = 0; i < n; i++) {
    const char *src = *(const uint8_t *)(p[1] + i * st[1]) ? p[2] + i * st[2] : p[3] + i * st[3];
    memcpy(p[0] + i * st[0], src, (size_t)es);
  }
}

int dpl_where(const dpl_tensor *cond, const dpl_tensor *a, const dpl_tensor *b, dpl_tensor **out)
{
  const char *name = "where";
  if (!out) return dpl_errorf(DPL_EINVAL, "where: out is NULL");
  *out = NULL;
  DPL_TRY(dpl_check_handle(name, "condition", cond));
  DPL_TRY(dpl_check_handle(name, "self", a));
  DPL_TRY(dpl_check_handle(name, "other", b));
  DPL_TRY(dpl_check_same_device(name, cond, a));
  DPL_TRY(dpl_check_same_device(name, a, b));
  int64_t s1[DPL_MAX_DIMS], shape[DPL_MAX_DIMS];
  int32_t n1, nd;
  DPL_TRY(dpl_broadcast_shapes(name, a->_ndim, a->_shape, b->_ndim, b->_shape, &n1, s1));
  DPL_TRY(dpl_broadcast_shapes(name, cond->_ndim, cond->_shape, n1, s1, &nd, shape));
  int32_t rd = dpl_promote(a->_dtype, b->_dtype);
  dpl_tensor *tc = NULL, *ta = NULL, *tb = NULL, *res = NULL;
  const dpl_tensor *uc = cond, *ua, *ub;
  int st = DPL_OK;
  if (cond->_dtype != DPL_BOOL && cond->_dtype != DPL_UINT8) st = temp_convert(name, cond, DPL_BOOL, &tc, &uc);
  if (st == DPL_OK) st = temp_convert(name, a, rd, &ta, &ua);
  if (st == DPL_OK) st = temp_convert(name, b, rd, &tb, &ub);
  if (st == DPL_OK) st = dpl_new(name, rd, nd, shape, a, &res);
  if (st == DPL_OK && dpl_is_devmem(res)) {
    dpl_bk_args k = {.op = DPL_BK_WHERE, .inout = res, .in = {uc, ua, ub}, .name = name};
    st = dpl_bk_call(&k);
  } else if (st == DPL_OK) {
    dpl_tensor *ops[4] = {res, (dpl_tensor *)uc, (dpl_tensor *)ua, (dpl_tensor *)ub};
    dpl_iter it;
    dpl_iter_init(&it, 4, ops, nd, shape);
    int64_t es = dpl_elsize(rd);
    dpl_iter_run(&it, where_loop, &es, GRAIN);
  }
  dpl_tensor_release(tc);
  dpl_tensor_release(ta);
  dpl_tensor_release(tb);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *out = res;
  return DPL_OK;
}

typedef struct mf_ctx { char v[8]; int64_t es; } mf_ctx;
static void masked_fill_loop(char **p, const int64_t *st, int64_t n, void *vctx)
{
  mf_ctx *c = vctx;
  for (int64_t i = 0; i < n; i++)
    if (*(const uint8_t *)(p[1] + i * st[1])) memcpy(p[0] + i * st[0], c->v, (size_t)c->es);
}

int dpl_masked_fill_(dpl_tensor *a, const dpl_tensor *mask, double value)
{
  const char *name = "masked_fill_";
  DPL_TRY(dpl_check_handle(name, "self", a));
  DPL_TRY(dpl_check_writable(name, "", a));
  DPL_TRY(dpl_check_handle(name, "mask", mask));
  DPL_TRY(dpl_check_same_device(name, a, mask));
  if (mask->_dtype != DPL_BOOL && mask->_dtype != DPL_UINT8)
    return dpl_errorf(DPL_EINVAL, "%s: expected a bool mask, got %s", name, dpl_dtype_name(mask->_dtype));
  int64_t st[DPL_MAX_DIMS];
  if (dpl_broadcast_strides(mask, a->_ndim, a->_shape, st) != 0) {
    char b1[160], b2[160];
    return dpl_errorf(DPL_EINVAL, "%s: mask of shape %s cannot be broadcast to shape %s", name,
                      dpl_shape_str(mask->_ndim, mask->_shape, b1, sizeof b1), dpl_shape_str(a->_ndim, a->_shape, b2, sizeof b2));
  }
  /* a mask that partly overlaps self (a bool x:masked_fill_(x:t(), false)) goes through a copy */
  dpl_tensor *tm = NULL;
  DPL_TRY(dpl_unalias(name, a, &tm, &mask));
  int r = DPL_OK;
  if (dpl_is_devmem(a)) {
    dpl_bk_args k = {.op = DPL_BK_MASKED_FILL, .inout = a, .in = {mask}, .d = {value}, .name = name};
    r = dpl_bk_call(&k);
  } else {
    mf_ctx c;
    c.es = dpl_elsize(a->_dtype);
    dpl_store_f64(c.v, a->_dtype, value);
    dpl_tensor *ops[2] = {a, (dpl_tensor *)mask};
    dpl_iter it;
    dpl_iter_init(&it, 2, ops, a->_ndim, a->_shape);
    dpl_iter_run(&it, masked_fill_loop, &c, GRAIN);
  }
  dpl_tensor_release(tm);
  return r;
}
