// attention_cpu.c: the attentions of attention.h on the CPU: the fp32 reference, threaded with
// OpenMP, and attention_kernels_cpu, the CPU backend's table. The target's causal attention and
// DFlash's block attention (forward and backward) are tiles of OpenBLAS products (cpu_sgemm) with
// their masks as row ranges; cpu_attend_row / cpu_attend_group (attention_cpu.h) are the decode's.
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/gemm_rows.h"
#include "common/core/check.h"
#include "common/kernels/attention.h"
#include "common/kernels/attention_cpu.h"
#include "common/kernels/cpu_kernel.h"

// ----------------------------------------------------------------------------- rows, GEMMs, softmax

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

// cpu_sgemm: C[m, n] (ldc) = alpha op(A) op(B) + beta C, row-major, fp32 (OpenBLAS; inside an
// OpenMP region it runs on the calling thread). op(A) = A^T when trans_a (A stored [k, m]), op(B) =
// B^T when trans_b (B stored [n, k]). m or n = 0: nothing; k = 0: C = beta C.
static void cpu_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
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

// cpu_softmax_range_sink: one row s[n] of scores, softmax in place over its visible columns [j0, j1)
// (j0 < j1), 0 in the others, with the logit sink in the denominator (and the maximum) but in no
// column (sink = -inf: none); returns the log-sum-exp of the visible scores and the sink.
VEXP_CLONES static float cpu_softmax_range_sink(float *s, int n, int j0, int j1, float sink) {
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

// cpu_softmax_range: cpu_softmax_range_sink without a sink; returns the visible scores' log-sum-exp.
static float cpu_softmax_range(float *s, int n, int j0, int j1) { return cpu_softmax_range_sink(s, n, j0, j1, -INFINITY); }

// ----------------------------------------------------------------------------- causal attention

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
static void cpu_attention_causal(backend *be, void *out_v, const void *q_v, const void *k_v, const void *v_v,
                                 const int32_t *cu_seqlens, int n_seq, int T, int nq, int nkv, int hd, float scale,
                                 int window, const float *sinks) {
    float *out = out_v;
    const float *q = q_v, *k = k_v, *v = v_v;
    (void)be;
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

// ----------------------------------------------------------------------------- DFlash attention

// The attention runs as GEMMs (OpenBLAS, one thread per call inside the OpenMP regions) over tiles
// of one (anchor, kv head): its M = B * group query rows (slot k, head g of the group, row k*group+g,
// the order q already has inside an anchor) against the keys [context | block]. The masks of SPEC §3
// / attention.h are ranges, not per-element tests: the context an anchor's slot k sees is the
// contiguous run [c0(k), a) of its own sequence (c0 = the sequence start, or a + k - (W-1) on
// sliding layers, whichever is later), so the tile's context columns are [lo, a) with lo = c0(0),
// and row k's visible columns are the contiguous range [c0(k) - lo, nctx + nb(k)) of the tile
// (context then block; nb = B, or k + 1 for a causal block). A GEMM fills the whole tile (the
// window wastes at most B - 1 columns a row); the softmax works on each row's range and sets the
// rest to 0, which the later products then ignore.
typedef struct {
    int a, lo, nctx; // anchor, first context column of the tile, context columns (a - lo)
    int start, B, window, causal;
} attn_tile;

static attn_tile tile_of(int a, int start, int B, int window, int block_causal) {
    attn_tile t = {a, start, 0, start, B, window, block_causal};
    if (window > 0 && a - (window - 1) > t.lo) t.lo = a - (window - 1);
    if (t.lo > a) t.lo = a;
    t.nctx = a - t.lo;
    return t;
}

// The first context position slot k sees (== a when it sees none).
static int tile_c0(const attn_tile *t, int k) {
    int c0 = t->start;
    if (t->window > 0 && t->a + k - (t->window - 1) > c0) c0 = t->a + k - (t->window - 1);
    return c0 < t->a ? c0 : t->a;
}

static int tile_nb(const attn_tile *t, int k) { return t->causal ? k + 1 : t->B; }

// dst [B*group, hd] = the rows of src [C*B, nh, hd] for anchor ci, heads kh*group .. +group-1.
static void gather_rows(float *dst, const float *src, int ci, int B, int nh, int kh, int group, int hd) {
    for (int k = 0; k < B; k++)
        memcpy(dst + (size_t)k * group * hd, src + ((size_t)(ci * B + k) * nh + (size_t)kh * group) * hd,
               (size_t)group * hd * sizeof(float));
}

// The inverse: dst rows of anchor ci, kv head kh's query heads = src [B*group, hd].
static void scatter_rows(float *dst, const float *src, int ci, int B, int nh, int kh, int group, int hd) {
    for (int k = 0; k < B; k++)
        memcpy(dst + ((size_t)(ci * B + k) * nh + (size_t)kh * group) * hd, src + (size_t)k * group * hd,
               (size_t)group * hd * sizeof(float));
}

// The scores of one tile: S [M, nctx + B] = scale Q [M, hd] [Kc(lo .. a-1) | Kb(anchor)]^T.
static void tile_scores(float *S, const float *Q, const attn_tile *t, const float *kc, const float *kb, int ci, int M,
                        int nkv, int kh, int hd, float scale) {
    int n = t->nctx + t->B, ld = nkv * hd;
    cpu_sgemm(0, 1, M, t->nctx, hd, scale, Q, hd, kc + ((size_t)t->lo * nkv + kh) * hd, ld, 0.0f, S, n);
    cpu_sgemm(0, 1, M, t->B, hd, scale, Q, hd, kb + ((size_t)ci * t->B * nkv + kh) * hd, ld, 0.0f, S + t->nctx, n);
}

// The longest context any anchor's tile has.
static int longest_ctx(const int32_t *anchors, const int32_t *seq_start, int C) {
    int n = 0;
    for (int ci = 0; ci < C; ci++) n = anchors[ci] - seq_start[ci] > n ? anchors[ci] - seq_start[ci] : n;
    return n;
}

// Per (anchor, kv head), in parallel: scores by GEMM, an exact fp32 softmax on each row's visible
// range in place (its log-sum-exp kept for the backward), then O = P [Vc | Vb] by GEMM. Scratch per
// thread: one tile, M x (longest context + B) floats (never [C*B, S]).
static void cpu_attention_dflash_forward(backend *be, void *out_v, float *lse, const void *q_v, const void *kb_v,
                                         const void *vb_v, const void *kc_v, const void *vc_v, const int32_t *anchors,
                                         const int32_t *seq_start, int C, int B, int nq, int nkv, int hd, float scale,
                                         int window, int block_causal) {
    float *out = out_v;
    const float *q = q_v, *kb = kb_v, *vb = vb_v, *kc = kc_v, *vc = vc_v;
    (void)be;
    int group = nq / nkv, M = B * group, nmax = longest_ctx(anchors, seq_start, C) + B, ld = nkv * hd;
#pragma omp parallel
    {
        float *S = xmalloc(((size_t)M * nmax + 2 * (size_t)M * hd) * sizeof(float));
        float *Q = S + (size_t)M * nmax, *O = Q + (size_t)M * hd;
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int ci = 0; ci < C; ci++) {
            for (int kh = 0; kh < nkv; kh++) {
                attn_tile t = tile_of(anchors[ci], seq_start[ci], B, window, block_causal);
                int n = t.nctx + B;
                gather_rows(Q, q, ci, B, nq, kh, group, hd);
                tile_scores(S, Q, &t, kc, kb, ci, M, nkv, kh, hd, scale);
                for (int r = 0; r < M; r++) {
                    int k = r / group;
                    lse[(size_t)(ci * B + k) * nq + kh * group + r % group] =
                        cpu_softmax_range(S + (size_t)r * n, n, tile_c0(&t, k) - t.lo, t.nctx + tile_nb(&t, k));
                }
                cpu_sgemm(0, 0, M, hd, t.nctx, 1.0f, S, n, vc + ((size_t)t.lo * nkv + kh) * hd, ld, 0.0f, O, hd);
                cpu_sgemm(0, 0, M, hd, B, 1.0f, S + t.nctx, n, vb + ((size_t)ci * B * nkv + kh) * hd, ld, 1.0f, O, hd);
                scatter_rows(out, O, ci, B, nq, kh, group, hd);
            }
        }
        free(S);
    }
}

// P = exp(S - lse) on row r's visible columns [j0, j1) of a tile row of n, 0 elsewhere.
VEXP_CLONES static void probs_row(float *s, int n, int j0, int j1, float lse_r) {
    for (int j = 0; j < j0; j++) s[j] = 0;
#pragma omp simd
    for (int j = j0; j < j1; j++) s[j] = vexpf(s[j] - lse_r);
    for (int j = j1; j < n; j++) s[j] = 0;
}

// dS = P (dP - D) in place over dP, a row of n.
VEXP_CLONES static void dscores_row(float *dp, const float *p, int n, float D) {
#pragma omp simd
    for (int j = 0; j < n; j++) dp[j] = p[j] * (dp[j] - D);
}

// Context rows per key-major task of the backward, and the query rows one of its GEMMs stacks.
#define ATTN_CTX_TILE 128
#define ATTN_STACK_ROWS 512

// The backward recomputes the probabilities from the scores and the saved lse: P = exp(S - lse).
// With dP = dO [V]^T and D = rowsum(dO * O), dS = P (dP - D); then
//   dQ = scale dS [K],   dK = scale dS^T Q,   dV = P^T dO      (all GEMMs on a tile).
// 0. Q, dO, lse and D gathered per (kv head, anchor) into [nkv][C][M] row blocks, so the rows of
//    consecutive anchors for one kv head are consecutive (and stack into one GEMM in pass 2).
// 1. query-major, parallel over (anchor, kv head): dq (written) and the anchor's own block rows
//    dkb/dvb for that kv head (written: only this task produces them).
// 2. key-major, parallel over (tile of ATTN_CTX_TILE context rows, kv head): dkc/dvc of those rows,
//    += over every anchor that sees them, in anchor order, up to ATTN_STACK_ROWS query rows a GEMM.
//    Context rows are shared by all anchors of a sequence, which is why this pass is organised by
//    key; it computes the context scores a second time (as FlashAttention's separate dK/dV loop
//    does): the price of a race-free += whose result does not depend on the thread count.
static void cpu_attention_dflash_backward(backend *be, void *dq_v, void *dkb_v, void *dvb_v, float *dkc, float *dvc,
                                          const void *dout_v, const void *out_v, const float *lse, const void *q_v,
                                          const void *kb_v, const void *vb_v, const void *kc_v, const void *vc_v,
                                          const int32_t *anchors, const int32_t *seq_start, int C, int B, int nq,
                                          int nkv, int hd, float scale, int window, int block_causal) {
    float *dq = dq_v, *dkb = dkb_v, *dvb = dvb_v;
    const float *dout = dout_v, *out = out_v, *q = q_v, *kb = kb_v, *vb = vb_v, *kc = kc_v, *vc = vc_v;
    (void)be;
    int group = nq / nkv, M = B * group, nmax = longest_ctx(anchors, seq_start, C) + B, ld = nkv * hd;
    size_t blk = (size_t)M * hd; // floats of one (kv head, anchor) block of Qg / dOg
    float *Qg = xmalloc(2 * (size_t)nkv * C * blk * sizeof(float)), *dOg = Qg + (size_t)nkv * C * blk;
    float *Lg = xmalloc(2 * ((size_t)nkv * C * M + 1) * sizeof(float)), *Dg = Lg + (size_t)nkv * C * M + 1;

    // pass 0: the gathers, D = rowsum(dO * O)
#pragma omp parallel for collapse(2)
    for (int kh = 0; kh < nkv; kh++) {
        for (int ci = 0; ci < C; ci++) {
            size_t u = (size_t)kh * C + ci;
            gather_rows(Qg + u * blk, q, ci, B, nq, kh, group, hd);
            gather_rows(dOg + u * blk, dout, ci, B, nq, kh, group, hd);
            for (int r = 0; r < M; r++) {
                size_t rh = (size_t)(ci * B + r / group) * nq + kh * group + r % group;
                const float *o = out + rh * hd, *d = dout + rh * hd;
                float s = 0;
#pragma omp simd reduction(+ : s)
                for (int i = 0; i < hd; i++) s += o[i] * d[i];
                Lg[u * M + r] = lse[rh];
                Dg[u * M + r] = s;
            }
        }
    }

    // pass 1: dq, dkb, dvb
#pragma omp parallel
    {
        float *P = xmalloc((2 * (size_t)M * nmax + blk) * sizeof(float));
        float *dS = P + (size_t)M * nmax, *dQ = dS + (size_t)M * nmax;
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int ci = 0; ci < C; ci++) {
            for (int kh = 0; kh < nkv; kh++) {
                attn_tile t = tile_of(anchors[ci], seq_start[ci], B, window, block_causal);
                size_t u = (size_t)kh * C + ci;
                const float *Q = Qg + u * blk, *dO = dOg + u * blk;
                const float *kcs = kc + ((size_t)t.lo * nkv + kh) * hd, *vcs = vc + ((size_t)t.lo * nkv + kh) * hd;
                const float *kbs = kb + ((size_t)ci * B * nkv + kh) * hd, *vbs = vb + ((size_t)ci * B * nkv + kh) * hd;
                int n = t.nctx + B;
                tile_scores(P, Q, &t, kc, kb, ci, M, nkv, kh, hd, scale);
                cpu_sgemm(0, 1, M, t.nctx, hd, 1.0f, dO, hd, vcs, ld, 0.0f, dS, n);
                cpu_sgemm(0, 1, M, B, hd, 1.0f, dO, hd, vbs, ld, 0.0f, dS + t.nctx, n);
                for (int r = 0; r < M; r++) {
                    int k = r / group;
                    probs_row(P + (size_t)r * n, n, tile_c0(&t, k) - t.lo, t.nctx + tile_nb(&t, k), Lg[u * M + r]);
                    dscores_row(dS + (size_t)r * n, P + (size_t)r * n, n, Dg[u * M + r]);
                }
                cpu_sgemm(0, 0, M, hd, t.nctx, scale, dS, n, kcs, ld, 0.0f, dQ, hd);
                cpu_sgemm(0, 0, M, hd, B, scale, dS + t.nctx, n, kbs, ld, 1.0f, dQ, hd);
                scatter_rows(dq, dQ, ci, B, nq, kh, group, hd);
                cpu_sgemm(1, 0, B, hd, M, scale, dS + t.nctx, n, Q, hd, 0.0f, dkb + ((size_t)ci * B * nkv + kh) * hd, ld);
                cpu_sgemm(1, 0, B, hd, M, 1.0f, P + t.nctx, n, dO, hd, 0.0f, dvb + ((size_t)ci * B * nkv + kh) * hd, ld);
            }
        }
        free(P);
    }

    // pass 2: dkc, dvc. Only positions before the last anchor can be seen.
    int S_seen = 0;
    for (int ci = 0; ci < C; ci++) S_seen = anchors[ci] > S_seen ? anchors[ci] : S_seen;
    int ntiles = (S_seen + ATTN_CTX_TILE - 1) / ATTN_CTX_TILE;
    int stack = ATTN_STACK_ROWS / M > 1 ? ATTN_STACK_ROWS / M : 1; // anchors per GEMM
#pragma omp parallel
    {
        size_t tile_floats = (size_t)stack * M * ATTN_CTX_TILE;
        float *P = xmalloc(2 * tile_floats * sizeof(float)), *dS = P + tile_floats;
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int ti = 0; ti < ntiles; ti++) {
            for (int kh = 0; kh < nkv; kh++) {
                int t0 = ti * ATTN_CTX_TILE, t1 = t0 + ATTN_CTX_TILE < S_seen ? t0 + ATTN_CTX_TILE : S_seen;
                for (int c0 = 0; c0 < C;) {
                    // the next run of up to `stack` consecutive anchors that see part of [t0, t1)
                    int u0 = t1, u1 = t0, c1 = c0;
                    for (; c1 < C && c1 - c0 < stack; c1++) {
                        attn_tile t = tile_of(anchors[c1], seq_start[c1], B, window, block_causal);
                        int lo = t.lo > t0 ? t.lo : t0, hi = t.a < t1 ? t.a : t1;
                        if (lo >= hi) break;
                        u0 = lo < u0 ? lo : u0;
                        u1 = hi > u1 ? hi : u1;
                    }
                    if (c1 == c0) { // anchor c0 does not see this tile
                        c0++;
                        continue;
                    }
                    int rows = (c1 - c0) * M, w = u1 - u0;
                    size_t u = (size_t)kh * C + c0;
                    const float *Q = Qg + u * blk, *dO = dOg + u * blk;
                    cpu_sgemm(0, 1, rows, w, hd, scale, Q, hd, kc + ((size_t)u0 * nkv + kh) * hd, ld, 0.0f, P, w);
                    cpu_sgemm(0, 1, rows, w, hd, 1.0f, dO, hd, vc + ((size_t)u0 * nkv + kh) * hd, ld, 0.0f, dS, w);
                    for (int ci = c0; ci < c1; ci++) {
                        attn_tile t = tile_of(anchors[ci], seq_start[ci], B, window, block_causal);
                        for (int r = 0; r < M; r++) {
                            int row = (ci - c0) * M + r, j0 = tile_c0(&t, r / group) - u0, j1 = t.a - u0;
                            j0 = j0 < 0 ? 0 : j0;
                            j1 = j1 > w ? w : j1;
                            j0 = j0 > j1 ? j1 : j0;
                            probs_row(P + (size_t)row * w, w, j0, j1, Lg[u * M + row]);
                            dscores_row(dS + (size_t)row * w, P + (size_t)row * w, w, Dg[u * M + row]);
                        }
                    }
                    cpu_sgemm(1, 0, w, hd, rows, scale, dS, w, Q, hd, 1.0f, dkc + ((size_t)u0 * nkv + kh) * hd, ld);
                    cpu_sgemm(1, 0, w, hd, rows, 1.0f, P, w, dO, hd, 1.0f, dvc + ((size_t)u0 * nkv + kh) * hd, ld);
                    c0 = c1;
                }
            }
        }
        free(P);
    }
    free(Qg);
    free(Lg);
}

const struct attention_kernels attention_kernels_cpu = {ATTENTION_OPS(OP_FILL, cpu_attention_)};
