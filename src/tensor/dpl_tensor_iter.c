/* dpl_tensor_iter.c: the kernels' plumbing: a small thread pool
 * (dpl_parallel_for, dpl_set_num_threads honouring DPL_NUM_THREADS and
 * OMP_NUM_THREADS, started lazily and restarted after fork) and the strided
 * N-ary element iterator (broadcast strides, dim coalescing, 1-D inner runs). */
#define _GNU_SOURCE
#include "dpl_tensor_internal.h"
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_THREADS 256

static pthread_once_t nt_once = PTHREAD_ONCE_INIT;
static _Atomic int num_threads = 1;

/* A thread count from the environment; 0 when unset. DPL_NUM_THREADS that is no
 * count or too big is reported (OMP_NUM_THREADS may hold OpenMP's lists). */
static int env_threads(const char *name, int warn)
{
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  char *end = NULL;
  long n = strtol(v, &end, 10);
  if (*end != 0 || n < 1) {
    if (warn)
      fprintf(stderr, "dplhost: warning: %s='%s' is not a thread count (an integer from 1 to %d); ignored\n",
              name, v, MAX_THREADS);
    return 0;
  }
  if (n > MAX_THREADS) {
    if (warn) fprintf(stderr, "dplhost: warning: %s=%ld is more than %d threads; using %d\n", name, n,
                      MAX_THREADS, MAX_THREADS);
    return MAX_THREADS;
  }
  return (int)n;
}

static void init_threads(void)
{
  int n = env_threads("DPL_NUM_THREADS", 1);
  if (!n) n = env_threads("OMP_NUM_THREADS", 0);
  if (!n) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    n = c > 0 ? (int)(c > MAX_THREADS ? MAX_THREADS : c) : 1;
  }
  atomic_store(&num_threads, n);
}

int dpl_threads(void)
{
  pthread_once(&nt_once, init_threads);
  return atomic_load(&num_threads);
}

int32_t dpl_get_num_threads(void) { return dpl_threads(); }

/* ---- pool ----
 * A job is published by bumping `gen` (its low 16 bits: the job's chunk count); workers spin on it for up to spin_ns
 * after their last job (a training step issues parallel ops tens of µs apart,
 * and waking a sleeping thread costs a futex call plus, on a VM, tens of µs of
 * scheduling), then sleep on a condition variable. The caller runs chunk 0 and
 * spins for the others (sched_yield after a while, for an oversubscribed machine).
 * DPL_SPIN_US sets the workers' spin (default 200 µs; 0: sleep at once). */
typedef struct pool {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t th[MAX_THREADS];
  int nworkers;
  pid_t pid;
  _Atomic uint64_t gen;
  _Atomic int pending;
  _Atomic int sleepers;
  /* the job, written before gen is bumped */
  int nchunks;
  int64_t n;
  dpl_range_fn fn;
  void *ctx;
} pool;

static pool P; /* set up by ensure_workers (pid 0 never matches) */
static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int in_worker;
static int64_t spin_ns = 200000;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void chunk_range(int64_t n, int nchunks, int k, int64_t *lo, int64_t *hi)
{
  *lo = n * k / nchunks;
  *hi = n * (k + 1) / nchunks;
}

/* Waits until gen differs from seen: spins for spin_ns, then sleeps. */
static uint64_t wait_job(uint64_t seen)
{
  uint64_t g;
  int64_t t0 = 0;
  for (unsigned i = 0;; i++) {
    if ((g = atomic_load_explicit(&P.gen, memory_order_acquire)) != seen) return g;
    cpu_relax();
    if ((i & 255) == 255) {
      int64_t t = now_ns();
      if (!t0) t0 = t;
      else if (t - t0 >= spin_ns) break;
    }
  }
  pthread_mutex_lock(&P.mu);
  atomic_fetch_add(&P.sleepers, 1); /* seq_cst, then gen is read again: the caller's bump is seen, or it sees us */
  while ((g = atomic_load(&P.gen)) == seen) pthread_cond_wait(&P.cv, &P.mu);
  atomic_fetch_sub(&P.sleepers, 1);
  pthread_mutex_unlock(&P.mu);
  return g;
}

