// loss.c: the drafter's loss fused with the frozen lm_head (see loss.h; SPEC §4, §5): argument
// checks and dispatch through the backend's loss table, the workspace layout, the CPU path (the
// table's CPU instance, loss_kernels_cpu), and the naive reference.
//
// The fused CPU path, per chunk of rc rows (whole anchors):
//   ROWS   logits[rc, V] = x W^T                                   GEMM 1
//          per row: scan (statistics) and terms; per anchor: weights; per row: dlogits in place
//          dx[rc, H] = dlogits W                                    GEMM 2
//   TILES  pass 1, per tile t: logits_t = x W_t^T, scan             GEMM 1
//          per row: terms; per anchor: weights
//          pass 2, per tile t: logits_t again, dlogits in place,    GEMM 2
//          dx += dlogits_t W_t                                      GEMM 3
// A chunk in mode ROWS is scanned as one tile of width V, so both modes share every per-row
// function; they differ only in which buffer the GEMMs fill.
//
// Numerics: logits, GEMMs and the per-element exp are fp32; sums over the vocabulary accumulate in
// double; the per-row terms (LSE, CE, KL, CAP, weights) are computed in double from the fp32 logits
// by loss_finish_row / loss_anchor_weights (loss_cuda.h: the CUDA path runs the same functions).
// The teacher's top-k set I is hidden from the tail statistics by overwriting its entries with -inf
// in the logits buffer (their values are saved first), so q_r = sum_{j not in I} q_j is summed
// directly over the tail entries, in log space against the tail's own running maximum, and never
// formed as 1 - sum_I q_i.
#include "student/loss/loss.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend_ops.h"
#include "common/core/check.h"
#include "common/kernels/vexp.h"
#include "student/loss/loss_cuda.h"
#include "student/loss/loss_terms.h"

// ---------------------------------------------------------------------------- workspace

// carve: the next piece of the workspace, 256-byte aligned (NULL base: only count).
static void *carve(char *base, size_t *off, size_t bytes) {
    size_t at = *off;
    *off = at + ((bytes + 255) & ~(size_t)255);
    return base ? base + at : NULL;
}

size_t loss_work_carve(loss_work *w, void *workspace, const loss_plan *p, int64_t hidden, int64_t vocab, int k) {
    loss_work unused;
    if (!w) w = &unused;
    char *base = workspace;
    size_t off = 0;
    size_t rc = p->row_chunk > 0 ? (size_t)p->row_chunk : 0;
    size_t K = p->topk_student > 0 ? (size_t)p->topk_student : 0;
    size_t kk = k > 0 ? (size_t)k : 0;
    int64_t width = vocab;
    if (p->mode == LOSS_MODE_TILES && p->vocab_tile > 0 && p->vocab_tile < vocab) width = p->vocab_tile;
    w->width = width;
    w->logits = carve(base, &off, rc * (size_t)width * sizeof(float));
    w->run_max = carve(base, &off, rc * sizeof(float));
    w->run_arg = carve(base, &off, rc * sizeof(int32_t));
    w->tail_max = carve(base, &off, rc * sizeof(float));
    w->tail_sum = carve(base, &off, rc * sizeof(double));
    w->s_lab = carve(base, &off, rc * sizeof(float));
    w->s_top = carve(base, &off, rc * kk * sizeof(float));
    w->lse = carve(base, &off, rc * sizeof(double));
    w->tail_lse = carve(base, &off, rc * sizeof(double));
    for (int t = 0; t < LOSS_ROW_TERMS; t++) w->aux[t] = loss_term_aux(t) ? carve(base, &off, rc * sizeof(double)) : NULL;
    w->topk_val = carve(base, &off, rc * K * sizeof(float));
    w->topk_idx = carve(base, &off, rc * K * sizeof(int32_t));
    // Only the CUDA path uses these (its dX is bf16; its top-K kernel keeps an LSE beside the list),
    // but the size cannot depend on the backend here.
    w->dx_acc = p->mode == LOSS_MODE_TILES ? carve(base, &off, rc * (size_t)hidden * sizeof(float)) : NULL;
    w->tk_m = carve(base, &off, K ? rc * sizeof(float) : 0);
    w->tk_s = carve(base, &off, K ? rc * sizeof(float) : 0);
    return off;
}

size_t loss_workspace_bytes(const loss_plan *p, int64_t hidden, int64_t vocab, int k) {
    return loss_work_carve(NULL, NULL, p, hidden, vocab, k);
}

