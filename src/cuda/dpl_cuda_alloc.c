/* dpl_cuda_alloc.c: the plugin's caching, stream-ordered device allocator.
 * Requests are rounded to size classes (powers of two from 512 bytes to 1 MiB,
 * then multiples of 2 MiB); a freed block goes to its class's free list and is
 * handed to the next request of that class without cudaFree/cudaMalloc. Every
 * kernel of a device runs on its one compute stream (transfers wait on it with
 * events), so a block freed on the host can be reused at once: later work is
 * queued behind the work that used it. cudaFree happens only in empty_cache
 * and when cudaMalloc runs out of memory (the cache is emptied and the
 * allocation retried). Counters for memory_stats. DPL_CUDA_POISON=1 fills
 * every allocation with 0xff bytes (NaN, -1) so that unwritten outputs show. */
#include "dpl_cuda_internal.h"
#include <stdio.h>
#include <stdlib.h>

typedef struct bucket {
  size_t size;
  void **ptrs;
  int n, cap;
} bucket;

typedef struct dev_alloc {
  bucket *b;
  int nb, capb;
  int64_t allocated, reserved, peak_allocated, peak_reserved;
  int64_t allocations, hits, mallocs, frees;
} dev_alloc;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static dev_alloc devs[DPL_CU_MAX_DEV];

static size_t round_size(int64_t n)
{
  size_t s = (size_t)n;
  if (s <= 512) return 512;
  if (s <= ((size_t)1 << 20)) {
    size_t p = 512;
    while (p < s) p <<= 1;
    return p;
  }
  size_t unit = (size_t)2 << 20;
  return (s + unit - 1) / unit * unit;
}

/* the bucket of size (created when missing; NULL when out of host memory); mu held */
static bucket *bucket_for(dev_alloc *d, size_t size, int create)
{
  for (int i = 0; i < d->nb; i++)
    if (d->b[i].size == size) return &d->b[i];
  if (!create) return NULL;
  if (d->nb == d->capb) {
    int cap = d->capb ? d->capb * 2 : 32;
    bucket *nb = realloc(d->b, (size_t)cap * sizeof *nb);
    if (!nb) return NULL;
    d->b = nb;
    d->capb = cap;
  }
  bucket *b = &d->b[d->nb++];
  memset(b, 0, sizeof *b);
  b->size = size;
  return b;
}

/* cudaFree every cached block of device dev; mu held. Returns the bytes freed. */
static int64_t drop_cache(int32_t dev)
{
  dev_alloc *d = &devs[dev];
  int64_t freed = 0;
  cudaSetDevice(dev);
  for (int i = 0; i < d->nb; i++) {
    bucket *b = &d->b[i];
    for (int j = 0; j < b->n; j++) {
      cudaFree(b->ptrs[j]); /* waits for the device; errors here leave nothing to recover */
      freed += (int64_t)b->size;
      d->frees++;
    }
    b->n = 0;
  }
  d->reserved -= freed;
  return freed;
}

static int poison(void)
{
  static int v = -1;
  if (v < 0) {
    const char *e = getenv("DPL_CUDA_POISON");
    v = e && *e && strcmp(e, "0") != 0;
  }
  return v;
}

