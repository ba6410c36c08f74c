/* dpl_tensor_core.c: storages and tensor handles: 64-byte-aligned, refcounted
 * storage with per-device byte counters (dpl_mem_stats), device checks for
 * simulated GPUs, tensor creation and release (one allocation for a fresh
 * tensor: handle, storage header and data in one block; an op's ending:
 * release its temporaries, hand over its results), and every view op
 * (view/reshape, as_strided, transpose, permute, narrow, select, expand,
 * squeeze/unsqueeze, contiguous), plus shape/broadcast/type-promotion helpers. */
#define _GNU_SOURCE
#include "dpl_tensor_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_DEV 64
/* Byte counters per device, in two halves: `own` is written only by the thread
 * that runs the Lua state (the process's main thread), with relaxed load + store,
 * `sh` by every other thread with atomic read-modify-writes; readers add them up.
 * The allocation path then needs no locked instruction. */
typedef struct counts {
  _Atomic int64_t current, total, allocs, frees; /* live storages = allocs - frees */
} counts;
typedef struct devcount {
  counts own, sh;
  _Atomic int64_t peak;
} devcount;
static devcount cpu_count;
static devcount cuda_count[MAX_DEV];

static pthread_t owner_thread;
static _Atomic int owner_known;
__attribute__((constructor)) static void find_owner(void)
{
  owner_thread = pthread_self();
  atomic_store(&owner_known, 1);
}
static _Thread_local int8_t tl_role; /* 0 not yet known, 1 the owner, -1 another thread */
static inline int is_owner(void)
{
  if (__builtin_expect(tl_role == 0, 0))
    tl_role = atomic_load(&owner_known) && pthread_equal(pthread_self(), owner_thread) ? 1 : -1;
  return tl_role > 0;
}
static inline void counter_add(_Atomic int64_t *x, int64_t v, int own)
{
  if (own) atomic_store_explicit(x, atomic_load_explicit(x, memory_order_relaxed) + v, memory_order_relaxed);
  else atomic_fetch_add_explicit(x, v, memory_order_relaxed);
}
static inline int64_t counter_get(devcount *c, size_t field)
{
  return atomic_load((_Atomic int64_t *)((char *)&c->own + field)) +
         atomic_load((_Atomic int64_t *)((char *)&c->sh + field));
}
#define COUNT(c, f) counter_get((c), offsetof(counts, f))
/* GC pacing: tensor bytes and tensor handles created since the last dpl_gc_done.
 * They are hints, not accounts: updated with relaxed load + store (no locked
 * instruction on the allocation path), so concurrent allocations may lose a count.
 * gc_flag turns 1 when either passes its threshold; Lua reads it through the
 * pointer from dpl_gc_flag (a plain load per op instead of a call). */
static _Atomic int64_t since_gc, since_gc_handles;
static _Atomic int64_t storage_serials; /* storages made so far (each one's serial) */
static _Atomic int64_t gc_threshold = INT64_C(8) << 20;
static _Atomic int64_t gc_handle_threshold = INT64_MAX;
static int32_t gc_flag;

static inline void gc_raise(void) { __atomic_store_n(&gc_flag, 1, __ATOMIC_RELAXED); }

static inline void gc_count(int64_t nbytes, int64_t handles)
{
  if (nbytes) {
    int64_t b = atomic_load_explicit(&since_gc, memory_order_relaxed) + nbytes;
    atomic_store_explicit(&since_gc, b, memory_order_relaxed);
    if (b > atomic_load_explicit(&gc_threshold, memory_order_relaxed)) gc_raise();
  }
  if (handles) {
    int64_t h = atomic_load_explicit(&since_gc_handles, memory_order_relaxed) + handles;
    atomic_store_explicit(&since_gc_handles, h, memory_order_relaxed);
    if (h > atomic_load_explicit(&gc_handle_threshold, memory_order_relaxed)) gc_raise();
  }
}

/* Bytes a tensor's explicit release (dpl_tensor_free_data: t:free(), zero_grad, backward's
 * intermediate gradients) gave back: they no longer wait for a collection, so they leave
 * the count, and the flag falls when both counts are back under their thresholds. */
static void gc_credit(int64_t nbytes)
{
  int64_t b = atomic_load_explicit(&since_gc, memory_order_relaxed) - nbytes;
  if (b < 0) b = 0;
  atomic_store_explicit(&since_gc, b, memory_order_relaxed);
  if (b <= atomic_load_explicit(&gc_threshold, memory_order_relaxed) &&
      atomic_load_explicit(&since_gc_handles, memory_order_relaxed) <=
          atomic_load_explicit(&gc_handle_threshold, memory_order_relaxed))
    __atomic_store_n(&gc_flag, 0, __ATOMIC_RELAXED);
}

int32_t dpl_gc_wanted(void) { return __atomic_load_n(&gc_flag, __ATOMIC_RELAXED); }
int32_t *dpl_gc_flag(void) { return &gc_flag; }
int64_t dpl_gc_done(void)
{
  atomic_store(&since_gc, 0);
  int64_t h = atomic_exchange(&since_gc_handles, 0);
  __atomic_store_n(&gc_flag, 0, __ATOMIC_RELAXED);
  return h;
}
int64_t dpl_gc_since(int32_t what)
{
  return atomic_load_explicit(what ? &since_gc_handles : &since_gc, memory_order_relaxed);
}
void dpl_set_gc_threshold(int64_t bytes)
{
  atomic_store(&gc_threshold, bytes > 0 ? bytes : INT64_MAX);
  __atomic_store_n(&gc_flag, atomic_load(&since_gc) > atomic_load(&gc_threshold) ||
                                 atomic_load(&since_gc_handles) > atomic_load(&gc_handle_threshold),
                   __ATOMIC_RELAXED);
}
void dpl_set_gc_handle_threshold(int64_t handles)
{
  atomic_store(&gc_handle_threshold, handles > 0 ? handles : INT64_MAX);
  dpl_set_gc_threshold(atomic_load(&gc_threshold));
}

/* ---- per-thread pools of tensor handles and small storage blocks ----
 * Small tensors are created and (by Lua's GC) freed in bursts of thousands: more
 * than glibc's per-thread cache holds, so each one took malloc's slow paths. A
 * block freed on a thread goes to that thread's pool (entries are plain malloc
 * blocks of the class size, so any of them may also be given to free()); a pool
 * keeps at most POOL_BYTES per class, and is emptied when its thread ends. */
#define NCLASS 6                 /* handles, then small blocks of 128 .. 2048 bytes, 64-byte aligned */
#define SMALL_MAX ((size_t)2048)
#define POOL_BYTES ((size_t)2 << 20)
typedef struct pnode { struct pnode *next; } pnode;
typedef struct tpool { pnode *head[NCLASS]; uint32_t n[NCLASS]; int state; /* 0 new, 1 live, 2 gone */ } tpool;
static _Thread_local tpool tl_pool;
static pthread_key_t pool_key;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static const size_t class_size[NCLASS] = {sizeof(dpl_tensor), 128, 256, 512, 1024, 2048};

