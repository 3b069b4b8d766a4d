// test_blas_kernel.c: the product library's kernel (common/backend/blas_kernel.h): on a processor
// the library does not know, the re-exec (threads_exec_policy) makes it run the strongest kernel the
// processor's features allow and the start line says the project chose it; a user's
// OPENBLAS_CORETYPE always wins; the kernel table is ordered and names what it runs.
//
// The process re-executes itself once (as dflash_rank does) and checks the second life, so a
// broken re-exec, a kernel the library silently ignored, or a start line that hides the choice
// each fail here. The second life also checks the chosen kernel's sgemm against a double loop on
// odd shapes (1..67 rows, columns and depth; all four transpose pairs; alpha, beta, leading
// dimensions above the width): a kernel forced onto a processor its library was not tested on must
// still compute right. Tolerance 1e-5 of sum |a||b| per output: fp32 accumulation over k <= 67
// terms in any order stays below k x 2^-24 ~ 4e-6 of that sum.
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "common/backend/blas_kernel.h"
#include "common/backend/threads.h"
#include "testing.h"

// sgemm_check: C = alpha op(A) op(B) + beta C on one shape against a double loop; the largest error
// relative to sum |alpha a b| + |beta c| of its output.
static double sgemm_check(int m, int n, int k, int ta, int tb) {
    int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1, ra = ta ? k : m, rb = tb ? n : k;
    float *a = malloc((size_t)ra * lda * sizeof *a), *b = malloc((size_t)rb * ldb * sizeof *b);
    float *c = malloc((size_t)m * ldc * sizeof *c), *c0 = malloc((size_t)m * ldc * sizeof *c0);
    for (int i = 0; i < ra * lda; i++) a[i] = (float)test_rand_pm1();
    for (int i = 0; i < rb * ldb; i++) b[i] = (float)test_rand_pm1();
    for (int i = 0; i < m * ldc; i++) c[i] = c0[i] = (float)test_rand_pm1();
    const float alpha = 0.75f, beta = 0.5f;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
                ldb, beta, c, ldc);
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double sum = 0, mag = 0;
            for (int p = 0; p < k; p++) {
                double x = ta ? a[p * lda + i] : a[i * lda + p], y = tb ? b[j * ldb + p] : b[p * ldb + j];
                sum += x * y, mag += fabs(x * y);
            }
            double want = alpha * sum + beta * c0[i * ldc + j], scale = fabs(alpha) * mag + fabs(beta * c0[i * ldc + j]);
            double err = fabs(c[i * ldc + j] - want) / (scale > 0 ? scale : 1);
            if (!(err <= worst)) worst = err; // NaN counts as the worst
        }
    free(a), free(b), free(c), free(c0);
    return worst;
}

// the strongest kernel of the table this processor runs (-1 off x86-64)
static int strongest(void) {
    int best = -1;
    for (int i = 0; i < blas_kernel_count(); i++)
        if (blas_kernel_runs_here(i)) best = i;
    return best;
}

int main(int argc, char **argv) {
    (void)argc;
    const char *phase = getenv("TEST_BLAS_PHASE");
    if (!phase) { // first life: the user's choice wins, then the re-exec
        CHECK(blas_kernel_rank("prescott") == 0);
        CHECK(blas_kernel_rank("COOPERLAKE") == blas_kernel_count() - 1 || blas_kernel_count() == 0);
        CHECK(blas_kernel_rank("Zen") == blas_kernel_rank("Haswell"));
        CHECK(blas_kernel_rank("NoSuchCore") == -1);
        for (int i = 1; i < blas_kernel_count(); i++) // weakest first: a stronger kernel runs only where the weaker does
            CHECK(!blas_kernel_runs_here(i) || blas_kernel_runs_here(i - 1));
        char k[32], why[256], line[640];
        setenv("OPENBLAS_CORETYPE", "Haswell", 1); // a user's setting (read after the library loaded: only our reading of it)
        CHECK(blas_kernel_choose(k, sizeof k, why, sizeof why) == 0 && k[0] == 0);
        CHECK_MSG(strstr(why, "set by the user") != NULL, "why: %s", why);
        unsetenv("OPENBLAS_CORETYPE");
        unsetenv("DFLASH_BLAS_CHOSE");
        setenv("OMP_WAIT_POLICY", "passive", 1); // only the kernel can cause the re-exec now
        int chose = blas_kernel_choose(k, sizeof k, why, sizeof why);
        blas_kernel_describe(line, sizeof line);
        printf("library's own kernel: %s; %s\n", openblas_get_corename(), line);
        if (!chose) { // the library knows this processor: its kernel is at least the strongest runnable
            CHECK_MSG(blas_kernel_rank(openblas_get_corename()) >= strongest(), "library %s, strongest %s",
                      openblas_get_corename(), blas_kernel_name(strongest()));
            return test_finish("test_blas_kernel");
        }
        CHECK(blas_kernel_rank(k) == strongest());
        if (test_failed) return test_finish("test_blas_kernel");
        setenv("TEST_BLAS_PHASE", "reexec", 1);
        fflush(stdout);
        threads_exec_policy(argv);
        CHECK_MSG(0, "threads_exec_policy returned: no re-exec");
        return test_finish("test_blas_kernel");
    }
    // second life: the library loaded with the project's kernel, and the line says so
    char k[32], why[256], line[640];
    blas_kernel_describe(line, sizeof line);
    printf("after the re-exec: %s\n", line);
    CHECK_MSG(blas_kernel_rank(openblas_get_corename()) == strongest(), "runs %s, strongest %s", openblas_get_corename(),
              blas_kernel_name(strongest()));
    CHECK(blas_kernel_choose(k, sizeof k, why, sizeof why) == 0); // nothing more to set: no second re-exec
    CHECK_MSG(strstr(line, "chosen by dflash_rank") && strstr(line, openblas_get_corename()), "line: %s", line);
    test_rand_seed(40);
    static const int dims[] = {1, 2, 3, 7, 16, 17, 31, 33, 48, 67};
    const int nd = (int)(sizeof dims / sizeof dims[0]);
    double worst = 0;
    int shapes = 0;
    for (int i = 0; i < nd; i++)
        for (int j = 0; j < nd; j++)
            for (int t = 0; t < 4; t++) { // every (m, n) pair, k cycling through the list, each transpose pair
                int m = dims[i], n = dims[j], kd = dims[(i + 3 * j + t) % nd];
                double e = sgemm_check(m, n, kd, t & 1, t >> 1);
                shapes++;
                if (!(e <= 1e-5)) CHECK_MSG(0, "sgemm %dx%dx%d trans %d/%d: error %.3g of sum |ab|", m, n, kd, t & 1, t >> 1, e);
                if (!(e <= worst)) worst = e;
            }
    printf("sgemm on %s: %d shapes, largest error %.3g of sum |ab| (tolerance 1e-5)\n", openblas_get_corename(), shapes, worst);
    return test_finish("test_blas_kernel");
}
