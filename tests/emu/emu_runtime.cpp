// emu_runtime.cpp: the CUDA runtime, cuBLAS and NCCL entry points dflash_rank calls, for the CPU
// emulator (see cuda_emu.h and tests/emu/README.md).
//
// Emulated devices (one, or DFLASH_EMU_DEVICES) whose memory is host memory: cudaMalloc'd bytes are
// counted against a capacity (DFLASH_EMU_GPU_BYTES, default 16 GiB) so that cudaMemGetInfo and
// out-of-memory behave, and are filled with 0xFF (NaN as fp32 and bf16) so that a kernel reading
// memory nobody wrote shows it. Every stream is one in-order queue that has finished when the call
// returns: copies and kernels run at the call. cublasGemmEx is a plain fp32-accumulating loop, and
// cublasGemmGroupedBatchedEx one per problem (its own section, with the pinned host memory). NCCL
// runs between processes through files (see the NCCL section); with one device, every rank shares
// it, so dflash_rank's payload transport declines NCCL before it tries.
#include "cuda_emu.h"
#undef warpSize // the cudaDeviceProp field

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <mutex>
#include <vector>

// ---------------------------------------------------------------------------- errors

static thread_local cudaError_t last_error = cudaSuccess;
void emu_set_last_error(cudaError_t e) { last_error = e; }

static std::mutex smem_mu;
static std::map<const void *, size_t> smem_optin;
size_t emu_smem_limit(const void *kernel) {
    std::lock_guard<std::mutex> g(smem_mu);
    auto it = smem_optin.find(kernel);
    return it == smem_optin.end() ? 48 * 1024 : it->second;
}

static const size_t SMEM_OPTIN_MAX = 227 * 1024; // sm_90: 227 KiB per block

static cudaError_t fail(cudaError_t e) { return last_error = e; }

// the copy log (its own section, at the end): what the stream entry points tell it
static void copy_log_copy(const void *dst, const void *src, size_t n, bool async_api, cudaStream_t s);
static void copy_log_queued(cudaStream_t s); // other work queued on s
static void copy_log_waited(cudaStream_t s, bool every); // the host waits for s (every: for all streams)

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaErrorUnknown";
    }
}
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: return "unknown error (emulator)";
    }
}

// ---------------------------------------------------------------------------- device

static size_t capacity() {
    static size_t cap = [] {
        const char *s = getenv("DFLASH_EMU_GPU_BYTES");
        return s && *s ? (size_t)strtoull(s, nullptr, 10) : (size_t)16 << 30;
    }();
    return cap;
}

// DFLASH_EMU_DEVICES (1 to 8, default 1): how many devices a process sees. Device d has the PCI bus
// id 0000:0d:00.0 and reaches every other one as a peer, so ranks on devices of their own can take
// dflash_rank's NCCL path (NCCL emulated below); the memory capacity is the process's, on any device.
static int device_count(void) {
    static int n = [] {
        const char *s = getenv("DFLASH_EMU_DEVICES");
        int v = s && *s ? atoi(s) : 1;
        return v < 1 ? 1 : v > 8 ? 8 : v;
    }();
    return n;
}
static bool valid_device(int d) { return d >= 0 && d < device_count(); }
static thread_local int current_device = 0;

cudaError_t cudaGetDeviceCount(int *n) {
    *n = device_count();
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
    if (!valid_device(d)) return fail(cudaErrorInvalidDevice);
    current_device = d;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) {
    *d = current_device;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    copy_log_waited(nullptr, true);
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    if (!valid_device(d)) return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CUDA emulator (CPU)");
    p->totalGlobalMem = capacity();
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = SMEM_OPTIN_MAX;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr attr, int d) {
    if (!valid_device(d)) return fail(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)SMEM_OPTIN_MAX; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = 48 * 1024; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *v = 1; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; return cudaSuccess;
    default: return fail(cudaErrorInvalidValue);
    }
}

cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int d) {
    if (!valid_device(d)) return fail(cudaErrorInvalidDevice);
    snprintf(buf, (size_t)len, "0000:%02x:00.0", d);
    return cudaSuccess;
}
cudaError_t cudaDeviceGetByPCIBusId(int *d, const char *bus) {
    for (int i = 0; i < device_count(); i++) {
        char b[32];
        snprintf(b, sizeof b, "0000:%02x:00.0", i);
        if (strcasecmp(bus, b) == 0) {
            *d = i;
            return cudaSuccess;
        }
    }
    return fail(cudaErrorInvalidDevice);
}
cudaError_t cudaDeviceCanAccessPeer(int *can, int d, int peer) {
    if (!valid_device(d) || !valid_device(peer)) return fail(cudaErrorInvalidDevice);
    *can = d != peer;
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *kernel, enum cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > SMEM_OPTIN_MAX) return fail(cudaErrorInvalidValue);
        std::lock_guard<std::mutex> g(smem_mu);
        smem_optin[kernel] = (size_t)value;
    }
    return cudaSuccess;
}

// ---------------------------------------------------------------------------- memory

static std::mutex mem_mu;
static std::map<void *, size_t> live_allocs;
static size_t used_bytes;

cudaError_t cudaMalloc(void **p, size_t bytes) {
    *p = nullptr;
    if (bytes == 0) return cudaSuccess;
    size_t rounded = (bytes + 255) & ~(size_t)255;
    {
        std::lock_guard<std::mutex> g(mem_mu);
        if (used_bytes + rounded > capacity()) return fail(cudaErrorMemoryAllocation);
        used_bytes += rounded;
    }
    void *q = aligned_alloc(256, rounded);
    if (!q) {
        std::lock_guard<std::mutex> g(mem_mu);
        used_bytes -= rounded;
        return fail(cudaErrorMemoryAllocation);
    }
    memset(q, 0xFF, rounded < ((size_t)256 << 20) ? rounded : ((size_t)256 << 20));
    std::lock_guard<std::mutex> g(mem_mu);
    live_allocs[q] = rounded;
    *p = q;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess; // cudaFree(0): the context exists
    std::lock_guard<std::mutex> g(mem_mu);
    auto it = live_allocs.find(p);
    if (it == live_allocs.end()) {
        fprintf(stderr, "cuda emulator: cudaFree of %p, which cudaMalloc did not return\n", p);
        abort();
    }
    used_bytes -= it->second;
    live_allocs.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t) { return cudaMalloc(p, bytes); }
cudaError_t cudaFreeAsync(void *p, cudaStream_t) { return cudaFree(p); }

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    std::lock_guard<std::mutex> g(mem_mu);
    *free_b = capacity() - used_bytes;
    *total_b = capacity();
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind) {
    copy_log_copy(dst, src, n, false, nullptr);
    if (n) memmove(dst, src, n);
    return cudaSuccess;
}
static void emu_note_async_copy(void *dst, const void *src, size_t n); // the pinned-copy count, below
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind, cudaStream_t s) {
    emu_note_async_copy(dst, src, n);
    copy_log_copy(dst, src, n, true, s);
    if (n) memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind, cudaStream_t) {
    if (width > dpitch || width > spitch) return fail(cudaErrorInvalidValue);
    for (size_t r = 0; r < height; r++) memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
    if (n) memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    copy_log_queued(s);
    return cudaMemset(p, v, n);
}

// ---------------------------------------------------------------------------- streams and events

cudaError_t cudaStreamCreate(cudaStream_t *s) {
    *s = (cudaStream_t) new int(1);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    copy_log_queued(s); // (a copy still pending there was never waited for)
    delete (int *)s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    copy_log_waited(s, false);
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t, unsigned int) {
    copy_log_queued(s);
    return cudaSuccess;
}
// An event: its flags and the host time of its last record (work has finished by then).
struct emu_event {
    unsigned flags;
    double t; // seconds, CLOCK_MONOTONIC; < 0: never recorded
};
static double host_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    *e = (cudaEvent_t) new emu_event{flags, -1.0};
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete (emu_event *)e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    copy_log_queued(s);
    ((emu_event *)e)->t = host_seconds();
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    const emu_event *x = (const emu_event *)a, *y = (const emu_event *)b;
    if ((x->flags | y->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
    if (x->t < 0 || y->t < 0) return fail(cudaErrorInvalidResourceHandle);
    *ms = (float)(1e3 * (y->t - x->t));
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }

// ---------------------------------------------------------------------------- cuBLAS

struct cublasContext {
    int unused;
};

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    *h = new cublasContext();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void *, size_t) { return CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusName(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_NOT_SUPPORTED";
}
const char *cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "success" : "the operation or data type combination is not supported";
}

