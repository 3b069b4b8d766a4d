// test_ops_hybrid.c: the hybrid-target ops (norm.h, rope.h, activation.h, deltanet.h) on the CPU
// backend (the fp32 reference) against naive formulas written here independently, in double: the
// gated delta rule token by token straight from the SPEC §2.1 recurrence (the op runs it in chunks
// of 64), the conv over an explicit state ++ sequence window.
//
// Per check one line `op  err  tol  ok|FAIL`, err = max |op - ref| / max |ref| (relative to the
// output's scale). u = 2^-24 is the fp32 unit roundoff; each tolerance is a small multiple of the
// fp32 error of what the op computes, far below what an index, mask, window or state bug gives
// (O(1) relative). Shapes are odd on purpose: three packed sequences of 1, 70 and 131 tokens (T not
// a multiple of 64, a chunk boundary inside a sequence, a one-token sequence), head dims 12 / 20
// and 72 / 100, Hk = 2 key heads for Hv = 6 value heads, conv kernels 3 and 4, D not a power of two.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/kernels/ops.h"
#include "testing.h"

#define U32 0x1p-24

static backend be;

// A packed batch cut in two: sequence s is la[s] tokens of part a, then lb[s] of part b (either may
// be 0). cu: the whole batch; cua, cub: the parts. split/join move rows of `row` floats.
typedef struct {
    int n_seq, la[8], lb[8];
    int32_t cu[9], cua[9], cub[9];
} parts;

static parts parts_make(const int *la, const int *lb, int n_seq) {
    parts p = {.n_seq = n_seq};
    for (int s = 0; s < n_seq; s++) {
        p.la[s] = la[s];
        p.lb[s] = lb[s];
        p.cua[s + 1] = p.cua[s] + la[s];
        p.cub[s + 1] = p.cub[s] + lb[s];
        p.cu[s + 1] = p.cu[s] + la[s] + lb[s];
    }
    return p;
}

// to_parts: x -> (a, b); else (a, b) -> x
static void parts_move(const parts *p, float *x, float *a, float *b, size_t row, int to_parts) {
    for (int s = 0; s < p->n_seq; s++) {
        float *xa = x + (size_t)p->cu[s] * row, *xb = xa + (size_t)p->la[s] * row;
        float *pa = a + (size_t)p->cua[s] * row, *pb = b + (size_t)p->cub[s] * row;
        size_t na = (size_t)p->la[s] * row * sizeof(float), nb = (size_t)p->lb[s] * row * sizeof(float);
        memmove(to_parts ? pa : xa, to_parts ? xa : pa, na);
        memmove(to_parts ? pb : xb, to_parts ? xb : pb, nb);
    }
}

static double silu_d(double x) { return x / (1.0 + exp(-x)); }

// ----------------------------------------------------------------------------- norms

// Zero-centred: y = x r (1 + w); gated: y = w x r silu(z), r = 1/sqrt(mean(x^2) + eps). The op sums
// squares in double, then a few fp32 roundings (and expf for silu): 8 u relative to the scale.
static void test_norms(void) {
    int shapes[][2] = {{1, 16}, {7, 20}, {5, 1000}, {30, 128}};
    float eps = 1e-6f;
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int R = shapes[c][0], D = shapes[c][1];
        size_t n = (size_t)R * D;
        float *x = test_rand_vec(n, 2), *w = test_rand_vec((size_t)D, 0.8f), *z = test_rand_vec(n, 4),
              *y = xmalloc(n * sizeof(float));
        double *ref = xmalloc(n * sizeof(double)), *refg = xmalloc(n * sizeof(double));
        for (int r = 0; r < R; r++) {
            double ss = 0;
            for (int i = 0; i < D; i++) ss += (double)x[(size_t)r * D + i] * x[(size_t)r * D + i];
            double inv = 1.0 / sqrt(ss / D + eps);
            for (int i = 0; i < D; i++) {
                size_t k = (size_t)r * D + i;
                ref[k] = x[k] * inv * (1.0 + w[i]);
                refg[k] = w[i] * x[k] * inv * silu_d(z[k]);
            }
        }
        char name[96];
        ops_rmsnorm_zc(&be, y, x, w, R, D, eps);
        snprintf(name, sizeof name, "rmsnorm_zc R=%d D=%d", R, D);
        test_report(name, test_rel_err_d(y, ref, n), 8 * U32);
        float *xi = test_copy_floats(x, n); // in place
        ops_rmsnorm_zc(&be, xi, xi, w, R, D, eps);
        CHECK_MSG(memcmp(xi, y, n * sizeof(float)) == 0, "rmsnorm_zc R=%d D=%d: in place differs", R, D);
        ops_gated_rmsnorm(&be, y, x, z, w, R, D, eps);
        snprintf(name, sizeof name, "gated_rmsnorm R=%d D=%d", R, D);
        test_report(name, test_rel_err_d(y, refg, n), 8 * U32);
        memcpy(xi, x, n * sizeof(float));
        ops_gated_rmsnorm(&be, xi, xi, z, w, R, D, eps);
        CHECK_MSG(memcmp(xi, y, n * sizeof(float)) == 0, "gated_rmsnorm R=%d D=%d: in place differs", R, D);
        free(x);
        free(w);
        free(z);
        free(y);
        free(xi);
        free(ref);
        free(refg);
    }
}

