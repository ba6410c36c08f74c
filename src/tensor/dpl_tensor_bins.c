/* dpl_tensor_bins.c: the counting loops behind histogram and scatter_reduce (lua/dpl/tensor_more.lua
 * keeps their argument handling, dtypes and gradients; these replace its per-element Lua loops).
 * dpl_histogram_fill adds each value of x (float32 or float64; NaN and values outside the edges
 * left out) to the bin of hist [edges[b], edges[b+1]) holding it, the last bin closed on the right;
 * dpl_scatter_reduce_fill folds src into out at the positions index names along dim (1-based, as
 * Lua's), counting the writes per position. Both run on contiguous host tensors, one thread (the
 * writes go where the data says), and compute as the Lua loops did: each addition rounded to the
 * result's dtype in turn, so the results are the same to the bit. dpl_embedding_bag_fill sums
 * (or averages) EmbeddingBag's bags, threaded over bags, float32 bags in AVX-512 registers. */
#include "dpl_tensor_internal.h"

static int need_contig(const char *name, const char *what, const dpl_tensor *t)
{
  DPL_TRY(dpl_check_tensor(name, what, t));
  if (!dpl_is_contig(t)) return dpl_errorf(DPL_EINVAL, "%s: %s must be contiguous", name, what);
  return DPL_OK;
}

static int need_float(const char *name, const char *what, const dpl_tensor *t)
{
  if (t->_dtype != DPL_FLOAT32 && t->_dtype != DPL_FLOAT64)
    return dpl_errorf(DPL_EINVAL, "%s: %s must be float32 or float64, got %s", name, what, dpl_dtype_name(t->_dtype));
  return DPL_OK;
}

static double at(const dpl_tensor *t, int64_t i)
{
  return t->_dtype == DPL_FLOAT32 ? (double)((const float *)t->_data)[i] : ((const double *)t->_data)[i];
}

/* the bin of v, first <= v <= last: the largest b < nb with e[b] <= v. sorted: edges never
 * decrease, so a guess from equal widths is moved to the right bin (the answer of the search) */
static int64_t find_bin(const double *e, int64_t nb, int sorted, double v)
{
  if (v == e[nb]) return nb - 1;
  if (sorted) {
    double g = (v - e[0]) / (e[nb] - e[0]) * (double)nb;
    int64_t b = g >= 0 && g < (double)nb ? (int64_t)g : (g >= (double)nb ? nb - 1 : 0);
    while (b > 0 && e[b] > v) b--;
    while (b < nb - 1 && e[b + 1] <= v) b++;
    return b;
  }
  int64_t l = 0, h = nb; /* e[l] <= v < e[h], as the Lua loop did */
  while (h - l > 1) {
    int64_t m = (l + h) / 2;
    if (e[m] <= v) l = m;
    else h = m;
  }
  return l;
}

int dpl_histogram_fill(const dpl_tensor *x, const dpl_tensor *weight, const dpl_tensor *edges, dpl_tensor *hist)
{
  const char *name = "histogram";
  DPL_TRY(need_contig(name, "input", x));
  DPL_TRY(need_float(name, "input", x));
  if (weight) {
    DPL_TRY(need_contig(name, "weight", weight));
    if (weight->_dtype != x->_dtype || weight->_numel != x->_numel)
      return dpl_errorf(DPL_EINVAL, "%s: weight must have the dtype and size of input", name);
  }
  DPL_TRY(need_contig(name, "bin_edges", edges));
  DPL_TRY(need_contig(name, "hist", hist));
  DPL_TRY(need_float(name, "hist", hist));
  if (edges->_dtype != DPL_FLOAT64) return dpl_errorf(DPL_EINVAL, "%s: bin_edges must be float64", name);
  int64_t nb = edges->_numel - 1;
  if (nb < 1) return DPL_OK;
  if (hist->_numel != nb) return dpl_errorf(DPL_EINVAL, "%s: hist must have %lld bins", name, (long long)nb);
  const double *e = edges->_data;
  int sorted = e[nb] > e[0];
  for (int64_t b = 0; b < nb && sorted; b++) sorted = e[b] <= e[b + 1];
  double first = e[0], last = e[nb];
  float *hf = hist->_dtype == DPL_FLOAT32 ? hist->_data : NULL;
  double *hd = hist->_data;
  for (int64_t i = 0; i < x->_numel; i++) {
    double v = at(x, i);
    if (!(v >= first && v <= last)) continue;
    int64_t b = find_bin(e, nb, sorted, v);
    double w = weight ? at(weight, i) : 1.0;
    if (hf) hf[b] = (float)((double)hf[b] + w);
    else hd[b] += w;
  }
  return DPL_OK;
}

