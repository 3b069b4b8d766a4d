// test_ops_moe_sigmoid.c: the group-limited sigmoid router (ops_moe_sigmoid.h: DeepSeek-V3, Kimi-K2,
// GLM-4.5) on the CPU backend (the fp32 reference) against a naive router written here in double,
// as transformers' DeepseekV3TopkRouter reads: s = sigmoid(logit), b = s + bias, each group's score
// the sum of its two largest b (by sorting the group), the topk_group best groups by selection, the
// others' b to -inf, the k largest b by selection (strict >: the lower id keeps a tie), weights s
// over (their sum + 1e-20) when renorm, times the scale; the grouping as a scan expert by expert
// over the tokens. Then the whole sparse block of DeepSeek-V3 (route + gather + gemm + swiglu_packed
// + gemm + combine + the shared expert added) against a per-token loop in double.
//
// Inputs: logits multiples of 1/8 in [-5, 5], biases multiples of 1/32 in [-1/2, 1/2]: equal
// (logit, bias) pairs give exactly equal b (ties, frequent, must go to the lower id in both), and
// a token whose decisive gap in double (k-th minus next eligible b, topk_group-th minus next group
// score) is below 1e-5 without being 0 (fp32 might order it otherwise) is drawn again. Patterns:
// random; one group's experts raised by the bias (every token keeps that group); all logits and
// biases equal (experts 0..k-1 of groups 0..topk_group-1); a NaN logit (counted as -inf: never
// chosen while others are left). Shapes: the fixtures' (6 experts, 3 groups, top 2, k 3), GLM-4.5's
// (160, one group, k 8), DeepSeek-V3's (256, 8 groups, top 4, k 8), Kimi-K2's (384, one group, k 8),
// k equal to the experts the kept groups hold, renorm off, scale 1 and 2.5.
//
// Per check one line `op  err  tol  ok|FAIL`; u = 2^-24. Tolerances:
//   indices, offsets, perm, slot   0 (exact)
//   weights                        (k + 8) u relative to the largest: fp32 sigmoid (expf, a divide),
//                                  a k-term sum, a divide, the scale
//   block                          4e-6: fp32 dot products of K <= 40 terms, two chained, k + 1 weighted
//                                  terms added (observed <= 2e-7); a wrong expert or weight errs by O(1)
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/kernels/ops.h"
#include "common/moe/ops_moe.h"
#include "common/moe/ops_moe_sigmoid.h"
#include "testing.h"
#include "testing_moe.h"

#define U32 0x1p-24

static backend be;

enum { PAT_GRID, PAT_GROUP, PAT_FLAT, PAT_NAN };

static const char *pat_name(int p) {
    return p == PAT_GRID ? "" : p == PAT_GROUP ? " group-biased" : p == PAT_FLAT ? " flat" : " NaN logit";
}

// The naive router of one token: idx[k] and w[k] (double); returns its smallest decisive gap: the
// topk_group-th group score minus the next, and each chosen b minus the next (the order of the
// choices is compared too); a gap of exactly 0 is a tie, which the rule decides: it does not count.
static double naive_token(const float *l, const float *bias, int E, int k, int G, int tg, int renorm, double scale,
                          int32_t *idx, double *w) {
    int per = E / G;
    double *b = xmalloc((size_t)E * sizeof(double)), *gs = xmalloc((size_t)G * sizeof(double));
    char *taken = xcalloc((size_t)(E > G ? E : G), 1);
    double gap = INFINITY;
    for (int e = 0; e < E; e++) {
        double v = 1.0 / (1.0 + exp(-(double)l[e])) + (double)bias[e];
        b[e] = isnan(v) ? -INFINITY : v;
    }
    if (tg < G) {
        for (int g = 0; g < G; g++) { // the group's two largest, by a full sort of its b
            double m1 = -INFINITY, m2 = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++) {
                if (b[e] > m1) m2 = m1, m1 = b[e];
                else if (b[e] > m2) m2 = b[e];
            }
            gs[g] = m1 + m2;
        }
        for (int j = 0; j <= tg && j < G; j++) { // tg winners, then the best loser for the gap
            int best = -1;
            for (int g = 0; g < G; g++)
                if (!taken[g] && (best < 0 || gs[g] > gs[best])) best = g;
            if (j == tg) {
                double d = INFINITY;
                for (int g = 0; g < G; g++)
                    if (taken[g]) d = fmin(d, gs[g] - gs[best]);
                if (d > 0) gap = fmin(gap, d);
                break;
            }
            taken[best] = 1;
        }
        for (int g = 0; g < G; g++)
            if (!taken[g])
                for (int e = g * per; e < (g + 1) * per; e++) b[e] = -INFINITY;
        memset(taken, 0, (size_t)(E > G ? E : G));
    }
    double sum = 0;
    for (int j = 0; j <= k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || b[e] > b[best])) best = e; // strict: the lower id keeps a tie
        if (j > 0 && best >= 0) { // consecutive choices: their order is compared too
            double d = b[idx[j - 1]] - b[best];
            if (d > 0) gap = fmin(gap, d);
        }
        if (j == k) break;
        taken[best] = 1;
        idx[j] = best;
        sum += w[j] = 1.0 / (1.0 + exp(-(double)l[best]));
    }
    for (int j = 0; j < k; j++) w[j] = (renorm ? w[j] / (sum + 1e-20) : w[j]) * scale;
    free(b);
    free(gs);
    free(taken);
    return gap;
}

