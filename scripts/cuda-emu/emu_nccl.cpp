/* emu_nccl.cpp (dplhost CUDA emulator): NCCL inside dpl_cuda_emu.so, for the
 * plugin's NCCL code (src/cuda/dpl_cuda_nccl.c, which dlopens $DPL_LIBNCCL:
 * run-ops.sh points it at this library), with one rank per process (each on
 * its own emulated GPU: under `dplhost --nproc N`, rank r on cuda:r).
 * Owns communicators (ncclGetUniqueId: a name unique across processes;
 * ncclCommInitRank: the ranks meet in a POSIX shared-memory segment named from
 * the id, created by the first, unlinked once all have joined; ncclCommSplit:
 * (color, key) exchanged through the parent's segment), the collectives
 * (AllReduce, Reduce, Broadcast, AllGather, ReduceScatter; sum/prod/max/min/avg
 * on every NCCL datatype, float16/bfloat16 reduced in float and rounded once)
 * and ncclSend/ncclRecv, matched at ncclGroupEnd (the k-th send to a peer
 * meets the peer's k-th receive from this rank). Work runs when it is called,
 * as the rest of the emulator: each rank copies its part from its device memory
 * into its slot of the segment (large messages in chunks of the slot's size,
 * DPL_CUDA_EMU_NCCL_CHUNK bytes, default 4 MiB), a barrier, each reads what it
 * needs from all slots, a second barrier before the slots are reused. One-rank
 * communicators need no segment (every reduction of one contribution is that
 * contribution). It checks what NCCL needs: live communicators and streams of
 * the communicator's device, buffers in that device's memory, datatypes, ops,
 * roots and peers, sends matched by receives of the same size; across ranks,
 * that every rank makes the same call (count, datatype, op, root) and that no
 * two ranks drive the same GPU; each call is an operation on its stream for the
 * ordering checker. A rank that waits longer than DPL_CUDA_EMU_NCCL_TIMEOUT
 * seconds (default 60), or whose peer exited or failed, gets an NCCL error and
 * a 'cuda-emu: nccl: rank k waits for rank j in <call> #n' message instead of
 * hanging (ncclGetLastError: the last message, whatever the communicator, as
 * NCCL's). DPL_CUDA_EMU_STATS=1 prints the calls made at exit. Limits: every
 * rank of a communicator takes part in each group of sends/receives on it, and
 * a call blocks until the peers make theirs (a real GPU queues it: a program
 * whose ranks make NCCL calls in different orders around host waits can pass
 * on GPUs and time out here). */
#include "emu_internal.h"
#include "include/cuda_fp16.h"
#include "include/nccl.h"
#include <algorithm>
#include <cmath>
#include <errno.h>
#include <fcntl.h>
#include <mutex>
#include <sched.h>
#include <set>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <type_traits>
#include <unistd.h>
#include <vector>

namespace {

constexpr int MAXR = 64;  /* ranks of one communicator */
constexpr int MAXE = 256; /* pieces of sends one rank posts in one round of a group */
constexpr uint32_t MAGIC = 0x4c43434e;
constexpr char ID_PREFIX[] = "dplhost-cuda-emu ";

enum { C_ALLREDUCE, C_REDUCE, C_BCAST, C_ALLGATHER, C_RSCATTER, C_GROUP, C_SPLIT };
const char *const call_names[] = {"ncclAllReduce", "ncclReduce", "ncclBroadcast", "ncclAllGather",
                                  "ncclReduceScatter", "ncclGroupEnd", "ncclCommSplit"};

/* bytes [off, off + len) of the k-th send (of total bytes) to peer, at offset at of the sender's slot */
struct piece {
  int32_t peer, k;
  uint64_t total, off, len, at;
};

/* what one rank posts for a call; the others read it between the call's barriers */
struct rinfo {
  int32_t call, dtype, op, root, color, key, npiece, more;
  uint64_t count, seq;
  int32_t nsend[MAXR]; /* a group: the sends to each peer */
  piece pc[MAXE];
};

/* the segment: this header, then one slot of `slot` bytes per rank */
struct shared {
  uint32_t magic;
  int32_t nranks;
  uint64_t slot;
  int32_t joined, failed; /* failed: 1 + the first rank that gave up (the others stop waiting) */
  int32_t taken[MAXR], pid[MAXR], dev[MAXR];
  uint64_t arrive[MAXR]; /* barriers each rank has reached */
  rinfo info[MAXR];
};

} // namespace

