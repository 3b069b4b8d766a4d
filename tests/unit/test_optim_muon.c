// test_optim_muon.c: Muon (train.optimizer = muon; src/student/train/optim.h) on the CPU backend.
//   - which tensors it takes (optim_muon_takes): 2-D matrices with both sides > 1, not a codebook;
//   - optim_step over a flat buffer of odd shapes (a norm [5], W 7x13, 13x7, a [1, 5] matrix, 16x16,
//     a codebook [6, 4], a conv base kernel [2, 3, 4]), two steps with the global-norm clip active:
//     every tensor Muon does not take gets exactly (bit for bit) what optim_adamw gives its slice
//     alone, and each matrix the update of a double-precision Muon written here (its momentum,
//     Nesterov, the Newton-Schulz iteration in doubles, the 0.2 sqrt(max(R, C)) scale, the decay);
//     with train.optimizer adamw (no optim_muon_init) the step is optim_adamw over the whole buffer;
//   - the Newton-Schulz output's singular values on random 24x40 and 40x24 matrices lie in the
//     quintic's band: sqrt of the eigenvalues of O O^T (Jacobi, doubles) within [0.65, 1.2] (the
//     coefficients 3.4445, -4.7750, 2.0315 leave them oscillating in about [0.68, 1.14] after 5 steps);
//   - one step on 7x13, 13x7, 16x16, 24x40 against PyTorch (tests/reference/make_muon_fixture.py,
//     data/muon.safetensors).
// Tolerance of a Muon update: max |ours - ref| / max |ref| over the update (W' - W) <= 1e-4. Ours is
// fp32 throughout; the reference float64 (here) or float32 (torch, another summation order); the
// fixture's log shows the float32 step within 2e-6 of float64 on these shapes. A wrong coefficient,
// transposition, scale or momentum form errs by 1e-2 or more (torch's bf16 Muon itself is 2e-2 off).
// The momentum buffer: 1e-6 relative (one fp32 multiply-add per element).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/arena.h"
#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/data/safetensors.h"
#include "student/model/drafter.h"
#include "student/train/optim.h"
#include "testing.h"

#define TOL_UPDATE 1e-4
#define TOL_M 1e-6

static backend be;

// ref_ns: the 5 Newton-Schulz iterations in doubles on x [r, c] (r <= c), in place.
static void ref_ns(double *x, int r, int c) {
    double *a = xcalloc((size_t)r * r, sizeof(double)), *b = xcalloc((size_t)r * r, sizeof(double));
    double *y = xcalloc((size_t)r * c, sizeof(double));
    for (int s = 0; s < 5; s++) {
        for (int i = 0; i < r; i++)
            for (int j = 0; j < r; j++) {
                double t = 0;
                for (int k = 0; k < c; k++) t += x[i * c + k] * x[j * c + k];
                a[i * r + j] = t;
            }
        for (int i = 0; i < r; i++)
            for (int j = 0; j < r; j++) {
                double t = 0;
                for (int k = 0; k < r; k++) t += a[i * r + k] * a[k * r + j];
                b[i * r + j] = -4.7750 * a[i * r + j] + 2.0315 * t;
            }
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++) {
                double t = 0;
                for (int k = 0; k < r; k++) t += b[i * r + k] * x[k * c + j];
                y[i * c + j] = 3.4445 * x[i * c + j] + t;
            }
        memcpy(x, y, sizeof(double) * (size_t)r * c);
    }
    free(a), free(b), free(y);
}

