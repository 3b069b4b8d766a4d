// ops_decode_cpu.c: CPU twins of the decoding ops (see ops_decode.h): the reference the CUDA
// kernels are tested against, and the CPU backend's table of them (decode_kernels_cpu).
#include "common/decode/ops_decode_cpu.h"

#include <stdlib.h>
#include <string.h>

#include "common/decode/ops_decode.h"
#include "common/kernels/attention_cpu.h"
#include "common/decode/sample_rule.h"

// Every act buffer is float (the CPU's act dtype).
static void cpu_kv_append(backend *be, void *k_cache_, void *v_cache_, const void *k_, const void *v_,
                          const int32_t *pos, int n, int max_len, int kvd) {
    (void)be;
    float *k_cache = k_cache_, *v_cache = v_cache_;
    const float *k = k_, *v = v_;
    for (int s = 0; s < n; s++) {
        size_t at = ((size_t)s * max_len + (size_t)pos[s]) * (size_t)kvd;
        memcpy(k_cache + at, k + (size_t)s * kvd, (size_t)kvd * sizeof(float));
        memcpy(v_cache + at, v + (size_t)s * kvd, (size_t)kvd * sizeof(float));
    }
}

// the work buffer of cpu_attention_decode: the scores [n*nq, max_len] f32
static size_t cpu_attention_decode_work_bytes(const backend *be, int n, int nq, int max_len) {
    (void)be;
    return (size_t)n * (size_t)nq * (size_t)max_len * sizeof(float);
}

// Threads only when there is enough work to pay for them (a tiny model's step is microseconds, and
// a parallel region on a busy machine can cost milliseconds).
// With a window, row s's keys are positions j0 .. pos[s], j0 = max(0, pos[s] - window + 1).
static void cpu_attention_decode(backend *be, void *out_, const void *q_, const void *k_cache_, const void *v_cache_,
                                 const int32_t *pos, int n, int nq, int nkv, int hd, int max_len, float scale,
                                 int window, const float *sinks, void *scores_) {
    (void)be;
    float *out = out_, *scores = scores_;
    const float *q = q_, *k_cache = k_cache_, *v_cache = v_cache_;
    int group = nq / nkv, kvd = nkv * hd;
    int64_t work = (int64_t)n * nq * hd * (n ? pos[0] + 1 : 0);
#pragma omp parallel for collapse(2) schedule(dynamic, 2) if (work >= 65536)
    for (int s = 0; s < n; s++) {
        for (int kh = 0; kh < nkv; kh++) { // the group of query heads kh*group.. shares kv head kh
            int j0 = window > 0 && pos[s] - window + 1 > 0 ? pos[s] - window + 1 : 0;
            size_t row = (size_t)s * nq + (size_t)kh * group, ko = (size_t)kh * hd;
            size_t at = ((size_t)s * max_len + (size_t)j0) * kvd; // the first visible position
            cpu_attend_group(out + row * hd, q + row * hd, k_cache + at + ko, v_cache + at + ko, group,
                             pos[s] - j0 + 1, kvd, hd, scale, sinks ? sinks + (size_t)kh * group : NULL,
                             scores + row * max_len, max_len);
        }
    }
}

typedef struct {
    uint64_t key, mass;
} cand;

static int cand_cmp(const void *a, const void *b) { // order key descending
    uint64_t x = ((const cand *)a)->key, y = ((const cand *)b)->key;
    return x > y ? -1 : x < y;
}

size_t cpu_sample_scratch_bytes(int V) { return (size_t)(V > 0 ? V : 1) * sizeof(cand); }

// The rule by a sort: the ids in order, then prefix sums of the integer masses.
int32_t cpu_sample_row(const float *logits, int V, float temperature, int top_k, float top_p, double u, void *scratch) {
    cand *c = scratch;
    double inv_t = 1.0 / (double)temperature, mx = -INFINITY;
    for (int v = 0; v < V; v++) {
        double t = (double)logits[v] * inv_t;
        if (t > mx) mx = t;
    }
    for (int v = 0; v < V; v++) {
        c[v].key = sample_order_key(logits[v], v);
        c[v].mass = sample_mass((double)logits[v] * inv_t, mx);
    }
    qsort(c, (size_t)V, sizeof *c, cand_cmp);
    int n = top_k > 0 && top_k < V ? top_k : V;
    uint64_t K = 0;
    for (int i = 0; i < n; i++) K += c[i].mass;
    if (top_p > 0.0f && top_p < 1.0f) {
        uint64_t want = sample_top_p_want(top_p, K), acc = 0;
        int i = 0;
        while (i < n && acc < want) acc += c[i++].mass;
        n = i > 0 ? i : 1;
    }
    uint64_t kept = 0;
    for (int i = 0; i < n; i++) kept += c[i].mass;
    uint64_t U = sample_offset(u, kept), acc = 0;
    for (int i = 0; i < n; i++) {
        acc += c[i].mass;
        if (acc > U) return (int32_t)(0xFFFFFFFFu - (uint32_t)c[i].key);
    }
    return (int32_t)(0xFFFFFFFFu - (uint32_t)c[0].key); // no id has mass (NaN / inf logits): the first
}

static size_t cpu_sample_work_bytes(const backend *be, int n, int V) {
    (void)be;
    (void)n;
    return cpu_sample_scratch_bytes(V);
}

// u and ids are host memory (the CPU backend's device); the rows one after another (one scratch:
// a row's sort is the op's whole cost and V-sized).
static void cpu_sample(backend *be, int32_t *ids, const float *logits, int ld, int n, int V, float temperature,
                       int top_k, float top_p, const double *u, void *work) {
    (void)be;
    for (int s = 0; s < n; s++)
        ids[s] = cpu_sample_row(logits + (size_t)s * ld, V, temperature, top_k, top_p, u[s], work);
}

const struct decode_kernels decode_kernels_cpu = {DECODE_OPS(OP_FILL, cpu_)};
