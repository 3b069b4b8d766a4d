// ops_moe_sigmoid_cuda.h: the CUDA version of ops_moe_sigmoid_route (ops_moe_sigmoid_cuda.cu): fp32
// routing on the backend's stream, no synchronisation (the grouping's counts are downloaded for the
// expert GEMMs as cuda_moe_route does). Plain C interface.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

void cuda_moe_sigmoid_route(backend *be, const float *logits, const float *bias, int T, int E, int k, int n_group,
                            int topk_group, int renorm, float scale, int32_t *topk_idx, float *topk_w,
                            int32_t *offsets, int32_t *perm, int32_t *slot);

#ifdef __cplusplus
}
#endif
