/* dpl_comm_shm.h: layout of a shm group's segment and the waiting primitives
 * shared by dpl_comm_shm.c (segment, rendezvous, waits, liveness) and
 * dpl_comm_shm_coll.c (the collective algorithms).
 *
 * Segment: header | one control block per rank | data: 2 buffers x size slots
 * of slot_bytes. Each rank owns a monotonically increasing step counter (also
 * its futex word); every rank of a matching call sequence makes the same
 * increments, so "rank j finished phase X" is "step[j] >= X". Waiting spins a
 * little, then sleeps on the futex (woken by the signalling rank), checking
 * every 100 ms the abort flag, the deadline, signals and whether the peers are
 * alive. */
#ifndef DPL_COMM_SHM_H
#define DPL_COMM_SHM_H
#include "dpl_comm_internal.h"
#include <stdatomic.h>
#include <sys/types.h>

#define DPL_SHM_MAGIC 0x31304d4853504c44ULL /* "DLPSHM01" */

enum { RANK_EMPTY = 0, RANK_JOINED = 1, RANK_LEFT = 2, RANK_FAILED = 3 };

/* A call's descriptor as published in the segment (compact: it shares the
 * step counter's cache line, so a peer reads both with one transfer). */
typedef struct shm_desc {
  uint32_t seq;              /* low 32 bits */
  uint8_t kind, dtype, op, pad; /* 255: none */
  int32_t root;
  int32_t pad2;
  int64_t count;
} shm_desc;

typedef struct shm_rank_ctl {
  /* line 0: written by the owner only */
  _Atomic uint32_t step;     /* futex word */
  uint32_t pad0;
  shm_desc desc[2];          /* descriptor of the current call, by seq parity */
  char pad1[64 - 8 - 2 * sizeof(shm_desc)];
  /* line 1: waiters, liveness */
  _Atomic uint32_t waiters;  /* ranks sleeping on step */
  _Atomic int32_t pid;
  _Atomic uint32_t state;    /* RANK_* */
  uint32_t pad2;
  uint64_t starttime;        /* /proc/<pid>/stat field 22, guards against pid reuse */
  char pad3[256 - 64 - 24];
} shm_rank_ctl;

typedef struct shm_header {
  _Atomic uint64_t magic;    /* written last by the creator */
  uint32_t version, world_size;
  uint64_t slot_bytes, total_bytes, members_hash, nonce;
  int32_t creator_pid;
  uint32_t pad0;
  uint64_t creator_start;
  _Atomic uint32_t attached; /* ranks that mapped the segment */
  _Atomic uint32_t ready;    /* 1 once everyone attached and the name is unlinked */
  _Atomic uint32_t abort_flag; /* 0 none, 1 being written, 2 message readable */
  int32_t abort_rank;
  char abort_msg[512];
  /* rank 0's choice of slot stores for large all_reduces (dpl_comm_shm_coll.c): bit 0
   * streaming, bit 1 probe the other every 128 calls instead of 32 */
  _Atomic uint32_t slot_pref;
} shm_header;

typedef struct shm_impl {
  shm_header *hdr;
  shm_rank_ctl *ctl;
  uint8_t *data;
  size_t map_bytes;
  uint64_t slot_bytes;
  char name[200];            /* shm_open name */
  int named;                 /* the name may still exist (before ready) */
  int creator;
  uint32_t my_step;          /* local copy of ctl[rank].step */
  uint32_t buf_free[2];      /* step every rank must reach before buffer b is reused */
  uint32_t known_all;        /* every rank is known to have reached this step */
  uint64_t chunk_no;
  int spin_us;               /* busy-wait this long before sleeping (DPL_COMM_SPIN_US) */
  int yield_us;              /* then sched_yield this long (DPL_COMM_YIELD_US; oversubscribed) */
  double deadline;           /* of the current call */
  double next_check;
  double left_seen;          /* when a departed peer was first seen still alive (this call) */
  const dpl_coll_desc *cur;  /* the call being waited in (for messages) */
  /* how a large all_reduce writes what the peers read (dpl_comm_shm_coll.c, slot_stores):
   * -1 chosen by measure, 0 plain stores, 1 streaming stores (DPL_COMM_SLOT_NT) */
  int slot_nt_forced;
  int slot_back;             /* own reduced part written back in the reducing pass (DPL_COMM_BACK=0: copied out) */
  uint64_t slot_calls;       /* large all_reduce/reduce calls so far */
  double slot_cost[2];       /* running mean of µs per MiB with plain (0) and streaming (1) stores */
} shm_impl;

static inline shm_impl *SHM(dpl_comm *c) { return (shm_impl *)c->impl; }
static inline uint8_t *shm_slot(shm_impl *s, int buf, int rank, int size)
{
  return s->data + ((size_t)buf * (size_t)size + (size_t)rank) * s->slot_bytes;
}

/* dpl_comm_shm.c */
void shm_signal(dpl_comm *c);
int shm_wait_rank(dpl_comm *c, int j, uint32_t target);
int shm_wait_all(dpl_comm *c, uint32_t target);
/* Starts a call: sets the deadline. */
void shm_start(dpl_comm *c, const dpl_coll_desc *d);
/* DPL_EINTR (the group failed) when a signal is stopping the script, else DPL_OK. */
int shm_check_signal(dpl_comm *c);
/* Publishes d (before the first signal of a call) / compares everyone's after the first wait_all. */
void shm_put_desc(dpl_comm *c, const dpl_coll_desc *d);
int shm_verify_descs(dpl_comm *c, const dpl_coll_desc *d);
/* Sets the group's abort flag with msg (first one wins) and wakes everyone. */
/* DPL_ECOMM with the abort message another rank left in the segment. */
int shm_abort_error(dpl_comm *c);
void shm_set_abort(dpl_comm *c, const char *msg);
/* Buffer handling per chunk. */
int shm_begin_chunk(dpl_comm *c, int *buf);
void shm_end_chunk(dpl_comm *c, int buf);

int dpl_shm_check(dpl_comm *c, const dpl_coll_desc *d);
int dpl_shm_new_group(dpl_comm *p, int32_t n, const int32_t *r, int32_t me, dpl_comm **out);
int dpl_shm_abort(dpl_comm *c, const char *reason);
void dpl_shm_destroy(dpl_comm *c);

/* dpl_comm_shm_coll.c */
extern const dpl_comm_ops dpl_shm_ops;
#endif