static inline void *class_alloc(int c)
{
  return c ? aligned_alloc(64, class_size[c]) : malloc(class_size[c]);
}

static void pool_trim(tpool *p)
{
  for (int c = 0; c < NCLASS; c++) {
    pnode *b = p->head[c];
    while (b) { pnode *next = b->next; free(b); b = next; }
    p->head[c] = NULL;
    p->n[c] = 0;
  }
}
static void pool_drain(tpool *p)
{
  pool_trim(p);
  p->state = 2; /* later frees on this thread go straight to free() */
}
static void pool_thread_end(void *p) { pool_drain(p); }
static void pool_main_end(void) { pool_drain(&tl_pool); }
static void pool_init(void)
{
  pthread_key_create(&pool_key, pool_thread_end);
  atexit(pool_main_end); /* the main thread's key destructor never runs */
}

/* Under AddressSanitizer (make SAN=1) every block goes back to free(), so that a
 * use after release is still reported (-DDPL_ASAN_POOLS keeps the pools on). */
#if defined(__SANITIZE_ADDRESS__) && !defined(DPL_ASAN_POOLS)
#define POOLS_ON 0
#else
#define POOLS_ON 1
#endif

static inline void *pool_get(int c)
{
  if (!POOLS_ON) return class_alloc(c);
  tpool *p = &tl_pool;
  pnode *b = p->head[c];
  if (b) {
    p->head[c] = b->next;
    p->n[c]--;
    return b;
  }
  return class_alloc(c);
}

static inline void pool_put(int c, void *m)
{
  if (!POOLS_ON) { free(m); return; }
  tpool *p = &tl_pool;
  if (p->state != 1) {
    if (p->state == 0) {
      pthread_once(&pool_once, pool_init);
      pthread_setspecific(pool_key, p); /* (not run for the thread that calls exit: atexit is) */
      p->state = 1;
    } else {
      free(m);
      return;
    }
  }
  if ((size_t)p->n[c] * class_size[c] >= POOL_BYTES) { free(m); return; }
  pnode *b = m;
  b->next = p->head[c];
  p->head[c] = b;
  p->n[c]++;
}

static inline int small_class(size_t want)
{
  return want <= 128 ? 1 : want <= 256 ? 2 : want <= 512 ? 3 : want <= 1024 ? 4 : 5;
}

static inline dpl_tensor *handle_new(void)
{
  gc_count(0, 1);
  return pool_get(0);
}

/* ---- a cache of large freed blocks: reusing them saves the page faults of fresh
 * memory (tensors are freed in bursts, when Lua's GC runs their finalizers) ----
 * Each large block carries a stamp: the large-block clock (bytes of large blocks
 * handed out so far) when its storage was made, i.e. roughly when its data was last
 * written. A block reused within warm_window bytes of that is probably still in the
 * last-level cache: kernels then write it with plain stores (~1.5x faster than
 * streaming ones when warm); a fresh or long-freed block is "cold" and big results
 * there are written with streaming stores (~2x faster than plain ones when cold). */
#define CACHE_MIN ((size_t)256 * 1024)
typedef struct cblock { struct cblock *next; size_t cap; int64_t stamp; } cblock;
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static cblock *cache_head;
static size_t cache_bytes;
static size_t cache_limit = (size_t)1 << 30;
static _Atomic int64_t large_clock;
static int64_t warm_window = INT64_C(8) << 20;

/* glibc returns the top of its heap to the system as soon as 128 KiB are free there,
 * and serves blocks over 128 KiB with fresh mmaps: with tensors freed in bursts (Lua's
 * GC), every cycle would then page-fault its memory in again. Keep it instead. */
static pthread_once_t malloc_once = PTHREAD_ONCE_INIT;
static void tune_malloc(void)
{
#ifdef __GLIBC__
  if (!getenv("MALLOC_TRIM_THRESHOLD_")) mallopt(M_TRIM_THRESHOLD, 256 << 20);
  if (!getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
#ifdef _SC_LEVEL3_CACHE_SIZE
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE); /* a quarter: inputs and other data share it */
  if (l3 >= (1L << 20) && l3 / 4 < warm_window) warm_window = l3 / 4; /* (VMs report 384 MiB L3s) */
  const char *w = getenv("DPL_WARM_BYTES");
  if (w && *w) warm_window = strtoll(w, NULL, 10);
#endif
}

/* *stamp: the clock now (large blocks) or 0; *cold: 1 for a large block that is fresh
 * or was last written more than warm_window bytes of large blocks ago. */
static void *block_alloc(size_t want, size_t *cap, int64_t *stamp, int32_t *cold)
{
  pthread_once(&malloc_once, tune_malloc);
  *stamp = 0;
  *cold = 0;
  if (want <= SMALL_MAX) {
    int c = small_class(want);
    *cap = class_size[c];
    return pool_get(c);
  }
  *cap = want;
  if (want < CACHE_MIN) return malloc(want);
  int64_t now = atomic_fetch_add_explicit(&large_clock, (int64_t)want, memory_order_relaxed);
  *stamp = now;
  pthread_mutex_lock(&cache_mu);
  for (cblock **p = &cache_head; *p; p = &(*p)->next) {
    cblock *b = *p;
    if (b->cap >= want && b->cap - want <= want / 4) {
      *p = b->next;
      cache_bytes -= b->cap;
      pthread_mutex_unlock(&cache_mu);
      *cap = b->cap;
      *cold = now - b->stamp > warm_window;
      return b;
    }
  }
  pthread_mutex_unlock(&cache_mu);
  *cold = 1;
  void *m = malloc(want);
  if (!m) { /* memory is tight: give the cache back and try again */
    dpl_mem_empty_cache();
    m = malloc(want);
  }
  return m;
}

static void block_free(void *m, size_t cap, int64_t stamp)
{
  if (cap <= SMALL_MAX) { pool_put(small_class(cap), m); return; }
  if (cap < CACHE_MIN) { free(m); return; }
  pthread_mutex_lock(&cache_mu);
  if (cache_bytes + cap <= cache_limit) {
    cblock *b = m;
    b->cap = cap;
    b->stamp = stamp;
    b->next = cache_head;
    cache_head = b;
    cache_bytes += cap;
    m = NULL;
  }
  pthread_mutex_unlock(&cache_mu);
  free(m);
}

