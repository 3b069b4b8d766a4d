// nccl_reduce_cuda.cu: nccl_reduce_cuda.h with NCCL and the CUDA runtime (C linkage).
#include <cuda_runtime.h>
#include <nccl.h>
#include <string.h>

#include "common/comm/nccl_reduce_cuda.h"
#include "common/backend/backend_cuda.h"
#include "common/backend/nccl_setup_cuda.cuh"
#include "common/comm/nccl_try_cuda.cuh"

// The waits after the set-up name the communicator so.
static nccl_cuda_who nr_who(const nccl_reduce_cuda *c) {
    nccl_cuda_who who = {"the NCCL all-reduce communicator", "one of its ranks", -1, -1, -1, "run.rank_timeout ", c->timeout_s,
                         NULL};
    return who;
}

extern "C" int nccl_reduce_cuda_init(nccl_reduce_cuda *c, const void *id, int nranks, int rank, int device,
                                     const nccl_cuda_who *who) {
    memset(c, 0, sizeof *c);
    c->timeout_s = who->timeout_s;
    CUDA_TRY(cudaSetDevice(device));
    ncclComm_t comm = NULL;
    int rc = nccl_setup_init(&comm, id, nranks, rank, who);
    if (rc) return rc;
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
extern "C" int nccl_reduce_cuda_after(nccl_reduce_cuda *c, backend *be) {
    CUDA_TRY(cudaEventRecord((cudaEvent_t)c->ready, (cudaStream_t)cuda_stream(be)));
    CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)c->stream, (cudaEvent_t)c->ready, 0));
    return 0;
}

extern "C" int nccl_reduce_cuda_group(nccl_reduce_cuda *c, int begin) {
    if (begin) NCCL_TRY(ncclGroupStart());
    nccl_cuda_who who = nr_who(c);
    return begin ? 0 : nccl_setup_result((ncclComm_t)c->comm, ncclGroupEnd(), "ncclGroupEnd", &who);
}

extern "C" int nccl_reduce_cuda_sum_f32(nccl_reduce_cuda *c, float *dev, size_t count) {
    nccl_cuda_who who = nr_who(c); // (inside a group NCCL enqueues at ncclGroupEnd: ncclSuccess here)
    return nccl_setup_result((ncclComm_t)c->comm,
                             ncclAllReduce(dev, dev, count, ncclFloat32, ncclSum, (ncclComm_t)c->comm, (cudaStream_t)c->stream),
                             "ncclAllReduce", &who);
}

extern "C" int nccl_reduce_cuda_join(nccl_reduce_cuda *c, backend *be) {
    CUDA_TRY(cudaEventRecord((cudaEvent_t)c->done, (cudaStream_t)c->stream));
    CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)cuda_stream(be), (cudaEvent_t)c->done, 0));
    return 0;
}

extern "C" int nccl_reduce_cuda_sync(nccl_reduce_cuda *c) {
    CUDA_TRY(cudaStreamSynchronize((cudaStream_t)c->stream));
    return 0;
}

extern "C" void nccl_reduce_cuda_destroy(nccl_reduce_cuda *c, int abort) {
    nccl_cuda_who who = nr_who(c);
    nccl_setup_end((ncclComm_t)c->comm, abort, &who); // (a finalize that fails or times out: aborted)
    if (c->ready) cudaEventDestroy((cudaEvent_t)c->ready);
    if (c->done) cudaEventDestroy((cudaEvent_t)c->done);
    if (c->stream) cudaStreamDestroy((cudaStream_t)c->stream);
    memset(c, 0, sizeof *c);
}
