// memory_plan.c: choose the chunking and the loss mode that fit a memory budget (see memory_plan.h).
#include "student/model/memory_plan.h"

#include <math.h>
#include <string.h>

#include "common/backend/arena.h"
#include "common/core/bytes.h"
#include "common/core/error.h"
#include "student/model/drafter.h"

// The drafter's share: computed from its own carving (drafter_bytes) split by formula into parts
// for the report; the total is the carving's.
// The drafter's share, from its own carving (drafter_bytes); the frozen part is what remains after
// the parameter-shaped buffers (it includes the RoPE table and alignment padding).
static void plan_drafter(const drafter_config *c, const backend *be, const plan_request *r, plan_breakdown *bd) {
    size_t total = drafter_bytes(c, be, r->tied);
    size_t numel = (size_t)drafter_param_numel(c);
    bd->weights_master = numel * sizeof(float);
    bd->grads = numel * sizeof(float);
    bd->weights_compute = numel * be->caps.compute_weight_bytes;
    bd->frozen = total - bd->weights_master - bd->grads - bd->weights_compute;
    bd->adam = r->adam ? 2 * numel * sizeof(float) : 0;
    bd->ema = r->ema ? numel * sizeof(float) : 0;
    bd->optim_scratch = r->adam ? r->optim_scratch : 0;
    bd->links = r->link_bytes;
    bd->host_payload = r->host_payload, bd->host_grads = r->host_grads;
    bd->host_pinned = r->host_payload + r->host_grads;
    bd->library = be->caps.library_workspace;
}

static size_t plan_total(const drafter_config *c, const backend *be, const student_plan *p, plan_breakdown *bd) {
    drafter d;
    memset(&d, 0, sizeof d);
    d.cfg = *c;
    d.be = (backend *)be;
    size_t parts[STEP_WORK_PARTS];
    student_work_parts(&d, p, parts);
    bd->receive = parts[0];
    bd->context = parts[1];
    bd->chunk = parts[2];
    bd->loss = parts[3];
    bd->total = bd->weights_master + bd->grads + bd->weights_compute + bd->adam + bd->ema + bd->optim_scratch +
                bd->frozen + bd->receive + bd->context + bd->chunk + bd->loss + bd->library + bd->links;
    return bd->total;
}

// ---------------------------------------------------------------- the step-time estimate
// The backend's rates (backend_caps, filled by backend.c from these figures; not a start-up
// measurement: --plan opens no device, and the plan must be the same in --plan and in the job,
// whatever else runs on the machine then). CPU, per thread:
// OpenBLAS sgemm (fp32) at about 100 GFLOP/s at large sizes (the machine: 120 at n = 2048,
// 95 over a step's GEMMs) and m / (m + 40) of that at m rows (measured at n 32000, k 512: m 15:
// 27 %, 60: 61 %, 240: 84 %, 960: 94 %); the scalar DFlash attention about 8 GFLOP/s; the loss scan
// (exp, max, top-K per logit) about 1 ns per logit; an op's fixed cost (OpenMP fan-out,
// bookkeeping) about 10 us. CUDA (bf16 tensor cores, H100/H200 class): 400 TFLOP/s at large sizes,
// half of it at 128 rows; the attention kernels 100 TFLOP/s; the scan 5e11 logits/s; 8 us per op
// (launches, small kernels). The choice depends only on the ratios; --plan prints the estimate.
typedef struct {
    double gemm, gemm_half, attn, scan, op;
} plan_rates;

static plan_rates plan_backend_rates(const backend *be) {
    const backend_caps *c = &be->caps;
    return (plan_rates){c->rate_gemm, c->rate_gemm_half_rows, c->rate_attn, c->rate_scan, c->rate_op};
}

// Seconds of a GEMM of `flops` whose smallest dimension is m.
static double plan_gemm_s(const plan_rates *k, double flops, double m) {
    return flops / (k->gemm * (m / (m + k->gemm_half)));
}