// ----------------------------------------------------------------------------- partial RoPE, gate

// The pairs (i, i + rot/2), i < rot/2, turn by the fp32 angle (float)pos * inv_freq[i] (the rounding
// transformers makes; the reference rotates in double by that angle); dims rot..hd-1 unchanged,
// exactly. Error: cosf/sinf and three roundings, 8 u (|a| + |b|) per pair, checked as 8 u of the scale.
static void test_rope_partial(void) {
    int cases[][3] = {{256, 64, 3}, {12, 4, 2}, {18, 18, 1}, {10, 0, 2}}; // hd, rot, nh
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int hd = cases[c][0], rot = cases[c][1], nh = cases[c][2], half = rot / 2, T = 9;
        int32_t pos[9] = {0, 1, 2, 3, 4, 0, 1, 3000, 32767};
        float *inv = xmalloc((size_t)(half ? half : 1) * sizeof(float));
        for (int i = 0; i < half; i++) inv[i] = (float)pow(1e7, -2.0 * i / rot);
        size_t n = (size_t)T * nh * hd;
        float *x0 = test_rand_vec(n, 1), *x = test_copy_floats(x0, n);
        double *ref = xmalloc(n * sizeof(double));
        for (size_t i = 0; i < n; i++) ref[i] = x0[i];
        for (int t = 0; t < T; t++)
            for (int h = 0; h < nh; h++)
                for (int i = 0; i < half; i++) {
                    size_t o = ((size_t)t * nh + h) * hd;
                    double angle = (double)((float)pos[t] * inv[i]), a = x0[o + i], b = x0[o + i + half];
                    ref[o + i] = a * cos(angle) - b * sin(angle);
                    ref[o + i + half] = b * cos(angle) + a * sin(angle);
                }
        ops_rope_partial(&be, x, pos, inv, T, nh, hd, rot);
        char name[96];
        snprintf(name, sizeof name, "rope_partial hd=%d rot=%d nh=%d", hd, rot, nh);
        test_report(name, test_rel_err_d(x, ref, n), 16 * U32);
        int pass_bad = 0; // the pass-through dims are bit-identical
        for (size_t r = 0; r < (size_t)T * nh; r++)
            pass_bad += memcmp(x + r * hd + rot, x0 + r * hd + rot, (size_t)(hd - rot) * sizeof(float)) != 0;
        CHECK_MSG(pass_bad == 0, "rope_partial hd=%d rot=%d: %d heads changed past rot", hd, rot, pass_bad);
        free(inv);
        free(x0);
        free(x);
        free(ref);
    }
}

// x * sigmoid(g): expf and two roundings, 4 u relative.
static void test_sigmoid_mul(void) {
    int64_t n = 40001;
    float *x = test_rand_vec((size_t)n, 3), *g = test_rand_vec((size_t)n, 12);
    double *ref = xmalloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) ref[i] = x[i] / (1.0 + exp(-(double)g[i]));
    ops_sigmoid_mul(&be, x, g, n);
    test_report("sigmoid_mul n=40001", test_rel_err_d(x, ref, (size_t)n), 4 * U32);
    free(x);
    free(g);
    free(ref);
}

