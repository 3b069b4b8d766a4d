// optim.c: AdamW, Muon, clipping, schedule and EMA (see optim.h): the dispatchers of the optimizer's
// op table and its CPU instance, optim_kernels_cpu, whose loops are the reference of the CUDA kernels
// in optim_cuda.cu; Muon's Newton-Schulz products are backend_gemm's (OpenBLAS sgemm on the CPU,
// cuBLAS fp32 on a GPU).
#include "student/train/optim.h"
#include "common/core/config.h"
#include "common/core/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend_ops.h"
#include "common/backend/profile.h"
#include "common/core/check.h"
#include "student/model/drafter_kind.h"

void optim_config_default(optim_config *c) {
    *c = (optim_config){.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0, .clip = 1.0,
                        .warmup_frac = 0.04, .total_steps = 1000, .ema_decay = 0, .muon = 0, .muon_momentum = 0.95};
}

// Muon's quintic Newton-Schulz coefficients and its normaliser's epsilon (Keller Jordan's).
#define MUON_A 3.4445f
#define MUON_B (-4.7750f)
#define MUON_C 2.0315f
#define MUON_STEPS 5

int optim_muon_takes(const drafter_param *p) {
    return p->ndim == 2 && p->shape[0] > 1 && p->shape[1] > 1 && !p->is_norm && !p->is_delta &&
           !strstr(p->name, "codebook");
}

// optim_muon_sizes: the largest rows*cols and min(rows, cols)^2 among the Muon matrices; their count.
static int optim_muon_sizes(const drafter_param *params, int n_params, int64_t *max_mn, int64_t *max_rr) {
    int n = 0;
    *max_mn = *max_rr = 0;
    for (int i = 0; i < n_params; i++) {
        const drafter_param *p = &params[i];
        if (!optim_muon_takes(p)) continue;
        int64_t r = p->shape[0] < p->shape[1] ? p->shape[0] : p->shape[1];
        if (p->numel > *max_mn) *max_mn = p->numel;
        if (r * r > *max_rr) *max_rr = r * r;
        n++;
    }
    return n;
}

// optim_muon_carve: the scratch of optim.h's layout from a (a dry arena counts it).
static void optim_muon_carve(optim *o, arena *a, int64_t max_mn, int64_t max_rr) {
    o->ns_x = arena_alloc(a, size_mul(max_mn, sizeof(float)));
    o->ns_y = arena_alloc(a, size_mul(max_mn, sizeof(float)));
    o->ns_a = arena_alloc(a, size_mul(max_rr, sizeof(float)));
    o->ns_b = arena_alloc(a, size_mul(max_rr, sizeof(float)));
    o->ns_ss = arena_alloc(a, sizeof(double));
}

size_t optim_muon_bytes(const drafter_param *params, int n_params) {
    int64_t max_mn, max_rr;
    if (!optim_muon_sizes(params, n_params, &max_mn, &max_rr)) return 0;
    arena a;
    arena_init_dry(&a, "Muon scratch (plan)");
    optim o;
    optim_muon_carve(&o, &a, max_mn, max_rr);
    return a.used;
}

size_t optim_muon_plan_bytes(const drafter_config *c) {
    int n = c->kind->param_list(c, NULL);
    drafter_param *list = xcalloc((size_t)n, sizeof *list);
    c->kind->param_list(c, list);
    size_t bytes = optim_muon_bytes(list, n);
    free(list);
    return bytes;
}

