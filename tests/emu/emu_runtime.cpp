// emu_runtime.cpp: the CUDA runtime entry points dflash_rank calls (errors, memory, streams and
// events, pinned host memory, the copy log), for the CPU emulator (see cuda_emu.h and
// tests/emu/README.md). The devices are emu_device.cpp's, cuBLAS emu_cublas.cpp's, NCCL emu_nccl.cpp's.
//
// Emulated devices (one, or DFLASH_EMU_DEVICES) whose memory is host memory: cudaMalloc'd bytes are
// counted against a capacity (DFLASH_EMU_GPU_BYTES, default 16 GiB) so that cudaMemGetInfo and
// out-of-memory behave, and are filled with 0xFF (NaN as fp32 and bf16) so that a kernel reading
// memory nobody wrote shows it. Every stream is one in-order queue that has finished when the call
// returns: copies and kernels run at the call.
#include "cuda_emu.h"
#undef warpSize // the cudaDeviceProp field
#include "emu_internal.h"

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


cudaError_t emu_fail(cudaError_t e) { return last_error = e; }

// the copy log (its own section, at the end): what the stream entry points tell it
static void copy_log_copy(const void *dst, const void *src, size_t n, bool async_api, cudaStream_t s);
static void copy_log_queued(cudaStream_t s); // other work queued on s

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
        if (used_bytes + rounded > emu_device_capacity()) return emu_fail(cudaErrorMemoryAllocation);
        used_bytes += rounded;
    }
    void *q = aligned_alloc(256, rounded);
    if (!q) {
        std::lock_guard<std::mutex> g(mem_mu);
        used_bytes -= rounded;
        return emu_fail(cudaErrorMemoryAllocation);
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
    *free_b = emu_device_capacity() - used_bytes;
    *total_b = emu_device_capacity();
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
    if (width > dpitch || width > spitch) return emu_fail(cudaErrorInvalidValue);
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
    emu_copy_log_waited(s, false);
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
    if ((x->flags | y->flags) & cudaEventDisableTiming) return emu_fail(cudaErrorInvalidResourceHandle);
    if (x->t < 0 || y->t < 0) return emu_fail(cudaErrorInvalidResourceHandle);
    *ms = (float)(1e3 * (y->t - x->t));
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }

// ---------------------------------------------------------------------------- pinned host memory

static std::mutex pinned_mu;
static std::map<void *, size_t> pinned_allocs;

// DFLASH_EMU_PINNED_BYTES: the page-locked memory the system grants (default: no limit); past it
// cudaHostAlloc fails as a GPU's does when the OS refuses to pin more (cudaErrorMemoryAllocation).
// DFLASH_EMU_PINNED_REPORT=1: each process prints at exit
//     cuda emulator: pinned host memory: rank R peak P bytes, N allocations of T bytes, F refused
// (R: OMPI_COMM_WORLD_RANK, -1 outside mpirun; P: the most page-locked bytes held at once, as
// cudaHostAlloc was asked for them; F: the cudaHostAlloc calls refused), so that a test can compare a
// rank's pinned memory with its --plan (tests/gpu/test_pinned_plan_cuda.sh).
static size_t pinned_total, pinned_peak, pinned_sum;
static long long pinned_count, pinned_refused;

static void emu_pinned_report(void) {
    std::lock_guard<std::mutex> g(pinned_mu);
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    fprintf(stderr, "cuda emulator: pinned host memory: rank %s peak %zu bytes, %lld allocations of %zu bytes, %lld refused\n",
            rank && *rank ? rank : "-1", pinned_peak, pinned_count, pinned_sum, pinned_refused);
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int) {
    *p = NULL;
    static std::once_flag once;
    std::call_once(once, [] {
        const char *r = getenv("DFLASH_EMU_PINNED_REPORT");
        if (r && strcmp(r, "1") == 0) atexit(emu_pinned_report);
    });
    std::lock_guard<std::mutex> g(pinned_mu);
    const char *lim = getenv("DFLASH_EMU_PINNED_BYTES");
    if (lim && *lim && pinned_total + bytes > (size_t)strtoull(lim, NULL, 10)) {
        pinned_refused++;
        return emu_fail(cudaErrorMemoryAllocation);
    }
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return emu_fail(cudaErrorMemoryAllocation);
    pinned_allocs[*p] = bytes;
    pinned_total += bytes;
    pinned_sum += bytes, pinned_count++;
    if (pinned_total > pinned_peak) pinned_peak = pinned_total;
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
bool emu_device_range(const void *p, size_t bytes) {
    std::lock_guard<std::mutex> g(mem_mu);
    auto it = live_allocs.upper_bound((void *)p);
    if (it == live_allocs.begin()) return false;
    --it;
    const char *base = (const char *)it->first, *q = (const char *)p;
    return q >= base && (size_t)(q - base) <= it->second && bytes <= it->second - (size_t)(q - base);
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

void emu_copy_log_waited(cudaStream_t s, bool every) {
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
