// anchors.h: valid anchors of a packed batch and their sampling (SPEC §4).
#pragma once
#include <stdint.h>

// anchors_valid: positions p with loss_mask[p] = 1, loss_mask[p+1] = 1 and p+1 in p's sequence,
// ascending, into out (sized S); returns the count.
int anchors_valid(const uint8_t *loss_mask, const int32_t *cu_seqlens, int n_seq, int32_t *out);
// anchors_sample: up to max_anchors of the n valid ones, uniformly without replacement, with the
// Philox stream (seed, batch_id): the draw depends on the batch, not on which rank processes it,
// so runs with 1 or 2 students sample the same anchors. Written ascending into out; returns the count.
int anchors_sample(const int32_t *valid, int n, int max_anchors, uint64_t seed, uint64_t batch_id, int32_t *out);
