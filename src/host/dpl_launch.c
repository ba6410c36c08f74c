/* dpl_launch.c: the multi-process launcher behind `dplhost --nproc N script`.
 * Starts N copies of the host (this same binary) with the torchrun-style rank
 * variables set, prefixes every output line with its rank, supervises them:
 * the first rank that fails (exit code or signal) stops the others (SIGTERM,
 * then SIGKILL after a grace period), is reported with the tail of its stderr,
 * and its status becomes the launcher's. Children die with the launcher
 * (PR_SET_PDEATHSIG, SIGTERM) and the launcher forwards SIGINT/SIGTERM/SIGUSR1
 * to their process groups (each once), still collecting their output and exit
 * status. Output is forwarded as bytes, a whole line at a time, whatever its
 * length; when the launcher's own stdout/stderr is closed it stops the ranks and
 * exits 128+SIGPIPE. Before stopping the ranks after a failure it writes the failed
 * rank into a small memfd the ranks inherit (DPL_LAUNCH_STATE_FD), so a rank can tell
 * that SIGTERM from one forwarded for the user or SLURM (dpl_launch_failed_rank) and
 * stop quietly. The same warning line ("WARNING: ...") from several ranks is held for a
 * moment and goes out once, "[ranks 0-3] WARNING: ..."; with --max-restarts a failed rank
 * restarts the whole set (dpl_launch). */
#define _GNU_SOURCE
#include "dpl.h"
#include "dpl_internal.h"
#include "dpl_launch.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TAIL_LINES 12
#define TAIL_BYTES 256
#define READ_CHUNK 65536
/* a line longer than this goes out in pieces: the prefix once, the rest as it comes */
#define LINE_HELD_MAX (1u << 20)

typedef struct {
  char *buf;         /* the current (incomplete) line */
  size_t len, cap;
  int fd;            /* read end of the pipe, -1 when closed */
  int out;           /* where its lines go: STDOUT_FILENO or STDERR_FILENO */
  int mid_line;      /* part of the current line went out already (no second prefix) */
  int eof;           /* the pipe is closed; buf may still hold lines (held behind a warning) */
} stream_t;

typedef struct {
  pid_t pid;
  int rank;          /* global rank */
  int local;         /* index on this node */
  int running;
  int status;        /* waitpid status */
  stream_t s[2];     /* stdout, stderr */
  char tail[TAIL_LINES][TAIL_BYTES];
  size_t tail_len[TAIL_LINES];
  int tail_next, tail_count;
  /* the last stderr line the host's error report starts ("dplhost: <message>"), kept
   * apart from the tail: a long traceback pushes it out of the last TAIL_LINES lines */
  char err[TAIL_BYTES];
  size_t err_len;
  unsigned long lines, err_line; /* stderr lines so far; the number of the err line */
} child_t;

/* the signals forwarded to the ranks (those the host handles) */
static const int forwarded_sigs[] = {SIGINT, SIGTERM, SIGUSR1};
#define N_FORWARDED ((int)(sizeof forwarded_sigs / sizeof forwarded_sigs[0]))
static volatile sig_atomic_t launcher_signal;          /* the first one: the exit status */
static volatile sig_atomic_t got_signal[N_FORWARDED];  /* each is forwarded once */
static int output_broken[3];                           /* by fd: a write failed with EPIPE */

