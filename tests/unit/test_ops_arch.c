// test_ops_arch.c: the architecture ops (activation.h, elementwise.h, attention.h:
// ops_attention_ext) and the decode attention with a window and sinks (ops_attention_decode_ext)
// on the CPU backend (the fp32 reference), against naive formulas written here independently, in
// double.
//
// u = 2^-24 is the fp32 unit roundoff. Tolerances, per op:
//   attention_ext, decode_ext  2e-5 * max|v| per element, as test_ops.c's attention: scores are fp32
//                              dot products of hd <= 16 terms, exp in fp32 (~2 ulp), fp32 sums over
//                              <= 20 keys (and the sink); the output is a (sub-)convex combination
//                              of the values, so its error is ~(hd |s| + n_keys) u max|v| ~ 1e-5
//                              max|v|. A wrong window edge, a dropped or doubled sink or a wrong kv
//                              head errs by O(max|v|) (the sinks are drawn so that they hold a
//                              sizeable share of the mass). Bit-for-bit checks where the op must run
//                              the same arithmetic: window >= the sequence vs no window,
//                              ops_attention_causal vs ext(0, NULL), window 1 without sinks = v.
//   bias_add, moe_bias_add     0: one fp32 rounding of the exact sum of two floats (the double sum
//                              is exact), i.e. the rounded double sum; rows of no expert untouched
//   scale                      0: one fp32 rounding of the exact product (exact in double)
//   softcap                    8 u |ref| + 1e-30: x / cap and cap * t are one rounding each, tanhf is
//                              within ~2 ulp, and tanh's condition number y tanh'(y) / tanh(y) <= 1
//                              carries the argument's rounding over unamplified
//   geglu_tanh                 8 u |ref| + 8 u |0.5 g up|: near the lower tail 1 + tanh(a) cancels
//                              (a ~ -25 for g = -8), so tanhf's absolute error (~1 ulp of 1, 2^-24)
//                              and the argument's rounding (sech^2(a) |a| ~4 u <= 2 u absolute)
//                              become an absolute error of a few u in the factor (1 + tanh a), i.e.
//                              of a few u |0.5 g up| in the result; elsewhere a few roundings
//   swiglu_clamped             32 u |ref| + 1e-35: exp(-alpha g) with |alpha g| <= ~12 carries the
//                              rounding of alpha g amplified by |alpha g| (~12 u relative), plus
//                              expf (1-2 ulp) and four roundings; the clamps are exact (and checked
//                              exactly on values past the limit on both sides)
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/decode/ops_decode.h"
#include "common/kernels/ops.h"
#include "testing.h"
#include "testing_device.h"

#define U32 0x1p-24 // fp32 unit roundoff

static backend be;

// ----------------------------------------------------------------------------- attention reference

// o[hd] = the attention of query qv over keys/values j0 .. j1 (inclusive) at k/v + j * stride, in
// double, with the sink logit (or -inf: none) in the softmax's denominator only.
static void ref_attend(double *o, const float *qv, const float *k, const float *v, int64_t stride, int j0, int j1,
                       int hd, double scale, double sink, double *p) {
    double mx = sink, sum = 0;
    for (int j = j0; j <= j1; j++) {
        double dot = 0;
        for (int i = 0; i < hd; i++) dot += (double)qv[i] * k[(size_t)j * stride + i];
        p[j] = dot * scale;
        mx = fmax(mx, p[j]);
    }
    for (int j = j0; j <= j1; j++) sum += (p[j] = exp(p[j] - mx));
    if (sink != -INFINITY) sum += exp(sink - mx); // the sink: in the denominator, in no column
    for (int i = 0; i < hd; i++) {
        double acc = 0;
        for (int j = j0; j <= j1; j++) acc += p[j] / sum * v[(size_t)j * stride + i];
        o[i] = acc;
    }
}

