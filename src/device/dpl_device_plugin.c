/* dpl_device_plugin.c: finds and loads the CUDA plugin dpl_cuda.so with
 * dlopen (once; at the registry's probe when NVML sees a GPU, or on
 * dpl_cuda_load), and reports why it is not there. Loading touches no GPU:
 * the plugin creates CUDA contexts at its first allocation only. */
#define _GNU_SOURCE
#include "dpl.h"
#include "../host/dpl_internal.h"
#include "../tensor/dpl_tensor_backend.h"
#include "dpl_device_internal.h"
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static void *handle;
static char plugin_path[PATH_MAX];
static char load_error[1024];

static int try_path(const char *path, char *why, size_t n)
{
  if (access(path, R_OK) != 0) {
    snprintf(why, n, "%.400s: not found", path);
    return 0;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(why, n, "dlopen %.300s: %.300s", path, e ? e : "unknown error");
    return -1;
  }
  dpl_cuda_plugin_init_fn init = (dpl_cuda_plugin_init_fn)dlsym(h, "dpl_cuda_plugin_init");
  if (!init) {
    snprintf(why, n, "%.400s: no dpl_cuda_plugin_init entry point", path);
    dlclose(h);
    return -1;
  }
  char err[512] = "";
  if (init(DPL_BACKEND_ABI, err, sizeof err) != 0) {
    snprintf(why, n, "%.300s: refused to load: %.400s", path, err);
    dlclose(h);
    return -1;
  }
  handle = h;
  snprintf(plugin_path, sizeof plugin_path, "%s", path);
  return 1;
}

static void load(void)
{
  const char *forced = getenv("DPL_CUDA_PLUGIN");
  if (forced && *forced) {
    if (strcmp(forced, "off") == 0) {
      snprintf(load_error, sizeof load_error, "CUDA plugin switched off (DPL_CUDA_PLUGIN=off)");
      return;
    }
    try_path(forced, load_error, sizeof load_error);
    return;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    snprintf(load_error, sizeof load_error, "cannot locate the executable to find dpl_cuda.so; set DPL_CUDA_PLUGIN");
    return;
  }
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  const char *rel[] = {"dpl_cuda.so", "../lib/dplhost/dpl_cuda.so"};
  char why[2][480];
  for (int i = 0; i < 2; i++) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", exe, rel[i]);
    int r = try_path(path, why[i], sizeof why[i]);
    if (r == 1) return;
    if (r < 0) { snprintf(load_error, sizeof load_error, "%s", why[i]); return; }
  }
  snprintf(load_error, sizeof load_error,
           "dpl_cuda.so not found beside %.300s/dplhost or in %.300s/../lib/dplhost (build it with nvcc: make; "
           "or set DPL_CUDA_PLUGIN)", exe, exe);
}

void dpl_device_plugin_autoload(void) { pthread_once(&load_once, load); }

int dpl_cuda_load(void)
{
  pthread_once(&load_once, load);
  if (handle) return DPL_OK;
  return dpl_errorf(DPL_EDEVICE, "cuda: cannot load the CUDA plugin: %s", load_error);
}

const char *dpl_cuda_plugin_path(void) { return handle ? plugin_path : ""; }

int32_t dpl_cuda_initialized(void)
{
  if (!handle) return 0; /* (never loads the plugin) */
  int (*touched)(void) = (int (*)(void))dlsym(handle, "dpl_cuda_plugin_touched");
  return touched ? touched() != 0 : 0;
}

void *dpl_device_plugin_symbol(const char *name)
{
  pthread_once(&load_once, load);
  return handle ? dlsym(handle, name) : NULL;
}
const char *dpl_device_plugin_error(void) { return handle ? "" : load_error; }
