// test_backend_cuda.c: the CUDA backend against the CPU one (skipped, exit 77, without a GPU).
//
// GEMM: the same inputs go to both backends. For BF16 the inputs are rounded to bf16 first and the
// CPU gets those exact values as fp32, so both sides multiply the same numbers: a product of two
// bf16 values (8-bit significands) is exact in fp32, and both accumulate in fp32 — only the
// summation order differs. Tolerances, with S = |alpha| sum_p |a_ip b_pj| + |beta c_ij|:
//   C F32:  2 (k + 4) 2^-23 S   (the fp32 dot-product bound, once per side; see test_backend.c)
//   C BF16: that plus 2^-8 |c|  (the GPU rounds the fp32 result to bf16 once: relative error
//                                <= 2^-9, doubled for slack); C's input is bf16 on both sides too.
// Then two GEMMs at the fused loss's real strides whose operands span 2^31 elements or more
// (test_gemm_wide, below).
// F32 GEMMs run with CUBLAS_COMPUTE_32F in the default math mode, i.e. without TF32, so the fp32
// bound applies (with TF32 it would be ~2^-11 relative and this test would flag it).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/half.h"
#include "testing.h"
#include "testing_device.h"

// One case: A/B in ab_dt, C in c_dt, padded strides; returns the number of wrong elements.
static int gemm_compare(backend *gpu, backend *cpu, int ta, int tb, int m, int n, int k, float alpha,
                        float beta, int pad, dtype ab_dt, dtype c_dt) {
    int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
    int lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
    size_t na = (size_t)a_rows * lda, nb = (size_t)b_rows * ldb, nc = (size_t)m * ldc;
    float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4), *c_in = malloc(nc * 4);
    float *c_gpu = malloc(nc * 4);
    uint16_t *h = malloc((na > nb ? (na > nc ? na : nc) : (nb > nc ? nb : nc)) * 2);
    for (size_t i = 0; i < na; i++) a[i] = (float)test_rand_pm1();
    for (size_t i = 0; i < nb; i++) b[i] = (float)test_rand_pm1();
    for (size_t i = 0; i < nc; i++) c[i] = (float)test_rand_pm1();
    // round everything that will be bf16 on the GPU, so the CPU sees the same values
    if (ab_dt == DT_BF16) {
        for (size_t i = 0; i < na; i++) a[i] = f32_from_bf16(bf16_from_f32(a[i]));
        for (size_t i = 0; i < nb; i++) b[i] = f32_from_bf16(bf16_from_f32(b[i]));
    }
    if (c_dt == DT_BF16)
        for (size_t i = 0; i < nc; i++) c[i] = f32_from_bf16(bf16_from_f32(c[i]));
    memcpy(c_in, c, nc * 4);

    size_t ab_size = ab_dt == DT_BF16 ? 2 : 4, c_size = c_dt == DT_BF16 ? 2 : 4;
    void *da, *db, *dc;
    if (ab_dt == DT_BF16) {
        convert_from_f32(h, DT_BF16, a, (int64_t)na);
        da = dev_up_raw(gpu, h, na * 2);
        convert_from_f32(h, DT_BF16, b, (int64_t)nb);
        db = dev_up_raw(gpu, h, nb * 2);
    } else {
        da = dev_up_raw(gpu, a, na * ab_size);
        db = dev_up_raw(gpu, b, nb * ab_size);
    }
    if (c_dt == DT_BF16) {
        convert_from_f32(h, DT_BF16, c, (int64_t)nc);
        dc = dev_up_raw(gpu, h, nc * 2);
    } else {
        dc = dev_up_raw(gpu, c, nc * c_size);
    }
    backend_gemm(gpu, ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc, ab_dt, c_dt);
    if (c_dt == DT_BF16) {
        backend_copy_to_host(gpu, h, dc, nc * 2);
        convert_to_f32(c_gpu, h, DT_BF16, (int64_t)nc);
    } else {
        backend_copy_to_host(gpu, c_gpu, dc, nc * 4);
    }
    backend_gemm(cpu, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, DT_F32, DT_F32);

    int bad = 0;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                float av = ta ? a[p * lda + i] : a[i * lda + p];
                float bv = tb ? b[j * ldb + p] : b[p * ldb + j];
                s += fabs((double)av * bv);
            }
            s = fabs(alpha) * s + fabs(beta * c_in[i * ldc + j]);
            double tol = 2.0 * (k + 4) * 0x1p-23 * s + 1e-30;
            if (c_dt == DT_BF16) tol += 0x1p-8 * fabs((double)c[i * ldc + j]);
            double err = fabs((double)c_gpu[i * ldc + j] - c[i * ldc + j]);
            if (!(err <= tol) && bad++ < 3)
                test_fail(__FILE__, __LINE__,
                          "%s->%s ta=%d tb=%d m=%d n=%d k=%d C[%d,%d]: gpu %.8g cpu %.8g",
                          dtype_name(ab_dt), dtype_name(c_dt), ta, tb, m, n, k, i, j,
                          c_gpu[i * ldc + j], c[i * ldc + j]);
        }
    }
    // the padding of C is not written
    if (pad && m > 0 && c_gpu[ldc - 1] != c_in[ldc - 1]) bad++;
    backend_free(gpu, da);
    backend_free(gpu, db);
    backend_free(gpu, dc);
    free(a);
    free(b);
    free(c);
    free(c_in);
    free(c_gpu);
    free(h);
    return bad;
}

