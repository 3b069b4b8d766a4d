// plan.c: choose the chunking and the loss mode that fit a memory budget (see plan.h).
#include "student/plan.h"

#include <string.h>

#include "common/backend/arena.h"
#include "common/core/bytes.h"
#include "common/core/error.h"
#include "common/backend/backend_cuda.h" // CUDA_CUBLAS_WORKSPACE_BYTES: a plan for cuda in any build (--plan)
#include "student/drafter.h"

// The drafter's share: computed from its own carving (drafter_bytes) split by formula into parts
// for the report; the total is the carving's.
// The drafter's share, from its own carving (drafter_bytes); the frozen part is what remains after
// the parameter-shaped buffers (it includes the RoPE table and alignment padding).
static void plan_drafter(const drafter_config *c, const backend *be, const plan_request *r, plan_breakdown *bd) {
    size_t total = drafter_bytes(c, be, r->tied);
    size_t numel = (size_t)drafter_param_numel(c);
    bd->weights_master = numel * sizeof(float);
    bd->grads = numel * sizeof(float);
    bd->weights_compute = be->kind == BACKEND_CUDA ? numel * 2 : 0;
    bd->frozen = total - bd->weights_master - bd->grads - bd->weights_compute;
    bd->adam = r->adam ? 2 * numel * sizeof(float) : 0;
    bd->ema = r->ema ? numel * sizeof(float) : 0;
    bd->links = r->link_bytes;
    bd->library = be->kind == BACKEND_CUDA ? CUDA_CUBLAS_WORKSPACE_BYTES : 0;
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
    bd->total = bd->weights_master + bd->grads + bd->weights_compute + bd->adam + bd->ema + bd->frozen + bd->receive +
                bd->context + bd->chunk + bd->loss + bd->library + bd->links;
    return bd->total;
}

// The loss options for a chunk of C anchors, most preferred first. Returns how many.
static int plan_loss_options(const drafter_config *c, const plan_request *r, int C, loss_plan *opt) {
    int slots = (int)c->block_size - 1, R = C * slots, n = 0;
    int V = (int)c->vocab, tile = V < 4096 ? V : 4096;
    if (r->force_mode == LOSS_MODE_TILES || r->force_mode < 0) {
        if (r->force_mode < 0) { // ROWS: all the rows, then one anchor's rows
            opt[n++] = (loss_plan){LOSS_MODE_ROWS, R, V, 0};
            if (R > slots) opt[n++] = (loss_plan){LOSS_MODE_ROWS, slots, V, 0};
        }
        opt[n++] = (loss_plan){LOSS_MODE_TILES, R, tile, 0};
        opt[n++] = (loss_plan){LOSS_MODE_TILES, slots, tile < 512 ? tile : 512, 0};
    } else {
        opt[n++] = (loss_plan){LOSS_MODE_ROWS, R, V, 0};
        if (R > slots) opt[n++] = (loss_plan){LOSS_MODE_ROWS, slots, V, 0};
    }
    for (int i = 0; i < n; i++) {
        if (r->force_row_chunk > 0) opt[i].row_chunk = r->force_row_chunk < R ? r->force_row_chunk : R;
        if (r->force_vocab_tile > 0 && opt[i].mode == LOSS_MODE_TILES) opt[i].vocab_tile = r->force_vocab_tile;
        opt[i].topk_student = 8;
    }
    return n;
}

// Does C fit? The first loss option that fits goes to *p.
static int plan_fits(const drafter_config *c, const backend *be, const plan_request *r, int C, student_plan *p,
                     plan_breakdown *bd) {
    loss_plan opt[4];
    int n = plan_loss_options(c, r, C, opt);
    for (int i = 0; i < n; i++) {
        student_plan t = {.max_tokens = r->max_tokens, .max_seqs = r->max_seqs, .chunk_anchors = C, .k = r->k, .loss = opt[i]};
        plan_breakdown b = *bd;
        if (r->budget == 0 || plan_total(c, be, &t, &b) <= r->budget) {
            plan_total(c, be, &t, &b);
            *p = t;
            *bd = b;
            return 1;
        }
    }
    return 0;
}

