/* dpl_cuda_optim.c: DPL_BK_OPTIM_MULTI, multi-tensor optimizer steps on one
 * device: the core has validated the lists (dpl_tensor_optim.c); here the
 * tensors are cut into chunks of DPL_CU_OPT_CHUNK elements and packed into
 * kernel-parameter tables (dpl_cu_optim_tab), one launch of
 * dpl_cuda_optim.cu's kernel per full table, on the compute stream. */
#include "dpl_cuda_internal.h"

int dpl_cu_op_optim(const dpl_bk_args *a)
{
  const dpl_bk_optim *o = a->optim;
  const char *name = a->name ? a->name : "optim_step_multi";
  if (!o || (o->kind != DPL_OPTIM_SGD && o->kind != DPL_OPTIM_ADAM))
    return dpl_errorf(DPL_EINVAL, "%s: bad optimizer arguments", name);
  if (o->dtype != DPL_FLOAT32 && o->dtype != DPL_FLOAT64)
    return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda for %s tensors", name, dpl_dtype_name(o->dtype));
  int32_t dev = o->devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  dpl_cu_optim_hp hp = {.kind = o->kind, .dt = o->dtype, .maximize = o->maximize, .nesterov = o->nesterov,
                        .decoupled = o->decoupled, .amsgrad = o->amsgrad, .has_wd = o->weight_decay != 0,
                        .has_buf = o->kind == DPL_OPTIM_SGD && o->s0 != NULL, .neg_lr = o->neg_lr,
                        .momentum = o->momentum, .damp1 = o->damp1, .weight_decay = o->weight_decay,
                        .beta1 = o->beta1, .omb1 = o->omb1, .beta2 = o->beta2, .omb2 = o->omb2, .eps = o->eps,
                        .decay = o->decay};
  dpl_cu_optim_tab tab;
  memset(&tab, 0, sizeof tab);
  for (int32_t k = 0; k < o->n; k++) {
    dpl_tensor *p = o->param[k];
    for (int32_t j = 0; j < 5; j++) {
      const dpl_tensor *t = j == 0 ? p : j == 1 ? o->grad[k] : j == 2 ? (o->s0 ? o->s0[k] : NULL)
                            : j == 3 ? (o->s1 ? o->s1[k] : NULL) : (o->s2 ? o->s2[k] : NULL);
      if (t && !dpl_is_devmem(t))
        return dpl_errorf(DPL_EDEVICE, "%s: expected all tensors on the same device, got a cpu tensor with cuda ones",
                          name);
    }
    int64_t ne = p->_numel, chunks = (ne + DPL_CU_OPT_CHUNK - 1) / DPL_CU_OPT_CHUNK;
    if (ne == 0) continue;
    int32_t ti = -1;
    for (int64_t c = 0; c < chunks; c++) {
      if (ti < 0) {
        ti = tab.ntensors++;
        tab.p[ti] = p->_data;
        tab.g[ti] = o->grad[k]->_data;
        tab.s0[ti] = o->s0 ? o->s0[k]->_data : NULL;
        tab.s1[ti] = o->s1 ? o->s1[k]->_data : NULL;
        tab.s2[ti] = o->s2 ? o->s2[k]->_data : NULL;
        tab.numel[ti] = ne;
        if (o->kind == DPL_OPTIM_SGD) tab.a[ti] = o->init && o->init[k] ? 1 : 0;
        else tab.a[ti] = o->step_size[k], tab.b[ti] = o->bc2_sqrt[k];
      }
      tab.blk_tensor[tab.nblocks] = (uint8_t)ti;
      tab.blk_chunk[tab.nblocks] = (int32_t)c;
      tab.nblocks++;
      int last_chunk = c == chunks - 1;
      if (tab.nblocks == DPL_CU_OPT_BLOCKS || (last_chunk && tab.ntensors == DPL_CU_OPT_TENSORS)) {
        DPL_CU_LAUNCH(dpl_cu_optim(&hp, &tab, d->compute), name, dev);
        /* a tensor cut here goes on as entry 0 of the next table */
        int carry = !last_chunk;
        tab.nblocks = 0;
        tab.ntensors = 0;
        if (carry) {
          tab.p[0] = tab.p[ti], tab.g[0] = tab.g[ti], tab.s0[0] = tab.s0[ti], tab.s1[0] = tab.s1[ti];
          tab.s2[0] = tab.s2[ti], tab.numel[0] = tab.numel[ti], tab.a[0] = tab.a[ti], tab.b[0] = tab.b[ti];
          tab.ntensors = 1;
          ti = 0;
        }
      }
    }
  }
  if (tab.nblocks > 0) DPL_CU_LAUNCH(dpl_cu_optim(&hp, &tab, d->compute), name, dev);
  return DPL_OK;
}
