/* dpl_cuda_nccl.c: NCCL for dpl.dist on GPU tensors. libnccl.so.2 is loaded
 * with dlopen on first use (the plugin loads fast and works without it); a
 * communicator binds one GPU, and every collective is queued on that GPU's
 * compute stream, ordered with the kernels around it. Owns the communicators
 * (made from a unique id, or split from a parent for subgroups) and the
 * collectives: all_reduce, reduce, broadcast, all_gather, reduce_scatter as
 * NCCL collectives; gather, scatter and all_to_all as ncclSend/ncclRecv pairs
 * in one NCCL group. Entry points a libnccl may lack (ncclReduceScatter,
 * ncclSend/ncclRecv 2.7+, ncclCommSplit 2.18+) are resolved on their own and
 * fail with a message naming them when used. Called by the core's dpl_nccl_*
 * forwarders (src/comm/dpl_comm_nccl.c), which find these functions by name;
 * errors name the NCCL call and the device. */
#include "dpl_cuda_internal.h"
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

typedef ncclResult_t (*uid_fn)(ncclUniqueId *);
typedef ncclResult_t (*init_fn)(ncclComm_t *, int, ncclUniqueId, int);
typedef ncclResult_t (*destroy_fn)(ncclComm_t);
typedef ncclResult_t (*allreduce_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*reduce_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                                  cudaStream_t);
typedef ncclResult_t (*bcast_fn)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*allgather_fn)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*rscatter_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                    cudaStream_t);
typedef ncclResult_t (*send_fn)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*recv_fn)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*group_fn)(void);
typedef ncclResult_t (*split_fn)(ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *);
typedef ncclResult_t (*version_fn)(int *);
typedef const char *(*errstr_fn)(ncclResult_t);
typedef const char *(*lasterr_fn)(ncclComm_t);

static struct {
  pthread_once_t once;
  void *h;
  char why[512];
  uid_fn get_unique_id;
  init_fn comm_init_rank;
  destroy_fn comm_destroy;
  allreduce_fn all_reduce;
  reduce_fn reduce;
  bcast_fn broadcast;
  allgather_fn all_gather;
  rscatter_fn reduce_scatter; /* the rest may be missing from an old libnccl: checked at use */
  send_fn send;
  recv_fn recv;
  group_fn group_start, group_end;
  split_fn comm_split;
  version_fn get_version;
  int version;                /* ncclGetVersion's code (2.10.3 -> 21003), 0 when unknown */
  errstr_fn error_string;
  lasterr_fn last_error;
} N = {.once = PTHREAD_ONCE_INIT};

typedef struct cu_nccl {
  ncclComm_t comm;
  int32_t device, rank, nranks;
} cu_nccl;

static void load(void)
{
  const char *name = getenv("DPL_LIBNCCL");
  if (!name || !*name) name = "libnccl.so.2";
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(N.why, sizeof N.why, "NCCL not found (dlopen %s: %s)", name, e ? e : "?");
    return;
  }
  N.get_unique_id = (uid_fn)dlsym(h, "ncclGetUniqueId");
  N.comm_init_rank = (init_fn)dlsym(h, "ncclCommInitRank");
  N.comm_destroy = (destroy_fn)dlsym(h, "ncclCommDestroy");
  N.all_reduce = (allreduce_fn)dlsym(h, "ncclAllReduce");
  N.reduce = (reduce_fn)dlsym(h, "ncclReduce");
  N.broadcast = (bcast_fn)dlsym(h, "ncclBroadcast");
  N.all_gather = (allgather_fn)dlsym(h, "ncclAllGather");
  N.reduce_scatter = (rscatter_fn)dlsym(h, "ncclReduceScatter");
  N.send = (send_fn)dlsym(h, "ncclSend");
  N.recv = (recv_fn)dlsym(h, "ncclRecv");
  N.group_start = (group_fn)dlsym(h, "ncclGroupStart");
  N.group_end = (group_fn)dlsym(h, "ncclGroupEnd");
  N.comm_split = (split_fn)dlsym(h, "ncclCommSplit");
  N.get_version = (version_fn)dlsym(h, "ncclGetVersion");
  N.error_string = (errstr_fn)dlsym(h, "ncclGetErrorString");
  N.last_error = (lasterr_fn)dlsym(h, "ncclGetLastError");
  if (!N.get_unique_id || !N.comm_init_rank || !N.comm_destroy || !N.all_reduce || !N.reduce || !N.broadcast ||
      !N.all_gather || !N.error_string) {
    snprintf(N.why, sizeof N.why, "%s lacks NCCL 2.x entry points", name);
    dlclose(h);
    return;
  }
  int v = 0;
  if (N.get_version && N.get_version(&v) == ncclSuccess) N.version = v;
  N.h = h;
}

