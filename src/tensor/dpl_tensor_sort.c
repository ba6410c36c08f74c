/* dpl_tensor_sort.c: sorting and selection along a dim: sort / argsort (a stable LSD
 * radix sort on order-preserving 64-bit keys, insertion sort for short rows), topk (a
 * heap for a few of many, fed through a vector block filter on contiguous float rows),
 * kthvalue and median (quickselect on the total order (value, position), a merge sort
 * when it degenerates), mode, and the whole-tensor median. The order is PyTorch's:
 * NaN above +inf (last ascending, first descending), -0.0 equal to 0.0; equal values
 * keep their positions' order. Rows go to the thread pool; every row is done by one
 * thread, so results never depend on the thread count. Indices are 0-based int64. sort,
 * argsort and topk of a tensor in device memory run in the backend (DPL_BK_SORT, rows of any
 * length), kthvalue, median and mode too (DPL_BK_SELECT, rows up to 2048 elements; longer rows
 * go through host memory). unique of a tensor in device memory is in dpl_tensor_unique.c. */
#include "dpl_tensor_internal.h"
#include <stdlib.h>

/* one element of a row: its key and its position along the dim */
typedef struct sort_item {
  uint64_t k;
  int64_t i;
} sort_item;

static const uint64_t KEY_NAN = UINT64_MAX; /* the key of every NaN (ascending) */

/* order-preserving keys: unsigned comparison of keys is the value order */
static inline uint64_t key_f32(float v)
{
  if (v != v) return KEY_NAN;
  if (v == 0) v = 0.0f; /* -0.0 -> 0.0 */
  uint32_t u;
  memcpy(&u, &v, 4);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return u;
}
static inline uint64_t key_f64(double v)
{
  if (v != v) return KEY_NAN;
  if (v == 0) v = 0.0;
  uint64_t u;
  memcpy(&u, &v, 8);
  return (u & 0x8000000000000000ull) ? ~u : (u | 0x8000000000000000ull);
}

/* the keys of row p (n elements, rs bytes apart): descending flips them; without NaNs the
 * smallest key is subtracted (fewer radix passes), so a NaN's key stays KEY_NAN (ascending).
 * *first_nan: the position of the first NaN, or -1 */
static void load_keys(const char *p, int64_t rs, int64_t n, int32_t dt, int desc, sort_item *it, int64_t *first_nan)
{
  int64_t fn = -1;
#define LOAD(EXPR, ISNAN)                                                                                   \
  for (int64_t j = 0; j < n; j++) {                                                                         \
    const char *q = p + j * rs;                                                                             \
    uint64_t k = EXPR;                                                                                      \
    if (ISNAN && fn < 0 && k == KEY_NAN) fn = j;                                                            \
    it[j].k = k;                                                                                            \
    it[j].i = j;                                                                                            \
  }
  switch (dt) {
  case DPL_FLOAT32: LOAD(key_f32(*(const float *)q), 1) break;
  case DPL_FLOAT64: LOAD(key_f64(*(const double *)q), 1) break;
  case DPL_FLOAT16: LOAD(key_f32(dpl_h2f(*(const uint16_t *)q)), 1) break;
  case DPL_BFLOAT16: LOAD(key_f32(dpl_bf2f(*(const uint16_t *)q)), 1) break;
  case DPL_INT32: LOAD((uint64_t)((uint32_t)*(const int32_t *)q ^ 0x80000000u), 0) break;
  case DPL_INT64: LOAD((uint64_t)*(const int64_t *)q ^ 0x8000000000000000ull, 0) break;
  default: LOAD((uint64_t)*(const uint8_t *)q, 0) break; /* uint8, bool (0 or 1) */
  }
#undef LOAD
  *first_nan = fn;
  uint64_t mn = UINT64_MAX;
  if (desc)
    for (int64_t j = 0; j < n; j++) { it[j].k = ~it[j].k; if (it[j].k < mn) mn = it[j].k; }
  else
    for (int64_t j = 0; j < n; j++) if (it[j].k < mn) mn = it[j].k;
  if (fn < 0 && mn != 0)
    for (int64_t j = 0; j < n; j++) it[j].k -= mn;
}

/* the key of one element (raw: no subtraction), descending flipped */
static inline uint64_t elem_key(const char *q, int32_t dt, int desc)
{
  uint64_t k;
  switch (dt) {
  case DPL_FLOAT32: k = key_f32(*(const float *)q); break;
  case DPL_FLOAT64: k = key_f64(*(const double *)q); break;
  case DPL_FLOAT16: k = key_f32(dpl_h2f(*(const uint16_t *)q)); break;
  case DPL_BFLOAT16: k = key_f32(dpl_bf2f(*(const uint16_t *)q)); break;
  case DPL_INT32: k = (uint32_t)*(const int32_t *)q ^ 0x80000000u; break;
  case DPL_INT64: k = (uint64_t)*(const int64_t *)q ^ 0x8000000000000000ull; break;
  default: k = *(const uint8_t *)q; break;
  }
  return desc ? ~k : k;
}

/* stable insertion sort by key */
static void insertion_sort(sort_item *a, int64_t n)
{
  for (int64_t j = 1; j < n; j++) {
    sort_item x = a[j];
    int64_t m = j;
    while (m > 0 && a[m - 1].k > x.k) { a[m] = a[m - 1]; m--; }
    a[m] = x;
  }
}

