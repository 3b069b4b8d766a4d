// transport_test.c: see transport_test.h.
#include "common/comm/transport_test.h"
#include "common/core/config.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/comm/msg.h"
#include "common/comm/nccl_reduce.h"
#include "common/comm/payload_link.h"
#include "common/comm/protocol.h"
#include "common/comm/transport_test_cuda.h"
#include "common/comm/watchdog.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/log.h"

// The sizes of a table, in elements of 4 bytes: 256 (1 KiB) by factors of 4 up to max_bytes, then
// max_bytes itself when it is not one of them (rounded down to whole elements); 0 after the last.
static uint64_t tt_next(uint64_t n, long long max_bytes) {
    uint64_t last = (uint64_t)max_bytes / 4;
    return n >= last ? 0 : n * 4 <= last ? n * 4 : last;
}

// The iterations of a size: a size above 256 MiB once (its bandwidth is steady; the time is not).
static int tt_iters(uint64_t n, int iterations) { return n * 4 > ((uint64_t)256 << 20) ? 1 : iterations; }

// One size over one transport: every teacher sends n elements to every student `iterations` times.
// A transport of host messages only: buf is host memory, filled and checked on the CPU, sent as a
// host message. One of device blocks: buf is GPU memory, filled and checked by kernels, sent as a
// device block.
static long long tt_round(const world *w, payload_link *link, uint32_t *buf, uint64_t n, int iterations) {
    long long wrong = 0;
    int dev = payload_link_device(link);
    for (int it = 0; it < iterations; it++) {
        if (w->role == ROLE_TEACHER) {
            if (dev) tt_fill_cuda(buf, n, w->rank, it);
            if (!dev)
                for (uint64_t i = 0; i < n; i++) buf[i] = tt_value(w->rank, it, i);
            for (int s = 0; s < w->students; s++) {
                // every wait of the test under the watchdog: a stopped peer ends it within the timeout
                watchdog_wait_begin(w->teachers + s, w->teachers + s, 1, "a student to take a transport-test payload");
                if (!dev) {
                    payload_link_send(link, w->teachers + s, TAG_TRANSPORT_TEST, buf, size_mul(n, 4));
                    watchdog_wait_end();
                    continue;
                }
                payload_ticket tk = {0};
                if (payload_link_post_send_dev(link, w->teachers + s, buf, n * 4, &tk) || payload_link_wait(&tk))
                    fatal("transport-test: %s", error_msg());
                watchdog_wait_end();
                payload_link_ticket_free(&tk);
            }
        } else {
            for (int t = 0; t < w->teachers; t++) {
                if (!dev) {
                    watchdog_wait_begin(t, t, 1, "a transport-test payload");
                    size_t got = payload_link_recv(link, t, TAG_TRANSPORT_TEST, buf, size_mul(n, 4), NULL);
                    watchdog_wait_end();
                    if (got != n * 4) fatal("transport-test: %zu bytes from rank %d, want %llu", got, t, (unsigned long long)n * 4);
                    for (uint64_t i = 0; i < n; i++) wrong += buf[i] != tt_value(t, it, i);
                    continue;
                }
                payload_ticket tk = {0};
                watchdog_wait_begin(t, t, 1, "a transport-test payload");
                if (payload_link_post_recv_dev(link, t, buf, n * 4, &tk) || payload_link_wait(&tk))
                    fatal("transport-test: %s", error_msg());
                watchdog_wait_end();
                payload_link_ticket_free(&tk);
                wrong += tt_check_cuda(buf, n, t, it);
            }
        }
    }
    return wrong;
}

// One table: every size from 1 KiB up to max_bytes by factors of 4.
static long long tt_path(const world *w, payload_link *link, const char *title, uint32_t *buf, int iterations,
                         long long max_bytes) {
    long long wrong_total = 0;
    int reporter = w->rank == w->teachers; // the first student
    if (reporter)
        printf("%s\n%12s %8s %12s %10s %10s\n", title, "bytes", "iters", "time_ms", "GB/s", "#wrong");
    for (uint64_t n = 256; n > 0; n = tt_next(n, max_bytes)) {
        watchdog_barrier("the other ranks to start a transport-test size");
        double t0 = time_now();
        int its = tt_iters(n, iterations);
        long long wrong = tt_round(w, link, buf, n, its);
        double el = time_now() - t0;
        watchdog_allreduce(&wrong, 1, MPI_LONG_LONG, MPI_SUM, "the other ranks' transport-test checks");
        wrong_total += wrong;
        // bytes moved into this student: every teacher's payload each iteration (checking included)
        double bytes = (double)n * 4 * w->teachers * its;
        if (reporter)
            printf("%12llu %8d %12.2f %10.3f %10lld\n", (unsigned long long)n * 4, its, 1e3 * el,
                   el > 0 ? bytes / el / 1e9 : 0, wrong);
    }
    return wrong_total;
}

