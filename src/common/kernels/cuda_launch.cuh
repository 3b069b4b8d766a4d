// cuda_launch.cuh: what the op kernels' launches share (the *_cuda.cu files of this folder and of
// the other kernel folders; included by .cu files, never by C): the backend's stream, the grid of a
// grid-stride loop, the loop itself and the bf16 read.
#pragma once
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "common/backend/backend_cuda.h"

static inline cudaStream_t stream_of(backend *be) { return (cudaStream_t)cuda_stream(be); }

// Blocks for a grid-stride loop over `units` (rows, elements, blocks of threads): one unit per
// block up to a cap; beyond it each block takes several. Never 0 (callers return early on empty
// work, but a grid of 0 would be a launch error).
static inline unsigned grid_for(int64_t units) {
    const int64_t cap = (int64_t)1 << 20;
    if (units < 1) return 1;
    return (unsigned)(units < cap ? units : cap);
}

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks of `threads` for a grid-stride loop over n elements.
static inline unsigned grid_for_threads(int64_t n, int threads) { return grid_for(ceil_div(n, threads)); }

// for (i over [0, n)) spread over every thread of the grid, int64 so that n may pass 2^31
#define GRID_STRIDE(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

static __device__ __forceinline__ float bf(__nv_bfloat16 x) { return __bfloat162float(x); }