static void test_gemm(backend *gpu, backend *cpu) {
    static const int sizes[] = {1, 3, 17, 65};
    static const dtype combos[3][2] = {{DT_F32, DT_F32}, {DT_BF16, DT_F32}, {DT_BF16, DT_BF16}};
    for (int cb = 0; cb < 3; cb++) {
        dtype ab = combos[cb][0], c = combos[cb][1];
        int bad = 0, cases = 0;
        for (int ta = 0; ta < 2; ta++) {
            for (int tb = 0; tb < 2; tb++) {
                for (int i = 0; i < 64; i++) { // every (m, n, k) from sizes
                    int m = sizes[i / 16], n = sizes[i / 4 % 4], k = sizes[i % 4];
                    int pad = (i / 16 + i / 4 % 4 + i % 4) % 3 * 5; // strides wider than a row
                    bad += gemm_compare(gpu, cpu, ta, tb, m, n, k, 1.0f, 0.0f, pad, ab, c) != 0;
                    bad += gemm_compare(gpu, cpu, ta, tb, m, n, k, -0.75f, 1.5f, pad + 1, ab, c) != 0;
                    cases += 2;
                }
            }
        }
        CHECK_MSG(bad == 0, "%s->%s: %d of %d GEMM cases differ from the CPU", dtype_name(ab),
                  dtype_name(c), bad, cases);
        // a linear-layer shape, y[t, o] = x[t, i] W[o, i]^T, and a weight-gradient-like one
        CHECK(gemm_compare(gpu, cpu, 0, 1, 200, 384, 1024, 1.0f, 0.0f, 0, ab, c) == 0);
        CHECK(gemm_compare(gpu, cpu, 1, 0, 96, 130, 777, 0.5f, 1.0f, 8, ab, c) == 0);
    }
}

// The fused loss's GEMMs at real sizes (V 248,320): an operand whose row-major extent, row stride
// ld times (rows - 1) plus its row, spans 2^31 elements or more goes through cuBLAS's 64-bit
// interface (check_cuda.h: cublas_span_needs_64; the emulator stops a 32-bit call with such an
// operand). Two cases at the loss's strides, with few columns so that only the rows' first elements
// are touched (the rest of the span is never written: untouched device pages on the emulator):
//   dlogits  dx[nr, 8] = dlogits[nr, 3] (bf16, row stride 2V) W[3, 8]   nr = 4,330: A spans 2^31+
//   logits   logits[nr, 5] (fp32, row stride V) = x[nr, 16] W[5, 16]^T    nr = 8,650: C spans 2^31+
// Each against the CPU backend on the same (bf16-rounded) values, gemm_compare's tolerance
// 2 (k + 4) 2^-23 S (+ 2^-8 |c| for a bf16 C).
static int gemm_wide_case(backend *gpu, backend *cpu, int m, int n, int k, int lda, int ldc, dtype c_dt) {
    const int ta = 0, tb = c_dt == DT_F32 ? 1 : 0; // logits: x W^T; dx: dlogits W
    int ldb = tb ? k : n;
    size_t na = (size_t)m * k, nb = (size_t)(tb ? n : k) * ldb, nc = (size_t)m * n;
    float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4), *got = malloc(nc * 4);
    uint16_t *h = malloc((na > nb ? na : nb) * 2);
    for (size_t i = 0; i < na; i++) a[i] = f32_from_bf16(bf16_from_f32((float)test_rand_pm1()));
    for (size_t i = 0; i < nb; i++) b[i] = f32_from_bf16(bf16_from_f32((float)test_rand_pm1()));
    size_t c_size = c_dt == DT_BF16 ? 2 : 4;
    size_t a_span = (size_t)lda * (size_t)(m - 1) + (size_t)k, c_span = (size_t)ldc * (size_t)(m - 1) + (size_t)n;
    CHECK(a_span >= ((size_t)1 << 31) || c_span >= ((size_t)1 << 31));
    char *da = backend_alloc(gpu, a_span * 2), *dc = backend_alloc(gpu, c_span * c_size);
    CHECK_MSG(da && dc, "wide GEMM: %zu + %zu bytes of device memory", a_span * 2, c_span * c_size);
    convert_from_f32(h, DT_BF16, a, (int64_t)na);
    for (int i = 0; i < m; i++) backend_copy_to_device(gpu, da + (size_t)i * lda * 2, h + (size_t)i * k, (size_t)k * 2);
    convert_from_f32(h, DT_BF16, b, (int64_t)nb);
    void *db = dev_up_raw(gpu, h, nb * 2);
    backend_gemm(gpu, ta, tb, m, n, k, 1.0f, da, lda, db, ldb, 0.0f, dc, ldc, DT_BF16, c_dt);
    uint16_t *row = malloc((size_t)n * 4);
    for (int i = 0; i < m; i++) {
        backend_copy_to_host(gpu, row, dc + (size_t)i * ldc * c_size, (size_t)n * c_size);
        if (c_dt == DT_BF16) convert_to_f32(got + (size_t)i * n, row, DT_BF16, n);
        else memcpy(got + (size_t)i * n, row, (size_t)n * 4);
    }
    backend_gemm(cpu, ta, tb, m, n, k, 1.0f, a, k, b, ldb, 0.0f, c, n, DT_F32, DT_F32);
    int bad = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++) s += fabs((double)a[(size_t)i * k + p] * (tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j]));
            double tol = 2.0 * (k + 4) * 0x1p-23 * s + 1e-30;
            if (c_dt == DT_BF16) tol += 0x1p-8 * fabs((double)c[(size_t)i * n + j]);
            double err = fabs((double)got[(size_t)i * n + j] - c[(size_t)i * n + j]);
            if (!(err <= tol) && bad++ < 3)
                test_fail(__FILE__, __LINE__, "wide GEMM m=%d lda=%d ldc=%d C[%d,%d]: gpu %.8g cpu %.8g", m, lda, ldc, i,
                          j, got[(size_t)i * n + j], c[(size_t)i * n + j]);
        }
    backend_free(gpu, da);
    backend_free(gpu, db);
    backend_free(gpu, dc);
    free(a), free(b), free(c), free(got), free(h), free(row);
    return bad;
}

