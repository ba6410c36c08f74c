/* dpl_tensor_optim.c: multi-tensor optimizer steps (dpl_sgd_step_multi,
 * dpl_adam_step_multi): argument checks, the per-tensor scalars (computed in
 * double as lua/dpl/optim computes them), and the update itself: a loop over
 * the tensors on the CPU, one backend op (DPL_BK_OPTIM_MULTI) for tensors in
 * device memory. Each element goes through the very operations the Lua
 * optimizers' per-tensor ops make (mul_, add_, axpy, sqrt, div, maximum), in
 * the same order and dtype, so the results are bitwise those of the per-tensor
 * path on the CPU. */
#include "dpl_tensor_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- CPU loops ---- */
#define SGD_LOOP(T)                                                                          \
  do {                                                                                       \
    T *P = (T *)p->_data, *B = buf ? (T *)buf->_data : NULL;                                 \
    const T *G = (const T *)g->_data;                                                        \
    const T neg_lr = (T)o->neg_lr, m = (T)o->momentum, d1 = (T)o->damp1, wd = (T)o->weight_decay; \
    for (int64_t i = 0; i < ne; i++) {                                                       \
      T x = G[i];                                                                            \
      if (o->maximize) x = -x;                                                               \
      if (o->weight_decay != 0) { T t = P[i] * wd; x = x + t; }                              \
      if (B) {                                                                               \
        T b;                                                                                 \
        if (init) b = x;                                                                     \
        else { b = B[i] * m; T t = d1 * x; b = b + t; }                                      \
        B[i] = b;                                                                            \
        if (o->nesterov) { T t = b * m; x = x + t; }                                         \
        else x = b;                                                                          \
      }                                                                                      \
      T u = neg_lr * x;                                                                      \
      P[i] = P[i] + u;                                                                       \
    }                                                                                        \
  } while (0)

/* The common SGD cases as branch-free loops the vectorizer takes (the loop above has
 * per-element branches on the options and stays scalar: slower than the per-tensor
 * ops it replaces). Same operations, same order: the same bits. 1: no maximize, no
 * weight decay, no nesterov; B NULL (no momentum), init (the buffer starts as the
 * gradient) or the steady momentum step. 0: another case (the general loop). */
#define SGD_FAST(T, NAME)                                                                     \
  DPL_CLONES static int NAME(T *P, T *B, const T *G, int64_t ne, T neg_lr, T m, T d1, int init) \
  {                                                                                          \
    if (!B) {                                                                                \
      for (int64_t i = 0; i < ne; i++) { T u = neg_lr * G[i]; P[i] = P[i] + u; }            \
    } else if (init) {                                                                       \
      for (int64_t i = 0; i < ne; i++) { T b = G[i]; B[i] = b; T u = neg_lr * b; P[i] = P[i] + u; } \
    } else {                                                                                 \
      for (int64_t i = 0; i < ne; i++) {                                                     \
        T b = B[i] * m, t = d1 * G[i];                                                       \
        b = b + t;                                                                           \
        B[i] = b;                                                                            \
        T u = neg_lr * b;                                                                    \
        P[i] = P[i] + u;                                                                     \
      }                                                                                      \
    }                                                                                        \
    return 1;                                                                                \
  }
SGD_FAST(float, sgd_fast_f32)
SGD_FAST(double, sgd_fast_f64)

/* Adam's element step in two straight-line pieces, shared by the general loop and the fast
 * one: the moments (m, v from gradient x), then the update of pv with the second moment VV */
#define ADAM_MOMENTS(T)                                                                      \
  T m = M[i] * b1, t1 = omb1 * x;                                                            \
  m = m + t1;                                                                                \
  T xx = x * x, v = V[i] * b2, t2 = omb2 * xx;                                               \
  v = v + t2;                                                                                \
  M[i] = m;                                                                                  \
  V[i] = v;
#define ADAM_APPLY(T, SQRT, VV)                                                                 \
  {                                                                                          \
    T den = SQRT(VV);                                                            \
    den = den / bc2s;                                                                        \
    den = den + eps;                                                                         \
    T q = m / den, u = ss * q;                                                   \
    P[i] = pv + u;                                                                           \
  }

