// test_tensor_half.c: the dtype table, tensor descriptors, and bf16/fp16 conversions.
//
// The conversions are checked three ways: (1) every one of the 65536 bit patterns of each format
// decodes to f32 and encodes back to itself (NaNs stay NaN); (2) encoding is compared with a slow
// reference that knows nothing about bit tricks — it decodes every 16-bit value with ldexp and picks
// the nearest, ties to the even bit pattern — on constructed ties, their neighbours and random
// floats; (3) fp16 is compared with the compiler's own _Float16 conversions where gcc has them.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/half.h"
#include "common/core/tensor.h"
#include "testing.h"

#if defined(__FLT16_MAX__) && (defined(__x86_64__) || defined(__aarch64__))
#define HAVE_FLOAT16 1
#endif

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// The random bit patterns (testing.h's generator).

// ---------------------------------------------------------------- reference rounding

// Reference decoders from the format definitions, with ldexp (no bit shuffling into fp32).
static double ref_decode_bf16(uint16_t h) { // 8-bit exponent, bias 127, 7 mantissa bits
    int e = (h >> 7) & 0xFF, m = h & 0x7F;
    double v = e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
    return (h & 0x8000) ? -v : v;
}
static double ref_decode_f16(uint16_t h) { // 5-bit exponent, bias 15, 10 mantissa bits
    int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

// The positive values of a format in increasing order, indexed by bit pattern 0 .. inf; the
// entry for inf holds where the next value would be (max + one ulp), so "round to nearest, ties
// to even" also gives the IEEE overflow rule: at or past max + ulp/2 the result is inf.
static double bf16_table[0x7F81], f16_table[0x7C01];
static void ref_tables_init(void) {
    for (int h = 0; h < 0x7F80; h++) bf16_table[h] = ref_decode_bf16((uint16_t)h);
    bf16_table[0x7F80] = ldexp(1.0, 128);
    for (int h = 0; h < 0x7C00; h++) f16_table[h] = ref_decode_f16((uint16_t)h);
    f16_table[0x7C00] = 65536.0;
}

// ref_round: nearest entry of table (n entries, last = inf) to |x|, ties to the even pattern.
static uint16_t ref_round(const double *table, int n, float x) {
    double a = fabs((double)x);
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    int lo = 0, hi = n - 1; // find the last entry <= a
    if (a >= table[n - 1]) return sign | (uint16_t)(n - 1);
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (table[mid] <= a) lo = mid;
        else hi = mid - 1;
    }
    if (table[lo] == a) return sign | (uint16_t)lo;
    double d_lo = a - table[lo], d_hi = table[lo + 1] - a; // exact: both fit a double
    int pick = d_lo < d_hi ? lo : d_hi < d_lo ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
    return sign | (uint16_t)pick;
}

static int mismatches_bf16 = 0, mismatches_f16 = 0;
static void check_one(float x) {
    if (isnan(x)) return;
    uint16_t want_b = ref_round(bf16_table, 0x7F81, x), got_b = bf16_from_f32(x);
    uint16_t want_h = ref_round(f16_table, 0x7C01, x), got_h = f16_from_f32(x);
    if (want_b != got_b && mismatches_bf16++ < 5)
        test_fail(__FILE__, __LINE__, "bf16_from_f32(%a) = %04x, want %04x", (double)x, got_b, want_b);
    if (want_h != got_h && mismatches_f16++ < 5)
        test_fail(__FILE__, __LINE__, "f16_from_f32(%a) = %04x, want %04x", (double)x, got_h, want_h);
}

// For every pair of adjacent positive values of a format: the exact midpoint (a tie), the floats
// just below and above it, and both endpoints' float neighbours — where rounding goes wrong.
static void check_around(const double *table, int n) {
    for (int i = 0; i + 1 < n; i++) {
        double mid = 0.5 * (table[i] + table[i + 1]);
        float fm = (float)mid;
        if ((double)fm != mid) continue; // tie not representable in f32 (tiny subnormals)
        float probes[5] = {fm, nextafterf(fm, 0.0f), nextafterf(fm, INFINITY),
                           nextafterf((float)table[i], INFINITY), nextafterf((float)table[i], 0.0f)};
        for (int p = 0; p < 5; p++) {
            check_one(probes[p]);
            check_one(-probes[p]);
        }
    }
}