// ref_muon: the update (W' - W) and new momentum of a Muon step on W [R, C], in doubles.
static void ref_muon(const float *w, const float *g, const float *m, int R, int C, double lr, double wd, double mu,
                     double gscale, double *upd, double *m_out) {
    int tall = R > C, r = tall ? C : R, c = tall ? R : C;
    double *x = xcalloc((size_t)R * C, sizeof(double)), ss = 0;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            double gi = (double)g[i * C + j] * gscale, mi = mu * m[i * C + j] + gi, u = gi + mu * mi;
            m_out[i * C + j] = mi;
            x[tall ? j * R + i : i * C + j] = u;
            ss += u * u;
        }
    for (int i = 0; i < R * C; i++) x[i] /= sqrt(ss) + 1e-7;
    ref_ns(x, r, c);
    double scale = lr * 0.2 * sqrt((double)(R > C ? R : C));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            upd[i * C + j] = -lr * wd * w[i * C + j] - scale * x[tall ? j * R + i : i * C + j];
    free(x);
}

// max |got - ref| / max |ref|
static double rel_d(const double *got, const double *ref, int64_t n) {
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(got[i] - ref[i]);
        if (!(d <= e)) e = d; // NaN: kept
        if (fabs(ref[i]) > s) s = fabs(ref[i]);
    }
    return s > 0 ? e / s : e;
}

// ------------------------------------------------------------------------------ the tensors Muon takes

enum { NP = 7 };
static drafter_param params[NP];
static int64_t numel;

static void make_params(void) {
    int n = 0;
    int64_t off = 0;
    drafter_param_push(params, &n, &off, "norm.weight", 1, (int64_t[]){5}, 1, 0);
    drafter_param_push(params, &n, &off, "layers.0.self_attn.q_proj.weight", 2, (int64_t[]){7, 13}, 0, 0);
    drafter_param_push(params, &n, &off, "layers.0.self_attn.o_proj.weight", 2, (int64_t[]){13, 7}, 0, 0);
    drafter_param_push(params, &n, &off, "vec.weight", 2, (int64_t[]){1, 5}, 0, 0);
    drafter_param_push(params, &n, &off, "fc.weight", 2, (int64_t[]){16, 16}, 0, 0);
    drafter_param_push(params, &n, &off, "candidate_selector.predecessor_codebook", 2, (int64_t[]){6, 4}, 0, 0);
    drafter_param_push(params, &n, &off, "layers.0.attention_conv.base_kernel", 3, (int64_t[]){2, 3, 4}, 0, 1);
    numel = off;
}

static void test_takes(void) {
    static const int want[NP] = {0, 1, 1, 0, 1, 0, 0};
    for (int i = 0; i < NP; i++) CHECK_MSG(optim_muon_takes(&params[i]) == want[i], "optim_muon_takes(%s)", params[i].name);
}

// ------------------------------------------------------------------------------ optim_step, flat buffer