int64_t dpl_mem_empty_cache(void)
{
  pool_trim(&tl_pool); /* this thread's small blocks too (not counted in the result) */
  pthread_mutex_lock(&cache_mu);
  cblock *b = cache_head;
  int64_t n = (int64_t)cache_bytes;
  cache_head = NULL;
  cache_bytes = 0;
  pthread_mutex_unlock(&cache_mu);
  while (b) { cblock *next = b->next; free(b); b = next; }
  return n;
}

int64_t dpl_mem_cached(void)
{
  pthread_mutex_lock(&cache_mu);
  int64_t n = (int64_t)cache_bytes;
  pthread_mutex_unlock(&cache_mu);
  return n;
}

static devcount *counter_for(int32_t devtype, int32_t devindex)
{
  if (devtype == DPL_DEVICE_CPU) return &cpu_count;
  if (devtype == DPL_DEVICE_CUDA && devindex >= 0 && devindex < MAX_DEV) return &cuda_count[devindex];
  return NULL;
}

static void count_alloc(int32_t devtype, int32_t devindex, int64_t nbytes)
{
  devcount *c = counter_for(devtype, devindex);
  if (!c) return;
  int own = is_owner();
  counts *k = own ? &c->own : &c->sh;
  counter_add(&k->current, nbytes, own);
  counter_add(&k->total, nbytes, own);
  counter_add(&k->allocs, 1, own);
  int64_t now = COUNT(c, current);
  int64_t peak = atomic_load_explicit(&c->peak, memory_order_relaxed);
  while (now > peak && !atomic_compare_exchange_weak(&c->peak, &peak, now)) {}
  gc_count(nbytes, 0);
}

static void count_free(int32_t devtype, int32_t devindex, int64_t nbytes)
{
  devcount *c = counter_for(devtype, devindex);
  if (!c) return;
  int own = is_owner();
  counts *k = own ? &c->own : &c->sh;
  counter_add(&k->current, -nbytes, own);
  counter_add(&k->frees, 1, own);
}

int dpl_mem_stats(int32_t devtype, int32_t devindex, dpl_mem_stats_t *out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "dpl_mem_stats: out is NULL");
  devcount *c = counter_for(devtype, devindex);
  if (!c) return dpl_errorf(DPL_EINVAL, "dpl_mem_stats: no device type %d index %d", (int)devtype, (int)devindex);
  out->current_bytes = COUNT(c, current);
  out->peak_bytes = atomic_load(&c->peak);
  out->total_bytes = COUNT(c, total);
  out->allocations = COUNT(c, allocs);
  out->live_storages = out->allocations - COUNT(c, frees);
  return DPL_OK;
}

int64_t dpl_mem_current_total(void)
{
  int64_t n = COUNT(&cpu_count, current);
  for (int i = 0; i < MAX_DEV; i++) n += COUNT(&cuda_count[i], current);
  return n;
}

int64_t dpl_tensor_layout(int32_t what)
{
  static const int64_t off[] = {
    offsetof(dpl_tensor, _dtype), offsetof(dpl_tensor, _ndim), offsetof(dpl_tensor, _devtype),
    offsetof(dpl_tensor, _devindex), offsetof(dpl_tensor, _numel), offsetof(dpl_tensor, _offset),
    offsetof(dpl_tensor, _shape), offsetof(dpl_tensor, _stride), offsetof(dpl_tensor, _data),
    offsetof(dpl_tensor, _storage), offsetof(dpl_tensor, _flags), offsetof(dpl_tensor, _reserved)};
  if (what == -1) return (int64_t)sizeof(dpl_tensor);
  if (what < 0 || what >= (int32_t)(sizeof off / sizeof off[0])) return -1;
  return off[what];
}

int64_t dpl_dtype_size(int32_t dtype) { return dpl_elsize(dtype); }

const char *dpl_dtype_name(int32_t dtype)
{
  static const char *names[] = {"float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "bool"};
  return dpl_dtype_valid(dtype) ? names[dtype] : "invalid";
}

const char *dpl_device_str(int32_t devtype, int32_t devindex, char *buf, size_t n)
{
  if (devtype == DPL_DEVICE_CPU) snprintf(buf, n, "cpu");
  else if (devtype == DPL_DEVICE_CUDA) snprintf(buf, n, "cuda:%d", (int)devindex);
  else snprintf(buf, n, "device(type=%d, index=%d)", (int)devtype, (int)devindex);
  return buf;
}

const char *dpl_shape_str(int32_t ndim, const int64_t *shape, char *buf, size_t n)
{
  size_t used = 0;
  used += (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < ndim && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (used < n) snprintf(buf + used, n - used, "]");
  return buf;
}

/* the product of the sizes; INT64_MAX when it overflows (and no size is 0) */
int64_t dpl_shape_numel(int32_t ndim, const int64_t *shape)
{
  int64_t n = 1;
  int over = 0;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == 0) return 0;
    if (!over && __builtin_mul_overflow(n, shape[i], &n)) over = 1;
  }
  return over ? INT64_MAX : n;
}

int32_t dpl_promote(int32_t a, int32_t b)
{
  if (a == b) return a;
  static const int rank[8] = {6, 7, 5, 5, 3, 4, 2, 1}; /* f32 f64 f16 bf16 i32 i64 u8 bool */
  if ((a == DPL_FLOAT16 && b == DPL_BFLOAT16) || (a == DPL_BFLOAT16 && b == DPL_FLOAT16)) return DPL_FLOAT32;
  return rank[a] >= rank[b] ? a : b;
}

/* ---- device validation for allocation ---- */
/* *real = 1 for a real GPU (device memory through the backend) */
static int check_device(const char *op, int32_t devtype, int32_t devindex, int *real)
{
  *real = 0;
  if (devtype == DPL_DEVICE_CPU) {
    if (devindex != 0) return dpl_errorf(DPL_EDEVICE, "%s: cpu has one device (index 0), got cpu:%d", op, (int)devindex);
    return DPL_OK;
  }
  if (devtype != DPL_DEVICE_CUDA)
    return dpl_errorf(DPL_EINVAL, "%s: unknown device type %d (expected 0 = cpu or 1 = cuda)", op, (int)devtype);
  dpl_device_info info;
  char saved[256];
  snprintf(saved, sizeof saved, "%s", dpl_last_error());
  int st = dpl_device_get_info(DPL_DEVICE_CUDA, devindex, &info);
  if (st != DPL_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", dpl_last_error());
    if (st == DPL_EDEVICE) {
      int32_t n = 0;
      dpl_device_count(DPL_DEVICE_CUDA, &n);
      if (n == 0)
        return dpl_errorf(DPL_EDEVICE, "%s: cannot allocate on cuda:%d: no CUDA device (%s)", op, (int)devindex,
                          dpl_cuda_unavailable_reason());
      return dpl_errorf(DPL_EDEVICE, "%s: cannot allocate on cuda:%d: only %d CUDA device%s (cuda:0..cuda:%d)", op,
                        (int)devindex, (int)n, n == 1 ? "" : "s", (int)n - 1);
    }
    return dpl_errorf(st, "%s: %s", op, why);
  }
  (void)saved;
  if (!info.simulated) {
    if (!dpl_backend_get())
      return dpl_errorf(DPL_EDEVICE, "%s: cannot allocate on cuda:%d: %s", op, (int)devindex,
                        dpl_cuda_unavailable_reason());
    *real = 1;
    return DPL_OK;
  }
  if (info.busy)
    return dpl_errorf(DPL_EDEVICE,
                      "%s: cuda:%d is busy or unavailable (simulated GPU marked busy by DPL_VIRTUAL_GPUS_BUSY); "
                      "allocation refused",
                      op, (int)devindex);
  return DPL_OK;
}

