// t_index.cpp: runs k_index_add and k_scatter_add (src/cuda/dpl_cuda_index.cu) on uint8 and bool under
// emu.h against the CPU's add_into rules: colliding indices, bytes at every offset in a word, strided
// self, bool bytes other than 0/1, a bad index (skipped and reported).
#include "emu.h"
enum { DPL_CU_MAXDIM = 8 };
typedef struct dpl_cu_index {
  int32_t ndim, dim;
  int64_t n, bound;
  int64_t shape[DPL_CU_MAXDIM];
  int64_t astride[DPL_CU_MAXDIM];
  int64_t sstride[DPL_CU_MAXDIM];
} dpl_cu_index;
#define DPL_GRID_STRIDE(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)
#include "index_body.inc"
static uint64_t rs = 88172645463325252ull;
static uint64_t rnd() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }
static int cpu_add(int isbool, int a, int b) { return isbool ? ((a ? 1 : 0) + (b ? 1 : 0)) != 0 : (uint8_t)(a + b); }
int main() {
  int fails = 0, runs = 0;
  for (int isbool = 0; isbool < 2; isbool++)
  for (int off = 0; off < 4; off++)
  for (int rep = 0; rep < 6; rep++) {
    // index_add_: a [outer, D, inner] at byte offset off, src [outer, n, inner]; few rows, many duplicates
    int64_t outer = 1 + rnd() % 3, D = 1 + rnd() % 4, inner = 1 + rnd() % 5, n = rnd() % 40;
    std::vector<uint8_t> buf(off + outer * D * inner + 8), src(outer * n * inner), ref;
    std::vector<int64_t> ix(n);
    for (auto &x : buf) x = isbool ? (uint8_t)(rnd() % 3) : (uint8_t)rnd(); // bool: 2 = a byte other than 0/1
    for (auto &x : src) x = isbool ? (uint8_t)(rnd() % 4 == 0) : (uint8_t)rnd();
    for (auto &x : ix) x = (int64_t)(rnd() % D);
    if (rep == 5 && n > 0) ix[n / 2] = D; // one bad index: skipped, reported
    ref = buf;
    uint8_t *a = ref.data() + off;
    unsigned long long want_bad = ~0ULL;
    for (int64_t j = 0; j < n; j++) if (ix[j] >= D && (unsigned long long)j < want_bad) want_bad = j;
    for (int64_t o = 0; o < outer; o++) for (int64_t j = 0; j < n; j++) for (int64_t i = 0; i < inner; i++)
      if (ix[j] < D) { uint8_t *p = a + (o * D + ix[j]) * inner + i; *p = cpu_add(isbool, *p, src[(o * n + j) * inner + i]); }
    unsigned long long bad = ~0ULL;
    int64_t total = outer * n * inner;
    if (total > 0)
      emu_launch(dim3(3), dim3(32), [&] {
        if (isbool) k_index_add<bool8>(outer, D, inner, n, ix.data(), (const bool8 *)src.data(), (bool8 *)(buf.data() + off), &bad);
        else k_index_add<uint8_t>(outer, D, inner, n, ix.data(), src.data(), buf.data() + off, &bad); });
    runs++;
    if (buf != ref || bad != want_bad) { fails++; printf("FAIL index_add bool=%d off=%d rep=%d\n", isbool, off, rep); }
    // scatter_add_: a [4, 6] (strided: transposed storage), idx/src [4, 5] along dim 1
    dpl_cu_index g; memset(&g, 0, sizeof g);
    g.ndim = 2; g.dim = 1; g.shape[0] = 4; g.shape[1] = 5; g.n = 20; g.bound = 6;
    g.astride[0] = 1; g.astride[1] = 4; g.sstride[0] = 5; g.sstride[1] = 1;
    std::vector<uint8_t> sb(off + 24 + 8), ss(20), sr;
    std::vector<int64_t> si(20);
    for (auto &x : sb) x = isbool ? (uint8_t)(rnd() % 3) : (uint8_t)rnd();
    for (auto &x : ss) x = isbool ? (uint8_t)(rnd() % 3 == 0) : (uint8_t)rnd();
    for (auto &x : si) x = (int64_t)(rnd() % 2); // heavy collisions
    sr = sb;
    for (int r = 0; r < 4; r++) for (int c = 0; c < 5; c++) {
      uint8_t *p = sr.data() + off + r * 1 + si[r * 5 + c] * 4; *p = cpu_add(isbool, *p, ss[r * 5 + c]); }
    bad = ~0ULL;
    emu_launch(dim3(2), dim3(8), [&] {
      if (isbool) k_scatter_add<bool8>(g, si.data(), (const bool8 *)ss.data(), (bool8 *)(sb.data() + off), &bad);
      else k_scatter_add<uint8_t>(g, si.data(), ss.data(), sb.data() + off, &bad); });
    runs++;
    if (sb != sr || bad != ~0ULL) { fails++; printf("FAIL scatter_add bool=%d off=%d rep=%d\n", isbool, off, rep); }
  }
  printf("%d runs, %d failures\n", runs, fails);
  return fails != 0;
}