/* stable sort by key of a[0..n) (scratch b, n items); returns the buffer that holds the result */
static sort_item *radix_sort(sort_item *a, sort_item *b, int64_t n)
{
  if (n <= 32) { insertion_sort(a, n); return a; }
  uint64_t diff = 0, k0 = a[0].k;
  for (int64_t j = 1; j < n; j++) diff |= a[j].k ^ k0;
  if (diff == 0) return a;
  int64_t cnt[256];
  sort_item *src = a, *dst = b;
  for (int pass = 0; pass < 8; pass++) {
    int sh = pass * 8;
    if (((diff >> sh) & 0xff) == 0) continue; /* every key has the same byte here */
    memset(cnt, 0, sizeof cnt);
    for (int64_t j = 0; j < n; j++) cnt[(src[j].k >> sh) & 0xff]++;
    int64_t s = 0;
    for (int d = 0; d < 256; d++) { int64_t c = cnt[d]; cnt[d] = s; s += c; }
    for (int64_t j = 0; j < n; j++) dst[cnt[(src[j].k >> sh) & 0xff]++] = src[j];
    sort_item *t = src;
    src = dst;
    dst = t;
  }
  return src;
}

/* the total order (key, position) */
static inline int lex_lt(const sort_item *x, const sort_item *y)
{
  return x->k < y->k || (x->k == y->k && x->i < y->i);
}

static void lex_insertion(sort_item *a, int64_t n)
{
  for (int64_t j = 1; j < n; j++) {
    sort_item x = a[j];
    int64_t m = j;
    while (m > 0 && lex_lt(&x, &a[m - 1])) { a[m] = a[m - 1]; m--; }
    a[m] = x;
  }
}

/* merge sort of a[0..n) in (key, position) order (scratch tmp, n items) */
static void lex_sort(sort_item *a, sort_item *tmp, int64_t n)
{
  if (n <= 24) { lex_insertion(a, n); return; }
  int64_t h = n / 2;
  lex_sort(a, tmp, h);
  lex_sort(a + h, tmp, n - h);
  if (!lex_lt(&a[h], &a[h - 1])) return; /* already in order */
  memcpy(tmp, a, (size_t)h * sizeof *a);
  int64_t i = 0, j = h, o = 0;
  while (i < h && j < n) a[o++] = lex_lt(&a[j], &tmp[i]) ? a[j++] : tmp[i++];
  while (i < h) a[o++] = tmp[i++];
}

/* Rearranges a[0..n) so that a[r] is the item of rank r in (key, position) order, the
 * smaller ones before it and the larger after it (quickselect; a merge sort of the part
 * left when it recurses too deep). tmp: scratch of n items. */
static void select_rank(sort_item *a, sort_item *tmp, int64_t n, int64_t r)
{
  int64_t lo = 0, hi = n - 1;
  int depth = 0;
  for (int64_t m = n; m > 1; m >>= 1) depth += 2;
  depth += 8;
  while (hi - lo > 16) {
    if (depth-- == 0) { lex_sort(a + lo, tmp, hi - lo + 1); return; }
    int64_t mid = lo + (hi - lo) / 2;
    /* median of three as the pivot */
    if (lex_lt(&a[mid], &a[lo])) { sort_item t = a[mid]; a[mid] = a[lo]; a[lo] = t; }
    if (lex_lt(&a[hi], &a[lo])) { sort_item t = a[hi]; a[hi] = a[lo]; a[lo] = t; }
    if (lex_lt(&a[hi], &a[mid])) { sort_item t = a[hi]; a[hi] = a[mid]; a[mid] = t; }
    sort_item p = a[mid];
    int64_t i = lo, j = hi;
    while (i <= j) {
      while (lex_lt(&a[i], &p)) i++;
      while (lex_lt(&p, &a[j])) j--;
      if (i <= j) { sort_item t = a[i]; a[i] = a[j]; a[j] = t; i++; j--; }
    }
    if (r <= j) hi = j;
    else if (r >= i) lo = i;
    else return; /* a[r] is the pivot */
  }
  lex_insertion(a + lo, hi - lo + 1);
}

/* one element offered to a full or filling heap of the k first items in (key, position) order
 * (the largest on top); *m: items in it so far */
static inline void heap_offer(sort_item *h, int64_t k, int64_t *m, sort_item x)
{
  int64_t c;
  if (*m < k) { /* push: sift up */
    c = (*m)++;
    while (c > 0) {
      int64_t up = (c - 1) / 2;
      if (!lex_lt(&h[up], &x)) break;
      h[c] = h[up];
      c = up;
    }
    h[c] = x;
    return;
  }
  if (!lex_lt(&x, &h[0])) return; /* not among the k first (a later position never wins a tie) */
  c = 0; /* replace the top: sift down */
  for (;;) {
    int64_t l = 2 * c + 1, big = c;
    const sort_item *bv = &x;
    if (l < k && lex_lt(bv, &h[l])) { big = l; bv = &h[l]; }
    if (l + 1 < k && lex_lt(bv, &h[l + 1])) { big = l + 1; bv = &h[l + 1]; }
    if (big == c) break;
    h[c] = h[big];
    c = big;
  }
  h[c] = x;
}

