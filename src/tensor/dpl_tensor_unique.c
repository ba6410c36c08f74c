/* dpl_tensor_unique.c: unique of a tensor in device memory, composed of backend ops after
 * dpl_unique's checks (dpl_tensor_sort.c keeps the CPU's loops). All elements (dim = -1):
 * the whole tensor sorted as one row (DPL_BK_SORT: the CPU's total order, ties by position,
 * so each run of equal values starts at its first position), run starts where a value
 * differs from the one before it (NaN != NaN: a run of one, -0.0 == 0.0), the runs numbered
 * by a cumsum in 1024-long lines plus one over the line totals, one read back of the count,
 * then index_add_ / index_select build the values (the bits of each run's first element),
 * the counts and the inverse. unique along a dim (slices in lexicographic order) goes through
 * host memory: copied to the CPU, done there, the results copied back. */
#include "dpl_tensor_internal.h"

/* a new int64 tensor of n zeros on like's device (kept by z) */
static dpl_tensor *zeros_i64(dpl_dz *z, int64_t n, const dpl_tensor *like)
{
  if (z->st != DPL_OK) return NULL;
  dpl_tensor *r = NULL;
  int st = dpl_new(z->name, DPL_INT64, 1, &n, like, &r);
  if (st == DPL_OK) st = dpl_tensor_fill_(r, 0);
  if (st == DPL_OK && z->n >= DPL_DZ_MAX) st = dpl_errorf(DPL_EINVAL, "%s: too many temporaries (internal)", z->name);
  if (st != DPL_OK) {
    dpl_tensor_release(r);
    z->st = st;
    return NULL;
  }
  z->t[z->n++] = r;
  return r;
}

/* a tensor made by fn(...) kept by z */
static dpl_tensor *kept(dpl_dz *z, int st, dpl_tensor *r)
{
  if (st == DPL_OK && z->n >= DPL_DZ_MAX) st = dpl_errorf(DPL_EINVAL, "%s: too many temporaries (internal)", z->name);
  if (st != DPL_OK) {
    dpl_tensor_release(r);
    if (z->st == DPL_OK) z->st = st;
    return NULL;
  }
  z->t[z->n++] = r;
  return r;
}

static void index_add(dpl_dz *z, dpl_tensor *dst, const dpl_tensor *idx, const dpl_tensor *src)
{
  if (z->st != DPL_OK || !dst || !idx || !src) return;
  int st = dpl_index_add_(dst, 0, idx, src);
  if (st != DPL_OK) z->st = st;
}

/* a view of t (kept by z) */
static dpl_tensor *view(dpl_dz *z, const dpl_tensor *t, int32_t nd, const int64_t *shape)
{
  if (z->st != DPL_OK || !t) return NULL;
  dpl_tensor *r = NULL;
  int st = dpl_tensor_view(t, nd, shape, &r);
  return kept(z, st, r);
}
static dpl_tensor *narrow(dpl_dz *z, const dpl_tensor *t, int32_t dim, int64_t start, int64_t len)
{
  if (z->st != DPL_OK || !t) return NULL;
  dpl_tensor *r = NULL;
  int st = dpl_tensor_narrow(t, dim, start, len, &r);
  return kept(z, st, r);
}
static dpl_tensor *cumsum(dpl_dz *z, const dpl_tensor *t, int32_t dim)
{
  if (z->st != DPL_OK || !t) return NULL;
  dpl_tensor *r = NULL;
  int st = dpl_cumulative(DPL_SCAN_SUM, t, dim, DPL_INT64, 0, &r);
  return kept(z, st, r);
}
static void copy_into(dpl_dz *z, dpl_tensor *dst, const dpl_tensor *src)
{
  if (z->st != DPL_OK || !dst || !src) return;
  int st = dpl_copy_any(z->name, dst, src);
  if (st != DPL_OK) z->st = st;
}

/* the inclusive cumsum of a 1-d int64 tensor f of n elements (the backend's scan runs one thread
 * per line): lines of SCAN_LINE scanned in parallel, then the line totals, whose exclusive sums
 * are added back */
enum { SCAN_LINE = 1024 };
static dpl_tensor *cumsum_1d(dpl_dz *z, const dpl_tensor *f, int64_t n)
{
  if (z->st != DPL_OK || !f) return NULL;
  if (n <= 4 * SCAN_LINE) return cumsum(z, f, 0);
  int64_t B = (n + SCAN_LINE - 1) / SCAN_LINE, tot = B * SCAN_LINE, sh[2] = {B, SCAN_LINE};
  dpl_tensor *buf = zeros_i64(z, tot, f);
  copy_into(z, narrow(z, buf, 0, 0, n), f);
  dpl_tensor *lines = cumsum(z, view(z, buf, 2, sh), 1);              /* [B, SCAN_LINE] */
  dpl_tensor *last = narrow(z, lines, 1, SCAN_LINE - 1, 1);           /* [B, 1] line totals */
  dpl_tensor *excl = dpl_dz_bin(z, DPL_OP_SUB, cumsum(z, last, 0), last); /* [B, 1] sums before each line */
  dpl_tensor *all = dpl_dz_bin(z, DPL_OP_ADD, lines, excl);
  return narrow(z, view(z, all, 1, &tot), 0, 0, n);
}

