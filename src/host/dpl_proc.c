/* dpl_proc.c: process primitives for Lua (dist.spawn, DataLoader workers): fork
 * with the child tied to its parent's life, waiting with a timeout, signals, a
 * quick exit that skips the atexit cleanups (a forked worker must not run its
 * parent's), setenv, and the setup of a forked DataLoader worker. */
#define _GNU_SOURCE
#include "dpl.h"
#include "dpl_internal.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* fork() with the child tied to its parent's life (SIGTERM when the parent
 * dies; a child whose parent is already gone exits at once) */
static pid_t fork_tied(void)
{
  pid_t parent = getpid();
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1); /* the parent is already gone */
    dpl_signals_after_fork(); /* the parent's held or pending signal is not the child's */
  }
  return pid;
}

int dpl_proc_fork(int32_t *pid_out)
{
  if (!pid_out) return dpl_errorf(DPL_EINVAL, "dpl_proc_fork: pid_out is NULL");
  pid_t pid = fork_tied();
  if (pid < 0) return dpl_errorf(DPL_EIO, "fork failed: %s", strerror(errno));
  *pid_out = (int32_t)pid;
  return DPL_OK;
}

int dpl_proc_wait(int32_t pid, double timeout_s, int32_t *pid_out, int32_t *code_out)
{
  if (!pid_out || !code_out) return dpl_errorf(DPL_EINVAL, "dpl_proc_wait: NULL out-pointer");
  double deadline = timeout_s < 0 ? -1 : dpl_clock() + timeout_s;
  for (;;) {
    int st = 0;
    pid_t r = waitpid((pid_t)pid, &st, WNOHANG);
    if (r > 0) {
      *pid_out = (int32_t)r;
      *code_out = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? -WTERMSIG(st) : -1;
      return DPL_OK;
    }
    if (r < 0 && errno != EINTR) return dpl_errorf(DPL_EINVAL, "waitpid(%d): %s", (int)pid, strerror(errno));
    if (dpl_signal_received()) return dpl_errorf(DPL_EINTR, "interrupted while waiting for child processes");
    if (deadline >= 0 && dpl_clock() >= deadline) return DPL_ETIMEOUT;
    struct timespec ts = {0, 2000000}; /* 2 ms */
    nanosleep(&ts, NULL);
  }
}

int dpl_proc_kill(int32_t pid, int32_t sig)
{
  if (pid <= 0) return dpl_errorf(DPL_EINVAL, "dpl_proc_kill: bad pid %d", (int)pid);
  if (kill((pid_t)pid, sig) != 0 && errno != ESRCH)
    return dpl_errorf(DPL_EIO, "kill(%d, %d): %s", (int)pid, (int)sig, strerror(errno));
  return DPL_OK;
}

void dpl_proc_exit(int32_t code)
{
  fflush(NULL);
  _exit(code);
}

int32_t dpl_proc_getpid(void) { return (int32_t)getpid(); }

int dpl_proc_setenv(const char *name, const char *value)
{
  if (!name || !*name || strchr(name, '=')) return dpl_errorf(DPL_EINVAL, "setenv: bad variable name");
  int r = value ? setenv(name, value, 1) : unsetenv(name);
  if (r != 0) return dpl_errorf(DPL_EIO, "setenv(%s): %s", name, strerror(errno));
  return DPL_OK;
}

int dpl_proc_spawn_self(const char *const *argv, int32_t *pid_out)
{
  if (!argv || !argv[0] || !pid_out) return dpl_errorf(DPL_EINVAL, "dpl_proc_spawn_self: argv and pid_out are required");
  pid_t pid = fork_tied();
  if (pid < 0) return dpl_errorf(DPL_EIO, "fork failed: %s", strerror(errno));
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGUSR1, SIG_DFL);
    execv("/proc/self/exe", (char *const *)argv);
    fprintf(stderr, "dplhost: cannot start %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  *pid_out = (int32_t)pid;
  return DPL_OK;
}

int dpl_proc_worker_setup(void)
{
  signal(SIGINT, SIG_IGN);  /* Ctrl-C reaches the whole process group: the parent stops us */
  signal(SIGUSR1, SIG_IGN);
  signal(SIGTERM, SIG_DFL); /* PR_SET_PDEATHSIG's SIGTERM ends the worker at once */
  dpl_signals_clear();
  dpl_cuda_forbid("CUDA cannot be used in a DataLoader worker process (forked from the training process); "
                  "return CPU tensors from the dataset and collate_fn and move the batch to the GPU in the "
                  "training loop (the Trainer does)");
  /* torch's workers run one intra-op thread; the pool and OpenBLAS start afresh here */
  return dpl_set_num_threads(1);
}
