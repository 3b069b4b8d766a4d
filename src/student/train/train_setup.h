// train_setup.h: what a training job reads before its first step, the same on every rank: the
// target's shape and its embedding (and lm_head) entries, the teachers' contract, the drafter's
// shape, and the batch plan over the usable samples; and the check of all of it that rank 0 runs
// once before the roles start.
#pragma once
#include "common/comm/world.h"
#include "common/core/config.h"
#include "common/data/batchplan.h"
#include "common/data/featreader.h"
#include "common/data/identity.h"
#include "common/data/safetensors.h"
#include "student/model/drafter_config.h"
#include "teacher/target_config.h"
#include "teacher/teacher_plan.h"

// train_drafter_config: the drafter's shape: from drafter.config (a DFlash config.json, or a
// drafter directory standing for its config.json; checked against the target: hidden size,
// vocabulary, target layers; a warning names the drafter.* shape keys it overrides) when set, else
// the target's shape and the drafter.* keys. -1 with error_set.
int train_drafter_config(const config *cfg, const target_config *tc, const teacher_contract *ct, drafter_config *dc);
// train_target_open: the target's config, the teachers' contract and the drafter's shape; td open
// on the target's weights with *e_emb (and *e_head unless tied) found. On success the caller
// closes td. -1 with error_set.
int train_target_open(const config *cfg, target_config *tc, teacher_contract *ct, drafter_config *dc, st_dir *td,
                      const st_entry **e_emb, const st_entry **e_head);
// train_data_plan: the batch plan over the usable samples of the training sets (live; their
// vocabulary checked against the target's) or of the offline feature directory (*fr then stays
// open for reading; NULL when live). The run's identity (identity.h: target, layer ids, convention,
// the usable samples' lengths) into *id when id is given; the identity the features recorded is
// compared with it (identity_check: a mismatch is refused naming both values). -1 with error_set.
int train_data_plan(const config *cfg, const target_config *tc, const teacher_contract *ct, batchplan *bp,
                    featreader **fr, run_identity *id);
// eval_config_prepare: --mode eval: cfg made to evaluate eval.drafter on every sample of the data:
// the drafter's shape and target layers from its config.json (an exported drafter; target.layer_ids
// defaults to the drafter's) or from the configuration its checkpoint was written with (state.json:
// shape, layers, block, loss), every sample held out, every held-out batch evaluated. Run on every
// rank before the roles start. -1 with error_set naming the directory.
int eval_config_prepare(config *cfg);
// train_check_roles: the role counts fit the job (a student; batches_per_step a multiple of the
// students; teachers unless data.features). -1 with error_set.
int train_check_roles(const world *w, const config *cfg);
// train_check_inputs: what every rank of a training job would find wrong with its inputs, checked
// once (on rank 0, before the roles start) so that a bad input is one error line, not one per
// rank: the role counts, the target (config, weights, embedding), the drafter's shape against it,
// and the training sets (opened and validated, vocabulary against the target's) or the offline
// features, down to a feasible batch plan. 0, or -1 with error_set.
int train_check_inputs(const world *w, const config *cfg);
