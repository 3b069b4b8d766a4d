// loss_cuda.h: the seam between loss.c (dispatch, workspace layout, CPU path) and loss_cuda.cu
// (the same algorithm on the GPU, the loss table's CUDA instance loss_kernels_cuda). A plain C
// header; loss_cuda.cu and loss_selector_cuda.cu implement it with C linkage.
//
// Both backends carve the caller's workspace the same way (loss_work_carve, defined in loss.c), so
// loss_workspace_bytes needs no backend: the layout is the union of what either one uses. The
// per-row arithmetic after the vocabulary scan (the LSE, each row term's value and its share of the
// gradient: one case per term of loss_terms.h) and the weights of one anchor are the inline
// functions at the end, compiled for the host and, under nvcc, for the device, so both backends
// evaluate the very same formulas in double.
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "student/loss/loss.h"

// The per-chunk buffers of the fused loss, rc = plan->row_chunk rows, width = V (mode ROWS) or
// min(vocab_tile, V) (mode TILES). Per-row statistics are indexed by the row inside the chunk.
typedef struct {
    int64_t width;
    float *logits;      // [rc, width] f32: one chunk's logits (ROWS) or one vocabulary tile (TILES);
                        // dlogits are formed in place (CUDA: as bf16 packed at the start of each row)
    float *run_max;     // [rc] running max of all logits (= the logit at run_arg)
    int32_t *run_arg;   // [rc] running argmax, lowest id on ties
    float *tail_max;    // [rc] running max over the ids outside the teacher's top-k set I
    double *tail_sum;   // [rc] sum of exp(s_j - tail_max) over j outside I seen so far
    float *s_lab;       // [rc] student logit at the label
    float *s_top;       // [rc, k] student logits at the teacher's top-k ids
    double *lse;        // [rc] log-sum-exp of all logits
    double *tail_lse;   // [rc] log-sum-exp over j outside I (-inf when I covers the vocabulary)
    double *aux[LOSS_ROW_TERMS]; // [rc] per term that keeps one (loss_term_aux): the scalar its
                        // gradient needs (KL: p_r, the teacher's tail mass; CAP: [g != y] q_g)
    float *topk_val;    // [rc, K] running student top-K logits (K = plan->topk_student)
    int32_t *topk_idx;  // [rc, K]
    float *dx_acc;      // [rc, H] f32: the dX accumulator of mode TILES on CUDA (dX there is bf16)
    float *tk_m, *tk_s; // [rc] CUDA: the LSE state ops_topk_lse_update keeps beside the top-K (unused)
} loss_work;

// loss_work_carve: the layout inside workspace (NULL: only count). Returns the bytes it needs.
size_t loss_work_carve(loss_work *w, void *workspace, const loss_plan *p, int64_t hidden, int64_t vocab, int k);

// loss_selector_cuda: the selector's entry of loss_kernels_cuda (loss_selector_cuda.cu; loss.h's
// struct loss_kernels): bf16 activations and weights, fp32 scores, softmax and gradients; runs on
// the backend's stream without synchronising.
void loss_selector_cuda(backend *be, const struct selector_batch *b, double scale, void *workspace,
                        const struct selector_out *out, const struct loss_selector_grads *g);

// ---------------------------------------------------------------------------- shared row math

static inline LOSS_HD int loss_in_vocab(int64_t id, int64_t V) { return id >= 0 && id < V; }

// loss_row_label: the row's CE label, the data token or the teacher's argmax.
static inline LOSS_HD int32_t loss_row_label(const loss_config *cfg, const loss_batch *b, int64_t r) {
    if (cfg->label_teacher) return b->k > 0 ? b->t_idx[r * b->k] : -1;
    return b->label[r];
}

// loss_decay_weight: exp(-(k-1)/gamma) of slot k (1..B-1).
static inline LOSS_HD double loss_decay_weight(const loss_config *cfg, int k) {
    return exp(-(double)(k - 1) / cfg->gamma);
}

