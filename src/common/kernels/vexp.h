// vexp.h: vexpf, an exp for fp32 that the compiler vectorises (glibc's expf is a scalar call in
// every loop: silu, sigmoid and softmax loops ran at one expf per ~5 ns). CPU kernels only.
//
// Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2 (ln2 split into a part exact in fp32 and
// the rest), a degree-6 polynomial for e^r (Cephes' expf coefficients), and 2^n put into the
// exponent bits. Error: 8.2e-8 relative at most (~1.4 ulp) over the whole normal range, measured
// on 2^22 points against exp() in double; tests/unit/test_ops.c holds it to 2.5e-7 (2 ulp). Edges as expf: exp(-inf) = 0 and anything below -87.3 (a subnormal result) is 0,
// above 88.7 is +inf, NaN stays NaN.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t vexp_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline float vexp_float(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

// The range tests are integer compares of the bits and the selects are masks: a float compare may
// trap (-ftrapping-math, the default) and would keep the loop from vectorising.
static inline float vexpf(float x) {
    const uint32_t LO = 0xC2AEAC50u, HI = 0x42B17218u; // -87.33654 (exp = 2^-126), 88.72283 (exp = FLT_MAX)
    const uint32_t ux = vexp_bits(x);
    const uint32_t neg = -(ux >> 31);
    const uint32_t nan = -(uint32_t)((ux & 0x7fffffffu) > 0x7f800000u);
    const uint32_t under = neg & -(uint32_t)(ux > LO);  // x < LO (negative floats order by magnitude), -inf
    const uint32_t over = ~neg & -(uint32_t)(ux > HI);  // x > HI, +inf
    const float xc = vexp_float((under & LO) | (over & HI) | (~under & ~over & ux));
    const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; // round to nearest (1.5 * 2^23)
    const float r = xc - n * 0.693359375f + n * 2.12194440e-4f;              // ln 2 in two parts: r is exact
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t ni = (int32_t)n;                       // [-126, 128]; 2^128 is not an fp32 exponent:
    const int32_t top = -(int32_t)(ni > 127);            // 2^127 * 2
    const float e = p * vexp_float((uint32_t)(((ni + top) + 127) << 23)) * vexp_float(0x3f800000u + ((uint32_t)top & 0x00800000u));
    const uint32_t inf = 0x7f800000u;
    return vexp_float((nan & ux) | (~nan & ((over & inf) | (~over & ~under & vexp_bits(e)))));
}

// VEXP_CLONES: put before a function whose loops call vexpf (or are otherwise worth AVX) to have
// GCC build it three times, for x86-64-v4 (AVX-512), v3 (AVX2 + FMA) and the baseline (SSE2), and
// pick one when the program loads (ifunc): the build stays portable and a row of exps runs 8 or 16
// wide where the CPU can. Empty on other compilers and architectures.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(DFLASH_NO_CLONES)
#define VEXP_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define VEXP_CLONES
#endif