void optim_muon_init(optim *o, const drafter_param *params, int n_params, arena *a) {
    int64_t max_mn, max_rr;
    int n = optim_muon_sizes(params, n_params, &max_mn, &max_rr);
    if (!n) return;
    o->mat = xcalloc((size_t)n, sizeof *o->mat);
    for (int i = 0; i < n_params; i++)
        if (optim_muon_takes(&params[i]))
            o->mat[o->n_mat++] = (optim_muon_mat){params[i].offset, params[i].shape[0], params[i].shape[1]};
    for (int i = 0; i < n; i++) { // the AdamW spans between them need them in order (a kind's list is)
        int64_t end = o->mat[i].offset + o->mat[i].rows * o->mat[i].cols;
        if ((i > 0 && o->mat[i].offset < o->mat[i - 1].offset + o->mat[i - 1].rows * o->mat[i - 1].cols) || end > o->n)
            fatal("optim_muon_init: matrix %d (offset %lld) out of order or past the %lld elements", i,
                  (long long)o->mat[i].offset, (long long)o->n);
    }
    optim_muon_carve(o, a, max_mn, max_rr);
}

void optim_free(optim *o) {
    free(o->mat);
    o->mat = NULL;
    o->n_mat = 0;
}

size_t optim_bytes(int64_t n, int ema) {
    arena a;
    arena_init_dry(&a, "optimizer (plan)");
    arena_alloc(&a, (size_t)n * sizeof(float));
    arena_alloc(&a, (size_t)n * sizeof(float));
    if (ema) arena_alloc(&a, (size_t)n * sizeof(float));
    return a.used;
}

void optim_init(optim *o, const optim_config *c, backend *be, int64_t n, arena *a, const float *master) {
    memset(o, 0, sizeof *o);
    o->cfg = *c;
    o->be = be;
    o->n = n;
    o->m = arena_alloc(a, (size_t)n * sizeof(float));
    o->v = arena_alloc(a, (size_t)n * sizeof(float));
    backend_memset_zero(be, o->m, (size_t)n * sizeof(float));
    backend_memset_zero(be, o->v, (size_t)n * sizeof(float));
    if (c->ema_decay > 0) {
        o->ema = arena_alloc(a, (size_t)n * sizeof(float));
        optim_ema_update(be, o->ema, master, n, 0.0f); // ema = w
    }
}

double optim_lr(const optim_config *c, int64_t step) {
    int64_t warm = (int64_t)ceil(c->warmup_frac * (double)c->total_steps);
    if (step < warm) return c->lr * (double)(step + 1) / (double)warm;
    int64_t rest = c->total_steps - warm;
    if (rest <= 0) return c->lr;
    double t = (double)(step - warm) / (double)rest;
    if (t > 1) t = 1;
    return c->lr * 0.5 * (1.0 + cos(M_PI * t));
}

double optim_step(optim *o, float *master, float *grad, double sum_w) {
    const optim_config *c = &o->cfg;
    double scale = sum_w > 0 ? 1.0 / sum_w : 0.0;
    double norm = sqrt(optim_sum_squares(o->be, grad, o->n)) * scale;
    if (!isfinite(norm)) { // NaN or inf somewhere: no update, the weights stay as they were
        backend_memset_zero(o->be, grad, (size_t)o->n * sizeof(float));
        return norm;
    }
    double clip = c->clip > 0 && norm > c->clip ? c->clip / (norm + 1e-6) : 1.0;
    double lr = optim_lr(c, o->step);
    o->step++;
    double bc1 = 1.0 - pow(c->beta1, (double)o->step), bc2 = 1.0 - pow(c->beta2, (double)o->step);
    // AdamW on everything but the Muon matrices (all of it without Muon), then Muon on each of them
    int64_t from = 0;
    for (int i = 0; i <= o->n_mat; i++) {
        int64_t to = i < o->n_mat ? o->mat[i].offset : o->n;
        if (to > from)
            optim_adamw(o->be, master + from, grad + from, o->m + from, o->v + from, to - from, (float)lr,
                        (float)c->beta1, (float)c->beta2, (float)c->eps, (float)c->weight_decay,
                        (float)(scale * clip), (float)bc1, (float)bc2);
        if (i == o->n_mat) break;
        const optim_muon_mat *t = &o->mat[i];
        optim_muon_update(o, t, master + t->offset, grad + t->offset, o->m + t->offset, (float)lr, (float)(scale * clip));
        from = t->offset + t->rows * t->cols;
    }
    if (o->ema) optim_ema_update(o->be, o->ema, master, o->n, (float)c->ema_decay);
    backend_memset_zero(o->be, grad, (size_t)o->n * sizeof(float));
    return norm;
}