// sinks of nq heads: a spread of logits, some large enough to take most of a row's mass, some
// negligible
static float *make_sinks(int nq) {
    float *s = malloc((size_t)nq * sizeof(float));
    for (int h = 0; h < nq; h++) s[h] = h % 3 == 0 ? 3.0f : h % 3 == 1 ? (float)test_rand_pm1() : -20.0f;
    return s;
}

static void attention_ext_case(const int *lens, int n_seq, int nq, int nkv, int hd, int window, int with_sinks) {
    int32_t cu[8];
    cu[0] = 0;
    for (int s = 0; s < n_seq; s++) cu[s + 1] = cu[s] + lens[s];
    int T = cu[n_seq], group = nq / nkv;
    size_t nqe = (size_t)T * nq * hd, nke = (size_t)T * nkv * hd;
    float *q = test_rand_vec(nqe, 3), *k = test_rand_vec(nke, 1), *v = test_rand_vec(nke, 1), *out = test_rand_vec(nqe, 1);
    float *sinks = with_sinks ? make_sinks(nq) : NULL;
    float scale = 1.0f / sqrtf((float)hd);
    ops_attention_ext(&be, out, q, k, v, cu, n_seq, T, nq, nkv, hd, scale, window, sinks);

    double vmax = 0;
    for (size_t i = 0; i < nke; i++) vmax = fmax(vmax, fabs(v[i]));
    double tol = 2e-5 * vmax, worst = 0, *p = malloc((size_t)T * sizeof(double)), o[64];
    int bad = 0;
    for (int s = 0; s < n_seq; s++)
        for (int t = cu[s]; t < cu[s + 1]; t++)
            for (int h = 0; h < nq; h++) {
                int kh = h / group;
                int j0 = window > 0 && t - window + 1 > cu[s] ? t - window + 1 : cu[s]; // t - window < j <= t
                ref_attend(o, q + ((size_t)t * nq + h) * hd, k + (size_t)kh * hd, v + (size_t)kh * hd,
                           (int64_t)nkv * hd, j0, t, hd, scale, sinks ? sinks[h] : -INFINITY, p);
                for (int i = 0; i < hd; i++) {
                    double err = fabs(out[((size_t)t * nq + h) * hd + i] - o[i]);
                    if (!(err <= tol)) bad++;
                    if (err > worst || err != err) worst = err;
                }
            }
    CHECK_MSG(bad == 0,
              "attention_ext seqs=%d (T=%d) nq=%d nkv=%d hd=%d window=%d sinks=%d: %d elements off, max err %.3g > %.3g",
              n_seq, T, nq, nkv, hd, window, with_sinks, bad, worst, tol);

    // a window of at least the longest sequence is no window: the same arithmetic, bit for bit
    int longest = 0;
    for (int s = 0; s < n_seq; s++) longest = lens[s] > longest ? lens[s] : longest;
    if (window >= longest) {
        float *o0 = malloc(nqe * sizeof(float));
        ops_attention_ext(&be, o0, q, k, v, cu, n_seq, T, nq, nkv, hd, scale, 0, sinks);
        CHECK_MSG(memcmp(o0, out, nqe * sizeof(float)) == 0, "attention_ext window %d >= %d differs from no window",
                  window, longest);
        free(o0);
    }
    // window 1 without sinks: each query sees only its own key, softmax 1: its value row exactly
    if (window == 1 && !with_sinks) {
        int bad1 = 0;
        for (int t = 0; t < T; t++)
            for (int h = 0; h < nq; h++)
                bad1 += memcmp(out + ((size_t)t * nq + h) * hd, v + ((size_t)t * nkv + h / group) * hd,
                               (size_t)hd * sizeof(float)) != 0;
        CHECK_MSG(bad1 == 0, "attention_ext window 1: %d rows are not their value row", bad1);
    }
    // no window, no sinks: ops_attention_causal, bit for bit
    if (window == 0 && !with_sinks) {
        float *oc = malloc(nqe * sizeof(float));
        ops_attention_causal(&be, oc, q, k, v, cu, n_seq, T, nq, nkv, hd, scale);
        CHECK_MSG(memcmp(oc, out, nqe * sizeof(float)) == 0, "attention_causal differs from attention_ext(0, NULL)");
        free(oc);
    }
    free(p);
    free(q);
    free(k);
    free(v);
    free(out);
    free(sinks);
}