/* ---- storage ---- */
static void storage_release(dpl_storage *s)
{
  if (!s) return;
  /* the only reference (nobody else can add one): no locked decrement needed */
  if (atomic_load_explicit(&s->refcount, memory_order_acquire) != 1 && atomic_fetch_sub(&s->refcount, 1) != 1) return;
  if (s->kind == DPL_STORAGE_SUB) {
    dpl_storage *parent = s->block;
    free(s);
    storage_release(parent);
    return;
  }
  count_free(s->devtype, s->devindex, s->nbytes);
  if (s->kind == DPL_STORAGE_DEVICE) {
    const dpl_backend *b = dpl_backend_get();
    if (b) b->release(s->devindex, s->data, s->nbytes);
    free(s);
  } else if (s->kind == DPL_STORAGE_MMAP) {
    munmap(s->block, s->map_len);
    free(s);
  } else if (s->kind == DPL_STORAGE_MALLOC) {
    free(s->block);
    free(s);
  } else {
    block_free(s->block, s->map_len, s->stamp); /* the header and the data */
  }
}

#define HDR_S ((sizeof(dpl_storage) + 63) & ~(size_t)63)

static void set_contig_strides(dpl_tensor *t)
{
  int64_t st = 1;
  for (int i = t->_ndim - 1; i >= 0; i--) {
    t->_stride[i] = st;
    st *= t->_shape[i];
  }
}

void dpl_update_contig(dpl_tensor *t)
{
  int64_t st = 1;
  int c = 1;
  for (int i = t->_ndim - 1; i >= 0; i--) {
    if (t->_shape[i] != 1 && t->_stride[i] != st) { c = 0; break; }
    st *= t->_shape[i];
  }
  if (t->_numel == 0) c = 1;
  t->_flags = c ? (t->_flags | DPL_CONTIG) : (t->_flags & ~DPL_CONTIG);
}

/* a tensor in device memory: the storage header on the host, the data from the backend */
static int new_device(const char *op, int32_t dtype, int32_t ndim, const int64_t *shape, int64_t numel, int64_t nbytes,
                      int32_t devindex, dpl_tensor **out)
{
  const dpl_backend *b = dpl_backend_get();
  dpl_storage *s = malloc(sizeof *s);
  dpl_tensor *t = handle_new();
  if (!s || !t) {
    free(s);
    if (t) pool_put(0, t);
    return dpl_errorf(DPL_ENOMEM, "%s: out of host memory", op);
  }
  void *data = NULL;
  int st = b->alloc(devindex, nbytes, &data);
  if (st != DPL_OK) {
    free(s);
    pool_put(0, t);
    char msg[600], bs[160];
    snprintf(msg, sizeof msg, "%s", dpl_last_error());
    return dpl_errorf(st, "%s: allocating %lld bytes for a %s %s tensor on cuda:%d: %s", op, (long long)nbytes,
                      dpl_dtype_name(dtype), dpl_shape_str(ndim, shape, bs, sizeof bs), (int)devindex, msg);
  }
  atomic_init(&s->refcount, 1);
  s->serial = atomic_fetch_add(&storage_serials, 1);
  s->data = data;
  s->nbytes = nbytes;
  s->devtype = DPL_DEVICE_CUDA;
  s->devindex = devindex;
  s->kind = DPL_STORAGE_DEVICE;
  s->block = NULL;
  s->map_len = 0;
  memset(t, 0, sizeof *t);
  t->_dtype = dtype;
  t->_ndim = ndim;
  t->_devtype = DPL_DEVICE_CUDA;
  t->_devindex = devindex;
  t->_numel = numel;
  for (int i = 0; i < ndim; i++) t->_shape[i] = shape[i];
  set_contig_strides(t);
  t->_data = data;
  t->_storage = s;
  t->_flags = DPL_CONTIG | DPL_DEVMEM;
  count_alloc(DPL_DEVICE_CUDA, devindex, nbytes);
  *out = t;
  return DPL_OK;
}

int dpl_new_on(const char *op, int32_t dtype, int32_t ndim, const int64_t *shape, int32_t devtype, int32_t devindex,
               dpl_tensor **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", op);
  *out = NULL;
  if (!dpl_dtype_valid(dtype)) return dpl_errorf(DPL_EINVAL, "%s: unknown dtype id %d (expected 0..7)", op, (int)dtype);
  if (ndim < 0 || ndim > DPL_MAX_DIMS)
    return dpl_errorf(DPL_EINVAL, "%s: expected 0..%d dims, got %d", op, DPL_MAX_DIMS, (int)ndim);
  if (ndim > 0 && !shape) return dpl_errorf(DPL_EINVAL, "%s: shape is NULL", op);
  int64_t numel = 1, nonzero = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) {
      char b[160];
      return dpl_errorf(DPL_EINVAL, "%s: sizes must be non-negative, got %s", op, dpl_shape_str(ndim, shape, b, sizeof b));
    }
    /* (an empty shape's strides are products of its other sizes: they must fit too) */
    if (__builtin_mul_overflow(numel, shape[i], &numel) || numel > (INT64_C(1) << 50)
        || (shape[i] > 0 && __builtin_mul_overflow(nonzero, shape[i], &nonzero))) {
      char b[160];
      return dpl_errorf(DPL_ENOMEM, "%s: shape %s is too large", op, dpl_shape_str(ndim, shape, b, sizeof b));
    }
  }
  int real = 0;
  if (devtype != DPL_DEVICE_CPU || devindex != 0) DPL_TRY(check_device(op, devtype, devindex, &real));
  int64_t nbytes = numel * dpl_elsize(dtype);
  if (real) return new_device(op, dtype, ndim, shape, numel, nbytes, devindex, out);
  /* two allocations, small ones from this thread's pools: the handle, and the
   * storage header with the data 64-byte aligned after it (small blocks are
   * 64-byte aligned already; others need room to align) */
  size_t total = HDR_S + (size_t)nbytes;
  if (total > SMALL_MAX) total += 64;
  dpl_tensor *t = handle_new();
  size_t cap = 0;
  int64_t stamp;
  int32_t cold;
  void *block = block_alloc(total, &cap, &stamp, &cold);
  if (!t || !block) {
    if (t) pool_put(0, t);
    if (block) block_free(block, cap, stamp);
    char b[160];
    return dpl_errorf(DPL_ENOMEM, "%s: out of memory allocating %lld bytes for a %s %s tensor", op,
                      (long long)nbytes, dpl_dtype_name(dtype), dpl_shape_str(ndim, shape, b, sizeof b));
  }
  dpl_storage *s = (dpl_storage *)block;
  memset(t, 0, sizeof *t);
  atomic_init(&s->refcount, 1);
  s->serial = atomic_fetch_add(&storage_serials, 1);
  s->data = (char *)(((uintptr_t)block + HDR_S + 63) & ~(uintptr_t)63);
  s->nbytes = nbytes;
  s->devtype = devtype;
  s->devindex = devindex;
  s->kind = DPL_STORAGE_BLOCK;
  s->block = block;
  s->map_len = cap;
  s->stamp = stamp;
  s->cold = cold;
  t->_dtype = dtype;
  t->_ndim = ndim;
  t->_devtype = devtype;
  t->_devindex = devindex;
  t->_numel = numel;
  t->_offset = 0;
  for (int i = 0; i < ndim; i++) t->_shape[i] = shape[i];
  set_contig_strides(t);
  t->_data = s->data;
  t->_storage = s;
  t->_flags = DPL_CONTIG;
  count_alloc(devtype, devindex, nbytes);
  *out = t;
  return DPL_OK;
}

