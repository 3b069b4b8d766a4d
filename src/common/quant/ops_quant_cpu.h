// ops_quant_cpu.h: the per-row decodes the CPU (fp32) twins of the ops in ops_quant.h are made of
// (ops_quant_cpu.c, whose table quant_kernels_cpu holds the twins), which target_quant.c's load-time
// de-quantisation also calls (one rule for both settings of teacher.quant_weights).
#pragma once
#include <stdint.h>

// cpu_dequant_fp8_row: one row of I fp8 codes, its ceil(I / bi) scales (f32): out[i] =
// e4m3(codes[i]) * scales[i / bi] (NaN: the canonical quiet NaN, ops_quant.h).
void cpu_dequant_fp8_row(float *out, const uint8_t *codes, const float *scales, int64_t I, int64_t bi);
// cpu_dequant_mxfp4_row: one row of G groups: blocks [G, 16], scales [G] (e8m0) -> out [32 G].
void cpu_dequant_mxfp4_row(float *out, const uint8_t *blocks, const uint8_t *scales, int64_t G);
