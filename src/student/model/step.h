// step.h: one student step over a packed batch, processed in anchor chunks (SPEC §5).
//
//   context:  ctx = hidden_norm(fc(features)); per layer, the context keys/values
//             Kc = rope(k_norm(k_proj(ctx))), Vc = v_proj(ctx), computed once per batch
//   chunks:   for each chunk of C anchors: drafter forward of the C blocks, the fused loss on the
//             scored slots, the drafter backward; weight gradients and the context K/V gradients
//             (fp32) accumulate across chunks
//   end:      the context K/V gradients flow back through rope, k_norm, k_proj/v_proj into ctx, then
//             through hidden_norm and fc
// Nothing is recomputed, and the memory is that of one chunk whatever the number of anchors; the
// result equals the unchunked step up to summation order. Gradients are added to d->grad
// un-normalised (sum over scored slots of w * slot loss): the optimizer divides by the step's total
// weight once (step_stats.sum_w, summed over micro-batches and ranks).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/arena.h"
#include "student/model/drafter.h"
#include "student/loss/loss.h"

// One packed batch as it arrives from a teacher or a feature file (host memory).
typedef struct {
    int S, n_seq, k;
    const int32_t *tokens;     // [S]
    const uint8_t *loss_mask;  // [S]
    const int32_t *cu_seqlens; // [n_seq + 1]
    tensor features;           // [S, n_feat*H], F32 or BF16 (uint16 bits)
    const int32_t *topk_idx;   // [S, k] the target's top-k at each position
    const float *topk_val;     // [S, k]
    const float *lse;          // [S]
} student_batch;

typedef struct {
    int max_tokens;            // S: largest packed batch
    int max_seqs;              // sequences per batch
    int chunk_anchors;         // C: anchors per chunk
    int k;                     // teacher top-k
    loss_plan loss;            // row_chunk = C * (B - 1) in mode ROWS
} student_plan;

#define STEP_MAX_SLOTS 256
#define STEP_TREE_BUDGETS 3

// What one step measured (host). Sums, so micro-batches and ranks add up.
typedef struct step_stats {
    double sum_w;                                // the weights' sum over scored slots
    double sum_w_term[LOSS_TERMS];               // ... of w * each loss term (loss_terms.h)
    int64_t term_scored[LOSS_TERMS];             // a kind's term (loss_terms[t].always 0): the slots it scored,
    int64_t term_miss[LOSS_TERMS];               // ... those it missed (DFlash2's selector: label no candidate)
    int64_t anchors;
    int64_t slot_scored[STEP_MAX_SLOTS];         // slots k = 1..B-1 with mask 1
    int64_t slot_correct[STEP_MAX_SLOTS];        // ... whose argmax equals the label
    double tau_chain_sum;                        // sum over anchors of the chain acceptance length
    int64_t decode_tokens, decode_steps;         // the decode walk (metrics_decode_walk): tau_decode = tokens / steps
    double tau_tree_sum[STEP_TREE_BUDGETS];      // ... of the tree acceptance length at each budget
    int64_t ctx_tokens, block_tokens;
} step_stats;

extern const int step_tree_budgets[STEP_TREE_BUDGETS]; // node budgets of the tree metric

// Device buffers of a step, carved by student_work_carve (the planner carves the same dry).
typedef struct student_work student_work;
size_t student_work_bytes(const drafter *d, const student_plan *p);
// student_work_parts: the same, split into: 0 receive buffers (features on the device, positions),
// 1 context + its K/V + their gradients, 2 chunk activations and loss rows, 3 loss workspace.
#define STEP_WORK_PARTS 4
size_t student_work_parts(const drafter *d, const student_plan *p, size_t parts[STEP_WORK_PARTS]);
student_work *student_work_create(drafter *d, const student_plan *p, arena *a);
void student_work_destroy(student_work *w);
// student_work_features: the device buffer a step reads its batch's features from ([max_tokens,
// n_feat * hidden], the compute dtype); a batch whose features are this buffer is used in place
// (batch_source uploads the features of a payload that came over MPI into it).
void *student_work_features(student_work *w);

// step_grad_hook: gradient bucket b (student/model/grad_buckets.h) is final: every kernel that writes it
// in this step has been queued on the backend. 0, or -1 (error_set: the step fails with it).
typedef int (*step_grad_hook)(void *ctx, int bucket);
// student_work_set_grad_hook: the next student_step calls hook (NULL: none) once per bucket, in
// bucket order, as its last chunk's backward and the context backward finish each one: for the
// last micro-batch of an optimizer step, whose gradients the students all-reduce while the rest
// of the backward runs. The numbers the step computes are the same with or without a hook.
void student_work_set_grad_hook(student_work *w, step_grad_hook hook, void *ctx);

// student_step: gradients of the batch with the given anchors (packed indices, each with at least
// one scorable slot: seq_start <= a and a + 1 < seq_end) added to d->grad; stats added to *st.
// -1 with error_set on a batch or anchor that does not fit the plan.
int student_step(drafter *d, const loss_config *lc, const student_plan *p, student_work *w, const student_batch *b,
                 const int32_t *anchors, int n_anchors, step_stats *st);
// student_eval: the same forward and loss terms, forward only: no backward, d->grad untouched (an
// evaluation). matches (NULL: not wanted) gets, per anchor, its leading slots whose argmax is the
// target's greedy token (the chain acceptance less 1), for metrics_decode_walk.
int student_eval(drafter *d, const loss_config *lc, const student_plan *p, student_work *w, const student_batch *b,
                 const int32_t *anchors, int n_anchors, step_stats *st, int32_t *matches);
