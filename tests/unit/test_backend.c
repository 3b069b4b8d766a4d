// test_backend.c: backend selection, memory round trips, and the CPU GEMM against a naive loop.
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/backend/backend.h"
#include "testing.h"

// One GEMM case with padded strides: checks every element of C against a double-precision triple
// loop, and that the padding columns of C are untouched.
//
// Tolerance: a float dot product of length k, summed in any order (blocked, FMA), has
// |computed - exact| <= gamma_k * sum_p |a_ip b_pj|, gamma_k = k u / (1 - k u), u = 2^-24; the
// alpha/beta scaling and the final add cost a few more roundings. We allow (k + 4) * 2^-23 times
// |alpha| sum |a b| + |beta c|: twice the textbook bound, far below any indexing or transpose bug.
static int gemm_case(backend *be, int ta, int tb, int m, int n, int k, float alpha, float beta,
                     int pad) {
    int a_rows = ta ? k : m, a_cols = ta ? m : k;
    int b_rows = tb ? n : k, b_cols = tb ? k : n;
    int lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
    if (lda < 1) lda = 1;
    if (ldb < 1) ldb = 1;
    float *a = malloc(sizeof(float) * (size_t)(a_rows * lda + 1));
    float *b = malloc(sizeof(float) * (size_t)(b_rows * ldb + 1));
    float *c = malloc(sizeof(float) * (size_t)(m * ldc + 1));
    double *ref = malloc(sizeof(double) * (size_t)(m * n + 1));
    for (int i = 0; i < a_rows * lda; i++) a[i] = (float)test_rand_pm1();
    for (int i = 0; i < b_rows * ldb; i++) b[i] = (float)test_rand_pm1();
    for (int i = 0; i < m * ldc; i++) c[i] = beta == 0.0f ? NAN : (float)test_rand_pm1(); // beta 0: C is not read
    double *bound = malloc(sizeof(double) * (size_t)(m * n + 1));
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double s = 0, sa = 0;
            for (int p = 0; p < k; p++) {
                double av = ta ? a[p * lda + i] : a[i * lda + p];
                double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
                s += av * bv;
                sa += fabs(av * bv);
            }
            double cv = beta == 0.0f ? 0.0 : (double)c[i * ldc + j];
            ref[i * n + j] = alpha * s + beta * cv;
            bound[i * n + j] = (k + 4) * 0x1p-23 * (fabs(alpha) * sa + fabs(beta * cv)) + 1e-30;
        }
    }
    float pad_value = pad ? c[ldc - 1] : 0;
    backend_gemm(be, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, DT_F32, DT_F32);
    int bad = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double err = fabs((double)c[i * ldc + j] - ref[i * n + j]);
            if (!(err <= bound[i * n + j])) {
                if (bad++ < 3)
                    test_fail(__FILE__, __LINE__,
                              "gemm ta=%d tb=%d m=%d n=%d k=%d: C[%d,%d] = %.9g, want %.9g", ta, tb,
                              m, n, k, i, j, c[i * ldc + j], ref[i * n + j]);
            }
        }
    if (pad && m > 0 && n > 0) { // the padding after row 0 is not written
        int same = c[ldc - 1] == pad_value || (isnan(c[ldc - 1]) && isnan(pad_value));
        bad += !same;
    }
    free(a);
    free(b);
    free(c);
    free(ref);
    free(bound);
    return bad;
}

static void test_cpu_gemm(backend *be) {
    static const int sizes[] = {1, 3, 17, 65};
    int bad = 0, cases = 0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int im = 0; im < 4; im++)
                for (int in = 0; in < 4; in++)
                    for (int ik = 0; ik < 4; ik++) {
                        int m = sizes[im], n = sizes[in], k = sizes[ik];
                        int pad = (im + in + ik) % 3 * 5; // strides wider than a row, sometimes
                        bad += gemm_case(be, ta, tb, m, n, k, 1.0f, 0.0f, pad) != 0;
                        bad += gemm_case(be, ta, tb, m, n, k, -0.75f, 1.5f, pad + 1) != 0;
                        cases += 2;
                    }
    CHECK_MSG(bad == 0, "%d of %d GEMM cases wrong", bad, cases);
    // a larger non-square one, and the edge sizes
    CHECK(gemm_case(be, 0, 1, 130, 257, 300, 0.5f, 0.25f, 3) == 0);
    CHECK(gemm_case(be, 1, 0, 64, 33, 1000, 1.0f, 1.0f, 0) == 0);
    CHECK(gemm_case(be, 0, 0, 3, 4, 0, 1.0f, 2.0f, 1) == 0); // k = 0: C = beta C
    CHECK(gemm_case(be, 0, 0, 0, 4, 5, 1.0f, 2.0f, 0) == 0); // m = 0: nothing
}

