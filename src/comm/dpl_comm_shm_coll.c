/* dpl_comm_shm_coll.c: the shm backend's collective algorithms. Data moves in
 * chunks through two sets of per-rank slots (double buffering: a rank fills
 * chunk k+1 while the others still read chunk k). Every call's first phase
 * publishes its descriptor and ends with a wait for all ranks, after which each
 * rank compares everyone's descriptor: a mismatched call fails on every rank
 * before any data is used, and every copy is bounded by the slot size, so
 * mismatched sizes can never write outside a buffer.
 *
 * all_reduce (large): each rank copies the parts of the chunk the others own
 * into its slot; rank r reduces part r (its own data read in place, the
 * others' from their slots, in rank order) into its slot and back into its
 * own data; then every rank copies the others' reduced parts out. What the
 * others read goes with plain or streaming stores (slot_stores). Small
 * buffers: everyone copies its whole buffer in and reduces all slots itself
 * (one synchronisation). The user's
 * data may be several buffers (all_reduce_multi: a DDP gradient bucket in
 * place), handled as their concatenation. */
#define _GNU_SOURCE
#include "dpl_comm_shm.h"
#include "dpl_stream_copy.h"
#include <string.h>

enum { SMALL_BYTES = 16 * 1024 };
/* Results of calls at least this large go to the user's buffer with
 * non-temporal stores: it is larger than the caches anyway, and streaming
 * stores skip reading each destination line before writing it. */
#define NT_BYTES (8u << 20)

static void copy_nt(void *dst, const void *src, size_t n) { dpl_stream_copy(dst, src, n); }

static inline void copy(void *dst, const void *src, size_t n)
{
  if (n && dst != src) memmove(dst, src, n);
}

/* First phase of every call: publish d, signal, wait for all, compare. A rank
 * that arrives after a peer gave up on this call (a timeout) finds the peer's
 * step already there, so the wait alone would succeed (and the small paths,
 * whose only synchronisation this is, would complete with the peer's data):
 * the group's abort flag, read once the wait is over, fails it too. */
static int first_sync(dpl_comm *c, const dpl_coll_desc *d)
{
  int st = shm_check_signal(c);
  if (st) return st;
  shm_put_desc(c, d);
  shm_signal(c);
  st = shm_wait_all(c, SHM(c)->my_step);
  if (st) return st;
  if (atomic_load_explicit(&SHM(c)->hdr->abort_flag, memory_order_acquire)) return shm_abort_error(c);
  return shm_verify_descs(c, d);
}

static int sbarrier(dpl_comm *c, const dpl_coll_desc *d)
{
  if (c->size == 1) return DPL_OK;
  shm_start(c, d);
  return first_sync(c, d);
}

/* The user's data as a list of segments (one for all_reduce/reduce; several for
 * all_reduce_multi, a DDP bucket's gradients in place): element offsets into
 * their concatenation map to (pointer, run) pieces. */
typedef struct segs {
  void *const *p;
  const int64_t *n; /* elements per segment */
  int32_t k;
  int64_t es;
} segs;

/* Calls fn(piece, rel, len, ctx) for each piece of elements [off, off + len):
 * rel = the piece's offset from off. */
typedef void (*piece_fn)(uint8_t *piece, int64_t rel, int64_t len, void *ctx);
static void each_piece(const segs *S, int64_t off, int64_t len, piece_fn fn, void *ctx)
{
  int64_t base = 0, rel = 0;
  for (int32_t i = 0; i < S->k && len > 0; i++) {
    int64_t n = S->n[i];
    if (off < base + n) {
      int64_t from = off - base, take = n - from < len ? n - from : len;
      fn((uint8_t *)S->p[i] + from * S->es, rel, take, ctx);
      off += take; len -= take; rel += take;
    }
    base += n;
  }
}

