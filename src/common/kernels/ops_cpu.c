// ops_cpu.c: the fp32 reference implementation of the model ops (see ops.h), threaded with OpenMP.
// Plain loops, written to be read: each function is the formula in its header comment; the causal
// attention is tiles of OpenBLAS products (cpu_sgemm) with the mask as row ranges.
#include "common/kernels/ops_cpu.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/gemm_rows.h"
#include "common/core/check.h"
#include "common/kernels/vexp.h"

// Threads only pay off past a few thousand elements: below that, starting an OpenMP team costs
// more than the loop (and on a busy machine much more). Every parallel loop here uses this test.
#define OPS_PAR_MIN 16384

void cpu_embed(float *out, const float *table, const int32_t *ids, int T, int H) {
#pragma omp parallel for if ((int64_t)T * H >= OPS_PAR_MIN)
    for (int t = 0; t < T; t++) memcpy(out + (size_t)t * H, table + (size_t)ids[t] * H, (size_t)H * sizeof(float));
}

// The loops of a row (or span) are functions of their own, built for AVX-512 / AVX2 / the baseline
// (VEXP_CLONES): the bodies of OpenMP loops are outlined before GCC clones, so the clone must be a call.
VEXP_CLONES static void rmsnorm_row(float *y, const float *x, const float *w, int D, float eps) {
    double ss = 0; // double: the mean of squares over thousands of values
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < D; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / D + eps));
#pragma omp simd
    for (int i = 0; i < D; i++) y[i] = x[i] * inv * w[i];
}

void cpu_rmsnorm(float *out, const float *in, const float *w, int R, int D, float eps) {
#pragma omp parallel for if ((int64_t)R * D >= OPS_PAR_MIN)
    for (int r = 0; r < R; r++) rmsnorm_row(out + (size_t)r * D, in + (size_t)r * D, w, D, eps);
}

void cpu_rope(float *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd) {
    int half = hd / 2;
#pragma omp parallel for if ((int64_t)T * nh * hd >= OPS_PAR_MIN)
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            // the angle in float, as transformers forms it: (inv_freq @ position) in fp32
            float angle = (float)pos[t] * inv_freq[i];
            float c = cosf(angle), s = sinf(angle);
            for (int h = 0; h < nh; h++) {
                float *v = x + ((size_t)t * nh + h) * hd;
                float a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
    }
}

// p[n] (the scaled scores of one query) -> their exact fp32 softmax, in place, then o[hd] = p V over
// n consecutive value rows (row stride `stride` floats). sink: a logit that joins the denominator
// and nothing else (gpt-oss's attention sinks; -inf: none): the probabilities then sum to < 1.
VEXP_CLONES static void softmax_pv(float *o, float *p, const float *v, int n, int64_t stride, int hd, float sink) {
    float m = sink;
    for (int j = 0; j < n; j++) m = p[j] > m ? p[j] : m;
    float l = 0;
#pragma omp simd reduction(+ : l)
    for (int j = 0; j < n; j++) {
        p[j] = vexpf(p[j] - m);
        l += p[j];
    }
    if (sink != -INFINITY) l += vexpf(sink - m);
    for (int i = 0; i < hd; i++) o[i] = 0;
    for (int j = 0; j < n; j++) {
        const float *vv = v + (size_t)j * stride;
        float pj = p[j] / l;
#pragma omp simd
        for (int i = 0; i < hd; i++) o[i] += pj * vv[i];
    }
}

// p[j] = scale q . k_j for n consecutive key rows (row stride `stride` floats)
VEXP_CLONES static void scores_row(float *p, const float *q, const float *k, int n, int64_t stride, int hd,
                                   float scale) {
    for (int j = 0; j < n; j++) {
        const float *kv = k + (size_t)j * stride;
        float dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int i = 0; i < hd; i++) dot += q[i] * kv[i];
        p[j] = dot * scale;
    }
}

