/* The reference that `python -m uopc.bench peak` is checked against (issue: within 25%): a hand-written AVX-512
   FMA loop and a STREAM triad, both with OpenMP. Build and run:
     gcc -O3 -march=native -fopenmp notes/peak_reference.c -o /tmp/peak_reference && /tmp/peak_reference */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

static double now(void) { return omp_get_wtime(); }
static float results[1024];   /* every chain's result is kept, so that the compiler cannot drop the loop */

static double fma_gflops(long iters) {
  double best = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now();
    #pragma omp parallel
    {
      __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
      /* different starting values: identical chains would be merged into one by the compiler */
      __m512 x0 = _mm512_set1_ps(0), x1 = _mm512_set1_ps(1), x2 = _mm512_set1_ps(2), x3 = _mm512_set1_ps(3);
      __m512 x4 = _mm512_set1_ps(4), x5 = _mm512_set1_ps(5), x6 = _mm512_set1_ps(6), x7 = _mm512_set1_ps(7);
      __m512 x8 = _mm512_set1_ps(8), x9 = _mm512_set1_ps(9);
      for (long i = 0; i < iters; i++) {   /* 10 independent chains hide the 4-cycle FMA latency on 2 pipes */
        x0 = _mm512_fmadd_ps(x0, b, c); x1 = _mm512_fmadd_ps(x1, b, c); x2 = _mm512_fmadd_ps(x2, b, c);
        x3 = _mm512_fmadd_ps(x3, b, c); x4 = _mm512_fmadd_ps(x4, b, c); x5 = _mm512_fmadd_ps(x5, b, c);
        x6 = _mm512_fmadd_ps(x6, b, c); x7 = _mm512_fmadd_ps(x7, b, c); x8 = _mm512_fmadd_ps(x8, b, c);
        x9 = _mm512_fmadd_ps(x9, b, c);
      }
      __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x0, x1), _mm512_add_ps(x2, x3)),
                               _mm512_add_ps(_mm512_add_ps(x4, x5), _mm512_add_ps(_mm512_add_ps(x6, x7), _mm512_add_ps(x8, x9))));
      results[omp_get_thread_num() % 1024] += _mm512_reduce_add_ps(s);
    }
    double t = now() - t0;
    if (t < best) best = t;
  }
  return omp_get_max_threads() * (double)iters * 10 * 16 * 2 / best / 1e9;
}

/* like NumPy's allocator: large arrays aligned to 2 MB and marked for transparent huge pages (fewer TLB misses) */
static float *big(long n) {
  size_t bytes = ((n * sizeof(float)) + (2 << 20) - 1) & ~(size_t)((2 << 20) - 1);
  float *p = aligned_alloc(2 << 20, bytes);
  madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

static double triad_gbs(long n) {
  float *a = big(n), *b = big(n), *c = big(n);
  #pragma omp parallel for
  for (long i = 0; i < n; i++) { a[i] = 0; b[i] = 1; c[i] = 2; }
  double best = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now();
    #pragma omp parallel for
    for (long i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
    double t = now() - t0;
    if (t < best) best = t;
  }
  free(a); free(b); free(c);
  return 3.0 * 4 * n / best / 1e9;
}

int main(void) {
  printf("hand-written AVX-512 FMA  %9.1f GFLOP/s  (checksum %g)\n", fma_gflops(20000000), results[0]);
  printf("STREAM triad              %9.1f GB/s\n", triad_gbs(32L * 1024 * 1024));
  return 0;
}
