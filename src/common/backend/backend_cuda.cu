// backend_cuda.cu: the CUDA backend — one device per rank, one stream, one cuBLAS handle (and a
// copy stream beside the stream for backend_copy_async).
//
// Written C-style (this file is C++ only because nvcc compiles .cu as C++); everything it exports
// has C linkage through backend_cuda.h. All work is ordered on the backend's stream; the copies
// to and from host memory synchronise it, because the host buffer may be reused on return (the
// asynchronous copies of the pinned block are the exception: their events say when).
//
// The CUDA runtime's "current device" is per host thread: a thread other than the one that called
// backend_open must cudaSetDevice(be->device_id) before touching this backend's memory. The
// allocation and memory-info entry points do it themselves.
#include <stdint.h>
#include <stdlib.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/backend_ops.h"
#include "common/backend/check_cuda.h"

extern "C" {
#include "common/core/bytes.h"
#include "common/core/error.h"
#include "common/core/log.h"
}

typedef struct {
    cudaStream_t stream;
    cublasHandle_t cublas;
    void *cublas_workspace;
    cudaStream_t copy_stream;       // the async copies beside the stream (cuda_copy_async)
    cudaStream_t to_device;         // the async copies to the device that wait for nothing but each other
    cudaEvent_t posted;             // the stream's work when a copy was posted to copy_stream
    void *op_state[CUDA_OP_STATES]; // the op modules' own state (cuda_op_state)
    void (*op_state_free[CUDA_OP_STATES])(backend *be, void *state);
} cuda_state;

static cuda_state *cuda_state_of(backend *be) { return (cuda_state *)be->impl; }

extern "C" void *cuda_stream(backend *be) { return cuda_state_of(be)->stream; }
extern "C" void *cuda_cublas(backend *be) { return cuda_state_of(be)->cublas; }

extern "C" void *cuda_op_state(backend *be, int slot) { return cuda_state_of(be)->op_state[slot]; }
extern "C" void cuda_op_state_set(backend *be, int slot, void *state, void (*free_state)(backend *be, void *state)) {
    cuda_state *st = cuda_state_of(be);
    st->op_state[slot] = state;
    st->op_state_free[slot] = free_state;
}

extern "C" int cuda_device_count(const char **why) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        // e.g. cudaErrorInsufficientDriver when no driver is installed, cudaErrorNoDevice when
        // CUDA_VISIBLE_DEVICES hides every GPU. Clear it so no later check trips over it.
        (void)cudaGetLastError();
        if (why) {
            if (e == cudaErrorInsufficientDriver)
                *why = "no NVIDIA driver is loaded, or it is too old for this CUDA runtime";
            else if (e == cudaErrorNoDevice)
                *why = "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)";
            else
                *why = cudaGetErrorString(e);
        }
        return 0;
    }
    if (n == 0 && why) *why = "no CUDA device found";
    return n;
}

extern "C" const backend_ops backend_cuda_ops;

extern "C" int backend_compiled_cuda(void) { return 1; }

extern "C" const struct backend_ops *cuda_ops(void) { return &backend_cuda_ops; }

