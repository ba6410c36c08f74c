/* dpl_comm.c: the public collectives API (dpl_comm_* in dpl.h): argument
 * checks, the per-group sequence number and descriptor of each call, the
 * optional DPL_COMM_CHECK round, the "group already failed" rule, and dispatch
 * to a backend (shm: dpl_comm_shm_*.c, mpi: dpl_comm_mpi.c). */
#define _GNU_SOURCE
#include "dpl_comm_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *kind_names[] = { "?", "barrier", "all_reduce", "reduce", "broadcast", "all_gather",
                                    "gather", "scatter", "reduce_scatter", "new_group" };
const char *dpl_comm_kind_name(int32_t kind)
{
  return (kind >= 1 && kind <= DPL_K_NEW_GROUP) ? kind_names[kind] : "?";
}

const char *dpl_comm_op_name(int32_t op)
{
  static const char *nm[] = { "sum", "mean", "max", "min", "prod" };
  return (op >= 0 && op <= 4) ? nm[op] : "?";
}

const char *dpl_comm_desc_str(const dpl_coll_desc *d, char *buf, size_t n)
{
  int k = snprintf(buf, n, "%s #%llu", dpl_comm_kind_name(d->kind), (unsigned long long)d->seq);
  if (k < 0 || (size_t)k >= n) return buf;
  if (d->kind == DPL_K_BARRIER || d->kind == DPL_K_NEW_GROUP) return buf;
  int m = snprintf(buf + k, n - (size_t)k, " (%s x %lld", dpl_comm_dtype_name(d->dtype), (long long)d->count);
  if (m < 0 || (size_t)(k + m) >= n) return buf;
  k += m;
  if (d->op >= 0) { m = snprintf(buf + k, n - (size_t)k, ", %s", dpl_comm_op_name(d->op)); if (m > 0) k += m; }
  if ((size_t)k < n && d->root >= 0) { m = snprintf(buf + k, n - (size_t)k, ", root %d", d->root); if (m > 0) k += m; }
  if ((size_t)k < n) snprintf(buf + k, n - (size_t)k, ")");
  return buf;
}

int dpl_comm_compare_descs(const dpl_coll_desc *all, int32_t n, char *msg, size_t msglen)
{
  for (int32_t j = 1; j < n; j++) {
    const dpl_coll_desc *a = &all[0], *b = &all[j];
    if (a->seq != b->seq || a->kind != b->kind || a->dtype != b->dtype || a->count != b->count ||
        a->op != b->op || a->root != b->root) {
      char sa[128], sb[128];
      snprintf(msg, msglen, "dist: collective mismatch: rank 0 called %s but rank %d called %s",
               dpl_comm_desc_str(a, sa, sizeof sa), j, dpl_comm_desc_str(b, sb, sizeof sb));
      return DPL_ECOMM;
    }
  }
  return DPL_OK;
}

double dpl_comm_env_timeout(void)
{
  const char *e = getenv("DPL_COMM_TIMEOUT");
  if (e && *e) {
    char *end;
    double v = strtod(e, &end);
    if (end != e && *end == 0 && v > 0 && isfinite(v)) return v;
  }
  return 1800.0;
}

dpl_comm *dpl_comm_alloc(const dpl_comm_ops *ops, int32_t backend, int32_t rank, int32_t size,
                         double timeout_s, int32_t check)
{
  dpl_comm *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->ops = ops;
  c->backend = backend;
  c->rank = rank;
  c->size = size;
  c->timeout_s = timeout_s > 0 && isfinite(timeout_s) ? timeout_s : dpl_comm_env_timeout();
  if (check < 0) { /* on unless DPL_COMM_CHECK=0: a mismatched call must fail, not hand garbage */
    const char *e = getenv("DPL_COMM_CHECK");
    check = (e && strcmp(e, "0") == 0) ? 0 : 1;
  }
  c->check = check;
  return c;
}

