// ops_cuda.h: the CUDA versions of the ops in ops.h (ops_cuda.cu): bf16 activations and weights
// (act = __nv_bfloat16 on the device), fp32 accumulation, fp32 softmax/LSE. Plain C interface;
// every function runs on the backend's stream and does not synchronise.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

void cuda_embed(backend *be, void *out, const void *table, const int32_t *ids, int T, int H);
void cuda_rmsnorm(backend *be, void *out, const void *in, const void *w, int R, int D, float eps);
void cuda_rope(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd);
// ops_attention_ext (ops_arch.h): window 0 = no window, sinks NULL = none
void cuda_attention_causal(backend *be, void *out, const void *q, const void *k, const void *v,
                           const int32_t *cu_seqlens, int n_seq, int T, int nq, int nkv, int hd, float scale,
                           int window, const float *sinks);
void cuda_swiglu(backend *be, void *out, const void *gate, const void *up, int64_t n);
void cuda_add(backend *be, void *x, const void *y, int64_t n);
void cuda_to_f32(backend *be, float *dst, const void *src, int64_t n);
void cuda_copy_2d(backend *be, void *dst, int64_t dst_ld, const void *src, int64_t src_ld, int64_t rows, int64_t cols);
void cuda_topk_lse_init(backend *be, float *val, int32_t *idx, float *m, float *s, int R, int k);
void cuda_topk_lse_update(backend *be, const float *logits, int ld, int v0, int R, int Vc, int k, float *val,
                          int32_t *idx, float *m, float *s);
void cuda_topk_lse_finish(backend *be, float *lse, const float *m, const float *s, int R);

#ifdef __cplusplus
}
#endif