// ---------------------------------------------------------------------------- per-row pieces

// stats_init: running statistics of local row i before its first tile.
static void stats_init(loss_work *w, int64_t i, int k, int K) {
    w->run_max[i] = -INFINITY;
    w->run_arg[i] = -1;
    w->tail_max[i] = -INFINITY;
    w->tail_sum[i] = 0;
    w->s_lab[i] = 0;
    for (int a = 0; a < k; a++) w->s_top[i * k + a] = -INFINITY;
    for (int c = 0; c < K; c++) {
        w->topk_val[i * K + c] = -INFINITY;
        w->topk_idx[i * K + c] = -1;
    }
}

// exp_le0: e^x for x <= 0 (also -inf), vectorising: vexp.h (within 1.4 ulp; 0 below 2^-126, where
// every sum it feeds holds a term >= 1; NaN stays NaN, so a broken logit still shows).
static inline float exp_le0(float x) { return vexpf(x); } // x <= 0 here (logits minus their running max)

// Vocabulary blocks of the scan: one vectorised max decides whether a block can hold a new argmax
// or a new top-K entry at all; only the rare blocks that can are scanned element by element.
#define SCAN_BLOCK 64

// scan_tile: fold the logits s[0..vt) of vocabulary ids v0.. of local row i into its running
// statistics. Leaves the entries of the teacher's ids at -inf (the caller no longer needs them).
static void scan_tile(float *s, int64_t v0, int64_t vt, int32_t y, const int32_t *t_idx, int k, int K,
                      loss_work *w, int64_t i) {
    // the logits the terms need: the label's and the teacher's ids that fall into this tile
    if (y >= v0 && y < v0 + vt) w->s_lab[i] = s[y - v0];
    float *st = w->s_top + i * k;
    for (int a = 0; a < k; a++)
        if (t_idx[a] >= v0 && t_idx[a] < v0 + vt) st[a] = s[t_idx[a] - v0];

    // argmax and student top-K over all ids. The scan runs in increasing id, so a strict > keeps
    // the lowest id on ties, for the argmax and inside the sorted top-K list alike.
    float mx = w->run_max[i];
    int32_t am = w->run_arg[i];
    float *tv = K > 0 ? w->topk_val + i * K : NULL;
    int32_t *ti = K > 0 ? w->topk_idx + i * K : NULL;
    for (int64_t j0 = 0; j0 < vt; j0 += SCAN_BLOCK) {
        const int64_t j1 = vt - j0 < SCAN_BLOCK ? vt : j0 + SCAN_BLOCK;
        float bm = -INFINITY;
#pragma omp simd reduction(max : bm)
        for (int64_t j = j0; j < j1; j++) bm = s[j] > bm ? s[j] : bm;
        if (bm > mx)
            for (int64_t j = j0; j < j1; j++)
                if (s[j] > mx) {
                    mx = s[j];
                    am = (int32_t)(v0 + j);
                }
        if (K > 0 && bm > tv[K - 1]) {
            for (int64_t j = j0; j < j1; j++) { // insertion into the sorted list
                float v = s[j];
                if (!(v > tv[K - 1])) continue;
                int c = K - 1;
                while (c > 0 && v > tv[c - 1]) {
                    tv[c] = tv[c - 1];
                    ti[c] = ti[c - 1];
                    c--;
                }
                tv[c] = v;
                ti[c] = (int32_t)(v0 + j);
            }
        }
    }
    w->run_max[i] = mx;
    w->run_arg[i] = am;

    // the tail: hide I (exp(-inf) adds 0 and -inf never wins the max), then a running max and sum
    for (int a = 0; a < k; a++)
        if (t_idx[a] >= v0 && t_idx[a] < v0 + vt) s[t_idx[a] - v0] = -INFINITY;
    float tmax = -INFINITY;
#pragma omp simd reduction(max : tmax)
    for (int64_t j = 0; j < vt; j++) tmax = s[j] > tmax ? s[j] : tmax;
    float old = w->tail_max[i];
    float nm = tmax > old ? tmax : old;
    if (nm == -INFINITY) return; // nothing outside I so far
    double sum = old == -INFINITY ? 0.0 : w->tail_sum[i] * exp((double)old - nm);
    // fp32 partial sums over blocks of 1024 terms (each <= 1), accumulated in double
    for (int64_t j0 = 0; j0 < vt; j0 += 1024) {
        const int64_t j1 = vt - j0 < 1024 ? vt : j0 + 1024;
        float part = 0;
#pragma omp simd reduction(+ : part)
        for (int64_t j = j0; j < j1; j++) part += exp_le0(s[j] - nm);
        sum += part;
    }
    w->tail_max[i] = nm;
    w->tail_sum[i] = sum;
}

