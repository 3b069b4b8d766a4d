// test_blas_kernel.c: the product library's kernel (common/backend/blas_kernel.h): on a processor
// the library does not know, the re-exec (threads_exec_policy) makes it run the strongest kernel the
// processor's features allow and the start line says the project chose it; a user's
// OPENBLAS_CORETYPE always wins; the kernel table is ordered and names what it runs.
//
// The process re-executes itself once (as dflash_rank does) and checks the second life, so a
// broken re-exec, a kernel the library silently ignored, or a start line that hides the choice
// each fail here.
#include <cblas.h>
#include <stdlib.h>

#include "common/backend/blas_kernel.h"
#include "common/backend/threads.h"
#include "testing.h"

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
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4]; // the kernel computes
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
    CHECK(c[0] == 17 && c[1] == 23 && c[2] == 39 && c[3] == 53);
    return test_finish("test_blas_kernel");
}