// ----------------------------------------------------------------------------- conv1d + SiLU

// The reference builds each sequence's window explicitly: ext = state (K-1 rows, or zeros) ++ the
// sequence, out[i] = silu(sum_j w[c, j] ext[i + j]), new state = the last K-1 rows of ext.
static void conv_ref(double *out, float *state_out, const float *x, const float *w, const int32_t *cu, int n_seq,
                     int C, int K, const float *state) {
    int S = K - 1;
    for (int s = 0; s < n_seq; s++) {
        int L = cu[s + 1] - cu[s];
        float *ext = xmalloc((size_t)(S + L) * C * sizeof(float));
        for (int r = 0; r < S; r++)
            for (int c = 0; c < C; c++) ext[(size_t)r * C + c] = state ? state[((size_t)s * S + r) * C + c] : 0.0f;
        memcpy(ext + (size_t)S * C, x + (size_t)cu[s] * C, (size_t)L * C * sizeof(float));
        for (int i = 0; i < L; i++)
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int j = 0; j < K; j++) acc += (double)w[(size_t)c * K + j] * ext[(size_t)(i + j) * C + c];
                out[(size_t)(cu[s] + i) * C + c] = silu_d(acc);
            }
        if (state_out) memcpy(state_out + (size_t)s * S * C, ext + (size_t)L * C, (size_t)S * C * sizeof(float));
        free(ext);
    }
}

// Tolerance: K fp32 products summed (K u relative to sum |w x|, |w x| ~ the sum's scale here) and
// silu's expf: 16 u. The state is moved, never computed: exact. Two parts with the state carried
// equal one run: exact too (the same fp32 operations on the same values).
static void conv_case(const int *lens_a, const int *lens_b, int n_seq, int C, int K) {
    parts P = parts_make(lens_a, lens_b, n_seq);
    const int32_t *cu = P.cu;
    int T = cu[n_seq], S = K - 1;
    size_t n = (size_t)T * C, ns = (size_t)n_seq * S * C;
    float *x = test_rand_vec(n, 2), *w = test_rand_vec((size_t)C * K, 0.7f), *st0 = test_rand_vec(ns, 2);
    float *out = xmalloc(n * sizeof(float)), *st = test_copy_floats(st0, ns), *st_ref = xmalloc(ns * sizeof(float));
    double *ref = xmalloc(n * sizeof(double));
    char name[128];

    conv_ref(ref, NULL, x, w, cu, n_seq, C, K, NULL); // no state: zeros before each sequence
    ops_conv1d_silu(&be, out, x, w, cu, n_seq, T, C, K, NULL);
    snprintf(name, sizeof name, "conv1d_silu T=%d C=%d K=%d", T, C, K);
    test_report(name, test_rel_err_d(out, ref, n), 16 * U32);

    conv_ref(ref, st_ref, x, w, cu, n_seq, C, K, st0); // with a state in and out
    ops_conv1d_silu(&be, out, x, w, cu, n_seq, T, C, K, st);
    snprintf(name, sizeof name, "conv1d_silu T=%d C=%d K=%d state", T, C, K);
    test_report(name, test_rel_err_d(out, ref, n), 16 * U32);
    snprintf(name, sizeof name, "conv1d_silu T=%d C=%d K=%d state out", T, C, K);
    test_report(name, test_rel_err(st, st_ref, ns), 0);

    // the same sequences in two parts, the state carried: part a then part b
    float *xa = xmalloc(n * sizeof(float)), *xb = xmalloc(n * sizeof(float));
    float *oa = xmalloc(n * sizeof(float)), *ob = xmalloc(n * sizeof(float));
    float *two = xmalloc(n * sizeof(float)), *st2 = test_copy_floats(st0, ns);
    parts_move(&P, x, xa, xb, (size_t)C, 1);
    ops_conv1d_silu(&be, oa, xa, w, P.cua, n_seq, P.cua[n_seq], C, K, st2);
    ops_conv1d_silu(&be, ob, xb, w, P.cub, n_seq, P.cub[n_seq], C, K, st2);
    parts_move(&P, two, oa, ob, (size_t)C, 0);
    snprintf(name, sizeof name, "conv1d_silu K=%d two parts = one run", K);
    test_report(name, test_rel_err(two, out, n), 0);
    snprintf(name, sizeof name, "conv1d_silu K=%d two parts: state", K);
    test_report(name, test_rel_err(st2, st, ns), 0);

    free(x);
    free(w);
    free(st0);
    free(out);
    free(st);
    free(st_ref);
    free(ref);
    free(xa);
    free(xb);
    free(oa);
    free(ob);
    free(two);
    free(st2);
}

