/* dpl_tensor_gemm_avx512.c: a float32 GEMM for CPUs with AVX-512 (BLIS-style:
 * A and B packed into MR-row and NR-column panels, an 8x32 register-blocked
 * micro-kernel of 16 zmm accumulators). dpl_gemm tries it first for float32; it
 * declines (returns 0) on CPUs without AVX-512F, for small products, or when
 * DPL_SGEMM=blas, and OpenBLAS runs instead. Where OpenBLAS is held to its AVX2
 * kernels (OPENBLAS_CORETYPE=Haswell) on a CPU with full-width AVX-512 units,
 * this doubles the conv and linear GEMM throughput. */
#define _GNU_SOURCE
#include "dpl_tensor_internal.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(DPL_NO_AVX512)
#include <cpuid.h>
#include <immintrin.h>

#define MR 8
#define NR 32
#define KC 512

static pthread_once_t avx_once = PTHREAD_ONCE_INIT;
static int avx_ok, small_ok;
/* m*n*k from which a product is split over the threads: with the pool's spinning
 * workers a split costs ~1 us, repaid from ~2^18 (a 64x64x64 product, ~3 us) */
static int64_t par_min = INT64_C(1) << 18;
/* The tensor ops' products (matmul, mm, bmm, addmm: dpl_sgemm_prefers_blas) under own_min
 * multiply-adds go to OpenBLAS. AMD's Zen 4 (family 19h with AVX-512) runs each 512-bit FMA
 * as two 256-bit halves, so this kernel has no width over OpenBLAS's there, and its padded
 * edge tiles (8 rows, 16 or 32 columns) cost more than OpenBLAS's edge kernels: measured
 * 1.2-1.7x OpenBLAS's time for such products under 2^20 multiply-adds (64^3, a 10-class
 * head's three products), equal or better from there on. There own_min is 2^20, except for
 * A @ B^T with both sides over 16, where the packing wins from 2^15 as elsewhere
 * (docs/tensors.md). conv2d's products (strided im2col columns, a fused bias) stay with
 * this kernel from 2^15 up on every CPU: there it beat OpenBLAS at every size measured
 * (the 1-channel 3x3 conv's 32x9 @ 9x784 per sample: 519 against 680 us a batch).
 * DPL_SGEMM_OWN_MIN sets own_min for every layout. */
static int64_t own_min = INT64_C(1) << 15, own_min_nt = INT64_C(1) << 15;
static int split_fma(void)
{
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u /* "Auth"enticAMD */) return 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  unsigned fam = (a >> 8) & 0xf;
  if (fam == 0xf) fam += (a >> 20) & 0xff;
  return fam == 0x19; /* Zen 3 has no AVX-512: with it, Zen 4 */
}
static void avx_probe(void)
{
  __builtin_cpu_init();
  const char *e = getenv("DPL_SGEMM");
  avx_ok = __builtin_cpu_supports("avx512f") && !(e && strcmp(e, "blas") == 0);
  const char *sm = getenv("DPL_SGEMM_SMALLM"); /* 0: products of 1-3 rows go to OpenBLAS (comparisons) */
  small_ok = !(sm && strcmp(sm, "0") == 0);
  const char *p = getenv("DPL_GEMM_PAR_MIN");
  if (p && *p) par_min = strtoll(p, NULL, 10);
  if (avx_ok && split_fma()) own_min = INT64_C(1) << 20;
  const char *o = getenv("DPL_SGEMM_OWN_MIN");
  if (o && *o) own_min = own_min_nt = strtoll(o, NULL, 10);
}

/* The product runs as C' = A' @ B' over an "A operand" read in place (element
 * (i, p) at a + i*rsa + p*csa, broadcast one at a time) and a "B operand" read
 * in place as rows of NR contiguous floats (element (p, j) at b + p*rsb + j).
 * Only when op(B) is stored transposed (k contiguous) is one operand packed into
 * NR-column panels (rsb = NR inside a panel); C' may be C or C transposed. */
typedef struct gemm_job {
  const float *a;
  int64_t rsa, csa;
  const float *b; /* in place, or the packed panels (panel jp at b + jp * NR * k) */
  int64_t rsb;
  int packed;
  float *c;
  int64_t rsc, csc; /* C' (i, j) at c + i*rsc + j*csc */
  int64_t m, n, k, p0, kc;
  float alpha, beta;
  const float *bias; /* NULL, or added to row i of C' in the first k block (with beta = 0) */
} gemm_job;

/* one MR x NR tile of C' over k-steps [p0, p0+kc): rows beyond mr repeat the last
 * row and columns beyond nr read as zero; the caller writes only the valid part */
