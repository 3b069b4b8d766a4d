// profile.h: where a step's time goes, op by op (`dflash_tool mem-check --profile`).
//
// While enabled on a backend, every op called through an op family's table (BACKEND_OP: the
// kernels' families, decode, MoE, de-quantisation, the optimizer, the selector), every backend_gemm
// and the fused loss's own kernels (loss_cuda.cu) on it are timed:
// on CUDA by a pair of events around it on the backend's stream (GPU time; the host does not wait),
// on the CPU by the wall clock. prof_collect waits for the backend and sums the times per op name.
// Disabled (the default), each op pays one branch.
//
//   prof_enable(be);  ... steps ...;  n = prof_collect(&rows);  prof_disable();
#pragma once
#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name; // the op's function name (ops_rmsnorm, ...), "backend_gemm", or "loss ..."
    long calls;
    double seconds, flops; // flops: 0 where the op does not say (only backend_gemm does)
} prof_row;

void prof_enable(backend *be); // start collecting on be, from nothing
void prof_disable(void);       // stop, and release what collecting took
int prof_begin(backend *be);   // a token for prof_end; -1 when not collecting on be
void prof_end(backend *be, int token, const char *name, double flops);
// prof_collect: the sums per op name since prof_enable or the last collect, the slowest first, in a
// malloc'd array (*rows; free it); returns how many. Waits for the backend.
int prof_collect(prof_row **rows);

#ifdef __cplusplus
}
#endif