int plan_make(const drafter_config *c, const backend *be, const plan_request *r, student_plan *out, plan_breakdown *bd) {
    memset(bd, 0, sizeof *bd);
    plan_drafter(c, be, r, bd);
    int hi = r->force_chunk > 0 ? r->force_chunk : (r->max_anchors > 0 ? r->max_anchors : 1);
    if (r->force_chunk > 0 || r->budget == 0) {
        if (plan_fits(c, be, r, hi, out, bd)) return 0;
    } else if (plan_fits(c, be, r, hi, out, bd)) {
        return 0;
    } else { // the largest C that fits (memory grows with C)
        int lo = 0;
        student_plan best;
        plan_breakdown best_bd = *bd;
        while (lo < hi - 1) {
            int mid = lo + (hi - lo) / 2;
            plan_breakdown b = *bd;
            student_plan t;
            if (plan_fits(c, be, r, mid, &t, &b)) {
                lo = mid;
                best = t;
                best_bd = b;
            } else {
                hi = mid;
            }
        }
        if (lo >= 1) {
            *out = best;
            *bd = best_bd;
            return 0;
        }
    }
    // Infeasible: report what the smallest configuration needs.
    plan_request small = *r;
    small.budget = 0;
    small.force_mode = LOSS_MODE_TILES;
    small.force_row_chunk = (int)c->block_size - 1;
    small.force_vocab_tile = 256;
    student_plan t;
    plan_breakdown b = *bd;
    plan_fits(c, be, &small, 1, &t, &b);
    char need[32], have[32];
    return error_set("memory budget %s is too small for this drafter and batch (%d tokens): it needs at least %s "
                     "(%llu bytes) with 1 anchor per chunk and the tiled loss",
                     bytes_format(r->budget, have, sizeof have), r->max_tokens, bytes_format(b.total, need, sizeof need),
                     (unsigned long long)b.total);
}

void plan_print(FILE *f, const plan_breakdown *bd, const student_plan *p, size_t budget) {
    plan_print_titled(f, "student memory plan", bd, p, budget);
}

void plan_print_titled(FILE *f, const char *title, const plan_breakdown *bd, const student_plan *p, size_t budget) {
    char b[32];
    struct { const char *name; size_t v; } rows[] = {
        {"weights (fp32 master)", bd->weights_master}, {"gradients (fp32)", bd->grads},
        {"weights (compute copy)", bd->weights_compute}, {"AdamW moments", bd->adam}, {"EMA", bd->ema},
        {"frozen embed + lm_head", bd->frozen}, {"receive buffers", bd->receive},
        {"context + K/V + grads", bd->context}, {"chunk activations", bd->chunk}, {"loss workspace", bd->loss},
        {"library workspaces", bd->library}, {"NCCL receive ring", bd->links},
    };
    fprintf(f, "%s\n", title);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        fprintf(f, "  %-26s %12s  (%zu bytes)\n", rows[i].name, bytes_format(rows[i].v, b, sizeof b), rows[i].v);
    fprintf(f, "  %-26s %12s  (%zu bytes)\n", "total", bytes_format(bd->total, b, sizeof b), bd->total);
    fprintf(f, "plan_total_bytes %zu\n", bd->total);
    if (budget) fprintf(f, "  %-26s %12s\n", "budget", bytes_format(budget, b, sizeof b));
    fprintf(f, "  anchors per chunk %d, loss mode %s, rows per loss chunk %d, vocabulary tile %d\n", p->chunk_anchors,
            p->loss.mode == LOSS_MODE_ROWS ? "rows (2 GEMMs)" : "tiles (3 GEMMs)", p->loss.row_chunk, p->loss.vocab_tile);
}
