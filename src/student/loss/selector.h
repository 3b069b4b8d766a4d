// selector.h: the DFlash2 candidate selector (SPEC §3.1; the dflash package's CandidateSelector), the
// CPU reference on host fp32 memory: per scored slot, the top-k candidates c of the drafter's logits
// are rescored
//     z = P x                         P: hidden_projection [r, H], x: the slot's final hidden [H]
//     s_c = u_c + <pred[prev] * z, succ[c]>     pred, succ: codebooks [V, r]; u_c: the candidate's
//                                     logit (or log-prob: a constant per row changes neither the
//                                     softmax over the candidates nor the argmax)
// Training (SPEC §3.1, ours): the k-way cross-entropy -log softmax(s)_y when the label y is among
// the candidates (else 0, counted as a miss), prev = the target's previous token (teacher forcing);
// its gradient reaches the codebook rows pred[prev] and succ[c] only, P, and x (through P and
// through the candidates' logits u_c = <lm_head[c], x>). Decoding: greedy left to right, prev =
// the slot before's chosen token (the anchor's token for slot 1).
#pragma once
#include <stdint.h>

typedef struct {
    int64_t vocab, hidden, rank; // V, H, r
    int k;                       // candidates per slot (selector_top_k)
    const float *pred, *succ;    // [V, r]
    const float *proj;           // [r, H]
} selector_weights;

typedef struct {                 // gradients, accumulated (+=); any may be NULL
    float *pred, *succ;          // [V, r]
    float *proj;                 // [r, H]
    float *x;                    // [H] the row's hidden
} selector_grads;

// selector_scores: s[k] of one slot with candidates cand[k] (their unary u[k]) after prev;
// z[r] scratch (left holding P x).
void selector_scores(const selector_weights *sw, const float *x, const int32_t *cand, const float *u, int32_t prev,
                     float *z, float *s);
// selector_row_loss: one slot's k-way CE with label y, its gradient times `scale` (the slot's weight
// times selector_weight) added to g (NULL: forward only); lm_head [V, H] for the unary part of the
// x gradient (NULL: none). *hit = 1 when y is a candidate; the loss is 0 and nothing is added when not.
// z[r], s[k] scratch (s left holding the scores gradient when g is set).
double selector_row_loss(const selector_weights *sw, const float *x, const int32_t *cand, const float *u, int32_t prev,
                         int32_t y, double scale, const float *lm_head, const selector_grads *g, float *z, float *s,
                         int *hit);
// selector_choose: the index (0..k-1) of the greedy choice among s[k] (the first maximum).
int selector_choose(const float *s, int k);