#define KERNEL(NAME, AADDR, HALF)                                                                            \
  __attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void NAME(          \
    const gemm_job *j, int64_t i0, int64_t mr, const float *bp, int64_t rsb, __mmask16 k0, __mmask16 k1, \
    __m512 *o0, __m512 *o1)                                                                          \
  {                                                                                                  \
    const float *ar[MR];                                                                             \
    for (int r = 0; r < MR; r++) ar[r] = j->a + (i0 + (r < mr ? r : mr - 1)) * j->rsa + j->p0 * j->csa; \
    __m512 c0[MR], c1[MR];                                                                           \
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) c0[r] = c1[r] = _mm512_setzero_ps();        \
    const int64_t csa = j->csa, kc = j->kc;                                                          \
    (void)csa;                                                                                       \
    for (int64_t p = 0; p < kc; p++) {                                                               \
      __m512 b0 = _mm512_maskz_loadu_ps(k0, bp), b1 = HALF ? b0 : _mm512_maskz_loadu_ps(k1, bp + 16); \
      _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                                         \
        __m512 av = _mm512_set1_ps(AADDR);                                                           \
        c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);                                                      \
        if (!HALF) c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);                                            \
      }                                                                                              \
      bp += rsb;                                                                                     \
    }                                                                                                \
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) { o0[r] = c0[r]; o1[r] = c1[r]; }           \
  }
KERNEL(kern_rows, ar[r][p], 0)     /* A' rows contiguous in k (csa == 1) */
KERNEL(kern_cols, ar[r][p * csa], 0) /* A' columns contiguous (rsa == 1); rows past mr clamped too */
/* a tile of at most 16 columns (n <= 16, or the last panel): half the FMAs, o1 left zero */
KERNEL(kern_rows16, ar[r][p], 1)
KERNEL(kern_cols16, ar[r][p * csa], 1)

__attribute__((target("avx512f,prfchw"))) static void tile(const gemm_job *j, int64_t i0, int64_t jr)
{
  int64_t mr = j->m - i0 < MR ? j->m - i0 : MR, nr = j->n - jr < NR ? j->n - jr : NR;
  __mmask16 k0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
  __mmask16 k1 = nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
  const float *bp;
  int64_t rsb;
  if (j->packed) { bp = j->b + (jr / NR) * NR * j->k + j->p0 * NR; rsb = NR; }
  else { bp = j->b + j->p0 * j->rsb + jr; rsb = j->rsb; }
  /* the tile's lines of C fetched for writing while the k loop runs: a fresh result is
   * often in cold memory, and its panels are written 8 strided rows at a time, which the
   * hardware prefetchers do not follow (A^T @ B, 784x64x256 into a cold result: 370-420
   * -> 310-340 us on a Zen 4 VM) */
  if (j->csc == 1 && j->p0 == 0)
    for (int64_t r = 0; r < mr; r++) {
      float *cr = j->c + (i0 + r) * j->rsc + jr;
      __builtin_prefetch(cr, 1, 3);
      if (nr > 16) __builtin_prefetch(cr + 16, 1, 3);
    }
  __m512 c0[MR], c1[MR];
  if (nr <= 16) {
    if (j->csa == 1) kern_rows16(j, i0, mr, bp, rsb, k0, k1, c0, c1);
    else kern_cols16(j, i0, mr, bp, rsb, k0, k1, c0, c1);
  } else if (j->csa == 1) kern_rows(j, i0, mr, bp, rsb, k0, k1, c0, c1);
  else kern_cols(j, i0, mr, bp, rsb, k0, k1, c0, c1);
  float beta = j->p0 == 0 ? j->beta : 1.0f;
  __m512 al = _mm512_set1_ps(j->alpha), be = _mm512_set1_ps(beta);
  if (j->csc == 1) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
      if (r >= mr) break;
      float *cr = j->c + (i0 + r) * j->rsc + jr;
      __m512 v0 = _mm512_mul_ps(al, c0[r]), v1 = _mm512_mul_ps(al, c1[r]);
      if (j->bias && j->p0 == 0) {
        __m512 bv = _mm512_set1_ps(j->bias[i0 + r]);
        v0 = _mm512_add_ps(v0, bv);
        v1 = _mm512_add_ps(v1, bv);
      } else if (beta != 0.0f) {
        v0 = _mm512_fmadd_ps(be, _mm512_maskz_loadu_ps(k0, cr), v0);
        v1 = _mm512_fmadd_ps(be, _mm512_maskz_loadu_ps(k1, cr + 16), v1);
      }
      if (nr == NR) { _mm512_storeu_ps(cr, v0); _mm512_storeu_ps(cr + 16, v1); } /* masked stores are slow on AMD */
      else { _mm512_mask_storeu_ps(cr, k0, v0); _mm512_mask_storeu_ps(cr + 16, k1, v1); }
    }
  } else {
    float t[MR][NR] __attribute__((aligned(64)));
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) { _mm512_store_ps(t[r], c0[r]); _mm512_store_ps(t[r] + 16, c1[r]); }
    for (int64_t cc = 0; cc < nr; cc++)
      for (int64_t r = 0; r < mr; r++) {
        float *d = j->c + (i0 + r) * j->rsc + (jr + cc) * j->csc;
        if (j->bias && j->p0 == 0) *d = j->alpha * t[r][cc] + j->bias[i0 + r];
        else *d = beta == 0.0f ? j->alpha * t[r][cc] : j->alpha * t[r][cc] + beta * *d;
      }
  }
}

