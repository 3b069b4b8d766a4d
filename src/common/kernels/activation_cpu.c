// activation_cpu.c: the activations of activation.h on the CPU, forward and backward: the fp32
// reference, threaded with OpenMP where the work pays for a team (OPS_PAR_MIN elements), and
// activation_kernels_cpu, the CPU backend's table. Each function is the formula of its header
// comment in fp32; SwiGLU's spans are vectorised (vexpf), the architectures' activations take tanh
// and exp from libm (elementwise ops over activations, not the softmax's inner loops).
#include <math.h>

#include "common/kernels/activation.h"
#include "common/kernels/cpu_kernel.h"

// ----------------------------------------------------------------------------- SwiGLU

VEXP_CLONES static void swiglu_span(float *out, const float *gate, const float *up, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + vexpf(-g)) * up[i];
    }
}

static void cpu_swiglu(backend *be, void *out_v, const void *gate_v, const void *up_v, int64_t n) {
    float *out = out_v;
    const float *gate = gate_v, *up = up_v;
    (void)be;
    const int64_t span = OPS_PAR_MIN / 4; // elements a call
#pragma omp parallel for if (n >= OPS_PAR_MIN)
    for (int64_t i0 = 0; i0 < n; i0 += span) swiglu_span(out + i0, gate + i0, up + i0, n - i0 < span ? n - i0 : span);
}

// out = silu(g) u, silu(g) = g sigmoid(g), silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
// Every input of element i is read before its outputs are written, so the gradients may alias the inputs.
// Spans of SPAN elements over the threads, each vectorised (vexpf; VEXP_CLONES).
#define SPAN 4096
VEXP_CLONES static void swiglu_backward_span(float *dgate, float *dup, const float *dout, const float *gate,
                                             const float *up, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i], u = up[i], d = dout[i];
        float sg = 1.0f / (1.0f + vexpf(-g)); // g -> -inf: exp = inf, sg = 0 (no NaN)
        dgate[i] = d * u * sg * (1.0f + g * (1.0f - sg));
        dup[i] = d * g * sg;
    }
}

static void cpu_swiglu_backward(backend *be, void *dgate_v, void *dup_v, const void *dout_v, const void *gate_v,
                                const void *up_v, int64_t n) {
    float *dgate = dgate_v, *dup = dup_v;
    const float *dout = dout_v, *gate = gate_v, *up = up_v;
    (void)be;
#pragma omp parallel for if (n > SPAN)
    for (int64_t i0 = 0; i0 < n; i0 += SPAN) {
        int64_t m = n - i0 < SPAN ? n - i0 : SPAN;
        swiglu_backward_span(dgate + i0, dup + i0, dout + i0, gate + i0, up + i0, m);
    }
}

// ----------------------------------------------------------------------------- the architectures' activations

// gelu_tanh(g) * u, in fp32 as transformers' gelu_pytorch_tanh forms it
static inline float geglu1(float g, float u) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f; // sqrt(2/pi)
    return 0.5f * g * (1.0f + tanhf(k0 * (g + k1 * (g * g * g)))) * u;
}

static void cpu_geglu_tanh(backend *be, void *out_v, const void *gate_v, const void *up_v, int64_t n) {
    float *out = out_v;
    const float *gate = gate_v, *up = up_v;
    (void)be;
#pragma omp parallel for if (n >= OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) out[i] = geglu1(gate[i], up[i]);
}

static void cpu_swiglu_clamped(backend *be, void *out_v, const void *in_v, int64_t R, int64_t n_i, float alpha,
                               float limit) {
    float *out = out_v;
    const float *in = in_v;
    (void)be;
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

static void cpu_sigmoid_mul(backend *be, void *x_v, const void *g_v, int64_t n) {
    float *x = x_v;
    const float *g = g_v;
    (void)be;
#pragma omp parallel for simd if (n >= OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) x[i] *= sigmoidf(g[i]);
}

static void cpu_softcap_f32(backend *be, float *x, int64_t ld, int64_t R, int64_t C, float cap) {
    (void)be;
#pragma omp parallel for if (R * C >= OPS_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        float *xr = x + r * ld;
        for (int64_t c = 0; c < C; c++) xr[c] = cap * tanhf(xr[c] / cap);
    }
}

const struct activation_kernels activation_kernels_cpu = {ACTIVATION_OPS(OP_FILL, cpu_)};
