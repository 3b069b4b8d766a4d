// test_cublas_grouped_cuda.c: cublasGemmGroupedBatchedEx (what ops_moe_cuda.cu's expert GEMMs call)
// against a double-precision loop, as cuBLAS documents it: groups in order, group_size[i] problems of
// group i's transposes, sizes, leading dimensions and scalars, the matrices column-major from device
// pointer arrays. In the emulator build this checks tests/emu's stand-in; on a GPU, cuBLAS itself
// (skipped, exit 77, without a CUDA device or in a build without CUDA).
//
// One call of 6 groups: every transpose pair (N N, N T, T N, T T) with odd sizes and leading
// dimensions past the minimum, one group of 3 problems, one of n = 0; alpha 0.75 and beta -0.5
// (C read) on some, beta 0 on others over C filled with NaN (C must not be read). bf16 A, B, C and
// fp32 A, B, C, fp32 compute. Per type one line `grouped TYPE  max_err  tol`, max_err = max |got -
// ref| / max |ref| over every C (the n = 0 problem's C and the padding rows past m must stay as they
// were: checked exactly). Tolerances: fp32 1e-5 (fp32 sums of k <= 13 products); bf16 1e-2 (exact
// bf16 products, fp32 sums, one rounding to bf16: <= 2^-8 of the element). Then the argument checks
// cuBLAS documents: a negative group count, ldc < m, lda below its minimum -> INVALID_VALUE; fp64
// compute on bf16 -> NOT_SUPPORTED (outside the supported table).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/core/half.h"
#include "testing.h"

#ifdef DFLASH_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#define GROUPS 6


