// payload_link_nccl.c: the "nccl" transport of payload_link.h: host messages over MPI (as "mpi"),
// device blocks GPU to GPU over NCCL (SPEC §8), in plain C; the NCCL and CUDA calls are
// nccl_link_cuda.h's. Builds without CUDA decline (nccl_cuda_available).
//
// One NCCL communicator over all ranks is split into one two-rank communicator per (teacher,
// student) pair (a teacher group's last stage, world.h) and per pair of neighbouring stages of a
// teacher group, each with its own CUDA stream on both sides: the transfers of different pairs
// never queue behind one another, and a pair's transfers arrive in the order they were sent. NCCL
// needs one GPU per rank, so the open first checks over MPI that no two ranks share a GPU (host and
// PCI bus id) and otherwise declines, leaving the payloads to "mpi".
//
// The communicators are made non-blocking and polled until run.rank_timeout
// (backend/nccl_setup_cuda.cuh): a peer that hangs during the set-up ends the job with one line
// naming the set-up and the ranks ("NCCL set-up of the payload links' communicator of ranks 0..2
// (init): no answer within run.rank_timeout 600 s: rank 1 or 2 is hung or unreachable"); a
// set-up that fails is aborted (ncclCommAbort) on every rank.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/gpu_info.h"
#include "common/comm/gpu_place.h"
#include "common/comm/nccl_link_cuda.h"
#include "common/comm/payload_link_mpi.h"
#include "common/comm/payload_link_ops.h"
#include "common/comm/watchdog.h"
#include "common/comm/world.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/log.h"

typedef struct {
    int rank, size;
    double timeout_s; // run.rank_timeout (0: none): the NCCL waits' limit
    void *all;        // the communicator of all ranks
    void **pair;      // [size]: the two-rank communicator with world rank r (NULL: none)
    void **stream;    // [size]
} nccl_links;

// abort = 0: every rank closes its links (each communicator finalized, under the timeout; aborted
// if that fails); 1: a set-up failed, the communicators are aborted (no peer waited for).
static void nccl_links_free(nccl_links *l, int abort) {
    if (!l) return;
    nccl_cuda_who who = {"NCCL: closing the payload links", NULL, 0, l->size - 1, l->rank, "run.rank_timeout ", l->timeout_s,
                         watchdog_stopped_peer};
    for (int r = 0; r < l->size; r++) // (a finalize that fails or times out: aborted, and said)
        if ((l->pair[r] || l->stream[r]) && nccl_cuda_destroy(l->pair[r], l->stream[r], abort, &who))
            log_warn("%s", error_msg());
    if (l->all && nccl_cuda_destroy(l->all, NULL, abort, &who)) log_warn("%s", error_msg());
    free(l->pair);
    free(l->stream);
    free(l);
}

static void nccl_close(void *impl) { nccl_links_free(impl, 0); }