int dpl_new(const char *op, int32_t dtype, int32_t ndim, const int64_t *shape, const dpl_tensor *like, dpl_tensor **out)
{
  if (!like) return dpl_new_on(op, dtype, ndim, shape, DPL_DEVICE_CPU, 0, out);
  return dpl_new_on(op, dtype, ndim, shape, like->_devtype, like->_devindex, out);
}

int dpl_tensor_empty(int32_t dtype, int32_t ndim, const int64_t *shape, int32_t devtype, int32_t devindex,
                     dpl_tensor **out)
{
  return dpl_new_on("empty", dtype, ndim, shape, devtype, devindex, out);
}

/* A storage over memory that must be munmap'ed (safetensors) or freed. */
int dpl_storage_wrap(void *data, int64_t nbytes, int kind, void *block, size_t map_len, dpl_storage **out)
{
  dpl_storage *s = malloc(sizeof *s);
  if (!s) return dpl_errorf(DPL_ENOMEM, "storage: out of memory");
  atomic_init(&s->refcount, 1);
  s->serial = atomic_fetch_add(&storage_serials, 1);
  s->data = data;
  s->nbytes = nbytes;
  s->devtype = DPL_DEVICE_CPU;
  s->devindex = 0;
  s->kind = kind;
  s->block = block;
  s->map_len = map_len;
  s->stamp = 0;
  s->cold = 1;
  count_alloc(DPL_DEVICE_CPU, 0, nbytes);
  *out = s;
  return DPL_OK;
}
void dpl_storage_retain(dpl_storage *s) { atomic_fetch_add(&s->refcount, 1); }
/* a storage of nbytes at byte off of parent (a tensor loaded from a file gets its own storage,
 * as in PyTorch: its storage_offset is 0 and as_strided cannot reach its neighbours) */
int dpl_storage_sub(dpl_storage *parent, int64_t off, int64_t nbytes, dpl_storage **out)
{
  if (!parent || off < 0 || nbytes < 0 || off + nbytes > parent->nbytes)
    return dpl_errorf(DPL_EINVAL, "storage: sub-range [%lld, %lld) outside the parent's %lld bytes", (long long)off,
                      (long long)(off + nbytes), parent ? (long long)parent->nbytes : 0LL);
  dpl_storage *s = malloc(sizeof *s);
  if (!s) return dpl_errorf(DPL_ENOMEM, "storage: out of memory");
  *s = (dpl_storage){.data = parent->data + off, .nbytes = nbytes, .devtype = parent->devtype,
                     .devindex = parent->devindex, .kind = DPL_STORAGE_SUB, .block = parent, .cold = 1};
  atomic_init(&s->refcount, 1);
  s->serial = atomic_fetch_add(&storage_serials, 1);
  dpl_storage_retain(parent);
  *out = s;
  return DPL_OK;
}
void dpl_storage_drop(dpl_storage *s) { storage_release(s); }

void dpl_tensor_release(dpl_tensor *t)
{
  if (!t) return;
  storage_release(t->_storage);
  pool_put(0, t);
}

void dpl_release_n(int n, dpl_tensor *const *t)
{
  for (int k = 0; k < n; k++) dpl_tensor_release(t[k]);
}

int dpl_hand_over(int st, int n, dpl_tensor *const *res, dpl_tensor **const *out)
{
  for (int k = 0; k < n; k++) {
    if (st == DPL_OK && out[k]) *out[k] = res[k];
    else dpl_tensor_release(res[k]);
  }
  return st;
}

int dpl_tensor_free_data(dpl_tensor *t)
{
  if (!t) return DPL_OK;
  dpl_storage *s = t->_storage;
  if (s && atomic_load_explicit(&s->refcount, memory_order_acquire) == 1) gc_credit(s->nbytes);
  storage_release(s);
  memset(t, 0, sizeof *t); /* a freed handle: every op on it fails with a clear message */
  return DPL_OK;
}

int64_t dpl_storage_serials(void) { return atomic_load(&storage_serials); }
int32_t dpl_storage_newer(const dpl_tensor *t, int64_t serial) { return t && t->_storage && t->_storage->serial >= serial; }
int32_t dpl_storage_unique(const dpl_tensor *t)
{
  return t && t->_storage && atomic_load_explicit(&t->_storage->refcount, memory_order_acquire) == 1;
}
int64_t dpl_storage_refcount(const dpl_tensor *t) { return t && t->_storage ? atomic_load(&t->_storage->refcount) : 0; }
int64_t dpl_storage_nbytes(const dpl_tensor *t) { return t && t->_storage ? t->_storage->nbytes : 0; }

int dpl_check_handle(const char *op, const char *name, const dpl_tensor *t)
{
  if (!t) {
    /* from Lua, a nil self is nearly always t.op(...) written for t:op(...) */
    if (name && strcmp(name, "self") == 0)
      return dpl_errorf(DPL_EINVAL, "%s: self is NULL/nil (expected a tensor; a method called with '.' instead of ':'? "
                        "write t:%s(...))", op, op);
    return dpl_errorf(DPL_EINVAL, "%s: %s is NULL (expected a tensor)", op, name);
  }
  if (!t->_storage) return dpl_errorf(DPL_EINVAL, "%s: %s was freed with :free()", op, name);
  if (!dpl_dtype_valid(t->_dtype) || t->_ndim < 0 || t->_ndim > DPL_MAX_DIMS)
    return dpl_errorf(DPL_EINVAL, "%s: %s is not a valid tensor", op, name);
  return DPL_OK;
}