static void *worker(void *arg)
{
  int id = (int)(intptr_t)arg; /* 1..nworkers; chunk 0 is the caller's */
  in_worker = 1;
  uint64_t seen = 0;
  for (;;) {
    seen = wait_job(seen);
    /* the chunk count comes with gen: a worker left out of a job must not read the
     * job's fields, which the caller may already be rewriting for the next one */
    if (id >= (int)(seen & 0xffff)) continue;
    int64_t lo, hi;
    chunk_range(P.n, P.nchunks, id, &lo, &hi);
    P.fn(lo, hi, P.ctx);
    atomic_fetch_sub_explicit(&P.pending, 1, memory_order_release);
  }
  return NULL;
}

/* Makes sure nworkers >= want (called with busy held). */
static void ensure_workers(int want)
{
  if (P.pid != getpid()) { /* fresh process (or forked child: the parent's threads are gone) */
    P.nworkers = 0;
    atomic_store(&P.gen, 0);
    atomic_store(&P.pending, 0);
    atomic_store(&P.sleepers, 0);
    P.pid = getpid();
    pthread_mutex_init(&P.mu, NULL);
    pthread_cond_init(&P.cv, NULL);
    const char *v = getenv("DPL_SPIN_US");
    if (v && *v) spin_ns = (int64_t)(strtod(v, NULL) * 1000);
  }
  while (P.nworkers < want && P.nworkers < MAX_THREADS - 1) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&P.th[P.nworkers], &attr, worker, (void *)(intptr_t)(P.nworkers + 1));
    pthread_attr_destroy(&attr);
    if (rc != 0) break;
    P.nworkers++;
  }
}

void dpl_parallel_for(int64_t n, int64_t grain, dpl_range_fn fn, void *ctx)
{
  if (n <= 0) return;
  int nt = dpl_threads();
  if (grain < 1) grain = 1;
  if (nt <= 1 || n < 2 * grain || in_worker || pthread_mutex_trylock(&busy) != 0) {
    fn(0, n, ctx);
    return;
  }
  int64_t chunks = n / grain;
  if (chunks > nt) chunks = nt;
  ensure_workers((int)chunks - 1);
  if (P.nworkers < chunks - 1) chunks = P.nworkers + 1;
  if (chunks <= 1) {
    pthread_mutex_unlock(&busy);
    fn(0, n, ctx);
    return;
  }
  P.fn = fn;
  P.ctx = ctx;
  P.n = n;
  P.nchunks = (int)chunks;
  atomic_store_explicit(&P.pending, (int)chunks - 1, memory_order_relaxed);
  /* seq_cst: publishes the job, ordered before reading sleepers; the low 16 bits
   * carry the chunk count (MAX_THREADS < 65536), the rest counts jobs */
  uint64_t g = atomic_load_explicit(&P.gen, memory_order_relaxed);
  atomic_store(&P.gen, (((g >> 16) + 1) << 16) | (uint64_t)chunks);
  if (atomic_load(&P.sleepers) > 0) {
    pthread_mutex_lock(&P.mu);
    pthread_cond_broadcast(&P.cv);
    pthread_mutex_unlock(&P.mu);
  }
  int64_t lo, hi;
  chunk_range(n, (int)chunks, 0, &lo, &hi);
  in_worker = 1;
  fn(lo, hi, ctx);
  in_worker = 0;
  for (unsigned i = 0; atomic_load_explicit(&P.pending, memory_order_acquire) > 0; i++) {
    if (i < 4096) cpu_relax();
    else sched_yield(); /* a worker that lost its core: give it ours */
  }
  pthread_mutex_unlock(&busy);
}

