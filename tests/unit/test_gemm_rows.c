// test_gemm_rows.c: the few-row product without packing (common/backend/gemm_rows.h), each kernel
// the CPU has (AVX-512, AVX2 + FMA):
//   - against a double-precision dot product on shapes that cross every tile edge (m 1..9 and 32,
//     n 1..9 and odd hundreds, k 1..17 and 576, 1000, 1537: below, at and past a vector step),
//     with row strides larger than the rows, alpha and beta 0 / 1 / other; tolerance 2e-6 relative
//     to sum |a||b| (fp32 sums of up to 1537 products: about k * 2^-24 in the worst order, 1e-4,
//     but a fixed tree of lanes is far closer; 2e-6 fails if any product or lane is lost or doubled)
//   - a row's result does not depend on the other rows in the call nor on the thread count: every
//     row of an m-row product equals, bit for bit, the same row computed alone (m = 1), with 1 and
//     2 threads (what makes a decode of 1 sequence and of 32 give the same tokens)
//   - beta = 0 never reads C (NaN there stays out), m past GEMM_ROWS_MAX_M is declined (returns 0)
//   - backend_gemm on the CPU takes this path for its few-row A B^T products and OpenBLAS for the rest,
//     with results within the same tolerance of each other
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/backend/gemm_rows.h"
#include "testing.h"

// max over C of |C - ref| / sum_k |a||b|
static double check_one(int m, int n, int k, float alpha, float beta, unsigned seed) {
    test_rand_seed(seed);
    int lda = k + 3, ldb = k + 5, ldc = n + 2;
    float *a = malloc(sizeof(float) * (size_t)m * lda), *b = malloc(sizeof(float) * (size_t)n * ldb);
    float *c = malloc(sizeof(float) * (size_t)m * ldc), *c0 = malloc(sizeof(float) * (size_t)m * ldc);
    for (int i = 0; i < m * lda; i++) a[i] = (float)test_rand_pm1();
    for (int i = 0; i < n * ldb; i++) b[i] = (float)test_rand_pm1();
    for (int i = 0; i < m * ldc; i++) c0[i] = c[i] = beta == 0.0f ? NAN : (float)test_rand_pm1();
    CHECK(gemm_rows(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == 1);
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int p = 0; p < k; p++) {
                s += (double)a[(size_t)i * lda + p] * b[(size_t)j * ldb + p];
                mag += fabs((double)a[(size_t)i * lda + p] * b[(size_t)j * ldb + p]);
            }
            double ref = alpha * s + (beta == 0.0f ? 0.0 : beta * (double)c0[(size_t)i * ldc + j]);
            double e = fabs(c[(size_t)i * ldc + j] - ref) / (fabs(alpha) * mag + fabs(beta) + 1e-30);
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
        }
    for (int i = 0; i < m; i++) // the padding past n untouched
        for (int j = n; j < ldc; j++) CHECK(memcmp(&c[(size_t)i * ldc + j], &c0[(size_t)i * ldc + j], sizeof(float)) == 0);
    free(a), free(b), free(c), free(c0);
    return worst;
}

static void test_values(const char *isa) {
    static const int ms[] = {1, 2, 3, 4, 5, 7, 9, 32}, ns[] = {1, 2, 3, 4, 5, 7, 9, 301}, ks[] = {1, 7, 8, 15, 16, 17, 576, 1537};
    static const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {-0.5f, 0.25f}};
    double worst = 0;
    unsigned seed = 7;
    for (size_t x = 0; x < sizeof ms / sizeof *ms; x++)
        for (size_t y = 0; y < sizeof ns / sizeof *ns; y++)
            for (size_t z = 0; z < sizeof ks / sizeof *ks; z++)
                for (int w = 0; w < 3; w++) {
                    double e = check_one(ms[x], ns[y], ks[z], ab[w][0], ab[w][1], seed++);
                    if (e > worst) worst = e;
                    if (e > 2e-6) {
                        CHECK_MSG(0, "%s m %d n %d k %d alpha %g beta %g: error %.3g", isa, ms[x], ns[y], ks[z],
                                  ab[w][0], ab[w][1], e);
                        return;
                    }
                }
    char what[64];
    snprintf(what, sizeof what, "gemm_rows %s vs double", isa);
    test_report(what, worst, 2e-6);
}