int dpl_unique_dev(const char *name, const dpl_tensor *a, int32_t dim, dpl_tensor **out, dpl_tensor **inverse,
                   dpl_tensor **counts)
{
  if (dim != -1) { /* slices along dim: through host memory */
    dpl_tensor *h = NULL, *ho = NULL, *hi = NULL, *hc = NULL, *o = NULL, *i = NULL, *c = NULL;
    int st = dpl_tensor_to(a, a->_dtype, DPL_DEVICE_CPU, 0, &h);
    if (st == DPL_OK) st = dpl_unique(h, dim, &ho, inverse ? &hi : NULL, counts ? &hc : NULL);
    if (st == DPL_OK) st = dpl_tensor_to(ho, ho->_dtype, a->_devtype, a->_devindex, &o);
    if (st == DPL_OK && hi) st = dpl_tensor_to(hi, DPL_INT64, a->_devtype, a->_devindex, &i);
    if (st == DPL_OK && hc) st = dpl_tensor_to(hc, DPL_INT64, a->_devtype, a->_devindex, &c);
    dpl_release_n(4, (dpl_tensor *[]){h, ho, hi, hc});
    return dpl_hand_over(st, 3, (dpl_tensor *[]){o, i, c}, (dpl_tensor **[]){out, inverse, counts});
  }
  int64_t n = a->_numel, nu = 0, row[2] = {1, n};
  dpl_dz z;
  dpl_dz_init(&z, name);
  dpl_tensor *res = NULL, *inv = NULL, *cnt = NULL;
  if (n == 0) {
    int st = z.st;
    if (st == DPL_OK) st = dpl_new(name, a->_dtype, 1, &nu, a, &res);
    if (st == DPL_OK && inverse) st = dpl_new(name, DPL_INT64, a->_ndim, a->_shape, a, &inv);
    if (st == DPL_OK && counts) st = dpl_new(name, DPL_INT64, 1, &nu, a, &cnt);
    return dpl_hand_over(st, 3, (dpl_tensor *[]){res, inv, cnt}, (dpl_tensor **[]){out, inverse, counts});
  }
  /* the elements sorted as one row: values sv, their positions sp */
  dpl_tensor *flat = view(&z, dpl_dz_as(&z, a, a->_dtype), 2, row), *sv = NULL, *sp = NULL;
  if (flat) {
    dpl_bk_args k = {.op = DPL_BK_SORT, .l = {n}, .in = {flat}, .out = {&sv, &sp}, .name = name};
    int st = dpl_bk_call(&k);
    kept(&z, st, sv);
    if (st == DPL_OK) kept(&z, DPL_OK, sp);
  }
  dpl_tensor *v1 = view(&z, sv, 1, &n), *p1 = view(&z, sp, 1, &n);
  /* run starts: 1, then value t != value t - 1 */
  dpl_tensor *flags = zeros_i64(&z, n, a);
  dpl_tensor *first = narrow(&z, flags, 0, 0, 1);
  if (first) {
    int st = dpl_tensor_fill_(first, 1);
    if (st != DPL_OK) z.st = st;
  }
  if (n > 1)
    copy_into(&z, narrow(&z, flags, 0, 1, n - 1),
              dpl_dz_bin(&z, DPL_OP_NE, narrow(&z, v1, 0, 1, n - 1), narrow(&z, v1, 0, 0, n - 1)));
  dpl_tensor *rank = dpl_dz_bins(&z, DPL_OP_SUB, cumsum_1d(&z, flags, n), 1, 0); /* run of each sorted element */
  if (z.st == DPL_OK && rank) {
    int st = dpl_tensor_get_i64(rank, n - 1, &nu); /* the one read back: the output's size */
    if (st != DPL_OK) z.st = st;
    nu++;
  }
  /* each run's first sorted index, then its value (the exact bits of that element) */
  dpl_tensor *starts = zeros_i64(&z, nu, a);
  index_add(&z, starts, rank, dpl_dz_bin(&z, DPL_OP_MUL, flags, dpl_dz_arange(&z, 0, 1, n, a, 1, 0)));
  res = dpl_dz_index_select(&z, v1, 0, starts);
  if (counts) {
    cnt = zeros_i64(&z, nu, a);
    index_add(&z, cnt, rank, flags ? dpl_dz_bins(&z, DPL_OP_ADD, zeros_i64(&z, n, a), 1, 0) : NULL);
  }
  if (inverse) {
    dpl_tensor *iv = zeros_i64(&z, n, a);
    index_add(&z, iv, p1, rank);
    inv = view(&z, iv, a->_ndim, a->_shape);
  }
  if (z.st == DPL_OK) {
    dpl_dz_take(&z, res);
    if (cnt) dpl_dz_take(&z, cnt);
    if (inv) dpl_dz_take(&z, inv);
  } else {
    res = inv = cnt = NULL;
  }
  int st = dpl_dz_end(&z);
  return dpl_hand_over(st, 3, (dpl_tensor *[]){res, inv, cnt}, (dpl_tensor **[]){out, inverse, counts});
}
