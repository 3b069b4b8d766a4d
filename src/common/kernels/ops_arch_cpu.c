// ops_arch_cpu.c: the fp32 reference of the ops in ops_arch.h, threaded with OpenMP where the work
// pays for a team (as ops_cpu.c: OPS_PAR_MIN elements). Each function is the formula of its header
// comment, in fp32 (tanh and exp from libm: these are elementwise ops over activations, not the
// softmax's inner loops).
#include "common/kernels/ops_arch_cpu.h"

#include <math.h>

#define OPS_PAR_MIN 16384

void cpu_bias_add(float *y, const float *b, int64_t R, int64_t N) {
#pragma omp parallel for if (R * N >= OPS_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        float *yr = y + r * N;
#pragma omp simd
        for (int64_t c = 0; c < N; c++) yr[c] += b[c];
    }
}

void cpu_scale(float *x, float s, int64_t n) {
#pragma omp parallel for simd if (n >= OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

void cpu_softcap_f32(float *x, int64_t ld, int64_t R, int64_t C, float cap) {
#pragma omp parallel for if (R * C >= OPS_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        float *xr = x + r * ld;
        for (int64_t c = 0; c < C; c++) xr[c] = cap * tanhf(xr[c] / cap);
    }
}

// gelu_tanh(g) * u, in fp32 as transformers' gelu_pytorch_tanh forms it
static inline float geglu1(float g, float u) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f; // sqrt(2/pi)
    return 0.5f * g * (1.0f + tanhf(k0 * (g + k1 * (g * g * g)))) * u;
}

void cpu_geglu_tanh(float *out, const float *gate, const float *up, int64_t n) {
#pragma omp parallel for if (n >= OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) out[i] = geglu1(gate[i], up[i]);
}

void cpu_swiglu_clamped(float *out, const float *in, int64_t R, int64_t n_i, float alpha, float limit) {
#pragma omp parallel for if (R * n_i >= OPS_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        const float *x = in + r * 2 * n_i;
        float *y = out + r * n_i;
        for (int64_t j = 0; j < n_i; j++) {
            float g = fminf(x[2 * j], limit), u = fminf(fmaxf(x[2 * j + 1], -limit), limit);
            y[j] = (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
        }
    }
}

void cpu_moe_bias_add(float *ys, const float *bias, const int32_t *offsets, int E, int64_t R, int64_t N) {
    (void)R;
    for (int e = 0; e < E; e++) {
        const float *b = bias + (int64_t)e * N;
        int64_t r0 = offsets[e], r1 = offsets[e + 1];
#pragma omp parallel for if ((r1 - r0) * N >= OPS_PAR_MIN)
        for (int64_t r = r0; r < r1; r++) {
            float *y = ys + r * N;
#pragma omp simd
            for (int64_t c = 0; c < N; c++) y[c] += b[c];
        }
    }
}
