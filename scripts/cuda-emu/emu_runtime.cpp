/* emu_runtime.cpp (dplhost CUDA emulator): the CUDA runtime on the host, for
 * running src/cuda without a GPU. Owns the emulated devices
 * (DPL_CUDA_EMU_GPUS, default 1; DPL_CUDA_EMU_MEM_MB each, default 16384), the
 * current device per thread, the last error (cudaGetLastError reads and resets
 * it), device and pinned memory (host memory in a registry, so that every copy,
 * memset and kernel argument is checked against the allocations and devices it
 * may touch), streams and events (synchronous: work runs when it is queued;
 * the handles are still checked), and kernel launches: blocks run one after
 * another (each finds its __shared__ arrays filled with 0xff bytes, not
 * the previous block's values); a block's threads run as fibers (a few lines of assembly on x86-64,
 * ucontext elsewhere or with -DDPL_EMU_UCONTEXT) so that __syncthreads is
 * a barrier and __shared__ (a static) is the block's memory. A block whose
 * thread 0 ends without reaching a barrier runs its other threads as plain
 * calls; a barrier not reached by all threads of a block is reported.
 * Every queued operation reports its accesses to the stream-ordering checker
 * (emu_order.cpp). Misuse is reported on stderr with the prefix "cuda-emu:" and returned as the
 * CUDA error a GPU would give. DPL_CUDA_EMU_GUARD=1 ends every device allocation
 * at an inaccessible page: a kernel (or copy) running past the end of a
 * cudaMalloc block stops the process with the kernel's name. */
#include "emu_internal.h"
#include "include/emu_device.h"
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <execinfo.h>
#include <unistd.h>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace {

enum { EMU_MAX_DEV = 16, EMU_MAX_THREADS = 1024, EMU_STACK = 64 << 10 };
const uint32_t STREAM_MAGIC = 0x5354524d, EVENT_MAGIC = 0x45564e54;

struct alloc_info {
  size_t size;
  int dev;          /* -1: pinned host memory */
  void *map;        /* DPL_CUDA_EMU_GUARD: the mapping holding it (else NULL) */
  size_t map_len;
};

std::mutex mu; /* the registries */
std::map<uintptr_t, alloc_info> allocs;
std::set<const void *> streams, events;
size_t used[EMU_MAX_DEV];
thread_local int cur_dev = 0;
thread_local cudaError_t last_err = cudaSuccess;

int ndev()
{
  static int n = -1;
  if (n < 0) {
    const char *e = getenv("DPL_CUDA_EMU_GPUS");
    int v = e && *e ? atoi(e) : 1;
    n = v < 0 ? 0 : v > EMU_MAX_DEV ? EMU_MAX_DEV : v;
  }
  return n;
}

size_t mem_limit()
{
  static size_t m = 0;
  if (!m) {
    const char *e = getenv("DPL_CUDA_EMU_MEM_MB");
    long long v = e && *e ? atoll(e) : 16384;
    m = (size_t)(v > 0 ? v : 16384) << 20;
  }
  return m;
}

cudaError_t fail(cudaError_t e)
{
  last_err = e;
  return e;
}

/* misuse that a GPU would reject or fault on: reported, then returned as e */
__attribute__((format(printf, 2, 3))) cudaError_t misuse(cudaError_t e, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "cuda-emu: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (%s)\n", cudaGetErrorName(e));
  va_end(ap);
  return fail(e);
}

cudaError_t need_device()
{
  if (ndev() == 0) return fail(cudaErrorNoDevice);
  if (cur_dev < 0 || cur_dev >= ndev()) return fail(cudaErrorInvalidDevice);
  return cudaSuccess;
}

struct stream_s {
  uint32_t magic;
  int dev;
  unsigned flags;
};
struct event_s {
  uint32_t magic;
  int dev;
  unsigned flags;
  int recorded;
};

/* the stream's device (the current device for the legacy stream 0); -1 when the handle is not a live stream */
int stream_dev(cudaStream_t s)
{
  if (!s) return cur_dev;
  std::lock_guard<std::mutex> g(mu);
  if (!streams.count(s)) return -1;
  return ((stream_s *)s)->dev;
}