static void test_step(void) {
    optim_config c;
    optim_config_default(&c);
    c.lr = 0.02, c.weight_decay = 0.1, c.clip = 0.5, c.total_steps = 10, c.warmup_frac = 0.1, c.muon = 1;
    c.muon_momentum = 0.9;
    float *w = test_rand_vec((size_t)numel, 0.05f);
    for (int i = 0; i < NP; i++) // padding between tensors: zero, as drafter_init leaves it
        for (int64_t k = params[i].offset + params[i].numel; k < (i + 1 < NP ? params[i + 1].offset : numel); k++) w[k] = 0;
    arena a;
    CHECK(arena_init(&a, "muon test", &be, optim_bytes(numel, 0) + optim_muon_bytes(params, NP)) == 0);
    optim o;
    optim_init(&o, &c, &be, numel, &a, w);
    optim_muon_init(&o, params, NP, &a);
    CHECK(o.n_mat == 3);
    for (int step = 0; step < 2; step++) {
        float *g = test_rand_vec((size_t)numel, 1.0f);
        for (int i = 0; i < NP; i++)
            for (int64_t k = params[i].offset + params[i].numel; k < (i + 1 < NP ? params[i + 1].offset : numel); k++) g[k] = 0;
        const double sum_w = 2.0;
        // the scalars optim_step derives (the same double arithmetic, the same sum of squares)
        double scale = 1.0 / sum_w, norm = sqrt(optim_sum_squares(&be, g, numel)) * scale;
        CHECK(norm > c.clip); // the clip is active
        double clip = c.clip / (norm + 1e-6), lr = optim_lr(&c, o.step);
        double bc1 = 1.0 - pow(c.beta1, (double)(o.step + 1)), bc2 = 1.0 - pow(c.beta2, (double)(o.step + 1));
        float *w0 = test_copy_floats(w, (size_t)numel), *g0 = test_copy_floats(g, (size_t)numel);
        float *m0 = xmalloc((size_t)numel * 4), *v0 = xmalloc((size_t)numel * 4);
        memcpy(m0, o.m, (size_t)numel * 4), memcpy(v0, o.v, (size_t)numel * 4);
        double got_norm = optim_step(&o, w, g, sum_w);
        CHECK(got_norm == norm);
        for (int64_t k = 0; k < numel; k++) CHECK_MSG(g[k] == 0, "grad not zeroed at %lld", (long long)k);
        for (int i = 0; i < NP; i++) {
            const drafter_param *p = &params[i];
            int64_t off = p->offset, n = p->numel;
            if (!optim_muon_takes(p)) { // AdamW on its slice, bit for bit
                float *rw = test_copy_floats(w0 + off, (size_t)n), *rm = test_copy_floats(m0 + off, (size_t)n);
                float *rv = test_copy_floats(v0 + off, (size_t)n);
                optim_adamw(&be, rw, g0 + off, rm, rv, n, (float)lr, (float)c.beta1, (float)c.beta2, (float)c.eps,
                            (float)c.weight_decay, (float)(scale * clip), (float)bc1, (float)bc2);
                CHECK_MSG(memcmp(rw, w + off, (size_t)n * 4) == 0 && memcmp(rm, o.m + off, (size_t)n * 4) == 0 &&
                              memcmp(rv, o.v + off, (size_t)n * 4) == 0,
                          "step %d: %s is not exactly AdamW's update", step, p->name);
                free(rw), free(rm), free(rv);
                continue;
            }
            int R = (int)p->shape[0], C = (int)p->shape[1];
            double *upd = xcalloc((size_t)n, sizeof(double)), *rm = xcalloc((size_t)n, sizeof(double));
            double *got = xcalloc((size_t)n, sizeof(double)), *gm = xcalloc((size_t)n, sizeof(double));
            ref_muon(w0 + off, g0 + off, m0 + off, R, C, (double)(float)lr, c.weight_decay, (double)(float)c.muon_momentum,
                     (double)(float)(scale * clip), upd, rm);
            for (int64_t k = 0; k < n; k++) got[k] = (double)w[off + k] - w0[off + k], gm[k] = o.m[off + k];
            char op[96];
            snprintf(op, sizeof op, "step %d %s [%d, %d] update", step, p->name, R, C);
            test_report(op, rel_d(got, upd, n), TOL_UPDATE);
            snprintf(op, sizeof op, "step %d [%d, %d] momentum", step, R, C);
            test_report(op, rel_d(gm, rm, n), TOL_M);
            for (int64_t k = 0; k < n; k++) CHECK(o.v[off + k] == v0[off + k]); // Muon leaves v alone
            free(upd), free(rm), free(got), free(gm);
        }
        free(w0), free(g0), free(m0), free(v0), free(g);
    }
    optim_free(&o);
    arena_free(&a);

    // train.optimizer adamw: the step is optim_adamw over the whole buffer, as before Muon existed
    c.muon = 0;
    float *w2 = test_copy_floats(w, (size_t)numel), *g = test_rand_vec((size_t)numel, 0.1f);
    float *gr = test_copy_floats(g, (size_t)numel), *rm = xcalloc((size_t)numel, 4), *rv = xcalloc((size_t)numel, 4);
    CHECK(arena_init(&a, "adamw test", &be, optim_bytes(numel, 0)) == 0);
    optim_init(&o, &c, &be, numel, &a, w2);
    double norm = sqrt(optim_sum_squares(&be, g, numel));
    double clip = norm > c.clip ? c.clip / (norm + 1e-6) : 1.0;
    optim_step(&o, w2, g, 1.0);
    optim_adamw(&be, w, gr, rm, rv, numel, (float)optim_lr(&c, 0), (float)c.beta1, (float)c.beta2, (float)c.eps,
                (float)c.weight_decay, (float)clip, (float)(1 - c.beta1), (float)(1 - c.beta2));
    CHECK(memcmp(w, w2, (size_t)numel * 4) == 0 && memcmp(rm, o.m, (size_t)numel * 4) == 0);
    optim_free(&o);
    arena_free(&a);
    free(w), free(w2), free(g), free(gr), free(rm), free(rv);
}

