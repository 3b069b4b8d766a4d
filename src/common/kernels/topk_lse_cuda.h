// topk_lse_cuda.h: the CUDA top-k and log-sum-exp of topk_lse.h (topk_lse_cuda.cu) as plain calls,
// for the CUDA code that runs them inside its own loops (the fused loss, student/loss/loss_cuda.cu).
// Same arguments and semantics as the ops_* calls; on the backend's stream, no wait. Included by
// .cu files only.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

void cuda_topk_lse_init(backend *be, float *val, int32_t *idx, float *m, float *s, int R, int k);
void cuda_topk_lse_update(backend *be, const float *logits, int ld, int v0, int R, int Vc, int k, float *val,
                          int32_t *idx, float *m, float *s);
void cuda_topk_lse_finish(backend *be, float *lse, const float *m, const float *s, int R);

#ifdef __cplusplus
}
#endif
