// nccl_setup.h: what the NCCL set-up under a deadline (nccl_setup_cuda.cuh, for the .cu files)
// shares with plain C: who a communicator is for its error lines, the timeout's return code, and
// the tests' hook (nccl_setup_cuda.cu; CUDA builds only).
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Returned (with error_set) when a peer did not answer within the timeout: a hung peer. The caller
// ends the job, since that peer joins no agreement either.
#define NCCL_CUDA_TIMEOUT (-2)

// Who a communicator is, for the error lines of its set-up and waits.
typedef struct {
    const char *what;  // e.g. "NCCL set-up of the payload links' communicator of ranks 0..2"
    const char *peers; // who may be hung when first < 0, e.g. "one of the GPU ranks"
    int first, last;   // else the world ranks that take part (first..last): the others of them
    int self;          // this rank (not named)
    const char *limit; // the timeout's name, e.g. "run.rank_timeout " ("" for none)
    double timeout_s;  // 0: no limit
    // NULL, or a rank among first..last stopped on this host (watchdog_stopped_peer), named first
    int (*stopped)(int first, int last, char *buf, size_t n);
} nccl_cuda_who;

// nccl_cuda_test_hook: tests only (tests/gpu/test_nccl_setup_cuda.sh), called just before a rank's
// NCCL set-up `which` ("links": the payload links' init, "split": their splits, "reduce": an
// all-reduce's init):
// DFLASH_TEST_NCCL_SETUP_STOP=R[:WHICH] makes world rank R stop itself there (SIGSTOP),
// DFLASH_TEST_NCCL_SETUP_HANG=R[:WHICH] makes it sleep for ever (hung, not stopped). Without
// :WHICH, at any set-up. Unset: nothing.
void nccl_cuda_test_hook(int world_rank, const char *which);
#ifdef __cplusplus
}
#endif
