// transport_test_nocuda.c: transport_test_cuda.h in a build without CUDA (CMake compiles this file
// instead of transport_test_cuda.cu). No device transport opens there (no GPU, no NCCL), so the
// transport test never fills or checks GPU memory: a call ends the job, naming it.
#include "common/comm/transport_test_cuda.h"

#include "common/core/check.h"

void tt_fill_cuda(uint32_t *dev, uint64_t n, int t, int it) { fatal("transport-test: a GPU payload in a build without CUDA"); }

long long tt_check_cuda(const uint32_t *dev, uint64_t n, int t, int it) {
    fatal("transport-test: a GPU payload in a build without CUDA");
}

void tt_sum_fill_cuda(float *dev, uint64_t n, int r, int it) {
    fatal("transport-test: a GPU all-reduce in a build without CUDA");
}

long long tt_sum_check_cuda(const float *dev, uint64_t n, int nranks, int it) {
    fatal("transport-test: a GPU all-reduce in a build without CUDA");
}
