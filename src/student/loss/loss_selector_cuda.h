// loss_selector_cuda.h: the CUDA version of the chunk's candidate selector in loss_selector.h
// (loss_selector_cuda.cu): bf16 activations and weights, fp32 scores, softmax and gradients. Plain C
// interface; runs on the backend's stream without synchronising. Same arguments and semantics as
// loss_selector_forward_backward (after its shape checks).
#pragma once

#include "common/backend/backend.h"
#include "student/loss/loss_selector.h"

#ifdef __cplusplus
extern "C" {
#endif

void loss_selector_cuda_forward_backward(backend *be, const selector_batch *b, float scale, void *workspace,
                                         const selector_out *out, const loss_selector_grads *g);

#ifdef __cplusplus
}
#endif
