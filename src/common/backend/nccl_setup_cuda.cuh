// nccl_setup_cuda.cuh: NCCL communicators made, waited on and ended under a deadline, for the .cu
// files of the NCCL paths (comm/nccl_link_cuda.cu, comm/nccl_reduce_cuda.cu, gpu_info.cu's preflight).
//
// Every communicator is non-blocking (ncclConfig_t.blocking = 0): ncclCommInitRankConfig,
// ncclCommSplit, ncclCommFinalize, and the enqueueing calls (ncclSend, ncclRecv, ncclAllReduce,
// ncclGroupEnd) may return ncclInProgress, and the operation is done once ncclCommGetAsyncError no
// longer says ncclInProgress. nccl_setup_wait polls it (sleeping 1 ms) until then or until the
// timeout (a peer that never joins: the job's run.rank_timeout), so a hung peer is an error line,
// not a hang. A communicator whose set-up failed or timed out is aborted (ncclCommAbort, which waits
// for no peer); only one that works is finalized (waited on the same way) and destroyed.
//
// Every function returns 0, -1 (error_set: NCCL's reason) or NCCL_CUDA_TIMEOUT (error_set: "<what>
// (<step>): no answer within <limit><timeout> s: <peers> is hung or unreachable").
#pragma once
#include <nccl.h>

#include "common/backend/nccl_setup.h"

// Who a communicator is, for the error lines: nccl_setup.h's nccl_cuda_who.
typedef nccl_cuda_who nccl_setup_who;

// nccl_setup_deadline: now + timeout_s, or 0 (none) when timeout_s <= 0.
double nccl_setup_deadline(double timeout_s);
// nccl_setup_wait: until comm's pending operation (`step`, e.g. "init") is done, or deadline (0:
// none) passes. comm == NULL: 0.
int nccl_setup_wait(ncclComm_t comm, const char *step, const nccl_setup_who *who, double deadline);
// nccl_setup_result: a call's result r on comm: ncclInProgress waited on (nccl_setup_wait with
// who's timeout), another failure an error naming `call`.
int nccl_setup_result(ncclComm_t comm, ncclResult_t r, const char *call, const nccl_setup_who *who);
// nccl_setup_init: *comm = this rank of the communicator of nranks ranks (id: an ncclUniqueId's
// bytes), made non-blocking and waited on; aborted on failure (*comm = NULL).
int nccl_setup_init(ncclComm_t *comm, const void *id, int nranks, int rank, const nccl_setup_who *who);
// nccl_setup_split: ncclCommSplit of parent (color NCCL_SPLIT_NOCOLOR: *child = NULL), the child
// non-blocking; waits for the parent and the child; the child aborted on failure (*child = NULL).
int nccl_setup_split(ncclComm_t parent, int color, int key, ncclComm_t *child, const nccl_setup_who *who);
// nccl_setup_end: abort = 0: ncclCommFinalize, waited on, then ncclCommDestroy (every rank ends it
// so); on a failure or timeout of the finalize, and with abort = 1, ncclCommAbort. NULL: 0.
int nccl_setup_end(ncclComm_t comm, int abort, const nccl_setup_who *who);
