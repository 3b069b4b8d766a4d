// backend.h: where the numbers are computed — the CPU (reference, fp32, OpenBLAS + OpenMP) or a
// CUDA GPU. Code above this layer calls backend_* and never includes a CUDA header.
//
// Every op has a CPU twin (backend_cpu.c) beside its CUDA version (backend_cuda.cu); the CPU one is
// the reference the tests check, and tests/gpu/ compares the two on a GPU. Later issues add the
// model ops (norms, RoPE, attention, loss) here in the same pattern.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" { // the CUDA files include it (core/tensor.h too)
#endif

#include "common/backend/backend_type.h"
#include "common/core/tensor.h"

// backend_compiled_cuda: 1 when this binary has the CUDA backend.
int backend_compiled_cuda(void);
// backend_cuda_devices: number of visible CUDA devices (0 when not compiled or no driver/GPU).
int backend_cuda_devices(void);

// backend_open: want = "auto" | "cpu" | "cuda". "auto" picks CUDA when compiled and a GPU is
// visible, otherwise the CPU with one log line saying why. "cuda" without a usable GPU is an
// error (-1, error_set). The GPU is local_rank modulo the visible devices.
int backend_open(backend *be, const char *want, int local_rank);
void backend_close(backend *be);

// Memory on the backend's device (host memory for the CPU backend, 256-byte aligned).
// backend_alloc returns NULL (with error_set) when the device is out of memory.
void *backend_alloc(backend *be, size_t bytes);
void backend_free(backend *be, void *p);
void backend_copy_to_device(backend *be, void *dst, const void *src_host, size_t bytes);
void backend_copy_to_host(backend *be, void *dst_host, const void *src, size_t bytes);
void backend_memset_zero(backend *be, void *p, size_t bytes);
void backend_sync(backend *be);
// backend_mem_info: free and total bytes of the device (host RAM for the CPU backend).
void backend_mem_info(backend *be, size_t *free_bytes, size_t *total_bytes);

// backend_gemm: row-major C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C, op = transpose when
// the flag is set (A stored [k,m], B stored [n,k]). lda/ldb/ldc are row strides in elements.
// Accumulation is fp32. CPU: A, B, C all F32. CUDA: A, B, C all F32 (true fp32, no TF32), or A and B
// BF16 with C BF16 or F32 (cuBLAS has no fp32-input, bf16-output GEMM). beta = 0: C is not read.
// A dtype combination the backend does not support is fatal (a programming error).
// The usual linear layer y[t,o] = x[t,i] W[o,i]^T is backend_gemm(be, 0, 1, T, O, I, ...).
void backend_gemm(backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                  const void *a, int lda, const void *b, int ldb, float beta, void *c, int ldc,
                  dtype ab_dt, dtype c_dt);

// ---------------------------------------------------------------- pinned host memory and async copies
// backend_host_alloc_pinned: page-locked host memory on CUDA (cudaHostAlloc: copies to and from it
// are DMA and truly asynchronous), 256-byte aligned host memory on the CPU; NULL (error_set) when
// it cannot be had. Host memory, never counted against the device. backend_host_free_pinned: NULL
// is a no-op.
void *backend_host_alloc_pinned(backend *be, size_t bytes);
void backend_host_free_pinned(backend *be, void *p);
// backend_copy_to_host_async: device src to pinned dst_host on the backend's copy stream to the host,
// after the work queued so far on its stream (src is final there); the host does not wait.
// backend_copy_to_device_async: pinned src_host to device dst on the copy stream to the device, after
// the copies queued on it before (not after the backend's stream: dst must be one its queued work no
// longer uses). Either host buffer stays untouched until an event recorded after the copy has
// completed. The CPU backend copies at once (memcpy).
void backend_copy_to_host_async(backend *be, void *dst_host, const void *src, size_t bytes);
void backend_copy_to_device_async(backend *be, void *dst, const void *src_host, size_t bytes);
// Events: backend_event_record marks the last async copy queued, and those queued before it in its
// direction; backend_event_query is 1 once they have finished, else 0 (the host does not wait);
// backend_event_sync waits on the host; backend_event_wait makes the backend's stream wait (the
// host does not). On the CPU every event has completed.
typedef struct backend_event backend_event;
backend_event *backend_event_create(backend *be);
void backend_event_destroy(backend *be, backend_event *ev);
void backend_event_record(backend *be, backend_event *ev);
int backend_event_query(backend *be, backend_event *ev);
void backend_event_sync(backend *be, backend_event *ev);
void backend_event_wait(backend *be, backend_event *ev);

#ifdef __cplusplus
}
#endif
