// test_ops_moe.c: the mixture-of-experts ops (ops_moe.h) on the CPU backend (the fp32 reference)
// against naive implementations written here independently, in double: the router as a sort of
// all E probabilities by (p descending, id ascending), the grouping as a scan expert by expert over
// the tokens, and the whole sparse block as a per-token loop over its k experts (plain dot
// products), against route + gather + gemm + swiglu_packed + gemm + combine.
//
// Router logits are multiples of 1/8 in [-5, 5]: distinct logits differ by >= 1/8, so their
// probabilities by a factor >= e^(1/8) (no rounding can reorder them), while equal logits are
// frequent (exact ties, which the lower expert id must win). Shapes are odd on purpose: E = 6, 13,
// 64; k = 1, 2, 3, 8; T = 37; H, I not powers of two; experts with no token, every token on one
// expert, all logits of a token equal; renorm on and off.
//
// Per check one line `op  err  tol  ok|FAIL`, err = max |op - ref| / max |ref|; u = 2^-24. Tolerances:
//   route indices, offsets, perm, slot   0 (exact)
//   route weights                        (E + 8) u absolute: an fp32 softmax over E (vexpf 1.4 ulp,
//                                        a sum of E terms, a divide) and the renorm's k-term sum
//   gather                               0 (rows moved)
//   gemm, block                          4e-6: fp32 dot products of K <= 100 terms (two chained in
//                                        the block, then k weighted terms) err by a few sqrt(K) u
//                                        (sqrt(K) u = 6e-7; observed <= 3e-7); a wrong row, expert or
//                                        weight errs by O(1)
//   swiglu_packed, sigmoid_gate_add,     1e-6: a few ulp per element (vexpf, a divide, products, and
//   combine                              k <= 8 fp32 terms)
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/moe/ops_moe.h"
#include "testing.h"
#include "testing_moe.h"

#define U32 0x1p-24

static backend be;

// ----------------------------------------------------------------------------- the naive router

// Logit patterns: random multiples of 1/8; the same with experts 1, 4, 5 (mod 7) pushed to -40 (no
// token picks them while k <= E - those); expert E/2 at +40 for every token (k = 1: all on it);
// every logit of a token equal (the top k are experts 0..k-1).
enum { LOG_GRID, LOG_EMPTY, LOG_ONE, LOG_FLAT };

static float *make_logits(int T, int E, int mode) {
    float *l = xmalloc((size_t)T * E * sizeof(float));
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++) {
            float v = (float)((int)(test_rand_u32() % 81) - 40) / 8.0f;
            if (mode == LOG_EMPTY && (e % 7 == 1 || e % 7 == 4 || e % 7 == 5)) v = -40.0f;
            if (mode == LOG_ONE && e == E / 2) v = 40.0f;
            if (mode == LOG_FLAT) v = 0.75f;
            l[(size_t)t * E + e] = v;
        }
    return l;
}

// per token: softmax in double, experts ordered by (p descending, id ascending) by selection
static route_ref naive_route(const float *l, int T, int E, int k, int renorm) {
    route_ref r = {xmalloc((size_t)T * k * 4), xmalloc((size_t)(E + 1) * 4), xmalloc((size_t)T * k * 4),
                   xmalloc((size_t)T * k * 4), xmalloc((size_t)T * k * sizeof(double))};
    double *p = xmalloc((size_t)E * sizeof(double));
    char *taken = xmalloc((size_t)E);
    for (int t = 0; t < T; t++) {
        double m = -INFINITY, s = 0;
        for (int e = 0; e < E; e++) m = fmax(m, l[(size_t)t * E + e]);
        for (int e = 0; e < E; e++) s += p[e] = exp(l[(size_t)t * E + e] - m);
        memset(taken, 0, (size_t)E);
        double sum = 0;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!taken[e] && (best < 0 || p[e] > p[best])) best = e; // strict: the lower id keeps a tie
            taken[best] = 1;
            r.idx[t * k + j] = best;
            sum += r.w[t * k + j] = p[best] / s;
        }
        if (renorm)
            for (int j = 0; j < k; j++) r.w[t * k + j] /= sum;
    }
    route_ref_layout(&r, T, E, k);
    free(p);
    free(taken);
    return r;
}

// ----------------------------------------------------------------------------- the whole block

