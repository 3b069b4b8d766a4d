// nccl_reduce_cuda.cu: nccl_reduce_cuda.h with NCCL and the CUDA runtime (C linkage).
#include <cuda_runtime.h>
#include <nccl.h>
#include <string.h>

#include "common/comm/nccl_reduce_cuda.h"

extern "C" {
#include "common/core/error.h"
}

// One error line: the call, then NCCL's (or CUDA's) reason.
static int nr_nccl_fail(const char *call, ncclResult_t r) {
    const char *last = ncclGetLastError(NULL);
    return error_set("%s: %s%s%s", call, ncclGetErrorString(r), last && last[0] ? ": " : "", last ? last : "");
}
static int nr_cuda_fail(const char *call, cudaError_t e) {
    (void)cudaGetLastError();
    return error_set("%s: %s", call, cudaGetErrorString(e));
}
#define NR_NC(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) return nr_nccl_fail(#call, r_); } while (0)
#define NR_CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return nr_cuda_fail(#call, e_); } while (0)

extern "C" int nccl_reduce_cuda_init(nccl_reduce_cuda *c, const void *id, int nranks, int rank, int device) {
    memset(c, 0, sizeof *c);
    NR_CU(cudaSetDevice(device));
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclComm_t comm = NULL;
    NR_NC(ncclCommInitRank(&comm, nranks, uid, rank));
    c->comm = comm;
    cudaStream_t s;
    NR_CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    c->stream = s;
    cudaEvent_t e;
    NR_CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    c->ready = e;
    NR_CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    c->done = e;
    return 0;
}

// One event suffices for each direction: cudaStreamWaitEvent waits for the record made just before
// it, and a later record does not change what an earlier wait waits for.
extern "C" int nccl_reduce_cuda_after(nccl_reduce_cuda *c, void *stream) {
    NR_CU(cudaEventRecord((cudaEvent_t)c->ready, (cudaStream_t)stream));
    NR_CU(cudaStreamWaitEvent((cudaStream_t)c->stream, (cudaEvent_t)c->ready, 0));
    return 0;
}

extern "C" int nccl_reduce_cuda_group(int begin) {
    if (begin) NR_NC(ncclGroupStart());
    else NR_NC(ncclGroupEnd());
    return 0;
}

extern "C" int nccl_reduce_cuda_sum_f32(nccl_reduce_cuda *c, float *dev, size_t count) {
    NR_NC(ncclAllReduce(dev, dev, count, ncclFloat32, ncclSum, (ncclComm_t)c->comm, (cudaStream_t)c->stream));
    return 0;
}

extern "C" int nccl_reduce_cuda_join(nccl_reduce_cuda *c, void *stream) {
    NR_CU(cudaEventRecord((cudaEvent_t)c->done, (cudaStream_t)c->stream));
    NR_CU(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)c->done, 0));
    return 0;
}

extern "C" int nccl_reduce_cuda_sync(nccl_reduce_cuda *c) {
    NR_CU(cudaStreamSynchronize((cudaStream_t)c->stream));
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