extern "C" int cuda_open(backend *be, int local_rank) {
    const char *why = NULL;
    int count = cuda_device_count(&why);
    if (count == 0) return error_set("no usable CUDA device (%s)", why);
    int dev = (local_rank < 0 ? 0 : local_rank) % count;
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaFree(0); // creates the context now: a busy GPU fails here
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return error_set("cannot use CUDA device %d of %d: %s", dev, count, cudaGetErrorString(e));
    }
    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, dev));

    cuda_state *st = (cuda_state *)xcalloc(1, sizeof *st);
    cuda_check(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    cuda_check(cudaStreamCreateWithFlags(&st->copy_stream, cudaStreamNonBlocking));
    cuda_check(cudaStreamCreateWithFlags(&st->to_device, cudaStreamNonBlocking));
    cuda_check(cudaEventCreateWithFlags(&st->posted, cudaEventDisableTiming));
    cublas_check(cublasCreate(&st->cublas));
    cublas_check(cublasSetStream(st->cublas, st->stream));
    // Default math mode: CUBLAS_COMPUTE_32F GEMMs stay true fp32 (no TF32) unless asked for.
    cuda_check(cudaMalloc(&st->cublas_workspace, CUDA_CUBLAS_WORKSPACE_BYTES));
    cublas_check(cublasSetWorkspace(st->cublas, st->cublas_workspace, CUDA_CUBLAS_WORKSPACE_BYTES));

    memset(be, 0, sizeof *be);
    be->kind = BACKEND_CUDA;
    be->device = DEVICE_CUDA;
    be->device_id = dev;
    be->threads = 1; // backend.c sets the host thread count
    be->impl = st;
    snprintf(be->name, sizeof be->name, "cuda:%d %.80s (%.1f GiB)", dev, prop.name,
             (double)prop.totalGlobalMem / (double)(1ull << 30));
    be->ops = &backend_cuda_ops; // backend_open adds the caps every CUDA device has
    be->caps.sm_major = prop.major;
    be->caps.sm_minor = prop.minor;
    be->caps.smem_per_block = prop.sharedMemPerBlockOptin;
    be->caps.mem_total = prop.totalGlobalMem;
    return 0;
}

extern "C" void cuda_close(backend *be) {
    cuda_state *st = cuda_state_of(be);
    if (!st) return;
    cuda_check(cudaSetDevice(be->device_id));
    cuda_check(cudaStreamSynchronize(st->stream));
    cuda_check(cudaStreamSynchronize(st->copy_stream));
    for (int i = 0; i < CUDA_OP_STATES; i++)
        if (st->op_state[i] && st->op_state_free[i]) st->op_state_free[i](be, st->op_state[i]);
    cuda_check(cudaStreamSynchronize(st->to_device));
    cublas_check(cublasDestroy(st->cublas));
    cuda_check(cudaFree(st->cublas_workspace));
    cuda_check(cudaEventDestroy(st->posted));
    cuda_check(cudaStreamDestroy(st->copy_stream));
    cuda_check(cudaStreamDestroy(st->to_device));
    cuda_check(cudaStreamDestroy(st->stream));
    free(st);
    be->impl = NULL;
}

extern "C" void *cuda_alloc(backend *be, size_t bytes) {
    cuda_check(cudaSetDevice(be->device_id));
    void *p = NULL;
    // cudaMalloc returns 256-byte aligned memory (the backend.h promise) and refuses 0 bytes.
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); // out of memory is not sticky: the context stays usable
        size_t free_b = 0, total_b = 0;
        (void)cudaMemGetInfo(&free_b, &total_b);
        char want[32], fr[32];
        error_set("out of GPU memory on %s: %s requested, %s free", be->name,
                  bytes_format(bytes, want, sizeof want), bytes_format(free_b, fr, sizeof fr));
        return NULL;
    }
    cuda_check(e);
    return p;
}

extern "C" void cuda_free(backend *be, void *p) {
    if (!p) return;
    cuda_check(cudaSetDevice(be->device_id));
    cuda_check(cudaFree(p));
}

// cudaMemcpyDefault: the direction comes from the pointers (unified addressing), so pinned and
// pageable host buffers both work.
extern "C" void cuda_copy_to_device(backend *be, void *dst, const void *src_host, size_t bytes) {
    if (!bytes) return;
    cuda_state *st = cuda_state_of(be);
    cuda_check(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyDefault, st->stream));
    cuda_check(cudaStreamSynchronize(st->stream));
}

extern "C" void cuda_copy_to_host(backend *be, void *dst_host, const void *src, size_t bytes) {
    if (!bytes) return;
    cuda_state *st = cuda_state_of(be);
    cuda_check(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDefault, st->stream));
    cuda_check(cudaStreamSynchronize(st->stream));
}