event_s *event_of(cudaEvent_t e)
{
  std::lock_guard<std::mutex> g(mu);
  return events.count(e) ? (event_s *)e : nullptr;
}

/* the allocation holding [p, p + n) (n 0: p inside it or one past its end); false when there is none */
bool find_alloc(const void *p, size_t n, alloc_info *out, uintptr_t *base)
{
  std::lock_guard<std::mutex> g(mu);
  uintptr_t a = (uintptr_t)p;
  auto it = allocs.upper_bound(a);
  if (it == allocs.begin()) return false;
  --it;
  uintptr_t b = it->first;
  size_t sz = it->second.size;
  if (a < b || a > b + sz || (n > 0 && (a == b + sz || n > b + sz - a))) return false;
  if (out) *out = it->second;
  if (base) *base = b;
  return true;
}

/* dev: the device the range must be on (-2: any device), host_ok: pinned memory allowed */
cudaError_t check_range(const char *call, const char *what, const void *p, size_t n, int dev)
{
  alloc_info ai;
  if (!find_alloc(p, n, &ai, nullptr) || ai.dev < 0)
    return misuse(cudaErrorInvalidValue, "%s: %s %p (%zu bytes) is not in device memory", call, what, p, n);
  if (dev != -2 && ai.dev != dev)
    return misuse(cudaErrorInvalidValue, "%s: %s %p is memory of cuda:%d, expected cuda:%d", call, what, p, ai.dev, dev);
  return cudaSuccess;
}

bool is_devmem(const void *p)
{
  alloc_info ai;
  return find_alloc(p, 0, &ai, nullptr) && ai.dev >= 0;
}

cudaError_t check_stream(const char *call, cudaStream_t s, int *dev)
{
  int d = stream_dev(s);
  if (d < 0) return misuse(cudaErrorInvalidResourceHandle, "%s: %p is not a live stream", call, (void *)s);
  if (dev) *dev = d;
  return cudaSuccess;
}

} // namespace

extern "C" int emu_stream_device(cudaStream_t s) { return stream_dev(s); }

extern "C" int emu_device_range(const void *p, size_t n, int dev)
{
  alloc_info ai;
  return find_alloc(p, n, &ai, nullptr) && ai.dev == dev;
}

extern "C" void emu_op(cudaStream_t s) { emu::order_op(s); }

extern "C" void emu_access(cudaStream_t s, const void *p, int write, const char *op)
{
  alloc_info ai;
  uintptr_t base;
  if (p && find_alloc(p, 0, &ai, &base) && ai.dev >= 0) emu::order_access(s, base, write != 0, op);
}

/* ---------------------------------------------------------------- errors */
extern "C" cudaError_t cudaGetLastError(void)
{
  cudaError_t e = last_err;
  last_err = cudaSuccess;
  return e;
}

extern "C" cudaError_t cudaPeekAtLastError(void) { return last_err; }

extern "C" const char *cudaGetErrorString(cudaError_t e)
{
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorInitializationError: return "initialization error";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  case cudaErrorInvalidDevicePointer: return "invalid device pointer";
  case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
  case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
  case cudaErrorNoDevice: return "no CUDA-capable device is detected";
  case cudaErrorInvalidDevice: return "invalid device ordinal";
  case cudaErrorInvalidResourceHandle: return "invalid resource handle";
  case cudaErrorNotReady: return "device not ready";
  case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
  case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
  case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unrecognized error code";
}

