// nccl_setup_cuda.cu: nccl_setup_cuda.cuh (non-blocking NCCL communicators under a deadline).
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/backend/nccl_setup_cuda.cuh"

extern "C" {
#include "common/core/error.h"
}

static double ns_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Who may be hung: a stopped rank on this host, else the other ranks of first..last.
static void ns_peers(const nccl_setup_who *who, char *buf, size_t n) {
    if (who->first < 0) {
        snprintf(buf, n, "%s", who->peers ? who->peers : "a peer");
        return;
    }
    if (who->stopped && who->stopped(who->first, who->last, buf, n)) return;
    int others = who->last - who->first + 1 - (who->self >= who->first && who->self <= who->last);
    if (others > 4 || others < 1) {
        snprintf(buf, n, "one of ranks %d..%d", who->first, who->last);
        return;
    }
    size_t at = (size_t)snprintf(buf, n, "rank");
    for (int r = who->first, k = 0; r <= who->last && at < n; r++) {
        if (r == who->self) continue;
        k++;
        at += (size_t)snprintf(buf + at, n - at, "%s%d", k == 1 ? " " : k == others ? " or " : ", ", r);
    }
}

// The variable says "R" or "R:WHICH": this rank, at this set-up.
static int ns_env_rank(const char *name, int rank, const char *which) {
    const char *v = getenv(name), *colon = v ? strchr(v, ':') : NULL;
    return v && *v && atoi(v) == rank && (!colon || strcmp(colon + 1, which) == 0);
}

extern "C" void nccl_cuda_test_hook(int world_rank, const char *which) {
    if (ns_env_rank("DFLASH_TEST_NCCL_SETUP_STOP", world_rank, which)) raise(SIGSTOP);
    while (ns_env_rank("DFLASH_TEST_NCCL_SETUP_HANG", world_rank, which)) sleep(1);
}

double nccl_setup_deadline(double timeout_s) { return timeout_s > 0 ? ns_now() + timeout_s : 0; }

static int ns_fail(ncclComm_t comm, const char *call, const nccl_setup_who *who, ncclResult_t r) {
    const char *last = ncclGetLastError(comm);
    return error_set("%s (%s): %s%s%s", who->what, call, ncclGetErrorString(r), last && last[0] ? ": " : "",
                     last ? last : "");
}

int nccl_setup_wait(ncclComm_t comm, const char *step, const nccl_setup_who *who, double deadline) {
    if (!comm) return 0;
    long us = 20;
    for (;;) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(comm, &state);
        if (r != ncclSuccess) return ns_fail(comm, step, who, r);
        if (state == ncclSuccess) return 0;
        if (state != ncclInProgress) return ns_fail(comm, step, who, state);
        if (deadline > 0 && ns_now() > deadline) {
            char peers[160];
            ns_peers(who, peers, sizeof peers);
            error_set("%s (%s): no answer within %s%g s: %s is hung or unreachable", who->what, step, who->limit,
                      who->timeout_s, peers);
            return NCCL_CUDA_TIMEOUT;
        }
        struct timespec pause = {0, us * 1000}; // 20 us doubling to 1 ms: no busy wait
        nanosleep(&pause, NULL);
        if (us < 1000) us *= 2;
    }
}

int nccl_setup_result(ncclComm_t comm, ncclResult_t r, const char *call, const nccl_setup_who *who) {
    if (r == ncclInProgress) return nccl_setup_wait(comm, call, who, nccl_setup_deadline(who->timeout_s));
    return r == ncclSuccess ? 0 : ns_fail(comm, call, who, r);
}

int nccl_setup_init(ncclComm_t *comm, const void *id, int nranks, int rank, const nccl_setup_who *who) {
    double deadline = nccl_setup_deadline(who->timeout_s);
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0; // a peer that never joins ends in the deadline, not a hang
    ncclComm_t c = NULL;
    *comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&c, nranks, uid, rank, &config);
    int rc = r == ncclSuccess || r == ncclInProgress ? nccl_setup_wait(c, "init", who, deadline)
                                                     : ns_fail(c, "init", who, r);
    if (rc) {
        if (c) ncclCommAbort(c);
        return rc;
    }
    *comm = c;
    return 0;
}

int nccl_setup_split(ncclComm_t parent, int color, int key, ncclComm_t *child, const nccl_setup_who *who) {
    double deadline = nccl_setup_deadline(who->timeout_s);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t c = NULL;
    *child = NULL;
    ncclResult_t r = ncclCommSplit(parent, color, key, &c, &config);
    int rc = 0;
    if (r != ncclSuccess && r != ncclInProgress) rc = ns_fail(parent, "split", who, r);
    // the split runs on the parent (every rank of it, NCCL_SPLIT_NOCOLOR too), the child is made by it
    if (rc == 0) rc = nccl_setup_wait(parent, "split", who, deadline);
    if (rc == 0) rc = nccl_setup_wait(c, "split", who, deadline);
    if (rc) {
        if (c) ncclCommAbort(c);
        return rc;
    }
    *child = c;
    return 0;
}

int nccl_setup_end(ncclComm_t comm, int abort, const nccl_setup_who *who) {
    if (!comm) return 0;
    int rc = 0;
    if (!abort) {
        ncclResult_t r = ncclCommFinalize(comm); // waits for the operations still queued, with every rank
        if (r == ncclInProgress) rc = nccl_setup_wait(comm, "finalize", who, nccl_setup_deadline(who->timeout_s));
        else if (r != ncclSuccess) rc = ns_fail(comm, "finalize", who, r);
    }
    if (abort || rc) ncclCommAbort(comm); // no peer waited for
    else ncclCommDestroy(comm);
    return rc;
}
