/* dpl_cuda_copy.c: moving data for the backend's COPY, FILL and RNG ops:
 * host -> device and device -> host through two pinned staging buffers on the
 * device's copy stream (ordered against the compute stream with events, so an
 * upload returns before the transfer ends), peer copies between GPUs, and
 * device -> device copies with broadcasting and dtype conversion in a kernel.
 * A device -> host copy reports the index checks that failed before it. */
#include "dpl_cuda_internal.h"
#include <stdio.h>

static int ensure_stage(dpl_cu_dev *d, int32_t dev)
{
  for (int k = 0; k < 2; k++)
    if (!d->stage[k]) DPL_CU(cudaHostAlloc(&d->stage[k], DPL_CU_STAGE_BYTES, cudaHostAllocDefault), dev);
  return DPL_OK;
}

/* n bytes host -> device; returns when h may be reused (the transfer may still run).
 * Uploads take consecutive pieces of the staging buffers, as a ring: the host waits
 * only on moving to the other buffer, for the uploads made from it before (its
 * stage_free event is recorded after each), i.e. when 32 MiB of uploads are still
 * queued. (Taking each upload from the start of stage[0] made the second upload of a
 * step, a batch's labels after its inputs, wait for the first, which the copy stream
 * queues behind all the compute work: a drain of the GPU's queue at every step.) */
static int h2d_locked(dpl_cu_dev *d, int32_t dev, char *dptr, const char *h, size_t n)
{
  DPL_TRY(ensure_stage(d, dev));
  /* dptr may be a block that queued kernels still use: transfer after them */
  DPL_CU(cudaEventRecord(d->compute_done, d->compute), dev);
  DPL_CU(cudaStreamWaitEvent(d->copy, d->compute_done, 0), dev);
  for (size_t off = 0; off < n;) {
    size_t room = DPL_CU_STAGE_BYTES - d->up_off;
    if (room < 256 || (room < n - off && d->up_off > 0)) { /* to the start of the other buffer */
      d->up_k ^= 1;
      d->up_off = 0;
      room = DPL_CU_STAGE_BYTES;
      DPL_CU(cudaEventSynchronize(d->stage_free[d->up_k]), dev);
    }
    size_t chunk = n - off < room ? n - off : room;
    char *buf = (char *)d->stage[d->up_k] + d->up_off;
    memcpy(buf, h + off, chunk);
    DPL_CU(cudaMemcpyAsync(dptr + off, buf, chunk, cudaMemcpyHostToDevice, d->copy), dev);
    DPL_CU(cudaEventRecord(d->stage_free[d->up_k], d->copy), dev);
    d->up_off = (d->up_off + chunk + 255) & ~(size_t)255;
    off += chunk;
  }
  /* later kernels see the data */
  DPL_CU(cudaEventRecord(d->copy_done, d->copy), dev);
  DPL_CU(cudaStreamWaitEvent(d->compute, d->copy_done, 0), dev);
  return DPL_OK;
}

/* n bytes device -> host, complete on return */
static int d2h_locked(dpl_cu_dev *d, int32_t dev, char *h, const char *dptr, size_t n)
{
  DPL_TRY(ensure_stage(d, dev));
  DPL_CU(cudaEventRecord(d->compute_done, d->compute), dev);
  DPL_CU(cudaStreamWaitEvent(d->copy, d->compute_done, 0), dev);
  size_t prev_off = 0, prev_len = 0;
  int k = 0;
  for (size_t off = 0; off < n; off += DPL_CU_STAGE_BYTES, k ^= 1) {
    size_t chunk = n - off < DPL_CU_STAGE_BYTES ? n - off : DPL_CU_STAGE_BYTES;
    DPL_CU(cudaMemcpyAsync(d->stage[k], dptr + off, chunk, cudaMemcpyDeviceToHost, d->copy), dev);
    DPL_CU(cudaEventRecord(d->stage_free[k], d->copy), dev);
    if (prev_len) { /* drain the other buffer while this chunk moves */
      DPL_CU(cudaEventSynchronize(d->stage_free[k ^ 1]), dev);
      memcpy(h + prev_off, d->stage[k ^ 1], prev_len);
    }
    prev_off = off;
    prev_len = chunk;
  }
  if (prev_len) {
    DPL_CU(cudaEventSynchronize(d->stage_free[k ^ 1]), dev);
    memcpy(h + prev_off, d->stage[k ^ 1], prev_len);
  }
  return DPL_OK;
}

static int transfer(int32_t dev, int to_device, void *dptr, void *h, size_t n)
{
  if (n == 0) return DPL_OK;
  dpl_cu_dev *d = dpl_cu_device(dev, "copy");
  if (!d) return DPL_EDEVICE;
  pthread_mutex_lock(&d->mu);
  int st = to_device ? h2d_locked(d, dev, dptr, h, n) : d2h_locked(d, dev, h, dptr, n);
  pthread_mutex_unlock(&d->mu);
  return st;
}