extern "C" const char *cudaGetErrorName(cudaError_t e)
{
  switch (e) {
  case cudaSuccess: return "cudaSuccess";
  case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
  case cudaErrorInitializationError: return "cudaErrorInitializationError";
  case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
  case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
  case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
  case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
  case cudaErrorNoDevice: return "cudaErrorNoDevice";
  case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
  case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
  case cudaErrorNotReady: return "cudaErrorNotReady";
  case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
  case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
  case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

/* ---------------------------------------------------------------- devices */
extern "C" cudaError_t cudaGetDeviceCount(int *count)
{
  if (!count) return fail(cudaErrorInvalidValue);
  *count = ndev();
  return ndev() ? cudaSuccess : fail(cudaErrorNoDevice);
}

extern "C" cudaError_t cudaSetDevice(int dev)
{
  if (ndev() == 0) return fail(cudaErrorNoDevice);
  if (dev < 0 || dev >= ndev()) return fail(cudaErrorInvalidDevice);
  cur_dev = dev;
  return cudaSuccess;
}

extern "C" cudaError_t cudaGetDevice(int *dev)
{
  if (!dev) return fail(cudaErrorInvalidValue);
  *dev = cur_dev;
  return cudaSuccess;
}

/* host synchronizations made (printed with DPL_CUDA_EMU_STATS): each is a point where a
 * real host waits for the GPU to drain what it queued before */
unsigned long long emu_host_syncs[3]; /* device, stream, event */

extern "C" cudaError_t cudaDeviceSynchronize(void)
{
  emu_host_syncs[0]++;
  if (cudaError_t e = need_device()) return e;
  emu::order_sync_all();
  return cudaSuccess;
}

/* ---------------------------------------------------------------- memory */
namespace {
const char *fault_where(); /* the running kernel (launches below) */

void on_fault(int sig, siginfo_t *si, void *)
{
  char buf[512];
  int n = snprintf(buf, sizeof buf,
                   "cuda-emu: %s: illegal address %p (past the end of a device allocation: DPL_CUDA_EMU_GUARD)\n",
                   fault_where(), si->si_addr);
  if (write(2, buf, n > 0 ? (size_t)n : 0) < 0) {}
  signal(sig, SIG_DFL);
  raise(sig);
}

bool guard_mode()
{
  static int g = -1;
  if (g < 0) {
    const char *e = getenv("DPL_CUDA_EMU_GUARD");
    g = e && *e && strcmp(e, "0") != 0;
    if (g) {
      static char alt[64 << 10];
      stack_t ss;
      ss.ss_sp = alt;
      ss.ss_size = sizeof alt;
      ss.ss_flags = 0;
      sigaltstack(&ss, nullptr);
      struct sigaction sa;
      memset(&sa, 0, sizeof sa);
      sa.sa_sigaction = on_fault;
      sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
      sigaction(SIGSEGV, &sa, nullptr);
      sigaction(SIGBUS, &sa, nullptr);
    }
  }
  return g;
}

/* rounded bytes ending at an inaccessible page; the mapping in map and len */
void *guarded_alloc(size_t rounded, void **map, size_t *len)
{
  size_t page = (size_t)sysconf(_SC_PAGESIZE), body = (rounded + page - 1) / page * page;
  void *m = mmap(nullptr, body + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  mprotect((char *)m + body, page, PROT_NONE);
  *map = m;
  *len = body + page;
  return (char *)m + body - rounded;
}
} // namespace

extern "C" cudaError_t cudaMalloc(void **ptr, size_t size)
{
  if (!ptr) return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (cudaError_t e = need_device()) return e;
  if (size == 0) return cudaSuccess;
  size_t rounded = (size + 255) / 256 * 256;
  {
    std::lock_guard<std::mutex> g(mu);
    if (used[cur_dev] + rounded > mem_limit()) return fail(cudaErrorMemoryAllocation);
  }
  void *map = nullptr;
  size_t map_len = 0;
  void *p = guard_mode() ? guarded_alloc(rounded, &map, &map_len) : aligned_alloc(256, rounded);
  if (!p) return fail(cudaErrorMemoryAllocation);
  memset(p, 0xcd, rounded); /* what was there before: unwritten outputs are not zeros */
  std::lock_guard<std::mutex> g(mu);
  used[cur_dev] += rounded;
  allocs[(uintptr_t)p] = alloc_info{rounded, cur_dev, map, map_len};
  emu::order_forget((uintptr_t)p);
  *ptr = p;
  return cudaSuccess;
}

extern "C" cudaError_t cudaFree(void *ptr)
{
  if (!ptr) return cudaSuccess;
  emu::order_sync_all(); /* cudaFree waits for the device */
  emu::order_forget((uintptr_t)ptr);
  std::unique_lock<std::mutex> g(mu);
  auto it = allocs.find((uintptr_t)ptr);
  if (it == allocs.end() || it->second.dev < 0) {
    g.unlock();
    return misuse(cudaErrorInvalidValue, "cudaFree(%p): not the start of a device allocation", ptr);
  }
  used[it->second.dev] -= it->second.size;
  void *map = it->second.map;
  size_t map_len = it->second.map_len;
  allocs.erase(it);
  g.unlock();
  if (map) munmap(map, map_len);
  else free(ptr);
  return cudaSuccess;
}

extern "C" cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags)
{
  if (!ptr) return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (flags & ~0xfu) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = need_device()) return e;
  size_t rounded = (size + 4095) / 4096 * 4096;
  void *p = aligned_alloc(4096, rounded ? rounded : 4096);
  if (!p) return fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> g(mu);
  allocs[(uintptr_t)p] = alloc_info{rounded, -1, nullptr, 0};
  *ptr = p;
  return cudaSuccess;
}

extern "C" cudaError_t cudaFreeHost(void *ptr)
{
  if (!ptr) return cudaSuccess;
  std::unique_lock<std::mutex> g(mu);
  auto it = allocs.find((uintptr_t)ptr);
  if (it == allocs.end() || it->second.dev >= 0) {
    g.unlock();
    return misuse(cudaErrorInvalidValue, "cudaFreeHost(%p): not pinned host memory", ptr);
  }
  allocs.erase(it);
  g.unlock();
  free(ptr);
  return cudaSuccess;
}

extern "C" cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
  if (cudaError_t e = need_device()) return e;
  std::lock_guard<std::mutex> g(mu);
  if (free_bytes) *free_bytes = mem_limit() - used[cur_dev];
  if (total_bytes) *total_bytes = mem_limit();
  return cudaSuccess;
}