typedef struct xfer { uint8_t *mem; int64_t es; int nt; } xfer;
static void piece_in(uint8_t *piece, int64_t rel, int64_t len, void *ctx)
{
  xfer *x = ctx;
  if (x->nt) dpl_stream_copy_nf(x->mem + rel * x->es, piece, (size_t)(len * x->es));
  else copy(x->mem + rel * x->es, piece, (size_t)(len * x->es));
}
static void piece_out(uint8_t *piece, int64_t rel, int64_t len, void *ctx)
{
  xfer *x = ctx;
  if (x->nt) copy_nt(piece, x->mem + rel * x->es, (size_t)(len * x->es));
  else copy(piece, x->mem + rel * x->es, (size_t)(len * x->es));
}
/* slot <- data[off, off + len) / data[off, off + len) <- slot */
static void segs_in(uint8_t *dst, const segs *S, int64_t off, int64_t len, int nt)
{
  xfer x = { dst, S->es, nt };
  each_piece(S, off, len, piece_in, &x);
  if (nt) dpl_stream_fence();
}
static void segs_out(const segs *S, int64_t off, const uint8_t *src, int64_t len, int nt)
{
  xfer x = { (uint8_t *)src, S->es, nt };
  each_piece(S, off, len, piece_out, &x);
}

/* dst[rel..] = reduce over ranks k of (k == me ? the piece : srcs[k] + rel), per piece */
typedef struct red {
  uint8_t *dst; /* NULL: into the piece itself */
  const void *const *srcs;
  int P, me;
  int64_t es;
  int32_t dtype, op;
  int nt;   /* into dst with streaming stores */
  int back; /* and into the piece too (the own part of an all_reduce: no copy out later) */
} red;
static void piece_reduce(uint8_t *piece, int64_t rel, int64_t len, void *ctx)
{
  red *r = ctx;
  const void *v[r->P];
  for (int k = 0; k < r->P; k++)
    v[k] = k == r->me && r->dst ? (const void *)piece : (const uint8_t *)r->srcs[k] + rel * r->es;
  if (!r->dst || (!r->nt && !r->back)) {
    dpl_comm_reduce_n(r->dst ? r->dst + rel * r->es : piece, v, r->P, len, r->dtype, r->op, r->P);
    return;
  }
  /* 4 KiB at a time into a buffer that stays in L1, then to the slot and the piece */
  enum { TB = 4096 };
  uint8_t tmp[TB] __attribute__((aligned(64)));
  const void *w[r->P];
  for (int64_t o = 0, per = TB / r->es; o < len; o += per) {
    int64_t m = len - o < per ? len - o : per;
    size_t bytes = (size_t)(m * r->es);
    for (int k = 0; k < r->P; k++) w[k] = (const uint8_t *)v[k] + o * r->es;
    dpl_comm_reduce_n(tmp, w, r->P, m, r->dtype, r->op, r->P);
    if (r->nt) dpl_stream_copy_nf(r->dst + (rel + o) * r->es, tmp, bytes);
    else memcpy(r->dst + (rel + o) * r->es, tmp, bytes);
    if (r->back) memcpy(piece + o * r->es, tmp, bytes);
  }
}

/* How a large all_reduce writes the slot data its peers read: plain stores, or streaming
 * stores that send the lines to memory. Which is faster depends on where the ranks' cores
 * are, and on a VM that changes while a job runs: ranks on cores that share a last-level
 * cache pass lines through it (a 940 KB all-reduce of 2 ranks: ~85 us plain, ~125 us
 * streaming), while across core complexes every line a peer reads from another core's
 * cache, or a rank writes while a peer holds it, costs a ~300 ns round trip (~450 us plain,
 * ~130 us streaming). A rank's choice costs its peers (they read what it wrote), so all
 * ranks use one: rank 0 keeps a running mean of its call times per MiB for both, publishes
 * the cheaper in the segment's header, and every rank tries the other every 32 calls (128
 * when it cost over 1.5x as much) by the call count, which is the same on every rank. A
 * rank that reads the choice before rank 0 updated it uses the previous one for a call:
 * the stores change no value, only the time. DPL_COMM_SLOT_NT=0 or 1 fixes the choice. */
