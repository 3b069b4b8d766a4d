// half.h: bf16 and fp16 <-> fp32 conversion (CPU side; the CUDA side uses the intrinsics), and the
// 8-bit floats of quantised checkpoints -> fp32.
//
// float -> bf16/fp16 rounds to nearest, ties to even, like torch's .to(torch.bfloat16); NaN stays
// NaN (quiet), infinities stay infinite, values past the fp16 range become +-inf.
//
// 8-bit floats to fp32, exact (every code is representable), as torch's .to(torch.float32):
//   F8_E4M3 (float8_e4m3fn): sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 holds the
//           subnormals m * 2^-9; no infinities: 0x7f / 0xff are NaN, 0x7e = 448 the largest.
//   F8_E5M2 (float8_e5m2): the top byte of an fp16 (infinities and NaNs as fp16's).
//   F8_E8M0 (float8_e8m0fnu): 2^(b - 127), b = 0..254 (2^-127 is an fp32 subnormal); 0xff is NaN.
#pragma once
#include <stdint.h>

#include "common/core/tensor.h"

uint16_t bf16_from_f32(float x);
float f32_from_bf16(uint16_t h);
uint16_t f16_from_f32(float x);
float f32_from_f16(uint16_t h);
float f32_from_f8e4m3(uint8_t b);
float f32_from_f8e5m2(uint8_t b);
float f32_from_f8e8m0(uint8_t b);

// convert_to_f32: n elements of src (F32, F16, BF16 or one of the 8-bit floats) into dst; returns -1
// (error_set) for other dtypes.
int convert_to_f32(float *dst, const void *src, dtype src_dt, int64_t n);
// convert_from_f32: n floats into dst of dtype F32, F16 or BF16; -1 for other dtypes.
int convert_from_f32(void *dst, dtype dst_dt, const float *src, int64_t n);
