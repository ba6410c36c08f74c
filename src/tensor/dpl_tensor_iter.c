/* dpl_tensor_iter.c: the kernels' plumbing: a small thread pool
 * (dpl_parallel_for, dpl_set_num_threads honouring DPL_NUM_THREADS and
 * OMP_NUM_THREADS, started lazily and restarted after fork) and the strided
 * N-ary element iterator (broadcast strides, dim coalescing, 1-D inner runs). */
#define _GNU_SOURCE
#include "dpl_tensor_internal.h"
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
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
 * A job is published in one word, `job`: its id (high 32 bits), its chunk count (16
 * bits) and the next chunk to hand out (low 16 bits). The caller and the workers claim
 * chunks from it with a compare-and-swap that also checks the id, so a thread that
 * wakes late can never take a chunk of a later job; the chunk boundaries depend only
 * on the chunk count (results do not depend on which thread ran what). The caller
 * claims chunks too, so a worker that has not woken up (or lost its core to another
 * process: an oversubscribed machine) leaves its chunks to the others instead of
 * stalling the job until it is scheduled again; the caller then only waits for chunks
 * already running. Workers spin for up to spin_ns after their last job (a training
 * step issues parallel ops tens of µs apart, and waking a sleeping thread costs a
 * futex call plus, on a VM, tens of µs of scheduling), then sleep on a condition
 * variable. DPL_SPIN_US sets the workers' spin (default 200 µs; 0: sleep at once). */
typedef struct pool {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t th[MAX_THREADS];
  int nworkers;
  pid_t pid;
  _Atomic uint64_t job;
  _Atomic int pending; /* chunks of the current job not finished */
  _Atomic int sleepers;
  /* the job, written before job is published */
  int64_t n;
  dpl_range_fn fn;
  void *ctx;
} pool;

static pool P; /* set up by ensure_workers (pid 0 never matches) */
static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int in_worker;
static int64_t spin_ns = 200000;
/* Contention: on a machine with more runnable threads than cores (other jobs, a test
 * suite, several trainings, or more threads than cores asked for) the pool's threads
 * take CPU time from the caller, which runs a chunk of every job and all the code
 * between jobs, and a worker that loses its core in the middle of a chunk holds the
 * caller until the scheduler gives it one again (a time slice, milliseconds). Each
 * calling thread looks at windows of WINDOW_NS in which it ran jobs on several threads:
 * when it was switched out PREEMPTED times or more in one (getrusage's involuntary
 * context switches, its sched_yield while waiting for a worker included: on this VM 0-2
 * a window when quiet, 12-59 next to a busy loop), or STALLS jobs stalled in it (done
 * with every chunk it could claim, the caller waited for a claimed one more than half
 * its own time plus STALL_NS: a VM's workers lose their core now and then when quiet,
 * so one stall is not enough), the jobs use a quarter fewer threads (at least one fewer; at least one) for
 * hold_ns; then the full count is tried again. hold_ns doubles (up to HOLD_MAX_NS)
 * each time a trial finds contention, and is back to HOLD_MIN_NS after a clean window
 * at the full count. On a machine of its own nothing changes. State guarded by `busy`. */
static int64_t now_ns(void);
#define WINDOW_NS INT64_C(20000000)
#define PREEMPTED 8
#define STALLS 3
#define STALL_NS INT64_C(100000)
#define HOLD_MIN_NS INT64_C(50000000)
#define HOLD_MAX_NS INT64_C(1600000000)
static int limit;                  /* threads a job may use now; 0: all */
static int64_t hold_until_ns, hold_ns = HOLD_MIN_NS;
static _Atomic int64_t contention_events; /* windows or jobs that found contention (dpl_pool_contention) */
static _Thread_local int64_t win_t0;
static _Thread_local long win_ivcsw;
static _Thread_local int win_parallel, win_stalls; /* jobs run on several threads, and those that stalled, in this window */

static void contended(int64_t now, int nt)
{
  int full = limit == 0, cur = full ? nt : limit, cut = cur / 4 > 1 ? cur / 4 : 1;
  limit = cur - cut > 1 ? cur - cut : 1;
  hold_until_ns = now + hold_ns;
  if (full) hold_ns = hold_ns * 2 < HOLD_MAX_NS ? hold_ns * 2 : HOLD_MAX_NS; /* the next trial waits longer */
  atomic_fetch_add_explicit(&contention_events, 1, memory_order_relaxed);
}

