// decode_sample.c: greedy / temperature / top-k / top-p token choice (see decode_sample.h).
#include "teacher/decode_sample.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    double p;
    int32_t id;
} cand;

// most probable first, then the lower id
static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

size_t decode_sample_scratch_bytes(int V) { return (size_t)(V > 0 ? V : 1) * sizeof(cand); }

static int32_t sample_argmax(const float *logits, int V) {
    int32_t best = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    return best;
}

int32_t decode_sample(const float *logits, int V, const decode_sampling *s, rng *r, void *scratch) {
    if (s->temperature <= 0.0f) return sample_argmax(logits, V);
    cand *c = scratch;
    double inv_t = 1.0 / (double)s->temperature, mx = -INFINITY, sum = 0.0;
    for (int v = 0; v < V; v++) {
        double z = (double)logits[v] * inv_t;
        if (z > mx) mx = z;
    }
    for (int v = 0; v < V; v++) {
        c[v].p = exp((double)logits[v] * inv_t - mx);
        c[v].id = v;
        sum += c[v].p;
    }
    qsort(c, (size_t)V, sizeof *c, cand_cmp);
    int n = V;
    if (s->top_k > 0 && s->top_k < n) n = s->top_k;
    if (n < V) { // top-k first: top-p is a share of the mass top-k kept (as transformers renormalises)
        sum = 0.0;
        for (int k = 0; k < n; k++) sum += c[k].p;
    }
    if (s->top_p > 0.0f && s->top_p < 1.0f) { // the smallest prefix whose share of the mass reaches top_p
        double acc = 0.0, want = (double)s->top_p * sum;
        int k = 0;
        while (k < n) {
            acc += c[k++].p;
            if (acc >= want) break;
        }
        n = k;
    }
    double kept = 0.0;
    for (int k = 0; k < n; k++) kept += c[k].p;
    double u = rng_uniform(r) * kept, acc = 0.0;
    for (int k = 0; k < n; k++) {
        acc += c[k].p;
        if (acc > u) return c[k].id;
    }
    return c[n - 1].id;
}