static float grid8(void) { return (float)((int)(test_rand_u32() % 81) - 40) / 8.0f; }

// Logits and biases of a pattern, with the reference; tokens redrawn while a decisive gap is tiny.
static route_ref make_case(int T, int E, int k, int G, int tg, int renorm, double scale, int pat, float **logits,
                           float **bias) {
    float *l = xmalloc((size_t)T * E * sizeof(float)), *bs = xmalloc((size_t)E * sizeof(float));
    for (int e = 0; e < E; e++) {
        bs[e] = pat == PAT_FLAT ? 0.25f : (float)((int)(test_rand_u32() % 33) - 16) / 32.0f;
        if (pat == PAT_GROUP && e / (E / G) == G - 1) bs[e] += 4.0f; // the last group always kept
    }
    route_ref r = {xmalloc((size_t)T * k * 4), xmalloc((size_t)(E + 1) * 4), xmalloc((size_t)T * k * 4),
                   xmalloc((size_t)T * k * 4), xmalloc((size_t)T * k * sizeof(double))};
    for (int t = 0; t < T; t++) {
        float *lt = l + (size_t)t * E;
        for (int tries = 0;; tries++) {
            for (int e = 0; e < E; e++) lt[e] = pat == PAT_FLAT ? 0.75f : grid8();
            if (pat == PAT_NAN) lt[t % E] = NAN;
            double gap = naive_token(lt, bs, E, k, G, tg, renorm, scale, r.idx + (size_t)t * k, r.w + (size_t)t * k);
            if (gap >= 1e-5) break;
            if (tries > 1000) fatal("test: no token without a near-tie for E=%d k=%d", E, k);
        }
    }
    route_ref_layout(&r, T, E, k);
    *logits = l;
    *bias = bs;
    return r;
}

