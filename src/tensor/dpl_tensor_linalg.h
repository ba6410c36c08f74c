/* dpl_tensor_linalg.h: what the CPU (dpl_tensor_linalg.c) and GPU (dpl_tensor_linalg_dev.c)
 * paths of dpl.linalg's factorizations share: the checked matrix-batch geometry of an input,
 * fresh results of its batch shape, and the device entry points, which the public
 * dpl_linalg_* functions call after their checks when an input is in device memory. */
#ifndef DPL_TENSOR_LINALG_H
#define DPL_TENSOR_LINALG_H
#include "dpl_tensor_internal.h"

typedef struct dpl_mats {
  int32_t dt, nb; /* dtype; batch dims */
  int64_t m, n, count, es;
  int64_t bshape[DPL_MAX_DIMS];
} dpl_mats;

/* A live float32/float64 tensor (any device) with at least 2 dims (square when asked):
 * its matrix sizes (which LAPACK's int must hold) and batch count. */
int dpl_la_check(const char *op, const char *what, const dpl_tensor *a, int square, dpl_mats *q);
/* a fresh tensor on like's device (NULL: the CPU) of q's batch shape followed by up to two
 * more sizes (r, c; -1: absent) */
int dpl_la_new(const char *op, const dpl_mats *q, int32_t dt, int64_t r, int64_t c, const dpl_tensor *like,
               dpl_tensor **out);

/* the device paths (inputs checked, on one device; results on it, info on the host) */
int dpl_la_lu_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, dpl_tensor **lu, dpl_tensor **piv,
                  dpl_tensor **info);
int dpl_la_solve_dev(const char *op, const dpl_mats *qa, const dpl_mats *qb, const dpl_tensor *a,
                     const dpl_tensor *b, dpl_tensor **x, dpl_tensor **info);
int dpl_la_inv_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, dpl_tensor **x, dpl_tensor **info);
int dpl_la_det_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, dpl_tensor **det, dpl_tensor **sign,
                   dpl_tensor **logabsdet);
int dpl_la_lu_solve_dev(const char *op, const dpl_mats *qa, const dpl_mats *qb, const dpl_tensor *lu,
                        const dpl_tensor *pivots, const dpl_tensor *b, int32_t trans, dpl_tensor **x);
int dpl_la_cholesky_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, int32_t upper, dpl_tensor **l,
                        dpl_tensor **info);
int dpl_la_geqrf_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, dpl_tensor **qr, dpl_tensor **tau);
int dpl_la_qr_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, int32_t mode, dpl_tensor **qo,
                  dpl_tensor **ro);
int dpl_la_eigh_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, int32_t upper, int32_t vectors,
                    dpl_tensor **w, dpl_tensor **v, dpl_tensor **info);
int dpl_la_svd_dev(const char *op, const dpl_mats *q, const dpl_tensor *a, int32_t full, int32_t uv, dpl_tensor **u,
                   dpl_tensor **s, dpl_tensor **vh, dpl_tensor **info);
int dpl_la_trsm_dev(const char *op, const dpl_mats *qa, const dpl_mats *qb, const dpl_tensor *a, const dpl_tensor *b,
                    int32_t upper, int32_t left, int32_t unit, dpl_tensor **x);
#endif