// ------------------------------------------------------------------------------ singular values

// jacobi_eig: the eigenvalues of the symmetric s [n, n] (destroyed) into ev, by cyclic Jacobi rotations.
static void jacobi_eig(double *s, int n, double *ev) {
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) off += s[p * n + q] * s[p * n + q];
        if (off < 1e-24) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                if (fabs(s[p * n + q]) < 1e-300) continue;
                double th = (s[q * n + q] - s[p * n + p]) / (2 * s[p * n + q]);
                double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1)), co = 1 / sqrt(t * t + 1), si = t * co;
                for (int k = 0; k < n; k++) { // columns p, q
                    double a = s[k * n + p], b = s[k * n + q];
                    s[k * n + p] = co * a - si * b, s[k * n + q] = si * a + co * b;
                }
                for (int k = 0; k < n; k++) { // rows p, q
                    double a = s[p * n + k], b = s[q * n + k];
                    s[p * n + k] = co * a - si * b, s[q * n + k] = si * a + co * b;
                }
            }
    }
    for (int i = 0; i < n; i++) ev[i] = s[i * n + i];
}

// one_matrix_optim: an optimizer over one [R, C] weight w under c (c->muon set), its moments and
// Muon's scratch carved from a fresh arena *a.
static void one_matrix_optim(int R, int C, const optim_config *c, float *w, optim *o, arena *a) {
    drafter_param p[1];
    int np = 0;
    int64_t off = 0;
    drafter_param_push(p, &np, &off, "w.weight", 2, (int64_t[]){R, C}, 0, 0);
    CHECK(arena_init(a, "one matrix", &be, optim_bytes(off, 0) + optim_muon_bytes(p, 1)) == 0);
    optim_init(o, c, &be, off, a, w);
    optim_muon_init(o, p, 1, a);
}

static void test_singular_values(int R, int C) {
    optim_config c;
    optim_config_default(&c);
    c.muon = 1;
    arena a;
    float *w = xcalloc((size_t)R * C, 4);
    optim o;
    one_matrix_optim(R, C, &c, w, &o, &a);
    double ss = 0;
    for (int i = 0; i < R * C; i++) o.ns_x[i] = (float)test_rand_pm1(), ss += (double)o.ns_x[i] * o.ns_x[i];
    for (int i = 0; i < R * C; i++) o.ns_x[i] = (float)(o.ns_x[i] / sqrt(ss));
    const float *x = optim_muon_ns(&o, R, C);
    int r = R < C ? R : C;
    double *s = xcalloc((size_t)r * r, sizeof(double)), *ev = xcalloc((size_t)r, sizeof(double));
    for (int i = 0; i < r; i++) // O O^T (wide) or O^T O (tall): [r, r]
        for (int j = 0; j < r; j++) {
            double t = 0;
            for (int k = 0; k < (R < C ? C : R); k++)
                t += R <= C ? (double)x[i * C + k] * x[j * C + k] : (double)x[k * C + i] * x[k * C + j];
            s[i * r + j] = t;
        }
    jacobi_eig(s, r, ev);
    double lo = 1e9, hi = 0;
    for (int i = 0; i < r; i++) {
        double sv = sqrt(fmax(ev[i], 0));
        lo = fmin(lo, sv), hi = fmax(hi, sv);
    }
    printf("Newton-Schulz [%d, %d]: singular values in [%.4f, %.4f]\n", R, C, lo, hi);
    CHECK_MSG(lo >= 0.65 && hi <= 1.2, "[%d, %d]: singular values in [%g, %g], not within [0.65, 1.2]", R, C, lo, hi);
    free(s), free(ev), free(w);
    optim_free(&o);
    arena_free(&a);
}