/* the fold of one value s into *o (k0: writes there so far) */
#define SRED_STEP(T)                                                                      \
  do {                                                                                    \
    T s_ = sp[p], *o_ = op + o;                                                           \
    if (cnt[o] == 0 && !include_self) *o_ = s_;                                           \
    else if (red == 1 || red == 3) *o_ = *o_ + s_;                                        \
    else if (red == 2) *o_ = *o_ * s_;                                                    \
    else if (red == 4) { if (s_ != s_ || (*o_ == *o_ && s_ > *o_)) *o_ = s_; }            \
    else if (s_ != s_ || (*o_ == *o_ && s_ < *o_)) *o_ = s_;                              \
    cnt[o]++;                                                                             \
  } while (0)

/* The common case, index of out's shape but along dim (out contiguous): the position of
 * index element (a, j, c) (outer, along dim, inner) is out's (a, index - 1, c), no odometer;
 * red and inc are constants where it is inlined (one loop per reduction, the folds of
 * SRED_STEP: a first write without include_self replaces, amax/amin: NaN wins). The counts
 * are kept only where they are read: for the mean and without include_self. */
/* index element qq folded at out's oo (red, inc: constants) */
#define SRED_ONE(T, qq, oo)                                                                               \
  do {                                                                                                    \
    const T s = sp[qq], cur = op[oo];                                                                     \
    const int32_t k = red == 3 || !inc ? cnt[oo] : 1;                                                     \
    const int first = !inc && k == 0;                                                                     \
    T r;                                                                                                  \
    if (red == 1 || red == 3) r = first ? s : cur + s;                                                    \
    else if (red == 2) r = first ? s : cur * s;                                                           \
    /* amax/amin: a NaN cur stays unless s is one too (rare: a branch); else !(s <= cur) is  \
     * "s greater or a NaN", one compare */                                                             \
    else if (red == 4) r = first ? s : cur == cur ? (!(s <= cur) ? s : cur) : (s != s ? s : cur);       \
    else r = first ? s : cur == cur ? (!(s >= cur) ? s : cur) : (s != s ? s : cur);                     \
    op[oo] = r;                                                                                           \
    if (red == 3 || !inc) cnt[oo] = k + 1;                                                                \
  } while (0)
#define SRED_FAST(T)                                                                                      \
  static inline __attribute__((always_inline)) int64_t sred_fast_##T(                                     \
    T *restrict op, const T *restrict sp, const int64_t *restrict ip, int32_t *restrict cnt, int64_t outer, \
    int64_t Di, int64_t Do, int64_t inner, const int red, const int inc)                                  \
  {                                                                                                       \
    for (int64_t a = 0; a < outer; a++) {                                                                 \
      const int64_t ob = a * Do - 1;                                                                      \
      if (inner == 1) { /* dim innermost (a 1-d self): one flat loop */                                  \
        for (int64_t j = a * Di; j < (a + 1) * Di; j++) {                                                 \
          const int64_t v = ip[j];                                                                        \
          if ((uint64_t)(v - 1) >= (uint64_t)Do) return j; /* out of range: stop there */                \
          SRED_ONE(T, j, ob + v);                                                                          \
        }                                                                                                 \
        continue;                                                                                         \
      }                                                                                                   \
      for (int64_t j = 0; j < Di; j++) {                                                                  \
        const int64_t q = (a * Di + j) * inner;                                                           \
        for (int64_t c = 0; c < inner; c++) {                                                             \
          const int64_t v = ip[q + c];                                                                    \
          if ((uint64_t)(v - 1) >= (uint64_t)Do) return q + c;                                            \
          SRED_ONE(T, q + c, (ob + v) * inner + c);                                                        \
        }                                                                                                 \
      }                                                                                                   \
    }                                                                                                     \
    return -1;                                                                                            \
  }                                                                                                       \
  static int64_t sred_fast_run_##T(T *op, const T *sp, const int64_t *ip, int32_t *cnt, int64_t outer,     \
                                int64_t Di, int64_t Do, int64_t inner, int red, int inc)                 \
  {                                                                                                       \
    switch (red * 2 + (inc != 0)) {                                                                       \
    case 2: return sred_fast_##T(op, sp, ip, cnt, outer, Di, Do, inner, 1, 0);                                   \
    case 3: return sred_fast_##T(op, sp, ip, cnt, outer, Di, Do, inner, 1, 1);                                   \
    case 4: return sred_fast_##T(op, sp, ip, cnt, outer, Di, Do, inner, 2, 0);                                   \
    case 5: return sred_fast_##T(op, sp, ip, cnt, outer, Di, Do, inner, 2, 1);                                   \
    case 6: return sred_fast_##T(op, sp, ip, cnt, outer, Di, Do, inner, 3, 0);                                   \
    case 7: return sred_fast_##T(op, sp, ip, cnt, outer, Di, Do, inner, 3, 1);                                   \
    case 8: return sred_fast_##T(op, sp, ip, cnt, outer, Di, Do, inner, 4, 0);                                   \
    case 9: return sred_fast_##T(op, sp, ip, cnt, outer, Di, Do, inner, 4, 1);                                   \
    case 10: return sred_fast_##T(op, sp, ip, cnt, outer, Di, Do, inner, 5, 0);                                  \
    default: return sred_fast_##T(op, sp, ip, cnt, outer, Di, Do, inner, 5, 1);                                  \
    }                                                                                                     \
  }
