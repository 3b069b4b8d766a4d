// bench_gemm_rows.c: the few-row product of the decode (gemm_rows.h) against OpenBLAS's sgemm on the
// same operands, side by side in one run: C[m, n] = A[m, k] . B[n, k]^T for each m of a list.
//
//   bench_gemm_rows [--n N] [--k K] [--m-list 1,2,4,...] [--threads T] [--repeat R]
//
// Defaults: a SmolLM2-like MLP projection (n 1536, k 576), m 1..64, 1 thread, 200 repeats after 3
// warm-up calls. Prints per m: microseconds per call and GFLOP/s for each side, the ratio
// (OpenBLAS time / gemm_rows time) and the largest difference between the two results relative to
// sum |a||b| of that output (the rounding of two summation orders: about 1e-7). m above
// GEMM_ROWS_MAX_M is timed on OpenBLAS only (gemm_rows refuses it).
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/backend/gemm_rows.h"
#include "common/backend/threads.h"
#include "common/core/rng.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// product: one call of gemm_rows (which = 1) or of OpenBLAS (which = 0), C = A B^T.
static void product(int which, int m, int n, int k, const float *a, const float *b, float *c) {
    if (which)
        gemm_rows(m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
}

// time_calls: seconds per call, over `repeat` calls after 3 warm-up calls.
static double time_calls(int which, int m, int n, int k, const float *a, const float *b, float *c, int repeat) {
    for (int r = 0; r < 3; r++) product(which, m, n, k, a, b, c);
    double t0 = now_s();
    for (int r = 0; r < repeat; r++) product(which, m, n, k, a, b, c);
    return (now_s() - t0) / repeat;
}

int main(int argc, char **argv) {
    int n = 1536, k = 576, threads = 1, repeat = 200;
    const char *mlist = "1,2,4,8,16,32,64";
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "bench_gemm_rows: %s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--n"))
            n = atoi(v);
        else if (!strcmp(argv[i], "--k"))
            k = atoi(v);
        else if (!strcmp(argv[i], "--m-list"))
            mlist = v;
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(v);
        else if (!strcmp(argv[i], "--repeat"))
            repeat = atoi(v);
        else {
            fprintf(stderr, "bench_gemm_rows: unknown option '%s'\n", argv[i]);
            return 2;
        }
        i++;
    }
    if (n < 1 || k < 1 || threads < 1 || repeat < 1) {
        fprintf(stderr, "bench_gemm_rows: --n, --k, --threads and --repeat must be >= 1\n");
        return 2;
    }
    int ms[32], nm = 0, mmax = 0;
    for (const char *p = mlist; *p && nm < 32;) {
        int m = atoi(p);
        if (m < 1) {
            fprintf(stderr, "bench_gemm_rows: --m-list '%s' is not a list of counts >= 1\n", mlist);
            return 2;
        }
        ms[nm++] = m;
        mmax = m > mmax ? m : mmax;
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    char why[256];
    threads = threads_setup(threads, 1, why, (int)sizeof why);
    float *a = malloc(sizeof(float) * (size_t)mmax * (size_t)k), *b = malloc(sizeof(float) * (size_t)n * (size_t)k);
    float *c0 = malloc(sizeof(float) * (size_t)mmax * (size_t)n), *c1 = malloc(sizeof(float) * (size_t)mmax * (size_t)n);
    if (!a || !b || !c0 || !c1) {
        fprintf(stderr, "bench_gemm_rows: out of memory for n %d, k %d, m %d\n", n, k, mmax);
        return 1;
    }
    rng g;
    rng_init(&g, 12345u, 0, 0);
    for (size_t i = 0; i < (size_t)mmax * (size_t)k; i++)
        a[i] = (float)(2.0 * rng_uniform(&g) - 1.0);
    for (size_t i = 0; i < (size_t)n * (size_t)k; i++)
        b[i] = (float)(2.0 * rng_uniform(&g) - 1.0);
    printf("# n %d, k %d, %d thread(s), %d repeats; gemm_rows kernel: %s\n", n, k, threads, repeat,
           gemm_rows_isa() == 2 ? "AVX-512" : gemm_rows_isa() == 1 ? "AVX2" : "none (OpenBLAS only)");
    printf("| m | OpenBLAS us | OpenBLAS GFLOP/s | gemm_rows us | gemm_rows GFLOP/s | ratio | max rel diff |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nm; i++) {
        int m = ms[i];
        double flop = 2.0 * m * (double)n * k;
        double tb = time_calls(0, m, n, k, a, b, c0, repeat);
        if (m > GEMM_ROWS_MAX_M || !gemm_rows_isa()) {
            printf("| %d | %.1f | %.1f | - | - | - | - |\n", m, 1e6 * tb, flop / tb * 1e-9);
            continue;
        }
        double tr = time_calls(1, m, n, k, a, b, c1, repeat);
        double worst = 0.0;
        for (int r = 0; r < m; r++)
            for (int j = 0; j < n; j++) {
                double scale = 0.0;
                for (int q = 0; q < k; q++)
                    scale += fabs((double)a[(size_t)r * k + q] * b[(size_t)j * k + q]);
                double d = fabs((double)c0[(size_t)r * n + j] - c1[(size_t)r * n + j]) / (scale > 0 ? scale : 1);
                worst = d > worst ? d : worst;
            }
        printf("| %d | %.1f | %.1f | %.1f | %.1f | %.2fx | %.1e |\n", m, 1e6 * tb, flop / tb * 1e-9, 1e6 * tr,
               flop / tr * 1e-9, tb / tr, worst);
    }
    free(a);
    free(b);
    free(c0);
    free(c1);
    return 0;
}
