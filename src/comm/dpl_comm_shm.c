/* dpl_comm_shm.c: the shm backend's segment and waiting: rendezvous (rank 0
 * creates /dev/shm/dpl-<job>-<group> with mode 0600, the others attach; once
 * all are in, the name is unlinked at once, so the memory goes away with the
 * last process even when ranks are SIGKILLed), futex waits with a short spin,
 * deadlines, peer liveness (pid + start time from /proc, every 100 ms), the
 * group's abort flag, and leaving the group. */
#define _GNU_SOURCE
#include "dpl_comm_shm.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#else
#define CPU_RELAX() do { } while (0)
#endif

/* ---------------------------------------------------------------- processes */

/* Start time of pid (clock ticks since boot), 0 when it is gone; *zombie set for Z/X. */
static uint64_t proc_start(pid_t pid, int *zombie)
{
  char path[64], buf[1024];
  *zombie = 0;
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return 0;
  p += 2;
  if (*p == 'Z' || *p == 'X' || *p == 'x') *zombie = 1;
  /* p is at field 3; starttime is field 22 */
  for (int f = 3; f < 22 && p; f++) { p = strchr(p, ' '); if (p) p++; }
  return p ? strtoull(p, NULL, 10) : 0;
}

/* 1 when the process recorded for rank j is still running. */
static int rank_alive(const shm_rank_ctl *r)
{
  pid_t pid = atomic_load(&((shm_rank_ctl *)r)->pid);
  if (pid <= 0) return 1; /* not attached yet: nothing to say */
  if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
  int z;
  uint64_t st = proc_start(pid, &z);
  if (st == 0 || z) return 0;
  if (r->starttime && st != r->starttime) return 0;
  return 1;
}

static double now(void) { return dpl_clock(); }

static void unlink_name(shm_impl *s)
{
  if (s->named) { shm_unlink(s->name); s->named = 0; }
}

/* ---------------------------------------------------------------- abort */

