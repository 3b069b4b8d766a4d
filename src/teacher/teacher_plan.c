// teacher_plan.c: what a teacher computes and how much memory it takes (see teacher_plan.h).
#include "teacher/teacher_plan.h"

#include <stdio.h>
#include <string.h>

#include "common/core/bytes.h"
#include "common/core/error.h"
#include "common/kernels/ops.h"

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

// The teacher of a training job runs the students' packed batches whole (T = data.max_tokens_per_batch
// tokens): with teacher.mem_budget set, its weights and the work of such a batch must fit in the
// budget. Sets o->vocab_tile to the tile of the work. -1 with error_set naming both keys.
int teacher_train_budget(const config *cfg, const target_model *m, target_outputs *o, int T) {
    if (cfg->teacher_mem_budget <= 0) return 0;
    int fit = target_plan_tokens(m, o, (size_t)cfg->teacher_mem_budget, T, &o->vocab_tile);
    if (fit >= T) return 0;
    char b1[32], b2[32];
    size_t weights = target_weight_bytes(&m->cfg, ops_act_dtype(m->be));
    if (weights >= (size_t)cfg->teacher_mem_budget) // every expert and layer stays resident on one teacher
        return error_set("the target's weights alone take %s, more than teacher.mem_budget %s: %s does not fit one "
                         "device, and splitting a target over a group of teacher GPUs is not implemented yet "
                         "(docs/distributed.md)",
                         bytes_format(weights, b2, sizeof b2), bytes_format((size_t)cfg->teacher_mem_budget, b1, sizeof b1),
                         m->cfg.arch_name);
    return error_set("teacher.mem_budget %s holds teacher batches of %d tokens, less than the students' "
                     "data.max_tokens_per_batch = %d (weights alone take %s)",
                     bytes_format((size_t)cfg->teacher_mem_budget, b1, sizeof b1), fit, T,
                     bytes_format(target_weight_bytes(&m->cfg, ops_act_dtype(m->be)), b2, sizeof b2));
}

int teacher_plan_print(const world *w, const config *cfg, backend *be) {
    target_model m;
    memset(&m, 0, sizeof m);
    m.be = be;
    if (target_config_load(&m.cfg, cfg->target_path)) return -1;
    teacher_contract tc;
    target_outputs o;
    if (teacher_train_outputs(cfg, &m, &tc, &o)) return -1;
    int budget_rc = teacher_train_budget(cfg, &m, &o, tc.max_tokens); // the plan is printed either way
    size_t weights = target_weight_bytes(&m.cfg, ops_act_dtype(be));
    size_t work = target_work_bytes(&m, &o, tc.max_tokens, tc.max_tokens, o.vocab_tile);
    if (w->rank == 0) {
        char a[32], b[32], c[32], ranks[48] = "each teacher rank";
        if (w->teachers > 0) snprintf(ranks, sizeof ranks, "each of %d teacher rank(s)", w->teachers);
        printf("teacher memory plan (%s, %s)\n  %-26s %12s\n  %-26s %12s  (%d tokens per batch)\n"
               "  %-26s %12s\n", ranks, be->name, "target weights", bytes_format(weights, a, sizeof a),
               "forward work", bytes_format(work, b, sizeof b), tc.max_tokens, "total", bytes_format(weights + work, c, sizeof c));
        if (cfg->teacher_mem_budget > 0)
            printf("  %-26s %12s  (%s)\n", "budget (teacher.mem_budget)", bytes_format((size_t)cfg->teacher_mem_budget, a, sizeof a),
                   budget_rc ? "too small" : "fits");
        fflush(stdout);
    }
    return budget_rc;
}
