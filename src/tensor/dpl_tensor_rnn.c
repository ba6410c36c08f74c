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

/* no FP traps are ever enabled: GCC may then compute both sides of the selects in the gate
 * functions below (if-conversion), which lets the row loops vectorize; results are unchanged */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

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
  const void *a, *b, *c, *d; /* inputs, as each kernel names them */
  void *o1, *o2, *o3;        /* outputs */
} rnn_job;

static int64_t grain_rows(int64_t width)
{
  int64_t g = width > 0 ? GATE_GRAIN / width : GATE_GRAIN;
  return g < 1 ? 1 : g;
}

/* float32 exp, sigmoid and tanh without calls or branches, so that the loops below vectorize
 * (libm's expf and tanhf are scalar calls; tanhf alone cost ~12 ns an element). exp: Cephes'
 * expf (the argument reduced by ln 2 in two parts, a degree-5 polynomial, 2^n made from its
 * bits), within 2 ulp; the argument is clamped to [-87.3, 88.3] (the results there are ~0 and
 * ~2e38: the same sigmoid and tanh); NaN passes through. tanh: Cephes' odd polynomial below
 * |x| = 0.625, else 1 - 2 / (exp(2|x|) + 1) with x's sign; within a few ulp. float64 uses libm. */
static inline float exp_f(float x)
{
  float y = x != x ? 0.0f : x;
  y = y < -87.3f ? -87.3f : y;
  y = y > 88.3f ? 88.3f : y;
  float n = (y * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* rounded (1.5 * 2^23) */
  float r = y - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  union { int32_t i; float f; } sc;
  sc.i = ((int32_t)n + 127) * 8388608; /* << 23 */
  float e = p * sc.f;
  return x != x ? x : e;
}
static inline float sig_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }
static inline float tanh_f(float x)
{
  float ax = x < 0 ? -x : x, z = x * x;
  float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z
                 - 3.33332819422e-1f) * z * x + x;
  float big = 1.0f - 2.0f / (exp_f(2.0f * ax) + 1.0f);
  big = x < 0 ? -big : big;
  return ax < 0.625f ? small : big;
}
static inline double sig_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline double tanh_d(double x) { return tanh(x); }

/* the row loops of one element type T, with SIG and TANH its sigmoid and tanh; the operands
 * of a row never overlap (ivdep: no alias checks, which made GCC give up on these loops) */
