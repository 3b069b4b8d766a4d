// transport_test.h: `dflash_rank --mode transport-test`: deterministic payloads of many sizes from
// every teacher to every student over each transport of the payload link (payload_link.h, in its
// registry's order) that opens — MPI from host buffers always, NCCL from GPU memory to GPU memory
// when every rank has its own GPU; one that declines is a line saying why — each checked element
// by element on arrival (on the GPU for device blocks); the first student prints one table per
// transport, one line per size with the bandwidth and the count of wrong elements (which must
// be 0). Then the same for an fp32 sum over all ranks of the job (the students' gradient
// all-reduce): MPI from host memory always, NCCL (nccl_reduce.h) when every rank has its own GPU,
// one line per size with the time of one all-reduce, its algorithmic and bus bandwidth (as
// nccl-tests' all_reduce_perf defines them) and the wrong elements. Like nccl-tests' verifiable
// mode, for our paths.
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

// tt_sum_value: element i of rank r's buffer in all-reduce iteration it: a small integer (-128 ..
// 127) from the same hash, so that the sum over any number of ranks up to 2^16 is exact in fp32
// and a dropped, duplicated or shifted element, or a missing rank, is caught element by element.
static inline TT_HOST_DEVICE float tt_sum_value(int r, int it, uint64_t i) {
    return (float)((int)(tt_value(r, it, i) & 0xffu) - 128);
}
// tt_sum_expected: what element i holds after the sum over ranks 0 .. n-1.
static inline TT_HOST_DEVICE float tt_sum_expected(int n, int it, uint64_t i) {
    float s = 0;
    for (int r = 0; r < n; r++) s += tt_sum_value(r, it, i);
    return s;
}

#ifndef __CUDACC__
// transport_test_run: collective over the world; returns the total count of wrong elements over
// all paths (0 on success) on every rank; -1 (error_set) when a transport fails to open.
long long transport_test_run(const world *w, backend *be, int iterations, long long max_bytes);
#endif