// chunk_weights: w for rows r0 .. r0+nr-1 (whole anchors).
static void chunk_weights(const loss_config *cfg, const loss_batch *b, int64_t r0, int64_t nr, loss_rows *rows) {
    for (int64_t a0 = r0; a0 < r0 + nr; a0 += b->slots) loss_anchor_weights(cfg, b, a0, rows);
}

// dlogits_tile: overwrite the logits s[0..vt) (ids v0..) of row r / local row i with
// d(w_r slot_loss_r)/ds, the terms' sum g (loss_row_grad_make, loss_cuda.h). With A = w_r g.a:
//   j in I:      A q_j - g.topk p_j
//   j not in I:  A q_j - g.tail q_j / q_r = exp(s_j - tail_lse) (A q_r - g.tail)
//   j = y:       + g.label more;   j = g: + g.argmax more
// The tail form never forms p_r / q_r: q_j / q_r <= 1 and q_r <= 1, so nothing overflows however
// small q_r is.
static void dlogits_tile(const loss_config *cfg, const loss_batch *b, float *s, int64_t v0, int64_t vt, int64_t r,
                         int64_t i, const loss_work *w, double wr) {
    if (wr == 0) { // no gradient, and no exp over the row
        memset(s, 0, (size_t)vt * sizeof(float));
        return;
    }
    const int k = b->k;
    const int32_t *t_idx = b->t_idx + r * k;
    const float *t_val = b->t_val + r * k;
    const float *st = w->s_top + i * k;
    const int32_t y = loss_row_label(cfg, b, r), g = w->run_arg[i];
    const double lse = w->lse[i], tail_lse = w->tail_lse[i];
    const loss_row_grad gr = loss_row_grad_make(cfg, w, i, wr);
    const double A = wr * gr.a;

    for (int a = 0; a < k; a++)
        if (t_idx[a] >= v0 && t_idx[a] < v0 + vt) s[t_idx[a] - v0] = -INFINITY;
    if (tail_lse == -INFINITY) {
        memset(s, 0, (size_t)vt * sizeof(float));
    } else {
        // s_j <= tail max <= tail_lse for every tail entry: the exponent is <= 0 (up to rounding)
        const float ct = (float)(A * exp(tail_lse - lse) - gr.tail), tl = (float)tail_lse;
#pragma omp simd
        for (int64_t j = 0; j < vt; j++) s[j] = ct * exp_le0(s[j] - tl);
    }
    for (int a = 0; a < k; a++) {
        if (!(t_idx[a] >= v0 && t_idx[a] < v0 + vt)) continue;
        double p = exp((double)t_val[a] - b->t_lse[r]);
        s[t_idx[a] - v0] = (float)(A * exp((double)st[a] - lse) - gr.topk * p);
    }
    if (y >= v0 && y < v0 + vt) s[y - v0] += (float)gr.label;
    if (gr.at_argmax && g >= v0 && g < v0 + vt) s[g - v0] += (float)gr.argmax;
}

// ---------------------------------------------------------------------------- CPU driver