SRED_FAST(float)
SRED_FAST(double)

int dpl_scatter_reduce_fill(dpl_tensor *out, int32_t dim, const dpl_tensor *index, const dpl_tensor *src,
                            int32_t red, int32_t include_self, int32_t *cnt)
{
  const char *name = "scatter_reduce";
  DPL_TRY(need_contig(name, "self", out));
  DPL_TRY(need_float(name, "self", out));
  DPL_TRY(need_contig(name, "index", index));
  DPL_TRY(need_contig(name, "src", src));
  if (!cnt) return dpl_errorf(DPL_EINVAL, "%s: counts is NULL", name);
  if (index->_dtype != DPL_INT64) return dpl_errorf(DPL_EINVAL, "%s: index must be int64", name);
  if (src->_dtype != out->_dtype) return dpl_errorf(DPL_EINVAL, "%s: src must have self's dtype", name);
  if (red < 1 || red > 5) return dpl_errorf(DPL_EINVAL, "%s: unknown reduction %d", name, (int)red);
  int32_t n = out->_ndim;
  if (index->_ndim != n || src->_numel != index->_numel || (n > 0 && (dim < 0 || dim >= n)))
    return dpl_errorf(DPL_EINVAL, "%s: index and src must have self's number of dims and one shape", name);
  for (int32_t k = 0; k < n; k++)
    if (k != dim && index->_shape[k] > out->_shape[k])
      return dpl_errorf(DPL_EINVAL, "%s: index is larger than self in dim %d", name, (int)k + 1);
  int64_t N = index->_numel, dsize = n > 0 ? out->_shape[dim] : 1, dstride = n > 0 ? out->_stride[dim] : 0;
  const int64_t *ip = index->_data;
  int same = n > 0;
  for (int32_t k = 0; k < n; k++) same = same && (k == dim || index->_shape[k] == out->_shape[k]);
  if (same) { /* out is contiguous (checked above): the odometer-free loop, checking as it goes */
    int64_t outer = 1, inner = 1;
    for (int32_t k = 0; k < dim; k++) outer *= out->_shape[k];
    for (int32_t k = dim + 1; k < n; k++) inner *= out->_shape[k];
    int64_t at = out->_dtype == DPL_FLOAT32
                   ? sred_fast_run_float(out->_data, src->_data, ip, cnt, outer, index->_shape[dim], dsize, inner, red,
                                         include_self)
                   : sred_fast_run_double(out->_data, src->_data, ip, cnt, outer, index->_shape[dim], dsize, inner, red,
                                          include_self);
    if (at < 0) return DPL_OK;
    return dpl_errorf(DPL_EINVAL, "%s: index %lld is out of range for dim %d of size %lld (expected 1..%lld)", name,
                      (long long)ip[at], (int)dim + 1, (long long)dsize, (long long)dsize);
  }
  for (int64_t p = 0; p < N; p++)
    if (ip[p] < 1 || ip[p] > dsize)
      return dpl_errorf(DPL_EINVAL, "%s: index %lld is out of range for dim %d of size %lld (expected 1..%lld)", name,
                        (long long)ip[p], (int)dim + 1, (long long)dsize, (long long)dsize);
  int64_t c[DPL_MAX_DIMS] = {0}, base = 0;
  for (int64_t p = 0; p < N; p++) {
    int64_t o = base + (ip[p] - 1) * dstride;
    if (out->_dtype == DPL_FLOAT32) {
      float *op = out->_data;
      const float *sp = src->_data;
      SRED_STEP(float);
    } else {
      double *op = out->_data;
      const double *sp = src->_data;
      SRED_STEP(double);
    }
    /* the next position of index (row-major); base: its offset in out without dim */
    for (int32_t k = n - 1; k >= 0; k--) {
      c[k]++;
      if (k != dim) base += out->_stride[k];
      if (c[k] < index->_shape[k]) break;
      if (k != dim) base -= out->_stride[k] * c[k];
      c[k] = 0;
    }
  }
  return DPL_OK;
}

