/* dpl_device_probe.c: dpl_device_probe_alloc, the "small allocation" with which
 * pick_single_gpu tells a usable GPU from a busy one. CPU and simulated GPUs are
 * answered here (host memory; DPL_VIRTUAL_GPUS_BUSY marks refusing ones); real
 * GPUs go through a probe the CUDA plugin registers when it loads, so that
 * nothing here ever creates a CUDA context (a later fork stays safe). */
#include "dpl.h"
#include "../host/dpl_internal.h"
#include "dpl_device_internal.h"
#include <stdatomic.h>
#include <stdlib.h>

/* Lightning allocates one float (torch.ones(1)). */
#define DPL_PROBE_BYTES 4u

static _Atomic(dpl_cuda_probe_alloc_fn) cuda_probe;

void dpl_device_set_cuda_probe_alloc(dpl_cuda_probe_alloc_fn fn)
{
  atomic_store(&cuda_probe, fn);
}

static int probe_host_memory(const char *what)
{
  void *p = malloc(DPL_PROBE_BYTES);
  if (!p) return dpl_errorf(DPL_ENOMEM, "dpl_device_probe_alloc: %s: out of host memory", what);
  free(p);
  return DPL_OK;
}

int dpl_device_probe_alloc(int32_t type, int32_t index)
{
  if (type != DPL_DEVICE_CPU && type != DPL_DEVICE_CUDA)
    return dpl_errorf(DPL_EINVAL, "dpl_device_probe_alloc: unknown device type %d", (int)type);
  dpl_device_info info;
  int st = dpl_device_get_info(type, index, &info);
  if (st != DPL_OK) return st; /* no such device (DPL_EDEVICE) or a bad DPL_VIRTUAL_GPUS */
  if (type == DPL_DEVICE_CPU) return probe_host_memory("cpu");
  if (info.simulated) {
    if (info.busy)
      return dpl_errorf(DPL_EDEVICE,
                        "cuda:%d is busy: allocation refused (simulated exclusive-mode GPU, "
                        "listed in DPL_VIRTUAL_GPUS_BUSY)", (int)index);
    return probe_host_memory("simulated GPU");
  }
  dpl_cuda_probe_alloc_fn fn = atomic_load(&cuda_probe);
  if (!fn)
    return dpl_errorf(DPL_ENOTIMPL,
                      "dpl_device_probe_alloc: cuda:%d: allocating on a real GPU needs the CUDA "
                      "plugin, which is not loaded", (int)index);
  return fn(index, DPL_PROBE_BYTES);
}
