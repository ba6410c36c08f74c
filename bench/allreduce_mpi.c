/* allreduce_mpi.c: MPI_Allreduce (float sum, in place) timing for bench/allreduce.sh,
 * same sizes, iterations and method as allreduce_dpl.lua: median of 3 runs of
 * the slowest rank. Prints "mpi <bytes> <seconds per call>" from rank 0. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char *sc = getenv("BENCH_ITERS_SCALE");
  double scale = sc ? atof(sc) : 1.0;
  long sizes[] = { 8, 4096, 1L << 20, 16L << 20, 64L << 20 };
  long iters[] = { 20000, 5000, 200, 20, 6 };
  float *buf = calloc((size_t)(64L << 20) / 4, sizeof(float));
  for (int s = 0; s < 5; s++) {
    int n = (int)(sizes[s] / 4);
    long it = (long)(iters[s] * scale);
    if (it < 2) it = 2;
    for (long i = 0; i < (it / 10 > 2 ? it / 10 : 2); i++)
      MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double runs[3];
    for (int rep = 0; rep < 3; rep++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (long i = 0; i < it; i++) MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double t = (MPI_Wtime() - t0) / (double)it;
      MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      runs[rep] = t;
    }
    for (int i = 0; i < 3; i++)
      for (int j = i + 1; j < 3; j++)
        if (runs[j] < runs[i]) { double x = runs[i]; runs[i] = runs[j]; runs[j] = x; }
    if (rank == 0) printf("mpi %ld %.9g\n", sizes[s], runs[1]);
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
