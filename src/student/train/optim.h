// optim.h: AdamW with global gradient-norm clipping, the learning-rate schedule, and an EMA of the
// weights (SPEC §6), over the drafter's flat fp32 buffers on the backend's device.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/arena.h"
#include "common/backend/backend.h"

typedef struct {
    double lr, beta1, beta2, eps, weight_decay, clip; // defaults: 6e-4, 0.9, 0.999, 1e-8, 0, 1.0
    double warmup_frac;       // of the steps (0.04)
    int64_t total_steps;
    double ema_decay;         // 0 = no EMA
} optim_config;

typedef struct {
    optim_config cfg;
    backend *be;
    int64_t n;                // elements
    float *m, *v;             // [n] moments, device
    float *ema;               // [n] device (NULL without EMA)
    int64_t step;             // updates done
    double loss_mean, norm_mean; // the divergence check's running means (train.c); 0 = none yet;
                                 // kept in checkpoints so a resumed run is judged against its history
} optim;

void optim_config_default(optim_config *c);
size_t optim_bytes(int64_t n, int ema);
// optim_init: moments (and EMA = a copy of the initial weights) carved from a; zeroed.
void optim_init(optim *o, const optim_config *c, backend *be, int64_t n, arena *a, const float *master);
// optim_lr: the learning rate at update `step` (0-based): linear warmup over warmup_frac of the
// steps, then cosine to 0 at total_steps.
double optim_lr(const optim_config *c, int64_t step);
// optim_step: grad holds the un-normalised sum over the step; it is scaled by 1/sum_w, clipped to
// the global norm `clip`, and applied. Returns the gradient norm before clipping. The grad buffer is
// zeroed for the next step. A non-finite norm (NaN or inf in the gradients) is returned without an
// update: the weights, the moments and the step count stay as they were.
double optim_step(optim *o, float *master, float *grad, double sum_w);

// The element-wise kernels (CPU here, CUDA in optim_cuda.cu).
double optim_sum_squares(backend *be, const float *g, int64_t n);
void optim_adamw(backend *be, float *w, const float *g, float *m, float *v, int64_t n, float lr, float b1, float b2,
                 float eps, float wd, float gscale, float bc1, float bc2);
void optim_ema_update(backend *be, float *ema, const float *w, int64_t n, float decay);
