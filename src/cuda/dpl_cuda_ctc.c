/* dpl_cuda_ctc.c: the backend's CTC loss (DPL_BK_CTC) and its gradient (DPL_BK_CTC_BWD). The
 * core (dpl_tensor_ctc.c) checked every argument with the CPU's messages and uploaded the
 * lengths, label offsets and labels as one int64 tensor; here the results are allocated and
 * the one-block-per-sequence kernels of dpl_cuda_ctc.cu run on the compute stream. */
#include "dpl_cuda_internal.h"

int dpl_cu_op_ctc(const dpl_bk_args *a)
{
  const char *name = a->name ? a->name : dpl_bk_op_name(a->op);
  const dpl_tensor *lp = a->in[0], *meta = a->in[1];
  int bwd = a->op == DPL_BK_CTC_BWD;
  if (!lp || !meta || !dpl_is_devmem(lp) || !dpl_is_devmem(meta) || lp->_ndim != 3 || meta->_dtype != DPL_INT64 ||
      !dpl_is_contig(meta) || (lp->_dtype != DPL_FLOAT32 && lp->_dtype != DPL_FLOAT64) || a->l[1] < 0 || !a->out[0] ||
      (!bwd && !a->out[1]))
    return dpl_errorf(DPL_EINVAL, "%s: expected device log_probs [T, N, C] and int64 lengths (internal)", name);
  int32_t dt = lp->_dtype, kd = dt == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  dpl_cu_ctc_geom g = {.T = lp->_shape[0], .N = lp->_shape[1], .C = lp->_shape[2], .st = lp->_stride[0],
                  .sn = lp->_stride[1], .sc = lp->_stride[2], .S = a->l[1], .blank = a->l[0]};
  int64_t L = 2 * g.S + 1;
  int64_t ashape[3] = {g.N, g.T, L};
  int32_t dev = lp->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  if (!bwd) {
    dpl_tensor *nll = NULL, *alpha = NULL;
    int st = dpl_cu_new(name, dt, 1, &g.N, lp, &nll);
    if (st == DPL_OK) st = dpl_cu_new(name, dt, 3, ashape, lp, &alpha);
    if (st == DPL_OK) {
      int e = dpl_cu_ctc(kd, &g, lp->_data, meta->_data, nll->_data, alpha->_data, d->compute);
      if (e) st = dpl_cu_fail((cudaError_t)e, "ctc_loss kernel", dev);
    }
    return dpl_hand_over(st, 2, (dpl_tensor *[]){nll, alpha}, a->out);
  }
  const dpl_tensor *grad = a->in[2], *nll = a->in[3], *alpha = a->in[4];
  if (!grad || !nll || !alpha || !dpl_is_devmem(grad) || !dpl_is_devmem(nll) || !dpl_is_devmem(alpha) ||
      grad->_dtype != dt || nll->_dtype != dt || alpha->_dtype != dt || !dpl_is_contig(nll) || !dpl_is_contig(alpha) ||
      grad->_ndim > 1)
    return dpl_errorf(DPL_EINVAL, "%s: expected the forward's nll and log_alpha and a grad on the device (internal)", name);
  g.gstride = grad->_ndim == 1 ? grad->_stride[0] : 0;
  g.zero_infinity = a->i[0] != 0;
  dpl_tensor *gl = NULL, *beta = NULL;
  int st = dpl_cu_new(name, dt, 3, lp->_shape, lp, &gl);
  if (st == DPL_OK) st = dpl_cu_new(name, dt, 3, ashape, lp, &beta);
  if (st == DPL_OK) {
    int e = dpl_cu_ctc_bwd(kd, &g, lp->_data, meta->_data, grad->_data, nll->_data, alpha->_data, beta->_data,
                           gl->_data, d->compute);
    if (e) st = dpl_cu_fail((cudaError_t)e, "ctc_loss backward kernel", dev);
  }
  dpl_tensor_release(beta); /* (stream-ordered: the cache hands it out only to later work) */
  return dpl_hand_over(st, 1, &gl, a->out);
}