static void test_attention_ext(void) {
    // packed sequences of lengths 1, 7 and 20 (and 20 alone, and a length-1 sequence last)
    int l1[] = {1, 7, 20}, l2[] = {20}, l3[] = {7, 20, 1};
    struct { const int *lens; int n; } seqs[] = {{l1, 3}, {l2, 1}, {l3, 3}};
    int heads[][2] = {{4, 2}, {4, 1}, {3, 1}, {2, 2}};
    int hds[] = {10, 16};
    int windows[] = {0, 1, 3, 25};
    for (size_t a = 0; a < sizeof seqs / sizeof seqs[0]; a++)
        for (size_t b = 0; b < sizeof heads / sizeof heads[0]; b++)
            for (size_t c = 0; c < sizeof hds / sizeof hds[0]; c++)
                for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++)
                    for (int sk = 0; sk < 2; sk++)
                        attention_ext_case(seqs[a].lens, seqs[a].n, heads[b][0], heads[b][1], hds[c], windows[w], sk);
    // many query heads per kv head (the CPU tiles shrink to few tokens) with a window inside them
    int l4[] = {33, 5};
    attention_ext_case(l4, 2, 64, 1, 10, 4, 1);
    attention_ext_case(l4, 2, 64, 1, 10, 0, 1);
}

// ----------------------------------------------------------------------------- decode attention

// ops_attention_decode_ext: rows of different positions (0, short, past the window, the last slot)
// over a cache [n, max_len, nkv*hd]; reference as above over positions max(0, pos - window + 1) .. pos.
static void decode_ext_case(int nq, int nkv, int hd, int window, int with_sinks) {
    int n = 4, max_len = 24, kvd = nkv * hd;
    int32_t pos[4] = {0, 5, 17, 23};
    size_t ne = (size_t)n * max_len * kvd;
    float *kc = test_rand_vec(ne, 1), *vc = test_rand_vec(ne, 1), *q = test_rand_vec((size_t)n * nq * hd, 3);
    float *out = malloc((size_t)n * nq * hd * sizeof(float));
    float *sinks = with_sinks ? make_sinks(nq) : NULL;
    void *work = malloc(ops_attention_decode_work_bytes(&be, n, nq, max_len));
    float scale = 1.0f / sqrtf((float)hd);
    ops_attention_decode_ext(&be, out, q, kc, vc, pos, n, nq, nkv, hd, max_len, scale, window, sinks, work);
    double vmax = 0;
    for (size_t i = 0; i < ne; i++) vmax = fmax(vmax, fabs(vc[i]));
    double tol = 2e-5 * vmax, worst = 0, p[24], o[64];
    int bad = 0;
    for (int s = 0; s < n; s++)
        for (int h = 0; h < nq; h++) {
            int kh = h / (nq / nkv), j0 = window > 0 && pos[s] - window + 1 > 0 ? pos[s] - window + 1 : 0;
            size_t base = (size_t)s * max_len * kvd + (size_t)kh * hd;
            ref_attend(o, q + ((size_t)s * nq + h) * hd, kc + base, vc + base, kvd, j0, pos[s], hd, scale,
                       sinks ? sinks[h] : -INFINITY, p);
            for (int i = 0; i < hd; i++) {
                double err = fabs(out[((size_t)s * nq + h) * hd + i] - o[i]);
                if (!(err <= tol)) bad++;
                if (err > worst || err != err) worst = err;
            }
        }
    CHECK_MSG(bad == 0, "decode_ext nq=%d nkv=%d hd=%d window=%d sinks=%d: %d elements off, max err %.3g > %.3g", nq,
              nkv, hd, window, with_sinks, bad, worst, tol);
    if (window == 0 && !with_sinks) { // ops_attention_decode is the ext with 0 / NULL
        float *o2 = malloc((size_t)n * nq * hd * sizeof(float));
        ops_attention_decode(&be, o2, q, kc, vc, pos, n, nq, nkv, hd, max_len, scale, work);
        CHECK(memcmp(o2, out, (size_t)n * nq * hd * sizeof(float)) == 0);
        free(o2);
    }
    free(kc);
    free(vc);
    free(q);
    free(out);
    free(sinks);
    free(work);
}