// ------------------------------------------------------------------------------ against PyTorch

static void test_fixture(void) {
    st_file fx;
    if (safetensors_open(&fx, test_src_path("tests/reference/data/muon.safetensors"))) {
        CHECK_MSG(0, "%s", error_msg());
        return;
    }
    const st_entry *h = safetensors_find(&fx, "hyper");
    CHECK(h && h->dt == DT_F32 && h->nbytes == 3 * sizeof(float));
    if (!h) return;
    const float *hyper = h->data;
    int cases = 0;
    for (int i = 0;; i++) {
        char nm[5][16];
        snprintf(nm[0], 16, "w%d", i), snprintf(nm[1], 16, "g%d", i), snprintf(nm[2], 16, "m%d", i);
        snprintf(nm[3], 16, "w%d_out", i), snprintf(nm[4], 16, "m%d_out", i);
        const st_entry *e[5];
        for (int k = 0; k < 5; k++) e[k] = safetensors_find(&fx, nm[k]);
        if (!e[0]) break;
        int ok = 1;
        for (int k = 0; k < 5; k++)
            ok &= e[k] && e[k]->dt == DT_F32 && e[k]->ndim == 2 && e[k]->nbytes == e[0]->nbytes;
        CHECK_MSG(ok, "fixture case %d: tensors missing or mis-shaped", i);
        if (!ok) break;
        int R = (int)e[0]->shape[0], C = (int)e[0]->shape[1];
        optim_config c;
        optim_config_default(&c);
        c.muon = 1, c.weight_decay = hyper[1], c.muon_momentum = hyper[2];
        arena a;
        float *w = test_copy_floats(e[0]->data, (size_t)R * C), *m = test_copy_floats(e[2]->data, (size_t)R * C);
        optim o;
        one_matrix_optim(R, C, &c, w, &o, &a);
        optim_muon_update(&o, &o.mat[0], w, e[1]->data, m, hyper[0], 1.0f);
        const float *w_in = e[0]->data, *w_ref = e[3]->data;
        double *got = xcalloc((size_t)R * C, sizeof(double)), *ref = xcalloc((size_t)R * C, sizeof(double));
        for (int k = 0; k < R * C; k++) got[k] = (double)w[k] - w_in[k], ref[k] = (double)w_ref[k] - w_in[k];
        char op[64];
        snprintf(op, sizeof op, "torch Muon [%d, %d] update", R, C);
        test_report(op, rel_d(got, ref, (int64_t)R * C), TOL_UPDATE);
        snprintf(op, sizeof op, "torch Muon [%d, %d] momentum", R, C);
        test_report(op, test_rel_err(m, e[4]->data, (size_t)R * C), TOL_M);
        free(got), free(ref), free(w), free(m);
        optim_free(&o);
        arena_free(&a);
        cases++;
    }
    CHECK(cases == 4);
    safetensors_close(&fx);
}

int main(void) {
    if (backend_open(&be, "cpu", 0) != 0) {
        fprintf(stderr, "%s\n", error_msg());
        return 1;
    }
    test_rand_seed(777);
    make_params();
    test_takes();
    test_step();
    test_singular_values(24, 40);
    test_singular_values(40, 24);
    test_fixture();
    backend_close(&be);
    return test_finish("test_optim_muon");
}
