// t_igemm.cpp: runs k_igemm (src/cuda/dpl_cuda_igemm.cu) on the host under emu.h against the CPU's
// int64 loop (ref_igemm of dpl_tensor_blas.c): shapes with 0/1/partial tiles, transposes, padded leading
// dimensions, batches, a grid smaller than the tile count, alpha/beta, values that wrap.
#include "emu.h"
#include "igemm_body.inc"
// the CPU's reference (dpl_tensor_blas.c REF_GEMM with T = int64_t), built with -fwrapv
static void ref_igemm(int ta, int tb, int64_t m, int64_t n, int64_t k, int64_t alpha, const int64_t *a, int64_t lda,
                      const int64_t *b, int64_t ldb, int64_t beta, int64_t *c, int64_t ldc) {
  for (int64_t i = 0; i < m; i++) {
    int64_t *cr = c + i * ldc;
    for (int64_t j = 0; j < n; j++) cr[j] = beta == 0 ? 0 : beta * cr[j];
    for (int64_t p = 0; p < k; p++) {
      int64_t av = alpha * (ta ? a[p * lda + i] : a[i * lda + p]);
      if (!tb) { const int64_t *br = b + p * ldb; for (int64_t j = 0; j < n; j++) cr[j] += av * br[j]; }
      else { for (int64_t j = 0; j < n; j++) cr[j] += av * b[j * ldb + p]; }
    }
  }
}
static uint64_t rs = 88172645463325252ull;
static uint64_t rnd() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }
int main() {
  int dims[] = {0, 1, 5, 16, 17, 33};
  int fails = 0, runs = 0;
  for (int mi = 0; mi < 6; mi++) for (int ni = 0; ni < 6; ni++) for (int ki = 0; ki < 6; ki++) for (int ta = 0; ta < 2; ta++) for (int tb = 0; tb < 2; tb++) {
    int64_t m = dims[mi], n = dims[ni], k = dims[ki];
    if ((mi + ni + ki + ta + tb) % 3 && !(m == 0 || n == 0 || k == 0)) continue; // thin the sweep
    int big = (mi + ki) % 2, batch = 1 + (ni % 2);
    int64_t lda = (ta ? m : k) + (mi % 3), ldb = (tb ? k : n) + (ki % 2), ldc = n + (ni % 3);
    lda = lda < 1 ? 1 : lda;
    ldb = ldb < 1 ? 1 : ldb;
    ldc = ldc < 1 ? 1 : ldc;
    int64_t arows = ta ? k : m, brows = tb ? n : k;
    int64_t sa = arows * lda + 3, sb = brows * ldb + 1, sc = m * ldc + 2;
    std::vector<int64_t> A(sa * batch + 1), B(sb * batch + 1), C(sc * batch + 1), R;
    for (auto &x : A) x = big ? (int64_t)rnd() : (int64_t)(rnd() % 101) - 50;
    for (auto &x : B) x = big ? (int64_t)rnd() : (int64_t)(rnd() % 101) - 50;
    for (auto &x : C) x = (int64_t)rnd();
    int64_t alpha = (runs % 4 == 0) ? 1 : (int64_t)(rnd() % 7) - 3, beta = (runs % 3 == 0) ? 0 : (runs % 3 == 1 ? 1 : (int64_t)rnd());
    R = C;
    for (int bi = 0; bi < batch; bi++)
      ref_igemm(ta, tb, m, n, k, alpha, A.data() + bi * sa, lda, B.data() + bi * sb, ldb, beta, R.data() + bi * sc, ldc);
    int64_t tiles = batch * ((m + 15) / 16) * ((n + 15) / 16);
    if (m > 0 && n > 0) {
      unsigned grid = (unsigned)(tiles < 3 ? tiles : 3);
      emu_launch(dim3(grid), dim3(16, 16), [&] {
        k_igemm(ta, tb, m, n, k, (uint64_t)alpha, (const uint64_t *)A.data(), lda, (const uint64_t *)B.data(), ldb,
                (uint64_t)beta, (uint64_t *)C.data(), ldc, batch, sa, sb, sc); });
    }
    runs++;
    if (C != R) { fails++; printf("FAIL m=%ld n=%ld k=%ld ta=%d tb=%d batch=%d alpha=%ld beta=%ld\n", (long)m, (long)n, (long)k, ta, tb, batch, (long)alpha, (long)beta); }
  }
  printf("%d runs, %d failures\n", runs, fails);
  return fails != 0;
}
