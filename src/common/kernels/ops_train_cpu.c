// ops_train_cpu.c: the fp32 reference of the training ops (see ops_train.h), threaded with OpenMP.
// Plain loops, written to be read: each function is the formula in its header comment; the DFlash
// attention is tiles of OpenBLAS products with its masks as row ranges (see its section). Reductions
// over a row are formed in double where a row can be long (RMSNorm over H), in fp32 elsewhere.
#include "common/kernels/ops_train_cpu.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"
#include "common/kernels/ops_cpu.h"
#include "common/kernels/vexp.h"

// ----------------------------------------------------------------------------- RMSNorm

// y_i = x_i r w_i, r = 1/sqrt(mean(x^2) + eps). Differentiating r gives dr/dx_j = -x_j r^3 / D, so
//   dx_i = r w_i dy_i - x_i r^3 / D * sum_j w_j dy_j x_j,      dw_i += sum over rows of dy_i x_i r.
// Rows are split over threads; each thread sums its rows' dw into its own partial row (static
// schedule), and the partials are added in thread order afterwards: no races, and the same result
// for the same thread count. Each dx_i is written after its dy_i and x_i are read, so dx may alias dy.
// One row: dxr (written or added to), pdw (+=).
VEXP_CLONES static void rmsnorm_backward_row(float *dxr, float *pdw, const float *dyr, const float *xr, const float *w,
                                             int D, float eps, int accumulate) {
    double ss = 0, wdx = 0; // sum x^2 and sum w dy x
#pragma omp simd reduction(+ : ss, wdx)
    for (int i = 0; i < D; i++) {
        ss += (double)xr[i] * xr[i];
        wdx += (double)w[i] * dyr[i] * xr[i];
    }
    double inv = 1.0 / sqrt(ss / D + eps);
    float rr = (float)inv, coef = (float)(wdx * inv * inv * inv / D);
#pragma omp simd
    for (int i = 0; i < D; i++) {
        float g = rr * w[i] * dyr[i] - xr[i] * coef;
        pdw[i] += dyr[i] * xr[i] * rr;
        dxr[i] = accumulate ? dxr[i] + g : g;
    }
}

void cpu_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int R, int D,
                          float eps, int accumulate) {
    if (R <= 0 || D <= 0) return;
    int nt = omp_get_max_threads();
    float *partial = xcalloc((size_t)nt * D, sizeof(float)); // threads the region does not get stay 0
#pragma omp parallel num_threads(nt)
    {
        float *pdw = partial + (size_t)omp_get_thread_num() * D;
#pragma omp for schedule(static)
        for (int r = 0; r < R; r++)
            rmsnorm_backward_row(dx + (size_t)r * D, pdw, dy + (size_t)r * D, x + (size_t)r * D, w, D, eps, accumulate);
    }
    for (int i = 0; i < D; i++) {
        float s = 0;
        for (int t = 0; t < nt; t++) s += partial[(size_t)t * D + i];
        dw[i] += s;
    }
    free(partial);
}

// ----------------------------------------------------------------------------- RoPE

// The forward turns each pair (x[i], x[i + hd/2]) by the angle pos * inv_freq[i]; a rotation's
// transpose is the rotation by minus the angle. Same fp32 angle as cpu_rope.
void cpu_rope_backward(float *dx, const int32_t *pos, const float *inv_freq, int T, int nh, int hd) {
    int half = hd / 2;
#pragma omp parallel for
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            float angle = (float)pos[t] * inv_freq[i];
            float c = cosf(angle), s = sinf(angle);
            for (int h = 0; h < nh; h++) {
                float *v = dx + ((size_t)t * nh + h) * hd;
                float a = v[i], b = v[i + half];
                v[i] = a * c + b * s;
                v[i + half] = b * c - a * s;
            }
        }
    }
}

// ----------------------------------------------------------------------------- SwiGLU

// out = silu(g) u, silu(g) = g sigmoid(g), silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
// Every input of element i is read before its outputs are written, so the gradients may alias the inputs.
// Spans of SPAN elements over the threads, each vectorised (vexpf; VEXP_CLONES).
#define SPAN 4096
VEXP_CLONES static void swiglu_backward_span(float *dgate, float *dup, const float *dout, const float *gate,
                                             const float *up, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i], u = up[i], d = dout[i];
        float sg = 1.0f / (1.0f + vexpf(-g)); // g -> -inf: exp = inf, sg = 0 (no NaN)
        dgate[i] = d * u * sg * (1.0f + g * (1.0f - sg));
        dup[i] = d * g * sg;
    }
}

void cpu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int64_t n) {
#pragma omp parallel for if (n > SPAN)
    for (int64_t i0 = 0; i0 < n; i0 += SPAN) {
        int64_t m = n - i0 < SPAN ? n - i0 : SPAN;
        swiglu_backward_span(dgate + i0, dup + i0, dout + i0, gate + i0, up + i0, m);
    }
}

// ----------------------------------------------------------------------------- DFlash attention

// The attention runs as GEMMs (OpenBLAS, one thread per call inside the OpenMP regions) over tiles
// of one (anchor, kv head): its M = B * group query rows (slot k, head g of the group, row k*group+g,
// the order q already has inside an anchor) against the keys [context | block]. The masks of SPEC §3
// / ops_train.h are ranges, not per-element tests: the context an anchor's slot k sees is the
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
void cpu_dflash_attn_forward(float *out, float *lse, const float *q, const float *kb, const float *vb, const float *kc,
                             const float *vc, const int32_t *anchors, const int32_t *seq_start, int C, int B, int nq,
                             int nkv, int hd, float scale, int window, int block_causal) {
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
void cpu_dflash_attn_backward(float *dq, float *dkb, float *dvb, float *dkc, float *dvc, const float *dout,
                              const float *out, const float *lse, const float *q, const float *kb, const float *vb,
                              const float *kc, const float *vc, const int32_t *anchors, const int32_t *seq_start,
                              int C, int B, int nq, int nkv, int hd, float scale, int window, int block_causal) {
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