// ---------------------------------------------------------------------------------------------- Muon

float *optim_muon_ns(optim *o, int64_t rows, int64_t cols) {
    backend *be = o->be;
    const int tall = rows > cols;
    const int R = (int)rows, C = (int)cols, r = tall ? C : R; // r: the side of A and B
    float *x = o->ns_x, *y = o->ns_y;
    for (int s = 0; s < MUON_STEPS; s++) {
        if (tall) // A = X^T X
            backend_gemm(be, 1, 0, r, r, R, 1.0f, x, C, x, C, 0.0f, o->ns_a, r, DT_F32, DT_F32);
        else      // A = X X^T
            backend_gemm(be, 0, 1, r, r, C, 1.0f, x, C, x, C, 0.0f, o->ns_a, r, DT_F32, DT_F32);
        // B = c A A + b A
        backend_gemm(be, 0, 0, r, r, r, MUON_C, o->ns_a, r, o->ns_a, r, 0.0f, o->ns_b, r, DT_F32, DT_F32);
        optim_axpby(be, o->ns_b, o->ns_a, (int64_t)r * r, MUON_B, 1.0f);
        if (tall) // Y = X B^T ((B X^T)^T)
            backend_gemm(be, 0, 1, R, C, C, 1.0f, x, C, o->ns_b, r, 0.0f, y, C, DT_F32, DT_F32);
        else      // Y = B X
            backend_gemm(be, 0, 0, R, C, R, 1.0f, o->ns_b, r, x, C, 0.0f, y, C, DT_F32, DT_F32);
        optim_axpby(be, y, x, rows * cols, MUON_A, 1.0f); // Y += a X
        float *t = x;
        x = y, y = t;
    }
    return x;
}

void optim_muon_update(optim *o, const optim_muon_mat *t, float *w, const float *g, float *m, float lr, float gscale) {
    const optim_config *c = &o->cfg;
    int64_t n = t->rows * t->cols;
    optim_muon_momentum(o->be, o->ns_x, m, g, n, gscale, (float)c->muon_momentum, o->ns_ss);
    optim_muon_normalise(o->be, o->ns_x, n, o->ns_ss);
    const float *out = optim_muon_ns(o, t->rows, t->cols);
    double side = (double)(t->rows > t->cols ? t->rows : t->cols);
    optim_muon_apply(o->be, w, out, n, (float)(1.0 - (double)lr * c->weight_decay), (float)((double)lr * 0.2 * sqrt(side)));
}

// ---------------------------------------------------------------------------------------------- dispatch

double optim_sum_squares(backend *be, const float *g, int64_t n) { return BACKEND_TABLE(be, optim)->sum_squares(be, g, n); }

void optim_adamw(backend *be, float *w, const float *g, float *m, float *v, int64_t n, float lr, float b1, float b2,
                 float eps, float wd, float gscale, float bc1, float bc2) {
    BACKEND_OP(be, optim, adamw, w, g, m, v, n, lr, b1, b2, eps, wd, gscale, bc1, bc2);
}

void optim_ema_update(backend *be, float *ema, const float *w, int64_t n, float decay) {
    BACKEND_OP(be, optim, ema_update, ema, w, n, decay);
}

void optim_muon_momentum(backend *be, float *x, float *m, const float *g, int64_t n, float gscale, float mu, double *ss) {
    BACKEND_OP(be, optim, muon_momentum, x, m, g, n, gscale, mu, ss);
}

void optim_muon_normalise(backend *be, float *x, int64_t n, const double *ss) {
    BACKEND_OP(be, optim, muon_normalise, x, n, ss);
}

void optim_axpby(backend *be, float *y, const float *x, int64_t n, float alpha, float beta) {
    BACKEND_OP(be, optim, axpby, y, x, n, alpha, beta);
}

