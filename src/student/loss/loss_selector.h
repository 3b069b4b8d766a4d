// loss_selector.h: the slot loss's selector term (loss_terms.h, LOSS_TERM_SEL; SPEC §3.1): DFlash2's
// candidate selector (selector.h) over one chunk's scored rows, called by the step where the
// drafter has a selector, on either backend: the CPU reference row by row (loss_selector.c, calling
// selector.c), or the CUDA kernels (loss_selector_cuda.cu: act inputs, fp32 scores and gradients),
// the selector's entries of the loss's op table (loss.h, struct loss_kernels). What it computes, per anchor i of
// the chunk and slot j = 1..B-1 (row r = i*(B-1) + j-1; rows outside the sequence, in_seq 0, are
// skipped: loss 0, hit 0, choice -1):
//   training (rows with w_r > 0): the k-way CE of the row's label among its candidates, prev = the
//       label of the slot before (teacher forcing; the anchor's token for slot 1), into loss[r] and
//       hit[r]; with gradients, its gradient times scale * w_r added (+=) to the fp32 codebook and
//       projection gradients and to the rows' dx (act);
//   decoding (every row inside the sequence): the greedy choice, prev = the slot before's choice
//       (the anchor's token for slot 1), into choice[r] (the token id).
// All pointers are device memory (host memory on the CPU backend).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"

typedef struct selector_batch {
    int anchors, slots;          // C, B-1: R = C * slots rows, row r = i * slots + (j - 1)
    int64_t vocab, hidden, rank; // V, H, r
    int k;                       // candidates per row (selector_top_k)
    int ld_cand;                 // row stride of cand and u (>= k: the loss's student top-K)
    const void *x;               // [R, H] act: the rows' final hidden (after the norm)
    const int32_t *cand;         // [R, ld_cand] candidate ids (the first k are used)
    const float *u;              // [R, ld_cand] their unary term (the student's log-probs)
    const int32_t *label;        // [R] the rows' labels
    const float *w;              // [R] the rows' loss weights (training term where > 0)
    const uint8_t *in_seq;       // [R] 1 = the slot is inside the anchor's sequence
    const int32_t *first;        // anchor i's token at first[i * first_ld] (slot 1's prev)
    int first_ld;
    const void *pred, *succ;     // [V, r] act: predecessor / successor codebooks
    const void *proj;            // [r, H] act: hidden_projection
    const void *lm_head;         // [V, H] act, frozen: the unary term's gradient into x
} selector_batch;

typedef struct selector_out {     // per-row results, device
    float *loss;                 // [R] k-way CE (0: no training term or a miss)
    uint8_t *hit;                // [R] 1 = a training row whose label is among its candidates
    int32_t *choice;             // [R] the greedy choice's token (-1 outside the sequence)
} selector_out;

typedef struct loss_selector_grads { // gradients, accumulated (+=), device
    float *pred, *succ;          // [V, r] f32
    float *proj;                 // [r, H] f32
    void *dx;                    // [R, H] act
} loss_selector_grads;

// loss_selector_workspace_bytes: the device workspace of a chunk of up to R rows (either backend).
size_t loss_selector_workspace_bytes(int64_t R, int64_t rank, int k);
// loss_selector_forward_backward: the chunk's training term, hits and greedy choices into out; g
// NULL: forward only (no gradient). scale = the term's coefficient, loss.selector_weight (times w_r
// per row).
void loss_selector_forward_backward(backend *be, const selector_batch *b, double scale, void *workspace,
                                    const selector_out *out, const loss_selector_grads *g);
