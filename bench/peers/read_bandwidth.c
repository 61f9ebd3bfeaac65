// Memory read bandwidth, for bench/peers when the build has no bench_numerics (which measures
// the same thing the same way): each of T threads sums its share of a 1 GiB buffer, larger
// than any last-level cache, with four independent vector accumulators; the best of R passes.
//
//   cc -O3 -march=native -pthread read_bandwidth.c -o read_bandwidth
//   read_bandwidth THREADS [PASSES]      prints "bandwidth<TAB>THREADS<TAB>GB/s"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef float v8 __attribute__((vector_size(32)));

enum { kBytes = 1 << 30 };

struct share {
  const float* data;
  size_t n;
  float sum;
};

static pthread_barrier_t start;

static void* sum_share(void* arg) {
  struct share* s = arg;
  pthread_barrier_wait(&start);
  v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
  const v8* p = (const v8*)s->data;
  for (size_t i = 0; i < s->n / 8; i += 4) {
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
  }
  v8 t = a0 + a1 + a2 + a3;
  s->sum = 0;
  for (int j = 0; j < 8; ++j) s->sum += t[j];
  return NULL;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 1;
  const int passes = argc > 2 ? atoi(argv[2]) : 10;
  if (threads < 1 || threads > 256 || passes < 1) {
    fprintf(stderr, "usage: read_bandwidth THREADS [PASSES]\n");
    return 2;
  }
  float* data = aligned_alloc(2 << 20, kBytes);
  if (data == NULL) return 1;
  madvise(data, kBytes, MADV_HUGEPAGE);
  const size_t n = kBytes / sizeof(float), per = n / threads / 32 * 32;
  for (size_t i = 0; i < n; ++i) data[i] = 1.0f;
  struct share shares[256];
  pthread_t ids[256];
  double best = 1e30;
  float sink = 0;
  for (int r = 0; r < passes; ++r) {
    pthread_barrier_init(&start, NULL, threads + 1);
    for (int t = 0; t < threads; ++t) {
      shares[t] = (struct share){data + t * per, per, 0};
      pthread_create(&ids[t], NULL, sum_share, &shares[t]);
    }
    const double t0 = now();
    pthread_barrier_wait(&start);
    for (int t = 0; t < threads; ++t) pthread_join(ids[t], NULL);
    const double dt = now() - t0;
    pthread_barrier_destroy(&start);
    for (int t = 0; t < threads; ++t) sink += shares[t].sum;
    if (dt < best) best = dt;
  }
  printf("bandwidth\t%d\t%.2f\n", threads, (double)per * threads * sizeof(float) / best / 1e9);
  return sink == 0.0f ? 3 : 0;
}