/* Contiguous float rows: once the heap is full, blocks of 16 values are compared with the value
 * on its top (the k-th best so far) and only a block holding one that would enter is offered
 * element by element; the others cannot enter (an equal value loses: its position is later).
 * In PyTorch's order NaN is above every number: largest, a NaN enters past any number and
 * nothing passes a NaN top; smallest, no NaN enters past a number and any number passes a NaN
 * top. -0.0 and 0.0 compare equal, as their keys. The vector compares are GCC's generic ones
 * (SSE2 on x86-64): the row is read at memory speed. Returns the position reached. */
#define TOPK_FILTER(T, VT, LANES)                                                                      \
  static int64_t filter_##T(const T *p, int64_t n, int32_t dt, int desc, int64_t k, sort_item *h,        \
                            int64_t *m)                                                                 \
  {                                                                                                     \
    typedef T vt __attribute__((vector_size(16)));                                                      \
    typedef VT vm __attribute__((vector_size(16)));                                                     \
    int64_t j = 0;                                                                                      \
    for (; j < n && *m < k; j++) heap_offer(h, k, m, (sort_item){elem_key((const char *)(p + j), dt, desc), j}); \
    while (j + 4 * LANES <= n) {                                                                        \
      T top = p[h[0].i];                                                                                \
      if (desc && top != top) return n; /* a NaN on top: nothing later enters */                        \
      vt t = (vt){} + top, v0, v1, v2, v3;                                                              \
      int64_t e = n - (n - j) % (4 * LANES);                                                            \
      for (; j < e; j += 4 * LANES) {                                                                   \
        memcpy(&v0, p + j, 16);                                                                         \
        memcpy(&v1, p + j + LANES, 16);                                                                 \
        memcpy(&v2, p + j + 2 * LANES, 16);                                                             \
        memcpy(&v3, p + j + 3 * LANES, 16);                                                             \
        vm any;                                                                                         \
        if (desc) any = (v0 > t) | (v0 != v0) | (v1 > t) | (v1 != v1) | (v2 > t) | (v2 != v2) | (v3 > t) | (v3 != v3); \
        else if (top == top) any = (v0 < t) | (v1 < t) | (v2 < t) | (v3 < t);                          \
        else any = (v0 == v0) | (v1 == v1) | (v2 == v2) | (v3 == v3);                                   \
        uint64_t w[2];                                                                                  \
        memcpy(w, &any, 16);                                                                            \
        if (w[0] | w[1]) break;                                                                         \
      }                                                                                                 \
      if (j >= e) break;                                                                                \
      for (int64_t q = j + 4 * LANES; j < q; j++)                                                       \
        heap_offer(h, k, m, (sort_item){elem_key((const char *)(p + j), dt, desc), j});                 \
    }                                                                                                   \
    return j;                                                                                           \
  }
TOPK_FILTER(float, int32_t, 4)
TOPK_FILTER(double, int64_t, 2)
#undef TOPK_FILTER

/* The k first items of row p in (key, position) order, with a heap of k items (the
 * largest on top): for k much smaller than the row, one pass that keeps nothing else.
 * h: scratch of k items; the result is left sorted in h[0..k). */
static void heap_topk(const char *p, int64_t rs, int64_t n, int32_t dt, int desc, int64_t k, sort_item *h, sort_item *tmp)
{
  int64_t m = 0, j = 0;
  if (dt == DPL_FLOAT32 && rs == 4) j = filter_float((const float *)p, n, dt, desc, k, h, &m);
  else if (dt == DPL_FLOAT64 && rs == 8) j = filter_double((const double *)p, n, dt, desc, k, h, &m);
  for (; j < n; j++) heap_offer(h, k, &m, (sort_item){elem_key(p + j * rs, dt, desc), j});
  lex_sort(h, tmp, m);
}

/* ---- rows along a dim ---- */
enum { K_SORT = 0, K_TOPK = 1, K_KTH = 2, K_MEDIAN = 3, K_MODE = 4 };
static const char *const kind_name[] = {"sort", "topk", "kthvalue", "median", "mode"};

typedef struct sort_job {
  int kind, desc;
  int64_t k;                      /* topk: count; kthvalue: rank (0-based) */
  int32_t dt, nd;                 /* dtype; number of outer dims */
  int64_t es;                     /* element size */
  int64_t shape[DPL_MAX_DIMS];    /* outer dims */
  int64_t sa[DPL_MAX_DIMS];       /* their input strides, bytes */
  int64_t so[DPL_MAX_DIMS];       /* their output strides, elements (outputs are contiguous) */
  int64_t R, ra;                  /* row length, input stride along the row (bytes) */
  int64_t ro;                     /* output stride along the dim (elements) */
  const char *in;
  char *vals;                     /* NULL: indices only */
  int64_t *idx;
  _Atomic int failed;             /* a worker ran out of memory */
} sort_job;

static inline void put_value(char *dst, const char *src, int64_t es)
{
  switch (es) {
  case 1: *dst = *src; break;
  case 2: memcpy(dst, src, 2); break;
  case 4: memcpy(dst, src, 4); break;
  default: memcpy(dst, src, 8); break;
  }
}

