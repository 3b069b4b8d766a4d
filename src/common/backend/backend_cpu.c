// backend_cpu.c: the CPU backend — host memory, OpenBLAS sgemm (gemm_rows.h for a few rows), OpenMP threads
// (see backend.h).
//
// It is the fp32 reference every other backend is tested against, so it does nothing clever.
#include "common/backend/backend_cpu.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/core/check.h"
#include "common/backend/backend_ops.h"
#include "common/backend/gemm_rows.h"
#include "common/core/error.h"

int cpu_open(backend *be) {
    memset(be, 0, sizeof *be);
    be->kind = BACKEND_CPU;
    be->device = DEVICE_CPU;
    be->device_id = 0;
    // OpenBLAS may run its own thread pool (the pthreads build): give it the same thread count as
    // OpenMP (OMP_NUM_THREADS, or the cores) so the two never disagree.
    be->threads = omp_get_max_threads();
    openblas_set_num_threads(be->threads);
    snprintf(be->name, sizeof be->name, "cpu (%d thread%s)", be->threads, be->threads == 1 ? "" : "s");
    return 0;
}

void cpu_close(backend *be) { (void)be; }

void *cpu_alloc(backend *be, size_t bytes) {
    // aligned_alloc wants a size that is a multiple of the alignment; 0 bytes still gets a block
    void *p = NULL;
    if (bytes <= SIZE_MAX - 256) {
        size_t size = (bytes + 255) & ~(size_t)255;
        p = aligned_alloc(256, size ? size : 256);
    }
    if (!p) error_set("out of host memory allocating %zu bytes", bytes);
    return p;
}

void cpu_free(backend *be, void *p) { free(p); }

// Free = MemAvailable (what can be allocated without swapping, page cache included), which is
// what a memory budget should be compared with; sysconf's free pages exclude the reclaimable cache.
void cpu_mem_info(backend *be, size_t *free_bytes, size_t *total_bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t total = (size_t)sysconf(_SC_PHYS_PAGES) * page;
    size_t avail = (size_t)sysconf(_SC_AVPHYS_PAGES) * page;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                avail = (size_t)kb * 1024;
                break;
            }
        }
        fclose(f);
    }
    if (free_bytes) *free_bytes = avail;
    if (total_bytes) *total_bytes = total;
}

void cpu_gemm(backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha, const void *a,
              int lda, const void *b, int ldb, float beta, void *c, int ldc, dtype ab_dt, dtype c_dt) {
    if (ab_dt != DT_F32 || c_dt != DT_F32)
        fatal("backend_gemm on the CPU needs F32 operands, got A/B %s and C %s", dtype_name(ab_dt),
              dtype_name(c_dt));
    // sizes and strides were checked by backend_gemm
    if (m == 0 || n == 0) return;
    // a few rows times a weight matrix (the decode's step): without OpenBLAS's packing of B
    if (!trans_a && trans_b && gemm_rows(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// the rest of backend.h on the CPU: plain memory, copies at the call, events that are always
// complete (a byte each, so that every event is a distinct pointer to free)

static void cpu_copy_to_device(backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memcpy(dst, src, bytes);
}
static void cpu_copy_to_host(backend *be, void *dst, const void *src, size_t bytes) {
    cpu_copy_to_device(be, dst, src, bytes); // host to host either way
}
static void cpu_memset_zero(backend *be, void *p, size_t bytes) {
    (void)be;
    if (bytes) memset(p, 0, bytes);
}
static void cpu_sync(backend *be) { (void)be; } // CPU work is synchronous: nothing to wait for
static void *cpu_host_alloc(backend *be, size_t bytes, int fallback) {
    (void)fallback;
    return cpu_alloc(be, bytes);
}
static int cpu_host_pinned(backend *be, const void *p) { return (void)be, (void)p, 0; }
static void cpu_host_free(backend *be, void *p) { cpu_free(be, p); } // cpu_host_alloc's blocks are cpu_alloc's
static void cpu_copy_async(backend *be, int stream, void *dst, const void *src, size_t bytes) {
    (void)stream;
    cpu_copy_to_device(be, dst, src, bytes);
}
static void *cpu_event_new(backend *be) { return (void)be, xcalloc(1, 1); }
static void cpu_event_free(backend *be, void *ev) { (void)be, free(ev); }
static void cpu_event_record(backend *be, void *ev, int stream) { (void)be, (void)ev, (void)stream; }
static int cpu_event_done(backend *be, void *ev) { return (void)be, (void)ev, 1; }
static void cpu_event_sync(backend *be, void *ev) { (void)be, (void)ev; }
static void cpu_stream_wait(backend *be, void *ev) { cpu_event_sync(be, ev); } // every event is complete

// each op family's CPU table (foo_cpu.c: foo_kernels_cpu)
BACKEND_OP_FAMILIES(BACKEND_TABLE_DECLARE, cpu)

// no timers: the CPU's work is synchronous, the host clock times it
const backend_ops backend_cpu_ops = {
    .name = "cpu", BACKEND_OPS(OP_FILL, cpu_) BACKEND_OP_FAMILIES(BACKEND_TABLE_FILL, cpu)};
