// optim.c: AdamW, clipping, schedule and EMA (see optim.h). The CPU loops are the reference of the
// CUDA kernels in optim_cuda.cu.
#include "student/train/optim.h"

#include <math.h>
#include <string.h>

#ifdef DFLASH_HAVE_CUDA
#include "student/train/optim_cuda.h"
#endif

void optim_config_default(optim_config *c) {
    *c = (optim_config){.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0, .clip = 1.0,
                        .warmup_frac = 0.04, .total_steps = 1000, .ema_decay = 0};
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
    optim_adamw(o->be, master, grad, o->m, o->v, o->n, (float)lr, (float)c->beta1, (float)c->beta2, (float)c->eps,
                (float)c->weight_decay, (float)(scale * clip), (float)bc1, (float)bc2);
    if (o->ema) optim_ema_update(o->be, o->ema, master, o->n, (float)c->ema_decay);
    backend_memset_zero(o->be, grad, (size_t)o->n * sizeof(float));
    return norm;
}

double optim_sum_squares(backend *be, const float *g, int64_t n) {
#ifdef DFLASH_HAVE_CUDA
    if (be->kind == BACKEND_CUDA) return cuda_optim_sum_squares(be, g, n);
#endif
    double s = 0;
#pragma omp parallel for reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    return s;
}

void optim_adamw(backend *be, float *w, const float *g, float *m, float *v, int64_t n, float lr, float b1, float b2,
                 float eps, float wd, float gscale, float bc1, float bc2) {
#ifdef DFLASH_HAVE_CUDA
    if (be->kind == BACKEND_CUDA) {
        cuda_optim_adamw(be, w, g, m, v, n, lr, b1, b2, eps, wd, gscale, bc1, bc2);
        return;
    }
#endif
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        float mh = m[i] / bc1, vh = v[i] / bc2;
        w[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * w[i]); // decoupled weight decay
    }
}

void optim_ema_update(backend *be, float *ema, const float *w, int64_t n, float decay) {
#ifdef DFLASH_HAVE_CUDA
    if (be->kind == BACKEND_CUDA) {
        cuda_optim_ema_update(be, ema, w, n, decay);
        return;
    }
#endif
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) ema[i] = decay * ema[i] + (1 - decay) * w[i];
}
