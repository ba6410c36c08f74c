/* memcpy_bw.c: single-thread memcpy of the same sizes (bench/allreduce.sh's
 * reference): "memcpy <bytes> <seconds per copy>", median of 3 runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
  long sizes[] = { 8, 4096, 1L << 20, 16L << 20, 64L << 20 };
  long iters[] = { 2000000, 200000, 400, 40, 10 };
  char *a = malloc((size_t)(64L << 20)), *b = malloc((size_t)(64L << 20));
  if (!a || !b) return 1;
  memset(a, 1, (size_t)(64L << 20));
  memset(b, 2, (size_t)(64L << 20));
  for (int s = 0; s < 5; s++) {
    double runs[3];
    for (int rep = 0; rep < 3; rep++) {
      double t0 = now();
      for (long i = 0; i < iters[s]; i++) {
        memcpy(b, a, (size_t)sizes[s]);
        __asm__ volatile("" : : "r"(b) : "memory");
      }
      runs[rep] = (now() - t0) / (double)iters[s];
    }
    for (int i = 0; i < 3; i++)
      for (int j = i + 1; j < 3; j++)
        if (runs[j] < runs[i]) { double x = runs[i]; runs[i] = runs[j]; runs[j] = x; }
    printf("memcpy %ld %.9g\n", sizes[s], runs[1]);
  }
  free(a);
  free(b);
  return 0;
}
