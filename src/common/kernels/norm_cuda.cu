// norm_cuda.cu: the RMSNorms of norm.h in CUDA, forward and backward: the kernels, their launchers
// and norm_kernels_cuda, the CUDA backend's table. Written C-style (nvcc compiles .cu as C++): bf16
// activations and weights, fp32 sums, one warp per row; all work on the backend's stream, nothing
// waits for it. The CPU twins (norm_cpu.c) are the reference: each kernel computes the same
// formula in the same order where that is cheap.
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/core/check.h"
#include "common/kernels/norm.h"

typedef __nv_bfloat16 bf16;

#include "common/kernels/cuda_launch.cuh"
#include "common/kernels/cuda_reduce.cuh"

// (stream_of, grid_for, ceil_div, GRID_STRIDE, bf: common/kernels/cuda_launch.cuh; warp_sum,
// warp_max, block_sum, block_max: common/kernels/cuda_reduce.cuh)

static __device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

// ---------------------------------------------------------------------------- RMSNorm

// One warp per row: R is tokens (D = hidden, up to 8192) or tokens * heads (D = head_dim, R in the
// millions), so a warp keeps every lane busy for small D without a block-wide barrier per row.
// Grid-stride over rows. out may alias in: each lane reads x[i] before writing y[i] itself.
#define RMS_WARPS 8
static __global__ void rmsnorm_kernel(bf16 *out, const bf16 *in, const bf16 *w, int R, int D, float eps) {
    int lane = threadIdx.x % 32;
    for (int64_t r = (int64_t)blockIdx.x * RMS_WARPS + threadIdx.x / 32; r < R; r += (int64_t)gridDim.x * RMS_WARPS) {
        const bf16 *x = in + r * D;
        bf16 *y = out + r * D;
        float ss = 0.0f;
        for (int i = lane; i < D; i += 32) {
            float a = __bfloat162float(x[i]);
            ss += a * a;
        }
        ss = warp_sum(ss);
        // The CPU twin forms this in double; in fp32 the sum of D squares carries a relative error
        // of about D * 2^-24 at worst (far less in the tree order used here): far below bf16.
        float inv = 1.0f / sqrtf(ss / (float)D + eps);
        for (int i = lane; i < D; i += 32) y[i] = __float2bfloat16(__bfloat162float(x[i]) * inv * __bfloat162float(w[i]));
    }
}