/* writes the items' positions (and values) to output slots 0..m-1 of a row */
static void put_row(const sort_job *j, const sort_item *a, int64_t m, const char *pin, char *pv, int64_t *pi)
{
  for (int64_t t = 0; t < m; t++) {
    pi[t * j->ro] = a[t].i;
    if (pv) put_value(pv + t * j->ro * j->es, pin + a[t].i * j->ra, j->es);
  }
}

static void one_row(const sort_job *j, sort_item *a, sort_item *b, const char *pin, char *pv, int64_t *pi)
{
  int64_t R = j->R, fn;
  int kind = j->kind;
  if (kind == K_TOPK && j->k * 16 <= R) { /* a few of many: a heap, no keys of the whole row */
    if (j->k > 0) {
      heap_topk(pin, j->ra, R, j->dt, j->desc, j->k, a, b);
      put_row(j, a, j->k, pin, pv, pi);
    }
    return;
  }
  load_keys(pin, j->ra, R, j->dt, j->desc, a, &fn);
  switch (kind) {
  case K_SORT: put_row(j, radix_sort(a, b, R), R, pin, pv, pi); break;
  case K_TOPK: {
    int64_t k = j->k;
    if (k == 0) break;
    if (R <= 64 || k * 4 >= R) { put_row(j, radix_sort(a, b, R), k, pin, pv, pi); break; }
    select_rank(a, b, R, k - 1);
    lex_sort(a, b, k);
    put_row(j, a, k, pin, pv, pi);
    break;
  }
  case K_KTH: case K_MEDIAN: {
    if (kind == K_MEDIAN && fn >= 0) { /* a NaN makes the median NaN: the first one, as PyTorch */
      sort_item x = {0, fn};
      put_row(j, &x, 1, pin, pv, pi);
      break;
    }
    int64_t r = kind == K_MEDIAN ? (R - 1) / 2 : j->k;
    if (R <= 32) { insertion_sort(a, R); put_row(j, a + r, 1, pin, pv, pi); break; }
    select_rank(a, b, R, r);
    put_row(j, a + r, 1, pin, pv, pi);
    break;
  }
  default: { /* K_MODE: the most frequent value (the smallest of those), at its last position */
    sort_item *s = radix_sort(a, b, R);
    int64_t best = 0, bestn = 0;
    for (int64_t t = 0; t < R;) {
      int64_t e = t + 1;
      if (fn < 0 || s[t].k != KEY_NAN) /* (NaN never equals NaN: a run of one) */
        while (e < R && s[e].k == s[t].k) e++;
      if (e - t > bestn) { bestn = e - t; best = e - 1; }
      t = e;
    }
    put_row(j, s + best, 1, pin, pv, pi);
    break;
  }
  }
}

static void sort_range(int64_t lo, int64_t hi, void *vj)
{
  sort_job *j = vj;
  int64_t R = j->R;
  sort_item *a = malloc((size_t)(R > 0 ? 2 * R : 1) * sizeof *a);
  if (!a) { atomic_store(&j->failed, 1); return; }
  int64_t ix[DPL_MAX_DIMS], rem = lo;
  for (int d = j->nd - 1; d >= 0; d--) { ix[d] = rem % j->shape[d]; rem /= j->shape[d]; }
  for (int64_t o = lo; o < hi; o++) {
    int64_t oa = 0, oo = 0;
    for (int d = 0; d < j->nd; d++) { oa += ix[d] * j->sa[d]; oo += ix[d] * j->so[d]; }
    one_row(j, a, a + R, j->in + oa, j->vals ? j->vals + oo * j->es : NULL, j->idx + oo);
    for (int d = j->nd - 1; d >= 0; d--) { if (++ix[d] < j->shape[d]) break; ix[d] = 0; }
  }
  free(a);
}

static int along_dim(int kind, const dpl_tensor *a, int32_t dim, int64_t K, int64_t k, int desc, int keepdim,
                     dpl_tensor **values, dpl_tensor **indices);

/* sort / argsort / topk (DPL_BK_SORT), kthvalue / median / mode (DPL_BK_SELECT) of a tensor in
 * device memory, in the backend (a copy with dim last, the results moved back to dim,
 * contiguous); selections along rows longer than DPL_SORT_DEV_MAX through host memory (copied
 * to the CPU, done there, the results copied back) */
