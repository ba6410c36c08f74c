/* dpl_tensor_pool3d.c: 3-d max and average pooling on the CPU (dpl_max_pool3d,
 * dpl_avg_pool3d and their backwards), float32 and float64 (float16/bfloat16 computed in
 * float32), threaded over the N*C planes. The results are the ones of the composed Lua path
 * in dpl.nn.functional_conv3d (padded windows gathered into a last dim and reduced), to the
 * bit: max keeps the first maximum in (d, h, w) window order and the first NaN; the average
 * sums a float32 window in four double lanes (element j of the window into lane j % 4, the
 * tail into lane 0, padding counted as zeros) and a float64 window in order, as the sum
 * reduction does. GPU memory is refused (the Lua side composes GPU ops there). */
#include "dpl_tensor_internal.h"

#include <string.h>

#define P3_PAR_ELEMS (INT64_C(1) << 18) /* input elements per thread, at least */

typedef struct p3_geom {
  int64_t N, C, D, H, W, OD, OH, OW;
  int64_t k[3], s[3], p[3], d[3];
  int ceil_mode, cip, div;
} p3_geom;

/* PyTorch's pooling_output_shape */
static int64_t p3_out(int64_t size, int64_t k, int64_t s, int64_t p, int64_t d, int ceil_mode)
{
  int64_t num = size + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil_mode && (o - 1) * s >= size + p) o--;
  return o;
}

