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

static inline float vexpf(float x) {
    const float log2e = 1.44269504088896341f, ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    const float lo = -87.33654f, hi = 88.72283f;        // exp(lo) = 2^-126 (smallest normal), exp(hi) = FLT_MAX
    float xc = x < lo ? lo : (x > hi ? hi : x);         // NaN passes through to the end
    float n = (xc * log2e + 12582912.0f) - 12582912.0f; // round to nearest: 1.5 * 2^23; n in [-126, 128]
    float r = (xc - n * ln2_hi) - n * ln2_lo;
    float two = n > 127.0f ? 2.0f : 1.0f;               // 2^128 is not an fp32 exponent: 2^127 * 2
    n = n > 127.0f ? 127.0f : n;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale * two;
    y = x < lo ? 0.0f : y;
    y = x > hi ? INFINITY : y;
    return x != x ? x : y;
}