void shm_set_abort(dpl_comm *c, const char *msg)
{
  shm_impl *s = SHM(c);
  if (!s || !s->hdr) return;
  uint32_t zero = 0;
  if (atomic_compare_exchange_strong(&s->hdr->abort_flag, &zero, 1)) {
    snprintf(s->hdr->abort_msg, sizeof s->hdr->abort_msg, "%s", msg);
    s->hdr->abort_rank = c->rank;
    atomic_store(&s->hdr->abort_flag, 2);
  }
  atomic_store(&s->ctl[c->rank].state, RANK_FAILED);
  for (int j = 0; j < c->size; j++)
    syscall(SYS_futex, &s->ctl[j].step, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  syscall(SYS_futex, &s->hdr->ready, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* The abort message another rank left (spins briefly while it is written). */
int shm_abort_error(dpl_comm *c)
{
  unlink_name(SHM(c));
  shm_impl *s = SHM(c);
  for (int i = 0; i < 100000 && atomic_load(&s->hdr->abort_flag) == 1; i++) CPU_RELAX();
  const char *m = atomic_load(&s->hdr->abort_flag) == 2 ? s->hdr->abort_msg : "dist: the group was aborted";
  if (s->hdr->abort_rank == c->rank) return dpl_errorf(DPL_ECOMM, "%s", m);
  return dpl_errorf(DPL_ECOMM, "%s (reported by rank %d)", m, s->hdr->abort_rank);
}


/* Fails the call: records msg as the group's abort reason, returns status. */
static int fail(dpl_comm *c, int status, const char *msg)
{
  shm_impl *s = SHM(c);
  shm_set_abort(c, msg);
  unlink_name(s);
  return dpl_errorf(status, "%s", msg);
}

static const char *where(dpl_comm *c, char *buf, size_t n)
{
  shm_impl *s = SHM(c);
  if (!s->cur) return "init_process_group";
  return dpl_comm_desc_str(s->cur, buf, n);
}

/* "barrier #3 (...)": the last call rank j published (for timeout messages). */
static const char *last_call_of(dpl_comm *c, int j, char *buf, size_t n)
{
  shm_impl *s = SHM(c);
  const shm_desc *a = &s->ctl[j].desc[0], *b = &s->ctl[j].desc[1];
  const shm_desc *x = (int32_t)(a->seq - b->seq) >= 0 ? a : b;
  if (x->kind == 0) { snprintf(buf, n, "none yet"); return buf; }
  dpl_coll_desc d = { .seq = x->seq, .count = x->count, .kind = x->kind, .dtype = x->dtype == 255 ? -1 : x->dtype,
                      .op = x->op == 255 ? -1 : x->op, .root = x->root };
  return dpl_comm_desc_str(&d, buf, n);
}

static inline int reached(uint32_t v, uint32_t target) { return (int32_t)(v - target) >= 0; }

/* ", ranks 1,3 have not arrived" when more ranks than the one waited for are missing. */
static void missing_ranks(dpl_comm *c, uint32_t target, char *buf, size_t n)
{
  shm_impl *s = SHM(c);
  size_t k = 0;
  int count = 0;
  buf[0] = 0;
  for (int j = 0; j < c->size; j++)
    if (j != c->rank && !reached(atomic_load(&s->ctl[j].step), target)) count++;
  if (count < 2) return;
  int m = snprintf(buf, n, "; ranks not arrived: ");
  if (m > 0) k = (size_t)m;
  int first = 1;
  for (int j = 0; j < c->size && k + 16 < n; j++) {
    if (j == c->rank || reached(atomic_load(&s->ctl[j].step), target)) continue;
    m = snprintf(buf + k, n - k, "%s%d", first ? "" : ",", j);
    if (m > 0) k += (size_t)m;
    first = 0;
  }
}

/* Checks everything a waiter must notice; DPL_OK to keep waiting. target: the step
 * waited for (names every rank still missing in a timeout message). */
static int check_peers(dpl_comm *c, int waiting_for, uint32_t target, int force)
{
  shm_impl *s = SHM(c);
  if (atomic_load(&s->hdr->abort_flag)) { unlink_name(s); return shm_abort_error(c); }
  int32_t sig = dpl_signal_received();
  if (sig) {
    char w[160], msg[400];
    snprintf(msg, sizeof msg, "dist: rank %d interrupted by signal %d in %s", c->rank, sig - 128, where(c, w, sizeof w));
    shm_set_abort(c, msg);
    unlink_name(s);
    return dpl_errorf(DPL_EINTR, "%s", msg);
  }
  double t = now();
  if (t >= s->deadline) {
    char w[160], l[160], miss[160], msg[512];
    if (waiting_for >= 0) {
      missing_ranks(c, target, miss, sizeof miss);
      snprintf(msg, sizeof msg, "dist: rank %d timed out after %g s in %s waiting for rank %d, whose last call "
               "is %s%s (timeout: init_process_group{timeout=} or DPL_COMM_TIMEOUT)", c->rank, c->timeout_s,
               where(c, w, sizeof w), waiting_for, last_call_of(c, waiting_for, l, sizeof l), miss);
    }
    else
      snprintf(msg, sizeof msg, "dist: rank %d timed out after %g s in %s", c->rank, c->timeout_s, where(c, w, sizeof w));
    return fail(c, DPL_ETIMEOUT, msg);
  }
  if (!force && t < s->next_check) return DPL_OK;
  s->next_check = t + 0.1;
  for (int j = 0; j < c->size; j++) {
    if (j == c->rank) continue;
    uint32_t st = atomic_load(&s->ctl[j].state);
    if (st == RANK_FAILED) continue; /* its abort message comes with the flag */
    char w[160], msg[512];
    if (st == RANK_LEFT && j == waiting_for) {
      /* let the departing process finish exiting first (up to 0.3 s), so that a
       * supervisor sees the root cause exit before the ranks it takes down */
      if (rank_alive(&s->ctl[j])) {
        if (s->left_seen == 0) s->left_seen = t;
        if (t - s->left_seen < 0.3) continue;
      }
      snprintf(msg, sizeof msg, "dist: rank %d left the group (exited or called destroy_process_group) "
               "while rank %d waits for it in %s", j, c->rank, where(c, w, sizeof w));
      return fail(c, DPL_ECOMM, msg);
    }
    if (st != RANK_LEFT && !rank_alive(&s->ctl[j])) {
      snprintf(msg, sizeof msg, "dist: rank %d (pid %d) died (killed, or exited without leaving the group) "
               "while rank %d was in %s", j, (int)atomic_load(&s->ctl[j].pid), c->rank, where(c, w, sizeof w));
      return fail(c, DPL_ECOMM, msg);
    }
  }
  return DPL_OK;
}

/* A call made while a signal is stopping the script fails at once (and fails the
 * group for the others), also when its peers are there and no wait would be needed:
 * a compiled loop of collectives never reaches the interpreter's hook, and would
 * otherwise go on for the whole grace period. */
int shm_check_signal(dpl_comm *c)
{
  if (!dpl_signal_received()) return DPL_OK;
  return check_peers(c, -1, 0, 1);
}

/* ---------------------------------------------------------------- steps */

void shm_signal(dpl_comm *c)
{
  shm_impl *s = SHM(c);
  shm_rank_ctl *me = &s->ctl[c->rank];
  s->my_step++;
  atomic_store(&me->step, s->my_step); /* seq_cst: ordered before the waiters load */
  if (atomic_load(&me->waiters))
    syscall(SYS_futex, &me->step, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

int shm_wait_rank(dpl_comm *c, int j, uint32_t target)
{
  shm_impl *s = SHM(c);
  shm_rank_ctl *r = &s->ctl[j];
  if (reached(atomic_load_explicit(&r->step, memory_order_acquire), target)) return DPL_OK;
  /* spin a little: a peer on another core usually arrives within microseconds;
   * with more ranks than cores, yield instead so the peer gets the core */
  if (s->spin_us > 0) {
    double end = now() + s->spin_us * 1e-6;
    for (;;) {
      for (int i = 0; i < 64; i++) {
        if (reached(atomic_load_explicit(&r->step, memory_order_acquire), target)) return DPL_OK;
        CPU_RELAX();
      }
      if (now() > end) break;
    }
  }
  if (s->yield_us > 0) {
    double end = now() + s->yield_us * 1e-6;
    do {
      sched_yield();
      if (reached(atomic_load_explicit(&r->step, memory_order_acquire), target)) return DPL_OK;
    } while (now() < end);
  }
  for (;;) {
    atomic_fetch_add(&r->waiters, 1);
    uint32_t v = atomic_load(&r->step);
    if (reached(v, target)) { atomic_fetch_sub(&r->waiters, 1); return DPL_OK; }
    double left = s->deadline - now();
    if (left > 0.1) left = 0.1;
    if (left < 0) left = 0;
    struct timespec ts = { (time_t)left, (long)((left - (double)(time_t)left) * 1e9) };
    syscall(SYS_futex, &r->step, FUTEX_WAIT, v, &ts, NULL, 0);
    atomic_fetch_sub(&r->waiters, 1);
    if (reached(atomic_load_explicit(&r->step, memory_order_acquire), target)) return DPL_OK;
    int st = check_peers(c, j, target, 0);
    if (st) return st;
    if (reached(atomic_load_explicit(&r->step, memory_order_acquire), target)) return DPL_OK;
  }
}

int shm_wait_all(dpl_comm *c, uint32_t target)
{
  shm_impl *s = SHM(c);
  for (int j = 0; j < c->size; j++) {
    if (j == c->rank) continue;
    int st = shm_wait_rank(c, j, target);
    if (st) return st;
  }
  if (reached(target, s->known_all)) s->known_all = target;
  return DPL_OK;
}

void shm_start(dpl_comm *c, const dpl_coll_desc *d)
{
  shm_impl *s = SHM(c);
  s->cur = d;
  double t = now();
  s->deadline = t + c->timeout_s;
  s->left_seen = 0;
  if (s->next_check < t) s->next_check = t + 0.1;
}

void shm_put_desc(dpl_comm *c, const dpl_coll_desc *d)
{
  shm_impl *s = SHM(c);
  shm_desc *o = &s->ctl[c->rank].desc[d->seq & 1];
  o->seq = (uint32_t)d->seq;
  o->kind = (uint8_t)d->kind;
  o->dtype = (uint8_t)(d->dtype < 0 ? 255 : d->dtype);
  o->op = (uint8_t)(d->op < 0 ? 255 : d->op);
  o->root = d->root;
  o->count = d->count;
}

int shm_verify_descs(dpl_comm *c, const dpl_coll_desc *d)
{
  shm_impl *s = SHM(c);
  int bad = 0;
  for (int j = 0; j < c->size && !bad; j++) {
    const shm_desc *x = &s->ctl[j].desc[d->seq & 1], *y = &s->ctl[0].desc[d->seq & 1];
    bad = x->seq != y->seq || x->kind != y->kind || x->dtype != y->dtype || x->op != y->op ||
          x->root != y->root || x->count != y->count;
  }
  if (!bad) return DPL_OK;
  dpl_coll_desc all[c->size];
  for (int j = 0; j < c->size; j++) {
    const shm_desc *x = &s->ctl[j].desc[d->seq & 1];
    all[j].seq = (d->seq & ~(uint64_t)0xffffffffu) | x->seq;
    all[j].kind = x->kind;
    all[j].dtype = x->dtype == 255 ? -1 : x->dtype;
    all[j].op = x->op == 255 ? -1 : x->op;
    all[j].root = x->root;
    all[j].count = x->count;
  }
  char msg[512];
  if (dpl_comm_compare_descs(all, c->size, msg, sizeof msg) == DPL_OK)
    snprintf(msg, sizeof msg, "dist: collective mismatch between the ranks in %s #%llu",
             dpl_comm_kind_name(d->kind), (unsigned long long)d->seq);
  /* every rank sees the same descriptors, so every rank reports the same message */
  shm_set_abort(c, msg);
  return dpl_errorf(DPL_ECOMM, "%s", msg);
}

/* A rank's reads of a chunk's buffer all happen before its next signal, so the
 * buffer is free again once every rank went one step past the chunk's last one. */
int shm_begin_chunk(dpl_comm *c, int *buf)
{
  shm_impl *s = SHM(c);
  int b = (int)(s->chunk_no & 1);
  *buf = b;
  if (reached(s->known_all, s->buf_free[b])) return DPL_OK;
  return shm_wait_all(c, s->buf_free[b]);
}

void shm_end_chunk(dpl_comm *c, int buf)
{
  shm_impl *s = SHM(c);
  s->buf_free[buf] = s->my_step + 1;
  s->chunk_no++;
}

/* ---------------------------------------------------------------- rendezvous */

static uint64_t env_u64(const char *name, uint64_t dflt)
{
  const char *e = getenv(name);
  if (!e || !*e) return dflt;
  char *end;
  unsigned long long v = strtoull(e, &end, 10);
  return end != e ? (uint64_t)v : dflt;
}

static int sleep_ms(int ms)
{
  struct timespec ts = { 0, (long)ms * 1000000L };
  nanosleep(&ts, NULL);
  return dpl_signal_received() ? DPL_EINTR : DPL_OK;
}

static int map_fd(int fd, size_t bytes, void **out)
{
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return dpl_errorf(DPL_ENOMEM, "dist: mmap of %zu bytes failed: %s", bytes, strerror(errno));
  *out = p;
  return DPL_OK;
}

static int rendezvous_error(int st, const char *name, int rank, double timeout, const char *what)
{
  if (st == DPL_EINTR) return dpl_errorf(DPL_EINTR, "dist: init_process_group interrupted by a signal (rank %d)", rank);
  return dpl_errorf(DPL_ETIMEOUT, "dist: rank %d timed out after %g s in init_process_group: %s (segment %s)",
                    rank, timeout, what, name);
}

/* Rank 0: create the segment (replacing a stale one left by a dead job). */
static int create_segment(shm_impl *s, dpl_comm *c, uint64_t members_hash, size_t total)
{
  double deadline = now() + c->timeout_s;
  for (;;) {
    int fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)total) != 0) {
        int e = errno;
        close(fd);
        shm_unlink(s->name);
        return dpl_errorf(DPL_ENOMEM, "dist: cannot size shared memory %s to %zu bytes: %s", s->name, total, strerror(e));
      }
      /* reserve the pages now: a full /dev/shm is an error here, not a SIGBUS later */
      int fe = posix_fallocate(fd, 0, (off_t)total);
      if (fe != 0 && fe != EOPNOTSUPP && fe != EINVAL) {
        close(fd);
        shm_unlink(s->name);
        return dpl_errorf(DPL_ENOMEM, "dist: not enough room in /dev/shm for the group's %zu bytes (%s): enlarge "
                          "/dev/shm (docker --shm-size) or lower DPL_COMM_SHM_SLOT", total, strerror(fe));
      }
      void *p;
      int st = map_fd(fd, total, &p);
      close(fd);
      if (st) { shm_unlink(s->name); return st; }
      s->named = 1;
      s->creator = 1;
      s->map_bytes = total;
      shm_header *h = p;
      h->version = 1;
      h->world_size = (uint32_t)c->size;
      h->slot_bytes = s->slot_bytes;
      h->total_bytes = total;
      h->members_hash = members_hash;
      h->creator_pid = getpid();
      int z;
      h->creator_start = proc_start(getpid(), &z);
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      h->nonce = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid() ^ ((uint64_t)ts.tv_sec << 40);
      s->hdr = h;
      atomic_store(&h->magic, DPL_SHM_MAGIC);
      return DPL_OK;
    }
    if (errno != EEXIST)
      return dpl_errorf(DPL_EIO, "dist: cannot create shared memory %s: %s", s->name, strerror(errno));
    /* a segment of that name exists: stale (its creator is gone) or another live job */
    fd = shm_open(s->name, O_RDWR | O_CLOEXEC, 0);
    if (fd >= 0) {
      struct stat stt;
      int stale = 1;
      if (fstat(fd, &stt) == 0 && (size_t)stt.st_size >= sizeof(shm_header)) {
        void *p = mmap(NULL, sizeof(shm_header), PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
          shm_header *h = p;
          if (atomic_load(&h->magic) == DPL_SHM_MAGIC) {
            shm_rank_ctl fake = { 0 };
            atomic_store(&fake.pid, h->creator_pid);
            fake.starttime = h->creator_start;
            stale = !rank_alive(&fake);
          } else stale = 0; /* being created right now: wait */
          munmap(p, sizeof(shm_header));
        }
      }
      close(fd);
      if (stale) { shm_unlink(s->name); continue; }
    }
    if (now() > deadline)
      return dpl_errorf(DPL_EIO, "dist: shared memory %s is in use by another live job (set a distinct DPL_JOB_ID "
                        "or MASTER_PORT)", s->name);
    int st = sleep_ms(5);
    if (st) return rendezvous_error(st, s->name, c->rank, c->timeout_s, "waiting for a stale segment");
  }
}

/* Other ranks: wait for the creator's segment and map it. */
static int attach_segment(shm_impl *s, dpl_comm *c, uint64_t members_hash, size_t total)
{
  double deadline = now() + c->timeout_s;
  int dead_creator = 0; /* pid of the creator of a stale segment seen last */
  for (;;) {
    int fd = shm_open(s->name, O_RDWR | O_CLOEXEC, 0);
    if (fd >= 0) {
      struct stat stt;
      if (fstat(fd, &stt) == 0 && (size_t)stt.st_size >= sizeof(shm_header)) {
        void *p = mmap(NULL, sizeof(shm_header), PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
          shm_header *h = p;
          int ok = atomic_load(&h->magic) == DPL_SHM_MAGIC;
          int stale = 0;
          if (ok) {
            shm_rank_ctl fake = { 0 };
            atomic_store(&fake.pid, h->creator_pid);
            fake.starttime = h->creator_start;
            stale = !rank_alive(&fake) || atomic_load(&h->ready);
            dead_creator = stale ? h->creator_pid : 0;
          }
          uint32_t ws = h->world_size;
          uint64_t mh = h->members_hash, tb = h->total_bytes, sb = h->slot_bytes;
          munmap(p, sizeof(shm_header));
          if (ok && !stale) {
            if (members_hash != 0 && (ws != (uint32_t)c->size || mh != members_hash)) {
              /* a subgroup (new_group checks the lists first: only the C API gets here) */
              close(fd);
              return dpl_errorf(DPL_EINVAL, "dist: new_group: rank %d of the new group (%d ranks) passed another "
                                "list of ranks than its rank 0 (%u ranks): every rank must call new_group with the "
                                "same ranks", c->rank, c->size, ws);
            }
            if (ws != (uint32_t)c->size) {
              close(fd);
              return dpl_errorf(DPL_EINVAL, "dist: rank %d was started with world_size %d but rank 0 created the "
                                "group with %u ranks", c->rank, c->size, ws);
            }
            if (sb != s->slot_bytes || tb != total || (size_t)stt.st_size < tb) {
              close(fd);
              return dpl_errorf(DPL_EINVAL, "dist: rank %d: segment %s has slot size %llu, this rank expects %llu "
                                "(DPL_COMM_SHM_SLOT must be the same on every rank)", c->rank, s->name,
                                (unsigned long long)sb, (unsigned long long)s->slot_bytes);
            }
            void *q;
            int st = map_fd(fd, total, &q);
            close(fd);
            if (st) return st;
            s->hdr = q;
            s->map_bytes = total;
            return DPL_OK;
          }
        }
      }
      close(fd);
    }
    if (now() > deadline) {
      char what[160];
      if (dead_creator)
        snprintf(what, sizeof what, "only a segment of a dead rank 0 (pid %d) was found; rank 0 never created the group", dead_creator);
      else snprintf(what, sizeof what, "rank 0 never created the group");
      return rendezvous_error(DPL_ETIMEOUT, s->name, c->rank, c->timeout_s, what);
    }
    int st = sleep_ms(2);
    if (st) return rendezvous_error(st, s->name, c->rank, c->timeout_s, "");
  }
}

static int join(dpl_comm *c)
{
  shm_impl *s = SHM(c);
  shm_rank_ctl *me = &s->ctl[c->rank];
  int32_t zero = 0;
  if (!atomic_compare_exchange_strong(&me->pid, &zero, (int32_t)getpid())) {
    /* a misconfigured job: fail it as a whole (without touching the other's slot) */
    char msg[256];
    snprintf(msg, sizeof msg, "dist: rank %d joined twice (pids %d and %d): check RANK on every process",
             c->rank, (int)zero, (int)getpid());
    uint32_t none = 0;
    if (atomic_compare_exchange_strong(&s->hdr->abort_flag, &none, 1)) {
      snprintf(s->hdr->abort_msg, sizeof s->hdr->abort_msg, "%s", msg);
      s->hdr->abort_rank = c->rank;
      atomic_store(&s->hdr->abort_flag, 2);
    }
    syscall(SYS_futex, &s->hdr->ready, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    return dpl_errorf(DPL_EINVAL, "%s", msg);
  }
  int z;
  me->starttime = proc_start(getpid(), &z);
  atomic_store(&me->state, RANK_JOINED);
  atomic_fetch_add(&s->hdr->attached, 1);
  double deadline = now() + c->timeout_s;
  s->deadline = deadline;
  s->cur = NULL;
  /* everyone waits until all ranks attached; the creator then removes the name */
  for (;;) {
    if (s->creator && atomic_load(&s->hdr->attached) == (uint32_t)c->size) {
      unlink_name(s);
      atomic_store(&s->hdr->ready, 1);
      syscall(SYS_futex, &s->hdr->ready, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    }
    if (atomic_load(&s->hdr->ready)) { s->named = 0; return DPL_OK; }
    if (atomic_load(&s->hdr->abort_flag)) return shm_abort_error(c);
    int st = check_peers(c, -1, 0, 0);
    if (st) return st;
    if (!s->creator) {
      shm_rank_ctl fake = { 0 };
      atomic_store(&fake.pid, s->hdr->creator_pid);
      fake.starttime = s->hdr->creator_start;
      if (!rank_alive(&fake)) {
        char msg[256];
        snprintf(msg, sizeof msg, "dist: rank 0 (pid %d) died during init_process_group", s->hdr->creator_pid);
        s->named = 1; /* nobody else will remove it */
        return fail(c, DPL_ECOMM, msg);
      }
    }
    struct timespec ts = { 0, 5 * 1000000L };
    syscall(SYS_futex, &s->hdr->ready, FUTEX_WAIT, 0, &ts, NULL, 0);
  }
}

/* CPUs this process may run on (affinity mask, else online CPUs). */
static int ncpu(void)
{
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

int dpl_comm_shm_create(const char *job, const char *group, int32_t rank, int32_t size, double timeout_s,
                        int32_t check, uint64_t members_hash, dpl_comm **out)
{
  dpl_comm *c = dpl_comm_alloc(&dpl_shm_ops, DPL_COMM_SHM, rank, size, timeout_s, check);
  if (!c) return dpl_errorf(DPL_ENOMEM, "dist: out of memory");
  shm_impl *s = calloc(1, sizeof *s);
  if (!s) { free(c); return dpl_errorf(DPL_ENOMEM, "dist: out of memory"); }
  c->impl = s;
  snprintf(c->job, sizeof c->job, "%s", job);
  if (size == 1) { *out = c; return DPL_OK; } /* no peers: no segment */
  /* 1 MiB slots (2 x size of them per group), less for large groups */
  uint64_t dflt = (8u << 20) / (uint64_t)size;
  if (dflt > (1u << 20)) dflt = 1u << 20;
  if (dflt < (64u << 10)) dflt = 64u << 10;
  uint64_t slot = env_u64("DPL_COMM_SHM_SLOT", dflt);
  if (slot < 4096) slot = 4096;
  if (slot > (1u << 30)) slot = 1u << 30;
  slot = (slot + 4095) & ~(uint64_t)4095;
  s->slot_bytes = slot;
  int over = size > ncpu();
  /* ranks on their own cores: spin through a training step's jitter (a futex wake-up
   * costs tens of µs on a VM, paid by every rank at each gradient all-reduce) */
  uint64_t spin = env_u64("DPL_COMM_SPIN_US", over ? 0 : 2000);
  s->spin_us = (int)(spin > 100000 ? 100000 : spin);
  uint64_t yld = env_u64("DPL_COMM_YIELD_US", over ? 1000 : 0);
  s->yield_us = (int)(yld > 100000 ? 100000 : yld);
  const char *snt = getenv("DPL_COMM_SLOT_NT");
  s->slot_nt_forced = snt && (*snt == '0' || *snt == '1') ? *snt - '0' : -1;
  const char *back = getenv("DPL_COMM_BACK");
  s->slot_back = !(back && *back == '0');
  snprintf(s->name, sizeof s->name, "/dpl-%s-%s", job, group);
  size_t ctl_off = 4096;
  size_t data_off = (ctl_off + (size_t)size * sizeof(shm_rank_ctl) + 4095) & ~(size_t)4095;
  size_t total = data_off + 2 * (size_t)size * slot;
  int st = rank == 0 ? create_segment(s, c, members_hash, total) : attach_segment(s, c, members_hash, total);
  if (st) { free(s); free(c); return st; }
  s->ctl = (shm_rank_ctl *)((uint8_t *)s->hdr + ctl_off);
  s->data = (uint8_t *)s->hdr + data_off;
  st = join(c);
  if (st) {
    if (atomic_load(&s->ctl[rank].pid) == (int32_t)getpid()) atomic_store(&s->ctl[rank].state, RANK_FAILED);
    unlink_name(s);
    munmap(s->hdr, s->map_bytes);
    free(s);
    free(c);
    return st;
  }
  *out = c;
  return DPL_OK;
}

/* ---------------------------------------------------------------- ops */

/* DPL_COMM_CHECK: nothing to add on shm. Every call already publishes its
 * descriptor with its first synchronisation and compares everyone's before any
 * data reaches a user buffer (dpl_comm_shm_coll.c); a separate round would only
 * add a synchronisation (~1% of a 1 MiB all_reduce on a quiet machine, 30% when
 * the cores are oversubscribed). */
static int shm_check(dpl_comm *c, const dpl_coll_desc *d)
{
  (void)c;
  (void)d;
  return DPL_OK;
}

static uint64_t fnv(const int32_t *r, int32_t n)
{
  uint64_t h = 1469598103934665603ULL;
  for (int32_t i = 0; i < n; i++) { h ^= (uint64_t)(uint32_t)r[i]; h *= 1099511628211ULL; }
  return h;
}

static int shm_new_group(dpl_comm *parent, int32_t n, const int32_t *ranks, int32_t me, dpl_comm **out)
{
  if (me < 0) return DPL_OK; /* not a member */
  char group[64];
  snprintf(group, sizeof group, "g%u", parent->groups);
  /* segment names of subgroups: <job>-g<k> with k counted per process on the world group */
  int st = dpl_comm_shm_create(parent->job, group, me, n, parent->timeout_s, parent->check, fnv(ranks, n), out);
  return st;
}

static int shm_abort(dpl_comm *c, const char *reason)
{
  if (c->size > 1) {
    char msg[512];
    snprintf(msg, sizeof msg, "dist: rank %d aborted the group: %s", c->rank, reason);
    shm_set_abort(c, msg);
    unlink_name(SHM(c));
  }
  if (!c->failed) {
    c->failed = 1;
    snprintf(c->failmsg, sizeof c->failmsg, "dist: the group was aborted: %s", reason);
  }
  return DPL_OK;
}

static void shm_destroy(dpl_comm *c)
{
  shm_impl *s = SHM(c);
  if (!s) return;
  if (s->hdr && atomic_load(&s->ctl[c->rank].pid) != (int32_t)getpid()) {
    /* a forked child (a data worker...) leaving: the rank is its parent's, do not touch it */
    munmap(s->hdr, s->map_bytes);
  } else if (s->hdr) {
    shm_rank_ctl *me = &s->ctl[c->rank];
    if (atomic_load(&me->state) != RANK_FAILED) atomic_store(&me->state, c->failed ? RANK_FAILED : RANK_LEFT);
    for (int j = 0; j < c->size; j++)
      syscall(SYS_futex, &s->ctl[j].step, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    unlink_name(s);
    munmap(s->hdr, s->map_bytes);
  }
  free(s);
  c->impl = NULL;
}

/* dpl_comm_shm_coll.c fills the data movers; the rest is here. */
int dpl_shm_check(dpl_comm *c, const dpl_coll_desc *d) { return shm_check(c, d); }
int dpl_shm_new_group(dpl_comm *p, int32_t n, const int32_t *r, int32_t me, dpl_comm **out)
{
  return shm_new_group(p, n, r, me, out);
}
int dpl_shm_abort(dpl_comm *c, const char *reason) { return shm_abort(c, reason); }
void dpl_shm_destroy(dpl_comm *c) { shm_destroy(c); }

/* ---------------------------------------------------------------- launcher */

int dpl_comm_shm_cleanup(const char *job, int32_t *removed)
{
  if (removed) *removed = 0;
  if (!job || !*job || strchr(job, '/'))
    return dpl_errorf(DPL_EINVAL, "dist: shm cleanup needs a job id, got '%s'", job ? job : "(null)");
  char prefix[200];
  snprintf(prefix, sizeof prefix, "dpl-%s-", job);
  size_t pl = strlen(prefix);
  DIR *d = opendir("/dev/shm");
  if (!d) return DPL_OK; /* no /dev/shm: nothing was created there */
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, prefix, pl) != 0) continue;
    char name[300];
    snprintf(name, sizeof name, "/%s", e->d_name);
    if (shm_unlink(name) == 0 && removed) (*removed)++;
  }
  closedir(d);
  return DPL_OK;
}
