// ops_train_cuda.h: the CUDA versions of the training ops in ops_train.h (ops_train_cuda.cu): bf16
// activations (act = __nv_bfloat16 on the device), fp32 weight gradients and context K/V gradients,
// fp32 accumulation and softmax. Plain C interface; every function runs on the backend's stream and
// does not synchronise. Same arguments and semantics as the ops_* functions.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

void cuda_rmsnorm_backward(backend *be, void *dx, float *dw, const void *dy, const void *x, const void *w, int R, int D,
                           float eps, int accumulate);
void cuda_rope_backward(backend *be, void *dx, const int32_t *pos, const float *inv_freq, int T, int nh, int hd);
void cuda_swiglu_backward(backend *be, void *dgate, void *dup, const void *dout, const void *gate, const void *up,
                          int64_t n);
void cuda_dflash_attn_forward(backend *be, void *out, float *lse, const void *q, const void *kb, const void *vb,
                              const void *kc, const void *vc, const int32_t *anchors, const int32_t *seq_start, int C,
                              int B, int nq, int nkv, int hd, float scale, int window, int block_causal);
void cuda_dflash_attn_backward(backend *be, void *dq, void *dkb, void *dvb, float *dkc, float *dvc, const void *dout,
                               const void *out, const float *lse, const void *q, const void *kb, const void *vb,
                               const void *kc, const void *vc, const int32_t *anchors, const int32_t *seq_start,
                               int C, int B, int nq, int nkv, int hd, float scale, int window, int block_causal);
void cuda_f32_to_act(backend *be, void *dst, const float *src, int64_t n);
void cuda_add_to_f32(backend *be, float *acc, const void *x, int64_t n);

#ifdef __cplusplus
}
#endif
