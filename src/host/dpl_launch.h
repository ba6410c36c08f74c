/* dpl_launch.h: options of the multi-process launcher (dpl_launch.c). */
#ifndef DPL_LAUNCH_H
#define DPL_LAUNCH_H

typedef struct dpl_launch_opts {
  int nproc;               /* ranks on this node */
  int nnodes;              /* nodes in the job */
  int node_rank;           /* this node, 0-based */
  const char *master_addr; /* rendezvous host (default 127.0.0.1) */
  int master_port;         /* 0: a free port (one node) or 29500 (several) */
  int log_all_ranks;       /* INFO output from every rank, not only rank 0 */
  double grace_s;          /* SIGTERM -> SIGKILL delay when stopping ranks */
  int max_restarts;        /* a failed rank restarts all ranks up to this many times (one node) */
} dpl_launch_opts;

/* Runs the job; child_argv is the host command line each rank executes
 * (argv[0], host options, script, args; NULL-terminated). When a rank fails (not a
 * signal to the launcher) and restarts are left, stops the others and starts all
 * ranks again (DPL_RESTART_COUNT / TORCHELASTIC_RESTART_COUNT tell the attempt).
 * Returns the exit status of the last attempt. */
int dpl_launch(const dpl_launch_opts *o, char **child_argv);

/* In a rank started by the launcher: the global rank whose failure made the launcher stop
 * the other ranks (it says so before it sends them SIGTERM), or -1 when it has not (no
 * failure, a signal forwarded from the user or SLURM, not under the launcher). */
int dpl_launch_failed_rank(void);
#endif
