/* dpl_tensor_winograd.c: float32 2-d convolution by Winograd's F(2x2, 3x3) for
 * 3x3 kernels, stride 1, dilation 1, any padding and groups (NCHW), on CPUs with
 * AVX-512F. Each 2x2 output tile comes from a 4x4 input tile: V = B^T d B, M = U V
 * summed over the input channels (16 products [Og, Cg] @ [Cg, tiles], one per
 * position in the tile), Y = A^T M A, with U = G g G^T the transformed kernels:
 * 16 multiply-adds per 4 outputs and input channel instead of 36. The tiles of the
 * batch are numbered sample by sample, row by row, and go through in chunks sized
 * for L2 (V and M of a chunk), chunks split across threads (the results do not
 * depend on the count); the transforms take a chunk's tiles 16 to a vector whatever
 * tile rows or samples they come from (small maps fill the lanes). dpl_conv2d calls it where dpl_conv_winograd_fits says so,
 * and dpl_conv2d_backward for grad_input (a conv of grad_out with flipped kernels).
 * The weight gradient (dpl_conv_winograd_wgrad_f32) runs the same tiles: dL/dU[xi] =
 * sum over tiles of Z V^T (Z = A dY A^T of the 2x2 grad_out tiles), 16 products
 * [Og, tiles] @ [tiles, Cg] per chunk summed into a fixed number of slots (fixed by
 * the shape: the sums do not depend on the thread count), then dL/dg = G^T dL/dU G.
 * The im2col path of dpl_tensor_conv.c does everything else. */
#include "dpl_tensor_internal.h"
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(DPL_NO_AVX512)
#include <immintrin.h>

typedef struct wino {
  int64_t N, C, H, W, O, groups, Cg, Og, ph, pw, OH, OW, TH, TW, T1, TB;
  int64_t ld; /* row length of V and M: TB rounded up to 32 (whole column blocks) and 16 floats of slack */
  int64_t vs, ms; /* distance between the 16 matrices of V and of M: not a multiple of 4 KiB, whose
                     16 rows read together would share one L1 set */
  const float *x, *bias;
  float *out;
  float *u8;       /* transformed kernels: [groups][16][Og/8][Cg][8], Og rounded up with zero rows */
  atomic_int fail; /* a thread could not get its buffers */
  /* the weight gradient only: */
  const float *gy;     /* grad_out [N, O, OH, OW] */
  int64_t CP, OP;      /* Cg rounded up to 32 (panels), Og up to 8 (row blocks) */
  int64_t nch, slots;  /* chunks, and slots: slot k sums chunks [k*nch/slots, (k+1)*nch/slots) */
  float *acc;          /* [slots][groups][16][OP][CP] partial sums of dL/dU */
} wino;

static int have_avx512(void) { return dpl_cpu_avx512f(); }

int dpl_conv_winograd_fits(int64_t Cg, int64_t Og, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw)
{
  /* the transforms cost O(Cg + Og) per tile, the products O(Cg * Og): few channels
   * leave too little product to win back the transforms */
  return kh == 3 && kw == 3 && sh == 1 && sw == 1 && dh == 1 && dw == 1 && Cg >= 8 && Og >= 8 && Cg * Og >= 256 &&
         have_avx512();
}

/* U = G g G^T for every kernel, G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1] (in
 * float64, rounded once) */
static void kernel_transform(const wino *g, const float *w)
{
  const int64_t OB = (g->Og + 7) / 8;
  for (int64_t gr = 0; gr < g->groups; gr++)
    for (int64_t o = 0; o < g->Og; o++)
      for (int64_t c = 0; c < g->Cg; c++) {
        const float *k = w + ((gr * g->Og + o) * g->Cg + c) * 9;
        double t[4][3], u[4][4];
        for (int q = 0; q < 3; q++) {
          double a = k[q], b = k[3 + q], d = k[6 + q];
          t[0][q] = a;
          t[1][q] = 0.5 * (a + b + d);
          t[2][q] = 0.5 * (a - b + d);
          t[3][q] = d;
        }
        for (int r = 0; r < 4; r++) {
          u[r][0] = t[r][0];
          u[r][1] = 0.5 * (t[r][0] + t[r][1] + t[r][2]);
          u[r][2] = 0.5 * (t[r][0] - t[r][1] + t[r][2]);
          u[r][3] = t[r][2];
        }
        for (int xi = 0; xi < 16; xi++)
          g->u8[(((gr * 16 + xi) * OB + o / 8) * g->Cg + c) * 8 + o % 8] = (float)u[xi / 4][xi % 4];
      }
}

/* The tiles of a chunk go through the transforms 16 at a time, one per vector lane: piece
 * p is the columns [16p, 16p + 16) of the chunk's buffers, whatever tile rows (or samples)
 * they come from, so that rows of fewer than 16 tiles (7 on 14x14 maps) still fill the
 * lanes. A part is the run of a piece's tiles in one tile row: sample s, tile row th, tile
 * columns [tw, tw + n), in lanes [a, a + n) of its piece. */
