// test_ops.c: the model ops on the CPU backend (the fp32 reference) against naive formulas written
// here independently, accumulated in double.
//
// Tolerances are stated per op. u = 2^-24 is the fp32 unit roundoff; the errors allowed are a
// small multiple of the textbook bound of the fp32 computation the op performs, far below what an
// indexing, masking or ordering bug produces (those are O(1) relative).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/kernels/ops.h"
#include "common/kernels/vexp.h"
#include "testing.h"
#include "testing_device.h"

#define U32 0x1p-24 // fp32 unit roundoff

static backend be;

// ----------------------------------------------------------------------------- embed, copy, to_f32

// Pure copies: exact.
static void test_embed(void) {
    int V = 50, H = 33, T = 20;
    float *table = test_rand_vec((size_t)V * H, 1), *out = test_rand_vec((size_t)T * H, 1);
    int32_t ids[20];
    for (int t = 0; t < T; t++) ids[t] = t == 3 ? V - 1 : test_rand_below(V);
    ops_embed(&be, out, table, ids, T, H);
    int bad = 0;
    for (int t = 0; t < T; t++)
        bad += memcmp(out + (size_t)t * H, table + (size_t)ids[t] * H, (size_t)H * sizeof(float)) != 0;
    CHECK_MSG(bad == 0, "embed: %d rows differ from their table row", bad);
    free(table);
    free(out);
}

static void test_copy_2d(void) {
    int64_t rows = 7, cols = 5, dst_ld = 23, src_ld = 9;
    float *src = test_rand_vec((size_t)(rows * src_ld), 1), *dst = malloc((size_t)(rows * dst_ld) * sizeof(float));
    for (int64_t i = 0; i < rows * dst_ld; i++) dst[i] = 1000.0f + (float)i; // canary outside the block
    ops_copy_2d(&be, dst + 6, dst_ld, src + 2, src_ld, rows, cols);
    int bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < dst_ld; c++) {
            float want = (c >= 6 && c < 6 + cols) ? src[r * src_ld + 2 + (c - 6)] : 1000.0f + (float)(r * dst_ld + c);
            bad += dst[r * dst_ld + c] != want;
        }
    CHECK_MSG(bad == 0, "copy_2d: %d elements wrong (inside the block or the canary around it)", bad);
    free(src);
    free(dst);
}

static void test_to_f32(void) {
    int64_t n = 101;
    float *src = test_rand_vec((size_t)n, 3), *dst = calloc((size_t)n, sizeof(float));
    ops_to_f32(&be, dst, src, n);
    CHECK(memcmp(dst, src, (size_t)n * sizeof(float)) == 0);
    ops_to_f32(&be, src, src, n); // in place is a no-op
    CHECK(memcmp(dst, src, (size_t)n * sizeof(float)) == 0);
    free(src);
    free(dst);
}

// ----------------------------------------------------------------------------- RMSNorm

// y = x / sqrt(mean(x^2) + eps) * w. The reference sums squares in double (as the CPU twin does);
// the op then forms x * inv * w in fp32 with inv rounded to fp32: three roundings, so
// |y - ref| <= 4 u |ref| (+ a denormal-sized floor). Checked out of place and in place (out == in).
static void test_rmsnorm(void) {
    int shapes[][2] = {{1, 16}, {5, 64}, {3, 1000}, {2, 8192}, {40, 128}};
    float eps = 1e-6f;
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int R = shapes[c][0], D = shapes[c][1];
        size_t n = (size_t)R * D;
        float *x = test_rand_vec(n, 2), *w = test_rand_vec((size_t)D, 1.5f), *y = malloc(n * sizeof(float));
        if (c == 0) x[0] = 0; // a zero element, and row 0 of shape 0 small
        ops_rmsnorm(&be, y, x, w, R, D, eps);
        double worst = 0;
        int bad = 0;
        for (int r = 0; r < R; r++) {
            double ss = 0;
            for (int i = 0; i < D; i++) ss += (double)x[(size_t)r * D + i] * x[(size_t)r * D + i];
            double inv = 1.0 / sqrt(ss / D + (double)eps);
            for (int i = 0; i < D; i++) {
                double ref = (double)x[(size_t)r * D + i] * inv * w[i];
                double err = fabs(y[(size_t)r * D + i] - ref);
                if (err > 4 * U32 * fabs(ref) + 1e-37) bad++;
                if (err > worst) worst = err;
            }
        }
        CHECK_MSG(bad == 0, "rmsnorm R=%d D=%d: %d elements off (max abs err %.3g)", R, D, bad, worst);
        // in place gives bit-identical results
        ops_rmsnorm(&be, x, x, w, R, D, eps);
        CHECK_MSG(memcmp(x, y, n * sizeof(float)) == 0, "rmsnorm R=%d D=%d: in place differs", R, D);
        free(x);
        free(w);
        free(y);
    }
}

