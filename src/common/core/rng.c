// rng.c: Philox4x32-10 and the distributions built on it (see rng.h).
//
// Counter layout (what a stream of (seed, step, id) reads, block after block):
//   key = {seed low 32 bits, seed high 32 bits}
//   ctr = {block low, block high, id, step low 32 bits}
// This should be the layout curand_init(seed, subsequence = (step << 32) | id, offset = 0) gives
// curand's Philox4_32_10 (key = seed, subsequence in ctr[2..3]), so a GPU kernel could draw the
// same stream; that equivalence has not been checked on a GPU yet. Steps past 2^32 do not fit the
// counter: their high 32 bits are folded into key[1], which keeps every (seed, step) pair of one
// seed distinct (and changes nothing for step < 2^32, the only case that occurs in practice).
#include "common/core/rng.h"

#include <math.h>

#include "common/core/check.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u // golden ratio
#define PHILOX_W1 0xBB67AE85u // sqrt(3) - 1

// One Philox round: two 32x32->64 multiplies, the high halves xored with the other words and
// the key, and a fixed word permutation (Salmon et al., Random123 philox.h).
static void philox_round(uint32_t x[4], const uint32_t k[2]) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * x[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * x[2];
    uint32_t y0 = (uint32_t)(p1 >> 32) ^ x[1] ^ k[0];
    uint32_t y1 = (uint32_t)p1;
    uint32_t y2 = (uint32_t)(p0 >> 32) ^ x[3] ^ k[1];
    uint32_t y3 = (uint32_t)p0;
    x[0] = y0;
    x[1] = y1;
    x[2] = y2;
    x[3] = y3;
}

void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t x[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < 10; r++) {
        if (r > 0) { // the key schedule: a Weyl sequence, bumped before every round but the first
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        philox_round(x, k);
    }
    out[0] = x[0];
    out[1] = x[1];
    out[2] = x[2];
    out[3] = x[3];
}

void rng_init(rng *r, uint64_t seed, uint64_t step, uint32_t id) {
    r->key[0] = (uint32_t)seed;
    r->key[1] = (uint32_t)(seed >> 32) ^ (uint32_t)(step >> 32);
    r->ctr[0] = 0;
    r->ctr[1] = 0;
    r->ctr[2] = id;
    r->ctr[3] = (uint32_t)step;
    r->buf[0] = r->buf[1] = r->buf[2] = r->buf[3] = 0;
    r->pos = 4; // empty: the first draw computes block 0
}

uint32_t rng_u32(rng *r) {
    if (r->pos >= 4) {
        philox4x32_10(r->ctr, r->key, r->buf);
        // next block: a 64-bit increment over ctr[0..1]
        if (++r->ctr[0] == 0) r->ctr[1]++;
        r->pos = 0;
    }
    return r->buf[r->pos++];
}

// The first word is the low half.
uint64_t rng_u64(rng *r) {
    uint64_t lo = rng_u32(r);
    uint64_t hi = rng_u32(r);
    return lo | (hi << 32);
}

double rng_uniform(rng *r) { return (double)(rng_u64(r) >> 11) * 0x1p-53; }

// Box-Muller, one value per call (the sine twin is dropped): simpler state, same distribution.
// u1 is taken from (0, 1] so the log is finite.
double rng_normal(rng *r) {
    double u1 = 1.0 - rng_uniform(r);
    double u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

// Rejection: x % n is uniform only when x ranges over a whole number of periods of n, so draws
// below 2^64 mod n (computed as (2^64 - n) % n) are rejected and the rest, a multiple of n values,
// are accepted. The rejected share is < n / 2^64: at most one retry in two even for n near 2^63.
uint64_t rng_below(rng *r, uint64_t n) {
    if (n == 0) fatal("rng_below: n must be > 0");
    uint64_t reject_below = (0 - n) % n;
    for (;;) {
        uint64_t x = rng_u64(r);
        if (x >= reject_below) return x % n;
    }
}

void rng_shuffle(rng *r, int64_t *v, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(r, (uint64_t)i + 1);
        int64_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}