static int slot_stores(shm_impl *s)
{
  uint64_t k = s->slot_calls++;
  if (s->slot_nt_forced >= 0) return s->slot_nt_forced;
  if (k < 4) return (int)(k & 1); /* the first two calls warm up (not counted), then one of each */
  uint32_t pref = atomic_load_explicit(&s->hdr->slot_pref, memory_order_relaxed);
  int best = (int)(pref & 1);
  return k % ((pref & 2) ? 128 : 32) == 0 ? !best : best;
}
static void slot_cost_add(dpl_comm *c, int nt, double secs, int64_t bytes)
{
  shm_impl *s = SHM(c);
  if (c->rank != 0 || s->slot_nt_forced >= 0 || bytes <= 0 || s->slot_calls <= 2) return;
  double x = secs * 1e6 / ((double)bytes / (1 << 20)), *m = &s->slot_cost[nt];
  /* the time includes waiting for the peers: a late peer's spike moves the mean up by a
   * quarter at most; a lower figure counts at once by half */
  if (*m == 0) *m = x;
  else if (x < *m) *m = 0.5 * *m + 0.5 * x;
  else *m = 0.75 * *m + 0.25 * (x < 2 * *m ? x : 2 * *m);
  if (s->slot_cost[0] == 0 || s->slot_cost[1] == 0) return;
  int best = s->slot_cost[1] < s->slot_cost[0];
  double lo = s->slot_cost[best], hi = s->slot_cost[!best];
  atomic_store_explicit(&s->hdr->slot_pref, (uint32_t)best | (hi > 1.5 * lo ? 2u : 0u), memory_order_relaxed);
}

/* all_reduce (root < 0) or reduce to root, over the segments S. */
static int sreduce_segs(dpl_comm *c, const dpl_coll_desc *d, const segs *S, int root)
{
  int P = c->size, me = c->rank, st;
  if (P == 1) return DPL_OK;
  shm_impl *s = SHM(c);
  shm_start(c, d);
  int64_t es = S->es, n = d->count;
  int out = root < 0 || root == me;
  const void *srcs[P];
  if (n * es <= SMALL_BYTES && (uint64_t)(n * es) <= s->slot_bytes) {
    int b;
    if ((st = shm_begin_chunk(c, &b))) return st;
    segs_in(shm_slot(s, b, me, P), S, 0, n, 0);
    if ((st = first_sync(c, d))) return st;
    if (out) { /* every slot, the own one included, reduced into the data */
      for (int k = 0; k < P; k++) srcs[k] = shm_slot(s, b, k, P);
      red r = { NULL, srcs, P, -1, es, d->dtype, d->op, 0, 0 };
      each_piece(S, 0, n, piece_reduce, &r);
    }
    shm_end_chunk(c, b);
    return DPL_OK;
  }
  int64_t chunk = (int64_t)s->slot_bytes / es, align = 64 / es > 0 ? 64 / es : 1;
  int nt = (uint64_t)(n * es) >= NT_BYTES;
  int snt = slot_stores(s);
  int back = s->slot_back && !nt; /* below NT_BYTES: the own part's result goes back in the reducing pass */
  double t0 = dpl_clock();
  int64_t off = 0;
  int first = 1;
  do {
    int64_t L = n - off < chunk ? n - off : chunk;
    int64_t part = (L + P - 1) / P;
    part = (part + align - 1) / align * align;
    int b;
    if ((st = shm_begin_chunk(c, &b))) return st;
    uint8_t *mine = shm_slot(s, b, me, P);
    for (int j = 0; j < P; j++) {
      if (j == me) continue;
      int64_t lo = j * part, hi = lo + part < L ? lo + part : L;
      if (lo < hi) segs_in(mine + lo * es, S, off + lo, hi - lo, snt);
    }
    if (first) { if ((st = first_sync(c, d))) return st; }
    else {
      shm_signal(c);
      if ((st = shm_wait_all(c, s->my_step))) return st;
    }
    int64_t lo = me * part, hi = lo + part < L ? lo + part : L;
    if (lo < hi) { /* own data read in place, the others' from their slots, into the own slot
                    * (and, when this rank gets the result, back into its data) */
      for (int k = 0; k < P; k++) srcs[k] = shm_slot(s, b, k, P) + lo * es;
      red r = { mine + lo * es, srcs, P, me, es, d->dtype, d->op, snt, out && back };
      each_piece(S, off + lo, hi - lo, piece_reduce, &r);
      if (snt) dpl_stream_fence();
    }
    shm_signal(c);
    if (out) {
      if ((st = shm_wait_all(c, s->my_step))) return st;
      for (int j = 0; j < P; j++) {
        int64_t l2 = j * part, h2 = l2 + part < L ? l2 + part : L;
        if (l2 < h2 && !(j == me && back)) segs_out(S, off + l2, shm_slot(s, b, j, P) + l2 * es, h2 - l2, nt);
      }
    }
    shm_end_chunk(c, b);
    off += L;
    first = 0;
  } while (off < n);
  slot_cost_add(c, snt, dpl_clock() - t0, n * es);
  return DPL_OK;
}

