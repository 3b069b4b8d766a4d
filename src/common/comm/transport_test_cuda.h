// transport_test_cuda.h: the transport test's payloads and all-reduce buffers filled and checked on
// the GPU (plain C; transport_test_cuda.cu in CUDA builds), so the NCCL paths are checked device to
// device. Builds without CUDA open no device transport and never call these (transport_test_nocuda.c
// ends the job if one does).
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// tt_fill_cuda: dev[i] = tt_value(t, it, i) for i < n; returns when done.
void tt_fill_cuda(uint32_t *dev, uint64_t n, int t, int it);
// tt_check_cuda: how many dev[i] differ from tt_value(t, it, i).
long long tt_check_cuda(const uint32_t *dev, uint64_t n, int t, int it);

// tt_sum_fill_cuda: dev[i] = tt_sum_value(r, it, i) for i < n; returns when done.
void tt_sum_fill_cuda(float *dev, uint64_t n, int r, int it);
// tt_sum_check_cuda: how many dev[i] differ from tt_sum_expected(nranks, it, i).
long long tt_sum_check_cuda(const float *dev, uint64_t n, int nranks, int it);

#ifdef __cplusplus
}
#endif
