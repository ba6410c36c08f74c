/* dpl_tensor_math.c: the CPU kernels of the math group of tensor methods
 * (lua/dpl/tensor_math.lua): the activations hardtanh, softplus, elu,
 * leaky_relu (with their parameters), mish and hardswish, and their gradients;
 * nan_to_num; isclose; lerp; addcmul and addcdiv. Operands broadcast through
 * the shared element iterator; float16/bfloat16 compute in float32 through
 * converted temporaries; float32 softplus, elu and mish (and their gradients) run
 * the vector kernels of dpl_tensor_vmath.c. For tensors in GPU memory, nan_to_num, isclose,
 * lerp, addcmul and addcdiv run (after the same checks) as compositions of ops the backend
 * runs (binary, unary, where, masked_fill: the *_dev functions below, the kernels' formulas
 * and roundings); the activations fail here with "<op>: not implemented on cuda"
 * (dpl_check_tensor; dpl.tensor_math composes them in Lua). */
#include "dpl_tensor_internal.h"
#include "dpl_tensor_vmath.h"
#include <float.h>
#include <stdio.h>

#define GRAIN 8192

/* ---- activations ---- */
static const char *act_name(int32_t op)
{
  static const char *names[] = {"hardtanh", "softplus", "elu", "leaky_relu", "mish", "hardswish"};
  return op >= 0 && op < (int32_t)(sizeof names / sizeof names[0]) ? names[op] : NULL;
}

typedef struct act_ctx { int op; double p0, p1; int vm1; /* float32: dpl_tensor_vmath's function + 1, 0: libm */ } act_ctx;

