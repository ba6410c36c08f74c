/* dpl_store.c: the rendezvous key-value store (torch's TCPStore): rank 0 hosts
 * it on a thread of its own process (TCP, loopback unless told otherwise),
 * every rank reaches it through one connection. Operations: set, get (waits
 * until the key exists), add (an integer counter), delete, and wait. Every wait
 * is time-limited and ends on SIGINT/SIGTERM; a peer that goes away is an
 * error, never a hang. Values are byte strings.
 *
 * Wire format: request  = op u8, key length u32, value length u32, key, value;
 *              response = status u8 (0 found/ok, 1 missing), length u32, value. */
#define _GNU_SOURCE
#include "dpl_comm_internal.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { OP_SET = 1, OP_GET = 2, OP_ADD = 3, OP_DEL = 4 };
enum { MAX_KEY = 4096, MAX_VAL = 64 << 20, MAX_CLIENTS = 4096 };

typedef struct kv { char *key; uint8_t *val; uint32_t klen, vlen; } kv;

struct dpl_store {
  int fd;                /* client connection */
  double timeout_s;
  /* server side (is_master) */
  int listen_fd, wake[2], port;
  pthread_t thread;
  int running;
  kv *items;
  size_t n, cap;
  uint8_t *resp;         /* client: last value read */
  uint32_t resp_len;
};

/* ---------------------------------------------------------------- io */

static int full_io(int fd, void *buf, size_t n, int writing)
{
  uint8_t *p = buf;
  while (n) {
    ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k > 0) { p += k; n -= (size_t)k; continue; }
    if (k < 0 && errno == EINTR) {
      if (dpl_signal_received()) return DPL_EINTR;
      continue;
    }
    return k == 0 ? DPL_ECOMM : (errno == EAGAIN || errno == EWOULDBLOCK ? DPL_ETIMEOUT : DPL_ECOMM);
  }
  return DPL_OK;
}

/* ---------------------------------------------------------------- server */

static kv *find(dpl_store *s, const char *k, uint32_t kl)
{
  for (size_t i = 0; i < s->n; i++)
    if (s->items[i].klen == kl && memcmp(s->items[i].key, k, kl) == 0) return &s->items[i];
  return NULL;
}

static int put(dpl_store *s, const char *k, uint32_t kl, const uint8_t *v, uint32_t vl)
{
  kv *e = find(s, k, kl);
  uint8_t *nv = malloc(vl ? vl : 1);
  if (!nv) return -1;
  memcpy(nv, v, vl);
  if (e) { free(e->val); e->val = nv; e->vlen = vl; return 0; }
  if (s->n == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 16;
    kv *ni = realloc(s->items, nc * sizeof *ni);
    if (!ni) { free(nv); return -1; }
    s->items = ni;
    s->cap = nc;
  }
  char *nk = malloc(kl ? kl : 1);
  if (!nk) { free(nv); return -1; }
  memcpy(nk, k, kl);
  s->items[s->n++] = (kv){ nk, nv, kl, vl };
  return 0;
}