int dpl_set_num_threads(int32_t n)
{
  if (n < 1 || n > MAX_THREADS)
    return dpl_errorf(DPL_EINVAL, "set_num_threads: expected 1..%d threads, got %d", MAX_THREADS, (int)n);
  pthread_once(&nt_once, init_threads);
  atomic_store(&num_threads, n);
  dpl_blas_set_threads(n);
  return DPL_OK;
}

/* ---- iterator ---- */
void dpl_iter_init(dpl_iter *it, int nargs, dpl_tensor *const *ops, int32_t ndim, const int64_t *shape)
{
  it->nargs = nargs;
  int64_t st[DPL_ITER_MAX][DPL_MAX_DIMS];
  for (int a = 0; a < nargs; a++) {
    dpl_broadcast_strides(ops[a], ndim, shape, st[a]);
    int64_t es = dpl_elsize(ops[a]->_dtype);
    for (int d = 0; d < ndim; d++) st[a][d] *= es;
    it->base[a] = (char *)ops[a]->_data;
  }
  it->numel = dpl_shape_numel(ndim, shape);
  /* drop size-1 dims, then merge dims that are contiguous for every operand */
  int k = 0;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] == 1) continue;
    if (k > 0) {
      int merge = 1;
      for (int a = 0; a < nargs; a++)
        if (it->stride[a][k - 1] != st[a][d] * shape[d]) { merge = 0; break; }
      if (merge) {
        it->shape[k - 1] *= shape[d];
        for (int a = 0; a < nargs; a++) it->stride[a][k - 1] = st[a][d];
        continue;
      }
    }
    it->shape[k] = shape[d];
    for (int a = 0; a < nargs; a++) it->stride[a][k] = st[a][d];
    k++;
  }
  if (k == 0) {
    it->shape[0] = 1;
    for (int a = 0; a < nargs; a++) it->stride[a][0] = 0;
    k = 1;
  }
  it->ndim = k;
}

typedef struct iter_job {
  dpl_iter *it;
  dpl_loop_fn fn;
  void *ctx;
} iter_job;

static void iter_range(int64_t lo, int64_t hi, void *vjob)
{
  iter_job *job = vjob;
  dpl_iter *it = job->it;
  int nd = it->ndim, na = it->nargs;
  int64_t idx[DPL_MAX_DIMS];
  int64_t rem = lo;
  for (int d = nd - 1; d >= 0; d--) { idx[d] = rem % it->shape[d]; rem /= it->shape[d]; }
  char *p[DPL_ITER_MAX];
  int64_t inner[DPL_ITER_MAX];
  for (int a = 0; a < na; a++) {
    p[a] = it->base[a];
    for (int d = 0; d < nd; d++) p[a] += idx[d] * it->stride[a][d];
    inner[a] = it->stride[a][nd - 1];
  }
  int64_t pos = lo;
  while (pos < hi) {
    int64_t n = it->shape[nd - 1] - idx[nd - 1];
    if (n > hi - pos) n = hi - pos;
    job->fn(p, inner, n, job->ctx);
    pos += n;
    if (pos >= hi) break;
    idx[nd - 1] += n;
    for (int a = 0; a < na; a++) p[a] += n * inner[a];
    for (int d = nd - 1; d > 0 && idx[d] == it->shape[d]; d--) {
      idx[d] = 0;
      idx[d - 1]++;
      for (int a = 0; a < na; a++) p[a] += it->stride[a][d - 1] - it->shape[d] * it->stride[a][d];
    }
  }
}

void dpl_iter_run(dpl_iter *it, dpl_loop_fn fn, void *ctx, int64_t grain)
{
  if (it->numel == 0) return;
  iter_job job = {it, fn, ctx};
  if (grain <= 0) iter_range(0, it->numel, &job);
  else dpl_parallel_for(it->numel, grain, iter_range, &job);
}