static int valid_job(const char *job)
{
  if (!job || !*job || strlen(job) > 120) return 0;
  for (const char *p = job; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
      return 0;
  return 1;
}

int dpl_comm_init_shm(const char *job, int32_t rank, int32_t world_size, double timeout_s, dpl_comm **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "dist: out is NULL");
  *out = NULL;
  if (world_size < 1) return dpl_errorf(DPL_EINVAL, "dist: world_size must be >= 1, got %d", world_size);
  if (rank < 0 || rank >= world_size)
    return dpl_errorf(DPL_EINVAL, "dist: rank must be in [0, %d) (ranks are 0-based), got %d", world_size, rank);
  if (world_size > 1 && !valid_job(job))
    return dpl_errorf(DPL_EINVAL, "dist: shm job id must be 1-120 characters of [A-Za-z0-9_-], got '%s'",
                      job ? job : "(null)");
  int st = dpl_comm_shm_create(world_size > 1 ? job : "single", "g0", rank, world_size, timeout_s, -1, 0, out);
  if (st == DPL_OK) snprintf((*out)->job, sizeof (*out)->job, "%s", world_size > 1 ? job : "single");
  return st;
}

int dpl_comm_init_mpi(double timeout_s, dpl_comm **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "dist: out is NULL");
  *out = NULL;
  return dpl_comm_mpi_create(timeout_s, -1, out);
}

static int begin(dpl_comm *c, dpl_coll_desc *d, int32_t kind, int64_t count, int32_t dtype, int32_t op,
                 int32_t root);
static int finish(dpl_comm *c, int st);

/* What a rank passed to new_group, as exchanged with the others. */
enum { LIST_SHOWN = 12 };
typedef struct list_rec {
  int32_t n, pad;
  uint64_t hash;
  int32_t first[LIST_SHOWN];
} list_rec;

static uint64_t list_hash(const int32_t *r, int32_t n)
{
  uint64_t h = 1469598103934665603ULL;
  for (int32_t i = 0; i < n; i++) { h ^= (uint64_t)(uint32_t)r[i]; h *= 1099511628211ULL; }
  return h;
}

static void list_str(const list_rec *r, char *buf, size_t len)
{
  size_t k = 0;
  int m = snprintf(buf, len, "[");
  if (m > 0) k = (size_t)m;
  int32_t shown = r->n < LIST_SHOWN ? r->n : LIST_SHOWN;
  for (int32_t i = 0; i < shown && k < len; i++) {
    m = snprintf(buf + k, len - k, "%s%d", i ? "," : "", r->first[i]);
    if (m > 0) k += (size_t)m;
  }
  if (k < len) snprintf(buf + k, len - k, r->n > LIST_SHOWN ? ",... (%d ranks)]" : "]", r->n);
}

/* Every rank of parent must pass the same list (torch's rule): the lists' hashes go
 * round the parent (a collective, "new_group #k" in messages), and every rank raises
 * the same error, naming two ranks and their lists, when they differ. The parent stays
 * usable: the exchange itself succeeded. */
static int same_lists(dpl_comm *parent, int32_t n, const int32_t *ranks)
{
  list_rec mine;
  memset(&mine, 0, sizeof mine);
  mine.n = n;
  mine.hash = list_hash(ranks, n);
  for (int32_t i = 0; i < n && i < LIST_SHOWN; i++) mine.first[i] = ranks[i];
  list_rec *all = calloc((size_t)parent->size, sizeof *all);
  if (!all) return dpl_errorf(DPL_ENOMEM, "dist: new_group: out of memory");
  dpl_coll_desc d;
  int st = begin(parent, &d, DPL_K_NEW_GROUP, (int64_t)sizeof mine, DPL_UINT8, -1, -1);
  if (!st) st = parent->ops->all_gather(parent, &d, &mine, all);
  st = finish(parent, st);
  for (int32_t j = 1; st == DPL_OK && j < parent->size; j++) {
    if (all[j].n == all[0].n && all[j].hash == all[0].hash) continue;
    char a[160], b[160];
    list_str(&all[0], a, sizeof a);
    list_str(&all[j], b, sizeof b);
    st = dpl_errorf(DPL_EINVAL, "dist: new_group: the ranks passed different lists: rank 0 passed %s but rank %d "
                    "passed %s (every rank must call new_group with the same ranks, also the ranks outside the "
                    "list, as in torch.distributed)", a, (int)j, b);
  }
  free(all);
  return st;
}