void optim_muon_apply(backend *be, float *w, const float *o, int64_t n, float decay, float lr_scaled) {
    BACKEND_OP(be, optim, muon_apply, w, o, n, decay, lr_scaled);
}

// ---------------------------------------------------------------------------------------------- CPU

static double cpu_sum_squares(backend *be, const float *g, int64_t n) {
    (void)be;
    double s = 0;
#pragma omp parallel for reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    return s;
}

static void cpu_adamw(backend *be, float *w, const float *g, float *m, float *v, int64_t n, float lr, float b1, float b2,
                      float eps, float wd, float gscale, float bc1, float bc2) {
    (void)be;
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        float mh = m[i] / bc1, vh = v[i] / bc2;
        w[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * w[i]); // decoupled weight decay
    }
}

static void cpu_ema_update(backend *be, float *ema, const float *w, int64_t n, float decay) {
    (void)be;
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) ema[i] = decay * ema[i] + (1 - decay) * w[i];
}

static void cpu_muon_momentum(backend *be, float *x, float *m, const float *g, int64_t n, float gscale, float mu,
                              double *ss) {
    (void)be;
    double s = 0;
#pragma omp parallel for reduction(+ : s)
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        float mi = mu * m[i] + gi;
        m[i] = mi;
        x[i] = gi + mu * mi;
        s += (double)x[i] * x[i];
    }
    *ss = s;
}

static void cpu_muon_normalise(backend *be, float *x, int64_t n, const double *ss) {
    (void)be;
    float inv = (float)(1.0 / (sqrt(*ss) + 1e-7));
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

static void cpu_axpby(backend *be, float *y, const float *x, int64_t n, float alpha, float beta) {
    (void)be;
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) y[i] = alpha * x[i] + beta * y[i];
}

static void cpu_muon_apply(backend *be, float *w, const float *o, int64_t n, float decay, float lr_scaled) {
    (void)be;
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) w[i] = w[i] * decay - lr_scaled * o[i];
}

const struct optim_kernels optim_kernels_cpu = {OPTIM_OPS(OP_FILL, cpu_)};

static int optim_config_check(const config *c) {
    if (c->ema_decay >= 1)
        return error_set("train.ema = %g never moves the averaged weights from their start; a decay is below 1 (e.g. 0.999), "
                         "0 = no EMA", c->ema_decay);
    return 0;
}

// Settings: the keys of the optimizer and its schedule (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key optim_keys[] = {
    {"train.lr", CFG_FLOAT, CONFIG_F(lr), "0.0006", "peak learning rate (AdamW)", NULL, 0, 10},
    {"train.warmup_frac", CFG_FLOAT, CONFIG_F(warmup_frac), "0.04", "share of the steps with linear warmup, then cosine to 0", NULL, 0, 1},
    {"train.weight_decay", CFG_FLOAT, CONFIG_F(weight_decay), "0", "AdamW decoupled weight decay", NULL, 0, 10},
    {"train.grad_clip", CFG_FLOAT, CONFIG_F(grad_clip), "1", "global gradient-norm clip; 0 = none", NULL, 0, 1e9},
    {"train.optimizer", CFG_STRING, CONFIG_F(optimizer), "adamw", "adamw (every tensor), or muon: Muon (momentum, then Newton-Schulz orthogonalisation, scaled to AdamW's update size so train.lr serves both) on the drafter's 2-D projection matrices and AdamW on the rest (docs/student.md, Optimizers)", "adamw|muon", CONFIG_NOLIM},
    {"train.muon_momentum", CFG_FLOAT, CONFIG_F(muon_momentum), "0.95", "train.optimizer muon: the momentum of Muon's matrices (Nesterov)", NULL, 0, 0.999},
    {"train.ema", CFG_FLOAT, CONFIG_F(ema_decay), "0", "EMA decay of the weights (e.g. 0.999; below 1); 0 = no EMA", NULL, 0, 1},
};
const config_key_set optim_settings = CONFIG_KEY_SET(optim_keys, optim_config_check);
