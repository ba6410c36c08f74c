/* dpl_tensor_rnn.c: the pointwise part of one time step of the recurrent cells
 * (LSTM, GRU, Elman RNN with tanh or ReLU) and its gradient, for the time loops
 * of lua/dpl/nn/functional_seq.lua (nn.LSTM, nn.GRU, nn.RNN and their cells).
 * Each step's matrix products (the input projection of all steps, the hidden
 * projection of each step) are GEMMs made by the caller; these kernels fuse
 * the gate activations and the state update around them: one pass over the
 * gates per step, forward and backward. Every operand is a 2-d contiguous
 * float32 or float64 tensor (one dtype for all) in host memory; rows (the
 * batch) are split across the thread pool. Results are written into tensors
 * the caller made (slices of its per-sequence buffers). A tensor in GPU memory
 * fails with "<op>: not implemented on cuda" (the Lua layer composes tensor
 * ops there instead). */
#include "dpl_tensor_internal.h"
#include <math.h>

/* rows per task: at least ~16K gate values */
#define GATE_GRAIN 16384

/* t is a 2-d contiguous tensor [rows, cols] of dtype dt in host memory, or an error naming op and what */
static int check2d(const char *op, const char *what, const dpl_tensor *t, int64_t rows, int64_t cols, int32_t dt)
{
  if (!t) return dpl_errorf(DPL_EINVAL, "%s: %s is NULL", op, what);
  DPL_TRY(dpl_check_tensor(op, what, t));
  if (t->_dtype != dt)
    return dpl_errorf(DPL_EINVAL, "%s: expected %s of dtype %s, got %s", op, what, dpl_dtype_name(dt),
                      dpl_dtype_name(t->_dtype));
  if (t->_ndim != 2 || t->_shape[0] != rows || t->_shape[1] != cols) {
    char b[160];
    return dpl_errorf(DPL_EINVAL, "%s: expected %s of shape [%lld, %lld], got %s", op, what, (long long)rows,
                      (long long)cols, dpl_shape_str(t->_ndim, t->_shape, b, sizeof b));
  }
  if (!dpl_is_contig(t)) return dpl_errorf(DPL_EINVAL, "%s: %s must be contiguous", op, what);
  return DPL_OK;
}

/* the first operand fixes the dtype (float32 or float64), the batch size B and H = width / k */
static int lead(const char *op, const char *what, const dpl_tensor *t, int64_t k, int64_t *B, int64_t *H)
{
  if (!t) return dpl_errorf(DPL_EINVAL, "%s: %s is NULL", op, what);
  DPL_TRY(dpl_check_tensor(op, what, t));
  if (t->_dtype != DPL_FLOAT32 && t->_dtype != DPL_FLOAT64)
    return dpl_errorf(DPL_EINVAL, "%s: expected float32 or float64 tensors, got %s", op, dpl_dtype_name(t->_dtype));
  if (t->_ndim != 2 || t->_shape[1] % k != 0) {
    char b[160];
    return dpl_errorf(DPL_EINVAL, "%s: expected %s of shape [B, %lld * hidden_size], got %s", op, what, (long long)k,
                      dpl_shape_str(t->_ndim, t->_shape, b, sizeof b));
  }
  *B = t->_shape[0];
  *H = t->_shape[1] / k;
  return check2d(op, what, t, *B, k * *H, t->_dtype);
}

typedef struct rnn_job {
  int64_t H;
  int relu;
  const void *a, *b, *c, *d, *e; /* inputs, as each kernel names them */
  void *o1, *o2, *o3;            /* outputs */
} rnn_job;

static int64_t grain_rows(int64_t width)
{
  int64_t g = width > 0 ? GATE_GRAIN / width : GATE_GRAIN;
  return g < 1 ? 1 : g;
}