int dpl_check_tensor(const char *op, const char *name, const dpl_tensor *t)
{
  DPL_TRY(dpl_check_handle(op, name, t));
  if (t->_flags & DPL_DEVMEM)
    return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda (%s is on cuda:%d; move it with :to(\"cpu\"))", op,
                      name, (int)t->_devindex);
  return DPL_OK;
}

int dpl_check_same_device(const char *op, const dpl_tensor *a, const dpl_tensor *b)
{
  if (a->_devtype == b->_devtype && a->_devindex == b->_devindex) return DPL_OK;
  char da[32], db[32];
  return dpl_errorf(DPL_EDEVICE, "%s: expected all tensors on the same device, got %s and %s", op,
                    dpl_device_str(a->_devtype, a->_devindex, da, sizeof da),
                    dpl_device_str(b->_devtype, b->_devindex, db, sizeof db));
}

/* ---- views ---- */
int dpl_make_view(const dpl_tensor *t, int32_t ndim, const int64_t *shape, const int64_t *stride, int64_t offset,
                  dpl_tensor **out)
{
  /* every view's numel fits (callers check their sizes; this is the last line of defence) */
  int64_t numel = dpl_shape_numel(ndim, shape);
  if (numel > (INT64_C(1) << 50)) {
    char b[160];
    return dpl_errorf(DPL_EINVAL, "view: shape %s is too large (more than 2^50 elements)",
                      dpl_shape_str(ndim, shape, b, sizeof b));
  }
  dpl_tensor *v = handle_new();
  if (!v) return dpl_errorf(DPL_ENOMEM, "view: out of memory");
  memset(v, 0, sizeof *v);
  v->_dtype = t->_dtype;
  v->_ndim = ndim;
  v->_devtype = t->_devtype;
  v->_devindex = t->_devindex;
  v->_numel = numel;
  v->_offset = offset;
  for (int i = 0; i < ndim; i++) { v->_shape[i] = shape[i]; v->_stride[i] = stride[i]; }
  v->_storage = t->_storage;
  v->_data = t->_storage->data + offset * dpl_elsize(t->_dtype);
  v->_flags = t->_flags & DPL_DEVMEM;
  dpl_update_contig(v);
  atomic_fetch_add(&t->_storage->refcount, 1);
  *out = v;
  return DPL_OK;
}

#define CHECK_OUT(op) do { if (!out) return dpl_errorf(DPL_EINVAL, "%s: out is NULL", op); *out = NULL; } while (0)

int dpl_tensor_alias(const dpl_tensor *t, dpl_tensor **out)
{
  CHECK_OUT("alias");
  DPL_TRY(dpl_check_handle("alias", "tensor", t));
  return dpl_make_view(t, t->_ndim, t->_shape, t->_stride, t->_offset, out);
}

static int check_dim(const char *op, const dpl_tensor *t, int32_t dim, int extra)
{
  int n = t->_ndim + extra;
  if (dim < 0 || dim >= n) {
    if (n == 0) return dpl_errorf(DPL_EINVAL, "%s: dim %d out of range: the tensor has no dims (0-d)", op, (int)dim);
    return dpl_errorf(DPL_EINVAL, "%s: dim %d out of range (expected 0..%d for a %d-d tensor)", op, (int)dim, n - 1,
                      (int)t->_ndim);
  }
  return DPL_OK;
}

/* infers one -1 entry; checks the element count */
static int infer_shape(const char *op, const dpl_tensor *t, int32_t ndim, const int64_t *shape, int64_t *res)
{
  if (ndim < 0 || ndim > DPL_MAX_DIMS)
    return dpl_errorf(DPL_EINVAL, "%s: expected 0..%d dims, got %d", op, DPL_MAX_DIMS, (int)ndim);
  if (ndim > 0 && !shape) return dpl_errorf(DPL_EINVAL, "%s: shape is NULL", op);
  int infer = -1;
  int64_t known = 1, nonzero = 1;
  char b1[160], b2[160];
  for (int i = 0; i < ndim; i++) {
    /* (the strides of the view are products of sizes: even with a 0 among them, the others'
     * product must fit) */
    if (shape[i] > 0 && __builtin_mul_overflow(nonzero, shape[i], &nonzero))
      return dpl_errorf(DPL_EINVAL, "%s: shape %s is too large", op, dpl_shape_str(ndim, shape, b1, sizeof b1));
  }
  for (int i = 0; i < ndim; i++) {
    res[i] = shape[i];
    if (shape[i] == -1) {
      if (infer >= 0) return dpl_errorf(DPL_EINVAL, "%s: only one size can be -1, got %s", op, dpl_shape_str(ndim, shape, b1, sizeof b1));
      infer = i;
    } else if (shape[i] < 0) {
      return dpl_errorf(DPL_EINVAL, "%s: invalid size %lld in %s", op, (long long)shape[i], dpl_shape_str(ndim, shape, b1, sizeof b1));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || t->_numel % known != 0)
      return dpl_errorf(DPL_EINVAL, "%s: shape %s is invalid for a tensor of %lld elements (shape %s)", op,
                        dpl_shape_str(ndim, shape, b1, sizeof b1), (long long)t->_numel,
                        dpl_shape_str(t->_ndim, t->_shape, b2, sizeof b2));
    res[infer] = t->_numel / known;
    known *= res[infer];
  }
  if (known != t->_numel)
    return dpl_errorf(DPL_EINVAL, "%s: shape %s is invalid for a tensor of %lld elements (shape %s)", op,
                      dpl_shape_str(ndim, shape, b1, sizeof b1), (long long)t->_numel,
                      dpl_shape_str(t->_ndim, t->_shape, b2, sizeof b2));
  return DPL_OK;
}

/* Strides for viewing t as newshape without copying (PyTorch's computeStride); 0 when impossible. */
static int view_strides(const dpl_tensor *t, int32_t nd, const int64_t *ns, int64_t *nst)
{
  if (t->_numel == 0 || dpl_is_contig(t)) {
    int64_t st = 1;
    for (int i = nd - 1; i >= 0; i--) { nst[i] = st; st *= ns[i] ? ns[i] : 1; }
    return 1;
  }
  int view_d = nd - 1;
  int64_t base = t->_stride[t->_ndim - 1];
  int64_t tensor_numel = 1, view_numel = 1;
  for (int td = t->_ndim - 1; td >= 0; td--) {
    tensor_numel *= t->_shape[td];
    if (td == 0 || (t->_shape[td - 1] != 1 && t->_stride[td - 1] != tensor_numel * base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || ns[view_d] == 1)) {
        nst[view_d] = view_numel * base;
        view_numel *= ns[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return 0;
      if (td > 0) { base = t->_stride[td - 1]; tensor_numel = 1; view_numel = 1; }
    }
  }
  return view_d == -1;
}

int dpl_tensor_view(const dpl_tensor *t, int32_t ndim, const int64_t *shape, dpl_tensor **out)
{
  CHECK_OUT("view");
  DPL_TRY(dpl_check_handle("view", "tensor", t));
  int64_t ns[DPL_MAX_DIMS], nst[DPL_MAX_DIMS];
  DPL_TRY(infer_shape("view", t, ndim, shape, ns));
  if (!view_strides(t, ndim, ns, nst)) {
    char b1[160], b2[160];
    return dpl_errorf(DPL_EINVAL,
                      "view: cannot view a non-contiguous tensor of shape %s as %s; use reshape (copies) or "
                      "contiguous() first",
                      dpl_shape_str(t->_ndim, t->_shape, b1, sizeof b1), dpl_shape_str(ndim, ns, b2, sizeof b2));
  }
  return dpl_make_view(t, ndim, ns, nst, t->_offset, out);
}

int dpl_tensor_reshape(const dpl_tensor *t, int32_t ndim, const int64_t *shape, dpl_tensor **out)
{
  CHECK_OUT("reshape");
  DPL_TRY(dpl_check_handle("reshape", "tensor", t));
  int64_t ns[DPL_MAX_DIMS], nst[DPL_MAX_DIMS];
  DPL_TRY(infer_shape("reshape", t, ndim, shape, ns));
  if (view_strides(t, ndim, ns, nst)) return dpl_make_view(t, ndim, ns, nst, t->_offset, out);
  dpl_tensor *c;
  DPL_TRY(dpl_contig_as("reshape", t, t->_dtype, &c));
  int64_t st = 1;
  for (int i = ndim - 1; i >= 0; i--) { nst[i] = st; st *= ns[i]; }
  int r = dpl_make_view(c, ndim, ns, nst, c->_offset, out);
  dpl_tensor_release(c);
  return r;
}

int dpl_tensor_as_strided(const dpl_tensor *t, int32_t ndim, const int64_t *shape, const int64_t *stride, int64_t offset,
                          dpl_tensor **out)
{
  CHECK_OUT("as_strided");
  DPL_TRY(dpl_check_handle("as_strided", "tensor", t));
  if (ndim < 0 || ndim > DPL_MAX_DIMS)
    return dpl_errorf(DPL_EINVAL, "as_strided: expected 0..%d dims, got %d", DPL_MAX_DIMS, (int)ndim);
  if (ndim > 0 && (!shape || !stride)) return dpl_errorf(DPL_EINVAL, "as_strided: shape or stride is NULL");
  if (offset < 0) return dpl_errorf(DPL_EINVAL, "as_strided: offset must be >= 0, got %lld", (long long)offset);
  int64_t lo = offset, hi = offset, ext;
  int over = 0;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || stride[i] < 0)
      return dpl_errorf(DPL_EINVAL, "as_strided: sizes and strides must be >= 0, got size %lld stride %lld at dim %d",
                        (long long)shape[i], (long long)stride[i], i);
    if (shape[i] > 0 && (__builtin_mul_overflow(shape[i] - 1, stride[i], &ext) || __builtin_add_overflow(hi, ext, &hi)))
      over = 1;
  }
  int64_t numel = dpl_shape_numel(ndim, shape);
  int64_t cap = t->_storage->nbytes / dpl_elsize(t->_dtype);
  if (numel > 0 && over)
    return dpl_errorf(DPL_EINVAL, "as_strided: the view's last element is past 2^63 (sizes and strides too large); "
                      "the storage holds %lld elements", (long long)cap);
  if (numel > 0 && (hi >= cap || lo > hi))
    return dpl_errorf(DPL_EINVAL, "as_strided: the view reaches element %lld but the storage holds %lld elements",
                      (long long)hi, (long long)cap);
  return dpl_make_view(t, ndim, shape, stride, offset, out);
}