// One chunk of c anchors under loss plan lp.
static double plan_chunk_s(const drafter_config *c, const plan_rates *k, double keys, int ca, const loss_plan *lp) {
    double B = (double)c->block_size, slots = B - 1, H = (double)c->hidden, V = (double)c->vocab;
    double T = ca * B, R = ca * slots, L = (double)c->n_layers;
    double qd = (double)(c->n_heads * c->head_dim), kvd = (double)(c->n_kv_heads * c->head_dim);
    double lin = H * qd + 2 * H * kvd + qd * H + 3 * H * (double)c->intermediate; // per layer, per token
    double s = L * plan_gemm_s(k, 3 * 2 * T * lin, T);                            // forward, dX, dW
    s += L * 3 * 4 * T * qd * keys / k->attn;                                      // QK^T and PV, forward + backward
    double rc = lp->row_chunk > 0 && lp->row_chunk < R ? lp->row_chunk : R;
    double subs = (double)(((long)R + (long)rc - 1) / (long)rc);
    if (lp->mode == LOSS_MODE_ROWS) {
        s += plan_gemm_s(k, 2 * 2 * R * H * V, rc) + R * V / k->scan + subs * 4 * k->op;
    } else {
        double w = lp->vocab_tile > 0 && lp->vocab_tile < V ? lp->vocab_tile : V, tiles = ceil(V / w);
        s += plan_gemm_s(k, 3 * 2 * R * H * V, rc < w ? rc : w) + 2 * R * V / k->scan + subs * tiles * 3 * k->op;
    }
    return s + (30 * L + 20) * k->op;
}

double plan_step_seconds(const drafter_config *c, const backend *be, const plan_request *r, const student_plan *p) {
    plan_rates k = plan_backend_rates(be);
    int A = r->max_anchors > 0 ? r->max_anchors : 1, C = p->chunk_anchors;
    // an anchor sees on average half its sequence, plus its block (max_seqs = max_tokens is only a
    // bound, as train.c passes it: then one sequence of the whole batch)
    double S = r->max_tokens, H = (double)c->hidden;
    double seqs = r->max_seqs > 0 && r->max_seqs < r->max_tokens ? r->max_seqs : 1, ctx = S / seqs / 2, keys = 0;
    for (int64_t l = 0; l < c->n_layers; l++)
        keys += (c->layer_sliding[l] && c->sliding_window > 0 && c->sliding_window < ctx ? (double)c->sliding_window : ctx) +
                (double)c->block_size;
    keys /= c->n_layers > 0 ? (double)c->n_layers : 1;
    int full = A / C, rest = A % C;
    double s = full * plan_chunk_s(c, &k, keys, C, &p->loss);
    if (rest) s += plan_chunk_s(c, &k, keys, rest, &p->loss);
    // the context (once per step): fc forward + dW, each layer's k/v projections forward + dX + dW
    double kvd = (double)(c->n_kv_heads * c->head_dim);
    s += plan_gemm_s(&k, 2 * 2 * S * c->n_feat * H * H, S) +
         (double)c->n_layers * plan_gemm_s(&k, 3 * 2 * S * H * 2 * kvd, S);
    return s;
}

// Does this plan fit? (budget 0: everything fits.) Its breakdown goes to *b.
static int plan_try(const drafter_config *c, const backend *be, const plan_request *r, const student_plan *t,
                    plan_breakdown *b) {
    return plan_total(c, be, t, b) <= r->budget || r->budget == 0;
}

static student_plan plan_with(const plan_request *r, int C, loss_mode mode, int row_anchors, int slots, int tile) {
    return (student_plan){.max_tokens = r->max_tokens, .max_seqs = r->max_seqs, .chunk_anchors = C, .k = r->k,
                          .loss = {mode, row_anchors * slots, tile, 8}};
}