/* forward f(x) and gradient g * f'(x), PyTorch 1.13's formulas (CPU kernels) */
#define ACT_FUNCS(T, S)                                                                                     \
  static inline T hardtanh_##T(T x, T lo, T hi) { T y = x < lo ? lo : x; return y > hi ? hi : y; }          \
  static inline T softplus_##T(T x, T beta, T thr)                                                          \
  {                                                                                                         \
    return x * beta > thr ? x : log1p##S(exp##S(x * beta)) / beta;                                          \
  }                                                                                                         \
  static inline T elu_##T(T x, T alpha) { return x <= (T)0 ? expm1##S(x) * alpha : x; }                     \
  static inline T leaky_##T(T x, T slope) { return x > (T)0 ? x : x * slope; }                              \
  static inline T mish_##T(T x) { return x * tanh##S(log1p##S(exp##S(x))); }                                \
  static inline T hardswish_##T(T x)                                                                        \
  {                                                                                                         \
    T r = x + (T)3;                                                                                         \
    r = r < (T)0 ? (T)0 : r;                                                                                \
    r = r > (T)6 ? (T)6 : r;                                                                                \
    return x * r / (T)6;                                                                                    \
  }                                                                                                         \
  static inline T d_hardtanh_##T(T g, T x, T lo, T hi) { return (x <= lo || x >= hi) ? (T)0 : g; }          \
  static inline T d_softplus_##T(T g, T x, T beta, T thr)                                                   \
  {                                                                                                         \
    T z = exp##S(x * beta);                                                                                 \
    return x * beta > thr ? g : g * z / (z + (T)1);                                                         \
  }                                                                                                         \
  static inline T d_elu_##T(T g, T x, T alpha) { return x <= (T)0 ? g * alpha * exp##S(x) : g; }            \
  static inline T d_leaky_##T(T g, T x, T slope) { return x > (T)0 ? g : g * slope; }                       \
  static inline T d_mish_##T(T g, T x)                                                                      \
  {                                                                                                         \
    T sg = (T)1 / ((T)1 + exp##S(-x));                                                                      \
    T ts = tanh##S(log1p##S(exp##S(x)));                                                                    \
    return g * (ts + x * sg * ((T)1 - ts * ts));                                                            \
  }                                                                                                         \
  static inline T d_hardswish_##T(T g, T x)                                                                 \
  {                                                                                                         \
    return x < (T)-3 ? (T)0 : x <= (T)3 ? g * (x / (T)3 + (T)0.5) : g;                                      \
  }
ACT_FUNCS(float, f)
ACT_FUNCS(double, )

/* o = EXPR(x) over a run; a contiguous fast path */
#define RUN1(T, EXPR)                                                                                       \
  do {                                                                                                      \
    if (st[0] == sizeof(T) && st[1] == sizeof(T)) {                                                         \
      T *o = (T *)p[0];                                                                                     \
      const T *X = (const T *)p[1];                                                                         \
      for (int64_t i = 0; i < n; i++) { T x = X[i]; o[i] = (EXPR); }                                        \
    } else {                                                                                                \
      for (int64_t i = 0; i < n; i++) {                                                                     \
        T x = *(const T *)(p[1] + i * st[1]);                                                               \
        *(T *)(p[0] + i * st[0]) = (EXPR);                                                                  \
      }                                                                                                     \
    }                                                                                                       \
  } while (0)
/* o = EXPR(g, x) over a run */
#define RUN2(T, EXPR)                                                                                       \
  do {                                                                                                      \
    if (st[0] == sizeof(T) && st[1] == sizeof(T) && st[2] == sizeof(T)) {                                   \
      T *o = (T *)p[0];                                                                                     \
      const T *G = (const T *)p[1], *X = (const T *)p[2];                                                   \
      for (int64_t i = 0; i < n; i++) { T g = G[i], x = X[i]; o[i] = (EXPR); }                              \
    } else {                                                                                                \
      for (int64_t i = 0; i < n; i++) {                                                                     \
        T g = *(const T *)(p[1] + i * st[1]), x = *(const T *)(p[2] + i * st[2]);                           \
        *(T *)(p[0] + i * st[0]) = (EXPR);                                                                  \
      }                                                                                                     \
    }                                                                                                       \
  } while (0)

#define ACT_LOOPS(T)                                                                                        \
  DPL_CLONES static void act_fwd_##T(char **p, const int64_t *st, int64_t n, void *vctx)                    \
  {                                                                                                         \
    const act_ctx *c = vctx;                                                                                \
    const T a = (T)c->p0, b = (T)c->p1;                                                                     \
    switch (c->op) {                                                                                        \
    case DPL_ACT_HARDTANH: RUN1(T, hardtanh_##T(x, a, b)); break;                                           \
    case DPL_ACT_SOFTPLUS: RUN1(T, softplus_##T(x, a, b)); break;                                           \
    case DPL_ACT_ELU: RUN1(T, elu_##T(x, a)); break;                                                        \
    case DPL_ACT_LEAKY_RELU: RUN1(T, leaky_##T(x, a)); break;                                               \
    case DPL_ACT_MISH: RUN1(T, mish_##T(x)); break;                                                         \
    default: RUN1(T, hardswish_##T(x)); break;                                                              \
    }                                                                                                       \
  }                                                                                                         \
  DPL_CLONES static void act_bwd_##T(char **p, const int64_t *st, int64_t n, void *vctx)                    \
  {                                                                                                         \
    const act_ctx *c = vctx;                                                                                \
    const T a = (T)c->p0, b = (T)c->p1;                                                                     \
    switch (c->op) {                                                                                        \
    case DPL_ACT_HARDTANH: RUN2(T, d_hardtanh_##T(g, x, a, b)); break;                                      \
    case DPL_ACT_SOFTPLUS: RUN2(T, d_softplus_##T(g, x, a, b)); break;                                      \
    case DPL_ACT_ELU: RUN2(T, d_elu_##T(g, x, a)); break;                                                   \
    case DPL_ACT_LEAKY_RELU: RUN2(T, d_leaky_##T(g, x, a)); break;                                          \
    case DPL_ACT_MISH: RUN2(T, d_mish_##T(g, x)); break;                                                    \
    default: RUN2(T, d_hardswish_##T(g, x)); break;                                                         \
    }                                                                                                       \
  }
ACT_LOOPS(float)
ACT_LOOPS(double)

/* softplus, elu and mish in float32 go to the vectorised kernels (dpl_tensor_vmath.c) */
static void act_fwd_f32(char **p, const int64_t *st, int64_t n, void *vctx)
{
  const act_ctx *c = vctx;
  if (c->vm1) dpl_vm_map(c->vm1 - 1, p[0], st[0], p[1], st[1], n, (float)c->p0, (float)c->p1);
  else act_fwd_float(p, st, n, vctx);
}
static void act_bwd_f32(char **p, const int64_t *st, int64_t n, void *vctx)
{
  const act_ctx *c = vctx;
  if (c->vm1) dpl_vm_grad(c->vm1 - 1, p[0], st[0], p[1], st[1], p[2], st[2], n, (float)c->p0, (float)c->p1);
  else act_bwd_float(p, st, n, vctx);
}
/* the dpl_tensor_vmath function (+ 1) of an activation or its gradient, 0 for none */
static int act_vm1(int32_t op, int grad)
{
  if (dpl_vm_isa() == DPL_VM_OFF) return 0;
  switch (op) {
  case DPL_ACT_SOFTPLUS: return 1 + (grad ? DPL_VM_D_SOFTPLUS : DPL_VM_SOFTPLUS);
  case DPL_ACT_ELU: return 1 + (grad ? DPL_VM_D_ELU : DPL_VM_ELU);
  case DPL_ACT_MISH: return 1 + (grad ? DPL_VM_D_MISH : DPL_VM_MISH);
  default: return 0;
  }
}

/* the kernel dtype of a floating dtype */
static int32_t float_kd(int32_t dt) { return dt == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32; }

/* *use = t, or a contiguous copy of t in dtype kd (in *tmp) when t's dtype differs */
static int as_kd(const char *name, const dpl_tensor *t, int32_t kd, dpl_tensor **tmp, const dpl_tensor **use)
{
  *tmp = NULL;
  *use = t;
  if (t->_dtype == kd) return DPL_OK;
  DPL_TRY(dpl_contig_as(name, t, kd, tmp));
  *use = *tmp;
  return DPL_OK;
}

/* A kernel's result: out-of-place, res (kernel dtype) becomes the op's dtype rd; in place,
 * res (a temporary when dst's dtype is not the kernel's) is copied into dst. */
static int finish(const char *name, dpl_tensor *dst, dpl_tensor **res, int32_t rd)
{
  if (!dst) return dpl_retype(name, res, rd);
  if (*res) {
    dpl_copy_raw(dst, *res);
    dpl_tensor_release(*res);
    *res = NULL;
  }
  return DPL_OK;
}

static int act_core(int32_t op, const dpl_tensor *x, double p0, double p1, dpl_tensor *dst, dpl_tensor **out)
{
  const char *name = act_name(op);
  if (!name) return dpl_errorf(DPL_EINVAL, "activation: unknown op id %d", (int)op);
  DPL_TRY(dpl_check_tensor(name, "input", x));
  if (!dpl_is_float(x->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected a floating-point tensor, got %s", name, dpl_dtype_name(x->_dtype));
  if (dst) DPL_TRY(dpl_check_writable(name, "_", dst));
  int32_t kd = float_kd(x->_dtype);
  dpl_tensor *tx = NULL, *res = NULL, *target = dst;
  const dpl_tensor *ux;
  int st = as_kd(name, x, kd, &tx, &ux);
  if (st == DPL_OK && (!dst || dst->_dtype != kd)) {
    st = dpl_new(name, kd, x->_ndim, x->_shape, x, &res);
    target = res;
  }
  if (st == DPL_OK) {
    dpl_tensor *ops[2] = {target, (dpl_tensor *)ux};
    dpl_iter it;
    dpl_iter_init(&it, 2, ops, x->_ndim, x->_shape);
    act_ctx c = {op, p0, p1, act_vm1(op, 0)};
    dpl_iter_run(&it, kd == DPL_FLOAT32 ? act_fwd_f32 : act_fwd_double, &c, GRAIN);
    st = finish(name, dst, &res, x->_dtype);
  }
  dpl_tensor_release(tx);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  if (out) *out = res;
  return DPL_OK;
}

int dpl_act(int32_t op, const dpl_tensor *x, double p0, double p1, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "activation: out is NULL");
  *out = NULL;
  return act_core(op, x, p0, p1, NULL, out);
}

int dpl_act_(int32_t op, dpl_tensor *x, double p0, double p1) { return act_core(op, x, p0, p1, x, NULL); }

int dpl_act_backward(int32_t op, const dpl_tensor *grad, const dpl_tensor *x, double p0, double p1, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "activation_backward: out is NULL");
  *out = NULL;
  const char *op_name = act_name(op);
  if (!op_name) return dpl_errorf(DPL_EINVAL, "activation_backward: unknown op id %d", (int)op);
  char name[40];
  snprintf(name, sizeof name, "%s_backward", op_name);
  DPL_TRY(dpl_check_tensor(name, "grad", grad));
  DPL_TRY(dpl_check_tensor(name, "input", x));
  if (!dpl_same_shape(grad, x)) {
    char b1[160], b2[160];
    return dpl_errorf(DPL_EINVAL, "%s: grad shape %s does not match the input's shape %s", name,
                      dpl_shape_str(grad->_ndim, grad->_shape, b1, sizeof b1), dpl_shape_str(x->_ndim, x->_shape, b2, sizeof b2));
  }
  if (!dpl_is_float(grad->_dtype) || !dpl_is_float(x->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected floating-point tensors, got %s (grad) and %s (input)", name,
                      dpl_dtype_name(grad->_dtype), dpl_dtype_name(x->_dtype));
  int32_t rd = dpl_promote(grad->_dtype, x->_dtype);
  int32_t kd = float_kd(rd);
  dpl_tensor *tg = NULL, *tx = NULL, *res = NULL;
  const dpl_tensor *ug, *ux;
  int st = as_kd(name, grad, kd, &tg, &ug);
  if (st == DPL_OK) st = as_kd(name, x, kd, &tx, &ux);
  if (st == DPL_OK) st = dpl_new(name, kd, x->_ndim, x->_shape, x, &res);
  if (st == DPL_OK) {
    dpl_tensor *ops[3] = {res, (dpl_tensor *)ug, (dpl_tensor *)ux};
    dpl_iter it;
    dpl_iter_init(&it, 3, ops, x->_ndim, x->_shape);
    act_ctx c = {op, p0, p1, act_vm1(op, 1)};
    dpl_iter_run(&it, kd == DPL_FLOAT32 ? act_bwd_f32 : act_bwd_double, &c, GRAIN);
    st = dpl_retype(name, &res, rd);
  }
  dpl_release_n(2, (dpl_tensor *[]){tg, tx});
  return dpl_hand_over(st, 1, &res, &out);
}

/* ---- compositions for tensors in device memory ----
 * The result r (kernel dtype) of a composition z: out of place, converted to the op's dtype rd
 * and handed over; in place, copied (converted) into dst. Returns the first failure. */
static int dev_finish(dpl_dz *z, dpl_tensor *r, dpl_tensor *dst, dpl_tensor **out, int32_t rd)
{
  int st = z->st;
  if (st == DPL_OK && dst) st = dpl_copy_any(z->name, dst, r);
  else if (st == DPL_OK) {
    dpl_tensor *res = dpl_dz_take(z, r);
    st = dpl_retype(z->name, &res, rd);
    if (st == DPL_OK) *out = res;
  }
  int st2 = dpl_dz_end(z);
  return st != DPL_OK ? st : st2;
}

/* ---- nan_to_num ---- */
typedef struct n2n_ctx { double nan, pinf, ninf; } n2n_ctx;
/* a double as a float without an out-of-range conversion (C leaves those undefined) */
static inline float d2f_sat(double v)
{
  if (v > FLT_MAX) return INFINITY;
  if (v < -FLT_MAX) return -INFINITY;
  return (float)v;
}
#define N2N_LOOP(NAME, T, CONV)                                                                             \
  DPL_CLONES static void NAME(char **p, const int64_t *st, int64_t n, void *vctx)                           \
  {                                                                                                         \
    const n2n_ctx *c = vctx;                                                                                \
    const T vn = CONV(c->nan), vp = CONV(c->pinf), vm = CONV(c->ninf);                                      \
    RUN1(T, x != x ? vn : x == (T)INFINITY ? vp : x == -(T)INFINITY ? vm : x);                              \
  }
#define ID(v) (v)
N2N_LOOP(n2n_f32, float, d2f_sat)
N2N_LOOP(n2n_f64, double, ID)

/* on the device: masked fills of a copy in the kernel dtype, the values converted as the kernels do */
static int n2n_dev(const char *name, const dpl_tensor *a, double vnan, double pinf, double ninf, dpl_tensor *dst,
                   dpl_tensor **out)
{
  dpl_dz z;
  dpl_dz_init(&z, name);
  if (!dpl_is_float(a->_dtype)) { /* nothing to replace: a copy (in place: nothing to do) */
    if (dst) return DPL_OK;
    return dev_finish(&z, dpl_dz_clone(&z, a, a->_dtype), NULL, out, a->_dtype);
  }
  int32_t kd = float_kd(a->_dtype);
  if (kd == DPL_FLOAT32) vnan = d2f_sat(vnan), pinf = d2f_sat(pinf), ninf = d2f_sat(ninf);
  dpl_tensor *r = dpl_dz_clone(&z, a, kd);
  dpl_tensor *mn = dpl_dz_un(&z, DPL_OP_ISNAN, r), *mp = dpl_dz_bins(&z, DPL_OP_EQ, r, INFINITY, 0);
  dpl_tensor *mm = dpl_dz_bins(&z, DPL_OP_EQ, r, -INFINITY, 0);
  dpl_dz_masked_fill_(&z, r, mn, vnan);
  dpl_dz_masked_fill_(&z, r, mp, pinf);
  dpl_dz_masked_fill_(&z, r, mm, ninf);
  return dev_finish(&z, r, dst, out, a->_dtype);
}

static int n2n_core(const dpl_tensor *a, double vnan, double pinf, double ninf, dpl_tensor *dst, dpl_tensor **out)
{
  const char *name = dst ? "nan_to_num_" : "nan_to_num";
  DPL_TRY(dpl_check_handle(name, "input", a));
  if (dst) DPL_TRY(dpl_check_writable(name, "", dst));
  if (dpl_is_devmem(a)) return n2n_dev(name, a, vnan, pinf, ninf, dst, out);
  if (!dpl_is_float(a->_dtype)) { /* nothing to replace: a copy (in place: nothing to do) */
    if (dst) return DPL_OK;
    dpl_tensor *res = NULL;
    DPL_TRY(dpl_new(name, a->_dtype, a->_ndim, a->_shape, a, &res));
    dpl_copy_raw(res, a);
    *out = res;
    return DPL_OK;
  }
  int32_t kd = float_kd(a->_dtype);
  dpl_tensor *ta = NULL, *res = NULL, *target = dst;
  const dpl_tensor *ua;
  int st = as_kd(name, a, kd, &ta, &ua);
  if (st == DPL_OK && (!dst || dst->_dtype != kd)) {
    st = dpl_new(name, kd, a->_ndim, a->_shape, a, &res);
    target = res;
  }
  if (st == DPL_OK) {
    dpl_tensor *ops[2] = {target, (dpl_tensor *)ua};
    dpl_iter it;
    dpl_iter_init(&it, 2, ops, a->_ndim, a->_shape);
    n2n_ctx c = {vnan, pinf, ninf};
    dpl_iter_run(&it, kd == DPL_FLOAT32 ? n2n_f32 : n2n_f64, &c, GRAIN);
    st = finish(name, dst, &res, a->_dtype);
  }
  dpl_tensor_release(ta);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  if (out) *out = res;
  return DPL_OK;
}

int dpl_nan_to_num(const dpl_tensor *a, double vnan, double posinf, double neginf, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "nan_to_num: out is NULL");
  *out = NULL;
  return n2n_core(a, vnan, posinf, neginf, NULL, out);
}

int dpl_nan_to_num_(dpl_tensor *a, double vnan, double posinf, double neginf)
{
  return n2n_core(a, vnan, posinf, neginf, a, NULL);
}

/* ---- isclose ---- */
typedef struct close_ctx { double rtol, atol; int equal_nan; int32_t dt; } close_ctx;
/* PyTorch's: a == b, or both NaN (equal_nan), or |a - b| finite and <= atol + |rtol * b|,
 * the error computed in the tensors' floating dtype (float32 for integers) */
#define CLOSE_LOOP(NAME, T, F, FABS, ISFIN)                                                                 \
  DPL_CLONES static void NAME(char **p, const int64_t *st, int64_t n, void *vctx)                           \
  {                                                                                                         \
    const close_ctx *c = vctx;                                                                              \
    const F rtol = (F)c->rtol, atol = (F)c->atol;                                                           \
    const int en = c->equal_nan;                                                                            \
    for (int64_t i = 0; i < n; i++) {                                                                       \
      T x = *(const T *)(p[1] + i * st[1]), y = *(const T *)(p[2] + i * st[2]);                             \
      int close = x == y || (en && x != x && y != y);                                                       \
      if (!close) {                                                                                         \
        F fx = (F)x, fy = (F)y;                                                                             \
        F err = FABS(fx - fy);                                                                              \
        close = ISFIN(err) && err <= atol + FABS(rtol * fy);                                                \
      }                                                                                                     \
      *(uint8_t *)(p[0] + i * st[0]) = (uint8_t)close;                                                      \
    }                                                                                                       \
  }
#define ISFINITE_(v) (isfinite(v) != 0)
CLOSE_LOOP(close_f32, float, float, fabsf, ISFINITE_)
CLOSE_LOOP(close_f64, double, double, fabs, ISFINITE_)
CLOSE_LOOP(close_i64, int64_t, float, fabsf, ISFINITE_)
/* float16 / bfloat16 (loaded as float32): each step of PyTorch's tensor arithmetic rounded to the
 * 16-bit dtype, as its kernels round every op's result (self - other, rtol * other, atol + ...) */
static inline float round16(float v, int32_t dt) { return dt == DPL_FLOAT16 ? dpl_h2f(dpl_f2h(v)) : dpl_bf2f(dpl_f2bf(v)); }
DPL_CLONES static void close_r16(char **p, const int64_t *st, int64_t n, void *vctx)
{
  const close_ctx *c = vctx;
  const int32_t dt = c->dt;
  const float rtol = round16((float)c->rtol, dt), atol = round16((float)c->atol, dt); /* (as PyTorch's scalars) */
  const int en = c->equal_nan;
  for (int64_t i = 0; i < n; i++) {
    float x = *(const float *)(p[1] + i * st[1]), y = *(const float *)(p[2] + i * st[2]);
    int close = x == y || (en && x != x && y != y);
    if (!close) {
      float err = fabsf(round16(x - y, dt));
      close = isfinite(err) && err <= round16(atol + fabsf(round16(rtol * y, dt)), dt);
    }
    *(uint8_t *)(p[0] + i * st[0]) = (uint8_t)close;
  }
}

/* on the device: the loops' formula as tensor ops; float16/bfloat16 in their own dtype (every
 * op's result rounded to it, as close_r16), integers compared in float32 (as close_i64) */
static int close_dev(const dpl_tensor *a, const dpl_tensor *b, double rtol, double atol, int32_t equal_nan,
                     dpl_tensor **out)
{
  dpl_dz z;
  dpl_dz_init(&z, "isclose");
  int32_t dt = a->_dtype;
  const dpl_tensor *x = a, *y = b;
  double rt = (float)rtol, at = (float)atol;
  if (dt == DPL_FLOAT16 || dt == DPL_BFLOAT16) rt = round16((float)rtol, dt), at = round16((float)atol, dt);
  else if (dt == DPL_FLOAT64) rt = rtol, at = atol;
  else if (!dpl_is_float(dt)) x = dpl_dz_as(&z, a, DPL_FLOAT32), y = dpl_dz_as(&z, b, DPL_FLOAT32);
  dpl_tensor *eq = dpl_dz_bin(&z, DPL_OP_EQ, a, b);
  dpl_tensor *err = dpl_dz_un(&z, DPL_OP_ABS, dpl_dz_bin(&z, DPL_OP_SUB, x, y));
  dpl_tensor *tol = dpl_dz_bins(&z, DPL_OP_ADD, dpl_dz_un(&z, DPL_OP_ABS, dpl_dz_bins(&z, DPL_OP_MUL, y, rt, 0)), at, 0);
  dpl_tensor *near = dpl_dz_bin(&z, DPL_OP_LOGICAL_AND, dpl_dz_un(&z, DPL_OP_ISFINITE, err),
                                dpl_dz_bin(&z, DPL_OP_LE, err, tol));
  dpl_tensor *r = dpl_dz_bin(&z, DPL_OP_LOGICAL_OR, eq, near);
  if (equal_nan && dpl_is_float(dt))
    r = dpl_dz_bin(&z, DPL_OP_LOGICAL_OR, r,
                   dpl_dz_bin(&z, DPL_OP_LOGICAL_AND, dpl_dz_un(&z, DPL_OP_ISNAN, a), dpl_dz_un(&z, DPL_OP_ISNAN, b)));
  return dev_finish(&z, r, NULL, out, DPL_BOOL);
}

int dpl_isclose(const dpl_tensor *a, const dpl_tensor *b, double rtol, double atol, int32_t equal_nan, dpl_tensor **out)
{
  const char *name = "isclose";
  if (!out) return dpl_errorf(DPL_EINVAL, "isclose: out is NULL");
  *out = NULL;
  DPL_TRY(dpl_check_handle(name, "input", a));
  DPL_TRY(dpl_check_handle(name, "other", b));
  DPL_TRY(dpl_check_same_device(name, a, b));
  if (a->_dtype != b->_dtype)
    return dpl_errorf(DPL_EINVAL, "%s: expected both tensors to have the same dtype, got %s and %s", name,
                      dpl_dtype_name(a->_dtype), dpl_dtype_name(b->_dtype));
  if (!(rtol >= 0)) return dpl_errorf(DPL_EINVAL, "%s: rtol must be greater than or equal to zero, got %g", name, rtol);
  if (!(atol >= 0)) return dpl_errorf(DPL_EINVAL, "%s: atol must be greater than or equal to zero, got %g", name, atol);
  int64_t shape[DPL_MAX_DIMS];
  int32_t nd;
  DPL_TRY(dpl_broadcast_shapes(name, a->_ndim, a->_shape, b->_ndim, b->_shape, &nd, shape));
  if (dpl_is_devmem(a)) return close_dev(a, b, rtol, atol, equal_nan, out);
  int32_t kd = dpl_is_float(a->_dtype) ? float_kd(a->_dtype) : DPL_INT64;
  dpl_tensor *ta = NULL, *tb = NULL, *res = NULL;
  const dpl_tensor *ua, *ub;
  int st = as_kd(name, a, kd, &ta, &ua);
  if (st == DPL_OK) st = as_kd(name, b, kd, &tb, &ub);
  if (st == DPL_OK) st = dpl_new(name, DPL_BOOL, nd, shape, a, &res);
  if (st == DPL_OK) {
    dpl_tensor *ops[3] = {res, (dpl_tensor *)ua, (dpl_tensor *)ub};
    dpl_iter it;
    dpl_iter_init(&it, 3, ops, nd, shape);
    close_ctx c = {rtol, atol, equal_nan != 0, a->_dtype};
    int r16 = a->_dtype == DPL_FLOAT16 || a->_dtype == DPL_BFLOAT16;
    dpl_iter_run(&it, r16 ? close_r16 : kd == DPL_FLOAT32 ? close_f32 : kd == DPL_FLOAT64 ? close_f64 : close_i64, &c,
                 GRAIN);
  }
  dpl_release_n(2, (dpl_tensor *[]){ta, tb});
  return dpl_hand_over(st, 1, &res, &out);
}

/* ---- lerp ---- */
/* PyTorch 1.13's two-sided formula (exact at weight 0 and 1): the first side for every weight
 * below 0.5, negative ones included (not |weight| < 0.5: with an infinite end the sides differ) */
#define LERP(T, S)                                                                                          \
  static inline T lerp_##T(T s, T e, T w)                                                                   \
  {                                                                                                         \
    return w < (T)0.5 ? s + w * (e - s) : e - (e - s) * ((T)1 - w);                                          \
  }                                                                                                         \
  DPL_CLONES static void lerp_sw_##T(char **p, const int64_t *st, int64_t n, void *vctx)                    \
  {                                                                                                         \
    const T w = (T) * (const double *)vctx;                                                                 \
    for (int64_t i = 0; i < n; i++) {                                                                       \
      T s = *(const T *)(p[1] + i * st[1]), e = *(const T *)(p[2] + i * st[2]);                             \
      *(T *)(p[0] + i * st[0]) = lerp_##T(s, e, w);                                                         \
    }                                                                                                       \
  }                                                                                                         \
  DPL_CLONES static void lerp_tw_##T(char **p, const int64_t *st, int64_t n, void *vctx)                    \
  {                                                                                                         \
    (void)vctx;                                                                                             \
    for (int64_t i = 0; i < n; i++) {                                                                       \
      T s = *(const T *)(p[1] + i * st[1]), e = *(const T *)(p[2] + i * st[2]);                             \
      T w = *(const T *)(p[3] + i * st[3]);                                                                 \
      *(T *)(p[0] + i * st[0]) = lerp_##T(s, e, w);                                                         \
    }                                                                                                       \
  }
LERP(float, f)
LERP(double, )

/* the broadcast shape of an in-place op must be its tensor's */
static int inplace_shape(const char *name, const dpl_tensor *dst, int32_t nd, const int64_t *shape)
{
  int same = nd == dst->_ndim;
  for (int i = 0; same && i < nd; i++) same = shape[i] == dst->_shape[i];
  if (same) return DPL_OK;
  char b1[160], b2[160];
  return dpl_errorf(DPL_EINVAL, "%s: the result shape %s does not match the in-place tensor's shape %s", name,
                    dpl_shape_str(nd, shape, b1, sizeof b1), dpl_shape_str(dst->_ndim, dst->_shape, b2, sizeof b2));
}

/* on the device: both sides of the formula as tensor ops in kd (a scalar weight picks its side) */
static int lerp_dev(const char *name, const dpl_tensor *s, const dpl_tensor *e, const dpl_tensor *w, double wv,
                    dpl_tensor *dst, dpl_tensor **out, int32_t kd)
{
  dpl_dz z;
  dpl_dz_init(&z, name);
  dpl_tensor *us = dpl_dz_as(&z, s, kd), *ue = dpl_dz_as(&z, e, kd), *r;
  dpl_tensor *d = dpl_dz_bin(&z, DPL_OP_SUB, ue, us);
  if (!w) {
    double wk = kd == DPL_FLOAT32 ? (double)d2f_sat(wv) : wv; /* (T)weight; 1 - wk is exact in double */
    if (wk < 0.5) r = dpl_dz_bin(&z, DPL_OP_ADD, us, dpl_dz_bins(&z, DPL_OP_MUL, d, wk, 0));
    else r = dpl_dz_bin(&z, DPL_OP_SUB, ue, dpl_dz_bins(&z, DPL_OP_MUL, d, 1 - wk, 0));
  } else {
    dpl_tensor *uw = dpl_dz_as(&z, w, kd);
    dpl_tensor *lo = dpl_dz_bin(&z, DPL_OP_ADD, us, dpl_dz_bin(&z, DPL_OP_MUL, uw, d));
    dpl_tensor *hi = dpl_dz_bin(&z, DPL_OP_SUB, ue, dpl_dz_bin(&z, DPL_OP_MUL, d, dpl_dz_bins(&z, DPL_OP_SUB, uw, 1, 1)));
    r = dpl_dz_where(&z, dpl_dz_bins(&z, DPL_OP_LT, uw, 0.5, 0), lo, hi);
  }
  return dev_finish(&z, r, dst, out, s->_dtype);
}

static int lerp_core(const dpl_tensor *s, const dpl_tensor *e, const dpl_tensor *w, double wv, dpl_tensor *dst,
                     dpl_tensor **out)
{
  const char *name = dst ? "lerp_" : "lerp";
  DPL_TRY(dpl_check_handle(name, "input", s));
  DPL_TRY(dpl_check_handle(name, "end", e));
  if (w) DPL_TRY(dpl_check_handle(name, "weight", w));
  DPL_TRY(dpl_check_same_device(name, s, e));
  if (w) DPL_TRY(dpl_check_same_device(name, s, w));
  if (!dpl_is_float(s->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected a floating-point tensor, got %s", name, dpl_dtype_name(s->_dtype));
  if (e->_dtype != s->_dtype)
    return dpl_errorf(DPL_EINVAL, "%s: expected dtype %s for end, got %s", name, dpl_dtype_name(s->_dtype),
                      dpl_dtype_name(e->_dtype));
  if (w && w->_dtype != s->_dtype)
    return dpl_errorf(DPL_EINVAL, "%s: expected dtype %s for weight, got %s", name, dpl_dtype_name(s->_dtype),
                      dpl_dtype_name(w->_dtype));
  int64_t s1[DPL_MAX_DIMS], shape[DPL_MAX_DIMS];
  int32_t n1, nd;
  DPL_TRY(dpl_broadcast_shapes(name, s->_ndim, s->_shape, e->_ndim, e->_shape, &n1, s1));
  if (w) DPL_TRY(dpl_broadcast_shapes(name, n1, s1, w->_ndim, w->_shape, &nd, shape));
  else { nd = n1; memcpy(shape, s1, sizeof shape); }
  if (dst) {
    DPL_TRY(dpl_check_writable(name, "", dst));
    DPL_TRY(inplace_shape(name, dst, nd, shape));
  }
  int32_t kd = float_kd(s->_dtype);
  if (dpl_is_devmem(s)) return lerp_dev(name, s, e, w, wv, dst, out, kd);
  dpl_tensor *ts = NULL, *te = NULL, *tw = NULL, *res = NULL, *target = dst;
  const dpl_tensor *us, *ue, *uw = NULL;
  int st = as_kd(name, s, kd, &ts, &us);
  if (st == DPL_OK) st = as_kd(name, e, kd, &te, &ue);
  if (st == DPL_OK && w) st = as_kd(name, w, kd, &tw, &uw);
  /* in place: operands that partly overlap the tensor written go through copies */
  if (st == DPL_OK && dst) st = dpl_unalias(name, dst, &te, &ue);
  if (st == DPL_OK && dst && w) st = dpl_unalias(name, dst, &tw, &uw);
  if (st == DPL_OK && (!dst || dst->_dtype != kd)) {
    st = dpl_new(name, kd, nd, shape, s, &res);
    target = res;
  }
  if (st == DPL_OK) {
    dpl_tensor *ops[4] = {target, (dpl_tensor *)us, (dpl_tensor *)ue, (dpl_tensor *)uw};
    dpl_iter it;
    dpl_iter_init(&it, w ? 4 : 3, ops, nd, shape);
    if (w) dpl_iter_run(&it, kd == DPL_FLOAT32 ? lerp_tw_float : lerp_tw_double, NULL, GRAIN);
    else dpl_iter_run(&it, kd == DPL_FLOAT32 ? lerp_sw_float : lerp_sw_double, &wv, GRAIN);
    st = finish(name, dst, &res, s->_dtype);
  }
  dpl_release_n(3, (dpl_tensor *[]){ts, te, tw});
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  if (out) *out = res;
  return DPL_OK;
}

int dpl_lerp(const dpl_tensor *start, const dpl_tensor *end, const dpl_tensor *weight, double w, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "lerp: out is NULL");
  *out = NULL;
  return lerp_core(start, end, weight, w, NULL, out);
}

int dpl_lerp_(dpl_tensor *self, const dpl_tensor *end, const dpl_tensor *weight, double w)
{
  return lerp_core(self, end, weight, w, self, NULL);
}

/* ---- addcmul / addcdiv ---- */
/* s + v * x * y, s + v * x / y (PyTorch's order of operations); integers wrap */
#define ADDC_FLOAT(NAME, T)                                                                                 \
  DPL_CLONES static void NAME(char **p, const int64_t *st, int64_t n, void *vctx)                           \
  {                                                                                                         \
    const double *c = vctx;                                                                                 \
    const T v = (T)c[0];                                                                                    \
    const int div = c[1] != 0;                                                                              \
    for (int64_t i = 0; i < n; i++) {                                                                       \
      T s = *(const T *)(p[1] + i * st[1]), x = *(const T *)(p[2] + i * st[2]), y = *(const T *)(p[3] + i * st[3]); \
      *(T *)(p[0] + i * st[0]) = div ? s + v * x / y : s + v * x * y;                                       \
    }                                                                                                       \
  }
#define ADDC_INT(NAME, T, U)                                                                                \
  DPL_CLONES static void NAME(char **p, const int64_t *st, int64_t n, void *vctx)                           \
  {                                                                                                         \
    const U v = (U)dpl_d2i64(((const double *)vctx)[0]);                                                    \
    for (int64_t i = 0; i < n; i++) {                                                                       \
      U s = (U) * (const T *)(p[1] + i * st[1]), x = (U) * (const T *)(p[2] + i * st[2]);                   \
      U y = (U) * (const T *)(p[3] + i * st[3]);                                                            \
      *(T *)(p[0] + i * st[0]) = (T)(s + v * x * y);                                                        \
    }                                                                                                       \
  }
ADDC_FLOAT(addc_f32, float)
ADDC_FLOAT(addc_f64, double)
ADDC_INT(addc_i32, int32_t, uint32_t)
ADDC_INT(addc_i64, int64_t, uint64_t)
ADDC_INT(addc_u8, uint8_t, uint32_t)

/* PyTorch's result type of several tensors: 0-d ones count only when of a higher kind */
static int32_t result_type3(const dpl_tensor *a, const dpl_tensor *b, const dpl_tensor *c)
{
  const dpl_tensor *t[3] = {a, b, c};
  int32_t dimd = -1, zerod = -1;
  for (int k = 0; k < 3; k++) {
    int32_t *r = t[k]->_ndim > 0 ? &dimd : &zerod;
    *r = *r < 0 ? t[k]->_dtype : dpl_promote(*r, t[k]->_dtype);
  }
  if (dimd < 0) return zerod;
  if (zerod < 0 || dpl_dtype_kind(zerod) <= dpl_dtype_kind(dimd)) return dimd;
  return dpl_promote(dimd, zerod);
}

static int addc_core(int32_t div, const dpl_tensor *s, const dpl_tensor *x, const dpl_tensor *y, double value,
                     dpl_tensor *dst, dpl_tensor **out)
{
  const char *name = div ? (dst ? "addcdiv_" : "addcdiv") : (dst ? "addcmul_" : "addcmul");
  DPL_TRY(dpl_check_handle(name, "input", s));
  DPL_TRY(dpl_check_handle(name, "tensor1", x));
  DPL_TRY(dpl_check_handle(name, "tensor2", y));
  DPL_TRY(dpl_check_same_device(name, s, x));
  DPL_TRY(dpl_check_same_device(name, s, y));
  if (div && !dpl_is_float(x->_dtype) && !dpl_is_float(y->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: integer division of tensor1 (%s) by tensor2 (%s) is not supported (as in "
                      "PyTorch); convert one of them to a floating dtype", name, dpl_dtype_name(x->_dtype),
                      dpl_dtype_name(y->_dtype));
  int32_t rd = result_type3(s, x, y);
  if (rd == DPL_BOOL) return dpl_errorf(DPL_EINVAL, "%s: not supported for bool tensors", name);
  if (!dpl_is_float(rd) && value != floor(value))
    return dpl_errorf(DPL_EINVAL, "%s: value must be an integer for %s tensors, got %g", name, dpl_dtype_name(rd), value);
  int64_t s1[DPL_MAX_DIMS], shape[DPL_MAX_DIMS];
  int32_t n1, nd;
  DPL_TRY(dpl_broadcast_shapes(name, s->_ndim, s->_shape, x->_ndim, x->_shape, &n1, s1));
  DPL_TRY(dpl_broadcast_shapes(name, n1, s1, y->_ndim, y->_shape, &nd, shape));
  if (dst) {
    DPL_TRY(dpl_check_writable(name, "", dst));
    DPL_TRY(inplace_shape(name, dst, nd, shape));
    if ((dpl_is_float(rd) && !dpl_is_float(dst->_dtype)) || (dst->_dtype == DPL_BOOL && rd != DPL_BOOL))
      return dpl_errorf(DPL_EINVAL, "%s: the result type %s cannot be stored in place in a %s tensor", name,
                        dpl_dtype_name(rd), dpl_dtype_name(dst->_dtype));
  }
  int32_t kd = dpl_is_float(rd) ? float_kd(rd) : rd;
  if (dpl_is_devmem(s)) {
    /* on the device: (value * x) * y (or / y), then + s, in kd (integers wrap in each op) */
    dpl_dz z;
    dpl_dz_init(&z, name);
    dpl_tensor *ux = dpl_dz_as(&z, x, kd), *uy = dpl_dz_as(&z, y, kd), *us = dpl_dz_as(&z, s, kd);
    dpl_tensor *t = dpl_dz_bin(&z, div ? DPL_OP_DIV : DPL_OP_MUL, dpl_dz_bins(&z, DPL_OP_MUL, ux, value, 0), uy);
    return dev_finish(&z, dpl_dz_bin(&z, DPL_OP_ADD, us, t), dst, out, rd);
  }
  dpl_tensor *ts = NULL, *tx = NULL, *ty = NULL, *res = NULL, *target = dst;
  const dpl_tensor *us, *ux, *uy;
  int st = as_kd(name, s, kd, &ts, &us);
  if (st == DPL_OK) st = as_kd(name, x, kd, &tx, &ux);
  if (st == DPL_OK) st = as_kd(name, y, kd, &ty, &uy);
  if (st == DPL_OK && dst) st = dpl_unalias(name, dst, &tx, &ux);
  if (st == DPL_OK && dst) st = dpl_unalias(name, dst, &ty, &uy);
  if (st == DPL_OK && (!dst || dst->_dtype != kd)) {
    st = dpl_new(name, kd, nd, shape, s, &res);
    target = res;
  }
  if (st == DPL_OK) {
    dpl_tensor *ops[4] = {target, (dpl_tensor *)us, (dpl_tensor *)ux, (dpl_tensor *)uy};
    dpl_iter it;
    dpl_iter_init(&it, 4, ops, nd, shape);
    double c[2] = {value, div ? 1 : 0};
    dpl_loop_fn fn = kd == DPL_FLOAT32 ? addc_f32 : kd == DPL_FLOAT64 ? addc_f64 : kd == DPL_INT32 ? addc_i32
                   : kd == DPL_INT64 ? addc_i64 : addc_u8;
    dpl_iter_run(&it, fn, c, GRAIN);
    st = finish(name, dst, &res, rd);
  }
  dpl_release_n(3, (dpl_tensor *[]){ts, tx, ty});
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  if (out) *out = res;
  return DPL_OK;
}

int dpl_addcmul(int32_t div, const dpl_tensor *self, const dpl_tensor *t1, const dpl_tensor *t2, double value,
                dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "addcmul: out is NULL");
  *out = NULL;
  return addc_core(div, self, t1, t2, value, NULL, out);
}

int dpl_addcmul_(int32_t div, dpl_tensor *self, const dpl_tensor *t1, const dpl_tensor *t2, double value)
{
  return addc_core(div, self, t1, t2, value, self, NULL);
}
