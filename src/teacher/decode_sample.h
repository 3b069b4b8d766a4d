// decode_sample.h: choosing the next token from a row of logits: greedy, or sampled with
// temperature, top-k and top-p (nucleus), reproducibly from a caller-owned Philox stream.
//
// The rule, in transformers' order (its TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper):
//   temperature <= 0         greedy: the largest logit, lowest id among equal ones (no draw)
//   p = softmax(logits / T)  over the whole vocabulary, as integer masses (ops_sample in
//                            common/decode/ops_decode.h: floor(p / p_max * 2^40))
//   top_k > 0                keep the k most probable ids (ties at the edge: lower ids first)
//   0 < top_p < 1            keep the smallest prefix, most probable first, whose mass reaches
//                            top_p of what top-k kept (at least one id)
//   draw                     u = rng_uniform(r) (one per token), the id where the kept mass,
//                            most probable first (then lowest id), first exceeds u * kept mass
// The sampled case is ops_sample's CPU rule (cpu_sample_row), so the decoder's sampling on the device
// (target_decode.h) gives the same token for the same logits and draw. The draw depends only on the
// logits and the stream: a sample's tokens are the same whichever slot, batch or rank decodes it
// when its stream is seeded from (seed, sample index).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/core/rng.h"

typedef struct {
    float temperature; // <= 0: greedy
    float top_p;       // (0, 1]; >= 1: no nucleus cut
    int top_k;         // 0: no cut
} decode_sampling;

// decode_sample_scratch_bytes: the scratch decode_sample needs for a vocabulary of V ids.
size_t decode_sample_scratch_bytes(int V);
// decode_sample: the next token from logits[V] (f32, host). scratch: decode_sample_scratch_bytes(V)
// bytes (unused when greedy).
int32_t decode_sample(const float *logits, int V, const decode_sampling *s, rng *r, void *scratch);