// One query row against n consecutive keys/values (row stride `stride` floats): an exact fp32
// softmax over the scaled scores, written to o[hd]. p[n] is the caller's scratch row. The KV-cached
// decode's attention (teacher/target_decode.c): one new query a step, where a GEMM would not pay.
void cpu_attend_row(float *o, const float *q, const float *k, const float *v, int n, int64_t stride, int hd,
                    float scale, float *p) {
    scores_row(p, q, k, n, stride, hd, scale);
    softmax_pv(o, p, v, n, stride, hd, -INFINITY);
}

// g query rows q[g, hd] sharing one key/value head (a GQA group): the scores of all g in one
// few-row product over the keys where they lie (gemm_rows.h; each key read once for the group,
// no reduction per key), then each row's softmax (with its sink, if any) and P V. p: g scratch rows
// of ldp floats. When gemm_rows declines (no AVX2), the scores row by row.
void cpu_attend_group(float *o, const float *q, const float *k, const float *v, int g, int n, int64_t stride, int hd,
                      float scale, const float *sinks, float *p, int ldp) {
    if (!gemm_rows(g, n, hd, scale, q, hd, k, (int)stride, 0.0f, p, ldp))
        for (int r = 0; r < g; r++) scores_row(p + (size_t)r * ldp, q + (size_t)r * hd, k, n, stride, hd, scale);
    for (int r = 0; r < g; r++)
        softmax_pv(o + (size_t)r * hd, p + (size_t)r * ldp, v, n, stride, hd, sinks ? sinks[r] : -INFINITY);
}

void cpu_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
               int ldb, float beta, float *c, int ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) { // nothing to sum
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                a, lda, b, ldb, beta, c, ldc);
}

VEXP_CLONES float cpu_softmax_range_sink(float *s, int n, int j0, int j1, float sink) {
    float m = sink, l = 0;
#pragma omp simd reduction(max : m)
    for (int j = j0; j < j1; j++) m = s[j] > m ? s[j] : m;
#pragma omp simd reduction(+ : l)
    for (int j = j0; j < j1; j++) {
        s[j] = vexpf(s[j] - m);
        l += s[j];
    }
    if (sink != -INFINITY) l += vexpf(sink - m);
    float inv = 1.0f / l;
    for (int j = 0; j < j0; j++) s[j] = 0;
#pragma omp simd
    for (int j = j0; j < j1; j++) s[j] *= inv;
    for (int j = j1; j < n; j++) s[j] = 0;
    return m + logf(l);
}

float cpu_softmax_range(float *s, int n, int j0, int j1) { return cpu_softmax_range_sink(s, n, j0, j1, -INFINITY); }

