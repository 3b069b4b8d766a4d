// teacher_plan.c: what a teacher computes and how much memory it takes (see teacher_plan.h).
#include "teacher/teacher_plan.h"
#include "common/core/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/gpu_reserve.h"
#include "common/comm/protocol.h"
#include "common/comm/wire.h"

#include "common/core/bytes.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/kernels/ops.h"
#include "teacher/target_quant.h"

// "weights X" of m's stage, or with resident quantised weights (teacher.quant_weights, target_quant.h)
// "weights X (quantised, resident) + layer scratch Y", X + Y being target_model_weight_bytes.
static const char *weights_text(const target_model *m, char *buf, size_t n) {
    int64_t l0, l1;
    target_stage_range(m, &l0, &l1);
    size_t all = target_model_weight_bytes(m), scratch = target_stage_weight_scratch(&m->cfg, ops_act_dtype(m->be), l0, l1);
    char a[32], b[32];
    if (scratch == 0) snprintf(buf, n, "weights %s", bytes_format(all, a, sizeof a));
    else
        snprintf(buf, n, "weights %s (quantised, resident) + layer scratch %s", bytes_format(all - scratch, a, sizeof a),
                 bytes_format(scratch, b, sizeof b));
    return buf;
}

int teacher_contract_make(const config *cfg, long long n_target_layers, teacher_contract *c) {
    memset(c, 0, sizeof *c);
    c->topk = (int)cfg->teacher_topk;
    c->max_tokens = (int)cfg->max_tokens_per_batch;
    if (cfg->target_layer_ids.n > 0) {
        c->n_feat = (int)cfg->target_layer_ids.n;
        for (int i = 0; i < c->n_feat; i++) c->layer_ids[i] = cfg->target_layer_ids.v[i];
        return 0;
    }
    c->n_feat = (int)cfg->n_features;
    int64_t ids[64];
    if (target_default_layer_ids(n_target_layers, c->n_feat, ids)) return -1;
    for (int i = 0; i < c->n_feat; i++) c->layer_ids[i] = ids[i];
    return 0;
}

// The outputs a training job's teacher produces from target m (its config read, m->be set).
int teacher_train_outputs(const config *cfg, const target_model *m, teacher_contract *tc, target_outputs *o) {
    if (teacher_contract_make(cfg, m->cfg.n_layers, tc)) return -1;
    memset(o, 0, sizeof *o);
    o->n_feat = tc->n_feat, o->topk = tc->topk, o->vocab_tile = (int)cfg->teacher_vocab_tile;
    for (int i = 0; i < tc->n_feat; i++) o->layer_ids[i] = tc->layer_ids[i];
    return target_outputs_check(m, o);
}

// ----------------------------------------------------------------------------- stage memory

size_t teacher_stage_ring_bytes(const config *cfg, const target_config *tc, const teacher_contract *ct, int G,
                                int stage, int students, int nccl) {
    if (!nccl || G < 1) return 0;
    const size_t e = 2; // bf16, the compute dtype of a CUDA backend (NCCL runs on CUDA only)
    size_t T = (size_t)ct->max_tokens, H = (size_t)tc->hidden, D = (size_t)ct->n_feat * H;
    size_t n_buf = students > 0 ? (size_t)protocol_send_buffers(cfg, G, students) : 2;
    size_t act = T * (H + D) * e, bytes = 0;
    int last = stage >= G - 1;
    if (!last) bytes += n_buf * act;                   // the send ring to the next stage
    if (stage > 0) bytes += act;                       // the receive buffer from the previous stage
    if (last && students > 0) bytes += n_buf * T * D * e; // the payload features to the students
    return bytes;
}

size_t teacher_stage_reserve_bytes(const backend *be, int G, int s, int students, int nccl) {
    gpu_reserve r;
    gpu_reserve_make(&r, be->caps.device, gpu_reserve_teacher_comms(nccl, G, s, students), 1);
    return r.total;
}

// The memory of layers [l0, l1) as stage s of G (m: the target's config and backend, no weights).
static void stage_mem(const config *cfg, const target_model *m, const target_outputs *o, int T, int G, int s,
                      int students, int nccl, teacher_stage_mem *out) {
    int64_t l0, l1;
    target_stage_range(m, &l0, &l1);
    teacher_contract ct = {.n_feat = o->n_feat, .max_tokens = T};
    memset(out, 0, sizeof *out);
    out->stage = s, out->G = G, out->l0 = l0, out->l1 = l1, out->tokens = T;
    out->weights = target_model_weight_bytes(m);
    out->work = target_work_bytes(m, o, T, T, o->vocab_tile);
    out->ring = teacher_stage_ring_bytes(cfg, &m->cfg, &ct, G, s, students, nccl);
    out->reserve = teacher_stage_reserve_bytes(m->be, G, s, students, nccl);
    out->total = out->weights + out->work + out->ring + out->reserve;
}

