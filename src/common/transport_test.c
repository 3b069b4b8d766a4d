// transport_test.c: see transport_test.h.
#include "common/transport_test.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/check.h"
#include "common/log.h"

#define TAG_TT 201

// The value of element i of the payload teacher t sends in iteration it: a cheap hash, so a
// dropped, duplicated or shifted element is caught.
static uint32_t tt_value(int t, int it, uint64_t i) {
    uint64_t x = ((uint64_t)t << 48) ^ ((uint64_t)it << 32) ^ i;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (uint32_t)x;
}

long long transport_test_run(const world *w, int iterations, long long max_bytes) {
    uint64_t max_n = (uint64_t)max_bytes / 4;
    uint32_t *buf = xmalloc((size_t)max_n * 4);
    long long wrong_total = 0;
    if (w->rank == w->teachers) // the first student reports
        printf("%12s %8s %12s %10s %10s\n", "bytes", "iters", "time_ms", "GB/s", "#wrong");
    for (uint64_t n = 256; n <= max_n; n *= 4) {
        long long wrong = 0;
        mpi_check(MPI_Barrier(MPI_COMM_WORLD));
        double t0 = time_now();
        for (int it = 0; it < iterations; it++) {
            if (w->role == ROLE_TEACHER) {
                for (uint64_t i = 0; i < n; i++) buf[i] = tt_value(w->rank, it, i);
                for (int s = 0; s < w->students; s++)
                    mpi_check(MPI_Send(buf, (int)n, MPI_UINT32_T, w->teachers + s, TAG_TT, MPI_COMM_WORLD));
            } else {
                for (int t = 0; t < w->teachers; t++) {
                    mpi_check(MPI_Recv(buf, (int)n, MPI_UINT32_T, t, TAG_TT, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                    for (uint64_t i = 0; i < n; i++) wrong += buf[i] != tt_value(t, it, i);
                }
            }
        }
        double el = time_now() - t0;
        mpi_check(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
        wrong_total += wrong;
        // bytes moved into this student: every teacher's payload each iteration (checking included)
        double bytes = (double)n * 4 * w->teachers * iterations;
        if (w->rank == w->teachers)
            printf("%12llu %8d %12.2f %10.3f %10lld\n", (unsigned long long)n * 4, iterations, 1e3 * el,
                   el > 0 ? bytes / el / 1e9 : 0, wrong);
    }
    if (w->rank == w->teachers) {
        printf("transport-test: %s (%lld wrong elements)\n", wrong_total ? "FAILED" : "all payloads intact", wrong_total);
        fflush(stdout);
    }
    free(buf);
    return wrong_total;
}
