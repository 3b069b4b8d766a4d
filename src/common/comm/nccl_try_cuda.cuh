// nccl_try_cuda.cuh: for the NCCL paths' .cu files (nccl_link_cuda.cu, nccl_reduce_cuda.cu): a
// failed NCCL or CUDA call returns -1 with one error line (error_set): the call, then NCCL's (or
// CUDA's) reason; the caller decides whether that ends the job (check_cuda.h's checks end it).
//
//   NCCL_TRY(ncclCommInitRank(&c, n, id, rank));
//   CUDA_TRY(cudaSetDevice(device));
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

extern "C" {
#include "common/core/error.h"
}

static inline int nccl_try_fail(const char *call, ncclResult_t r) {
    const char *last = ncclGetLastError(NULL);
    return error_set("%s: %s%s%s", call, ncclGetErrorString(r), last && last[0] ? ": " : "", last ? last : "");
}

static inline int cuda_try_fail(const char *call, cudaError_t e) {
    (void)cudaGetLastError(); // clear it, so the next launch check does not see it
    return error_set("%s: %s", call, cudaGetErrorString(e));
}

#define NCCL_TRY(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) return nccl_try_fail(#call, r_); } while (0)
#define CUDA_TRY(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return cuda_try_fail(#call, e_); } while (0)
