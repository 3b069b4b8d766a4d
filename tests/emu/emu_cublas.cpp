// emu_cublas.cpp: the cuBLAS entry points dflash_rank calls, for the CPU emulator
// (tests/emu/README.md): cublasGemmEx as a plain fp32-accumulating loop, cublasGemmGroupedBatchedEx
// as one such GEMM per problem, cublasGemmStridedBatchedEx as one per batch member.
#include "cuda_emu.h"
#undef warpSize
#include "emu_internal.h"

#undef warpSize // the cudaDeviceProp field

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <mutex>
#include <vector>
#include <atomic>

// ---------------------------------------------------------------------------- cuBLAS

struct cublasContext {
    int unused;
};

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    *h = new cublasContext();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void *, size_t) { return CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusName(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_NOT_SUPPORTED";
}
const char *cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "success" : "the operation or data type combination is not supported";
}

// the cuBLAS calls so far, every entry point (emu_cublas_call_count)
static std::atomic<long long> cublas_calls;
long long emu_cublas_call_count(void) { return cublas_calls.load(); }

static float load(const void *p, cudaDataType t, size_t i) {
    return t == CUDA_R_32F ? ((const float *)p)[i] : __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

// ---- the 32-bit interface's limit
//
// cuBLAS's 32-bit entry points take int sizes; whether every algorithm behind them also addresses an
// operand that spans 2^31 elements or more (the column-major extent ld (cols - 1) + rows) is not
// documented, so dflash_rank calls the 64-bit interface (cublasGemmEx_64 and friends, cuBLAS 12+)
// for such operands (check_cuda.h: cublas_span_needs_64). The emulator holds it to that: a 32-bit
// call with such an operand stops the program with a line naming the call and the operand.

static int64_t span_of(int64_t rows, int64_t cols, int64_t ld) {
    return rows <= 0 || cols <= 0 ? 0 : ld * (cols - 1) + rows;
}

static void need_32(const char *call, const char *what, int64_t rows, int64_t cols, int64_t ld) {
    int64_t sp = span_of(rows, cols, ld);
    if (sp < ((int64_t)1 << 31)) return;
    fprintf(stderr,
            "cuda emulator: %s: operand %s spans %lld elements (%lld x %lld, leading dimension %lld), 2^31 or "
            "more: call the 64-bit interface (%s_64)\n",
            call, what, (long long)sp, (long long)rows, (long long)cols, (long long)ld, call);
    abort();
}

static void need_32_all(const char *call, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                        int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
    if (!m || !n) return;
    need_32(call, "A", ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda);
    need_32(call, "B", tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb);
    need_32(call, "C", m, n, ldc);
}

// Column-major C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C; beta 0 never reads C (it may hold NaN).
// Sizes and offsets in 64 bits: the 64-bit interface's; the 32-bit one is this after need_32_all.
static cublasStatus_t gemm_64(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                              const void *alpha, const void *A, cudaDataType at, int64_t lda, const void *B,
                              cudaDataType bt, int64_t ldb, const void *beta, void *C, cudaDataType ct, int64_t ldc,
                              cublasComputeType_t compute) {
    int ok_ab = (at == CUDA_R_32F || at == CUDA_R_16BF) && at == bt;
    int ok_c = ct == CUDA_R_32F || (ct == CUDA_R_16BF && at == CUDA_R_16BF);
    if (!ok_ab || !ok_c || compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
        return CUBLAS_STATUS_INVALID_VALUE;
    const float a = *(const float *)alpha, b = *(const float *)beta;
    // op(A) as rows of k (row i of op(A)), op(B) as columns of k (column j of op(B))
    std::vector<float> Ar((size_t)m * k), Bc((size_t)n * k);
    for (int64_t i = 0; i < m; i++)
        for (int64_t l = 0; l < k; l++)
            Ar[(size_t)(i * k + l)] = load(A, at, ta == CUBLAS_OP_N ? (size_t)(i + l * lda) : (size_t)(l + i * lda));
    for (int64_t j = 0; j < n; j++)
        for (int64_t l = 0; l < k; l++)
            Bc[(size_t)(j * k + l)] = load(B, bt, tb == CUBLAS_OP_N ? (size_t)(l + j * ldb) : (size_t)(j + l * ldb));
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < m; i++) {
            const float *x = &Ar[(size_t)(i * k)], *y = &Bc[(size_t)(j * k)];
            float s = 0.0f;
            for (int64_t l = 0; l < k; l++) s += x[l] * y[l];
            size_t o = (size_t)(i + j * ldc);
            float c = s * a;
            if (b != 0.0f) c += b * load(C, ct, o);
            if (ct == CUDA_R_32F) ((float *)C)[o] = c;
            else ((__nv_bfloat16 *)C)[o] = __float2bfloat16(c);
        }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx_64(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                               int64_t k, const void *alpha, const void *A, cudaDataType at, int64_t lda,
                               const void *B, cudaDataType bt, int64_t ldb, const void *beta, void *C,
                               cudaDataType ct, int64_t ldc, cublasComputeType_t compute, cublasGemmAlgo_t) {
    cublas_calls++;
    return gemm_64(ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, compute);
}

cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
    cublas_calls++;
    need_32_all("cublasGemmEx", ta, tb, m, n, k, lda, ldb, ldc);
    return gemm_64(ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, compute);
}

// ---------------------------------------------------------------------------- cuBLAS: grouped GEMM
//
// What ops_moe_cuda.cu's expert GEMMs use: cublasGemmGroupedBatchedEx, and the pinned host memory
// the expert counts are downloaded into. The grouped GEMM is, as cuBLAS documents it, a cublasGemmEx
// per problem (groups in order, group_size[i] problems of group i's sizes, scalars and transposes,
// the matrices from the pointer arrays); its argument checks are cuBLAS's (CUBLAS_STATUS_INVALID_VALUE),
// its types those it lists for bf16 and fp32 (A = B = C type, fp32 compute and scale; others,
// fp16 among them, CUBLAS_STATUS_NOT_SUPPORTED here). Beyond cuBLAS it stops the program when a
// pointer array, or a matrix of a problem (its whole lda x columns extent), is not inside one
// cudaMalloc'd allocation: a host array there is what a GPU reads as an illegal address.

static void emu_need_device(const void *p, size_t bytes, const char *what, long idx) {
    if (emu_device_range(p, bytes)) return;
    fprintf(stderr, "cuda emulator: cublasGemmGroupedBatchedEx: %s", what);
    if (idx >= 0) fprintf(stderr, "[%ld]", idx);
    fprintf(stderr, " (%p, %zu bytes) is not inside device memory\n", p, bytes);
    abort();
}


// the grouped GEMM on sizes of type I (int: the 32-bit interface, whose operands are held to
// need_32_all; int64_t: the 64-bit one)
template <class I>
static cublasStatus_t grouped(const char *call, const cublasOperation_t transa[], const cublasOperation_t transb[],
                              const I m[], const I n[], const I k[], const void *alpha, const void *const A[],
                              cudaDataType_t at, const I lda[], const void *const B[], cudaDataType_t bt, const I ldb[],
                              const void *beta, void *const C[], cudaDataType_t ct, const I ldc[], I group_count,
                              const I group_size[], cublasComputeType_t compute) {
    if (!transa || !transb || !m || !n || !k || !alpha || !lda || !ldb || !beta || !ldc || !group_size ||
        group_count < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    int64_t problems = 0;
    for (I i = 0; i < group_count; i++) {
        auto op_ok = [](cublasOperation_t o) { return o == CUBLAS_OP_N || o == CUBLAS_OP_T || o == CUBLAS_OP_C; };
        if (m[i] < 0 || n[i] < 0 || k[i] < 0 || group_size[i] < 0 || !op_ok(transa[i]) || !op_ok(transb[i]))
            return CUBLAS_STATUS_INVALID_VALUE;
        if (lda[i] < std::max((I)1, transa[i] == CUBLAS_OP_N ? m[i] : k[i]) ||
            ldb[i] < std::max((I)1, transb[i] == CUBLAS_OP_N ? k[i] : n[i]) || ldc[i] < std::max((I)1, m[i]))
            return CUBLAS_STATUS_INVALID_VALUE;
        if (sizeof(I) == sizeof(int)) need_32_all(call, transa[i], transb[i], m[i], n[i], k[i], lda[i], ldb[i], ldc[i]);
        problems += group_size[i];
    }
    int bf16 = at == CUDA_R_16BF && bt == CUDA_R_16BF && ct == CUDA_R_16BF;
    int f32 = at == CUDA_R_32F && bt == CUDA_R_32F && ct == CUDA_R_32F;
    if (!(bf16 || f32) || compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (problems == 0) return CUBLAS_STATUS_SUCCESS;
    size_t es = f32 ? 4 : 2, parr = (size_t)problems * sizeof(void *);
    emu_need_device(A, parr, "Aarray", -1);
    emu_need_device(B, parr, "Barray", -1);
    emu_need_device(C, parr, "Carray", -1);
    long idx = 0;
    for (I i = 0; i < group_count; i++) {
        // column-major extents: A lda x (k or m) columns, B ldb x (n or k), C ldc x n
        int64_t arows = transa[i] == CUBLAS_OP_N ? m[i] : k[i], acols = transa[i] == CUBLAS_OP_N ? k[i] : m[i];
        int64_t brows = transb[i] == CUBLAS_OP_N ? k[i] : n[i], bcols = transb[i] == CUBLAS_OP_N ? n[i] : k[i];
        for (I j = 0; j < group_size[i]; j++, idx++) {
            if (m[i] && n[i] && k[i]) {
                emu_need_device(A[idx], (size_t)span_of(arows, acols, lda[i]) * es, "Aarray", idx);
                emu_need_device(B[idx], (size_t)span_of(brows, bcols, ldb[i]) * es, "Barray", idx);
            }
            if (m[i] && n[i]) emu_need_device(C[idx], (size_t)span_of(m[i], n[i], ldc[i]) * es, "Carray", idx);
            cublasStatus_t s = gemm_64(transa[i], transb[i], m[i], n[i], k[i], (const float *)alpha + i, A[idx], at,
                                       lda[i], B[idx], bt, ldb[i], (const float *)beta + i, C[idx], ct, ldc[i],
                                       compute);
            if (s != CUBLAS_STATUS_SUCCESS) return s;
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t, const cublasOperation_t transa[],
                                          const cublasOperation_t transb[], const int m[], const int n[],
                                          const int k[], const void *alpha, const void *const A[], cudaDataType_t at,
                                          const int lda[], const void *const B[], cudaDataType_t bt, const int ldb[],
                                          const void *beta, void *const C[], cudaDataType_t ct, const int ldc[],
                                          int group_count, const int group_size[], cublasComputeType_t compute) {
    cublas_calls++;
    return grouped<int>("cublasGemmGroupedBatchedEx", transa, transb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta,
                        C, ct, ldc, group_count, group_size, compute);
}

cublasStatus_t cublasGemmGroupedBatchedEx_64(cublasHandle_t, const cublasOperation_t transa[],
                                             const cublasOperation_t transb[], const int64_t m[], const int64_t n[],
                                             const int64_t k[], const void *alpha, const void *const A[],
                                             cudaDataType_t at, const int64_t lda[], const void *const B[],
                                             cudaDataType_t bt, const int64_t ldb[], const void *beta,
                                             void *const C[], cudaDataType_t ct, const int64_t ldc[],
                                             int64_t group_count, const int64_t group_size[],
                                             cublasComputeType_t compute) {
    cublas_calls++;
    return grouped<int64_t>("cublasGemmGroupedBatchedEx", transa, transb, m, n, k, alpha, A, at, lda, B, bt, ldb,
                            beta, C, ct, ldc, group_count, group_size, compute);
}

// ---- strided-batched GEMM (the Gated DeltaNet's chunked form, ops_hybrid_cuda.cu)
//
// cublasGemmStridedBatchedEx: batchCount independent column-major GEMMs, member b on A + b strideA,
// B + b strideB, C + b strideC (strides in elements, signed; 0 repeats a matrix), each exactly
// gemm_64's loop above (same types, checks and rounding; beta 0 never reads C). As cuBLAS:
// batchCount < 0 is CUBLAS_STATUS_INVALID_VALUE; a batch of 0 does nothing. The 32-bit form holds
// each member's operands to need_32_all (the strides are 64-bit in both).
static cublasStatus_t strided(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                              const void *alpha, const void *A, cudaDataType at, int64_t lda, long long strideA,
                              const void *B, cudaDataType bt, int64_t ldb, long long strideB, const void *beta,
                              void *C, cudaDataType ct, int64_t ldc, long long strideC, int64_t batchCount,
                              cublasComputeType_t compute) {
    if (batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
    size_t esz_ab = at == CUDA_R_32F ? 4 : 2, esz_c = ct == CUDA_R_32F ? 4 : 2;
    for (int64_t b = 0; b < batchCount; b++) {
        cublasStatus_t s =
            gemm_64(ta, tb, m, n, k, alpha, (const char *)A + (ptrdiff_t)(b * strideA) * (ptrdiff_t)esz_ab, at, lda,
                    (const char *)B + (ptrdiff_t)(b * strideB) * (ptrdiff_t)esz_ab, bt, ldb, beta,
                    (char *)C + (ptrdiff_t)(b * strideC) * (ptrdiff_t)esz_c, ct, ldc, compute);
        if (s != CUBLAS_STATUS_SUCCESS) return s;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          long long strideA, const void *B, cudaDataType bt, int ldb, long long strideB,
                                          const void *beta, void *C, cudaDataType ct, int ldc, long long strideC,
                                          int batchCount, cublasComputeType_t compute, cublasGemmAlgo_t) {
    cublas_calls++;
    need_32_all("cublasGemmStridedBatchedEx", ta, tb, m, n, k, lda, ldb, ldc);
    return strided(ta, tb, m, n, k, alpha, A, at, lda, strideA, B, bt, ldb, strideB, beta, C, ct, ldc, strideC,
                   batchCount, compute);
}

cublasStatus_t cublasGemmStridedBatchedEx_64(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int64_t m,
                                             int64_t n, int64_t k, const void *alpha, const void *A, cudaDataType at,
                                             int64_t lda, long long strideA, const void *B, cudaDataType bt,
                                             int64_t ldb, long long strideB, const void *beta, void *C,
                                             cudaDataType ct, int64_t ldc, long long strideC, int64_t batchCount,
                                             cublasComputeType_t compute, cublasGemmAlgo_t) {
    cublas_calls++;
    return strided(ta, tb, m, n, k, alpha, A, at, lda, strideA, B, bt, ldb, strideB, beta, C, ct, ldc, strideC,
                   batchCount, compute);
}