int teacher_group_mem(const config *cfg, const target_config *tc, backend *be, const target_outputs *o, int T, int G,
                      int students, int nccl, teacher_stage_mem *stages) {
    if (G < 1 || G > tc->n_layers) {
        int64_t b[2];
        return target_stage_split(tc, ops_act_dtype(be), G < 1 ? 0 : G, b); // its error names the key
    }
    int64_t *bounds = xmalloc(((size_t)G + 1) * sizeof(int64_t));
    if (target_stage_split(tc, ops_act_dtype(be), G, bounds)) {
        free(bounds);
        return -1;
    }
    target_model m;
    memset(&m, 0, sizeof m);
    m.cfg = *tc;
    m.be = be;
    for (int s = 0; s < G; s++) {
        m.layer_begin = G > 1 ? bounds[s] : 0;
        m.layer_end = G > 1 ? bounds[s + 1] : 0;
        stage_mem(cfg, &m, o, T, G, s, students, nccl, &stages[s]);
    }
    free(bounds);
    return 0;
}

int teacher_plan_min_group(const config *cfg, const target_config *tc, backend *be, const target_outputs *o, int T,
                           int students, int nccl, size_t budget, size_t *largest, int *best_G) {
    int64_t L = tc->n_layers;
    teacher_stage_mem *st = xmalloc((size_t)(L > 0 ? L : 1) * sizeof *st);
    size_t best = 0;
    int best_g = 0, found = 0;
    for (int G = 1; G <= L && !found; G++) {
        if (teacher_group_mem(cfg, tc, be, o, T, G, students, nccl, st)) break;
        size_t top = 0;
        for (int s = 0; s < G; s++)
            if (st[s].total > top) top = st[s].total;
        if (top <= budget) found = G;
        if (found || best_g == 0 || top < best) best = top, best_g = G;
    }
    free(st);
    if (largest) *largest = best;
    if (best_G) *best_G = best_g;
    return found;
}

// ----------------------------------------------------------------------------- budgets

// "; set world.teacher_group_size to N (its largest stage then takes X of Y)", or why no N does.
static void min_group_advice(const config *cfg, const target_model *m, const target_outputs *o, int T, int students,
                             int nccl, int G, char *buf, size_t n) {
    size_t budget = (size_t)cfg->teacher_mem_budget, largest = 0;
    int best = 0;
    char a[32], b[32];
    int N = teacher_plan_min_group(cfg, &m->cfg, m->be, o, T, students, nccl, budget, &largest, &best);
    if (N > 0 && N != G)
        snprintf(buf, n, "; set world.teacher_group_size to %d (its largest stage then takes %s of %s)", N,
                 bytes_format(largest, a, sizeof a), bytes_format(budget, b, sizeof b));
    else if (N == 0)
        snprintf(buf, n, "; no teacher group fits it either: the smallest largest stage, at world.teacher_group_size = "
                         "%d of the target's %lld layers, takes %s",
                 best, (long long)m->cfg.n_layers, bytes_format(largest, a, sizeof a));
    else
        buf[0] = '\0';
}