/* ---------------------------------------------------------------- copies */
namespace {
/* dev: the device whose stream carries the copy */
cudaError_t copy_checked(const char *call, void *dst, const void *src, size_t n, cudaMemcpyKind kind, int dev,
                         cudaStream_t s)
{
  if (n == 0) return cudaSuccess;
  if (!dst || !src) return misuse(cudaErrorInvalidValue, "%s: NULL pointer", call);
  bool dd = is_devmem(dst), sd = is_devmem(src);
  if (kind == cudaMemcpyDefault) kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                           : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  cudaError_t e = cudaSuccess;
  switch (kind) {
  case cudaMemcpyHostToDevice:
    if (sd) return misuse(cudaErrorInvalidValue, "%s: cudaMemcpyHostToDevice from device memory %p", call, src);
    e = check_range(call, "destination", dst, n, dev);
    break;
  case cudaMemcpyDeviceToHost:
    if (dd) return misuse(cudaErrorInvalidValue, "%s: cudaMemcpyDeviceToHost into device memory %p", call, dst);
    e = check_range(call, "source", src, n, dev);
    break;
  case cudaMemcpyDeviceToDevice:
    e = check_range(call, "destination", dst, n, dev);
    if (!e) e = check_range(call, "source", src, n, dev);
    break;
  case cudaMemcpyHostToHost:
    if (dd || sd) return misuse(cudaErrorInvalidValue, "%s: cudaMemcpyHostToHost with device memory", call);
    break;
  default: return misuse(cudaErrorInvalidMemcpyDirection, "%s: copy kind %d", call, (int)kind);
  }
  if (e) return e;
  emu_op(s);
  emu_access(s, src, 0, call);
  emu_access(s, dst, 1, call);
  memmove(dst, src, n);
  return cudaSuccess;
}
} // namespace

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s)
{
  int dev;
  if (cudaError_t e = check_stream("cudaMemcpyAsync", s, &dev)) return e;
  return copy_checked("cudaMemcpyAsync", dst, src, n, kind, dev, s);
}

extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
  if (cudaError_t e = need_device()) return e;
  cudaError_t e = copy_checked("cudaMemcpy", dst, src, n, kind, cur_dev, 0);
  emu::order_sync_stream(0); /* synchronous */
  return e;
}