// every row of a 32-row product = the same row alone, bit for bit, at 1 and 2 threads
static void test_row_independent(const char *isa) {
    int m = 32, n = 1003, k = 577, saved = omp_get_max_threads();
    test_rand_seed(3);
    float *a = malloc(sizeof(float) * (size_t)m * k), *b = malloc(sizeof(float) * (size_t)n * k);
    float *all = malloc(sizeof(float) * (size_t)m * n), *one = malloc(sizeof(float) * n);
    for (int i = 0; i < m * k; i++) a[i] = (float)test_rand_pm1();
    for (int i = 0; i < n * k; i++) b[i] = (float)test_rand_pm1();
    int diff = 0;
    for (int t = 1; t <= 2; t++) {
        omp_set_num_threads(t);
        CHECK(gemm_rows(m, n, k, 1.0f, a, k, b, k, 0.0f, all, n) == 1);
        for (int i = 0; i < m; i++) {
            omp_set_num_threads(3 - t); // the single row under the other thread count
            CHECK(gemm_rows(1, n, k, 1.0f, a + (size_t)i * k, k, b, k, 0.0f, one, n) == 1);
            diff += memcmp(one, all + (size_t)i * n, sizeof(float) * n) != 0;
        }
    }
    omp_set_num_threads(saved);
    CHECK_MSG(diff == 0, "%s: %d of %d rows differ from the same row computed alone", isa, diff, 2 * m);
    free(a), free(b), free(all), free(one);
}

static void test_backend(void) {
    backend be;
    CHECK(backend_open(&be, "cpu", 0) == 0);
    int m = 8, n = 515, k = 300;
    test_rand_seed(11);
    float *a = malloc(sizeof(float) * m * k), *b = malloc(sizeof(float) * n * k), *c = malloc(sizeof(float) * m * n);
    float *ref = malloc(sizeof(float) * m * n);
    for (int i = 0; i < m * k; i++) a[i] = (float)test_rand_pm1();
    for (int i = 0; i < n * k; i++) b[i] = (float)test_rand_pm1();
    int prev = gemm_rows_force_isa(0); // OpenBLAS
    backend_gemm(&be, 0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, ref, n, DT_F32, DT_F32);
    gemm_rows_force_isa(prev);
    backend_gemm(&be, 0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n, DT_F32, DT_F32);
    test_report("backend_gemm rows vs OpenBLAS", test_rel_err(c, ref, (size_t)m * n), 1e-5);
    CHECK(test_rel_err(c, ref, (size_t)m * n) < 1e-5);
    CHECK(gemm_rows(GEMM_ROWS_MAX_M + 1, n, k, 1.0f, a, k, b, k, 0.0f, c, n) == 0 || gemm_rows_isa() == 0);
    free(a), free(b), free(c), free(ref);
    backend_close(&be);
}

int main(void) {
    __builtin_cpu_init();
    int best = gemm_rows_isa(), ran = 0;
    if (__builtin_cpu_supports("avx512f")) {
        gemm_rows_force_isa(2);
        test_values("AVX-512");
        test_row_independent("AVX-512");
        ran++;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        gemm_rows_force_isa(1);
        test_values("AVX2");
        test_row_independent("AVX2");
        ran++;
    }
    gemm_rows_force_isa(-1);
    CHECK(gemm_rows_isa() == best);
    if (!ran) printf("  (no AVX2 on this CPU: gemm_rows declines, OpenBLAS does every product)\n");
    test_backend();
    return test_finish("test_gemm_rows");
}