/* an entry point an old libnccl may lack */
static int need_sym(const void *f, const char *call, const char *since)
{
  if (f) return DPL_OK;
  return dpl_errorf(DPL_ENOTIMPL, "%s: the loaded libnccl (version %d) lacks it (NCCL %s or newer)", call, N.version,
                    since);
}

EXPORT int32_t dpl_cu_nccl_version(void)
{
  pthread_once(&N.once, load);
  return N.h ? N.version : 0;
}

EXPORT const char *dpl_cu_nccl_unavailable(void)
{
  pthread_once(&N.once, load);
  return N.h ? "" : N.why;
}

static int nccl_fail(ncclResult_t r, const char *call, int32_t dev, ncclComm_t comm)
{
  const char *last = N.last_error ? N.last_error(comm) : NULL;
  return dpl_errorf(r == ncclInvalidArgument || r == ncclInvalidUsage ? DPL_EINVAL : DPL_ECOMM,
                    "%s on cuda:%d: %s%s%s", call, (int)dev, N.error_string(r), last && *last ? ": " : "",
                    last ? last : "");
}

static int need_nccl(const char *what)
{
  pthread_once(&N.once, load);
  if (!N.h) return dpl_errorf(DPL_EDEVICE, "%s: %s", what, N.why);
  return DPL_OK;
}

EXPORT int dpl_cu_nccl_unique_id(uint8_t *id, int32_t len)
{
  DPL_TRY(need_nccl("nccl unique id"));
  if (!id || len != (int32_t)sizeof(ncclUniqueId))
    return dpl_errorf(DPL_EINVAL, "nccl unique id: expected a buffer of %d bytes, got %d", (int)sizeof(ncclUniqueId),
                      (int)len);
  ncclUniqueId u;
  ncclResult_t r = N.get_unique_id(&u);
  if (r != ncclSuccess) return dpl_errorf(DPL_ECOMM, "ncclGetUniqueId: %s", N.error_string(r));
  memcpy(id, &u, sizeof u);
  return DPL_OK;
}

EXPORT int dpl_cu_nccl_init(const uint8_t *id, int32_t len, int32_t nranks, int32_t rank, int32_t device, void **out)
{
  *out = NULL;
  DPL_TRY(need_nccl("nccl init"));
  if (!id || len != (int32_t)sizeof(ncclUniqueId))
    return dpl_errorf(DPL_EINVAL, "nccl init: expected a %d-byte unique id, got %d bytes", (int)sizeof(ncclUniqueId),
                      (int)len);
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return dpl_errorf(DPL_EINVAL, "nccl init: rank %d of %d is out of range", (int)rank, (int)nranks);
  if (!dpl_cu_device(device, "nccl init")) return DPL_EDEVICE;
  cu_nccl *c = calloc(1, sizeof *c);
  if (!c) return dpl_errorf(DPL_ENOMEM, "nccl init: out of memory");
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  ncclResult_t r = N.comm_init_rank(&c->comm, nranks, u, rank);
  if (r != ncclSuccess) {
    int st = nccl_fail(r, "ncclCommInitRank", device, NULL);
    free(c);
    return st;
  }
  c->device = device;
  c->rank = rank;
  c->nranks = nranks;
  *out = c;
  return DPL_OK;
}

EXPORT void dpl_cu_nccl_destroy(void *p)
{
  cu_nccl *c = p;
  if (!c) return;
  if (N.h && c->comm) {
    cudaSetDevice(c->device);
    N.comm_destroy(c->comm);
  }
  free(c);
}

/* A subgroup's communicator split from parent c: collective over every rank of c;
 * color < 0 (not a member) gives *out = NULL. new_rank/new_nranks: the caller's
 * rank and size in the subgroup (key orders the ranks as the host subgroup does). */
