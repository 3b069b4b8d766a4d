// nccl_link_cuda.h: the NCCL and CUDA calls under payload_link_nccl.c and nccl_reduce.c (plain C;
// nccl_link_cuda.cu in CUDA builds, nccl_nocuda.c's stand-ins in builds without: those decline or
// fail, "built without CUDA"). Handles are opaque pointers (ncclComm_t, cudaStream_t, cudaEvent_t).
// Every function returns 0, or -1 with error_set naming the call and NCCL's or CUDA's reason, or
// NCCL_CUDA_TIMEOUT (backend/nccl_setup.h) when a peer did not answer within the timeout (a hung
// peer: the caller ends the job, since that peer joins no agreement either).
//
// The communicators are non-blocking, made and ended under a deadline (backend/nccl_setup_cuda.cuh):
// a set-up that fails or times out is aborted (ncclCommAbort), never left waiting on a peer.
#pragma once
#include <stddef.h>

#include "common/backend/nccl_setup.h" // nccl_cuda_who, NCCL_CUDA_TIMEOUT

#ifdef __cplusplus
extern "C" {
#endif

// nccl_cuda_available: 1 when this build has NCCL; 0 with the reason in why[n] ("built without
// CUDA") when it has not. The NCCL users ask it before their first collective.
int nccl_cuda_available(char *why, size_t n);
// nccl_cuda_init: join the communicator of all ranks (id from gpu_nccl_unique_id on rank 0).
int nccl_cuda_init(void **comm, const void *id, int nranks, int rank, int device, const nccl_cuda_who *who);
// nccl_cuda_split: the two-rank communicator of a pair (member = 0: not in this pair, *pair =
// NULL), with a new non-blocking stream for it. key orders the pair: teacher 0, student 1.
int nccl_cuda_split(void *comm, int member, int key, void **pair, void **stream, const nccl_cuda_who *who);
// nccl_cuda_send / _recv: `bytes` to / from the other rank of a two-rank communicator on stream,
// after the work queued on after_stream (NULL = none); *event records the completion (created on
// first use). The enqueueing waits timeout_s at most (0: no limit; NCCL may connect then).
int nccl_cuda_send(void *pair, void *stream, const void *dev, size_t bytes, void *after_stream, void **event,
                   double timeout_s);
int nccl_cuda_recv(void *pair, void *stream, void *dev, size_t bytes, void **event, double timeout_s);
// nccl_cuda_event_query: 1 done, 0 pending, -1 error. _sync blocks. _destroy frees.
int nccl_cuda_event_query(void *event);
int nccl_cuda_event_sync(void *event);
void nccl_cuda_event_destroy(void *event);
// nccl_cuda_async_error: 1 with NCCL's reason in msg when the communicator has failed, else 0.
int nccl_cuda_async_error(void *comm, char *msg, size_t n);
// nccl_cuda_destroy: abort = 0: finalize (waited on under who's timeout: every rank of the
// communicator ends it so) and free the communicator; abort = 1 (an error path: a peer may never
// finalize), or a finalize that fails or times out: ncclCommAbort. Then its stream (when not
// NULL). NULL comm: only the stream.
int nccl_cuda_destroy(void *comm, void *stream, int abort, const nccl_cuda_who *who);

#ifdef __cplusplus
}
#endif