// m's stage as stage s of G (s = -1: unknown, the ring then taken as the last stage's when m ends
// the model, else a middle stage's). advice_nccl: whether the group sizes advised count NCCL buffers.
static int stage_budget(const config *cfg, const target_model *m, target_outputs *o, int T, int G, int s, int students,
                        int nccl, int advice_nccl) {
    if (cfg->teacher_mem_budget <= 0) return 0;
    size_t budget = (size_t)cfg->teacher_mem_budget;
    int64_t l0, l1;
    target_stage_range(m, &l0, &l1);
    int whole = l0 == 0 && l1 == m->cfg.n_layers;
    if (whole) G = 1, s = 0;
    int ring_stage = s >= 0 ? s : target_stage_is_last(m) ? G - 1 : 1;
    teacher_contract ct = {.n_feat = o->n_feat, .max_tokens = T};
    size_t ring = teacher_stage_ring_bytes(cfg, &m->cfg, &ct, G, ring_stage, students, nccl);
    size_t reserve = teacher_stage_reserve_bytes(m->be, G, ring_stage, students, nccl), rr = ring + reserve;
    int fit = target_plan_tokens(m, o, budget > rr ? budget - rr : 0, T, &o->vocab_tile);
    if (fit >= T) return 0;
    char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32], advice[256], ring_txt[64] = "", res_txt[64] = "";
    if (reserve) snprintf(res_txt, sizeof res_txt, " (the budget also holds the GPU reserve, %s)", bytes_format(reserve, b6, sizeof b6));
    size_t weights = target_model_weight_bytes(m);
    min_group_advice(cfg, m, o, T, students, advice_nccl, G, advice, sizeof advice);
    if (whole) {
        if (ring) snprintf(ring_txt, sizeof ring_txt, ", its NCCL buffers %s", bytes_format(ring, b3, sizeof b3));
        char wt[128], wq[160] = ""; // resident quantised weights: what the weights are
        if (target_stage_weight_scratch(&m->cfg, ops_act_dtype(m->be), l0, l1) > 0)
            snprintf(wq, sizeof wq, " (%s)", weights_text(m, wt, sizeof wt));
        if (weights + reserve >= budget) // every expert and layer resident on one teacher rank
            return error_set("the target's weights alone take %s%s, more than teacher.mem_budget %s: %s does not fit one "
                             "device%s%s", bytes_format(weights, b2, sizeof b2), wq, bytes_format(budget, b1, sizeof b1),
                             m->cfg.arch_name, advice, res_txt);
        return error_set("teacher.mem_budget %s holds teacher batches of %d tokens, less than the students' "
                         "data.max_tokens_per_batch = %d (weights alone take %s%s)%s%s",
                         bytes_format(budget, b1, sizeof b1), fit, T, bytes_format(weights, b2, sizeof b2), ring_txt,
                         advice, res_txt);
    }
    size_t work = target_work_bytes(m, o, T, T, o->vocab_tile);
    char which[64], holds[96] = "";
    if (s >= 0) snprintf(which, sizeof which, "teacher stage %d of %d", s, G);
    else snprintf(which, sizeof which, "a teacher stage");
    if (fit > 0) snprintf(holds, sizeof holds, " (it holds batches of %d tokens, not %d)", fit, T);
    char wt[128];
    return error_set("%s (layers %lld-%lld) takes %s + forward work %s (%d tokens) + NCCL buffers %s + GPU reserve "
                     "%s = %s, more than teacher.mem_budget %s%s%s",
                     which, (long long)l0, (long long)l1 - 1, weights_text(m, wt, sizeof wt),
                     bytes_format(work, b2, sizeof b2), T, bytes_format(ring, b3, sizeof b3),
                     bytes_format(reserve, b6, sizeof b6), bytes_format(weights + work + rr, b4, sizeof b4),
                     bytes_format(budget, b5, sizeof b5), holds, advice);
}

// The index of m's stage in the split of G (-1 when m's range is not one of its stages).
static int stage_index(const target_model *m, int G) {
    int64_t l0, l1;
    target_stage_range(m, &l0, &l1);
    if (G <= 1 || G > m->cfg.n_layers) return l0 == 0 && l1 == m->cfg.n_layers ? 0 : -1;
    int64_t *bounds = xmalloc(((size_t)G + 1) * sizeof(int64_t));
    int s = -1;
    if (target_stage_split(&m->cfg, ops_act_dtype(m->be), G, bounds) == 0)
        for (int i = 0; i < G && s < 0; i++)
            if (bounds[i] == l0 && bounds[i + 1] == l1) s = i;
    free(bounds);
    return s;
}

int teacher_stage_budget(const config *cfg, const target_model *m, target_outputs *o, int T, int students, int nccl) {
    int G = cfg->teacher_group_size > 1 ? (int)cfg->teacher_group_size : 1;
    return stage_budget(cfg, m, o, T, G, stage_index(m, G), students, nccl, nccl);
}

int teacher_group_budget(const config *cfg, const target_config *tc, backend *be, target_outputs *o, int T, int G,
                         int students, int nccl) {
    target_model m;
    memset(&m, 0, sizeof m);
    m.cfg = *tc;
    m.be = be;
    if (G <= 1 || cfg->teacher_mem_budget <= 0) return stage_budget(cfg, &m, o, T, 1, 0, students, nccl, nccl);
    teacher_stage_mem *st = xmalloc((size_t)G * sizeof *st);
    int rc = teacher_group_mem(cfg, tc, be, o, T, G, students, nccl, st);
    for (int s = 0; rc == 0 && s < G; s++) {
        m.layer_begin = st[s].l0, m.layer_end = st[s].l1;
        rc = stage_budget(cfg, &m, o, T, G, s, students, nccl, nccl);
    }
    free(st);
    return rc;
}