typedef struct part {
  int64_t s, th, tw, n, a;
  int64_t xrow;  /* offset in x of sample s, channel 0, input row 2th - ph (maybe outside the input) */
  int64_t orow;  /* offset in the output (and grad_out) of sample s, channel 0, output row 2th */
  int64_t cbi, cbo; /* the input and output columns of the piece's lane 0 position: 2(tw - a) - pw, 2(tw - a) */
  int rows;      /* bit k: input row 2th - ph + k is inside the input; bit 4: output row 2th + 1 is */
  __mmask16 mi[16]; /* mi[4k + l]: input row k's loads from cbi, +16, +2, +18: the part's positions
                       [2a, 2a + 2n) inside the row, none for a row outside the input */
  __mmask16 mo[4];  /* output positions from cbo, +16, of rows 2th and 2th + 1: [2a, 2a + min(2n, OW - 2tw)),
                       none for a row outside the output */
} part;
/* lanes [lo, hi) of 16, clamped */
static inline __mmask16 lanes_mask(int64_t lo, int64_t hi)
{
  if (lo < 0) lo = 0;
  if (hi > 16) hi = 16;
  if (hi <= lo) return 0;
  return (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
}
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* the pieces of tiles [t0, t0 + nt): piece p is parts [ps[p], ps[p + 1]); returns the number
 * of pieces. At most nt + (nt + 15) / 16 parts. The offsets and masks are worked out here
 * once per chunk, for all its channels. */
static int64_t chunk_parts(const wino *g, int64_t t0, int64_t nt, part *pt, int64_t *ps)
{
  const int64_t H = g->H, W = g->W, OH = g->OH, OW = g->OW;
  int64_t np = (nt + 15) / 16, k = 0;
  for (int64_t p = 0; p < np; p++) {
    int64_t e = t0 + (16 * p + 16 < nt ? 16 * p + 16 : nt);
    ps[p] = k;
    for (int64_t t = t0 + 16 * p; t < e; k++) {
      part *r = pt + k;
      int64_t q = t % g->T1;
      r->s = t / g->T1;
      r->th = q / g->TW;
      r->tw = q % g->TW;
      r->n = g->TW - r->tw < e - t ? g->TW - r->tw : e - t;
      r->a = t - t0 - 16 * p;
      t += r->n;
      const int64_t h0 = 2 * r->th - g->ph, lo = 2 * r->a, hi = 2 * (r->a + r->n);
      r->xrow = r->s * g->C * H * W + h0 * W;
      r->orow = (r->s * g->O * OH + 2 * r->th) * OW;
      r->cbo = 2 * (r->tw - r->a);
      r->cbi = r->cbo - g->pw;
      r->rows = (2 * r->th + 1 < OH) << 4;
      for (int kk = 0; kk < 4; kk++) r->rows |= (h0 + kk >= 0 && h0 + kk < H) << kk;
      const int64_t l0 = max64(lo, -r->cbi), e0 = min64(hi, W - r->cbi), l2 = max64(lo, -r->cbi - 2),
                    e2 = min64(hi, W - r->cbi - 2), eo = lo + min64(2 * r->n, OW - 2 * r->tw);
      for (int kk = 0; kk < 4; kk++) {
        const int in = r->rows >> kk & 1;
        r->mi[4 * kk] = in ? lanes_mask(l0, e0) : 0;
        r->mi[4 * kk + 1] = in ? lanes_mask(l0 - 16, e0 - 16) : 0;
        r->mi[4 * kk + 2] = in ? lanes_mask(l2, e2) : 0;
        r->mi[4 * kk + 3] = in ? lanes_mask(l2 - 16, e2 - 16) : 0;
      }
      r->mo[0] = lanes_mask(lo, eo);
      r->mo[1] = lanes_mask(lo - 16, eo - 16);
      r->mo[2] = r->rows >> 4 & 1 ? r->mo[0] : 0;
      r->mo[3] = r->rows >> 4 & 1 ? r->mo[1] : 0;
    }
  }
  ps[np] = k;
  return np;
}

/* software prefetch distances, in channels: the input rows the next runs read, the output
 * rows they write (stores that miss in cache stall the transforms) */
#define PF_C 2
#define PF_O 2

/* One piece of 16 tiles of input channel c of group gr, lane i the piece's tile i: the
 * 4x4 input values of each part come from masked loads of its four input rows, placed
 * so that the part's tiles land in its own lanes (a part at lanes [a, a + n) loads from
 * 2a floats before its first column, positions [2a, 2a + 2n) of the 32; the padding and
 * the other parts' positions are masked off, never touched, and read as zero or keep the
 * other parts' values), then split into even and odd columns by permutes. v: v[xi][j0]
 * of the piece's first tile (rows vs apart); all 16 lanes are stored (the buffer rows
 * have the slack). */
__attribute__((target("avx512f"))) static void input_piece_512(const wino *g, int64_t gr, int64_t c, const part *pt,
                                                               int64_t npt, float *v, int64_t vs)
{
  const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i od = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  const int64_t H = g->H, W = g->W;
  __m512 p0[4], p1[4], q0[4], q1[4]; /* row k: columns from the part's base, +16, +2, +18 */
#pragma GCC unroll 4
  for (int k = 0; k < 4; k++) p0[k] = p1[k] = q0[k] = q1[k] = _mm512_setzero_ps();
  const float *xc = g->x + (gr * g->Cg + c) * H * W;
  for (int64_t r = 0; r < npt; r++) {
    const part *pr = pt + r;
    const float *xr = xc + pr->xrow + pr->cbi; /* the masks keep every access inside the row */
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) { /* rows outside the input: no lane loaded (no branch: the accumulators stay in registers) */
      p0[k] = _mm512_mask_loadu_ps(p0[k], pr->mi[4 * k], xr + k * W);
      p1[k] = _mm512_mask_loadu_ps(p1[k], pr->mi[4 * k + 1], xr + k * W + 16);
      q0[k] = _mm512_mask_loadu_ps(q0[k], pr->mi[4 * k + 2], xr + k * W + 2);
      q1[k] = _mm512_mask_loadu_ps(q1[k], pr->mi[4 * k + 3], xr + k * W + 18);
    }
  }
  __m512 d[4][4]; /* d[k][l], lane i: row k, column l of tile i's 4x4 input */
  for (int k = 0; k < 4; k++) {
    d[k][0] = _mm512_permutex2var_ps(p0[k], ev, p1[k]);
    d[k][1] = _mm512_permutex2var_ps(p0[k], od, p1[k]);
    d[k][2] = _mm512_permutex2var_ps(q0[k], ev, q1[k]);
    d[k][3] = _mm512_permutex2var_ps(q0[k], od, q1[k]);
  }
  for (int l = 0; l < 4; l++) { /* B^T d, in place: rows 0..3 become e0..e3 */
    __m512 a0 = d[0][l], a1 = d[1][l], a2 = d[2][l], a3 = d[3][l];
    d[0][l] = _mm512_sub_ps(a0, a2);
    d[1][l] = _mm512_add_ps(a1, a2);
    d[2][l] = _mm512_sub_ps(a2, a1);
    d[3][l] = _mm512_sub_ps(a1, a3);
  }
  for (int a = 0; a < 4; a++) { /* (B^T d) B */
    float *va = v + 4 * a * vs;
    _mm512_storeu_ps(va, _mm512_sub_ps(d[a][0], d[a][2]));
    _mm512_storeu_ps(va + vs, _mm512_add_ps(d[a][1], d[a][2]));
    _mm512_storeu_ps(va + 2 * vs, _mm512_sub_ps(d[a][2], d[a][1]));
    _mm512_storeu_ps(va + 3 * vs, _mm512_sub_ps(d[a][1], d[a][3]));
  }
}