/* the NR-column panels [lo, hi) against every MR-row block, KC steps of k at a
 * time (a thread runs all of k for its panels: one barrier per product) */
static void panels_range(int64_t lo, int64_t hi, void *ctx)
{
  gemm_job j = *(const gemm_job *)ctx;
  for (int64_t jp = lo; jp < hi; jp++)
    for (int64_t p0 = 0; p0 < j.k; p0 += KC) {
      j.p0 = p0;
      j.kc = j.k - p0 < KC ? j.k - p0 : KC;
      for (int64_t i0 = 0; i0 < j.m; i0 += MR) tile(&j, i0, jp * NR);
    }
}

/* rows [0, n) of X (element (row, p) at x + row*ldx + p, p < k) -> panels of NR rows
 * turned into columns: panel jp holds (p, c) at dst + jp*NR*k + p*NR + c (the
 * columns past n are left unset: the kernel's masked loads never read them) */
typedef struct pack_job { const float *x; int64_t ldx, n, k; float *dst; } pack_job;

/* rows src[0..8) (stride lds) x 8 columns -> dst[q * ldd + r] = src[r * lds + q] */
__attribute__((target("avx512f"))) static inline void transpose8(const float *src, int64_t lds, float *dst, int64_t ldd)
{
  __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + lds), r2 = _mm256_loadu_ps(src + 2 * lds);
  __m256 r3 = _mm256_loadu_ps(src + 3 * lds), r4 = _mm256_loadu_ps(src + 4 * lds), r5 = _mm256_loadu_ps(src + 5 * lds);
  __m256 r6 = _mm256_loadu_ps(src + 6 * lds), r7 = _mm256_loadu_ps(src + 7 * lds);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3);
  __m256 t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}

__attribute__((target("avx512f"))) static void pack_range(int64_t lo, int64_t hi, void *ctx)
{
  const pack_job *pj = ctx;
  for (int64_t jp = lo; jp < hi; jp++) {
    float *pn = pj->dst + jp * NR * pj->k;
    int64_t nr = pj->n - jp * NR < NR ? pj->n - jp * NR : NR, c8 = nr / 8 * 8, k8 = pj->k / 8 * 8;
    for (int64_t c = 0; c < c8; c += 8) { /* 8x8 blocks through registers */
      const float *src = pj->x + (jp * NR + c) * pj->ldx;
      for (int64_t p = 0; p < k8; p += 8) transpose8(src + p, pj->ldx, pn + p * NR + c, NR);
      for (int64_t r = 0; r < 8; r++)
        for (int64_t p = k8; p < pj->k; p++) pn[p * NR + c + r] = src[r * pj->ldx + p];
    }
    for (int64_t c = c8; c < nr; c++) {
      const float *src = pj->x + (jp * NR + c) * pj->ldx;
      for (int64_t p = 0; p < pj->k; p++) pn[p * NR + c] = src[p];
    }
  }
}

static int gemm_run(int transa, int transb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                    const float *b, int64_t ldb, float beta, const float *bias, float *c, int64_t ldc);

/* Products of 1-3 rows (a generation step, a cell at batch 1) that OpenBLAS would run with its
 * packing (the packing cost most of the time): C' = A @ op(B) straight from the operands, each
 * output the same chain of FMAs from zero over k in order that OpenBLAS's kernels run when k is one
 * block (k <= SMALLM_KMAX), then C + acc (beta = 1) or acc (beta = 0), so the same bits. op(B) = B
 * [k, n] (rows of 64 outputs) or B^T with B [n, k] (k contiguous; 16x16 blocks transposed in
 * registers, 16 outputs at a time). */