enum { DPL_SORT_DEV_MAX = 2048 };
static int along_dim_dev(const char *name, int kind, const dpl_tensor *a, int32_t dim, int64_t K, int64_t k, int desc,
                         int keepdim, dpl_tensor **values, dpl_tensor **indices)
{
  int32_t nd = a->_ndim;
  int64_t R = nd ? a->_shape[dim] : 1;
  dpl_tensor *v = NULL, *ix = NULL;
  int st = DPL_OK;
  int sel = kind == K_KTH || kind == K_MEDIAN || kind == K_MODE;
  if (R > DPL_SORT_DEV_MAX && sel) {
    dpl_tensor *h = NULL, *hv = NULL, *hi = NULL;
    st = dpl_tensor_to(a, a->_dtype, DPL_DEVICE_CPU, 0, &h);
    if (st == DPL_OK) st = along_dim(kind, h, dim, K, k, desc, keepdim, values ? &hv : NULL, &hi);
    if (st == DPL_OK && hv) st = dpl_tensor_to(hv, hv->_dtype, a->_devtype, a->_devindex, &v);
    if (st == DPL_OK) st = dpl_tensor_to(hi, DPL_INT64, a->_devtype, a->_devindex, &ix);
    dpl_release_n(3, (dpl_tensor *[]){h, hv, hi});
    return dpl_hand_over(st, 2, (dpl_tensor *[]){v, ix}, (dpl_tensor **[]){values, indices});
  }
  /* a's rows with dim last, contiguous */
  int64_t sh[DPL_MAX_DIMS], sd[DPL_MAX_DIMS];
  int32_t m = 0, mnd = nd ? nd : 1;
  for (int32_t i = 0; i < nd; i++)
    if (i != dim) sh[m] = a->_shape[i], sd[m] = a->_stride[i], m++;
  sh[m] = R;
  sd[m] = nd ? a->_stride[dim] : 1;
  dpl_tensor *mv = NULL, *c = NULL;
  st = dpl_make_view(a, mnd, sh, sd, a->_offset, &mv);
  if (st == DPL_OK) st = dpl_contig_as(name, mv, a->_dtype, &c);
  dpl_tensor *rv = NULL, *ri = NULL;
  if (st == DPL_OK) {
    dpl_bk_args ka = {.op = DPL_BK_SORT, .i = {desc}, .l = {K}, .in = {c}, .out = {values ? &rv : NULL, &ri},
                      .name = name};
    if (sel) {
      ka.op = DPL_BK_SELECT;
      ka.sub = kind == K_KTH ? 0 : kind == K_MEDIAN ? 1 : 2;
      ka.l[0] = k;
    }
    st = dpl_bk_call(&ka);
  }
  /* back to a's dim order: the [..., K] results viewed with K at dim (dropped when a
   * selection does not keep it), then made contiguous */
  int64_t os[DPL_MAX_DIMS], ost[DPL_MAX_DIMS], s = 1, ms[DPL_MAX_DIMS];
  int32_t ond = 0;
  for (int32_t i = mnd - 1; i >= 0; i--) { ms[i] = s; s *= i == mnd - 1 ? K : sh[i]; }
  for (int32_t i = 0, j = 0; i < nd; i++) {
    if (i == dim && sel && !keepdim) continue;
    os[ond] = i == dim ? K : a->_shape[i];
    ost[ond++] = i == dim ? ms[mnd - 1] : ms[j++];
  }
  for (int r = 0; r < 2 && st == DPL_OK; r++) {
    dpl_tensor *src = r ? ri : rv, **dst = r ? &ix : &v;
    if (!src) continue;
    dpl_tensor *back = NULL;
    st = dpl_make_view(src, ond, os, ost, src->_offset, &back);
    if (st == DPL_OK) st = dpl_contig_as(name, back, src->_dtype, dst);
    dpl_tensor_release(back);
  }
  dpl_release_n(4, (dpl_tensor *[]){mv, c, rv, ri});
  return dpl_hand_over(st, 2, (dpl_tensor *[]){v, ix}, (dpl_tensor **[]){values, indices});
}

/* Runs kind along dim of a (a 0-d tensor: one row of one). Out: K per row along dim (the
 * dim dropped when !keepdim); values may be NULL (indices only). */
