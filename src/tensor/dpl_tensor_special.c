/* dpl_tensor_special.c: the special functions of torch.special (and their tensor methods)
 * on CPU tensors: lgamma, digamma, polygamma, erfc, erfcx, the modified Bessel functions
 * i0/i0e/i1/i1e, the normal distribution's ndtr/ndtri/log_ndtr, sinc, and the two-argument
 * Hurwitz zeta and regularized incomplete gamma functions. Each element is computed in double
 * precision (series, recurrences and asymptotic expansions written out below) and stored in
 * the input's floating dtype; integer and bool inputs give float32, as in PyTorch. float32
 * lgamma, digamma, erfc and i0 run the vector kernels of dpl_tensor_vmath_sp.h instead (double
 * lanes, the same results rounded to float32; DPL_VMATH=off keeps the loop here). The
 * per-element math is dpl_special_math.h, shared with the CUDA kernel: tensors in device
 * memory go to the backend (DPL_BK_SPECIAL) after the same checks. */
#define _GNU_SOURCE
#include "dpl_tensor_internal.h"
#include "dpl_special_math.h"
#include "dpl_tensor_backend.h"
#include "dpl_tensor_vmath.h"

/* ---- the loops ---- */
typedef struct sp_ctx {
  int32_t op, dt_out, dt_a, dt_b;
  int64_t n;
} sp_ctx;

static void sp_loop1(char **p, const int64_t *st, int64_t n, void *ctx)
{
  const sp_ctx *c = ctx;
  for (int64_t i = 0; i < n; i++)
    dpl_store_f64(p[0] + i * st[0], c->dt_out, dpl_sp_eval1(c->op, c->n, dpl_load_f64(p[1] + i * st[1], c->dt_a)));
}

static void sp_loop2(char **p, const int64_t *st, int64_t n, void *ctx)
{
  const sp_ctx *c = ctx;
  for (int64_t i = 0; i < n; i++) {
    double a = dpl_load_f64(p[1] + i * st[1], c->dt_a), b = dpl_load_f64(p[2] + i * st[2], c->dt_b);
    dpl_store_f64(p[0] + i * st[0], c->dt_out, dpl_sp_eval2(c->op, a, b));
  }
}

/* float32 -> float32 through the vector kernels (dpl_tensor_vmath_sp.h; strided runs are buffered) */
static void sp_loop_vm(char **p, const int64_t *st, int64_t n, void *ctx)
{
  dpl_vm_map(*(const int *)ctx, p[0], st[0], p[1], st[1], n, 0, 0);
}
/* the vector kernel of op for float32, or -1 (none, or DPL_VMATH=off) */
static int sp_vm_fn(int32_t op)
{
  int fn = op == DPL_SP_LGAMMA ? DPL_VM_LGAMMA : op == DPL_SP_DIGAMMA ? DPL_VM_DIGAMMA
         : op == DPL_SP_ERFC ? DPL_VM_ERFC : op == DPL_SP_I0 ? DPL_VM_I0 : -1;
  return fn >= 0 && dpl_vm_isa() != DPL_VM_OFF ? fn : -1;
}

static const char *sp_name(int32_t op)
{
  static const char *names[] = {"lgamma", "digamma", "polygamma", "erfc", "erfcx", "i0", "i0e", "i1", "i1e",
                                "ndtr", "ndtri", "log_ndtr", "sinc", "zeta", "gammainc", "gammaincc"};
  return op >= 0 && op < (int32_t)(sizeof names / sizeof names[0]) ? names[op] : NULL;
}
/* the result dtype: a floating input's, float32 for the others */
static int32_t sp_dtype(int32_t dt) { return dpl_is_float(dt) ? dt : DPL_FLOAT32; }

/* r (allocated on a's device) = op(a [, b]) by the backend; hands r to *out or releases it */
static int sp_device(const char *name, int32_t op, int64_t n, const dpl_tensor *a, const dpl_tensor *b, dpl_tensor *r,
                     dpl_tensor **out)
{
  dpl_bk_args k = {.op = DPL_BK_SPECIAL, .sub = op, .l = {n}, .in = {a, b}, .inout = r, .name = name};
  int st = r->_numel > 0 ? dpl_bk_call(&k) : DPL_OK;
  return dpl_hand_over(st, 1, &r, &out);
}

int dpl_special(int32_t op, const dpl_tensor *a, int64_t n, dpl_tensor **out)
{
  const char *name = sp_name(op);
  if (!out) return dpl_errorf(DPL_EINVAL, "special: out is NULL");
  *out = NULL;
  if (!name || op >= DPL_SP_ZETA) return dpl_errorf(DPL_EINVAL, "special: unknown one-argument op id %d", (int)op);
  int dev = dpl_is_devmem(a);
  DPL_TRY(dev ? dpl_check_handle(name, "self", a) : dpl_check_tensor(name, "self", a));
  if (op == DPL_SP_POLYGAMMA && n < 0)
    return dpl_errorf(DPL_EINVAL, "polygamma: n must be a non-negative integer, got %lld", (long long)n);
  dpl_tensor *r = NULL;
  DPL_TRY(dpl_new(name, sp_dtype(a->_dtype), a->_ndim, a->_shape, a, &r));
  if (dev) return sp_device(name, op, n, a, NULL, r, out);
  dpl_tensor *ops[2] = {r, (dpl_tensor *)a};
  dpl_iter it;
  dpl_iter_init(&it, 2, ops, a->_ndim, a->_shape);
  int vfn = a->_dtype == DPL_FLOAT32 && r->_dtype == DPL_FLOAT32 ? sp_vm_fn(op) : -1;
  sp_ctx c = {op, r->_dtype, a->_dtype, 0, n};
  if (vfn >= 0) dpl_iter_run(&it, sp_loop_vm, &vfn, 2048);
  else dpl_iter_run(&it, sp_loop1, &c, 2048);
  *out = r;
  return DPL_OK;
}

int dpl_special2(int32_t op, const dpl_tensor *a, const dpl_tensor *b, dpl_tensor **out)
{
  const char *name = sp_name(op);
  if (!out) return dpl_errorf(DPL_EINVAL, "special: out is NULL");
  *out = NULL;
  if (!name || op < DPL_SP_ZETA) return dpl_errorf(DPL_EINVAL, "special: unknown two-argument op id %d", (int)op);
  int dev = dpl_is_devmem(a) || dpl_is_devmem(b);
  if (dev) {
    DPL_TRY(dpl_check_handle(name, "self", a));
    DPL_TRY(dpl_check_handle(name, "other", b));
    DPL_TRY(dpl_check_same_device(name, a, b));
  } else {
    DPL_TRY(dpl_check_tensor(name, "self", a));
    DPL_TRY(dpl_check_tensor(name, "other", b));
  }
  int32_t nd;
  int64_t shape[DPL_MAX_DIMS];
  DPL_TRY(dpl_broadcast_shapes(name, a->_ndim, a->_shape, b->_ndim, b->_shape, &nd, shape));
  dpl_tensor *r = NULL;
  DPL_TRY(dpl_new(name, sp_dtype(dpl_promote(a->_dtype, b->_dtype)), nd, shape, a, &r));
  if (dev) return sp_device(name, op, 0, a, b, r, out);
  dpl_tensor *ops[3] = {r, (dpl_tensor *)a, (dpl_tensor *)b};
  dpl_iter it;
  dpl_iter_init(&it, 3, ops, nd, shape);
  sp_ctx c = {op, r->_dtype, a->_dtype, b->_dtype, 0};
  dpl_iter_run(&it, sp_loop2, &c, 2048);
  *out = r;
  return DPL_OK;
}
