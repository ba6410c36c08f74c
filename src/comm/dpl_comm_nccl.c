/* dpl_comm_nccl.c: the core's NCCL entry points (dpl_nccl_* in dpl.h). They
 * forward to the CUDA plugin, which holds NCCL: its functions are looked up by
 * name in the loaded dpl_cuda.so, so the core never links CUDA or NCCL. */
#include "dpl.h"
#include "../host/dpl_internal.h"
#include "../device/dpl_device_internal.h"
#include <stddef.h>

typedef const char *(*reason_fn)(void);
typedef int (*uid_fn)(uint8_t *, int32_t);
typedef int (*init_fn)(const uint8_t *, int32_t, int32_t, int32_t, int32_t, void **);
typedef void (*destroy_fn)(void *);
typedef int (*coll_fn)(void *, int32_t, dpl_tensor *, const dpl_tensor *, int32_t, int32_t);
typedef int (*split_fn)(void *, int32_t, int32_t, int32_t, int32_t, void **);
typedef int32_t (*version_fn)(void);

/* the collective codes of dpl_cu_nccl_coll (src/cuda/dpl_cuda_nccl.c) */
enum {
  COLL_ALL_REDUCE = 0, COLL_REDUCE = 1, COLL_BROADCAST = 2, COLL_ALL_GATHER = 3,
  COLL_REDUCE_SCATTER = 4, COLL_GATHER = 5, COLL_SCATTER = 6, COLL_ALL_TO_ALL = 7
};

static void *sym(const char *name) { return dpl_device_plugin_symbol(name); }

const char *dpl_nccl_unavailable_reason(void)
{
  int32_t n = 0;
  if (dpl_device_count(DPL_DEVICE_CUDA, &n) != DPL_OK || n == 0) {
    const char *r = dpl_cuda_unavailable_reason();
    return *r ? r : "no GPU";
  }
  dpl_device_info info;
  if (dpl_device_get_info(DPL_DEVICE_CUDA, 0, &info) == DPL_OK && info.simulated)
    return "the simulated GPUs of DPL_VIRTUAL_GPUS have no NCCL";
  reason_fn f = (reason_fn)sym("dpl_cu_nccl_unavailable");
  if (!f) return "the CUDA plugin (dpl_cuda.so) is not loaded";
  return f();
}

static int missing(const char *what)
{
  return dpl_errorf(DPL_EDEVICE, "%s: NCCL needs the CUDA plugin, which is not loaded (%s)", what,
                    dpl_cuda_unavailable_reason());
}

int dpl_nccl_unique_id(uint8_t *id, int32_t len)
{
  uid_fn f = (uid_fn)sym("dpl_cu_nccl_unique_id");
  if (!f) return missing("nccl unique id");
  return f(id, len);
}

int dpl_nccl_init(const uint8_t *id, int32_t len, int32_t nranks, int32_t rank, int32_t device, dpl_nccl **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "nccl init: out is NULL");
  *out = NULL;
  init_fn f = (init_fn)sym("dpl_cu_nccl_init");
  if (!f) return missing("nccl init");
  void *c = NULL;
  int st = f(id, len, nranks, rank, device, &c);
  *out = (dpl_nccl *)c;
  return st;
}

void dpl_nccl_destroy(dpl_nccl *c)
{
  if (!c) return;
  destroy_fn f = (destroy_fn)sym("dpl_cu_nccl_destroy");
  if (f) f(c);
}

int32_t dpl_nccl_version(void)
{
  version_fn f = (version_fn)sym("dpl_cu_nccl_version");
  return f ? f() : 0;
}

int dpl_nccl_split(dpl_nccl *parent, int32_t color, int32_t key, int32_t new_rank, int32_t new_size, dpl_nccl **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "nccl split: out is NULL");
  *out = NULL;
  if (!parent) return dpl_errorf(DPL_EINVAL, "nccl split: the parent communicator is NULL");
  split_fn f = (split_fn)sym("dpl_cu_nccl_split");
  if (!f) return missing("nccl split");
  void *c = NULL;
  int st = f(parent, color, key, new_rank, new_size, &c);
  *out = (dpl_nccl *)c;
  return st;
}

static int coll(const char *what, dpl_nccl *c, int32_t kind, dpl_tensor *t, const dpl_tensor *send, int32_t op,
                int32_t root)
{
  if (!c) return dpl_errorf(DPL_EINVAL, "%s: the NCCL communicator is NULL", what);
  coll_fn f = (coll_fn)sym("dpl_cu_nccl_coll");
  if (!f) return missing(what);
  return f(c, kind, t, send, op, root);
}

int dpl_nccl_all_reduce(dpl_nccl *c, dpl_tensor *t, int32_t op) { return coll("all_reduce", c, COLL_ALL_REDUCE, t, NULL, op, 0); }
int dpl_nccl_reduce(dpl_nccl *c, dpl_tensor *t, int32_t op, int32_t root) { return coll("reduce", c, COLL_REDUCE, t, NULL, op, root); }
int dpl_nccl_broadcast(dpl_nccl *c, dpl_tensor *t, int32_t root) { return coll("broadcast", c, COLL_BROADCAST, t, NULL, 0, root); }
int dpl_nccl_all_gather(dpl_nccl *c, const dpl_tensor *send, dpl_tensor *recv)
{
  return coll("all_gather", c, COLL_ALL_GATHER, recv, send, 0, 0);
}
int dpl_nccl_reduce_scatter(dpl_nccl *c, const dpl_tensor *send, dpl_tensor *recv, int32_t op)
{
  return coll("reduce_scatter", c, COLL_REDUCE_SCATTER, recv, send, op, 0);
}
int dpl_nccl_gather(dpl_nccl *c, const dpl_tensor *send, dpl_tensor *recv, int32_t root)
{
  return coll("gather", c, COLL_GATHER, recv, send, 0, root);
}
int dpl_nccl_scatter(dpl_nccl *c, const dpl_tensor *send, dpl_tensor *recv, int32_t root)
{
  return coll("scatter", c, COLL_SCATTER, recv, send, 0, root);
}
int dpl_nccl_all_to_all(dpl_nccl *c, const dpl_tensor *send, dpl_tensor *recv)
{
  return coll("all_to_all", c, COLL_ALL_TO_ALL, recv, send, 0, 0);
}
