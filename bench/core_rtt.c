/* core_rtt.c: the round trip of one cache line between two threads pinned to CPUs 0 and 1
 * (bench/trainer_ddp.sh prints it next to its DDP figures). On a VM the two vCPUs may sit in
 * one core complex (~50-70 ns) or far apart (~300+ ns), and that state changes while jobs
 * run; a 2-rank all-reduce follows it. Prints "core_rtt_ns N", or nothing with one CPU. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#define ROUNDS 100000
static _Atomic long flag __attribute__((aligned(64)));

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int pin(int cpu)
{
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *echo(void *arg)
{
  (void)arg;
  pin(1);
  for (long i = 0; i < ROUNDS; i++) {
    while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 1) {}
    atomic_store_explicit(&flag, 2 * i + 2, memory_order_release);
  }
  return NULL;
}

int main(void)
{
  cpu_set_t s;
  if (sched_getaffinity(0, sizeof s, &s) || !CPU_ISSET(0, &s) || !CPU_ISSET(1, &s) || pin(0)) return 0;
  pthread_t t;
  if (pthread_create(&t, NULL, echo, NULL)) return 0;
  double t0 = now();
  for (long i = 0; i < ROUNDS; i++) {
    atomic_store_explicit(&flag, 2 * i + 1, memory_order_release);
    while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 2) {}
  }
  double dt = now() - t0;
  pthread_join(t, NULL);
  printf("core_rtt_ns %.0f\n", dt / ROUNDS * 1e9);
  return 0;
}
