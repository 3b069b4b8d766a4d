// ops_moe_cpu.c: the fp32 reference of the mixture-of-experts ops (see ops_moe.h), threaded with
// OpenMP, and the CPU backend's table of them (moe_kernels_cpu, with ops_moe_sigmoid_cpu.c's
// router). The routing is a per-token softmax and top-k, then a counting sort of the (token, choice)
// rows by expert; the grouped GEMM is one OpenBLAS sgemm per expert with rows. Every act buffer is
// float (the CPU's act dtype).
#include "common/moe/ops_moe_cpu.h"
#include "common/moe/ops_moe.h" // before cblas.h, whose complex.h makes I (ops_swiglu_packed's I) a macro

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/gemm_rows.h"
#include "common/core/check.h"
#include "common/kernels/vexp.h"

// as common/kernels/cpu_kernel.h: threads only past a few thousand elements
#define OPS_PAR_MIN 16384

// ----------------------------------------------------------------------------- routing

static size_t cpu_moe_route_work_bytes(const backend *be, int T, int E, int k) {
    (void)be;
    (void)T;
    (void)E;
    (void)k;
    return 0; // the CPU sorts in place (offsets double as the cursors)
}

// Per token: p = softmax(logits) in fp32 (max, exp(l - max), sum in expert order, divide, as torch),
// then the k largest p by insertion into a list kept sorted by (p descending, id ascending): an
// expert replaces a listed one only when its p is strictly larger, so among equal p the lower id
// (seen first) stays ahead. Then the stable counting sort: counts into offsets[e+1], the prefix sum,
// and rows placed in (token, choice) order, which inside one expert is token order (a token picks an
// expert at most once). offsets[e] serves as expert e's cursor while placing, then moves back.
static void cpu_moe_route(backend *be, const float *logits, int T, int E, int k, int renorm, int32_t *topk_idx,
                          float *topk_w, int32_t *offsets, int32_t *perm, int32_t *slot, void *work) {
    (void)be;
    (void)work;
#pragma omp parallel if ((int64_t)T * E >= OPS_PAR_MIN)
    {
        float *p = xmalloc((size_t)E * sizeof(float));
#pragma omp for
        for (int t = 0; t < T; t++) {
            const float *l = logits + (size_t)t * E;
            float m = l[0], s = 0.0f;
            for (int e = 1; e < E; e++) m = l[e] > m ? l[e] : m;
#pragma omp simd
            for (int e = 0; e < E; e++) p[e] = vexpf(l[e] - m);
            for (int e = 0; e < E; e++) s += p[e];
            for (int e = 0; e < E; e++) p[e] /= s;
            int32_t *idx = topk_idx + (size_t)t * k;
            float *w = topk_w + (size_t)t * k;
            int n = 0; // listed so far
            for (int e = 0; e < E; e++) {
                if (n == k && !(p[e] > w[k - 1])) continue;
                int i = n < k ? n++ : k - 1; // the slot freed at the end, then moved up past smaller p
                while (i > 0 && p[e] > w[i - 1]) {
                    w[i] = w[i - 1];
                    idx[i] = idx[i - 1];
                    i--;
                }
                w[i] = p[e];
                idx[i] = e;
            }
            if (renorm) {
                float sum = 0.0f;
                for (int j = 0; j < k; j++) sum += w[j];
                for (int j = 0; j < k; j++) w[j] /= sum;
            }
        }
        free(p);
    }
    cpu_moe_group(topk_idx, T, E, k, offsets, perm, slot);
}

// The stable counting sort of the R = T*k (token, choice) rows by expert (cpu_moe_route's second
// half, and ops_moe_sigmoid_route's).
void cpu_moe_group(const int32_t *topk_idx, int T, int E, int k, int32_t *offsets, int32_t *perm, int32_t *slot) {
    int R = T * k;
    memset(offsets, 0, (size_t)(E + 1) * sizeof(int32_t));
    for (int r = 0; r < R; r++) offsets[topk_idx[r] + 1]++;
    for (int e = 0; e < E; e++) offsets[e + 1] += offsets[e];
    for (int r = 0; r < R; r++) { // offsets[e] walks to the end of expert e's rows = offsets[e + 1]
        int pos = offsets[topk_idx[r]]++;
        perm[pos] = r / k;
        slot[r] = pos;
    }
    for (int e = E; e > 0; e--) offsets[e] = offsets[e - 1];
    offsets[0] = 0;
}

static void cpu_moe_gather(backend *be, void *xs_, const void *x_, const int32_t *perm, int R, int H) {
    (void)be;
    float *xs = xs_;
    const float *x = x_;
#pragma omp parallel for if ((int64_t)R * H >= OPS_PAR_MIN)
    for (int r = 0; r < R; r++) memcpy(xs + (size_t)r * H, x + (size_t)perm[r] * H, (size_t)H * sizeof(float));
}

