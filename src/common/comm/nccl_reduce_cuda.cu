// nccl_reduce_cuda.cu: nccl_reduce_cuda.h with NCCL and the CUDA runtime (C linkage).
#include <cuda_runtime.h>
#include <nccl.h>
#include <string.h>

#include "common/comm/nccl_reduce_cuda.h"
#include "common/comm/nccl_try_cuda.cuh"

extern "C" int nccl_reduce_cuda_init(nccl_reduce_cuda *c, const void *id, int nranks, int rank, int device) {
    memset(c, 0, sizeof *c);
    CUDA_TRY(cudaSetDevice(device));
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclComm_t comm = NULL;
    NCCL_TRY(ncclCommInitRank(&comm, nranks, uid, rank));
    c->comm = comm;
    cudaStream_t s;
    CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    c->stream = s;
    cudaEvent_t e;
    CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    c->ready = e;
    CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    c->done = e;
    return 0;
}

// One event suffices for each direction: cudaStreamWaitEvent waits for the record made just before
// it, and a later record does not change what an earlier wait waits for.
extern "C" int nccl_reduce_cuda_after(nccl_reduce_cuda *c, void *stream) {
    CUDA_TRY(cudaEventRecord((cudaEvent_t)c->ready, (cudaStream_t)stream));
    CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)c->stream, (cudaEvent_t)c->ready, 0));
    return 0;
}

extern "C" int nccl_reduce_cuda_group(int begin) {
    if (begin) NCCL_TRY(ncclGroupStart());
    else NCCL_TRY(ncclGroupEnd());
    return 0;
}

extern "C" int nccl_reduce_cuda_sum_f32(nccl_reduce_cuda *c, float *dev, size_t count) {
    NCCL_TRY(ncclAllReduce(dev, dev, count, ncclFloat32, ncclSum, (ncclComm_t)c->comm, (cudaStream_t)c->stream));
    return 0;
}

extern "C" int nccl_reduce_cuda_join(nccl_reduce_cuda *c, void *stream) {
    CUDA_TRY(cudaEventRecord((cudaEvent_t)c->done, (cudaStream_t)c->stream));
    CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)c->done, 0));
    return 0;
}

extern "C" int nccl_reduce_cuda_sync(nccl_reduce_cuda *c) {
    CUDA_TRY(cudaStreamSynchronize((cudaStream_t)c->stream));
    return 0;
}

extern "C" void nccl_reduce_cuda_destroy(nccl_reduce_cuda *c, int abort) {
    if (c->comm) {
        if (abort) {
            ncclCommAbort((ncclComm_t)c->comm);
        } else {
            ncclCommFinalize((ncclComm_t)c->comm);
            ncclCommDestroy((ncclComm_t)c->comm);
        }
    }
    if (c->ready) cudaEventDestroy((cudaEvent_t)c->ready);
    if (c->done) cudaEventDestroy((cudaEvent_t)c->done);
    if (c->stream) cudaStreamDestroy((cudaStream_t)c->stream);
    memset(c, 0, sizeof *c);
}