static int along_dim(int kind, const dpl_tensor *a, int32_t dim, int64_t K, int64_t k, int desc, int keepdim,
                     dpl_tensor **values, dpl_tensor **indices)
{
  const char *name = kind == K_SORT && !values ? "argsort" : kind_name[kind];
  if (!indices) return dpl_errorf(DPL_EINVAL, "%s: indices is NULL", name);
  if (values) *values = NULL;
  *indices = NULL;
  DPL_TRY(dpl_check_handle(name, "self", a));
  if (a->_ndim == 0 ? dim != 0 : (dim < 0 || dim >= a->_ndim))
    return dpl_errorf(DPL_EINVAL, "%s: dim %d out of range (expected 0..%d for a %d-d tensor)", name, (int)dim,
                      a->_ndim ? (int)a->_ndim - 1 : 0, (int)a->_ndim);
  int64_t R = a->_ndim ? a->_shape[dim] : 1;
  if ((kind == K_KTH || kind == K_MEDIAN || kind == K_MODE) && R == 0)
    return dpl_errorf(DPL_EINVAL, "%s: cannot select from an empty dim (size 0)", name);
  if (kind == K_TOPK && (K < 0 || K > R))
    return dpl_errorf(DPL_EINVAL, "%s: k %lld out of range for a dim of size %lld (expected 0..%lld)", name,
                      (long long)K, (long long)R, (long long)R);
  if (kind == K_KTH && (k < 0 || k >= R))
    return dpl_errorf(DPL_EINVAL, "%s: k %lld out of range for a dim of size %lld (expected 1..%lld)", name,
                      (long long)k + 1, (long long)R, (long long)R);
  if (dpl_is_devmem(a)) return along_dim_dev(name, kind, a, dim, K, k, desc, keepdim, values, indices);
  /* outputs: contiguous, of a's shape with K along dim (0-d stays 0-d) */
  int64_t kshape[DPL_MAX_DIMS], oshape[DPL_MAX_DIMS], ostride[DPL_MAX_DIMS];
  int32_t nd = a->_ndim, ond = 0;
  for (int i = 0; i < nd; i++) kshape[i] = i == dim ? K : a->_shape[i];
  int64_t s = 1;
  for (int i = nd - 1; i >= 0; i--) { ostride[i] = s; s *= kshape[i]; }
  for (int i = 0; i < nd; i++)
    if (i != dim || keepdim) oshape[ond++] = kshape[i];
  dpl_tensor *vals = NULL, *idx = NULL;
  int st = values ? dpl_new(name, a->_dtype, ond, oshape, a, &vals) : DPL_OK;
  if (st == DPL_OK) st = dpl_new(name, DPL_INT64, ond, oshape, a, &idx);
  if (st == DPL_OK && idx->_numel > 0 && (R > 0 || kind == K_SORT)) {
    sort_job j;
    memset(&j, 0, sizeof j);
    j.kind = kind;
    j.desc = desc;
    j.k = kind == K_TOPK ? K : k;
    j.dt = a->_dtype;
    j.es = dpl_elsize(a->_dtype);
    j.R = R;
    j.ra = nd ? a->_stride[dim] * j.es : 0;
    j.ro = nd ? ostride[dim] : 1;
    for (int i = 0; i < nd; i++)
      if (i != dim) { j.shape[j.nd] = a->_shape[i]; j.sa[j.nd] = a->_stride[i] * j.es; j.so[j.nd] = ostride[i]; j.nd++; }
    j.in = a->_data;
    j.vals = vals ? vals->_data : NULL;
    j.idx = idx->_data;
    atomic_init(&j.failed, 0);
    int64_t rows = dpl_shape_numel(j.nd, j.shape);
    dpl_parallel_for(rows, 32768 / (R + 1) + 1, sort_range, &j);
    if (atomic_load(&j.failed)) st = dpl_errorf(DPL_ENOMEM, "%s: out of memory (scratch for rows of %lld)", name, (long long)R);
  }
  return dpl_hand_over(st, 2, (dpl_tensor *[]){vals, idx}, (dpl_tensor **[]){values, indices});
}

int dpl_sort(const dpl_tensor *a, int32_t dim, int32_t descending, dpl_tensor **values, dpl_tensor **indices)
{
  int64_t K = a && a->_ndim && dim >= 0 && dim < a->_ndim ? a->_shape[dim] : 1;
  return along_dim(K_SORT, a, dim, K, 0, descending != 0, 1, values, indices);
}

int dpl_topk(const dpl_tensor *a, int64_t k, int32_t dim, int32_t largest, dpl_tensor **values, dpl_tensor **indices)
{
  /* a 0-d tensor gives its element for k = 0 or 1, as PyTorch */
  if (a && a->_ndim == 0 && k == 0) k = 1;
  return along_dim(K_TOPK, a, dim, k, 0, largest != 0, 1, values, indices);
}

int dpl_kthvalue(const dpl_tensor *a, int64_t k, int32_t dim, int32_t keepdim, dpl_tensor **values,
                 dpl_tensor **indices)
{
  return along_dim(K_KTH, a, dim, 1, k - 1, 0, keepdim, values, indices);
}

int dpl_mode(const dpl_tensor *a, int32_t dim, int32_t keepdim, dpl_tensor **values, dpl_tensor **indices)
{
  return along_dim(K_MODE, a, dim, 1, 0, 0, keepdim, values, indices);
}

int dpl_median(const dpl_tensor *a, int32_t dim, int32_t keepdim, dpl_tensor **values, dpl_tensor **indices)
{
  const char *name = "median";
  if (dim != -1) return along_dim(K_MEDIAN, a, dim, 1, 0, 0, keepdim, values, indices);
  /* all elements: a 0-d value (and its position in the flattened tensor) */
  if (!values || !indices) return dpl_errorf(DPL_EINVAL, "%s: values or indices is NULL", name);
  *values = *indices = NULL;
  DPL_TRY(dpl_check_handle(name, "self", a));
  if (a->_numel == 0) {
    if (!dpl_is_float(a->_dtype))
      return dpl_errorf(DPL_EINVAL, "%s: the median of an empty %s tensor is undefined (a floating-point one gives nan)",
                        name, dpl_dtype_name(a->_dtype));
    dpl_tensor *v = NULL, *i = NULL;
    int st = dpl_new(name, a->_dtype, 0, NULL, a, &v);
    if (st == DPL_OK) st = dpl_new(name, DPL_INT64, 0, NULL, a, &i);
    if (st == DPL_OK && dpl_is_devmem(a)) {
      st = dpl_tensor_fill_(v, NAN);
      if (st == DPL_OK) st = dpl_tensor_fill_(i, 0);
    } else if (st == DPL_OK) {
      dpl_store_f64(v->_data, a->_dtype, NAN);
      *(int64_t *)i->_data = 0;
    }
    return dpl_hand_over(st, 2, (dpl_tensor *[]){v, i}, (dpl_tensor **[]){values, indices});
  }
  dpl_tensor *c = NULL, *flat = NULL;
  int st = dpl_contig_as(name, a, a->_dtype, &c);
  int64_t n = a->_numel, one = 1;
  if (st == DPL_OK) st = dpl_make_view(c, 1, &n, &one, c->_offset, &flat);
  if (st == DPL_OK) st = along_dim(K_MEDIAN, flat, 0, 1, 0, 0, 0, values, indices);
  dpl_release_n(2, (dpl_tensor *[]){c, flat});
  return st;
}