int dpl_tensor_transpose(const dpl_tensor *t, int32_t d0, int32_t d1, dpl_tensor **out)
{
  CHECK_OUT("transpose");
  DPL_TRY(dpl_check_handle("transpose", "tensor", t));
  DPL_TRY(check_dim("transpose", t, d0, 0));
  DPL_TRY(check_dim("transpose", t, d1, 0));
  int64_t sh[DPL_MAX_DIMS], st[DPL_MAX_DIMS];
  memcpy(sh, t->_shape, sizeof sh);
  memcpy(st, t->_stride, sizeof st);
  sh[d0] = t->_shape[d1]; sh[d1] = t->_shape[d0];
  st[d0] = t->_stride[d1]; st[d1] = t->_stride[d0];
  return dpl_make_view(t, t->_ndim, sh, st, t->_offset, out);
}

int dpl_tensor_permute(const dpl_tensor *t, int32_t ndim, const int32_t *dims, dpl_tensor **out)
{
  CHECK_OUT("permute");
  DPL_TRY(dpl_check_handle("permute", "tensor", t));
  if (ndim != t->_ndim)
    return dpl_errorf(DPL_EINVAL, "permute: expected %d dims for a %d-d tensor, got %d", (int)t->_ndim, (int)t->_ndim, (int)ndim);
  if (ndim > 0 && !dims) return dpl_errorf(DPL_EINVAL, "permute: dims is NULL");
  int seen[DPL_MAX_DIMS] = {0};
  int64_t sh[DPL_MAX_DIMS], st[DPL_MAX_DIMS];
  for (int i = 0; i < ndim; i++) {
    DPL_TRY(check_dim("permute", t, dims[i], 0));
    if (seen[dims[i]]++) return dpl_errorf(DPL_EINVAL, "permute: dim %d appears twice", (int)dims[i]);
    sh[i] = t->_shape[dims[i]];
    st[i] = t->_stride[dims[i]];
  }
  return dpl_make_view(t, ndim, sh, st, t->_offset, out);
}

int dpl_tensor_narrow(const dpl_tensor *t, int32_t dim, int64_t start, int64_t length, dpl_tensor **out)
{
  CHECK_OUT("narrow");
  DPL_TRY(dpl_check_handle("narrow", "tensor", t));
  DPL_TRY(check_dim("narrow", t, dim, 0));
  int64_t size = t->_shape[dim];
  if (start < 0 || length < 0 || start > size || length > size - start)
    return dpl_errorf(DPL_EINVAL, "narrow: start %lld, length %lld out of range for dim %d of size %lld", (long long)start,
                      (long long)length, (int)dim, (long long)size);
  int64_t sh[DPL_MAX_DIMS];
  memcpy(sh, t->_shape, sizeof sh);
  sh[dim] = length;
  return dpl_make_view(t, t->_ndim, sh, t->_stride, t->_offset + (length ? start * t->_stride[dim] : 0), out);
}