static void test_rounding_reference(void) {
    ref_tables_init();
    check_around(bf16_table, 0x7F81);
    check_around(f16_table, 0x7C01);
    // random bit patterns: all exponents, all signs
    for (int i = 0; i < 2000000; i++) check_one(float_of(test_rand_u32() ^ (test_rand_u32() << 16)));
    // random values in the fp16 range, where its rounding is interesting
    for (int i = 0; i < 2000000; i++) check_one(float_of(0x33000000u + test_rand_u32() % 0x14800000u));
    CHECK_MSG(mismatches_bf16 == 0, "%d bf16 mismatches with the reference", mismatches_bf16);
    CHECK_MSG(mismatches_f16 == 0, "%d fp16 mismatches with the reference", mismatches_f16);
}

// ---------------------------------------------------------------- exhaustive round trips

static int is_nan_bf16(uint16_t h) { return (h & 0x7F80) == 0x7F80 && (h & 0x007F); }
static int is_nan_f16(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x03FF); }

// decoded_ok: f is the value of pattern h: NaN for NaN patterns, else the reference value (which
// for the infinity patterns is ldexp's huge finite number, so those are checked by class).
static int decoded_ok(float f, uint16_t h, int nan, uint16_t inf_bits, double ref) {
    if (nan) return isnan(f);
    if ((h & 0x7FFF) == inf_bits) return isinf(f) && (signbit(f) != 0) == (h >> 15);
    return (double)f == ref;
}

// reencoded_ok: h2 = encode(decode(h)) equals h, except that a NaN need only stay a NaN of the
// same sign (its payload may be quieted).
static int reencoded_ok(uint16_t h2, uint16_t h, int nan, int h2_nan) {
    if (nan) return h2_nan && (h2 >> 15) == (h >> 15);
    return h2 == h;
}

static void test_roundtrip_all_patterns(void) {
    int bad_bf16 = 0, bad_f16 = 0, bad_dec_bf16 = 0, bad_dec_f16 = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float b = f32_from_bf16(h), f = f32_from_f16(h);
        bad_dec_bf16 += !decoded_ok(b, h, is_nan_bf16(h), 0x7F80, ref_decode_bf16(h));
        bad_dec_f16 += !decoded_ok(f, h, is_nan_f16(h), 0x7C00, ref_decode_f16(h));
        uint16_t b2 = bf16_from_f32(b), f2 = f16_from_f32(f);
        bad_bf16 += !reencoded_ok(b2, h, is_nan_bf16(h), is_nan_bf16(b2));
        bad_f16 += !reencoded_ok(f2, h, is_nan_f16(h), is_nan_f16(f2));
    }
    CHECK_MSG(bad_dec_bf16 == 0, "%d bf16 patterns decode wrongly", bad_dec_bf16);
    CHECK_MSG(bad_dec_f16 == 0, "%d fp16 patterns decode wrongly", bad_dec_f16);
    CHECK_MSG(bad_bf16 == 0, "%d bf16 patterns do not round-trip", bad_bf16);
    CHECK_MSG(bad_f16 == 0, "%d fp16 patterns do not round-trip", bad_f16);
}

// ---------------------------------------------------------------- constructed cases