/* channel by channel (each plane read in order, each row of V written in order) */
__attribute__((target("avx512f"))) static void input_transform_512(const wino *g, int64_t gr, const part *pt,
                                                                   const int64_t *ps, int64_t np, float *v)
{
  const int64_t LD = g->ld, Cg = g->Cg, vs = g->vs;
  for (int64_t c = 0; c < Cg; c++)
    for (int64_t p = 0; p < np; p++) {
      if (c + PF_C < Cg) /* the rows these runs read PF_C channels on */
        for (int64_t r = ps[p]; r < ps[p + 1]; r++) {
          const float *xc = g->x + (gr * Cg + c + PF_C) * g->H * g->W + pt[r].xrow;
          for (int k = 0; k < 4; k++)
            if (pt[r].rows >> k & 1) {
              const char *q = (const char *)(xc + k * g->W);
              __builtin_prefetch(q, 0, 3);
              __builtin_prefetch(q + (g->W * 4 - 1), 0, 3);
            }
        }
      input_piece_512(g, gr, c, pt + ps[p], ps[p + 1] - ps[p], v + c * LD + 16 * p, vs);
    }
}

/* output channel by output channel (each row of M read in order, each output plane
 * written in order), a piece of 16 tiles at a time: the 2x2 tiles of lanes [a, a + n)
 * are the positions [2a, 2a + 2n) of the two interleaved rows, stored (masked to the
 * part's lanes and the output's columns) from 2a floats before the part's first column */
