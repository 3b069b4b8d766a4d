// ops_arch_cuda.cu: the CUDA kernels of the architecture ops (see ops_arch.h and ops_arch_cuda.h).
//
// Written C-style, as ops_cuda.cu: bf16 activations, every formula in fp32 (tanhf, expf: the
// precise versions, no --use_fast_math), one rounding to bf16 per result; all work on the backend's
// stream, nothing waits for it; grid-stride loops with int64 indices. Each kernel computes its CPU
// twin's formula (ops_arch_cpu.c) in the same order, so the results differ from the twin by the
// bf16 rounding of the output (and of the inputs, which the tests give in bf16-exact values) and
// the last bits of the device's tanhf / expf.
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/core/check.h"
#include "common/kernels/ops_arch_cuda.h"

typedef __nv_bfloat16 bf16;

#include "common/kernels/cuda_launch.cuh"

#define EW_THREADS 256

static __global__ void bias_add_kernel(bf16 *y, const bf16 *b, int64_t R, int64_t N) {
    GRID_STRIDE(i, R * N) y[i] = __float2bfloat16(bf(y[i]) + bf(b[i % N]));
}

static __global__ void scale_kernel(bf16 *x, float s, int64_t n) {
    GRID_STRIDE(i, n) x[i] = __float2bfloat16(bf(x[i]) * s);
}

static __global__ void softcap_kernel(float *x, int64_t ld, int64_t R, int64_t C, float cap) {
    GRID_STRIDE(i, R * C) {
        float *p = x + (i / C) * ld + i % C;
        *p = cap * tanhf(*p / cap);
    }
}

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

// One block per routed row (grid-stride over rows): its expert by binary search in offsets (the
// last e with offsets[e] <= r: experts without rows share their offset with the next one and are
// passed over), then the bias row added over the columns. Rows at or past offsets[E] are left alone.
static __global__ void moe_bias_add_kernel(bf16 *ys, const bf16 *bias, const int32_t *offsets, int E, int64_t R,
                                           int64_t N) {
    for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
        if (r < offsets[0] || r >= offsets[E]) continue; // block-uniform
        int lo = 0, hi = E; // offsets[lo] <= r < offsets[hi]
        while (hi - lo > 1) {
            int mid = (lo + hi) / 2;
            if (offsets[mid] <= r) lo = mid;
            else hi = mid;
        }
        const bf16 *b = bias + (int64_t)lo * N;
        bf16 *y = ys + r * N;
        for (int64_t c = threadIdx.x; c < N; c += blockDim.x) y[c] = __float2bfloat16(bf(y[c]) + bf(b[c]));
    }
}

extern "C" void cuda_bias_add(backend *be, void *y, const void *b, int64_t R, int64_t N) {
    if (R <= 0 || N <= 0) return;
    bias_add_kernel<<<grid_for_threads(R * N, EW_THREADS), EW_THREADS, 0, stream_of(be)>>>((bf16 *)y,
                                                                                          (const bf16 *)b, R, N);
    cuda_check_launch();
}

extern "C" void cuda_scale(backend *be, void *x, float s, int64_t n) {
    if (n <= 0) return;
    scale_kernel<<<grid_for_threads(n, EW_THREADS), EW_THREADS, 0, stream_of(be)>>>((bf16 *)x, s, n);
    cuda_check_launch();
}

extern "C" void cuda_softcap_f32(backend *be, float *x, int64_t ld, int64_t R, int64_t C, float cap) {
    if (R <= 0 || C <= 0) return;
    softcap_kernel<<<grid_for_threads(R * C, EW_THREADS), EW_THREADS, 0, stream_of(be)>>>(x, ld, R, C, cap);
    cuda_check_launch();
}

extern "C" void cuda_geglu_tanh(backend *be, void *out, const void *gate, const void *up, int64_t n) {
    if (n <= 0) return;
    geglu_tanh_kernel<<<grid_for_threads(n, EW_THREADS), EW_THREADS, 0, stream_of(be)>>>(
        (bf16 *)out, (const bf16 *)gate, (const bf16 *)up, n);
    cuda_check_launch();
}

extern "C" void cuda_swiglu_clamped(backend *be, void *out, const void *in, int64_t R, int64_t n_i, float alpha,
                                    float limit) {
    if (R <= 0 || n_i <= 0) return;
    swiglu_clamped_kernel<<<grid_for_threads(R * n_i, EW_THREADS), EW_THREADS, 0, stream_of(be)>>>(
        (bf16 *)out, (const bf16 *)in, R, n_i, alpha, limit);
    cuda_check_launch();
}

extern "C" void cuda_moe_bias_add(backend *be, void *ys, const void *bias, const int32_t *offsets, int E, int64_t R,
                                  int64_t N) {
    if (R <= 0 || N <= 0 || E <= 0) return;
    moe_bias_add_kernel<<<grid_for(R), EW_THREADS, 0, stream_of(be)>>>((bf16 *)ys, (const bf16 *)bias, offsets, E,
                                                                       R, N);
    cuda_check_launch();
}
