// emu.h: host emulation of the few CUDA features the kernels use: one block at a time,
// one pthread per thread, __syncthreads as a barrier, atomics as GCC builtins.
#include <pthread.h>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <functional>
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static pthread_barrier_t emu_bar;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads() pthread_barrier_wait(&emu_bar)
#define __restrict__
static inline unsigned atomicCAS(unsigned *p, unsigned cmp, unsigned v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return cmp; }
static inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
  unsigned long long o = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (v < o && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  return o; }
static inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <typename T> static inline T atomicAdd(T *p, T v) { // float/double
  T o = *p; T n; do { n = o + v; } while (!__atomic_compare_exchange(p, &o, &n, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)); return o; }
struct emu_arg { dim3 t, b; std::function<void()> *f; };
static void *emu_thread(void *p) { emu_arg *a = (emu_arg *)p; threadIdx = a->t; blockIdx = a->b; (*a->f)(); return NULL; }
static void emu_launch(dim3 grid, dim3 block, std::function<void()> f) {
  gridDim = grid; blockDim = block;
  unsigned nt = block.x * block.y * block.z;
  pthread_barrier_init(&emu_bar, NULL, nt);
  for (unsigned b = 0; b < grid.x; b++) {
    std::vector<pthread_t> th(nt); std::vector<emu_arg> args(nt);
    unsigned k = 0;
    for (unsigned z = 0; z < block.z; z++) for (unsigned y = 0; y < block.y; y++) for (unsigned x = 0; x < block.x; x++, k++) {
      args[k] = emu_arg{dim3(x, y, z), dim3(b), &f};
      if (pthread_create(&th[k], NULL, emu_thread, &args[k])) { perror("pthread_create"); exit(1); } }
    for (auto &t : th) pthread_join(t, NULL);
  }
  pthread_barrier_destroy(&emu_bar);
}