/* the kernels for one element type T (math functions with suffix S) */
#define RNN_KERNELS(T, S)                                                                                   \
  static inline T sig_##T(T x) { return (T)1 / ((T)1 + exp##S(-x)); }                                       \
  /* pre [B, 4H], c_prev [B, H] -> h, c [B, H], act [B, 4H] (i, f, g, o) or NULL */                        \
  static void lstm_fwd_##T(int64_t lo, int64_t hi, void *vj)                                                \
  {                                                                                                         \
    const rnn_job *j = vj;                                                                                  \
    int64_t H = j->H;                                                                                       \
    for (int64_t r = lo; r < hi; r++) {                                                                     \
      const T *p = (const T *)j->a + r * 4 * H, *cp = (const T *)j->b + r * H;                              \
      T *h = (T *)j->o1 + r * H, *c = (T *)j->o2 + r * H, *a = j->o3 ? (T *)j->o3 + r * 4 * H : NULL;      \
      for (int64_t k = 0; k < H; k++) {                                                                     \
        T i = sig_##T(p[k]), f = sig_##T(p[H + k]), g = tanh##S(p[2 * H + k]), o = sig_##T(p[3 * H + k]);   \
        T cn = f * cp[k] + i * g;                                                                           \
        c[k] = cn;                                                                                          \
        h[k] = o * tanh##S(cn);                                                                             \
        if (a) { a[k] = i; a[H + k] = f; a[2 * H + k] = g; a[3 * H + k] = o; }                              \
      }                                                                                                     \
    }                                                                                                       \
  }                                                                                                         \
  /* dh [B, H], dc [B, H] (in: of c, out: of c_prev), act [B, 4H], c, c_prev [B, H] -> dpre [B, 4H] */      \
  static void lstm_bwd_##T(int64_t lo, int64_t hi, void *vj)                                                \
  {                                                                                                         \
    const rnn_job *j = vj;                                                                                  \
    int64_t H = j->H;                                                                                       \
    for (int64_t r = lo; r < hi; r++) {                                                                     \
      const T *dh = (const T *)j->a + r * H, *a = (const T *)j->b + r * 4 * H;                              \
      const T *c = (const T *)j->c + r * H, *cp = (const T *)j->d + r * H;                                  \
      T *dc = (T *)j->o1 + r * H, *dp = (T *)j->o2 + r * 4 * H;                                             \
      for (int64_t k = 0; k < H; k++) {                                                                     \
        T i = a[k], f = a[H + k], g = a[2 * H + k], o = a[3 * H + k];                                       \
        T tc = tanh##S(c[k]);                                                                               \
        T dck = dc[k] + dh[k] * o * ((T)1 - tc * tc);                                                       \
        dp[k] = dck * g * i * ((T)1 - i);                                                                   \
        dp[H + k] = dck * cp[k] * f * ((T)1 - f);                                                           \
        dp[2 * H + k] = dck * i * ((T)1 - g * g);                                                           \
        dp[3 * H + k] = dh[k] * tc * o * ((T)1 - o);                                                        \
        dc[k] = dck * f;                                                                                    \
      }                                                                                                     \
    }                                                                                                       \
  }                                                                                                         \
  /* xp [B, 3H] (x W_ih^T + b_ih), hh [B, 3H] (h W_hh^T + b_hh), h_prev [B, H] -> h [B, H],               \
   * act [B, 4H] (r, z, n, hh_n) or NULL */                                                                 \
  static void gru_fwd_##T(int64_t lo, int64_t hi, void *vj)                                                 \
  {                                                                                                         \
    const rnn_job *j = vj;                                                                                  \
    int64_t H = j->H;                                                                                       \
    for (int64_t r = lo; r < hi; r++) {                                                                     \
      const T *x = (const T *)j->a + r * 3 * H, *hh = (const T *)j->b + r * 3 * H;                          \
      const T *hp = (const T *)j->c + r * H;                                                                \
      T *h = (T *)j->o1 + r * H, *a = j->o2 ? (T *)j->o2 + r * 4 * H : NULL;                                \
      for (int64_t k = 0; k < H; k++) {                                                                     \
        T rg = sig_##T(x[k] + hh[k]), z = sig_##T(x[H + k] + hh[H + k]), hn = hh[2 * H + k];               \
        T n = tanh##S(x[2 * H + k] + rg * hn);                                                              \
        h[k] = (hp[k] - n) * z + n;                                                                         \
        if (a) { a[k] = rg; a[H + k] = z; a[2 * H + k] = n; a[3 * H + k] = hn; }                            \
      }                                                                                                     \
    }                                                                                                       \
  }                                                                                                         \
  /* dh [B, H], act [B, 4H], h_prev [B, H], gy [B, H] or NULL -> dxp, dhh [B, 3H],                          \
   * dh_prev [B, H] (without the hidden product's part: dh * z + gy) */                                     \
  static void gru_bwd_##T(int64_t lo, int64_t hi, void *vj)                                                 \
  {                                                                                                         \
    const rnn_job *j = vj;                                                                                  \
    int64_t H = j->H;                                                                                       \
    for (int64_t r = lo; r < hi; r++) {                                                                     \
      const T *dh = (const T *)j->a + r * H, *a = (const T *)j->b + r * 4 * H;                              \
      const T *hp = (const T *)j->c + r * H, *gy = j->d ? (const T *)j->d + r * H : NULL;                   \
      T *dx = (T *)j->o1 + r * 3 * H, *dhh = (T *)j->o2 + r * 3 * H, *dprev = (T *)j->o3 + r * H;           \
      for (int64_t k = 0; k < H; k++) {                                                                     \
        T rg = a[k], z = a[H + k], n = a[2 * H + k], hn = a[3 * H + k], d = dh[k];                          \
        T dn = d * ((T)1 - z) * ((T)1 - n * n);                                                             \
        T dr = dn * hn * rg * ((T)1 - rg);                                                                  \
        T dz = d * (hp[k] - n) * z * ((T)1 - z);                                                            \
        dx[k] = dr; dx[H + k] = dz; dx[2 * H + k] = dn;                                                     \
        dhh[k] = dr; dhh[H + k] = dz; dhh[2 * H + k] = dn * rg;                                             \
        dprev[k] = d * z + (gy ? gy[k] : (T)0);                                                             \
      }                                                                                                     \
    }                                                                                                       \
  }                                                                                                         \
  /* pre [B, H] -> h = tanh(pre) or relu(pre) (h may be pre) */                                             \
  static void rnn_fwd_##T(int64_t lo, int64_t hi, void *vj)                                                 \
  {                                                                                                         \
    const rnn_job *j = vj;                                                                                  \
    int64_t H = j->H;                                                                                       \
    for (int64_t r = lo; r < hi; r++) {                                                                     \
      const T *p = (const T *)j->a + r * H;                                                                 \
      T *h = (T *)j->o1 + r * H;                                                                            \
      if (j->relu) for (int64_t k = 0; k < H; k++) h[k] = p[k] > (T)0 ? p[k] : (T)0;                         \
      else for (int64_t k = 0; k < H; k++) h[k] = tanh##S(p[k]);                                            \
    }                                                                                                       \
  }                                                                                                         \
  /* dh, h [B, H] -> dpre [B, H] */                                                                         \
  static void rnn_bwd_##T(int64_t lo, int64_t hi, void *vj)                                                 \
  {                                                                                                         \
    const rnn_job *j = vj;                                                                                  \
    int64_t H = j->H;                                                                                       \
    for (int64_t r = lo; r < hi; r++) {                                                                     \
      const T *dh = (const T *)j->a + r * H, *h = (const T *)j->b + r * H;                                  \
      T *dp = (T *)j->o1 + r * H;                                                                           \
      if (j->relu) for (int64_t k = 0; k < H; k++) dp[k] = h[k] > (T)0 ? dh[k] : (T)0;                       \
      else for (int64_t k = 0; k < H; k++) dp[k] = dh[k] * ((T)1 - h[k] * h[k]);                            \
    }                                                                                                       \
  }
