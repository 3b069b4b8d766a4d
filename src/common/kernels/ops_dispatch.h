// ops_dispatch.h: DISPATCH, for the dispatchers of the ops (ops.c, ops_train.c, ops_hybrid.c,
// ops_moe.c; never included by a header):
//
//   DISPATCH(be, cuda_add(be, x, y, n), cpu_add(x, y, n));
//
// the CUDA call when the backend is a GPU, else the CPU twin, timed under the calling function's
// name while profile.h collects. Without the CUDA backend compiled in, the CUDA call is dropped, so
// the cuda_* names are never referenced.
#pragma once

#include "common/backend/backend.h"
#include "common/backend/profile.h"

#ifdef DFLASH_HAVE_CUDA
#define DISPATCH(be, cuda_call, cpu_call)          \
    do {                                           \
        int prof_ = prof_begin(be);                \
        if ((be)->kind == BACKEND_CUDA) cuda_call; \
        else cpu_call;                             \
        prof_end(be, prof_, __func__, 0);          \
    } while (0)
#else
#define DISPATCH(be, cuda_call, cpu_call)          \
    do {                                           \
        int prof_ = prof_begin(be);                \
        cpu_call;                                  \
        prof_end(be, prof_, __func__, 0);          \
    } while (0)
#endif
