// elementwise_cuda.cu: the elementwise ops and copies of elementwise.h in CUDA: the kernels, their
// launchers and elementwise_kernels_cuda, the CUDA backend's table. Written C-style: bf16
// activations, fp32 arithmetic, one rounding to bf16 per result; all work on the backend's stream,
// nothing waits for it; grid-stride loops with int64 indices.
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/core/check.h"
#include "common/kernels/elementwise.h"

typedef __nv_bfloat16 bf16;

#include "common/kernels/cuda_launch.cuh"

// (stream_of, grid_for, ceil_div, GRID_STRIDE, bf: common/kernels/cuda_launch.cuh)

#define EW_THREADS 256

// ---------------------------------------------------------------------------- embed

// One block per token row (grid-stride over rows), threads over the H columns.
static __global__ void embed_kernel(bf16 *out, const bf16 *table, const int32_t *ids, int T, int H) {
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        const bf16 *src = table + (int64_t)ids[t] * H;
        bf16 *dst = out + t * H;
        for (int i = threadIdx.x; i < H; i += blockDim.x) dst[i] = src[i];
    }
}

static void cuda_embed(backend *be, void *out, const void *table, const int32_t *ids, int T, int H) {
    if (T <= 0 || H <= 0) return;
    embed_kernel<<<grid_for(T), 256, 0, stream_of(be)>>>((bf16 *)out, (const bf16 *)table, ids, T, H);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- sums, scale, biases

static __global__ void add_kernel(bf16 *x, const bf16 *y, int64_t n) {
    GRID_STRIDE(i, n) x[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(y[i]));
}

static void cuda_add(backend *be, void *x, const void *y, int64_t n) {
    if (n <= 0) return;
    add_kernel<<<grid_for(ceil_div(n, EW_THREADS)), EW_THREADS, 0, stream_of(be)>>>((bf16 *)x, (const bf16 *)y, n);
    cuda_check_launch();
}

static __global__ void add_to_f32_kernel(float *acc, const bf16 *x, int64_t n) {
    GRID_STRIDE(i, n) acc[i] += bf(x[i]);
}

static void cuda_add_to_f32(backend *be, float *acc, const void *x, int64_t n) {
    if (n <= 0) return;
    add_to_f32_kernel<<<grid_for(ceil_div(n, EW_THREADS)), EW_THREADS, 0, stream_of(be)>>>(acc, (const bf16 *)x, n);
    cuda_check_launch();
}

static __global__ void scale_kernel(bf16 *x, float s, int64_t n) {
    GRID_STRIDE(i, n) x[i] = __float2bfloat16(bf(x[i]) * s);
}

static void cuda_scale(backend *be, void *x, float s, int64_t n) {
    if (n <= 0) return;
    scale_kernel<<<grid_for_threads(n, EW_THREADS), EW_THREADS, 0, stream_of(be)>>>((bf16 *)x, s, n);
    cuda_check_launch();
}

static __global__ void bias_add_kernel(bf16 *y, const bf16 *b, int64_t R, int64_t N) {
    GRID_STRIDE(i, R * N) y[i] = __float2bfloat16(bf(y[i]) + bf(b[i % N]));
}

static void cuda_bias_add(backend *be, void *y, const void *b, int64_t R, int64_t N) {
    if (R <= 0 || N <= 0) return;
    bias_add_kernel<<<grid_for_threads(R * N, EW_THREADS), EW_THREADS, 0, stream_of(be)>>>((bf16 *)y,
                                                                                          (const bf16 *)b, R, N);
    cuda_check_launch();
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

static void cuda_moe_bias_add(backend *be, void *ys, const void *bias, const int32_t *offsets, int E, int64_t R,
                              int64_t N) {
    if (R <= 0 || N <= 0 || E <= 0) return;
    moe_bias_add_kernel<<<grid_for(R), EW_THREADS, 0, stream_of(be)>>>((bf16 *)ys, (const bf16 *)bias, offsets, E,
                                                                       R, N);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- casts, copies

static __global__ void to_f32_kernel(float *dst, const bf16 *src, int64_t n) {
    GRID_STRIDE(i, n) dst[i] = __bfloat162float(src[i]);
}

static void cuda_to_f32(backend *be, float *dst, const void *src, int64_t n) {
    if (n <= 0) return;
    to_f32_kernel<<<grid_for(ceil_div(n, EW_THREADS)), EW_THREADS, 0, stream_of(be)>>>(dst, (const bf16 *)src, n);
    cuda_check_launch();
}

static __global__ void f32_to_act_kernel(bf16 *dst, const float *src, int64_t n) {
    GRID_STRIDE(i, n) dst[i] = __float2bfloat16(src[i]);
}

static void cuda_f32_to_act(backend *be, void *dst, const float *src, int64_t n) {
    if (n <= 0) return;
    f32_to_act_kernel<<<grid_for(ceil_div(n, EW_THREADS)), EW_THREADS, 0, stream_of(be)>>>((bf16 *)dst, src, n);
    cuda_check_launch();
}

// A strided copy of bf16 rows: cudaMemcpy2DAsync takes pitches and the row width in bytes, each
// at most cudaDevAttrMaxPitch (2^31 - 1 bytes on every GPU so far). Contiguous rows (one row, or
// pitches equal to the width: a stage's activations [S, H]) go as one 1-D copy, which has no such
// limit; rows whose pitch passes it go one 1-D copy per row.
static void cuda_copy_2d(backend *be, void *dst, int64_t dst_ld, const void *src, int64_t src_ld, int64_t rows,
                         int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    size_t e = sizeof(bf16), dp = (size_t)dst_ld * e, sp = (size_t)src_ld * e, w = (size_t)cols * e;
    if (rows == 1 || (dp == w && sp == w)) {
        cuda_check(cudaMemcpyAsync(dst, src, w * (size_t)rows, cudaMemcpyDeviceToDevice, stream_of(be)));
        return;
    }
    const size_t pitch_max = 2147483647u;
    if (dp <= pitch_max && sp <= pitch_max) {
        cuda_check(cudaMemcpy2DAsync(dst, dp, src, sp, w, (size_t)rows, cudaMemcpyDeviceToDevice, stream_of(be)));
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        cuda_check(cudaMemcpyAsync((char *)dst + (size_t)r * dp, (const char *)src + (size_t)r * sp, w,
                                   cudaMemcpyDeviceToDevice, stream_of(be)));
}

extern "C" const struct elementwise_kernels elementwise_kernels_cuda = {ELEMENTWISE_OPS(OP_FILL, cuda_)};
