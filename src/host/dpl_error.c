/* dpl_error.c: the thread-local last-error buffer behind dpl_last_error(),
 * and the host's small utilities (version, clock, sleep). */
#define _POSIX_C_SOURCE 200809L
#include "dpl.h"
#include "dpl_internal.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static _Thread_local char dpl_errbuf[1024];

const char *dpl_version(void) { return DPL_VERSION_STRING; }

const char *dpl_last_error(void) { return dpl_errbuf; }

void dpl_clear_error(void) { dpl_errbuf[0] = 0; }

int dpl_errorf(int status, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dpl_errbuf, sizeof dpl_errbuf, fmt, ap);
  va_end(ap);
  return status;
}

int dpl_set_error_message(int32_t status, const char *msg)
{
  return dpl_errorf(status, "%s", msg ? msg : "(null)");
}

double dpl_clock(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int dpl_sleep(double seconds)
{
  if (!(seconds >= 0)) return dpl_errorf(DPL_EINVAL, "dpl_sleep: seconds must be >= 0, got %g", seconds);
  struct timespec ts;
  ts.tv_sec = (time_t)seconds;
  ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0) {
    if (errno != EINTR) return dpl_errorf(DPL_EIO, "dpl_sleep: %s", strerror(errno));
    if (dpl_signal_received()) return dpl_errorf(DPL_EINTR, "dpl_sleep: interrupted by signal");
  }
  return DPL_OK;
}