/* both contiguous, of one dtype and shape: the copy is one of bytes */
static int bytewise(const dpl_tensor *dst, const dpl_tensor *src)
{
  return dpl_is_contig(dst) && dpl_is_contig(src) && dst->_dtype == src->_dtype && dpl_same_shape(dst, src);
}

/* dst = src on one device, broadcast and converted by a kernel */
static int copy_on_device(dpl_tensor *dst, const dpl_tensor *src)
{
  int32_t dev = dst->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, "copy");
  if (!d) return DPL_EDEVICE;
  if (dst->_data == src->_data && dst->_dtype == src->_dtype && dpl_same_shape(dst, src) &&
      !memcmp(dst->_stride, src->_stride, sizeof(int64_t) * (size_t)dst->_ndim))
    return DPL_OK;
  if (src->_devindex == dev) {
    /* overlapping views of one block (x:narrow(1, 2, n):copy_(x:narrow(1, 1, n))): the threads
     * of one kernel (or cudaMemcpy) would read what others already wrote; the CPU copies as if
     * through a temporary, so copy src out first */
    if (dpl_spans_overlap(dst, src)) {
      dpl_tensor *tmp = NULL;
      int st = dpl_cu_new("copy", src->_dtype, src->_ndim, src->_shape, src, &tmp);
      if (st == DPL_OK) st = copy_on_device(tmp, src);
      if (st == DPL_OK) st = copy_on_device(dst, tmp);
      dpl_tensor_release(tmp);
      return st;
    }
  }
  if (bytewise(dst, src)) {
    DPL_CU(cudaMemcpyAsync(dst->_data, src->_data, (size_t)(dst->_numel * dpl_elsize(dst->_dtype)),
                           cudaMemcpyDeviceToDevice, d->compute),
           dev);
    return DPL_OK;
  }
  const dpl_tensor *ops[2] = {dst, src};
  dpl_cu_geom g;
  dpl_cu_geom_init(&g, 2, ops, dst->_ndim, dst->_shape);
  DPL_CU_LAUNCH(dpl_cu_copy(&g, dst->_data, dst->_dtype, src->_data, src->_dtype, d->compute), "copy kernel", dev);
  return DPL_OK;
}

static int copy_h2d(const char *name, dpl_tensor *dst, const dpl_tensor *src)
{
  int32_t dev = dst->_devindex;
  if (bytewise(dst, src))
    return transfer(dev, 1, dst->_data, src->_data, (size_t)(src->_numel * dpl_elsize(src->_dtype)));
  /* host side contiguous in src's dtype, uploaded, then converted/broadcast on the GPU */
  dpl_tensor *hc = NULL, *tmp = NULL;
  int st = dpl_contig_as(name, src, src->_dtype, &hc);
  if (st == DPL_OK) st = dpl_new_on(name, src->_dtype, src->_ndim, src->_shape, DPL_DEVICE_CUDA, dev, &tmp);
  if (st == DPL_OK) st = transfer(dev, 1, tmp->_data, hc->_data, (size_t)(hc->_numel * dpl_elsize(hc->_dtype)));
  if (st == DPL_OK) st = copy_on_device(dst, tmp);
  dpl_tensor_release(hc);
  dpl_tensor_release(tmp);
  return st;
}

static int copy_d2h(const char *name, dpl_tensor *dst, const dpl_tensor *src)
{
  int32_t dev = src->_devindex;
  if (bytewise(dst, src))
    return transfer(dev, 0, src->_data, dst->_data, (size_t)(src->_numel * dpl_elsize(src->_dtype)));
  /* converted to dst's dtype and made contiguous on the GPU, downloaded, then broadcast on the host */
  dpl_tensor *dc = NULL, *hc = NULL;
  int st = dpl_new_on(name, dst->_dtype, src->_ndim, src->_shape, DPL_DEVICE_CUDA, dev, &dc);
  if (st == DPL_OK) st = copy_on_device(dc, src);
  if (st == DPL_OK) st = dpl_new_on(name, dst->_dtype, src->_ndim, src->_shape, DPL_DEVICE_CPU, 0, &hc);
  if (st == DPL_OK) st = transfer(dev, 0, dc->_data, hc->_data, (size_t)(hc->_numel * dpl_elsize(hc->_dtype)));
  if (st == DPL_OK) dpl_copy_raw(dst, hc);
  dpl_tensor_release(dc);
  dpl_tensor_release(hc);
  return st;
}

