/* dpl_cuda_norm.c: the backend's layer norm (DPL_BK_LAYER_NORM and its
 * backward): inputs made contiguous in float32/float64 (float16/bfloat16
 * through float32, as on the CPU), the row kernels of dpl_cuda_norm.cu, the
 * results converted back to the input's (weight's) dtype. The core validated
 * shapes, dtypes and devices (dpl_tensor_norm.c). */
#include "dpl_cuda_internal.h"

#define TRYC(x) do { if (st == DPL_OK) st = (x); } while (0)
#define LAUNCH(call, what) \
  do { if (st == DPL_OK) { int e_ = (call); if (e_ != 0) st = dpl_cu_fail((cudaError_t)e_, what, dev); } } while (0)



static int ln_fwd(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev)
{
  const char *name = a->name;
  const dpl_tensor *x = a->in[0], *w = a->in[1], *b = a->in[2];
  int64_t n = a->l[0], rows = x->_numel / n;
  int32_t kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  dpl_tensor *cx = NULL, *cw = NULL, *cb = NULL, *y = NULL, *m = NULL, *r = NULL;
  int st = dpl_contig_as(name, x, kd, &cx);
  if (w) TRYC(dpl_contig_as(name, w, kd, &cw));
  if (b) TRYC(dpl_contig_as(name, b, kd, &cb));
  TRYC(dpl_cu_new(name, kd, x->_ndim, x->_shape, x, &y));
  TRYC(dpl_cu_new(name, kd, 1, &rows, x, &m));
  TRYC(dpl_cu_new(name, kd, 1, &rows, x, &r));
  LAUNCH(dpl_cu_layer_norm(kd, cx ? cx->_data : NULL, cw ? cw->_data : NULL, cb ? cb->_data : NULL,
                           y ? y->_data : NULL, m ? m->_data : NULL, r ? r->_data : NULL, rows, n, a->d[0],
                           d->compute),
         "layer_norm kernel");
  TRYC(dpl_retype(name, &y, x->_dtype));
  dpl_release_n(3, (dpl_tensor *[]){cx, cw, cb});
  return dpl_hand_over(st, 3, (dpl_tensor *[]){y, m, r}, a->out);
}

static int ln_bwd(const dpl_bk_args *a, dpl_cu_dev *d, int32_t dev)
{
  const char *name = a->name;
  const dpl_tensor *g = a->in[0], *x = a->in[1], *mean = a->in[2], *rstd = a->in[3], *w = a->in[4];
  int64_t rows = mean->_numel, n = rows ? x->_numel / rows : w->_numel; /* the core checked: a weight when empty */
  int32_t kd = x->_dtype == DPL_FLOAT64 ? DPL_FLOAT64 : DPL_FLOAT32;
  int want_w = a->out[1] != NULL, want_b = a->out[2] != NULL;
  const int64_t *pshape = w ? w->_shape : &n;
  int32_t pnd = w ? w->_ndim : 1, pd = w ? w->_dtype : x->_dtype;
  int64_t parts = dpl_cu_layer_norm_parts(rows), sbytes = 2 * parts * n * (int64_t)sizeof(double);
  dpl_tensor *cx = NULL, *cg = NULL, *cw = NULL, *cm = NULL, *cr = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
  void *scratch = NULL;
  int st = dpl_contig_as(name, x, kd, &cx);
  TRYC(dpl_contig_as(name, g, kd, &cg));
  if (w) TRYC(dpl_contig_as(name, w, kd, &cw));
  TRYC(dpl_contig_as(name, mean, kd, &cm));
  TRYC(dpl_contig_as(name, rstd, kd, &cr));
  TRYC(dpl_cu_new(name, kd, x->_ndim, x->_shape, x, &gx));
  if (want_w) TRYC(dpl_cu_new(name, kd, pnd, pshape, x, &gw));
  if (want_b) TRYC(dpl_cu_new(name, kd, pnd, pshape, x, &gb));
  if (st == DPL_OK)
    LAUNCH(dpl_cu_layer_norm_bwd(kd, cg->_data, cx->_data, cm->_data, cr->_data, cw ? cw->_data : NULL, gx->_data, rows,
                                 n, d->compute),
           "layer_norm_backward kernel");
  if (want_w || want_b) {
    TRYC(dpl_cu_scratch(dev, sbytes, &scratch));
    if (st == DPL_OK)
      LAUNCH(dpl_cu_layer_norm_cols(kd, cg->_data, cx->_data, cm->_data, cr->_data, gw ? gw->_data : NULL,
                                    gb ? gb->_data : NULL, rows, n, (double *)scratch, d->compute),
             "layer_norm_backward weight kernel");
    if (scratch) dpl_cu_scratch_free(dev, scratch, sbytes);
  }
  TRYC(dpl_retype(name, &gx, x->_dtype));
  TRYC(dpl_retype(name, &gw, pd));
  TRYC(dpl_retype(name, &gb, pd));
  dpl_release_n(5, (dpl_tensor *[]){cx, cg, cw, cm, cr});
  return dpl_hand_over(st, 3, (dpl_tensor *[]){gx, gw, gb}, a->out);
}

int dpl_cu_op_layer_norm(const dpl_bk_args *a)
{
  const char *name = a->name ? a->name : dpl_bk_op_name(a->op);
  for (int k = 0; k < 5; k++)
    if (a->in[k] && !dpl_is_devmem(a->in[k]))
      return dpl_errorf(DPL_EDEVICE, "%s: expected all tensors on the same device, got a cpu tensor with cuda ones",
                        name);
  int32_t dev = a->op == DPL_BK_LAYER_NORM ? a->in[0]->_devindex : a->in[1]->_devindex;
  dpl_cu_dev *d = dpl_cu_device(dev, name);
  if (!d) return DPL_EDEVICE;
  return a->op == DPL_BK_LAYER_NORM ? ln_fwd(a, d, dev) : ln_bwd(a, d, dev);
}
