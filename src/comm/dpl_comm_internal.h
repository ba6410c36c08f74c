/* dpl_comm_internal.h: what the collectives' C files share and Lua never sees:
 * the comm object (a backend vtable plus the state common to all backends), the
 * collective descriptor used for mismatch checks, and the reduction kernels. */
#ifndef DPL_COMM_INTERNAL_H
#define DPL_COMM_INTERNAL_H
#include "dpl.h"
#include "dpl_internal.h"
#include <stddef.h>
#include <stdint.h>

/* Kinds of collective, as recorded in descriptors and error messages. */
enum {
  DPL_K_BARRIER = 1, DPL_K_ALL_REDUCE, DPL_K_REDUCE, DPL_K_BROADCAST, DPL_K_ALL_GATHER,
  DPL_K_GATHER, DPL_K_SCATTER, DPL_K_REDUCE_SCATTER,
  DPL_K_NEW_GROUP /* the exchange of the ranks' lists before a subgroup is made (an all_gather) */
};

/* One collective call as this rank sees it (compared across ranks). */
typedef struct dpl_coll_desc {
  uint64_t seq;    /* 1-based number of the collective in this group */
  int64_t count;   /* elements per rank (the per-rank block for gathers/scatters) */
  int32_t kind;    /* DPL_K_* */
  int32_t dtype;
  int32_t op;      /* dpl_comm_op, -1 when none */
  int32_t root;    /* group rank, -1 when none */
} dpl_coll_desc;

typedef struct dpl_comm_ops dpl_comm_ops;

struct dpl_comm {
  const dpl_comm_ops *ops;
  int32_t backend;     /* dpl_comm_backend */
  int32_t rank, size;  /* in this group */
  double timeout_s;
  int32_t check;       /* DPL_COMM_CHECK: compare descriptors before moving data */
  int32_t failed;      /* a collective failed: the group is unusable */
  uint64_t seq;        /* collectives issued so far */
  uint32_t groups;     /* new_group calls made on this comm (names subgroups) */
  char job[160];       /* shm: the job part of the segment name */
  char failmsg[512];   /* the first failure, repeated by later calls */
  void *impl;          /* backend state */
};

struct dpl_comm_ops {
  int (*barrier)(dpl_comm *c, const dpl_coll_desc *d);
  int (*all_reduce)(dpl_comm *c, const dpl_coll_desc *d, void *buf);
  /* several buffers as one (their concatenation; d->count is the total); NULL: the
   * common layer packs them into one buffer and unpacks the result */
  int (*all_reduce_multi)(dpl_comm *c, const dpl_coll_desc *d, void *const *bufs, const int64_t *counts,
                          int32_t nbufs);
  int (*reduce)(dpl_comm *c, const dpl_coll_desc *d, void *buf);
  int (*broadcast)(dpl_comm *c, const dpl_coll_desc *d, void *buf);
  int (*all_gather)(dpl_comm *c, const dpl_coll_desc *d, const void *send, void *recv);
  int (*gather)(dpl_comm *c, const dpl_coll_desc *d, const void *send, void *recv);
  int (*scatter)(dpl_comm *c, const dpl_coll_desc *d, const void *send, void *recv);
  int (*reduce_scatter)(dpl_comm *c, const dpl_coll_desc *d, const void *send, void *recv);
  /* DPL_COMM_CHECK round: every rank compares d with everyone's. */
  int (*check)(dpl_comm *c, const dpl_coll_desc *d);
  int (*new_group)(dpl_comm *parent, int32_t n, const int32_t *ranks, int32_t my_index, dpl_comm **out);
  int (*abort)(dpl_comm *c, const char *reason);
  void (*destroy)(dpl_comm *c);
};

/* dpl_comm.c */
const char *dpl_comm_kind_name(int32_t kind);
const char *dpl_comm_op_name(int32_t op);
/* "all_reduce #5 (float32 x 1024, sum)" into buf. */
const char *dpl_comm_desc_str(const dpl_coll_desc *d, char *buf, size_t n);
/* Compares every rank's descriptor with rank 0's; on a mismatch writes the
 * message naming both sides into msg and returns DPL_ECOMM. */
int dpl_comm_compare_descs(const dpl_coll_desc *all, int32_t n, char *msg, size_t msglen);
dpl_comm *dpl_comm_alloc(const dpl_comm_ops *ops, int32_t backend, int32_t rank, int32_t size,
                         double timeout_s, int32_t check);
double dpl_comm_env_timeout(void);

/* dpl_comm_kernels.c: dst[i] = srcs[0][i] op srcs[1][i] op ... (sources in
 * rank order, so every rank computes bitwise the same result); AVG divides the
 * sum by nsrc_total (the group size). Half types accumulate in float32. dst may
 * equal srcs[0]. */
int dpl_comm_reduce_n(void *dst, const void *const *srcs, int32_t nsrc, int64_t n, int32_t dtype,
                      int32_t op, int32_t avg_div);
/* Checks that op applies to dtype (AVG needs a floating type). */
int dpl_comm_op_valid(int32_t op, int32_t dtype);
int64_t dpl_comm_dtype_size(int32_t dtype);
/* float16 (IEEE half) / bfloat16 <-> float32, rounding to nearest even. */
void dpl_comm_half_to_f32(float *dst, const void *src, int64_t n, int32_t dtype);
void dpl_comm_f32_to_half(void *dst, const float *src, int64_t n, int32_t dtype);
const char *dpl_comm_dtype_name(int32_t dtype);

/* dpl_comm_shm_*.c */
int dpl_comm_shm_create(const char *job, const char *group, int32_t rank, int32_t size,
                        double timeout_s, int32_t check, uint64_t members_hash, dpl_comm **out);
/* dpl_comm_mpi.c */
int dpl_comm_mpi_create(double timeout_s, int32_t check, dpl_comm **out);
#endif
