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

// argmax[k], greedy[k] for k = 1..n (index 0 unused).
double metrics_tau_chain(const int32_t *argmax, const int32_t *greedy, int n);
// topk_idx/topk_logp: [n][K], row k-1 for slot k, candidates sorted by log-prob, descending.
double metrics_tau_tree(const int32_t *topk_idx, const float *topk_logp, int K, const int32_t *greedy, int n, int budget);
