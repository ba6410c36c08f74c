/* dpl_device_internal.h: the device layer's hooks for C code inside dplhost
 * (the CUDA plugin, the tensor storage), not part of the Lua-visible API. */
#ifndef DPL_DEVICE_INTERNAL_H
#define DPL_DEVICE_INTERNAL_H
#include "dpl.h"

/* Tries a small allocation of `bytes` on the real CUDA device `index` (0-based,
 * after CUDA_VISIBLE_DEVICES) and frees it. Returns DPL_OK, DPL_EDEVICE for a
 * busy/exclusive/prohibited GPU (a lasting refusal: pick_single_gpu skips it),
 * DPL_ENOMEM for a transient out-of-memory (retried with backoff), with a
 * message set by dpl_errorf. */
typedef int (*dpl_cuda_probe_alloc_fn)(int32_t index, uint64_t bytes);

/* The CUDA plugin registers its probe when it loads; NULL unregisters. Until
 * then dpl_device_probe_alloc answers DPL_ENOTIMPL for real GPUs. */
void dpl_device_set_cuda_probe_alloc(dpl_cuda_probe_alloc_fn fn);

/* The CUDA plugin (dpl_device_plugin.c). dpl_device_plugin_autoload runs at
 * the registry's probe when NVML found a real GPU. The plugin's entry point,
 * dpl_cuda_plugin_init(abi, err, errlen), registers its backend and probe.
 * Search order: $DPL_CUDA_PLUGIN, then dpl_cuda.so beside the executable, then
 * ../lib/dplhost/dpl_cuda.so from the executable's directory (make install). */
void dpl_device_plugin_autoload(void);
/* Why the plugin is not loaded ("" when it is, or before any attempt). */
const char *dpl_device_plugin_error(void);
typedef int (*dpl_cuda_plugin_init_fn)(int32_t abi, char *err, size_t errlen);
/* A function the plugin exports (the NCCL entry points), loading it if needed; NULL without one. */
void *dpl_device_plugin_symbol(const char *name);
#endif
