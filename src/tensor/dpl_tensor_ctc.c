/* dpl_tensor_ctc.c: the connectionist temporal classification loss (Graves et al. 2006) on the
 * CPU, PyTorch 1.13's algorithm (aten/src/ATen/native/LossCTC.cpp): the forward variables
 * alpha in log space give each sequence's negative log likelihood, and the backward pass
 * runs the beta recursion to return PyTorch's gradient with respect to the log
 * probabilities, exp(lp) - exp(log(sum alpha * beta) + nll - lp), scaled by the incoming
 * gradient (the gradient of the logits when log_probs came from log_softmax). Sequences are
 * independent: the batch is split across the thread pool. Arithmetic in the input's dtype
 * (float32 or float64), as PyTorch's. log_probs in device memory (the lengths and targets in
 * host memory, as the Lua layer passes them) run the same recursions in the backend
 * (DPL_BK_CTC, DPL_BK_CTC_BWD) after the same checks. */
#include "dpl_tensor_backend.h"
#include "dpl_tensor_internal.h"
#include <stdlib.h>

/* the arguments both passes share, checked once */
typedef struct ctc_args {
  const char *name;
  const dpl_tensor *lp;             /* [T, N, C] */
  int64_t T, N, C, S;               /* S: the longest target */
  int64_t st, sn, sc;               /* lp strides in elements */
  const int64_t *tg, *il, *tl;      /* targets (0-based), input and target lengths */
  int64_t tg_stride;                /* [N, S] targets: the row stride; concatenated: 0 */
  int64_t *offset;                  /* where each sequence's target starts */
  int64_t blank;
} ctc_args;

static int check_i64_vec(const char *name, const char *what, const dpl_tensor *t, int64_t n)
{
  DPL_TRY(dpl_check_tensor(name, what, t));
  if (t->_dtype != DPL_INT64 || t->_ndim != 1 || t->_numel != n || !(t->_flags & DPL_CONTIG))
    return dpl_errorf(DPL_EINVAL, "%s: %s must be a contiguous 1-d int64 tensor of %lld elements", name, what,
                      (long long)n);
  return DPL_OK;
}

