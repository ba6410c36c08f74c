/* emu_nccl.cpp (dplhost CUDA emulator): a one-rank NCCL inside
 * dpl_cuda_emu.so, for the plugin's NCCL code (src/cuda/dpl_cuda_nccl.c,
 * which dlopens $DPL_LIBNCCL: run-ops.sh points it at this library). Owns
 * communicators (ncclCommInitRank with nranks 1, ncclCommSplit), the
 * collectives of one rank (copies: every reduction of one contribution is that
 * contribution) and ncclSend/ncclRecv to self, matched at ncclGroupEnd. It
 * checks what NCCL needs: live communicators and streams of the communicator's
 * device, buffers in that device's memory, datatypes, ops, roots and peers, and
 * sends matched by receives of the same size in a group; each call is an
 * operation on its stream for the ordering checker. More than one rank
 * (several processes) is refused with a message. */
#include "emu_internal.h"
#include "include/nccl.h"
#include <mutex>
#include <set>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <string>
#include <unistd.h>
#include <vector>

struct ncclComm {
  int dev, rank, nranks;
  std::string last;
};

namespace {

std::mutex mu;
std::set<const void *> comms;
unsigned long long id_counter;

struct p2p {
  bool send;
  void *buf;
  size_t bytes;
  int peer;
  ncclComm *comm;
};
thread_local int group_depth;
thread_local std::vector<p2p> pending;
thread_local ncclResult_t group_error = ncclSuccess;

__attribute__((format(printf, 3, 4))) ncclResult_t fail(ncclComm *c, ncclResult_t r, const char *fmt, ...)
{
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "cuda-emu: %s\n", buf);
  if (c) c->last = buf;
  return r;
}

ncclComm *comm_of(ncclComm_t c)
{
  std::lock_guard<std::mutex> g(mu);
  return comms.count(c) ? c : nullptr;
}

size_t type_size(ncclDataType_t t)
{
  switch (t) {
  case ncclInt8: case ncclUint8: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  }
  return 0;
}

/* comm, datatype, stream; the buffers: (pointer, elements) pairs, b1 read and b2 written, empty ones skipped */
ncclResult_t check(const char *call, ncclComm_t comm, ncclDataType_t dt, cudaStream_t s, const void *b1, size_t n1,
                   const void *b2, size_t n2, ncclComm **out)
{
  ncclComm *c = comm_of(comm);
  *out = c;
  if (!c) return fail(nullptr, ncclInvalidArgument, "%s: %p is not a live communicator", call, (void *)comm);
  size_t es = type_size(dt);
  if (!es) return fail(c, ncclInvalidArgument, "%s: datatype %d", call, (int)dt);
  int sd = emu_stream_device(s);
  if (sd < 0) return fail(c, ncclInvalidArgument, "%s: %p is not a live stream", call, (void *)s);
  if (sd != c->dev)
    return fail(c, ncclInvalidUsage, "%s: a stream of cuda:%d for a communicator of cuda:%d", call, sd, c->dev);
  const void *bufs[2] = {b1, b2};
  size_t ns[2] = {n1, n2};
  for (int k = 0; k < 2; k++)
    if (ns[k] > 0 && !emu_device_range(bufs[k], ns[k] * es, c->dev))
      return fail(c, ncclInvalidArgument, "%s: buffer %p (%zu elements of %zu bytes) is not device memory of cuda:%d",
                  call, bufs[k], ns[k], es, c->dev);
  emu_op(s);
  if (n1 > 0) emu_access(s, b1, 0, call);
  if (n2 > 0) emu_access(s, b2, 1, call);
  return ncclSuccess;
}

ncclResult_t check_op(const char *call, ncclComm *c, ncclRedOp_t op)
{
  if (op < ncclSum || op > ncclAvg) return fail(c, ncclInvalidArgument, "%s: reduction op %d", call, (int)op);
  return ncclSuccess;
}

ncclResult_t check_root(const char *call, ncclComm *c, int root)
{
  if (root < 0 || root >= c->nranks) return fail(c, ncclInvalidArgument, "%s: root %d of %d ranks", call, root, c->nranks);
  return ncclSuccess;
}

void copy(void *dst, const void *src, size_t bytes)
{
  if (bytes && dst != src) memmove(dst, src, bytes);
}

ncclComm *new_comm(int dev)
{
  ncclComm *c = new ncclComm{dev, 0, 1, std::string()};
  std::lock_guard<std::mutex> g(mu);
  comms.insert(c);
  return c;
}

ncclResult_t group_end_run()
{
  ncclResult_t r = group_error;
  std::vector<p2p> ops;
  ops.swap(pending);
  group_error = ncclSuccess;
  if (r != ncclSuccess) return r;
  /* one rank: every send goes to self; the k-th send to a peer on a communicator meets the k-th receive */
  std::vector<bool> used(ops.size(), false);
  for (size_t i = 0; i < ops.size(); i++) {
    if (!ops[i].send) continue;
    size_t j = 0;
    while (j < ops.size() && (used[j] || ops[j].send || ops[j].comm != ops[i].comm)) j++;
    if (j == ops.size())
      return fail(ops[i].comm, ncclInvalidUsage, "ncclGroupEnd: a send of %zu bytes to self has no receive (a GPU hangs)",
                  ops[i].bytes);
    if (ops[j].bytes != ops[i].bytes)
      return fail(ops[i].comm, ncclInvalidUsage, "ncclGroupEnd: a send of %zu bytes meets a receive of %zu bytes",
                  ops[i].bytes, ops[j].bytes);
    used[i] = used[j] = true;
    copy(ops[j].buf, ops[i].buf, ops[i].bytes);
  }
  for (size_t j = 0; j < ops.size(); j++)
    if (!used[j])
      return fail(ops[j].comm, ncclInvalidUsage, "ncclGroupEnd: a receive of %zu bytes from self has no send (a GPU hangs)",
                  ops[j].bytes);
  return ncclSuccess;
}

} // namespace