__attribute__((target("avx512f"))) static void output_transform_512(const wino *g, int64_t gr, const part *pt,
                                                                    const int64_t *ps, int64_t np, const float *m)
{
  const int64_t LD = g->ld, Og = g->Og, OH = g->OH, OW = g->OW, st = g->ms;
  const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  for (int64_t o = 0; o < Og; o++) {
    const __m512 bv = _mm512_set1_ps(g->bias ? g->bias[gr * Og + o] : 0.0f);
    const float *mo = m + o * LD;
    float *oc = g->out + (gr * Og + o) * OH * OW;
    for (int64_t p = 0; p < np; p++) {
      const float *mp = mo + 16 * p;
      __m512 s[4], df[4];
      for (int b = 0; b < 4; b++) {
        __m512 m0 = _mm512_loadu_ps(mp + b * st), m1 = _mm512_loadu_ps(mp + (4 + b) * st);
        __m512 m2 = _mm512_loadu_ps(mp + (8 + b) * st), m3 = _mm512_loadu_ps(mp + (12 + b) * st);
        s[b] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
        df[b] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
      }
      __m512 y00 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), s[2]), bv);
      __m512 y01 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s[1], s[2]), s[3]), bv);
      __m512 y10 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(df[0], df[1]), df[2]), bv);
      __m512 y11 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(df[1], df[2]), df[3]), bv);
      const __m512 r0lo = _mm512_permutex2var_ps(y00, lo, y01), r0hi = _mm512_permutex2var_ps(y00, hi, y01);
      const __m512 r1lo = _mm512_permutex2var_ps(y10, lo, y11), r1hi = _mm512_permutex2var_ps(y10, hi, y11);
      for (int64_t r = ps[p]; r < ps[p + 1]; r++) {
        const part *pr = pt + r;
        float *d0 = oc + pr->orow + pr->cbo; /* the masks keep every access inside the rows */
        const int row1 = pr->rows >> 4 & 1;
        if (o + PF_O < Og) { /* the rows this run writes PF_O channels on: ask for them now (stores that miss stall) */
          const char *q = (const char *)(oc + PF_O * OH * OW + pr->orow + 2 * pr->tw),
                     *e = (const char *)(oc + PF_O * OH * OW + pr->orow + (1 + row1) * OW);
          for (; q < e; q += 64) __builtin_prefetch(q, 1, 3);
          __builtin_prefetch(e - 1, 1, 3);
        }
        _mm512_mask_storeu_ps(d0, pr->mo[0], r0lo);
        _mm512_mask_storeu_ps(d0 + 16, pr->mo[1], r0hi);
        _mm512_mask_storeu_ps(d0 + OW, pr->mo[2], r1lo); /* no lanes where row 2th + 1 is outside the output */
        _mm512_mask_storeu_ps(d0 + OW + 16, pr->mo[3], r1hi);
      }
    }
  }
}

/* M[xi] = U[xi] @ V[xi] for the nt tiles of a chunk, all 16 products: 8 output
 * channels by 32 tiles at a time in 16 accumulators, U packed as [xi][Og/8][Cg][8]
 * (rows past Og zero) so that the 8 broadcasts of a step read one line. V's columns
 * up to nt rounded up to 32 are read (the buffer has them); only rows < Og of M are
 * written, each in whole 32-column blocks. */
