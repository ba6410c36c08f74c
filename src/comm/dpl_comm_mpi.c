/* dpl_comm_mpi.c: the mpi backend. libmpi (Open MPI) is loaded with dlopen
 * (RTLD_NOW | RTLD_GLOBAL) on first use, so the binary starts where it is
 * absent; MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM... are the addresses of Open MPI's
 * ompi_mpi_* globals. float16/bfloat16 reductions go through a float32 copy;
 * bool reduces as uint8 max (or) / min (and); mean is sum then divide. A
 * watchdog thread ends the process with MPI_Abort when a collective runs past
 * the group's timeout (MPI calls cannot time out by themselves). MPI lives until
 * the process exits: MPI_Finalize after exit status 0, MPI_Abort otherwise (so
 * mpirun ends the job instead of the peers hanging). */
#define _GNU_SOURCE
#include "dpl_comm_internal.h"
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef void *MComm, *MType, *MOp;
#define M_IN_PLACE ((void *)1)
#define M_UNDEFINED (-32766)

static struct {
  int tried, ok, inited;
  char why[512];
  void *h;
  int (*Initialized)(int *);
  int (*Finalized)(int *);
  int (*Init_thread)(int *, char ***, int, int *);
  int (*Finalize)(void);
  int (*Abort)(MComm, int);
  int (*Comm_rank)(MComm, int *);
  int (*Comm_size)(MComm, int *);
  int (*Comm_split)(MComm, int, int, MComm *);
  int (*Comm_free)(MComm *);
  int (*Comm_set_errhandler)(MComm, void *);
  int (*Error_string)(int, char *, int *);
  int (*Barrier)(MComm);
  int (*Bcast)(void *, int, MType, int, MComm);
  int (*Allreduce)(const void *, void *, int, MType, MOp, MComm);
  int (*Reduce)(const void *, void *, int, MType, MOp, int, MComm);
  int (*Allgather)(const void *, int, MType, void *, int, MType, MComm);
  int (*Gather)(const void *, int, MType, void *, int, MType, int, MComm);
  int (*Scatter)(const void *, int, MType, void *, int, MType, int, MComm);
  int (*Reduce_scatter_block)(const void *, void *, int, MType, MOp, MComm);
  int (*Op_create)(void (*)(void *, void *, int *, MType *), int, MOp *);
  void *world, *comm_null, *errors_return;
  void *t_float, *t_double, *t_u16, *t_i32, *t_i64, *t_u8;
  void *o_sum, *o_max, *o_min, *o_prod;
  MOp o_fmax, o_fmin; /* max/min of float/double that propagate NaN (made after MPI_Init) */
} M;