static void test_open(void) {
    backend be;
    CHECK(backend_open(&be, "cpu", 0) == 0);
    CHECK(be.kind == BACKEND_CPU && be.device == DEVICE_CPU && be.threads >= 1);
    CHECK(strncmp(be.name, "cpu (", 5) == 0);
    backend_close(&be);

    CHECK(backend_open(&be, "auto", 3) == 0);
    if (backend_cuda_devices() == 0) CHECK_MSG(be.kind == BACKEND_CPU, "auto without a GPU: CPU");
    else CHECK_MSG(be.kind == BACKEND_CUDA, "auto with a GPU: CUDA");
    backend_close(&be);

    if (!backend_compiled_cuda()) {
        CHECK(backend_cuda_devices() == 0);
        CHECK_ERR(backend_open(&be, "cuda", 0), "built without CUDA");
    } else if (backend_cuda_devices() == 0) {
        CHECK_ERR(backend_open(&be, "cuda", 0), "no CUDA device");
        printf("note: CUDA compiled, no device: '%s'\n", error_msg());
    } else {
        CHECK(backend_open(&be, "cuda", 0) == 0 && be.kind == BACKEND_CUDA);
        backend_close(&be);
    }
    CHECK_ERR(backend_open(&be, "bogus", 0), "unknown backend 'bogus'");
    CHECK_ERR(backend_open(&be, "CPU", 0), "unknown backend 'CPU'");
}

static void test_memory(backend *be) {
    enum { N = 1000 };
    unsigned char host[N], back[N];
    for (int i = 0; i < N; i++) host[i] = (unsigned char)(i * 7 + 1);
    unsigned char *dev = backend_alloc(be, N);
    CHECK(dev != NULL && (uintptr_t)dev % 256 == 0);
    backend_copy_to_device(be, dev, host, N);
    memset(back, 0, N);
    backend_copy_to_host(be, back, dev, N);
    CHECK(memcmp(host, back, N) == 0);
    backend_memset_zero(be, dev + 100, 50);
    backend_sync(be);
    backend_copy_to_host(be, back, dev, N);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= back[i] == ((i >= 100 && i < 150) ? 0 : host[i]);
    CHECK_MSG(ok, "memset_zero touched the wrong bytes");
    backend_free(be, dev);
    void *z = backend_alloc(be, 0); // zero bytes: a valid, freeable pointer
    CHECK(z != NULL);
    backend_free(be, z);
    backend_free(be, NULL);
#ifndef __SANITIZE_ADDRESS__ // ASan aborts on impossible allocations instead of returning NULL
    error_clear();
    CHECK(backend_alloc(be, (size_t)1 << 62) == NULL && strstr(error_msg(), "out of host memory"));
#endif
    size_t free_b = 0, total_b = 0;
    backend_mem_info(be, &free_b, &total_b);
    CHECK(total_b > ((size_t)64 << 20) && free_b > 0 && free_b <= total_b);
}

// A programming error in a GEMM call is fatal: run it in a child and expect exit code 1.
static int child_exit(void (*fn)(void)) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 2);
        fn();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void gemm_bf16_on_cpu(void) {
    backend be;
    backend_open(&be, "cpu", 0);
    float a[4] = {0}, b[4] = {0}, c[4] = {0};
    backend_gemm(&be, 0, 0, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2, DT_BF16, DT_F32);
}

static void gemm_bad_stride(void) {
    backend be;
    backend_open(&be, "cpu", 0);
    float a[4] = {0}, b[4] = {0}, c[4] = {0};
    backend_gemm(&be, 0, 0, 2, 2, 2, 1.0f, a, 1, b, 2, 0.0f, c, 2, DT_F32, DT_F32);
}

static void test_gemm_misuse(void) {
    CHECK(child_exit(gemm_bf16_on_cpu) == 1);
    CHECK(child_exit(gemm_bad_stride) == 1);
}

int main(void) {
    test_rand_seed(12345);
    test_open();
    backend cpu;
    CHECK(backend_open(&cpu, "cpu", 0) == 0);
    test_memory(&cpu);
    test_cpu_gemm(&cpu);
    test_gemm_misuse();
    backend_close(&cpu);
    return test_finish("test_backend");
}
