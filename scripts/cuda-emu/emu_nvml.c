/* emu_nvml.c (dplhost CUDA emulator): libnvidia-ml.so.1 for the device
 * registry's probe (src/device/dpl_device_registry.c): the emulated GPUs
 * (DPL_CUDA_EMU_GPUS, default 1), named "dplhost CUDA emulator", compute
 * capability 9.0, DPL_CUDA_EMU_MEM_MB of memory each (default 16384), the
 * numbers emu_runtime.cpp uses. Found through LD_LIBRARY_PATH. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_INSUFFICIENT_SIZE = 7 };
enum { EMU_MAX_DEV = 16 };

typedef struct emu_nvml_dev {
  unsigned int index;
} emu_nvml_dev;

static emu_nvml_dev devs[EMU_MAX_DEV];
static int initialized;

static unsigned int emu_count(void)
{
  const char *e = getenv("DPL_CUDA_EMU_GPUS");
  int v = e && *e ? atoi(e) : 1;
  return (unsigned int)(v < 0 ? 0 : v > EMU_MAX_DEV ? EMU_MAX_DEV : v);
}

static unsigned long long emu_mem(void)
{
  const char *e = getenv("DPL_CUDA_EMU_MEM_MB");
  long long v = e && *e ? atoll(e) : 16384;
  return (unsigned long long)(v > 0 ? v : 16384) << 20;
}

int nvmlInit_v2(void)
{
  for (unsigned int i = 0; i < EMU_MAX_DEV; i++) devs[i].index = i;
  initialized = 1;
  return NVML_SUCCESS;
}

int nvmlInit(void) { return nvmlInit_v2(); }
int nvmlShutdown(void) { initialized = 0; return NVML_SUCCESS; }

int nvmlDeviceGetCount_v2(unsigned int *n)
{
  if (!initialized) return NVML_ERROR_UNINITIALIZED;
  if (!n) return NVML_ERROR_INVALID_ARGUMENT;
  *n = emu_count();
  return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **dev)
{
  if (!initialized) return NVML_ERROR_UNINITIALIZED;
  if (!dev || i >= emu_count()) return NVML_ERROR_INVALID_ARGUMENT;
  *dev = &devs[i];
  return NVML_SUCCESS;
}

int nvmlDeviceGetName(void *dev, char *name, unsigned int len)
{
  if (!dev || !name) return NVML_ERROR_INVALID_ARGUMENT;
  if (len < sizeof "dplhost CUDA emulator") return NVML_ERROR_INSUFFICIENT_SIZE;
  snprintf(name, len, "dplhost CUDA emulator");
  return NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo(void *dev, unsigned long long *m) /* nvmlMemory_t: total, free, used */
{
  if (!dev || !m) return NVML_ERROR_INVALID_ARGUMENT;
  m[0] = emu_mem();
  m[1] = emu_mem();
  m[2] = 0;
  return NVML_SUCCESS;
}

int nvmlDeviceGetCudaComputeCapability(void *dev, int *major, int *minor)
{
  if (!dev || !major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
  *major = 9;
  *minor = 0;
  return NVML_SUCCESS;
}

const char *nvmlErrorString(int rc)
{
  switch (rc) {
  case NVML_SUCCESS: return "Success";
  case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
  case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
  case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
  default: return "Unknown Error";
  }
}
