// test_loss.c: the fused lm_head loss (student/loss/loss.h) on the CPU backend.
//
//   1. one row by hand: CE, KL with its tail bucket, CAP and the decay weight from double formulas
//      written here, on logits chosen directly (lm_head = identity)
//   2. the gradient against finite differences, in modes ROWS and TILES, decay and D-PACE weights:
//      (a) of the fused forward itself (fp32), and (b) of a double-precision loss written here
//   3. fused (both modes, many chunk and tile sizes) against loss_naive_cpu on random problems
//   4. edge cases: all weights 0, logits at the 1e4 scale, k = 1, k = V (p_r = 0), ties
//   5. the terms' table and the settings: every term's key is a configuration key, its metric
//      unique; the settings from the keys (loss_config_make), step-dump's "loss" object read by the
//      configuration's parser, --mode eval's copy of a checkpoint's loss keys
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/backend/backend.h"
#include "common/core/config.h"
#include "student/loss/loss.h"
#include "student/loss/loss_config.h"
#include "testing.h"
#include "testing_device.h"

static backend be;


// ----------------------------------------------------------------------------- problems

typedef struct {
    int anchors, slots, n, k;
    int64_t H, V;
    float *x, *W, *mask, *t_val, *t_lse;
    int32_t *label, *t_idx;
    uint8_t *in_seq;
} problem;

typedef struct {
    int K;
    float *w, *ce, *kl, *cap, *logp, *dx; // ce, kl, cap: term[LOSS_TERM_CE / _KL / _CAP]
    float *term[LOSS_ROW_TERMS];
    int32_t *argmax, *idx;
} result;

enum { TEACHER_FULL = 0, TEACHER_NO_TAIL = 1 }; // NO_TAIL: LSE_t over the top-k only, so p_r = 0

// make_problem: random x [n,H] and lm_head [V,H] (amplitudes ax, aw), teacher logits from their own
// random projection (so teacher and student agree a little), its top-k and LSE. Labels alternate
// between an id inside the teacher's top-k and one outside (when there is one). The first slot of
// every other anchor is unscored, and the last anchor's last slot lies outside its sequence.
static problem make_problem(int anchors, int slots, int64_t H, int64_t V, int k, double ax, double aw, int teacher) {
    problem p = {.anchors = anchors, .slots = slots, .n = anchors * slots, .k = k, .H = H, .V = V};
    int n = p.n;
    p.x = malloc((size_t)n * H * sizeof(float));
    p.W = malloc((size_t)V * H * sizeof(float));
    p.mask = malloc((size_t)n * sizeof(float));
    p.t_val = malloc((size_t)n * k * sizeof(float));
    p.t_lse = malloc((size_t)n * sizeof(float));
    p.label = malloc((size_t)n * sizeof(int32_t));
    p.t_idx = malloc((size_t)n * k * sizeof(int32_t));
    p.in_seq = malloc((size_t)n);
    for (int64_t i = 0; i < n * H; i++) p.x[i] = (float)(ax * test_rand_pm1());
    for (int64_t i = 0; i < V * H; i++) p.W[i] = (float)(aw * test_rand_pm1());
    double *t = malloc((size_t)V * sizeof(double));
    int *used = malloc((size_t)V * sizeof(int));
    for (int r = 0; r < n; r++) {
        int a = r / slots, slot = r % slots + 1;
        p.in_seq[r] = !(a == anchors - 1 && slot == slots && slots > 1);
        p.mask[r] = p.in_seq[r] && !(a % 2 == 1 && slot == 1) ? 1.0f : 0.0f;
        // teacher logits: a different random vector through the same lm_head, plus noise
        for (int64_t j = 0; j < V; j++) {
            double acc = 0;
            for (int64_t h = 0; h < H; h++) acc += (double)p.W[j * H + h] * p.x[r * H + (h + 1) % H];
            t[j] = 0.7 * acc + 0.5 * test_rand_pm1();
            used[j] = 0;
        }
        double tm = -INFINITY, z = 0;
        for (int64_t j = 0; j < V; j++) tm = fmax(tm, t[j]);
        for (int64_t j = 0; j < V; j++) z += exp(t[j] - tm);
        double ztop = 0;
        for (int c = 0; c < k; c++) { // top-k by selection, descending
            int64_t best = -1;
            for (int64_t j = 0; j < V; j++)
                if (!used[j] && (best < 0 || t[j] > t[best])) best = j;
            used[best] = 1;
            p.t_idx[r * k + c] = (int32_t)best;
            p.t_val[r * k + c] = (float)t[best];
            ztop += exp((double)(float)t[best] - tm);
        }
        // NO_TAIL: the LSE of the top-k alone, nudged down so that sum_I p_i >= 1 and p_r = max(0, .) = 0
        p.t_lse[r] = (float)(teacher == TEACHER_NO_TAIL ? tm + log(ztop) - 1e-6 : tm + log(z));
        if (r % 2 == 0 || k == V) {
            p.label[r] = p.t_idx[r * k + test_rand_below(k)];
        } else {
            int64_t j;
            do j = test_rand_below((int)V);
            while (used[j]);
            p.label[r] = (int32_t)j;
        }
    }
    free(t);
    free(used);
    return p;
}

static void free_problem(problem *p) {
    free(p->x), free(p->W), free(p->mask), free(p->t_val), free(p->t_lse), free(p->label), free(p->t_idx);
    free(p->in_seq);
}

static loss_batch batch_of(const problem *p) {
    loss_batch b = {.n = p->n, .slots = p->slots, .hidden = p->H, .vocab = p->V, .k = p->k, .x = p->x,
                    .lm_head = p->W, .label = p->label, .mask = p->mask, .in_seq = p->in_seq, .t_idx = p->t_idx,
                    .t_val = p->t_val, .t_lse = p->t_lse};
    return b;
}

static result make_result(int n, int64_t H, int K) {
    result r = {.K = K};
    r.w = calloc((size_t)n, sizeof(float));
    for (int t = 0; t < LOSS_ROW_TERMS; t++) r.term[t] = calloc((size_t)n, sizeof(float));
    r.ce = r.term[LOSS_TERM_CE], r.kl = r.term[LOSS_TERM_KL], r.cap = r.term[LOSS_TERM_CAP];
    r.argmax = calloc((size_t)n, sizeof(int32_t));
    r.logp = calloc((size_t)n * K + 1, sizeof(float)), r.idx = calloc((size_t)n * K + 1, sizeof(int32_t));
    r.dx = calloc((size_t)n * H, sizeof(float));
    return r;
}

static void free_result(result *r) {
    for (int t = 0; t < LOSS_ROW_TERMS; t++) free(r->term[t]);
    free(r->w), free(r->argmax), free(r->logp), free(r->idx), free(r->dx);
}

static loss_rows rows_of(result *r) {
    loss_rows rows = {.w = r->w, .argmax = r->argmax, .s_topk_idx = r->K ? r->idx : NULL, .s_topk_logp = r->K ? r->logp : NULL};
    for (int t = 0; t < LOSS_ROW_TERMS; t++) rows.term[t] = r->term[t];
    return rows;
}

static void run_fused(const loss_config *cfg, const loss_plan *plan, const problem *p, result *r) {
    size_t bytes = loss_workspace_bytes(plan, p->H, p->V, p->k);
    void *ws = aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
    loss_batch b = batch_of(p);
    loss_rows rows = rows_of(r);
    loss_forward_backward(&be, cfg, plan, ws, &b, &rows, r->dx);
    free(ws);
}

static void run_naive(const loss_config *cfg, const problem *p, result *r) {
    loss_batch b = batch_of(p);
    loss_rows rows = rows_of(r);
    loss_naive_cpu(cfg, &b, r->K, &rows, r->dx);
}

static double slot_loss(const loss_config *cfg, double ce, double kl, double cap) {
    return (1 - cfg->alpha) * ce + cfg->alpha * kl + cfg->lambda * cap;
}

// ----------------------------------------------------------------------------- double reference

// row_loss_double: the slot loss of one row from its logits s[V] in double, with the argmax g given
// (CAP holds it constant). Written from SPEC §4 directly: q by a stable softmax, q_r summed over the
// ids outside the teacher's top-k.
static void row_loss_double(const loss_config *cfg, const double *s, int64_t V, int32_t y, const int32_t *ti,
                            const float *tv, double t_lse, int k, int32_t g, double *ce, double *kl, double *cap) {
    double m = -INFINITY, z = 0, qr = 0, sum_p = 0;
    for (int64_t j = 0; j < V; j++) m = fmax(m, s[j]);
    for (int64_t j = 0; j < V; j++) z += exp(s[j] - m);
    double lse = m + log(z);
    int64_t n_tail = 0;
    for (int64_t j = 0; j < V; j++) {
        int in = 0;
        for (int a = 0; a < k; a++) in |= ti[a] == j;
        if (!in) qr += exp(s[j] - lse), n_tail++;
    }
    *ce = lse - s[y];
    *kl = 0;
    for (int a = 0; a < k; a++) {
        double p = exp(tv[a] - t_lse);
        sum_p += p;
        if (p > 0) *kl += p * (log(p) - (s[ti[a]] - lse));
    }
    double pr = n_tail ? fmax(0.0, 1.0 - sum_p) : 0.0;
    if (pr > 0) *kl += pr * (log(pr) - log(qr));
    *cap = g != y ? exp(s[g] - lse) : 0.0;
}

// total_double: sum_r w_r slot_loss_r for x given in double, weights and argmax held at (w, g).
static double total_double(const loss_config *cfg, const problem *p, const double *x, const float *w,
                           const int32_t *g) {
    double *s = malloc((size_t)p->V * sizeof(double)), total = 0;
    for (int r = 0; r < p->n; r++) {
        for (int64_t j = 0; j < p->V; j++) {
            double acc = 0;
            for (int64_t h = 0; h < p->H; h++) acc += x[r * p->H + h] * p->W[j * p->H + h];
            s[j] = acc;
        }
        int32_t y = cfg->label_teacher ? p->t_idx[r * p->k] : p->label[r];
        double ce, kl, cap;
        row_loss_double(cfg, s, p->V, y, p->t_idx + r * p->k, p->t_val + r * p->k, p->t_lse[r], p->k, g[r], &ce, &kl,
                        &cap);
        total += w[r] * slot_loss(cfg, ce, kl, cap);
    }
    free(s);
    return total;
}

// ----------------------------------------------------------------------------- 1. by hand

// lm_head = identity (H = V = 5), so the logits are x itself. Teacher top-2 {3, 0}, label 1 (outside
// the top-k), argmax 2 != label: every term is non-zero.
static void test_by_hand(void) {
    const double s[5] = {0.5, -1.0, 2.0, 1.5, -0.25};
    problem p = {.anchors = 1, .slots = 2, .n = 2, .k = 2, .H = 5, .V = 5};
    float x[10], W[25] = {0}, mask[2] = {0, 1}, t_val[4] = {3.0f, 1.0f, 3.0f, 1.0f}, t_lse[2] = {3.5f, 3.5f};
    int32_t label[2] = {1, 1}, t_idx[4] = {3, 0, 3, 0};
    uint8_t in_seq[2] = {1, 1};
    for (int j = 0; j < 5; j++) W[j * 5 + j] = 1, x[j] = x[5 + j] = (float)s[j];
    p.x = x, p.W = W, p.mask = mask, p.t_val = t_val, p.t_lse = t_lse, p.label = label, p.t_idx = t_idx;
    p.in_seq = in_seq;

    // by hand: q = softmax(s); p_3 = e^{3 - 3.5}, p_0 = e^{1 - 3.5}, p_r = 1 - p_3 - p_0;
    // q_r = q_1 + q_2 + q_4 (the ids outside {3, 0})
    double z = exp(0.5) + exp(-1.0) + exp(2.0) + exp(1.5) + exp(-0.25);
    double q0 = exp(0.5) / z, q1 = exp(-1.0) / z, q2 = exp(2.0) / z, q3 = exp(1.5) / z, q4 = exp(-0.25) / z;
    double p3 = exp(-0.5), p0 = exp(-2.5), pr = 1 - p3 - p0, qr = q1 + q2 + q4;
    double ce = -log(q1);
    double kl = p3 * log(p3 / q3) + p0 * log(p0 / q0) + pr * log(pr / qr);
    double cap = q2;
    loss_config cfg = {.alpha = 0.15, .lambda = 0.1, .gamma = 7, .weighting = LOSS_WEIGHT_DECAY};
    for (int mode = 0; mode < 2; mode++) {
        loss_plan plan = {.mode = (loss_mode)mode, .row_chunk = 2, .vocab_tile = 2, .topk_student = 2};
        result r = make_result(2, 5, 2);
        run_fused(&cfg, &plan, &p, &r);
        for (int row = 0; row < 2; row++) {
            CHECK_CLOSE(r.ce[row], ce, 1e-6 * ce);
            CHECK_CLOSE(r.kl[row], kl, 1e-6 * kl);
            CHECK_CLOSE(r.cap[row], cap, 1e-6 * cap);
            CHECK(r.argmax[row] == 2);
            CHECK(r.idx[row * 2] == 2 && r.idx[row * 2 + 1] == 3);
            CHECK_CLOSE(r.logp[row * 2], log(q2), 1e-6);
            CHECK_CLOSE(r.logp[row * 2 + 1], log(q3), 1e-6);
        }
        // row 0 is slot 1 (mask 0), row 1 is slot 2: w = exp(-1/7)
        CHECK(r.w[0] == 0);
        CHECK_CLOSE(r.w[1], exp(-1.0 / 7), 1e-7);
        // dx = dlogits (identity lm_head): slot 2's gradient by hand, term by term
        double w1 = exp(-1.0 / 7), a = 0.15, lam = 0.1, q[5] = {q0, q1, q2, q3, q4}, rho = pr / qr;
        for (int j = 0; j < 5; j++) {
            double d_ce = q[j] - (j == 1);
            double d_kl = j == 3 ? q3 - p3 : j == 0 ? q0 - p0 : q[j] * (1 - rho);
            double d_cap = cap * ((j == 2) - q[j]);
            double d = w1 * ((1 - a) * d_ce + a * d_kl + lam * d_cap);
            CHECK_CLOSE(r.dx[5 + j], d, 1e-6);
            CHECK(r.dx[j] == 0);
        }
        free_result(&r);
    }
}

// ----------------------------------------------------------------------------- 2. finite differences

// fd_check: the gradient dx of the fused loss against central differences of the total
// L(x) = sum_r w_r slot_loss_r with w held at the unperturbed weights (D-PACE's are detached).
//
// (a) L from the fused forward itself (fp32 logits, per-row terms stored as fp32). Its rounding is
//     about 1e-7 relative on L = O(1..10), i.e. ~1e-6 absolute, which a step of eps = 1e-2 turns
//     into ~1e-4 in the difference quotient; the O(eps^2) truncation term is ~1e-4 times the third
//     derivative (of order |W|^3 ~ 10 here). Tolerance: 1e-3 * max(|dx|_inf, 1) per coordinate
//     (the worst seen is ~2e-5).
//     A coordinate whose +-eps step changes some row's argmax (CAP holds g constant, so L is not
//     differentiable across the switch) is skipped and counted.
// (b) L from total_double (double logits, g held at the fused argmax): eps = 1e-5, truncation
//     ~1e-10 and rounding ~1e-16 / 1e-5, so the quotient is exact to ~1e-9 and the comparison
//     measures the fused gradient's own fp32 error: tolerance 2e-6 * max(|dx|_inf, 1) (worst
//     seen ~2e-7).
static void fd_check(const char *what, const loss_config *cfg, const loss_plan *plan, problem *p) {
    result r0 = make_result(p->n, p->H, plan->topk_student);
    run_fused(cfg, plan, p, &r0);
    double gmax = 0;
    for (int64_t i = 0; i < p->n * p->H; i++) gmax = fmax(gmax, fabs(r0.dx[i]));
    CHECK_MSG(gmax > 1e-3, "%s: gradient is ~0 (%g): nothing to check", what, gmax);
    int n_bad = 0;
    for (int r = 0; r < p->n; r++) CHECK_MSG(isfinite(r0.ce[r]) && isfinite(r0.kl[r]), "%s: row %d", what, r);

    // (a)
    const double eps = 1e-2;
    int skipped = 0;
    double worst = 0;
    result rp = make_result(p->n, p->H, plan->topk_student);
    for (int64_t i = 0; i < p->n * p->H; i++) {
        float keep = p->x[i];
        double L[2];
        int flip = 0;
        for (int sgn = 0; sgn < 2; sgn++) {
            p->x[i] = (float)(keep + (sgn ? -eps : eps));
            run_fused(cfg, plan, p, &rp);
            L[sgn] = 0;
            for (int r = 0; r < p->n; r++) {
                L[sgn] += (double)r0.w[r] * slot_loss(cfg, rp.ce[r], rp.kl[r], rp.cap[r]);
                flip |= rp.argmax[r] != r0.argmax[r];
            }
        }
        p->x[i] = keep;
        if (flip) {
            skipped++;
            continue;
        }
        // the step actually taken in fp32, not the one asked for
        double h = (double)(float)(keep + eps) - (double)(float)(keep - eps);
        double fd = (L[0] - L[1]) / h, err = fabs(fd - r0.dx[i]);
        worst = fmax(worst, err / fmax(gmax, 1));
        if (err > 1e-3 * fmax(gmax, 1)) n_bad++;
    }
    CHECK_MSG(n_bad == 0, "%s (a): %d coordinates off (worst %.3g relative)", what, n_bad, worst);
    CHECK_MSG(skipped <= p->n * p->H / 4, "%s (a): %d of %lld coordinates skipped for an argmax switch", what,
              skipped, (long long)(p->n * p->H));

    // (b)
    double *xd = malloc((size_t)(p->n * p->H) * sizeof(double));
    for (int64_t i = 0; i < p->n * p->H; i++) xd[i] = p->x[i];
    double worst_b = 0;
    int n_bad_b = 0;
    for (int64_t i = 0; i < p->n * p->H; i++) {
        const double e = 1e-5;
        double keep = xd[i];
        xd[i] = keep + e;
        double Lp = total_double(cfg, p, xd, r0.w, r0.argmax);
        xd[i] = keep - e;
        double Lm = total_double(cfg, p, xd, r0.w, r0.argmax);
        xd[i] = keep;
        double err = fabs((Lp - Lm) / (2 * e) - r0.dx[i]);
        worst_b = fmax(worst_b, err / fmax(gmax, 1));
        if (err > 2e-6 * fmax(gmax, 1)) n_bad_b++;
    }
    CHECK_MSG(n_bad_b == 0, "%s (b): %d coordinates off (worst %.3g relative)", what, n_bad_b, worst_b);
    printf("  fd %-40s max|dx| %.3g  (a) worst %.2g, %d skipped  (b) worst %.2g\n", what, gmax, worst, skipped,
           worst_b);
    free(xd);
    free_result(&rp);
    free_result(&r0);
}

static void test_finite_differences(void) {
    // H 6, V 11..37, k 3, 2 anchors of 3 slots; labels inside and outside the teacher's top-k, a row
    // with mask 0 and one outside its sequence (make_problem)
    const struct {
        int64_t V;
        int k, teacher;
        const char *name;
    } cases[] = {
        {11, 3, TEACHER_FULL, "V 11 k 3"},
        {37, 3, TEACHER_FULL, "V 37 k 3"},
        {23, 3, TEACHER_NO_TAIL, "V 23 k 3, p_r = 0"},
        {13, 13, TEACHER_FULL, "V 13 k = V (p_r = 0)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int weighting = 0; weighting < 2; weighting++) {
            for (int mode = 0; mode < 2; mode++) {
                problem p = make_problem(2, 3, 6, cases[c].V, cases[c].k, 0.6, 0.8, cases[c].teacher);
                loss_config cfg = {.alpha = 0.3, .lambda = 0.2, .gamma = 7, .weighting = (loss_weighting)weighting};
                loss_plan plan = {.mode = (loss_mode)mode, .row_chunk = 3, .vocab_tile = 5, .topk_student = 2};
                char what[128];
                snprintf(what, sizeof what, "%s, %s, %s", cases[c].name, weighting ? "dpace" : "decay",
                         mode ? "tiles" : "rows");
                fd_check(what, &cfg, &plan, &p);
                free_problem(&p);
            }
        }
    }
    // the teacher's label, and CE alone / KL alone / CAP alone
    const double mix[3][2] = {{0, 0}, {1, 0}, {0, 1}};
    for (int c = 0; c < 3; c++) {
        problem p = make_problem(2, 3, 6, 19, 3, 0.6, 0.8, TEACHER_FULL);
        loss_config cfg = {.alpha = mix[c][0], .lambda = mix[c][1], .gamma = 7, .weighting = LOSS_WEIGHT_DPACE,
                           .label_teacher = 1};
        loss_plan plan = {.mode = LOSS_MODE_TILES, .row_chunk = 6, .vocab_tile = 4, .topk_student = 0};
        char what[128];
        snprintf(what, sizeof what, "teacher label, alpha %g lambda %g", mix[c][0], mix[c][1]);
        fd_check(what, &cfg, &plan, &p);
        free_problem(&p);
    }
}

// ----------------------------------------------------------------------------- 3. fused vs naive

// close: |a - b| <= tol * max(|b|, floor). The floor keeps terms that are ~0 (CAP of a correct row,
// KL of a matching teacher) from demanding a relative accuracy below the fp32 rounding of the
// logits they are computed from.
static int close_rel(double a, double b, double tol, double floor) { return fabs(a - b) <= tol * fmax(fabs(b), floor); }

static int compare(const char *what, const result *f, const result *ref, int n, int64_t H) {
    int bad = 0;
    double dmax = 0;
    for (int64_t i = 0; i < n * H; i++) dmax = fmax(dmax, fabs(ref->dx[i]));
    for (int r = 0; r < n; r++) {
        bad += !close_rel(f->w[r], ref->w[r], 1e-5, 1e-3);
        bad += !close_rel(f->ce[r], ref->ce[r], 1e-5, 1);
        bad += !close_rel(f->kl[r], ref->kl[r], 1e-5, 1);
        bad += !close_rel(f->cap[r], ref->cap[r], 1e-5, 1e-3);
        for (int t = LOSS_TERM_CAP + 1; t < LOSS_ROW_TERMS; t++) bad += !close_rel(f->term[t][r], ref->term[t][r], 1e-5, 1);
        bad += f->argmax[r] != ref->argmax[r];
        for (int c = 0; c < f->K; c++) {
            bad += f->idx[r * f->K + c] != ref->idx[r * f->K + c];
            bad += !close_rel(f->logp[r * f->K + c], ref->logp[r * f->K + c], 1e-5, 1);
        }
    }
    // dx: the gradient is a sum over V of dlogits * W with cancellation, so relative to its scale
    for (int64_t i = 0; i < n * H; i++) bad += fabs(f->dx[i] - ref->dx[i]) > 1e-5 * fmax(dmax, 1e-6);
    CHECK_MSG(bad == 0, "%s: %d outputs differ from the naive loss", what, bad);
    return bad;
}

static void test_vs_naive(void) {
    const struct {
        int64_t V;
        int slots, anchors, k, K;
    } shapes[] = {{307, 3, 5, 8, 4}, {1000, 7, 4, 8, 8}, {1000, 3, 3, 1, 1}};
    const int chunk_anchors[] = {1, 2, 100};
    const int tiles[] = {1, 7, 64, 100, 333, 1000, 5000};
    int cases = 0, failed = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        problem p = make_problem(shapes[s].anchors, shapes[s].slots, 32, shapes[s].V, shapes[s].k, 0.5, 0.5,
                                 TEACHER_FULL);
        for (int cfgi = 0; cfgi < 3; cfgi++) {
            loss_config cfg = {.alpha = 0.15, .lambda = 0.1, .gamma = 7,
                               .weighting = cfgi == 1 ? LOSS_WEIGHT_DPACE : LOSS_WEIGHT_DECAY,
                               .label_teacher = cfgi == 2};
            result ref = make_result(p.n, p.H, shapes[s].K);
            run_naive(&cfg, &p, &ref);
            for (size_t c = 0; c < sizeof chunk_anchors / sizeof chunk_anchors[0]; c++) {
                for (size_t t = 0; t <= sizeof tiles / sizeof tiles[0]; t++) {
                    // t = last: mode ROWS; else mode TILES with that tile (tile 1 only on the smaller V)
                    int mode = t < sizeof tiles / sizeof tiles[0];
                    if (mode && tiles[t] == 1 && p.V > 400) continue;
                    loss_plan plan = {.mode = mode ? LOSS_MODE_TILES : LOSS_MODE_ROWS,
                                      .row_chunk = chunk_anchors[c] * p.slots,
                                      .vocab_tile = mode ? tiles[t] : 0,
                                      .topk_student = shapes[s].K};
                    result f = make_result(p.n, p.H, shapes[s].K);
                    run_fused(&cfg, &plan, &p, &f);
                    char what[160];
                    snprintf(what, sizeof what, "V %lld k %d cfg %d chunk %d %s %d", (long long)p.V, p.k, cfgi,
                             plan.row_chunk, mode ? "tile" : "rows", plan.vocab_tile);
                    failed += compare(what, &f, &ref, p.n, p.H) != 0;
                    cases++;
                    free_result(&f);
                }
            }
            free_result(&ref);
        }
        free_problem(&p);
    }
    printf("  fused vs naive: %d cases, %d with differences\n", cases, failed);
}

// ----------------------------------------------------------------------------- 4. edge cases

static int all_finite(const result *r, int n, int64_t H) {
    for (int i = 0; i < n; i++)
        if (!isfinite(r->w[i]) || !isfinite(r->ce[i]) || !isfinite(r->kl[i]) || !isfinite(r->cap[i])) return 0;
    for (int i = 0; i < n * r->K; i++)
        if (!isfinite(r->logp[i])) return 0;
    for (int64_t i = 0; i < n * H; i++)
        if (!isfinite(r->dx[i])) return 0;
    return 1;
}

static void test_edges(void) {
    loss_config cfg = {.alpha = 0.15, .lambda = 0.1, .gamma = 7, .weighting = LOSS_WEIGHT_DECAY};
    // all weights 0: dx = 0 exactly, the per-row terms still computed (and equal to the naive ones)
    {
        problem p = make_problem(3, 3, 16, 200, 8, 0.5, 0.5, TEACHER_FULL);
        for (int r = 0; r < p.n; r++) p.mask[r] = 0;
        for (int mode = 0; mode < 2; mode++) {
            loss_plan plan = {.mode = (loss_mode)mode, .row_chunk = 3, .vocab_tile = 64, .topk_student = 3};
            result f = make_result(p.n, p.H, 3), ref = make_result(p.n, p.H, 3);
            for (int64_t i = 0; i < p.n * p.H; i++) f.dx[i] = 123.0f; // must be overwritten
            run_fused(&cfg, &plan, &p, &f);
            run_naive(&cfg, &p, &ref);
            int nz = 0;
            for (int64_t i = 0; i < p.n * p.H; i++) nz += f.dx[i] != 0.0f;
            CHECK_MSG(nz == 0, "all-zero weights, mode %d: %d entries of dx are not 0", mode, nz);
            for (int r = 0; r < p.n; r++) CHECK(f.w[r] == 0 && f.ce[r] > 0 && f.ce[r] == f.ce[r]);
            compare("all-zero weights", &f, &ref, p.n, p.H);
            free_result(&f), free_result(&ref);
        }
        free_problem(&p);
    }
    // logits at the 1e4 scale: q underflows almost everywhere, nothing may become NaN or inf
    {
        problem p = make_problem(2, 3, 32, 500, 8, 30, 30, TEACHER_FULL);
        double smax = 0;
        for (int64_t j = 0; j < p.V; j++) {
            double acc = 0;
            for (int64_t h = 0; h < p.H; h++) acc += (double)p.x[h] * p.W[j * p.H + h];
            smax = fmax(smax, fabs(acc));
        }
        CHECK_MSG(smax > 5e3, "logits reach only %g", smax);
        for (int mode = 0; mode < 2; mode++) {
            for (int w = 0; w < 2; w++) {
                loss_config c2 = cfg;
                c2.weighting = (loss_weighting)w;
                loss_plan plan = {.mode = (loss_mode)mode, .row_chunk = 3, .vocab_tile = 77, .topk_student = 4};
                result f = make_result(p.n, p.H, 4);
                run_fused(&c2, &plan, &p, &f);
                CHECK_MSG(all_finite(&f, p.n, p.H), "huge logits, mode %d weighting %d: NaN or inf", mode, w);
                double dmax = 0;
                for (int64_t i = 0; i < p.n * p.H; i++) dmax = fmax(dmax, fabs(f.dx[i]));
                CHECK(dmax > 0);
                for (int r = 0; r < p.n; r++) CHECK(f.ce[r] >= 0 && f.kl[r] >= -1e-3 * fabs(f.ce[r]) - 1e-3);
                free_result(&f);
            }
        }
        free_problem(&p);
    }
    // k = V: the teacher's top-k is the whole vocabulary, the tail is empty and p_r = 0 whatever
    // rounding leaves of 1 - sum p_i
    {
        problem p = make_problem(2, 3, 8, 40, 40, 0.5, 0.5, TEACHER_FULL);
        result ref = make_result(p.n, p.H, 2);
        run_naive(&cfg, &p, &ref);
        for (int mode = 0; mode < 2; mode++) {
            loss_plan plan = {.mode = (loss_mode)mode, .row_chunk = 6, .vocab_tile = 16, .topk_student = 2};
            result f = make_result(p.n, p.H, 2);
            run_fused(&cfg, &plan, &p, &f);
            CHECK(all_finite(&f, p.n, p.H));
            compare("k = V", &f, &ref, p.n, p.H);
            free_result(&f);
        }
        free_result(&ref);
        free_problem(&p);
    }
    // ties: x = 0 gives every logit 0: argmax = id 0, top-K = ids 0..K-1, log-probs -log V
    {
        problem p = make_problem(1, 3, 8, 50, 4, 0.5, 0.5, TEACHER_FULL);
        memset(p.x, 0, (size_t)(p.n * p.H) * sizeof(float));
        for (int mode = 0; mode < 2; mode++) {
            loss_plan plan = {.mode = (loss_mode)mode, .row_chunk = 3, .vocab_tile = 7, .topk_student = 5};
            result f = make_result(p.n, p.H, 5);
            run_fused(&cfg, &plan, &p, &f);
            for (int r = 0; r < p.n; r++) {
                CHECK(f.argmax[r] == 0);
                for (int c = 0; c < 5; c++) {
                    CHECK(f.idx[r * 5 + c] == c);
                    CHECK_CLOSE(f.logp[r * 5 + c], -log(50.0), 1e-6);
                }
                CHECK_CLOSE(f.ce[r], log(50.0), 1e-6);
            }
            free_result(&f);
        }
        free_problem(&p);
    }
    // the workspace: never [n, V] in mode TILES, [row_chunk, V] plus O(row_chunk (k + K)) in mode ROWS
    {
        loss_plan rows = {.mode = LOSS_MODE_ROWS, .row_chunk = 60, .vocab_tile = 0, .topk_student = 8};
        loss_plan tiles = {.mode = LOSS_MODE_TILES, .row_chunk = 60, .vocab_tile = 4096, .topk_student = 8};
        size_t br = loss_workspace_bytes(&rows, 1024, 151936, 32), bt = loss_workspace_bytes(&tiles, 1024, 151936, 32);
        CHECK(br >= (size_t)60 * 151936 * 4 && br < (size_t)60 * 151936 * 4 + (size_t)60 * 1024);
        CHECK(bt < (size_t)60 * (4096 + 1024) * 4 + (size_t)60 * 1024);
    }
}

// ----------------------------------------------------------------------------- 5. table, settings

static void test_terms_and_settings(void) {
    for (int t = 0; t < LOSS_TERMS; t++) {
        CHECK_MSG(config_key_find(loss_terms[t].key) != NULL, "term %s: key %s is no configuration key", loss_terms[t].metric, loss_terms[t].key);
        for (int u = 0; u < t; u++) CHECK(strcmp(loss_terms[t].metric, loss_terms[u].metric) != 0);
        CHECK(loss_terms[t].always || loss_terms[t].miss_metric);
    }
    config *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    config_defaults(a);
    loss_config lc;
    loss_config_make(&lc, a, 16); // the defaults: SPEC §4
    CHECK(lc.alpha == 0.15 && lc.lambda == 0.1 && lc.gamma == 7 && lc.weighting == LOSS_WEIGHT_DECAY &&
          !lc.label_teacher && lc.selector_weight == 1);
    loss_config_make(&lc, a, 32);
    CHECK(lc.gamma == 10);
    CHECK(loss_term_coef(LOSS_TERM_CE, &lc) == 1 - 0.15 && loss_term_coef(LOSS_TERM_SEL, &lc) == 1);
    // step-dump's "loss" object, read as the configuration's loss.* keys
    cJSON *o = cJSON_Parse("{\"alpha\": 0.4, \"lambda\": 0.3, \"gamma\": 3, \"weighting\": \"dpace\", "
                           "\"label\": \"teacher\", \"selector_weight\": 0.7}");
    CHECK(loss_config_parse_json(a, o, "cfg.json") == 0);
    cJSON_Delete(o);
    loss_config_make(&lc, a, 16);
    CHECK(lc.alpha == 0.4 && lc.lambda == 0.3 && lc.gamma == 3 && lc.weighting == LOSS_WEIGHT_DPACE &&
          lc.label_teacher && lc.selector_weight == 0.7);
    // --mode eval: a checkpoint's loss keys over this job's
    config_defaults(b);
    loss_config_copy_keys(b, a);
    loss_config lb;
    loss_config_make(&lb, b, 16);
    CHECK(memcmp(&lb, &lc, sizeof lc) == 0);
    // bad values and unknown keys: one error naming the key
    const char *bad[3] = {"{\"alpha\": 2}", "{\"weighting\": \"flat\"}", "{\"lr\": 1}"};
    const char *named[3] = {"loss.alpha", "loss.weighting", "loss.lr"};
    for (int i = 0; i < 3; i++) {
        o = cJSON_Parse(bad[i]);
        CHECK(loss_config_parse_json(b, o, "cfg.json") == -1);
        CHECK_MSG(strstr(error_msg(), named[i]) && strstr(error_msg(), "cfg.json"), "%s", error_msg());
        cJSON_Delete(o);
    }
    free(a);
    free(b);
    printf("  terms' table and settings: %d terms\n", LOSS_TERMS);
}

int main(void) {
    static void (*const tests[])(void) = {test_by_hand, test_finite_differences, test_vs_naive, test_edges,
                                          test_terms_and_settings};
    // seed 20251130: the stream this test always drew
    return test_run_cpu("test_loss", 20251130, &be, tests, sizeof tests / sizeof tests[0]);
}