/* checks the arguments and fills a (a->offset: malloc'ed, the caller frees it) */
static int ctc_setup(ctc_args *a, const char *name, const dpl_tensor *lp, const dpl_tensor *targets,
                     const dpl_tensor *input_lengths, const dpl_tensor *target_lengths, int64_t blank)
{
  char b1[160];
  memset(a, 0, sizeof *a);
  a->name = name;
  DPL_TRY(dpl_is_devmem(lp) ? dpl_check_handle(name, "log_probs", lp) : dpl_check_tensor(name, "log_probs", lp));
  if (lp->_ndim != 3)
    return dpl_errorf(DPL_EINVAL, "%s: log_probs must be 3-d [T, N, C], got %s", name,
                      dpl_shape_str(lp->_ndim, lp->_shape, b1, sizeof b1));
  if (lp->_dtype != DPL_FLOAT32 && lp->_dtype != DPL_FLOAT64)
    return dpl_errorf(DPL_EINVAL, "%s: log_probs must be float32 or float64, got %s", name,
                      dpl_dtype_name(lp->_dtype));
  a->lp = lp;
  a->T = lp->_shape[0], a->N = lp->_shape[1], a->C = lp->_shape[2];
  a->st = lp->_stride[0], a->sn = lp->_stride[1], a->sc = lp->_stride[2];
  if (blank < 0 || blank >= a->C)
    return dpl_errorf(DPL_EINVAL, "%s: blank must be a class index in 1..%lld, got %lld", name, (long long)a->C,
                      (long long)blank + 1);
  a->blank = blank;
  DPL_TRY(check_i64_vec(name, "input_lengths", input_lengths, a->N));
  DPL_TRY(check_i64_vec(name, "target_lengths", target_lengths, a->N));
  DPL_TRY(dpl_check_tensor(name, "targets", targets));
  if (targets->_dtype != DPL_INT64 || !(targets->_flags & DPL_CONTIG) || (targets->_ndim != 1 && targets->_ndim != 2))
    return dpl_errorf(DPL_EINVAL, "%s: targets must be a contiguous int64 tensor [N, S] or 1-d", name);
  a->il = input_lengths->_data, a->tl = target_lengths->_data, a->tg = targets->_data;
  int64_t total = 0;
  for (int64_t b = 0; b < a->N; b++) {
    if (a->il[b] < 0 || a->il[b] > a->T)
      return dpl_errorf(DPL_EINVAL, "%s: input_lengths[%lld] is %lld: expected a length in 0..%lld (the time steps "
                        "of log_probs)", name, (long long)b + 1, (long long)a->il[b], (long long)a->T);
    if (a->tl[b] < 0)
      return dpl_errorf(DPL_EINVAL, "%s: target_lengths[%lld] is %lld: expected a length >= 0", name, (long long)b + 1,
                        (long long)a->tl[b]);
    if (a->tl[b] > a->S) a->S = a->tl[b];
    total += a->tl[b];
  }
  if (targets->_ndim == 2) {
    if (targets->_shape[0] != a->N || targets->_shape[1] < a->S)
      return dpl_errorf(DPL_EINVAL, "%s: targets of shape %s for %lld sequences of up to %lld labels: expected [%lld, "
                        ">= %lld]", name, dpl_shape_str(targets->_ndim, targets->_shape, b1, sizeof b1),
                        (long long)a->N, (long long)a->S, (long long)a->N, (long long)a->S);
    a->tg_stride = targets->_shape[1];
  } else if (targets->_shape[0] != total) {
    return dpl_errorf(DPL_EINVAL, "%s: 1-d targets must be the %lld labels of the target_lengths concatenated, got %lld",
                      name, (long long)total, (long long)targets->_shape[0]);
  }
  a->offset = malloc((size_t)(a->N > 0 ? a->N : 1) * sizeof *a->offset);
  if (!a->offset) return dpl_errorf(DPL_ENOMEM, "%s: out of memory", name);
  int64_t pos = 0;
  for (int64_t b = 0; b < a->N; b++) {
    a->offset[b] = a->tg_stride ? b * a->tg_stride : pos;
    pos += a->tl[b];
    for (int64_t s = 0; s < a->tl[b]; s++) {
      int64_t v = a->tg[a->offset[b] + s];
      if (v < 0 || v >= a->C || v == blank) {
        free(a->offset);
        a->offset = NULL;
        if (v == blank) /* (torch does not check: its gradient is wrong there) */
          return dpl_errorf(DPL_EINVAL, "%s: target %lld (label %lld of sequence %lld) is the blank: labels must be other "
                            "classes", name, (long long)v + 1, (long long)s + 1, (long long)b + 1);
        return dpl_errorf(DPL_EINVAL, "%s: target %lld (label %lld of sequence %lld) is out of range: expected a class "
                          "index in 1..%lld", name, (long long)v + 1, (long long)s + 1, (long long)b + 1,
                          (long long)a->C);
      }
    }
  }
  return DPL_OK;
}

/* the s-th label of the extended target (blanks around and between the labels) */
static inline int64_t tprime(const ctc_args *a, int64_t b, int64_t s)
{
  return (s & 1) ? a->tg[a->offset[b] + s / 2] : a->blank;
}

typedef struct ctc_job {
  const ctc_args *a;
  dpl_tensor *nll, *alpha;          /* forward: [N], [N, T, 2S + 1] */
  const dpl_tensor *grad, *nll_in, *alpha_in;
  dpl_tensor *grad_lp, *beta;       /* backward: [T, N, C], scratch [N, T, 2S + 1] */
  int32_t zero_infinity;
} ctc_job;