// The fastest plan of C anchors per chunk in one loss mode and tile width that fits: the most rows
// per loss chunk that fit (memory grows with them and the time falls). 0 when none fits.
static int plan_best_rows(const drafter_config *c, const backend *be, const plan_request *r, int C, loss_mode mode,
                          int tile, student_plan *out, plan_breakdown *bd) {
    int slots = (int)c->block_size - 1;
    if (r->force_row_chunk > 0) { // the rows the caller asked for (at most the chunk's)
        student_plan t = plan_with(r, C, mode, 1, slots, tile);
        t.loss.row_chunk = r->force_row_chunk < C * slots ? r->force_row_chunk : C * slots;
        plan_breakdown b = *bd;
        if (!plan_try(c, be, r, &t, &b)) return 0;
        *out = t, *bd = b;
        return 1;
    }
    plan_breakdown b = *bd;
    student_plan t = plan_with(r, C, mode, C, slots, tile);
    if (plan_try(c, be, r, &t, &b)) { *out = t, *bd = b; return 1; }
    t = plan_with(r, C, mode, 1, slots, tile);
    b = *bd;
    if (!plan_try(c, be, r, &t, &b)) return 0;
    *out = t, *bd = b;
    int lo = 1, hi = C; // lo fits, hi does not
    while (lo < hi - 1) {
        int mid = lo + (hi - lo) / 2;
        t = plan_with(r, C, mode, mid, slots, tile);
        b = *bd;
        if (plan_try(c, be, r, &t, &b)) lo = mid, *out = t, *bd = b;
        else hi = mid;
    }
    return 1;
}

typedef struct {
    student_plan p;
    plan_breakdown bd;
    double s;
    int ok;
} plan_cand;

// Keep the best and the runner-up (the best of another C or loss mode).
static void plan_offer(plan_cand *best, plan_cand *second, const plan_cand *x) {
    if (!best->ok || x->s < best->s) {
        if (best->ok && (best->p.chunk_anchors != x->p.chunk_anchors || best->p.loss.mode != x->p.loss.mode)) *second = *best;
        *best = *x;
    } else if ((x->p.chunk_anchors != best->p.chunk_anchors || x->p.loss.mode != best->p.loss.mode) &&
               (!second->ok || x->s < second->s)) {
        *second = *x;
    }
}

int plan_make(const drafter_config *c, const backend *be, const plan_request *r, student_plan *out, plan_breakdown *bd) {
    memset(bd, 0, sizeof *bd);
    plan_drafter(c, be, r, bd);
    int A = r->max_anchors > 0 ? r->max_anchors : 1, V = (int)c->vocab;
    plan_cand best = {0}, second = {0};
    // C: the largest value for each number of chunks (A / n rounded up), largest first
    for (int n = 1, prevC = 0; n <= A; n++) {
        int C = r->force_chunk > 0 ? r->force_chunk : (A + n - 1) / n;
        if (C == prevC) continue;
        prevC = C;
        for (int m = 0; m < 2; m++) {
            loss_mode mode = m ? LOSS_MODE_TILES : LOSS_MODE_ROWS;
            if (r->force_mode >= 0 && (int)mode != r->force_mode) continue;
            int tiles[6], nt = 0; // vocabulary tiles, widest first (mode ROWS: the whole vocabulary)
            if (mode == LOSS_MODE_ROWS) tiles[nt++] = V;
            else if (r->force_vocab_tile > 0) tiles[nt++] = r->force_vocab_tile;
            else
                for (int w = 4096; w >= 256; w /= 2)
                    if (w < V || nt == 0) tiles[nt++] = w < V ? w : V;
            for (int ti = 0; ti < nt; ti++) {
                plan_cand x = {.bd = *bd, .ok = 1};
                if (plan_best_rows(c, be, r, C, mode, tiles[ti], &x.p, &x.bd)) {
                    x.s = plan_step_seconds(c, be, r, &x.p);
                    plan_offer(&best, &second, &x);
                }
            }
        }
        if (r->force_chunk > 0) break;
    }
    if (best.ok) {
        *out = best.p;
        *bd = best.bd;
        bd->est_s = best.s;
        bd->anchors = A;
        bd->has_runner_up = second.ok;
        if (second.ok) bd->runner_up = second.p, bd->runner_up_s = second.s;
        return 0;
    }
    // Infeasible: report what the smallest configuration needs.
    student_plan t = plan_with(r, 1, LOSS_MODE_TILES, 1, (int)c->block_size - 1, V < 256 ? V : 256);
    plan_breakdown b = *bd;
    plan_total(c, be, &t, &b);
    char need[32], have[32];
    return error_set("memory budget %s is too small for this drafter and batch (%d tokens): it needs at least %s "
                     "(%llu bytes) with 1 anchor per chunk and the tiled loss; raise train.mem_budget, or lower "
                     "data.max_tokens_per_batch or the drafter's size (drafter.layers, drafter.intermediate)",
                     bytes_format(r->budget, have, sizeof have), r->max_tokens, bytes_format(b.total, need, sizeof need),
                     (unsigned long long)b.total);
}

