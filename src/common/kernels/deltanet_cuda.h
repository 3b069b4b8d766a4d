// deltanet_cuda.h: what deltanet_cuda.cu exports beside its table: the batched fp32 GEMM the
// gated delta rule's prefill form runs on, for its test (tests/unit/test_ops_hybrid_cuda.c).
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// cuda_gemm_batched_f32: `batch` row-major fp32 GEMMs on the backend's cuBLAS handle (strided-batched,
// fp32 accumulation): C_b = alpha op(A_b) op(B_b) + beta C_b, op(X) = X^T where trans_x, member b at
// a + b stride_a, b + b stride_b, c + b stride_c (strides and leading dimensions in floats); beta 0
// never reads C. The gated delta rule's batched products (exported for their test).
void cuda_gemm_batched_f32(backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                           int lda, int64_t stride_a, const float *b, int ldb, int64_t stride_b, float beta, float *c,
                           int ldc, int64_t stride_c, int batch);

#ifdef __cplusplus
}
#endif
