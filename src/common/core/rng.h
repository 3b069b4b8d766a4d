// rng.h: a counter-based random number generator (Philox4x32-10, Salmon et al., SC'11).
//
// A stream is a pure function of (seed, step, id): every rank derives the same numbers for the same
// triple without communicating, and a resumed run regenerates them exactly. The 64-bit seed is the
// key; the 128-bit counter is (block index: 64 bits, id: 32 bits, step: 32 bits). `id` names the
// consumer, e.g. (purpose << 16) | rank. Same algorithm and word order as curand's Philox4_32_10
// and Random123's philox4x32 (checked against Random123's known-answer vectors in the tests).
#pragma once
#include <stdint.h>

// philox4x32_10: one block of 4 random words from counter ctr and key.
void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

typedef struct {
    uint32_t key[2];
    uint32_t ctr[4];
    uint32_t buf[4]; // the current block
    int pos;         // next unused word of buf (4 = empty)
} rng;

void rng_init(rng *r, uint64_t seed, uint64_t step, uint32_t id);
uint32_t rng_u32(rng *r);
uint64_t rng_u64(rng *r);
// rng_uniform: double in [0, 1) with 53 random bits.
double rng_uniform(rng *r);
// rng_normal: standard normal (Box-Muller).
double rng_normal(rng *r);
// rng_below: uniform integer in [0, n), unbiased (rejection); n > 0.
uint64_t rng_below(rng *r, uint64_t n);
// rng_shuffle: Fisher-Yates shuffle of n int64 values.
void rng_shuffle(rng *r, int64_t *v, int64_t n);