static float load(const void *p, cudaDataType t, size_t i) {
    return t == CUDA_R_32F ? ((const float *)p)[i] : __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

// Column-major C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C; beta 0 never reads C (it may hold NaN).
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
    int ok_ab = (at == CUDA_R_32F || at == CUDA_R_16BF) && at == bt;
    int ok_c = ct == CUDA_R_32F || (ct == CUDA_R_16BF && at == CUDA_R_16BF);
    if (!ok_ab || !ok_c || compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
        return CUBLAS_STATUS_INVALID_VALUE;
    const float a = *(const float *)alpha, b = *(const float *)beta;
    // op(A) as rows of k (row i of op(A)), op(B) as columns of k (column j of op(B))
    std::vector<float> Ar((size_t)m * k), Bc((size_t)n * k);
    for (int i = 0; i < m; i++)
        for (int l = 0; l < k; l++)
            Ar[(size_t)i * k + l] = load(A, at, ta == CUBLAS_OP_N ? (size_t)i + (size_t)l * lda : (size_t)l + (size_t)i * lda);
    for (int j = 0; j < n; j++)
        for (int l = 0; l < k; l++)
            Bc[(size_t)j * k + l] = load(B, bt, tb == CUBLAS_OP_N ? (size_t)l + (size_t)j * ldb : (size_t)j + (size_t)l * ldb);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            const float *x = &Ar[(size_t)i * k], *y = &Bc[(size_t)j * k];
            float s = 0.0f;
            for (int l = 0; l < k; l++) s += x[l] * y[l];
            size_t o = (size_t)i + (size_t)j * ldc;
            float c = s * a;
            if (b != 0.0f) c += b * load(C, ct, o);
            if (ct == CUDA_R_32F) ((float *)C)[o] = c;
            else ((__nv_bfloat16 *)C)[o] = __float2bfloat16(c);
        }
    return CUBLAS_STATUS_SUCCESS;
}

// ---------------------------------------------------------------------------- cuBLAS: grouped GEMM
//
// What ops_moe_cuda.cu's expert GEMMs use: cublasGemmGroupedBatchedEx, and the pinned host memory
// the expert counts are downloaded into. The grouped GEMM is, as cuBLAS documents it, a cublasGemmEx
// per problem (groups in order, group_size[i] problems of group i's sizes, scalars and transposes,
// the matrices from the pointer arrays); its argument checks are cuBLAS's (CUBLAS_STATUS_INVALID_VALUE),
// its types those it lists for bf16 and fp32 (A = B = C type, fp32 compute and scale; others,
// fp16 among them, CUBLAS_STATUS_NOT_SUPPORTED here). Beyond cuBLAS it stops the program when a
// pointer array, or a matrix of a problem (its whole lda x columns extent), is not inside one
// cudaMalloc'd allocation: a host array there is what a GPU reads as an illegal address.

static std::mutex pinned_mu;
static std::map<void *, size_t> pinned_allocs;

// DFLASH_EMU_PINNED_BYTES: the page-locked memory the system grants (default: no limit); past it
// cudaHostAlloc fails as a GPU's does when the OS refuses to pin more (cudaErrorMemoryAllocation).
static size_t pinned_total;

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int) {
    *p = NULL;
    std::lock_guard<std::mutex> g(pinned_mu);
    const char *lim = getenv("DFLASH_EMU_PINNED_BYTES");
    if (lim && *lim && pinned_total + bytes > (size_t)strtoull(lim, NULL, 10)) return fail(cudaErrorMemoryAllocation);
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return fail(cudaErrorMemoryAllocation);
    pinned_allocs[*p] = bytes;
    pinned_total += bytes;
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t bytes) { return cudaHostAlloc(p, bytes, cudaHostAllocDefault); }
cudaError_t cudaFreeHost(void *p) {
    if (!p) return cudaSuccess;
    std::lock_guard<std::mutex> g(pinned_mu);
    auto it = pinned_allocs.find(p);
    if (it == pinned_allocs.end()) {
        fprintf(stderr, "cuda emulator: cudaFreeHost of %p, which cudaHostAlloc did not return\n", p);
        abort();
    }
    pinned_total -= it->second;
    pinned_allocs.erase(it);
    free(p);
    return cudaSuccess;
}

// the bytes [p, p + bytes) inside one live cudaMalloc'd allocation
static bool emu_device_range(const void *p, size_t bytes) {
    std::lock_guard<std::mutex> g(mem_mu);
    auto it = live_allocs.upper_bound((void *)p);
    if (it == live_allocs.begin()) return false;
    --it;
    const char *base = (const char *)it->first, *q = (const char *)p;
    return q >= base && (size_t)(q - base) <= it->second && bytes <= it->second - (size_t)(q - base);
}