// ----------------------------------------------------------------------------- RoPE

// The pair (x[i], x[i + hd/2]) of each head turns by angle pos * inv_freq[i]. The contract forms
// the angle in fp32 ((float)pos * inv_freq[i], as transformers does; an fp32 angle of 3e4 rad is
// off the exact one by ~1e-3 rad, and matching that rounding is the point), so the reference takes
// that fp32 angle and does the rotation in double. What remains is cosf/sinf (<= 1-2 ulp) and
// three fp32 roundings per output: |err| <= 8 u (|a| + |b|).
static void test_rope(void) {
    int hds[] = {2, 16, 64, 128};
    for (size_t c = 0; c < sizeof hds / sizeof hds[0]; c++) {
        int hd = hds[c], half = hd / 2, nh = 3, T = 9;
        // two packed sequences (positions restart: that is the caller's job, the op just uses pos),
        // and a few large positions to exercise argument reduction
        int32_t pos[9] = {0, 1, 2, 3, 4, 0, 1, 3000, 32767};
        float *inv = malloc((size_t)half * sizeof(float));
        for (int i = 0; i < half; i++) inv[i] = (float)pow(1e6, -2.0 * i / hd);
        size_t n = (size_t)T * nh * hd;
        float *x = test_rand_vec(n, 1), *x0 = malloc(n * sizeof(float));
        memcpy(x0, x, n * sizeof(float));
        ops_rope(&be, x, pos, inv, T, nh, hd);
        int bad = 0;
        double worst = 0;
        for (int t = 0; t < T; t++)
            for (int h = 0; h < nh; h++)
                for (int i = 0; i < half; i++) {
                    const float *v0 = x0 + ((size_t)t * nh + h) * hd;
                    const float *v1 = x + ((size_t)t * nh + h) * hd;
                    double angle = (double)((float)pos[t] * inv[i]);
                    double a = v0[i], b = v0[i + half];
                    double ra = a * cos(angle) - b * sin(angle), rb = b * cos(angle) + a * sin(angle);
                    double tol = 8 * U32 * (fabs(a) + fabs(b));
                    double e1 = fabs(v1[i] - ra), e2 = fabs(v1[i + half] - rb);
                    if (e1 > tol || e2 > tol) bad++;
                    if (e1 > worst) worst = e1;
                    if (e2 > worst) worst = e2;
                }
        CHECK_MSG(bad == 0, "rope hd=%d: %d pairs off (max abs err %.3g)", hd, bad, worst);
        // position 0 is the identity, exactly
        CHECK(memcmp(x, x0, (size_t)nh * hd * sizeof(float)) == 0);
        free(inv);
        free(x);
        free(x0);
    }
}

// ----------------------------------------------------------------------------- attention

