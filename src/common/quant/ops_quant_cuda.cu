// ops_quant_cuda.cu: the CUDA kernels of the de-quantisation ops (see ops_quant.h) and the CUDA
// backend's table of them (quant_kernels_cuda): dst bf16. Each output is its CPU twin's formula
// (ops_quant_cpu.c): the same fp32 product of the decoded code and the scale (a lone multiply:
// nothing to contract), a NaN made the canonical quiet NaN, then rounded to bf16 on the bits as
// half.c's bf16_from_f32 does (nearest even), so the result is bf16_from_f32 of the twin's, bit for
// bit. All work on the backend's stream, nothing waits.
#include <stdint.h>

#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/core/check.h"
#include "common/quant/ops_quant.h"

typedef __nv_bfloat16 bf16;

#include "common/kernels/cuda_launch.cuh"

#define DQ_THREADS 256

// half.c's bf16_from_f32 on the bits; NaN never reaches it (canonical first)
static __device__ __forceinline__ uint16_t bf16_bits(float v) {
    if (v != v) return 0x7FC0u; // the canonical quiet NaN 0x7FC00000, its top half
    uint32_t u = __float_as_uint(v);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// half.c's f32_from_f8e4m3: e = 0: m * 2^-9; e = 15, m = 7: NaN; else (8 + m) * 2^(e - 10)
static __device__ __forceinline__ float e4m3(uint8_t b) {
    uint32_t sign = (uint32_t)(b & 0x80u) << 24, e = (b >> 3) & 0x0Fu, m = b & 0x07u;
    if (e == 15 && m == 7) return __uint_as_float(sign | 0x7FC00000u);
    if (e == 0) return __uint_as_float(__float_as_uint((float)m * 0x1p-9f) | sign);
    return __uint_as_float(sign | ((e + 127 - 7) << 23) | (m << 20));
}

// One block per row of the stack [M * O, I] (grid-stride over rows), threads over its columns.
static __global__ void dequant_fp8_kernel(uint16_t *dst, const uint8_t *codes, const float *scales, int64_t rows,
                                          int64_t O, int I, int64_t bo, int bi) {
    int64_t so = (O + bo - 1) / bo, si = (I + bi - 1) / bi;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t m = r / O, o = r % O;
        const float *srow = scales + (m * so + o / bo) * si;
        const uint8_t *c = codes + r * I;
        uint16_t *d = dst + r * I;
        for (int i = threadIdx.x; i < I; i += blockDim.x) d[i] = bf16_bits(e4m3(c[i]) * srow[i / bi]);
    }
}

// |e2m1| of a 3-bit code k: {0, .5, 1, 1.5, 2, 3, 4, 6} = (2 + (k & 1)) * 2^((k >> 1) - 1) / 2 from k = 2 on
static __device__ __forceinline__ float e2m1_mag(uint32_t k) {
    return k < 2 ? (float)k * 0.5f : (float)(2 + (k & 1u)) * (float)(1u << ((k >> 1) - 1)) * 0.5f;
}

// One thread per byte of the blocks [N, G, 16]: byte b of group b / 16 gives elements 2 b (low
// nibble) and 2 b + 1 (high nibble).
static __global__ void dequant_mxfp4_kernel(uint16_t *dst, const uint8_t *blocks, const uint8_t *scales, int64_t n) {
    GRID_STRIDE(b, n) {
        int e = (int)scales[b >> 4] - 127;
        // 2^e as a float (e = -127: the subnormal 2^-127; e = 128: 2^127, the product then x 2)
        float s = e >= -126 ? __uint_as_float((uint32_t)((e > 127 ? 127 : e) + 127) << 23) : __uint_as_float(0x00400000u);
        uint32_t x = blocks[b];
        float lo = e2m1_mag(x & 0x07u), hi = e2m1_mag((x >> 4) & 0x07u);
        if (x & 0x08u) lo = -lo;
        if (x & 0x80u) hi = -hi;
        float vl = lo * s, vh = hi * s;
        if (e > 127) vl = vl * 2.0f, vh = vh * 2.0f;
        dst[2 * b] = bf16_bits(vl);
        dst[2 * b + 1] = bf16_bits(vh);
    }
}

static void cuda_dequant_fp8(backend *be, void *dst, const uint8_t *codes, const float *scales, int64_t M, int64_t O,
                             int64_t I, int64_t bo, int64_t bi) {
    if (M <= 0 || O <= 0 || I <= 0) return;
    if (I > INT32_MAX) fatal("dequant fp8: rows of %lld columns (at most 2^31 - 1)", (long long)I);
    int bi32 = bi < I ? (int)bi : (int)I; // a block as wide as the row or wider: one scale for the row
    dequant_fp8_kernel<<<grid_for(M * O), DQ_THREADS, 0, stream_of(be)>>>((uint16_t *)dst, codes, scales, M * O, O,
                                                                          (int)I, bo, bi32);
    cuda_check_launch();
}

static void cuda_dequant_mxfp4(backend *be, void *dst, const uint8_t *blocks, const uint8_t *scales, int64_t N,
                               int64_t G) {
    if (N <= 0 || G <= 0) return;
    int64_t n = N * G * 16;
    dequant_mxfp4_kernel<<<grid_for_threads(n, DQ_THREADS), DQ_THREADS, 0, stream_of(be)>>>((uint16_t *)dst, blocks,
                                                                                            scales, n);
    cuda_check_launch();
}

extern "C" const struct quant_kernels quant_kernels_cuda = {QUANT_OPS(OP_FILL, cuda_)};
