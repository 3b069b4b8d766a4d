// optim.h: AdamW with global gradient-norm clipping, the learning-rate schedule, and an EMA of the
// weights (SPEC §6), over the drafter's flat fp32 buffers on the backend's device; or, with
// train.optimizer = muon, Muon on the drafter's 2-D weight matrices (optim_muon_takes) and AdamW on
// the rest (docs/student.md, Optimizers).
//
// Muon (Keller Jordan's, with Moonlight's scale so that train.lr serves both), per matrix W [R, C]
// with the clipped, scaled gradient g and its momentum m (kept in the moment buffer m; v unused there):
//   m = mu m + g;  u = g + mu m  (Nesterov);  X = u / (||u||_F + 1e-7)
//   5 times: A = X X^T, B = b A + c A A, X = a X + B X  with (a, b, c) = (3.4445, -4.7750, 2.0315),
//            X taken as [min(R,C), max(R,C)] (transposed when R > C)
//   W = W - lr wd W - lr * 0.2 sqrt(max(R, C)) * X
// fp32 throughout (the published code runs the iteration in bf16). torch.optim.Muon keeps its momentum
// as an average (m = mu m + (1 - mu) g, u = (1 - mu) g + mu m): (1 - mu) times ours, which the
// normalisation removes (up to the 1e-7); its "match_rms_adamw" scale is the 0.2 sqrt(max(R, C)) here.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/arena.h"
#include "common/backend/backend.h"
#include "common/backend/backend_ops.h"
#include "student/model/drafter.h"

typedef struct {
    double lr, beta1, beta2, eps, weight_decay, clip; // defaults: 6e-4, 0.9, 0.999, 1e-8, 0, 1.0
    double warmup_frac;       // of the steps (0.04)
    int64_t total_steps;
    double ema_decay;         // 0 = no EMA
    int muon;                 // 1: Muon on the matrices optim_muon_init names (train.optimizer = muon)
    double muon_momentum;     // mu (0.95)
} optim_config;

// optim_muon_mat: one matrix Muon updates: W [rows, cols] at offset (elements) in the flat buffers.
typedef struct {
    int64_t offset, rows, cols;
} optim_muon_mat;

typedef struct {
    optim_config cfg;
    backend *be;
    int64_t n;                // elements
    float *m, *v;             // [n] moments, device
    float *ema;               // [n] device (NULL without EMA)
    // Muon (optim_muon_init; n_mat 0 = AdamW on everything): the matrices, ascending by offset (host),
    // and the Newton-Schulz scratch on the device: x, y [max rows*cols], a, b [max min(rows,cols)^2],
    // ss (one double: the squared norm of u, kept on the device).
    int n_mat;
    optim_muon_mat *mat;
    float *ns_x, *ns_y, *ns_a, *ns_b;
    double *ns_ss;
    int64_t step;             // updates done
    double loss_mean, norm_mean; // the divergence check's running means (train.c); 0 = none yet;
                                 // kept in checkpoints so a resumed run is judged against its history
} optim;

void optim_config_default(optim_config *c);
size_t optim_bytes(int64_t n, int ema);
// optim_init: moments (and EMA = a copy of the initial weights) carved from a; zeroed.
void optim_init(optim *o, const optim_config *c, backend *be, int64_t n, arena *a, const float *master);
// optim_muon_takes: 1 when Muon updates parameter p: a 2-D matrix with both sides above 1 that is
// not a table indexed by token (DFlash2's candidate_selector codebooks, named "codebook"): the
// projections (q/k/v/o, gate/up/down, fc, DFlash2's kernel_projection and hidden_projection).
// Norms, DFlash2's conv base kernels [2, K, H] and the codebooks get AdamW (as in speculators,
// whose split is the same: embeddings, heads and codebooks are AdamW's).
int optim_muon_takes(const drafter_param *p);
// optim_muon_bytes: device bytes optim_muon_init carves for the Muon matrices among params (0 when none).
size_t optim_muon_bytes(const drafter_param *params, int n_params);
// optim_muon_plan_bytes: the same for the drafter config c describes (its kind's param_list): what the
// memory plan counts (plan_request.optim_scratch).
size_t optim_muon_plan_bytes(const drafter_config *c);
// optim_muon_init: after optim_init with c->muon: Muon takes the matrices among params (optim_muon_takes;
// params describe the flat buffers of n elements), its scratch carved from a. optim_free releases the list.
void optim_muon_init(optim *o, const drafter_param *params, int n_params, arena *a);
// optim_free: the host memory optim_muon_init took (the device buffers belong to the arena).
void optim_free(optim *o);
// optim_lr: the learning rate at update `step` (0-based): linear warmup over warmup_frac of the
// steps, then cosine to 0 at total_steps.
double optim_lr(const optim_config *c, int64_t step);
// optim_step: grad holds the un-normalised sum over the step; it is scaled by 1/sum_w, clipped to
// the global norm `clip`, and applied. Returns the gradient norm before clipping. The grad buffer is
// zeroed for the next step. A non-finite norm (NaN or inf in the gradients) is returned without an
// update: the weights, the moments and the step count stay as they were.
double optim_step(optim *o, float *master, float *grad, double sum_w);

