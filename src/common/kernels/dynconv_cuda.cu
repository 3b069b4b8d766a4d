// dynconv_cuda.cu: the grouped dynamic causal convolution of dynconv.h on the GPU, forward and
// backward, and dynconv_kernels_cuda, the CUDA backend's table: bf16 activations with fp32 accumulation: one thread per output element (out, dx), per (row, offset,
// group) for ddyn, per (offset, channel) for dbase (its rows summed in order, so the result does
// not depend on the launch). K is a few taps, so each thread's loop is short.
#include <stdint.h>
#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/kernels/cuda_launch.cuh"
#include "common/kernels/dynconv.h"

typedef __nv_bfloat16 bf16;
#define DC_THREADS 256

// out[t, h] = sum_{o < K, o <= t % B} (base[o, h] + dyn[t, o*ng + h/G]) * x[t-o, h]
static __global__ void dynconv_forward_kernel(bf16 *out, const bf16 *x, const bf16 *dyn, int ld, const bf16 *base,
                                              int T, int B, int H, int K, int G) {
    int ng = H / G;
    GRID_STRIDE(i, (int64_t)T * H) {
        int t = (int)(i / H), h = (int)(i % H), k = t % B;
        float s = 0.0f;
        for (int o = 0; o < K && o <= k; o++)
            s += (bf(base[(int64_t)o * H + h]) + bf(dyn[(int64_t)t * ld + o * ng + h / G])) * bf(x[i - (int64_t)o * H]);
        out[i] = __float2bfloat16(s);
    }
}

// dx[t, h] = sum_{o < K, t%B + o < B} (base[o, h] + dyn[t+o, o*ng + h/G]) * dout[t+o, h]
static __global__ void dynconv_dx_kernel(bf16 *dx, const bf16 *dout, const bf16 *dyn, int ld, const bf16 *base, int T,
                                         int B, int H, int K, int G) {
    int ng = H / G;
    GRID_STRIDE(i, (int64_t)T * H) {
        int t = (int)(i / H), h = (int)(i % H), k = t % B;
        float s = 0.0f;
        for (int o = 0; o < K && k + o < B; o++)
            s += (bf(base[(int64_t)o * H + h]) + bf(dyn[(int64_t)(t + o) * ld + o * ng + h / G])) *
                 bf(dout[i + (int64_t)o * H]);
        dx[i] = __float2bfloat16(s);
    }
}

// ddyn[t, o*ng + g] = sum_{c < G} dout[t, g*G + c] * x[t-o, g*G + c] (0 for o > t % B)
static __global__ void dynconv_ddyn_kernel(bf16 *ddyn, const bf16 *dout, const bf16 *x, int ld, int T, int B, int H,
                                           int K, int G) {
    int ng = H / G;
    GRID_STRIDE(i, (int64_t)T * K * ng) {
        int t = (int)(i / ((int64_t)K * ng)), r = (int)(i % ((int64_t)K * ng)), o = r / ng, g = r % ng;
        float s = 0.0f;
        if (o <= t % B)
            for (int c = 0; c < G; c++)
                s += bf(dout[(int64_t)t * H + g * G + c]) * bf(x[(int64_t)(t - o) * H + g * G + c]);
        ddyn[(int64_t)t * ld + r] = __float2bfloat16(s);
    }
}

// dbase[o, h] += sum_{t: t % B >= o} dout[t, h] * x[t-o, h]
static __global__ void dynconv_dbase_kernel(float *dbase, const bf16 *dout, const bf16 *x, int T, int B, int H, int K) {
    GRID_STRIDE(i, (int64_t)K * H) {
        int o = (int)(i / H), h = (int)(i % H);
        float s = 0.0f;
        for (int t = o; t < T; t++)
            if (t % B >= o) s += bf(dout[(int64_t)t * H + h]) * bf(x[(int64_t)(t - o) * H + h]);
        dbase[i] += s;
    }
}

static void cuda_dynconv_forward(backend *be, void *out, const void *x, const void *dyn, int ld, const void *base,
                                 int T, int B, int H, int K, int G) {
    if (T <= 0) return;
    dynconv_forward_kernel<<<grid_for_threads((int64_t)T * H, DC_THREADS), DC_THREADS, 0, stream_of(be)>>>(
        (bf16 *)out, (const bf16 *)x, (const bf16 *)dyn, ld, (const bf16 *)base, T, B, H, K, G);
    cuda_check_launch();
}

static void cuda_dynconv_backward(backend *be, void *dx, void *ddyn, float *dbase, const void *dout, const void *x,
                                  const void *dyn, int ld, const void *base, int T, int B, int H, int K, int G) {
    if (T <= 0) return;
    cudaStream_t s = stream_of(be);
    dynconv_dx_kernel<<<grid_for_threads((int64_t)T * H, DC_THREADS), DC_THREADS, 0, s>>>(
        (bf16 *)dx, (const bf16 *)dout, (const bf16 *)dyn, ld, (const bf16 *)base, T, B, H, K, G);
    cuda_check_launch();
    dynconv_ddyn_kernel<<<grid_for_threads((int64_t)T * K * (H / G), DC_THREADS), DC_THREADS, 0, s>>>(
        (bf16 *)ddyn, (const bf16 *)dout, (const bf16 *)x, ld, T, B, H, K, G);
    cuda_check_launch();
    dynconv_dbase_kernel<<<grid_for_threads((int64_t)K * H, DC_THREADS), DC_THREADS, 0, s>>>(
        dbase, (const bf16 *)dout, (const bf16 *)x, T, B, H, K);
    cuda_check_launch();
}

extern "C" const struct dynconv_kernels dynconv_kernels_cuda = {DYNCONV_OPS(OP_FILL, cuda_dynconv_)};