/* Serves one request from fd; -1 drops the client. */
static int serve(dpl_store *s, int fd)
{
  uint8_t hdr[9];
  if (full_io(fd, hdr, 9, 0)) return -1;
  uint32_t kl, vl;
  memcpy(&kl, hdr + 1, 4);
  memcpy(&vl, hdr + 5, 4);
  kl = ntohl(kl);
  vl = ntohl(vl);
  if (kl > MAX_KEY || vl > MAX_VAL) return -1;
  char *key = malloc(kl + 1);
  uint8_t *val = malloc(vl ? vl : 1);
  int rc = -1;
  if (!key || !val || full_io(fd, key, kl, 0) || full_io(fd, val, vl, 0)) goto out;
  uint8_t st = 0;
  const uint8_t *rv = NULL;
  uint32_t rl = 0;
  char num[32];
  kv *e;
  switch (hdr[0]) {
  case OP_SET:
    if (put(s, key, kl, val, vl)) goto out;
    break;
  case OP_GET:
    e = find(s, key, kl);
    if (e) { rv = e->val; rl = e->vlen; } else st = 1;
    break;
  case OP_ADD: {
    int64_t delta = 0, cur = 0;
    if (vl > 0 && vl < 31) {
      char tmp[32];
      memcpy(tmp, val, vl);
      tmp[vl] = 0;
      delta = strtoll(tmp, NULL, 10);
    }
    e = find(s, key, kl);
    if (e) {
      char tmp[32];
      size_t m = e->vlen < 31 ? e->vlen : 31;
      memcpy(tmp, e->val, m);
      tmp[m] = 0;
      cur = strtoll(tmp, NULL, 10);
    }
    cur += delta;
    int m = snprintf(num, sizeof num, "%lld", (long long)cur);
    if (put(s, key, kl, (const uint8_t *)num, (uint32_t)m)) goto out;
    rv = (const uint8_t *)num;
    rl = (uint32_t)m;
    break;
  }
  case OP_DEL:
    e = find(s, key, kl);
    if (e) {
      free(e->key);
      free(e->val);
      *e = s->items[--s->n];
    } else st = 1;
    break;
  default:
    goto out;
  }
  uint8_t rh[5];
  rh[0] = st;
  uint32_t nl = htonl(rl);
  memcpy(rh + 1, &nl, 4);
  if (full_io(fd, rh, 5, 1) || (rl && full_io(fd, (void *)rv, rl, 1))) goto out;
  rc = 0;
out:
  free(key);
  free(val);
  return rc;
}

static void *server_main(void *arg)
{
  dpl_store *s = arg;
  int *clients = calloc(MAX_CLIENTS, sizeof *clients);
  struct pollfd *pf = calloc(MAX_CLIENTS + 2, sizeof *pf);
  int nc = 0;
  if (!clients || !pf) { free(clients); free(pf); return NULL; }
  for (;;) {
    pf[0] = (struct pollfd){ .fd = s->wake[0], .events = POLLIN };
    pf[1] = (struct pollfd){ .fd = s->listen_fd, .events = POLLIN };
    for (int i = 0; i < nc; i++) pf[2 + i] = (struct pollfd){ .fd = clients[i], .events = POLLIN };
    int r = poll(pf, (nfds_t)(2 + nc), -1);
    if (r < 0) { if (errno == EINTR) continue; break; }
    if (pf[0].revents) break;
    for (int i = nc - 1; i >= 0; i--) {
      if (!pf[2 + i].revents) continue;
      if (serve(s, clients[i]) != 0) {
        close(clients[i]);
        clients[i] = clients[--nc];
      }
    }
    if (pf[1].revents & POLLIN) {
      int c = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
      if (c >= 0) {
        if (nc == MAX_CLIENTS) close(c);
        else {
          struct timeval tv = { 10, 0 }; /* a client stalled mid-request is dropped */
          setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
          int one = 1;
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          clients[nc++] = c;
        }
      }
    }
  }
  for (int i = 0; i < nc; i++) close(clients[i]);
  free(clients);
  free(pf);
  return NULL;
}

/* ---------------------------------------------------------------- client */

static int connect_to(dpl_store *s, const char *host, int port)
{
  double deadline = dpl_clock() + s->timeout_s;
  char ports[16];
  snprintf(ports, sizeof ports, "%d", port);
  for (;;) {
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai = NULL;
    int g = getaddrinfo(host, ports, &hints, &ai);
    if (g != 0)
      return dpl_errorf(DPL_EINVAL, "dist: store: cannot resolve '%s': %s", host, gai_strerror(g));
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        freeaddrinfo(ai);
        s->fd = fd;
        return DPL_OK;
      }
      close(fd);
    }
    freeaddrinfo(ai);
    if (dpl_clock() > deadline)
      return dpl_errorf(DPL_ETIMEOUT, "dist: store: no server at %s:%d after %g s (rank 0 hosts it)", host, port, s->timeout_s);
    struct timespec ts = { 0, 10 * 1000000L };
    nanosleep(&ts, NULL);
    if (dpl_signal_received()) return dpl_errorf(DPL_EINTR, "dist: store: interrupted while connecting");
  }
}

