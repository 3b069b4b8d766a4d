// ops_quant_cuda.h: the CUDA versions of the de-quantisation ops (ops_quant.h; ops_quant_cuda.cu):
// dst bf16, the product in fp32 and its rounding to bf16 as the host's (half.c), so the output is
// bf16_from_f32 of the CPU twin's bit for bit. Plain C interface; the backend's stream, no sync.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

void cuda_dequant_fp8(backend *be, void *dst, const uint8_t *codes, const float *scales, int64_t M, int64_t O, int64_t I,
                      int64_t bo, int64_t bi);
void cuda_dequant_mxfp4(backend *be, void *dst, const uint8_t *blocks, const uint8_t *scales, int64_t N, int64_t G);

#ifdef __cplusplus
}
#endif