static void cpu_forward_backward(backend *be, const loss_config *cfg, const loss_plan *plan, void *workspace,
                                 const loss_batch *b, loss_rows *rows, float *dx) {
    const int64_t n = b->n, H = b->hidden, V = b->vocab;
    const int k = b->k, K = plan->topk_student;
    const float *x = b->x, *W = b->lm_head;
    loss_work w;
    loss_work_carve(&w, workspace, plan, H, V, k);
    const int64_t width = w.width; // V in mode ROWS
    // Threads only where a loop has enough work: a parallel region costs microseconds, more when
    // the machine is busy, and a tiny tile (tests use width 1) would be all overhead.
    const int par = (int64_t)plan->row_chunk * width >= ((int64_t)1 << 15);

    for (int64_t r0 = 0; r0 < n; r0 += plan->row_chunk) {
        const int64_t nr = n - r0 < plan->row_chunk ? n - r0 : plan->row_chunk;
        const float *xc = x + r0 * H;
        float *dxc = dx ? dx + r0 * H : NULL;
        for (int64_t i = 0; i < nr; i++) stats_init(&w, i, k, K);

        // pass 1: statistics over every tile (one tile of width V in mode ROWS)
        for (int64_t v0 = 0; v0 < V; v0 += width) {
            const int64_t vt = V - v0 < width ? V - v0 : width;
            backend_gemm(be, 0, 1, (int)nr, (int)vt, (int)H, 1.0f, xc, (int)H, W + v0 * H, (int)H, 0.0f, w.logits,
                         (int)vt, DT_F32, DT_F32);
#pragma omp parallel for schedule(static) if (par)
            for (int64_t i = 0; i < nr; i++)
                scan_tile(w.logits + i * vt, v0, vt, loss_row_label(cfg, b, r0 + i), b->t_idx + (r0 + i) * k, k, K,
                          &w, i);
        }
#pragma omp parallel for schedule(static) if (par)
        for (int64_t i = 0; i < nr; i++) loss_finish_row(cfg, b, K, r0 + i, i, &w, rows);
        chunk_weights(cfg, b, r0, nr, rows);
        if (!dx) continue; // forward only: the per-row terms are all

        // pass 2: dlogits and dx. Mode ROWS still holds the chunk's logits; mode TILES recomputes
        // each tile and accumulates its share of dx.
        for (int64_t v0 = 0; v0 < V; v0 += width) {
            const int64_t vt = V - v0 < width ? V - v0 : width;
            if (width < V)
                backend_gemm(be, 0, 1, (int)nr, (int)vt, (int)H, 1.0f, xc, (int)H, W + v0 * H, (int)H, 0.0f,
                             w.logits, (int)vt, DT_F32, DT_F32);
#pragma omp parallel for schedule(static) if (par)
            for (int64_t i = 0; i < nr; i++)
                dlogits_tile(cfg, b, w.logits + i * vt, v0, vt, r0 + i, i, &w, rows->w[r0 + i]);
            backend_gemm(be, 0, 0, (int)nr, (int)H, (int)vt, 1.0f, w.logits, (int)vt, W + v0 * H, (int)H,
                         v0 == 0 ? 0.0f : 1.0f, dxc, (int)H, DT_F32, DT_F32);
        }
    }
}

// cpu_check_ids: every id a scored row uses must be a vocabulary id. Rows with mask 0 may carry
// anything (slots past the end of the packed batch): their terms that need a bad id are 0.
static void cpu_check_ids(const loss_config *cfg, const loss_batch *b) {
    for (int64_t r = 0; r < b->n; r++) {
        if (b->mask[r] == 0) continue;
        int32_t y = loss_row_label(cfg, b, r);
        if (!loss_in_vocab(y, b->vocab))
            fatal("loss: row %lld (mask %g) has label %d outside the vocabulary of %lld", (long long)r,
                  (double)b->mask[r], (int)y, (long long)b->vocab);
        for (int a = 0; a < b->k; a++)
            if (!loss_in_vocab(b->t_idx[r * b->k + a], b->vocab))
                fatal("loss: row %lld (mask %g) has teacher top-k id %d outside the vocabulary of %lld",
                      (long long)r, (double)b->mask[r], (int)b->t_idx[r * b->k + a], (long long)b->vocab);
    }
}

// ---------------------------------------------------------------------------- dispatch

static void check_args(const loss_config *cfg, const loss_plan *plan, const loss_batch *b, const loss_rows *rows) {
    if (b->n < 0 || b->slots < 1 || b->n % b->slots)
        fatal("loss: %d rows are not whole anchors of %d slots", b->n, b->slots);
    if (plan->row_chunk < 1 || plan->row_chunk % b->slots)
        fatal("loss: row_chunk %d is not a positive multiple of the %d slots of an anchor", plan->row_chunk,
              b->slots);
    if (plan->mode != LOSS_MODE_ROWS && plan->mode != LOSS_MODE_TILES) fatal("loss: unknown mode %d", (int)plan->mode);
    if (plan->mode == LOSS_MODE_TILES && plan->vocab_tile < 1) fatal("loss: vocab_tile %d", plan->vocab_tile);
    if (b->hidden < 1 || b->hidden > INT32_MAX || b->vocab < 1 || b->vocab > INT32_MAX)
        fatal("loss: hidden %lld / vocab %lld out of range", (long long)b->hidden, (long long)b->vocab);
    if (b->k < 0 || b->k > b->vocab)
        fatal("loss: teacher top-k %d with a vocabulary of %lld", b->k, (long long)b->vocab);
    if (cfg->label_teacher && b->k < 1) fatal("loss: label_teacher needs the teacher's top-k (k = %d)", b->k);
    if (cfg->weighting == LOSS_WEIGHT_DPACE && !b->in_seq) fatal("loss: D-PACE weights need in_seq");
    if (plan->topk_student < 0 || (plan->topk_student > 0 && (!rows->s_topk_idx || !rows->s_topk_logp)))
        fatal("loss: student top-K %d without its output buffers", plan->topk_student);
}