int dpl_cu_alloc(int32_t dev, int64_t nbytes, void **ptr)
{
  *ptr = NULL;
  if (nbytes <= 0) return DPL_OK;
  dpl_cu_dev *dd = dpl_cu_device(dev, "cuda allocator");
  if (!dd) return DPL_EDEVICE;
  size_t size = round_size(nbytes);
  dev_alloc *d = &devs[dev];
  pthread_mutex_lock(&mu);
  d->allocations++;
  bucket *b = bucket_for(d, size, 0);
  if (b && b->n > 0) {
    *ptr = b->ptrs[--b->n];
    d->hits++;
  } else {
    cudaError_t e = cudaMalloc(ptr, size);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      drop_cache(dev);
      e = cudaMalloc(ptr, size);
    }
    if (e != cudaSuccess) {
      int64_t al = d->allocated, rs = d->reserved;
      pthread_mutex_unlock(&mu);
      *ptr = NULL;
      cudaGetLastError();
      return dpl_errorf(e == cudaErrorMemoryAllocation ? DPL_ENOMEM : DPL_EDEVICE,
                        "cudaMalloc(%zu bytes) on cuda:%d: %s (%s); %lld bytes in tensors, %lld reserved", size,
                        (int)dev, cudaGetErrorString(e), cudaGetErrorName(e), (long long)al, (long long)rs);
    }
    d->mallocs++;
    d->reserved += (int64_t)size;
    if (d->reserved > d->peak_reserved) d->peak_reserved = d->reserved;
  }
  d->allocated += (int64_t)size;
  if (d->allocated > d->peak_allocated) d->peak_allocated = d->allocated;
  pthread_mutex_unlock(&mu);
  if (poison()) {
    cudaError_t e = cudaMemsetAsync(*ptr, 0xff, size, dd->compute);
    if (e != cudaSuccess) {
      dpl_cu_release(dev, *ptr, nbytes);
      *ptr = NULL;
      return dpl_cu_fail(e, "cudaMemsetAsync (DPL_CUDA_POISON)", dev);
    }
  }
  return DPL_OK;
}

void dpl_cu_release(int32_t dev, void *ptr, int64_t nbytes)
{
  if (!ptr || dev < 0 || dev >= DPL_CU_MAX_DEV) return;
  size_t size = round_size(nbytes);
  dev_alloc *d = &devs[dev];
  pthread_mutex_lock(&mu);
  d->allocated -= (int64_t)size;
  bucket *b = bucket_for(d, size, 1);
  if (b && b->n == b->cap) {
    int cap = b->cap ? b->cap * 2 : 8;
    void **np = realloc(b->ptrs, (size_t)cap * sizeof *np);
    if (np) { b->ptrs = np; b->cap = cap; }
  }
  if (b && b->n < b->cap) {
    b->ptrs[b->n++] = ptr;
  } else { /* out of host memory for the list: give the block back */
    cudaSetDevice(dev);
    cudaFree(ptr);
    d->reserved -= (int64_t)size;
    d->frees++;
  }
  pthread_mutex_unlock(&mu);
}

int dpl_cu_scratch(int32_t dev, int64_t nbytes, void **ptr) { return dpl_cu_alloc(dev, nbytes, ptr); }
void dpl_cu_scratch_free(int32_t dev, void *ptr, int64_t nbytes) { dpl_cu_release(dev, ptr, nbytes); }

int dpl_cu_empty_cache(int32_t dev, int64_t *freed)
{
  int64_t n = 0;
  if (dev >= DPL_CU_MAX_DEV) return dpl_errorf(DPL_EDEVICE, "cuda.empty_cache: no device cuda:%d", (int)dev);
  pthread_mutex_lock(&mu);
  for (int i = 0; i < DPL_CU_MAX_DEV; i++)
    if ((dev < 0 || i == dev) && devs[i].nb > 0) n += drop_cache(i);
  pthread_mutex_unlock(&mu);
  if (freed) *freed = n;
  return DPL_OK;
}

int dpl_cu_memory_stats(int32_t dev, dpl_cuda_mem_stats *out)
{
  if (dev < 0 || dev >= DPL_CU_MAX_DEV) return dpl_errorf(DPL_EDEVICE, "cuda.memory_stats: no device cuda:%d", (int)dev);
  pthread_mutex_lock(&mu);
  const dev_alloc *d = &devs[dev];
  out->allocated_bytes = d->allocated;
  out->reserved_bytes = d->reserved;
  out->peak_allocated_bytes = d->peak_allocated;
  out->peak_reserved_bytes = d->peak_reserved;
  out->allocations = d->allocations;
  out->cache_hits = d->hits;
  out->device_mallocs = d->mallocs;
  out->device_frees = d->frees;
  pthread_mutex_unlock(&mu);
  return DPL_OK;
}