/* ---- unique ---- */
/* slices of m keys: x before y in lexicographic order of their keys, then by position */
typedef struct slice_cmp {
  const uint64_t *keys;
  int64_t m;
  int has_nan;
} slice_cmp;

static int slice_lt(const slice_cmp *c, int64_t x, int64_t y)
{
  const uint64_t *kx = c->keys + x * c->m, *ky = c->keys + y * c->m;
  for (int64_t t = 0; t < c->m; t++)
    if (kx[t] != ky[t]) return kx[t] < ky[t];
  return x < y;
}
/* equal slices: the same keys, no NaN among them (NaN never equals NaN) */
static int slice_eq(const slice_cmp *c, int64_t x, int64_t y)
{
  const uint64_t *kx = c->keys + x * c->m, *ky = c->keys + y * c->m;
  for (int64_t t = 0; t < c->m; t++)
    if (kx[t] != ky[t] || (c->has_nan && kx[t] == KEY_NAN)) return 0;
  return 1;
}
static void slice_sort(const slice_cmp *c, int64_t *a, int64_t *tmp, int64_t n)
{
  if (n <= 16) {
    for (int64_t j = 1; j < n; j++) {
      int64_t x = a[j], q = j;
      while (q > 0 && slice_lt(c, x, a[q - 1])) { a[q] = a[q - 1]; q--; }
      a[q] = x;
    }
    return;
  }
  int64_t h = n / 2;
  slice_sort(c, a, tmp, h);
  slice_sort(c, a + h, tmp, n - h);
  memcpy(tmp, a, (size_t)h * sizeof *a);
  int64_t i = 0, j = h, o = 0;
  while (i < h && j < n) a[o++] = slice_lt(c, a[j], tmp[i]) ? a[j++] : tmp[i++];
  while (i < h) a[o++] = tmp[i++];
}

/* unique along dim: slices of a contiguous copy with dim first (c: [n, m]). The slices are
 * ordered as PyTorch 1.13 orders them: lexicographically in the layout of a.transpose(dim, 0)
 * (dim 0 takes dim's place), which differs from c's for dim >= 2 (keys then come from a
 * second copy in that layout). */
static int unique_dim(const char *name, const dpl_tensor *a, int32_t dim, dpl_tensor **out, dpl_tensor **inverse,
                      dpl_tensor **counts)
{
  int32_t nd = a->_ndim;
  for (int i = 0; i < nd; i++)
    if (i != dim && a->_shape[i] == 0)
      return dpl_errorf(DPL_EINVAL, "%s: dim %d has size 0 and is not the dim selected: unique cannot be applied "
                        "(as in PyTorch)", name, i);
  int64_t n = a->_shape[dim], m = n ? a->_numel / n : 0, es = dpl_elsize(a->_dtype);
  int64_t pshape[DPL_MAX_DIMS], pstride[DPL_MAX_DIMS], post = 1;
  pshape[0] = n;
  pstride[0] = a->_stride[dim];
  for (int i = 0, k = 1; i < nd; i++)
    if (i != dim) { pshape[k] = a->_shape[i]; pstride[k] = a->_stride[i]; k++; }
  for (int i = dim + 1; i < nd; i++) post *= a->_shape[i];
  dpl_tensor *pv = NULL, *c = NULL, *res = NULL, *inv = NULL, *cnt = NULL;
  uint64_t *keys = NULL;
  int64_t *ord = NULL;
  sort_item *it = NULL;
  dpl_tensor *kv = NULL, *kc = NULL; /* (dim >= 2: the keys' layout, transpose(dim, 0)) */
  int st = dpl_make_view(a, nd, pshape, pstride, a->_offset, &pv);
  if (st == DPL_OK) st = dpl_contig_as(name, pv, a->_dtype, &c);
  if (st == DPL_OK && dim >= 2) {
    int64_t tshape[DPL_MAX_DIMS], tstride[DPL_MAX_DIMS];
    for (int i = 0; i < nd; i++) { tshape[i] = a->_shape[i]; tstride[i] = a->_stride[i]; }
    tshape[0] = a->_shape[dim]; tstride[0] = a->_stride[dim];
    tshape[dim] = a->_shape[0]; tstride[dim] = a->_stride[0];
    st = dpl_make_view(a, nd, tshape, tstride, a->_offset, &kv);
    if (st == DPL_OK) st = dpl_contig_as(name, kv, a->_dtype, &kc);
  }
  int64_t total = n * m, fn = -1, nu = 0;
  if (st == DPL_OK) {
    keys = malloc((size_t)(total > 0 ? total : 1) * sizeof *keys);
    it = malloc((size_t)(total > 0 ? total : 1) * sizeof *it);
    ord = malloc((size_t)(n > 0 ? 2 * n : 1) * sizeof *ord);
    if (!keys || !it || !ord) st = dpl_errorf(DPL_ENOMEM, "%s: out of memory (scratch for %lld elements)", name, (long long)total);
  }
  slice_cmp sc = {keys, m, 0};
  if (st == DPL_OK) {
    load_keys(kc ? kc->_data : c->_data, es, total, c->_dtype, 0, it, &fn);
    for (int64_t t = 0; t < total; t++) keys[t] = it[t].k;
    sc.has_nan = fn >= 0;
    for (int64_t x = 0; x < n; x++) ord[x] = x;
    slice_sort(&sc, ord, ord + n, n);
    for (int64_t x = 0; x < n; x++)
      if (x == 0 || !slice_eq(&sc, ord[x - 1], ord[x])) nu++;
    int64_t oshape[DPL_MAX_DIMS];
    for (int i = 0; i < nd; i++) oshape[i] = i == dim ? nu : a->_shape[i];
    st = dpl_new(name, a->_dtype, nd, oshape, a, &res);
    if (st == DPL_OK && inverse) st = dpl_new(name, DPL_INT64, 1, &n, a, &inv);
    if (st == DPL_OK && counts) st = dpl_new(name, DPL_INT64, 1, &nu, a, &cnt);
  }
  if (st == DPL_OK) {
    int64_t pre = post ? m / post : 0, r = -1;
    const char *src = c->_data;
    char *dst = res->_data;
    for (int64_t x = 0; x < n; x++) {
      int64_t s = ord[x];
      if (x == 0 || !slice_eq(&sc, ord[x - 1], s)) {
        r++;
        if (cnt) ((int64_t *)cnt->_data)[r] = 0;
        for (int64_t p = 0; p < pre; p++)
          memcpy(dst + ((p * nu + r) * post) * es, src + (s * m + p * post) * es, (size_t)(post * es));
      }
      if (inv) ((int64_t *)inv->_data)[s] = r;
      if (cnt) ((int64_t *)cnt->_data)[r]++;
    }
  }
  free(keys);
  free(it);
  free(ord);
  dpl_release_n(4, (dpl_tensor *[]){pv, c, kv, kc});
  return dpl_hand_over(st, 3, (dpl_tensor *[]){res, inv, cnt}, (dpl_tensor **[]){out, inverse, counts});
}