int dpl_comm_new_group(dpl_comm *parent, int32_t n, const int32_t *ranks, dpl_comm **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "dist: out is NULL");
  *out = NULL;
  if (!parent) return dpl_errorf(DPL_EINVAL, "dist: new_group: no parent group");
  if (parent->failed) return dpl_errorf(DPL_ECOMM, "%s", parent->failmsg);
  if (n < 1 || n > parent->size || !ranks)
    return dpl_errorf(DPL_EINVAL, "dist: new_group: needs 1..%d ranks, got %d", parent->size, n);
  int32_t me = -1;
  for (int32_t i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= parent->size)
      return dpl_errorf(DPL_EINVAL, "dist: new_group: rank %d is not in [0, %d)", ranks[i], parent->size);
    if (i > 0 && ranks[i] <= ranks[i - 1])
      return dpl_errorf(DPL_EINVAL, "dist: new_group: ranks must be increasing without repeats");
    if (ranks[i] == parent->rank) me = i;
  }
  if (parent->size > 1) {
    int st = same_lists(parent, n, ranks);
    if (st) return st;
  }
  parent->groups++;
  return parent->ops->new_group(parent, n, ranks, me, out);
}

void dpl_comm_destroy(dpl_comm *c)
{
  if (!c) return;
  c->ops->destroy(c);
  free(c);
}

int dpl_comm_abort(dpl_comm *c, const char *reason)
{
  if (!c) return dpl_errorf(DPL_EINVAL, "dist: no group");
  return c->ops->abort(c, reason ? reason : "aborted");
}

int32_t dpl_comm_rank(const dpl_comm *c) { return c ? c->rank : -1; }
int32_t dpl_comm_size(const dpl_comm *c) { return c ? c->size : 0; }
int32_t dpl_comm_backend_of(const dpl_comm *c) { return c ? c->backend : -1; }
int64_t dpl_comm_seq(const dpl_comm *c) { return c ? (int64_t)c->seq : 0; }

double dpl_comm_timeout(const dpl_comm *c) { return c ? c->timeout_s : 0; }

int dpl_comm_set_timeout(dpl_comm *c, double seconds)
{
  if (!c) return dpl_errorf(DPL_EINVAL, "dist: no group");
  if (!(seconds > 0) || !isfinite(seconds))
    return dpl_errorf(DPL_EINVAL, "dist: timeout must be a finite number of seconds > 0, got %g", seconds);
  c->timeout_s = seconds;
  return DPL_OK;
}

int dpl_comm_set_check(dpl_comm *c, int32_t on)
{
  if (!c) return dpl_errorf(DPL_EINVAL, "dist: no group");
  c->check = on ? 1 : 0;
  return DPL_OK;
}

