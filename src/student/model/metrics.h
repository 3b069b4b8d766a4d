// metrics.h: acceptance-length metrics of one anchor's block (SPEC §6), host code.
//
// greedy[k] (k = 1..n) is the target's greedy token for slot k (the teacher's top-1 at position
// a+k-1); the block has n scorable slots (those inside the sequence).
//   chain: 1 + the number of leading slots whose student argmax equals greedy[k]
//   tree:  DDTree-style best-first draft tree from the per-slot top-K log-probs (the same candidates
//          at a depth for every parent, as a block drafter gives them): pop the best frontier node,
//          add it, push its next sibling and its first child, until `budget` nodes; the accepted
//          length is 1 + the depth of the deepest node on the path of greedy tokens.
#pragma once
#include <stdint.h>

// metrics_decode_walk: the teacher-forced decoding walk of SPEC §6 over one packed batch, the
// acceptance length that greedy speculative decoding would see. In every loss-masked region
// [r0, r1) of every sequence (a maximal run of loss_mask = 1: an assistant turn), the first anchor
// is r0 (the first generated token); from anchor p a drafting step accepts a = min(1 + m[p],
// r1 - 1 - p) tokens (m[p] = matches_at[p]: leading slots of the block at p whose argmax is the
// target's greedy token, plus the target's own token; capped at the region's end, as decoding
// stops there: the dflash package's acceptance with max_length at the region's end, step for step)
// and the next anchor is p + a; the walk ends when an anchor reaches the region's last token, so a
// region adds r1 - 1 - r0 tokens. matches_at is indexed by packed position and read
// only at the anchors the walk visits (all in [r0, r1 - 2]). Adds the tokens and the steps:
// tau_decode = tokens / steps.
void metrics_decode_walk(const uint8_t *loss_mask, const int32_t *cu_seqlens, int n_seq, const int32_t *matches_at,
                         int64_t *tokens, int64_t *steps);
// argmax[k], greedy[k] for k = 1..n (index 0 unused).
double metrics_tau_chain(const int32_t *argmax, const int32_t *greedy, int n);
// topk_idx/topk_logp: [n][K], row k-1 for slot k, candidates sorted by log-prob, descending.
double metrics_tau_tree(const int32_t *topk_idx, const float *topk_logp, int K, const int32_t *greedy, int n, int budget);