// The causal attention as GEMMs, per task = (sequence, kv head, tile of tq consecutive queries):
// the tile's rows are its queries' heads of that kv head's group (row (t - t0) * group + g), its
// columns the keys lo .. t1 - 1 of the sequence (lo: the sequence start, or with a window the first
// key the tile's first query sees). S = scale Q K^T (one GEMM), a softmax over each row's visible
// range [max(lo, t - window + 1), t] (the causal mask and the window as a range: the tile wastes at
// most tq - 1 columns a row on each side), with the row's head's sink in the denominator, O = P V
// (one GEMM), scattered back. Scratch per thread: rows x the longest sequence (tq shrinks for long
// sequences to keep it near ATTN_TILE_FLOATS), never [T, T].
#define ATTN_TILE_ROWS 128
#define ATTN_TILE_FLOATS (4 << 20)
void cpu_attention_causal(float *out, const float *q, const float *k, const float *v, const int32_t *cu_seqlens,
                          int n_seq, int T, int nq, int nkv, int hd, float scale, int window, const float *sinks) {
    int group = nq / nkv, longest = 0;
    for (int s = 0; s < n_seq; s++)
        if (cu_seqlens[s + 1] - cu_seqlens[s] > longest) longest = cu_seqlens[s + 1] - cu_seqlens[s];
    if (longest <= 0) return;
    int span = window > 0 && window < longest ? window : longest; // keys a query sees at most
    int tq = ATTN_TILE_ROWS / group > 1 ? ATTN_TILE_ROWS / group : 1;
    while (tq > 1 && (int64_t)tq * group * (tq - 1 + span < longest ? tq - 1 + span : longest) > ATTN_TILE_FLOATS)
        tq /= 2;
    int cols = tq - 1 + span < longest ? tq - 1 + span : longest; // key columns of a tile at most
    // task u: tiles of the sequences one after another, each for every kv head
    int64_t *first = xmalloc(((size_t)n_seq + 1) * sizeof(int64_t)); // first task of each sequence
    first[0] = 0;
    for (int s = 0; s < n_seq; s++)
        first[s + 1] = first[s] + (int64_t)(cu_seqlens[s + 1] - cu_seqlens[s] + tq - 1) / tq * nkv;
    int M = tq * group, ld = nkv * hd;
    (void)T;
#pragma omp parallel if (first[n_seq] > 1 && (int64_t)first[n_seq] * M * hd >= OPS_PAR_MIN)
    {
        float *S = xmalloc(((size_t)M * cols + 2 * (size_t)M * hd) * sizeof(float));
        float *Q = S + (size_t)M * cols, *O = Q + (size_t)M * hd;
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = 0; u < first[n_seq]; u++) {
            int s = 0, hi = n_seq - 1; // the sequence of task u: first[s] <= u < first[s + 1]
            while (s < hi) {
                int mid = (s + hi + 1) / 2;
                if (first[mid] <= u) s = mid;
                else hi = mid - 1;
            }
            int start = cu_seqlens[s], end = cu_seqlens[s + 1];
            int tile = (int)((u - first[s]) / nkv), kh = (int)((u - first[s]) % nkv);
            int t0 = start + tile * tq, t1 = t0 + tq < end ? t0 + tq : end, rows = (t1 - t0) * group;
            int lo = window > 0 && t0 - window + 1 > start ? t0 - window + 1 : start, n = t1 - lo;
            for (int t = t0; t < t1; t++)
                memcpy(Q + (size_t)(t - t0) * group * hd, q + ((size_t)t * nq + (size_t)kh * group) * hd,
                       (size_t)group * hd * sizeof(float));
            cpu_sgemm(0, 1, rows, n, hd, scale, Q, hd, k + ((size_t)lo * nkv + kh) * hd, ld, 0.0f, S, n);
            for (int r = 0; r < rows; r++) {
                int t = t0 + r / group, j0 = window > 0 && t - window + 1 > lo ? t - window + 1 : lo;
                float sink = sinks ? sinks[kh * group + r % group] : -INFINITY;
                cpu_softmax_range_sink(S + (size_t)r * n, n, j0 - lo, t - lo + 1, sink);
            }
            cpu_sgemm(0, 0, rows, hd, n, 1.0f, S, n, v + ((size_t)lo * nkv + kh) * hd, ld, 0.0f, O, hd);
            for (int t = t0; t < t1; t++)
                memcpy(out + ((size_t)t * nq + (size_t)kh * group) * hd, O + (size_t)(t - t0) * group * hd,
                       (size_t)group * hd * sizeof(float));
        }
        free(S);
    }
    free(first);
}

VEXP_CLONES static void swiglu_span(float *out, const float *gate, const float *up, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + vexpf(-g)) * up[i];
    }
}

void cpu_swiglu(float *out, const float *gate, const float *up, int64_t n) {
    const int64_t span = OPS_PAR_MIN / 4; // elements a call
#pragma omp parallel for if (n >= OPS_PAR_MIN)
    for (int64_t i0 = 0; i0 < n; i0 += span) swiglu_span(out + i0, gate + i0, up + i0, n - i0 < span ? n - i0 : span);
}