__attribute__((target("avx512f"))) static void products_512(const wino *g, const float *u8, const float *v, float *m,
                                                            int64_t nt)
{
  const int64_t Cg = g->Cg, Og = g->Og, LD = g->ld, OB = (Og + 7) / 8;
  for (int xi = 0; xi < 16; xi++) {
    const float *vx = v + xi * g->vs;
    float *mx = m + xi * g->ms;
    for (int64_t j = 0; j < nt; j += 32)
      for (int64_t ob = 0; ob < OB; ob++) {
        const float *up = u8 + (xi * OB + ob) * Cg * 8, *vp = vx + j;
        __m512 c0[8], c1[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) c0[r] = c1[r] = _mm512_setzero_ps();
        for (int64_t p = 0; p < Cg; p++, up += 8, vp += LD) {
          __m512 b0 = _mm512_loadu_ps(vp), b1 = _mm512_loadu_ps(vp + 16);
#pragma GCC unroll 8
          for (int r = 0; r < 8; r++) {
            __m512 a = _mm512_set1_ps(up[r]);
            c0[r] = _mm512_fmadd_ps(a, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(a, b1, c1[r]);
          }
        }
        float *mp = mx + ob * 8 * LD + j;
        int64_t rows = Og - ob * 8 < 8 ? Og - ob * 8 : 8;
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
          if (r < rows) {
            _mm512_storeu_ps(mp + r * LD, c0[r]);
            _mm512_storeu_ps(mp + r * LD + 16, c1[r]);
          }
      }
  }
}

static void chunks_range(int64_t lo, int64_t hi, void *ctx)
{
  wino *g = ctx;
  const int64_t TB = g->TB, Cg = g->Cg, Og = g->Og, total = g->N * g->T1;
  float *v = calloc((size_t)(16 * g->vs), sizeof(float)); /* zeros: the products read whole 32-column blocks */
  float *m = malloc((size_t)(16 * g->ms) * sizeof(float));
  part *pt = malloc((size_t)(TB + TB / 16 + 1) * sizeof(part));
  int64_t *ps = malloc((size_t)(TB / 16 + 2) * sizeof(int64_t));
  if (!v || !m || !pt || !ps) atomic_store(&g->fail, 1);
  else
    for (int64_t ch = lo; ch < hi; ch++) {
      int64_t t0 = ch * TB, nt = total - t0 < TB ? total - t0 : TB;
      int64_t np = chunk_parts(g, t0, nt, pt, ps);
      for (int64_t gr = 0; gr < g->groups; gr++) {
        input_transform_512(g, gr, pt, ps, np, v);
        products_512(g, g->u8 + gr * 16 * ((Og + 7) / 8 * 8) * Cg, v, m, nt);
        output_transform_512(g, gr, pt, ps, np, m);
      }
    }
  free(v);
  free(m);
  free(pt);
  free(ps);
}

/* ---- the weight gradient: dL/dU[xi] = sum over tiles of Z[xi] V[xi] (Z = A dY A^T
 * of the 2x2 grad_out tile, V = B^T d B of the input tile as in the forward), then
 * dL/dg = G^T (dL/dU) G ---- */

/* One piece of 16 tiles of output channel o of group gr, lane i the piece's tile i: for
 * each part, grad_out rows oh and oh + 1 loaded (masked: outside the output and the
 * part's positions [2a, 2a + 2n) read as zero or keep the other parts' values) from 2a
 * floats before its first column, then Z = A dY A^T with A = [1 0; 1 1; 1 -1; 0 -1],
 * stored as z[xi][j0] (rows zs apart), all 16 lanes */
__attribute__((target("avx512f"))) static void gout_piece_512(const wino *g, int64_t gr, int64_t o, const part *pt,
                                                              int64_t npt, float *z, int64_t zs)
{
  const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i od = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  const int64_t OW = g->OW;
  __m512 p0[2], p1[2];
  p0[0] = p0[1] = p1[0] = p1[1] = _mm512_setzero_ps();
  const float *gc = g->gy + (gr * g->Og + o) * g->OH * OW;
  for (int64_t r = 0; r < npt; r++) {
    const part *pr = pt + r;
    const float *q = gc + pr->orow + pr->cbo; /* the masks keep every access inside the rows */
    p0[0] = _mm512_mask_loadu_ps(p0[0], pr->mo[0], q);
    p1[0] = _mm512_mask_loadu_ps(p1[0], pr->mo[1], q + 16);
    p0[1] = _mm512_mask_loadu_ps(p0[1], pr->mo[2], q + OW); /* none where an odd-sized output has no row 2th + 1 */
    p1[1] = _mm512_mask_loadu_ps(p1[1], pr->mo[3], q + OW + 16);
  }
  __m512 e[2][4]; /* e[a][s]: row a of dY times A^T's columns: y0, y0 + y1, y0 - y1, -y1 */
  for (int a = 0; a < 2; a++) {
    __m512 y0 = _mm512_permutex2var_ps(p0[a], ev, p1[a]), y1 = _mm512_permutex2var_ps(p0[a], od, p1[a]);
    e[a][0] = y0;
    e[a][1] = _mm512_add_ps(y0, y1);
    e[a][2] = _mm512_sub_ps(y0, y1);
    e[a][3] = _mm512_sub_ps(_mm512_setzero_ps(), y1);
  }
  for (int q = 0; q < 4; q++) {
    _mm512_storeu_ps(z + q * zs, e[0][q]);
    _mm512_storeu_ps(z + (4 + q) * zs, _mm512_add_ps(e[0][q], e[1][q]));
    _mm512_storeu_ps(z + (8 + q) * zs, _mm512_sub_ps(e[0][q], e[1][q]));
    _mm512_storeu_ps(z + (12 + q) * zs, _mm512_sub_ps(_mm512_setzero_ps(), e[1][q]));
  }
}

/* z[xi][o][j] for the pieces of a chunk, output channel by output channel */
__attribute__((target("avx512f"))) static void gout_transform_512(const wino *g, int64_t gr, const part *pt,
                                                                  const int64_t *ps, int64_t np, float *z)
{
  const int64_t LD = g->ld, Og = g->Og, OH = g->OH, OW = g->OW;
  for (int64_t o = 0; o < Og; o++)
    for (int64_t p = 0; p < np; p++) {
      if (o + PF_C < Og) /* the two rows these runs read PF_C channels on */
        for (int64_t r = ps[p]; r < ps[p + 1]; r++) {
          const char *q = (const char *)(g->gy + (gr * Og + o + PF_C) * OH * OW + pt[r].orow);
          __builtin_prefetch(q, 0, 3);
          __builtin_prefetch(q + (2 * OW * 4 - 1), 0, 3);
        }
      gout_piece_512(g, gr, o, pt + ps[p], ps[p + 1] - ps[p], z + o * LD + 16 * p, g->ms);
    }
}

/* rows [c0, c0 + 8) x columns [j0, j0 + 8) of v (stride ldv) -> p[j][c] (stride 32) */
__attribute__((target("avx512f"))) static inline void transpose_8x8(const float *v, int64_t ldv, float *p)
{
  __m256 r[8], t[8];
  for (int q = 0; q < 8; q++) r[q] = _mm256_loadu_ps(v + q * ldv);
  for (int q = 0; q < 4; q++) {
    t[2 * q] = _mm256_unpacklo_ps(r[2 * q], r[2 * q + 1]);     /* c 2q, 2q+1 interleaved: j 0 1 | 4 5 */
    t[2 * q + 1] = _mm256_unpackhi_ps(r[2 * q], r[2 * q + 1]); /* j 2 3 | 6 7 */
  }
  for (int h = 0; h < 2; h++) { /* h: the pair of columns j within each 128-bit half (0 1, 2 3) */
    __m256 a = t[h], b = t[2 + h], c = t[4 + h], d = t[6 + h];
    __m256 u0 = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)), u1 = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u2 = _mm256_shuffle_ps(c, d, _MM_SHUFFLE(1, 0, 1, 0)), u3 = _mm256_shuffle_ps(c, d, _MM_SHUFFLE(3, 2, 3, 2));
    /* u0: column 2h, c 0..3 | column 2h + 4, c 0..3; u2 the same for c 4..7 */
    _mm256_storeu_ps(p + (2 * h) * 32, _mm256_permute2f128_ps(u0, u2, 0x20));
    _mm256_storeu_ps(p + (2 * h + 1) * 32, _mm256_permute2f128_ps(u1, u3, 0x20));
    _mm256_storeu_ps(p + (2 * h + 4) * 32, _mm256_permute2f128_ps(u0, u2, 0x31));
    _mm256_storeu_ps(p + (2 * h + 5) * 32, _mm256_permute2f128_ps(u1, u3, 0x31));
  }
}

