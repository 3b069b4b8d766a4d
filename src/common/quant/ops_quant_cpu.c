// ops_quant_cpu.c: the fp32 reference of the de-quantisation ops (ops_quant.h), row by row, and the
// CPU backend's table of them (quant_kernels_cpu); the rows are also what target_quant.c's load-time
// path runs, so both settings of teacher.quant_weights de-quantise by this one code.
#include "common/quant/ops_quant_cpu.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "common/core/half.h"
#include "common/quant/ops_quant.h"

#define OPS_PAR_MIN 65536 // elements: below this one thread does the whole op

// e4m3 code -> f32 (half.c's f32_from_f8e4m3), built once
static float fp8_lut[256];
static pthread_once_t fp8_lut_once = PTHREAD_ONCE_INIT;
static void fp8_lut_build(void) {
    for (int c = 0; c < 256; c++) fp8_lut[c] = f32_from_f8e4m3((uint8_t)c);
}

// The canonical quiet NaN (ops_quant.h): NaN payloads and signs depend on the operand order the
// compiler picks for a product; this does not.
static inline float canon(float v) {
    if (v == v) return v;
    uint32_t u = 0x7FC00000u;
    memcpy(&v, &u, sizeof v);
    return v;
}

void cpu_dequant_fp8_row(float *out, const uint8_t *codes, const float *scales, int64_t I, int64_t bi) {
    pthread_once(&fp8_lut_once, fp8_lut_build);
    for (int64_t i0 = 0, b = 0; i0 < I; i0 += bi, b++) {
        float s = scales[b];
        int64_t i1 = i0 + bi < I ? i0 + bi : I;
        for (int64_t i = i0; i < i1; i++) out[i] = canon(fp8_lut[codes[i]] * s);
    }
}

void cpu_dequant_mxfp4_row(float *out, const uint8_t *blocks, const uint8_t *scales, int64_t G) {
    static const float fp4[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    for (int64_t g = 0; g < G; g++) {
        // torch.ldexp(x, e): x * 2^e exactly, rounded once (every product here is exact in fp32 or
        // past its range: inf). 2^-127 (scale 0) is an fp32 subnormal, still exact; 2^128 (scale
        // 255) is not a float: 2^127 then * 2, so 0 stays 0 and 0.5 gives 2^127, as ldexp does.
        int e = (int)scales[g] - 127;
        float s = ldexpf(1.0f, e > 127 ? 127 : e), v[16];
        for (int c = 0; c < 16; c++) v[c] = e > 127 ? fp4[c] * s * 2.0f : fp4[c] * s;
        const uint8_t *blk = blocks + g * 16;
        float *o = out + g * 32;
        for (int j = 0; j < 16; j++) {
            o[2 * j] = v[blk[j] & 0x0F];
            o[2 * j + 1] = v[blk[j] >> 4];
        }
    }
}

// The ops' twins: dst f32 (the CPU's act dtype).
static void cpu_dequant_fp8(backend *be, void *dst_, const uint8_t *codes, const float *scales, int64_t M, int64_t O,
                            int64_t I, int64_t bo, int64_t bi) {
    (void)be;
    float *dst = dst_;
    int64_t so = (O + bo - 1) / bo, si = (I + bi - 1) / bi, rows = M * O;
#pragma omp parallel for schedule(static) if (rows * I >= OPS_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t m = r / O, o = r % O;
        cpu_dequant_fp8_row(dst + r * I, codes + r * I, scales + (m * so + o / bo) * si, I, bi);
    }
}

static void cpu_dequant_mxfp4(backend *be, void *dst_, const uint8_t *blocks, const uint8_t *scales, int64_t N,
                              int64_t G) {
    (void)be;
    float *dst = dst_;
#pragma omp parallel for schedule(static) if (N * G * 32 >= OPS_PAR_MIN)
    for (int64_t r = 0; r < N; r++) cpu_dequant_mxfp4_row(dst + r * G * 32, blocks + r * G * 16, scales + r * G, G);
}

const struct quant_kernels quant_kernels_cpu = {QUANT_OPS(OP_FILL, cpu_)};