static void test_conv(void) {
    // lengths 1, 70, 131 split as (1 | 0), (68 | 2), (64 | 67): an empty second part, and one shorter
    // than the state (K-1 = 3 > 2) whose new state is partly the old one
    int a[] = {1, 68, 64}, b[] = {0, 2, 67};
    conv_case(a, b, 3, 37, 4);
    conv_case(a, b, 3, 20, 3);
    int c[] = {5}, d[] = {1};
    conv_case(c, d, 1, 1000, 4);
}

// ----------------------------------------------------------------------------- gates

// beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias) with torch's threshold (u > 20: u).
// Inputs cover u on both sides of 20 and very negative u (softplus -> exp(u)). fp32 expf/log1pf and
// a few roundings: 8 u relative per element (checked per element, since g spans many scales).
static void test_gates(void) {
    int T = 203, Hv = 6;
    size_t n = (size_t)T * Hv;
    float *b = test_rand_vec(n, 10), *a = test_rand_vec(n, 30), *A_log = test_rand_vec((size_t)Hv, 2),
          *dt = test_rand_vec((size_t)Hv, 1);
    float *beta = xmalloc(n * sizeof(float)), *g = xmalloc(n * sizeof(float));
    a[0] = 19.999f - dt[0];
    a[Hv] = 20.001f - dt[0];
    a[2 * Hv] = -90.0f;
    ops_gdn_gates(&be, beta, g, b, a, A_log, dt, T, Hv);
    double eb = 0, eg = 0;
    for (size_t i = 0; i < n; i++) {
        int h = (int)(i % Hv);
        double u = (double)(float)(a[i] + dt[h]); // the fp32 sum the op forms
        double sp = u > 20 ? u : log1p(exp(u));
        double rb = 1.0 / (1.0 + exp(-(double)b[i])), rg = -exp((double)A_log[h]) * sp;
        double db = fabs(beta[i] - rb) / fabs(rb), dg = fabs(g[i] - rg) / (fabs(rg) > 1e-30 ? fabs(rg) : 1e-30);
        eb = db == db && db > eb ? db : (db != db ? INFINITY : eb);
        eg = dg == dg && dg > eg ? dg : (dg != dg ? INFINITY : eg);
    }
    test_report("gdn_gates beta (per element)", eb, 8 * U32);
    test_report("gdn_gates g (per element)", eg, 8 * U32);
    free(b);
    free(a);
    free(A_log);
    free(dt);
    free(beta);
    free(g);
}

// ----------------------------------------------------------------------------- gated delta rule