/* EmbeddingBag's sum / mean without the [L, D] gather: bag b (ids bounds[b]-1 .. bounds[b+1]-2,
 * bounds 1-based) is the sum in order of weight[ids[i]-1] * psw[i] * (ids[i] != pad), the mean
 * that sum divided by the count of ids other than pad (at least 1): the operations, order and
 * rounding of the composite (index_select, the products, index_add, the division) */
/* o += r * s * k (s, k: 1 or the row's factors; x * 1 is x, so one loop serves the products) */
#define EB_ADD(T)                                                                                         \
  DPL_CLONES static void eb_add_##T(T *restrict o, const T *restrict r, T s, T k, int64_t D)                         \
  {                                                                                                       \
    for (int64_t d = 0; d < D; d++) o[d] += r[d] * s * k;                                                 \
  }                                                                                                       \
  DPL_CLONES static void eb_add1_##T(T *restrict o, const T *restrict r, int64_t D)                                  \
  {                                                                                                       \
    for (int64_t d = 0; d < D; d++) o[d] += r[d];                                                         \
  }
EB_ADD(float)
EB_ADD(double)

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
/* a float32 bag without factors (no per_sample_weights, no padding_idx) on AVX-512, D a
 * multiple of 16: each 64-float block of the bag's sum in four registers across its rows (the
 * same additions in the same order as o[d] += r[d] from zeros), stored once, divided by m
 * (mean) or not (m = 0); the next rows' lines prefetched (random rows: more misses in flight) */
__attribute__((target("avx512f"))) static void eb_bag_f32_512(const float *w, const int64_t *ip, int64_t lo,
                                                               int64_t hi, int64_t D, float m, float *restrict o)
{
  const __m512 mv = _mm512_set1_ps(m);
  for (int64_t c = 0; c < D; c += 64) {
    int64_t n = D - c >= 64 ? 4 : (D - c) / 16;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = lo; i < hi; i++) {
      if (i + 4 < hi) _mm_prefetch((const char *)(w + (ip[i + 4] - 1) * D + c), _MM_HINT_T0);
      const float *r = w + (ip[i] - 1) * D + c;
      a0 = _mm512_add_ps(a0, _mm512_loadu_ps(r));
      if (n > 1) a1 = _mm512_add_ps(a1, _mm512_loadu_ps(r + 16));
      if (n > 2) a2 = _mm512_add_ps(a2, _mm512_loadu_ps(r + 32));
      if (n > 3) a3 = _mm512_add_ps(a3, _mm512_loadu_ps(r + 48));
    }
    if (m != 0) {
      a0 = _mm512_div_ps(a0, mv); a1 = _mm512_div_ps(a1, mv); a2 = _mm512_div_ps(a2, mv); a3 = _mm512_div_ps(a3, mv);
    }
    _mm512_storeu_ps(o + c, a0);
    if (n > 1) _mm512_storeu_ps(o + c + 16, a1);
    if (n > 2) _mm512_storeu_ps(o + c + 32, a2);
    if (n > 3) _mm512_storeu_ps(o + c + 48, a3);
  }
}
static int eb_avx512(void) { return dpl_cpu_avx512f(); }
#else
static void eb_bag_f32_512(const float *w, const int64_t *ip, int64_t lo, int64_t hi, int64_t D, float m, float *o)
{
  (void)w; (void)ip; (void)lo; (void)hi; (void)D; (void)m; (void)o;
}
static int eb_avx512(void) { return 0; }
#endif

