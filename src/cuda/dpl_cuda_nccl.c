/* dpl_cuda_nccl.c: NCCL for dpl.dist on GPU tensors. libnccl.so.2 is loaded
 * with dlopen on first use (the plugin loads fast and works without it); a
 * communicator binds one GPU, and every collective is queued on that GPU's
 * compute stream, ordered with the kernels around it. Called by the core's
 * dpl_nccl_* forwarders (src/comm/dpl_comm_nccl.c), which find these
 * functions by name; errors name the NCCL call and the device. */
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
  N.error_string = (errstr_fn)dlsym(h, "ncclGetErrorString");
  N.last_error = (lasterr_fn)dlsym(h, "ncclGetLastError");
  if (!N.get_unique_id || !N.comm_init_rank || !N.comm_destroy || !N.all_reduce || !N.reduce || !N.broadcast ||
      !N.all_gather || !N.error_string) {
    snprintf(N.why, sizeof N.why, "%s lacks NCCL 2.x entry points", name);
    dlclose(h);
    return;
  }
  N.h = h;
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

enum { COLL_ALL_REDUCE = 0, COLL_REDUCE = 1, COLL_BROADCAST = 2, COLL_ALL_GATHER = 3 };

EXPORT int dpl_cu_nccl_coll(void *p, int32_t kind, dpl_tensor *t, const dpl_tensor *send, int32_t op, int32_t root)
{
  static const char *names[] = {"ncclAllReduce", "ncclReduce", "ncclBroadcast", "ncclAllGather"};
  cu_nccl *c = p;
  if (kind < 0 || kind > COLL_ALL_GATHER) return dpl_errorf(DPL_EINVAL, "nccl: unknown collective %d", (int)kind);
  const char *what = names[kind];
  DPL_TRY(check_tensor(what, c, t, kind == COLL_ALL_GATHER ? "receive buffer" : "tensor"));
  ncclDataType_t dt;
  if (!nccl_dtype(t->_dtype, &dt)) return dpl_errorf(DPL_EINVAL, "%s: dtype %s", what, dpl_dtype_name(t->_dtype));
  if ((kind == COLL_REDUCE || kind == COLL_BROADCAST) && (root < 0 || root >= c->nranks))
    return dpl_errorf(DPL_EINVAL, "%s: root %d is not a rank (0..%d)", what, (int)root, (int)c->nranks - 1);
  dpl_cu_dev *d = dpl_cu_device(c->device, what);
  if (!d) return DPL_EDEVICE;
  size_t n = (size_t)t->_numel;
  ncclResult_t r;
  ncclRedOp_t rop = ncclSum;
  switch (kind) {
  case COLL_ALL_REDUCE:
    DPL_TRY(nccl_op(what, t->_dtype, op, &rop));
    r = N.all_reduce(t->_data, t->_data, n, dt, rop, c->comm, d->compute);
    break;
  case COLL_REDUCE:
    DPL_TRY(nccl_op(what, t->_dtype, op, &rop));
    r = N.reduce(t->_data, t->_data, n, dt, rop, root, c->comm, d->compute);
    break;
  case COLL_BROADCAST:
    r = N.broadcast(t->_data, t->_data, n, dt, root, c->comm, d->compute);
    break;
  default:
    DPL_TRY(check_tensor(what, c, send, "send buffer"));
    if (send->_dtype != t->_dtype || send->_numel * c->nranks != t->_numel)
      return dpl_errorf(DPL_EINVAL, "%s: the receive buffer must hold %d x %lld %s elements, it holds %lld %s", what,
                        (int)c->nranks, (long long)send->_numel, dpl_dtype_name(send->_dtype), (long long)t->_numel,
                        dpl_dtype_name(t->_dtype));
    r = N.all_gather(send->_data, t->_data, (size_t)send->_numel, dt, c->comm, d->compute);
    break;
  }
  if (r != ncclSuccess) return nccl_fail(r, what, c->device, c->comm);
  return DPL_OK;
}