// The SPEC recurrence, token by token, in double: per sequence and value head h (key head h / (Hv/Hk)),
// q, k L2-normalised (rsqrt(sum x^2 + 1e-6)), q scaled by dk^-0.5;
//   S = exp(g) S; d = beta (v - S^T k); S += k d^T; o = S^T q.
// state: NULL (S from 0) or [n_seq, Hv, dk, dv] in (taken as the start) and out.
static void gdr_ref(double *out, double *state_out, const float *qkv, const float *g, const float *beta,
                    const int32_t *cu, int n_seq, int Hk, int Hv, int dk, int dv, const float *state) {
    size_t ld = 2 * (size_t)Hk * dk + (size_t)Hv * dv;
    double *S = xmalloc((size_t)dk * dv * sizeof(double)), *q = xmalloc((size_t)dk * sizeof(double));
    double *k = xmalloc((size_t)dk * sizeof(double)), *d = xmalloc((size_t)dv * sizeof(double));
    for (int s = 0; s < n_seq; s++)
        for (int h = 0; h < Hv; h++) {
            int kh = h / (Hv / Hk);
            for (size_t e = 0; e < (size_t)dk * dv; e++) S[e] = state ? state[((size_t)s * Hv + h) * dk * dv + e] : 0;
            for (int t = cu[s]; t < cu[s + 1]; t++) {
                const float *row = qkv + (size_t)t * ld;
                double qq = 0, kk = 0;
                for (int i = 0; i < dk; i++) {
                    q[i] = row[(size_t)kh * dk + i];
                    k[i] = row[(size_t)(Hk + kh) * dk + i];
                    qq += q[i] * q[i];
                    kk += k[i] * k[i];
                }
                double qs = 1.0 / sqrt(qq + 1e-6) / sqrt((double)dk), ks = 1.0 / sqrt(kk + 1e-6);
                for (int i = 0; i < dk; i++) {
                    q[i] *= qs;
                    k[i] *= ks;
                }
                const float *v = row + 2 * (size_t)Hk * dk + (size_t)h * dv;
                double decay = exp((double)g[(size_t)t * Hv + h]), b = beta[(size_t)t * Hv + h];
                for (size_t e = 0; e < (size_t)dk * dv; e++) S[e] *= decay;
                for (int c = 0; c < dv; c++) {
                    double sk = 0;
                    for (int i = 0; i < dk; i++) sk += S[(size_t)i * dv + c] * k[i];
                    d[c] = b * (v[c] - sk);
                }
                for (int i = 0; i < dk; i++)
                    for (int c = 0; c < dv; c++) S[(size_t)i * dv + c] += k[i] * d[c];
                for (int c = 0; c < dv; c++) {
                    double o = 0;
                    for (int i = 0; i < dk; i++) o += S[(size_t)i * dv + c] * q[i];
                    out[((size_t)t * Hv + h) * dv + c] = o;
                }
            }
            if (state_out)
                for (size_t e = 0; e < (size_t)dk * dv; e++) state_out[((size_t)s * Hv + h) * dk * dv + e] = S[e];
        }
    free(S);
    free(q);
    free(k);
    free(d);
}

// Gates as the model makes them: g <= 0 with most decays mild (exp(g) in (0.74, 1]: a long memory,
// so the state carries across chunks), some strong (-5) and a few near-resets (-30); beta in (0, 1).
static void gdr_inputs(float *g, float *beta, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float r = (float)test_rand_pm1();
        g[i] = i % 17 == 3 ? -30.0f : i % 7 == 1 ? -5.0f * (r + 1) / 2 : -0.3f * r * r;
        beta[i] = 0.5f + 0.49f * (float)test_rand_pm1();
    }
}

static float *gdr_work(int T, int n_seq, int Hk, int Hv, int dk, int dv) {
    return xmalloc(ops_gated_delta_rule_work_bytes(&be, T, n_seq, Hk, Hv, dk, dv));
}