static void test_special_values(void) {
    // bf16 ties: 1 + 2^-8 lies halfway between 1 (0x3F80, even) and 1 + 2^-7 (0x3F81): even wins
    CHECK(bf16_from_f32(1.0f + 0x1p-8f) == 0x3F80);
    CHECK(bf16_from_f32(1.0f + 0x1p-8f + 0x1p-23f) == 0x3F81); // just above the tie: up
    CHECK(bf16_from_f32(1.0f + 3 * 0x1p-8f) == 0x3F82);        // tie 0x3F81/0x3F82: up to even
    CHECK(bf16_from_f32(-1.0f - 0x1p-8f) == 0xBF80);
    CHECK(bf16_from_f32(3.4028235e38f) == 0x7F80); // FLT_MAX rounds past the bf16 max: inf
    CHECK(bf16_from_f32(-INFINITY) == 0xFF80);
    CHECK(bf16_from_f32(0x1p-149f) == 0x0000); // smallest f32 subnormal: below bf16's 2^-133
    CHECK(bf16_from_f32(0x1p-133f) == 0x0001); // smallest bf16 subnormal
    CHECK(bf16_from_f32(-0.0f) == 0x8000);
    CHECK(isnan(f32_from_bf16(bf16_from_f32(NAN))));
    CHECK(isnan(f32_from_bf16(bf16_from_f32(float_of(0x7F800001u))))); // a low-payload signalling NaN
    CHECK(isnan(f32_from_bf16(bf16_from_f32(float_of(0xFF800001u)))));

    // fp16
    CHECK(f16_from_f32(1.0f) == 0x3C00);
    CHECK(f16_from_f32(1.0f + 0x1p-11f) == 0x3C00);               // tie, even stays
    CHECK(f16_from_f32(1.0f + 3 * 0x1p-11f) == 0x3C02);           // tie, up to even
    CHECK(f16_from_f32(65504.0f) == 0x7BFF);                       // max finite
    CHECK(f16_from_f32(65519.99f) == 0x7BFF);                      // below max + ulp/2
    CHECK(f16_from_f32(65520.0f) == 0x7C00);                       // the tie overflows to inf
    CHECK(f16_from_f32(-1e9f) == 0xFC00);
    CHECK(f16_from_f32(0x1p-14f) == 0x0400);                       // smallest normal
    CHECK(f16_from_f32(0x1p-24f) == 0x0001);                       // smallest subnormal
    CHECK(f16_from_f32(0x1p-25f) == 0x0000);                       // tie between 0 and 2^-24: even = 0
    CHECK(f16_from_f32(0x1p-25f + 0x1p-40f) == 0x0001);            // just above: up
    CHECK(f16_from_f32(3 * 0x1p-25f) == 0x0002);                   // tie between 1 and 2 units: 2
    CHECK(f16_from_f32(0x1p-14f - 0x1p-25f) == 0x0400);            // tie: max subnormal / min normal
    CHECK(f16_from_f32(-0x1p-30f) == 0x8000);                      // underflow keeps the sign
    CHECK(f32_from_f16(0x0001) == 0x1p-24f);
    CHECK(f32_from_f16(0x03FF) == 1023 * 0x1p-24f);
    CHECK(f32_from_f16(0x7BFF) == 65504.0f);
    CHECK(isinf(f32_from_f16(0xFC00)) && f32_from_f16(0xFC00) < 0);
    CHECK(isnan(f32_from_f16(f16_from_f32(NAN))));
    CHECK(isnan(f32_from_f16(f16_from_f32(float_of(0x7F800001u))))); // payload only in the dropped bits
    CHECK(bits_of(f32_from_f16(0x8000)) == 0x80000000u);
}

// The compiler's _Float16 is an independent implementation of the same IEEE conversions.
static void test_against_float16(void) {
#ifdef HAVE_FLOAT16
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        _Float16 v;
        uint16_t hb = (uint16_t)h;
        memcpy(&v, &hb, 2);
        float mine = f32_from_f16(hb), theirs = (float)v;
        if (isnan(theirs) ? !isnan(mine) : bits_of(mine) != bits_of(theirs)) bad++;
    }
    CHECK_MSG(bad == 0, "%d fp16 decodes differ from _Float16", bad);
    bad = 0;
    for (int i = 0; i < 4000000; i++) {
        // half the inputs near the fp16 range, half anywhere
        uint32_t u = (i & 1) ? (test_rand_u32() ^ (test_rand_u32() << 16))
                             : 0x33000000u + test_rand_u32() % 0x14800000u;
        if (i & 2) u |= 0x80000000u;
        float x = float_of(u);
        if (isnan(x)) continue;
        _Float16 v = (_Float16)x;
        uint16_t theirs;
        memcpy(&theirs, &v, 2);
        if (f16_from_f32(x) != theirs && bad++ < 5)
            test_fail(__FILE__, __LINE__, "f16_from_f32(%a) = %04x, _Float16 gives %04x", (double)x,
                      f16_from_f32(x), theirs);
    }
    CHECK_MSG(bad == 0, "%d fp16 encodes differ from _Float16", bad);
#else
    printf("note: no _Float16 in this compiler; fp16 checked against the reference only\n");
#endif
}

