// transport_test.h: `dflash_rank --mode transport-test`: deterministic payloads of many sizes from
// every teacher to every student over each payload path the job has — MPI from host buffers
// always, and NCCL from GPU memory to GPU memory when every rank has its own GPU (nccl_link.h) —
// each checked element by element on arrival (on the GPU for NCCL); the first student prints one
// table per path, one line per size with the bandwidth and the count of wrong elements (which must
// be 0). Like nccl-tests' verifiable mode, for our paths.
#pragma once
#include <stdint.h>

#ifndef __CUDACC__
#include "common/backend/backend.h"
#include "common/comm/world.h"
#endif

#ifdef __CUDACC__
#define TT_HOST_DEVICE __host__ __device__
#else
#define TT_HOST_DEVICE
#endif

// tt_value: element i of the payload teacher t sends in iteration it: a cheap hash, so a dropped,
// duplicated or shifted element is caught. The same function on the host and on the GPU.
static inline TT_HOST_DEVICE uint32_t tt_value(int t, int it, uint64_t i) {
    uint64_t x = ((uint64_t)t << 48) ^ ((uint64_t)it << 32) ^ i;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (uint32_t)x;
}

#ifndef __CUDACC__
// transport_test_run: collective over the world; returns the total count of wrong elements over
// all paths (0 on success) on every rank; -1 (error_set) when the NCCL links fail to open.
long long transport_test_run(const world *w, backend *be, int iterations, long long max_bytes);
#endif