// ----------------------------------------------------------------------------- pinned host memory

size_t teacher_payload_bytes(int T, int64_t k, int64_t D, int on_link) { return wire_bytes(T, T, k, on_link ? 0 : D); }

size_t teacher_moe_pinned_bytes(const backend *be, const target_config *tc, int64_t l0, int64_t l1) {
    if (!be->caps.device) return 0;
    int moe = 0;
    for (int64_t l = l0; l < l1 && l < tc->n_layers; l++) moe |= target_layer_is_sparse(tc, l);
    int64_t cap = tc->n_experts > 64 ? tc->n_experts : 64; // ops_moe_cuda.cu's moe_state_get
    return moe ? size_mul(cap + 1, sizeof(int32_t)) : 0;
}

size_t teacher_pinned_bytes(const backend *be, const config *cfg, const target_config *tc, const teacher_contract *ct,
                            int G, int stage, int students, int on_link) {
    if (G < 1) G = 1;
    int64_t l0 = 0, l1 = tc->n_layers;
    if (G > 1) {
        int64_t *bounds = xmalloc(((size_t)G + 1) * sizeof(int64_t));
        if (target_stage_split(tc, ops_act_dtype(be), G, bounds) == 0) l0 = bounds[stage], l1 = bounds[stage + 1];
        free(bounds);
    }
    size_t bytes = teacher_moe_pinned_bytes(be, tc, l0, l1);
    if (stage == G - 1 && students > 0) {
        size_t one = teacher_payload_bytes(ct->max_tokens, ct->topk, (int64_t)ct->n_feat * tc->hidden, on_link);
        bytes += size_mul(protocol_send_buffers(cfg, G, students), backend_host_bytes(be, one));
    }
    return bytes;
}

// ----------------------------------------------------------------------------- --plan

// The pinned host memory of stage `stage` of G: one line (host memory: outside the device's total).
static void plan_print_pinned(const config *cfg, const backend *be, const target_config *tc, const teacher_contract *ct,
                              int G, int stage, int students, int nccl) {
    size_t v = teacher_pinned_bytes(be, cfg, tc, ct, G, stage, students, nccl), moe = v;
    char a[32], b[32], name[48] = "pinned host memory", ring[128] = "no payload ring";
    if (G > 1) snprintf(name, sizeof name, "pinned host memory, stage %d", stage);
    if (stage == G - 1 && students > 0) {
        size_t one = teacher_payload_bytes(ct->max_tokens, ct->topk, (int64_t)ct->n_feat * tc->hidden, nccl);
        int n = protocol_send_buffers(cfg, G, students);
        moe = v - size_mul(n, backend_host_bytes(be, one));
        snprintf(ring, sizeof ring, "a payload ring of %d buffers of %s%s", n, bytes_format(one, b, sizeof b),
                 nccl ? ", features over NCCL" : "");
    }
    char m[48] = "";
    if (moe) snprintf(m, sizeof m, " + MoE counts %zu B", moe);
    printf("  %-26s %12s  (%zu bytes; host memory, not in the total: %s%s)\n", name, bytes_format(v, a, sizeof a), v,
           be->caps.pinned_transfers ? ring : "cpu: plain memory", m);
}