void cpu_add(float *x, const float *y, int64_t n) {
#pragma omp parallel for if (n >= OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

void cpu_copy_2d(float *dst, int64_t dst_ld, const float *src, int64_t src_ld, int64_t rows, int64_t cols) {
#pragma omp parallel for if (rows * cols >= OPS_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) memcpy(dst + r * dst_ld, src + r * src_ld, (size_t)cols * sizeof(float));
}

void cpu_topk_lse_init(float *val, int32_t *idx, float *m, float *s, int R, int k) {
    for (int64_t i = 0; i < (int64_t)R * k; i++) {
        val[i] = -INFINITY;
        idx[i] = -1;
    }
    for (int r = 0; r < R; r++) {
        m[r] = -INFINITY;
        s[r] = 0;
    }
}

// a before b in the top-k order: larger value, then smaller id
static int topk_before(float va, int32_t ia, float vb, int32_t ib) {
    return va > vb || (va == vb && ia >= 0 && (ib < 0 || ia < ib));
}

VEXP_CLONES static float row_max(const float *x, int n) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

// sum of exp(x[j] - m) over n values, in fp32
VEXP_CLONES static float exp_sum(const float *x, int n, float m) {
    float part = 0;
#pragma omp simd reduction(+ : part)
    for (int j = 0; j < n; j++) part += vexpf(x[j] - m);
    return part;
}

void cpu_topk_lse_update(const float *logits, int ld, int v0, int R, int Vc, int k, float *val, int32_t *idx,
                         float *m, float *s) {
#pragma omp parallel for if ((int64_t)R * Vc >= OPS_PAR_MIN)
    for (int r = 0; r < R; r++) {
        const float *x = logits + (size_t)r * ld;
        float *tv = val + (size_t)r * k;
        int32_t *ti = idx + (size_t)r * k;
        // LSE: rescale the running sum to the tile's maximum when it is larger
        float tmax = row_max(x, Vc);
        float nm = tmax > m[r] ? tmax : m[r];
        double sum = m[r] == -INFINITY ? 0.0 : (double)s[r] * exp((double)m[r] - nm);
        // Each term <= 1: fp32 partial sums over chunks of 256 (vectorised), accumulated in double.
        // One fp32 sum over a whole tile would err by up to ~Vc 2^-24 relative (1e-4 in lse for a
        // 32000-wide tile of tied logits, measured); per 256 it stays near 1e-6.
        // nm = -inf: every value so far is -inf, the sum stays 0 (lse = -inf), not expf(-inf - -inf) = NaN
        if (nm != -INFINITY) {
            for (int j0 = 0; j0 < Vc; j0 += 256) {
                int j1 = Vc - j0 < 256 ? Vc : j0 + 256;
                sum += exp_sum(x + j0, j1 - j0, nm);
            }
        }
        m[r] = nm;
        s[r] = (float)sum;
        // top-k: insertion into the sorted list (the tile is scanned once): its place by binary
        // search (the list is in topk_before order, unfilled slots last), the tail moved by one
        for (int j = 0; j < Vc; j++) {
            float xv = x[j];
            int32_t id = v0 + j;
            if (!topk_before(xv, id, tv[k - 1], ti[k - 1])) continue;
            int lo = 0, hi = k - 1; // the first slot it goes before is in [lo, hi]
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (topk_before(xv, id, tv[mid], ti[mid])) hi = mid;
                else lo = mid + 1;
            }
            memmove(tv + lo + 1, tv + lo, (size_t)(k - 1 - lo) * sizeof(float));
            memmove(ti + lo + 1, ti + lo, (size_t)(k - 1 - lo) * sizeof(int32_t));
            tv[lo] = xv;
            ti[lo] = id;
        }
    }
}

void cpu_topk_lse_finish(float *lse, const float *m, const float *s, int R) {
    for (int r = 0; r < R; r++) lse[r] = m[r] + logf(s[r]);
}
