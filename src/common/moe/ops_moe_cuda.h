// ops_moe_cuda.h: what the two files of the MoE family's CUDA kernels share: ops_moe_cuda.cu (the
// ops of ops_moe.h and their table, moe_kernels_cuda: bf16 activations and weights, fp32 routing and
// accumulation) and ops_moe_sigmoid_cuda.cu (the sigmoid router's). Plain C interface; both run on
// the backend's stream and do not synchronise. The expert GEMMs wait for the counts the grouping
// downloads (once per MoE block; offsets no route wrote are downloaded and waited for at the GEMM),
// which cuBLAS's grouped GEMM takes on the host; that state (pinned counts, an event, the pointer
// arrays) is the backend's CUDA_OP_STATE_MOE.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// cuda_moe_group: the route's grouping (offsets, perm, slot; the counts' download) of the chosen
// experts topk_idx [T, k] (device), for a route another kernel chose (ops_moe_sigmoid.h).
void cuda_moe_group(backend *be, const int32_t *topk_idx, int T, int E, int k, int32_t *offsets, int32_t *perm,
                    int32_t *slot);

// cuda_moe_sigmoid_route (ops_moe_sigmoid_cuda.cu): ops_moe_sigmoid_route (ops_moe_sigmoid.h) in fp32,
// same arguments (the grouping's counts downloaded for the expert GEMMs as the route's are); the
// sigmoid_route of moe_kernels_cuda.
void cuda_moe_sigmoid_route(backend *be, const float *logits, const float *bias, int T, int E, int k, int n_group,
                            int topk_group, int renorm, float scale, int32_t *topk_idx, float *topk_w,
                            int32_t *offsets, int32_t *perm, int32_t *slot);

#ifdef __cplusplus
}
#endif