// G > 1: one row per stage, the split's balance, the stages' bytes.
static int plan_print_group(const world *w, const config *cfg, backend *be, const target_model *m, target_outputs *o,
                            int T) {
    int G = w->group_size;
    int nccl = be->caps.device_links && strcmp(cfg->payload, "mpi") != 0 && w->students > 0;
    int budget_rc = teacher_group_budget(cfg, &m->cfg, be, o, T, G, w->students, nccl); // printed either way
    char err[1024] = "";
    if (budget_rc) snprintf(err, sizeof err, "%s", error_msg());
    teacher_stage_mem *st = xmalloc((size_t)G * sizeof *st);
    if (teacher_group_mem(cfg, &m->cfg, be, o, T, G, w->students, nccl, st)) {
        free(st);
        return -1;
    }
    size_t budget = cfg->teacher_mem_budget > 0 ? (size_t)cfg->teacher_mem_budget : 0;
    if (w->rank == 0) {
        char a[32], b[32], c[32], d[32], e[32], ranks[96];
        if (w->teachers > 0)
            snprintf(ranks, sizeof ranks, "%d group(s) of %d stage rank(s) = %d teacher rank(s)", w->groups, G,
                     w->teachers);
        else snprintf(ranks, sizeof ranks, "each teacher group of %d stage rank(s)", G);
        printf("teacher memory plan (%s, %s)\n", ranks, be->name);
        printf("  %-5s %-12s %12s %14s %14s %12s %12s  (%d tokens per batch)\n", "stage", "layers", "weights",
               "forward work", "NCCL buffers", "GPU reserve", "total", T);
        int big = 0, small = 0;
        for (int s = 0; s < G; s++) {
            char layers[48];
            snprintf(layers, sizeof layers, "[%lld, %lld)", (long long)st[s].l0, (long long)st[s].l1);
            char r[32];
            printf("  %-5d %-12s %12s %14s %14s %12s %12s  %s\n", s, layers, bytes_format(st[s].weights, a, sizeof a),
                   bytes_format(st[s].work, b, sizeof b), bytes_format(st[s].ring, c, sizeof c),
                   bytes_format(st[s].reserve, r, sizeof r), bytes_format(st[s].total, d, sizeof d),
                   budget == 0 ? "(no budget)" : st[s].total <= budget ? "fits" : "too small");
            if (st[s].weights > st[big].weights) big = s;
            if (st[s].weights < st[small].weights) small = s;
        }
        target_model sm = *m; // each stage's weights, when quantised ones stay resident
        for (int s = 0; s < G; s++) {
            sm.layer_begin = st[s].l0, sm.layer_end = st[s].l1;
            char wt[128];
            if (target_stage_weight_scratch(&m->cfg, ops_act_dtype(be), st[s].l0, st[s].l1) > 0)
                printf("  stage %d: %s\n", s, weights_text(&sm, wt, sizeof wt));
        }
        if (m->cfg.quant.resident) {
            char qd[64];
            printf("  (quantised weights: %s, kept on the device as stored, each layer's de-quantised into the stage's "
                   "layer scratch before it runs: teacher.quant_weights resident)\n",
                   target_quant_describe(&m->cfg.quant, qd, sizeof qd));
        }
        size_t whole = target_weight_bytes(&m->cfg, ops_act_dtype(be));
        printf("  split by weight bytes: largest stage %d (%s), smallest stage %d (%s): %.3fx; the whole target %s\n", big,
               bytes_format(st[big].weights, a, sizeof a), small, bytes_format(st[small].weights, b, sizeof b),
               st[small].weights ? (double)st[big].weights / (double)st[small].weights : 0.0,
               bytes_format(whole, e, sizeof e));
        if (budget)
            printf("  %-26s %12s  (%s)\n", "budget (teacher.mem_budget)", bytes_format(budget, a, sizeof a),
                   budget_rc ? "too small" : "fits");
        if (nccl)
            printf("  (NCCL buffers: each stage's send ring to the next, its receive buffer, the last stage's payload "
                   "ring; transport.payload %s, every rank on its own GPU; --transport.payload=mpi plans without them)\n",
                   cfg->payload);
        teacher_contract ct = {.n_feat = o->n_feat, .topk = o->topk, .max_tokens = T};
        for (int s = 0; s < G; s++) plan_print_pinned(cfg, be, &m->cfg, &ct, G, s, w->students, nccl);
        for (int s = 0; s < G; s++)
            printf("teacher_stage_bytes %d %lld %lld %zu %zu %zu %zu %zu\n", s, (long long)st[s].l0, (long long)st[s].l1,
                   st[s].weights, st[s].work, st[s].ring, st[s].reserve, st[s].total);
        fflush(stdout);
    }
    free(st);
    if (budget_rc) error_set("%s", err);
    return budget_rc;
}