void loss_forward_backward(backend *be, const loss_config *cfg, const loss_plan *plan, void *workspace,
                           const loss_batch *b, loss_rows *rows, void *dx) {
    check_args(cfg, plan, b, rows);
    if (b->n == 0) return;
    // (untimed here: the GEMMs inside are timed as backend_gemm, the CUDA kernels by their names)
    BACKEND_TABLE(be, loss)->forward_backward(be, cfg, plan, workspace, b, rows, dx);
}

// The CPU instance: the ids checked, then the fused path above. (On CUDA the ids are device memory
// and go unchecked: an id outside the vocabulary is never found in a tile and drops out of the
// terms, CE 0 for a bad label, KL 0 for a bad teacher id, as for the mask-0 rows that may carry such
// ids here.)
static void cpu_loss_forward_backward(backend *be, const loss_config *cfg, const loss_plan *plan, void *workspace,
                                      const loss_batch *b, loss_rows *rows, void *dx) {
    cpu_check_ids(cfg, b);
    cpu_forward_backward(be, cfg, plan, workspace, b, rows, dx);
}

const struct loss_kernels loss_kernels_cpu = {
    .forward_backward = cpu_loss_forward_backward,
    .selector_forward_backward = loss_selector_cpu,
};

// ---------------------------------------------------------------------------- naive reference

// Everything at once, the way a framework does it: the [n, V] logits, then the [n, V] gradient,
// per-row sums in double. It shares only the formulas with the fused path above.
void loss_naive_cpu(const loss_config *cfg, const loss_batch *b, int topk_student, loss_rows *rows, float *dx) {
    const int64_t n = b->n, V = b->vocab, H = b->hidden;
    const int k = b->k, K = topk_student, slots = b->slots;
    double coef[LOSS_ROW_TERMS];
    for (int t = 0; t < LOSS_ROW_TERMS; t++) coef[t] = loss_term_coef(t, cfg);
    if (n == 0) return;
    float *logits = xmalloc((size_t)n * (size_t)V * sizeof(float));
    float *dlogits = xmalloc((size_t)n * (size_t)V * sizeof(float));
    double *lse = xmalloc((size_t)n * sizeof(double)), *log_qr = xmalloc((size_t)n * sizeof(double));
    double *p_r = xmalloc((size_t)n * sizeof(double));

    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)V, (int)H, 1.0f, b->x, (int)H, b->lm_head,
                (int)H, 0.0f, logits, (int)V);

