/* dpl_tensor_random.c: the seeded counter-based generator (Philox 4x32-10).
 * Element i of a draw uses counter (offset + i) under the key (seed), so a
 * result depends on the seed and the sequence of draws only: never on the
 * number of threads that fill it. uniform_, normal_, randint_, bernoulli_. */
#include "dpl_tensor_internal.h"
#include <pthread.h>
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
static int cpu_avx512(void)
{
  static _Atomic int v = -1;
  int r = atomic_load_explicit(&v, memory_order_relaxed);
  if (r < 0) { __builtin_cpu_init(); r = __builtin_cpu_supports("avx512f") ? 1 : 0; atomic_store(&v, r); }
  return r;
}
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

static void rng_range(int64_t lo, int64_t hi, void *vj)
{
  rjob *j = vj;
  int64_t es = dpl_elsize(j->dt);
  uint32_t u[4][RB];
  uint32_t thr = 0;
  if (j->kind == R_BERNOULLI) thr = (uint32_t)ceil(j->a * 16777216.0);
  for (int64_t b = lo; b < hi; b += RB) {
    int n = (int)(hi - b < RB ? hi - b : RB);
    philox_block(j->key, j->start + (uint64_t)b, n, u);
    if (j->kind == R_BERNOULLI && j->dt == DPL_FLOAT32) {
      bern_f32(u[0], n, thr, (float *)j->data + b);
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
        double u1 = ((double)u[0][l] + 1.0) * (1.0 / 4294967296.0);
        double u2 = (double)u[1][l] * (1.0 / 4294967296.0);
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
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
