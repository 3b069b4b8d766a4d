// ops_hybrid_cuda.h: the CUDA versions of the ops in ops_hybrid.h (ops_hybrid_cuda.cu): bf16
// activations (act = __nv_bfloat16 on the device), fp32 state, gates and accumulation. Plain C
// interface; every function runs on the backend's stream and does not synchronise, but for
// cuda_gated_delta_rule's batched-GEMM form (prefill) called without a host copy of cu_seqlens,
// which then downloads it once per call (the teacher's calls pass the copy).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

void cuda_rmsnorm_zc(backend *be, void *out, const void *in, const void *w, int R, int D, float eps);
void cuda_rope_partial(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd,
                       int rot);
void cuda_sigmoid_mul(backend *be, void *x, const void *g, int64_t n);
void cuda_conv1d_silu(backend *be, void *out, const void *x, const void *w, const int32_t *cu_seqlens, int n_seq,
                      int T, int C, int K, void *state);
void cuda_gdn_gates(backend *be, float *beta, float *g, const void *b, const void *a, const float *A_log,
                    const float *dt_bias, int T, int Hv);
size_t cuda_gated_delta_rule_work_bytes(const backend *be, int T, int n_seq, int Hk, int Hv, int dk, int dv);
void cuda_gated_delta_rule(backend *be, void *out, const void *qkv, const float *g, const float *beta,
                           const int32_t *cu_seqlens, const int32_t *cu_host, int n_seq, int T, int Hk, int Hv, int dk,
                           int dv, float *state, void *work);
// cuda_gemm_batched_f32: `batch` row-major fp32 GEMMs on the backend's cuBLAS handle (strided-batched,
// fp32 accumulation): C_b = alpha op(A_b) op(B_b) + beta C_b, op(X) = X^T where trans_x, member b at
// a + b stride_a, b + b stride_b, c + b stride_c (strides and leading dimensions in floats); beta 0
// never reads C. The gated delta rule's batched products (exported for their test).
void cuda_gemm_batched_f32(backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                           int lda, int64_t stride_a, const float *b, int ldb, int64_t stride_b, float beta, float *c,
                           int ldc, int64_t stride_c, int batch);
void cuda_gated_rmsnorm(backend *be, void *out, const void *x, const void *z, const void *w, int R, int D, float eps);

#ifdef __cplusplus
}
#endif
