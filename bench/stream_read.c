/* A plain STREAM-style read of a buffer far larger than the last-level cache, written without any
 * of latprof's code: the honest bandwidth that latprof's own ceiling probe (and so every MBU it
 * reports) is checked against. Each thread sums its static share of an array of doubles with a
 * loop the compiler vectorises (-O3 -march=native); the buffer is first touched by the same
 * threads, so pages sit on their NUMA node. Repetitions take turns reading a thread's share as one
 * run or as 4 runs side by side, a line of each in turn (on AMD Zen 3 the 4 runs read up to 1.2x
 * as fast: reports/cpu-kernels.md); best_GBps is the best of either. Prints one line:
 *   stream_read: bytes=N threads=T best_GBps=X median_GBps=Y best_1run_GBps=A best_4runs_GBps=B
 *   reps=R
 * Usage: stream_read [MiB (default 2048)] [repetitions (default 10)]; OMP_NUM_THREADS sets the
 * threads. GB are 1e9 bytes, as STREAM's MB/s are 1e6. */
#define _GNU_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  const long mib = argc > 1 ? strtol(argv[1], NULL, 10) : 2048;
  const int reps = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 10;
  if (mib < 64 || mib > (1L << 20) || reps < 1 || reps > 1000) {
    fprintf(stderr, "stream_read: usage: stream_read [MiB 64..1048576] [repetitions 1..1000]\n");
    return 2;
  }
  const size_t n = (size_t)mib * (1u << 20) / sizeof(double);
  double* a = NULL;
  if (posix_memalign((void**)&a, (size_t)2 << 20, n * sizeof(double)) != 0) {
    fprintf(stderr, "stream_read: cannot allocate %ld MiB; pass a smaller size\n", mib);
    return 2;
  }
  madvise(a, n * sizeof(double), MADV_HUGEPAGE);
#pragma omp parallel
  { /* first touch by the thread that reads it (the same static split as below) */
    const size_t nt = (size_t)omp_get_num_threads(), tid = (size_t)omp_get_thread_num();
    const size_t blocks = n / 32, i0 = blocks * tid / nt * 32, i1 = blocks * (tid + 1) / nt * 32;
    for (size_t i = i0; i < i1; ++i) a[i] = 1.0 + (double)(i & 7);
  }
  double* rate = malloc(sizeof(double) * (size_t)reps);
  double best[2] = {0, 0}; /* one run, 4 runs */
  double check = 0;
  for (int r = 0; r < reps + 1; ++r) { /* one untimed pass first */
    const int runs = r % 2 ? 1 : 4;
    double sum = 0;
    const double t0 = now_s();
    /* 32 independent partial sums per thread (n is a multiple of 64 here), so the adds vectorise
     * without -ffast-math and no add latency chain limits the loads; with 4 runs 8 of them a run,
     * each run's next 8 doubles (one line) in turn. */
#pragma omp parallel reduction(+ : sum)
    {
      const size_t nt = (size_t)omp_get_num_threads(), tid = (size_t)omp_get_thread_num();
      const size_t blocks = n / 32, i0 = blocks * tid / nt * 32, i1 = blocks * (tid + 1) / nt * 32;
      double acc[32] = {0};
      if (runs == 1) {
        for (size_t i = i0; i < i1; i += 32)
          for (int j = 0; j < 32; ++j) acc[j] += a[i + (size_t)j];
      } else {
        const size_t h = (i1 - i0) / 4; /* a multiple of 8: i1 - i0 is of 32 */
        for (size_t i = i0; i < i0 + h; i += 8)
          for (int k = 0; k < 4; ++k)
            for (int j = 0; j < 8; ++j) acc[8 * k + j] += a[i + (size_t)k * h + (size_t)j];
      }
      for (int j = 0; j < 32; ++j) sum += acc[j];
    }
    const double dt = now_s() - t0;
    check += sum;
    if (r > 0) {
      rate[r - 1] = (double)(n * sizeof(double)) / dt * 1e-9;
      if (rate[r - 1] > best[runs == 4]) best[runs == 4] = rate[r - 1];
    }
  }
  qsort(rate, (size_t)reps, sizeof(double), cmp_double);
  printf(
      "stream_read: bytes=%zu threads=%d best_GBps=%.2f median_GBps=%.2f best_1run_GBps=%.2f "
      "best_4runs_GBps=%.2f reps=%d check=%.0f\n",
      n * sizeof(double), omp_get_max_threads(), rate[reps - 1], rate[reps / 2], best[0], best[1],
      reps, check);
  free(rate);
  free(a);
  return 0;
}
