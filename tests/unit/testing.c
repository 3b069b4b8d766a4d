// testing.c: see testing.h.
#include "testing.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/core/fsutil.h"
#include "common/core/half.h"

int test_passed = 0, test_failed = 0;
static char tmpdir[512];

void test_fail(const char *file, int line, const char *fmt, ...) {
    test_failed++;
    const char *base = strrchr(file, '/');
    fprintf(stderr, "FAIL %s:%d: ", base ? base + 1 : file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

const char *test_tmpdir(void) {
    if (!tmpdir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/dflash_test_XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return tmpdir;
}

const char *test_path(const char *name) {
    static char bufs[8][1024];
    static int next = 0;
    char *b = bufs[next++ % 8];
    snprintf(b, 1024, "%s/%s", test_tmpdir(), name);
    return b;
}

const char *test_src_path(const char *rel) {
    static char bufs[4][1024];
    static int next = 0;
    char *b = bufs[next++ % 4];
    const char *src = getenv("DFLASH_SRC");
    snprintf(b, 1024, "%s/%s", src && *src ? src : ".", rel);
    return b;
}

int test_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

int test_finish(const char *name) {
    if (test_passed + test_failed == 0) {
        fprintf(stderr, "%s: no check ran\n", name);
        return 1;
    }
    printf("%s: %d passed, %d failed\n", name, test_passed, test_failed);
    if (test_failed == 0 && tmpdir[0]) {
        if (fs_remove_tree(tmpdir) != 0) fprintf(stderr, "%s: could not remove %s\n", name, tmpdir);
    }
    return test_failed ? 1 : 0;
}

void test_report(const char *op, double err, double tol) {
    int ok = err <= tol;
    printf("%-60s %10.3e %8.1e  %s\n", op, err, tol, ok ? "ok" : "FAIL");
    fflush(stdout);
    CHECK_MSG(ok, "%s: max_err %.3e > tol %.1e", op, err, tol);
}

double test_rel_err(const float *a, const float *ref, size_t n) {
    double err = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)ref[i]);
        if (d != d) return INFINITY;
        if (d > err) err = d;
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    }
    return err / (scale > 0 ? scale : 1);
}

double test_rel_err_d(const float *a, const double *ref, size_t n) {
    double err = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (d != d) return INFINITY;
        if (d > err) err = d;
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    }
    return err / (scale > 0 ? scale : 1);
}

static uint64_t rand_state;

void test_rand_seed(uint64_t seed) { rand_state = seed; }

uint64_t test_rand_next(void) {
    rand_state = rand_state * 6364136223846793005ull + 1442695040888963407ull;
    return rand_state;
}

float *test_rand_vec(size_t n, float amp) {
    float *x = xmalloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = amp * (float)test_rand_pm1();
    return x;
}

float *test_rand_bf16(size_t n, float amp) {
    float *x = xmalloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = f32_from_bf16(bf16_from_f32(amp * (float)test_rand_pm1()));
    return x;
}

float *test_copy_floats(const float *x, size_t n) {
    float *y = xmalloc((n ? n : 1) * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}
