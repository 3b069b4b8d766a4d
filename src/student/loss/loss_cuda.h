// loss_cuda.h: the seam between loss.c (dispatch, workspace layout, CPU path) and loss_cuda.cu
// (the same algorithm on the GPU). A plain C header; loss_cuda.cu implements it with C linkage.
//
// Both backends carve the caller's workspace the same way (loss_work_carve, defined in loss.c), so
// loss_workspace_bytes needs no backend: the layout is the union of what either one uses. The
// per-row arithmetic after the vocabulary scan (LSE, CE, KL, CAP) and the weights of one anchor
// are the inline functions at the end, compiled for the host and, under nvcc, for the device, so
// both backends evaluate the very same formulas in double.
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
    double *p_tail;     // [rc] p_r, the teacher's tail mass (0 when I covers the vocabulary)
    double *cap_c;      // [rc] [g != y] q_g, the CAP coefficient
    float *topk_val;    // [rc, K] running student top-K logits (K = plan->topk_student)
    int32_t *topk_idx;  // [rc, K]
    float *dx_acc;      // [rc, H] f32: the dX accumulator of mode TILES on CUDA (dX there is bf16)
    float *tk_m, *tk_s; // [rc] CUDA: the LSE state ops_topk_lse_update keeps beside the top-K (unused)
} loss_work;

// loss_work_carve: the layout inside workspace (NULL: only count). Returns the bytes it needs.
size_t loss_work_carve(loss_work *w, void *workspace, const loss_plan *p, int64_t hidden, int64_t vocab, int k);

// loss_cuda_forward_backward: loss_forward_backward on the CUDA backend (bf16 x, lm_head and dx;
// fp32 logits and statistics). Called by loss.c after it has checked the arguments.
void loss_cuda_forward_backward(backend *be, const loss_config *cfg, const loss_plan *plan, void *workspace,
                                const loss_batch *b, loss_rows *rows, void *dx);

// ---------------------------------------------------------------------------- shared row math

#ifdef __CUDACC__
#define LOSS_HD __host__ __device__
#else
#define LOSS_HD
#endif

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

// loss_finish_row: after the last tile, the LSE, tail LSE and terms of row r (local row i) from its
// running statistics; writes the row's outputs and keeps what the gradient needs in w.
static inline LOSS_HD void loss_finish_row(const loss_config *cfg, const loss_batch *b, int K, int64_t r, int64_t i,
                                           loss_work *w, loss_rows *rows) {
    const int k = b->k;
    const int64_t V = b->vocab;
    const int32_t *t_idx = b->t_idx + r * k;
    const float *t_val = b->t_val + r * k;
    const float *st = w->s_top + i * k;
    int32_t y = loss_row_label(cfg, b, r);

    // LSE over all ids = the tail's sum rescaled to the overall max plus the top-k entries (a sum
    // of positive terms: nothing cancels)
    double m = w->run_max[i], tm = w->tail_max[i];
    double sum = tm == -INFINITY ? 0.0 : w->tail_sum[i] * exp(tm - m);
    int ids_ok = 1;
    for (int a = 0; a < k; a++) {
        if (loss_in_vocab(t_idx[a], V)) sum += exp((double)st[a] - m);
        else ids_ok = 0;
    }
    double lse = m + log(sum);
    // tail LSE: -inf when I covers the whole vocabulary (k = V)
    double tail_lse = tm == -INFINITY ? -INFINITY : tm + log(w->tail_sum[i]);

    double ce = loss_in_vocab(y, V) ? lse - w->s_lab[i] : 0.0;

    // KL over the top-k plus the tail bucket; 0 log 0 = 0. An empty tail carries no teacher mass
    // either: 1 - sum_I p_i is then rounding, not probability (and q_r = 0 would make it infinite).
    double t_lse = b->t_lse[r], sum_p = 0, kl = 0;
    for (int a = 0; a < k; a++) {
        if (!loss_in_vocab(t_idx[a], V)) continue;
        double lp = (double)t_val[a] - t_lse, p = exp(lp);
        sum_p += p;
        if (p > 0) kl += p * (lp - ((double)st[a] - lse));
    }
    double p_r = tail_lse == -INFINITY ? 0.0 : fmax(0.0, 1.0 - sum_p);
    if (p_r > 0) kl += p_r * (log(p_r) - (tail_lse - lse));
    // ids outside the vocabulary may only occur on rows with mask 0 (w = 0): no KL there
    if (!ids_ok) kl = 0, p_r = 0;

    // CAP with g held constant: [g != y] q_g
    int32_t g = w->run_arg[i];
    double cap = g >= 0 && g != y ? exp(m - lse) : 0.0;

    rows->ce[r] = (float)ce;
    rows->kl[r] = (float)kl;
    rows->cap[r] = (float)cap;
    rows->argmax[r] = g;
    for (int c = 0; c < K; c++) {
        rows->s_topk_idx[r * K + c] = w->topk_idx[i * K + c];
        rows->s_topk_logp[r * K + c] = (float)((double)w->topk_val[i * K + c] - lse);
    }
    w->lse[i] = lse;
    w->tail_lse[i] = tail_lse;
    w->p_tail[i] = p_r;
    w->cap_c[i] = cap;
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
        if (b->in_seq[r]) C *= 0.5 + 0.5 * exp(-(double)rows->ce[r]);
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