/* V[xi] ([Cg, nt], rows LD apart) -> panels of 32 channels, pk[panel][j][32]; lanes
 * past Cg are never written (the buffer starts zeroed) */
__attribute__((target("avx512f"))) static void pack_v(const wino *g, const float *vx, int64_t nt, float *pk)
{
  const int64_t Cg = g->Cg, LD = g->ld, n8 = nt / 8 * 8;
  for (int64_t c0 = 0; c0 < Cg; c0 += 8) {
    float *pp = pk + (c0 / 32) * 32 * nt + c0 % 32;
    const float *vr = vx + c0 * LD;
    if (c0 + 8 <= Cg) {
      for (int64_t j = 0; j < n8; j += 8) transpose_8x8(vr + j, LD, pp + j * 32);
      for (int64_t c = 0; c < 8; c++)
        for (int64_t j = n8; j < nt; j++) pp[j * 32 + c] = vr[c * LD + j];
    } else
      for (int64_t c = 0; c < Cg - c0; c++)
        for (int64_t j = 0; j < nt; j++) pp[j * 32 + c] = vr[c * LD + j];
  }
}

/* acc[xi][o][c] += sum over j < nt of z[xi][o][j] * V[xi][c][j]: 8 output channels by
 * a 32-channel panel at a time in 16 accumulators (the packed panel as vectors, Z
 * broadcast from 8 rows; rows past Og repeat the last one and land in the padding) */
__attribute__((target("avx512f"))) static void wgrad_products_512(const wino *g, const float *v, const float *z,
                                                                  float *pk, float *acc, int64_t nt)
{
  const int64_t Og = g->Og, LD = g->ld, CP = g->CP, OP = g->OP;
  for (int xi = 0; xi < 16; xi++) {
    pack_v(g, v + xi * g->vs, nt, pk);
    const float *zx = z + xi * g->ms;
    float *ax = acc + xi * OP * CP;
    for (int64_t ob = 0; ob < OP; ob += 8)
      for (int64_t cp = 0; cp < CP; cp += 32) {
        const float *zr[8];
        for (int r = 0; r < 8; r++) zr[r] = zx + (ob + r < Og ? ob + r : Og - 1) * LD;
        const float *bp = pk + cp * nt;
        __m512 c0[8], c1[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) c0[r] = c1[r] = _mm512_setzero_ps();
        for (int64_t j = 0; j < nt; j++, bp += 32) {
          __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
#pragma GCC unroll 8
          for (int r = 0; r < 8; r++) {
            __m512 a = _mm512_set1_ps(zr[r][j]);
            c0[r] = _mm512_fmadd_ps(a, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(a, b1, c1[r]);
          }
        }
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
          float *ap = ax + (ob + r) * CP + cp;
          _mm512_storeu_ps(ap, _mm512_add_ps(_mm512_loadu_ps(ap), c0[r]));
          _mm512_storeu_ps(ap + 16, _mm512_add_ps(_mm512_loadu_ps(ap + 16), c1[r]));
        }
      }
  }
}