static void emu_need_device(const void *p, size_t bytes, const char *what, long idx) {
    if (emu_device_range(p, bytes)) return;
    fprintf(stderr, "cuda emulator: cublasGemmGroupedBatchedEx: %s", what);
    if (idx >= 0) fprintf(stderr, "[%ld]", idx);
    fprintf(stderr, " (%p, %zu bytes) is not inside device memory\n", p, bytes);
    abort();
}

// ---------------------------------------------------------------------------- pinned host memory and async copies
// cudaMemcpyAsync between device memory and host memory is counted by the kind of host memory:
// pinned (inside a cudaHostAlloc'd block: the copy is asynchronous on a GPU) or pageable (a GPU
// stages it and the host waits). With DFLASH_EMU_COPY_REPORT=1 each process prints at exit
// `cuda emulator: async copies with host memory: N pinned (B bytes), M pageable`, so that a test
// can tell that a path's copies went through pinned buffers.

static std::mutex copies_mu;
static long long copies_pinned, copies_pinned_bytes, copies_pageable;

static bool emu_pinned_range(const void *p, size_t bytes) {
    std::lock_guard<std::mutex> g(pinned_mu);
    auto it = pinned_allocs.upper_bound((void *)p);
    if (it == pinned_allocs.begin()) return false;
    --it;
    const char *base = (const char *)it->first, *q = (const char *)p;
    return q >= base && (size_t)(q - base) <= it->second && bytes <= it->second - (size_t)(q - base);
}

static void emu_copy_report(void) {
    std::lock_guard<std::mutex> g(copies_mu);
    fprintf(stderr, "cuda emulator: async copies with host memory: %lld pinned (%lld bytes), %lld pageable\n",
            copies_pinned, copies_pinned_bytes, copies_pageable);
}

static void emu_note_async_copy(void *dst, const void *src, size_t n) {
    static std::once_flag once;
    std::call_once(once, [] {
        const char *r = getenv("DFLASH_EMU_COPY_REPORT");
        if (r && strcmp(r, "1") == 0) atexit(emu_copy_report);
    });
    bool dev_dst = emu_device_range(dst, n), dev_src = emu_device_range(src, n);
    if (!n || dev_dst == dev_src) return; // device to device, or host to host
    const void *host = dev_dst ? src : dst;
    bool pinned = emu_pinned_range(host, n);
    std::lock_guard<std::mutex> g(copies_mu);
    if (pinned) copies_pinned++, copies_pinned_bytes += (long long)n;
    else copies_pageable++;
}

cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t h, const cublasOperation_t transa[],
                                          const cublasOperation_t transb[], const int m[], const int n[],
                                          const int k[], const void *alpha, const void *const A[], cudaDataType_t at,
                                          const int lda[], const void *const B[], cudaDataType_t bt, const int ldb[],
                                          const void *beta, void *const C[], cudaDataType_t ct, const int ldc[],
                                          int group_count, const int group_size[], cublasComputeType_t compute) {
    if (!transa || !transb || !m || !n || !k || !alpha || !lda || !ldb || !beta || !ldc || !group_size ||
        group_count < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    long problems = 0;
    for (int i = 0; i < group_count; i++) {
        auto op_ok = [](cublasOperation_t o) { return o == CUBLAS_OP_N || o == CUBLAS_OP_T || o == CUBLAS_OP_C; };
        if (m[i] < 0 || n[i] < 0 || k[i] < 0 || group_size[i] < 0 || !op_ok(transa[i]) || !op_ok(transb[i]))
            return CUBLAS_STATUS_INVALID_VALUE;
        if (lda[i] < std::max(1, transa[i] == CUBLAS_OP_N ? m[i] : k[i]) ||
            ldb[i] < std::max(1, transb[i] == CUBLAS_OP_N ? k[i] : n[i]) || ldc[i] < std::max(1, m[i]))
            return CUBLAS_STATUS_INVALID_VALUE;
        problems += group_size[i];
    }
    int bf16 = at == CUDA_R_16BF && bt == CUDA_R_16BF && ct == CUDA_R_16BF;
    int f32 = at == CUDA_R_32F && bt == CUDA_R_32F && ct == CUDA_R_32F;
    if (!(bf16 || f32) || compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (problems == 0) return CUBLAS_STATUS_SUCCESS;
    size_t es = f32 ? 4 : 2, parr = (size_t)problems * sizeof(void *);
    emu_need_device(A, parr, "Aarray", -1);
    emu_need_device(B, parr, "Barray", -1);
    emu_need_device(C, parr, "Carray", -1);
    long idx = 0;
    for (int i = 0; i < group_count; i++) {
        // column-major extents: A lda x (k or m) columns, B ldb x (n or k), C ldc x n
        size_t acols = transa[i] == CUBLAS_OP_N ? k[i] : m[i], bcols = transb[i] == CUBLAS_OP_N ? n[i] : k[i];
        for (int j = 0; j < group_size[i]; j++, idx++) {
            if (m[i] && n[i] && k[i]) {
                emu_need_device(A[idx], (size_t)lda[i] * (acols - 1) * es + (transa[i] == CUBLAS_OP_N ? m[i] : k[i]) * es,
                                "Aarray", idx);
                emu_need_device(B[idx], (size_t)ldb[i] * (bcols - 1) * es + (transb[i] == CUBLAS_OP_N ? k[i] : n[i]) * es,
                                "Barray", idx);
            }
            if (m[i] && n[i]) emu_need_device(C[idx], ((size_t)ldc[i] * (n[i] - 1) + m[i]) * es, "Carray", idx);
            cublasStatus_t s = cublasGemmEx(h, transa[i], transb[i], m[i], n[i], k[i], (const float *)alpha + i, A[idx],
                                            at, lda[i], B[idx], bt, ldb[i], (const float *)beta + i, C[idx], ct,
                                            ldc[i], compute, CUBLAS_GEMM_DEFAULT);
            if (s != CUBLAS_STATUS_SUCCESS) return s;
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

// ---- strided-batched GEMM (the Gated DeltaNet's chunked form, ops_hybrid_cuda.cu)
//
// cublasGemmStridedBatchedEx: batchCount independent column-major GEMMs, member b on A + b strideA,
// B + b strideB, C + b strideC (strides in elements, signed; 0 repeats a matrix), each exactly
// cublasGemmEx's loop above (same types, checks and rounding; beta 0 never reads C). As cuBLAS:
// batchCount < 0 is CUBLAS_STATUS_INVALID_VALUE; a batch of 0 does nothing.
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          long long strideA, const void *B, cudaDataType bt, int ldb, long long strideB,
                                          const void *beta, void *C, cudaDataType ct, int ldc, long long strideC,
                                          int batchCount, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    if (batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
    size_t esz_ab = at == CUDA_R_32F ? 4 : 2, esz_c = ct == CUDA_R_32F ? 4 : 2;
    for (int b = 0; b < batchCount; b++) {
        cublasStatus_t s = cublasGemmEx(h, ta, tb, m, n, k, alpha, (const char *)A + (ptrdiff_t)(b * strideA) * (ptrdiff_t)esz_ab,
                                        at, lda, (const char *)B + (ptrdiff_t)(b * strideB) * (ptrdiff_t)esz_ab, bt, ldb,
                                        beta, (char *)C + (ptrdiff_t)(b * strideC) * (ptrdiff_t)esz_c, ct, ldc, compute, algo);
        if (s != CUBLAS_STATUS_SUCCESS) return s;
    }
    return CUBLAS_STATUS_SUCCESS;
}

// ---------------------------------------------------------------------------- NCCL over files
//
// The processes of a communicator meet in a folder named after the unique id, under
// $DFLASH_EMU_NCCL_DIR (default $TMPDIR or /tmp). A send writes the message to a file (written under
// a temporary name, then renamed) and returns: sends are buffered, so a send never waits for its
// receive. A receive waits for the file of its sequence number from that peer, checks its size,
// reads and deletes it. Collectives (ncclCommSplit, ncclAllReduce, ncclCommFinalize) are all-gathers:
// every rank writes its part, waits for everyone's, computes the result itself. A rank deletes its
// part of a collective once it has seen every rank's part of the next one (each rank writes that
// only after reading the whole previous one), and ncclCommFinalize is a one-byte collective of its
// own, so only those few bytes stay: point DFLASH_EMU_NCCL_DIR at a scratch folder.
// Streams are synchronous here, so every call has finished when it returns. A wait longer than 120 s
// (a peer that never comes) fails with ncclSystemError.

struct ncclComm {
    std::string dir;
    int nranks, rank;
    int n_coll;                                  // collectives so far: their files' tags
    std::string last_own;                        // this rank's part of the last collective ("": none)
    std::map<int, long> sent, received;          // per peer: messages so far
};

static thread_local char nccl_msg[512];
static ncclResult_t nccl_fail(ncclResult_t r, const char *fmt, const char *what) {
    snprintf(nccl_msg, sizeof nccl_msg, fmt, what);
    return r;
}

static std::string nccl_base(void) {
    const char *d = getenv("DFLASH_EMU_NCCL_DIR");
    if (!d || !*d) d = getenv("TMPDIR");
    return std::string(d && *d ? d : "/tmp");
}

static bool write_file(const std::string &path, const void *data, size_t n) {
    std::string tmp = path + ".tmp";
    FILE *f = fopen(tmp.c_str(), "wb");
    if (!f) return false;
    bool ok = fwrite(data, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    return ok && rename(tmp.c_str(), path.c_str()) == 0;
}

// Waits for path to exist (120 s at most); returns its bytes in out.
static bool wait_file(const std::string &path, std::vector<char> &out) {
    for (double waited = 0; waited < 120.0;) {
        FILE *f = fopen(path.c_str(), "rb");
        if (f) {
            fseek(f, 0, SEEK_END);
            long n = ftell(f);
            fseek(f, 0, SEEK_SET);
            out.resize((size_t)(n > 0 ? n : 0));
            bool ok = n >= 0 && fread(out.data(), 1, out.size(), f) == out.size();
            fclose(f);
            return ok;
        }
        struct timespec ts = {0, 200000}; // 0.2 ms
        nanosleep(&ts, nullptr);
        waited += 0.0002;
    }
    return false;
}

// Every rank's `n` bytes, in rank order.
static ncclResult_t all_gather(ncclComm *c, const char *kind, const void *mine, size_t n, std::vector<std::vector<char>> &all) {
    char tag[64];
    snprintf(tag, sizeof tag, "/%s%d.r", kind, c->n_coll++);
    std::string own = c->dir + tag + std::to_string(c->rank);
    if (!write_file(own, mine, n)) return nccl_fail(ncclSystemError, "cannot write %s", own.c_str());
    all.assign((size_t)c->nranks, std::vector<char>());
    for (int r = 0; r < c->nranks; r++) {
        std::string p = c->dir + tag + std::to_string(r);
        if (!wait_file(p, all[(size_t)r])) return nccl_fail(ncclSystemError, "no peer wrote %s within 120 s", p.c_str());
        if (all[(size_t)r].size() != n) return nccl_fail(ncclInvalidUsage, "%s: ranks disagree on the size", p.c_str());
    }
    // every rank has written its part of this one, so every rank has read all of the last one
    if (!c->last_own.empty()) remove(c->last_own.c_str());
    c->last_own = own;
    return ncclSuccess;
}

static size_t nccl_type_bytes(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

ncclResult_t ncclGetVersion(int *v) {
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}
const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidUsage: return "invalid usage (emulated NCCL)";
    case ncclInvalidArgument: return "invalid argument (emulated NCCL)";
    case ncclSystemError: return "system error (emulated NCCL)";
    default: return "NCCL error (emulated NCCL)";
    }
}
const char *ncclGetLastError(ncclComm_t) { return nccl_msg; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    uint64_t a = (uint64_t)getpid() << 32 ^ (uint64_t)time(nullptr), b = (uint64_t)clock() * 0x9e3779b97f4a7c15ull;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&a, 1, sizeof a, f) != sizeof a || fread(&b, 1, sizeof b, f) != sizeof b) a ^= 1;
        fclose(f);
    }
    snprintf(id->internal, sizeof id->internal, "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
    return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    *comm = nullptr;
    if (nranks < 1 || rank < 0 || rank >= nranks) return nccl_fail(ncclInvalidArgument, "%s", "rank out of range");
    if (strnlen(id.internal, sizeof id.internal) != 32) return nccl_fail(ncclInvalidArgument, "%s", "not an emulated NCCL unique id");
    ncclComm *c = new ncclComm();
    c->dir = nccl_base() + "/dflash_emu_nccl_" + std::string(id.internal, 32);
    c->nranks = nranks, c->rank = rank, c->n_coll = 0;
    mkdir(c->dir.c_str(), 0700); // an existing folder (another rank's) is fine
    *comm = c;
    return ncclSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *) {
    return ncclCommInitRank(comm, nranks, id, rank);
}
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *out, ncclConfig_t *) {
    *out = nullptr;
    int mine[2] = {color, key};
    std::vector<std::vector<char>> all;
    int split = comm->n_coll;
    ncclResult_t r = all_gather(comm, "split", mine, sizeof mine, all);
    if (r != ncclSuccess || color == NCCL_SPLIT_NOCOLOR) return r;
    std::vector<std::pair<int, int>> members; // (key, parent rank) of our color
    for (int i = 0; i < comm->nranks; i++) {
        const int *v = (const int *)all[(size_t)i].data();
        if (v[0] == color) members.push_back({v[1], i});
    }
    std::sort(members.begin(), members.end());
    ncclComm *c = new ncclComm();
    c->dir = comm->dir + "/split" + std::to_string(split) + "c" + std::to_string(color);
    c->nranks = (int)members.size(), c->n_coll = 0;
    for (size_t i = 0; i < members.size(); i++)
        if (members[i].second == comm->rank) c->rank = (int)i;
    mkdir(c->dir.c_str(), 0700);
    *out = c;
    return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t comm) { // a collective, as NCCL's: then the last one's parts can go
    char none = 0;
    std::vector<std::vector<char>> all;
    return all_gather(comm, "finalize", &none, 1, all);
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    delete comm; // the collectives' files stay: a rank cannot know when the others have read them
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *r) {
    *r = ncclSuccess;
    return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
    *rank = comm->rank;
    return ncclSuccess;
}

template <class T> static void reduce_into(T *acc, const T *x, size_t n, ncclRedOp_t op) {
    for (size_t i = 0; i < n; i++) {
        switch (op) {
        case ncclSum: acc[i] += x[i]; break;
        case ncclProd: acc[i] *= x[i]; break;
        case ncclMax: acc[i] = x[i] > acc[i] ? x[i] : acc[i]; break;
        case ncclMin: acc[i] = x[i] < acc[i] ? x[i] : acc[i]; break;
        default: break;
        }
    }
}
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
    size_t es = nccl_type_bytes(type), n = count * es;
    if (type != ncclFloat32 && type != ncclFloat64 && type != ncclInt32 && type != ncclInt64)
        return nccl_fail(ncclInvalidArgument, "%s", "the emulated ncclAllReduce takes float, double, int32 and int64");
    if (op != ncclSum && op != ncclProd && op != ncclMax && op != ncclMin)
        return nccl_fail(ncclInvalidArgument, "%s", "the emulated ncclAllReduce takes sum, prod, max and min");
    std::vector<std::vector<char>> all;
    ncclResult_t r = all_gather(comm, "allreduce", send, n, all);
    if (r != ncclSuccess) return r;
    std::vector<char> acc = all[0];
    for (int i = 1; i < comm->nranks; i++) {
        const void *x = all[(size_t)i].data();
        if (type == ncclFloat32) reduce_into((float *)acc.data(), (const float *)x, count, op);
        else if (type == ncclFloat64) reduce_into((double *)acc.data(), (const double *)x, count, op);
        else if (type == ncclInt32) reduce_into((int32_t *)acc.data(), (const int32_t *)x, count, op);
        else reduce_into((int64_t *)acc.data(), (const int64_t *)x, count, op);
    }
    memcpy(recv, acc.data(), n);
    return ncclSuccess;
}

static std::string message_path(const ncclComm *c, int from, int to, long seq) {
    return c->dir + "/m" + std::to_string(from) + "to" + std::to_string(to) + "." + std::to_string(seq);
}
ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
    size_t n = count * nccl_type_bytes(type);
    if (peer < 0 || peer >= comm->nranks || peer == comm->rank) return nccl_fail(ncclInvalidArgument, "%s", "bad peer");
    std::string p = message_path(comm, comm->rank, peer, comm->sent[peer]++);
    if (!write_file(p, buf, n)) return nccl_fail(ncclSystemError, "cannot write %s", p.c_str());
    return ncclSuccess;
}
ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
    size_t n = count * nccl_type_bytes(type);
    if (peer < 0 || peer >= comm->nranks || peer == comm->rank) return nccl_fail(ncclInvalidArgument, "%s", "bad peer");
    std::string p = message_path(comm, peer, comm->rank, comm->received[peer]++);
    std::vector<char> data;
    if (!wait_file(p, data)) return nccl_fail(ncclSystemError, "no message %s within 120 s", p.c_str());
    unlink(p.c_str());
    if (data.size() != n) return nccl_fail(ncclInvalidUsage, "%s: the send and the receive differ in size", p.c_str());
    memcpy(buf, data.data(), n);
    return ncclSuccess;
}
ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

