// ops_quant.h: weights kept on the device as their checkpoint stores them, de-quantised into the
// compute dtype by an op (teacher.quant_weights resident: each decoder layer's quantised weights are
// de-quantised into one layer scratch just before the layer runs; docs/teacher.md, "Quantised
// checkpoints", src/teacher/target_quant.h).
//
// The rules are target_quant.h's, one fp32 product per element rounded once to the compute dtype:
//   fp8     W[m, o, i] = f32(e4m3(code[m, o, i])) * scale[m, o / bo, i / bi]   (the last block of a
//           dimension bo / bi does not divide is partial)
//   mxfp4   row r, group g, byte j: elements 32 g + 2 j (low nibble) and 32 g + 2 j + 1 (high nibble),
//           e2m1 {0, .5, 1, 1.5, 2, 3, 4, 6} (bit 3 the sign) times 2^(scale[r, g] - 127) exactly
//           (torch.ldexp: 2^-127 a subnormal; 2^128 as 2^127 then x 2, so 0 stays 0)
// A NaN result (an e4m3 NaN code, an F8_E8M0 NaN scale, 0 x an infinite scale) is written as the
// canonical quiet NaN (+, 0x7FC00000; bf16 0x7FC0), whatever the operands' payloads: the CPU twin,
// the CUDA kernel and the load-time de-quantisation (target_quant.c, which calls the twin's row
// functions) give the same bits. The CPU twin (ops_quant_cpu.c) writes f32; the CUDA kernel
// (ops_quant_cuda.cu) writes bf16 by the host's rounding (half.c bf16_from_f32: nearest even), so its
// output is bf16_from_f32 of the twin's, bit for bit (tests/unit/test_ops_quant_cuda.c). Each
// backend's half is one table, struct quant_kernels below (quant_kernels_cpu in ops_quant_cpu.c,
// quant_kernels_cuda in ops_quant_cuda.cu); ops_quant.c checks the arguments and calls it.
//
// dst is act (ops_act_dtype: f32 on the CPU, bf16 on CUDA); codes, blocks and scales are device
// memory of the backend; nothing is synchronised.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/backend/backend_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// ops_dequant_fp8: M matrices [O, I]: dst [M, O, I] act from codes [M, O, I] u8 (F8_E4M3) and
// scales [M, ceil(O / bo), ceil(I / bi)] f32.
void ops_dequant_fp8(backend *be, void *dst, const uint8_t *codes, const float *scales, int64_t M, int64_t O, int64_t I,
                     int64_t bo, int64_t bi);

// ops_dequant_mxfp4: N rows of G groups of 32: dst [N, 32 G] act from blocks [N, G, 16] u8 and
// scales [N, G] u8 (e8m0 exponents, bias 127).
void ops_dequant_mxfp4(backend *be, void *dst, const uint8_t *blocks, const uint8_t *scales, int64_t N, int64_t G);

// quant_kernels: one backend's half of the ops above (its .ops->quant), called with the ops'
// arguments once they are checked and none of M, O, I, N, G is 0.
struct quant_kernels {
    void (*dequant_fp8)(backend *be, void *dst, const uint8_t *codes, const float *scales, int64_t M, int64_t O,
                        int64_t I, int64_t bo, int64_t bi);
    void (*dequant_mxfp4)(backend *be, void *dst, const uint8_t *blocks, const uint8_t *scales, int64_t N, int64_t G);
};

// QUANT_OPS: the members above, once, in order; each backend fills its table from it in one
// line (OP_FILL, backend_ops.h).
#define QUANT_OPS(X, p) X(p, dequant_fp8) X(p, dequant_mxfp4)
OPS_LISTED(struct quant_kernels, QUANT_OPS, 0);

#ifdef __cplusplus
}
#endif