// Naive causal attention in double: for each sequence, query t and head h, the full masked softmax
// over the keys start..t of its sequence, then the weighted sum of the values.
//
// Tolerance: the op computes scores as fp32 dot products of hd <= 64 terms (error <= hd u sum|q k|
// scale), exp in fp32 (~2 ulp) and fp32 sums over <= 64 keys (<= 64 u relative); the output is a
// convex combination of the values, so its error is of the order (hd |s| + n_keys) u max|v|
// ~ 1e-5 max|v| with scores |s| of a few units. We allow 2e-5 * max|v| per element: a wrong mask,
// a wrong kv head or a missed rescale errs by O(max|v|).
static void attention_case(const int *lens, int n_seq, int nq, int nkv, int hd) {
    int32_t cu[8];
    cu[0] = 0;
    for (int s = 0; s < n_seq; s++) cu[s + 1] = cu[s] + lens[s];
    int T = cu[n_seq];
    size_t nqe = (size_t)T * nq * hd, nke = (size_t)T * nkv * hd;
    // q scaled by 3: peaked and flat softmax rows both occur
    float *q = test_rand_vec(nqe, 3), *k = test_rand_vec(nke, 1), *v = test_rand_vec(nke, 1), *out = test_rand_vec(nqe, 1);
    float scale = 1.0f / sqrtf((float)hd);
    ops_attention_causal(&be, out, q, k, v, cu, n_seq, T, nq, nkv, hd, scale);

    double vmax = 0;
    for (size_t i = 0; i < nke; i++) vmax = fmax(vmax, fabs(v[i]));
    double tol = 2e-5 * vmax, worst = 0;
    int bad = 0, group = nq / nkv;
    double *p = malloc((size_t)T * sizeof(double));
    for (int s = 0; s < n_seq; s++)
        for (int t = cu[s]; t < cu[s + 1]; t++)
            for (int h = 0; h < nq; h++) {
                int kh = h / group; // GQA: query heads [kh*group, (kh+1)*group) share kv head kh
                const float *qv = q + ((size_t)t * nq + h) * hd;
                double mx = -INFINITY, sum = 0;
                for (int j = cu[s]; j <= t; j++) {
                    const float *kv = k + ((size_t)j * nkv + kh) * hd;
                    double dot = 0;
                    for (int i = 0; i < hd; i++) dot += (double)qv[i] * kv[i];
                    p[j] = dot * scale;
                    mx = fmax(mx, p[j]);
                }
                for (int j = cu[s]; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                for (int i = 0; i < hd; i++) {
                    double o = 0;
                    for (int j = cu[s]; j <= t; j++) o += p[j] / sum * v[((size_t)j * nkv + kh) * hd + i];
                    double err = fabs(out[((size_t)t * nq + h) * hd + i] - o);
                    if (!(err <= tol)) bad++;
                    if (err > worst || err != err) worst = err;
                }
            }
    CHECK_MSG(bad == 0, "attention seqs=%d (T=%d) nq=%d nkv=%d hd=%d: %d elements off, max err %.3g > %.3g", n_seq,
              T, nq, nkv, hd, bad, worst, tol);
    free(p);
    free(q);
    free(k);
    free(v);
    free(out);
}

static void test_attention(void) {
    // 1, 2 and 3 sequences, with length-1 sequences first, in the middle and alone; the longest
    // (64) bounds the number of keys in the tolerance above
    int l1[] = {17}, l2[] = {1, 12}, l3[] = {6, 1, 64}, l4[] = {1}, l5[] = {9, 30, 1};
    struct { const int *lens; int n; } seqs[] = {{l1, 1}, {l2, 2}, {l3, 3}, {l4, 1}, {l5, 3}};
    int heads[][2] = {{4, 2}, {4, 1}, {2, 2}};
    int hds[] = {8, 16, 64};
    for (size_t a = 0; a < sizeof seqs / sizeof seqs[0]; a++)
        for (size_t b = 0; b < sizeof heads / sizeof heads[0]; b++)
            for (size_t c = 0; c < sizeof hds / sizeof hds[0]; c++)
                attention_case(seqs[a].lens, seqs[a].n, heads[b][0], heads[b][1], hds[c]);

    // packing: two sequences attended in one call equal each attended alone (no leak across the
    // boundary), bit for bit
    int T = 10, nq = 2, nkv = 1, hd = 8, cu2[3] = {0, 4, 10}, cu_a[2] = {0, 4}, cu_b[2] = {0, 6};
    float *q = test_rand_vec((size_t)T * nq * hd, 2), *k = test_rand_vec((size_t)T * nkv * hd, 1),
          *v = test_rand_vec((size_t)T * nkv * hd, 1);
    float *o_packed = malloc((size_t)T * nq * hd * sizeof(float)), *o_alone = malloc((size_t)T * nq * hd * sizeof(float));
    ops_attention_causal(&be, o_packed, q, k, v, cu2, 2, T, nq, nkv, hd, 0.3f);
    ops_attention_causal(&be, o_alone, q, k, v, cu_a, 1, 4, nq, nkv, hd, 0.3f);
    ops_attention_causal(&be, o_alone + 4 * nq * hd, q + 4 * nq * hd, k + 4 * nkv * hd, v + 4 * nkv * hd, cu_b, 1, 6, nq,
                         nkv, hd, 0.3f);
    CHECK(memcmp(o_packed, o_alone, (size_t)T * nq * hd * sizeof(float)) == 0);
    // a length-1 sequence returns its own value row exactly (softmax of one score is 1)
    int cu1[2] = {0, 1};
    ops_attention_causal(&be, o_alone, q, k, v, cu1, 1, 1, nq, nkv, hd, 0.3f);
    CHECK(memcmp(o_alone, v, (size_t)hd * sizeof(float)) == 0 && memcmp(o_alone + hd, v, (size_t)hd * sizeof(float)) == 0);
    free(q);
    free(k);
    free(v);
    free(o_packed);
    free(o_alone);
}

// ----------------------------------------------------------------------------- SwiGLU, add

// silu(g) * u = g / (1 + exp(-g)) * u: expf (~1-2 ulp) and three roundings, |err| <= 8 u |ref|,
// plus a floor for g -> -inf where the fp32 result underflows to 0 while the double one is ~1e-40.
// Also in place (out == gate), as the target forward calls it.
static void test_swiglu(void) {
    int64_t n = 1003;
    float *g = test_rand_vec((size_t)n, 8), *u = test_rand_vec((size_t)n, 2), *y = malloc((size_t)n * sizeof(float));
    g[0] = 0;
    g[1] = -100;
    g[2] = 100;
    g[3] = -20;
    ops_swiglu(&be, y, g, u, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double ref = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        if (!(fabs(y[i] - ref) <= 8 * U32 * fabs(ref) + 1e-35)) bad++;
    }
    CHECK_MSG(bad == 0, "swiglu: %d elements off", bad);
    ops_swiglu(&be, g, g, u, n);
    CHECK(memcmp(g, y, (size_t)n * sizeof(float)) == 0);
    free(g);
    free(u);
    free(y);
}

// x += y: one fp32 rounding of the exact sum, which is what rounding the double sum gives (the
// double sum of two floats is exact here): equality.
static void test_add(void) {
    int64_t n = 777;
    float *x = test_rand_vec((size_t)n, 4), *y = test_rand_vec((size_t)n, 1e-3f), *x0 = malloc((size_t)n * sizeof(float));
    memcpy(x0, x, (size_t)n * sizeof(float));
    ops_add(&be, x, y, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += x[i] != (float)((double)x0[i] + (double)y[i]);
    CHECK_MSG(bad == 0, "add: %d elements differ from the rounded exact sum", bad);
    free(x);
    free(y);
    free(x0);
}

// ----------------------------------------------------------------------------- top-k and LSE

typedef struct {
    float v;
    int32_t id;
} entry;

// descending value, then ascending id
static int entry_cmp(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

// Rows of V logits, of several kinds, so that ties, -inf and large values all occur.
static void fill_logits_row(float *x, int V, int kind) {
    for (int j = 0; j < V; j++) {
        switch (kind) {
        case 0: x[j] = 4 * (float)test_rand_pm1(); break;                       // generic
        case 1: x[j] = (float)test_rand_below(4) * 0.5f; break;            // many exact ties (4 distinct values)
        case 2: x[j] = 1.25f; break;                                // all equal: ids 0..k-1 win
        case 3:                                                     // -inf and large values
            x[j] = j % 3 == 0 ? -INFINITY : (j % 7 == 0 ? 1e4f + (float)(j % 2) : -3e4f * (float)test_rand_pm1());
            break;
        case 4: x[j] = -INFINITY; break;                            // everything -inf: lse -inf
        case 5: x[j] = j == V - 1 ? 50.0f : (j < 10 ? 88.0f : -1e30f); break; // ties at the top, a huge gap
        default: x[j] = j % 5 == 0 ? 1.0f : (j % 2 ? -0.0f : 0.0f); break; // 1, and -0 == +0 ties
        }
    }
}

// One full pass over V in tiles of `tile` columns, rows padded to a stride of tile + 3, against a
// full sort and a double log-sum-exp of each row.
//
// top-k: values and ids are copies of the logits, so they must match the sort exactly (equal values
// ordered by id, -0 == +0 as the comparison sees them).
// LSE: the op keeps (m, s) in fp32: fp32 sums of <= 256 terms each <= 1 (<= 256 u relative) added
// in double, the rescale of s and its rounding (~2 u per tile), then lse = m + log(s) (a rounding
// of |lse|). So |lse - ref| <= (256 + 2 n_tiles + 4) u + 2 u |ref|: ~5e-5 absolute at worst here.
static void topk_case(const float *logits, int R, int V, int tile, int k, int n_kinds) {
    int ld = tile + 3;
    float *buf = malloc((size_t)R * ld * sizeof(float));
    float *val = malloc((size_t)R * k * sizeof(float)), *m = malloc((size_t)R * sizeof(float));
    float *s = malloc((size_t)R * sizeof(float)), *lse = malloc((size_t)R * sizeof(float));
    int32_t *idx = malloc((size_t)R * k * sizeof(int32_t));
    ops_topk_lse_init(&be, val, idx, m, s, R, k);
    int n_tiles = 0;
    for (int v0 = 0; v0 < V; v0 += tile, n_tiles++) {
        int vc = V - v0 < tile ? V - v0 : tile;
        for (int r = 0; r < R; r++) {
            for (int j = 0; j < vc; j++) buf[(size_t)r * ld + j] = logits[(size_t)r * V + v0 + j];
            for (int j = vc; j < ld; j++) buf[(size_t)r * ld + j] = 1e38f; // padding the op must not read
        }
        ops_topk_lse_update(&be, buf, ld, v0, R, vc, k, val, idx, m, s);
    }
    ops_topk_lse_finish(&be, lse, m, s, R);

    entry *e = malloc((size_t)V * sizeof(entry));
    for (int r = 0; r < R; r++) {
        const float *x = logits + (size_t)r * V;
        for (int j = 0; j < V; j++) e[j] = (entry){x[j], j};
        qsort(e, (size_t)V, sizeof(entry), entry_cmp);
        int bad = 0;
        for (int i = 0; i < k; i++) bad += idx[(size_t)r * k + i] != e[i].id || val[(size_t)r * k + i] != e[i].v;
        CHECK_MSG(bad == 0, "top-k V=%d tile=%d k=%d row %d (kind %d): %d of %d entries differ (first: id %d val %g, want %d %g)",
                  V, tile, k, r, r % n_kinds, bad, k, idx[(size_t)r * k], val[(size_t)r * k], e[0].id, e[0].v);
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, x[j]);
        if (mx == -INFINITY) {
            CHECK_MSG(isinf(lse[r]) && lse[r] < 0, "lse of an all -inf row is %g, want -inf", lse[r]);
            continue;
        }
        for (int j = 0; j < V; j++) sum += exp((double)x[j] - mx);
        double ref = mx + log(sum), tol = (256 + 2 * n_tiles + 4) * U32 + 2 * U32 * fabs(ref);
        CHECK_MSG(fabs(lse[r] - ref) <= tol, "lse V=%d tile=%d k=%d row %d: %.9g vs %.9g (tol %.3g)", V, tile, k, r,
                  lse[r], ref, tol);
    }
    free(e);
    free(buf);
    free(val);
    free(idx);
    free(m);
    free(s);
    free(lse);
}

static void test_topk_lse(void) {
    int V = 307, n_kinds = 7, R = 2 * n_kinds;
    float *logits = malloc((size_t)R * V * sizeof(float));
    for (int r = 0; r < R; r++) fill_logits_row(logits + (size_t)r * V, V, r % n_kinds);
    int tiles[] = {1, 50, 64, 307}, ks[] = {1, 8, 32};
    for (size_t a = 0; a < sizeof tiles / sizeof tiles[0]; a++)
        for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++) topk_case(logits, R, V, tiles[a], ks[b], n_kinds);
    // the largest k, and a k larger than a tile
    topk_case(logits, R, V, 100, OPS_TOPK_MAX, n_kinds);
    free(logits);

    // init state: (-inf, -1) slots, m = -inf, s = 0; finish of an untouched row is -inf
    float val[6], m[2], s[2], lse[2];
    int32_t idx[6];
    ops_topk_lse_init(&be, val, idx, m, s, 2, 3);
    CHECK(isinf(val[5]) && val[5] < 0 && idx[5] == -1 && isinf(m[1]) && s[1] == 0);
    ops_topk_lse_finish(&be, lse, m, s, 2);
    CHECK(isinf(lse[0]) && lse[0] < 0);
}

// vexpf (the CPU kernels' vectorised exp) against exp() in double over the normal range of its
// result, 2^20 + 1 points: within 2.5e-7 relative (2 ulp; Cephes' polynomial measures ~8e-8), and
// its edges: exp(-inf) = 0, below 2^-126 is 0, inf and above ln(FLT_MAX) are +inf, NaN stays NaN.
static void test_vexpf(void) {
    const float lo = -87.33654f, hi = 88.72283f;
    const int n = 1 << 20;
    double worst = 0;
    for (int i = 0; i <= n; i++) {
        float x = lo + (hi - lo) * (float)i / (float)n;
        if (x > hi) x = hi;
        double e = exp((double)x), rel = fabs((double)vexpf(x) - e) / e;
        worst = rel > worst ? rel : worst;
    }
    CHECK_MSG(worst <= 2.5e-7, "vexpf: max relative error %.3g", worst);
    CHECK(vexpf(0.0f) == 1.0f);
    CHECK(vexpf(-INFINITY) == 0.0f && vexpf(-100.0f) == 0.0f);
    CHECK(isinf(vexpf(INFINITY)) && isinf(vexpf(89.0f)));
    CHECK(isnan(vexpf(NAN)));
}

int main(void) {
    static void (*const tests[])(void) = {test_embed, test_copy_2d, test_to_f32, test_rmsnorm, test_rope,
                                          test_attention, test_swiglu, test_add, test_topk_lse, test_vexpf};
    return test_run_cpu("test_ops", 424242, &be, tests, sizeof tests / sizeof tests[0]);
}
