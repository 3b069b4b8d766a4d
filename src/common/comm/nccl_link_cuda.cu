// nccl_link_cuda.cu: nccl_link_cuda.h with NCCL and the CUDA runtime (C linkage).
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

#include "common/comm/nccl_link_cuda.h"

extern "C" {
#include "common/core/error.h"
}

static int nc_fail(const char *call, ncclResult_t r) {
    const char *last = ncclGetLastError(NULL);
    return error_set("%s: %s%s%s", call, ncclGetErrorString(r), last && last[0] ? ": " : "", last ? last : "");
}

static int cu_fail(const char *call, cudaError_t e) {
    (void)cudaGetLastError();
    return error_set("%s: %s", call, cudaGetErrorString(e));
}

#define NC(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) return nc_fail(#call, r_); } while (0)
#define CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return cu_fail(#call, e_); } while (0)

extern "C" int nccl_cuda_init(void **comm, const void *id, int nranks, int rank, int device) {
    CU(cudaSetDevice(device));
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclComm_t c = NULL;
    NC(ncclCommInitRank(&c, nranks, uid, rank));
    *comm = c;
    return 0;
}

extern "C" int nccl_cuda_split(void *comm, int member, int key, void **pair, void **stream) {
    ncclComm_t p = NULL;
    *pair = NULL;
    *stream = NULL;
    NC(ncclCommSplit((ncclComm_t)comm, member ? 0 : NCCL_SPLIT_NOCOLOR, key, &p, NULL));
    if (!member) return 0;
    cudaStream_t s;
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *pair = p;
    *stream = s;
    return 0;
}

static int nc_event(void **event, cudaStream_t s) {
    if (!*event) {
        cudaEvent_t e;
        CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        *event = e;
    }
    CU(cudaEventRecord((cudaEvent_t)*event, s));
    return 0;
}

// The other rank of a two-rank communicator.
static int nc_peer(ncclComm_t pair, int *peer) {
    int me = 0;
    NC(ncclCommUserRank(pair, &me));
    *peer = 1 - me;
    return 0;
}

extern "C" int nccl_cuda_send(void *pair, void *stream, const void *dev, size_t bytes, void *after_stream, void **event) {
    cudaStream_t s = (cudaStream_t)stream;
    if (after_stream) { // the payload is ready once the producer's queued work is done
        cudaEvent_t ready;
        CU(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
        CU(cudaEventRecord(ready, (cudaStream_t)after_stream));
        CU(cudaStreamWaitEvent(s, ready, 0));
        CU(cudaEventDestroy(ready)); // freed once the wait is satisfied (CUDA defers it)
    }
    int peer = 0;
    if (nc_peer((ncclComm_t)pair, &peer)) return -1;
    NC(ncclSend(dev, bytes, ncclUint8, peer, (ncclComm_t)pair, s));
    return nc_event(event, s);
}

extern "C" int nccl_cuda_recv(void *pair, void *stream, void *dev, size_t bytes, void **event) {
    int peer = 0;
    if (nc_peer((ncclComm_t)pair, &peer)) return -1;
    NC(ncclRecv(dev, bytes, ncclUint8, peer, (ncclComm_t)pair, (cudaStream_t)stream));
    return nc_event(event, (cudaStream_t)stream);
}

extern "C" int nccl_cuda_event_query(void *event) {
    if (!event) return 1;
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    if (e == cudaSuccess) return 1;
    if (e == cudaErrorNotReady) return 0;
    return cu_fail("cudaEventQuery", e);
}

extern "C" int nccl_cuda_event_sync(void *event) {
    if (event) CU(cudaEventSynchronize((cudaEvent_t)event));
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
