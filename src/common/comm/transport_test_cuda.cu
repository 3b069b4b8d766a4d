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

static int tt_blocks(uint64_t n) {
    uint64_t b = (n + 255) / 256;
    return (int)(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

extern "C" void tt_fill_cuda(uint32_t *dev, uint64_t n, int t, int it) {
    tt_fill_kernel<<<tt_blocks(n), 256>>>(dev, n, t, it);
    cuda_check_launch();
    cuda_check(cudaDeviceSynchronize());
}

extern "C" long long tt_check_cuda(const uint32_t *dev, uint64_t n, int t, int it) {
    unsigned long long *d_wrong, wrong = 0;
    cuda_check(cudaMalloc(&d_wrong, sizeof *d_wrong));
    cuda_check(cudaMemset(d_wrong, 0, sizeof *d_wrong));
    tt_check_kernel<<<tt_blocks(n), 256>>>(dev, n, t, it, d_wrong);
    cuda_check_launch();
    cuda_check(cudaMemcpy(&wrong, d_wrong, sizeof wrong, cudaMemcpyDeviceToHost));
    cuda_check(cudaFree(d_wrong));
    return (long long)wrong;
}
