// transport_test_cuda.cu: transport_test_cuda.h (C linkage).
#include <cuda_runtime.h>

#include "common/backend/check_cuda.h"
#include "common/comm/transport_test.h"
#include "common/comm/transport_test_cuda.h"

__global__ void tt_fill_kernel(uint32_t *dev, uint64_t n, int t, int it) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
        dev[i] = tt_value(t, it, i);
}

__global__ void tt_check_kernel(const uint32_t *dev, uint64_t n, int t, int it, unsigned long long *wrong) {
    unsigned long long mine = 0;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
        mine += dev[i] != tt_value(t, it, i);
    if (mine) atomicAdd(wrong, mine);
}

__global__ void tt_sum_fill_kernel(float *dev, uint64_t n, int r, int it) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
        dev[i] = tt_sum_value(r, it, i);
}

__global__ void tt_sum_check_kernel(const float *dev, uint64_t n, int nranks, int it, unsigned long long *wrong) {
    unsigned long long mine = 0;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
        mine += dev[i] != tt_sum_expected(nranks, it, i);
    if (mine) atomicAdd(wrong, mine);
}

static int tt_blocks(uint64_t n) {
    uint64_t b = (n + 255) / 256;
    return (int)(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

extern "C" void tt_fill_cuda(uint32_t *dev, uint64_t n, int t, int it) {
    tt_fill_kernel<<<tt_blocks(n), 256>>>(dev, n, t, it);
    cuda_check_launch();
    cuda_check(cudaDeviceSynchronize());
}

// A zeroed device counter for a check kernel, and its value once the kernel is done (freed).
static unsigned long long *tt_counter(void) {
    unsigned long long *d_wrong;
    cuda_check(cudaMalloc(&d_wrong, sizeof *d_wrong));
    cuda_check(cudaMemset(d_wrong, 0, sizeof *d_wrong));
    return d_wrong;
}
static long long tt_counted(unsigned long long *d_wrong) {
    cuda_check_launch();
    unsigned long long wrong = 0;
    cuda_check(cudaMemcpy(&wrong, d_wrong, sizeof wrong, cudaMemcpyDeviceToHost));
    cuda_check(cudaFree(d_wrong));
    return (long long)wrong;
}

extern "C" long long tt_check_cuda(const uint32_t *dev, uint64_t n, int t, int it) {
    unsigned long long *d_wrong = tt_counter();
    tt_check_kernel<<<tt_blocks(n), 256>>>(dev, n, t, it, d_wrong);
    return tt_counted(d_wrong);
}

extern "C" void tt_sum_fill_cuda(float *dev, uint64_t n, int r, int it) {
    tt_sum_fill_kernel<<<tt_blocks(n), 256>>>(dev, n, r, it);
    cuda_check_launch();
    cuda_check(cudaDeviceSynchronize());
}

extern "C" long long tt_sum_check_cuda(const float *dev, uint64_t n, int nranks, int it) {
    unsigned long long *d_wrong = tt_counter();
    tt_sum_check_kernel<<<tt_blocks(n), 256>>>(dev, n, nranks, it, d_wrong);
    return tt_counted(d_wrong);
}
