// ops_decode_cuda.h: the CUDA versions of the ops in ops_decode.h (ops_decode_cuda.cu): bf16 cache
// and activations, fp32 softmax, integer sampling masses. Plain C interface; every function runs on
// the backend's stream and does not synchronise.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

void cuda_kv_append(backend *be, void *k_cache, void *v_cache, const void *k, const void *v, const int32_t *pos, int n,
                    int max_len, int kvd);
// ops_attention_decode_ext (window 0: none; sinks NULL: none)
void cuda_attention_decode(backend *be, void *out, const void *q, const void *k_cache, const void *v_cache,
                           const int32_t *pos, int n, int nq, int nkv, int hd, int max_len, float scale, int window,
                           const float *sinks);
size_t cuda_sample_work_bytes(int n, int V);
void cuda_sample(backend *be, int32_t *ids, const float *logits, int ld, int n, int V, float temperature, int top_k,
                 float top_p, const double *u, void *work);

#ifdef __cplusplus
}
#endif