extern "C" cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_dev, const void *src, int src_dev, size_t n,
                                           cudaStream_t s)
{
  if (cudaError_t e = check_stream("cudaMemcpyPeerAsync", s, nullptr)) return e;
  if (dst_dev < 0 || dst_dev >= ndev() || src_dev < 0 || src_dev >= ndev()) return fail(cudaErrorInvalidDevice);
  if (n == 0) return cudaSuccess;
  if (cudaError_t e = check_range("cudaMemcpyPeerAsync", "destination", dst, n, dst_dev)) return e;
  if (cudaError_t e = check_range("cudaMemcpyPeerAsync", "source", src, n, src_dev)) return e;
  emu_op(s);
  emu_access(s, src, 0, "cudaMemcpyPeerAsync");
  emu_access(s, dst, 1, "cudaMemcpyPeerAsync");
  memmove(dst, src, n);
  return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpyPeer(void *dst, int dst_dev, const void *src, int src_dev, size_t n)
{
  return cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, n, 0);
}

extern "C" cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t s)
{
  int dev;
  if (cudaError_t e = check_stream("cudaMemsetAsync", s, &dev)) return e;
  if (n == 0) return cudaSuccess;
  if (cudaError_t e = check_range("cudaMemsetAsync", "destination", dst, n, dev)) return e;
  emu_op(s);
  emu_access(s, dst, 1, "cudaMemsetAsync");
  memset(dst, value, n);
  return cudaSuccess;
}

extern "C" cudaError_t cudaMemset(void *dst, int value, size_t n) { return cudaMemsetAsync(dst, value, n, 0); }

/* ---------------------------------------------------------------- streams, events */
extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
  if (!s || (flags & ~1u)) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = need_device()) return e;
  stream_s *p = new stream_s{STREAM_MAGIC, cur_dev, flags};
  std::lock_guard<std::mutex> g(mu);
  streams.insert(p);
  *s = (cudaStream_t)p;
  return cudaSuccess;
}

extern "C" cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }

extern "C" cudaError_t cudaStreamDestroy(cudaStream_t s)
{
  std::unique_lock<std::mutex> g(mu);
  if (!s || !streams.erase(s)) {
    g.unlock();
    return misuse(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(%p): not a live stream", (void *)s);
  }
  g.unlock();
  delete (stream_s *)s;
  return cudaSuccess;
}

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
  emu_host_syncs[1]++;
  if (cudaError_t e = check_stream("cudaStreamSynchronize", s, nullptr)) return e;
  emu::order_sync_stream(s);
  return cudaSuccess;
}

extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
  if (!e || (flags & ~7u)) return fail(cudaErrorInvalidValue);
  if (cudaError_t r = need_device()) return r;
  event_s *p = new event_s{EVENT_MAGIC, cur_dev, flags, 0};
  std::lock_guard<std::mutex> g(mu);
  events.insert(p);
  *e = (cudaEvent_t)p;
  return cudaSuccess;
}

extern "C" cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

extern "C" cudaError_t cudaEventDestroy(cudaEvent_t e)
{
  std::unique_lock<std::mutex> g(mu);
  if (!e || !events.erase(e)) {
    g.unlock();
    return misuse(cudaErrorInvalidResourceHandle, "cudaEventDestroy(%p): not a live event", (void *)e);
  }
  g.unlock();
  emu::order_forget_event(e);
  delete (event_s *)e;
  return cudaSuccess;
}

extern "C" cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
  event_s *ev = event_of(e);
  if (!ev) return misuse(cudaErrorInvalidResourceHandle, "cudaEventRecord: %p is not a live event", (void *)e);
  int dev;
  if (cudaError_t r = check_stream("cudaEventRecord", s, &dev)) return r;
  if (dev != ev->dev)
    return misuse(cudaErrorInvalidResourceHandle, "cudaEventRecord: event of cuda:%d on a stream of cuda:%d", ev->dev,
                  dev);
  ev->recorded = 1;
  emu::order_record(e, s);
  return cudaSuccess;
}

extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
  emu_host_syncs[2]++;
  if (!event_of(e)) return misuse(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: %p is not a live event", (void *)e);
  emu::order_sync_event(e);
  return cudaSuccess;
}

extern "C" cudaError_t cudaEventQuery(cudaEvent_t e)
{
  if (!event_of(e)) return misuse(cudaErrorInvalidResourceHandle, "cudaEventQuery: %p is not a live event", (void *)e);
  emu::order_sync_event(e); /* work runs at launch: always done, and the host now knows it (not counted as a wait) */
  return cudaSuccess;
}

extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
  if (flags != 0) return fail(cudaErrorInvalidValue);
  if (cudaError_t r = check_stream("cudaStreamWaitEvent", s, nullptr)) return r;
  if (!event_of(e)) return misuse(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: %p is not a live event", (void *)e);
  emu::order_wait(s, e);
  return cudaSuccess;
}

/* ---------------------------------------------------------------- launches */
namespace {

enum { F_RUN, F_WAIT, F_DONE };

#if defined(__x86_64__) && !defined(DPL_EMU_UCONTEXT)
#define EMU_ASM_SWITCH 1
/* saves the callee-saved registers on the current stack, stores its pointer in *save, continues on the
 * stack `to` (as saved by an earlier switch, or prepared by start_fiber); no signal mask, no system call */
extern "C" void emu_ctx_switch(void **save, void *to);
asm(".text\n"
    ".globl emu_ctx_switch\n"
    ".hidden emu_ctx_switch\n"
    ".type emu_ctx_switch,@function\n"
    "emu_ctx_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_ctx_switch, .-emu_ctx_switch\n");
#else
#define EMU_ASM_SWITCH 0
#endif

struct launch_state {
  emu_thread_fn fn;
  void *ctx;
  const char *kernel;
  unsigned nt;
  bool fibers;        /* the block's threads are fibers (else plain calls after thread 0) */
  int current;        /* the fiber running */
  bool diverged;      /* a barrier some threads of the block did not reach */
#if EMU_ASM_SWITCH
  void *sched;                /* saved stack pointers */
  void *th[EMU_MAX_THREADS];
#else
  ucontext_t sched;
  ucontext_t th[EMU_MAX_THREADS];
#endif
  unsigned char state[EMU_MAX_THREADS];
};

std::mutex launch_mu; /* one launch at a time: the index variables are process-wide */

/* DPL_CUDA_EMU_STATS=1: launches, blocks and threads per kernel, printed at exit (which kernels a run reached) */
struct kstat {
  unsigned long long launches, blocks, threads, fiber_blocks;
};
std::map<std::string, kstat> *stats;
void print_stats()
{
  fprintf(stderr, "cuda-emu: stats host syncs: %llu device, %llu stream, %llu event\n", emu_host_syncs[0],
          emu_host_syncs[1], emu_host_syncs[2]);
  for (auto &kv : *stats)
    fprintf(stderr, "cuda-emu: stats %-40s %8llu launches %10llu blocks (%llu with barriers) %12llu threads\n",
            kv.first.c_str(), kv.second.launches, kv.second.blocks, kv.second.fiber_blocks, kv.second.threads);
}
/* DPL_CUDA_EMU_TRACE=<text>: a C backtrace on stderr at each launch of a kernel whose
 * name contains the text (which op of the core or the plugin launched it) */
static void trace_launch(const char *kernel)
{
  static const char *tr = (const char *)-1;
  if (tr == (const char *)-1) {
    tr = getenv("DPL_CUDA_EMU_TRACE");
    if (tr && !*tr) tr = nullptr;
  }
  if (!tr || !strstr(kernel, tr)) return;
  void *b[16];
  int n = backtrace(b, 16);
  fprintf(stderr, "cuda-emu: trace %s\n", kernel);
  backtrace_symbols_fd(b, n, 2);
}
kstat *stat_for(const char *kernel)
{
  trace_launch(kernel);
  static int on = -1;
  if (on < 0) {
    const char *e = getenv("DPL_CUDA_EMU_STATS");
    on = e && *e && strcmp(e, "0") != 0;
    if (on) {
      stats = new std::map<std::string, kstat>();
      atexit(print_stats);
    }
  }
  return on ? &(*stats)[kernel] : nullptr;
}
launch_state *L;
char *stacks;
unsigned long long block_serial; /* counts the blocks run */
struct shared_seen {
  void *p;
  unsigned long long serial;
};
std::vector<shared_seen> shared_arrays; /* the __shared__ arrays met, with the block that filled them last */

const char *fault_where()
{
  static char buf[256];
  if (!L) return "host code (a copy, cuBLAS or NCCL emulation, or the plugin)";
  snprintf(buf, sizeof buf, "kernel %s, block (%u,%u,%u), thread (%u,%u,%u)", L->kernel, blockIdx.x, blockIdx.y,
           blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
  return buf;
}

void set_thread(unsigned t)
{
  threadIdx.x = t % blockDim.x;
  threadIdx.y = t / blockDim.x % blockDim.y;
  threadIdx.z = t / (blockDim.x * blockDim.y);
}

void fiber_main()
{
  launch_state *l = L;
  l->fn(l->ctx);
  l->state[l->current] = F_DONE;
#if EMU_ASM_SWITCH
  void *dead;
  emu_ctx_switch(&dead, l->sched); /* never resumed */
  __builtin_unreachable();
#endif
  /* ucontext: returns to l->sched through uc_link */
}

bool ensure_stacks()
{
  if (stacks) return true;
  size_t page = (size_t)sysconf(_SC_PAGESIZE), total = (size_t)EMU_MAX_THREADS * EMU_STACK;
  void *p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  for (size_t k = 0; k < EMU_MAX_THREADS; k++) mprotect((char *)p + k * EMU_STACK, page, PROT_NONE); /* guard pages */
  stacks = (char *)p;
  return true;
}

void start_fiber(launch_state *l, unsigned t)
{
  char *stack = stacks + (size_t)t * EMU_STACK;
#if EMU_ASM_SWITCH
  /* the frame emu_ctx_switch pops: six registers, then fiber_main as the return address, entered with
   * rsp = 8 mod 16 as after a call */
  uintptr_t top = ((uintptr_t)(stack + EMU_STACK)) & ~(uintptr_t)15;
  void **sp = (void **)top;
  *--sp = nullptr;             /* fiber_main's return address: it never returns */
  *--sp = (void *)fiber_main;
  for (int k = 0; k < 6; k++) *--sp = nullptr;
  l->th[t] = sp;
#else
  getcontext(&l->th[t]);
  l->th[t].uc_stack.ss_sp = stack;
  l->th[t].uc_stack.ss_size = EMU_STACK;
  l->th[t].uc_link = &l->sched;
  makecontext(&l->th[t], fiber_main, 0);
#endif
  l->state[t] = F_RUN;
  l->current = (int)t;
  set_thread(t);
#if EMU_ASM_SWITCH
  emu_ctx_switch(&l->sched, l->th[t]);
#else
  swapcontext(&l->sched, &l->th[t]);
#endif
}

void resume_fiber(launch_state *l, unsigned t)
{
  l->state[t] = F_RUN;
  l->current = (int)t;
  set_thread(t);
#if EMU_ASM_SWITCH
  emu_ctx_switch(&l->sched, l->th[t]);
#else
  swapcontext(&l->sched, &l->th[t]);
#endif
}

/* threads run in index order in even blocks and in reverse order in odd ones, so that a missing
 * barrier shows whichever way the threads of a block depend on each other */
void run_block(launch_state *l, bool reverse)
{
  const unsigned n = l->nt, first = reverse ? n - 1 : 0;
  block_serial++;
  auto nth = [&](unsigned k) { return reverse ? n - 1 - k : k; };
  l->fibers = true;
  start_fiber(l, first);
  if (l->state[first] == F_DONE) { /* no barrier on the first thread's path: the others run as plain calls */
    l->fibers = false;
    for (unsigned k = 1; k < n; k++) {
      set_thread(nth(k));
      l->fn(l->ctx);
    }
    return;
  }
  for (unsigned k = 1; k < n; k++) start_fiber(l, nth(k));
  for (;;) { /* every live fiber waits at the barrier: release them one after another */
    unsigned waiting = 0, done = 0;
    for (unsigned t = 0; t < n; t++) {
      waiting += l->state[t] == F_WAIT;
      done += l->state[t] == F_DONE;
    }
    if (waiting == 0) break;
    if (done) l->diverged = true;
    for (unsigned k = 0; k < n; k++)
      if (l->state[nth(k)] == F_WAIT) resume_fiber(l, nth(k));
  }
}

} // namespace

extern "C" void emu_shared_fresh(void *p, size_t n)
{
  for (auto &a : shared_arrays)
    if (a.p == p) {
      if (a.serial != block_serial) {
        memset(p, 0xff, n);
        a.serial = block_serial;
      }
      return;
    }
  memset(p, 0xff, n);
  shared_arrays.push_back(shared_seen{p, block_serial});
}

extern "C" void emu_syncthreads(void)
{
  launch_state *l = L;
  if (!l) return;
  if (!l->fibers) { /* thread 0 of this block ended without this barrier */
    l->diverged = true;
    return;
  }
  int t = l->current;
  l->state[t] = F_WAIT;
#if EMU_ASM_SWITCH
  emu_ctx_switch(&l->th[t], l->sched);
#else
  swapcontext(&l->th[t], &l->sched);
#endif
}

/* the launch being checked: its stream, for the ordering checker */
thread_local cudaStream_t launch_stream;

extern "C" int emu_launch_check(const emu_cfg_t *cfg, const char *kernel)
{
  const dim3 g = cfg->grid, b = cfg->block;
  unsigned long long nt = (unsigned long long)b.x * b.y * b.z;
  if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535 || b.x > 1024 ||
      b.y > 1024 || b.z > 64 || nt > 1024 || cfg->shmem > 48 * 1024) {
    misuse(cudaErrorInvalidConfiguration, "%s<<<(%u,%u,%u), (%u,%u,%u), %zu>>>: invalid launch configuration", kernel,
           g.x, g.y, g.z, b.x, b.y, b.z, cfg->shmem);
    return 0;
  }
  int dev;
  if (need_device() || check_stream(kernel, cfg->stream, &dev)) return 0;
  if (dev != cur_dev) {
    misuse(cudaErrorInvalidResourceHandle, "%s: launched on a stream of cuda:%d while cuda:%d is current", kernel, dev,
           cur_dev);
    return 0;
  }
  launch_stream = cfg->stream;
  emu_op(cfg->stream);
  return 1;
}