/* params (13): kernel d, h, w, stride d, h, w, padding d, h, w, dilation d, h, w, ceil_mode */
static int p3_setup(const char *name, const dpl_tensor *x, const int32_t *params, p3_geom *g)
{
  char b1[160];
  DPL_TRY(dpl_check_handle(name, "input", x));
  if (!params) return dpl_errorf(DPL_EINVAL, "%s: params is NULL (expected kernel, stride, padding, dilation, ceil_mode)", name);
  if (dpl_is_devmem(x)) return dpl_errorf(DPL_EINVAL, "%s: not implemented on cuda (host tensors only)", name);
  DPL_TRY(dpl_check_tensor(name, "input", x));
  if (x->_ndim != 5)
    return dpl_errorf(DPL_EINVAL, "%s: expected input [N, C, D, H, W], got shape %s", name,
                      dpl_shape_str(x->_ndim, x->_shape, b1, sizeof b1));
  if (!dpl_is_float(x->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected a floating-point input, got %s", name, dpl_dtype_name(x->_dtype));
  if (params[12] != 0 && params[12] != 1)
    return dpl_errorf(DPL_EINVAL, "%s: ceil_mode must be 0 or 1, got %d", name, (int)params[12]);
  g->N = x->_shape[0]; g->C = x->_shape[1]; g->D = x->_shape[2]; g->H = x->_shape[3]; g->W = x->_shape[4];
  g->ceil_mode = params[12];
  int64_t sz[3] = {g->D, g->H, g->W}, o[3];
  for (int j = 0; j < 3; j++) {
    g->k[j] = params[j]; g->s[j] = params[3 + j]; g->p[j] = params[6 + j]; g->d[j] = params[9 + j];
    if (g->k[j] < 1 || g->s[j] < 1 || g->p[j] < 0 || g->d[j] < 1)
      return dpl_errorf(DPL_EINVAL, "%s: expected kernel >= 1, stride >= 1, padding >= 0, dilation >= 1, got %lld, %lld, "
                        "%lld, %lld in dim %d", name, (long long)g->k[j], (long long)g->s[j], (long long)g->p[j],
                        (long long)g->d[j], j + 1);
    if (2 * g->p[j] > g->k[j])
      return dpl_errorf(DPL_EINVAL, "%s: padding %lld must be at most half the kernel %lld", name, (long long)g->p[j],
                        (long long)g->k[j]);
    o[j] = p3_out(sz[j], g->k[j], g->s[j], g->p[j], g->d[j], g->ceil_mode);
    if (o[j] < 1)
      return dpl_errorf(DPL_EINVAL, "%s: input %s gives an output size %lld < 1 in spatial dim %d", name,
                        dpl_shape_str(x->_ndim, x->_shape, b1, sizeof b1), (long long)o[j], j + 1);
  }
  g->OD = o[0]; g->OH = o[1]; g->OW = o[2];
  return DPL_OK;
}

/* the first and one-past-last window taps (0..k) that fall inside [0, size) */
static void p3_taps(int64_t start, int64_t k, int64_t d, int64_t size, int64_t *a, int64_t *e)
{
  int64_t lo = start < 0 ? (-start + d - 1) / d : 0;
  int64_t hi = start + (k - 1) * d < size ? k : (size - 1 - start >= 0 ? (size - 1 - start) / d + 1 : 0);
  if (hi < lo) hi = lo;
  *a = lo; *e = hi;
}

typedef struct p3_job {
  const p3_geom *g;
  const void *x;
  void *o;
  int64_t *ix;
  const void *gr; /* backward: the output's gradient */
  int32_t kd;
} p3_job;

/* ---------------------------------------------------------------- max */
#define P3_MAX(NAME, T)                                                                                   \
  static void NAME(const p3_geom *gp, const T *x, T *restrict out, int64_t *restrict ix, int64_t lo,      \
                   int64_t hi)                                                                            \
  {                                                                                                       \
    const p3_geom g = *gp;                                                                                \
    const int64_t HW = g.H * g.W, plane = g.D * HW, oplane = g.OD * g.OH * g.OW;                          \
    for (int64_t pl = lo; pl < hi; pl++) {                                                                \
      const T *xp = x + pl * plane;                                                                       \
      T *op = out + pl * oplane;                                                                          \
      int64_t *ip = ix + pl * oplane;                                                                     \
      for (int64_t od = 0; od < g.OD; od++) {                                                             \
        int64_t d0 = od * g.s[0] - g.p[0], da, de;                                                        \
        p3_taps(d0, g.k[0], g.d[0], g.D, &da, &de);                                                       \
        for (int64_t oh = 0; oh < g.OH; oh++) {                                                           \
          int64_t h0 = oh * g.s[1] - g.p[1], ha, he;                                                      \
          p3_taps(h0, g.k[1], g.d[1], g.H, &ha, &he);                                                     \
          for (int64_t ow = 0; ow < g.OW; ow++) {                                                         \
            int64_t w0 = ow * g.s[2] - g.p[2], wa, we;                                                    \
            p3_taps(w0, g.k[2], g.d[2], g.W, &wa, &we);                                                   \
            T best = 0;                                                                                   \
            int64_t bi = -1;                                                                              \
            for (int64_t a = da; a < de; a++) {                                                           \
              const int64_t zd = (d0 + a * g.d[0]) * HW;                                                  \
              for (int64_t b = ha; b < he; b++) {                                                         \
                const int64_t zh = zd + (h0 + b * g.d[1]) * g.W;                                          \
                for (int64_t c = wa; c < we; c++) {                                                       \
                  const int64_t z = zh + w0 + c * g.d[2];                                                 \
                  T v = xp[z];                                                                            \
                  /* branch-free select: first max wins, a NaN wins over a number */                      \
                  int take = (bi < 0) | (v > best) | ((v != v) & (best == best));                         \
                  best = take ? v : best;                                                                 \
                  bi += (z - bi) & -(int64_t)take;                                                              \
                }                                                                                         \
              }                                                                                           \
            }                                                                                             \
            /* an empty window (all taps in the padding) cannot occur: p <= k/2 */                        \
            int64_t q = (od * g.OH + oh) * g.OW + ow;                                                     \
            op[q] = bi < 0 ? (T)-INFINITY : best;                                                         \
            ip[q] = bi < 0 ? 0 : bi;                                                                      \
          }                                                                                               \
        }                                                                                                 \
      }                                                                                                   \
    }                                                                                                     \
  }
P3_MAX(p3_max_f32, float)
P3_MAX(p3_max_f64, double)

/* 2x2x2, stride 2, no padding, no dilation, even sizes: eight loads and a fixed select tree
 * in window order (first max, first NaN) */
#define P3_MAX2(NAME, T, ROW)                                                                                \
  static void NAME(const p3_geom *gp, const T *x, T *restrict out, int64_t *restrict ix, int64_t lo,      \
                   int64_t hi)                                                                            \
  {                                                                                                       \
    const int64_t W = gp->W, HW = gp->H * gp->W, plane = gp->D * HW;                                      \
    const int64_t OD = gp->OD, OH = gp->OH, OW = gp->OW, oplane = OD * OH * OW;                           \
    for (int64_t pl = lo; pl < hi; pl++) {                                                                \
      for (int64_t od = 0; od < OD; od++)                                                                 \
        for (int64_t oh = 0; oh < OH; oh++) {                                                             \
          const int64_t base = 2 * od * HW + 2 * oh * W;                                                  \
          const T *r0 = x + pl * plane + base, *r1 = r0 + W, *r2 = r0 + HW, *r3 = r2 + W;                 \
          T *op = out + pl * oplane + (od * OH + oh) * OW;                                                \
          int64_t *ip = ix + pl * oplane + (od * OH + oh) * OW;                                           \
          for (int64_t ow = ROW(r0, W, HW, OW, op, ip, base); ow < OW; ow++) {                            \
            const int64_t c = 2 * ow;                                                                     \
            T v0 = r0[c], v1 = r0[c + 1], v2 = r1[c], v3 = r1[c + 1];                                     \
            T v4 = r2[c], v5 = r2[c + 1], v6 = r3[c], v7 = r3[c + 1];                                     \
            int64_t t;                                                                                    \
            /* pairwise: b beats a when b > a or b is a NaN and a is not (a first on ties) */             \
            T m01, m23, m45, m67, mA, mB, m;                                                              \
            int64_t i01, i23, i45, i67, iA, iB;                                                           \
            t = (v1 > v0) | ((v1 != v1) & (v0 == v0)); m01 = t ? v1 : v0; i01 = t;                        \
            t = (v3 > v2) | ((v3 != v3) & (v2 == v2)); m23 = t ? v3 : v2; i23 = W + t;                    \
            t = (v5 > v4) | ((v5 != v5) & (v4 == v4)); m45 = t ? v5 : v4; i45 = HW + t;                   \
            t = (v7 > v6) | ((v7 != v7) & (v6 == v6)); m67 = t ? v7 : v6; i67 = HW + W + t;               \
            t = (m23 > m01) | ((m23 != m23) & (m01 == m01)); mA = t ? m23 : m01; iA = t ? i23 : i01;      \
            t = (m67 > m45) | ((m67 != m67) & (m45 == m45)); mB = t ? m67 : m45; iB = t ? i67 : i45;      \
            t = (mB > mA) | ((mB != mB) & (mA == mA)); m = t ? mB : mA;                                   \
            op[ow] = m;                                                                                   \
            ip[ow] = base + c + (t ? iB : iA);                                                            \
          }                                                                                               \
        }                                                                                                 \
    }                                                                                                     \
  }

#if defined(__SSE2__)
#include <emmintrin.h>
/* b beats a: b > a, or b is a NaN and a is not (a keeps ties) */
static inline __m128 p3_beats(__m128 b, __m128 a)
{
  return _mm_or_ps(_mm_cmpgt_ps(b, a), _mm_and_ps(_mm_cmpunord_ps(b, b), _mm_cmpord_ps(a, a)));
}
static inline __m128 p3_sel(__m128 t, __m128 b, __m128 a) { return _mm_or_ps(_mm_and_ps(t, b), _mm_andnot_ps(t, a)); }
static inline __m128i p3_seli(__m128 t, __m128i b, __m128i a)
{
  __m128i m = _mm_castps_si128(t);
  return _mm_or_si128(_mm_and_si128(m, b), _mm_andnot_si128(m, a));
}
/* one output row of the float32 2x2x2 pool, 4 outputs at a time (random data defeats the
 * branches GCC makes of the scalar selects); the same select tree as P3_MAX2. Returns how
 * many outputs it wrote (a multiple of 4). */
static int64_t p3_max2_f32_row_sse(const float *r0, int64_t W, int64_t HW, int64_t OW, float *restrict op,
                                   int64_t *restrict ip, int64_t base)
{
  if (HW + W > INT32_MAX / 2) return 0;
  const float *r1 = r0 + W, *r2 = r0 + HW, *r3 = r2 + W;
  const __m128i one = _mm_set1_epi32(1), wv = _mm_set1_epi32((int32_t)W), hv = _mm_set1_epi32((int32_t)HW);
  const __m128i hwv = _mm_set1_epi32((int32_t)(HW + W));
  int64_t ow = 0;
  for (; ow + 4 <= OW; ow += 4) {
    const int64_t c = 2 * ow;
    __m128 m[4];
    __m128i k[4];
    const float *rr[4] = {r0, r1, r2, r3};
    const __m128i off[4] = {_mm_setzero_si128(), wv, hv, hwv};
    for (int r = 0; r < 4; r++) {
      __m128 x0 = _mm_loadu_ps(rr[r] + c), x1 = _mm_loadu_ps(rr[r] + c + 4);
      __m128 e = _mm_shuffle_ps(x0, x1, _MM_SHUFFLE(2, 0, 2, 0)), o = _mm_shuffle_ps(x0, x1, _MM_SHUFFLE(3, 1, 3, 1));
      __m128 t = p3_beats(o, e);
      m[r] = p3_sel(t, o, e);
      k[r] = _mm_add_epi32(off[r], _mm_and_si128(_mm_castps_si128(t), one));
    }
    __m128 ta = p3_beats(m[1], m[0]), tb = p3_beats(m[3], m[2]);
    __m128 ma = p3_sel(ta, m[1], m[0]), mb = p3_sel(tb, m[3], m[2]);
    __m128i ka = p3_seli(ta, k[1], k[0]), kb = p3_seli(tb, k[3], k[2]);
    __m128 t = p3_beats(mb, ma);
    _mm_storeu_ps(op + ow, p3_sel(t, mb, ma));
    int32_t kk[4];
    _mm_storeu_si128((__m128i *)kk, p3_seli(t, kb, ka));
    for (int q = 0; q < 4; q++) ip[ow + q] = base + c + 2 * q + kk[q];
  }
  return ow;
}
static inline __m128d p3_beats_d(__m128d b, __m128d a)
{
  return _mm_or_pd(_mm_cmpgt_pd(b, a), _mm_and_pd(_mm_cmpunord_pd(b, b), _mm_cmpord_pd(a, a)));
}
static inline __m128d p3_sel_d(__m128d t, __m128d b, __m128d a) { return _mm_or_pd(_mm_and_pd(t, b), _mm_andnot_pd(t, a)); }
static inline __m128i p3_seli_d(__m128d t, __m128i b, __m128i a)
{
  __m128i m = _mm_castpd_si128(t);
  return _mm_or_si128(_mm_and_si128(m, b), _mm_andnot_si128(m, a));
}
/* the float64 row, 2 outputs at a time (64-bit masks: the offsets stay int64) */
static int64_t p3_max2_f64_row_sse(const double *r0, int64_t W, int64_t HW, int64_t OW, double *restrict op,
                                   int64_t *restrict ip, int64_t base)
{
  const double *rr[4] = {r0, r0 + W, r0 + HW, r0 + HW + W};
  const __m128i one = _mm_set1_epi64x(1);
  const __m128i off[4] = {_mm_setzero_si128(), _mm_set1_epi64x(W), _mm_set1_epi64x(HW), _mm_set1_epi64x(HW + W)};
  int64_t ow = 0;
  for (; ow + 2 <= OW; ow += 2) {
    const int64_t c = 2 * ow;
    __m128d m[4];
    __m128i k[4];
    for (int r = 0; r < 4; r++) {
      __m128d x0 = _mm_loadu_pd(rr[r] + c), x1 = _mm_loadu_pd(rr[r] + c + 2);
      __m128d e = _mm_unpacklo_pd(x0, x1), o = _mm_unpackhi_pd(x0, x1);
      __m128d t = p3_beats_d(o, e);
      m[r] = p3_sel_d(t, o, e);
      k[r] = _mm_add_epi64(off[r], _mm_and_si128(_mm_castpd_si128(t), one));
    }
    __m128d ta = p3_beats_d(m[1], m[0]), tb = p3_beats_d(m[3], m[2]);
    __m128d ma = p3_sel_d(ta, m[1], m[0]), mb = p3_sel_d(tb, m[3], m[2]);
    __m128i ka = p3_seli_d(ta, k[1], k[0]), kb = p3_seli_d(tb, k[3], k[2]);
    __m128d t = p3_beats_d(mb, ma);
    _mm_storeu_pd(op + ow, p3_sel_d(t, mb, ma));
    __m128i b = _mm_set_epi64x(base + c + 2, base + c);
    _mm_storeu_si128((__m128i *)(ip + ow), _mm_add_epi64(b, p3_seli_d(t, kb, ka)));
  }
  return ow;
}
#endif

static inline int64_t p3_no_row(const void *r0, int64_t W, int64_t HW, int64_t OW, void *op, int64_t *ip, int64_t base)
{
  (void)r0; (void)W; (void)HW; (void)OW; (void)op; (void)ip; (void)base;
  return 0;
}
#if defined(__SSE2__)
P3_MAX2(p3_max2_f32, float, p3_max2_f32_row_sse)
P3_MAX2(p3_max2_f64, double, p3_max2_f64_row_sse)
#else
P3_MAX2(p3_max2_f32, float, p3_no_row)
P3_MAX2(p3_max2_f64, double, p3_no_row)
#endif

static int p3_is_2x2x2(const p3_geom *g)
{
  for (int j = 0; j < 3; j++)
    if (g->k[j] != 2 || g->s[j] != 2 || g->p[j] != 0 || g->d[j] != 1) return 0;
  return g->OD * 2 <= g->D && g->OH * 2 <= g->H && g->OW * 2 <= g->W;
}

static void p3_max_range(int64_t lo, int64_t hi, void *ctx)
{
  const p3_job *jb = ctx;
  int two = p3_is_2x2x2(jb->g);
  if (jb->kd == DPL_FLOAT32) (two ? p3_max2_f32 : p3_max_f32)(jb->g, jb->x, jb->o, jb->ix, lo, hi);
  else (two ? p3_max2_f64 : p3_max_f64)(jb->g, jb->x, jb->o, jb->ix, lo, hi);
}

static int64_t p3_grain(int64_t per)
{
  return per > 0 ? (P3_PAR_ELEMS + per - 1) / per : 1;
}

int dpl_max_pool3d(const dpl_tensor *x, const int32_t *params, dpl_tensor **out, dpl_tensor **indices)
{
  const char *name = "max_pool3d";
  if (!out || !indices) return dpl_errorf(DPL_EINVAL, "%s: out or indices is NULL", name);
  *out = *indices = NULL;
  p3_geom g;
  DPL_TRY(p3_setup(name, x, params, &g));
  int32_t kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  dpl_tensor *cx = NULL, *res = NULL, *idx = NULL;
  int64_t oshape[5] = {g.N, g.C, g.OD, g.OH, g.OW};
  int st = dpl_contig_as(name, x, kd, &cx);
  if (st == DPL_OK) st = dpl_new(name, kd, 5, oshape, x, &res);
  if (st == DPL_OK) st = dpl_new(name, DPL_INT64, 5, oshape, x, &idx);
  if (st == DPL_OK) {
    p3_job jb = {&g, cx->_data, res->_data, idx->_data, NULL, kd};
    dpl_parallel_for(g.N * g.C, p3_grain(g.D * g.H * g.W), p3_max_range, &jb);
    st = dpl_retype(name, &res, x->_dtype);
  }
  dpl_tensor_release(cx);
  return dpl_hand_over(st, 2, (dpl_tensor *[]){res, idx}, (dpl_tensor **[]){out, indices});
}

/* each plane's gradient: zeros, then the output gradient added at its index, in output
 * order (planes are disjoint, so the threads never meet) */
static void p3_max_bwd_range(int64_t lo, int64_t hi, void *ctx)
{
  const p3_job *jb = ctx;
  const p3_geom *g = jb->g;
  int64_t plane = g->D * g->H * g->W, L = g->OD * g->OH * g->OW;
  for (int64_t pl = lo; pl < hi; pl++) {
    const int64_t *ip = jb->ix + pl * L;
    if (jb->kd == DPL_FLOAT32) {
      float *r = (float *)jb->o + pl * plane;
      const float *gp = (const float *)jb->gr + pl * L;
      memset(r, 0, (size_t)plane * sizeof(float));
      for (int64_t l = 0; l < L; l++) r[ip[l]] += gp[l];
    } else {
      double *r = (double *)jb->o + pl * plane;
      const double *gp = (const double *)jb->gr + pl * L;
      memset(r, 0, (size_t)plane * sizeof(double));
      for (int64_t l = 0; l < L; l++) r[ip[l]] += gp[l];
    }
  }
}

int dpl_max_pool3d_backward(const dpl_tensor *grad_out, const dpl_tensor *x, const dpl_tensor *indices,
                            dpl_tensor **grad_x)
{
  const char *name = "max_pool3d_backward";
  if (!grad_x) return dpl_errorf(DPL_EINVAL, "%s: grad_x is NULL", name);
  *grad_x = NULL;
  DPL_TRY(dpl_check_handle(name, "grad_out", grad_out));
  DPL_TRY(dpl_check_handle(name, "input", x));
  DPL_TRY(dpl_check_handle(name, "indices", indices));
  if (dpl_is_devmem(x) || dpl_is_devmem(grad_out) || dpl_is_devmem(indices))
    return dpl_errorf(DPL_EINVAL, "%s: not implemented on cuda (host tensors only)", name);
  DPL_TRY(dpl_check_tensor(name, "grad_out", grad_out));
  DPL_TRY(dpl_check_tensor(name, "input", x));
  DPL_TRY(dpl_check_tensor(name, "indices", indices));
  if (x->_ndim != 5 || grad_out->_ndim != 5 || indices->_ndim != 5 || indices->_dtype != DPL_INT64 ||
      !dpl_is_float(x->_dtype) || !dpl_is_float(grad_out->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected 5-d floating grad_out and input and int64 indices from max_pool3d", name);
  for (int i = 0; i < 5; i++)
    if (grad_out->_shape[i] != indices->_shape[i] || (i < 2 && grad_out->_shape[i] != x->_shape[i]))
      return dpl_errorf(DPL_EINVAL, "%s: grad_out, indices and input disagree in dim %d (%lld, %lld, %lld)", name, i + 1,
                        (long long)grad_out->_shape[i], (long long)indices->_shape[i], (long long)x->_shape[i]);
  p3_geom g;
  memset(&g, 0, sizeof g);
  g.N = x->_shape[0]; g.C = x->_shape[1]; g.D = x->_shape[2]; g.H = x->_shape[3]; g.W = x->_shape[4];
  g.OD = grad_out->_shape[2]; g.OH = grad_out->_shape[3]; g.OW = grad_out->_shape[4];
  int64_t plane = g.D * g.H * g.W;
  int32_t kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  dpl_tensor *cg = NULL, *ci = NULL, *res = NULL;
  int st = dpl_contig_as(name, grad_out, kd, &cg);
  if (st == DPL_OK) st = dpl_contig_as(name, indices, DPL_INT64, &ci);
  if (st == DPL_OK) { /* every index checked first: the kernel stores without a test */
    const int64_t *is = ci->_data;
    for (int64_t i = 0; i < ci->_numel; i++)
      if ((uint64_t)is[i] >= (uint64_t)plane) {
        st = dpl_errorf(DPL_EINVAL, "%s: index %lld out of range for a %lld-element volume", name, (long long)is[i],
                        (long long)plane);
        break;
      }
  }
  if (st == DPL_OK) st = dpl_new(name, kd, 5, x->_shape, x, &res);
  if (st == DPL_OK) {
    p3_job jb = {&g, NULL, res->_data, ci->_data, cg->_data, kd};
    dpl_parallel_for(g.N * g.C, p3_grain(plane), p3_max_bwd_range, &jb);
    st = dpl_retype(name, &res, x->_dtype);
  }
  dpl_tensor_release(cg);
  dpl_tensor_release(ci);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *grad_x = res;
  return DPL_OK;
}

/* ---------------------------------------------------------------- average */
/* the divisor of one window: divisor_override, else the window clipped at size + pad
 * (count_include_pad) or at the input, per dim */
static int64_t p3_divisor(const p3_geom *g, const int64_t *st3)
{
  if (g->div) return g->div;
  int64_t sz[3] = {g->D, g->H, g->W}, n = 1;
  for (int j = 0; j < 3; j++) {
    int64_t a = st3[j], e = a + g->k[j] < sz[j] + g->p[j] ? a + g->k[j] : sz[j] + g->p[j];
    int64_t full = e - a;
    if (a < 0) a = 0;
    if (e > sz[j]) e = sz[j];
    n *= g->cip ? full : e - a;
  }
  return n;
}

static void p3_avg_range(int64_t lo, int64_t hi, void *ctx)
{
  const p3_job *jb = ctx;
  const p3_geom *g = jb->g;
  const int64_t HW = g->H * g->W, plane = g->D * HW, oplane = g->OD * g->OH * g->OW;
  const int64_t K = g->k[0] * g->k[1] * g->k[2], K4 = K & ~(int64_t)3;
  int bwd = jb->gr != NULL;
  for (int64_t pl = lo; pl < hi; pl++) {
    if (bwd) memset((char *)jb->o + pl * plane * dpl_elsize(jb->kd), 0, (size_t)(plane * dpl_elsize(jb->kd)));
    for (int64_t od = 0; od < g->OD; od++)
      for (int64_t oh = 0; oh < g->OH; oh++)
        for (int64_t ow = 0; ow < g->OW; ow++) {
          int64_t s3[3] = {od * g->s[0] - g->p[0], oh * g->s[1] - g->p[1], ow * g->s[2] - g->p[2]};
          int64_t da, de, ha, he, wa, we;
          p3_taps(s3[0], g->k[0], 1, g->D, &da, &de);
          p3_taps(s3[1], g->k[1], 1, g->H, &ha, &he);
          p3_taps(s3[2], g->k[2], 1, g->W, &wa, &we);
          int64_t div = p3_divisor(g, s3), q = pl * oplane + (od * g->OH + oh) * g->OW + ow;
          if (bwd) {
            if (jb->kd == DPL_FLOAT32) {
              float v = ((const float *)jb->gr)[q] / (float)div, *r = (float *)jb->o + pl * plane;
              for (int64_t a = da; a < de; a++)
                for (int64_t b = ha; b < he; b++)
                  for (int64_t c = wa; c < we; c++) r[(s3[0] + a) * HW + (s3[1] + b) * g->W + s3[2] + c] += v;
            } else {
              double v = ((const double *)jb->gr)[q] / (double)div, *r = (double *)jb->o + pl * plane;
              for (int64_t a = da; a < de; a++)
                for (int64_t b = ha; b < he; b++)
                  for (int64_t c = wa; c < we; c++) r[(s3[0] + a) * HW + (s3[1] + b) * g->W + s3[2] + c] += v;
            }
            continue;
          }
          if (jb->kd == DPL_FLOAT32) {
            /* the sum reduction's order: window element j into lane j % 4 (j < K4), the tail
             * into lane 0; taps in the padding add nothing */
            const float *xp = (const float *)jb->x + pl * plane;
            double l[4] = {0, 0, 0, 0};
            for (int64_t a = da; a < de; a++)
              for (int64_t b = ha; b < he; b++)
                for (int64_t c = wa; c < we; c++) {
                  int64_t j = (a * g->k[1] + b) * g->k[2] + c;
                  l[j < K4 ? (j & 3) : 0] += xp[(s3[0] + a) * HW + (s3[1] + b) * g->W + s3[2] + c];
                }
            float sum = (float)((l[0] + l[1]) + (l[2] + l[3]));
            ((float *)jb->o)[q] = sum / (float)div;
          } else {
            const double *xp = (const double *)jb->x + pl * plane;
            double s = 0;
            for (int64_t a = da; a < de; a++)
              for (int64_t b = ha; b < he; b++)
                for (int64_t c = wa; c < we; c++) s += xp[(s3[0] + a) * HW + (s3[1] + b) * g->W + s3[2] + c];
            ((double *)jb->o)[q] = s / (double)div;
          }
        }
  }
}

static int p3_avg_common(const char *name, const dpl_tensor *grad_out, const dpl_tensor *x, const int32_t *params,
                         int32_t cip, int32_t divisor, dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  p3_geom g;
  DPL_TRY(p3_setup(name, x, params, &g));
  for (int j = 0; j < 3; j++)
    if (g.d[j] != 1) return dpl_errorf(DPL_EINVAL, "%s: dilation must be 1, got %lld", name, (long long)g.d[j]);
  if (cip != 0 && cip != 1) return dpl_errorf(DPL_EINVAL, "%s: count_include_pad must be 0 or 1, got %d", name, (int)cip);
  g.cip = cip;
  g.div = divisor;
  int64_t oshape[5] = {g.N, g.C, g.OD, g.OH, g.OW};
  if (grad_out) {
    DPL_TRY(dpl_check_handle(name, "grad_out", grad_out));
    if (dpl_is_devmem(grad_out)) return dpl_errorf(DPL_EINVAL, "%s: not implemented on cuda (host tensors only)", name);
    DPL_TRY(dpl_check_tensor(name, "grad_out", grad_out));
    int same = grad_out->_ndim == 5 && dpl_is_float(grad_out->_dtype);
    for (int i = 0; same && i < 5; i++) same = grad_out->_shape[i] == oshape[i];
    if (!same)
      return dpl_errorf(DPL_EINVAL, "%s: grad_out must be a floating tensor of shape [%lld, %lld, %lld, %lld, %lld]", name,
                        (long long)g.N, (long long)g.C, (long long)g.OD, (long long)g.OH, (long long)g.OW);
  }
  int32_t kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  dpl_tensor *cx = NULL, *res = NULL;
  int st = dpl_contig_as(name, grad_out ? grad_out : x, kd, &cx);
  if (st == DPL_OK) st = dpl_new(name, kd, 5, grad_out ? x->_shape : oshape, x, &res);
  if (st == DPL_OK) {
    p3_job jb = {&g, grad_out ? NULL : cx->_data, res->_data, NULL, grad_out ? cx->_data : NULL, kd};
    dpl_parallel_for(g.N * g.C, p3_grain(g.D * g.H * g.W), p3_avg_range, &jb);
    st = dpl_retype(name, &res, x->_dtype);
  }
  dpl_tensor_release(cx);
  if (st != DPL_OK) { dpl_tensor_release(res); return st; }
  *out = res;
  return DPL_OK;
}

int dpl_avg_pool3d(const dpl_tensor *x, const int32_t *params, int32_t count_include_pad, int32_t divisor,
                   dpl_tensor **out)
{
  return p3_avg_common("avg_pool3d", NULL, x, params, count_include_pad, divisor, out);
}

int dpl_avg_pool3d_backward(const dpl_tensor *grad_out, const dpl_tensor *x, const int32_t *params,
                            int32_t count_include_pad, int32_t divisor, dpl_tensor **grad_x)
{
  return p3_avg_common("avg_pool3d_backward", grad_out, x, params, count_include_pad, divisor, grad_x);
}
