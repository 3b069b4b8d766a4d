// loss.h: the drafter's loss over the full vocabulary, fused with the frozen lm_head (SPEC §4, §5).
//
// For each scored row r (one block slot k = 1..B-1 of one anchor) with student hidden x_r (after the
// final norm), student logits s = lm_head(x_r) over the whole vocabulary V, q = softmax(s) in fp32,
// label y_r, and the teacher's top-k ids/values and LSE at position a+k-1:
//   CE  = -log q_y                        (label: the data token, or the teacher's argmax t_idx[r][0])
//   KL  = sum_I p_i (log p_i - log q_i) + p_r (log p_r - log q_r),  p_i = exp(t_i - LSE_t),
//         p_r = max(0, 1 - sum_I p_i), q_r = sum_{j not in I} q_j computed in log space over the
//         non-top-k entries (never 1 - sum_I q_i), 0 log 0 = 0
//   CAP = [g != y] q_g with g = argmax_j s_j (held constant)
//   slot loss = (1 - alpha) CE + alpha KL + lambda CAP     (the row terms of loss_terms.h)
// and the gradient of sum_r w_r * slot_loss_r with respect to x (unnormalised: the caller divides by
// the step's total weight once, at the end). Logits exist only for one row chunk ([rows, V], mode
// ROWS: 2 GEMMs) or one vocabulary tile at a time ([rows, tile], mode TILES: two passes, 3 GEMMs).
//
// Weights: w_r = mask_r * exp(-(k-1)/gamma) (decay), or D-PACE (detached): within an anchor,
// qt_i = 0.5 + 0.5 exp(-CE_i), C_j = prod_{i<=j} qt_i, w_j = mask_j * sum_{m>=j} C_m, where i, m run
// over the anchor's slots inside its sequence (in_seq_r). Rows of one anchor are consecutive
// (slots = B - 1 rows each), so an anchor never straddles two row chunks.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"
#include "student/loss/loss_terms.h"

typedef enum { LOSS_MODE_ROWS = 0, LOSS_MODE_TILES = 1 } loss_mode;

typedef struct {
    loss_mode mode;
    int row_chunk;          // rows per chunk: a multiple of slots (whole anchors)
    int vocab_tile;         // tile width in mode TILES (mode ROWS: V)
    int topk_student;       // K: the student's top-K log-probs per row for the tree metric (0 = none)
} loss_plan;

// The rows of one call. Device pointers (host memory on the CPU backend).
typedef struct {
    int n;                  // rows = anchors * slots
    int slots;              // B - 1
    int64_t hidden, vocab;  // H, V
    int k;                  // teacher top-k
    const void *x;          // [n, H] act
    const void *lm_head;    // [V, H] act, frozen
    const int32_t *label;   // [n] data token tok[a+k]
    const float *mask;      // [n] 1 = scored (loss_mask[a+k] = 1 and a+k inside the sequence), else 0
    const uint8_t *in_seq;  // [n] 1 = a+k inside the anchor's sequence (D-PACE products run over these)
    const int32_t *t_idx;   // [n, k] teacher top-k ids at position a+k-1, logits descending
    const float *t_val;     // [n, k] their logits
    const float *t_lse;     // [n] teacher LSE
} loss_batch;

// Per-row results (device). term[t] the unweighted term t (loss_term_id < LOSS_ROW_TERMS); w the
// weight used.
typedef struct {
    float *w;                   // [n]
    float *term[LOSS_ROW_TERMS]; // [n] each
    int32_t *argmax;            // [n] student argmax
    int32_t *s_topk_idx;        // [n, K] student top-K ids (K = plan topk_student; may be NULL when K = 0)
    float *s_topk_logp;         // [n, K] their log-probabilities
} loss_rows;

// loss_workspace_bytes: device bytes loss_forward_backward needs for this plan.
size_t loss_workspace_bytes(const loss_plan *p, int64_t hidden, int64_t vocab, int k);
// loss_forward_backward: per-row terms into rows, dx [n, H] act = d(sum_r w_r slot_loss_r)/dx.
// dx NULL: forward only (the per-row terms; no dlogits and no second GEMM).
// workspace: loss_workspace_bytes(...) bytes of device memory.
void loss_forward_backward(backend *be, const loss_config *cfg, const loss_plan *plan, void *workspace,
                           const loss_batch *b, loss_rows *rows, void *dx);

// loss_kernels: the loss's op table (backend_ops.h), one instance per backend: loss_kernels_cpu
// (loss.c) and loss_kernels_cuda (loss_cuda.cu). forward_backward: loss_forward_backward after its
// argument checks (n > 0). selector_forward_backward: loss_selector.h's loss_selector_forward_backward
// after its shape checks (anchors > 0); its halves are loss_selector.c's loss_selector_cpu (below) and
// loss_selector_cuda.cu's loss_selector_cuda (loss_cuda.h).
struct selector_batch;
struct selector_out;
struct loss_selector_grads;
struct loss_kernels {
    void (*forward_backward)(backend *be, const loss_config *cfg, const loss_plan *plan, void *workspace,
                             const loss_batch *b, loss_rows *rows, void *dx);
    void (*selector_forward_backward)(backend *be, const struct selector_batch *b, double scale, void *workspace,
                                      const struct selector_out *out, const struct loss_selector_grads *g);
};

// loss_selector_cpu: the selector's CPU reference (loss_selector.c), loss_kernels_cpu's entry.
void loss_selector_cpu(backend *be, const struct selector_batch *b, double scale, void *workspace,
                       const struct selector_out *out, const struct loss_selector_grads *g);

// loss_naive_cpu: the same on the CPU with all [n, V] logits materialised at once (the usual
// PyTorch way). The reference in tests and the baseline of bench/loss.
void loss_naive_cpu(const loss_config *cfg, const loss_batch *b, int topk_student, loss_rows *rows, float *dx);
