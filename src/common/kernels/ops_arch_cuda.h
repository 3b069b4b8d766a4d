// ops_arch_cuda.h: the CUDA versions of the ops in ops_arch.h (ops_arch_cuda.cu): bf16 activations
// (act = __nv_bfloat16 on the device), fp32 arithmetic. Plain C interface; every function runs on the
// backend's stream and does not synchronise. (ops_attention_ext's CUDA version is
// cuda_attention_causal in ops_cuda.h: the one causal attention.)
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

void cuda_bias_add(backend *be, void *y, const void *b, int64_t R, int64_t N);
void cuda_scale(backend *be, void *x, float s, int64_t n);
void cuda_softcap_f32(backend *be, float *x, int64_t ld, int64_t R, int64_t C, float cap);
void cuda_geglu_tanh(backend *be, void *out, const void *gate, const void *up, int64_t n);
void cuda_swiglu_clamped(backend *be, void *out, const void *in, int64_t R, int64_t n_i, float alpha, float limit);
void cuda_moe_bias_add(backend *be, void *ys, const void *bias, const int32_t *offsets, int E, int64_t R, int64_t N);

#ifdef __cplusplus
}
#endif