// ---------------------------------------------------------------------------- the copy log: pinned and asynchronous copies
//
// DFLASH_EMU_COPY_LOG=FILE appends one line per copy between host and device memory (cudaMemcpy,
// cudaMemcpyAsync) to FILE, from every process alike (one write(2) per line, O_APPEND):
//     copy RANK DIR BYTES pinned=P async=A
// RANK: OMPI_COMM_WORLD_RANK (-1 outside mpirun); DIR: h2d or d2h; P = 1 when the host side lies
// inside one cudaHostAlloc'd buffer; A = 1 when the copy was a cudaMemcpyAsync that the host did not
// wait for at once: the next thing on its stream was other work (another copy, a memset, an event
// record or wait; kernels and cuBLAS calls are not seen here, so a copy followed by a kernel and a
// cudaStreamSynchronize counts as waited for), not cudaStreamSynchronize or cudaDeviceSynchronize.
// A cudaMemcpy is never asynchronous. On a GPU a copy from pageable memory is staged and the host
// waits for it whatever the call; the log states both halves. tests/gpu/test_payload_pinned_cuda.sh
// counts the payload copies of a training job that are not pinned and asynchronous.

namespace {
struct copy_rec {
    bool h2d, pinned;
    size_t bytes;
};
std::mutex copy_mu;
std::map<cudaStream_t, copy_rec> copy_pending; // the last copy of a stream, until what follows it says
bool copy_exit_set;
}

