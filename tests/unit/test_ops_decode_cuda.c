// test_ops_decode_cuda.c: the decoding ops (ops_decode.h) on CUDA against the CPU reference,
// element by element (skipped, exit 77, without a GPU; runs in the emulator build).
//
// As test_ops_cuda.c: both sides get the same inputs, rounded to bf16 first (the CPU gets those exact
// values as fp32), so only the precision of the computation differs. Per case one line
// `op  max_err  tol  ok|FAIL` (max_err = max |cuda - cpu| / max |cpu|) and the count of values off
// by more than tol * max |cpu|, which must be 0. Tolerances:
//   kv_append            0: bf16 values moved, not computed (every cache element compared, the ones
//                          not written too)
//   attention_decode     1e-2: the GPU computes in fp32 and rounds the output to bf16 once (<= 2^-8
//                          ~ 3.9e-3 relative to the element); the fp32 softmax and sums differ from
//                          the CPU's order by ~1e-6. A wrong head, position or sequence errs by O(1).
//   sample               0 wrong ids: the rule is integer arithmetic over the same masses; the only
//                          possible difference is exp's last bit between the CUDA and glibc
//                          libraries (one unit of 2^-40 in a mass: a different id with probability
//                          ~2^-40 per draw), and the emulator uses glibc on both sides.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/core/half.h"
#include "common/decode/ops_decode.h"
#include "testing.h"
#include "testing_device.h"

#define TOL_BF16 1e-2

static backend cpu, gpu;

static void report_count(const char *op, size_t bad, size_t n) {
    printf("%-60s %zu of %zu values off\n", op, bad, n);
    CHECK_MSG(bad == 0, "%s: %zu values off", op, bad);
}

// n sequences of a cache of max_len positions, pos[s] the new token's position; the step's keys and
// values appended, then the query attends to 0..pos[s]
static void decode_case(int n, int nq, int nkv, int hd, int max_len, const int *pos) {
    int kvd = nkv * hd;
    size_t nc = (size_t)n * max_len * kvd, nqv = (size_t)n * nq * hd, nkvn = (size_t)n * kvd;
    float *kc = test_rand_bf16(nc, 2), *vc = test_rand_bf16(nc, 2), *k = test_rand_bf16(nkvn, 2),
          *v = test_rand_bf16(nkvn, 2);
    float *q = test_rand_bf16(nqv, 1.5f), *ref = xmalloc(nqv * sizeof(float));
    void *d_kc = dev_up_bf16(&gpu, kc, nc), *d_vc = dev_up_bf16(&gpu, vc, nc), *d_k = dev_up_bf16(&gpu, k, nkvn),
         *d_v = dev_up_bf16(&gpu, v, nkvn), *d_q = dev_up_bf16(&gpu, q, nqv), *d_out = dev_alloc(&gpu, nqv * 2);
    void *d_pos = dev_up_raw(&gpu, pos, (size_t)n * sizeof(int32_t));
    float scale = 1.0f / sqrtf((float)hd);
    float *scores = xmalloc(ops_attention_decode_work_bytes(&cpu, n, nq, max_len));
    ops_kv_append(&cpu, kc, vc, k, v, pos, n, max_len, kvd);
    ops_attention_decode(&cpu, ref, q, kc, vc, pos, n, nq, nkv, hd, max_len, scale, scores);
    ops_kv_append(&gpu, d_kc, d_vc, d_k, d_v, d_pos, n, max_len, kvd);
    ops_attention_decode(&gpu, d_out, d_q, d_kc, d_vc, d_pos, n, nq, nkv, hd, max_len, scale, NULL);
    char name[128];
    snprintf(name, sizeof name, "kv_append n=%d kvd=%d max_len=%d", n, kvd, max_len);
    float *gk = dev_down_bf16(&gpu, d_kc, nc), *gv = dev_down_bf16(&gpu, d_vc, nc);
    size_t bad = 0;
    for (size_t i = 0; i < nc; i++) bad += gk[i] != kc[i] || gv[i] != vc[i];
    report_count(name, bad, 2 * nc);
    snprintf(name, sizeof name, "attention_decode n=%d nq=%d nkv=%d hd=%d pos0=%d", n, nq, nkv, hd, pos[0]);
    float *got = dev_down_bf16(&gpu, d_out, nqv);
    test_report(name, test_rel_err(got, ref, nqv), TOL_BF16);
    report_count(name, count_off(got, ref, nqv, TOL_BF16), nqv);
    free(gk);
    free(gv);
    free(got);
    void *bufs[] = {d_kc, d_vc, d_k, d_v, d_q, d_out, d_pos};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) backend_free(&gpu, bufs[i]);
    free(kc);
    free(vc);
    free(k);
    free(v);
    free(q);
    free(ref);
    free(scores);
}