static void cuda_rmsnorm(backend *be, void *out, const void *in, const void *w, int R, int D, float eps) {
    if (R <= 0 || D <= 0) return;
    rmsnorm_kernel<<<grid_for(ceil_div(R, RMS_WARPS)), RMS_WARPS * 32, 0, stream_of(be)>>>(
        (bf16 *)out, (const bf16 *)in, (const bf16 *)w, R, D, eps);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- RMSNorm backward
//
// One warp per row (grid-stride), as the forward: the row sums sum x^2 and sum w dy x by warp
// shuffles, then dx_i = r w_i dy_i - x_i r^3/D sum_j w_j dy_j x_j. dw: each block sums its rows'
// dy x r into a shared-memory row (shared atomics, cheap) and adds it to dw once at the end, so dw
// sees gridDim.x * D global atomics, not R * D. Rows wider than the shared row fit (D > RMSB_SMEM_D)
// add straight to global memory.
#define RMSB_WARPS 8
#define RMSB_BLOCKS 256
#define RMSB_SMEM_D 12288 // 48 KiB of fp32
static __global__ void rmsnorm_backward_kernel(bf16 *dx, float *dw, const bf16 *dy, const bf16 *x, const bf16 *w,
                                               int R, int D, float eps, int accumulate, int shared_dw) {
    extern __shared__ float sdw[];
    int lane = threadIdx.x % 32;
    if (shared_dw) {
        for (int i = threadIdx.x; i < D; i += blockDim.x) sdw[i] = 0.0f;
        __syncthreads();
    }
    float *acc = shared_dw ? sdw : dw;
    for (int64_t r = (int64_t)blockIdx.x * RMSB_WARPS + threadIdx.x / 32; r < R; r += (int64_t)gridDim.x * RMSB_WARPS) {
        const bf16 *xr = x + r * D, *dyr = dy + r * D;
        bf16 *dxr = dx + r * D;
        float ss = 0.0f, wdx = 0.0f;
        for (int i = lane; i < D; i += 32) {
            float a = bf(xr[i]);
            ss += a * a;
            wdx += bf(w[i]) * bf(dyr[i]) * a;
        }
        ss = warp_sum(ss);
        wdx = warp_sum(wdx);
        float rr = 1.0f / sqrtf(ss / (float)D + eps), coef = wdx * rr * rr * rr / (float)D;
        for (int i = lane; i < D; i += 32) {
            float a = bf(xr[i]), d = bf(dyr[i]);
            float g = rr * bf(w[i]) * d - a * coef;
            atomicAdd(&acc[i], d * a * rr);
            dxr[i] = __float2bfloat16(accumulate ? bf(dxr[i]) + g : g);
        }
    }
    if (shared_dw) {
        __syncthreads();
        for (int i = threadIdx.x; i < D; i += blockDim.x) atomicAdd(&dw[i], sdw[i]);
    }
}

static void cuda_rmsnorm_backward(backend *be, void *dx, float *dw, const void *dy, const void *x, const void *w,
                                  int R, int D, float eps, int accumulate) {
    if (R <= 0 || D <= 0) return;
    int shared_dw = D <= RMSB_SMEM_D;
    int64_t blocks = ceil_div(R, RMSB_WARPS);
    if (blocks > RMSB_BLOCKS) blocks = RMSB_BLOCKS;
    size_t smem = shared_dw ? (size_t)D * sizeof(float) : 0;
    rmsnorm_backward_kernel<<<(unsigned)blocks, RMSB_WARPS * 32, smem, stream_of(be)>>>(
        (bf16 *)dx, dw, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)w, R, D, eps, accumulate, shared_dw);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- the hybrid's norms

// One warp per row (as rmsnorm_kernel above): y = x r * (zc ? 1 + w : w) * (z ? silu(z) : 1),
// r = 1/sqrt(mean(x^2) + eps) in fp32 (the CPU twin sums in double: ~D 2^-24 relative at worst, far
// below bf16). out may alias in: each lane reads x[i] before it writes y[i] itself.
#define NORM_WARPS 8
static __global__ void norm_kernel(bf16 *out, const bf16 *in, const bf16 *w, const bf16 *z, int R, int D, float eps,
                                   int zc) {
    int lane = threadIdx.x % 32;
    for (int64_t r = (int64_t)blockIdx.x * NORM_WARPS + threadIdx.x / 32; r < R; r += (int64_t)gridDim.x * NORM_WARPS) {
        const bf16 *x = in + r * D;
        bf16 *y = out + r * D;
        float ss = 0.0f;
        for (int i = lane; i < D; i += 32) ss += bf(x[i]) * bf(x[i]);
        ss = warp_sum(ss);
        float inv = 1.0f / sqrtf(ss / (float)D + eps);
        for (int i = lane; i < D; i += 32) {
            float v = bf(x[i]) * inv * (zc ? 1.0f + bf(w[i]) : bf(w[i]));
            y[i] = __float2bfloat16(z ? v * silu_f(bf(z[r * D + i])) : v);
        }
    }
}

static void norm_launch(backend *be, void *out, const void *in, const void *w, const void *z, int R, int D, float eps,
                        int zc) {
    if (R <= 0 || D <= 0) return;
    int64_t blocks = ((int64_t)R + NORM_WARPS - 1) / NORM_WARPS;
    norm_kernel<<<(unsigned)(blocks < (1 << 20) ? blocks : (1 << 20)), NORM_WARPS * 32, 0, stream_of(be)>>>(
        (bf16 *)out, (const bf16 *)in, (const bf16 *)w, (const bf16 *)z, R, D, eps, zc);
    cuda_check_launch();
}

static void cuda_rmsnorm_zc(backend *be, void *out, const void *in, const void *w, int R, int D, float eps) {
    norm_launch(be, out, in, w, NULL, R, D, eps, 1);
}

static void cuda_gated_rmsnorm(backend *be, void *out, const void *x, const void *z, const void *w, int R, int D,
                               float eps) {
    norm_launch(be, out, x, w, z, R, D, eps, 0);
}

extern "C" const struct norm_kernels norm_kernels_cuda = {NORM_OPS(OP_FILL, cuda_)};