static void route_case(int T, int E, int k, int G, int tg, int renorm, float scale, int pat) {
    char shape[160];
    snprintf(shape, sizeof shape, "T=%d E=%d k=%d groups %d/%d%s scale %g%s", T, E, k, tg, G, renorm ? "" : " no-renorm",
             (double)scale, pat_name(pat));
    float *l, *bias;
    route_ref r = make_case(T, E, k, G, tg, renorm, scale, pat, &l, &bias);
    size_t R = (size_t)T * k;
    int32_t *idx = xmalloc(R * 4), *off = xmalloc((size_t)(E + 1) * 4), *perm = xmalloc(R * 4), *slot = xmalloc(R * 4);
    float *w = xmalloc(R * 4);
    ops_moe_sigmoid_route(&be, l, bias, T, E, k, G, tg, renorm, scale, idx, w, off, perm, slot);
    int di = count_diff(idx, r.idx, R), dof = count_diff(off, r.offsets, (size_t)E + 1), dp = count_diff(perm, r.perm, R),
        ds = count_diff(slot, r.slot, R);
    int ok = !di && !dof && !dp && !ds;
    printf("sigmoid route %-60s %s (%d idx, %d offsets, %d perm, %d slot differ)\n", shape, ok ? "ok" : "FAIL", di, dof,
           dp, ds);
    CHECK_MSG(ok, "sigmoid route %s: indices or grouping differ from the naive router", shape);
    if (pat == PAT_NAN) { // the NaN expert never chosen (others are always left: k < E)
        int bad = 0;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < k; j++) bad += idx[t * k + j] == t % E;
        CHECK_MSG(bad == 0, "sigmoid route %s: %d choices of a NaN expert", shape, bad);
    }
    char name[200];
    snprintf(name, sizeof name, "sigmoid route weights %s", shape);
    test_report(name, test_rel_err_d(w, r.w, R), (k + 8) * U32);
    route_ref_free(&r);
    void *h[] = {l, bias, idx, off, perm, slot, w};
    for (size_t i = 0; i < sizeof h / sizeof *h; i++) free(h[i]);
}

// The DeepSeek-V3 sparse block: routed experts through the ops + the shared expert (plain SwiGLU of
// width Is through ops_swiglu and GEMMs, added), against a per-token loop in double on the
// reference's own choices and weights.
static void block_case(int T, int E, int k, int G, int tg, int H, int I, int Is) {
    char shape[160];
    snprintf(shape, sizeof shape, "T=%d E=%d k=%d groups %d/%d H=%d I=%d shared %d", T, E, k, tg, G, H, I, Is);
    float *l, *bias;
    route_ref r = make_case(T, E, k, G, tg, 1, 2.5, PAT_GRID, &l, &bias);
    float *x = test_rand_vec((size_t)T * H, 1.0f), *Wgu = test_rand_vec((size_t)E * 2 * I * H, 1.0f / sqrtf((float)H)),
          *Wd = test_rand_vec((size_t)E * H * I, 1.0f / sqrtf((float)I)),
          *Sg = test_rand_vec((size_t)Is * H, 1.0f / sqrtf((float)H)), *Su = test_rand_vec((size_t)Is * H, 1.0f / sqrtf((float)H)),
          *Sd = test_rand_vec((size_t)H * Is, 1.0f / sqrtf((float)Is));
    int R = T * k;
    int32_t *idx = xmalloc((size_t)R * 4), *off = xmalloc((size_t)(E + 1) * 4), *perm = xmalloc((size_t)R * 4),
            *slot = xmalloc((size_t)R * 4);
    float *w = xmalloc((size_t)R * 4), *xs = xmalloc((size_t)R * H * 4), *gu = xmalloc((size_t)R * 2 * I * 4),
          *a = xmalloc((size_t)R * I * 4), *ys = xmalloc((size_t)R * H * 4), *y = xmalloc((size_t)T * H * 4),
          *sg = xmalloc((size_t)T * Is * 4), *su = xmalloc((size_t)T * Is * 4), *sy = xmalloc((size_t)T * H * 4);
    ops_moe_sigmoid_route(&be, l, bias, T, E, k, G, tg, 1, 2.5f, idx, w, off, perm, slot);
    ops_moe_gather(&be, xs, x, perm, R, H);
    ops_moe_gemm(&be, gu, xs, Wgu, off, E, R, 2 * I, H, R);
    ops_swiglu_packed(&be, a, gu, R, I);
    ops_moe_gemm(&be, ys, a, Wd, off, E, R, H, I, R);
    ops_moe_combine(&be, y, ys, slot, idx, w, T, k, H);
    backend_gemm(&be, 0, 1, T, Is, H, 1.0f, x, H, Sg, H, 0.0f, sg, Is, DT_F32, DT_F32);
    backend_gemm(&be, 0, 1, T, Is, H, 1.0f, x, H, Su, H, 0.0f, su, Is, DT_F32, DT_F32);
    ops_swiglu(&be, sg, sg, su, (int64_t)T * Is);
    backend_gemm(&be, 0, 1, T, H, Is, 1.0f, sg, Is, Sd, Is, 0.0f, sy, H, DT_F32, DT_F32);
    ops_add(&be, y, sy, (int64_t)T * H);
    double *ref = xcalloc((size_t)T * H, sizeof(double)), *hg = xmalloc((size_t)(I > Is ? I : Is) * sizeof(double));
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * H;
        for (int j = 0; j <= k; j++) { // the k experts, then the shared one (weight 1)
            int shared = j == k, e = shared ? 0 : r.idx[t * k + j], n = shared ? Is : I;
            const float *G0 = shared ? Sg : Wgu + (size_t)e * 2 * I * H, *U0 = shared ? Su : G0 + (size_t)I * H;
            const float *D0 = shared ? Sd : Wd + (size_t)e * H * I;
            for (int i = 0; i < n; i++) {
                double g = 0, u = 0;
                for (int h = 0; h < H; h++) g += (double)G0[(size_t)i * H + h] * xt[h], u += (double)U0[(size_t)i * H + h] * xt[h];
                hg[i] = g / (1 + exp(-g)) * u;
            }
            double wt = shared ? 1.0 : r.w[t * k + j];
            for (int h = 0; h < H; h++) {
                double s = 0;
                for (int i = 0; i < n; i++) s += (double)D0[(size_t)h * n + i] * hg[i];
                ref[(size_t)t * H + h] += wt * s;
            }
        }
    }
    char name[200];
    snprintf(name, sizeof name, "sigmoid moe block %s", shape);
    test_report(name, test_rel_err_d(y, ref, (size_t)T * H), 4e-6);
    route_ref_free(&r);
    void *h[] = {l, bias, x, Wgu, Wd, Sg, Su, Sd, idx, off, perm, slot, w, xs, gu, a, ys, y, sg, su, sy, ref, hg};
    for (size_t i = 0; i < sizeof h / sizeof *h; i++) free(h[i]);
}