#define CTC_KERNELS(T_, SUF, EXP, LOG)                                                                             \
  static void ctc_fwd_##SUF(int64_t lo, int64_t hi, void *ctx)                                                     \
  {                                                                                                                \
    const ctc_job *j = ctx;                                                                                        \
    const ctc_args *a = j->a;                                                                                      \
    const T_ *lp = a->lp->_data;                                                                                   \
    const T_ ninf = -INFINITY;                                                                                     \
    int64_t L = 2 * a->S + 1;                                                                                      \
    for (int64_t b = lo; b < hi; b++) {                                                                            \
      T_ *la = (T_ *)j->alpha->_data + b * a->T * L;                                                               \
      const T_ *lpb = lp + b * a->sn;                                                                              \
      int64_t il = a->il[b], tl = a->tl[b];                                                                        \
      T_ *out = (T_ *)j->nll->_data + b;                                                                           \
      if (il == 0) { /* no time step: only the empty target has probability 1 */                                 \
        *out = tl == 0 ? (T_)0 : (T_)INFINITY;                                                                     \
        continue;                                                                                                  \
      }                                                                                                            \
      la[0] = lpb[a->blank * a->sc];                                                                               \
      if (tl > 0) la[1] = lpb[tprime(a, b, 1) * a->sc];                                                            \
      for (int64_t t = 1; t < il; t++) {                                                                           \
        const T_ *prev = la + (t - 1) * L;                                                                         \
        T_ *cur = la + t * L;                                                                                      \
        const T_ *lpt = lpb + t * a->st;                                                                           \
        for (int64_t s = 0; s < 2 * tl + 1; s++) {                                                                 \
          int64_t ctp = tprime(a, b, s);                                                                           \
          T_ la1 = prev[s], lamax = la1, la2, la3;                                                                 \
          if (s > 0) {                                                                                             \
            la2 = prev[s - 1];                                                                                     \
            if (la2 > lamax) lamax = la2;                                                                          \
          } else {                                                                                                 \
            la2 = ninf;                                                                                            \
          }                                                                                                        \
          if (s > 1 && tprime(a, b, s - 2) != ctp) {                                                               \
            la3 = prev[s - 2];                                                                                     \
            if (la3 > lamax) lamax = la3;                                                                          \
          } else {                                                                                                 \
            la3 = ninf;                                                                                            \
          }                                                                                                        \
          if (lamax == ninf) lamax = 0;                                                                            \
          cur[s] = LOG(EXP(la1 - lamax) + EXP(la2 - lamax) + EXP(la3 - lamax)) + lamax + lpt[ctp * a->sc];         \
        }                                                                                                          \
      }                                                                                                            \
      const T_ *last = la + (il - 1) * L;                                                                          \
      if (tl == 0) {                                                                                               \
        *out = -last[0];                                                                                           \
      } else {                                                                                                     \
        T_ l1 = last[tl * 2], l2 = last[tl * 2 - 1];                                                               \
        T_ m = l1 > l2 ? l1 : l2;                                                                                  \
        if (m == ninf) m = 0;                                                                                      \
        *out = -(LOG(EXP(l1 - m) + EXP(l2 - m)) + m);                                                              \
      }                                                                                                            \
    }                                                                                                              \
  }                                                                                                                \
  /* log(exp(x) + exp(y)) into *acc, where *acc = -inf stands for the empty sum */                              \
  static inline void ctc_logadd_##SUF(T_ *acc, T_ v)                                                               \
  {                                                                                                                \
    if (*acc == -INFINITY) { *acc = v; return; }                                                                   \
    T_ m = *acc > v ? *acc : v;                                                                                    \
    *acc = LOG(EXP(*acc - m) + EXP(v - m)) + m;                                                                    \
  }                                                                                                                \
  static void ctc_bwd_##SUF(int64_t lo, int64_t hi, void *ctx)                                                     \
  {                                                                                                                \
    const ctc_job *j = ctx;                                                                                        \
    const ctc_args *a = j->a;                                                                                      \
    const T_ *lp = a->lp->_data;                                                                                   \
    const T_ ninf = -INFINITY;                                                                                     \
    int64_t L = 2 * a->S + 1, C = a->C;                                                                            \
    T_ *gall = j->grad_lp->_data; /* [T, N, C] contiguous */                                                       \
    const T_ *gout = j->grad->_data;                                                                               \
    int64_t gstride = j->grad->_ndim == 1 ? j->grad->_stride[0] : 0;                                               \
    for (int64_t b = lo; b < hi; b++) {                                                                            \
      const T_ *la = (const T_ *)j->alpha_in->_data + b * a->T * L;                                                \
      T_ *lb = (T_ *)j->beta->_data + b * a->T * L;                                                                \
      const T_ *lpb = lp + b * a->sn;                                                                              \
      int64_t il = a->il[b], tl = a->tl[b];                                                                        \
      T_ nll = ((const T_ *)j->nll_in->_data)[b];                                                                  \
      T_ gr = gout[b * gstride];                                                                                   \
      for (int64_t t = 0; t < a->T; t++)                                                                           \
        for (int64_t c = 0; c < C; c++) gall[(t * a->N + b) * C + c] = t < il ? ninf : 0;                          \
      if (j->zero_infinity && nll == (T_)INFINITY) {                                                               \
        for (int64_t t = 0; t < il; t++)                                                                           \
          for (int64_t c = 0; c < C; c++) gall[(t * a->N + b) * C + c] = 0;                                        \
        continue;                                                                                                  \
      }                                                                                                            \
      if (il == 0) continue;                                                                                       \
      for (int64_t i = 0; i < a->T * L; i++) lb[i] = ninf;                                                         \
      T_ *glast = gall + ((il - 1) * a->N + b) * C;                                                                \
      const T_ *lplast = lpb + (il - 1) * a->st;                                                                   \
      lb[(il - 1) * L + 2 * tl] = lplast[a->blank * a->sc];                                                        \
      glast[a->blank] = la[(il - 1) * L + 2 * tl] + lb[(il - 1) * L + 2 * tl];                                     \
      if (tl > 0) {                                                                                                \
        int64_t ctp = tprime(a, b, 2 * tl - 1);                                                                    \
        lb[(il - 1) * L + 2 * tl - 1] = lplast[ctp * a->sc];                                                       \
        glast[ctp] = la[(il - 1) * L + 2 * tl - 1] + lb[(il - 1) * L + 2 * tl - 1];                                \
      }                                                                                                            \
      for (int64_t t = il - 2; t >= 0; t--) {                                                                      \
        const T_ *nxt = lb + (t + 1) * L;                                                                          \
        T_ *cur = lb + t * L;                                                                                      \
        const T_ *lat = la + t * L;                                                                                \
        const T_ *lpt = lpb + t * a->st;                                                                           \
        T_ *gt = gall + (t * a->N + b) * C;                                                                        \
        for (int64_t s = 2 * tl; s >= 0; s--) {                                                                    \
          int64_t ctp = tprime(a, b, s);                                                                           \
          T_ lb1 = nxt[s], lbmax = lb1, lb2, lb3;                                                                  \
          if (s < 2 * tl) {                                                                                        \
            lb2 = nxt[s + 1];                                                                                      \
            if (lb2 > lbmax) lbmax = lb2;                                                                          \
          } else {                                                                                                 \
            lb2 = ninf;                                                                                            \
          }                                                                                                        \
          if (s < 2 * tl - 1 && tprime(a, b, s + 2) != ctp) {                                                      \
            lb3 = nxt[s + 2];                                                                                      \
            if (lb3 > lbmax) lbmax = lb3;                                                                          \
          } else {                                                                                                 \
            lb3 = ninf;                                                                                            \
          }                                                                                                        \
          if (lbmax == ninf) lbmax = 0;                                                                            \
          cur[s] = LOG(EXP(lb1 - lbmax) + EXP(lb2 - lbmax) + EXP(lb3 - lbmax)) + lbmax + lpt[ctp * a->sc];         \
          ctc_logadd_##SUF(&gt[ctp], lat[s] + cur[s]);                                                             \
        }                                                                                                          \
      }                                                                                                            \
      for (int64_t t = 0; t < il; t++) {                                                                           \
        T_ *gt = gall + (t * a->N + b) * C;                                                                        \
        const T_ *lpt = lpb + t * a->st;                                                                           \
        for (int64_t c = 0; c < C; c++) {                                                                          \
          T_ l = lpt[c * a->sc];                                                                                   \
          gt[c] = (EXP(l) - EXP(gt[c] + nll - l)) * gr;                                                            \
        }                                                                                                          \
      }                                                                                                            \
    }                                                                                                              \
  }

