/* emu_device.h (dplhost CUDA emulator): what a .cu file sees of the device when
 * it is compiled as host C++ (force-included by `make cuda-emu`): the
 * qualifiers, the built-in index variables, __syncthreads, atomics, the
 * intrinsics src/cuda uses, and emu_launch, which replaces `k<<<cfg>>>(args)`
 * (emu_rewrite.pl does the rewrite). Blocks run one after another on the
 * calling thread; a block's threads are fibers (emu_runtime.cpp), so atomics
 * are plain read-modify-writes: nothing runs between two barriers of another
 * thread. */
#ifndef DPL_EMU_DEVICE_H
#define DPL_EMU_DEVICE_H
#include "cuda_runtime_api.h"
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __shared__ static
#define __restrict__ __restrict
#define __launch_bounds__(...)

/* the running thread's coordinates, set by the launcher before each thread runs or resumes */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

extern "C" void emu_syncthreads(void);
/* a __shared__ array reached by a thread: filled with 0xff bytes once per block (emu_rewrite.pl adds the calls) */
extern "C" void emu_shared_fresh(void *p, size_t n);
#define __syncthreads() emu_syncthreads()

/* ---- atomics: the old value, like CUDA's ---- */
template <typename T> static inline T emu_atomic_add(T *p, T v) { T o = *p; *p = (T)(o + v); return o; }
static inline float atomicAdd(float *p, float v) { return emu_atomic_add(p, v); }
static inline double atomicAdd(double *p, double v) { return emu_atomic_add(p, v); }
static inline int atomicAdd(int *p, int v) { return (int)emu_atomic_add((unsigned int *)p, (unsigned int)v); }
static inline unsigned int atomicAdd(unsigned int *p, unsigned int v) { return emu_atomic_add(p, v); }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) { return emu_atomic_add(p, v); }
template <typename T> static inline T emu_atomic_min(T *p, T v) { T o = *p; if (v < o) *p = v; return o; }
template <typename T> static inline T emu_atomic_max(T *p, T v) { T o = *p; if (v > o) *p = v; return o; }
static inline int atomicMin(int *p, int v) { return emu_atomic_min(p, v); }
static inline unsigned int atomicMin(unsigned int *p, unsigned int v) { return emu_atomic_min(p, v); }
static inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) { return emu_atomic_min(p, v); }
static inline long long atomicMin(long long *p, long long v) { return emu_atomic_min(p, v); }
static inline int atomicMax(int *p, int v) { return emu_atomic_max(p, v); }
static inline unsigned int atomicMax(unsigned int *p, unsigned int v) { return emu_atomic_max(p, v); }
static inline unsigned long long atomicMax(unsigned long long *p, unsigned long long v) { return emu_atomic_max(p, v); }
static inline long long atomicMax(long long *p, long long v) { return emu_atomic_max(p, v); }
template <typename T> static inline T emu_atomic_cas(T *p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }
static inline int atomicCAS(int *p, int cmp, int v) { return emu_atomic_cas(p, cmp, v); }
static inline unsigned int atomicCAS(unsigned int *p, unsigned int cmp, unsigned int v) { return emu_atomic_cas(p, cmp, v); }
static inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long cmp, unsigned long long v)
{
  return emu_atomic_cas(p, cmp, v);
}
template <typename T> static inline T emu_atomic_exch(T *p, T v) { T o = *p; *p = v; return o; }
static inline int atomicExch(int *p, int v) { return emu_atomic_exch(p, v); }
static inline unsigned int atomicExch(unsigned int *p, unsigned int v) { return emu_atomic_exch(p, v); }
static inline float atomicExch(float *p, float v) { return emu_atomic_exch(p, v); }

/* ---- intrinsics: IEEE operations, one rounding each (built with -ffp-contract=off) ---- */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline unsigned int __float_as_uint(float x) { unsigned int u; memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float x; memcpy(&x, &u, 4); return x; }
static inline int __float_as_int(float x) { int u; memcpy(&u, &x, 4); return u; }
static inline float __int_as_float(int u) { float x; memcpy(&x, &u, 4); return x; }
static inline long long __double_as_longlong(double x) { long long u; memcpy(&u, &x, 8); return u; }
static inline double __longlong_as_double(long long u) { double x; memcpy(&x, &u, 8); return x; }

/* ---- launches ---- */
struct emu_cfg_t {
  dim3 grid, block;
  size_t shmem;
  cudaStream_t stream;
};
static inline emu_cfg_t emu_cfg(dim3 grid, dim3 block, size_t shmem = 0, cudaStream_t stream = 0)
{
  return emu_cfg_t{grid, block, shmem, stream};
}
typedef void (*emu_thread_fn)(void *ctx);
/* checks the configuration and the stream (0 + the last error set when bad) */
extern "C" int emu_launch_check(const emu_cfg_t *cfg, const char *kernel);
/* 0 when p may be dereferenced by a kernel on the current device (NULL, device or pinned memory); else the
 * error is set and reported */
extern "C" int emu_launch_check_ptr(const void *p, int arg, const char *kernel);
/* runs fn(ctx) for every thread of every block */
extern "C" void emu_launch_run(const emu_cfg_t *cfg, emu_thread_fn fn, void *ctx, const char *kernel);

template <typename T> static inline int emu_check_arg(const T &v, int i, const char *kernel)
{
  if constexpr (std::is_pointer<T>::value) return emu_launch_check_ptr((const void *)v, i, kernel);
  (void)v, (void)i, (void)kernel;
  return 0;
}
template <typename Tup, size_t... I> static inline int emu_check_args(const Tup &t, const char *kernel, std::index_sequence<I...>)
{
  int bad = 0;
  ((bad = bad ? bad : emu_check_arg(std::get<I>(t), (int)I + 1, kernel)), ...);
  return bad;
}

/* kernel<<<cfg>>>(args...): the arguments converted to the parameters' types once, as a launch does */
template <typename... P, typename... A>
static inline void emu_launch(void (*k)(P...), const char *kernel, emu_cfg_t cfg, A &&...a)
{
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  using args_t = std::tuple<typename std::decay<P>::type...>;
  args_t args = args_t(std::forward<A>(a)...);
  if (!emu_launch_check(&cfg, kernel)) return;
  if (emu_check_args(args, kernel, std::index_sequence_for<P...>{})) return;
  struct ctx_t {
    void (*k)(P...);
    args_t *args;
  } c = {k, &args};
  emu_launch_run(&cfg, [](void *p) { ctx_t *c = (ctx_t *)p; std::apply(c->k, *c->args); }, &c, kernel);
}
#endif
