// rope_cuda.cu: RoPE (rope.h) in CUDA, forward and backward: one rotation (rope_turn) for the three
// ops, their kernels and launchers, and rope_kernels_cuda, the CUDA backend's table. bf16
// activations, fp32 angles and arithmetic; on the backend's stream, nothing waits for it. The CPU
// twin (rope_cpu.c) is the reference: the same angle, the same rotation.
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/core/check.h"
#include "common/kernels/rope.h"

typedef __nv_bfloat16 bf16;

#include "common/kernels/cuda_launch.cuh"

// (stream_of, grid_for, ceil_div, GRID_STRIDE, bf: common/kernels/cuda_launch.cuh)

#define ROPE_THREADS 256

// rope_turn: one thread per (token, frequency i < rot/2): the angle and its sine/cosine once, then
// the pair (x[i], x[i + rot/2]) of every head turned by sign * angle (sign 1: the forward, -1: its
// transpose, the backward: sin(-angle) = -sin(angle), so the sign goes on the sine's terms). The angle
// is formed exactly as the CPU twin (and transformers) do, (float)pos * inv_freq in fp32; sincosf
// is the precise version (no --use_fast_math), which reduces large arguments (positions in the
// thousands) correctly. Dims rot .. hd-1 are left as they are. Each kernel below passes its sign as
// a constant: the compiler folds it away (x - -y is x + y), so each direction compiles to the
// products and sums it always had, and contracts them into the same FMAs.
static __device__ __forceinline__ void rope_turn(bf16 *x, const int32_t *pos, const float *inv_freq, int T, int nh,
                                                 int hd, int rot, float sign) {
    int half = rot / 2;
    GRID_STRIDE(u, (int64_t)T * half) {
        int64_t t = u / half;
        int i = (int)(u % half);
        float angle = (float)pos[t] * inv_freq[i];
        float s, c;
        sincosf(angle, &s, &c);
        for (int h = 0; h < nh; h++) {
            bf16 *v = x + (t * nh + h) * hd;
            float a = bf(v[i]), b = bf(v[i + half]);
            v[i] = __float2bfloat16(a * c - sign * (b * s));
            v[i + half] = __float2bfloat16(b * c + sign * (a * s));
        }
    }
}

static __global__ void rope_forward_kernel(bf16 *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd,
                                           int rot) {
    rope_turn(x, pos, inv_freq, T, nh, hd, rot, 1.0f);
}

static __global__ void rope_backward_kernel(bf16 *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd) {
    rope_turn(x, pos, inv_freq, T, nh, hd, hd, -1.0f);
}

static unsigned rope_blocks(int T, int rot) { return grid_for_threads((int64_t)T * (rot / 2), ROPE_THREADS); }

static void cuda_rope(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd) {
    if (T <= 0 || nh <= 0 || hd < 2) return;
    if (hd % 2) fatal("rope: head_dim %d is odd", hd);
    rope_forward_kernel<<<rope_blocks(T, hd), ROPE_THREADS, 0, stream_of(be)>>>((bf16 *)x, pos, inv_freq, T, nh, hd, hd);
    cuda_check_launch();
}

static void cuda_rope_partial(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd,
                              int rot) {
    if (T <= 0 || nh <= 0 || rot < 2) return;
    rope_forward_kernel<<<rope_blocks(T, rot), ROPE_THREADS, 0, stream_of(be)>>>((bf16 *)x, pos, inv_freq, T, nh, hd, rot);
    cuda_check_launch();
}

static void cuda_rope_backward(backend *be, void *dx, const int32_t *pos, const float *inv_freq, int T, int nh, int hd) {
    if (T <= 0 || nh <= 0 || hd < 2) return;
    if (hd % 2) fatal("rope backward: head_dim %d is odd", hd);
    rope_backward_kernel<<<rope_blocks(T, hd), ROPE_THREADS, 0, stream_of(be)>>>((bf16 *)dx, pos, inv_freq, T, nh, hd);
    cuda_check_launch();
}

extern "C" const struct rope_kernels rope_kernels_cuda = {ROPE_OPS(OP_FILL, cuda_)};