// ----------------------------------------------------------------------------- grouped GEMM

// One sgemm per expert with rows: y[rows] = x[rows] @ W[e]^T. The experts are spread over OpenMP
// threads (dynamic: groups differ in size), each sgemm single-threaded inside the parallel region
// (OpenBLAS's OpenMP build runs a call made there on one thread). Measured on 2 cores for T = 512,
// k = 8, E = 64 / 128, H = 512..2048, I = 256..768 (both GEMMs of the block) against a serial loop
// of multithreaded sgemms: 1.7x to 12x faster at every size (E = 64, H = 1024, I = 512: 221 vs
// 1012 ms); the groups (32-64 rows) are too small for OpenBLAS to split well. (max_rows: unused.)
static void cpu_moe_gemm(backend *be, void *y_, const void *x_, const void *W_, const int32_t *offsets, int E, int R,
                         int N, int K, int max_rows) {
    (void)be;
    (void)max_rows;
    float *y = y_;
    const float *x = x_, *W = W_;
#pragma omp parallel for schedule(dynamic, 1) if ((int64_t)R * N * K >= OPS_PAR_MIN)
    for (int e = 0; e < E; e++) {
        int r0 = offsets[e], n = offsets[e + 1] - r0;
        if (n <= 0) continue;
        const float *xe = x + (size_t)r0 * K, *We = W + (size_t)e * N * K;
        float *ye = y + (size_t)r0 * N;
        if (!gemm_rows(n, N, K, 1.0f, xe, K, We, K, 0.0f, ye, N)) // a few rows: no packing (gemm_rows.h)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, N, K, 1.0f, xe, K, We, K, 0.0f, ye, N);
    }
}

// ----------------------------------------------------------------------------- elementwise

// n_i: I (complex.h, via cblas.h, defines I)
static void cpu_moe_swiglu_packed(backend *be, void *out_, const void *gu_, int R, int n_i) {
    (void)be;
    float *out = out_;
    const float *gu = gu_;
#pragma omp parallel for if ((int64_t)R * n_i >= OPS_PAR_MIN)
    for (int r = 0; r < R; r++) {
        const float *g = gu + (size_t)r * 2 * n_i, *u = g + n_i;
        float *o = out + (size_t)r * n_i;
#pragma omp simd
        for (int i = 0; i < n_i; i++) o[i] = g[i] / (1.0f + vexpf(-g[i])) * u[i];
    }
}

// Per token the k terms in ascending expert id: each step picks the choice with the smallest id
// above the last one taken (a token's k ids are distinct). The first term is stored, the others added.
static void cpu_moe_combine(backend *be, void *y_, const void *ys_, const int32_t *slot, const int32_t *topk_idx,
                            const float *topk_w, int T, int k, int H) {
    (void)be;
    float *y = y_;
    const float *ys = ys_;
#pragma omp parallel for if ((int64_t)T * k * H >= OPS_PAR_MIN)
    for (int t = 0; t < T; t++) {
        const int32_t *idx = topk_idx + (size_t)t * k;
        float *yt = y + (size_t)t * H;
        int last = -1;
        for (int step = 0; step < k; step++) {
            int jm = -1;
            for (int j = 0; j < k; j++)
                if (idx[j] > last && (jm < 0 || idx[j] < idx[jm])) jm = j;
            last = idx[jm];
            float w = topk_w[(size_t)t * k + jm];
            const float *row = ys + (size_t)slot[(size_t)t * k + jm] * H;
            if (step == 0) {
#pragma omp simd
                for (int h = 0; h < H; h++) yt[h] = w * row[h];
            } else {
#pragma omp simd
                for (int h = 0; h < H; h++) yt[h] += w * row[h];
            }
        }
    }
}

static void cpu_moe_sigmoid_gate_add(backend *be, void *y_, const void *s_, const void *g_, int T, int H) {
    (void)be;
    float *y = y_;
    const float *s = s_, *g = g_;
#pragma omp parallel for if ((int64_t)T * H >= OPS_PAR_MIN)
    for (int t = 0; t < T; t++) {
        float a = 1.0f / (1.0f + vexpf(-g[t]));
        float *yt = y + (size_t)t * H;
        const float *st = s + (size_t)t * H;
#pragma omp simd
        for (int h = 0; h < H; h++) yt[h] += a * st[h];
    }
}

const struct moe_kernels moe_kernels_cpu = {MOE_OPS(OP_FILL, cpu_moe_)};
