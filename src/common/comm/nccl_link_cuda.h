// nccl_link_cuda.h: the NCCL and CUDA calls under payload_link_nccl.c and nccl_reduce.c (plain C;
// nccl_link_cuda.cu, built with DFLASH_HAVE_CUDA). Handles are opaque pointers (ncclComm_t,
// cudaStream_t, cudaEvent_t).
// Every function returns 0, or -1 with error_set naming the call and NCCL's or CUDA's reason.
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// nccl_cuda_init: join the communicator of all ranks (id from gpu_nccl_unique_id on rank 0).
int nccl_cuda_init(void **comm, const void *id, int nranks, int rank, int device);
// nccl_cuda_split: the two-rank communicator of a pair (member = 0: not in this pair, *pair =
// NULL), with a new non-blocking stream for it. key orders the pair: teacher 0, student 1.
int nccl_cuda_split(void *comm, int member, int key, void **pair, void **stream);
// nccl_cuda_send / _recv: `bytes` to / from the other rank of a two-rank communicator on stream,
// after the work queued on after_stream (NULL = none); *event records the completion (created on
// first use).
int nccl_cuda_send(void *pair, void *stream, const void *dev, size_t bytes, void *after_stream, void **event);
int nccl_cuda_recv(void *pair, void *stream, void *dev, size_t bytes, void **event);
// nccl_cuda_event_query: 1 done, 0 pending, -1 error. _sync blocks. _destroy frees.
int nccl_cuda_event_query(void *event);
int nccl_cuda_event_sync(void *event);
void nccl_cuda_event_destroy(void *event);
// nccl_cuda_async_error: 1 with NCCL's reason in msg when the communicator has failed, else 0.
int nccl_cuda_async_error(void *comm, char *msg, size_t n);
// nccl_cuda_destroy: finalize and free a communicator (and its stream, when not NULL).
void nccl_cuda_destroy(void *comm, void *stream);

#ifdef __cplusplus
}
#endif
