// half.c: bf16 / fp16 <-> fp32 conversion on the CPU (see half.h).
//
// All conversions work on the bit patterns, so they are exact and do not depend on the FPU's
// rounding mode or on compiler support for 16-bit float types.
//
//   bf16: 1 sign, 8 exponent (bias 127), 7 mantissa bits: the top half of an fp32.
//   fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; exponent 0 = zero/subnormal
//         (value mantissa * 2^-24), exponent 31 = inf/NaN. Largest finite value 65504.
#include "common/core/half.h"

#include <string.h>

#include "common/core/error.h"

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint16_t bf16_from_f32(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
        // NaN: keep the sign and the top payload bits, force the quiet bit so that truncating the
        // payload can never turn the NaN into an infinity.
        return (uint16_t)((u >> 16) | 0x0040u);
    }
    // Round to nearest even on the 16 dropped bits: adding 0x7FFF rounds halves down, and the
    // extra +1 when the kept lsb is odd turns exact halves into round-up. A carry out of the
    // mantissa bumps the exponent, which is the right answer (and gives inf past the bf16 max).
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float f32_from_bf16(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint16_t f16_from_f32(float x) {
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu; // |x|
    if (a >= 0x7F800000u) {
        if (a == 0x7F800000u) return sign | 0x7C00u; // inf
        // NaN: quiet bit set, top payload bits kept (as in bf16_from_f32).
        return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x03FFu));
    }
    // 65520 = 65504 + half an ulp: the tie rounds to the "even" neighbour, which is 2^16 (odd
    // mantissa 0x3FF below it), i.e. overflow. Everything from there up becomes inf.
    if (a >= 0x477FF000u) return sign | 0x7C00u;
    if (a < 0x38800000u) {
        // |x| < 2^-14: an fp16 subnormal (or zero). Count in units of 2^-24: |x| = m * 2^(e-150)
        // with the implicit bit in m, so the value is m >> (126 - e) units, rounded to even.
        int e = (int)(a >> 23);
        int shift = 126 - e; // >= 14 here
        if (shift > 24) return sign; // below 2^-25 (or an fp32 subnormal): rounds to zero
        uint32_t m = (a & 0x007FFFFFu) | 0x00800000u;
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++; // q may reach 0x400: smallest normal
        return (uint16_t)(sign | q);
    }
    // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even;
    // a mantissa carry bumps the exponent correctly.
    a -= (uint32_t)(127 - 15) << 23;
    a += 0x0FFFu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (a >> 13));
}

float f32_from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu;
    uint32_t m = h & 0x03FFu;
    if (e == 0) {
        // zero or subnormal: m * 2^-24, exact in fp32
        float v = (float)m * 0x1p-24f;
        return f32_from_bits(f32_bits(v) | sign);
    }
    if (e == 31) return f32_from_bits(sign | 0x7F800000u | (m << 13)); // inf / NaN (payload kept)
    return f32_from_bits(sign | ((e + 127 - 15) << 23) | (m << 13));
}

// F8_E4M3: exponent field e, mantissa m; e = 0: m * 2^-9 (subnormal), else (8 + m) * 2^(e - 10).
float f32_from_f8e4m3(uint8_t b) {
    uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    uint32_t e = (b >> 3) & 0x0Fu, m = b & 0x07u;
    if (e == 15 && m == 7) return f32_from_bits(sign | 0x7FC00000u); // NaN (the format has no inf)
    if (e == 0) {
        float v = (float)m * 0x1p-9f; // exact
        return f32_from_bits(f32_bits(v) | sign);
    }
    return f32_from_bits(sign | ((e + 127 - 7) << 23) | (m << 20));
}

float f32_from_f8e5m2(uint8_t b) { return f32_from_f16((uint16_t)((uint16_t)b << 8)); }

float f32_from_f8e8m0(uint8_t b) {
    if (b == 0xFF) return f32_from_bits(0x7FC00000u);
    if (b == 0) return 0x1p-127f; // the one value below the fp32 normals: 2^22 * 2^-149, exact
    return f32_from_bits((uint32_t)b << 23);
}

int convert_to_f32(float *dst, const void *src, dtype src_dt, int64_t n) {
    switch (src_dt) {
    case DT_F32:
        if (n > 0 && (const void *)dst != src) memmove(dst, src, (size_t)n * sizeof(float));
        return 0;
    case DT_BF16:
    case DT_F16: { // src may come straight from a file's bytes: each value loaded through memcpy (any alignment)
        const unsigned char *s = src;
        int bf = src_dt == DT_BF16;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, sizeof h);
            dst[i] = bf ? f32_from_bf16(h) : f32_from_f16(h);
        }
        return 0;
    }
    case DT_F8_E4M3:
    case DT_F8_E5M2:
    case DT_F8_E8M0: {
        const uint8_t *s = src;
        float (*f)(uint8_t) = src_dt == DT_F8_E4M3 ? f32_from_f8e4m3 : src_dt == DT_F8_E5M2 ? f32_from_f8e5m2
                                                                                             : f32_from_f8e8m0;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
        for (int64_t i = 0; i < n; i++) dst[i] = f(s[i]);
        return 0;
    }
    default:
        return error_set("cannot convert %s to F32 (only F32, F16, BF16, F8_E4M3, F8_E5M2 and F8_E8M0)",
                         dtype_name(src_dt));
    }
}

int convert_from_f32(void *dst, dtype dst_dt, const float *src, int64_t n) {
    switch (dst_dt) {
    case DT_F32:
        if (n > 0 && dst != (const void *)src) memmove(dst, src, (size_t)n * sizeof(float));
        return 0;
    case DT_BF16: {
        uint16_t *d = dst;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
        for (int64_t i = 0; i < n; i++) d[i] = bf16_from_f32(src[i]);
        return 0;
    }
    case DT_F16: {
        uint16_t *d = dst;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
        for (int64_t i = 0; i < n; i++) d[i] = f16_from_f32(src[i]);
        return 0;
    }
    default:
        return error_set("cannot convert F32 to %s (only F32, F16 and BF16)", dtype_name(dst_dt));
    }
}
