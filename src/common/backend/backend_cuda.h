// backend_cuda.h: the CUDA backend's functions (backend_cuda.cu, CUDA builds; its table
// backend_cuda_ops is what backend.c calls) and the two that backend.c opens it with, which a build
// without CUDA takes from backend_nocuda.c. A plain C header: C linkage.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/backend/backend.h" // BACKEND_HOST_HDR
#include "common/backend/backend_type.h"

// The cuBLAS workspace each CUDA backend allocates at open (NVIDIA's recommended size for Hopper
// and Blackwell). Given to cuBLAS explicitly so that it is a known, fixed part of the device
// memory the planner accounts for, not a hidden allocation on the first GEMM.
#define CUDA_CUBLAS_WORKSPACE_BYTES ((size_t)32 << 20)

// cuda_device_count: visible devices; 0 when there is no driver or no GPU (a missing driver is an
// error from cudaGetDeviceCount, not a crash). *why, when not NULL, gets the reason for 0.
// cuda_device_count, cuda_open: backend_cuda.cu's, or backend_nocuda.c's in builds without CUDA
// (no device, "built without CUDA").
int cuda_device_count(const char **why);
// cuda_ops: &backend_cuda_ops, or NULL in a build without CUDA.
const struct backend_ops *cuda_ops(void);
// cuda_open: device local_rank % count, a stream and a cuBLAS handle; -1 (error_set) if unusable.
int cuda_open(backend *be, int local_rank);
void cuda_close(backend *be);
void *cuda_alloc(backend *be, size_t bytes);
void cuda_free(backend *be, void *p);
void cuda_copy_to_device(backend *be, void *dst, const void *src_host, size_t bytes);
void cuda_copy_to_host(backend *be, void *dst_host, const void *src, size_t bytes);
void cuda_memset_zero(backend *be, void *p, size_t bytes);
void cuda_sync(backend *be);
void cuda_mem_info(backend *be, size_t *free_bytes, size_t *total_bytes);
void cuda_gemm(backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha, const void *a,
               int lda, const void *b, int ldb, float beta, void *c, int ldc, dtype ab_dt, dtype c_dt);
// cuda_stream: the backend's stream (a cudaStream_t), for the op families' kernels (src/common/kernels/*_cuda.cu, ...).
void *cuda_stream(backend *be);
// cuda_cublas: the backend's cuBLAS handle (a cublasHandle_t: on the backend's stream, with its
// workspace), for the ops that call cuBLAS themselves (ops_moe_cuda.cu's grouped GEMM, deltanet_cuda.cu's strided-batched GEMMs).
void *cuda_cublas(backend *be);
// cuda_op_state: an op module's own per-backend state (pinned buffers, events, small device arrays)
// in slot `slot`: NULL until cuda_op_state_set stores it; cuda_close frees a stored state with the
// function given there (first, while the stream and the handle still exist).
enum { CUDA_OP_STATE_MOE, CUDA_OP_STATES };
void *cuda_op_state(backend *be, int slot);
void cuda_op_state_set(backend *be, int slot, void *state, void (*free_state)(backend *be, void *state));

// pinned host memory and async copies (backend.h's block of the same name): cudaHostAlloc'd
// buffers, cudaMemcpyAsync on the backend's stream or its copy stream (stream: BACKEND_STREAM_MAIN
// BACKEND_STREAM_COPY or BACKEND_STREAM_TO_DEVICE), events (cudaEvent_t, timing off).
void *cuda_host_alloc(backend *be, size_t bytes, int fallback); // fallback 0: NULL when refused
int cuda_host_pinned(backend *be, const void *p); // 0 for NULL
void cuda_host_free(backend *be, void *p);
void cuda_copy_async(backend *be, int stream, void *dst, const void *src, size_t bytes);
void *cuda_event_new(backend *be);
void cuda_event_free(backend *be, void *ev);
void cuda_event_record(backend *be, void *ev, int stream);
int cuda_event_done(backend *be, void *ev);
void cuda_event_sync(backend *be, void *ev);
void cuda_stream_wait(backend *be, void *ev);

#ifdef __cplusplus
}
#endif