static int sreduce_any(dpl_comm *c, const dpl_coll_desc *d, void *buf, int root)
{
  void *p[1] = { buf };
  int64_t n[1] = { d->count };
  segs S = { p, n, 1, dpl_comm_dtype_size(d->dtype) };
  return sreduce_segs(c, d, &S, root);
}

static int sall_reduce_multi(dpl_comm *c, const dpl_coll_desc *d, void *const *bufs, const int64_t *counts,
                             int32_t nbufs)
{
  segs S = { bufs, counts, nbufs, dpl_comm_dtype_size(d->dtype) };
  return sreduce_segs(c, d, &S, -1);
}

static int sall_reduce(dpl_comm *c, const dpl_coll_desc *d, void *buf) { return sreduce_any(c, d, buf, -1); }
static int sreduce(dpl_comm *c, const dpl_coll_desc *d, void *buf) { return sreduce_any(c, d, buf, d->root); }

static int sbroadcast(dpl_comm *c, const dpl_coll_desc *d, void *buf)
{
  int P = c->size, me = c->rank, root = d->root, st;
  if (P == 1) return DPL_OK;
  shm_impl *s = SHM(c);
  shm_start(c, d);
  int64_t bytes = d->count * dpl_comm_dtype_size(d->dtype), off = 0, chunk = (int64_t)s->slot_bytes;
  uint8_t *ub = buf;
  int first = 1;
  do {
    int64_t L = bytes - off < chunk ? bytes - off : chunk;
    int b;
    if ((st = shm_begin_chunk(c, &b))) return st;
    uint8_t *sl = shm_slot(s, b, root, P);
    if (me == root) copy(sl, ub + off, (size_t)L);
    if (first) { if ((st = first_sync(c, d))) return st; }
    else {
      shm_signal(c);
      if (me != root && (st = shm_wait_rank(c, root, s->my_step))) return st;
    }
    if (me != root) copy(ub + off, sl, (size_t)L);
    shm_end_chunk(c, b);
    off += L;
    first = 0;
  } while (off < bytes);
  return DPL_OK;
}

/* all_gather (root < 0) or gather to root. */
static int sgather_any(dpl_comm *c, const dpl_coll_desc *d, const void *send, void *recv, int root)
{
  int P = c->size, me = c->rank, st;
  int64_t es = dpl_comm_dtype_size(d->dtype), n = d->count;
  int out = root < 0 || root == me;
  if (P == 1) { if (out) copy(recv, send, (size_t)(n * es)); return DPL_OK; }
  shm_impl *s = SHM(c);
  shm_start(c, d);
  const uint8_t *sb = send;
  uint8_t *rb = recv;
  int64_t chunk = (int64_t)s->slot_bytes / es, off = 0;
  int first = 1;
  /* the own block may overlap send (in-place gathers): copy it last */
  do {
    int64_t L = n - off < chunk ? n - off : chunk;
    int b;
    if ((st = shm_begin_chunk(c, &b))) return st;
    copy(shm_slot(s, b, me, P), sb + off * es, (size_t)(L * es));
    if (first) { if ((st = first_sync(c, d))) return st; }
    else {
      shm_signal(c);
      if (out && (st = shm_wait_all(c, s->my_step))) return st;
    }
    if (out)
      for (int j = 0; j < P; j++)
        copy(rb + (j * n + off) * es, shm_slot(s, b, j, P), (size_t)(L * es));
    shm_end_chunk(c, b);
    off += L;
    first = 0;
  } while (off < n);
  return DPL_OK;
}

