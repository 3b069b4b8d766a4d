// selector_op_cuda.h: the CUDA version of the chunk's candidate selector in selector_op.h
// (selector_op_cuda.cu): bf16 activations and weights, fp32 scores, softmax and gradients. Plain C
// interface; runs on the backend's stream without synchronising. Same arguments and semantics as
// selector_op_run (after its shape checks).
#pragma once

#include "common/backend/backend.h"
#include "student/model/selector_op.h"

#ifdef __cplusplus
extern "C" {
#endif

void cuda_selector_run(backend *be, const selector_batch *b, float scale, void *workspace, const selector_out *out,
                       const selector_op_grads *g);

#ifdef __cplusplus
}
#endif