int dpl_tensor_select(const dpl_tensor *t, int32_t dim, int64_t index, dpl_tensor **out)
{
  CHECK_OUT("select");
  DPL_TRY(dpl_check_handle("select", "tensor", t));
  DPL_TRY(check_dim("select", t, dim, 0));
  int64_t size = t->_shape[dim];
  if (index < 0 || index >= size)
    return dpl_errorf(DPL_EINVAL, "select: index %lld out of range for dim %d of size %lld (expected 0..%lld)",
                      (long long)index, (int)dim, (long long)size, (long long)size - 1);
  int64_t sh[DPL_MAX_DIMS], st[DPL_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < t->_ndim; i++)
    if (i != dim) { sh[k] = t->_shape[i]; st[k] = t->_stride[i]; k++; }
  return dpl_make_view(t, t->_ndim - 1, sh, st, t->_offset + index * t->_stride[dim], out);
}

int dpl_tensor_expand(const dpl_tensor *t, int32_t ndim, const int64_t *shape, dpl_tensor **out)
{
  CHECK_OUT("expand");
  DPL_TRY(dpl_check_handle("expand", "tensor", t));
  if (ndim < t->_ndim || ndim > DPL_MAX_DIMS)
    return dpl_errorf(DPL_EINVAL, "expand: expected %d..%d sizes for a %d-d tensor, got %d", (int)t->_ndim, DPL_MAX_DIMS,
                      (int)t->_ndim, (int)ndim);
  if (ndim > 0 && !shape) return dpl_errorf(DPL_EINVAL, "expand: shape is NULL");
  int64_t sh[DPL_MAX_DIMS], st[DPL_MAX_DIMS];
  int lead = ndim - t->_ndim;
  for (int i = 0; i < ndim; i++) {
    int j = i - lead;
    int64_t want = shape[i];
    if (j < 0) {
      if (want < 0) return dpl_errorf(DPL_EINVAL, "expand: -1 is not allowed for a new leading dim (dim %d)", i);
      sh[i] = want; st[i] = 0;
    } else {
      int64_t have = t->_shape[j];
      if (want == -1) want = have;
      if (want == have) { sh[i] = have; st[i] = t->_stride[j]; }
      else if (have == 1 && want >= 0) { sh[i] = want; st[i] = 0; }
      else {
        char b1[160], b2[160];
        return dpl_errorf(DPL_EINVAL, "expand: cannot expand shape %s to %s (dim %d: size %lld is not 1)",
                          dpl_shape_str(t->_ndim, t->_shape, b1, sizeof b1), dpl_shape_str(ndim, shape, b2, sizeof b2),
                          i, (long long)have);
      }
    }
  }
  int64_t numel = dpl_shape_numel(ndim, sh);
  if (numel > (INT64_C(1) << 50)) {
    char b[160];
    return dpl_errorf(DPL_EINVAL, "expand: shape %s is too large (more than 2^50 elements)",
                      dpl_shape_str(ndim, sh, b, sizeof b));
  }
  return dpl_make_view(t, ndim, sh, st, t->_offset, out);
}

int dpl_tensor_squeeze(const dpl_tensor *t, int32_t dim, dpl_tensor **out)
{
  CHECK_OUT("squeeze");
  DPL_TRY(dpl_check_handle("squeeze", "tensor", t));
  if (dim != -1) DPL_TRY(check_dim("squeeze", t, dim, 0));
  int64_t sh[DPL_MAX_DIMS], st[DPL_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < t->_ndim; i++) {
    int drop = t->_shape[i] == 1 && (dim == -1 || dim == i);
    if (!drop) { sh[k] = t->_shape[i]; st[k] = t->_stride[i]; k++; }
  }
  return dpl_make_view(t, k, sh, st, t->_offset, out);
}

int dpl_tensor_unsqueeze(const dpl_tensor *t, int32_t dim, dpl_tensor **out)
{
  CHECK_OUT("unsqueeze");
  DPL_TRY(dpl_check_handle("unsqueeze", "tensor", t));
  if (t->_ndim >= DPL_MAX_DIMS)
    return dpl_errorf(DPL_EINVAL, "unsqueeze: a tensor has at most %d dims", DPL_MAX_DIMS);
  DPL_TRY(check_dim("unsqueeze", t, dim, 1));
  int64_t sh[DPL_MAX_DIMS], st[DPL_MAX_DIMS];
  int k = 0;
  for (int i = 0; i <= t->_ndim; i++) {
    if (i == dim) {
      sh[k] = 1;
      st[k] = i < t->_ndim ? t->_shape[i] * t->_stride[i] : 1;
      k++;
    }
    if (i < t->_ndim) { sh[k] = t->_shape[i]; st[k] = t->_stride[i]; k++; }
  }
  return dpl_make_view(t, k, sh, st, t->_offset, out);
}

int dpl_tensor_contiguous(const dpl_tensor *t, dpl_tensor **out)
{
  CHECK_OUT("contiguous");
  DPL_TRY(dpl_check_handle("contiguous", "tensor", t));
  return dpl_contig_as("contiguous", t, t->_dtype, out);
}

/* ---- broadcasting ---- */
int dpl_broadcast_shapes(const char *op, int32_t na, const int64_t *sa, int32_t nb, const int64_t *sb, int32_t *nout,
                         int64_t *out)
{
  int n = na > nb ? na : nb;
  for (int i = 0; i < n; i++) {
    int ia = na - n + i, ib = nb - n + i;
    int64_t x = ia >= 0 ? sa[ia] : 1, y = ib >= 0 ? sb[ib] : 1;
    if (x == y || y == 1) out[i] = x;
    else if (x == 1) out[i] = y;
    else {
      char b1[160], b2[160];
      return dpl_errorf(DPL_EINVAL, "%s: shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)", op,
                        dpl_shape_str(na, sa, b1, sizeof b1), dpl_shape_str(nb, sb, b2, sizeof b2), i, (long long)x,
                        (long long)y);
    }
  }
  *nout = n;
  return DPL_OK;
}

int dpl_broadcast_strides(const dpl_tensor *t, int32_t ndim, const int64_t *shape, int64_t *stride)
{
  if (t->_ndim > ndim) return -1;
  int lead = ndim - t->_ndim;
  for (int i = 0; i < ndim; i++) {
    int j = i - lead;
    if (j < 0) stride[i] = 0;
    else if (t->_shape[j] == shape[i]) stride[i] = t->_shape[j] == 1 ? 0 : t->_stride[j];
    else if (t->_shape[j] == 1) stride[i] = 0;
    else return -1;
  }
  return 0;
}