static int load(void)
{
  if (M.tried) return M.ok;
  M.tried = 1;
  const char *forced = getenv("DPL_LIBMPI");
  const char *names[] = { forced && *forced ? forced : "libmpi.so.40", forced && *forced ? NULL : "libmpi.so", NULL };
  char errs[400] = "";
  for (size_t i = 0; i < 3 && !M.h; i++) {
    if (!names[i] || !*names[i]) continue;
    M.h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
    if (!M.h && !errs[0]) snprintf(errs, sizeof errs, "%s", dlerror());
  }
  if (!M.h) {
    snprintf(M.why, sizeof M.why, "libmpi not found (%s); install Open MPI (Debian: openmpi-bin libopenmpi3) "
             "or set DPL_LIBMPI to its path", errs);
    return 0;
  }
#define SYM(field, name) do { *(void **)&M.field = dlsym(M.h, name); \
    if (!M.field) { snprintf(M.why, sizeof M.why, "libmpi lacks %s (is it Open MPI 4?)", name); return 0; } } while (0)
  SYM(Initialized, "MPI_Initialized"); SYM(Finalized, "MPI_Finalized"); SYM(Init_thread, "MPI_Init_thread");
  SYM(Finalize, "MPI_Finalize"); SYM(Abort, "MPI_Abort"); SYM(Comm_rank, "MPI_Comm_rank");
  SYM(Comm_size, "MPI_Comm_size"); SYM(Comm_split, "MPI_Comm_split"); SYM(Comm_free, "MPI_Comm_free");
  SYM(Comm_set_errhandler, "MPI_Comm_set_errhandler"); SYM(Error_string, "MPI_Error_string");
  SYM(Barrier, "MPI_Barrier"); SYM(Bcast, "MPI_Bcast"); SYM(Allreduce, "MPI_Allreduce"); SYM(Reduce, "MPI_Reduce");
  SYM(Allgather, "MPI_Allgather"); SYM(Gather, "MPI_Gather"); SYM(Scatter, "MPI_Scatter");
  SYM(Reduce_scatter_block, "MPI_Reduce_scatter_block"); SYM(Op_create, "MPI_Op_create");
  SYM(world, "ompi_mpi_comm_world"); SYM(comm_null, "ompi_mpi_comm_null"); SYM(errors_return, "ompi_mpi_errors_return");
  SYM(t_float, "ompi_mpi_float"); SYM(t_double, "ompi_mpi_double"); SYM(t_u16, "ompi_mpi_uint16_t");
  SYM(t_i32, "ompi_mpi_int32_t"); SYM(t_i64, "ompi_mpi_int64_t"); SYM(t_u8, "ompi_mpi_uint8_t");
  SYM(o_sum, "ompi_mpi_op_sum"); SYM(o_max, "ompi_mpi_op_max"); SYM(o_min, "ompi_mpi_op_min"); SYM(o_prod, "ompi_mpi_op_prod");
#undef SYM
  M.ok = 1;
  return 1;
}

const char *dpl_comm_mpi_unavailable_reason(void)
{
  return load() ? "" : M.why;
}

int32_t dpl_comm_mpi_initialized(void)
{
  if (!M.ok) return 0; /* never loaded: never initialised by us */
  int inited = 0, fin = 0;
  M.Initialized(&inited);
  M.Finalized(&fin);
  return inited && !fin;
}

/* ---------------------------------------------------------------- watchdog */

static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cv = PTHREAD_COND_INITIALIZER;
static int wd_started;
static double wd_deadline; /* 0: no call in flight */
static char wd_what[200];

static void *watchdog(void *arg)
{
  (void)arg;
  pthread_mutex_lock(&wd_mu);
  for (;;) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&wd_cv, &wd_mu, &ts);
    if (wd_deadline > 0 && dpl_clock() > wd_deadline) {
      fprintf(stderr, "dplhost: dist (mpi): %s ran past its timeout; aborting the job "
              "(timeout: init_process_group{timeout=} or DPL_COMM_TIMEOUT)\n", wd_what);
      fflush(stderr);
      M.Abort(M.world, 124);
      _exit(124);
    }
  }
  return NULL;
}

static void wd_arm(dpl_comm *c, const dpl_coll_desc *d)
{
  pthread_mutex_lock(&wd_mu);
  if (!wd_started) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, watchdog, NULL) == 0) wd_started = 1;
    pthread_attr_destroy(&a);
  }
  wd_deadline = dpl_clock() + c->timeout_s;
  snprintf(wd_what, sizeof wd_what, "rank %d: ", c->rank);
  size_t k = strlen(wd_what);
  if (d) dpl_comm_desc_str(d, wd_what + k, sizeof wd_what - k);
  else snprintf(wd_what + k, sizeof wd_what - k, "init");
  pthread_mutex_unlock(&wd_mu);
}

static void wd_disarm(void)
{
  pthread_mutex_lock(&wd_mu);
  wd_deadline = 0;
  pthread_mutex_unlock(&wd_mu);
}

/* ---------------------------------------------------------------- helpers */

typedef struct mpi_impl {
  MComm comm;
  int is_world;
} mpi_impl;

static MComm COMM(dpl_comm *c) { return ((mpi_impl *)c->impl)->comm; }

