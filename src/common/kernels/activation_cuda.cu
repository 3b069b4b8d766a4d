// activation_cuda.cu: the activations of activation.h in CUDA, forward and backward: the kernels,
// their launchers and activation_kernels_cuda, the CUDA backend's table. Written C-style: bf16
// activations, every formula in fp32 (expf, tanhf: the precise versions, no --use_fast_math), one
// rounding to bf16 per result; all work on the backend's stream, nothing waits for it; grid-stride
// loops with int64 indices. Each kernel computes its CPU twin's formula (activation_cpu.c) in the
// same order, so the results differ from the twin by the bf16 rounding of the output (and of the
// inputs) and the last bits of the device's expf / tanhf.
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/core/check.h"
#include "common/kernels/activation.h"

typedef __nv_bfloat16 bf16;

#include "common/kernels/cuda_launch.cuh"

// (stream_of, grid_for, ceil_div, GRID_STRIDE, bf: common/kernels/cuda_launch.cuh)

#define EW_THREADS 256

// ---------------------------------------------------------------------------- SwiGLU

// out may alias gate (target.c computes gate = silu(gate) * up in place): same index, read first.
static __global__ void swiglu_kernel(bf16 *out, const bf16 *gate, const bf16 *up, int64_t n) {
    GRID_STRIDE(i, n) {
        float g = __bfloat162float(gate[i]);
        out[i] = __float2bfloat16(g / (1.0f + expf(-g)) * __bfloat162float(up[i]));
    }
}

static void cuda_swiglu(backend *be, void *out, const void *gate, const void *up, int64_t n) {
    if (n <= 0) return;
    swiglu_kernel<<<grid_for(ceil_div(n, EW_THREADS)), EW_THREADS, 0, stream_of(be)>>>((bf16 *)out, (const bf16 *)gate,
                                                                                      (const bf16 *)up, n);
    cuda_check_launch();
}

static __global__ void swiglu_backward_kernel(bf16 *dgate, bf16 *dup, const bf16 *dout, const bf16 *gate,
                                              const bf16 *up, int64_t n) {
    GRID_STRIDE(i, n) {
        float g = bf(gate[i]), u = bf(up[i]), d = bf(dout[i]);
        float sg = 1.0f / (1.0f + expf(-g));
        dgate[i] = __float2bfloat16(d * u * sg * (1.0f + g * (1.0f - sg)));
        dup[i] = __float2bfloat16(d * g * sg);
    }
}

static void cuda_swiglu_backward(backend *be, void *dgate, void *dup, const void *dout, const void *gate,
                                 const void *up, int64_t n) {
    if (n <= 0) return;
    swiglu_backward_kernel<<<grid_for(ceil_div(n, EW_THREADS)), EW_THREADS, 0, stream_of(be)>>>(
        (bf16 *)dgate, (bf16 *)dup, (const bf16 *)dout, (const bf16 *)gate, (const bf16 *)up, n);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- the architectures' activations, the gate

// out may alias gate: same index, read first
static __global__ void geglu_tanh_kernel(bf16 *out, const bf16 *gate, const bf16 *up, int64_t n) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f; // sqrt(2/pi)
    GRID_STRIDE(i, n) {
        float g = bf(gate[i]);
        out[i] = __float2bfloat16(0.5f * g * (1.0f + tanhf(k0 * (g + k1 * (g * g * g)))) * bf(up[i]));
    }
}

static __global__ void swiglu_clamped_kernel(bf16 *out, const bf16 *in, int64_t R, int64_t n_i, float alpha,
                                             float limit) {
    GRID_STRIDE(i, R * n_i) {
        int64_t r = i / n_i, j = i % n_i;
        const bf16 *x = in + r * 2 * n_i + 2 * j;
        float g = fminf(bf(x[0]), limit), u = fminf(fmaxf(bf(x[1]), -limit), limit);
        out[i] = __float2bfloat16((u + 1.0f) * (g / (1.0f + expf(-alpha * g))));
    }
}

static void cuda_geglu_tanh(backend *be, void *out, const void *gate, const void *up, int64_t n) {
    if (n <= 0) return;
    geglu_tanh_kernel<<<grid_for_threads(n, EW_THREADS), EW_THREADS, 0, stream_of(be)>>>(
        (bf16 *)out, (const bf16 *)gate, (const bf16 *)up, n);
    cuda_check_launch();
}

static void cuda_swiglu_clamped(backend *be, void *out, const void *in, int64_t R, int64_t n_i, float alpha,
                                float limit) {
    if (R <= 0 || n_i <= 0) return;
    swiglu_clamped_kernel<<<grid_for_threads(R * n_i, EW_THREADS), EW_THREADS, 0, stream_of(be)>>>(
        (bf16 *)out, (const bf16 *)in, R, n_i, alpha, limit);
    cuda_check_launch();
}

static __global__ void sigmoid_mul_kernel(bf16 *x, const bf16 *g, int64_t n) {
    GRID_STRIDE(i, n) x[i] = __float2bfloat16(bf(x[i]) * (1.0f / (1.0f + expf(-bf(g[i])))));
}

static void cuda_sigmoid_mul(backend *be, void *x, const void *g, int64_t n) {
    if (n <= 0) return;
    sigmoid_mul_kernel<<<grid_for_threads(n, EW_THREADS), EW_THREADS, 0, stream_of(be)>>>((bf16 *)x, (const bf16 *)g, n);
    cuda_check_launch();
}

static __global__ void softcap_kernel(float *x, int64_t ld, int64_t R, int64_t C, float cap) {
    GRID_STRIDE(i, R * C) {
        float *p = x + (i / C) * ld + i % C;
        *p = cap * tanhf(*p / cap);
    }
}

static void cuda_softcap_f32(backend *be, float *x, int64_t ld, int64_t R, int64_t C, float cap) {
    if (R <= 0 || C <= 0) return;
    softcap_kernel<<<grid_for_threads(R * C, EW_THREADS), EW_THREADS, 0, stream_of(be)>>>(x, ld, R, C, cap);
    cuda_check_launch();
}

extern "C" const struct activation_kernels activation_kernels_cuda = {ACTIVATION_OPS(OP_FILL, cuda_)};