struct ncclComm {
  int dev, rank, nranks;
  std::string name; /* the segment's (several ranks) */
  shared *sh;
  size_t map_bytes;
  uint64_t gen, seq, splits; /* barriers passed, calls made, splits made */
  bool broken;
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
/* DPL_CUDA_EMU_STATS=1: the calls that ran, per communicator size (one rank / several), printed at exit */
unsigned long long ncalls[2][C_SPLIT + 1];
void print_stats()
{
  for (int m = 0; m < 2; m++) {
    unsigned long long *k = ncalls[m];
    fprintf(stderr, "cuda-emu: stats nccl (%s): %llu all_reduce, %llu reduce, %llu broadcast, %llu all_gather, %llu "
            "reduce_scatter, %llu send/recv groups, %llu splits\n", m ? "several ranks" : "one rank", k[0], k[1], k[2],
            k[3], k[4], k[5], k[6]);
  }
}
void tally(ncclComm *c, int call)
{
  static std::once_flag once;
  std::call_once(once, [] {
    const char *v = getenv("DPL_CUDA_EMU_STATS");
    if (v && *v && strcmp(v, "0") != 0) atexit(print_stats);
  });
  std::lock_guard<std::mutex> g(mu);
  ncalls[c->nranks > 1][call]++;
}

thread_local int group_depth;
thread_local std::vector<p2p> pending;
thread_local ncclResult_t group_error = ncclSuccess;

thread_local char last_error[512]; /* ncclGetLastError's: the last message, whatever the communicator (as NCCL) */

/* the message on stderr and for ncclGetLastError; a communicator of several ranks is broken by it
 * (its peers stop waiting for this rank, and report it) */
__attribute__((format(printf, 3, 4))) ncclResult_t fail(ncclComm *c, ncclResult_t r, const char *fmt, ...)
{
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "cuda-emu: %s\n", buf);
  memcpy(last_error, buf, sizeof buf);
  if (c && c->sh) {
    int32_t zero = 0;
    __atomic_compare_exchange_n(&c->sh->failed, &zero, c->rank + 1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    c->broken = true;
  }
  return r;
}

ncclComm *comm_of(ncclComm_t c)
{
  std::lock_guard<std::mutex> g(mu);
  return comms.count(c) ? c : nullptr;
}

size_t type_size(int t)
{
  switch (t) {
  case ncclInt8: case ncclUint8: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  }
  return 0;
}

double env_num(const char *name, double dflt)
{
  const char *v = getenv(name);
  char *end;
  double d = v && *v ? strtod(v, &end) : 0;
  return v && *v && !*end && d > 0 ? d : dflt;
}

double now()
{
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

char *slot_of(ncclComm *c, int r) { return (char *)c->sh + sizeof(shared) + (size_t)r * c->sh->slot; }

/* waits until ready(j) holds for every rank j: spins, yields, then sleeps; gives up when a rank failed or
 * exited, or after DPL_CUDA_EMU_NCCL_TIMEOUT seconds */
template <typename F> ncclResult_t wait_all(ncclComm *c, const char *call, F ready)
{
  double t0 = 0, limit = 0;
  for (long spin = 0;; spin++) {
    int late = -1;
    for (int j = 0; j < c->nranks && late < 0; j++)
      if (!ready(j)) late = j;
    if (late < 0) return ncclSuccess;
    int f = __atomic_load_n(&c->sh->failed, __ATOMIC_ACQUIRE);
    if (f && f != c->rank + 1)
      return fail(c, ncclRemoteError, "nccl: rank %d in %s #%llu: rank %d failed (its message says why)", c->rank,
                  call, (unsigned long long)c->seq, f - 1);
    if (spin < 2000) continue;
    if (spin < 4000) {
      sched_yield();
      continue;
    }
    if (spin == 4000) t0 = now(), limit = env_num("DPL_CUDA_EMU_NCCL_TIMEOUT", 60);
    struct timespec ts = {0, 200000};
    nanosleep(&ts, nullptr);
    int pid = __atomic_load_n(&c->sh->pid[late], __ATOMIC_ACQUIRE);
    if (spin % 64 == 0 && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
      return fail(c, ncclRemoteError, "nccl: rank %d waits for rank %d in %s #%llu: rank %d (pid %d) exited", c->rank,
                  late, call, (unsigned long long)c->seq, late, pid);
    if (now() - t0 > limit)
      return fail(c, ncclRemoteError, "nccl: rank %d waits for rank %d in %s #%llu (%.0f s; DPL_CUDA_EMU_NCCL_TIMEOUT)",
                  c->rank, late, call, (unsigned long long)c->seq, limit);
  }
}

ncclResult_t barrier(ncclComm *c, const char *call)
{
  uint64_t g = ++c->gen;
  __atomic_store_n(&c->sh->arrive[c->rank], g, __ATOMIC_RELEASE);
  return wait_all(c, call, [c, g](int j) { return __atomic_load_n(&c->sh->arrive[j], __ATOMIC_ACQUIRE) >= g; });
}

/* after the first barrier of a call: every rank makes the same one */
ncclResult_t agree(ncclComm *c)
{
  const rinfo &me = c->sh->info[c->rank];
  const char *call = call_names[me.call];
  for (int j = 0; j < c->nranks; j++) {
    const rinfo &o = c->sh->info[j];
    if (o.seq != me.seq || o.call != me.call)
      return fail(c, ncclInvalidUsage, "nccl: rank %d calls %s (#%llu) while rank %d calls %s (#%llu) (a GPU hangs)",
                  c->rank, call, (unsigned long long)me.seq, j, call_names[o.call], (unsigned long long)o.seq);
    if (me.call > C_RSCATTER) continue;
    if (o.count != me.count || o.dtype != me.dtype)
      return fail(c, ncclInvalidUsage, "%s #%llu: rank %d passes %llu elements of datatype %d, rank %d %llu of %d",
                  call, (unsigned long long)me.seq, c->rank, (unsigned long long)me.count, me.dtype, j,
                  (unsigned long long)o.count, o.dtype);
    if (o.op != me.op || o.root != me.root)
      return fail(c, ncclInvalidUsage, "%s #%llu: rank %d passes op %d root %d, rank %d op %d root %d", call,
                  (unsigned long long)me.seq, c->rank, me.op, me.root, j, o.op, o.root);
  }
  return ncclSuccess;
}

/* ---- reductions: over n contributions (src[j]), m elements, into dst */

template <typename T> struct plain {
  using A = T;
  static constexpr size_t size = sizeof(T);
  static A ld(const char *p)
  {
    T v;
    memcpy(&v, p, sizeof v);
    return v;
  }
  static void st(char *p, A v) { memcpy(p, &v, sizeof v); }
};
struct half16 {
  using A = float;
  static constexpr size_t size = 2;
  static A ld(const char *p)
  {
    __half h;
    memcpy(&h.__x, p, 2);
    return __half2float(h);
  }
  static void st(char *p, A v)
  {
    __half h = __float2half_rn(v);
    memcpy(p, &h.__x, 2);
  }
};
struct bfloat16 {
  using A = float;
  static constexpr size_t size = 2;
  static A ld(const char *p)
  {
    uint16_t b;
    memcpy(&b, p, 2);
    uint32_t f = (uint32_t)b << 16;
    float v;
    memcpy(&v, &f, 4);
    return v;
  }
  static void st(char *p, A v)
  {
    uint32_t f;
    memcpy(&f, &v, 4);
    uint16_t b = (f & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((f >> 16) | 0x40u) /* NaN stays NaN */
                                                  : (uint16_t)((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
    memcpy(p, &b, 2);
  }
};

template <typename A> A add(A a, A b)
{
  if constexpr (std::is_integral<A>::value) {
    using U = typename std::make_unsigned<A>::type;
    return (A)(U)((U)a + (U)b); /* wraps, as on a GPU */
  } else return a + b;
}
template <typename A> A mul(A a, A b)
{
  if constexpr (std::is_integral<A>::value) {
    using U = typename std::make_unsigned<A>::type;
    return (A)(U)((U)a * (U)b);
  } else return a * b;
}

template <typename S> void reduce_as(char *dst, const char *const *src, int n, size_t m, ncclRedOp_t op)
{
  using A = typename S::A;
  constexpr bool fl = std::is_floating_point<A>::value;
  const A inv = fl ? (A)1 / (A)n : (A)1; /* ncclAvg: floats premultiplied by 1/n, integers summed then divided */
  for (size_t i = 0; i < m; i++) {
    const size_t at = i * S::size;
    A acc = S::ld(src[0] + at);
    if (op == ncclAvg && fl) acc = acc * inv;
    for (int j = 1; j < n; j++) {
      A v = S::ld(src[j] + at);
      switch (op) {
      case ncclSum: acc = add(acc, v); break;
      case ncclAvg: acc = fl ? acc + v * inv : add(acc, v); break;
      case ncclProd: acc = mul(acc, v); break;
      case ncclMax:
        if constexpr (fl) acc = std::fmax(acc, v);
        else acc = v > acc ? v : acc;
        break;
      case ncclMin:
        if constexpr (fl) acc = std::fmin(acc, v);
        else acc = v < acc ? v : acc;
        break;
      }
    }
    if (op == ncclAvg && !fl) acc = (A)(acc / (A)n);
    S::st(dst + at, acc);
  }
}

void reduce(char *dst, const char *const *src, int n, size_t m, ncclDataType_t dt, ncclRedOp_t op)
{
  switch (dt) {
  case ncclInt8: reduce_as<plain<int8_t>>(dst, src, n, m, op); break;
  case ncclUint8: reduce_as<plain<uint8_t>>(dst, src, n, m, op); break;
  case ncclInt32: reduce_as<plain<int32_t>>(dst, src, n, m, op); break;
  case ncclUint32: reduce_as<plain<uint32_t>>(dst, src, n, m, op); break;
  case ncclInt64: reduce_as<plain<int64_t>>(dst, src, n, m, op); break;
  case ncclUint64: reduce_as<plain<uint64_t>>(dst, src, n, m, op); break;
  case ncclFloat16: reduce_as<half16>(dst, src, n, m, op); break;
  case ncclBfloat16: reduce_as<bfloat16>(dst, src, n, m, op); break;
  case ncclFloat32: reduce_as<plain<float>>(dst, src, n, m, op); break;
  case ncclFloat64: reduce_as<plain<double>>(dst, src, n, m, op); break;
  }
}

/* ---- checks of one call */

/* comm, datatype, stream; the buffers: (pointer, elements) pairs, b1 read and b2 written, empty ones skipped */
ncclResult_t check(const char *call, ncclComm_t comm, ncclDataType_t dt, cudaStream_t s, const void *b1, size_t n1,
                   const void *b2, size_t n2, ncclComm **out)
{
  ncclComm *c = comm_of(comm);
  *out = c;
  if (!c) return fail(nullptr, ncclInvalidArgument, "%s: %p is not a live communicator", call, (void *)comm);
  if (c->broken)
    return fail(c, ncclRemoteError, "%s: the communicator (rank %d of %d) failed before", call, c->rank, c->nranks);
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

/* ---- a collective across the ranks of c (nranks > 1), in rounds of at most a slot per rank */
ncclResult_t run_coll(ncclComm *c, int call, const void *sendv, void *recvv, size_t count, ncclDataType_t dt,
                      ncclRedOp_t op, int root)
{
  const char *send = (const char *)sendv, *name = call_names[call];
  char *recv = (char *)recvv;
  const int n = c->nranks, me = c->rank;
  const size_t es = type_size(dt);
  tally(c, call);
  if (n == 1) { /* one contribution: the reductions are copies too (avg: x * 1 / 1) */
    copy(recv, send, count * es);
    return ncclSuccess;
  }
  c->seq++;
  rinfo &mine = c->sh->info[me];
  mine.call = call, mine.dtype = (int)dt, mine.op = (int)op, mine.root = root, mine.count = count, mine.seq = c->seq;
  const size_t per = c->sh->slot / (es * (call == C_RSCATTER ? n : 1)); /* elements of one block in a round */
  const size_t rounds = count ? (count + per - 1) / per : 1;
  std::vector<const char *> src(n);
  for (size_t r = 0; r < rounds; r++) {
    const size_t off = r * per, m = std::min(per, count - off), b = m * es;
    char *slot = slot_of(c, me);
    if (call == C_RSCATTER)
      for (int k = 0; k < n; k++) memcpy(slot + k * b, send + ((size_t)k * count + off) * es, b);
    else if (call != C_BCAST || me == root) memcpy(slot, send + off * es, b);
    ncclResult_t st = barrier(c, name);
    if (st == ncclSuccess && r == 0) st = agree(c);
    if (st != ncclSuccess) return st;
    for (int j = 0; j < n; j++) src[j] = slot_of(c, j) + (call == C_RSCATTER ? me * b : 0);
    switch (call) {
    case C_ALLREDUCE: case C_RSCATTER: reduce(recv + off * es, src.data(), n, m, dt, op); break;
    case C_REDUCE:
      if (me == root) reduce(recv + off * es, src.data(), n, m, dt, op);
      break;
    case C_BCAST: memcpy(recv + off * es, src[root], b); break;
    case C_ALLGATHER:
      for (int j = 0; j < n; j++) memcpy(recv + ((size_t)j * count + off) * es, src[j], b);
      break;
    }
    if ((st = barrier(c, name)) != ncclSuccess) return st;
  }
  return ncclSuccess;
}

/* ---- communicators */

ncclComm *new_comm(int dev, int rank, int nranks)
{
  ncclComm *c = new ncclComm{dev, rank, nranks, std::string(), nullptr, 0, 0, 0, 0, false};
  std::lock_guard<std::mutex> g(mu);
  comms.insert(c);
  return c;
}

void drop_segment(ncclComm *c)
{
  if (!c->sh) return;
  if (__atomic_load_n(&c->sh->joined, __ATOMIC_ACQUIRE) < c->nranks) shm_unlink(c->name.c_str()); /* left behind */
  munmap(c->sh, c->map_bytes);
  c->sh = nullptr;
}

/* rank `rank` of `nranks` joins the segment `name` (created by the first to come); the last to join unlinks it */
ncclResult_t join(const char *call, const std::string &name, int nranks, int rank, int dev, ncclComm **out)
{
  *out = nullptr;
  if (nranks > MAXR)
    return fail(nullptr, ncclInvalidUsage, "%s: %d ranks (the emulator's NCCL runs at most %d)", call, nranks, MAXR);
  size_t slot = (size_t)env_num("DPL_CUDA_EMU_NCCL_CHUNK", 4 << 20);
  slot = std::max<size_t>(slot, 64 * MAXR) / 64 * 64; /* room for a reduce-scatter's block per rank */
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  const bool creator = fd >= 0;
  if (!creator && errno == EEXIST) fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return fail(nullptr, ncclSystemError, "%s: shm_open %s: %s", call, name.c_str(), strerror(errno));
  ncclComm tmp{dev, rank, nranks, name, nullptr, 0, 0, 0, 0, false};
  shared *sh = nullptr;
  size_t bytes = sizeof(shared) + (size_t)nranks * slot;
  if (creator) {
    if (ftruncate(fd, (off_t)bytes) != 0) {
      int e = errno;
      close(fd);
      shm_unlink(name.c_str());
      return fail(nullptr, ncclSystemError, "%s: ftruncate %s (%zu bytes): %s", call, name.c_str(), bytes, strerror(e));
    }
    sh = (shared *)mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (sh != MAP_FAILED) {
      sh->nranks = nranks, sh->slot = slot;
      __atomic_store_n(&sh->magic, MAGIC, __ATOMIC_RELEASE);
    }
  } else { /* wait for the creator's header */
    double t0 = now(), limit = env_num("DPL_CUDA_EMU_NCCL_TIMEOUT", 60);
    struct stat stt;
    while (fstat(fd, &stt) == 0 && (size_t)stt.st_size < sizeof(shared) && now() - t0 < limit) usleep(200);
    if ((size_t)stt.st_size >= sizeof(shared)) {
      sh = (shared *)mmap(nullptr, (size_t)stt.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      bytes = (size_t)stt.st_size;
      while (sh != MAP_FAILED && __atomic_load_n(&sh->magic, __ATOMIC_ACQUIRE) != MAGIC && now() - t0 < limit)
        usleep(200);
    }
    if (!sh || sh == MAP_FAILED || __atomic_load_n(&sh->magic, __ATOMIC_ACQUIRE) != MAGIC) {
      if (sh && sh != MAP_FAILED) munmap(sh, bytes);
      close(fd);
      return fail(nullptr, ncclRemoteError, "nccl: rank %d waits for rank 0 in %s #0: the segment %s stays empty",
                  rank, call, name.c_str());
    }
    if (sh->nranks != nranks) {
      int theirs = sh->nranks;
      munmap(sh, bytes);
      close(fd);
      return fail(nullptr, ncclInvalidUsage, "%s: rank %d joins with %d ranks, another rank with %d", call, rank,
                  nranks, theirs);
    }
  }
  close(fd);
  if (sh == MAP_FAILED) return fail(nullptr, ncclSystemError, "%s: mmap %s: %s", call, name.c_str(), strerror(errno));
  tmp.sh = sh, tmp.map_bytes = bytes;
  int32_t zero = 0;
  if (!__atomic_compare_exchange_n(&sh->taken[rank], &zero, 1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    ncclResult_t r = fail(&tmp, ncclInvalidUsage, "%s: rank %d of %d joins twice", call, rank, nranks);
    drop_segment(&tmp);
    return r;
  }
  __atomic_store_n(&sh->dev[rank], dev, __ATOMIC_RELEASE);
  __atomic_store_n(&sh->pid[rank], (int32_t)getpid(), __ATOMIC_RELEASE);
  if (__atomic_add_fetch(&sh->joined, 1, __ATOMIC_SEQ_CST) == nranks) shm_unlink(name.c_str());
  ncclResult_t r = wait_all(&tmp, call, [sh](int j) { return __atomic_load_n(&sh->taken[j], __ATOMIC_ACQUIRE) != 0; });
  if (r == ncclSuccess) r = wait_all(&tmp, call, [sh](int j) { return __atomic_load_n(&sh->pid[j], __ATOMIC_ACQUIRE) != 0; });
  for (int j = 0; j < nranks && r == ncclSuccess; j++)
    if (j != rank && __atomic_load_n(&sh->dev[j], __ATOMIC_ACQUIRE) == dev)
      r = fail(&tmp, ncclInvalidUsage, "%s: ranks %d and %d drive cuda:%d (NCCL refuses two ranks of a communicator "
               "on one GPU)", call, std::min(j, rank), std::max(j, rank), dev);
  if (r != ncclSuccess) {
    drop_segment(&tmp);
    return r;
  }
  ncclComm *c = new_comm(dev, rank, nranks);
  c->name = name, c->sh = sh, c->map_bytes = bytes;
  *out = c;
  return ncclSuccess;
}

/* ---- sends and receives of a group on c */

ncclResult_t group_one_rank(const std::vector<p2p> &ops)
{
  /* every send goes to self; the k-th send meets the k-th receive */
  std::vector<bool> used(ops.size(), false);
  for (size_t i = 0; i < ops.size(); i++) {
    if (!ops[i].send) continue;
    size_t j = 0;
    while (j < ops.size() && (used[j] || ops[j].send)) j++;
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

/* several ranks: in rounds, each rank packs the next pieces of its sends (in the order posted) into its
 * slot and lists them; after a barrier each copies the pieces meant for it into its receives */
ncclResult_t group_ranks(ncclComm *c, const std::vector<p2p> &ops)
{
  const int n = c->nranks, me = c->rank;
  const char *name = call_names[C_GROUP];
  struct snd {
    int peer, k;
    const char *buf;
    size_t bytes;
  };
  std::vector<snd> sends;
  std::vector<std::vector<const p2p *>> recvs(n);
  std::vector<int> nsend(n, 0);
  for (const p2p &o : ops) {
    if (o.send) sends.push_back(snd{o.peer, nsend[o.peer]++, (const char *)o.buf, o.bytes});
    else recvs[o.peer].push_back(&o);
  }
  c->seq++;
  rinfo &mine = c->sh->info[me];
  mine.call = C_GROUP, mine.seq = c->seq;
  for (int p = 0; p < n; p++) mine.nsend[p] = nsend[p];
  size_t cur = 0, curoff = 0;
  char *slot = slot_of(c, me);
  for (bool first = true;; first = false) {
    int np = 0;
    size_t at = 0;
    while (cur < sends.size() && np < MAXE) {
      const snd &s = sends[cur];
      size_t len = std::min(s.bytes - curoff, (size_t)c->sh->slot - at);
      if (len == 0 && s.bytes > 0) break; /* the slot is full */
      mine.pc[np++] = piece{s.peer, s.k, s.bytes, curoff, len, at};
      memcpy(slot + at, s.buf + curoff, len);
      at += len, curoff += len;
      if (curoff == s.bytes) cur++, curoff = 0;
    }
    mine.npiece = np, mine.more = cur < sends.size();
    ncclResult_t st = barrier(c, name);
    if (st == ncclSuccess && first) st = agree(c);
    for (int j = 0; j < n && st == ncclSuccess && first; j++)
      if (c->sh->info[j].nsend[me] != (int)recvs[j].size())
        st = fail(c, ncclInvalidUsage, "ncclGroupEnd #%llu: rank %d sends %d times to rank %d, which receives %zu times "
                  "from it (a GPU hangs)", (unsigned long long)c->seq, j, c->sh->info[j].nsend[me], me, recvs[j].size());
    bool more = false;
    for (int j = 0; j < n && st == ncclSuccess; j++) {
      const rinfo &o = c->sh->info[j];
      more = more || o.more;
      for (int q = 0; q < o.npiece && st == ncclSuccess; q++) {
        const piece &p = o.pc[q];
        if (p.peer != me) continue;
        const p2p *r = p.k < (int)recvs[j].size() ? recvs[j][p.k] : nullptr;
        if (!r || r->bytes != p.total)
          st = fail(c, ncclInvalidUsage, "ncclGroupEnd #%llu: send %d of %llu bytes from rank %d to rank %d meets a "
                    "receive of %zu bytes", (unsigned long long)c->seq, p.k + 1, (unsigned long long)p.total, j, me,
                    r ? r->bytes : 0);
        else if (p.len) memcpy((char *)r->buf + p.off, slot_of(c, j) + p.at, p.len);
      }
    }
    if (st == ncclSuccess) st = barrier(c, name);
    if (st != ncclSuccess) return st;
    if (!more) return ncclSuccess;
  }
}

ncclResult_t group_end_run()
{
  ncclResult_t r = group_error;
  std::vector<p2p> ops;
  ops.swap(pending);
  group_error = ncclSuccess;
  if (r != ncclSuccess) return r;
  /* each communicator's sends and receives, communicators in the order first used */
  std::vector<ncclComm *> order;
  for (const p2p &o : ops)
    if (std::find(order.begin(), order.end(), o.comm) == order.end()) order.push_back(o.comm);
  for (ncclComm *c : order) {
    std::vector<p2p> mine;
    for (const p2p &o : ops)
      if (o.comm == c) mine.push_back(o);
    tally(c, C_GROUP);
    r = c->nranks == 1 ? group_one_rank(mine) : group_ranks(c, mine);
    if (r != ncclSuccess) return r;
  }
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

/* NCCL: "comm is currently unused and can be set to NULL" (the last error of any call, also of ncclCommInitRank) */
extern "C" const char *ncclGetLastError(ncclComm_t comm)
{
  (void)comm;
  return last_error;
}

/* "dplhost-cuda-emu /dplemu-nccl-<pid>-<counter>-<random>": the name of the segment the ranks meet in */
extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
  if (!id) return ncclInvalidArgument;
  memset(id, 0, sizeof *id);
  unsigned long long rnd = 0;
  if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) rnd = (unsigned long long)(now() * 1e9) ^ (unsigned long long)getpid() << 32;
  std::lock_guard<std::mutex> g(mu);
  snprintf(id->internal, sizeof id->internal, "%s/dplemu-nccl-%d-%llu-%016llx", ID_PREFIX, (int)getpid(), ++id_counter,
           rnd);
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
  if (!comm) return ncclInvalidArgument;
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", rank, nranks);
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) return ncclUnhandledCudaError;
  if (nranks == 1) {
    *comm = new_comm(dev, 0, 1);
    return ncclSuccess;
  }
  id.internal[sizeof id.internal - 1] = 0;
  if (strncmp(id.internal, ID_PREFIX, sizeof ID_PREFIX - 1) != 0 || id.internal[sizeof ID_PREFIX - 1] != '/')
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: rank %d of %d: the id is not one of this emulator's "
                "ncclGetUniqueId", rank, nranks);
  return join("ncclCommInitRank", id.internal + sizeof ID_PREFIX - 1, nranks, rank, dev, comm);
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
  std::unique_lock<std::mutex> g(mu);
  if (!comms.erase(comm)) {
    g.unlock();
    return fail(nullptr, ncclInvalidArgument, "ncclCommDestroy: %p is not a live communicator", (void *)comm);
  }
  g.unlock();
  drop_segment(comm);
  delete comm;
  return ncclSuccess;
}

/* collective over the ranks of comm: the ranks of one color form a communicator, ordered by (key, rank) */
extern "C" ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
  (void)config;
  ncclComm *c = comm_of(comm);
  if (!c || !newcomm) return fail(c, ncclInvalidArgument, "ncclCommSplit: bad communicator or result pointer");
  *newcomm = nullptr;
  if (c->broken) return fail(c, ncclRemoteError, "ncclCommSplit: the communicator failed before");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) return fail(c, ncclInvalidArgument, "ncclCommSplit: color %d", color);
  tally(c, C_SPLIT);
  if (c->nranks == 1) {
    if (color != NCCL_SPLIT_NOCOLOR) *newcomm = new_comm(c->dev, 0, 1);
    return ncclSuccess;
  }
  c->seq++;
  rinfo &mine = c->sh->info[c->rank];
  mine.call = C_SPLIT, mine.seq = c->seq, mine.color = color, mine.key = key;
  ncclResult_t r = barrier(c, "ncclCommSplit");
  if (r == ncclSuccess) r = agree(c);
  if (r != ncclSuccess) return r;
  std::vector<std::pair<int, int>> members; /* (key, rank) of my color */
  for (int j = 0; j < c->nranks; j++)
    if (c->sh->info[j].color == color) members.push_back({c->sh->info[j].key, j});
  if ((r = barrier(c, "ncclCommSplit")) != ncclSuccess) return r;
  unsigned long long sid = ++c->splits;
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  std::sort(members.begin(), members.end());
  int nr = (int)members.size(), me = 0;
  while (members[me].second != c->rank) me++;
  if (nr == 1) {
    *newcomm = new_comm(c->dev, 0, 1);
    return ncclSuccess;
  }
  std::string name = c->name + "-s" + std::to_string(sid) + "c" + std::to_string(color);
  r = join("ncclCommSplit", name, nr, me, c->dev, newcomm);
  if (r != ncclSuccess) fail(c, r, "ncclCommSplit: rank %d of color %d could not join its communicator", c->rank, color);
  return r;
}

extern "C" ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                                      ncclComm_t comm, cudaStream_t s)
{
  ncclComm *c;
  ncclResult_t r = check("ncclAllReduce", comm, dt, s, send, count, recv, count, &c);
  if (r == ncclSuccess) r = check_op("ncclAllReduce", c, op);
  if (r == ncclSuccess) r = run_coll(c, C_ALLREDUCE, send, recv, count, dt, op, 0);
  return r;
}

extern "C" ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                                   int root, ncclComm_t comm, cudaStream_t s)
{
  ncclComm *c = comm_of(comm);
  bool at_root = c && c->rank == root; /* recv is used on the root only */
  ncclResult_t r = check("ncclReduce", comm, dt, s, send, count, recv, at_root ? count : 0, &c);
  if (r == ncclSuccess) r = check_op("ncclReduce", c, op);
  if (r == ncclSuccess) r = check_root("ncclReduce", c, root);
  if (r == ncclSuccess) r = run_coll(c, C_REDUCE, send, recv, count, dt, op, root);
  return r;
}

extern "C" ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root,
                                      ncclComm_t comm, cudaStream_t s)
{
  ncclComm *c = comm_of(comm);
  bool at_root = c && c->rank == root; /* send is used on the root only */
  ncclResult_t r = check("ncclBroadcast", comm, dt, s, send, at_root ? count : 0, recv, count, &c);
  if (r == ncclSuccess) r = check_root("ncclBroadcast", c, root);
  if (r == ncclSuccess) r = run_coll(c, C_BCAST, send, recv, count, dt, ncclSum, root);
  return r;
}

extern "C" ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclComm_t comm,
                                      cudaStream_t s)
{
  ncclComm *c = comm_of(comm);
  size_t nr = c ? (size_t)c->nranks : 1;
  ncclResult_t r = check("ncclAllGather", comm, dt, s, send, count, recv, count * nr, &c);
  if (r == ncclSuccess) r = run_coll(c, C_ALLGATHER, send, recv, count, dt, ncclSum, 0);
  return r;
}

extern "C" ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                                          ncclComm_t comm, cudaStream_t s)
{
  ncclComm *c = comm_of(comm);
  size_t nr = c ? (size_t)c->nranks : 1;
  ncclResult_t r = check("ncclReduceScatter", comm, dt, s, send, count * nr, recv, count, &c);
  if (r == ncclSuccess) r = check_op("ncclReduceScatter", c, op);
  if (r == ncclSuccess) r = run_coll(c, C_RSCATTER, send, recv, count, dt, op, 0);
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
  if (r == ncclSuccess && group_depth == 0 && c->nranks == 1)
    r = fail(c, ncclInvalidUsage, "%s: to self outside ncclGroupStart/End (a GPU hangs)", call);
  if (r != ncclSuccess) {
    if (group_depth > 0) group_error = r;
    return r;
  }
  pending.push_back(p2p{send, buf, count * type_size(dt), peer, c});
  return group_depth == 0 ? group_end_run() : ncclSuccess; /* outside a group: a group of its own */
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