EXPORT int dpl_cu_nccl_split(void *p, int32_t color, int32_t key, int32_t new_rank, int32_t new_nranks, void **out)
{
  cu_nccl *c = p;
  *out = NULL;
  DPL_TRY(need_nccl("nccl split"));
  DPL_TRY(need_sym((const void *)N.comm_split, "ncclCommSplit", "2.18"));
  if (color >= 0 && (new_nranks < 1 || new_rank < 0 || new_rank >= new_nranks))
    return dpl_errorf(DPL_EINVAL, "nccl split: rank %d of %d is out of range", (int)new_rank, (int)new_nranks);
  if (!dpl_cu_device(c->device, "ncclCommSplit")) return DPL_EDEVICE;
  ncclComm_t nc = NULL;
  ncclResult_t r = N.comm_split(c->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : (int)color, (int)key, &nc, NULL);
  if (r != ncclSuccess) return nccl_fail(r, "ncclCommSplit", c->device, c->comm);
  if (color < 0) {
    if (nc) N.comm_destroy(nc);
    return DPL_OK;
  }
  if (!nc) return dpl_errorf(DPL_ECOMM, "ncclCommSplit on cuda:%d: no communicator for color %d", (int)c->device, (int)color);
  cu_nccl *n = calloc(1, sizeof *n);
  if (!n) {
    N.comm_destroy(nc);
    return dpl_errorf(DPL_ENOMEM, "nccl split: out of memory");
  }
  n->comm = nc;
  n->device = c->device;
  n->rank = new_rank;
  n->nranks = new_nranks;
  *out = n;
  return DPL_OK;
}

static int nccl_dtype(int32_t dt, ncclDataType_t *out)
{
  switch (dt) {
  case DPL_FLOAT32: *out = ncclFloat32; return 1;
  case DPL_FLOAT64: *out = ncclFloat64; return 1;
  case DPL_FLOAT16: *out = ncclFloat16; return 1;
  case DPL_BFLOAT16: *out = ncclBfloat16; return 1;
  case DPL_INT32: *out = ncclInt32; return 1;
  case DPL_INT64: *out = ncclInt64; return 1;
  case DPL_UINT8: case DPL_BOOL: *out = ncclUint8; return 1;
  default: return 0;
  }
}

static int nccl_op(const char *what, int32_t dt, int32_t op, ncclRedOp_t *out)
{
  if (dt == DPL_BOOL) { /* or / and, as the host backends */
    *out = op == DPL_COMM_PROD || op == DPL_COMM_MIN ? ncclMin : ncclMax;
    if (op == DPL_COMM_AVG) return dpl_errorf(DPL_EINVAL, "%s: AVG needs a floating dtype, got bool", what);
    return DPL_OK;
  }
  switch (op) {
  case DPL_COMM_SUM: *out = ncclSum; return DPL_OK;
  case DPL_COMM_AVG:
    if (dt == DPL_INT32 || dt == DPL_INT64 || dt == DPL_UINT8)
      return dpl_errorf(DPL_EINVAL, "%s: AVG needs a floating dtype, got %s", what, dpl_dtype_name(dt));
    if (N.version > 0 && N.version < 21000)
      return dpl_errorf(DPL_ENOTIMPL, "%s: ncclAvg needs NCCL 2.10 or newer, the loaded libnccl is version %d "
                        "(sum, then divide)", what, N.version);
    *out = ncclAvg;
    return DPL_OK;
  case DPL_COMM_MAX: *out = ncclMax; return DPL_OK;
  case DPL_COMM_MIN: *out = ncclMin; return DPL_OK;
  case DPL_COMM_PROD: *out = ncclProd; return DPL_OK;
  default: return dpl_errorf(DPL_EINVAL, "%s: unknown reduction op %d", what, (int)op);
  }
}

static int check_tensor(const char *what, const cu_nccl *c, const dpl_tensor *t, const char *name)
{
  DPL_TRY(dpl_check_handle(what, name, t));
  if (!dpl_is_devmem(t) || t->_devindex != c->device)
    return dpl_errorf(DPL_EDEVICE, "%s: the %s must be a GPU tensor on cuda:%d (the communicator's device)", what, name,
                      (int)c->device);
  if (!dpl_is_contig(t)) return dpl_errorf(DPL_EINVAL, "%s: the %s must be contiguous", what, name);
  return DPL_OK;
}


enum {
  COLL_ALL_REDUCE = 0, COLL_REDUCE = 1, COLL_BROADCAST = 2, COLL_ALL_GATHER = 3,
  COLL_REDUCE_SCATTER = 4, COLL_GATHER = 5, COLL_SCATTER = 6, COLL_ALL_TO_ALL = 7
};