static void cuda_ok(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

static void *dev_copy(const void *h, size_t bytes) {
    void *d = NULL;
    cuda_ok(cudaMalloc(&d, bytes ? bytes : 1), "cudaMalloc");
    cuda_ok(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    return d;
}

// element i of a host matrix of type f32 (else bf16) as double
static double get(const void *p, int f32, size_t i) {
    return f32 ? (double)((const float *)p)[i] : (double)f32_from_bf16(((const uint16_t *)p)[i]);
}
static void put(void *p, int f32, size_t i, float v) {
    if (f32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = bf16_from_f32(v);
}

static const cublasOperation_t TA[GROUPS] = {CUBLAS_OP_N, CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_T, CUBLAS_OP_T, CUBLAS_OP_N};
static const cublasOperation_t TB[GROUPS] = {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_N, CUBLAS_OP_T};
static const int M[GROUPS] = {5, 7, 3, 9, 6, 4}, N[GROUPS] = {3, 5, 11, 2, 4, 0}, K[GROUPS] = {7, 1, 13, 6, 8, 5};
static const int SIZE[GROUPS] = {1, 1, 1, 1, 3, 1};
static const float ALPHA[GROUPS] = {0.75f, 1.0f, -1.25f, 0.75f, 1.0f, 1.0f};
static const float BETA[GROUPS] = {-0.5f, 0.0f, 0.0f, -0.5f, 0.0f, 0.0f};

static void grouped_case(cublasHandle_t h, int f32) {
    const char *name = f32 ? "grouped f32" : "grouped bf16";
    size_t es = f32 ? 4 : 2;
    int lda[GROUPS], ldb[GROUPS], ldc[GROUPS], problems = 0;
    for (int g = 0; g < GROUPS; g++) {
        lda[g] = (TA[g] == CUBLAS_OP_N ? M[g] : K[g]) + 2;
        ldb[g] = (TB[g] == CUBLAS_OP_N ? K[g] : N[g]) + 1;
        ldc[g] = M[g] + 3;
        problems += SIZE[g];
    }
    void *hA[16], *hB[16], *hC[16], *hC0[16], *dA[16], *dB[16], *dC[16];
    size_t nA[16], nB[16], nC[16];
    int grp[16];
    for (int g = 0, p = 0; g < GROUPS; g++)
        for (int j = 0; j < SIZE[g]; j++, p++) {
            grp[p] = g;
            nA[p] = (size_t)lda[g] * (TA[g] == CUBLAS_OP_N ? K[g] : M[g]);
            nB[p] = (size_t)ldb[g] * (TB[g] == CUBLAS_OP_N ? N[g] : K[g]);
            nC[p] = (size_t)ldc[g] * N[g];
            hA[p] = xmalloc(nA[p] * es + 1);
            hB[p] = xmalloc(nB[p] * es + 1);
            hC[p] = xmalloc(nC[p] * es + 1);
            hC0[p] = xmalloc(nC[p] * es + 1);
            for (size_t i = 0; i < nA[p]; i++) put(hA[p], f32, i, test_rand_pm1());
            for (size_t i = 0; i < nB[p]; i++) put(hB[p], f32, i, test_rand_pm1());
            for (size_t i = 0; i < nC[p]; i++) put(hC0[p], f32, i, BETA[g] != 0.0f ? test_rand_pm1() : NAN);
            dA[p] = dev_copy(hA[p], nA[p] * es);
            dB[p] = dev_copy(hB[p], nB[p] * es);
            dC[p] = dev_copy(hC0[p], nC[p] * es);
        }
    void *pA = dev_copy(dA, problems * sizeof(void *)), *pB = dev_copy(dB, problems * sizeof(void *)),
         *pC = dev_copy(dC, problems * sizeof(void *));
    cudaDataType_t t = f32 ? CUDA_R_32F : CUDA_R_16BF;
    int size[GROUPS];
    memcpy(size, SIZE, sizeof size);
    cublasStatus_t s = cublasGemmGroupedBatchedEx(h, TA, TB, M, N, K, ALPHA, (const void *const *)pA, t, lda,
                                                  (const void *const *)pB, t, ldb, BETA, (void *const *)pC, t, ldc,
                                                  GROUPS, size, CUBLAS_COMPUTE_32F);
    cuda_ok(cudaDeviceSynchronize(), "the grouped GEMM");
    CHECK_MSG(s == CUBLAS_STATUS_SUCCESS, "%s: cublasGemmGroupedBatchedEx returned %d", name, (int)s);
    double err = 0, scale = 0;
    int untouched = 1;
    for (int p = 0; p < problems; p++) {
        int g = grp[p];
        cuda_ok(cudaMemcpy(hC[p], dC[p], nC[p] * es, cudaMemcpyDeviceToHost), "cudaMemcpy");
        for (int j = 0; j < N[g]; j++)
            for (int i = 0; i < ldc[g]; i++) {
                size_t o = (size_t)i + (size_t)j * ldc[g];
                if (i >= M[g]) { // padding rows: as they were (NaN stays NaN: compare the bits)
                    untouched &= memcmp((char *)hC[p] + o * es, (char *)hC0[p] + o * es, es) == 0;
                    continue;
                }
                double ref = 0;
                for (int l = 0; l < K[g]; l++) {
                    double a = get(hA[p], f32, TA[g] == CUBLAS_OP_N ? i + (size_t)l * lda[g] : l + (size_t)i * lda[g]);
                    double b = get(hB[p], f32, TB[g] == CUBLAS_OP_N ? l + (size_t)j * ldb[g] : j + (size_t)l * ldb[g]);
                    ref += a * b;
                }
                ref *= ALPHA[g];
                if (BETA[g] != 0.0f) ref += BETA[g] * get(hC0[p], f32, o);
                double got = get(hC[p], f32, o);
                err = fmax(err, isfinite(got) ? fabs(got - ref) : INFINITY);
                scale = fmax(scale, fabs(ref));
            }
    }
    printf("%-24s padding rows %s\n", name, untouched ? "untouched" : "WRITTEN");
    CHECK_MSG(untouched, "%s: the grouped GEMM wrote C rows past m", name);
    test_report(name, err / (scale > 0 ? scale : 1), f32 ? 1e-5 : 1e-2);
    for (int p = 0; p < problems; p++) {
        cudaFree(dA[p]);
        cudaFree(dB[p]);
        cudaFree(dC[p]);
        free(hA[p]);
        free(hB[p]);
        free(hC[p]);
        free(hC0[p]);
    }
    cudaFree(pA);
    cudaFree(pB);
    cudaFree(pC);
}

// the argument checks cuBLAS documents, on one valid bf16 group (only the checked argument is bad)
static void status_case(cublasHandle_t h) {
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    int m = 4, n = 3, k = 5, lda = 5, ldb = 5, ldc = 4, size = 1, bad_ldc = 3, bad_lda = 4;
    float alpha = 1.0f, beta = 0.0f;
    void *d = NULL, *ptrs[3];
    cuda_ok(cudaMalloc(&d, 256), "cudaMalloc");
    for (int i = 0; i < 3; i++) ptrs[i] = d;
    void *dp = dev_copy(ptrs, sizeof ptrs);
    const void *const *A = (const void *const *)dp, *const *B = A + 1;
    void *const *C = (void *const *)dp + 2;
    struct {
        const char *what;
        cublasStatus_t got, want;
    } c[] = {
        {"group_count -1", cublasGemmGroupedBatchedEx(h, &ta, &tb, &m, &n, &k, &alpha, A, CUDA_R_16BF, &lda, B,
                                                      CUDA_R_16BF, &ldb, &beta, C, CUDA_R_16BF, &ldc, -1, &size,
                                                      CUBLAS_COMPUTE_32F),
         CUBLAS_STATUS_INVALID_VALUE},
        {"ldc < m", cublasGemmGroupedBatchedEx(h, &ta, &tb, &m, &n, &k, &alpha, A, CUDA_R_16BF, &lda, B, CUDA_R_16BF,
                                               &ldb, &beta, C, CUDA_R_16BF, &bad_ldc, 1, &size, CUBLAS_COMPUTE_32F),
         CUBLAS_STATUS_INVALID_VALUE},
        {"lda < k (A transposed)", cublasGemmGroupedBatchedEx(h, &ta, &tb, &m, &n, &k, &alpha, A, CUDA_R_16BF,
                                                              &bad_lda, B, CUDA_R_16BF, &ldb, &beta, C, CUDA_R_16BF,
                                                              &ldc, 1, &size, CUBLAS_COMPUTE_32F),
         CUBLAS_STATUS_INVALID_VALUE},
        {"bf16 with fp64 compute", cublasGemmGroupedBatchedEx(h, &ta, &tb, &m, &n, &k, &alpha, A, CUDA_R_16BF, &lda, B,
                                                              CUDA_R_16BF, &ldb, &beta, C, CUDA_R_16BF, &ldc, 1, &size,
                                                              CUBLAS_COMPUTE_64F),
         CUBLAS_STATUS_NOT_SUPPORTED},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        int ok = c[i].got == c[i].want;
        printf("status %-32s %d (want %d) %s\n", c[i].what, (int)c[i].got, (int)c[i].want, ok ? "ok" : "FAIL");
        CHECK_MSG(ok, "status %s: %d, want %d", c[i].what, (int)c[i].got, (int)c[i].want);
    }
    cudaFree(dp);
    cudaFree(d);
}

int main(void) {
    test_rand_seed(4242); // the stream this test always drew
    if (backend_cuda_devices() == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasCreate failed\n");
        return 1;
    }
    grouped_case(h, 1);
    grouped_case(h, 0);
    status_case(h);
    cublasDestroy(h);
    return test_finish("test_cublas_grouped_cuda");
}

#else
int main(void) {
    printf("SKIP: a build without CUDA\n");
    return 77;
}
#endif
