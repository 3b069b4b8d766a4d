// half.h: bf16 and fp16 <-> fp32 conversion (CPU side; the CUDA side uses the intrinsics).
//
// float -> bf16/fp16 rounds to nearest, ties to even, like torch's .to(torch.bfloat16); NaN stays
// NaN (quiet), infinities stay infinite, values past the fp16 range become +-inf.
#pragma once
#include <stdint.h>

#include "common/core/tensor.h"

uint16_t bf16_from_f32(float x);
float f32_from_bf16(uint16_t h);
uint16_t f16_from_f32(float x);
float f32_from_f16(uint16_t h);

// convert_to_f32: n elements of src (F32, F16 or BF16) into dst; returns -1 (error_set) for other dtypes.
int convert_to_f32(float *dst, const void *src, dtype src_dt, int64_t n);
// convert_from_f32: n floats into dst of dtype F32, F16 or BF16; -1 for other dtypes.
int convert_from_f32(void *dst, dtype dst_dt, const float *src, int64_t n);
