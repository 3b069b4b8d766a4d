// ops_train_cpu.c: the fp32 reference of the training ops (see ops_train.h), threaded with OpenMP.
// Plain loops, written to be read: each function is the formula in its header comment. Reductions
// over a row are formed in double where a row can be long (RMSNorm over H), in fp32 elsewhere.
#include "common/kernels/ops_train_cpu.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"

// ----------------------------------------------------------------------------- RMSNorm

// y_i = x_i r w_i, r = 1/sqrt(mean(x^2) + eps). Differentiating r gives dr/dx_j = -x_j r^3 / D, so
//   dx_i = r w_i dy_i - x_i r^3 / D * sum_j w_j dy_j x_j,      dw_i += sum over rows of dy_i x_i r.
// Rows are split over threads; each thread sums its rows' dw into its own partial row (static
// schedule), and the partials are added in thread order afterwards: no races, and the same result
// for the same thread count. Each dx_i is written after its dy_i and x_i are read, so dx may alias dy.
void cpu_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int R, int D,
                          float eps, int accumulate) {
    if (R <= 0 || D <= 0) return;
    int nt = omp_get_max_threads();
    float *partial = xcalloc((size_t)nt * D, sizeof(float)); // threads the region does not get stay 0
#pragma omp parallel num_threads(nt)
    {
        float *pdw = partial + (size_t)omp_get_thread_num() * D;
#pragma omp for schedule(static)
        for (int r = 0; r < R; r++) {
            const float *xr = x + (size_t)r * D, *dyr = dy + (size_t)r * D;
            float *dxr = dx + (size_t)r * D;
            double ss = 0, wdx = 0; // sum x^2 and sum w dy x
            for (int i = 0; i < D; i++) {
                ss += (double)xr[i] * xr[i];
                wdx += (double)w[i] * dyr[i] * xr[i];
            }
            double inv = 1.0 / sqrt(ss / D + eps);
            float rr = (float)inv, coef = (float)(wdx * inv * inv * inv / D);
            for (int i = 0; i < D; i++) {
                float g = rr * w[i] * dyr[i] - xr[i] * coef;
                pdw[i] += dyr[i] * xr[i] * rr;
                dxr[i] = accumulate ? dxr[i] + g : g;
            }
        }
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
void cpu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int64_t n) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i], u = up[i], d = dout[i];
        float sg = 1.0f / (1.0f + expf(-g)); // g -> -inf: expf = inf, sg = 0 (no NaN)
        dgate[i] = d * u * sg * (1.0f + g * (1.0f - sg));
        dup[i] = d * g * sg;
    }
}

// ----------------------------------------------------------------------------- DFlash attention

// The keys a query row (anchor a, slot k) sees, in the order the scores are laid out: the context
// positions c0 .. c0 + nctx - 1 of the packed batch, then the block slots 0 .. nb - 1 of its anchor.
// The rules are SPEC §3 / ops_train.h: same sequence and c < a; sliding layers also c >= a + k - (W-1);
// block: all B slots, or j <= k when causal.
typedef struct {
    int c0, nctx, nb;
} seen_keys;

static seen_keys seen_by(int a, int start, int k, int B, int window, int block_causal) {
    seen_keys s;
    s.c0 = start;
    if (window > 0 && a + k - (window - 1) > s.c0) s.c0 = a + k - (window - 1);
    s.nctx = a > s.c0 ? a - s.c0 : 0;
    s.nb = block_causal ? k + 1 : B;
    return s;
}

// Row t of the keys (or values) in that order, for kv head kh: context rows come from ctx [S, nkv, hd],
// block rows from blk [C*B, nkv, hd] starting at the anchor's first slot row0.
static const float *seen_row(const float *ctx, const float *blk, const seen_keys *s, int t, int row0, int nkv, int kh,
                             int hd) {
    if (t < s->nctx) return ctx + ((size_t)(s->c0 + t) * nkv + kh) * hd;
    return blk + ((size_t)(row0 + t - s->nctx) * nkv + kh) * hd;
}