extern "C" ncclResult_t ncclGetVersion(int *version)
{
  if (!version) return ncclInvalidArgument;
  *version = 22000; /* 2.20.0: every entry point the plugin uses */
  return ncclSuccess;
}

extern "C" const char *ncclGetErrorString(ncclResult_t r)
{
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
  case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

extern "C" const char *ncclGetLastError(ncclComm_t comm)
{
  ncclComm *c = comm_of(comm);
  return c ? c->last.c_str() : "";
}

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
  if (!id) return ncclInvalidArgument;
  memset(id, 0, sizeof *id);
  std::lock_guard<std::mutex> g(mu);
  snprintf(id->internal, sizeof id->internal, "dplhost-cuda-emu %d %llu", (int)getpid(), ++id_counter);
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
  (void)id;
  if (!comm) return ncclInvalidArgument;
  *comm = nullptr;
  if (nranks != 1 || rank != 0)
    return fail(nullptr, ncclInvalidUsage, "ncclCommInitRank: rank %d of %d: the emulator's NCCL runs one rank only",
                rank, nranks);
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) return ncclUnhandledCudaError;
  *comm = new_comm(dev);
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
  std::unique_lock<std::mutex> g(mu);
  if (!comms.erase(comm)) {
    g.unlock();
    return fail(nullptr, ncclInvalidArgument, "ncclCommDestroy: %p is not a live communicator", (void *)comm);
  }
  g.unlock();
  delete comm;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
  (void)key;
  (void)config;
  ncclComm *c = comm_of(comm);
  if (!c || !newcomm) return fail(c, ncclInvalidArgument, "ncclCommSplit: bad communicator or result pointer");
  *newcomm = color == NCCL_SPLIT_NOCOLOR ? nullptr : new_comm(c->dev);
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) return fail(c, ncclInvalidArgument, "ncclCommSplit: color %d", color);
  return ncclSuccess;
}

extern "C" ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                                      ncclComm_t comm, cudaStream_t s)
{
  ncclComm *c;
  ncclResult_t r = check("ncclAllReduce", comm, dt, s, send, count, recv, count, &c);
  if (r == ncclSuccess) r = check_op("ncclAllReduce", c, op);
  if (r == ncclSuccess) copy(recv, send, count * type_size(dt));
  return r;
}

extern "C" ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                                   int root, ncclComm_t comm, cudaStream_t s)
{
  ncclComm *c;
  ncclResult_t r = check("ncclReduce", comm, dt, s, send, count, recv, count, &c);
  if (r == ncclSuccess) r = check_op("ncclReduce", c, op);
  if (r == ncclSuccess) r = check_root("ncclReduce", c, root);
  if (r == ncclSuccess) copy(recv, send, count * type_size(dt));
  return r;
}

extern "C" ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root,
                                      ncclComm_t comm, cudaStream_t s)
{
  ncclComm *c;
  ncclResult_t r = check("ncclBroadcast", comm, dt, s, send, count, recv, count, &c);
  if (r == ncclSuccess) r = check_root("ncclBroadcast", c, root);
  if (r == ncclSuccess) copy(recv, send, count * type_size(dt));
  return r;
}

extern "C" ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclComm_t comm,
                                      cudaStream_t s)
{
  ncclComm *c;
  ncclResult_t r = check("ncclAllGather", comm, dt, s, send, count, recv, count, &c); /* recv: count * nranks */
  if (r == ncclSuccess) copy(recv, send, count * type_size(dt));
  return r;
}

extern "C" ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                                          ncclComm_t comm, cudaStream_t s)
{
  ncclComm *c;
  ncclResult_t r = check("ncclReduceScatter", comm, dt, s, send, count, recv, count, &c); /* send: count * nranks */
  if (r == ncclSuccess) r = check_op("ncclReduceScatter", c, op);
  if (r == ncclSuccess) copy(recv, send, count * type_size(dt));
  return r;
}

static ncclResult_t p2p_queue(const char *call, bool send, void *buf, size_t count, ncclDataType_t dt, int peer,
                              ncclComm_t comm, cudaStream_t s)
{
  ncclComm *c;
  ncclResult_t r = send ? check(call, comm, dt, s, buf, count, nullptr, 0, &c)
                        : check(call, comm, dt, s, nullptr, 0, buf, count, &c);
  if (r == ncclSuccess && (peer < 0 || peer >= c->nranks))
    r = fail(c, ncclInvalidArgument, "%s: peer %d of %d ranks", call, peer, c->nranks);
  if (r == ncclSuccess && group_depth == 0)
    r = fail(c, ncclInvalidUsage, "%s: to self outside ncclGroupStart/End (a GPU hangs)", call);
  if (r != ncclSuccess) {
    if (group_depth > 0) group_error = r;
    return r;
  }
  pending.push_back(p2p{send, buf, count * type_size(dt), peer, c});
  return ncclSuccess;
}

extern "C" ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                                 cudaStream_t s)
{
  return p2p_queue("ncclSend", true, (void *)buf, count, dt, peer, comm, s);
}

extern "C" ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t s)
{
  return p2p_queue("ncclRecv", false, buf, count, dt, peer, comm, s);
}

extern "C" ncclResult_t ncclGroupStart(void)
{
  group_depth++;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupEnd(void)
{
  if (group_depth == 0) return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  return group_end_run();
}