/* A GPU-to-GPU copy, ordered by events rather than by the host: dst's compute stream
 * waits for src's work so far (an event on src's compute stream), copies (the plugin's
 * streams are non-blocking: the legacy stream of a plain cudaMemcpyPeer would not be
 * ordered with them), and src's compute stream then waits for the copy, so that its
 * later work (which may get sc's memory back from the cache) cannot overwrite what
 * is still being read. Neither the host nor either device waits for the other here. */
static int order_after(int32_t rec_dev, cudaStream_t rec, int32_t wait_dev, cudaStream_t waiter)
{
  cudaEvent_t ev;
  DPL_CU(cudaSetDevice(rec_dev), rec_dev);
  DPL_CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), rec_dev);
  cudaError_t e = cudaEventRecord(ev, rec);
  if (e == cudaSuccess) e = cudaSetDevice(wait_dev);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(waiter, ev, 0);
  cudaError_t e2 = cudaEventDestroy(ev); /* (released once it has completed) */
  if (e != cudaSuccess) return dpl_cu_fail(e, "cudaStreamWaitEvent (peer copy)", wait_dev);
  if (e2 != cudaSuccess) return dpl_cu_fail(e2, "cudaEventDestroy (peer copy)", rec_dev);
  return DPL_OK;
}

static int copy_peer(const char *name, dpl_tensor *dst, const dpl_tensor *src)
{
  int32_t sdev = src->_devindex, ddev = dst->_devindex;
  dpl_tensor *sc = NULL, *dc = NULL;
  int st = dpl_contig_as(name, src, src->_dtype, &sc); /* on src's device */
  if (st == DPL_OK) st = dpl_new_on(name, src->_dtype, src->_ndim, src->_shape, DPL_DEVICE_CUDA, ddev, &dc);
  if (st == DPL_OK) {
    dpl_cu_dev *s = dpl_cu_device(sdev, name);
    dpl_cu_dev *d = s ? dpl_cu_device(ddev, name) : NULL;
    if (!s || !d) st = DPL_EDEVICE;
    if (st == DPL_OK) st = order_after(sdev, s->compute, ddev, d->compute);
    if (st == DPL_OK) {
      cudaError_t e = cudaMemcpyPeerAsync(dc->_data, ddev, sc->_data, sdev,
                                          (size_t)(sc->_numel * dpl_elsize(sc->_dtype)), d->compute);
      if (e != cudaSuccess) st = dpl_cu_fail(e, "cudaMemcpyPeerAsync", sdev);
    }
    if (st == DPL_OK) st = order_after(ddev, d->compute, sdev, s->compute);
  }
  if (st == DPL_OK) st = copy_on_device(dst, dc);
  dpl_tensor_release(sc);
  dpl_tensor_release(dc);
  return st;
}

int dpl_cu_op_copy(const dpl_bk_args *a)
{
  const char *name = a->name ? a->name : "copy";
  dpl_tensor *dst = a->inout;
  const dpl_tensor *src = a->in[0];
  if (dst->_numel == 0) return DPL_OK;
  int dd = dpl_is_devmem(dst), sd = dpl_is_devmem(src);
  if (dd && sd) return dst->_devindex == src->_devindex ? copy_on_device(dst, src) : copy_peer(name, dst, src);
  if (dd) return copy_h2d(name, dst, src);
  /* the host waited for the GPU: report an index check that failed before (dpl_cuda_check.c) */
  DPL_TRY(copy_d2h(name, dst, src));
  return dpl_cu_check_report(src->_devindex);
}

int dpl_cu_op_fill(const dpl_bk_args *a)
{
  dpl_tensor *t = a->inout;
  int32_t dev = t->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, a->name ? a->name : "fill_");
  if (!d) return DPL_EDEVICE;
  char buf[8] = {0};
  if (a->i[0]) dpl_store_i64(buf, t->_dtype, a->l[0]);
  else dpl_store_f64(buf, t->_dtype, a->d[0]);
  uint64_t bytes;
  memcpy(&bytes, buf, 8);
  const dpl_tensor *ops[1] = {t};
  dpl_cu_geom g;
  dpl_cu_geom_init(&g, 1, ops, t->_ndim, t->_shape);
  DPL_CU_LAUNCH(dpl_cu_fill(&g, t->_data, (int32_t)dpl_elsize(t->_dtype), bytes, d->compute), "fill kernel", dev);
  return DPL_OK;
}

int dpl_cu_op_rng(const dpl_bk_args *a)
{
  dpl_tensor *t = a->inout;
  int32_t dev = t->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, a->name ? a->name : "rng");
  if (!d) return DPL_EDEVICE;
  DPL_CU_LAUNCH(dpl_cu_rng(t->_data, t->_dtype, t->_numel, a->i[0], a->u[0], a->u[1], a->d[0], a->d[1], a->l[0],
                           a->l[1], d->compute),
                "rng kernel", dev);
  return DPL_OK;
}
