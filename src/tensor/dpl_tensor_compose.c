/* dpl_tensor_compose.c: helpers for ops that run on tensors in device memory as
 * compositions of ops the backend already runs (binary, unary, where, copies,
 * index_select, ...), after the op's own checks in the core (lerp, addcmul,
 * nan_to_num, isclose in dpl_tensor_math.c; flip, roll, tril/triu in
 * dpl_tensor_scan.c). A dpl_dz holds the temporaries of one composition: every
 * helper returns NULL once a step has failed (the first failure's status is
 * kept), dpl_dz_take hands one result to the caller, dpl_dz_end releases the rest. */
#include "dpl_tensor_internal.h"

static dpl_tensor *keep(dpl_dz *z, int st, dpl_tensor *t)
{
  if (st != DPL_OK) {
    if (z->st == DPL_OK) z->st = st;
    dpl_tensor_release(t);
    return NULL;
  }
  if (z->n >= DPL_DZ_MAX) {
    dpl_tensor_release(t);
    z->st = dpl_errorf(DPL_EINVAL, "%s: too many temporaries in a composed op (internal)", z->name);
    return NULL;
  }
  z->t[z->n++] = t;
  return t;
}

/* without the plugin no step can run: the op fails at once under its own name */
void dpl_dz_init(dpl_dz *z, const char *name)
{
  z->n = 0;
  z->st = DPL_OK;
  z->name = name;
  if (!dpl_backend_get())
    z->st = dpl_errorf(DPL_ENOTIMPL, "%s: not implemented on cuda (the CUDA plugin is not loaded)", name);
}

dpl_tensor *dpl_dz_bin(dpl_dz *z, int32_t op, const dpl_tensor *a, const dpl_tensor *b)
{
  if (z->st != DPL_OK || !a || !b) return NULL;
  dpl_tensor *r = NULL;
  int st = dpl_binary(op, a, b, &r);
  return keep(z, st, r);
}

dpl_tensor *dpl_dz_bins(dpl_dz *z, int32_t op, const dpl_tensor *a, double s, int32_t reverse)
{
  if (z->st != DPL_OK || !a) return NULL;
  dpl_tensor *r = NULL;
  int st = dpl_binary_scalar(op, a, s, reverse, &r);
  return keep(z, st, r);
}

dpl_tensor *dpl_dz_un(dpl_dz *z, int32_t op, const dpl_tensor *a)
{
  if (z->st != DPL_OK || !a) return NULL;
  dpl_tensor *r = NULL;
  int st = dpl_unary(op, a, &r);
  return keep(z, st, r);
}

dpl_tensor *dpl_dz_where(dpl_dz *z, const dpl_tensor *c, const dpl_tensor *a, const dpl_tensor *b)
{
  if (z->st != DPL_OK || !c || !a || !b) return NULL;
  dpl_tensor *r = NULL;
  int st = dpl_where(c, a, b, &r);
  return keep(z, st, r);
}

dpl_tensor *dpl_dz_as(dpl_dz *z, const dpl_tensor *t, int32_t dtype)
{
  if (z->st != DPL_OK || !t) return NULL;
  dpl_tensor *r = NULL;
  int st = dpl_contig_as(z->name, t, dtype, &r);
  return keep(z, st, r);
}

/* a new contiguous copy (never a view of t) */
dpl_tensor *dpl_dz_clone(dpl_dz *z, const dpl_tensor *t, int32_t dtype)
{
  if (z->st != DPL_OK || !t) return NULL;
  dpl_tensor *r = NULL;
  int st = dpl_new(z->name, dtype, t->_ndim, t->_shape, t, &r);
  if (st == DPL_OK) st = dpl_copy_any(z->name, r, t);
  return keep(z, st, r);
}

/* start, start + step, ... (n of them) as int64 on like's device, of shape [n] viewed as nd dims
 * with n at dim d (the others 1) */
dpl_tensor *dpl_dz_arange(dpl_dz *z, int64_t start, int64_t step, int64_t n, const dpl_tensor *like, int32_t nd,
                          int32_t d)
{
  if (z->st != DPL_OK || !like) return NULL;
  dpl_tensor *r = NULL;
  int st = dpl_tensor_arange((double)start, (double)step, n, DPL_INT64, like->_devtype, like->_devindex, &r);
  if (!keep(z, st, r)) return NULL;
  int64_t shape[DPL_MAX_DIMS];
  for (int32_t i = 0; i < nd; i++) shape[i] = i == d ? n : 1;
  dpl_tensor *v = NULL;
  st = dpl_tensor_view(r, nd, shape, &v);
  return keep(z, st, v);
}

dpl_tensor *dpl_dz_index_select(dpl_dz *z, const dpl_tensor *a, int32_t dim, const dpl_tensor *idx)
{
  if (z->st != DPL_OK || !a || !idx) return NULL;
  dpl_tensor *r = NULL;
  int st = dpl_index_select(a, dim, idx, &r);
  return keep(z, st, r);
}

/* in place: a[mask] = value */
void dpl_dz_masked_fill_(dpl_dz *z, dpl_tensor *a, const dpl_tensor *mask, double value)
{
  if (z->st != DPL_OK || !a || !mask) return;
  int st = dpl_masked_fill_(a, mask, value);
  if (st != DPL_OK) z->st = st;
}

/* the result t (one of z's) handed to the caller: z no longer releases it */
dpl_tensor *dpl_dz_take(dpl_dz *z, dpl_tensor *t)
{
  for (int i = 0; i < z->n; i++)
    if (z->t[i] == t) {
      z->t[i] = NULL;
      return t;
    }
  return NULL;
}

/* releases z's temporaries; returns the first failure's status (DPL_OK) */
int dpl_dz_end(dpl_dz *z)
{
  dpl_release_n(z->n, z->t);
  z->n = 0;
  return z->st;
}