/* Common entry: validates, numbers the call, runs the check round. */
static int begin(dpl_comm *c, dpl_coll_desc *d, int32_t kind, int64_t count, int32_t dtype, int32_t op,
                 int32_t root)
{
  if (!c) return dpl_errorf(DPL_EINVAL, "dist: no process group (call init_process_group first)");
  if (c->failed) return dpl_errorf(DPL_ECOMM, "%s", c->failmsg);
  if (kind != DPL_K_BARRIER) {
    if (count < 0) return dpl_errorf(DPL_EINVAL, "dist: %s: count must be >= 0, got %lld", dpl_comm_kind_name(kind), (long long)count);
    if (dpl_comm_dtype_size(dtype) == 0) return dpl_errorf(DPL_EINVAL, "dist: %s: unknown dtype %d", dpl_comm_kind_name(kind), dtype);
    if (op >= 0) { int st = dpl_comm_op_valid(op, dtype); if (st) return st; }
    if (root != -1 && (root < 0 || root >= c->size))
      return dpl_errorf(DPL_EINVAL, "dist: %s: root %d is not a rank of this group (size %d)", dpl_comm_kind_name(kind), root, c->size);
    if (count > INT64_MAX / 64 / (c->size > 0 ? c->size : 1))
      return dpl_errorf(DPL_EINVAL, "dist: %s: count %lld is too large", dpl_comm_kind_name(kind), (long long)count);
  }
  d->seq = ++c->seq;
  d->kind = kind;
  d->count = count;
  d->dtype = kind == DPL_K_BARRIER ? -1 : dtype;
  d->op = op;
  d->root = root;
  /* a call made while a signal is stopping the script fails before it starts (shm does
   * this in its first synchronisation, where it also fails the group for the others): a
   * compiled loop of collectives whose peers are ready would not stop before the grace
   * period ends */
  if (c->backend != DPL_COMM_SHM && c->size > 1) {
    int32_t sig = dpl_signal_received();
    if (sig) {
      char w[160];
      return dpl_errorf(DPL_EINTR, "dist: rank %d interrupted by signal %d in %s", c->rank, sig - 128,
                        dpl_comm_desc_str(d, w, sizeof w));
    }
  }
  if (c->check && c->size > 1) return c->ops->check(c, d);
  return DPL_OK;
}

/* Remembers the first failure: the group is unusable afterwards. */
static int finish(dpl_comm *c, int st)
{
  if (st != DPL_OK && st != DPL_EINVAL && !c->failed) {
    c->failed = 1;
    snprintf(c->failmsg, sizeof c->failmsg, "%s", dpl_last_error());
  }
  return st;
}

#define NEED(p, what) do { if (count > 0 && !(p)) return dpl_errorf(DPL_EINVAL, "dist: %s: %s is NULL", what, #p); } while (0)

int dpl_comm_barrier(dpl_comm *c)
{
  dpl_coll_desc d;
  int st = begin(c, &d, DPL_K_BARRIER, 0, 0, -1, -1);
  if (st) return c ? finish(c, st) : st;
  return finish(c, c->ops->barrier(c, &d));
}

int dpl_comm_all_reduce(dpl_comm *c, void *buf, int64_t count, int32_t dtype, int32_t op)
{
  NEED(buf, "all_reduce");
  dpl_coll_desc d;
  int st = begin(c, &d, DPL_K_ALL_REDUCE, count, dtype, op, -1);
  if (st) return c ? finish(c, st) : st;
  return finish(c, c->ops->all_reduce(c, &d, buf));
}

int dpl_comm_all_reduce_multi(dpl_comm *c, void *const *bufs, const int64_t *counts, int32_t nbufs, int32_t dtype,
                              int32_t op)
{
  if (nbufs < 0) return dpl_errorf(DPL_EINVAL, "dist: all_reduce_multi: nbufs must be >= 0, got %d", (int)nbufs);
  if (nbufs > 0 && (!bufs || !counts)) return dpl_errorf(DPL_EINVAL, "dist: all_reduce_multi: bufs or counts is NULL");
  int64_t total = 0;
  for (int32_t i = 0; i < nbufs; i++) {
    if (counts[i] < 0)
      return dpl_errorf(DPL_EINVAL, "dist: all_reduce_multi: count %d must be >= 0, got %lld", (int)i + 1,
                        (long long)counts[i]);
    if (counts[i] > 0 && !bufs[i])
      return dpl_errorf(DPL_EINVAL, "dist: all_reduce_multi: buffer %d is NULL", (int)i + 1);
    if (counts[i] > INT64_MAX / 2 - total) return dpl_errorf(DPL_EINVAL, "dist: all_reduce_multi: counts too large");
    total += counts[i];
  }
  if (c && !c->ops->all_reduce_multi) { /* pack, reduce, unpack */
    int64_t es = dpl_comm_dtype_size(dtype);
    if (es == 0) return dpl_errorf(DPL_EINVAL, "dist: all_reduce: unknown dtype %d", dtype);
    uint8_t *tmp = malloc(total * es > 0 ? (size_t)(total * es) : 1);
    if (!tmp) return dpl_errorf(DPL_ENOMEM, "dist: all_reduce_multi: out of memory (%lld bytes)", (long long)(total * es));
    int64_t o = 0;
    for (int32_t i = 0; i < nbufs; i++) { if (counts[i]) memcpy(tmp + o * es, bufs[i], (size_t)(counts[i] * es)); o += counts[i]; }
    int st = dpl_comm_all_reduce(c, tmp, total, dtype, op);
    o = 0;
    if (st == DPL_OK)
      for (int32_t i = 0; i < nbufs; i++) { if (counts[i]) memcpy(bufs[i], tmp + o * es, (size_t)(counts[i] * es)); o += counts[i]; }
    free(tmp);
    return st;
  }
  dpl_coll_desc d;
  int st = begin(c, &d, DPL_K_ALL_REDUCE, total, dtype, op, -1);
  if (st) return c ? finish(c, st) : st;
  return finish(c, c->ops->all_reduce_multi(c, &d, bufs, counts, nbufs));
}