/* the chunks of slots [lo, hi), each slot's in order into its own sums */
static void wgrad_slots_range(int64_t lo, int64_t hi, void *ctx)
{
  wino *g = ctx;
  const int64_t TB = g->TB, total = g->N * g->T1, per_slot = g->groups * 16 * g->OP * g->CP;
  float *v = malloc((size_t)(16 * g->vs) * sizeof(float));
  float *z = malloc((size_t)(16 * g->ms) * sizeof(float));
  float *pk = calloc((size_t)(g->CP * TB), sizeof(float));
  part *pt = malloc((size_t)(TB + TB / 16 + 1) * sizeof(part));
  int64_t *ps = malloc((size_t)(TB / 16 + 2) * sizeof(int64_t));
  if (!v || !z || !pk || !pt || !ps) atomic_store(&g->fail, 1);
  else
    for (int64_t sl = lo; sl < hi; sl++) {
      float *acc = g->acc + sl * per_slot;
      memset(acc, 0, (size_t)per_slot * sizeof(float));
      for (int64_t ch = sl * g->nch / g->slots; ch < (sl + 1) * g->nch / g->slots; ch++) {
        int64_t t0 = ch * TB, nt = total - t0 < TB ? total - t0 : TB;
        int64_t np = chunk_parts(g, t0, nt, pt, ps);
        for (int64_t gr = 0; gr < g->groups; gr++) {
          input_transform_512(g, gr, pt, ps, np, v);
          gout_transform_512(g, gr, pt, ps, np, z);
          wgrad_products_512(g, v, z, pk, acc + gr * 16 * g->OP * g->CP, nt);
        }
      }
    }
  free(v);
  free(z);
  free(pk);
  free(pt);
  free(ps);
}

typedef struct wgrad_fin { const wino *g; float *gw; atomic_int fail; } wgrad_fin;
/* rows [lo, hi) of (group, output channel): the slots summed in order (float64, along
 * the rows of the sums), then dL/dg = G^T (dL/dU) G, rounded once */
static void wgrad_finish_range(int64_t lo, int64_t hi, void *ctx)
{
  wgrad_fin *f = ctx;
  const wino *g = f->g;
  const int64_t OP = g->OP, CP = g->CP, Cg = g->Cg, per_slot = g->groups * 16 * OP * CP;
  double *du = malloc((size_t)(16 * Cg) * sizeof(double)); /* du[xi][c] */
  if (!du) { atomic_store(&f->fail, 1); return; }
  for (int64_t row = lo; row < hi; row++) {
    int64_t gr = row / g->Og, o = row % g->Og;
    for (int xi = 0; xi < 16; xi++) {
      double *d = du + xi * Cg;
      const float *a = g->acc + ((gr * 16 + xi) * OP + o) * CP;
      for (int64_t c = 0; c < Cg; c++) d[c] = a[c];
      for (int64_t sl = 1; sl < g->slots; sl++) {
        const float *as = a + sl * per_slot;
        for (int64_t c = 0; c < Cg; c++) d[c] += as[c];
      }
    }
    for (int64_t c = 0; c < Cg; c++) {
      double t[4][3];
      for (int r = 0; r < 4; r++) {
        double d0 = du[(4 * r) * Cg + c], d1 = du[(4 * r + 1) * Cg + c], d2 = du[(4 * r + 2) * Cg + c],
               d3 = du[(4 * r + 3) * Cg + c];
        t[r][0] = d0 + 0.5 * (d1 + d2);
        t[r][1] = 0.5 * (d1 - d2);
        t[r][2] = 0.5 * (d1 + d2) + d3;
      }
      float *k = f->gw + (row * Cg + c) * 9;
      for (int q = 0; q < 3; q++) {
        k[q] = (float)(t[0][q] + 0.5 * (t[1][q] + t[2][q]));
        k[3 + q] = (float)(0.5 * (t[1][q] - t[2][q]));
        k[6 + q] = (float)(0.5 * (t[1][q] + t[2][q]) + t[3][q]);
      }
    }
  }
  free(du);
}

static int64_t wino_chunk_bytes(void);

