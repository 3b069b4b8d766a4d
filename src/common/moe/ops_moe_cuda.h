// ops_moe_cuda.h: the CUDA versions of the ops in ops_moe.h (ops_moe_cuda.cu): bf16 activations and
// weights (act = __nv_bfloat16 on the device), fp32 routing and accumulation. Plain C interface;
// every function runs on the backend's stream and does not synchronise, except cuda_moe_gemm: it
// waits for the expert counts (once per MoE block: the download cuda_moe_route queued; offsets no
// route wrote are downloaded and waited for at the call), which cuBLAS's grouped GEMM takes on the
// host. Its state (pinned counts, an event, the pointer arrays) is the backend's CUDA_OP_STATE_MOE.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

size_t cuda_moe_route_work_bytes(const backend *be, int T, int E, int k);
void cuda_moe_route(backend *be, const float *logits, int T, int E, int k, int renorm, int32_t *topk_idx,
                    float *topk_w, int32_t *offsets, int32_t *perm, int32_t *slot, void *work);
// cuda_moe_group: cuda_moe_route's grouping (offsets, perm, slot; the counts' download) of the
// chosen experts topk_idx [T, k] (device), for a route another kernel chose (ops_moe_sigmoid.h).
void cuda_moe_group(backend *be, const int32_t *topk_idx, int T, int E, int k, int32_t *offsets, int32_t *perm,
                    int32_t *slot);
void cuda_moe_gather(backend *be, void *xs, const void *x, const int32_t *perm, int R, int H);
void cuda_moe_gemm(backend *be, void *y, const void *x, const void *W, const int32_t *offsets, int E, int R, int N,
                   int K, int max_rows);
void cuda_swiglu_packed(backend *be, void *out, const void *gu, int R, int I);
void cuda_moe_combine(backend *be, void *y, const void *ys, const int32_t *slot, const int32_t *topk_idx,
                      const float *topk_w, int T, int k, int H);
void cuda_sigmoid_gate_add(backend *be, void *y, const void *s, const void *g, int T, int H);

#ifdef __cplusplus
}
#endif
