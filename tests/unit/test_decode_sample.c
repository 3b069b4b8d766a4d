// test_decode_sample.c: the token choice of regenerate (src/teacher/decode_sample.c): greedy is the
// argmax (lowest id on ties, no draw); top_k = 1 and a tiny top_p reduce sampling to the argmax;
// top-k and top-p never pick outside their set; the empirical frequencies of 200000 draws match the
// renormalised probabilities (tolerance 5 standard errors of a frequency, sqrt(p(1-p)/n) <= 0.0012,
// so 0.006: a correct sampler fails by chance with probability ~1e-6 per check); the same stream
// gives the same draws.
#include <math.h>
#include <stdlib.h>

#include "common/core/rng.h"
#include "teacher/decode_sample.h"
#include "testing.h"

enum { V = 6, DRAWS = 200000 };

static void freq(const float *lg, const decode_sampling *s, double *f) {
    rng r;
    rng_init(&r, 9, 0, 1);
    void *scratch = malloc(decode_sample_scratch_bytes(V));
    for (int v = 0; v < V; v++) f[v] = 0;
    for (int i = 0; i < DRAWS; i++) f[decode_sample(lg, V, s, &r, scratch)] += 1.0 / DRAWS;
    free(scratch);
}

int main(void) {
    const float lg[V] = {1.0f, 2.5f, 0.5f, 2.5f, -1.0f, 2.0f}; // ids 1 and 3 tie for the top
    void *scratch = malloc(decode_sample_scratch_bytes(V));
    rng r, r0;
    rng_init(&r, 1, 0, 0);
    r0 = r;
    decode_sampling greedy = {0, 1, 0};
    CHECK(decode_sample(lg, V, &greedy, &r, scratch) == 1);
    CHECK(rng_u32(&r) == rng_u32(&r0)); // greedy draws nothing from the stream
    decode_sampling k1 = {1.0f, 1.0f, 1}, p_tiny = {1.0f, 1e-6f, 0};
    int only_top = 1;
    for (int i = 0; i < 100; i++)
        only_top &= decode_sample(lg, V, &k1, &r, scratch) == 1 && decode_sample(lg, V, &p_tiny, &r, scratch) == 1;
    CHECK(only_top);

    // temperature 0.7, no cut: p = softmax(lg / 0.7)
    double f[V], p[V], z = 0;
    decode_sampling t = {0.7f, 1.0f, 0};
    freq(lg, &t, f);
    for (int v = 0; v < V; v++) z += p[v] = exp(lg[v] / 0.7);
    int close = 1;
    for (int v = 0; v < V; v++) close &= fabs(f[v] - p[v] / z) < 0.006;
    CHECK_MSG(close, "temperature 0.7: frequencies off");
    // top_k = 3: ids 1, 3 (2.5) and 5 (2.0), renormalised
    decode_sampling tk = {1.0f, 1.0f, 3};
    freq(lg, &tk, f);
    z = exp(2.5) * 2 + exp(2.0);
    CHECK(f[0] == 0 && f[2] == 0 && f[4] == 0);
    CHECK(fabs(f[1] - exp(2.5) / z) < 0.006 && fabs(f[3] - exp(2.5) / z) < 0.006 && fabs(f[5] - exp(2.0) / z) < 0.006);
    // top_p = 0.5 at temperature 1: ids 1 and 3 together hold 2 e^2.5 / sum = 0.67 >= 0.5 (id 1 alone
    // 0.33 does not): the nucleus is {1, 3}, half each
    decode_sampling tp = {1.0f, 0.5f, 0};
    freq(lg, &tp, f);
    CHECK(fabs(f[1] - 0.5) < 0.006 && fabs(f[3] - 0.5) < 0.006 && f[1] + f[3] > 0.999999);
    // the same stream, the same draws
    rng a, b;
    rng_init(&a, 5, 7, 3);
    rng_init(&b, 5, 7, 3);
    int same = 1;
    for (int i = 0; i < 1000; i++) same &= decode_sample(lg, V, &t, &a, scratch) == decode_sample(lg, V, &t, &b, scratch);
    CHECK(same);
    free(scratch);
    return test_finish("test_decode_sample");
}