#pragma omp parallel
    {
        int32_t *top_pos = xmalloc((size_t)V * sizeof(int32_t)); // id -> position in the teacher's top-k, or -1
        for (int64_t j = 0; j < V; j++) top_pos[j] = -1;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n; r++) {
            const float *s = logits + r * V;
            const int32_t *ti = b->t_idx + r * k;
            const float *tv = b->t_val + r * k;
            int32_t y = cfg->label_teacher ? ti[0] : b->label[r];
            int ids_ok = 1;
            for (int a = 0; a < k; a++) {
                if (ti[a] >= 0 && ti[a] < V) top_pos[ti[a]] = a;
                else ids_ok = 0;
            }

            double m = -INFINITY;
            int32_t g = -1;
            for (int64_t j = 0; j < V; j++)
                if (s[j] > m) m = s[j], g = (int32_t)j;
            double z = 0, qr = 0;
            int64_t n_tail = 0;
            for (int64_t j = 0; j < V; j++) z += exp(s[j] - m);
            lse[r] = m + log(z);
            for (int64_t j = 0; j < V; j++)
                if (top_pos[j] < 0) qr += exp(s[j] - lse[r]), n_tail++;
            log_qr[r] = log(qr);

            double ce = y >= 0 && y < V ? lse[r] - s[y] : 0.0;
            double sum_p = 0, kl = 0;
            for (int a = 0; a < k && ids_ok; a++) {
                double p = exp((double)tv[a] - b->t_lse[r]);
                sum_p += p;
                if (p > 0) kl += p * (log(p) - (s[ti[a]] - lse[r]));
            }
            p_r[r] = ids_ok && n_tail > 0 ? fmax(0.0, 1.0 - sum_p) : 0.0;
            if (p_r[r] > 0) kl += p_r[r] * (log(p_r[r]) - log_qr[r]);
            // each row term's value (loss_terms.h)
            rows->term[LOSS_TERM_CE][r] = (float)ce;
            rows->term[LOSS_TERM_KL][r] = (float)kl;
            rows->term[LOSS_TERM_CAP][r] = (float)(g != y ? exp(m - lse[r]) : 0.0);
            rows->argmax[r] = g;

            // student top-K: keep a sorted list of the K best (ids ascend, so ties keep the lower id)
            if (K > 0) {
                int32_t *oi = rows->s_topk_idx + r * K;
                float *ov = rows->s_topk_logp + r * K;
                int have = 0;
                for (int64_t j = 0; j < V; j++) {
                    if (have == K && !(s[j] > s[oi[K - 1]])) continue;
                    int c = have < K ? have++ : K - 1;
                    while (c > 0 && s[j] > s[oi[c - 1]]) oi[c] = oi[c - 1], c--;
                    oi[c] = (int32_t)j;
                }
                for (int c = 0; c < K; c++) {
                    if (c < have) ov[c] = (float)(s[oi[c]] - lse[r]);
                    else oi[c] = -1, ov[c] = -INFINITY;
                }
            }
            for (int a = 0; a < k; a++)
                if (ti[a] >= 0 && ti[a] < V) top_pos[ti[a]] = -1;
        }
        free(top_pos);
    }

    // weights, straight from the definitions
    for (int64_t r = 0; r < n; r++) {
        int slot = (int)(r % slots) + 1;
        if (cfg->weighting == LOSS_WEIGHT_DECAY) {
            rows->w[r] = (float)(b->mask[r] * exp(-(slot - 1) / cfg->gamma));
            continue;
        }
        int64_t a0 = r - (slot - 1);
        double sum = 0;
        for (int64_t mm = r; mm < a0 + slots; mm++) {
            if (!b->in_seq[mm]) continue;
            double C = 1;
            for (int64_t i = a0; i <= mm; i++)
                if (b->in_seq[i]) C *= 0.5 + 0.5 * exp(-(double)rows->term[LOSS_TERM_CE][i]);
            sum += C;
        }
        rows->w[r] = (float)(b->mask[r] * sum);
    }

    // the gradient of every logit, term by term
#pragma omp parallel
    {
        int32_t *top_pos = xmalloc((size_t)V * sizeof(int32_t));
        for (int64_t j = 0; j < V; j++) top_pos[j] = -1;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n; r++) {
            const float *s = logits + r * V;
            float *d = dlogits + r * V;
            const int32_t *ti = b->t_idx + r * k;
            const float *tv = b->t_val + r * k;
            double wr = rows->w[r];
            if (wr == 0) {
                memset(d, 0, (size_t)V * sizeof(float));
                continue;
            }
            int32_t y = cfg->label_teacher ? ti[0] : b->label[r], g = rows->argmax[r];
            for (int a = 0; a < k; a++)
                if (ti[a] >= 0 && ti[a] < V) top_pos[ti[a]] = a;
            double rho = p_r[r] > 0 ? exp(log(p_r[r]) - log_qr[r]) : 0.0;
            double c = g != y ? exp(s[g] - lse[r]) : 0.0;
            for (int64_t j = 0; j < V; j++) {
                double q = exp(s[j] - lse[r]);
                double d_ce = q - (j == y);
                double d_kl = top_pos[j] >= 0 ? q - exp((double)tv[top_pos[j]] - b->t_lse[r]) : q * (1.0 - rho);
                double d_cap = c * ((j == g) - q);
                double dt[LOSS_ROW_TERMS] = {[LOSS_TERM_CE] = d_ce, [LOSS_TERM_KL] = d_kl, [LOSS_TERM_CAP] = d_cap};
                double sum = -0.0; // sum_t coef_t d_t, the coefficients from the terms' table
                for (int t = 0; t < LOSS_ROW_TERMS; t++) sum += coef[t] * dt[t];
                d[j] = (float)(wr * sum);
            }
            for (int a = 0; a < k; a++)
                if (ti[a] >= 0 && ti[a] < V) top_pos[ti[a]] = -1;
        }
        free(top_pos);
    }

    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)H, (int)V, 1.0f, dlogits, (int)V, b->lm_head,
                (int)H, 0.0f, dx, (int)H);
    free(logits);
    free(dlogits);
    free(lse);
    free(log_qr);
    free(p_r);
}