// Tolerance, relative to the output's scale: the chunked op in fp32 differs from the exact
// recurrence by rounding only. Per chunk it forms dot products of dk terms, a triangular solve over
// <= 64 rows (|A_ij| <= 1: beta < 1 and unit keys) and sums of <= 64 terms; the recurrence is a
// contraction (I - beta k k^T, decays <= 1), so errors do not grow along the sequence. Measured
// <= 6e-6; we allow 2e-5 (~300 u): a wrong decay, mask, head or chunk boundary errs by >= 1e-2. The
// two-part run equals the one run to the same tolerance (its chunk boundaries differ).
static void gdr_case(const int *lens_a, const int *lens_b, int n_seq, int Hk, int Hv, int dk, int dv) {
    parts P = parts_make(lens_a, lens_b, n_seq);
    const int32_t *cu = P.cu;
    int T = cu[n_seq];
    size_t ld = 2 * (size_t)Hk * dk + (size_t)Hv * dv, nq = (size_t)T * ld, ng = (size_t)T * Hv;
    size_t no = (size_t)T * Hv * dv, ns = (size_t)n_seq * Hv * dk * dv;
    float *qkv = test_rand_vec(nq, 1), *g = xmalloc(ng * sizeof(float)), *beta = xmalloc(ng * sizeof(float));
    gdr_inputs(g, beta, ng);
    float *st0 = test_rand_vec(ns, 0.5f), *st = test_copy_floats(st0, ns), *out = xmalloc(no * sizeof(float));
    double *ref = xmalloc(no * sizeof(double)), *st_ref = xmalloc(ns * sizeof(double));
    float *work = gdr_work(T, n_seq, Hk, Hv, dk, dv);
    char name[128];
    const double tol = 2e-5;

    gdr_ref(ref, NULL, qkv, g, beta, cu, n_seq, Hk, Hv, dk, dv, NULL);
    ops_gated_delta_rule(&be, out, qkv, g, beta, cu, NULL, n_seq, T, Hk, Hv, dk, dv, NULL, work);
    snprintf(name, sizeof name, "gated_delta_rule T=%d Hk=%d Hv=%d dk=%d dv=%d", T, Hk, Hv, dk, dv);
    test_report(name, test_rel_err_d(out, ref, no), tol);

    gdr_ref(ref, st_ref, qkv, g, beta, cu, n_seq, Hk, Hv, dk, dv, st0);
    ops_gated_delta_rule(&be, out, qkv, g, beta, cu, NULL, n_seq, T, Hk, Hv, dk, dv, st, work);
    snprintf(name, sizeof name, "gated_delta_rule dk=%d dv=%d state in", dk, dv);
    test_report(name, test_rel_err_d(out, ref, no), tol);
    snprintf(name, sizeof name, "gated_delta_rule dk=%d dv=%d state out", dk, dv);
    test_report(name, test_rel_err_d(st, st_ref, ns), tol);

    // two parts with the state carried = the one run above
    float *qa = xmalloc(nq * sizeof(float)), *qb = xmalloc(nq * sizeof(float));
    float *ga = xmalloc(ng * sizeof(float)), *gb = xmalloc(ng * sizeof(float));
    float *ba = xmalloc(ng * sizeof(float)), *bb = xmalloc(ng * sizeof(float));
    float *oa = xmalloc(no * sizeof(float)), *ob = xmalloc(no * sizeof(float));
    float *two = xmalloc(no * sizeof(float)), *st2 = test_copy_floats(st0, ns);
    parts_move(&P, qkv, qa, qb, ld, 1);
    parts_move(&P, g, ga, gb, (size_t)Hv, 1);
    parts_move(&P, beta, ba, bb, (size_t)Hv, 1);
    ops_gated_delta_rule(&be, oa, qa, ga, ba, P.cua, NULL, n_seq, P.cua[n_seq], Hk, Hv, dk, dv, st2, work);
    ops_gated_delta_rule(&be, ob, qb, gb, bb, P.cub, NULL, n_seq, P.cub[n_seq], Hk, Hv, dk, dv, st2, work);
    parts_move(&P, two, oa, ob, (size_t)Hv * dv, 0);
    snprintf(name, sizeof name, "gated_delta_rule dk=%d dv=%d two parts = one run", dk, dv);
    test_report(name, test_rel_err(two, out, no), tol);
    snprintf(name, sizeof name, "gated_delta_rule dk=%d dv=%d two parts: state", dk, dv);
    test_report(name, test_rel_err(st2, st, ns), tol);

    free(qkv);
    free(g);
    free(beta);
    free(st0);
    free(st);
    free(out);
    free(ref);
    free(st_ref);
    free(work);
    free(qa);
    free(qb);
    free(ga);
    free(gb);
    free(ba);
    free(bb);
    free(oa);
    free(ob);
    free(two);
    free(st2);
}

static void test_gated_delta_rule(void) {
    // lengths 1, 70, 131 split as (1 | 0), (68 | 2), (64 | 67)
    int a[] = {1, 68, 64}, b[] = {0, 2, 67};
    gdr_case(a, b, 3, 2, 6, 12, 20);
    int c[] = {100, 3}, d[] = {29, 60};
    gdr_case(c, d, 2, 1, 2, 72, 100);
    int e[] = {130}, f[] = {1};
    gdr_case(e, f, 1, 1, 1, 128, 128); // Qwen3.6's head dims
}

int main(void) {
    test_rand_seed(35353535);
    if (backend_open(&be, "cpu", 0) != 0) {
        fprintf(stderr, "%s\n", error_msg());
        return 1;
    }
    printf("%-52s %10s %8s\n", "op", "err", "tol");
    test_norms();
    test_rope_partial();
    test_sigmoid_mul();
    test_conv();
    test_gates();
    test_gated_delta_rule();
    backend_close(&be);
    return test_finish("test_ops_hybrid");
}