#define ADAM_LOOP(T, SQRT)                                                                   \
  do {                                                                                       \
    T *P = (T *)p->_data, *M = (T *)s0->_data, *V = (T *)s1->_data;                          \
    T *X = s2 ? (T *)s2->_data : NULL;                                                       \
    const T *G = (const T *)g->_data;                                                        \
    const T b1 = (T)o->beta1, omb1 = (T)o->omb1, b2 = (T)o->beta2, omb2 = (T)o->omb2;        \
    const T eps = (T)o->eps, wd = (T)o->weight_decay, decay = (T)o->decay;                   \
    const T ss = (T)o->step_size[k], bc2s = (T)o->bc2_sqrt[k];                               \
    for (int64_t i = 0; i < ne; i++) {                                                       \
      T x = G[i], pv = P[i];                                                                 \
      if (o->maximize) x = -x;                                                               \
      if (o->weight_decay != 0) {                                                            \
        if (o->decoupled) pv = pv * decay;                                                   \
        else { T t = pv * wd; x = x + t; }                                                   \
      }                                                                                      \
      ADAM_MOMENTS(T)                                                                        \
      T vv = v;                                                                              \
      if (X) {                                                                               \
        T mx = X[i];                                                                         \
        vv = (mx != mx || mx > v) ? mx : v;                                                  \
        X[i] = vv;                                                                           \
      }                                                                                      \
      ADAM_APPLY(T, SQRT, vv)                                                                   \
    }                                                                                        \
  } while (0)

/* Adam/AdamW without maximize and amsgrad, weight decay none or decoupled (AdamW): the
 * ADAM_LOOP operations without its branches, so that the loop vectorizes (sqrt and
 * division included, -fno-math-errno). DECAY: the parameter first scaled by `decay`. */
#define ADAM_FAST_BODY(T, SQRT, DECAY)                                                       \
  for (int64_t i = 0; i < ne; i++) {                                                         \
    T x = G[i], pv = P[i];                                                                   \
    if (DECAY) pv = pv * decay;                                                              \
    ADAM_MOMENTS(T)                                                                          \
    ADAM_APPLY(T, SQRT, v)                                                                      \
  }
#define ADAM_FAST(T, SQRT, NAME)                                                              \
  DPL_CLONES static void NAME(T *P, T *M, T *V, const T *G, int64_t ne, T b1, T omb1, T b2, T omb2, T eps, \
                              T ss, T bc2s, T decay, int decoupled)                           \
  {                                                                                          \
    if (decoupled) { ADAM_FAST_BODY(T, SQRT, 1) }                                            \
    else { ADAM_FAST_BODY(T, SQRT, 0) }                                                      \
  }
ADAM_FAST(float, sqrtf, adam_fast_f32)
ADAM_FAST(double, sqrt, adam_fast_f64)

static void cpu_step(const dpl_bk_optim *o)
{
  for (int32_t k = 0; k < o->n; k++) {
    dpl_tensor *p = o->param[k];
    const dpl_tensor *g = o->grad[k];
    int64_t ne = p->_numel;
    if (o->kind == DPL_OPTIM_SGD) {
      dpl_tensor *buf = o->s0 ? o->s0[k] : NULL;
      int init = o->init && o->init[k];
      if (!o->maximize && o->weight_decay == 0 && !o->nesterov) {
        void *B = buf ? buf->_data : NULL;
        if (o->dtype == DPL_FLOAT32)
          sgd_fast_f32(p->_data, B, g->_data, ne, (float)o->neg_lr, (float)o->momentum, (float)o->damp1, init);
        else
          sgd_fast_f64(p->_data, B, g->_data, ne, o->neg_lr, o->momentum, o->damp1, init);
      } else if (o->dtype == DPL_FLOAT32) SGD_LOOP(float);
      else SGD_LOOP(double);
    } else {
      const dpl_tensor *s0 = o->s0[k], *s1 = o->s1[k], *s2 = o->s2 ? o->s2[k] : NULL;
      int dec = o->weight_decay != 0 && o->decoupled;
      if (!o->maximize && !s2 && (o->weight_decay == 0 || o->decoupled)) {
        if (o->dtype == DPL_FLOAT32)
          adam_fast_f32(p->_data, s0->_data, s1->_data, g->_data, ne, (float)o->beta1, (float)o->omb1, (float)o->beta2,
                        (float)o->omb2, (float)o->eps, (float)o->step_size[k], (float)o->bc2_sqrt[k], (float)o->decay, dec);
        else
          adam_fast_f64(p->_data, s0->_data, s1->_data, g->_data, ne, o->beta1, o->omb1, o->beta2, o->omb2, o->eps,
                        o->step_size[k], o->bc2_sqrt[k], o->decay, dec);
      } else if (o->dtype == DPL_FLOAT32) ADAM_LOOP(float, sqrtf);
      else ADAM_LOOP(double, sqrt);
    }
  }
}

