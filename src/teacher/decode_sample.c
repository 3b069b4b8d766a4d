// decode_sample.c: greedy / temperature / top-k / top-p token choice (see decode_sample.h): the
// argmax, or one draw from the stream handed to ops_sample's CPU rule (cpu_sample_row), the rule the
// decoder's device sampling shares.
#include "teacher/decode_sample.h"

#include "common/decode/ops_decode_cpu.h"

size_t decode_sample_scratch_bytes(int V) { return cpu_sample_scratch_bytes(V); }

static int32_t sample_argmax(const float *logits, int V) {
    int32_t best = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    return best;
}

int32_t decode_sample(const float *logits, int V, const decode_sampling *s, rng *r, void *scratch) {
    if (s->temperature <= 0.0f) return sample_argmax(logits, V);
    return cpu_sample_row(logits, V, s->temperature, s->top_k, s->top_p, rng_uniform(r), scratch);
}