#define SMALLM_KMAX 320
__attribute__((target("avx512f"))) static inline __m512 fin(float beta, __mmask16 km, const float *c, __m512 v)
{
  return beta != 0.0f ? _mm512_add_ps(_mm512_maskz_loadu_ps(km, c), v) : v;
}
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void smallm_nn(
  int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
  int64_t ldc)
{
  for (int64_t j = 0; j < n; j += 64) {
    __mmask16 km[4];
    for (int u = 0; u < 4; u++) {
      int64_t rem = n - j - 16 * u;
      km[u] = rem >= 16 ? 0xFFFF : rem <= 0 ? 0 : (__mmask16)((1u << rem) - 1);
    }
    __m512 acc[3][4];
    for (int r = 0; r < 3; r++) for (int u = 0; u < 4; u++) acc[r][u] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p++) {
      const float *bp = b + p * ldb + j;
      __m512 bv[4];
      for (int u = 0; u < 4; u++) bv[u] = _mm512_maskz_loadu_ps(km[u], bp + 16 * u);
      for (int r = 0; r < 3; r++) {
        if (r >= m) break;
        __m512 av = _mm512_set1_ps(a[r * lda + p]);
        for (int u = 0; u < 4; u++) acc[r][u] = _mm512_fmadd_ps(av, bv[u], acc[r][u]);
      }
    }
    for (int r = 0; r < 3 && r < m; r++)
      for (int u = 0; u < 4; u++)
        if (km[u]) {
          float *cp = c + r * ldc + j + 16 * u;
          _mm512_mask_storeu_ps(cp, km[u], fin(beta, km[u], cp, acc[r][u]));
        }
  }
}
/* r[i] = row i of a 16x16 block -> r[q] = column q */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void tr16(__m512 r[16])
{
  __m512 t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int q = 0; q < 4; q++) {
    t[q] = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x88);
    t[4 + q] = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xdd);
    t[8 + q] = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x88);
    t[12 + q] = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xdd);
  }
  for (int q = 0; q < 4; q++) {
    r[q] = _mm512_shuffle_f32x4(t[q], t[8 + q], 0x88);
    r[8 + q] = _mm512_shuffle_f32x4(t[q], t[8 + q], 0xdd);
    r[4 + q] = _mm512_shuffle_f32x4(t[4 + q], t[12 + q], 0x88);
    r[12 + q] = _mm512_shuffle_f32x4(t[4 + q], t[12 + q], 0xdd);
  }
}
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void smallm_nt(
  int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
  int64_t ldc)
{
  for (int64_t j = 0; j < n; j += 16) {
    int64_t nr = n - j < 16 ? n - j : 16;
    __mmask16 kn = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
    const float *w[16];
    for (int i = 0; i < 16; i++) w[i] = b + (j + (i < nr ? i : nr - 1)) * ldb;
    __m512 acc[3] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t p0 = 0; p0 < k; p0 += 16) {
      int64_t kk = k - p0 < 16 ? k - p0 : 16;
      __mmask16 kp = kk >= 16 ? 0xFFFF : (__mmask16)((1u << kk) - 1);
      __m512 x[16];
      for (int i = 0; i < 16; i++) x[i] = _mm512_maskz_loadu_ps(kp, w[i] + p0);
      tr16(x);
      for (int64_t p = 0; p < kk; p++)
        for (int r = 0; r < 3; r++) {
          if (r >= m) break;
          acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + p0 + p]), x[p], acc[r]);
        }
    }
    for (int r = 0; r < 3 && r < m; r++) {
      float *cp = c + r * ldc + j;
      _mm512_mask_storeu_ps(cp, kn, fin(beta, kn, cp, acc[r]));
    }
  }
}
__attribute__((target("avx512f"))) static void smallm(int transb, int64_t m, int64_t n, int64_t k, const float *a,
                                                      int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                                                      int64_t ldc)
{
  /* m as a constant in each copy: the row loops unroll */
  if (transb) {
    if (m == 1) smallm_nt(1, n, k, a, lda, b, ldb, beta, c, ldc);
    else if (m == 2) smallm_nt(2, n, k, a, lda, b, ldb, beta, c, ldc);
    else smallm_nt(3, n, k, a, lda, b, ldb, beta, c, ldc);
  } else {
    if (m == 1) smallm_nn(1, n, k, a, lda, b, ldb, beta, c, ldc);
    else if (m == 2) smallm_nn(2, n, k, a, lda, b, ldb, beta, c, ldc);
    else smallm_nn(3, n, k, a, lda, b, ldb, beta, c, ldc);
  }
}