CTC_KERNELS(float, f32, expf, logf)
CTC_KERNELS(double, f64, exp, log)

/* sequences per task: the work of one is T * (2S + 1) steps */
static int64_t ctc_grain(const ctc_args *a)
{
  int64_t per = a->T * (2 * a->S + 1) + 1;
  int64_t g = 65536 / per;
  return g < 1 ? 1 : g;
}

/* the lengths, label offsets and labels of a (host memory) as one int64 tensor on log_probs'
 * device: DPL_BK_CTC's meta [3N + the targets' elements] */
static int ctc_meta(const ctc_args *a, const dpl_tensor *targets, dpl_tensor **out)
{
  int64_t N = a->N, M = targets->_numel, n = 3 * N + M;
  dpl_tensor *h = NULL;
  *out = NULL;
  DPL_TRY(dpl_new(a->name, DPL_INT64, 1, &n, NULL, &h));
  int64_t *p = h->_data;
  for (int64_t b = 0; b < N; b++) p[b] = a->il[b], p[N + b] = a->tl[b], p[2 * N + b] = a->offset[b];
  if (M > 0) memcpy(p + 3 * N, a->tg, (size_t)M * sizeof *p);
  int st = dpl_new(a->name, DPL_INT64, 1, &n, a->lp, out);
  if (st == DPL_OK) st = dpl_copy_any(a->name, *out, h);
  dpl_tensor_release(h);
  if (st != DPL_OK) { dpl_tensor_release(*out); *out = NULL; }
  return st;
}

