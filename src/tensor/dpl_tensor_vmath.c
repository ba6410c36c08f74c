/* dpl_tensor_vmath.c: vectorised float32 math for the elementwise and activation
 * kernels (and float32 lgamma, digamma, erfc, i0 for dpl_tensor_special.c, evaluated in double
 * lanes: dpl_tensor_vmath_sp.h): the kernels of dpl_tensor_vmath_body.h compiled for AVX-512, AVX2 and
 * plain scalar code, the choice among them at run time (CPU features, DPL_VMATH),
 * and the strided entry points (strided runs go through small buffers). Accuracy,
 * measured against double-precision libm over every float32 (scripts/vmath_ulp.c)
 * and over dense sweeps in spec/tensor_vmath_spec.lua, is listed in docs/tensors.md. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* lgamma_r (dpl_special_math.h) */
#endif
#include "dpl_tensor_vmath.h"
#include "dpl_special_math.h"
#include "dpl_tensor_internal.h"
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define VM_HAVE_X86 1
#endif
#if defined(__FAST_MATH__) || defined(__FP_FAST_FMAF)
#error "dpl_tensor_vmath.c needs IEEE arithmetic without contraction (-ffp-contract=off, no -ffast-math)"
#endif

/* the scalar path: one lane, plain C */
#define VM_W 1
#define VM_SFX scalar
#define VM_TARGET
#define VM_SQRT(v) ((__typeof__(v)){sqrtf((v)[0])})
#define VM_FMA(a, b, c) ((__typeof__(a)){fmaf((a)[0], (b)[0], (c)[0])})
#define VM_MAXC(x, c) ((__typeof__(x)){(c)[0] > (x)[0] ? (c)[0] : (x)[0]})
#define VM_MINC(x, c) ((__typeof__(x)){(c)[0] < (x)[0] ? (c)[0] : (x)[0]})
#define VM_ANY(m) ((m)[0] != 0)
#define VM_SQRTD(v) ((__typeof__(v)){sqrt((v)[0])})
#define VM_ANYH(m) ((m)[0] != 0)
#include "dpl_tensor_vmath_body.h"
#undef VM_W
#undef VM_SFX
#undef VM_TARGET
#undef VM_SQRT
#undef VM_ANY
#undef VM_MINC
#undef VM_MAXC
#undef VM_FMA
#undef VM_SQRTD
#undef VM_ANYH

#ifdef VM_HAVE_X86
#define VM_W 8
#define VM_SFX avx2
#define VM_TARGET __attribute__((target("avx2,fma")))
#define VM_SQRT(v) ((__typeof__(v))_mm256_sqrt_ps((__m256)(v)))
#define VM_FMA(a, b, c) ((__typeof__(a))_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define VM_MAXC(x, c) ((__typeof__(x))_mm256_max_ps((__m256)(c), (__m256)(x)))
#define VM_MINC(x, c) ((__typeof__(x))_mm256_min_ps((__m256)(c), (__m256)(x)))
#define VM_ANY(m) (!_mm256_testz_si256((__m256i)(m), (__m256i)(m)))
#define VM_SQRTD(v) ((__typeof__(v))_mm256_sqrt_pd((__m256d)(v)))
#define VM_ANYH(m) (!_mm256_testz_si256((__m256i)(m), (__m256i)(m)))
#include "dpl_tensor_vmath_body.h"
#undef VM_W
#undef VM_SFX
#undef VM_TARGET
#undef VM_SQRT
#undef VM_ANY
#undef VM_MINC
#undef VM_MAXC
#undef VM_FMA
#undef VM_SQRTD
#undef VM_ANYH

#define VM_W 16
#define VM_SFX avx512
#define VM_TARGET __attribute__((target("avx512f,fma")))
#define VM_SQRT(v) ((__typeof__(v))_mm512_sqrt_ps((__m512)(v)))
#define VM_FMA(a, b, c) ((__typeof__(a))_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define VM_MAXC(x, c) ((__typeof__(x))_mm512_max_ps((__m512)(c), (__m512)(x)))
#define VM_MINC(x, c) ((__typeof__(x))_mm512_min_ps((__m512)(c), (__m512)(x)))
#define VM_ANY(m) (_mm512_test_epi32_mask((__m512i)(m), (__m512i)(m)) != 0)
#define VM_SQRTD(v) ((__typeof__(v))_mm512_sqrt_pd((__m512d)(v)))
#define VM_ANYH(m) (_mm512_test_epi64_mask((__m512i)(m), (__m512i)(m)) != 0)
#include "dpl_tensor_vmath_body.h"
#undef VM_W
#undef VM_SFX
#undef VM_TARGET
#undef VM_SQRT
#undef VM_ANY
#undef VM_MINC
#undef VM_MAXC
#undef VM_FMA
#undef VM_SQRTD
#undef VM_ANYH
#endif

typedef void (*map_fn)(int fn, float *y, const float *x, int64_t n, float p0, float p1);
typedef int (*nf_fn)(const uint32_t *u0, const uint32_t *u1, int64_t n, double mean, double sd, float *out,
                     int32_t *redo);