static const char *mode_name(int mode) {
    return mode == LOG_GRID ? "" : mode == LOG_EMPTY ? " empty experts" : mode == LOG_ONE ? " one expert" : " flat";
}

// route, check it against the naive router, then the block two ways
static void block_case(int T, int E, int k, int H, int I, int renorm, int mode) {
    int R = T * k;
    char name[128];
    snprintf(name, sizeof name, "T=%d E=%d k=%d H=%d I=%d renorm=%d%s", T, E, k, H, I, renorm, mode_name(mode));
    float *logits = make_logits(T, E, mode);
    float *x = test_rand_vec((size_t)T * H, 1.0f);
    float *Wgu = test_rand_vec((size_t)E * 2 * I * H, 1.0f / sqrtf((float)H));
    float *Wd = test_rand_vec((size_t)E * H * I, 1.0f / sqrtf((float)I));
    int32_t *idx = xmalloc((size_t)R * 4), *off = xmalloc((size_t)(E + 1) * 4), *perm = xmalloc((size_t)R * 4),
            *slot = xmalloc((size_t)R * 4);
    float *w = xmalloc((size_t)R * 4);
    CHECK(ops_moe_route_work_bytes(&be, T, E, k) == 0);
    ops_moe_route(&be, logits, T, E, k, renorm, idx, w, off, perm, slot, NULL);
    route_ref ref = naive_route(logits, T, E, k, renorm);
    int d_idx = count_diff(idx, ref.idx, (size_t)R), d_off = count_diff(off, ref.offsets, (size_t)E + 1),
        d_perm = count_diff(perm, ref.perm, (size_t)R), d_slot = count_diff(slot, ref.slot, (size_t)R);
    int ok = !d_idx && !d_off && !d_perm && !d_slot;
    printf("route %-54s %s (%d idx, %d offsets, %d perm, %d slot differ)\n", name, ok ? "ok" : "FAIL", d_idx, d_off,
           d_perm, d_slot);
    CHECK_MSG(ok, "route %s: indices or grouping differ", name);
    double werr = 0;
    for (int i = 0; i < R; i++) werr = fmax(werr, fabs(w[i] - ref.w[i]));
    char wname[160];
    snprintf(wname, sizeof wname, "route weights %s", name);
    test_report(wname, werr, (E + 8) * U32);

    // the case is what it says: no token on the pushed-down experts, every token on the pushed-up one
    int shape_ok = 1;
    for (int e = 0; e < E; e++) {
        int n = off[e + 1] - off[e];
        if (mode == LOG_EMPTY && (e % 7 == 1 || e % 7 == 4 || e % 7 == 5)) shape_ok &= n == 0;
        if (mode == LOG_ONE && e == E / 2) shape_ok &= n == T;
    }
    CHECK_MSG(shape_ok, "route %s: the expert counts are not those the logits force", name);

    // the pipeline
    float *xs = xmalloc((size_t)R * H * 4), *gu = xmalloc((size_t)R * 2 * I * 4), *a = xmalloc((size_t)R * I * 4);
    float *ys = xmalloc((size_t)R * H * 4), *y = xmalloc((size_t)T * H * 4);
    int max_rows = 0;
    for (int e = 0; e < E; e++) max_rows = off[e + 1] - off[e] > max_rows ? off[e + 1] - off[e] : max_rows;
    ops_moe_gather(&be, xs, x, perm, R, H);
    ops_moe_gemm(&be, gu, xs, Wgu, off, E, R, 2 * I, H, max_rows);
    ops_swiglu_packed(&be, a, gu, R, I);
    ops_moe_gemm(&be, ys, a, Wd, off, E, R, H, I, max_rows);
    ops_moe_combine(&be, y, ys, slot, idx, w, T, k, H);

    // per token, its experts in ascending id, each a SwiGLU in double
    double *yr = xmalloc((size_t)T * H * sizeof(double)), *act = xmalloc((size_t)I * sizeof(double));
    for (int t = 0; t < T; t++) {
        double *yt = yr + (size_t)t * H;
        for (int h = 0; h < H; h++) yt[h] = 0;
        for (int e = 0; e < E; e++)
            for (int j = 0; j < k; j++) {
                if (ref.idx[t * k + j] != e) continue;
                const float *xt = x + (size_t)t * H;
                for (int i = 0; i < I; i++) {
                    double g = 0, u = 0;
                    const float *wg = Wgu + ((size_t)e * 2 * I + i) * H, *wu = wg + (size_t)I * H;
                    for (int h = 0; h < H; h++) {
                        g += (double)wg[h] * xt[h];
                        u += (double)wu[h] * xt[h];
                    }
                    act[i] = g / (1 + exp(-g)) * u;
                }
                for (int h = 0; h < H; h++) {
                    double o = 0;
                    const float *wd = Wd + ((size_t)e * H + h) * I;
                    for (int i = 0; i < I; i++) o += (double)wd[i] * act[i];
                    yt[h] += ref.w[t * k + j] * o;
                }
            }
    }
    snprintf(wname, sizeof wname, "block %s", name);
    test_report(wname, test_rel_err_d(y, yr, (size_t)T * H), 4e-6);

    route_ref_free(&ref);
    free(logits);
    free(x);
    free(Wgu);
    free(Wd);
    free(idx);
    free(off);
    free(perm);
    free(slot);
    free(w);
    free(xs);
    free(gu);
    free(a);
    free(ys);
    free(y);
    free(yr);
    free(act);
}

