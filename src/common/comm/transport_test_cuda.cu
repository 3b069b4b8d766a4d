// transport_test_cuda.cu: transport_test_cuda.h (C linkage).
#include <cuda_runtime.h>

#include "common/backend/check_cuda.h"
#include "common/comm/transport_test.h"
#include "common/comm/transport_test_cuda.h"

// What the kernels fill or expect, as 32-bit words: a payload of teacher a, an all-reduce input of
// rank a, or the sum over a ranks (compared as bits: these sums of small integers are exact, and
// x + -x is +0 in any order).
enum { TT_PAYLOAD = 0, TT_SUM_IN = 1, TT_SUM_OUT = 2 };
__device__ uint32_t tt_word(int kind, int a, int it, uint64_t i) {
    if (kind == TT_PAYLOAD) return tt_value(a, it, i);
    return __float_as_uint(kind == TT_SUM_IN ? tt_sum_value(a, it, i) : tt_sum_expected(a, it, i));
}

__global__ void tt_fill_kernel(uint32_t *dev, uint64_t n, int kind, int a, int it) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
        dev[i] = tt_word(kind, a, it, i);
}

__global__ void tt_check_kernel(const uint32_t *dev, uint64_t n, int kind, int a, int it, unsigned long long *wrong) {
    unsigned long long mine = 0;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
        mine += dev[i] != tt_word(kind, a, it, i);
    if (mine) atomicAdd(wrong, mine);
}

static int tt_blocks(uint64_t n) {
    uint64_t b = (n + 255) / 256;
    return (int)(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

static void tt_fill(uint32_t *dev, uint64_t n, int kind, int a, int it) {
    tt_fill_kernel<<<tt_blocks(n), 256>>>(dev, n, kind, a, it);
    cuda_check_launch();
    cuda_check(cudaDeviceSynchronize());
}

static long long tt_check(const uint32_t *dev, uint64_t n, int kind, int a, int it) {
    unsigned long long *d_wrong, wrong = 0;
    cuda_check(cudaMalloc(&d_wrong, sizeof *d_wrong));
    cuda_check(cudaMemset(d_wrong, 0, sizeof *d_wrong));
    tt_check_kernel<<<tt_blocks(n), 256>>>(dev, n, kind, a, it, d_wrong);
    cuda_check_launch();
    cuda_check(cudaMemcpy(&wrong, d_wrong, sizeof wrong, cudaMemcpyDeviceToHost));
    cuda_check(cudaFree(d_wrong));
    return (long long)wrong;
}

extern "C" void tt_fill_cuda(uint32_t *dev, uint64_t n, int t, int it) { tt_fill(dev, n, TT_PAYLOAD, t, it); }
extern "C" long long tt_check_cuda(const uint32_t *dev, uint64_t n, int t, int it) { return tt_check(dev, n, TT_PAYLOAD, t, it); }
extern "C" void tt_sum_fill_cuda(float *dev, uint64_t n, int r, int it) { tt_fill((uint32_t *)dev, n, TT_SUM_IN, r, it); }
extern "C" long long tt_sum_check_cuda(const float *dev, uint64_t n, int nranks, int it) {
    return tt_check((const uint32_t *)dev, n, TT_SUM_OUT, nranks, it);
}