// One all-reduce table: every size from 1 KiB up to max_bytes by factors of 4, `iterations` fp32
// sums over all ranks of the job, each of a freshly filled buffer, timed alone (the fill and the
// check outside the clock) and checked element by element. Host path (r == NULL): MPI_Allreduce in
// place on host memory. NCCL path: buf is GPU memory, filled, summed and checked on the GPU.
// Bandwidths as nccl-tests' all_reduce_perf: algbw = bytes / time, busbw = algbw * 2(n-1)/n.
static long long tt_sum_path(const world *w, nccl_reduce *r, float *buf, int iterations, long long max_bytes) {
    long long wrong_total = 0;
    int reporter = w->rank == w->teachers; // the first student, as for the payload tables
    if (reporter)
        printf("%s all-reduce, fp32 sum over all %d ranks, %s (GB/s: algbw = bytes/time, busbw = algbw*2(n-1)/n)\n"
               "%12s %8s %12s %10s %10s %10s\n", r ? "NCCL" : "MPI", w->size, r ? "GPU memory" : "host memory", "bytes",
               "iters", "time_us", "algbw", "busbw", "#wrong");
    for (uint64_t n = 256; n > 0; n = tt_next(n, max_bytes)) {
        long long wrong = 0;
        double el = 0;
        int its = tt_iters(n, iterations);
        for (int it = 0; it < its; it++) {
            if (r) tt_sum_fill_cuda(buf, n, w->rank, it);
            if (!r)
                for (uint64_t i = 0; i < n; i++) buf[i] = tt_sum_value(w->rank, it, i);
            watchdog_barrier("the other ranks to start a transport-test all-reduce");
            double t0 = time_now();
            watchdog_wait_begin(0, w->size - 1, 1, "the transport-test all-reduce");
            if (r && (nccl_reduce_sum_f32(r, buf, n) || nccl_reduce_sync(r))) fatal("transport-test: %s", error_msg());
            if (!r) msg_allreduce(buf, (int64_t)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            watchdog_wait_end();
            el += time_now() - t0;
            if (r) wrong += tt_sum_check_cuda(buf, n, w->size, it);
            if (!r)
                for (uint64_t i = 0; i < n; i++) wrong += buf[i] != tt_sum_expected(w->size, it, i);
        }
        watchdog_allreduce(&wrong, 1, MPI_LONG_LONG, MPI_SUM, "the other ranks' transport-test checks");
        watchdog_allreduce(&el, 1, MPI_DOUBLE, MPI_MAX, "the other ranks' transport-test times"); // the slowest rank's
        wrong_total += wrong;
        double t = el / its, algbw = t > 0 ? (double)n * 4 / t / 1e9 : 0;
        if (reporter)
            printf("%12llu %8d %12.1f %10.3f %10.3f %10lld\n", (unsigned long long)n * 4, its, 1e6 * t, algbw,
                   algbw * 2.0 * (w->size - 1) / w->size, wrong);
    }
    return wrong_total;
}

long long transport_test_run(const world *w, backend *be, int iterations, long long max_bytes) {
    for (int r = 0; r < w->size; r++) watchdog_watch(r, 1); // a peer on this host that dies is seen at once
    // Every transport of the registry in its order (collective: each opens on every rank or on none).
    long long wrong = 0;
    char why[256] = "";
    for (int i = 0; i < payload_link_kinds(); i++) {
        payload_link *link = NULL;
        if (payload_link_open(&link, payload_link_kind(i), w, be->caps.device_links ? be->device_id : -1, why, sizeof why))
            return -1;
        if (!link) {
            if (w->rank == w->teachers) printf("%s path: not used (%s)\n", payload_link_kind_label(i), why);
            continue;
        }
        int dev = payload_link_device(link);
        uint32_t *buf = dev ? backend_alloc(be, (size_t)max_bytes) : xmalloc((size_t)max_bytes);
        if (!buf) fatal("transport-test: %s", error_msg());
        wrong += tt_path(w, link, payload_link_title(link), buf, iterations, max_bytes);
        if (dev) backend_free(be, buf);
        else free(buf);
        payload_link_close(link);
    }
    // The all-reduce over all ranks: MPI from host memory, then NCCL when every rank has its own GPU.
    float *sums = xmalloc((size_t)max_bytes);
    wrong += tt_sum_path(w, NULL, sums, iterations, max_bytes);
    free(sums);
    nccl_reduce *r = NULL;
    if (nccl_reduce_open(&r, MPI_COMM_WORLD, be->caps.device_links ? be->device_id : -1, why, sizeof why)) return -1;
    if (r) {
        float *dev = backend_alloc(be, (size_t)max_bytes);
        if (!dev) fatal("transport-test: %s", error_msg());
        wrong += tt_sum_path(w, r, dev, iterations, max_bytes);
        backend_free(be, dev);
        nccl_reduce_close(r, 0);
    } else if (w->rank == w->teachers) {
        printf("NCCL all-reduce: not used (%s)\n", why);
    }
    if (w->rank == w->teachers) {
        printf("transport-test: %s (%lld wrong elements)\n", wrong ? "FAILED" : "all payloads intact", wrong);
        fflush(stdout);
    }
    return wrong;
}

// Settings: the keys of --mode transport-test (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key transport_test_keys[] = {
    {"transport.test_bytes", CFG_BYTES, CONFIG_F(transport_test_bytes), "64MiB", "--mode transport-test: the largest payload and all-reduce of its tables (sizes from 1 KiB by factors of 4, then this one); above 2 GiB it checks the messages that need 64-bit counts", NULL, 1024, 1e15},
};
const config_key_set transport_test_settings = CONFIG_KEY_SET(transport_test_keys, NULL);
