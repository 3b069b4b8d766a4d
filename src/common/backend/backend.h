// backend.h: where the numbers are computed — the CPU (reference, fp32, OpenBLAS + OpenMP) or a
// CUDA GPU. Code above this layer calls backend_* and never includes a CUDA header, nor asks which
// backend it has: it asks be->caps (backend_type.h), and the op families call their tables
// (backend_ops.h).
//
// Every call has a CPU twin (backend_cpu.c) beside its CUDA version (backend_cuda.cu); the CPU one
// is the reference the tests check, and tests/gpu/ compares the two on a GPU.
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
// backend_describe: a backend of kind "cpu" or "cuda" with `threads` host threads, its capabilities
// (be->caps) filled and nothing opened: what --plan plans for a machine it does not run on. Only
// the caps, kind, name and the op families' sizing questions (ops_*_work_bytes) may be asked; no
// memory, copy or op call may be made on it. -1 (error_set) for another kind.
int backend_describe(backend *be, const char *kind, int threads);

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

// pinned host memory and async copies
//
// What the payloads use (teacher_loop.c's send ring, batch_source.c's receive buffers) and the MPI
// gradient all-reduce on a GPU (students.c's ring of pinned chunks): host buffers
// the device copies to and from by DMA, copies the host does not wait for, and events that order
// them. On the CPU backend they are plain: malloc'd memory, memcpy at the call, events that are
// always complete; so a CPU job runs the same code with the same bytes.
//
// backend_host_alloc: host memory for transfers (page-locked by cudaHostAlloc on CUDA; 256-byte
// aligned malloc on the CPU); NULL with error_set when it cannot be had. When the system refuses to
// pin (its locked-memory limit, `ulimit -l`), the buffer is pageable instead, silently: the caller
// sums what it did not get pinned (backend_host_pinned) and says it once (backend_host_warn).
// backend_host_try_pin: pinned or NULL (no pageable fallback, no error): for a caller that asks for
// less when refused. backend_host_free: either's buffer; NULL is a no-op.
void *backend_host_alloc(backend *be, size_t bytes);
void *backend_host_try_pin(backend *be, size_t bytes);
void backend_host_free(backend *be, void *p);
// backend_host_pinned: 1 when p (from backend_host_alloc) is page-locked; 0 when pageable, and always
// on the CPU backend (plain memory: nothing to pin).
int backend_host_pinned(backend *be, const void *p);
// BACKEND_HOST_HDR: the bytes a CUDA transfer buffer takes before the caller's block (which kind of
// memory it is). backend_host_bytes: the page-locked memory backend_host_alloc(be, bytes) asks the
// system for: bytes + BACKEND_HOST_HDR on CUDA, 0 on the CPU (be need only have its kind set: --plan
// plans with a backend it does not open).
#define BACKEND_HOST_HDR 256
size_t backend_host_bytes(const backend *be, size_t bytes);
// backend_host_warn: `pageable` of `wanted` bytes of `what` were not pinned: one warning per process
// (the first call) naming them and the remedies (`ulimit -l`, fewer buffers); later calls log one
// info line. `after` says what the job does instead (e.g. "pageable instead, their copies are
// synchronous").
void backend_host_warn(const char *what, size_t pageable, size_t wanted, const char *after);
// stream: BACKEND_STREAM_MAIN, BACKEND_STREAM_COPY or BACKEND_STREAM_TO_DEVICE (backend_type.h).
// backend_copy_async: bytes from src to dst (host or device memory; the direction comes from the
// pointers) on `stream`, returning at once on CUDA. The host side should be backend_host_alloc'd
// (else the copy is staged and synchronous on a GPU) and must stay untouched until an event
// recorded after the copy has completed.
void backend_copy_async(backend *be, int stream, void *dst, const void *src, size_t bytes);
// backend_event_new / _free: an event (never NULL). backend_event_record: ev completes once the
// work queued so far on `stream` is done. backend_event_done: 1 when it has (or was never recorded),
// else 0. backend_event_sync: the host waits for it. backend_stream_wait: the backend's stream runs
// its later work only after ev (the host does not wait).
void *backend_event_new(backend *be);
void backend_event_free(backend *be, void *ev);
void backend_event_record(backend *be, void *ev, int stream);
int backend_event_done(backend *be, void *ev);
void backend_event_sync(backend *be, void *ev);
void backend_stream_wait(backend *be, void *ev);

#ifdef __cplusplus
}
#endif