/* the other buffer of a two-buffer collective: same dtype, `numel` elements */
static int check_pair(const char *what, const cu_nccl *c, const dpl_tensor *t, const char *name, int32_t dtype,
                      int64_t numel)
{
  DPL_TRY(check_tensor(what, c, t, name));
  if (t->_dtype != dtype || t->_numel != numel)
    return dpl_errorf(DPL_EINVAL, "%s: the %s must hold %lld %s elements, it holds %lld %s", what, name,
                      (long long)numel, dpl_dtype_name(dtype), (long long)t->_numel, dpl_dtype_name(t->_dtype));
  return DPL_OK;
}

/* gather, scatter, all_to_all: ncclSend/ncclRecv of `n`-element blocks, fused in one
 * NCCL group. to_root: gather (every rank sends its block to root, root receives
 * block k from rank k); scatter: root sends block k to rank k. all_to_all: rank j's
 * block k goes to rank k's block j. send/recv may be NULL where a rank has none. */
static int p2p_blocks(const cu_nccl *c, const dpl_cu_dev *d, int32_t kind, const char *what, const void *send,
                      void *recv, size_t n, ncclDataType_t dt, int32_t es, int32_t root)
{
  const char *sb = send, *call = "ncclGroupStart";
  char *rb = recv;
  size_t bytes = n * (size_t)es;
  ncclResult_t r = N.group_start(), r2;
  if (r != ncclSuccess) return nccl_fail(r, what, c->device, c->comm);
  if (kind == COLL_GATHER) {
    call = "ncclSend";
    r = N.send(sb, n, dt, root, c->comm, d->compute);
    for (int32_t k = 0; c->rank == root && k < c->nranks && r == ncclSuccess; k++) {
      call = "ncclRecv";
      r = N.recv(rb + (size_t)k * bytes, n, dt, k, c->comm, d->compute);
    }
  } else if (kind == COLL_SCATTER) {
    for (int32_t k = 0; c->rank == root && k < c->nranks && r == ncclSuccess; k++) {
      call = "ncclSend";
      r = N.send(sb + (size_t)k * bytes, n, dt, k, c->comm, d->compute);
    }
    if (r == ncclSuccess) {
      call = "ncclRecv";
      r = N.recv(rb, n, dt, root, c->comm, d->compute);
    }
  } else {
    for (int32_t k = 0; k < c->nranks && r == ncclSuccess; k++) {
      call = "ncclSend";
      r = N.send(sb + (size_t)k * bytes, n, dt, k, c->comm, d->compute);
      if (r != ncclSuccess) break;
      call = "ncclRecv";
      r = N.recv(rb + (size_t)k * bytes, n, dt, k, c->comm, d->compute);
    }
  }
  r2 = N.group_end(); /* also after a failed call: it leaves the group */
  if (r != ncclSuccess) return nccl_fail(r, call, c->device, c->comm);
  if (r2 != ncclSuccess) return nccl_fail(r2, "ncclGroupEnd", c->device, c->comm);
  return DPL_OK;
}

/* t: the tensor (all_reduce, reduce, broadcast) or the receive buffer; send: the send
 * buffer of the two-buffer collectives. gather's recv is NULL off the root, scatter's
 * send is NULL off the root. Block sizes (n = numel of one rank's block):
 * all_gather send n, recv nranks*n; reduce_scatter send nranks*n, recv n; gather send n,
 * recv nranks*n on root; scatter send nranks*n on root, recv n; all_to_all send and recv
 * nranks*n. */
