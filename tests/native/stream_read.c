/*
 * A STREAM-like read benchmark, for the tests to check ggml-viz's measured memory read bandwidth
 * (`ggml-viz limits`' memory_read) against: independent of ggml.
 *
 *   stream_read [MIB [RUNS]]   (512 MiB per array, 10 runs by default)
 *
 * Allocates three arrays of doubles of MIB each (far larger than the last-level cache), writes
 * every element (so every page is mapped, none the kernel's shared zero page), then times RUNS
 * runs of a read kernel over one array: a sum, with OpenMP's threads (OMP_NUM_THREADS) and SIMD.
 * It counts 8 bytes per element read and prints the best run's bandwidth as one line:
 *
 *   read_gb_per_s=<GB/s> threads=<n> bytes=<bytes> best_seconds=<s>
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 512;
    int runs = argc > 2 ? atoi(argv[2]) : 10;
    size_t n = (mib << 20) / sizeof(double);
    double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double)), *c = malloc(n * sizeof(double));
    if (!a || !b || !c) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        a[i] = 1.0 + (double)(i % 7);
        b[i] = 2.0;
        c[i] = 0.0;
    }
    double best = 1e30, checksum = 0.0;
    for (int run = 0; run <= runs; run++) {  /* run 0 unmeasured: the threads start */
        double sum = 0.0;
        double start = omp_get_wtime();
#pragma omp parallel for simd reduction(+ : sum)
        for (size_t i = 0; i < n; i++)
            sum += a[i];
        double seconds = omp_get_wtime() - start;
        checksum += sum;
        if (run > 0 && seconds < best)
            best = seconds;
    }
    /* the checksum keeps the compiler from dropping the reads; b and c keep the footprint STREAM's */
    if (checksum == 0.0 || b[n / 2] + c[n / 3] < 0.0)
        printf("unexpected checksum\n");
    printf("read_gb_per_s=%.4f threads=%d bytes=%zu best_seconds=%.6f\n", n * sizeof(double) / best / 1e9,
           omp_get_max_threads(), n * sizeof(double), best);
    free(a);
    free(b);
    free(c);
    return 0;
}
