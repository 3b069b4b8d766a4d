// ops_hybrid_cuda.h: the CUDA versions of the ops in ops_hybrid.h (ops_hybrid_cuda.cu): bf16
// activations (act = __nv_bfloat16 on the device), fp32 state, gates and accumulation. Plain C
// interface; every function runs on the backend's stream and does not synchronise.
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
                           const int32_t *cu_seqlens, int n_seq, int T, int Hk, int Hv, int dk, int dv, float *state,
                           void *work);
void cuda_gated_rmsnorm(backend *be, void *out, const void *x, const void *z, const void *w, int R, int D, float eps);

#ifdef __cplusplus
}
#endif
