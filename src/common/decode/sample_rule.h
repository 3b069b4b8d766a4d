// sample_rule.h: the pieces of ops_sample's rule (ops_decode.h) that the CPU twin and the CUDA
// kernel must compute bit for bit alike: the order key of an id and the integer mass of a logit.
// Included by ops_decode_cpu.c and ops_decode_cuda.cu (which defines SAMPLE_RULE_FN as a host and
// device function first); never by a header.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifndef SAMPLE_RULE_FN
#define SAMPLE_RULE_FN static inline
#endif

#define SAMPLE_MASS_ONE 1099511627776.0 // 2^40: the mass of the most probable id

// The order of ids, as one u64 compared descending: the logit's f32 bits made monotone (a total
// order: -0 before +0, NaNs at the ends) in the high word, ~id in the low word (lower id first).
SAMPLE_RULE_FN uint64_t sample_order_key(float z, int32_t id) {
    uint32_t b;
    memcpy(&b, &z, sizeof b);
    b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((uint64_t)b << 32) | (uint64_t)(0xFFFFFFFFu - (uint32_t)id);
}

// The mass of an id whose scaled logit is t (= z / T as one fp64 multiply by 1/T) when the largest
// is mx: floor(exp(t - mx) * 2^40); 0 for NaN.
SAMPLE_RULE_FN uint64_t sample_mass(double t, double mx) {
    double p = exp(t - mx) * SAMPLE_MASS_ONE;
    return p >= 1.0 ? (uint64_t)p : 0;
}

// The mass the top-p cut must reach within a prefix of mass K (at least 1).
SAMPLE_RULE_FN uint64_t sample_top_p_want(float top_p, uint64_t K) {
    double w = ceil((double)top_p * (double)K);
    return w >= 1.0 ? (uint64_t)w : 1;
}

// The draw's offset in a kept mass (u in [0, 1)): U in [0, kept - 1].
SAMPLE_RULE_FN uint64_t sample_offset(double u, uint64_t kept) {
    double x = u * (double)kept;
    uint64_t U = x > 0.0 ? (uint64_t)x : 0;
    return U < kept ? U : kept - 1;
}