static void test_block(void) {
    block_case(37, 13, 3, 72, 40, 1, LOG_GRID);
    block_case(37, 13, 3, 72, 40, 0, LOG_GRID);
    block_case(37, 6, 1, 50, 24, 0, LOG_GRID);
    block_case(37, 6, 2, 33, 17, 1, LOG_GRID);
    block_case(37, 13, 2, 45, 30, 1, LOG_EMPTY); // 6 of 13 experts get no token
    block_case(37, 6, 1, 40, 20, 0, LOG_ONE);    // all 37 tokens on expert 3
    block_case(37, 6, 3, 40, 20, 1, LOG_ONE);    // expert 3 first, then the ties of the rest
    block_case(37, 13, 3, 24, 18, 0, LOG_FLAT);  // all equal: experts 0, 1, 2, weights 1/13
    block_case(37, 64, 8, 96, 48, 1, LOG_GRID);  // Qwen3-MoE's k
    block_case(1, 6, 6, 8, 4, 1, LOG_GRID);      // k = E, one token
    block_case(0, 6, 2, 8, 4, 1, LOG_GRID);      // no tokens
}

// ties decided by the lower id, checked directly: token 0 all equal, token 1 a tie for second place
static void test_ties(void) {
    float l[2 * 5] = {1, 1, 1, 1, 1, 0, 2, 1, 2, 1};
    int32_t idx[2 * 3], off[6], perm[6], slot[6];
    float w[6];
    ops_moe_route(&be, l, 2, 5, 3, 0, idx, w, off, perm, slot, NULL);
    int want[6] = {0, 1, 2, 1, 3, 2};
    int ok = 1;
    for (int i = 0; i < 6; i++) ok &= idx[i] == want[i];
    printf("route ties (lower id first) %-32s %s\n", "", ok ? "ok" : "FAIL");
    CHECK_MSG(ok, "ties: got %d %d %d | %d %d %d", idx[0], idx[1], idx[2], idx[3], idx[4], idx[5]);
    CHECK_CLOSE(w[0], 0.2, 1e-7);
    CHECK(off[0] == 0 && off[1] == 1 && off[2] == 3 && off[3] == 5 && off[4] == 6 && off[5] == 6);
}

// ----------------------------------------------------------------------------- single ops

static void test_gemm(void) {
    // experts of 0, 5, 0, 17, 1, 14 rows (37): empty groups at the ends and inside
    int E = 6, N = 29, K = 51, rows[6] = {0, 5, 0, 17, 1, 14};
    int32_t off[7] = {0};
    for (int e = 0; e < E; e++) off[e + 1] = off[e] + rows[e];
    int R = off[E];
    float *x = test_rand_vec((size_t)R * K, 1), *W = test_rand_vec((size_t)E * N * K, 1), *y = xmalloc((size_t)R * N * 4);
    double *ref = xmalloc((size_t)R * N * sizeof(double));
    for (int e = 0; e < E; e++)
        for (int r = off[e]; r < off[e + 1]; r++)
            for (int n = 0; n < N; n++) {
                double s = 0;
                for (int c = 0; c < K; c++) s += (double)x[(size_t)r * K + c] * W[((size_t)e * N + n) * K + c];
                ref[(size_t)r * N + n] = s;
            }
    ops_moe_gemm(&be, y, x, W, off, E, R, N, K, 17);
    test_report("moe_gemm E=6 N=29 K=51 rows 0,5,0,17,1,14", test_rel_err_d(y, ref, (size_t)R * N), 4e-6);
    free(x);
    free(W);
    free(y);
    free(ref);
}