extern "C" void cuda_memset_zero(backend *be, void *p, size_t bytes) {
    if (!bytes) return;
    cuda_check(cudaMemsetAsync(p, 0, bytes, cuda_state_of(be)->stream));
}

extern "C" void cuda_sync(backend *be) { cuda_check(cudaStreamSynchronize(cuda_state_of(be)->stream)); }

extern "C" void cuda_mem_info(backend *be, size_t *free_bytes, size_t *total_bytes) {
    size_t f = 0, t = 0;
    cuda_check(cudaSetDevice(be->device_id));
    cuda_check(cudaMemGetInfo(&f, &t));
    if (free_bytes) *free_bytes = f;
    if (total_bytes) *total_bytes = t;
}

// ---------------------------------------------------------------------------- pinned host memory and async copies

// Transfer buffers are page-locked when the system grants it. When it refuses (pinned memory is
// limited by the OS and the container: `ulimit -l`), the buffer is pageable instead (fallback 1),
// silently: the caller sums what it did not get and warns once (backend_host_warn); its copies are
// then staged by the driver (the host waits). fallback 0: NULL instead. A header of
// BACKEND_HOST_HDR bytes before the block records which, for cuda_host_free and cuda_host_pinned;
// backend_host_bytes counts it (the plan's pinned host memory is what cudaHostAlloc is asked for).
#define HOST_HDR BACKEND_HOST_HDR
enum { HOST_PINNED = 0x50494e44, HOST_PAGEABLE = 0x50414745 };

extern "C" void *cuda_host_alloc(backend *be, size_t bytes, int fallback) {
    cuda_check(cudaSetDevice(be->device_id));
    char want[32];
    if (bytes > SIZE_MAX - 2 * HOST_HDR) {
        error_set("%s: %zu bytes of transfer buffers is past what a size holds", be->name, bytes);
        return NULL;
    }
    size_t total = bytes + HOST_HDR;
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, total, cudaHostAllocDefault);
    if (e == cudaSuccess) {
        *(uint32_t *)p = HOST_PINNED;
        return (char *)p + HOST_HDR;
    }
    (void)cudaGetLastError();
    if (!fallback) return NULL;
    p = aligned_alloc(HOST_HDR, (total + HOST_HDR - 1) / HOST_HDR * HOST_HDR);
    if (!p) {
        error_set("out of host memory: %s for %s's transfer buffers", bytes_format(bytes, want, sizeof want), be->name);
        return NULL;
    }
    *(uint32_t *)p = HOST_PAGEABLE;
    return (char *)p + HOST_HDR;
}

extern "C" int cuda_host_pinned(backend *be, const void *p) {
    return (void)be, p && *(const uint32_t *)((const char *)p - HOST_HDR) == HOST_PINNED;
}

extern "C" void cuda_host_free(backend *be, void *p) {
    (void)be;
    if (!p) return;
    char *base = (char *)p - HOST_HDR;
    if (*(uint32_t *)base == HOST_PINNED) cuda_check(cudaFreeHost(base));
    else free(base);
}

static cudaStream_t cuda_stream_of(backend *be, int stream) {
    cuda_state *st = cuda_state_of(be);
    return stream == BACKEND_STREAM_COPY ? st->copy_stream : stream == BACKEND_STREAM_TO_DEVICE ? st->to_device : st->stream;
}

// On the copy stream a copy waits for what the backend's stream had queued when it was posted (the
// forward that wrote what it reads, the step that still reads what it overwrites).
extern "C" void cuda_copy_async(backend *be, int stream, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    cuda_state *st = cuda_state_of(be);
    if (stream == BACKEND_STREAM_COPY) {
        cuda_check(cudaEventRecord(st->posted, st->stream));
        cuda_check(cudaStreamWaitEvent(st->copy_stream, st->posted, 0));
    }
    cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda_stream_of(be, stream)));
}

extern "C" void *cuda_event_new(backend *be) {
    (void)be;
    cudaEvent_t ev;
    cuda_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    return (void *)ev;
}