static int merr(dpl_comm *c, int code, const char *what)
{
  char s[512];
  int len = 0;
  s[0] = 0;
  if (M.Error_string(code, s, &len) != 0) snprintf(s, sizeof s, "MPI error %d", code);
  return dpl_errorf(DPL_ECOMM, "dist (mpi): rank %d: %s failed: %s", c->rank, what, s);
}

static MType mtype(int32_t dtype)
{
  switch (dtype) {
  case DPL_FLOAT32: return M.t_float;
  case DPL_FLOAT64: return M.t_double;
  case DPL_FLOAT16: case DPL_BFLOAT16: return M.t_u16;
  case DPL_INT32: return M.t_i32;
  case DPL_INT64: return M.t_i64;
  default: return M.t_u8;
  }
}

/* MPI_MAX/MPI_MIN drop a NaN depending on the operand order; torch (and the shm
 * backend) give NaN when any rank has one: user ops for float and double (half
 * types reduce through float). Commutative; a NaN in either operand wins. */
#define NAN_OP(name, T, CMP)                                                        \
  static void name(T *in, T *io, int n)                                             \
  {                                                                                 \
    for (int i = 0; i < n; i++) {                                                   \
      T a = in[i], b = io[i];                                                       \
      if (a != a) io[i] = a;                                                        \
      else if (b == b && a CMP b) io[i] = a;                                        \
    }                                                                               \
  }
NAN_OP(fmax_f, float, >)
NAN_OP(fmin_f, float, <)
NAN_OP(fmax_d, double, >)
NAN_OP(fmin_d, double, <)
static void user_max(void *in, void *io, int *len, MType *t)
{
  if (*t == M.t_double) fmax_d(in, io, *len); else fmax_f(in, io, *len);
}
static void user_min(void *in, void *io, int *len, MType *t)
{
  if (*t == M.t_double) fmin_d(in, io, *len); else fmin_f(in, io, *len);
}

static MOp mop(int32_t op, int32_t dtype)
{
  if (dtype == DPL_BOOL) return (op == DPL_COMM_SUM || op == DPL_COMM_MAX) ? M.o_max : M.o_min;
  int fl = dtype == DPL_FLOAT32 || dtype == DPL_FLOAT64 || dtype == DPL_FLOAT16 || dtype == DPL_BFLOAT16;
  if (fl && op == DPL_COMM_MAX && M.o_fmax) return M.o_fmax;
  if (fl && op == DPL_COMM_MIN && M.o_fmin) return M.o_fmin;
  switch (op) {
  case DPL_COMM_MAX: return M.o_max;
  case DPL_COMM_MIN: return M.o_min;
  case DPL_COMM_PROD: return M.o_prod;
  default: return M.o_sum;
  }
}

static int too_big(dpl_comm *c, const dpl_coll_desc *d)
{
  if (d->count > INT_MAX)
    return dpl_errorf(DPL_EINVAL, "dist (mpi): rank %d: %s of %lld elements: more than 2^31-1 is not supported",
                      c->rank, dpl_comm_kind_name(d->kind), (long long)d->count);
  return DPL_OK;
}

/* half types: widen to float32, reduce, narrow back (dpl_comm_kernels.c) */
#define widen dpl_comm_half_to_f32
#define narrow dpl_comm_f32_to_half

static void scale_avg(void *buf, int64_t n, int32_t dtype, int size)
{
  if (dtype == DPL_FLOAT32) { float *p = buf; for (int64_t i = 0; i < n; i++) p[i] /= (float)size; }
  else if (dtype == DPL_FLOAT64) { double *p = buf; for (int64_t i = 0; i < n; i++) p[i] /= (double)size; }
}

/* ---------------------------------------------------------------- ops */

