// nccl_reduce_cuda.h: the NCCL and CUDA calls under nccl_reduce.c (plain C; nccl_reduce_cuda.cu in
// CUDA builds, nccl_nocuda.c's stand-ins, which fail "built without CUDA", in builds without).
// Handles are opaque pointers (ncclComm_t, cudaStream_t, cudaEvent_t). Every function returns 0, or -1 with error_set naming the call and NCCL's or
// CUDA's reason, or NCCL_CUDA_TIMEOUT (backend/nccl_setup.h) when a peer did not answer within the
// timeout. The communicator is non-blocking (backend/nccl_setup_cuda.cuh): every call that NCCL
// leaves in progress is waited on under the timeout.
#pragma once
#include <stddef.h>

#include "common/backend/backend.h"
#include "common/backend/nccl_setup.h"

#ifdef __cplusplus
extern "C" {
#endif

// The communicator of an all-reduce group: its own non-blocking stream, and two events: `ready`
// (the producer's work queued so far) and `done` (the reductions queued so far).
typedef struct {
    void *comm, *stream, *ready, *done;
    double timeout_s; // who's, for the waits after the set-up (0: no limit)
} nccl_reduce_cuda;

// nccl_reduce_cuda_init: join the communicator (id from gpu_nccl_unique_id on its first rank) on
// device, and make the stream and the events. who names it in the error lines.
int nccl_reduce_cuda_init(nccl_reduce_cuda *c, const void *id, int nranks, int rank, int device, const nccl_cuda_who *who);
// nccl_reduce_cuda_after: what is enqueued next on c's stream starts after the work queued so far
// on be's stream: cudaEventRecord + cudaStreamWaitEvent.
int nccl_reduce_cuda_after(nccl_reduce_cuda *c, backend *be);
// nccl_reduce_cuda_group: ncclGroupStart (begin = 1) / ncclGroupEnd (begin = 0, waited on).
int nccl_reduce_cuda_group(nccl_reduce_cuda *c, int begin);
// nccl_reduce_cuda_sum_f32: ncclAllReduce of count floats in place (sum) on c's stream.
int nccl_reduce_cuda_sum_f32(nccl_reduce_cuda *c, float *dev, size_t count);
// nccl_reduce_cuda_join: be's stream waits for every reduction enqueued so far on c's stream.
int nccl_reduce_cuda_join(nccl_reduce_cuda *c, backend *be);
// nccl_reduce_cuda_sync: the host waits for every reduction enqueued so far.
int nccl_reduce_cuda_sync(nccl_reduce_cuda *c);
// nccl_reduce_cuda_destroy: finalize (abort = 0: reductions may still be queued and must finish;
// waited on under the timeout, aborted if it fails or times out) or abort (abort = 1: a peer may
// never join them) and free the communicator, stream and events.
void nccl_reduce_cuda_destroy(nccl_reduce_cuda *c, int abort);

#ifdef __cplusplus
}
#endif