int dpl_ctc_loss(const dpl_tensor *log_probs, const dpl_tensor *targets, const dpl_tensor *input_lengths,
                 const dpl_tensor *target_lengths, int64_t blank, dpl_tensor **nll, dpl_tensor **log_alpha)
{
  const char *name = "ctc_loss";
  if (!nll || !log_alpha) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *nll = NULL, *log_alpha = NULL;
  ctc_args a;
  DPL_TRY(ctc_setup(&a, name, log_probs, targets, input_lengths, target_lengths, blank));
  int64_t L = 2 * a.S + 1;
  int64_t ashape[3] = {a.N, a.T, L};
  dpl_tensor *out = NULL, *alpha = NULL;
  if (dpl_is_devmem(log_probs)) {
    dpl_tensor *meta = NULL;
    int st = ctc_meta(&a, targets, &meta);
    free(a.offset);
    if (st != DPL_OK) return st;
    dpl_bk_args k = {.op = DPL_BK_CTC, .in = {log_probs, meta}, .l = {blank, a.S}, .out = {nll, log_alpha}, .name = name};
    st = dpl_bk_call(&k);
    dpl_tensor_release(meta);
    return st;
  }
  int st = dpl_new(name, log_probs->_dtype, 1, &a.N, log_probs, &out);
  if (st == DPL_OK) st = dpl_new(name, log_probs->_dtype, 3, ashape, log_probs, &alpha);
  if (st != DPL_OK) {
    if (out) dpl_tensor_release(out);
    free(a.offset);
    return st;
  }
  int64_t n = a.N * a.T * L;
  if (log_probs->_dtype == DPL_FLOAT32) {
    float *p = alpha->_data;
    for (int64_t i = 0; i < n; i++) p[i] = -INFINITY;
  } else {
    double *p = alpha->_data;
    for (int64_t i = 0; i < n; i++) p[i] = -INFINITY;
  }
  ctc_job j = {.a = &a, .nll = out, .alpha = alpha};
  dpl_parallel_for(a.N, ctc_grain(&a), log_probs->_dtype == DPL_FLOAT32 ? ctc_fwd_f32 : ctc_fwd_f64, &j);
  free(a.offset);
  *nll = out, *log_alpha = alpha;
  return DPL_OK;
}