typedef int (*gt_fn)(const uint32_t *const *w, const double *alpha, int64_t n, double *x, int32_t *redo);
typedef void (*grad_fn)(int fn, float *y, const float *g, const float *x, int64_t n, float p0, float p1);
#ifdef VM_HAVE_X86
static const map_fn maps[3] = {map_scalar, map_avx2, map_avx512};
static const grad_fn grads[3] = {grad_scalar, grad_avx2, grad_avx512};
static const nf_fn nfs[3] = {normal_f32_scalar, normal_f32_avx2, normal_f32_avx512};
static const gt_fn gts[3] = {gamma_try_scalar, gamma_try_avx2, gamma_try_avx512};
#else
static const map_fn maps[3] = {map_scalar, map_scalar, map_scalar};
static const grad_fn grads[3] = {grad_scalar, grad_scalar, grad_scalar};
static const nf_fn nfs[3] = {normal_f32_scalar, normal_f32_scalar, normal_f32_scalar};
static const gt_fn gts[3] = {gamma_try_scalar, gamma_try_scalar, gamma_try_scalar};
#endif

int dpl_cpu_avx512f(void)
{
#ifdef VM_HAVE_X86
  static _Atomic int v = -1;
  int r = atomic_load_explicit(&v, memory_order_relaxed);
  if (r < 0) { __builtin_cpu_init(); r = __builtin_cpu_supports("avx512f") ? 1 : 0; atomic_store(&v, r); }
  return r;
#else
  return 0;
#endif
}

/* the fastest path this CPU runs; without FMA (before 2013's AVX2 CPUs) the scalar path
 * would run fmaf in software, slower than libm: the default there is "off" */
static int best_isa(void)
{
#ifdef VM_HAVE_X86
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("fma")) return DPL_VM_OFF;
  if (__builtin_cpu_supports("avx512f")) return DPL_VM_AVX512;
  if (__builtin_cpu_supports("avx2")) return DPL_VM_AVX2;
#endif
  return DPL_VM_SCALAR;
}
/* the fastest path with the kernels (scalar at least) */
static int top_isa(void) { int b = best_isa(); return b < DPL_VM_SCALAR ? DPL_VM_SCALAR : b; }

static _Atomic int isa_now = -2; /* -2: not chosen yet */

const char *dpl_vm_isa_name(int isa)
{
  switch (isa) {
  case DPL_VM_OFF: return "off";
  case DPL_VM_SCALAR: return "scalar";
  case DPL_VM_AVX2: return "avx2";
  case DPL_VM_AVX512: return "avx512";
  default: return "?";
  }
}

int dpl_vm_parse_isa(const char *name)
{
  if (!name || !*name || strcmp(name, "auto") == 0) return -3;
  for (int i = DPL_VM_OFF; i <= DPL_VM_AVX512; i++)
    if (strcmp(name, dpl_vm_isa_name(i)) == 0) return i;
  return -2;
}

int dpl_vm_set_isa(int isa)
{
  if (isa < DPL_VM_OFF) isa = best_isa();
  else if (isa > top_isa()) isa = top_isa();
  atomic_store_explicit(&isa_now, isa, memory_order_relaxed);
  return isa;
}

int dpl_vm_isa(void)
{
  int v = atomic_load_explicit(&isa_now, memory_order_relaxed);
  if (v != -2) return v;
  int want = dpl_vm_parse_isa(getenv("DPL_VMATH"));
  return dpl_vm_set_isa(want < DPL_VM_OFF ? -2 : want);
}

static int run_isa(void)
{
  int v = dpl_vm_isa();
  return v < 0 ? DPL_VM_SCALAR : v; /* "off" only tells the callers to keep libm */
}

enum { CHUNK = 256 };

void dpl_vm_map(int fn, char *y, int64_t sy, const char *x, int64_t sx, int64_t n, float p0, float p1)
{
  map_fn f = maps[run_isa()];
  if (sy == 4 && sx == 4) { f(fn, (float *)y, (const float *)x, n, p0, p1); return; }
  float b[CHUNK];
  for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
    int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
    for (int64_t i = 0; i < m; i++) memcpy(b + i, x + (i0 + i) * sx, sizeof(float));
    f(fn, b, b, m, p0, p1);
    for (int64_t i = 0; i < m; i++) memcpy(y + (i0 + i) * sy, b + i, sizeof(float));
  }
}

void dpl_vm_grad(int fn, char *y, int64_t sy, const char *g, int64_t sg, const char *x, int64_t sx, int64_t n,
                 float p0, float p1)
{
  grad_fn f = grads[run_isa()];
  if (sy == 4 && sg == 4 && sx == 4) { f(fn, (float *)y, (const float *)g, (const float *)x, n, p0, p1); return; }
  float bg[CHUNK], bx[CHUNK];
  for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
    int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
    for (int64_t i = 0; i < m; i++) {
      memcpy(bg + i, g + (i0 + i) * sg, sizeof(float));
      memcpy(bx + i, x + (i0 + i) * sx, sizeof(float));
    }
    f(fn, bx, bg, bx, m, p0, p1);
    for (int64_t i = 0; i < m; i++) memcpy(y + (i0 + i) * sy, bx + i, sizeof(float));
  }
}

int dpl_vm_normal_f32(const uint32_t *u0, const uint32_t *u1, int64_t n, double mean, double sd, float *out,
                      int32_t *redo)
{
  return nfs[run_isa()](u0, u1, n, mean, sd, out, redo);
}

int dpl_vm_gamma_try(const uint32_t *const *w, const double *alpha, int64_t n, double *x, int32_t *redo)
{
  return gts[run_isa()](w, alpha, n, x, redo);
}