static void test_gemm_wide(backend *gpu, backend *cpu) {
    const int V = 248320;
    int bad_dx = gemm_wide_case(gpu, cpu, 4330, 8, 3, 2 * V, 8, DT_BF16);
    CHECK_MSG(bad_dx == 0, "dlogits-shaped GEMM past 2^31 elements: %d wrong values", bad_dx);
    int bad_logits = gemm_wide_case(gpu, cpu, 8650, 5, 16, 16, V, DT_F32);
    CHECK_MSG(bad_logits == 0, "logits-shaped GEMM past 2^31 elements: %d wrong values", bad_logits);
    printf("wide GEMMs (operands past 2^31 elements): dlogits %d, logits %d wrong values\n", bad_dx, bad_logits);
}

static void test_memory(backend *gpu) {
    enum { N = 100000 };
    unsigned char *host = malloc(N), *back = malloc(N);
    for (int i = 0; i < N; i++) host[i] = (unsigned char)(i * 13 + 5);
    unsigned char *d = backend_alloc(gpu, N);
    CHECK(d != NULL && (uintptr_t)d % 256 == 0);
    backend_copy_to_device(gpu, d, host, N);
    backend_copy_to_host(gpu, back, d, N);
    CHECK(memcmp(host, back, N) == 0);
    backend_memset_zero(gpu, d + 1000, 777);
    backend_sync(gpu);
    backend_copy_to_host(gpu, back, d, N);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= back[i] == ((i >= 1000 && i < 1777) ? 0 : host[i]);
    CHECK(ok);
    backend_free(gpu, d);
    size_t free_b = 0, total_b = 0;
    backend_mem_info(gpu, &free_b, &total_b);
    CHECK(total_b > ((size_t)1 << 30) && free_b > 0 && free_b <= total_b);
    // an impossible allocation is an error, not a crash, and the backend stays usable
    error_clear();
    CHECK(backend_alloc(gpu, total_b * 4) == NULL && strstr(error_msg(), "out of GPU memory"));
    d = backend_alloc(gpu, 1024);
    CHECK(d != NULL);
    backend_free(gpu, d);
    free(host);
    free(back);
}

int main(void) {
    test_rand_seed(987654321);
    if (backend_cuda_devices() == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    backend gpu, cpu;
    CHECK(backend_open(&gpu, "cuda", 0) == 0);
    CHECK(gpu.kind == BACKEND_CUDA && gpu.device == DEVICE_CUDA && strncmp(gpu.name, "cuda:", 5) == 0);
    printf("%s\n", gpu.name);
    CHECK(backend_open(&cpu, "cpu", 0) == 0);
    backend auto_be;
    CHECK(backend_open(&auto_be, "auto", 0) == 0 && auto_be.kind == BACKEND_CUDA);
    backend_close(&auto_be);
    test_memory(&gpu);
    test_gemm(&gpu, &cpu);
    test_gemm_wide(&gpu, &cpu);
    backend_close(&gpu);
    backend_close(&cpu);
    return test_finish("test_backend_cuda");
}