static int request(dpl_store *s, int op, const char *key, const void *val, uint32_t vl, uint8_t *status)
{
  if (!s || s->fd < 0) return dpl_errorf(DPL_EINVAL, "dist: store is closed");
  size_t kl = key ? strlen(key) : 0;
  if (kl == 0 || kl > MAX_KEY) return dpl_errorf(DPL_EINVAL, "dist: store: key must be 1..%d bytes", MAX_KEY);
  if (vl > MAX_VAL) return dpl_errorf(DPL_EINVAL, "dist: store: value of %u bytes is over %d", vl, MAX_VAL);
  uint8_t hdr[9];
  hdr[0] = (uint8_t)op;
  uint32_t a = htonl((uint32_t)kl), b = htonl(vl);
  memcpy(hdr + 1, &a, 4);
  memcpy(hdr + 5, &b, 4);
  int st = full_io(s->fd, hdr, 9, 1);
  if (!st) st = full_io(s->fd, (void *)key, kl, 1);
  if (!st && vl) st = full_io(s->fd, (void *)val, vl, 1);
  uint8_t rh[5];
  if (!st) st = full_io(s->fd, rh, 5, 0);
  uint32_t rl = 0;
  if (!st) {
    memcpy(&rl, rh + 1, 4);
    rl = ntohl(rl);
    uint8_t *nb = realloc(s->resp, rl + 1);
    if (!nb) return dpl_errorf(DPL_ENOMEM, "dist: store: out of memory");
    s->resp = nb;
    st = full_io(s->fd, s->resp, rl, 0);
    s->resp[rl] = 0;
    s->resp_len = rl;
  }
  if (st == DPL_EINTR) return dpl_errorf(DPL_EINTR, "dist: store: interrupted");
  if (st) {
    close(s->fd);
    s->fd = -1;
    return dpl_errorf(DPL_ECOMM, "dist: store: lost the connection to the server (rank 0 exited?)");
  }
  *status = rh[0];
  return DPL_OK;
}

/* ---------------------------------------------------------------- API */

int dpl_store_create(const char *host, int32_t port, int32_t is_server, double timeout_s, dpl_store **out)
{
  if (!out) return dpl_errorf(DPL_EINVAL, "dist: store: out is NULL");
  *out = NULL;
  if (port < 0 || port > 65535) return dpl_errorf(DPL_EINVAL, "dist: store: port must be in 0..65535, got %d", port);
  if (!is_server && port == 0) return dpl_errorf(DPL_EINVAL, "dist: store: a client needs the server's port");
  dpl_store *s = calloc(1, sizeof *s);
  if (!s) return dpl_errorf(DPL_ENOMEM, "dist: store: out of memory");
  s->fd = s->listen_fd = -1;
  s->wake[0] = s->wake[1] = -1;
  s->timeout_s = timeout_s > 0 ? timeout_s : dpl_comm_env_timeout();
  if (!host || !*host) host = "127.0.0.1";
  if (is_server) {
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai = NULL;
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    int g = getaddrinfo(host, ports, &hints, &ai);
    if (g != 0) { free(s); return dpl_errorf(DPL_EINVAL, "dist: store: cannot resolve '%s': %s", host, gai_strerror(g)); }
    int err = 0;
    for (struct addrinfo *a = ai; a && s->listen_fd < 0; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) { err = errno; continue; }
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 512) == 0) s->listen_fd = fd;
      else { err = errno; close(fd); }
    }
    freeaddrinfo(ai);
    if (s->listen_fd < 0) {
      free(s);
      return dpl_errorf(DPL_EIO, "dist: store: cannot listen on %s:%d: %s%s", host, port, strerror(err),
                        err == EADDRINUSE ? " (another job uses this MASTER_PORT?)" : "");
    }
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    getsockname(s->listen_fd, (struct sockaddr *)&sa, &sl);
    s->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port : ((struct sockaddr_in *)&sa)->sin_port);
    if (pipe2(s->wake, O_CLOEXEC) != 0 || pthread_create(&s->thread, NULL, server_main, s) != 0) {
      close(s->listen_fd);
      if (s->wake[0] >= 0) { close(s->wake[0]); close(s->wake[1]); }
      free(s);
      return dpl_errorf(DPL_EIO, "dist: store: cannot start the server thread");
    }
    s->running = 1;
    port = s->port;
  } else s->port = port;
  int st = connect_to(s, host, port);
  if (st) { dpl_store_destroy(s); return st; }
  *out = s;
  return DPL_OK;
}