int dpl_ctc_loss_backward(const dpl_tensor *grad, const dpl_tensor *log_probs, const dpl_tensor *targets,
                          const dpl_tensor *input_lengths, const dpl_tensor *target_lengths, const dpl_tensor *nll,
                          const dpl_tensor *log_alpha, int64_t blank, int32_t zero_infinity, dpl_tensor **grad_lp)
{
  const char *name = "ctc_loss_backward";
  char b1[160];
  if (!grad_lp) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *grad_lp = NULL;
  ctc_args a;
  DPL_TRY(ctc_setup(&a, name, log_probs, targets, input_lengths, target_lengths, blank));
  int st = DPL_OK;
  int64_t L = 2 * a.S + 1;
  int32_t dt = log_probs->_dtype;
  int dev = dpl_is_devmem(log_probs);
  if (dev) {
    if ((st = dpl_check_handle(name, "grad", grad)) != DPL_OK || (st = dpl_check_handle(name, "nll", nll)) != DPL_OK ||
        (st = dpl_check_handle(name, "log_alpha", log_alpha)) != DPL_OK ||
        (st = dpl_check_same_device(name, log_probs, grad)) != DPL_OK ||
        (st = dpl_check_same_device(name, log_probs, nll)) != DPL_OK ||
        (st = dpl_check_same_device(name, log_probs, log_alpha)) != DPL_OK)
      goto done;
  } else if ((st = dpl_check_tensor(name, "grad", grad)) != DPL_OK || (st = dpl_check_tensor(name, "nll", nll)) != DPL_OK ||
             (st = dpl_check_tensor(name, "log_alpha", log_alpha)) != DPL_OK) {
    goto done;
  }
  if (grad->_dtype != dt || !(grad->_ndim == 0 || (grad->_ndim == 1 && grad->_shape[0] == a.N))) {
    st = dpl_errorf(DPL_EINVAL, "%s: grad must be %s of shape [%lld] (one per sequence), got %s %s", name,
                    dpl_dtype_name(dt), (long long)a.N, dpl_dtype_name(grad->_dtype),
                    dpl_shape_str(grad->_ndim, grad->_shape, b1, sizeof b1));
    goto done;
  }
  if (nll->_dtype != dt || nll->_ndim != 1 || nll->_shape[0] != a.N || !(nll->_flags & DPL_CONTIG) ||
      log_alpha->_dtype != dt || log_alpha->_ndim != 3 || log_alpha->_shape[0] != a.N ||
      log_alpha->_shape[1] != a.T || log_alpha->_shape[2] != L || !(log_alpha->_flags & DPL_CONTIG)) {
    st = dpl_errorf(DPL_EINVAL, "%s: nll and log_alpha must be the forward's results for these arguments", name);
    goto done;
  }
  if (dev) {
    dpl_tensor *meta = NULL;
    if ((st = ctc_meta(&a, targets, &meta)) != DPL_OK) goto done;
    dpl_bk_args k = {.op = DPL_BK_CTC_BWD, .in = {log_probs, meta, grad, nll, log_alpha}, .l = {blank, a.S},
                     .i = {zero_infinity}, .out = {grad_lp}, .name = name};
    st = dpl_bk_call(&k);
    dpl_tensor_release(meta);
    goto done;
  }
  dpl_tensor *g = NULL, *beta = NULL;
  int64_t ashape[3] = {a.N, a.T, L};
  if ((st = dpl_new(name, dt, 3, log_probs->_shape, log_probs, &g)) != DPL_OK) goto done;
  if ((st = dpl_new(name, dt, 3, ashape, log_probs, &beta)) != DPL_OK) {
    dpl_tensor_release(g);
    goto done;
  }
  ctc_job j = {.a = &a, .grad = grad, .nll_in = nll, .alpha_in = log_alpha, .grad_lp = g, .beta = beta,
               .zero_infinity = zero_infinity};
  dpl_parallel_for(a.N, ctc_grain(&a), dt == DPL_FLOAT32 ? ctc_bwd_f32 : ctc_bwd_f64, &j);
  dpl_tensor_release(beta);
  *grad_lp = g;
done:
  free(a.offset);
  return st;
}
