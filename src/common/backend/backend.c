// backend.c: picks a backend, fills its capabilities, and forwards every call to its table
// (backend.h, backend_ops.h).
//
// The CPU backend lives in backend_cpu.c, the CUDA one in backend_cuda.cu (CUDA builds only; the
// others compile backend_nocuda.c, which has no device). Argument checks that do not depend on the
// device are done here, once.
#include "common/backend/backend.h"
#include "common/core/config.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend_cpu.h"
#include "common/backend/backend_cuda.h"
#include "common/backend/backend_ops.h"
#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/log.h"

// backend_cpu_ops (backend_cpu.c) and backend_cuda_ops (backend_cuda.cu, CUDA builds only)
extern const backend_ops backend_cpu_ops;

// caps_fill: what every backend of the kind offers (backend_caps); backend_cuda.cu's open adds the
// device's own (its compute capability, shared memory, memory). The rates are the planners'
// (memory_plan.c). CPU: fp32 everywhere, about 100 GFLOP/s per thread for large GEMMs (half of it
// at 40 rows), the attention loops 8 GFLOP/s per thread, the loss scan 1e9 logits/s per thread, an
// op's fixed cost (OpenMP fan-out) 10 us. CUDA (bf16 tensor cores, H100/H200 class): 400 TFLOP/s,
// half of it at 128 rows; attention 100 TFLOP/s; the scan 5e11 logits/s; 8 us per op.
static void caps_fill(backend_caps *c, int cuda, int threads) {
    double t = threads > 0 ? threads : 1;
    if (!cuda) {
        c->act_dtype = DT_F32;
        c->rate_gemm = 100e9 * t, c->rate_gemm_half_rows = 40, c->rate_attn = 8e9 * t;
        c->rate_scan = 1e9 * t, c->rate_op = 10e-6;
        return;
    }
    c->device = c->pinned_transfers = c->device_links = 1;
    c->act_dtype = DT_BF16;
    c->compute_weight_bytes = 2;
    c->library_workspace = CUDA_CUBLAS_WORKSPACE_BYTES;
    c->rate_gemm = 400e12, c->rate_gemm_half_rows = 128, c->rate_attn = 100e12, c->rate_scan = 5e11, c->rate_op = 8e-6;
}

int backend_describe(backend *be, const char *kind, int threads) {
    memset(be, 0, sizeof *be);
    int cuda = strcmp(kind, "cuda") == 0;
    if (!cuda && strcmp(kind, "cpu") != 0) return error_set("unknown backend '%s' (expected cpu or cuda)", kind);
    be->kind = cuda ? BACKEND_CUDA : BACKEND_CPU;
    be->device = cuda ? DEVICE_CUDA : DEVICE_CPU;
    be->threads = threads;
    caps_fill(&be->caps, cuda, threads);
    // the table answers the op families' sizing questions (work buffers); a build without CUDA has
    // no CUDA table and plans a GPU with the CPU's sizes, as it always has
    be->ops = cuda && cuda_ops() ? cuda_ops() : &backend_cpu_ops;
    snprintf(be->name, sizeof be->name, "%s (described, not opened)", kind);
    return 0;
}

int backend_cuda_devices(void) {
    const char *why = NULL;
    return cuda_device_count(&why);
}

static int open_cpu(backend *be) {
    if (cpu_open(be)) return -1;
    be->ops = &backend_cpu_ops;
    caps_fill(&be->caps, 0, be->threads);
    return 0;
}

int backend_open(backend *be, const char *want, int local_rank) {
    memset(be, 0, sizeof *be);
    if (strcmp(want, "cpu") == 0) return open_cpu(be);
    if (strcmp(want, "auto") != 0 && strcmp(want, "cuda") != 0)
        return error_set("unknown backend '%s' (expected auto, cpu or cuda)", want);

    const char *why = "";
    int count = cuda_device_count(&why);
    if (count == 0) {
        if (strcmp(want, "cuda") == 0) {
            if (!backend_compiled_cuda())
                return error_set("backend 'cuda' requested, but this binary was built without CUDA "
                                 "(rebuild with nvcc on PATH, or use --backend cpu)");
            return error_set("backend 'cuda' requested, but no CUDA device is usable: %s", why);
        }
        log_info("backend: using the CPU (%s)", why);
        return open_cpu(be);
    }
    if (cuda_open(be, local_rank) != 0) return -1;
    caps_fill(&be->caps, 1, 1);
    // Host-side helpers (conversions, the data loader) still use OpenMP threads.
    be->threads = omp_get_max_threads();
    return 0;
}

int backend_table_missing(const backend *be, const char *table) {
    fatal("backend %s has no %s ops", be->ops ? be->ops->name : "(not opened)", table);
    return 0;
}

void backend_close(backend *be) {
    if (be->ops) be->ops->close(be);
}

void *backend_alloc(backend *be, size_t bytes) { return be->ops->alloc(be, bytes); }

void backend_free(backend *be, void *p) { be->ops->free(be, p); }

void backend_copy_to_device(backend *be, void *dst, const void *src_host, size_t bytes) {
    be->ops->copy_to_device(be, dst, src_host, bytes);
}

void backend_copy_to_host(backend *be, void *dst_host, const void *src, size_t bytes) {
    be->ops->copy_to_host(be, dst_host, src, bytes);
}

void backend_memset_zero(backend *be, void *p, size_t bytes) { be->ops->memset_zero(be, p, bytes); }

void backend_sync(backend *be) { be->ops->sync(be); }

void backend_mem_info(backend *be, size_t *free_bytes, size_t *total_bytes) {
    be->ops->mem_info(be, free_bytes, total_bytes);
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
    be->ops->gemm(be, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ab_dt, c_dt);
    if (be->timer) be->timer->end(be, prof, __func__, 2.0 * m * n * k);
}

// pinned host memory and async copies (backend.h)

void *backend_host_alloc(backend *be, size_t bytes) { return be->ops->host_alloc(be, bytes, 1); }

void *backend_host_try_pin(backend *be, size_t bytes) { return be->ops->host_alloc(be, bytes, 0); }

int backend_host_pinned(backend *be, const void *p) { return be->ops->host_pinned(be, p); }

size_t backend_host_bytes(const backend *be, size_t bytes) {
    if (!be->caps.pinned_transfers) return 0;
    return bytes <= SIZE_MAX - BACKEND_HOST_HDR ? bytes + BACKEND_HOST_HDR : SIZE_MAX;
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

void backend_host_free(backend *be, void *p) { be->ops->host_free(be, p); }

void backend_copy_async(backend *be, int stream, void *dst, const void *src, size_t bytes) {
    be->ops->copy_async(be, stream, dst, src, bytes);
}

void *backend_event_new(backend *be) { return be->ops->event_new(be); }

void backend_event_free(backend *be, void *ev) { be->ops->event_free(be, ev); }

void backend_event_record(backend *be, void *ev, int stream) { be->ops->event_record(be, ev, stream); }

int backend_event_done(backend *be, void *ev) { return be->ops->event_done(be, ev); }

void backend_event_sync(backend *be, void *ev) { be->ops->event_sync(be, ev); }

void backend_stream_wait(backend *be, void *ev) { be->ops->stream_wait(be, ev); }

// Settings: the keys of the backend chosen (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key backend_keys[] = {
    {"run.device", CFG_STRING, CONFIG_F(device), "auto", "backend: auto (CUDA when a GPU is visible, else CPU), cpu or cuda", "auto|cpu|cuda", CONFIG_NOLIM},
};
const config_key_set backend_settings = CONFIG_KEY_SET(backend_keys, NULL);