int dpl_unique(const dpl_tensor *a, int32_t dim, dpl_tensor **out, dpl_tensor **inverse, dpl_tensor **counts)
{
  const char *name = "unique";
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", name);
  *out = NULL;
  if (inverse) *inverse = NULL;
  if (counts) *counts = NULL;
  DPL_TRY(dpl_check_handle(name, "self", a));
  if (dim != -1 && (dim < 0 || dim >= a->_ndim))
    return dpl_errorf(DPL_EINVAL, "%s: dim %d out of range (expected 0..%d for a %d-d tensor, or -1 for all)", name,
                      (int)dim, (int)a->_ndim - 1, (int)a->_ndim);
  if (dpl_is_devmem(a)) return dpl_unique_dev(name, a, dim, out, inverse, counts);
  if (dim != -1) return unique_dim(name, a, dim, out, inverse, counts);
  /* all elements: sorted values, a 1-d result */
  dpl_tensor *c = NULL, *res = NULL, *inv = NULL, *cnt = NULL;
  int64_t n = a->_numel, fn = -1, nu = 0, es = dpl_elsize(a->_dtype);
  sort_item *it = NULL, *s = NULL;
  int st = dpl_contig_as(name, a, a->_dtype, &c);
  if (st == DPL_OK) {
    it = malloc((size_t)(n > 0 ? 2 * n : 1) * sizeof *it);
    if (!it) st = dpl_errorf(DPL_ENOMEM, "%s: out of memory (scratch for %lld elements)", name, (long long)n);
  }
  if (st == DPL_OK) {
    load_keys(c->_data, es, n, c->_dtype, 0, it, &fn);
    s = radix_sort(it, it + n, n);
    for (int64_t t = 0; t < n; t++)
      if (t == 0 || s[t].k != s[t - 1].k || (fn >= 0 && s[t].k == KEY_NAN)) nu++;
    st = dpl_new(name, a->_dtype, 1, &nu, a, &res);
    if (st == DPL_OK && inverse) st = dpl_new(name, DPL_INT64, a->_ndim, a->_shape, a, &inv);
    if (st == DPL_OK && counts) st = dpl_new(name, DPL_INT64, 1, &nu, a, &cnt);
  }
  if (st == DPL_OK) {
    const char *src = c->_data;
    char *dst = res->_data;
    int64_t *pi = inv ? inv->_data : NULL, *pc = cnt ? cnt->_data : NULL, r = -1;
    for (int64_t t = 0; t < n; t++) {
      if (t == 0 || s[t].k != s[t - 1].k || (fn >= 0 && s[t].k == KEY_NAN)) {
        r++;
        put_value(dst + r * es, src + s[t].i * es, es);
        if (pc) pc[r] = 0;
      }
      if (pi) pi[s[t].i] = r;
      if (pc) pc[r]++;
    }
  }
  free(it);
  dpl_tensor_release(c);
  return dpl_hand_over(st, 3, (dpl_tensor *[]){res, inv, cnt}, (dpl_tensor **[]){out, inverse, counts});
}