static void test_decode_ext(void) {
    int heads[][2] = {{4, 2}, {4, 1}, {3, 3}};
    int windows[] = {0, 1, 3, 30};
    for (size_t b = 0; b < sizeof heads / sizeof heads[0]; b++)
        for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++)
            for (int sk = 0; sk < 2; sk++) {
                decode_ext_case(heads[b][0], heads[b][1], 10, windows[w], sk);
                decode_ext_case(heads[b][0], heads[b][1], 16, windows[w], sk);
            }
}

// ----------------------------------------------------------------------------- elementwise

static void test_bias_add(void) {
    int64_t R = 37, N = 129;
    float *y = test_rand_vec((size_t)(R * N), 4), *b = test_rand_vec((size_t)N, 1), *y0 = test_copy_floats(y, (size_t)(R * N));
    ops_bias_add(&be, y, b, R, N);
    int bad = 0;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < N; c++) bad += y[r * N + c] != (float)((double)y0[r * N + c] + (double)b[c]);
    CHECK_MSG(bad == 0, "bias_add: %d elements differ from the rounded exact sum", bad);
    free(y);
    free(b);
    free(y0);
}

static void test_scale(void) {
    int64_t n = 1001;
    float *x = test_rand_vec((size_t)n, 5), *x0 = test_copy_floats(x, (size_t)n);
    float s = sqrtf(3072.0f); // Gemma's embedding scale for hidden 3072, as a float
    ops_scale(&be, x, s, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += x[i] != (float)((double)x0[i] * (double)s);
    CHECK_MSG(bad == 0, "scale: %d elements differ from the rounded exact product", bad);
    free(x);
    free(x0);
}

// on a tile with a row stride wider than the columns: the columns past C are left alone
static void test_softcap(void) {
    int64_t R = 9, C = 300, ld = 311;
    float cap = 30.0f;
    float *x = test_rand_vec((size_t)(R * ld), 100), *x0;
    x[0] = 0;
    x[1] = 1e4f;  // saturates to cap
    x[2] = -1e4f; // and to -cap
    x[3] = 1e-3f; // the linear regime
    x0 = test_copy_floats(x, (size_t)(R * ld));
    ops_softcap_f32(&be, x, ld, R, C, cap);
    int bad = 0, outside = 0;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < ld; c++) {
            float got = x[r * ld + c], in = x0[r * ld + c];
            if (c >= C) {
                outside += got != in;
                continue;
            }
            double ref = cap * tanh((double)in / cap);
            if (!(fabs(got - ref) <= 8 * U32 * fabs(ref) + 1e-30)) bad++;
        }
    CHECK_MSG(bad == 0, "softcap: %d elements off", bad);
    CHECK_MSG(outside == 0, "softcap: %d elements past the columns changed", outside);
    CHECK(x[0] == 0.0f && x[1] == cap && x[2] == -cap);
    free(x);
    free(x0);
}

// gelu_tanh(g) * up; also in place (out == gate)
static void test_geglu(void) {
    int64_t n = 2003;
    float *g = test_rand_vec((size_t)n, 8), *u = test_rand_vec((size_t)n, 2), *y = malloc((size_t)n * sizeof(float));
    g[0] = 0;
    g[1] = -30;
    g[2] = 30;
    g[3] = -3;
    ops_geglu_tanh(&be, y, g, u, n);
    int bad = 0;
    double c = sqrt(2.0 / M_PI);
    for (int64_t i = 0; i < n; i++) {
        double x = g[i], ref = 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x))) * u[i];
        if (!(fabs(y[i] - ref) <= 8 * U32 * fabs(ref) + 8 * U32 * fabs(0.5 * x * u[i]) + 1e-35)) bad++;
    }
    CHECK_MSG(bad == 0, "geglu_tanh: %d elements off", bad);
    ops_geglu_tanh(&be, g, g, u, n);
    CHECK(memcmp(g, y, (size_t)n * sizeof(float)) == 0);
    free(g);
    free(u);
    free(y);
}

