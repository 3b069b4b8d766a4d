// backend.c: picks a backend and forwards every op to it (see backend.h).
//
// The CPU backend lives in backend_cpu.c, the CUDA one in backend_cuda.cu (only in builds with
// DFLASH_HAVE_CUDA). Argument checks that do not depend on the device are done here, once.
#include "common/backend/backend.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend_cpu.h"
#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/log.h"
#ifdef DFLASH_HAVE_CUDA
#include "common/backend/backend_cuda.h"
#endif

int backend_compiled_cuda(void) {
#ifdef DFLASH_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

// cuda_devices: the device count and, when it is 0, why.
static int cuda_devices(const char **why) {
#ifdef DFLASH_HAVE_CUDA
    return cuda_device_count(why);
#else
    *why = "this binary was built without CUDA";
    return 0;
#endif
}

int backend_cuda_devices(void) {
    const char *why = NULL;
    return cuda_devices(&why);
}

int backend_open(backend *be, const char *want, int local_rank) {
    memset(be, 0, sizeof *be);
    if (strcmp(want, "cpu") == 0) return cpu_open(be);
    if (strcmp(want, "auto") != 0 && strcmp(want, "cuda") != 0)
        return error_set("unknown backend '%s' (expected auto, cpu or cuda)", want);

    const char *why = "";
    int count = cuda_devices(&why);
    if (count == 0) {
        if (strcmp(want, "cuda") == 0) {
            if (!backend_compiled_cuda())
                return error_set("backend 'cuda' requested, but this binary was built without CUDA "
                                 "(rebuild with nvcc on PATH, or use --backend cpu)");
            return error_set("backend 'cuda' requested, but no CUDA device is usable: %s", why);
        }
        log_info("backend: using the CPU (%s)", why);
        return cpu_open(be);
    }
#ifdef DFLASH_HAVE_CUDA
    if (cuda_open(be, local_rank) != 0) return -1;
    // Host-side helpers (conversions, the data loader) still use OpenMP threads.
    be->threads = omp_get_max_threads();
    return 0;
#else
    return error_set("internal: CUDA devices counted in a build without CUDA");
#endif
}

// The CUDA dispatch: with DFLASH_HAVE_CUDA, call the CUDA twin when be is a CUDA backend.
#ifdef DFLASH_HAVE_CUDA
#define ON_CUDA(be, call)                                                                       \
    if ((be)->kind == BACKEND_CUDA) {                                                           \
        call;                                                                                   \
        return;                                                                                 \
    }
#else
#define ON_CUDA(be, call)                                                                       \
    if ((be)->kind == BACKEND_CUDA) fatal("CUDA backend used in a build without CUDA");
#endif

void backend_close(backend *be) {
    ON_CUDA(be, cuda_close(be));
    cpu_close(be);
}

void *backend_alloc(backend *be, size_t bytes) {
#ifdef DFLASH_HAVE_CUDA
    if (be->kind == BACKEND_CUDA) return cuda_alloc(be, bytes);
#endif
    return cpu_alloc(be, bytes);
}

void backend_free(backend *be, void *p) {
    ON_CUDA(be, cuda_free(be, p));
    cpu_free(be, p);
}

void backend_copy_to_device(backend *be, void *dst, const void *src_host, size_t bytes) {
    ON_CUDA(be, cuda_copy_to_device(be, dst, src_host, bytes));
    if (bytes) memcpy(dst, src_host, bytes);
}

void backend_copy_to_host(backend *be, void *dst_host, const void *src, size_t bytes) {
    ON_CUDA(be, cuda_copy_to_host(be, dst_host, src, bytes));
    if (bytes) memcpy(dst_host, src, bytes);
}

void backend_memset_zero(backend *be, void *p, size_t bytes) {
    ON_CUDA(be, cuda_memset_zero(be, p, bytes));
    if (bytes) memset(p, 0, bytes);
}

void backend_sync(backend *be) {
    ON_CUDA(be, cuda_sync(be));
    // CPU work is synchronous: nothing to wait for.
}

void backend_mem_info(backend *be, size_t *free_bytes, size_t *total_bytes) {
    ON_CUDA(be, cuda_mem_info(be, free_bytes, total_bytes));
    cpu_mem_info(be, free_bytes, total_bytes);
}

void backend_gemm(backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                  const void *a, int lda, const void *b, int ldb, float beta, void *c, int ldc,
                  dtype ab_dt, dtype c_dt) {
    if (m < 0 || n < 0 || k < 0) fatal("backend_gemm: negative size m=%d n=%d k=%d", m, n, k);
    // A row stride must cover a row: BLAS libraries would print their own complaint and skip the
    // call (OpenBLAS) or return an error code (cuBLAS), both worse than stopping here.
    int a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
    if (lda < (a_cols > 1 ? a_cols : 1) || ldb < (b_cols > 1 ? b_cols : 1) || ldc < (n > 1 ? n : 1))
        fatal("backend_gemm: row stride too small: lda=%d for %d columns, ldb=%d for %d, ldc=%d "
              "for %d", lda, a_cols, ldb, b_cols, ldc, n);
    int prof = be->timer ? be->timer->begin(be) : -1; // timed while profile.h collects
#ifdef DFLASH_HAVE_CUDA
    if (be->kind == BACKEND_CUDA) cuda_gemm(be, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ab_dt, c_dt);
    else
#endif
        cpu_gemm(be, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ab_dt, c_dt);
    if (be->timer) be->timer->end(be, prof, __func__, 2.0 * m * n * k);
}

// pinned host memory and async copies (backend.h): on the CPU plain memory, copies at the call and
// events that are always complete (a byte each, so that every event is a distinct pointer to free)

void *backend_host_alloc(backend *be, size_t bytes) {
#ifdef DFLASH_HAVE_CUDA
    if (be->kind == BACKEND_CUDA) return cuda_host_alloc(be, bytes, 1);
#endif
    return cpu_alloc(be, bytes);
}

void *backend_host_try_pin(backend *be, size_t bytes) {
#ifdef DFLASH_HAVE_CUDA
    if (be->kind == BACKEND_CUDA) return cuda_host_alloc(be, bytes, 0);
#endif
    return cpu_alloc(be, bytes);
}

int backend_host_pinned(backend *be, const void *p) {
#ifdef DFLASH_HAVE_CUDA
    if (be->kind == BACKEND_CUDA) return p && cuda_host_pinned(p);
#endif
    (void)be, (void)p;
    return 0;
}

size_t backend_host_bytes(const backend *be, size_t bytes) {
    return be->kind == BACKEND_CUDA && bytes <= SIZE_MAX - BACKEND_HOST_HDR ? bytes + BACKEND_HOST_HDR : be->kind == BACKEND_CUDA ? SIZE_MAX : 0;
}

void backend_host_warn(const char *what, size_t pageable, size_t wanted, const char *after) {
    static int warned; // once per process (the ranks are processes: each says its own)
    char a[32], b[32];
    if (warned++) {
        log_info("also not pinned: %s of %s (%s)", bytes_format(pageable, a, sizeof a), what, after);
        return;
    }
    log_warn("the system refused to pin %s of %s (of %s; page-locked host memory is limited by `ulimit -l` and the "
             "container's memlock limit): %s; raise `ulimit -l` or pin less (fewer buffers: "
             "transport.slots; --preflight checks it)", bytes_format(pageable, a, sizeof a), what,
             bytes_format(wanted, b, sizeof b), after);
}

void backend_host_free(backend *be, void *p) {
    ON_CUDA(be, cuda_host_free(be, p));
    cpu_free(be, p);
}

void backend_copy_async(backend *be, int stream, void *dst, const void *src, size_t bytes) {
    ON_CUDA(be, cuda_copy_async(be, stream, dst, src, bytes));
    if (bytes) memcpy(dst, src, bytes);
}

void *backend_event_new(backend *be) {
#ifdef DFLASH_HAVE_CUDA
    if (be->kind == BACKEND_CUDA) return cuda_event_new(be);
#endif
    return xcalloc(1, 1);
}

void backend_event_free(backend *be, void *ev) {
    ON_CUDA(be, cuda_event_free(be, ev));
    free(ev);
}

void backend_event_record(backend *be, void *ev, int stream) {
    ON_CUDA(be, cuda_event_record(be, ev, stream));
}

int backend_event_done(backend *be, void *ev) {
#ifdef DFLASH_HAVE_CUDA
    if (be->kind == BACKEND_CUDA) return cuda_event_done(be, ev);
#endif
    (void)ev;
    return 1;
}

void backend_event_sync(backend *be, void *ev) {
    ON_CUDA(be, cuda_event_sync(be, ev));
}

void backend_stream_wait(backend *be, void *ev) {
    ON_CUDA(be, cuda_stream_wait(be, ev));
}
