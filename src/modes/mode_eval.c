// mode_eval.c: `--mode eval`: the roles of train; eval.drafter evaluated on every sample of the
// data, forward only (run.dir/eval.json, tau_decode first; run.dir checked by the table's claim,
// taken by the first student: mode_train.c).
#include "common/core/error.h"
#include "modes/mode_train.h"
#include "student/train/train_setup.h"

// Before MPI starts: eval.drafter given, what a training job asks (run.dir), then cfg made to
// evaluate it (eval_config_prepare: the drafter's shape, every sample held out, cfg->eval_only).
static int eval_prepare(config *cfg) {
    if (!cfg->eval_drafter[0])
        return error_set("--mode eval needs eval.drafter: an exported drafter directory (config.json + model.safetensors) "
                         "or a checkpoint directory (run.dir/checkpoints/step-N)");
    if (mode_train_prepare(cfg)) return -1;
    return eval_config_prepare(cfg);
}

const mode_def mode_eval = {
    .name = "eval",
    .what = "eval.drafter evaluated on every sample of the data (run.dir/eval.json); the roles of train",
    .roles = WORLD_RULE_JOB,
    .preflight = &mode_train_preflight, // the roles, target, data and run.dir of train
    .stops = 1,
    .inputs = mode_train_inputs,
    .outputs = mode_eval_outputs,   // run.dir, where it writes eval.json only
    .prepare = eval_prepare, // eval.drafter, run.dir; the drafter's shape, every sample held out
    .needs = mode_train_needs,
    .claim = mode_eval_claim,
    .check_inputs = mode_train_check_inputs,
    .plan = mode_train_plan,
    // (no report: an evaluation has no checkpoints to name)
    .run = mode_train_run,
};
