// eval.h: what --mode eval adds to a student's job (SPEC §6): the drafter to evaluate, loaded from
// eval.drafter, and the result, run.dir/eval.json and one line. The evaluation itself is the
// training loop's held-out evaluation (forward only, every anchor, the decode walk) over every
// sample of the data (eval_config_prepare, train_setup.h).
#pragma once
#include <stdint.h>

#include "common/core/config.h"
#include "common/data/identity.h"
#include "student/model/drafter.h"
#include "student/loss/loss_config.h"
#include "student/model/step.h"

// eval_load_drafter: eval.drafter/model.safetensors into d (its shape came from the same
// directory); a checkpoint is verified against its checksums first (checkpoint_verify); non-finite
// weights refused. -1 with error_set naming the file.
int eval_load_drafter(drafter *d, const config *cfg);
// eval_check_heldout: eval.drafter a checkpoint trained on this training set (its state.json's
// identity: the same samples and lengths) with another held-out split than this evaluation's
// recorded /heldout: -1 with error_set naming both (it would evaluate on samples it trained on).
int eval_check_heldout(const config *cfg, const run_identity *now);
// eval_write_result: run.dir/eval.json (written whole or not at all) with tau_decode and its steps
// first, then tokens, samples, loss, ce, kl, cap, acc per slot, tau_chain, tau_tree, anchors; and
// the terminal line. -1 with error_set.
int eval_write_result(const config *cfg, const step_stats *st, const loss_config *lc, int B, int64_t samples);