int main(void) {
    test_rand_seed(271828);
    if (backend_open(&be, "cpu", 0) != 0) {
        fprintf(stderr, "%s\n", error_msg());
        return 1;
    }
    printf("%-60s %10s %8s\n", "op", "err", "tol");
    route_case(37, 6, 3, 3, 2, 1, 2.5f, PAT_GRID);     // the DeepSeek-V3 fixtures' router
    route_case(37, 6, 3, 1, 1, 1, 2.5f, PAT_GRID);     // GLM-4.5's single group
    route_case(37, 6, 2, 2, 1, 1, 1.8f, PAT_GRID);     // one group of 3 kept
    route_case(37, 6, 3, 2, 1, 1, 1.0f, PAT_GROUP);    // k = the kept group's 3 experts
    route_case(41, 12, 4, 6, 2, 0, 1.0f, PAT_GRID);    // k = 4 of the two kept groups' 4; no renorm
    route_case(41, 14, 5, 7, 3, 1, 2.5f, PAT_GROUP);   // 7 groups of 2 (a group's score: both)
    route_case(29, 8, 2, 4, 2, 1, 2.5f, PAT_FLAT);     // every score equal: experts 0, 1 of group 0
    route_case(29, 64, 8, 8, 4, 1, 2.5f, PAT_FLAT);
    route_case(31, 64, 6, 8, 3, 1, 2.5f, PAT_NAN);     // one NaN logit per token
    route_case(31, 10, 3, 1, 1, 1, 1.0f, PAT_NAN);
    route_case(53, 160, 8, 1, 1, 1, 2.5f, PAT_GRID);   // GLM-4.5
    route_case(53, 256, 8, 8, 4, 1, 2.5f, PAT_GRID);   // DeepSeek-V3
    route_case(53, 256, 8, 8, 4, 1, 2.5f, PAT_GROUP);
    route_case(53, 384, 8, 1, 1, 1, 2.827f, PAT_GRID); // Kimi-K2
    route_case(5, 256, 1, 8, 1, 0, 1.0f, PAT_GRID);    // k = 1, one group kept
    block_case(37, 6, 3, 3, 2, 24, 16, 16);
    block_case(29, 16, 4, 4, 2, 40, 12, 24);           // two shared experts (width 2 Ie)
    backend_close(&be);
    return test_finish("test_ops_moe_sigmoid");
}
