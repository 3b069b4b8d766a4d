// test_rng.c: Philox4x32-10 against Random123's known answers, the (seed, step, id) stream layout,
// and the distributions. The streams are deterministic, so the statistical bounds below either
// always pass or always fail; each is wide enough (>= 5 sigma, or a p = 0.001 chi-square
// critical value) that a correct generator passes with any seed, and narrow enough to catch the
// usual bugs (modulo bias, an off-by-one range, a wrong Box-Muller constant).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/rng.h"
#include "testing.h"

// Random123 (D. E. Shaw Research), tests/kat_vectors, the three "philox4x32 10" lines:
// counter (4 words), key (2 words) -> output (4 words).
static void test_known_answers(void) {
    static const uint32_t kat[3][10] = {
        {0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000,
         0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
         0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
         0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        philox4x32_10(&kat[i][0], &kat[i][4], out);
        CHECK_MSG(memcmp(out, &kat[i][6], sizeof out) == 0,
                  "philox4x32_10 vector %d: %08x %08x %08x %08x", i, out[0], out[1], out[2], out[3]);
    }
}

// The stream of (seed, step, id) is block b = philox(ctr = {b lo, b hi, id, step}, key = seed).
static void test_stream_layout(void) {
    uint64_t seed = 0x0123456789ABCDEFull;
    rng r;
    rng_init(&r, seed, 77, 0x00050003u);
    uint32_t key[2] = {0x89ABCDEFu, 0x01234567u};
    int bad = 0;
    for (uint32_t b = 0; b < 3; b++) {
        uint32_t ctr[4] = {b, 0, 0x00050003u, 77}, want[4];
        philox4x32_10(ctr, key, want);
        for (int j = 0; j < 4; j++) bad += rng_u32(&r) != want[j];
    }
    CHECK_MSG(bad == 0, "rng_u32 does not read blocks 0, 1, 2 of the documented counter layout");

    // the block counter carries into its high word
    rng_init(&r, seed, 77, 1);
    r.ctr[0] = 0xFFFFFFFFu;
    (void)rng_u32(&r);
    CHECK(r.ctr[0] == 0 && r.ctr[1] == 1);

    // rng_u64: the first word is the low half
    rng a, b;
    rng_init(&a, 5, 6, 7);
    rng_init(&b, 5, 6, 7);
    uint64_t lo = rng_u32(&b), hi = rng_u32(&b);
    CHECK(rng_u64(&a) == (lo | (hi << 32)));

    // steps past 2^32 still give distinct streams for one seed
    rng_init(&a, 5, 1, 7);
    rng_init(&b, 5, (1ull << 32) | 1, 7);
    CHECK(rng_u64(&a) != rng_u64(&b));
}

static void test_determinism(void) {
    rng a, b;
    rng_init(&a, 42, 1000, 3);
    rng_init(&b, 42, 1000, 3);
    int same = 1;
    for (int i = 0; i < 10000; i++) same &= rng_u32(&a) == rng_u32(&b);
    CHECK_MSG(same, "the same (seed, step, id) gave different streams");

    // any one of seed, step, id changed: a different stream (first 4 words compared)
    uint64_t triples[4][3] = {{42, 1000, 3}, {43, 1000, 3}, {42, 1001, 3}, {42, 1000, 4}};
    uint32_t first[4][4];
    for (int t = 0; t < 4; t++) {
        rng_init(&a, triples[t][0], triples[t][1], (uint32_t)triples[t][2]);
        for (int j = 0; j < 4; j++) first[t][j] = rng_u32(&a);
    }
    for (int t = 1; t < 4; t++)
        CHECK_MSG(memcmp(first[0], first[t], sizeof first[0]) != 0, "triple %d", t);
}

static void test_below(void) {
    rng r;
    rng_init(&r, 1, 2, 3);
    // range, including the edges of uint64
    static const uint64_t ns[] = {1, 2, 3, 7, 10, 1000, (1ull << 63) + 1, UINT64_MAX};
    int out_of_range = 0;
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (int j = 0; j < 20000; j++) out_of_range += rng_below(&r, ns[i]) >= ns[i];
    CHECK(out_of_range == 0);

    // uniformity over 10 values: chi-square with 9 degrees of freedom; 27.88 is the p = 0.001
    // critical value
    enum { K = 10, DRAWS = 200000 };
    long count[K] = {0};
    for (int j = 0; j < DRAWS; j++) count[rng_below(&r, K)]++;
    double chi2 = 0, expect = (double)DRAWS / K;
    for (int k = 0; k < K; k++) chi2 += (count[k] - expect) * (count[k] - expect) / expect;
    CHECK_MSG(chi2 < 27.88, "rng_below(10) chi-square %.2f >= 27.88", chi2);

    // no modulo bias: for n = 3 * 2^62, plain x % n would land in [0, 2^62) half the time instead
    // of a third. 30000 draws: sigma = 0.0027, bound 0.02 (7 sigma) — far from 1/2.
    uint64_t n = 3ull << 62;
    int low = 0;
    for (int j = 0; j < 30000; j++) low += rng_below(&r, n) < (1ull << 62);
    CHECK_MSG(fabs(low / 30000.0 - 1.0 / 3) < 0.02, "rng_below(3*2^62): %.4f below 2^62, want 1/3",
              low / 30000.0);
}

static void test_uniform_normal(void) {
    rng r;
    rng_init(&r, 7, 0, 0);
    enum { N = 1000000 };
    double mn = 1, mx = 0, sum = 0;
    for (int i = 0; i < N; i++) {
        double u = rng_uniform(&r);
        mn = u < mn ? u : mn;
        mx = u > mx ? u : mx;
        sum += u;
    }
    CHECK(mn >= 0.0 && mx < 1.0);
    CHECK(mn < 1e-4 && mx > 1 - 1e-4); // the whole interval is reached
    // mean 1/2, sigma of the mean sqrt(1/12/N) = 2.9e-4: 5 sigma = 0.0015
    CHECK_CLOSE(sum / N, 0.5, 0.0015);

    double s1 = 0, s2 = 0, s4 = 0;
    long within1 = 0;
    int finite = 1;
    for (int i = 0; i < N; i++) {
        double x = rng_normal(&r);
        finite &= isfinite(x);
        s1 += x;
        s2 += x * x;
        s4 += x * x * x * x;
        within1 += fabs(x) < 1.0;
    }
    CHECK(finite);
    double mean = s1 / N, var = s2 / N - mean * mean;
    CHECK_CLOSE(mean, 0.0, 0.005);            // 5 sigma: 5 / sqrt(N)
    CHECK_CLOSE(var, 1.0, 0.0071);            // 5 sigma: 5 sqrt(2 / N)
    CHECK_CLOSE(s4 / N, 3.0, 0.05);           // kurtosis 3; sigma sqrt(96 / N) ~ 0.0098
    CHECK_CLOSE((double)within1 / N, 0.682689, 0.0024); // P(|x| < 1); 5 sigma
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void test_shuffle(void) {
    rng r;
    rng_init(&r, 11, 12, 13);
    enum { N = 1000 };
    int64_t v[N];
    for (int i = 0; i < N; i++) v[i] = i * 3;
    rng_shuffle(&r, v, N);
    int moved = 0;
    for (int i = 0; i < N; i++) moved += v[i] != i * 3;
    CHECK(moved > N / 2);
    qsort(v, N, sizeof v[0], cmp_i64);
    int perm = 1;
    for (int i = 0; i < N; i++) perm &= v[i] == i * 3;
    CHECK_MSG(perm, "rng_shuffle did not produce a permutation");
    rng_shuffle(&r, v, 0); // no-ops
    rng_shuffle(&r, v, 1);
    CHECK(v[0] == 0);

    // all 6 orders of 3 items equally likely: chi-square, 5 degrees of freedom, p = 0.001 at 20.52
    enum { T = 60000 };
    long count[6] = {0};
    for (int t = 0; t < T; t++) {
        int64_t w[3] = {0, 1, 2};
        rng_shuffle(&r, w, 3);
        count[w[0] * 2 + (w[1] > w[2])]++; // first element and the order of the other two
    }
    double chi2 = 0, e = T / 6.0;
    for (int k = 0; k < 6; k++) chi2 += (count[k] - e) * (count[k] - e) / e;
    CHECK_MSG(chi2 < 20.52, "rng_shuffle(3) orders chi-square %.2f >= 20.52", chi2);
}

int main(void) {
    test_known_answers();
    test_stream_layout();
    test_determinism();
    test_below();
    test_uniform_normal();
    test_shuffle();
    return test_finish("test_rng");
}