static void on_launcher_signal(int sig)
{
  for (int i = 0; i < N_FORWARDED; i++) {
    if (forwarded_sigs[i] != sig) continue;
    if (got_signal[i]) _exit(128 + sig); /* the same signal again: leave now (children get PDEATHSIG) */
    got_signal[i] = 1;
  }
  if (!launcher_signal) launcher_signal = sig;
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int free_port(void)
{
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 29500;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* Writes every byte of iov[0..n) to fd (bytes, NULs included), through short
 * writes and EINTR. A write that fails with EPIPE marks fd's output broken; its
 * later output is dropped. */
static void write_all(int fd, struct iovec *iov, int n)
{
  if (output_broken[fd]) return;
  while (n > 0) {
    ssize_t w = writev(fd, iov, n);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      if (errno == EPIPE) output_broken[fd] = 1;
      return;
    }
    size_t left = (size_t)w;
    while (n > 0 && left >= iov->iov_len) { left -= iov->iov_len; iov++; n--; }
    if (n > 0) { iov->iov_base = (char *)iov->iov_base + left; iov->iov_len -= left; }
  }
}

/* Identical warnings. A complete stderr line that starts with "WARNING: " is held (in
 * arrival order) until every rank has sent the same line or hold_s has passed; then it goes
 * out once, prefixed with the ranks that sent it. A rank's later stderr lines wait behind
 * its held warnings (its own lines keep their order). */
#define HELD_MAX 32
static double hold_s = 0.5; /* DPL_LAUNCH_WARN_HOLD; 0: no holding */
typedef struct {
  char *text;
  size_t len;
  unsigned char *from; /* by local index: 1 = sent it */
  int count;
  double deadline;
} held_t;
static held_t held[HELD_MAX];
static int n_held, held_nproc, held_base; /* ranks on this node, the first one's global rank */
static int held_flushed;                  /* lines held behind a warning may go on */

static int is_warning(const char *data, size_t n)
{
  return n > 9 && memcmp(data, "WARNING: ", 9) == 0;
}

/* Writes held[0..k] in order and drops them. */
static void flush_upto(int k)
{
  for (int e = 0; e <= k && e < n_held; e++) {
    held_t *h = &held[e];
    char prefix[256];
    size_t p = 0;
    p += (size_t)snprintf(prefix, sizeof prefix, "%s", h->count == 1 ? "[rank" : "[ranks");
    char sep = ' ';
    for (int i = 0; i < held_nproc && p < sizeof prefix - 40;) { /* runs: 0-3,5 */
      if (!h->from[i]) { i++; continue; }
      int j = i;
      while (j + 1 < held_nproc && h->from[j + 1]) j++;
      if (j > i) p += (size_t)snprintf(prefix + p, sizeof prefix - p, "%c%d-%d", sep, held_base + i, held_base + j);
      else p += (size_t)snprintf(prefix + p, sizeof prefix - p, "%c%d", sep, held_base + i);
      sep = ',';
      i = j + 1;
    }
    p += (size_t)snprintf(prefix + p, sizeof prefix - p, "] ");
    struct iovec iov[3] = {{prefix, p}, {h->text, h->len}, {"\n", 1}};
    write_all(STDERR_FILENO, iov, 3);
    free(h->text);
    free(h->from);
  }
  int gone = k + 1 < n_held ? k + 1 : n_held;
  if (gone > 0) held_flushed = 1;
  memmove(held, held + gone, (size_t)(n_held - gone) * sizeof *held);
  n_held -= gone;
}

/* Rank `local` sent a warning that is held: its later stderr lines wait behind it. */
static int holds(int local)
{
  for (int k = 0; k < n_held; k++)
    if (held[k].from[local]) return 1;
  return 0;
}

/* Before rank `local` writes to stderr: what it sent earlier goes out first. */
static void flush_for(int local)
{
  for (int k = n_held - 1; k >= 0; k--)
    if (held[k].from[local]) { flush_upto(k); return; }
}

static void flush_due(double now)
{
  int k = -1;
  while (k + 1 < n_held && held[k + 1].deadline <= now) k++;
  if (k >= 0) flush_upto(k);
}

/* Holds a warning line of rank `local`; 0 when it cannot (no memory): the caller writes it. */
static int hold(int local, const char *data, size_t n)
{
  int k;
  for (k = 0; k < n_held; k++)
    if (held[k].len == n && memcmp(held[k].text, data, n) == 0) break;
  if (k < n_held && !held[k].from[local]) {
    held[k].from[local] = 1;
    if (++held[k].count == held_nproc) flush_upto(k);
    return 1;
  }
  if (k < n_held) flush_upto(k); /* the same rank again: the first one goes out */
  if (n_held == HELD_MAX) flush_upto(0);
  held_t *h = &held[n_held];
  h->text = malloc(n);
  h->from = calloc((size_t)held_nproc, 1);
  if (!h->text || !h->from) { free(h->text); free(h->from); return 0; }
  memcpy(h->text, data, n);
  h->len = n;
  h->from[local] = 1;
  h->count = 1;
  h->deadline = now_s() + hold_s;
  n_held++;
  return 1;
}

/* The start of each stderr line, for the failure report: the last TAIL_LINES lines and
 * the last "dplhost: " error line. */
static void record_tail(child_t *c, const char *data, size_t n)
{
  size_t m = n < TAIL_BYTES ? n : TAIL_BYTES;
  memcpy(c->tail[c->tail_next], data, m);
  c->tail_len[c->tail_next] = m;
  c->tail_next = (c->tail_next + 1) % TAIL_LINES;
  if (c->tail_count < TAIL_LINES) c->tail_count++;
  c->lines++;
  if (m > 9 && memcmp(data, "dplhost: ", 9) == 0) {
    memcpy(c->err, data, m);
    c->err_len = m;
    c->err_line = c->lines;
  }
}

/* Forwards a piece of a rank's output: the prefix when a line starts, then the
 * bytes, then the newline when the line is complete. */
static void emit(child_t *c, int which, const char *data, size_t n, int complete)
{
  stream_t *s = &c->s[which];
  if (which == 1 && !s->mid_line) record_tail(c, data, n);
  if (which == 1 && held_nproc > 1) {
    if (!s->mid_line && complete && is_warning(data, n) && hold(c->local, data, n)) return;
    flush_for(c->local);
  }
  char prefix[32];
  int plen = snprintf(prefix, sizeof prefix, "[rank %d] ", c->rank);
  struct iovec iov[3];
  int k = 0;
  if (!s->mid_line) { iov[k].iov_base = prefix; iov[k].iov_len = (size_t)plen; k++; }
  if (n) { iov[k].iov_base = (void *)data; iov[k].iov_len = n; k++; }
  if (complete) { iov[k].iov_base = "\n"; iov[k].iov_len = 1; k++; }
  write_all(s->out, iov, k);
  s->mid_line = !complete;
}

static void close_stream(stream_t *s)
{
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
  free(s->buf);
  s->buf = NULL;
  s->len = s->cap = 0;
}

/* Emits the complete lines in s->buf (and the rest at EOF), except those of a rank whose
 * warning is held: they stay until it goes out (its other warnings may join the hold). A
 * line longer than LINE_HELD_MAX goes out in pieces, prefixed once. */
static void process(child_t *c, int which)
{
  stream_t *s = &c->s[which];
  size_t line = 0;
  char *nl;
  while (line < s->len && (nl = memchr(s->buf + line, '\n', s->len - line)) != NULL) {
    size_t i = (size_t)(nl - s->buf);
    if (which == 1 && n_held && holds(c->local) && (s->mid_line || !is_warning(s->buf + line, i - line)))
      break;
    emit(c, which, s->buf + line, i - line, 1);
    line = i + 1;
  }
  size_t rest = s->len - line;
  /* (a rank held now, by the loop's stop or by a warning it just emitted, keeps the rest) */
  if (!(which == 1 && n_held && holds(c->local)) && (rest >= LINE_HELD_MAX || (s->eof && (rest || s->mid_line)))) {
    emit(c, which, s->buf + line, rest, s->eof); /* at EOF: the unfinished last line, ended */
    rest = 0;
    line = s->len;
  }
  if (line > 0 && rest) memmove(s->buf, s->buf + line, rest);
  s->len = rest;
}

/* Reads what is available and emits what may go out (process). */
static void drain(child_t *c, int which)
{
  stream_t *s = &c->s[which];
  if (s->fd < 0) return;
  if (s->cap - s->len < READ_CHUNK) {
    size_t cap = s->len + READ_CHUNK;
    char *nb = realloc(s->buf, cap);
    if (!nb) { /* no memory for more: what is held goes out as a piece */
      emit(c, which, s->buf, s->len, 0);
      s->len = 0;
      if (!s->buf) return;
    } else {
      s->buf = nb;
      s->cap = cap;
    }
  }
  ssize_t r = read(s->fd, s->buf + s->len, s->cap - s->len);
  if (r < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (r <= 0) {
    close(s->fd);
    s->fd = -1;
    s->eof = 1;
  } else {
    s->len += (size_t)r;
  }
  process(c, which);
}

static void describe_status(int status, char *buf, size_t n)
{
  if (WIFEXITED(status)) snprintf(buf, n, "exit code %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(buf, n, "signal %d (SIG%s)", WTERMSIG(status), sigabbrev_np(WTERMSIG(status)) ?
             sigabbrev_np(WTERMSIG(status)) : "?");
  else snprintf(buf, n, "status %d", status);
}

static int status_code(int status)
{
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

int dpl_launch_failed_rank(void)
{
  const char *v = getenv("DPL_LAUNCH_STATE_FD");
  if (!v || !*v) return -1;
  char *end;
  long fd = strtol(v, &end, 10);
  if (*end || fd < 0 || fd > 1 << 20) return -1;
  char b[32];
  ssize_t r = pread((int)fd, b, sizeof b - 1, 0);
  if (r < 2 || b[0] != 'F') return -1;
  b[r] = 0;
  long rank = strtol(b + 1, &end, 10);
  return end == b + 1 || rank < 0 ? -1 : (int)rank;
}

static int env_set(const char *k)
{
  const char *v = getenv(k);
  return v && *v;
}

static void setenv_int(const char *k, long v)
{
  char b[32];
  snprintf(b, sizeof b, "%ld", v);
  setenv(k, b, 1);
}

/* Signals each running rank's process group (each rank leads its own), so what
 * the rank started (os.execute, io.popen, spawned workers) gets it too, as the
 * members of a terminal's foreground job all get its Ctrl-C. */
static void signal_all(child_t *cs, int n, int sig)
{
  for (int i = 0; i < n; i++)
    if (cs[i].running && kill(-cs[i].pid, sig) != 0) kill(cs[i].pid, sig);
}

/* One attempt: starts the ranks, supervises them until all have ended. *restartable:
 * a rank failed on its own (not stopped for a signal to the launcher or a closed output),
 * so another attempt may follow. */
static int launch_once(const dpl_launch_opts *o, char **child_argv, int attempt, int *restartable)
{
  int n = o->nproc;
  *restartable = 0;
  child_t *cs = calloc((size_t)n, sizeof *cs);
  if (!cs) { fprintf(stderr, "dplhost: out of memory\n"); return 1; }

  char job[96], addr[256];
  snprintf(addr, sizeof addr, "%s", o->master_addr ? o->master_addr : "127.0.0.1");
  int port = o->master_port > 0 ? o->master_port : (o->nnodes > 1 ? 29500 : free_port());
  if (o->nnodes > 1) {
    /* every node must derive the same id: from the rendezvous address */
    char clean[64];
    size_t k = 0;
    for (const char *p = addr; *p && k < sizeof clean - 1; p++)
      clean[k++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ? *p : '_');
    clean[k] = 0;
    snprintf(job, sizeof job, "m%s_%d", clean, port);
  } else {
    unsigned r = (unsigned)(now_s() * 1e6) ^ (unsigned)getpid() * 2654435761u;
    snprintf(job, sizeof job, "p%d_%08x", (int)getpid(), r);
  }
  int world = n * o->nnodes;

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_launcher_signal;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < N_FORWARDED; i++) sigaddset(&sa.sa_mask, forwarded_sigs[i]);
  for (int i = 0; i < N_FORWARDED; i++) sigaction(forwarded_sigs[i], &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  pid_t launcher = getpid();
  /* where the ranks read why they are being stopped (inherited: no close-on-exec) */
  int state_fd = memfd_create("dplhost-launch", 0);
  if (state_fd >= 0 && ftruncate(state_fd, 32) != 0) { close(state_fd); state_fd = -1; }

  for (int i = 0; i < n; i++) {
    child_t *c = &cs[i];
    c->rank = o->node_rank * n + i;
    c->local = i;
    int p_out[2], p_err[2];
    if (pipe(p_out) != 0 || pipe(p_err) != 0) {
      fprintf(stderr, "dplhost: --nproc: cannot create pipes: %s\n", strerror(errno));
      signal_all(cs, i, SIGKILL);
      if (state_fd >= 0) close(state_fd);
      free(cs);
      return 1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "dplhost: --nproc: cannot start rank %d: %s\n", c->rank, strerror(errno));
      signal_all(cs, i, SIGKILL);
      if (state_fd >= 0) close(state_fd);
      free(cs);
      return 1;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM); /* cleanups run; the host exits within its grace */
      if (getppid() != launcher) _exit(1);
      setpgid(0, 0); /* a terminal Ctrl-C reaches the launcher, which forwards it once */
      for (int k = 0; k < N_FORWARDED; k++) signal(forwarded_sigs[k], SIG_DFL);
      signal(SIGPIPE, SIG_DFL);
      int devnull = open("/dev/null", O_RDONLY);
      if (devnull >= 0) { dup2(devnull, 0); close(devnull); }
      dup2(p_out[1], 1);
      dup2(p_err[1], 2);
      close(p_out[0]); close(p_out[1]); close(p_err[0]); close(p_err[1]);
      for (int j = 0; j < i; j++) { /* the earlier ranks' pipes */
        if (cs[j].s[0].fd >= 0) close(cs[j].s[0].fd);
        if (cs[j].s[1].fd >= 0) close(cs[j].s[1].fd);
      }
      setenv_int("RANK", c->rank);
      setenv_int("LOCAL_RANK", i);
      setenv_int("WORLD_SIZE", world);
      setenv_int("LOCAL_WORLD_SIZE", n);
      setenv_int("NODE_RANK", o->node_rank);
      setenv_int("GROUP_RANK", o->node_rank);
      setenv("MASTER_ADDR", addr, 1);
      setenv_int("MASTER_PORT", port);
      setenv("DPL_JOB_ID", job, 1);
      setenv("DPL_LINE_BUFFERED", "1", 1);
      setenv_int("DPL_RESTART_COUNT", attempt);
      setenv_int("TORCHELASTIC_RESTART_COUNT", attempt);
      setenv_int("TORCHELASTIC_MAX_RESTARTS", o->max_restarts);
      if (state_fd >= 0) setenv_int("DPL_LAUNCH_STATE_FD", state_fd);
      else unsetenv("DPL_LAUNCH_STATE_FD");
      if (o->log_all_ranks) setenv("DPL_LOG_ALL_RANKS", "1", 1);
      if (!env_set("DPL_NUM_THREADS") && !env_set("OMP_NUM_THREADS")) {
        /* the ranks share the cores (torchrun sets 1 thread): kernel threads that
         * outnumber the cores stall each other's parallel loops */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        setenv_int("DPL_NUM_THREADS", cores / n > 1 ? cores / n : 1);
      }
      execv("/proc/self/exe", child_argv);
      fprintf(stderr, "dplhost: cannot exec the host for rank %d: %s\n", c->rank, strerror(errno));
      _exit(127);
    }
    setpgid(pid, pid); /* as the child does: no signal can reach it before its group exists */
    c->pid = pid;
    c->running = 1;
    close(p_out[1]);
    close(p_err[1]);
    c->s[0].fd = p_out[0]; c->s[0].out = STDOUT_FILENO;
    c->s[1].fd = p_err[0]; c->s[1].out = STDERR_FILENO;
  }

  held_base = o->node_rank * n;
  held_nproc = hold_s > 0 ? n : 1; /* (1: nothing is held) */
  int first_failed = -1, first_status = 0, alive = n, forwarded[N_FORWARDED] = {0};
  int broken_pipe = 0; /* the launcher's stdout or stderr was closed: the ranks were stopped */
  double kill_at = 0;
  double drain_until = 0;
  struct pollfd *pfd = calloc((size_t)(2 * n), sizeof *pfd);
  if (!pfd) {
    fprintf(stderr, "dplhost: out of memory\n");
    signal_all(cs, n, SIGKILL);
    if (state_fd >= 0) close(state_fd);
    free(cs);
    return 1;
  }
  for (;;) {
    /* reap */
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
      for (int i = 0; i < n; i++) {
        if (cs[i].pid != p || !cs[i].running) continue;
        cs[i].running = 0;
        cs[i].status = st;
        alive--;
        int failed = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        if (failed && first_failed < 0 && !launcher_signal && !broken_pipe) {
          first_failed = i;
          first_status = st;
          if (state_fd >= 0) { /* first: the ranks read it when the SIGTERM stops them */
            char b[32];
            int len = snprintf(b, sizeof b, "F%d", cs[i].rank);
            if (pwrite(state_fd, b, (size_t)len + 1, 0) != len + 1) { /* the ranks stop as for a signal */ }
          }
          signal_all(cs, n, SIGTERM);
          kill_at = now_s() + o->grace_s;
        }
      }
    }
    for (int k = 0; k < N_FORWARDED; k++) {
      if (!got_signal[k] || forwarded[k]) continue;
      signal_all(cs, n, forwarded_sigs[k]);
      forwarded[k] = 1;
      if (kill_at == 0) kill_at = now_s() + o->grace_s;
    }
    if (!broken_pipe && (output_broken[STDOUT_FILENO] || output_broken[STDERR_FILENO])) {
      /* as a lone process dies of SIGPIPE: the output has nowhere to go; the ranks
       * stop (with their cleanups) and the launcher exits 128+SIGPIPE */
      broken_pipe = 1;
      if (first_failed < 0 && !launcher_signal) {
        fprintf(stderr, "dplhost: the launcher's %s was closed (broken pipe); stopping the ranks\n",
                output_broken[STDOUT_FILENO] ? "stdout" : "stderr");
        signal_all(cs, n, SIGTERM);
        if (kill_at == 0) kill_at = now_s() + o->grace_s;
      }
    }
    if (kill_at > 0 && now_s() > kill_at) {
      for (int i = 0; i < n; i++)
        if (cs[i].running)
          fprintf(stderr, "dplhost: rank %d (pid %d) did not stop within %g s; killing it (SIGKILL)\n",
                  cs[i].rank, (int)cs[i].pid, o->grace_s);
      signal_all(cs, n, SIGKILL);
      kill_at = 0;
    }
    /* forward output */
    int np = 0;
    for (int i = 0; i < n; i++)
      for (int w = 0; w < 2; w++)
        if (cs[i].s[w].fd >= 0) { pfd[np].fd = cs[i].s[w].fd; pfd[np].events = POLLIN; np++; }
    if (alive == 0) {
      /* a grandchild may hold a pipe open: drain for a moment, not forever */
      if (drain_until == 0) drain_until = now_s() + 1.0;
      if (np == 0 || now_s() > drain_until) break;
    }
    if (n_held) flush_due(now_s());
    if (held_flushed) { /* what waited behind a warning that went out */
      held_flushed = 0;
      for (int i = 0; i < n; i++) process(&cs[i], 1);
    }
    int r = poll(pfd, (nfds_t)np, np ? (n_held ? 50 : 100) : 20);
    if (r > 0) {
      for (int k = 0; k < np; k++) {
        if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        for (int i = 0; i < n; i++)
          for (int w = 0; w < 2; w++)
            if (cs[i].s[w].fd == pfd[k].fd) drain(&cs[i], w);
      }
    }
  }
  free(pfd);
  for (;;) { /* what is left, held warnings going out when nothing else can */
    held_flushed = 0;
    for (int i = 0; i < n; i++) { cs[i].s[1].eof = 1; process(&cs[i], 1); }
    if (n_held) flush_upto(n_held - 1);
    else if (!held_flushed) break;
  }
  if (state_fd >= 0) close(state_fd);
  /* a rank killed during the collectives' rendezvous can leave a segment name behind */
  dpl_comm_shm_cleanup(job, NULL);

  int rc = 0;
  if (first_failed >= 0) {
    child_t *c = &cs[first_failed];
    char why[96];
    describe_status(first_status, why, sizeof why);
    fprintf(stderr, "dplhost: rank %d (pid %d) failed with %s; stopped the other ranks\n",
            c->rank, (int)c->pid, why);
    if (c->err_len && c->lines - c->err_line >= (unsigned long)c->tail_count) {
      /* the error line scrolled out of the tail below: say it first */
      fprintf(stderr, "dplhost: rank %d's error: ", c->rank);
      fwrite(c->err + 9, 1, c->err_len - 9, stderr);
      fputc('\n', stderr);
    }
    if (c->tail_count) {
      fprintf(stderr, "dplhost: last lines of rank %d's stderr:\n", c->rank);
      for (int k = 0; k < c->tail_count; k++) {
        int idx = (c->tail_next - c->tail_count + k + TAIL_LINES) % TAIL_LINES;
        fputs("  | ", stderr);
        fwrite(c->tail[idx], 1, c->tail_len[idx], stderr);
        fputc('\n', stderr);
      }
    }
    rc = status_code(first_status);
    if (rc == 0) rc = 1;
    *restartable = !launcher_signal && !broken_pipe;
  } else if (launcher_signal) {
    rc = 128 + launcher_signal;
  } else if (broken_pipe) {
    rc = 128 + SIGPIPE;
  }
  for (int i = 0; i < n; i++) { close_stream(&cs[i].s[0]); close_stream(&cs[i].s[1]); }
  free(cs);
  return rc;
}

int dpl_launch(const dpl_launch_opts *o, char **child_argv)
{
  const char *hv = getenv("DPL_LAUNCH_WARN_HOLD");
  if (hv && *hv) {
    char *end;
    double v = strtod(hv, &end);
    if (*end || !(v >= 0 && v <= 3600)) {
      fprintf(stderr, "dplhost: DPL_LAUNCH_WARN_HOLD must be seconds from 0 to 3600, got '%s'; using 0.5\n", hv);
      v = 0.5;
    }
    hold_s = v;
  }
  for (int attempt = 0;; attempt++) {
    int restartable;
    int rc = launch_once(o, child_argv, attempt, &restartable);
    if (rc == 0 || !restartable || o->max_restarts <= 0) return rc;
    if (launcher_signal) return 128 + launcher_signal; /* arrived as the attempt ended */
    if (attempt >= o->max_restarts) {
      fprintf(stderr, "dplhost: no restarts left (--max-restarts %d); giving up\n", o->max_restarts);
      return rc;
    }
    fprintf(stderr, "dplhost: restarting all %d ranks (restart %d of %d)\n", o->nproc, attempt + 1,
            o->max_restarts);
  }
}
