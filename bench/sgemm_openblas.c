/* sgemm_openblas.c: cblas_sgemm called directly (bench/tensor.sh compares
 * dplhost's matmul with it). Usage: sgemm_openblas M K N [transa]; prints µs per call. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

int main(int argc, char **argv)
{
  if (argc < 4) { fprintf(stderr, "usage: %s M K N [transa]\n", argv[0]); return 2; }
  int m = atoi(argv[1]), k = atoi(argv[2]), n = atoi(argv[3]), ta = argc > 4 && atoi(argv[4]);
  float *a = malloc(sizeof(float) * m * k), *b = malloc(sizeof(float) * k * n), *c = malloc(sizeof(float) * m * n);
  for (long i = 0; i < (long)m * k; i++) a[i] = rand() / (float)RAND_MAX;
  for (long i = 0; i < (long)k * n; i++) b[i] = rand() / (float)RAND_MAX;
  int reps = (int)(2e8 / (2.0 * m * n * k));
  if (reps < 3) reps = 3;
  double r[5];
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, CblasNoTrans, m, n, k, 1, a, ta ? m : k, b, n, 0, c, n);
  for (int t = 0; t < 5; t++) {
    double t0 = now();
    for (int i = 0; i < reps; i++)
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, CblasNoTrans, m, n, k, 1, a, ta ? m : k, b, n, 0, c, n);
    r[t] = (now() - t0) / reps * 1e6;
  }
  qsort(r, 5, sizeof r[0], cmp);
  printf("%.3f\n", r[2]);
  printf("# corename %s\n", openblas_get_corename());
  return 0;
}
