/* dpl_chan.c: byte channels between the training process and its DataLoader
 * workers (dpl.data_workers): a pair of local stream sockets per worker, sends
 * that never raise SIGPIPE, exact-length receives with a timeout that notice the
 * peer's end (a dead worker, a dead parent) and the host's signals, and a poll.
 * Waits run in slices of at most 50 ms so that SIGINT/SIGTERM stop them soon. */
#define _GNU_SOURCE
#include "dpl.h"
#include "dpl_internal.h"
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* the sockets' buffers: a few batches of a small dataset fit, so a worker can run
 * ahead of the parent (the kernel caps it at net.core.wmem_max / rmem_max);
 * DPL_CHAN_BUF=bytes sets another size (the specs use a small one, as on a machine
 * with a low wmem_max) */
#define CHAN_BUF (4 << 20)

static int chan_buf_size(void)
{
  const char *e = getenv("DPL_CHAN_BUF");
  if (e && *e) {
    char *end = NULL;
    long v = strtol(e, &end, 10);
    if (end && *end == '\0' && v >= 4096 && v <= (64L << 20)) return (int)v;
  }
  return CHAN_BUF;
}

int dpl_chan_pair(int32_t *fds)
{
  if (!fds) return dpl_errorf(DPL_EINVAL, "dpl_chan_pair: fds is NULL");
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return dpl_errorf(DPL_EIO, "socketpair: %s", strerror(errno));
  int sz = chan_buf_size();
  for (int i = 0; i < 2; i++) {
    setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    setsockopt(sv[i], SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
  }
  fds[0] = sv[0];
  fds[1] = sv[1];
  return DPL_OK;
}

int dpl_chan_close(int32_t fd)
{
  if (fd < 0) return dpl_errorf(DPL_EINVAL, "dpl_chan_close: bad descriptor %d", (int)fd);
  if (close(fd) != 0 && errno != EINTR) return dpl_errorf(DPL_EIO, "close(%d): %s", (int)fd, strerror(errno));
  return DPL_OK;
}

/* waits for `events` on fd: 1 ready, 0 timed out, <0 status */
static int wait_fd(int fd, short events, double deadline)
{
  for (;;) {
    if (dpl_signal_received()) return dpl_errorf(DPL_EINTR, "interrupted while waiting for a DataLoader worker");
    double left = deadline < 0 ? 0.05 : deadline - dpl_clock();
    if (deadline >= 0 && left <= 0) return 0;
    if (left > 0.05) left = 0.05;
    struct pollfd p = {fd, events, 0};
    int r = poll(&p, 1, (int)(left * 1000) + 1);
    if (r > 0) {
      if (p.revents & POLLNVAL) return dpl_errorf(DPL_EINVAL, "channel %d is not open", fd);
      return 1;
    }
    if (r < 0 && errno != EINTR) return dpl_errorf(DPL_EIO, "poll(%d): %s", fd, strerror(errno));
  }
}

int dpl_chan_send(int32_t fd, const void *buf, int64_t n, double timeout_s)
{
  if (n < 0 || (n > 0 && !buf)) return dpl_errorf(DPL_EINVAL, "dpl_chan_send: bad buffer");
  const char *p = buf;
  double deadline = timeout_s < 0 ? -1 : dpl_clock() + timeout_s;
  while (n > 0) {
    ssize_t w = send(fd, p, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= w;
      continue;
    }
    if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
      return dpl_errorf(DPL_ECOMM, "the other end of the channel is closed (its process ended)");
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return dpl_errorf(DPL_EIO, "send(%d): %s", (int)fd, strerror(errno));
    int r = wait_fd(fd, POLLOUT, deadline);
    if (r < 0) return r;
    if (r == 0) return dpl_errorf(DPL_ETIMEOUT, "send timed out after %g s", timeout_s);
  }
  return DPL_OK;
}

int64_t dpl_chan_send_some(int32_t fd, const void *buf, int64_t n)
{
  if (n < 0 || (n > 0 && !buf)) return dpl_errorf(DPL_EINVAL, "dpl_chan_send_some: bad buffer");
  const char *p = buf;
  int64_t done = 0;
  while (done < n) {
    ssize_t w = send(fd, p + done, (size_t)(n - done), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      done += w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
      return dpl_errorf(DPL_ECOMM, "the other end of the channel is closed (its process ended)");
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return dpl_errorf(DPL_EIO, "send(%d): %s", (int)fd, strerror(errno));
    break; /* full: the rest later */
  }
  return done;
}

int dpl_chan_recv(int32_t fd, void *buf, int64_t n, double timeout_s)
{
  if (n < 0 || (n > 0 && !buf)) return dpl_errorf(DPL_EINVAL, "dpl_chan_recv: bad buffer");
  char *p = buf;
  int64_t want = n, got = 0;
  double deadline = timeout_s < 0 ? -1 : dpl_clock() + timeout_s;
  while (got < want) {
    ssize_t r = recv(fd, p + got, (size_t)(want - got), MSG_DONTWAIT);
    if (r > 0) {
      got += r;
      continue;
    }
    if (r == 0 || (r < 0 && errno == ECONNRESET))
      return dpl_errorf(DPL_ECOMM, "end of stream after %lld of %lld bytes (the other process ended)",
                        (long long)got, (long long)want);
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return dpl_errorf(DPL_EIO, "recv(%d): %s", (int)fd, strerror(errno));
    int w = wait_fd(fd, POLLIN, deadline);
    if (w < 0) return w;
    if (w == 0) return dpl_errorf(DPL_ETIMEOUT, "receive timed out after %g s", timeout_s);
  }
  return DPL_OK;
}

int dpl_chan_poll(int32_t fd, double timeout_s)
{
  int r = wait_fd(fd, POLLIN, timeout_s < 0 ? -1 : dpl_clock() + timeout_s);
  return r;
}