/* ---- checks ---- */
static int check_list(const char *op, const char *what, int32_t n, dpl_tensor *const *list)
{
  char name[64];
  if (!list) return dpl_errorf(DPL_EINVAL, "%s: %s is NULL", op, what);
  for (int32_t k = 0; k < n; k++) {
    snprintf(name, sizeof name, "%s[%d]", what, (int)k);
    DPL_TRY(dpl_check_handle(op, name, list[k]));
  }
  return DPL_OK;
}

/* every tensor of list `what` against params[k]: dtype, device, shape, contiguity */
static int check_like(const char *op, const char *what, int32_t n, dpl_tensor *const *list,
                      dpl_tensor *const *params)
{
  DPL_TRY(check_list(op, what, n, list));
  char b1[160], b2[160], d1[32], d2[32];
  for (int32_t k = 0; k < n; k++) {
    const dpl_tensor *t = list[k], *p = params[k];
    if (t->_dtype != p->_dtype)
      return dpl_errorf(DPL_EINVAL, "%s: %s[%d] is %s, its parameter %s", op, what, (int)k, dpl_dtype_name(t->_dtype),
                        dpl_dtype_name(p->_dtype));
    if (t->_devtype != p->_devtype || t->_devindex != p->_devindex)
      return dpl_errorf(DPL_EDEVICE, "%s: %s[%d] is on %s, its parameter on %s", op, what, (int)k,
                        dpl_device_str(t->_devtype, t->_devindex, d1, sizeof d1),
                        dpl_device_str(p->_devtype, p->_devindex, d2, sizeof d2));
    if (!dpl_same_shape(t, p))
      return dpl_errorf(DPL_EINVAL, "%s: %s[%d] has shape %s, its parameter %s", op, what, (int)k,
                        dpl_shape_str(t->_ndim, t->_shape, b1, sizeof b1), dpl_shape_str(p->_ndim, p->_shape, b2, sizeof b2));
    if (!dpl_is_contig(t) && t->_numel > 0)
      return dpl_errorf(DPL_EINVAL, "%s: %s[%d] is not contiguous", op, what, (int)k);
    if ((t->_flags & DPL_DEVMEM) != (p->_flags & DPL_DEVMEM))
      return dpl_errorf(DPL_EDEVICE, "%s: %s[%d] and its parameter are not both in device memory", op, what, (int)k);
  }
  return DPL_OK;
}

static int check_params(const char *op, int32_t n, dpl_tensor *const *params, dpl_tensor *const *grads)
{
  if (n < 0) return dpl_errorf(DPL_EINVAL, "%s: n must be >= 0, got %d", op, (int)n);
  if (n == 0) return DPL_OK;
  DPL_TRY(check_list(op, "params", n, params));
  const dpl_tensor *p0 = params[0];
  char d1[32], d2[32];
  for (int32_t k = 0; k < n; k++) {
    const dpl_tensor *p = params[k];
    if (p->_dtype != DPL_FLOAT32 && p->_dtype != DPL_FLOAT64)
      return dpl_errorf(DPL_EINVAL, "%s: params[%d] is %s; multi-tensor steps take float32 or float64 tensors", op,
                        (int)k, dpl_dtype_name(p->_dtype));
    if (p->_dtype != p0->_dtype)
      return dpl_errorf(DPL_EINVAL, "%s: params[%d] is %s, params[0] %s (one dtype per call)", op, (int)k,
                        dpl_dtype_name(p->_dtype), dpl_dtype_name(p0->_dtype));
    if (p->_devtype != p0->_devtype || p->_devindex != p0->_devindex || (p->_flags & DPL_DEVMEM) != (p0->_flags & DPL_DEVMEM))
      return dpl_errorf(DPL_EDEVICE, "%s: params[%d] is on %s, params[0] on %s (one device per call)", op, (int)k,
                        dpl_device_str(p->_devtype, p->_devindex, d1, sizeof d1),
                        dpl_device_str(p0->_devtype, p0->_devindex, d2, sizeof d2));
    if (!dpl_is_contig(p) && p->_numel > 0)
      return dpl_errorf(DPL_EINVAL, "%s: params[%d] is not contiguous", op, (int)k);
  }
  return check_like(op, "grads", n, grads, params);
}