int teacher_plan_print(const world *w, const config *cfg, backend *be) {
    target_model m;
    memset(&m, 0, sizeof m);
    m.be = be;
    if (target_config_load(&m.cfg, cfg->target_path)) return -1;
    teacher_contract tc;
    target_outputs o;
    if (teacher_train_outputs(cfg, &m, &tc, &o)) return -1;
    if (w->group_size > 1) return plan_print_group(w, cfg, be, &m, &o, tc.max_tokens);
    // the plan is printed either way; a group size advised is planned as plan_print_group would plan it
    int nccl = be->caps.device_links && strcmp(cfg->payload, "mpi") != 0 && w->students > 0;
    int budget_rc = stage_budget(cfg, &m, &o, tc.max_tokens, 1, 0, w->students, 0, nccl);
    size_t weights = target_weight_bytes(&m.cfg, ops_act_dtype(be));
    size_t work = target_work_bytes(&m, &o, tc.max_tokens, tc.max_tokens, o.vocab_tile);
    gpu_reserve gr;
    gpu_reserve_make(&gr, be->caps.device, gpu_reserve_teacher_comms(nccl, 1, 0, w->students), 1);
    size_t ring = teacher_stage_ring_bytes(cfg, &m.cfg, &tc, 1, 0, w->students, nccl);
    if (w->rank == 0) {
        char a[32], b[32], c[32], d[32], e[32], desc[160], ranks[48] = "each teacher rank";
        if (w->teachers > 0) snprintf(ranks, sizeof ranks, "each of %d teacher rank(s)", w->teachers);
        char wt[160] = "", wq[128];
        if (target_stage_weight_scratch(&m.cfg, ops_act_dtype(be), 0, m.cfg.n_layers) > 0)
            snprintf(wt, sizeof wt, "  (%s)", weights_text(&m, wq, sizeof wq));
        printf("teacher memory plan (%s, %s)\n  %-26s %12s%s\n  %-26s %12s  (%d tokens per batch)\n"
               "  %-26s %12s\n  %-26s %12s  (%s)\n  %-26s %12s\nteacher_total_bytes %zu\n", ranks, be->name,
               "target weights", bytes_format(weights, a, sizeof a), wt, "forward work", bytes_format(work, b, sizeof b),
               tc.max_tokens, "NCCL buffers", bytes_format(ring, e, sizeof e), "GPU reserve", bytes_format(gr.total, d, sizeof d),
               gpu_reserve_describe(&gr, desc, sizeof desc), "total", bytes_format(weights + work + ring + gr.total, c, sizeof c),
               weights + work + ring + gr.total);
        if (cfg->teacher_mem_budget > 0)
            printf("  %-26s %12s  (%s)\n", "budget (teacher.mem_budget)", bytes_format((size_t)cfg->teacher_mem_budget, a, sizeof a),
                   budget_rc ? "too small" : "fits");
        plan_print_pinned(cfg, be, &m.cfg, &tc, 1, 0, w->students, nccl);
        fflush(stdout);
    }
    return budget_rc;
}

// Settings: the keys of a teacher's batches, memory and outputs (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key teacher_keys[] = {
    {"teacher.topk", CFG_INT, CONFIG_F(teacher_topk), "32", "k of the top-k target logits each teacher sends per token", NULL, 1, 256},
    {"teacher.max_tokens", CFG_INT, CONFIG_F(teacher_max_tokens), "8192", "tokens per packed teacher batch (a longer sample is an error); in train mode the teachers run the students' batches whole, so data.max_tokens_per_batch must not exceed it", NULL, 1, 1073741824},
    {"teacher.mem_budget", CFG_BYTES, CONFIG_F(teacher_mem_budget), "0", "teacher memory budget (weights + work); 0 = no limit; the teacher's batches must fit in it: teacher.max_tokens in dump-features, data.max_tokens_per_batch in train mode (--plan shows the plan)", NULL, CONFIG_SIZES},
    {"teacher.vocab_tile", CFG_INT, CONFIG_F(teacher_vocab_tile), "0", "vocabulary columns of the lm_head per tile; 0 = min(V, 8192)", NULL, 0, 1073741824},
    {"teacher.quant_weights", CFG_STRING, CONFIG_F(teacher_quant_weights), "resident", "a quantised target (config.json's quantization_config: fp8 blocks, mxfp4): resident keeps its quantised weights on the device as stored (codes + scales) and de-quantises each layer's into one scratch, shared by the stage's layers, just before the layer runs (about half the device memory of bf16 weights for FP8, a quarter for MXFP4, plus the largest layer at compute size; --plan counts it so); dequantize de-quantises them at load into the compute dtype (every weight at compute size). The outputs are bit-identical either way (docs/teacher.md, Quantised checkpoints)", "resident|dequantize", CONFIG_NOLIM},
};
const config_key_set teacher_settings = CONFIG_KEY_SET(teacher_keys, NULL);