static int mcheck(dpl_comm *c, const dpl_coll_desc *d)
{
  dpl_coll_desc *all = calloc((size_t)c->size, sizeof *all);
  if (!all) return dpl_errorf(DPL_ENOMEM, "dist: out of memory");
  wd_arm(c, d);
  int rc = M.Allgather(d, (int)sizeof *d, M.t_u8, all, (int)sizeof *d, M.t_u8, COMM(c));
  wd_disarm();
  int st = DPL_OK;
  if (rc) st = merr(c, rc, "DPL_COMM_CHECK exchange");
  else {
    char msg[512];
    if (dpl_comm_compare_descs(all, c->size, msg, sizeof msg)) st = dpl_errorf(DPL_ECOMM, "%s", msg);
  }
  free(all);
  return st;
}

static int mbarrier(dpl_comm *c, const dpl_coll_desc *d)
{
  wd_arm(c, d);
  int rc = M.Barrier(COMM(c));
  wd_disarm();
  return rc ? merr(c, rc, "barrier") : DPL_OK;
}

/* all_reduce (root < 0) and reduce */
static int mreduce_any(dpl_comm *c, const dpl_coll_desc *d, void *buf, int root)
{
  int64_t n = d->count;
  int32_t dt = d->dtype;
  int half = dt == DPL_FLOAT16 || dt == DPL_BFLOAT16;
  float *tmp = NULL;
  void *work = buf;
  if (half) {
    tmp = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!tmp) return dpl_errorf(DPL_ENOMEM, "dist (mpi): out of memory for a float32 copy of %lld elements", (long long)n);
    widen(tmp, buf, n, dt);
    work = tmp;
  }
  int32_t wdt = half ? DPL_FLOAT32 : dt;
  int64_t es = dpl_comm_dtype_size(wdt);
  MType t = mtype(wdt);
  MOp o = mop(d->op, dt);
  int rc = 0;
  wd_arm(c, d);
  for (int64_t off = 0; off < n || (off == 0 && n == 0); ) {
    int64_t L = n - off > (1 << 30) ? (1 << 30) : n - off;
    uint8_t *p = (uint8_t *)work + off * es;
    if (root < 0) rc = M.Allreduce(M_IN_PLACE, p, (int)L, t, o, COMM(c));
    else if (root == c->rank) rc = M.Reduce(M_IN_PLACE, p, (int)L, t, o, root, COMM(c));
    else rc = M.Reduce(p, NULL, (int)L, t, o, root, COMM(c));
    if (rc || n == 0) break;
    off += L;
  }
  wd_disarm();
  if (!rc && d->op == DPL_COMM_AVG && (root < 0 || root == c->rank)) scale_avg(work, n, wdt, c->size);
  if (half && !rc && (root < 0 || root == c->rank)) narrow(buf, tmp, n, dt);
  free(tmp);
  return rc ? merr(c, rc, dpl_comm_kind_name(d->kind)) : DPL_OK;
}

static int mall_reduce(dpl_comm *c, const dpl_coll_desc *d, void *buf) { return mreduce_any(c, d, buf, -1); }
static int mreduce(dpl_comm *c, const dpl_coll_desc *d, void *buf) { return mreduce_any(c, d, buf, d->root); }

static int mbroadcast(dpl_comm *c, const dpl_coll_desc *d, void *buf)
{
  int64_t bytes = d->count * dpl_comm_dtype_size(d->dtype);
  int rc = 0;
  wd_arm(c, d);
  for (int64_t off = 0; off < bytes || (off == 0 && bytes == 0); ) {
    int64_t L = bytes - off > (1 << 30) ? (1 << 30) : bytes - off;
    rc = M.Bcast((uint8_t *)buf + off, (int)L, M.t_u8, d->root, COMM(c));
    if (rc || bytes == 0) break;
    off += L;
  }
  wd_disarm();
  return rc ? merr(c, rc, "broadcast") : DPL_OK;
}

static int mall_gather(dpl_comm *c, const dpl_coll_desc *d, const void *send, void *recv)
{
  int st = too_big(c, d);
  if (st) return st;
  MType t = mtype(d->dtype);
  int in_place = (const uint8_t *)send == (uint8_t *)recv + d->count * c->rank * dpl_comm_dtype_size(d->dtype);
  wd_arm(c, d);
  int rc = M.Allgather(in_place ? M_IN_PLACE : send, (int)d->count, t, recv, (int)d->count, t, COMM(c));
  wd_disarm();
  return rc ? merr(c, rc, "all_gather") : DPL_OK;
}

