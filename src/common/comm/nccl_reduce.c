// nccl_reduce.c: nccl_reduce_open's decision and set-up over MPI, and the calls of
// nccl_reduce_cuda.h (see nccl_reduce.h). Builds without CUDA decline (nccl_cuda_available).
#include "common/comm/nccl_reduce.h"
#include "common/core/config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/gpu_info.h"
#include "common/comm/gpu_place.h"
#include "common/comm/nccl_link_cuda.h"
#include "common/comm/nccl_reduce_cuda.h"
#include "common/comm/watchdog.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/log.h"

struct nccl_reduce {
    nccl_reduce_cuda c;
    int nranks;
};

// The open communicators, for nccl_reduce_check on the watchdog thread.
#define NR_MAX_OPEN 8
static pthread_mutex_t nr_mu = PTHREAD_MUTEX_INITIALIZER;
static nccl_reduce *nr_open[NR_MAX_OPEN];

static void nr_register(nccl_reduce *r, int on) {
    pthread_mutex_lock(&nr_mu);
    for (int i = 0; i < NR_MAX_OPEN; i++)
        if (on ? nr_open[i] == NULL : nr_open[i] == r) {
            nr_open[i] = on ? r : NULL;
            break;
        }
    pthread_mutex_unlock(&nr_mu);
}

int nccl_reduce_open(nccl_reduce **out, MPI_Comm comm, int device, char *why, size_t n) {
    *out = NULL;
    if (!nccl_cuda_available(why, n)) return 0;
    int rank = 0, size = 0;
    mpi_check(MPI_Comm_rank(comm, &rank));
    mpi_check(MPI_Comm_size(comm, &size));
    gpu_place *all;
    int n_all;
    gpu_places_gather(comm, device, &all, &n_all);
    gpu_places_decline(all, n_all, why, n);
    int first = all[0].world_rank, last = all[n_all - 1].world_rank, me = all[rank].world_rank; // (the students: in order)
    free(all);
    if (why[0]) return 0;

    // The id from the first rank (the byte after it says whether making it worked).
    unsigned char id[GPU_NCCL_ID_BYTES + 1] = {0};
    if (rank == 0) id[GPU_NCCL_ID_BYTES] = gpu_nccl_unique_id(id) == 0;
    MPI_Request req;
    mpi_check(MPI_Ibcast(id, (int)sizeof id, MPI_BYTE, 0, comm, &req));
    watchdog_wait_all(&req, "the first rank's NCCL all-reduce id");
    if (!id[GPU_NCCL_ID_BYTES]) return error_set("NCCL all-reduce: the first rank could not make the communicator id");
    nccl_reduce *r = xcalloc(1, sizeof *r);
    r->nranks = size;
    int bad = 0;
    // NCCL's init waits for every rank: non-blocking, polled until the rank timeout (a hung peer ends
    // the job with the line naming this set-up); the watchdog's wait (2 x) covers a peer that dies
    char what[128];
    snprintf(what, sizeof what, "NCCL set-up of the all-reduce's communicator of ranks %d..%d", first, last);
    nccl_cuda_who who = {what, NULL, first, last, me, "run.rank_timeout ", watchdog_timeout(), watchdog_stopped_peer};
    nccl_cuda_test_hook(me, "reduce");
    watchdog_wait_begin(first, last, 2, "the NCCL set-up of the all-reduce (init)");
    int failed = nccl_reduce_cuda_init(&r->c, id, size, rank, device, &who);
    watchdog_wait_end();
    if (failed == NCCL_CUDA_TIMEOUT) { // a hung peer joins no agreement either: this rank ends the job
        nccl_reduce_cuda_destroy(&r->c, 1);
        fatal("%s", error_msg());
    }
    if (failed) {
        log_error("NCCL all-reduce: %s", error_msg());
        bad = 1;
    }
    mpi_check(MPI_Iallreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, comm, &req));
    watchdog_wait_all(&req, "the other ranks to join the NCCL all-reduce");
    if (bad) {
        nccl_reduce_cuda_destroy(&r->c, 1);
        free(r);
        return error_set("NCCL all-reduce: a rank could not join the communicator (its log says why)");
    }
    nr_register(r, 1);
    *out = r;
    return 0;
}

int nccl_reduce_after(nccl_reduce *r, backend *be) {
    if (nccl_reduce_cuda_after(&r->c, be)) return error_prefix("NCCL all-reduce: waiting for the backend");
    return 0;
}

int nccl_reduce_group(nccl_reduce *r, int begin) { return nccl_reduce_cuda_group(&r->c, begin); }

int nccl_reduce_sum_f32(nccl_reduce *r, float *dev, size_t count) {
    if (nccl_reduce_cuda_sum_f32(&r->c, dev, count))
        return error_prefix("NCCL all-reduce of %zu floats over %d ranks", count, r->nranks);
    return 0;
}

int nccl_reduce_join(nccl_reduce *r, backend *be) {
    if (nccl_reduce_cuda_join(&r->c, be)) return error_prefix("NCCL all-reduce: the backend waiting for it");
    return 0;
}

int nccl_reduce_sync(nccl_reduce *r) {
    if (nccl_reduce_cuda_sync(&r->c)) return error_prefix("NCCL all-reduce: waiting for it");
    return 0;
}

int nccl_reduce_check(void *ctx, char *msg, size_t n) {
    (void)ctx;
    char why[384];
    int failed = 0;
    pthread_mutex_lock(&nr_mu);
    for (int i = 0; i < NR_MAX_OPEN && !failed; i++)
        if (nr_open[i] && nccl_cuda_async_error(nr_open[i]->c.comm, why, sizeof why)) {
            snprintf(msg, n, "NCCL all-reduce communicator of %d ranks failed: %s", nr_open[i]->nranks, why);
            failed = 1;
        }
    pthread_mutex_unlock(&nr_mu);
    return failed;
}

void nccl_reduce_close(nccl_reduce *r, int abort) {
    if (!r) return;
    nr_register(r, 0);
    nccl_reduce_cuda_destroy(&r->c, abort);
    free(r);
}

// Settings: the keys of how the students sum their gradients (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key grad_allreduce_keys[] = {
    {"transport.grad_allreduce", CFG_STRING, CONFIG_F(grad_allreduce), "auto", "how data-parallel students sum their gradients: nccl (GPU to GPU, in buckets overlapping the backward; needs every student on its own GPU), mpi (through host memory), or auto (nccl when every student has its own GPU, else mpi; the first student's log says which and why)", "auto|mpi|nccl", CONFIG_NOLIM},
};
const config_key_set grad_allreduce_settings = CONFIG_KEY_SET(grad_allreduce_keys, NULL);
