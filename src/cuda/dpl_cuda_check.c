/* dpl_cuda_check.c: the range checks of ops that take indices (class targets
 * of cross_entropy/nll_loss, embedding, index_select/index_add_/gather/
 * scatter_add_, max_pool2d backward), without making the host wait for the
 * GPU. Their kernels leave the smallest offending position in a device flag;
 * a one-thread kernel puts the offending index beside it; the pair is copied
 * on the compute stream into a pinned slot of a per-device ring and an event
 * is recorded after the copy. The host reads a slot only after its event has
 * completed: when a later check needs slots (a query, no waiting; the oldest
 * is waited for when all DPL_CU_CHECKS are pending) and at every call that
 * waits for the GPU anyway (dpl_cu_check_report: device -> host copies,
 * synchronize, empty_cache), which raises the first failure found as its
 * op's error, in the CPU's words plus a note that it is reported late.
 * DPL_CUDA_SYNC_CHECKS=1 or CUDA_LAUNCH_BLOCKING=1: each check waits at its
 * op, which raises the CPU's message itself. Nothing is retained: the flag
 * and the indices go back to the (stream-ordered) cache after submission. */
#include "dpl_cuda_internal.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

static int env_on(const char *name)
{
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

void dpl_cu_check_init(dpl_cu_dev *d)
{
  pthread_mutex_init(&d->chk_mu, NULL);
  d->chk_sync = env_on("DPL_CUDA_SYNC_CHECKS") || env_on("CUDA_LAUNCH_BLOCKING");
  d->chk_status = DPL_OK;
}

/* the pinned slots and their events, at the device's first check */
static int ensure_slots(dpl_cu_dev *d, int32_t dev)
{
  if (d->chk_host) return DPL_OK;
  for (int i = 0; i < DPL_CU_CHECKS; i++)
    if (!d->chk_ev[i]) DPL_CU(cudaEventCreateWithFlags(&d->chk_ev[i], cudaEventDisableTiming), dev);
  void *p = NULL;
  DPL_CU(cudaHostAlloc(&p, sizeof(unsigned long long) * 2 * DPL_CU_CHECKS, cudaHostAllocDefault), dev);
  d->chk_host = p;
  return DPL_OK;
}

/* the CPU's message for a failed check (Lua rewrites the 0-based ones 1-based) */
static void describe(const dpl_cu_check *c, unsigned long long pos, long long v, char *buf, size_t n)
{
  switch (c->kind) {
  case DPL_CU_CHK_TARGET:
    snprintf(buf, n, "%s: target %lld of sample %lld is out of range: expected a class index in [0, %lld) (0-based)",
             c->name, v, (long long)pos, (long long)c->limit);
    break;
  case DPL_CU_CHK_POOL:
    snprintf(buf, n, "%s: index %lld out of range for a %lld-element plane", c->name, v, (long long)c->limit);
    break;
  default:
    snprintf(buf, n, "%s: index %lld is out of range for dim %d of size %lld (expected 0..%lld, 0-based)", c->name, v,
             (int)c->dim, (long long)c->limit, (long long)c->limit - 1);
    break;
  }
}

/* Reads the finished checks, oldest first, waiting for the first `wait` of
 * them and querying the others (stops at the first unfinished one). A failure
 * becomes the device's pending error, or counts as one more. */
static int resolve_locked(dpl_cu_dev *d, int32_t dev, int wait)
{
  while (d->chk_n > 0) {
    int i = d->chk_head;
    cudaError_t e = wait > 0 ? cudaEventSynchronize(d->chk_ev[i]) : cudaEventQuery(d->chk_ev[i]);
    if (e == cudaErrorNotReady) {
      cudaGetLastError(); /* not an error: the GPU is behind */
      return DPL_OK;
    }
    if (e != cudaSuccess)
      return dpl_cu_fail(e, wait > 0 ? "cudaEventSynchronize (index check)" : "cudaEventQuery (index check)", dev);
    wait--;
    unsigned long long pos = d->chk_host[2 * i], val = d->chk_host[2 * i + 1];
    d->chk_head = (i + 1) % DPL_CU_CHECKS;
    d->chk_n--;
    if (pos == ~0ULL) continue;
    if (d->chk_status != DPL_OK) {
      d->chk_more++;
      continue;
    }
    describe(&d->chk[i], pos, (long long)val, d->chk_msg, sizeof d->chk_msg);
    d->chk_status = DPL_EINVAL;
    d->chk_more = 0;
  }
  return DPL_OK;
}

/* the pending failure as the error of this call (cleared: reported once) */
static int take_failure_locked(dpl_cu_dev *d, int32_t dev, int late)
{
  int st = d->chk_status;
  if (st == DPL_OK) return DPL_OK;
  d->chk_status = DPL_OK;
  if (!late) return dpl_errorf(st, "%s", d->chk_msg);
  char more[96] = "";
  if (d->chk_more > 0)
    snprintf(more, sizeof more, "; %lld later index check%s on cuda:%d failed too", d->chk_more,
             d->chk_more == 1 ? "" : "s", (int)dev);
  return dpl_errorf(st,
                    "%s [found by an index check on cuda:%d and reported at this later call: GPU ops run ahead of the "
                    "host, so their index checks are reported at the next call that waits for the GPU (item, "
                    ":to('cpu'), dpl.cuda.synchronize, ...); set DPL_CUDA_SYNC_CHECKS=1 (or CUDA_LAUNCH_BLOCKING=1) "
                    "to raise them at the op%s]",
                    d->chk_msg, (int)dev, more);
}

int dpl_cu_check_submit(int32_t dev, dpl_cu_dev *d, void *flag, const dpl_tensor *ix, const char *name, int32_t kind,
                        int64_t limit, int32_t dim)
{
  dpl_cu_check info = {.kind = kind, .dim = dim, .limit = limit};
  snprintf(info.name, sizeof info.name, "%s", name);
  DPL_CU_LAUNCH(dpl_cu_bad_value(flag, ix->_data, d->compute), "index check kernel", dev);
  pthread_mutex_lock(&d->chk_mu);
  int st = ensure_slots(d, dev);
  if (st == DPL_OK) st = resolve_locked(d, dev, d->chk_n == DPL_CU_CHECKS ? 1 : 0);
  if (st == DPL_OK) {
    int i = (d->chk_head + d->chk_n) % DPL_CU_CHECKS;
    cudaError_t e = cudaMemcpyAsync(d->chk_host + 2 * i, flag, 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                    d->compute);
    if (e == cudaSuccess) e = cudaEventRecord(d->chk_ev[i], d->compute);
    if (e != cudaSuccess) st = dpl_cu_fail(e, "cudaMemcpyAsync (index check)", dev);
    else {
      d->chk[i] = info;
      d->chk_n++;
    }
  }
  if (st == DPL_OK && d->chk_sync) { /* the op's own error, now */
    st = resolve_locked(d, dev, INT_MAX);
    if (st == DPL_OK) st = take_failure_locked(d, dev, 0);
  }
  pthread_mutex_unlock(&d->chk_mu);
  return st;
}

int dpl_cu_check_report(int32_t dev)
{
  dpl_cu_dev *d = dpl_cu_device_ready(dev);
  if (!d) return DPL_OK;
  pthread_mutex_lock(&d->chk_mu);
  int st = DPL_OK;
  if (d->chk_n > 0) {
    st = resolve_locked(d, dev, 0); /* callers waited for the GPU already: normally all finished */
    if (st == DPL_OK && d->chk_n > 0) st = resolve_locked(d, dev, INT_MAX);
  }
  if (st == DPL_OK) st = take_failure_locked(d, dev, 1);
  pthread_mutex_unlock(&d->chk_mu);
  return st;
}