RNN_KERNELS(float, f)
RNN_KERNELS(double, )

static void run(int64_t B, int64_t width, int32_t dt, dpl_range_fn f32, dpl_range_fn f64, rnn_job *j)
{
  if (B > 0 && j->H > 0) dpl_parallel_for(B, grain_rows(width), dt == DPL_FLOAT32 ? f32 : f64, j);
}

int dpl_lstm_cell_forward(const dpl_tensor *pre, const dpl_tensor *c_prev, dpl_tensor *h, dpl_tensor *c,
                          dpl_tensor *act)
{
  const char *op = "lstm_cell";
  int64_t B = 0, H = 0;
  DPL_TRY(lead(op, "gates", pre, 4, &B, &H));
  int32_t dt = pre->_dtype;
  DPL_TRY(check2d(op, "c_prev", c_prev, B, H, dt));
  DPL_TRY(check2d(op, "h", h, B, H, dt));
  DPL_TRY(check2d(op, "c", c, B, H, dt));
  if (act) DPL_TRY(check2d(op, "act", act, B, 4 * H, dt));
  rnn_job j = {.H = H, .a = pre->_data, .b = c_prev->_data, .o1 = h->_data, .o2 = c->_data,
               .o3 = act ? act->_data : NULL};
  run(B, 4 * H, dt, lstm_fwd_float, lstm_fwd_double, &j);
  return DPL_OK;
}