static int sall_gather(dpl_comm *c, const dpl_coll_desc *d, const void *send, void *recv)
{
  return sgather_any(c, d, send, recv, -1);
}
static int sgather(dpl_comm *c, const dpl_coll_desc *d, const void *send, void *recv)
{
  return sgather_any(c, d, send, recv, d->root);
}

static int sscatter(dpl_comm *c, const dpl_coll_desc *d, const void *send, void *recv)
{
  int P = c->size, me = c->rank, root = d->root, st;
  int64_t es = dpl_comm_dtype_size(d->dtype), n = d->count;
  const uint8_t *sb = send;
  uint8_t *rb = recv;
  if (P == 1) { copy(recv, send, (size_t)(n * es)); return DPL_OK; }
  shm_impl *s = SHM(c);
  shm_start(c, d);
  int64_t chunk = (int64_t)s->slot_bytes / es, off = 0;
  int first = 1;
  do {
    int64_t L = n - off < chunk ? n - off : chunk;
    int b;
    if ((st = shm_begin_chunk(c, &b))) return st;
    if (me == root)
      for (int j = 0; j < P; j++)
        if (j != me) copy(shm_slot(s, b, j, P), sb + (j * n + off) * es, (size_t)(L * es));
    if (first) { if ((st = first_sync(c, d))) return st; }
    else {
      shm_signal(c);
      if (me != root && (st = shm_wait_rank(c, root, s->my_step))) return st;
    }
    if (me != root) copy(rb + off * es, shm_slot(s, b, me, P), (size_t)(L * es));
    else copy(rb + off * es, sb + (me * n + off) * es, (size_t)(L * es));
    shm_end_chunk(c, b);
    off += L;
    first = 0;
  } while (off < n);
  return DPL_OK;
}

static int sreduce_scatter(dpl_comm *c, const dpl_coll_desc *d, const void *send, void *recv)
{
  int P = c->size, me = c->rank, st;
  int64_t es = dpl_comm_dtype_size(d->dtype), n = d->count;
  const uint8_t *sb = send;
  uint8_t *rb = recv;
  if (P == 1) {
    const void *srcs[1] = { send };
    return dpl_comm_reduce_n(recv, srcs, 1, n, d->dtype, d->op, 1);
  }
  shm_impl *s = SHM(c);
  shm_start(c, d);
  int64_t chunk = (int64_t)s->slot_bytes / (es * P), off = 0;
  if (chunk < 1) chunk = 1;
  const void *srcs[P];
  int first = 1;
  do {
    int64_t L = n - off < chunk ? n - off : chunk;
    int b;
    if ((st = shm_begin_chunk(c, &b))) return st;
    uint8_t *mine = shm_slot(s, b, me, P);
    for (int j = 0; j < P; j++)
      if (j != me) copy(mine + j * chunk * es, sb + (j * n + off) * es, (size_t)(L * es));
    if (first) { if ((st = first_sync(c, d))) return st; }
    else {
      shm_signal(c);
      if ((st = shm_wait_all(c, s->my_step))) return st;
    }
    for (int k = 0; k < P; k++)
      srcs[k] = k == me ? (const void *)(sb + (me * n + off) * es) : shm_slot(s, b, k, P) + me * chunk * es;
    dpl_comm_reduce_n(rb + off * es, srcs, P, L, d->dtype, d->op, P);
    shm_end_chunk(c, b);
    off += L;
    first = 0;
  } while (off < n);
  return DPL_OK;
}

const dpl_comm_ops dpl_shm_ops = {
  .barrier = sbarrier,
  .all_reduce = sall_reduce,
  .all_reduce_multi = sall_reduce_multi,
  .reduce = sreduce,
  .broadcast = sbroadcast,
  .all_gather = sall_gather,
  .gather = sgather,
  .scatter = sscatter,
  .reduce_scatter = sreduce_scatter,
  .check = dpl_shm_check,
  .new_group = dpl_shm_new_group,
  .abort = dpl_shm_abort,
  .destroy = dpl_shm_destroy,
};
