/* dpl_device_registry.c: the device registry. The CPU is always device 0 of its
 * type; CUDA devices are real GPUs found through NVML (dlopen, no CUDA context is
 * created, so a later fork stays safe; CUDA_VISIBLE_DEVICES is honoured; without
 * NVML, through the CUDA driver API), or the
 * simulated GPUs of DPL_VIRTUAL_GPUS=N, backed by host memory: when that variable
 * is set, real GPUs are hidden. Probed once, lazily; when NVML lists a GPU the
 * probe loads the CUDA plugin (dpl_device_plugin.c), which real GPU tensors need. */
#define _GNU_SOURCE
#include "dpl.h"
#include "../host/dpl_internal.h"
#include "dpl_device_internal.h"
#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DPL_MAX_GPUS 64

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static dpl_device_info cpu_info;
static dpl_device_info gpu_info[DPL_MAX_GPUS];
static int gpu_count;
static int probe_status = DPL_OK;
static char probe_error[256];
static char cuda_reason[768];

static void probe_cpu(void)
{
  cpu_info.type = DPL_DEVICE_CPU;
  cpu_info.index = 0;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_info.cores = n > 0 ? (int32_t)n : 1;
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  if (pages > 0 && psize > 0) cpu_info.total_memory = (uint64_t)pages * (uint64_t)psize;
  snprintf(cpu_info.name, sizeof cpu_info.name, "cpu");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "model name", 10) == 0) {
        char *p = strchr(line, ':');
        if (p) {
          p++;
          while (*p == ' ' || *p == '\t') p++;
          p[strcspn(p, "\n")] = 0;
          snprintf(cpu_info.name, sizeof cpu_info.name, "%s", p);
        }
        break;
      }
    }
    fclose(f);
  }
}

/* Parses a non-negative decimal integer; returns -1 when s is not one. */
static long parse_count(const char *s)
{
  if (!s || !*s) return -1;
  long v = 0;
  for (const char *p = s; *p; p++) {
    if (!isdigit((unsigned char)*p) || v > 100000) return -1;
    v = v * 10 + (*p - '0');
  }
  return v;
}

static int probe_virtual(const char *nstr)
{
  long n = parse_count(nstr);
  if (n < 0 || n > DPL_MAX_GPUS) {
    snprintf(probe_error, sizeof probe_error,
             "DPL_VIRTUAL_GPUS must be an integer from 0 to %d, got '%s'", DPL_MAX_GPUS, nstr);
    return DPL_EINVAL;
  }
  const char *busy = getenv("DPL_VIRTUAL_GPUS_BUSY");
  int busy_mask[DPL_MAX_GPUS] = {0};
  if (busy && *busy) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", busy);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
      while (*tok == ' ') tok++;
      long k = parse_count(tok);
      if (k < 0 || k >= DPL_MAX_GPUS) {
        snprintf(probe_error, sizeof probe_error,
                 "DPL_VIRTUAL_GPUS_BUSY must be a comma-separated list of GPU ids, got '%s'", busy);
        return DPL_EINVAL;
      }
      if (k >= n) {
        char range[48];
        if (n > 0) snprintf(range, sizeof range, "cuda:0 to cuda:%ld", n - 1);
        else snprintf(range, sizeof range, "none");
        snprintf(probe_error, sizeof probe_error,
                 "DPL_VIRTUAL_GPUS_BUSY names GPU %ld, but DPL_VIRTUAL_GPUS=%ld simulates %s (got '%s')", k, n,
                 range, busy);
        return DPL_EINVAL;
      }
      busy_mask[k] = 1;
    }
  }
  gpu_count = (int)n;
  for (int i = 0; i < gpu_count; i++) {
    dpl_device_info *d = &gpu_info[i];
    memset(d, 0, sizeof *d);
    d->type = DPL_DEVICE_CUDA;
    d->index = i;
    d->simulated = 1;
    d->busy = busy_mask[i];
    d->total_memory = cpu_info.total_memory;
    snprintf(d->name, sizeof d->name, "simulated GPU %d (host memory)", i);
  }
  return DPL_OK;
}

/* NVML, loaded at run time: only the handful of entry points the probe needs. */
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_count_fn)(unsigned int *);
typedef int (*nvml_handle_fn)(unsigned int, void **);
typedef int (*nvml_name_fn)(void *, char *, unsigned int);
typedef int (*nvml_mem_fn)(void *, unsigned long long *);
typedef int (*nvml_cc_fn)(void *, int *, int *);
typedef const char *(*nvml_errstr_fn)(int);

/* Without NVML, the CUDA driver API lists the GPUs (it applies CUDA_VISIBLE_DEVICES
 * itself). cuInit creates no context, but a child forked afterwards cannot use CUDA:
 * the fallback only, noted in the reason of an empty result. */
typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_name_fn)(char *, int, int);
typedef int (*cu_mem_fn)(size_t *, int);
typedef int (*cu_attr_fn)(int *, int, int);

static void probe_driver(void *cu)
{
  cu_init_fn init = (cu_init_fn)dlsym(cu, "cuInit");
  cu_count_fn count = (cu_count_fn)dlsym(cu, "cuDeviceGetCount");
  cu_get_fn get = (cu_get_fn)dlsym(cu, "cuDeviceGet");
  cu_name_fn name = (cu_name_fn)dlsym(cu, "cuDeviceGetName");
  cu_mem_fn mem = (cu_mem_fn)dlsym(cu, "cuDeviceTotalMem_v2");
  cu_attr_fn attr = (cu_attr_fn)dlsym(cu, "cuDeviceGetAttribute");
  int n = 0;
  if (!init || !count || !get || init(0) != 0 || count(&n) != 0 || n <= 0) {
    snprintf(cuda_reason, sizeof cuda_reason, "no GPU (the CUDA driver reports none; NVML missing)");
    return;
  }
  for (int i = 0; i < n && gpu_count < DPL_MAX_GPUS; i++) {
    int dev = 0;
    if (get(&dev, i) != 0) continue;
    dpl_device_info *d = &gpu_info[gpu_count];
    memset(d, 0, sizeof *d);
    d->type = DPL_DEVICE_CUDA;
    d->index = gpu_count;
    if (name) name(d->name, (int)sizeof d->name, dev);
    size_t bytes = 0;
    if (mem && mem(&bytes, dev) == 0) d->total_memory = bytes;
    if (attr) {
      attr(&d->cc_major, 75, dev); /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
      attr(&d->cc_minor, 76, dev); /* ..._MINOR */
      attr(&d->cores, 16, dev);    /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
    }
    gpu_count++;
  }
  if (gpu_count == 0) snprintf(cuda_reason, sizeof cuda_reason, "no GPU (the CUDA driver could not open any)");
}

static void probe_nvml(void)
{
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (cu) probe_driver(cu); /* stays loaded: CUDA will use it */
    else snprintf(cuda_reason, sizeof cuda_reason, "no CUDA driver (libcuda.so.1 not found)");
    return;
  }
  nvml_init_fn init = (nvml_init_fn)dlsym(h, "nvmlInit_v2");
  nvml_count_fn count = (nvml_count_fn)dlsym(h, "nvmlDeviceGetCount_v2");
  nvml_handle_fn handle = (nvml_handle_fn)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
  nvml_name_fn name = (nvml_name_fn)dlsym(h, "nvmlDeviceGetName");
  nvml_mem_fn mem = (nvml_mem_fn)dlsym(h, "nvmlDeviceGetMemoryInfo");
  nvml_cc_fn cc = (nvml_cc_fn)dlsym(h, "nvmlDeviceGetCudaComputeCapability");
  nvml_errstr_fn errstr = (nvml_errstr_fn)dlsym(h, "nvmlErrorString");
  if (!init || !count || !handle) {
    snprintf(cuda_reason, sizeof cuda_reason, "no GPU (NVML too old: missing entry points)");
    return;
  }
  int rc = init();
  if (rc != 0) {
    snprintf(cuda_reason, sizeof cuda_reason, "no GPU (NVML init failed: %s)",
             errstr ? errstr(rc) : "unknown error");
    return;
  }
  unsigned int n = 0;
  if (count(&n) != 0 || n == 0) {
    snprintf(cuda_reason, sizeof cuda_reason, "no GPU (the driver reports none)");
    return;
  }
  /* CUDA_VISIBLE_DEVICES: a list of physical indices selects and renumbers. */
  int order[DPL_MAX_GPUS];
  int norder = 0;
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  if (vis) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", vis);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok && norder < DPL_MAX_GPUS;
         tok = strtok_r(NULL, ",", &save)) {
      long k = parse_count(tok);
      if (k < 0 || k >= (long)n) break; /* CUDA stops at the first invalid entry */
      order[norder++] = (int)k;
    }
    if (norder == 0) {
      snprintf(cuda_reason, sizeof cuda_reason, "no GPU (CUDA_VISIBLE_DEVICES='%s' hides all %u)", vis, n);
      return;
    }
  } else {
    for (unsigned int i = 0; i < n && i < DPL_MAX_GPUS; i++) order[norder++] = (int)i;
  }
  for (int i = 0; i < norder; i++) {
    void *dev = NULL;
    if (handle((unsigned int)order[i], &dev) != 0) continue;
    dpl_device_info *d = &gpu_info[gpu_count];
    memset(d, 0, sizeof *d);
    d->type = DPL_DEVICE_CUDA;
    d->index = gpu_count;
    if (name) name(dev, d->name, sizeof d->name);
    if (mem) {
      unsigned long long m[3] = {0, 0, 0}; /* nvmlMemory_t: total, free, used */
      if (mem(dev, m) == 0) d->total_memory = m[0];
    }
    if (cc) cc(dev, &d->cc_major, &d->cc_minor);
    gpu_count++;
  }
  if (gpu_count == 0) snprintf(cuda_reason, sizeof cuda_reason, "no GPU (NVML could not open any)");
}

