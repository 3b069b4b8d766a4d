// transport_test.c: see transport_test.h.
#include "common/comm/transport_test.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/comm/nccl_link.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/log.h"
#ifdef DFLASH_HAVE_CUDA
#include "common/comm/transport_test_cuda.h"
#endif

#define TAG_TT 201

// One size over one path: every teacher sends n elements to every student `iterations` times.
// Host path: buf is host memory, filled and checked on the CPU. NCCL path (links != NULL): buf is
// GPU memory, filled and checked by kernels.
static long long tt_round(const world *w, nccl_links *links, uint32_t *buf, uint64_t n, int iterations) {
    long long wrong = 0;
    for (int it = 0; it < iterations; it++) {
        if (w->role == ROLE_TEACHER) {
#ifdef DFLASH_HAVE_CUDA
            if (links) tt_fill_cuda(buf, n, w->rank, it);
#endif
            if (!links)
                for (uint64_t i = 0; i < n; i++) buf[i] = tt_value(w->rank, it, i);
            for (int s = 0; s < w->students; s++) {
                if (!links) {
                    mpi_check(MPI_Send(buf, (int)n, MPI_UINT32_T, w->teachers + s, TAG_TT, MPI_COMM_WORLD));
                    continue;
                }
                nccl_ticket tk = {0};
                if (nccl_link_send(links, w->teachers + s, buf, n * 4, NULL, &tk) || nccl_ticket_wait(&tk))
                    fatal("transport-test: %s", error_msg());
                nccl_ticket_free(&tk);
            }
        } else {
            for (int t = 0; t < w->teachers; t++) {
                if (!links) {
                    mpi_check(MPI_Recv(buf, (int)n, MPI_UINT32_T, t, TAG_TT, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                    for (uint64_t i = 0; i < n; i++) wrong += buf[i] != tt_value(t, it, i);
                    continue;
                }
#ifdef DFLASH_HAVE_CUDA
                nccl_ticket tk = {0};
                if (nccl_link_recv(links, t, buf, n * 4, &tk) || nccl_ticket_wait(&tk))
                    fatal("transport-test: %s", error_msg());
                nccl_ticket_free(&tk);
                wrong += tt_check_cuda(buf, n, t, it);
#endif
            }
        }
    }
    return wrong;
}

// One table: every size from 1 KiB up to max_bytes by factors of 4.
static long long tt_path(const world *w, nccl_links *links, uint32_t *buf, int iterations, long long max_bytes) {
    long long wrong_total = 0;
    int reporter = w->rank == w->teachers; // the first student
    if (reporter)
        printf("%s\n%12s %8s %12s %10s %10s\n", links ? "NCCL, GPU memory to GPU memory" : "MPI, host memory", "bytes",
               "iters", "time_ms", "GB/s", "#wrong");
    for (uint64_t n = 256; n <= (uint64_t)max_bytes / 4; n *= 4) {
        mpi_check(MPI_Barrier(MPI_COMM_WORLD));
        double t0 = time_now();
        long long wrong = tt_round(w, links, buf, n, iterations);
        double el = time_now() - t0;
        mpi_check(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
        wrong_total += wrong;
        // bytes moved into this student: every teacher's payload each iteration (checking included)
        double bytes = (double)n * 4 * w->teachers * iterations;
        if (reporter)
            printf("%12llu %8d %12.2f %10.3f %10lld\n", (unsigned long long)n * 4, iterations, 1e3 * el,
                   el > 0 ? bytes / el / 1e9 : 0, wrong);
    }
    return wrong_total;
}

long long transport_test_run(const world *w, backend *be, int iterations, long long max_bytes) {
    uint32_t *host = xmalloc((size_t)max_bytes);
    long long wrong = tt_path(w, NULL, host, iterations, max_bytes);
    free(host);
    nccl_links *links = NULL;
    char why[256] = "";
    if (nccl_links_open(&links, w, be->kind == BACKEND_CUDA ? be->device_id : -1, why, sizeof why)) return -1;
    if (links) {
        uint32_t *dev = backend_alloc(be, (size_t)max_bytes);
        wrong += tt_path(w, links, dev, iterations, max_bytes);
        backend_free(be, dev);
        nccl_links_close(links);
    } else if (w->rank == w->teachers) {
        printf("NCCL path: not used (%s)\n", why);
    }
    if (w->rank == w->teachers) {
        printf("transport-test: %s (%lld wrong elements)\n", wrong ? "FAILED" : "all payloads intact", wrong);
        fflush(stdout);
    }
    return wrong;
}
