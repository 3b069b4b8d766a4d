// nccl_link_cuda.cu: nccl_link_cuda.h with NCCL and the CUDA runtime (C linkage).
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

#include "common/comm/nccl_link_cuda.h"
#include "common/comm/nccl_try_cuda.cuh"

extern "C" int nccl_cuda_init(void **comm, const void *id, int nranks, int rank, int device) {
    CUDA_TRY(cudaSetDevice(device));
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclComm_t c = NULL;
    NCCL_TRY(ncclCommInitRank(&c, nranks, uid, rank));
    *comm = c;
    return 0;
}

extern "C" int nccl_cuda_split(void *comm, int member, int key, void **pair, void **stream) {
    ncclComm_t p = NULL;
    *pair = NULL;
    *stream = NULL;
    NCCL_TRY(ncclCommSplit((ncclComm_t)comm, member ? 0 : NCCL_SPLIT_NOCOLOR, key, &p, NULL));
    if (!member) return 0;
    cudaStream_t s;
    CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *pair = p;
    *stream = s;
    return 0;
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

extern "C" int nccl_cuda_send(void *pair, void *stream, const void *dev, size_t bytes, void *after_stream, void **event) {
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
    NCCL_TRY(ncclSend(dev, bytes, ncclUint8, peer, (ncclComm_t)pair, s));
    return nc_event(event, s);
}

extern "C" int nccl_cuda_recv(void *pair, void *stream, void *dev, size_t bytes, void **event) {
    int peer = 0;
    if (nc_peer((ncclComm_t)pair, &peer)) return -1;
    NCCL_TRY(ncclRecv(dev, bytes, ncclUint8, peer, (ncclComm_t)pair, (cudaStream_t)stream));
    return nc_event(event, (cudaStream_t)stream);
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

extern "C" void nccl_cuda_destroy(void *comm, void *stream) {
    if (comm) {
        ncclCommFinalize((ncclComm_t)comm);
        ncclCommDestroy((ncclComm_t)comm);
    }
    if (stream) cudaStreamDestroy((cudaStream_t)stream);
}