int dpl_sgemm_avx512(int transa, int transb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
  return gemm_run(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, NULL, c, ldc);
}

int dpl_sgemm_avx512_bias(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                          const float *bias, float *c, int64_t ldc)
{
  return gemm_run(0, 0, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, bias, c, ldc);
}

int dpl_sgemm_prefers_blas(int transb, int64_t m, int64_t n, int64_t k)
{
  pthread_once(&avx_once, avx_probe);
  if (m < 4) return 0; /* products of 1-3 rows: smallm's own rule (gemm_run) */
  return m * n * k < (transb && m > 16 && n > 16 ? own_min_nt : own_min);
}

/* columns of the tile grid for n columns: whole NR panels, a last one of up to 16 runs half-width */
static inline int64_t padded_cols(int64_t n) { return n / NR * NR + (n % NR == 0 ? 0 : n % NR <= 16 ? 16 : NR); }

static int gemm_run(int transa, int transb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                    const float *b, int64_t ldb, float beta, const float *bias, float *c, int64_t ldc)
{
  pthread_once(&avx_once, avx_probe);
  if (avx_ok && small_ok && !transa && m >= 1 && m < 4 && n >= 16 && k >= 1 && k <= SMALLM_KMAX && alpha == 1.0f &&
      (beta == 0.0f || beta == 1.0f) && !bias) {
    smallm(transb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return 1;
  }
  /* small products: OpenBLAS's lower fixed cost wins (own_min); A^T B^T is left to it too */
  if (!avx_ok || alpha == 0.0f || (transa && transb) || m < 4 || n < 8 || k < 4 || m * n * k < (INT64_C(1) << 15))
    return 0;
  /* threads only for products big enough to repay the split */
  int par = dpl_threads() > 1 && m * n * k >= par_min;
  gemm_job j = {0};
  j.alpha = alpha;
  j.beta = beta;
  j.bias = transb ? NULL : bias; /* C' = C on this path: the bias runs along its rows */
  j.k = k;
  float *packed = NULL;
  if (!transb) { /* both operands in place */
    j.a = a; j.rsa = transa ? 1 : lda; j.csa = transa ? lda : 1;
    j.b = b; j.rsb = ldb;
    j.c = c; j.rsc = ldc; j.csc = 1;
    j.m = m; j.n = n;
  } else {
    /* A @ B^T, both k-contiguous: pack one as the B operand, read the other in
     * place as the A operand (C' = C^T when A is the packed one); the choice
     * that pads the tile grid least, then the one that packs less */
    int64_t pad_swap = (n + MR - 1) / MR * MR * padded_cols(m);
    int64_t pad_keep = (m + MR - 1) / MR * MR * padded_cols(n);
    int swap = pad_swap < pad_keep || (pad_swap == pad_keep && m < n);
    const float *x = swap ? a : b, *y = swap ? b : a;
    int64_t ldx = swap ? lda : ldb, ldy = swap ? ldb : lda, nx = swap ? m : n, ny = swap ? n : m;
    int64_t npan = (nx + NR - 1) / NR;
    packed = aligned_alloc(64, (size_t)(npan * NR * k * 4 + 63) / 64 * 64);
    if (!packed) return 0;
    pack_job pj = {x, ldx, nx, k, packed};
    if (par) dpl_parallel_for(npan, 1, pack_range, &pj);
    else pack_range(0, npan, &pj);
    j.a = y; j.rsa = ldy; j.csa = 1;
    j.b = packed; j.packed = 1; j.rsb = NR;
    j.c = c; j.rsc = swap ? 1 : ldc; j.csc = swap ? ldc : 1;
    j.m = ny; j.n = nx;
  }
  int64_t npan = (j.n + NR - 1) / NR;
  if (par) dpl_parallel_for(npan, 1, panels_range, &j);
  else panels_range(0, npan, &j);
  free(packed);
  return 1;
}

#else
int dpl_sgemm_avx512_bias(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                          const float *bias, float *c, int64_t ldc)
{
  (void)m; (void)n; (void)k; (void)a; (void)lda; (void)b; (void)ldb; (void)bias; (void)c; (void)ldc;
  return 0;
}
int dpl_sgemm_prefers_blas(int transb, int64_t m, int64_t n, int64_t k)
{
  (void)transb; (void)m; (void)n; (void)k;
  return 1;
}
int dpl_sgemm_avx512(int transa, int transb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
  (void)transa; (void)transb; (void)m; (void)n; (void)k; (void)alpha; (void)a; (void)lda; (void)b; (void)ldb;
  (void)beta; (void)c; (void)ldc;
  return 0;
}
#endif
