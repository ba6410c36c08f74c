/* dpl_tensor_random.c: the seeded counter-based generator (Philox 4x32-10).
 * Element i of a draw uses counter (offset + i) under the key (seed), so a
 * result depends on the seed and the sequence of draws only: never on the
 * number of threads that fill it. uniform_, normal_, randint_, bernoulli_. float32 normal_
 * draws transform by the vector kernel of dpl_tensor_vmath.c, checked against the libm formula's
 * rounding so that the bits are the libm loop's (normal_f32). standard_gamma: Marsaglia and Tsang's
 * method per element, draw i's k-th try from counter {offset + i, k} (one offset per draw); poisson:
 * the same counters, by multiplication of uniforms below rate 10 and PTRS above. */
#define _GNU_SOURCE /* lgamma_r */
#include "dpl_tensor_internal.h"
#include "dpl_tensor_vmath.h"
#include <pthread.h>
#include <float.h>
#include <stdio.h>

#define DEFAULT_SEED UINT64_C(67280421310721)

static pthread_mutex_t rng_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t rng_seed = DEFAULT_SEED;
static uint64_t rng_offset;

void dpl_manual_seed(uint64_t seed)
{
  pthread_mutex_lock(&rng_mu);
  rng_seed = seed;
  rng_offset = 0;
  pthread_mutex_unlock(&rng_mu);
}

void dpl_rng_get_state(uint64_t *seed, uint64_t *offset)
{
  pthread_mutex_lock(&rng_mu);
  if (seed) *seed = rng_seed;
  if (offset) *offset = rng_offset;
  pthread_mutex_unlock(&rng_mu);
}

void dpl_rng_set_state(uint64_t seed, uint64_t offset)
{
  pthread_mutex_lock(&rng_mu);
  rng_seed = seed;
  rng_offset = offset;
  pthread_mutex_unlock(&rng_mu);
}

void dpl_rng_reserve(uint64_t n, uint64_t *key, uint64_t *start)
{
  pthread_mutex_lock(&rng_mu);
  *key = rng_seed;
  *start = rng_offset;
  rng_offset += n;
  pthread_mutex_unlock(&rng_mu);
}

enum { R_UNIFORM, R_NORMAL, R_RANDINT, R_BERNOULLI };
typedef struct rjob {
  int kind;
  int32_t dt;
  char *data;
  uint64_t key, start;
  double a, b;
  int64_t ia, range;
} rjob;

/* Philox 4x32-10 (Random123's philox4x32_10: counter {lo, hi, 0, 0}, key {lo, hi}) for RB
 * consecutive counters at once. philox_lanes: lanes [from, n), written so that the compiler
 * vectorizes them (32x32->64 multiplies: vpmuludq); philox_512: whole groups of 16 with AVX-512
 * intrinsics; the same bits either way (spec/tensor_random_spec.lua checks them against a scalar
 * Philox in Lua). */
