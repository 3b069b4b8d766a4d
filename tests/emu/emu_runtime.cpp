// emu_runtime.cpp: the CUDA runtime, cuBLAS and NCCL entry points dflash_rank calls, for the CPU
// emulator (see cuda_emu.h and tests/emu/README.md).
//
// One emulated device (id 0), whose memory is host memory: cudaMalloc'd bytes are counted against
// a capacity (DFLASH_EMU_GPU_BYTES, default 16 GiB) so that cudaMemGetInfo and out-of-memory
// behave, and are filled with 0xFF (NaN as fp32 and bf16) so that a kernel reading memory nobody
// wrote shows it. Every stream is one in-order queue that has finished when the call returns: copies
// and kernels run at the call. cublasGemmEx is a plain fp32-accumulating loop. NCCL is absent: the
// calls fail with ncclInvalidUsage (every rank shares the one emulated device, so dflash_rank's
// payload transport declines NCCL before it tries).
#include "cuda_emu.h"
#undef warpSize // the cudaDeviceProp field

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <map>
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

cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int *d) {
    *d = 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    if (d != 0) return fail(cudaErrorInvalidDevice);
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
    if (d != 0) return fail(cudaErrorInvalidDevice);
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
    if (d != 0) return fail(cudaErrorInvalidDevice);
    snprintf(buf, (size_t)len, "0000:00:00.0");
    return cudaSuccess;
}
cudaError_t cudaDeviceGetByPCIBusId(int *d, const char *bus) {
    if (strcmp(bus, "0000:00:00.0") != 0) return fail(cudaErrorInvalidDevice);
    *d = 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceCanAccessPeer(int *can, int d, int peer) {
    *can = 0;
    return d == 0 && peer == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice);
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
    if (n) memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t) {
    return cudaMemcpy(dst, src, n, k);
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
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) { return cudaMemset(p, v, n); }

// ---------------------------------------------------------------------------- streams and events

cudaError_t cudaStreamCreate(cudaStream_t *s) {
    *s = (cudaStream_t) new int(1);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    delete (int *)s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; }
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
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
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

// ---------------------------------------------------------------------------- NCCL (absent)

static ncclResult_t nccl_absent() { return ncclInvalidUsage; }

ncclResult_t ncclGetVersion(int *v) {
    *v = 0;
    return ncclSuccess;
}
const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "NCCL call failed"; }
const char *ncclGetLastError(ncclComm_t) { return "NCCL is not part of the CUDA emulator"; }
ncclResult_t ncclGetUniqueId(ncclUniqueId *) { return nccl_absent(); }
ncclResult_t ncclCommInitRank(ncclComm_t *, int, ncclUniqueId, int) { return nccl_absent(); }
ncclResult_t ncclCommInitRankConfig(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *) { return nccl_absent(); }
ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *) { return nccl_absent(); }
ncclResult_t ncclCommFinalize(ncclComm_t) { return nccl_absent(); }
ncclResult_t ncclCommDestroy(ncclComm_t) { return nccl_absent(); }
ncclResult_t ncclCommAbort(ncclComm_t) { return nccl_absent(); }
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *r) {
    *r = ncclSuccess;
    return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t, int *) { return nccl_absent(); }
ncclResult_t ncclAllReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
    return nccl_absent();
}
ncclResult_t ncclSend(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return nccl_absent(); }
ncclResult_t ncclRecv(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return nccl_absent(); }
ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }
