// test_ops_grad.c: the training ops on the CPU backend (the fp32 reference): every backward against
// central finite differences of its forward, and the DFlash attention against a naive version
// written here from the SPEC §3 rules (an explicit [C*B, S + B] mask, softmax in double).
//
// Finite differences. The objective is L = sum(out * G) with a fixed random G, summed in double;
// the forward itself runs in fp32. For a perturbation of one input by +-h (the step actually taken
// is the difference of the two fp32 inputs), fd = (L+ - L-) / (2h). Its error has two parts:
//   truncation  ~ h^2 |f'''| / 6: about 1e-5 relative for h = 1e-2 and O(1) inputs;
//   roundoff    ~ (fp32 noise of L, ~1e-7 * sum |out * G|) / h: about 1e-5 for these tiny shapes.
// Both stay below 1e-4; the check is max_i |fd_i - grad_i| <= FD_TOL * max_i |grad_i| per tensor,
// with FD_TOL = 1e-3, far below what a wrong term, mask or index produces (O(1) relative).
// Gradients that should be exactly zero (context rows nobody sees) are covered by the same check.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/kernels/ops.h"
#include "testing.h"
#include "testing_device.h"

#define FD_STEP 1e-2f
#define FD_TOL 1e-3

static backend be;

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

static double dot_d(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

// ----------------------------------------------------------------------------- finite differences

// objective(ctx): runs the forward on the current inputs and returns sum(out * G) in double.
typedef double (*objective_fn)(void *ctx);

// Central differences of objective w.r.t. every element of param[n] against grad[n].
static void fd_check(const char *what, float *param, size_t n, const float *grad, objective_fn objective, void *ctx) {
    double worst = 0, scale = max_abs(grad, n);
    for (size_t i = 0; i < n; i++) {
        float x0 = param[i], xp = x0 + FD_STEP, xm = x0 - FD_STEP;
        param[i] = xp;
        double lp = objective(ctx);
        param[i] = xm;
        double lm = objective(ctx);
        param[i] = x0;
        double fd = (lp - lm) / ((double)xp - (double)xm);
        double err = fabs(fd - grad[i]);
        worst = err > worst ? err : worst;
    }
    double rel = worst / (scale > 0 ? scale : 1);
    printf("  fd %-34s max |grad| %.3e, max |fd - grad| / max |grad| = %.2e\n", what, scale, rel);
    CHECK_MSG(scale > 0, "fd %s: the gradient is all zero (the test exercises nothing)", what);
    CHECK_MSG(rel <= FD_TOL, "fd %s: relative error %.3g > %g", what, rel, FD_TOL);
}

// ----------------------------------------------------------------------------- RMSNorm

typedef struct {
    float *x, *w, *G, *y;
    int R, D;
    float eps;
} rms_ctx;

static double rms_objective(void *p) {
    rms_ctx *c = p;
    ops_rmsnorm(&be, c->y, c->x, c->w, c->R, c->D, c->eps);
    return dot_d(c->y, c->G, (size_t)c->R * c->D);
}

static void test_rmsnorm_backward(void) {
    rms_ctx c = {.R = 5, .D = 7, .eps = 1e-6f};
    size_t n = (size_t)c.R * c.D;
    c.x = test_rand_vec(n, 1);
    c.G = test_rand_vec(n, 1);
    c.y = test_rand_vec(n, 1);
    c.w = test_rand_vec((size_t)c.D, 0.5f);
    for (int i = 0; i < c.D; i++) c.w[i] += 1.0f; // weights around 1, as trained norms are
    float *dx = test_rand_vec(n, 100), *dw = calloc((size_t)c.D, sizeof(float));
    ops_rmsnorm_backward(&be, dx, dw, c.G, c.x, c.w, c.R, c.D, c.eps, 0); // dx's garbage is overwritten
    fd_check("rmsnorm dx", c.x, n, dx, rms_objective, &c);
    fd_check("rmsnorm dw", c.w, (size_t)c.D, dw, rms_objective, &c);

    // accumulate = 1 adds to dx; dw always adds
    float *dx2 = test_rand_vec(n, 1), *dw2 = test_rand_vec((size_t)c.D, 1);
    float *dx2_0 = test_copy_floats(dx2, n), *dw2_0 = test_copy_floats(dw2, (size_t)c.D);
    ops_rmsnorm_backward(&be, dx2, dw2, c.G, c.x, c.w, c.R, c.D, c.eps, 1);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += fabsf(dx2[i] - (dx2_0[i] + dx[i])) > 1e-6f * (1 + fabsf(dx2[i]));
    for (int i = 0; i < c.D; i++) bad += fabsf(dw2[i] - (dw2_0[i] + dw[i])) > 1e-6f * (1 + fabsf(dw2[i]));
    CHECK_MSG(bad == 0, "rmsnorm backward accumulate: %d elements are not prior + gradient", bad);

    // dx may alias dy (the result is the same as with separate buffers)
    float *buf = test_copy_floats(c.G, n);
    memset(dw2, 0, (size_t)c.D * sizeof(float));
    ops_rmsnorm_backward(&be, buf, dw2, buf, c.x, c.w, c.R, c.D, c.eps, 0);
    CHECK(memcmp(buf, dx, n * sizeof(float)) == 0);
    CHECK(memcmp(dw2, dw, (size_t)c.D * sizeof(float)) == 0);

    free(c.x), free(c.w), free(c.G), free(c.y), free(dx), free(dw);
    free(dx2), free(dw2), free(dx2_0), free(dw2_0), free(buf);
}

// ----------------------------------------------------------------------------- RoPE

typedef struct {
    float *x, *y, *G, *inv_freq;
    int32_t pos[3];
    int T, nh, hd;
} rope_ctx;

static double rope_objective(void *p) {
    rope_ctx *c = p;
    size_t n = (size_t)c->T * c->nh * c->hd;
    memcpy(c->y, c->x, n * sizeof(float));
    ops_rope(&be, c->y, c->pos, c->inv_freq, c->T, c->nh, c->hd);
    return dot_d(c->y, c->G, n);
}

static void test_rope_backward(void) {
    rope_ctx c = {.pos = {0, 5, 1234}, .T = 3, .nh = 2, .hd = 8};
    size_t n = (size_t)c.T * c.nh * c.hd;
    c.inv_freq = malloc((size_t)c.hd / 2 * sizeof(float));
    for (int i = 0; i < c.hd / 2; i++) c.inv_freq[i] = (float)pow(10000.0, -2.0 * i / c.hd);
    c.x = test_rand_vec(n, 1);
    c.y = test_rand_vec(n, 1);
    c.G = test_rand_vec(n, 1);
    float *dx = test_copy_floats(c.G, n);
    ops_rope_backward(&be, dx, c.pos, c.inv_freq, c.T, c.nh, c.hd);
    fd_check("rope dx", c.x, n, dx, rope_objective, &c);

    // a rotation's transpose is its inverse: backward(forward(x)) = x up to fp32 rounding
    float *y = test_copy_floats(c.x, n);
    ops_rope(&be, y, c.pos, c.inv_freq, c.T, c.nh, c.hd);
    ops_rope_backward(&be, y, c.pos, c.inv_freq, c.T, c.nh, c.hd);
    double err = 0;
    for (size_t i = 0; i < n; i++) err = fabs(y[i] - c.x[i]) > err ? fabs(y[i] - c.x[i]) : err;
    CHECK_CLOSE(err, 0, 1e-6);

    free(c.x), free(c.y), free(c.G), free(c.inv_freq), free(dx), free(y);
}

// ----------------------------------------------------------------------------- SwiGLU

typedef struct {
    float *g, *u, *G, *y;
    int64_t n;
} swiglu_ctx;

static double swiglu_objective(void *p) {
    swiglu_ctx *c = p;
    ops_swiglu(&be, c->y, c->g, c->u, c->n);
    return dot_d(c->y, c->G, (size_t)c->n);
}

static void test_swiglu_backward(void) {
    swiglu_ctx c = {.n = 37};
    c.g = test_rand_vec((size_t)c.n, 4); // through the bend of silu and into both tails
    c.u = test_rand_vec((size_t)c.n, 1);
    c.G = test_rand_vec((size_t)c.n, 1);
    c.y = test_rand_vec((size_t)c.n, 1);
    float *dg = test_rand_vec((size_t)c.n, 1), *du = test_rand_vec((size_t)c.n, 1);
    ops_swiglu_backward(&be, dg, du, c.G, c.g, c.u, c.n);
    fd_check("swiglu dgate", c.g, (size_t)c.n, dg, swiglu_objective, &c);
    fd_check("swiglu dup", c.u, (size_t)c.n, du, swiglu_objective, &c);

    // saturated gates: silu'(-100) = 0 and silu'(100) = 1, with no NaN from exp overflow
    float g2[2] = {-100, 100}, u2[2] = {0.5f, 0.5f}, d2[2] = {2, 2}, dg2[2], du2[2];
    ops_swiglu_backward(&be, dg2, du2, d2, g2, u2, 2);
    CHECK(dg2[0] == 0 && isfinite(du2[0]));
    CHECK_CLOSE(dg2[1], 1.0, 1e-6);
    CHECK_CLOSE(du2[1], 200.0, 1e-4);

    free(c.g), free(c.u), free(c.G), free(c.y), free(dg), free(du);
}

// ----------------------------------------------------------------------------- DFlash attention

// One configuration: C anchors of B slots in a packed batch of n_seq sequences (bounds = cu_seqlens).
typedef struct {
    const char *name;
    int C, B, nq, nkv, hd, window, causal;
    int n_seq;
    int bounds[5];
    int anchors[8];
} attn_case;

// The buffers of one case, filled with random values; seq_start derived from the bounds.
typedef struct {
    const attn_case *cs;
    int S, rows; // packed length, C * B
    size_t nqe, nbe, nce; // elements of q (and dq, out, G), of a block's k/v, of the context's k/v
    int32_t anchors[8], seq_start[8];
    float scale;
    float *q, *kb, *vb, *kc, *vc;    // inputs
    float *out, *lse, *G;            // forward output, lse, the objective's weights
} attn_bufs;

static void attn_setup(attn_bufs *t, const attn_case *cs) {
    memset(t, 0, sizeof *t);
    t->cs = cs;
    t->S = cs->bounds[cs->n_seq];
    t->rows = cs->C * cs->B;
    t->scale = 1.0f / sqrtf((float)cs->hd);
    for (int ci = 0; ci < cs->C; ci++) {
        int a = cs->anchors[ci], s = 0;
        while (!(cs->bounds[s] <= a && a < cs->bounds[s + 1])) s++;
        t->anchors[ci] = a;
        t->seq_start[ci] = cs->bounds[s];
    }
    size_t nqe = t->nqe = (size_t)t->rows * cs->nq * cs->hd, nbe = t->nbe = (size_t)t->rows * cs->nkv * cs->hd;
    size_t nce = t->nce = (size_t)t->S * cs->nkv * cs->hd;
    // amplitude 1.5: scores of a few units, so some softmax rows are peaked and some flat
    t->q = test_rand_vec(nqe, 1.5f);
    t->kb = test_rand_vec(nbe, 1.5f);
    t->vb = test_rand_vec(nbe, 1);
    t->kc = test_rand_vec(nce, 1.5f);
    t->vc = test_rand_vec(nce, 1);
    t->G = test_rand_vec(nqe, 1);
    t->out = test_rand_vec(nqe, 1);
    t->lse = test_rand_vec((size_t)t->rows * cs->nq, 1);
}

static void attn_free(attn_bufs *t) {
    free(t->q), free(t->kb), free(t->vb), free(t->kc), free(t->vc);
    free(t->out), free(t->lse), free(t->G);
}

static void attn_forward(attn_bufs *t) {
    const attn_case *cs = t->cs;
    ops_dflash_attn_forward(&be, t->out, t->lse, t->q, t->kb, t->vb, t->kc, t->vc, t->anchors, t->seq_start, cs->C,
                            cs->B, cs->nq, cs->nkv, cs->hd, t->scale, cs->window, cs->causal);
}

static double attn_objective(void *p) {
    attn_bufs *t = p;
    attn_forward(t);
    return dot_d(t->out, t->G, t->nqe);
}

// The sequence a packed position belongs to.
static int seq_of(const attn_case *cs, int pos) {
    int s = 0;
    while (pos >= cs->bounds[s + 1]) s++;
    return s;
}

// The explicit mask of SPEC §3, [C*B, S + B]: columns 0..S-1 the context positions of the packed
// batch, S..S+B-1 the slots of the query's own block. Written from the rules, not from the op:
//   context c: same sequence as the anchor, c < a, and on sliding layers c >= a + k - (W - 1);
//   block slot j: every j (full layers) or j <= k (causal block).
static unsigned char *naive_mask(const attn_bufs *t) {
    const attn_case *cs = t->cs;
    int S = t->S, B = cs->B, W = cs->window;
    unsigned char *mask = calloc((size_t)t->rows * (S + B), 1);
    for (int ci = 0; ci < cs->C; ci++)
        for (int k = 0; k < B; k++) {
            int a = cs->anchors[ci];
            unsigned char *m = mask + (size_t)(ci * B + k) * (S + B);
            for (int c = 0; c < S; c++)
                m[c] = seq_of(cs, c) == seq_of(cs, a) && c < a && (W == 0 || c >= a + k - (W - 1));
            for (int j = 0; j < B; j++) m[S + j] = !cs->causal || j <= k;
        }
    return mask;
}

// Key (or value) column col of the mask for anchor ci, kv head kh: context row col, or block slot col - S.
static const float *naive_kv(const attn_bufs *t, const float *ctx, const float *blk, int ci, int col, int kh) {
    const attn_case *cs = t->cs;
    if (col < t->S) return ctx + ((size_t)col * cs->nkv + kh) * cs->hd;
    return blk + ((size_t)(ci * cs->B + col - t->S) * cs->nkv + kh) * cs->hd;
}

// Naive attention in double with the explicit mask: out [rows, nq, hd], lse [rows, nq]; when dout is
// given, also the gradients (dkc/dvc [S, nkv, hd] summed over every query that sees the row).
typedef struct {
    double *out, *lse, *dq, *dkb, *dvb, *dkc, *dvc;
} naive_result;

static naive_result naive_attention(const attn_bufs *t, const float *dout) {
    const attn_case *cs = t->cs;
    int S = t->S, B = cs->B, nq = cs->nq, hd = cs->hd, group = nq / cs->nkv, ncol = S + B;
    size_t nqe = t->nqe, nbe = t->nbe, nce = t->nce;
    naive_result r = {calloc(nqe, 8), calloc((size_t)t->rows * nq, 8), calloc(nqe, 8), calloc(nbe, 8),
                      calloc(nbe, 8), calloc(nce, 8), calloc(nce, 8)};
    unsigned char *mask = naive_mask(t);
    double *p = malloc((size_t)ncol * sizeof(double));
    for (int row = 0; row < t->rows; row++)
        for (int h = 0; h < nq; h++) {
            int ci = row / B, kh = h / group;
            const unsigned char *m = mask + (size_t)row * ncol;
            const float *qv = t->q + ((size_t)row * nq + h) * hd;
            double mx = -INFINITY, l = 0;
            for (int col = 0; col < ncol; col++) {
                if (!m[col]) continue;
                p[col] = dot_d(qv, naive_kv(t, t->kc, t->kb, ci, col, kh), (size_t)hd) * t->scale;
                mx = p[col] > mx ? p[col] : mx;
            }
            for (int col = 0; col < ncol; col++)
                if (m[col]) l += exp(p[col] - mx);
            double *o = r.out + ((size_t)row * nq + h) * hd;
            for (int col = 0; col < ncol; col++) {
                if (!m[col]) continue;
                p[col] = exp(p[col] - mx) / l;
                const float *vv = naive_kv(t, t->vc, t->vb, ci, col, kh);
                for (int i = 0; i < hd; i++) o[i] += p[col] * vv[i];
            }
            r.lse[(size_t)row * nq + h] = mx + log(l);
            if (!dout) continue;
            // dS = P (dP - sum(dout * out)), dq = scale dS k, dk = scale dS q, dv = P dout
            const float *dov = dout + ((size_t)row * nq + h) * hd;
            double D = 0;
            for (int i = 0; i < hd; i++) D += dov[i] * o[i];
            for (int col = 0; col < ncol; col++) {
                if (!m[col]) continue;
                double dP = dot_d(dov, naive_kv(t, t->vc, t->vb, ci, col, kh), (size_t)hd);
                double dS = p[col] * (dP - D);
                const float *kv = naive_kv(t, t->kc, t->kb, ci, col, kh);
                size_t kr = col < S ? ((size_t)col * cs->nkv + kh) * hd : ((size_t)(ci * B + col - S) * cs->nkv + kh) * hd;
                double *dk = col < S ? r.dkc + kr : r.dkb + kr, *dv = col < S ? r.dvc + kr : r.dvb + kr;
                for (int i = 0; i < hd; i++) {
                    r.dq[((size_t)row * nq + h) * hd + i] += t->scale * dS * kv[i];
                    dk[i] += t->scale * dS * qv[i];
                    dv[i] += p[col] * dov[i];
                }
            }
        }
    free(p);
    free(mask);
    return r;
}

static void naive_free(naive_result *r) {
    free(r->out), free(r->lse), free(r->dq), free(r->dkb), free(r->dvb), free(r->dkc), free(r->dvc);
}

// The gradients of one case, from the op (dkc/dvc start at 0).
typedef struct {
    float *dq, *dkb, *dvb, *dkc, *dvc;
} attn_grads;

static attn_grads attn_backward(attn_bufs *t) {
    const attn_case *cs = t->cs;
    // dq/dkb/dvb start as garbage: the op must overwrite them
    attn_grads g = {test_rand_vec(t->nqe, 100), test_rand_vec(t->nbe, 100), test_rand_vec(t->nbe, 100),
                    calloc(t->nce, 4), calloc(t->nce, 4)};
    attn_forward(t);
    ops_dflash_attn_backward(&be, g.dq, g.dkb, g.dvb, g.dkc, g.dvc, t->G, t->out, t->lse, t->q, t->kb, t->vb, t->kc,
                             t->vc, t->anchors, t->seq_start, cs->C, cs->B, cs->nq, cs->nkv, cs->hd, t->scale,
                             cs->window, cs->causal);
    return g;
}

static void grads_free(attn_grads *g) { free(g->dq), free(g->dkb), free(g->dvb), free(g->dkc), free(g->dvc); }

// One case: its buffers and the op's gradients (attn_backward), handed to check, then freed.
static void attn_check(const attn_case *cs, void (*check)(attn_bufs *t, attn_grads *g)) {
    attn_bufs t;
    attn_setup(&t, cs);
    attn_grads g = attn_backward(&t);
    check(&t, &g);
    grads_free(&g);
    attn_free(&t);
}

// Forward and backward against the naive double version. The op is fp32 with sums over at most
// S + B terms: its relative error is a few 1e-7 here; 1e-5 leaves room and still catches any
// masking or indexing error (O(1)).
static void check_against_naive(attn_bufs *t, attn_grads *g) {
    const attn_case *cs = t->cs;
    naive_result r = naive_attention(t, t->G);
    size_t nqe = t->nqe, nbe = t->nbe, nce = t->nce;
    double e_out = test_rel_err_d(t->out, r.out, nqe), e_lse = 0;
    for (size_t i = 0; i < (size_t)t->rows * cs->nq; i++)
        e_lse = fabs(t->lse[i] - r.lse[i]) > e_lse ? fabs(t->lse[i] - r.lse[i]) : e_lse;
    double e[5] = {test_rel_err_d(g->dq, r.dq, nqe), test_rel_err_d(g->dkb, r.dkb, nbe),
                   test_rel_err_d(g->dvb, r.dvb, nbe), test_rel_err_d(g->dkc, r.dkc, nce),
                   test_rel_err_d(g->dvc, r.dvc, nce)};
    printf("  naive %-26s out %.1e lse %.1e dq %.1e dkb %.1e dvb %.1e dkc %.1e dvc %.1e\n", cs->name, e_out, e_lse,
           e[0], e[1], e[2], e[3], e[4]);
    CHECK_MSG(e_out <= 1e-5, "%s: forward out differs from the naive one by %.3g", cs->name, e_out);
    CHECK_MSG(e_lse <= 1e-5, "%s: lse differs from the naive one by %.3g", cs->name, e_lse);
    const char *names[5] = {"dq", "dkb", "dvb", "dkc", "dvc"};
    for (int i = 0; i < 5; i++) CHECK_MSG(e[i] <= 1e-5, "%s: %s differs from the naive one by %.3g", cs->name, names[i], e[i]);
    naive_free(&r);
}

// Every gradient of one case against finite differences.
static void check_fd(attn_bufs *t, attn_grads *g) {
    const attn_case *cs = t->cs;
    printf(" %s\n", cs->name);
    fd_check("attn dq", t->q, t->nqe, g->dq, attn_objective, t);
    fd_check("attn dkb", t->kb, t->nbe, g->dkb, attn_objective, t);
    fd_check("attn dvb", t->vb, t->nbe, g->dvb, attn_objective, t);
    fd_check("attn dkc", t->kc, t->nce, g->dkc, attn_objective, t);
    fd_check("attn dvc", t->vc, t->nce, g->dvc, attn_objective, t);
}

// Calling the backward twice: dkc/dvc are accumulators (twice the gradient), dq/dkb/dvb are written
// (the same values again, whatever the buffers held).
static void check_accumulation(attn_bufs *t, attn_grads *g) {
    const attn_case *cs = t->cs;
    size_t nqe = t->nqe, nbe = t->nbe, nce = t->nce;
    float *dq1 = test_copy_floats(g->dq, nqe), *dkb1 = test_copy_floats(g->dkb, nbe);
    float *dvb1 = test_copy_floats(g->dvb, nbe);
    float *dkc1 = test_copy_floats(g->dkc, nce), *dvc1 = test_copy_floats(g->dvc, nce);
    for (size_t i = 0; i < nqe; i++) g->dq[i] = 1e4f;
    for (size_t i = 0; i < nbe; i++) g->dkb[i] = g->dvb[i] = -1e4f;
    ops_dflash_attn_backward(&be, g->dq, g->dkb, g->dvb, g->dkc, g->dvc, t->G, t->out, t->lse, t->q, t->kb, t->vb,
                             t->kc, t->vc, t->anchors, t->seq_start, cs->C, cs->B, cs->nq, cs->nkv, cs->hd, t->scale,
                             cs->window, cs->causal);
    CHECK(memcmp(g->dq, dq1, nqe * sizeof(float)) == 0);
    CHECK(memcmp(g->dkb, dkb1, nbe * sizeof(float)) == 0);
    CHECK(memcmp(g->dvb, dvb1, nbe * sizeof(float)) == 0);
    double mk = max_abs(dkc1, nce), mv = max_abs(dvc1, nce);
    int bad = 0;
    for (size_t i = 0; i < nce; i++) {
        bad += fabs(g->dkc[i] - 2.0 * dkc1[i]) > 1e-6 * mk;
        bad += fabs(g->dvc[i] - 2.0 * dvc1[i]) > 1e-6 * mv;
    }
    CHECK_MSG(mk > 0 && mv > 0, "%s: the context gradients are zero", cs->name);
    CHECK_MSG(bad == 0, "%s: %d context gradient elements are not doubled by a second backward", cs->name, bad);
    free(dq1), free(dkb1), free(dvb1), free(dkc1), free(dvc1);
}

// Tiny cases for the finite differences. Sequences are [bounds[s], bounds[s+1]); every case has an
// anchor at a sequence start (no context: it sees only its block) and one whose block runs past
// its sequence's end.
static const attn_case fd_cases[] = {
    // full layer: bidirectional block, no window. Anchor 0 starts sequence 0; 14 runs past 16.
    {"full, GQA 4/2, hd 8, B 4, C 3", 3, 4, 4, 2, 8, 0, 0, 2, {0, 9, 16}, {0, 5, 14}},
    // sliding layer, causal block, W 3 < the context (anchor 6 has 6 positions): slot k of anchor
    // 6 sees c >= 4 + k, so slot 2 sees no context at all. Anchor 8 starts sequence 1.
    {"sliding W3 causal, MQA 4/1, hd 4, B 3", 3, 3, 4, 1, 4, 3, 1, 2, {0, 8, 15}, {6, 8, 13}},
    // sliding window with a bidirectional block (the causal flag is configurable), anchors not in order
    {"sliding W5 bidir, GQA 4/2, hd 6, B 4, C 2", 2, 4, 4, 2, 6, 5, 0, 2, {0, 6, 14}, {11, 6}},
    // full layer, MQA, two anchors near the ends of their sequences
    {"full, MQA 4/1, hd 8, B 3, C 2", 2, 3, 4, 1, 8, 0, 0, 2, {0, 5, 13}, {3, 12}},
};

// Larger cases against the naive version only (more threads' worth of rows, longer contexts).
static const attn_case big_cases[] = {
    {"big full, GQA 8/2, hd 16, B 8", 6, 8, 8, 2, 16, 0, 0, 3, {0, 40, 65, 100}, {0, 17, 39, 40, 52, 90}},
    {"big sliding W12 causal, B 8", 6, 8, 8, 2, 16, 12, 1, 3, {0, 40, 65, 100}, {30, 3, 39, 64, 65, 99}},
    {"big sliding W4 < B, B 8", 5, 8, 4, 4, 8, 4, 1, 3, {0, 40, 65, 100}, {30, 10, 45, 70, 95}},
    // past the CPU backward's tiles (128 context rows a key-major task, 512 query rows a stacked GEMM:
    // M = B * group = 256 rows an anchor, so 2 anchors a GEMM): runs of anchors split over several
    // GEMMs and context ranges that cross tile boundaries, with and without a window
    {"big tiles full, MQA 16/1, B 16", 8, 16, 16, 1, 8, 0, 0, 2, {0, 200, 300}, {150, 199, 5, 130, 129, 250, 200, 299}},
    {"big tiles W40 causal, MQA 16/1", 8, 16, 16, 1, 8, 40, 1, 2, {0, 200, 300}, {150, 199, 127, 130, 129, 250, 201, 299}},
};

static void test_dflash_attention(void) {
    for (size_t i = 0; i < sizeof fd_cases / sizeof fd_cases[0]; i++) {
        attn_check(&fd_cases[i], check_against_naive);
        attn_check(&fd_cases[i], check_fd);
    }
    for (size_t i = 0; i < sizeof big_cases / sizeof big_cases[0]; i++) attn_check(&big_cases[i], check_against_naive);
    attn_check(&fd_cases[0], check_accumulation);
    attn_check(&big_cases[1], check_accumulation);
}

// ----------------------------------------------------------------------------- DFlash2 dynamic conv

typedef struct {
    float *x, *dyn, *base, *G, *out;
    int T, B, H, K, G_, ld;
} dc_ctx;

static double dc_objective(void *p) {
    dc_ctx *c = p;
    ops_dynconv_forward(&be, c->out, c->x, c->dyn + 1, c->ld, c->base, c->T, c->B, c->H, c->K, c->G_);
    return dot_d(c->out, c->G, (size_t)c->T * c->H);
}

// The grouped dynamic causal conv (dynconv.h): 3 blocks of 4 slots, H 6 in groups of 2, K 3
// (longer than a block's first slots, so the causal cut-off is exercised), dyn read at column 1 of
// rows of ld 2*K*H/G + 1 (the prepare/finish halves of the projection output are such strided
// views). Then the forward's semantics: an identity base with no dynamic part passes x through, and
// a block's output does not depend on another block's input.
static void test_dynconv(void) {
    dc_ctx c = {.T = 12, .B = 4, .H = 6, .K = 3, .G_ = 2};
    int ng = c.H / c.G_;
    c.ld = 2 * c.K * ng + 1;
    size_t n = (size_t)c.T * c.H, nd = (size_t)c.T * c.ld, nb = (size_t)c.K * c.H;
    c.x = test_rand_vec(n, 1);
    c.dyn = test_rand_vec(nd, 0.5f);
    c.base = test_rand_vec(nb, 0.5f);
    c.G = test_rand_vec(n, 1);
    c.out = test_rand_vec(n, 1);
    float *dx = test_rand_vec(n, 100), *ddyn = calloc(nd, sizeof(float)), *dbase = calloc(nb, sizeof(float));
    for (size_t i = 0; i < nd; i++) ddyn[i] = 7.0f; // columns outside [1, 1 + K*ng) must stay untouched
    ops_dynconv_backward(&be, dx, ddyn + 1, dbase, c.G, c.x, c.dyn + 1, c.ld, c.base, c.T, c.B, c.H, c.K, c.G_);
    int untouched = 1;
    for (int t = 0; t < c.T; t++)
        for (int j = 0; j < c.ld; j++)
            if (j == 0 || j > c.K * ng) untouched &= ddyn[(size_t)t * c.ld + j] == 7.0f;
    CHECK_MSG(untouched, "dynconv backward wrote ddyn outside its K*H/G columns");
    float *ddyn1 = malloc(nd * sizeof(float)); // fd over dyn's own columns only (the others are not read)
    for (size_t i = 0; i < nd; i++) ddyn1[i] = (i % (size_t)c.ld) >= 1 && (i % (size_t)c.ld) <= (size_t)(c.K * ng) ? ddyn[i] : 0.0f;
    // fd_check perturbs dyn[i]; ddyn1 is aligned to dyn (the op got dyn + 1 and ddyn + 1)
    fd_check("dynconv dx", c.x, n, dx, dc_objective, &c);
    fd_check("dynconv ddyn", c.dyn, nd, ddyn1, dc_objective, &c);
    fd_check("dynconv dbase", c.base, nb, dbase, dc_objective, &c);
    // dbase accumulates
    float *dbase2 = test_copy_floats(dbase, nb);
    ops_dynconv_backward(&be, dx, ddyn + 1, dbase2, c.G, c.x, c.dyn + 1, c.ld, c.base, c.T, c.B, c.H, c.K, c.G_);
    double acc = 0;
    for (size_t i = 0; i < nb; i++) acc = fmax(acc, fabs(dbase2[i] - 2 * dbase[i]));
    CHECK_MSG(acc <= 1e-5 * max_abs(dbase, nb), "dynconv dbase does not accumulate (+=): off by %g", acc);

    // identity: base[0] = 1, base[o > 0] = 0, dyn = 0 -> out = x
    float *id = calloc(nb, sizeof(float)), *zero = calloc(nd, sizeof(float));
    for (int h = 0; h < c.H; h++) id[h] = 1.0f;
    ops_dynconv_forward(&be, c.out, c.x, zero, c.ld, id, c.T, c.B, c.H, c.K, c.G_);
    CHECK(memcmp(c.out, c.x, n * sizeof(float)) == 0);
    // blocks are independent: changing block 0's input leaves blocks 1.. unchanged; slot 0 of
    // block 1 sees only itself (out = (base[0] + dyn[t, g]) * x[t])
    float *ref = test_copy_floats(c.out, n);
    ops_dynconv_forward(&be, ref, c.x, c.dyn + 1, c.ld, c.base, c.T, c.B, c.H, c.K, c.G_);
    for (size_t i = 0; i < (size_t)c.B * c.H; i++) c.x[i] += 1.0f;
    ops_dynconv_forward(&be, c.out, c.x, c.dyn + 1, c.ld, c.base, c.T, c.B, c.H, c.K, c.G_);
    CHECK(memcmp(c.out + (size_t)c.B * c.H, ref + (size_t)c.B * c.H, (n - (size_t)c.B * c.H) * sizeof(float)) == 0);
    int t0 = c.B, bad = 0;
    for (int h = 0; h < c.H; h++) {
        float want = (c.base[h] + c.dyn[1 + (size_t)t0 * c.ld + h / c.G_]) * c.x[(size_t)t0 * c.H + h];
        bad |= fabsf(c.out[(size_t)t0 * c.H + h] - want) > 1e-6f * (1.0f + fabsf(want));
    }
    CHECK_MSG(!bad, "dynconv: a block's first slot must see only itself");
    free(c.x); free(c.dyn); free(c.base); free(c.G); free(c.out); free(dx); free(ddyn); free(ddyn1); free(dbase);
    free(dbase2); free(id); free(zero); free(ref);
}

int main(void) {
    static void (*const tests[])(void) = {test_rmsnorm_backward, test_rope_backward, test_swiglu_backward,
                                          test_dflash_attention, test_dynconv};
    return test_run_cpu("test_ops_grad", 20240611, &be, tests, sizeof tests / sizeof tests[0]);
}