static int mgather(dpl_comm *c, const dpl_coll_desc *d, const void *send, void *recv)
{
  int st = too_big(c, d);
  if (st) return st;
  MType t = mtype(d->dtype);
  int64_t es = dpl_comm_dtype_size(d->dtype);
  int in_place = c->rank == d->root && (const uint8_t *)send == (uint8_t *)recv + d->count * c->rank * es;
  wd_arm(c, d);
  int rc = M.Gather(in_place ? M_IN_PLACE : send, (int)d->count, t, recv, (int)d->count, t, d->root, COMM(c));
  wd_disarm();
  return rc ? merr(c, rc, "gather") : DPL_OK;
}

static int mscatter(dpl_comm *c, const dpl_coll_desc *d, const void *send, void *recv)
{
  int st = too_big(c, d);
  if (st) return st;
  MType t = mtype(d->dtype);
  wd_arm(c, d);
  int rc = M.Scatter(send, (int)d->count, t, recv, (int)d->count, t, d->root, COMM(c));
  wd_disarm();
  return rc ? merr(c, rc, "scatter") : DPL_OK;
}

static int mreduce_scatter(dpl_comm *c, const dpl_coll_desc *d, const void *send, void *recv)
{
  int st = too_big(c, d);
  if (st) return st;
  int64_t n = d->count, P = c->size;
  int32_t dt = d->dtype;
  int half = dt == DPL_FLOAT16 || dt == DPL_BFLOAT16;
  float *ts = NULL, *tr = NULL;
  const void *s = send;
  void *r = recv;
  if (half) {
    ts = malloc((size_t)(n * P > 0 ? n * P : 1) * sizeof(float));
    tr = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!ts || !tr) { free(ts); free(tr); return dpl_errorf(DPL_ENOMEM, "dist (mpi): out of memory"); }
    widen(ts, send, n * P, dt);
    s = ts;
    r = tr;
  }
  int32_t wdt = half ? DPL_FLOAT32 : dt;
  wd_arm(c, d);
  int rc = M.Reduce_scatter_block(s, r, (int)n, mtype(wdt), mop(d->op, dt), COMM(c));
  wd_disarm();
  if (!rc && d->op == DPL_COMM_AVG) scale_avg(r, n, wdt, c->size);
  if (!rc && half) narrow(recv, tr, n, dt);
  free(ts);
  free(tr);
  return rc ? merr(c, rc, "reduce_scatter") : DPL_OK;
}

static void mdestroy(dpl_comm *c);
static int mabort(dpl_comm *c, const char *reason)
{
  fprintf(stderr, "dplhost: dist (mpi): rank %d aborts the job: %s\n", c->rank, reason);
  fflush(stderr);
  M.Abort(M.world, 1);
  return DPL_OK;
}

static int mnew_group(dpl_comm *parent, int32_t n, const int32_t *ranks, int32_t me, dpl_comm **out);

static const dpl_comm_ops mpi_ops = {
  .barrier = mbarrier, .all_reduce = mall_reduce, .reduce = mreduce, .broadcast = mbroadcast,
  .all_gather = mall_gather, .gather = mgather, .scatter = mscatter, .reduce_scatter = mreduce_scatter,
  .check = mcheck, .new_group = mnew_group, .abort = mabort, .destroy = mdestroy,
};