static int nccl_open(void **impl, const world *w, int device, char *why, size_t n) {
    *impl = NULL;
    if (!nccl_cuda_available(why, n)) return 0;
    why[0] = '\0';
    if ((w->teachers == 0 || w->students == 0) && w->group_size <= 1) snprintf(why, n, "no teacher-student pair and no teacher group");
    gpu_place *all;
    int n_all;
    gpu_places_gather(MPI_COMM_WORLD, device, &all, &n_all); // (collective: every rank, whatever why says)
    if (!why[0]) gpu_places_decline(all, n_all, why, n);
    free(all);
    if (why[0]) return 0;

    // The id from rank 0 (its first byte after the id says whether making it worked).
    unsigned char id[GPU_NCCL_ID_BYTES + 1] = {0};
    if (w->rank == 0) id[GPU_NCCL_ID_BYTES] = gpu_nccl_unique_id(id) == 0;
    MPI_Request req;
    mpi_check(MPI_Ibcast(id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD, &req));
    watchdog_wait_all(&req, "rank 0's NCCL communicator id");
    if (!id[GPU_NCCL_ID_BYTES]) return error_set("NCCL: rank 0 could not make the communicator id");
    nccl_links *l = xcalloc(1, sizeof *l);
    l->rank = w->rank, l->size = w->size;
    l->timeout_s = watchdog_timeout();
    l->pair = xcalloc((size_t)w->size, sizeof(void *));
    l->stream = xcalloc((size_t)w->size, sizeof(void *));
    // NCCL's init and splits wait for every rank: polled until the rank timeout (a hung peer: this
    // rank ends the job, naming the set-up); the watchdog's wait (2 x) also covers a peer that dies
    char what[128];
    snprintf(what, sizeof what, "NCCL set-up of the payload links' communicator of ranks 0..%d", w->size - 1);
    nccl_cuda_who who = {what, NULL, 0, w->size - 1, w->rank, "run.rank_timeout ", l->timeout_s, watchdog_stopped_peer};
    nccl_cuda_test_hook(w->rank, "links");
    watchdog_wait_begin(0, w->size - 1, 2, "the NCCL set-up of the payload links (init)");
    int rc = nccl_cuda_init(&l->all, id, w->size, w->rank, device, &who);
    watchdog_wait_end();
    if (rc == NCCL_CUDA_TIMEOUT) { // a hung peer joins no agreement either: this rank ends the job
        nccl_links_free(l, 1);
        fatal("%s", error_msg());
    }
    if (rc) log_error("%s", error_msg());
    int bad = rc ? 1 : 0;
    watchdog_allreduce(&bad, 1, MPI_INT, MPI_MAX, "the other ranks to join the NCCL communicator");
    if (bad) {
        nccl_links_free(l, 1);
        return error_set("NCCL: a rank could not join the communicator of all ranks (its log says why)");
    }
    // One split per pair, in the same order on every rank (a split is collective over all ranks):
    // each teacher (the last stage of its group) with each student, then within each teacher group
    // each stage with the next.
    int G = w->group_size > 0 ? w->group_size : 1;
    nccl_cuda_test_hook(w->rank, "split");
    for (int p = 0; p < (w->teachers / G) * (w->students + G - 1) && !bad; p++) {
        int g = p / (w->students + G - 1), j = p % (w->students + G - 1), lo, hi;
        if (j < w->students) lo = g * G + G - 1, hi = w->teachers + j; // payloads: last stage -> student
        else lo = g * G + (j - w->students), hi = lo + 1;              // activations: stage -> next stage
        int member = w->rank == lo || w->rank == hi, peer = w->rank == lo ? hi : lo;
        void *pair = NULL, *stream = NULL;
        snprintf(what, sizeof what, "NCCL set-up of the payload link of ranks %d and %d", lo, hi);
        watchdog_wait_begin(0, w->size - 1, 2, "the NCCL set-up of the payload links (split)");
        rc = nccl_cuda_split(l->all, member, w->rank == hi, &pair, &stream, &who); // (collective: every rank)
        watchdog_wait_end();
        if (rc == NCCL_CUDA_TIMEOUT) {
            nccl_links_free(l, 1);
            fatal("%s", error_msg());
        }
        if (rc) log_error("%s", error_msg()), bad = 1;
        if (member) l->pair[peer] = pair, l->stream[peer] = stream;
    }
    watchdog_allreduce(&bad, 1, MPI_INT, MPI_MAX, "the other ranks to split the NCCL communicator");
    if (bad) {
        nccl_links_free(l, 1);
        return error_set("NCCL: splitting the teacher-student and stage-stage pairs failed (the failing rank's log says why)");
    }
    *impl = l;
    return 1;
}

static int nccl_send_dev(void *impl, int peer, const void *dev, size_t bytes, void **event) {
    nccl_links *l = impl;
    if (!l || peer < 0 || peer >= l->size || !l->pair[peer]) return error_set("NCCL: no link to rank %d", peer);
    if (nccl_cuda_send(l->pair[peer], l->stream[peer], dev, bytes, NULL, event, l->timeout_s))
        return error_prefix("NCCL send of %zu bytes to rank %d", bytes, peer);
    return 0;
}

static int nccl_recv_dev(void *impl, int peer, void *dev, size_t bytes, void **event) {
    nccl_links *l = impl;
    if (!l || peer < 0 || peer >= l->size || !l->pair[peer]) return error_set("NCCL: no link to rank %d", peer);
    if (nccl_cuda_recv(l->pair[peer], l->stream[peer], dev, bytes, event, l->timeout_s))
        return error_prefix("NCCL receive of %zu bytes from rank %d", bytes, peer);
    return 0;
}

static int nccl_event_done(void *event) { return nccl_cuda_event_query(event); }

static int nccl_event_wait(void *event) { return nccl_cuda_event_sync(event); }

static void nccl_event_free(void *event) { nccl_cuda_event_destroy(event); }

static int nccl_check(void *impl, char *msg, size_t n) {
    nccl_links *l = impl;
    if (!l) return 0;
    char why[384];
    for (int r = 0; r < l->size; r++)
        if (l->pair[r] && nccl_cuda_async_error(l->pair[r], why, sizeof why)) {
            snprintf(msg, n, "NCCL link with rank %d failed: %s", r, why);
            return 1;
        }
    if (l->all && nccl_cuda_async_error(l->all, why, sizeof why)) {
        snprintf(msg, n, "NCCL communicator of all ranks failed: %s", why);
        return 1;
    }
    return 0;
}

const payload_link_ops payload_link_nccl_ops = {
    .name = "nccl",
    .label = "NCCL",
    .title = "NCCL, GPU memory to GPU memory",
    .says = "features over NCCL, GPU to GPU; tokens, top-k and LSE over MPI",
    .device = 1,
    .open = nccl_open,
    .close = nccl_close,
    .post_send = payload_link_mpi_post_send,
    .post_recv = payload_link_mpi_post_recv,
    .send_dev = nccl_send_dev,
    .recv_dev = nccl_recv_dev,
    .event_done = nccl_event_done,
    .event_wait = nccl_event_wait,
    .event_free = nccl_event_free,
    .check = nccl_check,
};