int dpl_comm_reduce(dpl_comm *c, void *buf, int64_t count, int32_t dtype, int32_t op, int32_t root)
{
  NEED(buf, "reduce");
  dpl_coll_desc d;
  int st = begin(c, &d, DPL_K_REDUCE, count, dtype, op, root);
  if (st) return c ? finish(c, st) : st;
  return finish(c, c->ops->reduce(c, &d, buf));
}

int dpl_comm_broadcast(dpl_comm *c, void *buf, int64_t count, int32_t dtype, int32_t root)
{
  NEED(buf, "broadcast");
  dpl_coll_desc d;
  int st = begin(c, &d, DPL_K_BROADCAST, count, dtype, -1, root);
  if (st) return c ? finish(c, st) : st;
  return finish(c, c->ops->broadcast(c, &d, buf));
}

int dpl_comm_all_gather(dpl_comm *c, const void *send, void *recv, int64_t count, int32_t dtype)
{
  NEED(send, "all_gather");
  NEED(recv, "all_gather");
  dpl_coll_desc d;
  int st = begin(c, &d, DPL_K_ALL_GATHER, count, dtype, -1, -1);
  if (st) return c ? finish(c, st) : st;
  return finish(c, c->ops->all_gather(c, &d, send, recv));
}

int dpl_comm_gather(dpl_comm *c, const void *send, void *recv, int64_t count, int32_t dtype, int32_t root)
{
  NEED(send, "gather");
  if (c && c->rank == root) NEED(recv, "gather");
  dpl_coll_desc d;
  int st = begin(c, &d, DPL_K_GATHER, count, dtype, -1, root);
  if (st) return c ? finish(c, st) : st;
  return finish(c, c->ops->gather(c, &d, send, recv));
}

int dpl_comm_scatter(dpl_comm *c, const void *send, void *recv, int64_t count, int32_t dtype, int32_t root)
{
  NEED(recv, "scatter");
  if (c && c->rank == root) NEED(send, "scatter");
  dpl_coll_desc d;
  int st = begin(c, &d, DPL_K_SCATTER, count, dtype, -1, root);
  if (st) return c ? finish(c, st) : st;
  return finish(c, c->ops->scatter(c, &d, send, recv));
}

int dpl_comm_reduce_scatter(dpl_comm *c, const void *send, void *recv, int64_t count, int32_t dtype, int32_t op)
{
  NEED(send, "reduce_scatter");
  NEED(recv, "reduce_scatter");
  dpl_coll_desc d;
  int st = begin(c, &d, DPL_K_REDUCE_SCATTER, count, dtype, op, -1);
  if (st) return c ? finish(c, st) : st;
  return finish(c, c->ops->reduce_scatter(c, &d, send, recv));
}