// ---------------------------------------------------------------------------- the row terms
// Each term of the fused loss (loss_term_id < LOSS_ROW_TERMS) is one case in each of the three
// functions below, which both backends run: its value from the row's statistics after the scan
// (loss_term_row), whether it keeps a scalar for its gradient (loss_term_aux), and its share of the
// gradient with respect to the row's logits (loss_term_grad). The scan, the tiles and the kernels
// read only the sums these produce.

// What the terms of row r (local row i of the chunk) read after its last tile.
typedef struct {
    int64_t r, i;
    int32_t y, g;           // the label, the student's argmax
    double m, lse, tail_lse; // the largest logit, the LSE over all ids and over the ids outside I
} loss_row_stats;

// loss_term_aux: 1 when term t keeps one scalar per row for its gradient (loss_work.aux[t]).
static inline LOSS_HD int loss_term_aux(int t) { return t == LOSS_TERM_KL || t == LOSS_TERM_CAP; }

// loss_term_row: the unweighted value of term t on the row; *aux the scalar it keeps (if any).
static inline LOSS_HD double loss_term_row(int t, const loss_config *cfg, const loss_batch *b, const loss_work *w,
                                           const loss_row_stats *s, double *aux) {
    const int k = b->k;
    const int64_t V = b->vocab;
    switch (t) {
    case LOSS_TERM_CE: // -log q_y
        return loss_in_vocab(s->y, V) ? s->lse - w->s_lab[s->i] : 0.0;
    case LOSS_TERM_KL: { // over the top-k plus the tail bucket; 0 log 0 = 0
        // An empty tail carries no teacher mass either: 1 - sum_I p_i is then rounding, not
        // probability (and q_r = 0 would make it infinite).
        const int32_t *t_idx = b->t_idx + s->r * k;
        const float *t_val = b->t_val + s->r * k;
        const float *st = w->s_top + s->i * k;
        double t_lse = b->t_lse[s->r], sum_p = 0, kl = 0;
        int ids_ok = 1;
        for (int a = 0; a < k; a++) {
            if (!loss_in_vocab(t_idx[a], V)) {
                ids_ok = 0;
                continue;
            }
            double lp = (double)t_val[a] - t_lse, p = exp(lp);
            sum_p += p;
            if (p > 0) kl += p * (lp - ((double)st[a] - s->lse));
        }
        double p_r = s->tail_lse == -INFINITY ? 0.0 : fmax(0.0, 1.0 - sum_p);
        if (p_r > 0) kl += p_r * (log(p_r) - (s->tail_lse - s->lse));
        // ids outside the vocabulary may only occur on rows with mask 0 (w = 0): no KL there
        if (!ids_ok) kl = 0, p_r = 0;
        *aux = p_r;
        return kl;
    }
    case LOSS_TERM_CAP: { // [g != y] q_g, g held constant
        double cap = s->g >= 0 && s->g != s->y ? exp(s->m - s->lse) : 0.0;
        *aux = cap;
        return cap;
    }
    }
    return 0.0;
}

// The gradient of w_r * slot_loss_r with respect to the row's logits s_j, in the form every row
// term fits (q = softmax(s), I the teacher's top-k, p its probabilities, p_r and q_r the tails):
//   d_j = (w_r a) q_j + label [j = y] + argmax [j = g] - topk p_j [j in I] - tail q_j / q_r [j not in I]
// (argmax applies only when at_argmax). The tiles form it without ever dividing by q_r.
typedef struct {
    double a, topk, tail, label, argmax;
    int at_argmax;
} loss_row_grad;

// loss_term_grad: adds term t's share (its coefficient in the slot loss included) for a row of
// weight wr whose kept scalar is aux.
static inline LOSS_HD void loss_term_grad(int t, const loss_config *cfg, double wr, double aux, loss_row_grad *g) {
    const double coef = loss_term_coef(t, cfg);
    switch (t) {
    case LOSS_TERM_CE: // q_j - [j = y]
        g->a += coef;
        g->label -= wr * coef;
        break;
    case LOSS_TERM_KL: // q_j - p_j on I, q_j (1 - p_r / q_r) outside
        g->a += coef;
        g->topk += wr * coef;
        g->tail += wr * coef * aux;
        break;
    case LOSS_TERM_CAP: // c ([j = g] - q_j), c = [g != y] q_g
        g->a += -(coef * aux);
        g->argmax += wr * coef * aux;
        g->at_argmax |= aux != 0;
        break;
    }
}