// The element-wise kernels: these dispatchers call the backend's optim table (below).
double optim_sum_squares(backend *be, const float *g, int64_t n);
void optim_adamw(backend *be, float *w, const float *g, float *m, float *v, int64_t n, float lr, float b1, float b2,
                 float eps, float wd, float gscale, float bc1, float bc2);
void optim_ema_update(backend *be, float *ema, const float *w, int64_t n, float decay);
// optim_muon_update: the Muon step of one matrix W [rows, cols] (gradient g, momentum m; see above),
// o's scratch used; lr the schedule's learning rate, gscale the gradient's scale (1/sum_w * clip).
void optim_muon_update(optim *o, const optim_muon_mat *t, float *w, const float *g, float *m, float lr, float gscale);
// optim_muon_ns: the 5 Newton-Schulz iterations on o->ns_x, a normalised [rows, cols] matrix (the
// GEMMs take its transpose when rows > cols: A = X^T X [cols, cols], X = a X + X B^T, the same
// iteration on X^T without moving it); returns the buffer holding the result (ns_x or ns_y), same layout.
float *optim_muon_ns(optim *o, int64_t rows, int64_t cols);
// The Muon element-wise kernels:
// optim_muon_momentum: m = mu m + s g; x = s g + mu m (same layout as g); *ss = sum of x^2 (device).
void optim_muon_momentum(backend *be, float *x, float *m, const float *g, int64_t n, float gscale, float mu, double *ss);
// optim_muon_normalise: x *= 1 / (sqrt(*ss) + 1e-7).
void optim_muon_normalise(backend *be, float *x, int64_t n, const double *ss);
// optim_axpby: y = alpha x + beta y.
void optim_axpby(backend *be, float *y, const float *x, int64_t n, float alpha, float beta);
// optim_muon_apply: w = w (1 - lr wd) - lr_scaled o.
void optim_muon_apply(backend *be, float *w, const float *o, int64_t n, float decay, float lr_scaled);

// optim_kernels: the optimizer's op table (backend_ops.h), one instance per backend: optim_kernels_cpu
// (optim.c: the CPU loops, the reference) and optim_kernels_cuda (optim_cuda.cu). Each op is the
// dispatcher above of the same name, with the same arguments; sum_squares returns the sum in double.
struct optim_kernels {
    double (*sum_squares)(backend *be, const float *g, int64_t n);
    void (*adamw)(backend *be, float *w, const float *g, float *m, float *v, int64_t n, float lr, float b1, float b2,
                  float eps, float wd, float gscale, float bc1, float bc2);
    void (*ema_update)(backend *be, float *ema, const float *w, int64_t n, float decay);
    void (*muon_momentum)(backend *be, float *x, float *m, const float *g, int64_t n, float gscale, float mu,
                          double *ss);
    void (*muon_normalise)(backend *be, float *x, int64_t n, const double *ss);
    void (*axpby)(backend *be, float *y, const float *x, int64_t n, float alpha, float beta);
    void (*muon_apply)(backend *be, float *w, const float *o, int64_t n, float decay, float lr_scaled);
};

// OPTIM_OPS: the members above, once, in order; each backend fills its table from it in one
// line (OP_FILL, backend_ops.h).
#define OPTIM_OPS(X, p) X(p, sum_squares) X(p, adamw) X(p, ema_update) X(p, muon_momentum) \
    X(p, muon_normalise) X(p, axpby) X(p, muon_apply)
OPS_LISTED(struct optim_kernels, OPTIM_OPS, 0);
