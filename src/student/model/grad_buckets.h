// grad_buckets.h: the drafter's flat gradient cut into buckets, for an all-reduce among the
// students that overlaps the backward of an optimizer step's last micro-batch (SPEC §8).
//
// A bucket is a set of contiguous ranges of d->grad that become final together during that
// micro-batch's backward (student/model/step.c). Numbered in the order the backward finishes them, for L
// drafter layers:
//   b = 0 .. L-1     layer L-1-b's block parameters: input_layernorm, q_proj, o_proj, q_norm,
//                    post_attention_layernorm, gate/up/down_proj (and, with layer L-1, the final
//                    norm): final once the last chunk's backward has passed that layer;
//   b = L .. 2L-1    layer b-L's context parameters: k_proj, v_proj, k_norm (the context keys and
//                    values also feed them): final once context_backward has passed that layer;
//   b = 2L           fc and hidden_norm: final at the very end.
// A parameter's range runs from its offset to the next parameter's (its alignment padding, which is
// always zero, included), so the ranges of all buckets tile [0, numel) exactly once, and
// neighbouring parameters of one bucket make one range.
//
// NCCL collectives must be issued in the same order on every student, whichever hooks its step
// reached (a last micro-batch without anchors reaches none): grad_buckets_ready(b) issues every
// bucket up to b not issued yet, in order, and grad_buckets_finish the rest; so each step issues
// buckets 0, 1, ..., 2L exactly once, in that order, on every student.
#pragma once
#include <stdint.h>

#include "student/model/drafter.h"

typedef struct {
    int64_t offset, count; // elements of d->grad
} grad_range;

typedef struct {
    int n_buckets;
    int *first;          // [n_buckets + 1]: bucket b holds ranges[first[b] .. first[b + 1])
    grad_range *ranges;  // bucket by bucket, each bucket's in increasing offset
    int next;            // the first bucket not issued in this step
} grad_buckets;

// The bucket that becomes final at each point of the backward (step.c calls the hook with these).
static inline int grad_bucket_block(int n_layers, int l) { return n_layers - 1 - l; }
static inline int grad_bucket_context(int n_layers, int l) { return n_layers + l; }
static inline int grad_bucket_front(int n_layers) { return 2 * n_layers; }

// grad_buckets_plan: the buckets of d's parameters, each in the bucket its kind says
// (d->cfg.kind->grad_buckets; DFlash: fc, hidden_norm, 11 per layer, norm). -1 (error_set) when
// the layout is not the kind's, or two parameters overlap.
int grad_buckets_plan(grad_buckets *gb, const drafter *d);
void grad_buckets_free(grad_buckets *gb);

// issue(ctx, ranges, n): start the all-reduce of one bucket; 0 or -1 (error_set).
typedef int (*grad_issue_fn)(void *ctx, const grad_range *ranges, int n);
// grad_buckets_ready: bucket b is final: issue buckets next .. b (none when b < next). 0 or -1.
int grad_buckets_ready(grad_buckets *gb, int b, grad_issue_fn issue, void *ctx);
// grad_buckets_finish: issue the buckets not issued yet, then start over for the next step. 0 or -1.
int grad_buckets_finish(grad_buckets *gb, grad_issue_fn issue, void *ctx);
