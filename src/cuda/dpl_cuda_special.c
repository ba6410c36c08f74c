/* dpl_cuda_special.c: the backend's special functions (DPL_BK_SPECIAL: lgamma, digamma,
 * polygamma, erfc, erfcx, i0/i0e/i1/i1e, ndtr/ndtri/log_ndtr, sinc, zeta, gammainc/gammaincc).
 * The core (dpl_tensor_special.c) checked the arguments, broadcast the shapes and allocated
 * the result in its dtype; here the operands become a geometry (any strides, broadcasting)
 * and the kernel of dpl_cuda_special.cu runs on the compute stream. */
#include "dpl_cuda_internal.h"

int dpl_cu_op_special(const dpl_bk_args *a)
{
  const char *name = a->name ? a->name : dpl_bk_op_name(a->op);
  dpl_tensor *out = a->inout;
  const dpl_tensor *x = a->in[0], *y = a->in[1];
  int two = a->sub >= DPL_SP_ZETA;
  if (a->sub < DPL_SP_LGAMMA || a->sub > DPL_SP_GAMMAINCC)
    return dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda", name); /* a newer core's function */
  if (!out || !x || !dpl_is_devmem(out) || !dpl_is_devmem(x) || (two && (!y || !dpl_is_devmem(y))) ||
      !dpl_is_float(out->_dtype))
    return dpl_errorf(DPL_EINVAL, "%s: expected device operands and a floating result (internal)", name);
  int32_t dev = out->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  const dpl_tensor *ops[3] = {out, x, two ? y : NULL};
  dpl_cu_geom g;
  dpl_cu_geom_init(&g, 3, ops, out->_ndim, out->_shape);
  DPL_CU_LAUNCH(dpl_cu_special(&g, a->sub, a->l[0], out->_data, out->_dtype, x->_data, x->_dtype,
                               two ? y->_data : NULL, two ? y->_dtype : out->_dtype, d->compute),
                name, dev);
  return DPL_OK;
}