static int run(const char *op, dpl_bk_optim *o)
{
  if (o->n == 0) return DPL_OK;
  const dpl_tensor *p0 = o->param[0];
  o->dtype = p0->_dtype;
  o->devindex = p0->_devindex;
  if (dpl_is_devmem(p0)) {
    dpl_bk_args k = {.op = DPL_BK_OPTIM_MULTI, .sub = o->kind, .optim = o, .name = op};
    return dpl_bk_call(&k);
  }
  cpu_step(o);
  return DPL_OK;
}

int dpl_sgd_step_multi(int32_t n, dpl_tensor *const *params, dpl_tensor *const *grads, dpl_tensor *const *bufs,
                       const uint8_t *buf_init, const dpl_sgd_opts *o)
{
  const char *op = "sgd_step_multi";
  if (!o) return dpl_errorf(DPL_EINVAL, "%s: opts is NULL", op);
  DPL_TRY(check_params(op, n, params, grads));
  if (o->momentum != 0 && n > 0) DPL_TRY(check_like(op, "bufs", n, bufs, params));
  dpl_bk_optim b = {.kind = DPL_OPTIM_SGD, .n = n, .maximize = o->maximize != 0, .nesterov = o->nesterov != 0,
                    .param = params, .grad = grads, .s0 = o->momentum != 0 ? bufs : NULL, .init = buf_init,
                    .neg_lr = -o->lr, .momentum = o->momentum, .damp1 = 1 - o->dampening,
                    .weight_decay = o->weight_decay};
  return run(op, &b);
}

int dpl_adam_step_multi(int32_t n, dpl_tensor *const *params, dpl_tensor *const *grads, dpl_tensor *const *exp_avg,
                        dpl_tensor *const *exp_avg_sq, dpl_tensor *const *max_exp_avg_sq, const double *steps,
                        const dpl_adam_opts *o)
{
  const char *op = "adam_step_multi";
  if (!o) return dpl_errorf(DPL_EINVAL, "%s: opts is NULL", op);
  DPL_TRY(check_params(op, n, params, grads));
  if (n == 0) return DPL_OK;
  DPL_TRY(check_like(op, "exp_avg", n, exp_avg, params));
  DPL_TRY(check_like(op, "exp_avg_sq", n, exp_avg_sq, params));
  if (o->amsgrad) DPL_TRY(check_like(op, "max_exp_avg_sq", n, max_exp_avg_sq, params));
  if (!steps) return dpl_errorf(DPL_EINVAL, "%s: steps is NULL", op);
  double *per = malloc(2 * (size_t)n * sizeof *per);
  if (!per) return dpl_errorf(DPL_ENOMEM, "%s: out of memory", op);
  for (int32_t k = 0; k < n; k++) {
    double t = steps[k];
    if (!(t >= 1)) {
      free(per);
      return dpl_errorf(DPL_EINVAL, "%s: steps[%d] must be >= 1, got %g", op, (int)k, t);
    }
    /* as lua/dpl/optim: bc1 = 1 - b1 ^ t, step size -lr / bc1, denominator scale sqrt(1 - b2 ^ t) */
    double bc1 = 1 - pow(o->beta1, t), bc2 = 1 - pow(o->beta2, t);
    per[k] = -o->lr / bc1;
    per[n + k] = sqrt(bc2);
  }
  dpl_bk_optim b = {.kind = DPL_OPTIM_ADAM, .n = n, .maximize = o->maximize != 0, .decoupled = o->decoupled != 0,
                    .amsgrad = o->amsgrad != 0, .param = params, .grad = grads, .s0 = exp_avg, .s1 = exp_avg_sq,
                    .s2 = o->amsgrad ? max_exp_avg_sq : NULL, .step_size = per, .bc2_sqrt = per + n,
                    .weight_decay = o->weight_decay, .beta1 = o->beta1, .omb1 = 1 - o->beta1, .beta2 = o->beta2,
                    .omb2 = 1 - o->beta2, .eps = o->eps, .decay = 1 - o->lr * o->weight_decay};
  int st = run(op, &b);
  free(per);
  return st;
}
