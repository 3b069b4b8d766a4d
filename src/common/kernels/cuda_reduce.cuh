// cuda_reduce.cuh: warp- and block-wide reductions shared by the CUDA kernels (device code only;
// included by .cu files, never by C).
//
// block_*: blockDim.x a multiple of 32, at most 1024; every thread gets the result. `red` is a
// __shared__ float[32]; the leading barrier lets one `red` serve back-to-back calls.
#pragma once
#include <math.h>

#define FULL_MASK 0xffffffffu

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

static __device__ __forceinline__ float block_sum(float v, float *red) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    return warp_sum(lane < nw ? red[lane] : 0.0f);
}

static __device__ __forceinline__ float block_max(float v, float *red) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    return warp_max(lane < nw ? red[lane] : -INFINITY);
}
