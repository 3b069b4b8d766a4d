// check_cuda.h: fatal-error checks for CUDA, cuBLAS and NCCL return codes (CUDA sources only).
//
//   cuda_check(cudaMalloc(&p, n));      any error but cudaSuccess ends the job
//   cuda_check_launch();                after a kernel launch: catches bad launch configurations
//   cublas_check(cublasGemmEx(...));
//   nccl_check(ncclAllReduce(...));
//
// Each prints one line through dflash_fatal (check.h) — the rank when several run, the failed call,
// the library's own text, a hint when the error has a usual cause, and file:line — and then aborts
// the whole MPI job, so no peer hangs waiting for this rank.
#pragma once
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

// check.h and log.h are C headers: give them C linkage here, and C11's _Noreturn (not a C++
// keyword) its C++ spelling while they are read.
#ifdef __cplusplus
#define _Noreturn [[noreturn]]
extern "C" {
#endif
#include "common/core/check.h"
#include "common/core/log.h"
#ifdef __cplusplus
}
#undef _Noreturn
#endif

// ---------------------------------------------------------------- CUDA runtime

static inline const char *cuda_hint(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation:
        return "the GPU is out of memory: lower the memory budget, or look for other processes on "
               "this GPU with nvidia-smi";
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
        return "check the driver with nvidia-smi and the GPUs listed in CUDA_VISIBLE_DEVICES";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
        return "this binary has no code for this GPU: add its compute capability to "
               "CMAKE_CUDA_ARCHITECTURES and rebuild";
    case cudaErrorIllegalAddress:
    case cudaErrorMisalignedAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
        return "a kernel faulted (possibly an earlier one): rerun with CUDA_LAUNCH_BLOCKING=1 or "
               "under compute-sanitizer to find it";
    case cudaErrorECCUncorrectable:
        return "an uncorrectable ECC error: the GPU needs attention (nvidia-smi -q -d ECC)";
    default:
        return NULL;
    }
}

static inline void dflash_cuda_check(cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return;
    dflash_fatal(file, line, cuda_hint(e), "%s failed: %s (%s)", call, cudaGetErrorString(e),
                 cudaGetErrorName(e));
}

#define cuda_check(call) dflash_cuda_check((call), #call, __FILE__, __LINE__)
#define cuda_check_launch() dflash_cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

// ---------------------------------------------------------------- cuBLAS

static inline const char *cublas_hint(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "cuBLAS could not start: usually the GPU is out of memory or the driver is broken";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "the GPU is out of memory";
    case CUBLAS_STATUS_INVALID_VALUE:
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "an unsupported size, stride or dtype combination was passed";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "this GPU lacks a feature the call needs (e.g. bf16 tensor cores before sm_80)";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "a GPU kernel failed (possibly an earlier one): rerun with CUDA_LAUNCH_BLOCKING=1";
    default:
        return NULL;
    }
}

static inline void dflash_cublas_check(cublasStatus_t s, const char *call, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return;
    dflash_fatal(file, line, cublas_hint(s), "%s failed: %s (%s)", call, cublasGetStatusString(s),
                 cublasGetStatusName(s));
}

#define cublas_check(call) dflash_cublas_check((call), #call, __FILE__, __LINE__)

// cublas_span_needs_64: a column-major operand of rows x cols with leading dimension ld spans
// ld (cols - 1) + rows elements; at 2^31 or more the call goes through cuBLAS's 64-bit interface
// (cublasGemmEx_64 and friends, cuBLAS 12+): the 32-bit one takes int sizes, and whether each of its
// algorithms addresses such spans is undocumented. The fused loss's logits reach it at about 8,650
// rows of V 248,320 (its bf16 dlogits, leading dimension 2V, at about 4,330). The emulator stops a
// 32-bit call with such an operand (tests/emu/emu_cublas.cpp).
static inline int cublas_span_needs_64(int64_t rows, int64_t cols, int64_t ld) {
    return rows > 0 && cols > 0 && ld * (cols - 1) + rows >= ((int64_t)1 << 31);
}

// cublas_gemm_needs_64: any operand of op(A)[m, k] op(B)[k, n] = C[m, n] (column-major) does
static inline int cublas_gemm_needs_64(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                                       int64_t lda, int64_t ldb, int64_t ldc) {
    if (m <= 0 || n <= 0) return 0;
    return cublas_span_needs_64(ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda) ||
           cublas_span_needs_64(tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb) ||
           cublas_span_needs_64(m, n, ldc);
}

// ---------------------------------------------------------------- NCCL

static inline const char *nccl_hint(ncclResult_t r) {
    switch (r) {
    case ncclSystemError:
    case ncclRemoteError:
        return "a peer rank may have died or the network failed; rerun with NCCL_DEBUG=WARN";
    case ncclUnhandledCudaError:
        return "a CUDA call inside NCCL failed; rerun with NCCL_DEBUG=WARN";
    case ncclInvalidArgument:
    case ncclInvalidUsage:
        return "the ranks disagree on the collective (count, dtype, order); NCCL_DEBUG=WARN says more";
    default:
        return NULL;
    }
}

static inline void dflash_nccl_check(ncclResult_t r, const char *call, const char *file, int line) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    // ncclGetLastError: NCCL's detailed message for the last failure on this thread (may be "").
    const char *detail = ncclGetLastError(NULL);
    dflash_fatal(file, line, nccl_hint(r), "%s failed: %s%s%s", call, ncclGetErrorString(r),
                 detail && *detail ? ": " : "", detail ? detail : "");
}

#define nccl_check(call) dflash_nccl_check((call), #call, __FILE__, __LINE__)