int dpl_conv_winograd_wgrad_f32(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t groups, int64_t ph,
                                int64_t pw, const float *x, const float *gy, float *gw)
{
  wino g = {0};
  g.N = N; g.C = C; g.H = H; g.W = W; g.O = O; g.groups = groups; g.ph = ph; g.pw = pw;
  g.Cg = C / groups; g.Og = O / groups;
  g.OH = H + 2 * ph - 2; g.OW = W + 2 * pw - 2;
  if (O == 0 || g.Cg == 0) return DPL_OK;
  if (N == 0 || g.OH <= 0 || g.OW <= 0) { memset(gw, 0, (size_t)(O * g.Cg * 9) * sizeof(float)); return DPL_OK; }
  g.TH = (g.OH + 1) / 2; g.TW = (g.OW + 1) / 2; g.T1 = g.TH * g.TW;
  int64_t per = 16 * (g.Cg + g.Og) * (int64_t)sizeof(float);
  int64_t tb = wino_chunk_bytes() / per / 32 * 32, total = N * g.T1;
  if (tb < 32) tb = 32;
  if (tb > total) tb = total;
  g.TB = tb;
  g.ld = (tb + 15) / 16 * 16 + 16; /* whole 16-lane pieces, and slack */
  g.vs = g.Cg * g.ld + 16;
  g.ms = g.Og * g.ld + 16;
  g.x = x; g.gy = gy;
  g.CP = (g.Cg + 31) / 32 * 32; g.OP = (g.Og + 7) / 8 * 8;
  g.nch = (total + tb - 1) / tb;
  /* the slots depend on the shape only (never on the thread count): up to 16, and no
   * more than 16 MiB of sums */
  int64_t slot_bytes = groups * 16 * g.OP * g.CP * (int64_t)sizeof(float);
  g.slots = g.nch < 16 ? g.nch : 16;
  if (g.slots * slot_bytes > (INT64_C(16) << 20)) g.slots = (INT64_C(16) << 20) / slot_bytes;
  if (g.slots < 1) g.slots = 1;
  g.acc = malloc((size_t)(g.slots * slot_bytes));
  if (!g.acc) return dpl_errorf(DPL_ENOMEM, "conv2d_backward: out of memory for the Winograd sums");
  dpl_parallel_for(g.slots, 1, wgrad_slots_range, &g);
  if (!atomic_load(&g.fail)) {
    wgrad_fin f = {&g, gw, 0};
    dpl_parallel_for(groups * g.Og, 8, wgrad_finish_range, &f);
    if (atomic_load(&f.fail)) atomic_store(&g.fail, 1);
  }
  free(g.acc);
  if (atomic_load(&g.fail)) return dpl_errorf(DPL_ENOMEM, "conv2d_backward: out of memory for the Winograd buffers");
  return DPL_OK;
}

static int64_t wino_chunk_bytes(void)
{
  static int64_t v;
  if (!v) { const char *e = getenv("DPL_WINOGRAD_CHUNK_KB"); v = (e && atoll(e) > 0 ? atoll(e) : 384) << 10; }
  return v;
}

int dpl_conv_winograd_f32(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t groups, int64_t ph, int64_t pw,
                          const float *x, const float *w, const float *bias, float *out)
{
  wino g = {0};
  g.N = N; g.C = C; g.H = H; g.W = W; g.O = O; g.groups = groups; g.ph = ph; g.pw = pw;
  g.Cg = C / groups; g.Og = O / groups;
  g.OH = H + 2 * ph - 2; g.OW = W + 2 * pw - 2;
  if (N == 0 || O == 0 || g.OH <= 0 || g.OW <= 0) return DPL_OK;
  g.TH = (g.OH + 1) / 2; g.TW = (g.OW + 1) / 2; g.T1 = g.TH * g.TW;
  /* tiles per chunk: the chunk's V and M in the L2 budget, whole 32-column panels */
  int64_t per = 16 * (g.Cg + g.Og) * (int64_t)sizeof(float);
  int64_t tb = wino_chunk_bytes() / per / 32 * 32, total = N * g.T1;
  if (tb < 32) tb = 32;
  if (tb > total) tb = total;
  g.TB = tb;
  g.ld = (tb + 31) / 32 * 32 + 16; /* whole 32-column blocks for the products, and slack */
  g.vs = g.Cg * g.ld + 16;
  g.ms = g.Og * g.ld + 16;
  g.x = x; g.bias = bias; g.out = out;
  g.u8 = calloc((size_t)(groups * 16 * ((g.Og + 7) / 8) * 8 * g.Cg), sizeof(float));
  if (!g.u8) return dpl_errorf(DPL_ENOMEM, "conv2d: out of memory for the Winograd kernels");
  kernel_transform(&g, w);
  dpl_parallel_for((total + tb - 1) / tb, 1, chunks_range, &g);
  free(g.u8);
  if (atomic_load(&g.fail)) return dpl_errorf(DPL_ENOMEM, "conv2d: out of memory for the Winograd buffers");
  return DPL_OK;
}

#else
int dpl_conv_winograd_fits(int64_t Cg, int64_t Og, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw)
{
  (void)Cg; (void)Og; (void)kh; (void)kw; (void)sh; (void)sw; (void)dh; (void)dw;
  return 0;
}
int dpl_conv_winograd_f32(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t groups, int64_t ph, int64_t pw,
                          const float *x, const float *w, const float *bias, float *out)
{
  (void)N; (void)C; (void)H; (void)W; (void)O; (void)groups; (void)ph; (void)pw; (void)x; (void)w; (void)bias; (void)out;
  return dpl_errorf(DPL_EINVAL, "conv2d: the Winograd path needs AVX-512");
}
int dpl_conv_winograd_wgrad_f32(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t groups, int64_t ph,
                                int64_t pw, const float *x, const float *gy, float *gw)
{
  (void)N; (void)C; (void)H; (void)W; (void)O; (void)groups; (void)ph; (void)pw; (void)x; (void)gy; (void)gw;
  return dpl_errorf(DPL_EINVAL, "conv2d_backward: the Winograd path needs AVX-512");
}
#endif