int dpl_lstm_cell_backward(const dpl_tensor *dh, dpl_tensor *dc, const dpl_tensor *act, const dpl_tensor *c,
                           const dpl_tensor *c_prev, dpl_tensor *dpre)
{
  const char *op = "lstm_cell_backward";
  int64_t B = 0, H = 0;
  DPL_TRY(lead(op, "act", act, 4, &B, &H));
  int32_t dt = act->_dtype;
  DPL_TRY(check2d(op, "dh", dh, B, H, dt));
  DPL_TRY(check2d(op, "dc", dc, B, H, dt));
  DPL_TRY(check2d(op, "c", c, B, H, dt));
  DPL_TRY(check2d(op, "c_prev", c_prev, B, H, dt));
  DPL_TRY(check2d(op, "dpre", dpre, B, 4 * H, dt));
  rnn_job j = {.H = H, .a = dh->_data, .b = act->_data, .c = c->_data, .d = c_prev->_data, .o1 = dc->_data,
               .o2 = dpre->_data};
  run(B, 4 * H, dt, lstm_bwd_float, lstm_bwd_double, &j);
  return DPL_OK;
}

int dpl_gru_cell_forward(const dpl_tensor *xp, const dpl_tensor *hh, const dpl_tensor *h_prev, dpl_tensor *h,
                         dpl_tensor *act)
{
  const char *op = "gru_cell";
  int64_t B = 0, H = 0;
  DPL_TRY(lead(op, "input gates", xp, 3, &B, &H));
  int32_t dt = xp->_dtype;
  DPL_TRY(check2d(op, "hidden gates", hh, B, 3 * H, dt));
  DPL_TRY(check2d(op, "h_prev", h_prev, B, H, dt));
  DPL_TRY(check2d(op, "h", h, B, H, dt));
  if (act) DPL_TRY(check2d(op, "act", act, B, 4 * H, dt));
  rnn_job j = {.H = H, .a = xp->_data, .b = hh->_data, .c = h_prev->_data, .o1 = h->_data,
               .o2 = act ? act->_data : NULL};
  run(B, 3 * H, dt, gru_fwd_float, gru_fwd_double, &j);
  return DPL_OK;
}

int dpl_gru_cell_backward(const dpl_tensor *dh, const dpl_tensor *act, const dpl_tensor *h_prev, const dpl_tensor *gy,
                          dpl_tensor *dxp, dpl_tensor *dhh, dpl_tensor *dh_prev)
{
  const char *op = "gru_cell_backward";
  int64_t B = 0, H = 0;
  DPL_TRY(lead(op, "act", act, 4, &B, &H));
  int32_t dt = act->_dtype;
  DPL_TRY(check2d(op, "dh", dh, B, H, dt));
  DPL_TRY(check2d(op, "h_prev", h_prev, B, H, dt));
  if (gy) DPL_TRY(check2d(op, "gy", gy, B, H, dt));
  DPL_TRY(check2d(op, "dxp", dxp, B, 3 * H, dt));
  DPL_TRY(check2d(op, "dhh", dhh, B, 3 * H, dt));
  DPL_TRY(check2d(op, "dh_prev", dh_prev, B, H, dt));
  rnn_job j = {.H = H, .a = dh->_data, .b = act->_data, .c = h_prev->_data, .d = gy ? gy->_data : NULL,
               .o1 = dxp->_data, .o2 = dhh->_data, .o3 = dh_prev->_data};
  run(B, 3 * H, dt, gru_bwd_float, gru_bwd_double, &j);
  return DPL_OK;
}

int dpl_rnn_cell_forward(int32_t relu, const dpl_tensor *pre, dpl_tensor *h)
{
  const char *op = relu ? "rnn_relu_cell" : "rnn_tanh_cell";
  int64_t B = 0, H = 0;
  DPL_TRY(lead(op, "pre", pre, 1, &B, &H));
  DPL_TRY(check2d(op, "h", h, B, H, pre->_dtype));
  rnn_job j = {.H = H, .relu = relu != 0, .a = pre->_data, .o1 = h->_data};
  run(B, H, pre->_dtype, rnn_fwd_float, rnn_fwd_double, &j);
  return DPL_OK;
}

int dpl_rnn_cell_backward(int32_t relu, const dpl_tensor *dh, const dpl_tensor *h, dpl_tensor *dpre)
{
  const char *op = relu ? "rnn_relu_cell_backward" : "rnn_tanh_cell_backward";
  int64_t B = 0, H = 0;
  DPL_TRY(lead(op, "h", h, 1, &B, &H));
  DPL_TRY(check2d(op, "dh", dh, B, H, h->_dtype));
  DPL_TRY(check2d(op, "dpre", dpre, B, H, h->_dtype));
  rnn_job j = {.H = H, .relu = relu != 0, .a = dh->_data, .b = h->_data, .o1 = dpre->_data};
  run(B, H, h->_dtype, rnn_bwd_float, rnn_bwd_double, &j);
  return DPL_OK;
}