#define RB 64
DPL_CLONES static void philox_lanes(uint64_t key, uint64_t ctr0, int from, int n, uint32_t (*restrict o)[RB])
{
  const uint32_t key0 = (uint32_t)key, key1 = (uint32_t)(key >> 32);
  for (int l = from; l < n; l++) {
    uint64_t ctr = ctr0 + (uint64_t)l;
    uint32_t c0 = (uint32_t)ctr, c1 = (uint32_t)(ctr >> 32), c2 = 0, c3 = 0, k0 = key0, k1 = key1;
    for (int r = 0; r < 10; r++) {
      uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
      uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
      c0 = hi1 ^ c1 ^ k0;
      c1 = lo1;
      c2 = hi0 ^ c3 ^ k1;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    o[0][l] = c0;
    o[1][l] = c1;
    o[2][l] = c2;
    o[3][l] = c3;
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#include <stdatomic.h>
/* 16 lanes a step with AVX-512: the 32x32->64 products of the even and the odd lanes by two
 * vpmuludq, their halves put back in place by mask blends; returns how many lanes it did (whole
 * groups of 16) */
__attribute__((target("avx512f"))) static int philox_512(uint64_t key, uint64_t ctr0, int n, uint32_t (*restrict o)[RB])
{
  const __m512i m0 = _mm512_set1_epi32((int32_t)0xD2511F53u), m1 = _mm512_set1_epi32((int32_t)0xCD9E8D57u);
  const __m512i ramp = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
  const __mmask16 odd = 0xAAAA;
  uint32_t k0s[10], k1s[10];
  k0s[0] = (uint32_t)key;
  k1s[0] = (uint32_t)(key >> 32);
  for (int r = 1; r < 10; r++) {
    k0s[r] = k0s[r - 1] + 0x9E3779B9u;
    k1s[r] = k1s[r - 1] + 0xBB67AE85u;
  }
  int l = 0;
  for (; l + 16 <= n; l += 16) {
    uint64_t base = ctr0 + (uint64_t)l;
    __m512i blo = _mm512_set1_epi32((int32_t)(uint32_t)base), bhi = _mm512_set1_epi32((int32_t)(uint32_t)(base >> 32));
    __m512i c0 = _mm512_add_epi32(blo, ramp);
    __m512i c1 = _mm512_mask_add_epi32(bhi, _mm512_cmplt_epu32_mask(c0, blo), bhi, one); /* the carry */
    __m512i c2 = zero, c3 = zero;
    for (int r = 0; r < 10; r++) {
      __m512i p0e = _mm512_mul_epu32(c0, m0), p0o = _mm512_mul_epu32(_mm512_srli_epi64(c0, 32), m0);
      __m512i p1e = _mm512_mul_epu32(c2, m1), p1o = _mm512_mul_epu32(_mm512_srli_epi64(c2, 32), m1);
      __m512i hi0 = _mm512_mask_blend_epi32(odd, _mm512_srli_epi64(p0e, 32), p0o);
      __m512i lo0 = _mm512_mask_blend_epi32(odd, p0e, _mm512_slli_epi64(p0o, 32));
      __m512i hi1 = _mm512_mask_blend_epi32(odd, _mm512_srli_epi64(p1e, 32), p1o);
      __m512i lo1 = _mm512_mask_blend_epi32(odd, p1e, _mm512_slli_epi64(p1o, 32));
      c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int32_t)k0s[r]));
      c1 = lo1;
      c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int32_t)k1s[r]));
      c3 = lo0;
    }
    _mm512_storeu_si512(o[0] + l, c0);
    _mm512_storeu_si512(o[1] + l, c1);
    _mm512_storeu_si512(o[2] + l, c2);
    _mm512_storeu_si512(o[3] + l, c3);
  }
  return l;
}
static int cpu_avx512(void) { return dpl_cpu_avx512f(); }
#else
static int philox_512(uint64_t key, uint64_t ctr0, int n, uint32_t (*o)[RB])
{
  (void)key; (void)ctr0; (void)n; (void)o;
  return 0;
}
static int cpu_avx512(void) { return 0; }
#endif

static void philox_block(uint64_t key, uint64_t ctr0, int n, uint32_t (*restrict o)[RB])
{
  int done = cpu_avx512() ? philox_512(key, ctr0, n, o) : 0;
  if (done < n) philox_lanes(key, ctr0, done, n, o);
}

/* bernoulli into float32: (u >> 8) * 2^-24 < p  <=>  (u >> 8) < ceil(p * 2^24) (exact: u >> 8 is an
 * integer below 2^24 and p * 2^24 is exact in double) */
DPL_CLONES static void bern_f32(const uint32_t *restrict u, int n, uint32_t thr, float *restrict out)
{
  for (int l = 0; l < n; l++) out[l] = (u[l] >> 8) < thr ? 1.0f : 0.0f;
}