EXPORT int dpl_cu_nccl_coll(void *p, int32_t kind, dpl_tensor *t, const dpl_tensor *send, int32_t op, int32_t root)
{
  static const char *names[] = {"ncclAllReduce", "ncclReduce",  "ncclBroadcast", "ncclAllGather",
                                "ncclReduceScatter", "nccl gather", "nccl scatter", "nccl all_to_all"};
  cu_nccl *c = p;
  if (!c) return dpl_errorf(DPL_EINVAL, "nccl: the communicator is NULL");
  if (kind < 0 || kind > COLL_ALL_TO_ALL) return dpl_errorf(DPL_EINVAL, "nccl: unknown collective %d", (int)kind);
  const char *what = names[kind];
  if (kind == COLL_REDUCE_SCATTER) DPL_TRY(need_sym((const void *)N.reduce_scatter, "ncclReduceScatter", "2.0"));
  if (kind >= COLL_GATHER) {
    DPL_TRY(need_sym((const void *)N.send, "ncclSend", "2.7"));
    DPL_TRY(need_sym((const void *)N.recv, "ncclRecv", "2.7"));
    DPL_TRY(need_sym((const void *)N.group_start, "ncclGroupStart", "2.0"));
    DPL_TRY(need_sym((const void *)N.group_end, "ncclGroupEnd", "2.0"));
  }
  if ((kind == COLL_REDUCE || kind == COLL_BROADCAST || kind == COLL_GATHER || kind == COLL_SCATTER) &&
      (root < 0 || root >= c->nranks))
    return dpl_errorf(DPL_EINVAL, "%s: root %d is not a rank (0..%d)", what, (int)root, (int)c->nranks - 1);
  int me_root = c->rank == root;
  /* the buffer every rank has: its dtype and block size */
  const dpl_tensor *lead = kind == COLL_GATHER ? send : t;
  const char *lead_name = kind <= COLL_BROADCAST ? "tensor" : kind == COLL_GATHER ? "send buffer" : "receive buffer";
  DPL_TRY(check_tensor(what, c, lead, lead_name));
  ncclDataType_t dt;
  if (!nccl_dtype(lead->_dtype, &dt)) return dpl_errorf(DPL_EINVAL, "%s: dtype %s", what, dpl_dtype_name(lead->_dtype));
  int32_t es = (int32_t)dpl_dtype_size(lead->_dtype);
  int64_t nr = c->nranks, n = lead->_numel;
  switch (kind) {
  case COLL_ALL_GATHER:
    DPL_TRY(check_tensor(what, c, send, "send buffer"));
    n = send->_numel;
    DPL_TRY(check_pair(what, c, t, "receive buffer", send->_dtype, n * nr));
    break;
  case COLL_REDUCE_SCATTER: DPL_TRY(check_pair(what, c, send, "send buffer", t->_dtype, n * nr)); break;
  case COLL_GATHER:
    if (me_root || t) DPL_TRY(check_pair(what, c, t, "receive buffer", send->_dtype, n * nr));
    break;
  case COLL_SCATTER:
    if (me_root || send) DPL_TRY(check_pair(what, c, send, "send buffer", t->_dtype, n * nr));
    break;
  case COLL_ALL_TO_ALL:
    DPL_TRY(check_pair(what, c, send, "send buffer", t->_dtype, t->_numel));
    if (t->_numel % nr != 0)
      return dpl_errorf(DPL_EINVAL, "%s: %lld elements do not split into %d equal blocks", what, (long long)t->_numel,
                        (int)nr);
    n = t->_numel / nr;
    break;
  default: break;
  }
  dpl_cu_dev *d = dpl_cu_device(c->device, what);
  if (!d) return DPL_EDEVICE;
  ncclResult_t r = ncclSuccess;
  ncclRedOp_t rop = ncclSum;
  switch (kind) {
  case COLL_ALL_REDUCE:
    DPL_TRY(nccl_op(what, t->_dtype, op, &rop));
    r = N.all_reduce(t->_data, t->_data, (size_t)n, dt, rop, c->comm, d->compute);
    break;
  case COLL_REDUCE:
    DPL_TRY(nccl_op(what, t->_dtype, op, &rop));
    r = N.reduce(t->_data, t->_data, (size_t)n, dt, rop, root, c->comm, d->compute);
    break;
  case COLL_BROADCAST: r = N.broadcast(t->_data, t->_data, (size_t)n, dt, root, c->comm, d->compute); break;
  case COLL_ALL_GATHER: r = N.all_gather(send->_data, t->_data, (size_t)n, dt, c->comm, d->compute); break;
  case COLL_REDUCE_SCATTER:
    DPL_TRY(nccl_op(what, t->_dtype, op, &rop));
    r = N.reduce_scatter(send->_data, t->_data, (size_t)n, dt, rop, c->comm, d->compute);
    break;
  default:
    return p2p_blocks(c, d, kind, what, send ? send->_data : NULL, t ? t->_data : NULL, (size_t)n, dt, es, root);
  }
  if (r != ncclSuccess) return nccl_fail(r, what, c->device, c->comm);
  return DPL_OK;
}