static void probe(void)
{
  probe_cpu();
  const char *v = getenv("DPL_VIRTUAL_GPUS");
  if (v && *v) {
    probe_status = probe_virtual(v);
    snprintf(cuda_reason, sizeof cuda_reason, "simulated GPUs only (DPL_VIRTUAL_GPUS=%s)", v);
    return;
  }
  probe_nvml();
  if (gpu_count > 0) dpl_device_plugin_autoload();
}

int dpl_device_count(int32_t type, int32_t *out_count)
{
  pthread_once(&probe_once, probe);
  if (!out_count) return dpl_errorf(DPL_EINVAL, "dpl_device_count: out_count is NULL");
  *out_count = 0;
  if (probe_status != DPL_OK) return dpl_errorf(probe_status, "%s", probe_error);
  switch (type) {
  case DPL_DEVICE_CPU: *out_count = 1; return DPL_OK;
  case DPL_DEVICE_CUDA: *out_count = gpu_count; return DPL_OK;
  default: return dpl_errorf(DPL_EINVAL, "dpl_device_count: unknown device type %d", (int)type);
  }
}

int dpl_device_get_info(int32_t type, int32_t index, dpl_device_info *out)
{
  int32_t n = 0;
  int st = dpl_device_count(type, &n);
  if (st != DPL_OK) return st;
  if (!out) return dpl_errorf(DPL_EINVAL, "dpl_device_get_info: out is NULL");
  if (index < 0 || index >= n)
    return dpl_errorf(DPL_EDEVICE, "dpl_device_get_info: %s device %d does not exist (%d available)",
                      type == DPL_DEVICE_CPU ? "cpu" : "cuda", (int)index, (int)n);
  *out = type == DPL_DEVICE_CPU ? cpu_info : gpu_info[index];
  return DPL_OK;
}

const char *dpl_cuda_unavailable_reason(void)
{
  if (dpl_cuda_forbidden()) return dpl_cuda_forbidden();
  pthread_once(&probe_once, probe);
  if (gpu_count > 0 && !gpu_info[0].simulated) {
    const char *e = dpl_device_plugin_error();
    if (!*e) return "";
    snprintf(cuda_reason, sizeof cuda_reason, "GPU present but the CUDA plugin is not loaded: %s", e);
  }
  return cuda_reason;
}

static void fmt_bytes(char *buf, size_t n, uint64_t b)
{
  if (b == 0) snprintf(buf, n, "-");
  else snprintf(buf, n, "%.1f GiB", (double)b / (1024.0 * 1024.0 * 1024.0));
}

int dpl_print_devices(void)
{
  int32_t n = 0;
  int st = dpl_device_count(DPL_DEVICE_CUDA, &n);
  if (st != DPL_OK) {
    fprintf(stderr, "dplhost: %s\n", dpl_last_error());
    return 1;
  }
  char mem[32];
  printf("%-8s %-44s %-10s %s\n", "DEVICE", "NAME", "MEMORY", "NOTES");
  fmt_bytes(mem, sizeof mem, cpu_info.total_memory);
  printf("%-8s %-44.44s %-10s %d cores\n", "cpu", cpu_info.name, mem, (int)cpu_info.cores);
  for (int i = 0; i < n; i++) {
    const dpl_device_info *d = &gpu_info[i];
    char dev[24], notes[64];
    snprintf(dev, sizeof dev, "cuda:%d", i);
    fmt_bytes(mem, sizeof mem, d->total_memory);
    if (d->simulated) snprintf(notes, sizeof notes, "simulated%s", d->busy ? ", busy" : "");
    else snprintf(notes, sizeof notes, "compute capability %d.%d", d->cc_major, d->cc_minor);
    printf("%-8s %-44.44s %-10s %s\n", dev, d->name, mem, notes);
  }
  if (n == 0) printf("%-8s %s\n", "cuda", cuda_reason);
  else if (gpu_info[0].simulated) printf("%-8s %s\n", "note", cuda_reason);
  else if (*dpl_device_plugin_error()) printf("%-8s CUDA plugin not loaded: %s\n", "note", dpl_device_plugin_error());
  else printf("%-8s CUDA plugin %s\n", "note", dpl_cuda_plugin_path());
  return 0;
}