static int mnew_group(dpl_comm *parent, int32_t n, const int32_t *ranks, int32_t me, dpl_comm **out)
{
  (void)ranks;
  (void)n;
  MComm nc = NULL;
  wd_arm(parent, NULL);
  int rc = M.Comm_split(COMM(parent), me >= 0 ? 0 : M_UNDEFINED, me >= 0 ? me : 0, &nc);
  wd_disarm();
  if (rc) return merr(parent, rc, "new_group (MPI_Comm_split)");
  if (me < 0 || nc == M.comm_null) return DPL_OK;
  dpl_comm *c = dpl_comm_alloc(&mpi_ops, DPL_COMM_MPI, me, n, parent->timeout_s, parent->check);
  mpi_impl *im = calloc(1, sizeof *im);
  if (!c || !im) { free(c); free(im); M.Comm_free(&nc); return dpl_errorf(DPL_ENOMEM, "dist: out of memory"); }
  im->comm = nc;
  c->impl = im;
  M.Comm_set_errhandler(nc, M.errors_return);
  *out = c;
  return DPL_OK;
}

/* MPI ends with the process: MPI_Finalize after a clean exit (status 0), else
 * MPI_Abort, so the peers stuck in a collective are ended by mpirun instead of
 * hanging in MPI_Finalize's fence. on_exit hands the handler the exit status. */
static int any_failed;
static pid_t mpi_pid; /* the process that initialised MPI (forked children inherit on_exit) */
static void at_process_exit(int status, void *arg)
{
  (void)arg;
  if (getpid() != mpi_pid) return;
  int fin = 0;
  M.Finalized(&fin);
  if (fin) return;
  if (status != 0 || any_failed) {
    int rank = -1;
    M.Comm_rank(M.world, &rank);
    fprintf(stderr, "dplhost: dist (mpi): rank %d exits with status %d%s; aborting the MPI job\n", rank, status,
            any_failed ? " after a failed collective" : "");
    fflush(stderr);
    M.Abort(M.world, status ? status : 1);
  }
  M.Finalize();
}

static void mdestroy(dpl_comm *c)
{
  mpi_impl *im = c->impl;
  if (!im) return;
  if (c->failed) any_failed = 1;
  if (!im->is_world) {
    MComm x = im->comm;
    int fin = 0;
    M.Finalized(&fin);
    if (!fin && !c->failed) M.Comm_free(&x);
  }
  /* the world communicator stays until the process exits (see at_process_exit) */
  free(im);
  c->impl = NULL;
}

int dpl_comm_mpi_create(double timeout_s, int32_t check, dpl_comm **out)
{
  if (!load()) return dpl_errorf(DPL_ENOTIMPL, "dist: backend 'mpi' unavailable: %s", M.why);
  int inited = 0, fin = 0;
  M.Finalized(&fin);
  if (fin) return dpl_errorf(DPL_EINVAL, "dist: MPI was finalized already (destroy_process_group ends MPI; it cannot restart)");
  M.Initialized(&inited);
  if (!inited) {
    int provided = 0;
    int rc = M.Init_thread(NULL, NULL, 2 /* MPI_THREAD_SERIALIZED */, &provided);
    if (rc) return dpl_errorf(DPL_ECOMM, "dist: MPI_Init_thread failed with code %d", rc);
    mpi_pid = getpid();
    on_exit(at_process_exit, NULL);
  }
  M.Comm_set_errhandler(M.world, M.errors_return);
  if (!M.o_fmax) {
    MOp a = NULL, b = NULL;
    if (M.Op_create(user_max, 1, &a) == 0 && M.Op_create(user_min, 1, &b) == 0) { M.o_fmax = a; M.o_fmin = b; }
    else return dpl_errorf(DPL_ECOMM, "dist: MPI_Op_create failed (the NaN-propagating max/min)");
  }
  int rank = 0, size = 1;
  M.Comm_rank(M.world, &rank);
  M.Comm_size(M.world, &size);
  dpl_comm *c = dpl_comm_alloc(&mpi_ops, DPL_COMM_MPI, rank, size, timeout_s, check);
  mpi_impl *im = calloc(1, sizeof *im);
  if (!c || !im) { free(c); free(im); return dpl_errorf(DPL_ENOMEM, "dist: out of memory"); }
  im->comm = M.world;
  im->is_world = 1;
  c->impl = im;
  *out = c;
  return DPL_OK;
}