#if defined(__GNUC__) && !defined(__clang__)
#define IVDEP _Pragma("GCC ivdep")
#else
#define IVDEP
#endif
#define RNN_KERNELS(T, SIG, TANH)                                                                          \
  /* pre [B, 4H], c_prev [B, H] -> h, c [B, H] and act [B, 4H] (i, f, g, o) when not NULL */              \
  DPL_CLONES static void lstm_fwd_##T(int64_t lo, int64_t hi, void *vj)                                     \
  {                                                                                                        \
    const rnn_job *j = vj;                                                                                 \
    int64_t H = j->H;                                                                                      \
    for (int64_t r = lo; r < hi; r++) {                                                                    \
      const T *p = (const T *)j->a + r * 4 * H, *cp = (const T *)j->b + r * H;                             \
      T *h = (T *)j->o1 + r * H, *c = (T *)j->o2 + r * H;                                                  \
      if (j->o3) {                                                                                         \
        T *a = (T *)j->o3 + r * 4 * H;                                                                     \
        IVDEP for (int64_t k = 0; k < H; k++) {                                                            \
          T i = SIG(p[k]), f = SIG(p[H + k]), g = TANH(p[2 * H + k]), o = SIG(p[3 * H + k]);               \
          T cn = f * cp[k] + i * g;                                                                        \
          c[k] = cn;                                                                                       \
          h[k] = o * TANH(cn);                                                                             \
          a[k] = i; a[H + k] = f; a[2 * H + k] = g; a[3 * H + k] = o;                                      \
        }                                                                                                  \
      } else {                                                                                             \
        IVDEP for (int64_t k = 0; k < H; k++) {                                                            \
          T i = SIG(p[k]), f = SIG(p[H + k]), g = TANH(p[2 * H + k]), o = SIG(p[3 * H + k]);               \
          T cn = f * cp[k] + i * g;                                                                        \
          c[k] = cn;                                                                                       \
          h[k] = o * TANH(cn);                                                                             \
        }                                                                                                  \
      }                                                                                                    \
    }                                                                                                      \
  }                                                                                                        \
  /* dh [B, H], dc [B, H] (in: of c; out: of c_prev), act [B, 4H], c, c_prev [B, H] -> dpre [B, 4H] */     \
  DPL_CLONES static void lstm_bwd_##T(int64_t lo, int64_t hi, void *vj)                                     \
  {                                                                                                        \
    const rnn_job *j = vj;                                                                                 \
    int64_t H = j->H;                                                                                      \
    for (int64_t r = lo; r < hi; r++) {                                                                    \
      const T *dh = (const T *)j->a + r * H, *a = (const T *)j->b + r * 4 * H;                             \
      const T *c = (const T *)j->c + r * H, *cp = (const T *)j->d + r * H;                                 \
      T *dc = (T *)j->o1 + r * H, *dp = (T *)j->o2 + r * 4 * H;                                            \
      IVDEP for (int64_t k = 0; k < H; k++) {                                                              \
        T i = a[k], f = a[H + k], g = a[2 * H + k], o = a[3 * H + k];                                      \
        T tc = TANH(c[k]);                                                                                 \
        T dck = dc[k] + dh[k] * o * ((T)1 - tc * tc);                                                      \
        dp[k] = dck * g * i * ((T)1 - i);                                                                  \
        dp[H + k] = dck * cp[k] * f * ((T)1 - f);                                                          \
        dp[2 * H + k] = dck * i * ((T)1 - g * g);                                                          \
        dp[3 * H + k] = dh[k] * tc * o * ((T)1 - o);                                                       \
        dc[k] = dck * f;                                                                                   \
      }                                                                                                    \
    }                                                                                                      \
  }                                                                                                        \
  /* xp [B, 3H] (x W_ih^T + b_ih), hh [B, 3H] (h W_hh^T + b_hh), h_prev [B, H] -> h [B, H] and            \
   * act [B, 4H] (r, z, n, hh_n) when not NULL; PyTorch's h = (h_prev - n) * z + n */                      \
  DPL_CLONES static void gru_fwd_##T(int64_t lo, int64_t hi, void *vj)                                      \
  {                                                                                                        \
    const rnn_job *j = vj;                                                                                 \
    int64_t H = j->H;                                                                                      \
    for (int64_t r = lo; r < hi; r++) {                                                                    \
      const T *x = (const T *)j->a + r * 3 * H, *hh = (const T *)j->b + r * 3 * H;                         \
      const T *hp = (const T *)j->c + r * H;                                                               \
      T *h = (T *)j->o1 + r * H;                                                                           \
      if (j->o2) {                                                                                         \
        T *a = (T *)j->o2 + r * 4 * H;                                                                     \
        IVDEP for (int64_t k = 0; k < H; k++) {                                                            \
          T rg = SIG(x[k] + hh[k]), z = SIG(x[H + k] + hh[H + k]), hn = hh[2 * H + k];                     \
          T n = TANH(x[2 * H + k] + rg * hn);                                                              \
          h[k] = (hp[k] - n) * z + n;                                                                      \
          a[k] = rg; a[H + k] = z; a[2 * H + k] = n; a[3 * H + k] = hn;                                    \
        }                                                                                                  \
      } else {                                                                                             \
        IVDEP for (int64_t k = 0; k < H; k++) {                                                            \
          T rg = SIG(x[k] + hh[k]), z = SIG(x[H + k] + hh[H + k]);                                         \
          T n = TANH(x[2 * H + k] + rg * hh[2 * H + k]);                                                   \
          h[k] = (hp[k] - n) * z + n;                                                                      \
        }                                                                                                  \
      }                                                                                                    \
    }                                                                                                      \
  }                                                                                                        \
  /* dh [B, H], act [B, 4H], h_prev [B, H], gy [B, H] or NULL -> dxp, dhh [B, 3H] and                       \
   * dh_prev [B, H] without the hidden product's part: dh * z + gy */                                      \
  DPL_CLONES static void gru_bwd_##T(int64_t lo, int64_t hi, void *vj)                                      \
  {                                                                                                        \
    const rnn_job *j = vj;                                                                                 \
    int64_t H = j->H;                                                                                      \
    for (int64_t r = lo; r < hi; r++) {                                                                    \
      const T *dh = (const T *)j->a + r * H, *a = (const T *)j->b + r * 4 * H;                             \
      const T *hp = (const T *)j->c + r * H;                                                               \
      T *dx = (T *)j->o1 + r * 3 * H, *dhh = (T *)j->o2 + r * 3 * H, *dprev = (T *)j->o3 + r * H;          \
      IVDEP for (int64_t k = 0; k < H; k++) {                                                              \
        T rg = a[k], z = a[H + k], n = a[2 * H + k], hn = a[3 * H + k], d = dh[k];                         \
        T dn = d * ((T)1 - z) * ((T)1 - n * n);                                                            \
        T dr = dn * hn * rg * ((T)1 - rg);                                                                 \
        T dz = d * (hp[k] - n) * z * ((T)1 - z);                                                           \
        dx[k] = dr; dx[H + k] = dz; dx[2 * H + k] = dn;                                                    \
        dhh[k] = dr; dhh[H + k] = dz; dhh[2 * H + k] = dn * rg;                                            \
        dprev[k] = d * z;                                                                                  \
      }                                                                                                    \
      if (j->d) {                                                                                          \
        const T *gy = (const T *)j->d + r * H;                                                             \
        IVDEP for (int64_t k = 0; k < H; k++) dprev[k] += gy[k];                                           \
      }                                                                                                    \
    }                                                                                                      \
  }                                                                                                        \
  /* pre [B, H] -> h = tanh(pre) or relu(pre) */                                                           \
  DPL_CLONES static void rnn_fwd_##T(int64_t lo, int64_t hi, void *vj)                                      \
  {                                                                                                        \
    const rnn_job *j = vj;                                                                                 \
    int64_t H = j->H;                                                                                      \
    for (int64_t r = lo; r < hi; r++) {                                                                    \
      const T *p = (const T *)j->a + r * H;                                                                \
      T *h = (T *)j->o1 + r * H;                                                                           \
      if (j->relu) {                                                                                       \
        IVDEP for (int64_t k = 0; k < H; k++) h[k] = p[k] > (T)0 ? p[k] : (T)0;                            \
      } else {                                                                                             \
        IVDEP for (int64_t k = 0; k < H; k++) h[k] = TANH(p[k]);                                           \
      }                                                                                                    \
    }                                                                                                      \
  }                                                                                                        \
  /* dh, h [B, H] -> dpre [B, H] */                                                                        \
  DPL_CLONES static void rnn_bwd_##T(int64_t lo, int64_t hi, void *vj)                                      \
  {                                                                                                        \
    const rnn_job *j = vj;                                                                                 \
    int64_t H = j->H;                                                                                      \
    for (int64_t r = lo; r < hi; r++) {                                                                    \
      const T *dh = (const T *)j->a + r * H, *h = (const T *)j->b + r * H;                                 \
      T *dp = (T *)j->o1 + r * H;                                                                          \
      if (j->relu) {                                                                                       \
        IVDEP for (int64_t k = 0; k < H; k++) dp[k] = h[k] > (T)0 ? dh[k] : (T)0;                          \
      } else {                                                                                             \
        IVDEP for (int64_t k = 0; k < H; k++) dp[k] = dh[k] * ((T)1 - h[k] * h[k]);                        \
      }                                                                                                    \
    }                                                                                                      \
  }
RNN_KERNELS(float, sig_f, tanh_f)
RNN_KERNELS(double, sig_d, tanh_d)

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
