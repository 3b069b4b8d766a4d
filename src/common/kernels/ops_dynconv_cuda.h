// ops_dynconv_cuda.h: the CUDA versions of the grouped dynamic causal convolution in ops_dynconv.h
// (ops_dynconv_cuda.cu): bf16 activations, fp32 accumulation, dbase fp32. Plain C interface; runs on
// the backend's stream without synchronising. Same arguments and semantics as the ops_* functions.
#pragma once

#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

void cuda_dynconv_forward(backend *be, void *out, const void *x, const void *dyn, int ld, const void *base, int T, int B,
                          int H, int K, int G);
void cuda_dynconv_backward(backend *be, void *dx, void *ddyn, float *dbase, const void *dout, const void *x,
                           const void *dyn, int ld, const void *base, int T, int B, int H, int K, int G);

#ifdef __cplusplus
}
#endif
