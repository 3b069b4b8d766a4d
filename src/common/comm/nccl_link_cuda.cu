// nccl_link_cuda.cu: nccl_link_cuda.h with NCCL and the CUDA runtime (C linkage).
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

#include "common/comm/nccl_link_cuda.h"
#include "common/backend/nccl_setup_cuda.cuh"
#include "common/comm/nccl_try_cuda.cuh"

extern "C" int nccl_cuda_available(char *why, size_t n) {
    (void)why, (void)n;
    return 1;
}

extern "C" int nccl_cuda_init(void **comm, const void *id, int nranks, int rank, int device, const nccl_cuda_who *who) {
    *comm = NULL;
    CUDA_TRY(cudaSetDevice(device));
    ncclComm_t c = NULL;
    int rc = nccl_setup_init(&c, id, nranks, rank, who);
    if (rc) return rc;
    *comm = c;
    return 0;
}

extern "C" int nccl_cuda_split(void *comm, int member, int key, void **pair, void **stream, const nccl_cuda_who *who) {
    ncclComm_t p = NULL;
    *pair = NULL;
    *stream = NULL;
    int rc = nccl_setup_split((ncclComm_t)comm, member ? 0 : NCCL_SPLIT_NOCOLOR, key, &p, who);
    if (rc || !member) return rc;
    cudaStream_t s;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        ncclCommAbort(p);
        return cuda_try_fail("cudaStreamCreateWithFlags", e);
    }
    *pair = p;
    *stream = s;
    return 0;
}

// A call enqueued on a non-blocking communicator: ncclInProgress waited on (timeout_s at most).
static int nc_enqueued(ncclComm_t comm, ncclResult_t r, const char *call, double timeout_s) {
    nccl_cuda_who who = {"the NCCL link", "its peer rank", -1, -1, -1, "run.rank_timeout ", timeout_s, NULL};
    return nccl_setup_result(comm, r, call, &who);
}

static int nc_event(void **event, cudaStream_t s) {
    if (!*event) {
        cudaEvent_t e;
        CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        *event = e;
    }
    CUDA_TRY(cudaEventRecord((cudaEvent_t)*event, s));
    return 0;
}

// The other rank of a two-rank communicator.
static int nc_peer(ncclComm_t pair, int *peer) {
    int me = 0;
    NCCL_TRY(ncclCommUserRank(pair, &me));
    *peer = 1 - me;
    return 0;
}

extern "C" int nccl_cuda_send(void *pair, void *stream, const void *dev, size_t bytes, void *after_stream, void **event,
                              double timeout_s) {
    cudaStream_t s = (cudaStream_t)stream;
    if (after_stream) { // the payload is ready once the producer's queued work is done
        cudaEvent_t ready;
        CUDA_TRY(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
        CUDA_TRY(cudaEventRecord(ready, (cudaStream_t)after_stream));
        CUDA_TRY(cudaStreamWaitEvent(s, ready, 0));
        CUDA_TRY(cudaEventDestroy(ready)); // freed once the wait is satisfied (CUDA defers it)
    }
    int peer = 0;
    if (nc_peer((ncclComm_t)pair, &peer)) return -1;
    int rc = nc_enqueued((ncclComm_t)pair, ncclSend(dev, bytes, ncclUint8, peer, (ncclComm_t)pair, s), "ncclSend", timeout_s);
    return rc ? rc : nc_event(event, s);
}

extern "C" int nccl_cuda_recv(void *pair, void *stream, void *dev, size_t bytes, void **event, double timeout_s) {
    int peer = 0;
    if (nc_peer((ncclComm_t)pair, &peer)) return -1;
    int rc = nc_enqueued((ncclComm_t)pair, ncclRecv(dev, bytes, ncclUint8, peer, (ncclComm_t)pair, (cudaStream_t)stream),
                         "ncclRecv", timeout_s);
    return rc ? rc : nc_event(event, (cudaStream_t)stream);
}

extern "C" int nccl_cuda_event_query(void *event) {
    if (!event) return 1;
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    if (e == cudaSuccess) return 1;
    if (e == cudaErrorNotReady) return 0;
    return cuda_try_fail("cudaEventQuery", e);
}

extern "C" int nccl_cuda_event_sync(void *event) {
    if (event) CUDA_TRY(cudaEventSynchronize((cudaEvent_t)event));
    return 0;
}

extern "C" void nccl_cuda_event_destroy(void *event) {
    if (event) cudaEventDestroy((cudaEvent_t)event);
}

extern "C" int nccl_cuda_async_error(void *comm, char *msg, size_t n) {
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError((ncclComm_t)comm, &async);
    if (r != ncclSuccess) async = r;
    if (async == ncclSuccess || async == ncclInProgress) return 0;
    const char *last = ncclGetLastError((ncclComm_t)comm);
    snprintf(msg, n, "%s%s%s", ncclGetErrorString(async), last && last[0] ? ": " : "", last ? last : "");
    return 1;
}

extern "C" int nccl_cuda_destroy(void *comm, void *stream, int abort, const nccl_cuda_who *who) {
    int rc = nccl_setup_end((ncclComm_t)comm, abort, who);
    if (stream) cudaStreamDestroy((cudaStream_t)stream);
    return rc;
}
