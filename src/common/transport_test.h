// transport_test.h: `dflash_rank --mode transport-test`: deterministic payloads of many sizes from
// every teacher to every student over the job's payload path (MPI from host buffers), each checked
// element by element on arrival; the first student prints one line per size with the bandwidth
// and the count of wrong elements (which must be 0). Like nccl-tests' verifiable mode, for our path.
#pragma once

#include "common/world.h"

// transport_test_run: collective over the world; returns the total count of wrong elements (0 on
// success) on every rank.
long long transport_test_run(const world *w, int iterations, long long max_bytes);