/* the libm Box-Muller formula: the definition of the normal draws */
static double bm_libm(uint32_t a, uint32_t b)
{
  double u1 = ((double)a + 1.0) * (1.0 / 4294967296.0);
  double u2 = (double)b * (1.0 / 4294967296.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* normal draws into float32: by the vector kernel (dpl_vm_normal_f32), the few elements it cannot
 * vouch for recomputed from bm_libm: the same bits as the libm loop, element for element */
static void normal_f32(const uint32_t (*u)[RB], int n, double mean, double sd, float *restrict out)
{
  int32_t redo[RB];
  int nr = dpl_vm_normal_f32(u[0], u[1], n, mean, sd, out, redo);
  for (int k = 0; k < nr; k++) out[redo[k]] = (float)(mean + sd * bm_libm(u[0][redo[k]], u[1][redo[k]]));
}

static void rng_range(int64_t lo, int64_t hi, void *vj)
{
  rjob *j = vj;
  int64_t es = dpl_elsize(j->dt);
  uint32_t u[4][RB];
  uint32_t thr = 0;
  if (j->kind == R_BERNOULLI) thr = (uint32_t)ceil(j->a * 16777216.0);
  int fast_normal = dpl_vm_isa() != DPL_VM_OFF; /* (off: the libm loop, as a reference) */
  for (int64_t b = lo; b < hi; b += RB) {
    int n = (int)(hi - b < RB ? hi - b : RB);
    philox_block(j->key, j->start + (uint64_t)b, n, u);
    if (j->kind == R_BERNOULLI && j->dt == DPL_FLOAT32) {
      bern_f32(u[0], n, thr, (float *)j->data + b);
      continue;
    }
    if (fast_normal && j->kind == R_NORMAL && j->dt == DPL_FLOAT32) {
      normal_f32((const uint32_t(*)[RB])u, n, j->a, j->b, (float *)j->data + b);
      continue;
    }
    for (int l = 0; l < n; l++) {
      char *p = j->data + (b + l) * es;
      switch (j->kind) {
      case R_UNIFORM:
        if (j->dt == DPL_FLOAT32) {
          float f = (float)(u[0][l] >> 8) * (1.0f / 16777216.0f);
          float v = (float)j->a + f * (float)(j->b - j->a);
          if (v >= (float)j->b && j->b > j->a) v = nextafterf((float)j->b, (float)j->a);
          *(float *)p = v;
        } else {
          double f = (double)(((uint64_t)u[0][l] << 21) ^ (u[1][l] >> 11)) * (1.0 / 9007199254740992.0);
          dpl_store_f64(p, j->dt, j->a + f * (j->b - j->a));
        }
        break;
      case R_NORMAL: {
        double z = bm_libm(u[0][l], u[1][l]);
        if (j->dt == DPL_FLOAT32) *(float *)p = (float)(j->a + j->b * z);
        else dpl_store_f64(p, j->dt, j->a + j->b * z);
        break;
      }
      case R_RANDINT: {
        uint64_t r = ((uint64_t)u[0][l] << 32) | u[1][l];
        dpl_store_i64(p, j->dt, j->ia + (int64_t)(r % (uint64_t)j->range));
        break;
      }
      default: {
        double f = (double)(u[0][l] >> 8) * (1.0 / 16777216.0);
        dpl_store_f64(p, j->dt, f < j->a ? 1.0 : 0.0);
      }
      }
    }
  }
}

/* device tensors: the backend draws the same counters with the same formulas */
static int run_rng_device(const char *name, dpl_tensor *t, rjob *j)
{
  dpl_tensor *tmp = NULL, *target = t;
  if (!dpl_is_contig(t)) {
    DPL_TRY(dpl_new(name, t->_dtype, t->_ndim, t->_shape, t, &tmp));
    target = tmp;
  }
  dpl_rng_reserve((uint64_t)t->_numel, &j->key, &j->start);
  dpl_bk_args k = {.op = DPL_BK_RNG, .inout = target, .i = {j->kind}, .u = {j->key, j->start}, .d = {j->a, j->b},
                   .l = {j->ia, j->range}, .name = name};
  int st = dpl_bk_call(&k);
  if (st == DPL_OK && tmp) st = dpl_copy_any(name, t, tmp);
  dpl_tensor_release(tmp);
  return st;
}

static int run_rng(const char *name, dpl_tensor *t, rjob *j)
{
  if (dpl_is_devmem(t)) return run_rng_device(name, t, j);
  DPL_TRY(dpl_check_tensor(name, "self", t));
  dpl_tensor *tmp = NULL;
  dpl_tensor *target = t;
  if (!dpl_is_contig(t)) {
    DPL_TRY(dpl_new(name, t->_dtype, t->_ndim, t->_shape, t, &tmp));
    target = tmp;
  }
  j->dt = t->_dtype;
  j->data = target->_data;
  dpl_rng_reserve((uint64_t)t->_numel, &j->key, &j->start);
  dpl_parallel_for(t->_numel, 16384, rng_range, j);
  if (tmp) {
    dpl_copy_raw(t, tmp);
    dpl_tensor_release(tmp);
  }
  return DPL_OK;
}

int dpl_tensor_uniform_(dpl_tensor *t, double lo, double hi)
{
  DPL_TRY(dpl_check_handle("uniform_", "self", t));
  if (!dpl_is_float(t->_dtype))
    return dpl_errorf(DPL_EINVAL, "uniform_: expected a floating-point tensor, got %s", dpl_dtype_name(t->_dtype));
  if (!(lo <= hi)) return dpl_errorf(DPL_EINVAL, "uniform_: expected from <= to, got from=%g to=%g", lo, hi);
  rjob j = {R_UNIFORM, 0, NULL, 0, 0, lo, hi, 0, 0};
  return run_rng("uniform_", t, &j);
}

int dpl_tensor_normal_(dpl_tensor *t, double mean, double std)
{
  DPL_TRY(dpl_check_handle("normal_", "self", t));
  if (!dpl_is_float(t->_dtype))
    return dpl_errorf(DPL_EINVAL, "normal_: expected a floating-point tensor, got %s", dpl_dtype_name(t->_dtype));
  if (!(std >= 0)) return dpl_errorf(DPL_EINVAL, "normal_: expected std >= 0, got %g", std);
  rjob j = {R_NORMAL, 0, NULL, 0, 0, mean, std, 0, 0};
  return run_rng("normal_", t, &j);
}

int dpl_tensor_randint_(dpl_tensor *t, int64_t lo, int64_t hi)
{
  DPL_TRY(dpl_check_handle("randint_", "self", t));
  if (hi <= lo)
    return dpl_errorf(DPL_EINVAL, "randint_: expected low < high, got low=%lld high=%lld", (long long)lo, (long long)hi);
  if (t->_dtype == DPL_BOOL) return dpl_errorf(DPL_EINVAL, "randint_: not supported for bool tensors");
  rjob j = {R_RANDINT, 0, NULL, 0, 0, 0, 0, lo, (int64_t)((uint64_t)hi - (uint64_t)lo)};
  return run_rng("randint_", t, &j);
}

int dpl_tensor_bernoulli_(dpl_tensor *t, double p)
{
  DPL_TRY(dpl_check_handle("bernoulli_", "self", t));
  if (!(p >= 0 && p <= 1)) return dpl_errorf(DPL_EINVAL, "bernoulli_: expected 0 <= p <= 1, got %g", p);
  rjob j = {R_BERNOULLI, 0, NULL, 0, 0, p, 0, 0, 0};
  return run_rng("bernoulli_", t, &j);
}

/* ---- standard Gamma draws (Marsaglia and Tsang) ---- */
/* Philox 4x32-10 of one counter {lo, hi, c2, 0}: draw i's try k (k >= 1) of standard_gamma */
static void philox_one(uint64_t key, uint64_t ctr, uint32_t c2, uint32_t o[4])
{
  uint32_t c0 = (uint32_t)ctr, c1 = (uint32_t)(ctr >> 32), c3 = 0, k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    c0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    c1 = (uint32_t)p1;
    c2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c3 = (uint32_t)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  o[0] = c0;
  o[1] = c1;
  o[2] = c2;
  o[3] = c3;
}

typedef struct gjob {
  int32_t dt;
  const char *alpha;
  char *out;
  uint64_t key, start;
} gjob;

enum { GAMMA_MAX_TRIES = 1000 };

/* draws [lo, hi): draw i's try k takes the Philox words of counter {start + i, k} (k = 0: the
 * ordinary stream's counter, its words by the block generator) */
static void gamma_range(int64_t lo, int64_t hi, void *vj)
{
  const gjob *j = vj;
  for (int64_t b = lo; b < hi; b += RB) {
    int n = (int)(hi - b < RB ? hi - b : RB);
    uint32_t u[4][RB];
    double al[RB], x[RB];
    int32_t redo[RB];
    for (int l = 0; l < n; l++)
      al[l] = j->dt == DPL_FLOAT32 ? (double)((const float *)j->alpha)[b + l] : ((const double *)j->alpha)[b + l];
    philox_block(j->key, j->start + (uint64_t)b, n, u);
    const uint32_t *w[4] = {u[0], u[1], u[2], u[3]};
    int nr = dpl_vm_gamma_try(w, al, n, x, redo);
    for (uint32_t k = 1; nr > 0 && k < GAMMA_MAX_TRIES; k++) { /* the rejected draws, packed, try k */
      uint32_t pw[4][RB], o[4];
      double pal[RB], px[RB];
      int32_t pr[RB];
      uint8_t rej[RB] = {0};
      for (int r = 0; r < nr; r++) {
        philox_one(j->key, j->start + (uint64_t)(b + redo[r]), k, o);
        for (int q = 0; q < 4; q++) pw[q][r] = o[q];
        pal[r] = al[redo[r]];
      }
      const uint32_t *pw4[4] = {pw[0], pw[1], pw[2], pw[3]};
      int nr2 = dpl_vm_gamma_try(pw4, pal, nr, px, pr);
      for (int t = 0; t < nr2; t++) rej[pr[t]] = 1;
      int m = 0;
      for (int r = 0; r < nr; r++) {
        if (rej[r]) redo[m++] = redo[r];
        else x[redo[r]] = px[r];
      }
      nr = m;
    }
    for (int r = 0; r < nr; r++) x[redo[r]] = NAN; /* (alpha NaN or infinite: never accepted) */
    if (j->dt == DPL_FLOAT32) {
      float *o = (float *)j->out + b;
      for (int l = 0; l < n; l++) {
        float f = (float)x[l];
        o[l] = f < FLT_MIN ? FLT_MIN : f; /* the smallest normal, as PyTorch's clamp (NaN stays) */
      }
    } else {
      double *o = (double *)j->out + b;
      for (int l = 0; l < n; l++) o[l] = x[l] < DBL_MIN ? DBL_MIN : x[l];
    }
  }
}

int dpl_tensor_standard_gamma(const dpl_tensor *alpha, dpl_tensor *out)
{
  DPL_TRY(dpl_check_tensor("standard_gamma", "alpha", alpha));
  DPL_TRY(dpl_check_tensor("standard_gamma", "out", out));
  if ((alpha->_dtype != DPL_FLOAT32 && alpha->_dtype != DPL_FLOAT64) || out->_dtype != alpha->_dtype)
    return dpl_errorf(DPL_EINVAL, "standard_gamma: expected float32 or float64 alpha and out of its dtype, got %s and %s",
                      dpl_dtype_name(alpha->_dtype), dpl_dtype_name(out->_dtype));
  if (!dpl_is_contig(alpha) || !dpl_is_contig(out) || alpha->_numel != out->_numel)
    return dpl_errorf(DPL_EINVAL, "standard_gamma: expected contiguous alpha and out of the same size");
  gjob j = {alpha->_dtype, alpha->_data, out->_data, 0, 0};
  dpl_rng_reserve((uint64_t)alpha->_numel, &j.key, &j.start);
  dpl_parallel_for(alpha->_numel, 4096, gamma_range, &j);
  return DPL_OK;
}

/* ---- Poisson draws ---- */
/* the uniform (w + 1/2) 2^-32 in (0, 1) */
static inline double u01(uint32_t w) { return ((double)w + 0.5) * (1.0 / 4294967296.0); }

/* one Poisson(rate) draw from counters {ctr, k}, k = 0, 1, ...: below rate 10 the count of
 * uniforms (word j of counter {ctr, j / 4}) whose product stays above e^-rate; from 10 on Hormann's
 * transformed rejection (PTRS), try k's U and V from words 0 and 1 of counter {ctr, k} */
static double poisson_one(uint64_t key, uint64_t ctr, double rate)
{
  uint32_t w[4];
  if (!(rate > 0)) return 0;
  if (rate < 10) {
    double limit = exp(-rate), prod = 1;
    for (uint32_t j = 0; j < 4u * GAMMA_MAX_TRIES; j++) {
      if (j % 4 == 0) philox_one(key, ctr, j / 4, w);
      prod *= u01(w[j % 4]);
      if (prod <= limit) return (double)j;
    }
    return NAN;
  }
  double slam = sqrt(rate), loglam = log(rate), b = 0.931 + 2.53 * slam, a = -0.059 + 0.02483 * b;
  double inva = 1.1239 + 1.1328 / (b - 3.4), vr = 0.9277 - 3.6224 / (b - 2);
  for (uint32_t k = 0; k < GAMMA_MAX_TRIES; k++) {
    philox_one(key, ctr, k, w);
    double U = u01(w[0]) - 0.5, V = u01(w[1]), us = 0.5 - fabs(U);
    double kk = floor((2 * a / us + b) * U + rate + 0.43);
    if (us >= 0.07 && V <= vr) return kk;
    if (kk < 0 || (us < 0.013 && V > us)) continue;
    int sg;
    if (log(V) + log(inva) - log(a / (us * us) + b) <= -rate + kk * loglam - lgamma_r(kk + 1, &sg)) return kk;
  }
  return NAN;
}

typedef struct pjob {
  int32_t dt;
  const char *rate;
  char *out;
  uint64_t key, start;
} pjob;

static void poisson_range(int64_t lo, int64_t hi, void *vj)
{
  const pjob *j = vj;
  for (int64_t i = lo; i < hi; i++) {
    if (j->dt == DPL_FLOAT32) {
      ((float *)j->out)[i] = (float)poisson_one(j->key, j->start + (uint64_t)i, ((const float *)j->rate)[i]);
    } else {
      ((double *)j->out)[i] = poisson_one(j->key, j->start + (uint64_t)i, ((const double *)j->rate)[i]);
    }
  }
}

int dpl_tensor_poisson(const dpl_tensor *rate, dpl_tensor *out)
{
  DPL_TRY(dpl_check_tensor("poisson", "rate", rate));
  DPL_TRY(dpl_check_tensor("poisson", "out", out));
  if ((rate->_dtype != DPL_FLOAT32 && rate->_dtype != DPL_FLOAT64) || out->_dtype != rate->_dtype)
    return dpl_errorf(DPL_EINVAL, "poisson: expected float32 or float64 rate and out of its dtype, got %s and %s",
                      dpl_dtype_name(rate->_dtype), dpl_dtype_name(out->_dtype));
  if (!dpl_is_contig(rate) || !dpl_is_contig(out) || rate->_numel != out->_numel)
    return dpl_errorf(DPL_EINVAL, "poisson: expected contiguous rate and out of the same size");
  pjob j = {rate->_dtype, rate->_data, out->_data, 0, 0};
  dpl_rng_reserve((uint64_t)rate->_numel, &j.key, &j.start);
  dpl_parallel_for(rate->_numel, 4096, poisson_range, &j);
  return DPL_OK;
}

/* ---- fused dropout: the keep decisions of bernoulli_(1 - p), applied and packed in one pass ---- */
typedef struct djob {
  int isf;
  uint32_t thr;
  float sf;
  double sd;
  uint64_t key, start;
  int64_t n;
  const char *x; /* forward: x; backward: grad */
  char *y;
  uint8_t *bits; /* forward: written (may be NULL); backward: read */
} djob;

/* one block of up to 64 elements: keep bits from u (forward) or from the mask (backward) */
DPL_CLONES static void drop_apply_f32(const float *restrict x, float *restrict y, int n, uint64_t bits, float s)
{
  for (int l = 0; l < n; l++) y[l] = x[l] * (((bits >> l) & 1) ? s : 0.0f);
}
DPL_CLONES static void drop_apply_f64(const double *restrict x, double *restrict y, int n, uint64_t bits, double s)
{
  for (int l = 0; l < n; l++) y[l] = x[l] * (((bits >> l) & 1) ? s : 0.0);
}
static uint64_t keep_bits(const uint32_t *u, int n, uint32_t thr)
{
  uint64_t bits = 0;
  for (int l = 0; l < n; l++) bits |= (uint64_t)((u[l] >> 8) < thr) << l;
  return bits;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* a whole block of 64 with AVX-512: the compare gives the keep mask, a zero-masked move the factor */
__attribute__((target("avx512f"))) static uint64_t keep_bits_512(const uint32_t *u, uint32_t thr)
{
  const __m512i t = _mm512_set1_epi32((int32_t)thr);
  uint64_t bits = 0;
  for (int g = 0; g < 4; g++) {
    __m512i v = _mm512_srli_epi32(_mm512_loadu_si512(u + 16 * g), 8);
    bits |= (uint64_t)_mm512_cmplt_epu32_mask(v, t) << (16 * g);
  }
  return bits;
}
__attribute__((target("avx512f"))) static void apply_512(int isf, const char *x, char *y, uint64_t bits, float sf,
                                                         double sd)
{
  if (isf) {
    const __m512 s = _mm512_set1_ps(sf);
    for (int g = 0; g < 4; g++) {
      __m512 m = _mm512_maskz_mov_ps((__mmask16)(bits >> (16 * g)), s);
      _mm512_storeu_ps((float *)y + 16 * g, _mm512_mul_ps(_mm512_loadu_ps((const float *)x + 16 * g), m));
    }
  } else {
    const __m512d s = _mm512_set1_pd(sd);
    for (int g = 0; g < 8; g++) {
      __m512d m = _mm512_maskz_mov_pd((__mmask8)(bits >> (8 * g)), s);
      _mm512_storeu_pd((double *)y + 8 * g, _mm512_mul_pd(_mm512_loadu_pd((const double *)x + 8 * g), m));
    }
  }
}
#define HAVE_DROP_512 1
#endif

static void drop_block(const djob *j, int64_t blk, uint64_t bits)
{
  int64_t b = blk * RB;
  int n = (int)(j->n - b < RB ? j->n - b : RB);
  int64_t es = j->isf ? 4 : 8;
#ifdef HAVE_DROP_512
  if (n == RB && cpu_avx512()) {
    apply_512(j->isf, j->x + b * es, j->y + b * es, bits, j->sf, j->sd);
    return;
  }
#endif
  if (j->isf) drop_apply_f32((const float *)j->x + b, (float *)j->y + b, n, bits, j->sf);
  else drop_apply_f64((const double *)j->x + b, (double *)j->y + b, n, bits, j->sd);
}

/* ranges over blocks of RB elements, so that no two threads write the same mask byte */
static void drop_fwd_range(int64_t lo, int64_t hi, void *vj)
{
  const djob *j = vj;
  uint32_t u[4][RB];
  for (int64_t blk = lo; blk < hi; blk++) {
    int64_t b = blk * RB;
    int n = (int)(j->n - b < RB ? j->n - b : RB);
    philox_block(j->key, j->start + (uint64_t)b, n, u);
    uint64_t bits;
#ifdef HAVE_DROP_512
    if (n == RB && cpu_avx512()) bits = keep_bits_512(u[0], j->thr);
    else
#endif
      bits = keep_bits(u[0], n, j->thr);
    drop_block(j, blk, bits);
    if (j->bits)
      for (int k = 0; k < (n + 7) / 8; k++) j->bits[b / 8 + k] = (uint8_t)(bits >> (8 * k));
  }
}

static void drop_bwd_range(int64_t lo, int64_t hi, void *vj)
{
  const djob *j = vj;
  for (int64_t blk = lo; blk < hi; blk++) {
    int64_t b = blk * RB;
    int n = (int)(j->n - b < RB ? j->n - b : RB);
    uint64_t bits = 0;
    for (int k = 0; k < (n + 7) / 8; k++) bits |= (uint64_t)j->bits[b / 8 + k] << (8 * k);
    if (n < RB) bits &= (UINT64_C(1) << n) - 1;
    drop_block(j, blk, bits);
  }
}

static void drop_scale(djob *j, double p)
{
  double q = 1.0 - p; /* what F.dropout's composed form hands bernoulli_ and div_ */
  j->thr = (uint32_t)ceil(q * 16777216.0);
  j->sf = 1.0f / (float)q; /* div_'s float32 kernel: the scalar rounded to float, then divided */
  j->sd = 1.0 / q;
}

static int drop_check_float(const char *name, const char *arg, const dpl_tensor *t)
{
  if (dpl_is_devmem(t))
    return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda (the composed form runs there)", name);
  DPL_TRY(dpl_check_tensor(name, arg, t));
  if (t->_dtype != DPL_FLOAT32 && t->_dtype != DPL_FLOAT64)
    return dpl_errorf(DPL_EINVAL, "%s: expected %s of dtype float32 or float64, got %s", name, arg,
                      dpl_dtype_name(t->_dtype));
  return DPL_OK;
}

int dpl_dropout(const dpl_tensor *x, double p, dpl_tensor **out, dpl_tensor **mask)
{
  const char *name = "dropout";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: the output pointer is NULL", name);
  *out = NULL;
  if (mask) *mask = NULL;
  DPL_TRY(dpl_check_handle(name, "input", x));
  DPL_TRY(drop_check_float(name, "input", x));
  if (!dpl_is_contig(x)) return dpl_errorf(DPL_EINVAL, "%s: expected a contiguous input", name);
  if (!(p >= 0 && p < 1)) return dpl_errorf(DPL_EINVAL, "%s: expected 0 <= p < 1, got %g", name, p);
  dpl_tensor *ry = NULL, *rm = NULL;
  int64_t nbytes = (x->_numel + 7) / 8;
  int st = dpl_new(name, x->_dtype, x->_ndim, x->_shape, x, &ry);
  if (st == DPL_OK && mask) st = dpl_new(name, DPL_UINT8, 1, &nbytes, x, &rm);
  if (st == DPL_OK) {
    djob j = {.isf = x->_dtype == DPL_FLOAT32, .n = x->_numel, .x = x->_data, .y = ry->_data,
              .bits = rm ? (uint8_t *)rm->_data : NULL};
    drop_scale(&j, p);
    dpl_rng_reserve((uint64_t)x->_numel, &j.key, &j.start);
    if (x->_numel > 0) dpl_parallel_for((x->_numel + RB - 1) / RB, 16384 / RB, drop_fwd_range, &j);
  }
  return dpl_hand_over(st, 2, (dpl_tensor *[]){ry, rm}, (dpl_tensor **[]){out, mask});
}

int dpl_dropout_backward(const dpl_tensor *grad, const dpl_tensor *mask, double p, dpl_tensor **grad_x)
{
  const char *name = "dropout_backward";
  if (!grad_x) return dpl_errorf(DPL_EINVAL, "%s: the output pointer is NULL", name);
  *grad_x = NULL;
  DPL_TRY(dpl_check_handle(name, "grad_output", grad));
  DPL_TRY(dpl_check_handle(name, "mask", mask));
  DPL_TRY(drop_check_float(name, "grad_output", grad));
  if (dpl_is_devmem(mask)) return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda", name);
  DPL_TRY(dpl_check_tensor(name, "mask", mask));
  int64_t nbytes = (grad->_numel + 7) / 8;
  if (mask->_dtype != DPL_UINT8 || !dpl_is_contig(mask) || mask->_numel != nbytes)
    return dpl_errorf(DPL_EINVAL,
                      "%s: expected mask to be a contiguous uint8 tensor of %lld bytes (dropout's packed mask "
                      "for %lld elements), got %s with %lld elements",
                      name, (long long)nbytes, (long long)grad->_numel, dpl_dtype_name(mask->_dtype),
                      (long long)mask->_numel);
  if (!(p >= 0 && p < 1)) return dpl_errorf(DPL_EINVAL, "%s: expected 0 <= p < 1, got %g", name, p);
  dpl_tensor *cg = NULL, *rg = NULL;
  int st = DPL_OK;
  if (!dpl_is_contig(grad)) st = dpl_contig_as(name, grad, grad->_dtype, &cg);
  const dpl_tensor *g = cg ? cg : grad;
  if (st == DPL_OK) st = dpl_new(name, grad->_dtype, grad->_ndim, grad->_shape, grad, &rg);
  if (st == DPL_OK && grad->_numel > 0) {
    djob j = {.isf = grad->_dtype == DPL_FLOAT32, .n = grad->_numel, .x = g->_data, .y = rg->_data,
              .bits = (uint8_t *)mask->_data};
    drop_scale(&j, p);
    dpl_parallel_for((grad->_numel + RB - 1) / RB, 16384 / RB, drop_bwd_range, &j);
  }
  dpl_tensor_release(cg);
  if (st != DPL_OK) {
    dpl_tensor_release(rg);
    return st;
  }
  *grad_x = rg;
  return DPL_OK;
}
