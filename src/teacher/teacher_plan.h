// teacher_plan.h: what a training job's teacher computes (the contract teachers and students derive
// alike) and how much memory it takes, from the target's config.json alone: per stage when the
// teacher is a group of ranks (world.teacher_group_size, target_stage_split).
#pragma once

#include "common/backend/backend.h"
#include "common/comm/world.h"
#include "common/core/config.h"
#include "teacher/target.h"

// The settings teachers and students must agree on, derived the same way on both sides.
typedef struct {
    int n_feat;
    long long layer_ids[64];
    int topk;
    int max_tokens;
} teacher_contract;

// teacher_contract_make: layer ids (configured or SPEC §2 default for the target's depth), top-k
// and batch size. -1 with error_set.
int teacher_contract_make(const config *cfg, long long n_target_layers, teacher_contract *c);
// teacher_train_outputs: the outputs a training job's teacher produces from target m (its config
// read, m->be set). -1 with error_set.
int teacher_train_outputs(const config *cfg, const target_model *m, teacher_contract *tc, target_outputs *o);
// teacher_train_budget: with teacher.mem_budget set, m's weights (its stage's, when m has a layer
// range) and the work of a batch of T tokens must fit in it; sets o->vocab_tile to the tile of the
// work. -1 with error_set naming both keys (and the group size that would fit, when the weights
// alone do not).
int teacher_train_budget(const config *cfg, const target_model *m, target_outputs *o, int T);
// teacher_plan_print: the teacher's memory (weights + work for data.max_tokens_per_batch) from the
// target's config.json alone, printed by the first teacher (--plan); no weight is read.
int teacher_plan_print(const world *w, const config *cfg, backend *be);