void plan_print(FILE *f, const plan_breakdown *bd, const student_plan *p, size_t budget) {
    plan_print_titled(f, "student memory plan", bd, p, budget);
}

void plan_print_titled(FILE *f, const char *title, const plan_breakdown *bd, const student_plan *p, size_t budget) {
    char b[32];
    static const char muon_row[] = "Muon scratch"; // printed only with Muon: an AdamW plan reads as before
    struct { const char *name; size_t v; } rows[] = {
        {"weights (fp32 master)", bd->weights_master}, {"gradients (fp32)", bd->grads},
        {"weights (compute copy)", bd->weights_compute}, {"AdamW moments", bd->adam}, {"EMA", bd->ema},
        {muon_row, bd->optim_scratch},
        {"frozen embed + lm_head", bd->frozen}, {"receive buffers", bd->receive},
        {"context + K/V + grads", bd->context}, {"chunk activations", bd->chunk}, {"loss workspace", bd->loss},
        {"library workspaces", bd->library}, {"NCCL receive ring", bd->links},
    };
    fprintf(f, "%s\n", title);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].v || rows[i].name != muon_row)
            fprintf(f, "  %-26s %12s  (%zu bytes)\n", rows[i].name, bytes_format(rows[i].v, b, sizeof b), rows[i].v);
    fprintf(f, "  %-26s %12s  (%zu bytes)\n", "total", bytes_format(bd->total, b, sizeof b), bd->total);
    fprintf(f, "plan_total_bytes %zu\n", bd->total);
    if (budget) fprintf(f, "  %-26s %12s\n", "budget", bytes_format(budget, b, sizeof b));
    if (bd->host_pinned) {
        char c[32], d[32];
        fprintf(f, "  %-26s %12s  (%zu bytes; host memory, not in the total: payload buffers %s + gradient ring %s)\n",
                "pinned host memory", bytes_format(bd->host_pinned, b, sizeof b), bd->host_pinned,
                bytes_format(bd->host_payload, c, sizeof c), bytes_format(bd->host_grads, d, sizeof d));
    }
    fprintf(f, "  anchors per chunk %d, loss mode %s, rows per loss chunk %d, vocabulary tile %d\n", p->chunk_anchors,
            p->loss.mode == LOSS_MODE_ROWS ? "rows (2 GEMMs)" : "tiles (3 GEMMs)", p->loss.row_chunk, p->loss.vocab_tile);
    // the loss's widest GEMM operand: its bf16 dlogits, read in place with row stride 2 x tile
    // (docs/student.md "Rows per loss chunk and the 64-bit cuBLAS calls")
    int64_t rc = p->loss.row_chunk, vt = p->loss.vocab_tile, span = rc > 0 ? 2 * vt * (rc - 1) + vt : 0;
    if (span >= ((int64_t)1 << 31))
        fprintf(f, "  loss GEMM operands span up to %lld elements (2^31 or more): cuBLAS's 64-bit interface on CUDA\n",
                (long long)span);
    fprintf(f, "  estimated step time %.3g s (%d anchors)\n", bd->est_s, bd->anchors);
    const student_plan *q = &bd->runner_up;
    if (bd->has_runner_up)
        fprintf(f, "  runner-up: anchors per chunk %d, loss mode %s, rows per loss chunk %d, vocabulary tile %d: %.3g s\n",
                q->chunk_anchors, q->loss.mode == LOSS_MODE_ROWS ? "rows (2 GEMMs)" : "tiles (3 GEMMs)", q->loss.row_chunk,
                q->loss.vocab_tile, bd->runner_up_s);
    else
        fprintf(f, "  runner-up: none (no other chunking or loss mode fits)\n");
}