/* The threads a job may use now (called with busy held). */
static int thread_limit(int nt)
{
  int64_t now = now_ns();
  if (now - win_t0 >= WINDOW_NS) {
    struct rusage ru;
    long iv = getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nivcsw : win_ivcsw;
    if (win_t0 && win_parallel && now - win_t0 < 4 * WINDOW_NS && /* (a long gap between jobs is no window) */
        (iv - win_ivcsw >= PREEMPTED || win_stalls >= STALLS))
      contended(now, nt);
    else if (limit && now >= hold_until_ns) limit = 0; /* try the full count again */
    else if (!limit && win_parallel) hold_ns = HOLD_MIN_NS;
    win_t0 = now;
    win_ivcsw = iv;
    win_parallel = win_stalls = 0;
  }
  int lim = limit ? limit : nt;
  return lim < nt ? lim : nt;
}

int64_t dpl_pool_contention(void) { return atomic_load(&contention_events); }

#define JOB_ID(v) ((uint32_t)((v) >> 32))
#define JOB_CHUNKS(v) ((int)(((v) >> 16) & 0xffff))
#define JOB_NEXT(v) ((int)((v) & 0xffff))

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

/* Runs chunks of job `id` while there are some left to claim. */
static void run_chunks(uint32_t id)
{
  uint64_t v = atomic_load_explicit(&P.job, memory_order_acquire);
  while (JOB_ID(v) == id && JOB_NEXT(v) < JOB_CHUNKS(v)) {
    if (!atomic_compare_exchange_weak_explicit(&P.job, &v, v + 1, memory_order_acq_rel, memory_order_acquire))
      continue; /* v reloaded */
    int64_t lo, hi;
    chunk_range(P.n, JOB_CHUNKS(v), JOB_NEXT(v), &lo, &hi);
    P.fn(lo, hi, P.ctx);
    atomic_fetch_sub_explicit(&P.pending, 1, memory_order_release);
    v = atomic_load_explicit(&P.job, memory_order_acquire);
  }
}

/* Waits until the job id differs from seen: spins for spin_ns, then sleeps. */
static uint32_t wait_job(uint32_t seen)
{
  uint32_t g;
  int64_t t0 = 0;
  for (unsigned i = 0;; i++) {
    if ((g = JOB_ID(atomic_load_explicit(&P.job, memory_order_acquire))) != seen) return g;
    cpu_relax();
    if ((i & 255) == 255) {
      int64_t t = now_ns();
      if (!t0) t0 = t;
      else if (t - t0 >= spin_ns) break;
    }
  }
  pthread_mutex_lock(&P.mu);
  atomic_fetch_add(&P.sleepers, 1); /* seq_cst, then job is read again: the caller's store is seen, or it sees us */
  while ((g = JOB_ID(atomic_load(&P.job))) == seen) pthread_cond_wait(&P.cv, &P.mu);
  atomic_fetch_sub(&P.sleepers, 1);
  pthread_mutex_unlock(&P.mu);
  return g;
}

static void *worker(void *arg)
{
  (void)arg;
  in_worker = 1;
  uint32_t seen = 0;
  for (;;) {
    seen = wait_job(seen);
    run_chunks(seen);
  }
  return NULL;
}

/* Makes sure nworkers >= want (called with busy held). */
static void ensure_workers(int want)
{
  if (P.pid != getpid()) { /* fresh process (or forked child: the parent's threads are gone) */
    P.nworkers = 0;
    atomic_store(&P.job, 0);
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
  int lim = thread_limit(nt);
  int64_t chunks = n / grain;
  if (chunks > lim) chunks = lim;
  if (chunks <= 1) {
    pthread_mutex_unlock(&busy);
    fn(0, n, ctx);
    return;
  }
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
  atomic_store_explicit(&P.pending, (int)chunks, memory_order_relaxed);
  /* seq_cst: publishes the job (its fields above), ordered before reading sleepers
   * (MAX_THREADS < 65536: the chunk count fits its 16 bits) */
  uint32_t id = JOB_ID(atomic_load_explicit(&P.job, memory_order_relaxed)) + 1;
  atomic_store(&P.job, ((uint64_t)id << 32) | ((uint64_t)chunks << 16));
  if (atomic_load(&P.sleepers) > 0) {
    pthread_mutex_lock(&P.mu);
    pthread_cond_broadcast(&P.cv);
    pthread_mutex_unlock(&P.mu);
  }
  int64_t t0 = now_ns();
  in_worker = 1;
  run_chunks(id);
  in_worker = 0;
  int64_t t1 = 0;
  for (unsigned i = 0; atomic_load_explicit(&P.pending, memory_order_acquire) > 0; i++) {
    if (i < 4096) cpu_relax();
    else sched_yield(); /* a worker that lost its core mid-chunk: give it ours */
    if ((i & 1023) == 1023 && !t1) t1 = now_ns(); /* waiting: time it */
  }
  win_parallel++;
  if (t1) { /* waited past the spin: was it a stall? */
    int64_t t2 = now_ns();
    if (t2 - t1 > (t1 - t0) / 2 + STALL_NS) win_stalls++;
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