extern "C" void cuda_event_free(backend *be, void *ev) {
    (void)be;
    if (ev) cuda_check(cudaEventDestroy((cudaEvent_t)ev));
}

extern "C" void cuda_event_record(backend *be, void *ev, int stream) {
    cuda_check(cudaEventRecord((cudaEvent_t)ev, cuda_stream_of(be, stream)));
}

extern "C" int cuda_event_done(backend *be, void *ev) {
    (void)be;
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaErrorNotReady) return 0;
    cuda_check(e);
    return 1;
}

extern "C" void cuda_event_sync(backend *be, void *ev) {
    (void)be;
    cuda_check(cudaEventSynchronize((cudaEvent_t)ev));
}

extern "C" void cuda_stream_wait(backend *be, void *ev) {
    cuda_check(cudaStreamWaitEvent(cuda_state_of(be)->stream, (cudaEvent_t)ev, 0));
}

// Row-major C = op(A) op(B) is, read column-major, C^T = op(B)^T op(A)^T: a row-major [r, c]
// matrix with row stride ld is the column-major [c, r] matrix with leading dimension ld. So cuBLAS
// gets B first, then A, with m and n swapped and the same transpose flags and strides. An operand
// spanning 2^31 elements or more (the fused loss's logits at real sizes) takes the 64-bit interface.
extern "C" void cuda_gemm(backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                          const void *a, int lda, const void *b, int ldb, float beta, void *c, int ldc,
                          dtype ab_dt, dtype c_dt) {
    cudaDataType ab_type, c_type;
    if (ab_dt == DT_F32 && c_dt == DT_F32) {
        ab_type = CUDA_R_32F;
        c_type = CUDA_R_32F;
    } else if (ab_dt == DT_BF16 && (c_dt == DT_BF16 || c_dt == DT_F32)) {
        ab_type = CUDA_R_16BF;
        c_type = c_dt == DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    } else {
        // cublasGemmEx with fp32 compute has no F32-input, BF16-output form.
        fatal("backend_gemm on CUDA supports A/B F32 with C F32, or A/B BF16 with C BF16 or F32; "
              "got A/B %s and C %s", dtype_name(ab_dt), dtype_name(c_dt));
    }
    if (m == 0 || n == 0) return;
    cuda_state *st = cuda_state_of(be);
    cublasOperation_t ta = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (cublas_gemm_needs_64(ta, tb, n, m, k, ldb, lda, ldc)) // an operand spans 2^31 elements or more
        cublas_check(cublasGemmEx_64(st->cublas, ta, tb, n, m, k, &alpha, b, ab_type, ldb, a, ab_type, lda, &beta, c,
                                     c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
        cublas_check(cublasGemmEx(st->cublas, ta, tb, n, m, k, &alpha, b, ab_type, ldb, a, ab_type, lda, &beta, c,
                                  c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// each op family's CUDA table (foo_cuda.cu: foo_kernels_cuda)
extern "C" {
BACKEND_OP_FAMILIES(BACKEND_TABLE_DECLARE, cuda)
}



// the timing events behind profile.c: recorded on the backend's stream, read once complete
static void *cuda_timer_new(void) {
    cudaEvent_t e;
    cuda_check(cudaEventCreate(&e));
    return (void *)e;
}

static void cuda_timer_free(void *event) { cuda_check(cudaEventDestroy((cudaEvent_t)event)); }

static void cuda_timer_record(backend *be, void *event) {
    cuda_check(cudaEventRecord((cudaEvent_t)event, cuda_state_of(be)->stream));
}

static double cuda_timer_seconds(void *start, void *stop) {
    float ms = 0.0f;
    cuda_check(cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)stop));
    return 1e-3 * (double)ms;
}

extern "C" const backend_ops backend_cuda_ops = {
    .name = "cuda", BACKEND_OPS(OP_FILL, cuda_) BACKEND_TIMER_OPS(OP_FILL, cuda_)
    BACKEND_OP_FAMILIES(BACKEND_TABLE_FILL, cuda)};