#define EB_BAG(T)                                                                         \
  do {                                                                                    \
    const T *w = weight->_data, *ps = psw ? psw->_data : NULL;                            \
    T *o = (T *)out->_data + b * D;                                                       \
    int64_t c = 0;                                                                        \
    for (int64_t d = 0; d < D; d++) o[d] = 0;                                             \
    for (int64_t i = lo; i < hi; i++) {                                                   \
      const T *r = w + (ip[i] - 1) * D;                                                   \
      T k = (pad > 0 && ip[i] == pad) ? 0 : 1, s = ps ? ps[i] : 1;                        \
      c += k != 0;                                                                        \
      if (ps && pad > 0) eb_add_##T(o, r, s, k, D);                                      \
      else if (ps) eb_add_##T(o, r, s, 1, D);                                             \
      else if (pad > 0) eb_add_##T(o, r, k, 1, D);                                        \
      else eb_add1_##T(o, r, D);                                                          \
    }                                                                                     \
    if (mean) {                                                                           \
      T m = (T)(c > 0 ? c : 1);                                                           \
      for (int64_t d = 0; d < D; d++) o[d] = o[d] / m;                                    \
    }                                                                                     \
  } while (0)

typedef struct eb_job {
  const dpl_tensor *weight, *ids, *bounds, *psw;
  int64_t pad;
  int32_t mean;
  dpl_tensor *out;
  int fast;
} eb_job;
/* bags lo..hi-1 (each bag's row of out written by one thread: any split gives the same bits) */
static void eb_range(int64_t b0, int64_t b1, void *ctx)
{
  const eb_job *j = ctx;
  const dpl_tensor *weight = j->weight, *psw = j->psw, *out = j->out;
  const int64_t *ip = j->ids->_data, *bp = j->bounds->_data, pad = j->pad, D = weight->_shape[1];
  const int32_t mean = j->mean;
  for (int64_t b = b0; b < b1; b++) {
    int64_t lo = bp[b] - 1, hi = bp[b + 1] - 1;
    if (j->fast) {
      float m = mean ? (float)(hi > lo ? hi - lo : 1) : 0.0f;
      eb_bag_f32_512(weight->_data, ip, lo, hi, D, m, (float *)out->_data + b * D);
    } else if (weight->_dtype == DPL_FLOAT32) {
      EB_BAG(float);
    } else {
      EB_BAG(double);
    }
  }
}

int dpl_embedding_bag_fill(const dpl_tensor *weight, const dpl_tensor *ids, const dpl_tensor *bounds,
                           const dpl_tensor *psw, int64_t pad, int32_t mean, dpl_tensor *out)
{
  const char *name = "embedding_bag";
  DPL_TRY(need_contig(name, "weight", weight));
  DPL_TRY(need_float(name, "weight", weight));
  DPL_TRY(need_contig(name, "input", ids));
  DPL_TRY(need_contig(name, "offsets", bounds));
  DPL_TRY(need_contig(name, "out", out));
  if (psw) {
    DPL_TRY(need_contig(name, "per_sample_weights", psw));
    if (psw->_dtype != weight->_dtype || psw->_numel != ids->_numel)
      return dpl_errorf(DPL_EINVAL, "%s: per_sample_weights must have weight's dtype and input's size", name);
  }
  if (weight->_ndim != 2 || ids->_dtype != DPL_INT64 || bounds->_dtype != DPL_INT64 || bounds->_numel < 1 ||
      out->_dtype != weight->_dtype || out->_numel != (bounds->_numel - 1) * weight->_shape[1])
    return dpl_errorf(DPL_EINVAL, "%s: bad shapes or dtypes", name);
  int64_t V = weight->_shape[0], D = weight->_shape[1], L = ids->_numel, B = bounds->_numel - 1;
  const int64_t *ip = ids->_data, *bp = bounds->_data;
  for (int64_t i = 0; i < L; i++)
    if (ip[i] < 1 || ip[i] > V) return dpl_errorf(DPL_EINVAL, "%s: id %lld out of range 1..%lld", name, (long long)ip[i], (long long)V);
  for (int64_t b = 0; b <= B; b++)
    if (bp[b] < 1 || bp[b] > L + 1 || (b > 0 && bp[b] < bp[b - 1]))
      return dpl_errorf(DPL_EINVAL, "%s: bag bounds must be non-decreasing in 1..%lld", name, (long long)L + 1);
  if (bp[0] != 1) return dpl_errorf(DPL_EINVAL, "%s: the first bag must start at 1, got %lld", name, (long long)bp[0]);
  eb_job jb = {weight, ids, bounds, psw, pad, mean, out, 0};
  jb.fast = weight->_dtype == DPL_FLOAT32 && !psw && pad <= 0 && D % 16 == 0 && eb_avx512();
  int64_t per = L / (B > 0 ? B : 1) * D + D; /* elements a bag touches, about */
  dpl_parallel_for(B, (INT64_C(1) << 16) / per + 1, eb_range, &jb);
  return DPL_OK;
}