static void test_attention_decode(void) {
    const int p1[] = {0, 5, 17, 63};
    decode_case(4, 8, 2, 64, 64, p1);        // GQA 4:1, a sequence at its first position, one at the last
    const int p2[] = {40, 1, 9};
    decode_case(3, 4, 1, 24, 41, p2);        // one kv head (multi-query); head_dim not a multiple of 32
    const int p3[] = {200};
    decode_case(1, 2, 2, 256, 300, p3);      // Qwen3.5's head_dim 256, no grouping
    const int p4[] = {3, 0};
    decode_case(2, 6, 3, 40, 7, p4);         // fewer positions than warps
    const int p5[] = {130, 7, 64};
    decode_case(3, 3, 1, 512, 131, p5);      // the largest head_dim the kernel takes
}

// ----------------------------------------------------------------------------- sampling

// n rows of V logits (row stride ld), every setting against the CPU rule with the same draws
static void sample_case(const char *what, const float *lg, int n, int V, int ld, float T, int top_k, float top_p,
                        const double *u) {
    int32_t *ref = xmalloc((size_t)n * sizeof(int32_t));
    void *cw = xmalloc(ops_sample_work_bytes(&cpu, n, V));
    ops_sample(&cpu, ref, lg, ld, n, V, T, top_k, top_p, u, cw);
    free(cw);
    void *d_lg = dev_up_raw(&gpu, lg, (size_t)n * ld * sizeof(float)),
         *d_u = dev_up_raw(&gpu, u, (size_t)n * sizeof(double));
    void *d_ids = dev_alloc(&gpu, (size_t)n * sizeof(int32_t)), *d_w = dev_alloc(&gpu, ops_sample_work_bytes(&gpu, n, V));
    ops_sample(&gpu, d_ids, d_lg, ld, n, V, T, top_k, top_p, d_u, d_w);
    int32_t *got = dev_down_raw(&gpu, d_ids, (size_t)n * sizeof(int32_t));
    size_t bad = 0;
    for (int s = 0; s < n; s++) bad += got[s] != ref[s];
    char name[160];
    snprintf(name, sizeof name, "sample %s V=%d T=%g top_k=%d top_p=%g", what, V, T, top_k, top_p);
    report_count(name, bad, (size_t)n);
    backend_free(&gpu, d_lg);
    backend_free(&gpu, d_u);
    backend_free(&gpu, d_ids);
    backend_free(&gpu, d_w);
    free(got);
    free(ref);
}

static void test_sample(void) {
    enum { N = 96 };
    // random logits with ties (values on a coarse grid), one NaN-free row layout with padding (ld > V)
    int V = 1000, ld = 1003;
    float *lg = xmalloc((size_t)N * ld * sizeof(float));
    double u[N];
    for (int s = 0; s < N; s++) {
        for (int v = 0; v < ld; v++) lg[(size_t)s * ld + v] = (float)floor(test_rand_uniform() * 64.0) / 8.0f - 4.0f;
        lg[(size_t)s * ld + 17] = -INFINITY; // a masked id: never drawn
        u[s] = s == 0 ? 0.0 : s == 1 ? 1.0 - 1e-16 : test_rand_uniform();
    }
    const struct {
        float T;
        int k;
        float p;
    } set[] = {{1.0f, 0, 1.0f}, {0.7f, 50, 0.9f}, {1.3f, 5, 1.0f}, {1.0f, 0, 0.5f}, {0.8f, 1, 1.0f},
               {1.0f, 0, 1e-6f}, {2.0f, 999, 0.95f}, {0.3f, 2000, 0.99f}};
    for (size_t i = 0; i < sizeof set / sizeof *set; i++) sample_case("ties", lg, N, V, ld, set[i].T, set[i].k, set[i].p, u);
    // one dominant id per row, the rest spread: the edge cases of the cut (mass near 2^40)
    for (int s = 0; s < N; s++)
        for (int v = 0; v < V; v++) lg[(size_t)s * V + v] = v == (s * 37) % V ? 12.0f : (float)(3.0 * test_rand_uniform());
    sample_case("peaked", lg, N, V, V, 1.0f, 0, 0.9f, u);
    sample_case("peaked", lg, N, V, V, 5.0f, 40, 0.6f, u);
    // a few ids, mostly equal logits: the order among equal logits is the id's
    for (int s = 0; s < N; s++)
        for (int v = 0; v < 7; v++) lg[(size_t)s * 7 + v] = v == s % 7 ? 1.0f : 0.5f;
    sample_case("equal", lg, N, 7, 7, 1.0f, 3, 1.0f, u);
    sample_case("equal", lg, N, 7, 7, 0.5f, 0, 0.7f, u);
    free(lg);
}

int main(void) {
    test_rand_seed(4242001);
    int rc = test_open_devices(&cpu, &gpu);
    if (rc) return rc;
    test_attention_decode();
    test_sample();
    backend_close(&gpu);
    backend_close(&cpu);
    return test_finish("test_ops_decode_cuda");
}
