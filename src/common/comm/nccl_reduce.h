// nccl_reduce.h: fp32 sums in place over the ranks of an MPI communicator with NCCL, GPU memory to
// GPU memory (the students' gradient all-reduce, transport-test's all-reduce table), in plain C.
//
// nccl_reduce_open makes one NCCL communicator of the MPI communicator's ranks (the unique id from
// its first rank, MPI_Bcast, ncclCommInitRank) with its own non-blocking CUDA stream, so the
// reductions run beside the backend's work: nccl_reduce_after orders what is enqueued next after
// the work queued so far on the backend's stream, nccl_reduce_join makes the backend's stream wait
// for the reductions. NCCL needs one GPU per rank, so nccl_reduce_open first checks over MPI that
// every rank is on a GPU and that no two share one (host and PCI bus id), and otherwise declines,
// saying why; the caller then sums over MPI. CPU-only builds decline.
//
// NCCL calls must be made in the same order on every rank of the communicator (a collective).
#pragma once
#include <mpi.h>
#include <stddef.h>

#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nccl_reduce nccl_reduce;

// nccl_reduce_open: collective over comm (every rank calls it with its CUDA device ordinal, or -1
// when it is not on a GPU). *out = the communicator, or NULL with the reason in why[n] (naming
// world ranks) when NCCL cannot be had; -1 (error_set) on an NCCL failure, the same on every rank
// (the rank that failed logs NCCL's reason).
int nccl_reduce_open(nccl_reduce **out, MPI_Comm comm, int device, char *why, size_t n);
// nccl_reduce_after: reductions enqueued from now on start after the work already queued on be's
// stream (their input is final there).
int nccl_reduce_after(nccl_reduce *r, backend *be);
// nccl_reduce_group: begin = 1 / 0: ncclGroupStart / ncclGroupEnd around several sums, which NCCL
// then launches as one.
int nccl_reduce_group(nccl_reduce *r, int begin);
// nccl_reduce_sum_f32: enqueue the sum over the ranks of count floats at dev (device memory), in
// place, on the communicator's stream.
int nccl_reduce_sum_f32(nccl_reduce *r, float *dev, size_t count);
// nccl_reduce_join: be's stream waits for every sum enqueued so far (the host does not wait).
int nccl_reduce_join(nccl_reduce *r, backend *be);
// nccl_reduce_sync: the host waits for every sum enqueued so far.
int nccl_reduce_sync(nccl_reduce *r);
// nccl_reduce_check: for the watchdog thread (watchdog_add_check's signature; ctx unused): 1 with
// msg naming NCCL's reason when an open communicator reports an asynchronous error
// (ncclCommGetAsyncError), else 0. Safe against a concurrent nccl_reduce_close.
int nccl_reduce_check(void *ctx, char *msg, size_t n);
// nccl_reduce_close: abort = 0 waits for the sums still queued (every rank enqueued them); abort =
// 1 (a rank may never enqueue its part: an error path) aborts them. NULL is a no-op.
void nccl_reduce_close(nccl_reduce *r, int abort);

#ifdef __cplusplus
}
#endif