static void test_convert_arrays(void) {
    enum { N = 100003 }; // past the OpenMP threshold, odd
    float *src = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
    uint16_t *h = malloc(N * 2);
    for (int i = 0; i < N; i++) src[i] = (float)(i - N / 2) * 0.37f;
    int bad = 0;
    CHECK(convert_from_f32(h, DT_BF16, src, N) == 0);
    CHECK(convert_to_f32(back, h, DT_BF16, N) == 0);
    for (int i = 0; i < N; i++) bad += h[i] != bf16_from_f32(src[i]) || back[i] != f32_from_bf16(h[i]);
    CHECK(convert_from_f32(h, DT_F16, src, N) == 0);
    CHECK(convert_to_f32(back, h, DT_F16, N) == 0);
    for (int i = 0; i < N; i++) bad += h[i] != f16_from_f32(src[i]) || back[i] != f32_from_f16(h[i]);
    CHECK(convert_from_f32(back, DT_F32, src, N) == 0);
    for (int i = 0; i < N; i++) bad += back[i] != src[i];
    CHECK(convert_to_f32(back, src, DT_F32, 0) == 0);
    CHECK_MSG(bad == 0, "%d array conversion mismatches", bad);
    CHECK_ERR(convert_to_f32(back, h, DT_I32, 4), "I32");
    CHECK_ERR(convert_from_f32(h, DT_U8, src, 4), "U8");
    free(src);
    free(back);
    free(h);
}

static void test_dtypes_and_tensors(void) {
    static const char *names[DT_COUNT] = {"F32", "F16",  "BF16", "F64",     "I8",      "U8",     "I16",    "U16",
                                          "I32", "U32",  "I64",  "U64",     "BOOL",    "F8_E4M3", "F8_E5M2", "F8_E8M0"};
    static const size_t sizes[DT_COUNT] = {4, 2, 2, 8, 1, 1, 2, 2, 4, 4, 8, 8, 1, 1, 1, 1};
    for (int i = 0; i < DT_COUNT; i++) {
        dtype dt = DT_COUNT;
        CHECK(strcmp(dtype_name((dtype)i), names[i]) == 0);
        CHECK(dtype_size((dtype)i) == sizes[i]);
        CHECK(dtype_parse(names[i], &dt) == 0 && dt == (dtype)i);
    }
    dtype dt;
    CHECK_ERR(dtype_parse("bf16", &dt), "'bf16'"); // spellings are exact, as in safetensors
    CHECK_ERR(dtype_parse("F8_E4M3FNUZ", &dt), "unknown dtype"); // F8_E4M3 is known (quantised checkpoints)
    CHECK_ERR(dtype_parse("", &dt), "unknown dtype");

    int64_t shape[3] = {4, 128, 3};
    float dummy;
    tensor t = tensor_make(DT_BF16, &dummy, DEVICE_CPU, 3, shape);
    CHECK(t.ndim == 3 && t.dt == DT_BF16 && t.data == &dummy && t.device == DEVICE_CPU);
    CHECK(tensor_numel(&t) == 4 * 128 * 3);
    CHECK(tensor_bytes(&t) == 4 * 128 * 3 * 2);
    char buf[64];
    CHECK(strcmp(tensor_shape_str(&t, buf, sizeof buf), "[4, 128, 3]") == 0);
    CHECK(strcmp(shape_str(0, shape, buf, sizeof buf), "[]") == 0);
    tensor s = tensor_make(DT_F32, NULL, DEVICE_CUDA, 0, NULL);
    CHECK(tensor_numel(&s) == 1 && tensor_bytes(&s) == 4 && s.device == DEVICE_CUDA);
    int64_t zero[2] = {0, 7};
    tensor z = tensor_make(DT_I64, NULL, DEVICE_CPU, 2, zero);
    CHECK(tensor_numel(&z) == 0 && tensor_bytes(&z) == 0);
    // a short buffer is truncated, never overrun
    char small[6];
    memset(small, 'x', sizeof small);
    shape_str(3, shape, small, 5);
    CHECK(strlen(small) == 4 && small[5] == 'x');
}

int main(void) {
    test_rand_seed(0x9E3779B97F4A7C15ull);
    test_dtypes_and_tensors();
    test_special_values();
    test_roundtrip_all_patterns();
    test_rounding_reference();
    test_against_float16();
    test_convert_arrays();
    return test_finish("test_tensor_half");
}