static void test_elementwise(void) {
    int R = 37, I = 45, T = 23, H = 70, k = 3;
    float *gu = test_rand_vec((size_t)R * 2 * I, 6), *out = xmalloc((size_t)R * I * 4);
    double *ref = xmalloc((size_t)R * 2 * I * sizeof(double));
    for (int r = 0; r < R; r++)
        for (int i = 0; i < I; i++) {
            double g = gu[(size_t)r * 2 * I + i], u = gu[(size_t)r * 2 * I + I + i];
            ref[(size_t)r * I + i] = g / (1 + exp(-g)) * u;
        }
    ops_swiglu_packed(&be, out, gu, R, I);
    test_report("swiglu_packed R=37 I=45", test_rel_err_d(out, ref, (size_t)R * I), 1e-6);

    float *y = test_rand_vec((size_t)T * H, 2), *s = test_rand_vec((size_t)T * H, 2), *g = test_rand_vec((size_t)T, 8);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            ref[(size_t)t * H + h] = y[(size_t)t * H + h] + s[(size_t)t * H + h] / (1 + exp(-(double)g[t]));
    ops_sigmoid_gate_add(&be, y, s, g, T, H);
    test_report("sigmoid_gate_add T=23 H=70", test_rel_err_d(y, ref, (size_t)T * H), 1e-6);

    // combine over an arbitrary slot map (a permutation of the rows), experts distinct per token
    int Rc = T * k;
    float *ys = test_rand_vec((size_t)Rc * H, 3), *w = test_rand_vec((size_t)Rc, 1), *yc = xmalloc((size_t)T * H * 4);
    int32_t *slot = xmalloc((size_t)Rc * 4), *idx = xmalloc((size_t)Rc * 4);
    for (int i = 0; i < Rc; i++) slot[i] = i;
    for (int i = Rc - 1; i > 0; i--) {
        int j = (int)(test_rand_u32() % (uint32_t)(i + 1)), tmp = slot[i];
        slot[i] = slot[j];
        slot[j] = tmp;
    }
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) idx[t * k + j] = (7 * t + 5 * (k - j)) % 11 + 11 * j; // distinct, unsorted
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            double acc = 0;
            for (int j = 0; j < k; j++) acc += (double)w[t * k + j] * ys[(size_t)slot[t * k + j] * H + h];
            ref[(size_t)t * H + h] = acc;
        }
    ops_moe_combine(&be, yc, ys, slot, idx, w, T, k, H);
    test_report("moe_combine T=23 k=3 H=70", test_rel_err_d(yc, ref, (size_t)T * H), 1e-6);

    // gather
    int32_t *perm = xmalloc((size_t)Rc * 4);
    for (int r = 0; r < Rc; r++) perm[r] = (int32_t)(test_rand_u32() % (uint32_t)T);
    float *xs = xmalloc((size_t)Rc * H * 4);
    ops_moe_gather(&be, xs, y, perm, Rc, H);
    int bad = 0;
    for (int r = 0; r < Rc; r++) bad += memcmp(xs + (size_t)r * H, y + (size_t)perm[r] * H, (size_t)H * 4) != 0;
    printf("%-60s %10d %8s  %s\n", "moe_gather R=69 H=70 (rows differing)", bad, "0", bad ? "FAIL" : "ok");
    CHECK(bad == 0);
    free(gu);
    free(out);
    free(ref);
    free(y);
    free(s);
    free(g);
    free(ys);
    free(w);
    free(yc);
    free(slot);
    free(idx);
    free(perm);
    free(xs);
}

int main(void) {
    test_rand_seed(424242);
    if (backend_open(&be, "cpu", 0) != 0) {
        fprintf(stderr, "%s\n", error_msg());
        return 1;
    }
    printf("%-60s %10s %8s\n", "op", "err", "tol");
    test_ties();
    test_block();
    test_gemm();
    test_elementwise();
    backend_close(&be);
    return test_finish("test_ops_moe");
}