// gpt-oss: alpha 1.702, limit 7; gate and up past the limit on both sides
static void test_swiglu_clamped(void) {
    int64_t R = 13, I = 77;
    float alpha = 1.702f, limit = 7.0f;
    float *in = test_rand_vec((size_t)(R * 2 * I), 10), *out = malloc((size_t)(R * I) * sizeof(float));
    // row 0: explicit cases (gate, up): above / below the limit, at it, inside
    float cases[][2] = {{9, 0.5f}, {-9, 0.5f}, {0.5f, 9}, {0.5f, -9}, {9, 9}, {-9, -9}, {7, -7}, {0, 3}, {-100, 2}};
    int nc = (int)(sizeof cases / sizeof cases[0]);
    for (int j = 0; j < nc; j++) {
        in[2 * j] = cases[j][0];
        in[2 * j + 1] = cases[j][1];
    }
    ops_swiglu_clamped(&be, out, in, R, I, alpha, limit);
    int bad = 0;
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < I; j++) {
            double g = in[r * 2 * I + 2 * j], u = in[r * 2 * I + 2 * j + 1];
            g = g > limit ? limit : g;                         // the gate: clamped above only
            u = u > limit ? limit : u < -limit ? -limit : u;   // the up: both sides
            double ref = (u + 1.0) * g / (1.0 + exp(-(double)alpha * g));
            if (!(fabs(out[r * I + j] - ref) <= 32 * U32 * fabs(ref) + 1e-35)) bad++;
        }
    CHECK_MSG(bad == 0, "swiglu_clamped: %d elements off", bad);
    // the clamps exactly: gate 9 acts as 7 (same output as gate 7), up 9 as 7 and -9 as -7
    float a[4] = {9, 9, 7, 7}, b[2], c2[4] = {0.5f, -9, 0.5f, -7}, d[2];
    ops_swiglu_clamped(&be, b, a, 1, 2, alpha, limit);
    ops_swiglu_clamped(&be, d, c2, 1, 2, alpha, limit);
    CHECK(b[0] == b[1] && d[0] == d[1]);
    free(in);
    free(out);
}

// experts 0..4 with offsets {0, 3, 3, 8, 8, 10} (experts 1 and 3 have no rows), R = 12: rows 10, 11
// belong to no expert and are left alone
static void test_moe_bias_add(void) {
    int E = 5;
    int64_t R = 12, N = 33;
    int32_t off[6] = {0, 3, 3, 8, 8, 10};
    float *ys = test_rand_vec((size_t)(R * N), 4), *bias = test_rand_vec((size_t)(E * N), 1);
    float *y0 = test_copy_floats(ys, (size_t)(R * N));
    ops_moe_bias_add(&be, ys, bias, off, E, R, N);
    int bad = 0;
    for (int64_t r = 0; r < R; r++) {
        int e = -1;
        for (int x = 0; x < E; x++)
            if (off[x] <= r && r < off[x + 1]) e = x;
        for (int64_t c = 0; c < N; c++) {
            float want = e < 0 ? y0[r * N + c] : (float)((double)y0[r * N + c] + (double)bias[e * N + c]);
            bad += ys[r * N + c] != want;
        }
    }
    CHECK_MSG(bad == 0, "moe_bias_add: %d elements wrong", bad);
    free(ys);
    free(bias);
    free(y0);
}

int main(void) {
    static void (*const tests[])(void) = {test_attention_ext, test_decode_ext, test_bias_add, test_scale,
                                          test_softcap, test_geglu, test_swiglu_clamped, test_moe_bias_add};
    return test_run_cpu("test_ops_arch", 4848, &be, tests, sizeof tests / sizeof tests[0]);
}
