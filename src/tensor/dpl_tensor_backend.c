/* dpl_tensor_backend.c: the registered device backend (the CUDA plugin's
 * vtable), dispatch of ops on device tensors with the uniform
 * "<op>: not implemented on cuda" refusal, the op names, and the public
 * dpl_cuda_* entry points that forward to the plugin. */
#include "dpl_tensor_internal.h"
#include <stdatomic.h>
#include <stdio.h>

static _Atomic(const dpl_backend *) backend;

static char forbid_reason[512]; /* set once in a forked DataLoader worker: CUDA refused */

void dpl_backend_register(const dpl_backend *b)
{
  if (!forbid_reason[0]) atomic_store(&backend, b);
}
const dpl_backend *dpl_backend_get(void) { return atomic_load(&backend); }

/* the backend is dropped, not released: its state (contexts, cached blocks) is the
 * parent's; storages inherited from the parent are then freed without the backend */
void dpl_cuda_forbid(const char *why)
{
  if (!why || !*why) return;
  snprintf(forbid_reason, sizeof forbid_reason, "%s", why);
  atomic_store(&backend, NULL);
}
const char *dpl_cuda_forbidden(void) { return forbid_reason[0] ? forbid_reason : NULL; }

static const char *const op_names[DPL_BK_NUM_OPS] = {
  "copy", "fill", "rng", "gemm", "binary", "binary_scalar", "axpy", "unary", "activation_backward", "clamp",
  "where", "masked_fill", "reduce", "reduce_index", "softmax", "softmax_backward", "cross_entropy",
  "cross_entropy_backward", "nll_loss", "nll_loss_backward", "mse_loss", "mse_loss_backward", "embedding",
  "embedding_backward", "index_select", "index_add", "gather", "scatter_add", "masked_select", "nonzero", "conv2d",
  "conv2d_backward", "max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward",
  "optim_step_multi", "layer_norm", "layer_norm_backward", "batch_norm",
  "batch_norm_backward", "scan", "cumprod_backward", "sort", "select", "histc", "im2col", "col2im",
  "adaptive_max_pool2d", "max_pool1d", "special", "ctc_loss", "ctc_loss_backward", "adaptive_avg_pool2d",
  "adaptive_avg_pool2d_backward", "linalg", "index_store", "searchsorted", "scatter_reduce"};

const char *dpl_bk_op_name(int32_t op) { return op >= 0 && op < DPL_BK_NUM_OPS ? op_names[op] : ""; }
const char *dpl_cuda_op_name(int32_t op) { return dpl_bk_op_name(op); }

int32_t dpl_cuda_supports(int32_t op)
{
  const dpl_backend *b = dpl_backend_get();
  return b && op >= 0 && op < DPL_BK_NUM_OPS && b->supports(op) ? 1 : 0;
}

int dpl_bk_call(dpl_bk_args *a)
{
  const char *name = a->name ? a->name : dpl_bk_op_name(a->op);
  const dpl_backend *b = dpl_backend_get();
  if (!b && dpl_cuda_forbidden()) return dpl_errorf(DPL_EDEVICE, "%s on cuda: %s", name, dpl_cuda_forbidden());
  if (!b)
    return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda (the CUDA plugin is not loaded)", name);
  if (a->op < 0 || a->op >= DPL_BK_NUM_OPS || !b->supports(a->op))
    return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda", name);
  return b->run(a);
}

static int no_plugin(const char *what)
{
  if (dpl_cuda_forbidden()) return dpl_errorf(DPL_EDEVICE, "%s: %s", what, dpl_cuda_forbidden());
  return dpl_errorf(DPL_EDEVICE, "%s: the CUDA plugin is not loaded (%s)", what, dpl_cuda_unavailable_reason());
}

int dpl_cuda_synchronize(int32_t index)
{
  const dpl_backend *b = dpl_backend_get();
  if (!b) return no_plugin("cuda.synchronize");
  return b->synchronize(index);
}

int dpl_cuda_empty_cache(int32_t index, int64_t *freed)
{
  const dpl_backend *b = dpl_backend_get();
  if (freed) *freed = 0;
  if (!b) return no_plugin("cuda.empty_cache");
  return b->empty_cache(index, freed);
}

int dpl_cuda_memory_stats(int32_t index, dpl_cuda_mem_stats *out)
{
  const dpl_backend *b = dpl_backend_get();
  if (!out) return dpl_errorf(DPL_EINVAL, "cuda.memory_stats: out is NULL");
  memset(out, 0, sizeof *out);
  if (!b) return no_plugin("cuda.memory_stats");
  return b->memory_stats(index, out);
}