extern "C" int emu_launch_check_ptr(const void *p, int arg, const char *kernel)
{
  if (!p) return 0;
  alloc_info ai;
  if (!find_alloc(p, 0, &ai, nullptr)) {
    misuse(cudaErrorIllegalAddress, "%s: argument %d (%p) is not device memory", kernel, arg, p);
    return 1;
  }
  if (ai.dev >= 0 && ai.dev != cur_dev) {
    misuse(cudaErrorIllegalAddress, "%s: argument %d (%p) is memory of cuda:%d, launched on cuda:%d", kernel, arg, p,
           ai.dev, cur_dev);
    return 1;
  }
  emu_access(launch_stream, p, 1, kernel); /* read or write: not known here */
  return 0;
}

extern "C" void emu_launch_run(const emu_cfg_t *cfg, emu_thread_fn fn, void *ctx, const char *kernel)
{
  std::lock_guard<std::mutex> g(launch_mu);
  if (!ensure_stacks()) {
    misuse(cudaErrorLaunchOutOfResources, "%s: no memory for the fibers' stacks", kernel);
    return;
  }
  static launch_state state;
  launch_state *l = &state;
  l->fn = fn;
  l->ctx = ctx;
  l->kernel = kernel;
  l->nt = cfg->block.x * cfg->block.y * cfg->block.z;
  l->diverged = false;
  L = l;
  kstat *ks = stat_for(kernel);
  if (ks) ks->launches++;
  gridDim = cfg->grid;
  blockDim = cfg->block;
  for (unsigned z = 0; z < cfg->grid.z; z++)
    for (unsigned y = 0; y < cfg->grid.y; y++)
      for (unsigned x = 0; x < cfg->grid.x; x++) {
        blockIdx.x = x;
        blockIdx.y = y;
        blockIdx.z = z;
        run_block(l, ((x ^ y ^ z) & 1) != 0);
        if (ks) {
          ks->blocks++;
          ks->threads += l->nt;
          ks->fiber_blocks += l->fibers;
        }
        if (l->diverged) {
          misuse(cudaErrorLaunchFailure, "%s: block (%u,%u,%u): __syncthreads not reached by every thread", kernel, x, y,
                 z);
          L = nullptr;
          return;
        }
      }
  L = nullptr;
}