static void copy_log_write(const copy_rec &r, bool async) {
    const char *path = getenv("DFLASH_EMU_COPY_LOG");
    if (!path || !*path) return;
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    char line[160];
    int n = snprintf(line, sizeof line, "copy %s %s %zu pinned=%d async=%d\n", rank && *rank ? rank : "-1",
                     r.h2d ? "h2d" : "d2h", r.bytes, r.pinned ? 1 : 0, async ? 1 : 0);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) return;
    if (write(fd, line, (size_t)n) != n) fprintf(stderr, "cuda emulator: cannot write %s\n", path);
    close(fd);
}

static void copy_log_at_exit(void) { // copies nobody waited for
    std::lock_guard<std::mutex> g(copy_mu);
    for (auto &kv : copy_pending) copy_log_write(kv.second, true);
    copy_pending.clear();
}

static void copy_log_queued_locked(cudaStream_t s) {
    auto it = copy_pending.find(s);
    if (it == copy_pending.end()) return;
    copy_log_write(it->second, true);
    copy_pending.erase(it);
}

static void copy_log_queued(cudaStream_t s) {
    if (!getenv("DFLASH_EMU_COPY_LOG")) return;
    std::lock_guard<std::mutex> g(copy_mu);
    copy_log_queued_locked(s);
}

static void copy_log_waited(cudaStream_t s, bool every) {
    if (!getenv("DFLASH_EMU_COPY_LOG")) return;
    std::lock_guard<std::mutex> g(copy_mu);
    for (auto it = copy_pending.begin(); it != copy_pending.end();)
        if (every || it->first == s) {
            copy_log_write(it->second, false);
            it = copy_pending.erase(it);
        } else {
            ++it;
        }
}

static void copy_log_copy(const void *dst, const void *src, size_t n, bool async_api, cudaStream_t s) {
    if (!getenv("DFLASH_EMU_COPY_LOG")) return;
    bool dst_dev = emu_device_range(dst, n ? n : 1), src_dev = emu_device_range(src, n ? n : 1);
    std::lock_guard<std::mutex> g(copy_mu);
    if (async_api) copy_log_queued_locked(s); // the copy before it on s was not waited for
    if (dst_dev == src_dev || n == 0) return;  // device to device, or host to host: not logged
    copy_rec r = {dst_dev, emu_pinned_range(dst_dev ? src : dst, n), n};
    if (!copy_exit_set) copy_exit_set = true, atexit(copy_log_at_exit);
    if (!async_api) copy_log_write(r, false);
    else copy_pending[s] = r;
}
