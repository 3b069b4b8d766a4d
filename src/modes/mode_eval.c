// mode_eval.c: `--mode eval`: the roles of train; eval.drafter evaluated on every sample of the
// data, forward only (run.dir/eval.json, tau_decode first; run.dir checked by the table's claim,
// taken by the first student: mode_train.c).
#include "modes/mode_train.h"
#include "student/train/train_setup.h"

const mode_def mode_eval = {
    .name = "eval",
    .what = "eval.drafter evaluated on every sample of the data (run.dir/eval.json); the roles of train",
    .roles = WORLD_RULE_JOB,
    .preflight = MODE_PF_TARGET | MODE_PF_DATA | MODE_PF_OUTPUT,
    .stops = 1,
    .inputs = mode_train_inputs,
    .outputs = mode_eval_outputs,   // run.dir, where it writes eval.json only
    .prepare = eval_config_prepare, // the drafter's shape, every sample held out
    .needs = mode_train_needs,
    .claim = mode_eval_claim,
    .check_inputs = mode_train_check_inputs,
    .plan = mode_train_plan,
    // (no report: an evaluation has no checkpoints to name)
    .run = mode_train_run,
};