int32_t dpl_store_port(const dpl_store *s) { return s ? s->port : -1; }

void dpl_store_destroy(dpl_store *s)
{
  if (!s) return;
  if (s->fd >= 0) close(s->fd);
  if (s->running) {
    ssize_t r = write(s->wake[1], "x", 1);
    (void)r;
    pthread_join(s->thread, NULL);
  }
  if (s->listen_fd >= 0) close(s->listen_fd);
  if (s->wake[0] >= 0) { close(s->wake[0]); close(s->wake[1]); }
  for (size_t i = 0; i < s->n; i++) { free(s->items[i].key); free(s->items[i].val); }
  free(s->items);
  free(s->resp);
  free(s);
}

int dpl_store_set(dpl_store *s, const char *key, const void *val, int64_t len)
{
  if (len < 0 || (len > 0 && !val)) return dpl_errorf(DPL_EINVAL, "dist: store: bad value");
  uint8_t st;
  return request(s, OP_SET, key, val, (uint32_t)(len > MAX_VAL ? (int64_t)MAX_VAL + 1 : len), &st);
}

int dpl_store_get(dpl_store *s, const char *key, double timeout_s, const uint8_t **val, int64_t *len)
{
  if (!val || !len) return dpl_errorf(DPL_EINVAL, "dist: store: NULL output");
  double deadline = dpl_clock() + (timeout_s > 0 ? timeout_s : s ? s->timeout_s : 0);
  long sleep_ns = 200000;
  for (;;) {
    uint8_t st;
    int rc = request(s, OP_GET, key, NULL, 0, &st);
    if (rc) return rc;
    if (st == 0) { *val = s->resp; *len = s->resp_len; return DPL_OK; }
    if (dpl_clock() > deadline)
      return dpl_errorf(DPL_ETIMEOUT, "dist: store: key '%s' did not appear within %g s", key,
                        timeout_s > 0 ? timeout_s : s->timeout_s);
    struct timespec ts = { 0, sleep_ns };
    nanosleep(&ts, NULL);
    if (dpl_signal_received()) return dpl_errorf(DPL_EINTR, "dist: store: interrupted waiting for '%s'", key);
    if (sleep_ns < 20000000) sleep_ns *= 2;
  }
}

int dpl_store_add(dpl_store *s, const char *key, int64_t delta, int64_t *out)
{
  uint8_t st;
  char num[32];
  int m = snprintf(num, sizeof num, "%lld", (long long)delta);
  int rc = request(s, OP_ADD, key, num, (uint32_t)m, &st);
  if (rc) return rc;
  if (out) *out = strtoll((const char *)s->resp, NULL, 10);
  return DPL_OK;
}

int dpl_store_delete(dpl_store *s, const char *key, int32_t *existed)
{
  uint8_t st;
  int rc = request(s, OP_DEL, key, NULL, 0, &st);
  if (rc) return rc;
  if (existed) *existed = st == 0;
  return DPL_OK;
}