// loss_row_grad_make: the sum over the row terms for local row i of weight wr (wr != 0).
static inline LOSS_HD loss_row_grad loss_row_grad_make(const loss_config *cfg, const loss_work *w, int64_t i,
                                                       double wr) {
    loss_row_grad g = {-0.0, -0.0, -0.0, -0.0, -0.0, 0}; // -0: x + -0 = x for every x, signed zeros too
    for (int t = 0; t < LOSS_ROW_TERMS; t++) loss_term_grad(t, cfg, wr, loss_term_aux(t) ? w->aux[t][i] : 0.0, &g);
    return g;
}

// loss_finish_row: after the last tile, the LSE, tail LSE and terms of row r (local row i) from its
// running statistics; writes the row's outputs and keeps what the gradient needs in w.
static inline LOSS_HD void loss_finish_row(const loss_config *cfg, const loss_batch *b, int K, int64_t r, int64_t i,
                                           loss_work *w, loss_rows *rows) {
    const int k = b->k;
    const int64_t V = b->vocab;
    const int32_t *t_idx = b->t_idx + r * k;
    const float *st = w->s_top + i * k;

    // LSE over all ids = the tail's sum rescaled to the overall max plus the top-k entries (a sum
    // of positive terms: nothing cancels)
    double m = w->run_max[i], tm = w->tail_max[i];
    double sum = tm == -INFINITY ? 0.0 : w->tail_sum[i] * exp(tm - m);
    for (int a = 0; a < k; a++)
        if (loss_in_vocab(t_idx[a], V)) sum += exp((double)st[a] - m);
    loss_row_stats s = {r, i, loss_row_label(cfg, b, r), w->run_arg[i], m, m + log(sum),
                        // tail LSE: -inf when I covers the whole vocabulary (k = V)
                        tm == -INFINITY ? -INFINITY : tm + log(w->tail_sum[i])};
    for (int t = 0; t < LOSS_ROW_TERMS; t++) {
        double aux = 0;
        rows->term[t][r] = (float)loss_term_row(t, cfg, b, w, &s, &aux);
        if (loss_term_aux(t)) w->aux[t][i] = aux;
    }
    rows->argmax[r] = s.g;
    for (int c = 0; c < K; c++) {
        rows->s_topk_idx[r * K + c] = w->topk_idx[i * K + c];
        rows->s_topk_logp[r * K + c] = (float)((double)w->topk_val[i * K + c] - s.lse);
    }
    w->lse[i] = s.lse;
    w->tail_lse[i] = s.tail_lse;
}

// loss_anchor_weights: w of the slots rows a0 .. a0+slots-1 of one anchor, from the mask and, for
// D-PACE, the CE of the anchor's slots, held constant (no gradient flows through the weights).
static inline LOSS_HD void loss_anchor_weights(const loss_config *cfg, const loss_batch *b, int64_t a0,
                                               loss_rows *rows) {
    const int slots = b->slots;
    if (cfg->weighting == LOSS_WEIGHT_DECAY) {
        for (int j = 0; j < slots; j++) rows->w[a0 + j] = (float)(b->mask[a0 + j] * loss_decay_weight(cfg, j + 1));
        return;
    }
    // D-PACE: C_j = prod_{i<=j} qt_i and w_j = mask_j * sum_{m>=j} C_m, i and m over the slots
    // inside the sequence. C goes into w first, then a backward pass turns it into suffix sums.
    double C = 1;
    for (int64_t r = a0; r < a0 + slots; r++) {
        if (b->in_seq[r]) C *= 0.5 + 0.5 * exp(-(double)rows->term[LOSS_TERM_CE][r]);
        rows->w[r] = b->in_seq[r] ? (float)C : 0.0f;
    }
    double suffix = 0;
    for (int64_t r = a0 + slots - 1; r >= a0; r--) {
        suffix += rows->w[r];
        rows->w[r] = (float)(b->mask[r] * suffix);
    }
}

#ifdef __cplusplus
}
#endif