static float dot(const float *a, const float *b, int n) {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy(float *y, float alpha, const float *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += alpha * x[i];
}

// The longest row of scores any query has: its whole sequence before the anchor plus the block.
static int longest_seen(const int32_t *anchors, const int32_t *seq_start, int C, int B) {
    int n = 0;
    for (int ci = 0; ci < C; ci++) n = anchors[ci] - seq_start[ci] > n ? anchors[ci] - seq_start[ci] : n;
    return n + B;
}

// Per (query row, head): the scaled scores against the keys it sees go to a per-thread row of at
// most longest_seen() floats (never [C*B, S]), then an exact fp32 softmax, the weighted sum of the
// values, and the row's log-sum-exp for the backward.
void cpu_dflash_attn_forward(float *out, float *lse, const float *q, const float *kb, const float *vb, const float *kc,
                             const float *vc, const int32_t *anchors, const int32_t *seq_start, int C, int B, int nq,
                             int nkv, int hd, float scale, int window, int block_causal) {
    int group = nq / nkv, longest = longest_seen(anchors, seq_start, C, B);
#pragma omp parallel
    {
        float *p = xmalloc((size_t)longest * sizeof(float));
#pragma omp for collapse(2) schedule(dynamic, 4)
        for (int r = 0; r < C * B; r++) {
            for (int h = 0; h < nq; h++) {
                int ci = r / B, k = r % B, kh = h / group, row0 = ci * B;
                seen_keys s = seen_by(anchors[ci], seq_start[ci], k, B, window, block_causal);
                int n = s.nctx + s.nb;
                const float *qv = q + ((size_t)r * nq + h) * hd;
                float *o = out + ((size_t)r * nq + h) * hd;
                float m = -INFINITY;
                for (int t = 0; t < n; t++) {
                    p[t] = dot(qv, seen_row(kc, kb, &s, t, row0, nkv, kh, hd), hd) * scale;
                    m = p[t] > m ? p[t] : m;
                }
                float l = 0;
                for (int t = 0; t < n; t++) {
                    p[t] = expf(p[t] - m);
                    l += p[t];
                }
                for (int i = 0; i < hd; i++) o[i] = 0;
                for (int t = 0; t < n; t++) axpy(o, p[t] / l, seen_row(vc, vb, &s, t, row0, nkv, kh, hd), hd);
                lse[(size_t)r * nq + h] = m + logf(l);
            }
        }
        free(p);
    }
}

// The backward recomputes each probability from q, k and the saved lse: P = exp(scale q.k - lse).
// With dP = dout.v and D = sum(dout * out) per row, dS = P (dP - D); then
//   dq = scale sum_keys dS k,   dk += scale dS q,   dv += P dout.
// Two passes, each writing only rows it owns, so neither needs atomics or per-thread copies:
//   1. query-major, parallel over (anchor, kv head): dq of the group's heads (written), and the
//      anchor's block dkb/dvb for that kv head (zeroed, then summed over its slots and heads);
//   2. key-major, parallel over (context position, kv head): dkc/dvc of that row, += over every
//      (anchor, slot, head) that sees it. Context rows are shared by all anchors of a sequence,
//      which is why this pass is organised by key. It evaluates the context scores a second time
//      (as FlashAttention's separate dK/dV loop does): the price of a race-free, deterministic +=.
void cpu_dflash_attn_backward(float *dq, float *dkb, float *dvb, float *dkc, float *dvc, const float *dout,
                              const float *out, const float *lse, const float *q, const float *kb, const float *vb,
                              const float *kc, const float *vc, const int32_t *anchors, const int32_t *seq_start,
                              int C, int B, int nq, int nkv, int hd, float scale, int window, int block_causal) {
    int group = nq / nkv, rows = C * B;
    float *Drow = xmalloc(((size_t)rows * nq + 1) * sizeof(float)); // D = sum(dout * out) per (row, head)
#pragma omp parallel for
    for (int64_t rh = 0; rh < (int64_t)rows * nq; rh++) Drow[rh] = dot(dout + rh * hd, out + rh * hd, hd);

    // pass 1: dq, dkb, dvb
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int ci = 0; ci < C; ci++) {
        for (int kh = 0; kh < nkv; kh++) {
            int row0 = ci * B;
            for (int j = 0; j < B; j++) {
                memset(dkb + ((size_t)(row0 + j) * nkv + kh) * hd, 0, (size_t)hd * sizeof(float));
                memset(dvb + ((size_t)(row0 + j) * nkv + kh) * hd, 0, (size_t)hd * sizeof(float));
            }
            for (int k = 0; k < B; k++) {
                seen_keys s = seen_by(anchors[ci], seq_start[ci], k, B, window, block_causal);
                for (int h = kh * group; h < (kh + 1) * group; h++) {
                    size_t rh = (size_t)(row0 + k) * nq + h;
                    const float *qv = q + rh * hd, *dov = dout + rh * hd;
                    float *dqv = dq + rh * hd;
                    for (int i = 0; i < hd; i++) dqv[i] = 0;
                    for (int t = 0; t < s.nctx + s.nb; t++) {
                        const float *kv = seen_row(kc, kb, &s, t, row0, nkv, kh, hd);
                        const float *vv = seen_row(vc, vb, &s, t, row0, nkv, kh, hd);
                        float p = expf(dot(qv, kv, hd) * scale - lse[rh]);
                        float ds = p * (dot(dov, vv, hd) - Drow[rh]);
                        axpy(dqv, scale * ds, kv, hd);
                        if (t >= s.nctx) { // a block key: its gradient rows belong to this anchor
                            size_t jr = ((size_t)(row0 + t - s.nctx) * nkv + kh) * hd;
                            axpy(dkb + jr, scale * ds, qv, hd);
                            axpy(dvb + jr, p, dov, hd);
                        }
                    }
                }
            }
        }
    }

    // pass 2: dkc, dvc. Only positions before the last anchor can be seen.
    int S_seen = 0;
    for (int ci = 0; ci < C; ci++) S_seen = anchors[ci] > S_seen ? anchors[ci] : S_seen;
#pragma omp parallel for collapse(2) schedule(dynamic, 4)
    for (int c = 0; c < S_seen; c++) {
        for (int kh = 0; kh < nkv; kh++) {
            const float *kv = kc + ((size_t)c * nkv + kh) * hd, *vv = vc + ((size_t)c * nkv + kh) * hd;
            float *dkv = dkc + ((size_t)c * nkv + kh) * hd, *dvv = dvc + ((size_t)c * nkv + kh) * hd;
            for (int ci = 0; ci < C; ci++) {
                int a = anchors[ci];
                if (c < seq_start[ci] || c >= a) continue;
                // slots k with c >= a + k - (W - 1), i.e. k <= c - a + W - 1 (every slot when W = 0)
                int kmax = B - 1;
                if (window > 0 && c - a + window - 1 < kmax) kmax = c - a + window - 1;
                for (int k = 0; k <= kmax; k++) {
                    for (int h = kh * group; h < (kh + 1) * group; h++) {
                        size_t rh = (size_t)(ci * B + k) * nq + h;
                        const float *qv = q + rh * hd, *dov = dout + rh * hd;
                        float p = expf(dot(qv, kv, hd) * scale - lse[rh]);
                        float ds = p * (dot(dov, vv, hd) - Drow[rh]);
                        axpy(dkv, scale * ds, qv, hd);
                        axpy(dvv, p, dov, hd);
                    }
                }
            }
        }
    }
    free(Drow);
}
